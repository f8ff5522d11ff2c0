// Rotary position embedding (NeoX "rotate half" style, optionally partial).
#pragma once

#include "hybrid/core/context.h"
#include "hybrid/core/tensor.h"

namespace hybrid {

// RoPE over the first `rotary_dim` dims of every head of every token (seed 004's rope over n
// tokens; Qwen3-Next / Qwen3.5: head_dim 256, rotary_dim 64, theta 1e7). With half = rotary_dim/2,
// for i in [0, half) and p = positions[t]:
//   inv_freq[i] = fl32(1 / fl32(theta ^ fl32(2i / rotary_dim)))     (HF: 1 / base**(arange/dim))
//   angle       = fl32(fl32(p) · inv_freq[i])                         (HF: f32 position · inv_freq)
//   out[i]        = x[i] · cos(angle) − x[i + half] · sin(angle)
//   out[i + half] = x[i + half] · cos(angle) + x[i] · sin(angle)
//   out[d]        = x[d]  for d >= rotary_dim (pass-through)
// The angle is formed in f32 exactly as Hugging Face does (so long contexts rotate by the same,
// f32-rounded angle); cos and sin of that angle and the rotation are computed in f32.
// `out` may be `x` itself (in place: same data and strides). `x` may be a strided view, e.g. q
// read straight out of Qwen3-Next's packed [q_h | gate_h] projection (head stride 2·D).
struct Rope {
  static constexpr const char* op_name = "rope";
  Tensor x;                // [T, H, D] f32 | bf16 | f16; token and head strides free, D contiguous
  Tensor out;              // [T, H, D] f32 | bf16 | f16; may be x (in place)
  Tensor positions;        // [T] i32: the position of each token (any int32 value)
  int64_t rotary_dim = 0;  // even, in [2, D]
  float theta = 10000.0f;  // > 0 (rope_theta)
};
void rope(const Rope& args, Context& ctx);

}  // namespace hybrid
