// Gated DeltaNet (GDN) token-by-token recurrence: gdn_recurrent, the fused prep forms of seed 000
// (gdn_prep_step, gdn_prep_chunk), the gates of the unfused layer (gdn_gates), and the
// speculative-decode rollback pair gdn_record / gdn_replay. The chunked prefill lives in
// gdn_chunk.h.
//
// The recurrence, per sequence n and value head hv (key head hk = hv / (Hv / Hk)), with the state
// S ∈ R^{V×K} stored V-first (row i = value channel i, K contiguous), all math in f32:
//   q̂_t = scale · L2(q_t),  k̂_t = L2(k_t)    (L2(x) = x / sqrt(Σx² + 1e-6) when use_qk_l2norm,
//                                               else the identity)
//   α_t = exp(g_t)                           (g_t ≤ 0, log-space decay)
//   S  ← α_t · S                             (decay first)
//   u_t = β_t · (v_t − S k̂_t)                (per value row i: u_i = β (v_i − S_i·k̂))
//   S  ← S + u_t k̂_tᵀ                        (rank-1 write)
//   o_t = S q̂_t                              (read after write: o_t includes token t)
//
// Varlen and the state pool (all ops): the tokens of N sequences are packed on the token axis,
// sequence n owning tokens [cu_seqlens[n], cu_seqlens[n+1]) (zero-length sequences allowed);
// its state lives in pool row state_slots[n] ([slots, Hv, V, K], f32 or bf16: loaded once into
// f32, stored once at the end in the pool dtype). Slots must be distinct (negative slots aside).
// A negative slot marks a padding sequence: its outputs (o, per-token states, tape, replayed
// state) are written as zeros and the pool is not touched. cu_seqlens, state_slots and the other
// integer tensors are int32; their values are range-checked when they live on the CPU.
#pragma once

#include <optional>

#include "hybrid/core/context.h"
#include "hybrid/core/tensor.h"

