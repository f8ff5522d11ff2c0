// Shared by the CUDA gdn_chunk kernels (src/cuda/gdn_chunk.cu, general f32; gdn_chunk_tc.cu,
// tensor cores): the parameters, the workspace plan and the varlen chunk index.
#pragma once

#include <cstdint>

#include "cuda/common.cuh"
#include "hybrid/core/context.h"
#include "hybrid/ops/gdn_chunk.h"

namespace hybrid::cuda::gdn_chunk {

constexpr int kC = 64;  // chunk length (kGdnChunkSize)

struct Params {
  // Token inputs, element strides (inner dimension contiguous).
  const void* q = nullptr;  // [T, Hk, K]
  int64_t q_t = 0, q_h = 0;
  const void* k = nullptr;  // [T, Hk, K]
  int64_t k_t = 0, k_h = 0;
  const void* v = nullptr;  // [T, Hv, V]
  int64_t v_t = 0, v_h = 0;
  const float* g = nullptr;  // [T, Hv] f32
  int64_t g_t = 0;
  const float* beta = nullptr;  // [T, Hv] f32
  int64_t b_t = 0;
  const int* cu = nullptr;        // [N + 1]
  const int* slots = nullptr;     // [N]
  int64_t slots_s = 1;            // stride of state_slots
  const int* has_init = nullptr;  // [N] or null
  int64_t has_init_s = 1;
  void* state = nullptr;  // [slots, Hv, V, K]
  int64_t st_slot = 0, st_head = 0, st_row = 0;
  void* out = nullptr;  // [T, Hv, V]
  int64_t o_t = 0, o_h = 0;
  float* ckpt = nullptr;  // [rows, Hv, V, K] f32 or null
  int64_t ck_row = 0, ck_head = 0, ck_v = 0;
  int every = 0;  // checkpoint interval, 0 = none
  int N = 0, T = 0, Hk = 0, Hv = 0, K = 0, V = 0, ratio = 1;
  int max_chunks = 0;  // T/64 + N: a bound on Σ_n ceil(len_n / 64)
  int chunk_base = 0;  // global chunk of block x = 0 in the tensor-core stages 1 and 3 (a piece
                       // of the pipelined prefill, gdn_chunk_tc.cu; 0 otherwise)
  float scale = 1.0f;
  bool l2norm = false;
  // Workspace (written by the kernels, never read by the host).
  int* first_chunk = nullptr;  // [N + 1] global index of each sequence's first chunk
  int* first_ckpt = nullptr;   // [N]     first checkpoint row of each sequence
  float* gamma = nullptr;      // [T, Hv] gate cumsum inside each chunk
  float* rk = nullptr;         // [T, Hk] 1/‖k_t‖ (1 without l2norm)
  void* w = nullptr;           // [T, Hv, K] W (f32 general / bf16 tensor-core)
  void* u = nullptr;           // [T, Hv, V] U (f32 general / bf16 tensor-core)
  void* vnew = nullptr;        // [T, Hv, V] V_new
  void* h = nullptr;           // [max_chunks, Hv, V, K] entry state of each chunk
  void* kn = nullptr;          // [T, Hk, K] bf16 K̂ (tensor-core variant only)
  void* qn = nullptr;          // [T, Hk, K] bf16 Q̂ (fused-output variants, in p.extra)
  void* extra = nullptr;       // scratch of the caller's own (extra_bytes of plan_workspace)
  void* pt = nullptr;  // [max_chunks, Hv, 64, 64] bf16 P̃ (the warpgroup spine's fused output,
                       // in p.extra after Q̂)
};

// The (sequence, chunk) of global chunk c: the sequence n with first_chunk[n] <= c <
// first_chunk[n + 1] (binary search; c < first_chunk[N] is the caller's check).
__device__ __forceinline__ int chunk_sequence(const int* first_chunk, int N, int c) {
  int lo = 0, hi = N;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (first_chunk[mid] <= c)
      lo = mid;
    else
      hi = mid;
  }
  return lo;
}

// Fills first_chunk / first_ckpt from cu_seqlens on the device (one block).
void launch_chunk_index(const Params& p, Context& ctx);

// Stage 1 (W, U, γ, 1/‖k‖; f32 workspace) and stage 3 (output from f32 h and V_new) of the
// general variant, shared with the tensor-core spine variant (gdn_chunk.cu).
void launch_wu(const Params& p, DType in, Context& ctx);
void launch_output(const Params& p, DType in, DType out, Context& ctx);

// Fills the tensor fields of p from the op's arguments (no workspace).
Params make_params(const GdnChunkPrefill& a);

// Carves the workspace: sizes from T, N and the heads; element size of W/U/V_new/h given, and of
// K̂ [T, Hk, K] (0: no K̂ buffer, p.kn stays null), and extra_bytes more for p.extra.
void plan_workspace(Params& p, size_t wu_elem, size_t h_elem, Context& ctx, size_t kn_elem = 0,
                    size_t extra_bytes = 0);

}  // namespace hybrid::cuda::gdn_chunk
