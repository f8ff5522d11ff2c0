// Mamba-2 selective state space (SSD) ops: the decode step, step-record / replay for
// speculative-decode rollback (seed 001), and the chunked SSD prefill scan.
//
// Shared math, per token t of a sequence and head h (group g = h / (H / G)), all in f32:
//   dt' = dt[t,h] (+ dt_bias[h])                       dt_bias optional
//   dt' = softplus(dt')                                 when dt_softplus
//   dt' = clamp(dt', dt_min, dt_max)                    dt_limit; default (-inf, +inf) = no clamp
//   A   = -exp(A_log[h]),   dA = exp(dt' · A)
//   S[h,p,n] ← dA · S[h,p,n] + dt' · x[t,h,p] · B[t,g,n]
//   y[t,h,p] = Σ_n S[h,p,n] · C[t,g,n]  (+ D[h] · x[t,h,p])          D optional
//   y[t,h,p] ← y[t,h,p] · silu(z[t,h,p])                               z optional
// This is mamba_ssm's selective_state_update (and the recurrence mamba_chunk_scan_combined
// computes in chunks). Mamba2 / Nemotron-H run it with dt_softplus = true, dt_bias and D given,
// z = none (the gate moves into the gated RMSNorm) and dt_limit = config.time_step_limit.
// Unlike mamba_ssm's decode kernel, every op here applies dt_limit (HF's torch path does).
//
// Layouts: x, z, y [T, H, P]; dt [T, H]; A_log, D, dt_bias [H]; B, C [T, G, N];
// state pool [slots, H, P, N] (N contiguous), f32 or bf16 (math in f32, rounded when stored).
// Every tensor needs its last dimension contiguous; the other strides are free (x, z, B, C, dt
// are read straight out of the packed in_proj / conv outputs). Activations f32 | bf16 | f16.
// Varlen ops pack the tokens of several sequences on the T axis with cu_seqlens (i32 [seqs+1],
// cu[0] = 0, non-decreasing, cu[seqs] = T); sequence i's state is pool slot state_slots[i]
// (i32 [seqs]); a negative slot is a padding sequence: it is skipped, the pool is untouched and
// its outputs are written as documented per op. Non-negative slots must be distinct and < slots.
// Values in cu_seqlens / state_slots / num_steps are range-checked when they are on the CPU.
#pragma once

#include <limits>

#include "hybrid/core/context.h"
#include "hybrid/core/tensor.h"

