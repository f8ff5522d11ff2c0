// CPU reference: residual_add, silu_mul, sigmoid_mul, relu2. f32 math, one row per task.
#include <algorithm>

#include "cpu/common.h"
#include "cpu/kernels.h"
#include "hybrid/ops/elementwise.h"

namespace hybrid::cpu {

namespace {

// Rows of a [T, D] or [T, H, D] view: every index but the last, row-major.
int64_t num_rows(const Tensor& t) {
  return t.rank() == 3 ? t.size(0) * t.size(1) : t.size(0);
}
// Element offset of the start of row r.
int64_t row_offset(const Tensor& t, int64_t r) {
  if (t.rank() == 3) return (r / t.size(1)) * t.stride(0) + (r % t.size(1)) * t.stride(1);
  return r * t.stride(0);
}

// out[t, d] = a[t, d] + b[t, d];  a, b, out [T, D]. Each element is read before it is written,
// so out may be a or b.
void residual_add_cpu(const ResidualAdd& a, Context& ctx) {
  const int64_t T = a.a.size(0), D = a.a.size(1);
  parallel_for(T, ctx, [&](int64_t t) {
    const int64_t oa = t * a.a.stride(0), ob = t * a.b.stride(0), oo = t * a.out.stride(0);
    for (int64_t d = 0; d < D; ++d)
      store_f32(a.out, oo + d, load_f32(a.a, oa + d) + load_f32(a.b, ob + d));
  });
}

// out[t, i] = silu(gate[t, i]) · up[t, i];  gate, up, out [T, I]; packed gate_up [T, 2·I] holds
// gate in columns [0, I) and up in [I, 2·I).
void silu_mul_cpu(const SiluMul& a, Context& ctx) {
  const int64_t T = a.out.size(0), I = a.out.size(1);
  const bool packed = a.gate_up.defined();
  const Tensor& g = packed ? a.gate_up : a.gate;  // gate columns start at 0 of each row
  const Tensor& u = packed ? a.gate_up : a.up;    // up columns start at up_col of each row
  const int64_t up_col = packed ? I : 0;
  parallel_for(T, ctx, [&](int64_t t) {
    const int64_t og = t * g.stride(0), ou = t * u.stride(0) + up_col, oo = t * a.out.stride(0);
    for (int64_t i = 0; i < I; ++i)
      store_f32(a.out, oo + i, silu(load_f32(g, og + i)) * load_f32(u, ou + i));
  });
}

// out[r, d] = x[r, d] · sigmoid(gate[r, d]);  rows r = t (rank 2) or (t, h) (rank 3).
void sigmoid_mul_cpu(const SigmoidMul& a, Context& ctx) {
  const int64_t rows = num_rows(a.x), D = a.x.size(-1);
  parallel_for(rows, ctx, [&](int64_t r) {
    const int64_t ox = row_offset(a.x, r), og = row_offset(a.gate, r), oo = row_offset(a.out, r);
    for (int64_t d = 0; d < D; ++d)
      store_f32(a.out, oo + d, load_f32(a.x, ox + d) * sigmoid(load_f32(a.gate, og + d)));
  });
}

// out[t, d] = max(x[t, d], 0)²;  x, out [T, D].
void relu2_cpu(const Relu2& a, Context& ctx) {
  const int64_t T = a.x.size(0), D = a.x.size(1);
  parallel_for(T, ctx, [&](int64_t t) {
    const int64_t ox = t * a.x.stride(0), oo = t * a.out.stride(0);
    for (int64_t d = 0; d < D; ++d) {
      const float r = std::max(load_f32(a.x, ox + d), 0.0f);
      store_f32(a.out, oo + d, r * r);
    }
  });
}

}  // namespace

void register_elementwise(Registry& r) {
  r.add<ResidualAdd>("residual_add.cpu", DeviceType::cpu, 0, nullptr, residual_add_cpu);
  r.add<SiluMul>("silu_mul.cpu", DeviceType::cpu, 0, nullptr, silu_mul_cpu);
  r.add<SigmoidMul>("sigmoid_mul.cpu", DeviceType::cpu, 0, nullptr, sigmoid_mul_cpu);
  r.add<Relu2>("relu2.cpu", DeviceType::cpu, 0, nullptr, relu2_cpu);
}

}  // namespace hybrid::cpu
