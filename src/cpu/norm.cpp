// CPU reference: rms_norm, rms_norm_gated. f32 math, one token per task.
#include <cmath>
#include <vector>

#include "cpu/common.h"
#include "cpu/kernels.h"
#include "hybrid/ops/norm.h"

namespace hybrid::cpu {

namespace {

// out = x̂ · w  or  x̂ · (1 + w),  x̂ = h / sqrt(mean(h²) + eps),  h = x (+ residual)
void rms_norm_cpu(const RmsNorm& a, Context& ctx) {
  const int64_t T = a.x.size(0), D = a.x.size(1);
  const bool fused = a.residual.defined();
  parallel_for(T, ctx, [&](int64_t t) {
    std::vector<float> h(D);  // [D]
    double sum_sq = 0.0;
    for (int64_t d = 0; d < D; ++d) {
      float v = load_f32(a.x, t * a.x.stride(0) + d);
      if (fused) {
        v += load_f32(a.residual, t * a.residual.stride(0) + d);
        store_f32(a.residual_out, t * a.residual_out.stride(0) + d, v);
        v = load_f32(a.residual_out, t * a.residual_out.stride(0) + d);  // the stored (rounded) h
      }
      h[d] = v;
      sum_sq += static_cast<double>(v) * v;
    }
    const float inv_rms = 1.0f / std::sqrt(static_cast<float>(sum_sq / D) + a.eps);
    for (int64_t d = 0; d < D; ++d) {
      const float w = load_f32(a.weight, d);
      store_f32(a.out, t * a.out.stride(0) + d, h[d] * inv_rms * (a.zero_centered ? 1.0f + w : w));
    }
  });
}

// y = rmsnorm_g(x) · w · silu(z)  or  rmsnorm_g(x · silu(z)) · w, per group of group_size.
void rms_norm_gated_cpu(const RmsNormGated& a, Context& ctx) {
  const int64_t T = a.x.size(0), C = a.x.size(1), G = a.group_size;
  const bool shared_weight = a.weight.size(0) != C;  // [group_size]: one weight for every group
  parallel_for(T, ctx, [&](int64_t t) {
    std::vector<float> v(G), gate(G);
    for (int64_t g0 = 0; g0 < C; g0 += G) {
      double sum_sq = 0.0;
      for (int64_t i = 0; i < G; ++i) {
        gate[i] = silu(load_f32(a.z, t * a.z.stride(0) + g0 + i));
        v[i] = load_f32(a.x, t * a.x.stride(0) + g0 + i);
        if (!a.norm_before_gate) v[i] *= gate[i];
        sum_sq += static_cast<double>(v[i]) * v[i];
      }
      const float inv_rms = 1.0f / std::sqrt(static_cast<float>(sum_sq / G) + a.eps);
      for (int64_t i = 0; i < G; ++i) {
        const float w = load_f32(a.weight, shared_weight ? i : g0 + i);
        float y = v[i] * inv_rms * w;
        if (a.norm_before_gate) y *= gate[i];
        store_f32(a.out, t * a.out.stride(0) + g0 + i, y);
      }
    }
  });
}

}  // namespace

void register_norm(Registry& r) {
  r.add<RmsNorm>("rms_norm.cpu", DeviceType::cpu, 0, nullptr, rms_norm_cpu);
  r.add<RmsNormGated>("rms_norm_gated.cpu", DeviceType::cpu, 0, nullptr, rms_norm_gated_cpu);
}

}  // namespace hybrid::cpu
