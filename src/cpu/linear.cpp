// CPU reference: linear. f32 math; the engine's CPU path too, so W is converted to f32 a block
// of output rows at a time and reused across tokens, in parallel over row blocks.
#include "hybrid/ops/linear.h"
#include "cpu/common.h"
#include "cpu/kernels.h"
#include "cpu/linear_impl.h"

namespace hybrid::cpu {

namespace {

// y[t, o] = Σ_i x[t, i] · W[o, i] (+ bias[o]);  x [T, in], W [out, in], y [T, out].
void linear_cpu(const Linear& a, Context& ctx) {
  const int64_t in = a.x.size(1), out = a.weight.size(0);
  linear_blocked(a.x, a.bias, a.y, out, ctx, [&](int64_t o0, int64_t n, float* dst) {
    for (int64_t r = 0; r < n; ++r)
      load_run_f32(a.weight, (o0 + r) * a.weight.stride(0), in, dst + r * in);
  });
}

}  // namespace

void register_linear(Registry& r) {
  r.add<Linear>("linear.cpu", DeviceType::cpu, 0, nullptr, linear_cpu);
}

}  // namespace hybrid::cpu
