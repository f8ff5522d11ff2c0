// CPU reference: quantize, dequantize, linear_q (MLX affine format, 4 and 8 bits). f32 math.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "cpu/common.h"
#include "cpu/kernels.h"
#include "cpu/linear_impl.h"
#include "hybrid/ops/quant.h"

namespace hybrid::cpu {

namespace {

// Per group of group_size inputs of a row (MLX's CPU kernel, f32; n = 2^bits - 1):
//   lo, hi = min, max;  s = max((hi - lo) / n, 1e-7), negated unless |lo| > |hi|
//   edge = |lo| > |hi| ? lo : hi;  q0 = rint(edge / s);  q0 != 0: s = edge / q0, b = edge; else b =
//   0 q[j] = clamp(rint((w[j] - b) / s), 0, n)
// w [out, in] -> weight [out, in·bits/32] u32, scales / biases [out, in/group_size].
void quantize_cpu(const Quantize& a, Context& ctx) {
  const QuantizedWeight& q = a.q;
  const int64_t rows = a.w.size(0), in = a.w.size(1), words = in * q.bits / 32;
  const int64_t gs = q.group_size;
  const float n_bins = static_cast<float>((1 << q.bits) - 1);
  parallel_for(rows, ctx, [&](int64_t r) {
    uint32_t* packed = q.weight.data_as<uint32_t>() + r * q.weight.stride(0);  // [words]
    std::fill(packed, packed + words, 0u);
    std::vector<float> v(static_cast<size_t>(gs));  // one group of the row
    for (int64_t g = 0; g < in / gs; ++g) {
      float lo = std::numeric_limits<float>::infinity(), hi = -lo;
      for (int64_t k = 0; k < gs; ++k) {
        v[k] = load_f32(a.w, r * a.w.stride(0) + g * gs + k);
        lo = std::min(lo, v[k]);
        hi = std::max(hi, v[k]);
      }
      const bool lo_edge = std::fabs(lo) > std::fabs(hi);
      float s = std::max((hi - lo) / n_bins, 1e-7f);
      if (!lo_edge) s = -s;
      const float edge = lo_edge ? lo : hi;
      const float q0 = std::rint(edge / s);
      float b = 0.0f;
      if (q0 != 0.0f) {
        s = edge / q0;
        b = edge;
      }
      for (int64_t k = 0; k < gs; ++k) {
        const float code = std::min(std::max(std::rint((v[k] - b) / s), 0.0f), n_bins);
        const int64_t bit = (g * gs + k) * q.bits;
        packed[bit / 32] |= static_cast<uint32_t>(code) << (bit % 32);
      }
      store_f32(q.scales, r * q.scales.stride(0) + g, s);
      store_f32(q.biases, r * q.biases.stride(0) + g, b);
    }
  });
}

// w[r, j] = scales[r, j / group] · q[r, j] + biases[r, j / group];  w [out, in].
void dequantize_cpu(const Dequantize& a, Context& ctx) {
  const int64_t rows = a.w.size(0), in = a.w.size(1);
  parallel_for(rows, ctx, [&](int64_t r) {
    std::vector<float> row(static_cast<size_t>(in));
    dequantize_row(a.q, r, in, row.data());
    for (int64_t j = 0; j < in; ++j) store_f32(a.w, r * a.w.stride(0) + j, row[j]);
  });
}

// y[t, o] = Σ_i x[t, i] · (scales[o, i/g] · q[o, i] + biases[o, i/g]) (+ bias[o]);
// x [T, in], y [T, out]; W dequantized 16 rows at a time.
void linear_q_cpu(const LinearQ& a, Context& ctx) {
  const int64_t in = a.x.size(1), out = a.y.size(1);
  linear_blocked(a.x, a.bias, a.y, out, ctx, [&](int64_t o0, int64_t n, float* dst) {
    for (int64_t r = 0; r < n; ++r) dequantize_row(a.w, o0 + r, in, dst + r * in);
  });
}

}  // namespace

void register_quant(Registry& r) {
  r.add<Quantize>("quantize.cpu", DeviceType::cpu, 0, nullptr, quantize_cpu);
  r.add<Dequantize>("dequantize.cpu", DeviceType::cpu, 0, nullptr, dequantize_cpu);
  r.add<LinearQ>("linear_q.cpu", DeviceType::cpu, 0, nullptr, linear_q_cpu);
}

}  // namespace hybrid::cpu
