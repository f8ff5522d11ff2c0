// The RoPE angle, shared by the rope op and the fused rope_kv_append_attn_decode so that the two
// agree bit for bit:
//   inv_freq[i] = fl32(1 / fl32(theta ^ fl32(2i / rotary_dim))), each power correctly rounded to
//                 f32 (via f64), as torch forms `1 / base ** (arange(0, dim, 2) / dim)`;
//   a = fl32(fl32(pos) · inv_freq[i])   (an f32 product, as HF);  cos a, sin a rounded to f32.
#pragma once

#include <cmath>
#include <cstdint>

namespace hybrid::cpu {

inline float rope_inv_freq(int64_t i, int64_t rotary_dim, float theta) {
  const float e = static_cast<float>(2 * i) / static_cast<float>(rotary_dim);
  return 1.0f / static_cast<float>(std::pow(static_cast<double>(theta), static_cast<double>(e)));
}

inline void rope_cos_sin(int64_t pos, float inv_freq, float& cos_a, float& sin_a) {
  const float angle = static_cast<float>(pos) * inv_freq;
  cos_a = static_cast<float>(std::cos(static_cast<double>(angle)));
  sin_a = static_cast<float>(std::sin(static_cast<double>(angle)));
}

}  // namespace hybrid::cpu