namespace hybrid {

// One decode token per sequence: the state of sequence b (pool slot state_slots[b]) advances by
// one step in place and y[b] is written. A padding sequence (slot < 0) gets y[b] = 0.
struct SsmStep {
  static constexpr const char* op_name = "ssm_step";
  Tensor x;                  // [batch, H, P] f32 | bf16 | f16 (one token per sequence)
  Tensor dt;                 // [batch, H] f32 | bf16 | f16, raw (before dt_bias / softplus)
  Tensor A_log;              // [H] f32 | bf16; A = -exp(A_log)
  Tensor B;                  // [batch, G, N] f32 | bf16 | f16; H % G == 0
  Tensor C;                  // [batch, G, N] f32 | bf16 | f16
  Tensor D;                  // optional [H] f32 | bf16: skip connection y += D · x
  Tensor dt_bias;            // optional [H] f32 | bf16
  Tensor z;                  // optional [batch, H, P] f32 | bf16 | f16: gate y ← y · silu(z)
  Tensor state;              // [slots, H, P, N] f32 | bf16, updated in place
  Tensor state_slots;        // [batch] i32: pool slot of each sequence; < 0 = padding
  Tensor y;                  // [batch, H, P] f32 | bf16 | f16 (output)
  bool dt_softplus = false;  // mamba_ssm's default; the Mamba2 / Nemotron-H layers pass true
  float dt_min = -std::numeric_limits<float>::infinity();  // dt_limit = (dt_min, dt_max)
  float dt_max = std::numeric_limits<float>::infinity();
};
void ssm_step(const SsmStep& args, Context& ctx);

// Seed 001's ssm_step_record: runs every sequence's tokens one step at a time from its pool state
// (read only: the pool keeps the snapshot to roll back to) and records, per token, the decay and
// the state increment of that step (the "tape"):
//   dA_log[t,h]        = dA                      (the seed stores this scalar N times; here once)
//   dBx_log[t,h,p,n]   = dt' · x[t,h,p] · B[t,g,n]
// so that S_t = dA_log[t,h] · S_{t-1} + dBx_log[t]. With a mask, a step with mask[t] == 0 is the
// identity: dt' = 0, dA = 1, dBx = 0 (y is still computed, from the unchanged state). y is the
// same as ssm_step's. The state advances in f32 from the unrounded dA / dBx (as in the seed).
// Padding sequences: y = 0, dA_log = 1, dBx_log = 0 (identity entries), state_out = 0.
// Tape size per token and layer: H · (sizeof(dA_log) + P · N · sizeof(dBx_log)) bytes, e.g.
// Mamba2-2.7B 2.5 MiB (f32) / 1.25 MiB (bf16), Nemotron-H-8B 4 MiB / 2 MiB: dBx_log costs one
// state per step (docs/ops/ssm.md).
struct SsmStepRecord {
  static constexpr const char* op_name = "ssm_step_record";
  Tensor x;            // [T, H, P] f32 | bf16 | f16
  Tensor dt;           // [T, H] f32 | bf16 | f16, raw
  Tensor A_log;        // [H] f32 | bf16
  Tensor B;            // [T, G, N] f32 | bf16 | f16
  Tensor C;            // [T, G, N] f32 | bf16 | f16
  Tensor D;            // optional [H] f32 | bf16
  Tensor dt_bias;      // optional [H] f32 | bf16
  Tensor z;            // optional [T, H, P] f32 | bf16 | f16
  Tensor mask;         // optional [T] u8 | i32 | u32: 0 = identity step, else a real step
  Tensor cu_seqlens;   // [seqs + 1] i32
  Tensor state_slots;  // [seqs] i32
  Tensor state;        // [slots, H, P, N] f32 | bf16: the snapshots (read, not written)
  Tensor y;            // [T, H, P] f32 | bf16 | f16 (output)
  Tensor dA_log;       // [T, H] f32 | bf16 (output)
  Tensor dBx_log;      // [T, H, P, N] f32 | bf16 (output)
  Tensor state_out;    // optional [seqs, H, P, N] f32 | bf16: state after each sequence's last step
  bool dt_softplus = false;
  float dt_min = -std::numeric_limits<float>::infinity();
  float dt_max = std::numeric_limits<float>::infinity();
};
void ssm_step_record(const SsmStepRecord& args, Context& ctx);

// Seed 001's ssm_replay: folds the first k = num_steps[i] tape entries of sequence i onto its
// pool state (the snapshot ssm_step_record started from), in place:
//   for t in the sequence's first k tokens with mask[t] != 0:  S ← dA_log[t,h] · S + dBx_log[t]
// Masked entries are skipped (they were recorded as identities; the guard keeps a stale entry
// from perturbing the state, as in the seed). k = 0 leaves the state as it is; k = len gives the
// state after every step. Padding sequences are skipped.
struct SsmReplay {
  static constexpr const char* op_name = "ssm_replay";
  Tensor dA_log;       // [T, H] f32 | bf16, from ssm_step_record
  Tensor dBx_log;      // [T, H, P, N] f32 | bf16, from ssm_step_record
  Tensor mask;         // optional [T] u8 | i32 | u32, as recorded
  Tensor cu_seqlens;   // [seqs + 1] i32, as recorded
  Tensor state_slots;  // [seqs] i32
  Tensor num_steps;    // [seqs] i32: k for each sequence, 0 <= k <= its length
  Tensor state;        // [slots, H, P, N] f32 | bf16: snapshot in, state after k steps out
};
void ssm_replay(const SsmReplay& args, Context& ctx);

// Chunked SSD prefill (mamba_chunk_scan_combined with per-sequence initial states). Each sequence
// is cut into chunks of Q = chunk_size tokens starting at its own first token (chunks never
// straddle sequences; the last one may be shorter). Within a chunk, with cs_i = Σ_{t≤i} dt'_t·A:
//   y_i       = exp(cs_i) · (C_i · S_enter)                                   inter-chunk
//             + Σ_{j≤i} (C_i · B_j) · exp(cs_i - cs_j) · dt'_j · x_j          intra-chunk
//             (+ D · x_i), then · silu(z_i)
//   S_next    = exp(cs_last) · S_enter + Σ_j exp(cs_last - cs_j) · dt'_j · x_j ⊗ B_j
// which equals the token-by-token recurrence of ssm_step.
// Initial state: sequence i starts from its pool slot when has_initial_state[i] != 0, from zeros
// when it is 0 or when has_initial_state is not given (mamba_ssm's initial_states = None). The
// final state is written to the pool slot (rounded to the pool dtype).
// chunk_states (optional): the state after every chunk, for prefix caching. Sequence i owns rows
// [off_i, off_i + nc_i) with nc_i = ceil(len_i / Q) and off_i = Σ_{j<i} nc_j; row off_i + c holds
// the state after the first min((c + 1) · Q, len_i) tokens (so the last row of a sequence is its
// final state). size(0) = Σ_i nc_i (checked when cu_seqlens is on the CPU).
// Padding sequences: y = 0 for their tokens, their chunk_states rows = 0, pool untouched.
struct SsmChunkScan {
  static constexpr const char* op_name = "ssm_chunk_scan";
  Tensor x;                  // [T, H, P] f32 | bf16 | f16
  Tensor dt;                 // [T, H] f32 | bf16 | f16, raw
  Tensor A_log;              // [H] f32 | bf16
  Tensor B;                  // [T, G, N] f32 | bf16 | f16
  Tensor C;                  // [T, G, N] f32 | bf16 | f16
  Tensor D;                  // optional [H] f32 | bf16
  Tensor dt_bias;            // optional [H] f32 | bf16
  Tensor z;                  // optional [T, H, P] f32 | bf16 | f16
  Tensor cu_seqlens;         // [seqs + 1] i32
  Tensor state_slots;        // [seqs] i32
  Tensor has_initial_state;  // optional [seqs] u8 | i32: != 0 = start from the pool state
  Tensor state;              // [slots, H, P, N] f32 | bf16: initial states in, final states out
  Tensor y;                  // [T, H, P] f32 | bf16 | f16 (output)
  Tensor chunk_states;       // optional [num_chunks, H, P, N] f32 | bf16 (output, see above)
  int64_t chunk_size = 256;  // Q: 64, 128 or 256 (Mamba2: 256, Nemotron-H: 128)
  bool dt_softplus = false;
  float dt_min = -std::numeric_limits<float>::infinity();
  float dt_max = std::numeric_limits<float>::infinity();
};
void ssm_chunk_scan(const SsmChunkScan& args, Context& ctx);

}  // namespace hybrid
