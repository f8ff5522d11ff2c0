// Gated DeltaNet chunked prefill (FLA's chunk_gated_delta_rule forward, chunk 64, WY form).
#pragma once

#include <cstdint>
#include <optional>

#include "hybrid/core/context.h"
#include "hybrid/core/tensor.h"

namespace hybrid {

// The chunked prefill of Gated DeltaNet over a varlen batch. Per sequence n and value head hv
// (key head hk = hv / (Hv / Hk)), with state S ∈ R^{V×K} (V-first, as stored in the pool), it
// computes exactly the token-by-token recurrence
//   q_t, k_t ← q_t/sqrt(‖q_t‖² + 1e-6), k_t/sqrt(‖k_t‖² + 1e-6)   (only with use_qk_l2norm)
//   S ← e^{g_t} S;   u_t = β_t (v_t − S k_t);   S ← S + u_t k_tᵀ;   o_t = scale · S q_t
// but in chunks of C = 64 tokens (the last chunk of a sequence may be shorter), in three stages
// (seed 002's launcher; γ_i = Σ_{s≤i} g_s is the gate cumsum inside the chunk, S the entry state):
//   1. A = strictly-lower [β_i (k_i·k_j) e^{γ_i−γ_j}],  T = (I + A)^{-1},
//      W = T·diag(β e^γ)·K  [C, K],  U = T·diag(β)·V  [C, V]
//   2. spine, chunk after chunk: h[c] = S;  V_new = U − W Sᵀ  [C, V];
//      S ← e^{γ_C} S + V_newᵀ (K ⊙ e^{γ_C−γ})   (V-first: S[v][k] += Σ_i V_new[i][v] k_i[k]
//      e^{γ_C−γ_i})
//   3. O = scale·[ e^γ ⊙ (Q h[c]ᵀ) + tril(Q Kᵀ ⊙ e^{γ_i−γ_j}) V_new ]   (tril includes the
//   diagonal)
//
// State pool. Sequence n reads and writes pool row state_slots[n]. It starts from that row when
// has_initial_state is left out or has_initial_state[n] != 0, else from zeros; its final state
// (after its last token) is written back to the row in f32 math, rounded to the pool's dtype.
// A negative slot marks a padding sequence: its output rows (and checkpoint rows) are written
// with zeros and the pool is not touched. Slots of the non-padding sequences must be distinct.
//
// Checkpoints (prefix caching). With checkpoint_every = N > 0 (a multiple of 64), the state after
// tokens N, 2N, ... of each sequence (counted from the start of the sequence in this call) is
// written to `checkpoints`: sequence n owns floor(len_n / N) consecutive rows starting at row
//   gdn_chunk_checkpoint_offset(cu_seqlens, n, N) = Σ_{m<n} floor(len_m / N)
// in order (row j of the sequence holds the state after (j+1)·N tokens). A sequence whose length
// is a multiple of N thus also gets a checkpoint equal to its final state. Padding sequences own
// their rows too (written with zeros), so offsets depend on cu_seqlens alone. The kernels compute
// the offsets themselves from cu_seqlens; callers size `checkpoints` with
// gdn_chunk_checkpoint_offset(cu_seqlens, N_seqs, N) rows (or more: extra rows are not written).
struct GdnChunkPrefill {
  static constexpr const char* op_name = "gdn_chunk_prefill";
  Tensor q;     // [T, Hk, K] f32 | bf16; K contiguous, rows/heads may be strided (packed conv out)
  Tensor k;     // [T, Hk, K] same dtype as q; K contiguous, rows/heads may be strided
  Tensor v;     // [T, Hv, V] same dtype as q; V contiguous, rows/heads may be strided
  Tensor g;     // [T, Hv] f32, log-space decay (<= 0); Hv contiguous, rows may be strided
  Tensor beta;  // [T, Hv] f32, write strength in (0, 1); Hv contiguous, rows may be strided
  Tensor cu_seqlens;         // [N + 1] i32: cu[0] = 0, non-decreasing, cu[N] = T (sequence n is
                             // tokens [cu[n], cu[n+1]); a sequence may have any length, even 0)
  Tensor state_slots;        // [N] i32: pool row of each sequence; negative = padding sequence
  Tensor has_initial_state;  // optional [N] i32: 0 = start from zeros, else from the pool row
                             // (left out: every sequence starts from its pool row)
  Tensor state;        // [slots, Hv, V, K] f32 | bf16, read and written in place; K contiguous
  Tensor out;          // [T, Hv, V] f32 | bf16; V contiguous, rows/heads may be strided
  Tensor checkpoints;  // optional [num_checkpoints, Hv, V, K] f32, K contiguous (see above)
  int64_t checkpoint_every = 0;  // N: tokens between checkpoints, a multiple of 64; 0 = none
  std::optional<float> scale;    // output scale; default 1/sqrt(K)
  bool use_qk_l2norm = false;    // L2-normalise q and k rows inside (eps 1e-6), as Qwen3-Next
};
void gdn_chunk_prefill(const GdnChunkPrefill& args, Context& ctx);

// The chunk size of the WY algorithm (FLA's BT); checkpoint_every must be a multiple of it.
inline constexpr int64_t kGdnChunkSize = 64;

// First checkpoint row of sequence n: Σ_{m<n} floor((cu[m+1] − cu[m]) / every). With n = N (the
// number of sequences) it is the number of rows `checkpoints` needs. cu_seqlens is host memory.
inline int64_t gdn_chunk_checkpoint_offset(const int32_t* cu_seqlens, int64_t n, int64_t every) {
  int64_t rows = 0;
  for (int64_t m = 0; m < n; ++m) rows += (cu_seqlens[m + 1] - cu_seqlens[m]) / every;
  return rows;
}

}  // namespace hybrid
