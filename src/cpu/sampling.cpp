// CPU reference: argmax. One row per task.
#include <cmath>

#include "cpu/common.h"
#include "cpu/kernels.h"
#include "hybrid/ops/sampling.h"

namespace hybrid::cpu {

namespace {

// out[n] = first v of the row's maximum; -1 for a row with a NaN or +inf, or only -inf.
void argmax_cpu(const Argmax& a, Context& ctx) {
  const int64_t V = a.x.size(1);
  parallel_for(a.x.size(0), ctx, [&](int64_t n) {
    const int64_t row = n * a.x.stride(0);
    int64_t best = -1;
    float best_v = -INFINITY;
    bool bad = false;
    for (int64_t v = 0; v < V; ++v) {
      const float x = load_f32(a.x, row + v);
      if (std::isnan(x) || x == INFINITY) bad = true;
      if (x > best_v) best_v = x, best = v;
    }
    const int64_t id = bad || best < 0 ? -1 : best;
    a.out.data_as<int32_t>()[n * a.out.stride(0)] = static_cast<int32_t>(id);
  });
}

}  // namespace

void register_sampling(Registry& r) {
  r.add<Argmax>("argmax.cpu", DeviceType::cpu, 0, nullptr, argmax_cpu);
}

}  // namespace hybrid::cpu
