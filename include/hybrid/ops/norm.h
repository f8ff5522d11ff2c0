// RMSNorm and its gated form.
#pragma once

#include "hybrid/core/context.h"
#include "hybrid/core/tensor.h"

namespace hybrid {

// RMSNorm over the last dimension, per token:
//   x̂ = h / sqrt(mean(h²) + eps),  h = x (+ residual)
//   plain:        out = x̂ · w
//   zero-centred: out = x̂ · (1 + w)          (Qwen3-Next, Qwen3.5: weights stored as w - 1)
// Fused residual form (seed 004's residual add + norm in one pass over n tokens): with `residual`
// given, h = x + residual is also written to `residual_out`, the stream the next block adds to.
// `out` may be `x` itself (in place); `residual_out` may be `residual`.
struct RmsNorm {
  static constexpr const char* op_name = "rms_norm";
  Tensor x;             // [T, D] f32 | bf16 | f16; rows may be strided, D contiguous
  Tensor weight;        // [D] f32 | bf16
  Tensor out;           // [T, D] f32 | bf16 | f16
  Tensor residual;      // optional [T, D], same dtype as x
  Tensor residual_out;  // [T, D], required with residual: h = x + residual
  float eps = 1e-6f;
  bool zero_centered = false;
};
void rms_norm(const RmsNorm& args, Context& ctx);

// Gated RMSNorm over groups of `group_size` channels (C = groups · group_size):
//   norm_before_gate:  y = rmsnorm_g(x) · w · silu(z)      (GDN output norm; one group = one head)
//   gate first:        y = rmsnorm_g(x · silu(z)) · w      (Mamba-2 / Nemotron-H, group = C / G)
// where rmsnorm_g normalises each group by its own root mean square. The weight is per channel
// ([C]) or shared by every group ([group_size], as GDN's per-head norm stores it).
struct RmsNormGated {
  static constexpr const char* op_name = "rms_norm_gated";
  Tensor x;                // [T, C] f32 | bf16 | f16; rows may be strided, C contiguous
  Tensor z;                // [T, C] gate, any float dtype
  Tensor weight;           // [C] or [group_size], f32 | bf16
  Tensor out;              // [T, C] f32 | bf16 | f16
  int64_t group_size = 0;  // divides C
  float eps = 1e-6f;
  bool norm_before_gate = true;
};
void rms_norm_gated(const RmsNormGated& args, Context& ctx);

}  // namespace hybrid
