// Mixture of experts: the router's top-k (moe_route) and the routed experts (moe_experts).
//
// A sparse MoE block (Qwen3-Next, Qwen3.5-MoE, Nemotron-H) is
//   logits = x · W_routerᵀ                     (a linear op, [T, E])
//   ids, weights = moe_route(logits)           (top-k experts per token and their weights)
//   out = moe_experts(x, ids, weights)         (Σ_j w_j · expert_{id_j}(x))
//   out += shared expert                       (moe_experts with E = 1 and accumulate, or linear
//   ops)
// See docs/ops/moe.md for the checkpoint layouts and the choices made.
#pragma once

#include <cstdint>

#include "hybrid/core/context.h"
#include "hybrid/core/tensor.h"
#include "hybrid/ops/quant.h"

namespace hybrid {

// How router logits become per-expert scores.
enum class MoeScore {
  softmax,  // s = softmax(logits) over all E experts, in f32 (Qwen3-Next, Qwen3.5-MoE)
  sigmoid,  // s = sigmoid(logits) per expert (Nemotron-H, DeepSeek-V3 style)
};

// Top-k routing, per token t:
//   s = softmax(l) or sigmoid(l)                       l = logits[t], f32 math
//   c = s + bias                                       (bias optional: selection only)
//   with n_group > 1: the experts form n_group contiguous groups of E / n_group; a group's score
//     is the sum of its two largest c; only the topk_group best groups stay eligible
//   ids    = the top_k eligible experts by c
//   w_j    = s[ids_j]                                  (the unbiased score)
//   renormalize: w_j /= Σ_j w_j (+1e-20 for sigmoid)   (norm_topk_prob)
//   w_j   *= scaling                                   (routed_scaling_factor)
// Outputs are ordered by descending weight; equal scores rank the lower expert id first (for
// selection and order). With softmax and no bias, selection compares the logits themselves
// (softmax is monotone), so it is exact: HF Qwen3-Next's softmax -> topk -> renormalise.
struct MoeRoute {
  static constexpr const char* op_name = "moe_route";
  Tensor logits;      // [T, E] f32 | bf16 | f16; rows may be strided, E contiguous
  Tensor bias;        // optional [E] f32 | bf16: e_score_correction_bias, added for selection only
  Tensor ids;         // [T, top_k] i32 out: expert ids in [0, E)
  Tensor weights;     // [T, top_k] f32 | bf16 | f16 out
  int64_t top_k = 0;  // 1 <= top_k <= E (num_experts_per_tok)
  MoeScore score = MoeScore::softmax;
  bool renormalize = false;  // norm_topk_prob
  int64_t n_group = 1;       // expert groups; divides E; groups of >= 2 experts when > 1
  int64_t topk_group = 1;    // groups kept, 1 <= topk_group <= n_group
  float scaling = 1.0f;      // routed_scaling_factor, > 0
  // The shared expert folded in as one more routed expert (SGLang's shared-experts fusion): ids
  // and weights are then [T, top_k + 1], and their last column holds id E (the shared expert,
  // stacked after the E routed ones in moe_experts' weights) with weight sigmoid(shared_gate[t])
  // (Qwen's shared_expert_gate), or 1 without a gate. The routed columns are as above.
  bool shared_expert = false;
  Tensor shared_gate;  // optional [T, 1] f32 | bf16 | f16, only with shared_expert; rows strided
};
void moe_route(const MoeRoute& args, Context& ctx);

// The expert MLP.
enum class MoeActivation {
  swiglu,  // y = down · (silu(gate · x) ⊙ (up · x)); gate_up = [gate; up] (Qwen3-Next, Qwen3.5)
  relu2,   // y = down · relu(up · x)²; gate_up holds only up (Nemotron-H's non-gated experts)
};

// Routed experts combined with their routing weights, per token t:
//   out[t] = Σ_{j<k} weights[t, j] · expert_{ids[t, j]}(x[t])      (+ out[t] with accumulate)
// swiglu expert e: h = silu(G_e x) ⊙ (U_e x),  G_e = gate_up[e, 0:I, :],  U_e = gate_up[e, I:2I, :]
// relu2 expert e:  h = relu(U_e x)²,           U_e = gate_up[e, 0:I, :]
//   expert_e(x) = down[e] · h
// An id may repeat (in a token or across tokens); each pair (t, j) contributes once. Every id
// must lie in [0, E) (checked when ids are on the CPU). `out` may be `x` itself.
struct MoeExperts {
  static constexpr const char* op_name = "moe_experts";
  Tensor x;        // [T, Dm] f32 | bf16 | f16; rows may be strided, Dm contiguous
  Tensor gate_up;  // swiglu: [E, 2·I, Dm], relu2: [E, I, Dm]; f32 | bf16 | f16, Dm contiguous
  Tensor down;     // [E, Dm, I] f32 | bf16 | f16, I contiguous
  Tensor ids;      // [T, k] i32 | i64, 1 <= k <= E
  Tensor weights;  // [T, k] f32 | bf16 | f16
  Tensor out;      // [T, Dm] f32 | bf16 | f16; rows may be strided
  MoeActivation activation = MoeActivation::swiglu;
  bool accumulate = false;  // out += Σ ... instead of out = Σ ... (adds the shared expert)
};
void moe_experts(const MoeExperts& args, Context& ctx);

// Expert weights W [E, rows, in] in MLX's affine 4- or 8-bit format, stacked over the experts (an
// MLX checkpoint's `switch_mlp.<proj>.weight`, `.scales`, `.biases`; gate_proj and up_proj
// concatenated along rows for swiglu, as moe_experts' gate_up): expert e's W[e] is the
// QuantizedWeight of weight[e], scales[e], biases[e] (quant.h: W[e, r, j] = scales[e, r, j/group]
// · q[e, r, j] + biases[e, r, j/group]).
struct QuantizedExperts {
  Tensor weight;        // [E, rows, in·bits/32] u32 packed codes, lowest bits first
  Tensor scales;        // [E, rows, in/group_size] f32 | bf16 | f16
  Tensor biases;        // [E, rows, in/group_size], same dtype as scales
  int bits = 4;         // 4 | 8
  int group_size = 64;  // 32 | 64 | 128

  // Expert e's weight as a QuantizedWeight view [rows, in].
  QuantizedWeight expert(int64_t e) const {
    return {weight.select(0, e), scales.select(0, e), biases.select(0, e), bits, group_size};
  }
};

// moe_experts with quantized experts (MLX 4-bit Qwen3-Next / Qwen3.5-MoE checkpoints): the same
// sum, each expert's rows dequantized as quant.h's Dequantize does (f32 s·q + b) and never stored
// whole. gate_up: W [E, 2·I, Dm] (swiglu) or [E, I, Dm] (relu2); down: W [E, Dm, I].
struct MoeExpertsQ {
  static constexpr const char* op_name = "moe_experts_q";
  Tensor x;                  // [T, Dm] f32 | bf16 | f16; rows may be strided, Dm contiguous
  QuantizedExperts gate_up;  // in = Dm (a multiple of gate_up.group_size)
  QuantizedExperts down;     // in = I (a multiple of down.group_size)
  Tensor ids;                // [T, k] i32 | i64, 1 <= k <= E
  Tensor weights;            // [T, k] f32 | bf16 | f16
  Tensor out;                // [T, Dm] f32 | bf16 | f16; rows may be strided
  MoeActivation activation = MoeActivation::swiglu;
  bool accumulate = false;
};
void moe_experts_q(const MoeExpertsQ& args, Context& ctx);

}  // namespace hybrid
