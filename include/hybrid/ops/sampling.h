// Token choice on the device: the greedy decode step's argmax, so that a step downloads N ids
// instead of N rows of logits (151936 f32 a row for Qwen3-Next: 608 KB through a pageable copy,
// then a host scan), and the top-k candidates of a sampled step (the host Sampler then draws
// from k values instead of the vocab).
#pragma once

#include "hybrid/core/context.h"
#include "hybrid/core/tensor.h"

namespace hybrid {

// out[n] = the lowest v with x[n, v] = max_v x[n, v], the greedy choice of Sampler (temperature
// 0, lowest id on ties). A row that Sampler refuses, one with a NaN or +inf or only -inf
// entries, gives out[n] = -1, so that the caller can name the row instead of picking a token.
struct Argmax {
  static constexpr const char* op_name = "argmax";
  Tensor x;    // [N, V] f32 | bf16 | f16 (logits); rows may be strided; 1 <= V < 2^31
  Tensor out;  // [N] i32
};
void argmax(const Argmax& args, Context& ctx);

// The k largest entries of each row, in Sampler's order: larger value first, the lower id first
// among equal values (so Sampler's top-k keeps exactly these ids). The order is total: -0 equals
// +0, and NaN ranks above +inf (so a NaN is never hidden from the caller, who refuses it as
// Sampler does). Rows with fewer than k finite entries fill with -inf ones (lowest ids first).
// Sampler on these k values in id order draws exactly what it draws on the whole row with
// top_k = k (no repetition penalty): top-k runs first in its chain, and the rest reads only the
// kept ids. ids [N, k] i32 and values [N, k] f32 come out in that order.
struct TopK {
  static constexpr const char* op_name = "top_k";
  Tensor x;       // [N, V] f32 | bf16 | f16 (logits); rows may be strided; 1 <= V < 2^31
  Tensor ids;     // [N, k] i32 out, 1 <= k <= V
  Tensor values;  // [N, k] f32 out: x at ids
};
void top_k(const TopK& args, Context& ctx);

// One draw a row from softmax(x / temperature) over the whole row, restricted by min-p: Sampler
// with temperature > 0 and no top-k, top-p or repetition penalty, the draw's uniform given.
//   w_v = exp((x_v − max x) / temperature)            (f64; the max has w = 1)
//   kept: w_v > 0 and w_v >= min_p                      (min_p = 0: every finite entry)
//   out[n] = the first kept v, in ascending v, whose cumulative Σ_{kept t <= v} w_t / Σ_kept w
//            exceeds u = draws[n] · 2^-53 (the last kept v if rounding leaves the sum under u)
// -1 marks a row Sampler refuses (a NaN or +inf, or only -inf). The sums run in another order than
// Sampler's (blocks, then their totals), so an id can differ from the host's only when u[n] lies
// within rounding of a boundary between two ids.
struct SampleRows {
  static constexpr const char* op_name = "sample_rows";
  Tensor x;                  // [N, V] f32 | bf16 | f16 (logits); rows may be strided
  Tensor draws;              // [N] i64 in [0, 2^53): each row's draw (Sampler::draw53)
  Tensor out;                // [N] i32
  float temperature = 1.0f;  // > 0
  float min_p = 0.0f;        // in [0, 1)
};
void sample_rows(const SampleRows& args, Context& ctx);

// The mass that top-p measures against: Sampler's weights summed over each row, in f64,
//   out[n] = Σ_v exp((x_v − max x) / temperature)      (the max has weight 1; -inf entries add 0)
// NaN marks a row Sampler refuses (a NaN or +inf, or only -inf). With the top_k op's candidates it
// decides a top-p step on the device's side of the copy (docs/ENGINE.md): the nucleus is the
// shortest most-probable prefix whose mass reaches top_p · out[n]. The sum runs in another order
// than Sampler's (blocks, then their totals): equal to it within rounding (~1e-15 relative).
struct SoftmaxMass {
  static constexpr const char* op_name = "softmax_mass";
  Tensor x;                  // [N, V] f32 | bf16 | f16 (logits); rows may be strided
  Tensor out;                // [N] f64
  float temperature = 1.0f;  // > 0
};
void softmax_mass(const SoftmaxMass& args, Context& ctx);

// Sampler's repetition penalty where the logits are, in place (HF RepetitionPenaltyLogitsProcessor,
// llama.cpp's penalties): for row n and each id of ids[n, 0:counts[n]],
//   x[n, id] = x[n, id] > 0 ? x[n, id] / penalty : x[n, id] · penalty
// The ids of a row must be distinct (each is penalised once, as Sampler does for a history with
// repeats: the caller passes the distinct set). With the penalty applied, argmax, top_k and
// sample_rows choose as Sampler does with that repetition_penalty.
struct RepetitionPenalty {
  static constexpr const char* op_name = "repetition_penalty";
  Tensor x;              // [N, V] f32 logits, updated in place; rows may be strided
  Tensor ids;            // [N, H] i32: row n's distinct ids in its first counts[n] entries
  Tensor counts;         // [N] i32 in [0, H]
  float penalty = 1.0f;  // > 0
};
void repetition_penalty(const RepetitionPenalty& args, Context& ctx);

}  // namespace hybrid