namespace hybrid {

// The gated delta rule above over packed sequences, state read from and written back to the pool
// in place. q, k, v may be strided views (rows of the packed conv output, seed 002's qk_stride /
// v_stride): every dimension may have any positive stride except the last, which is contiguous.
struct GdnRecurrent {
  static constexpr const char* op_name = "gdn_recurrent";
  Tensor q;            // [T, Hk, K] f32 | bf16 | f16
  Tensor k;            // [T, Hk, K] f32 | bf16 | f16
  Tensor v;            // [T, Hv, V] f32 | bf16 | f16; Hv a multiple of Hk
  Tensor g;            // [T, Hv] f32, log-space decay (α = exp(g))
  Tensor beta;         // [T, Hv] f32 | bf16 | f16, in (0, 1)
  Tensor state;        // [slots, Hv, V, K] f32 | bf16, the pool; read, then overwritten in place
  Tensor cu_seqlens;   // [N+1] i32: 0 = cu[0] <= cu[1] <= ... <= cu[N] = T
  Tensor state_slots;  // [N] i32: pool row of each sequence; < 0 = padding sequence
  // Optional [N] i32: 0 = sequence n starts from the zero state (a fresh prompt; the pool row is
  // not read, only written), nonzero = from its pool row. Undefined = every sequence reads its row.
  Tensor has_initial_state;
  Tensor out;  // [T, Hv, V] f32 | bf16 | f16: o_t
  // Optional [T, Hv, V, K] f32: the f32 state after each token (speculative-decode verification:
  // the state to resume from after accepting tokens up to t). Zeros for padding sequences.
  Tensor states_per_token;
  std::optional<float> scale;  // multiplies q̂; default 1/sqrt(K)
  bool use_qk_l2norm = false;  // L2-normalise q and k inside (eps 1e-6 on Σx²)
};
void gdn_recurrent(const GdnRecurrent& args, Context& ctx);

// Seed 000, fused: the GDN layer from the packed conv output to y, for T tokens of N sequences.
//   conv_out row t = [ q (Hk·K) | k (Hk·K) | v (Hv·V) ],  q_t,hk = conv_out[t, hk·K : (hk+1)·K],
//   ... q̂ = q · rsqrt(mean(q²) + eps) · q_norm_weight[hk]     (per-head RMSNorm, weight per
//   channel) k̂ = k · rsqrt(mean(k²) + eps) · k_norm_weight[hk] g = −exp(A_log[hv]) · softplus(a[t,
//   hv] + dt_bias[hv]),  β = sigmoid(b[t, hv]) then the recurrence above on (q̂, k̂, v, g, β) with
//   scale 1 and no L2 norm, state held in f32 across the whole T loop (one pool load and one store
//   per sequence).
// Exact relation: gdn_prep_chunk(a) == gdn_recurrent(q̂, k̂, v, g, β, same pool / cu_seqlens /
// state_slots / has_initial_state, scale = 1, use_qk_l2norm = false), with q̂, k̂, g, β computed
// in f32 as above. The seed expresses "L2 norm, then q · 1/sqrt(K)" as weights: RMSNorm(x) =
// sqrt(K) · x / sqrt(Σx² + K·eps), so q_norm_weight = 1/K (the seed's invKeyScale²) and
// k_norm_weight = 1/sqrt(K) (invKeyScale) give q̂ = L2(q)/sqrt(K), k̂ = L2(k), i.e. gdn_recurrent
// with use_qk_l2norm and the default scale, except that the L2 epsilon is K·eps; pass
// eps = 1e-6 / K to match HF / FLA (x / sqrt(Σx² + 1e-6)) exactly.
struct GdnPrepChunk {
  static constexpr const char* op_name = "gdn_prep_chunk";
  Tensor conv_out;           // [T, 2·Hk·K + Hv·V] f32 | bf16 | f16, rows may be strided
  Tensor a;                  // [T, Hv] f32 | bf16 | f16, raw (pre-softplus) dt input
  Tensor b;                  // [T, Hv] f32 | bf16 | f16, raw (pre-sigmoid) beta input
  Tensor A_log;              // [Hv] f32 | bf16
  Tensor dt_bias;            // [Hv] f32 | bf16
  Tensor q_norm_weight;      // [Hk, K] f32 | bf16 (the seed's flat [Hk·K])
  Tensor k_norm_weight;      // [Hk, K] f32 | bf16
  Tensor state;              // [slots, Hv, V, K] f32 | bf16, the pool, updated in place
  Tensor cu_seqlens;         // [N+1] i32, as gdn_recurrent
  Tensor state_slots;        // [N] i32, as gdn_recurrent
  Tensor has_initial_state;  // optional [N] i32, as gdn_recurrent
  Tensor y;                  // [T, Hv, V] f32 | bf16 | f16
  float eps = 1e-6f;         // RMSNorm epsilon (on the mean of squares)
};
void gdn_prep_chunk(const GdnPrepChunk& args, Context& ctx);

// Seed 000's decode form: one token for each of N sequences (token n belongs to sequence n).
// Exact relation: gdn_prep_step(a) == gdn_prep_chunk(a, cu_seqlens = [0, 1, ..., N]) with every
// sequence starting from its pool row.
struct GdnPrepStep {
  static constexpr const char* op_name = "gdn_prep_step";
  Tensor conv_out;       // [N, 2·Hk·K + Hv·V] f32 | bf16 | f16, rows may be strided
  Tensor a;              // [N, Hv] f32 | bf16 | f16
  Tensor b;              // [N, Hv] f32 | bf16 | f16
  Tensor A_log;          // [Hv] f32 | bf16
  Tensor dt_bias;        // [Hv] f32 | bf16
  Tensor q_norm_weight;  // [Hk, K] f32 | bf16
  Tensor k_norm_weight;  // [Hk, K] f32 | bf16
  Tensor state;          // [slots, Hv, V, K] f32 | bf16, the pool, updated in place
  Tensor state_slots;    // [N] i32; < 0 = padding (y row zero, pool untouched)
  Tensor y;              // [N, Hv, V] f32 | bf16 | f16
  float eps = 1e-6f;
};
void gdn_prep_step(const GdnPrepStep& args, Context& ctx);

// The gates of the unfused GDN layer (Qwen3NextGatedDeltaNet), per token t and value head hv:
//   g[t, hv]    = −exp(A_log[hv]) · softplus(a[t, hv] + dt_bias[hv])   (softplus: HF's F.softplus,
//                                                                      x itself above 20)
//   beta[t, hv] = sigmoid(b[t, hv])
// in f32, for gdn_chunk_prefill / gdn_recurrent (which take g and β ready-made). a and b are
// usually column ranges of one [T, 2·Hv] projection (rows strided).
struct GdnGates {
  static constexpr const char* op_name = "gdn_gates";
  Tensor a;        // [T, Hv] f32 | bf16 | f16, raw (pre-softplus) dt input; rows may be strided
  Tensor b;        // [T, Hv] f32 | bf16 | f16, raw (pre-sigmoid) beta input; rows may be strided
  Tensor A_log;    // [Hv] f32 | bf16
  Tensor dt_bias;  // [Hv] f32 | bf16
  Tensor g;        // [T, Hv] f32, log-space decay (<= 0); rows may be strided
  Tensor beta;     // [T, Hv] f32, in (0, 1); rows may be strided
};
void gdn_gates(const GdnGates& args, Context& ctx);

// Speculative-decode rollback. gdn_record runs T draft tokens exactly like gdn_recurrent (same
// outputs o_t) but leaves the pool untouched (the pool row stays the snapshot the draft started
// from) and writes a tape; gdn_replay then rebuilds the state after the first k_n tokens of each
// sequence from that snapshot without q, v, g, β or the projections.
//
// Tape, per token t (token-major like every GDN tensor, f32 so that replay repeats the
// recurrence's own f32 numbers):
//   tape_k     [T, Hk, K]  k̂_t (normalised key; one row per key head, shared by its value heads)
//   tape_u     [T, Hv, V]  u_t = β_t (v_t − α_t S_{t−1} k̂_t), the rank-1 write
//   tape_alpha [T, Hv]     α_t = exp(g_t)
// so that replay is S_t = α_t S_{t−1} + u_t k̂_tᵀ: a chain of rank-1 updates, no dependence on S
// beyond the chain, nothing to normalise. Bytes per token: 4·(Hk·K + Hv·V + Hv): Qwen3-Next
// (Hk 16, Hv 32, K = V = 128) 24,704 B = 1.2% of one 2 MiB f32 state; Qwen3.5-397B (Hv 64)
// 41,216 B. Per-token states (gdn_recurrent's states_per_token) would cost 4·Hv·V·K = 2 MiB.
struct GdnRecord {
  static constexpr const char* op_name = "gdn_record";
  Tensor q;                    // [T, Hk, K] f32 | bf16 | f16, last dim contiguous
  Tensor k;                    // [T, Hk, K] f32 | bf16 | f16
  Tensor v;                    // [T, Hv, V] f32 | bf16 | f16
  Tensor g;                    // [T, Hv] f32
  Tensor beta;                 // [T, Hv] f32 | bf16 | f16
  Tensor state;                // [slots, Hv, V, K] f32 | bf16, the pool: read only (the snapshot)
  Tensor cu_seqlens;           // [N+1] i32
  Tensor state_slots;          // [N] i32; < 0 = padding (out and tape rows zero)
  Tensor out;                  // [T, Hv, V] f32 | bf16 | f16
  Tensor tape_k;               // [T, Hk, K] f32
  Tensor tape_u;               // [T, Hv, V] f32
  Tensor tape_alpha;           // [T, Hv] f32
  std::optional<float> scale;  // default 1/sqrt(K)
  bool use_qk_l2norm = false;
};
void gdn_record(const GdnRecord& args, Context& ctx);

// S after k_n tokens of sequence n, from its snapshot (pool row state_slots[n]) and the tape that
// gdn_record wrote with the same cu_seqlens and state_slots. k_n = 0 gives the snapshot back;
// k_n = T_n equals gdn_recurrent's final state. Written into the pool row in place, or into
// state_out[n] when state_out is given (the pool then stays untouched).
struct GdnReplay {
  static constexpr const char* op_name = "gdn_replay";
  Tensor tape_k;       // [T, Hk, K] f32
  Tensor tape_u;       // [T, Hv, V] f32
  Tensor tape_alpha;   // [T, Hv] f32
  Tensor state;        // [slots, Hv, V, K] f32 | bf16, the pool
  Tensor cu_seqlens;   // [N+1] i32
  Tensor state_slots;  // [N] i32; < 0 = padding (state_out[n] zero, pool untouched)
  Tensor num_tokens;   // [N] i32: k_n in [0, cu[n+1] − cu[n]], the accepted tokens
  Tensor state_out;    // optional [N, Hv, V, K] f32 | bf16
};
void gdn_replay(const GdnReplay& args, Context& ctx);

}  // namespace hybrid
