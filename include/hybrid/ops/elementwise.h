// Elementwise ops of the block: residual add, the MLP activations (SwiGLU, relu²) and the sigmoid
// output gate of Qwen3-Next's gated attention.
//
// All tensors are [T, ...] with the last dimension contiguous; rows may be strided (views into
// packed projections). `out` may be one of the inputs itself (the same view: same data, dtype and
// strides: in place); any other overlap between `out` and an input is an error.
#pragma once

#include "hybrid/core/context.h"
#include "hybrid/core/tensor.h"

namespace hybrid {

// out = a + b  (seed 004's residual add over n tokens). Each tensor may have its own float dtype;
// the sum is formed in f32 and rounded once to out's dtype.
struct ResidualAdd {
  static constexpr const char* op_name = "residual_add";
  Tensor a;    // [T, D] f32 | bf16 | f16; rows may be strided, D contiguous
  Tensor b;    // [T, D] f32 | bf16 | f16
  Tensor out;  // [T, D] f32 | bf16 | f16; may be a or b (in place)
};
void residual_add(const ResidualAdd& args, Context& ctx);

// SwiGLU: out = silu(gate) · up,  silu(g) = g · sigmoid(g).
// Either one packed `gate_up` [T, 2·I] with gate = columns [0, I) and up = columns [I, 2·I)
// (HF's chunk(2, dim=-1) of a fused gate_up_proj, MLX's fused layout), or two tensors `gate` and
// `up` [T, I]; exactly one form is given. I is out's last dimension.
struct SiluMul {
  static constexpr const char* op_name = "silu_mul";
  Tensor gate_up;  // [T, 2·I] f32 | bf16 | f16, packed form; rows may be strided
  Tensor gate;     // [T, I] f32 | bf16 | f16, two-tensor form
  Tensor up;       // [T, I] f32 | bf16 | f16, two-tensor form
  Tensor out;      // [T, I] f32 | bf16 | f16; may be gate or up (not gate_up)
};
void silu_mul(const SiluMul& args, Context& ctx);

// Gated attention output (Qwen3-Next, Qwen3.5): out = x · sigmoid(gate).
// Rank 2 [T, C] or rank 3 [T, H, D] (all three the same rank and shape). The rank-3 form takes
// the gate straight out of the packed q projection, whose heads are stored [q_h | gate_h]: the
// gate is then [T, H, D] with strides [H·2·D, 2·D, 1].
struct SigmoidMul {
  static constexpr const char* op_name = "sigmoid_mul";
  Tensor x;     // [T, C] or [T, H, D] f32 | bf16 | f16; inner dim contiguous, others any stride
  Tensor gate;  // same shape as x, f32 | bf16 | f16
  Tensor out;   // same shape as x, f32 | bf16 | f16; may be x (in place)
};
void sigmoid_mul(const SigmoidMul& args, Context& ctx);

// Squared ReLU (Nemotron-H MLP): out = max(x, 0)².
struct Relu2 {
  static constexpr const char* op_name = "relu2";
  Tensor x;    // [T, D] f32 | bf16 | f16; rows may be strided
  Tensor out;  // [T, D] f32 | bf16 | f16; may be x (in place)
};
void relu2(const Relu2& args, Context& ctx);

}  // namespace hybrid
