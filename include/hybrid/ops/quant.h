// MLX affine group quantization (4 and 8 bits; groups of 32, 64 or 128 along the input dim):
// quantize, dequantize, and the quantized linear layer.
#pragma once

#include <cstdint>

#include "hybrid/core/context.h"
#include "hybrid/core/tensor.h"

namespace hybrid {

// A weight W [rows, in] stored as MLX stores it (mlx.core.quantize, mode "affine"; the
// `<name>.weight`, `<name>.scales`, `<name>.biases` tensors of an MLX checkpoint):
//   W[r, j] = scales[r, g] · q[r, j] + biases[r, g],   g = j / group_size,  q in [0, 2^bits)
// The codes of a row are packed into u32 words, lowest bits first: code j occupies bits
// [(j·bits) mod 32, +bits) of word (j·bits) / 32 (8 codes per word at 4 bits, 4 at 8 bits).
struct QuantizedWeight {
  Tensor weight;        // [rows, in·bits/32] u32 packed codes; rows may be strided
  Tensor scales;        // [rows, in/group_size] f32 | bf16 | f16; rows may be strided
  Tensor biases;        // [rows, in/group_size], same dtype as scales; rows may be strided
  int bits = 4;         // 4 | 8
  int group_size = 64;  // 32 | 64 | 128
};

// Quantizes a float W [out, in] into MLX's affine format, exactly as MLX's CPU kernel does
// (f32 math, per group of group_size inputs of one row, n = 2^bits - 1):
//   lo, hi = min, max of the group;  s = max((hi - lo) / n, 1e-7)
//   edge = lo and s = +s when |lo| > |hi|, else edge = hi and s = -s   (code 0 sits on the
//                                                                        larger-magnitude end)
//   q0 = rint(edge / s);  if q0 != 0: s = edge / q0, b = edge  else b = 0
//   q = clamp(rint((w - b) / s), 0, n)        (rint: round half to even)
// The codes use the f32 s and b; scales / biases store them rounded to their dtype (MLX stores
// them in W's dtype). A constant group gets q = 0, b = the constant; an all-zero group b = 0.
struct Quantize {
  static constexpr const char* op_name = "quantize";
  Tensor w;           // [out, in] f32 | bf16 | f16; rows may be strided
  QuantizedWeight q;  // output: weight [out, in·bits/32] u32, scales / biases [out, in/group]
};
void quantize(const Quantize& args, Context& ctx);

// W[r, j] = scales[r, g] · q[r, j] + biases[r, g] in f32, rounded to w's dtype.
struct Dequantize {
  static constexpr const char* op_name = "dequantize";
  QuantizedWeight q;  // weight [out, in·bits/32] u32, scales / biases [out, in/group]
  Tensor w;           // [out, in] f32 | bf16 | f16 output; rows may be strided
};
void dequantize(const Dequantize& args, Context& ctx);

// y = x · dequant(W)ᵀ (+ bias), f32 accumulation; W is dequantized a block of rows at a time,
// never as a whole.
struct LinearQ {
  static constexpr const char* op_name = "linear_q";
  Tensor x;           // [T, in] f32 | bf16 | f16; rows may be strided, in contiguous
  QuantizedWeight w;  // W [out, in]: weight [out, in·bits/32] u32, scales / biases [out, in/group]
  Tensor bias;        // optional [out] f32 | bf16 | f16
  Tensor y;           // [T, out] f32 | bf16 | f16; rows may be strided
};
void linear_q(const LinearQ& args, Context& ctx);

}  // namespace hybrid
