// Dense linear layer: y = x·Wᵀ (+ bias).
#pragma once

#include "hybrid/core/context.h"
#include "hybrid/core/tensor.h"

namespace hybrid {

// y[t, o] = Σ_i x[t, i] · W[o, i]  (+ bias[o]), accumulated in f32, rounded once to y's dtype.
// x, W and y may have strided rows (views into packed buffers); y must not overlap x, W or bias.
struct Linear {
  static constexpr const char* op_name = "linear";
  Tensor x;       // [T, in] f32 | bf16 | f16; rows may be strided, in contiguous
  Tensor weight;  // [out, in] f32 | bf16 | f16 (PyTorch / HF layout); rows may be strided
  Tensor bias;    // optional [out] f32 | bf16 | f16
  Tensor y;       // [T, out] f32 | bf16 | f16; rows may be strided, out contiguous
};
void linear(const Linear& args, Context& ctx);

}  // namespace hybrid
