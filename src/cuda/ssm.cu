// CUDA: the Mamba-2 SSM family's recurrent ops: ssm_step (decode) and ssm_step_record /
// ssm_replay (seed 001). ssm_chunk_scan (chunked SSD prefill) is in ssm_chunk.cu.
//
// Shared math (include/hybrid/ops/ssm.h), per token t and head h, g = h / (H / G):
//   dt' = clamp(softplus?(dt[t,h] + dt_bias[h]), dt_min, dt_max),  dA = exp(dt' · -exp(A_log[h]))
//   S[p,n] ← dA · S[p,n] + (dt' · x[t,h,p]) · B[t,g,n]
//   y[t,h,p] = (Σ_n S[p,n] · C[t,g,n] + D[h] · x[t,h,p]) · silu(z[t,h,p])
//
// ---- recurrent kernels (ssm_step, ssm_step_record, ssm_replay): ssm_rec_kernel ----
// Memory-bound on the pool: every state element is read once and written once per call (the state
// stays in f32 registers across the tokens of a sequence); the tape is written once per token
// (record) or read once per token (replay); the token tensors are a few KiB. Bytes per sequence
// at Mamba2-2.7B (H 80, P 64, N 128): 2 · 80·64·128 · 4 B = 5.24 MB f32, 2.62 MB bf16.
// Work split (decode v2): block = (slice of rows p, head h, sequence), 4 warps. A state row [N] is
// spread over LPR lanes (8; 4 at N = 32, 16 at N = 256), each owning NC = N / LPR columns as
// 16-byte chunks (4 f32 / 8 bf16) interleaved over the group's lanes, so one load instruction
// reads 128 contiguous bytes of a row; each thread holds 2 rows (a block: 32 rows at N = 128, so
// 2 blocks per head at P = 64: B = 1 at H 80 is 160 blocks). All state loads of a thread are
// issued before any arithmetic; y = S·C reduces over the group in log2(LPR) shuffle steps, the two
// rows interleaved. Other N (≤ 256) or unaligned rows: 32 lanes a row, interleaved scalar columns.
// Decode v3 (ssm_step.cuda_stream, ssm_stream_kernel): the same lane layout and arithmetic for
// ssm_step, the pool tiles streamed through shared memory by TMA bulk copies in a persistent grid.
//
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <type_traits>

#include "cuda/bulk_pipe.cuh"
#include "cuda/common.cuh"
#include "cuda/dtype.cuh"
#include "cuda/kernels.h"
#include "cuda/mma.cuh"
#include "cuda/ssm_common.cuh"
#include "cuda/state_tile.cuh"
#include "cuda/warp.cuh"
#include "hybrid/ops/ssm.h"

namespace hybrid::cuda {

namespace {

// ---- recurrent kernels -----------------------------------------------------------------------

constexpr int kWarps = 4;
constexpr int kRecThreads = kWarps * 32;
constexpr int kRowsPerThread = 2;

enum class Mode : int { step, record, replay };

struct RecParams {
  SsmIn in;
  // The pool [slots, H, P, N] (N contiguous), element type = the kernel's St.
  void* state = nullptr;
  int64_t st_slot = 0, st_h = 0, st_p = 0;
  const int* cu_seqlens = nullptr;  // [seqs + 1]; null = one token per sequence (ssm_step)
  const int* slots = nullptr;       // [seqs]
  const int* num_steps = nullptr;   // [seqs] (replay)
  const void* mask = nullptr;       // [T] u8 | i32 | u32, or null
  DType mask_dt = DType::u8;
  Arg dA_log;     // [T, H]        (record: written; replay: read)
  Arg dBx_log;    // [T, H, P, N]  (record: written; replay: read)
  Arg state_out;  // [seqs, H, P, N] (record, optional)
  int H = 0, P = 0, N = 0;
  bool xz_async = false;  // ssm_warp_kernel<.., true>: x, z of an item copied into its stage
  bool cs_store = true;   // v5: state write-back by st.global.cs (HYBRID_DECODE_V5_CS=0: plain)
};

// The lane ↔ column map of a row group: LPR lanes per row, NC columns per lane as NC / W chunks
// of W contiguous elements; chunk j of lane `sub` starts at column (j·LPR + sub)·W. VEC: N =
// LPR·NC exactly with 16-byte aligned rows, W = one 16-byte access (4 f32, 8 bf16; 8 bytes for
// bf16 at N = 32). Else W = 1 (interleaved columns j·LPR + sub, guarded by N).
template <int LPR, int NC, bool VEC, class St>
struct RecLayout {
  static constexpr int kVecElems = 16 / static_cast<int>(sizeof(St));
  static constexpr int W = !VEC ? 1 : (NC < kVecElems ? NC : kVecElems);
  static constexpr int kGroupRows = 32 / LPR;                         // rows a warp covers at once
  static constexpr int kRows = kWarps * kGroupRows * kRowsPerThread;  // rows per block
  static_assert(NC % W == 0 && 32 % LPR == 0, "bad row-group layout");
  __device__ static __forceinline__ int col(int sub, int c) {
    return ((c / W) * LPR + sub) * W + c % W;
  }
};

// The lane's NC elements of a pool row (zeros past N on the interleaved path).
template <int LPR, int NC, bool VEC, class St>
__device__ __forceinline__ void load_row(const St* row, int sub, int N, float (&r)[NC]) {
  using L = RecLayout<LPR, NC, VEC, St>;
  if constexpr (VEC) {
#pragma unroll
    for (int j = 0; j < NC / L::W; ++j) vload<L::W>(row + L::col(sub, j * L::W), r + j * L::W);
  } else {
#pragma unroll
    for (int c = 0; c < NC; ++c) {
      const int n = L::col(sub, c);
      r[c] = n < N ? to_f32(row[n]) : 0.0f;
    }
  }
}

template <int LPR, int NC, bool VEC, class St>
__device__ __forceinline__ void store_row(St* row, int sub, int N, const float (&r)[NC]) {
  using L = RecLayout<LPR, NC, VEC, St>;
  if constexpr (VEC) {
#pragma unroll
    for (int j = 0; j < NC / L::W; ++j) vstore<L::W>(row + L::col(sub, j * L::W), r + j * L::W);
  } else {
#pragma unroll
    for (int c = 0; c < NC; ++c) {
      const int n = L::col(sub, c);
      if (n < N) row[n] = from_f32<St>(r[c]);
    }
  }
}

// Row of a run-time-dtype [rows, H, P, N] tensor (tape, state_out), lane's columns.
template <int LPR, int NC, bool VEC, class St>
__device__ __forceinline__ void store_row_rt(const Arg& a, int64_t i, int h, int p, int sub, int N,
                                             const float (&r)[NC]) {
  using L = RecLayout<LPR, NC, VEC, St>;
  const int64_t base = i * a.s0 + h * a.s1 + p * a.s2;
#pragma unroll
  for (int c = 0; c < NC; ++c) {
    const int n = L::col(sub, c);
    if (VEC || n < N) store_any(const_cast<void*>(a.p), a.dt, base + n, r[c]);
  }
}

// One (P-slice, h, sequence): ssm_step (Mode::step), ssm_step_record, ssm_replay. St = pool
// element type. Thread rows: row0 + r·kGroupRows, r < kRowsPerThread; lane columns L::col(sub, c).
template <Mode mode, int LPR, int NC, bool VEC, class St>
__global__ void __launch_bounds__(kRecThreads) ssm_rec_kernel(const RecParams p) {
  using L = RecLayout<LPR, NC, VEC, St>;
  constexpr int R = kRowsPerThread;
  const int seq = blockIdx.z, h = blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, sub = lane % LPR;
  const int row0 = blockIdx.x * L::kRows + warp * (L::kGroupRows * R) + lane / LPR;
  const int P = p.P, N = p.N;
  const int bos = p.cu_seqlens ? p.cu_seqlens[seq] : seq;
  const int eos = p.cu_seqlens ? p.cu_seqlens[seq + 1] : seq + 1;
  const int slot = p.slots[seq];
  const SsmIn& in = p.in;
  const bool lead = sub == 0;  // writes the row's y
  bool valid[R];
#pragma unroll
  for (int r = 0; r < R; ++r) valid[r] = row0 + r * L::kGroupRows < P;

  if (slot < 0) {  // padding: y = 0, identity tape (dA = 1, dBx = 0), zero state_out
    if constexpr (mode != Mode::replay) {
      float zero[NC];
#pragma unroll
      for (int c = 0; c < NC; ++c) zero[c] = 0.0f;
      for (int t = bos; t < eos; ++t) {
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const int prow = row0 + r * L::kGroupRows;
          if (!valid[r]) continue;
          if (lead) in.store_y(t, h, prow, 0.0f);
          if constexpr (mode == Mode::record)
            store_row_rt<LPR, NC, VEC, St>(p.dBx_log, t, h, prow, sub, N, zero);
        }
        if constexpr (mode == Mode::record)
          if (blockIdx.x == 0 && threadIdx.x == 0)
            store_any(const_cast<void*>(p.dA_log.p), p.dA_log.dt, t * p.dA_log.s0 + h * p.dA_log.s1,
                      1.0f);
      }
      if constexpr (mode == Mode::record)
        if (p.state_out.p)
#pragma unroll
          for (int r = 0; r < R; ++r)
            if (valid[r])
              store_row_rt<LPR, NC, VEC, St>(p.state_out, seq, h, row0 + r * L::kGroupRows, sub, N,
                                             zero);
    }
    return;
  }

  if constexpr (mode == Mode::replay) {
    if (p.num_steps[seq] == 0) return;  // k = 0: the snapshot stays as it is
  }

  // The thread's R rows, all loads issued before any arithmetic.
  St* pool = static_cast<St*>(p.state) + slot * p.st_slot + h * p.st_h;
  float s[R][NC];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    if (valid[r]) {
      load_row<LPR, NC, VEC>(pool + (row0 + r * L::kGroupRows) * p.st_p, sub, N, s[r]);
    } else {
#pragma unroll
      for (int c = 0; c < NC; ++c) s[r][c] = 0.0f;
    }
  }

  if constexpr (mode == Mode::replay) {
    const int end = bos + p.num_steps[seq];
#pragma unroll 1
    for (int t = bos; t < end; ++t) {
      if (p.mask && !flag_at(p.mask, p.mask_dt, t)) continue;
      const float dA = load_any(p.dA_log.p, p.dA_log.dt, t * p.dA_log.s0 + h * p.dA_log.s1);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        if (!valid[r]) continue;
        const int64_t base =
            t * p.dBx_log.s0 + h * p.dBx_log.s1 + (row0 + r * L::kGroupRows) * p.dBx_log.s2;
#pragma unroll
        for (int c = 0; c < NC; ++c) {
          const int n = L::col(sub, c);
          if (VEC || n < N) s[r][c] = dA * s[r][c] + load_any(p.dBx_log.p, p.dBx_log.dt, base + n);
        }
      }
    }
  } else {
    const int g = in.group(h);
    const float A = in.A(h), D_h = in.D_skip(h);
    for (int t = bos; t < eos; ++t) {
      const bool active = !p.mask || flag_at(p.mask, p.mask_dt, t);
      const float dtp = active ? in.dt_eff(t, h) : 0.0f;
      const float dA = active ? expf(dtp * A) : 1.0f;
      float Bv[NC], Cv[NC];
      const int64_t b_base = t * in.B.s0 + g * in.B.s1, c_base = t * in.C.s0 + g * in.C.s1;
#pragma unroll
      for (int c = 0; c < NC; ++c) {
        const int n = L::col(sub, c);
        const bool in_n = VEC || n < N;
        Bv[c] = in_n ? load_any(in.B.p, in.B.dt, b_base + n) : 0.0f;
        Cv[c] = in_n ? load_any(in.C.p, in.C.dt, c_base + n) : 0.0f;
      }
      if constexpr (mode == Mode::record)
        if (blockIdx.x == 0 && threadIdx.x == 0)
          store_any(const_cast<void*>(p.dA_log.p), p.dA_log.dt, t * p.dA_log.s0 + h * p.dA_log.s1,
                    dA);
      float xv[R], acc[R];
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const int prow = row0 + r * L::kGroupRows;
        xv[r] = valid[r] ? in.x_at(t, h, prow) : 0.0f;
        const float dtx = dtp * xv[r];
        acc[r] = 0.0f;
#pragma unroll
        for (int c = 0; c < NC; ++c) {
          s[r][c] = dA * s[r][c] + dtx * Bv[c];
          acc[r] += s[r][c] * Cv[c];
        }
        if constexpr (mode == Mode::record) {
          if (valid[r]) {
            float dBx[NC];
#pragma unroll
            for (int c = 0; c < NC; ++c) dBx[c] = dtx * Bv[c];
            store_row_rt<LPR, NC, VEC, St>(p.dBx_log, t, h, prow, sub, N, dBx);
          }
        }
      }
      // y = S·C over the row group, the R rows' reductions interleaved.
#pragma unroll
      for (int o = LPR / 2; o > 0; o >>= 1)
#pragma unroll
        for (int r = 0; r < R; ++r) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], o);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const int prow = row0 + r * L::kGroupRows;
        if (valid[r] && lead) in.store_y(t, h, prow, in.finish(acc[r], D_h, xv[r], t, h, prow));
      }
    }
  }

  if constexpr (mode == Mode::record) {
    if (p.state_out.p)
#pragma unroll
      for (int r = 0; r < R; ++r)
        if (valid[r])
          store_row_rt<LPR, NC, VEC, St>(p.state_out, seq, h, row0 + r * L::kGroupRows, sub, N,
                                         s[r]);
  } else {  // step, replay: the pool row in place
#pragma unroll
    for (int r = 0; r < R; ++r)
      if (valid[r])
        store_row<LPR, NC, VEC>(pool + (row0 + r * L::kGroupRows) * p.st_p, sub, N, s[r]);
  }
}

// ---- v3: ssm_step with the pool streamed through shared memory (ssm_step.cuda_stream) ----------
//
// As gdn.cu's v3: a persistent grid whose block b takes the items b, b + gridDim.x, ... (item =
// (tile, h, sequence), tile = kRows consecutive rows p of the (slot, h) [P, N] block, contiguous in
// the pool: the row stride is N). One thread issues each tile's 1-D TMA bulk copy into one of
// kStages shared-memory stages (bulk_pipe.cuh) kStages items ahead; the block waits on the stage,
// reads its rows into registers (conflict-free: a row group reads 128 contiguous bytes), releases
// the stage with one barrier and issues the tile kStages items ahead, then updates the rows and
// writes them back with 16-byte stores. The item's token inputs (dt, B, C, x, z and the per-head
// parameters) are loaded before the wait, so their latency hides behind it; B and C go out as
// 16-byte loads under one dtype switch (v2: a dtype branch around every scalar). R = 2 rows a
// thread for f32 pools and 4 for bf16: 16 KiB tiles at N = 128 (32 / 64 rows); 4 stages = 64 KiB
// a block, 3 blocks per SM. Grids with fewer than 2 items per SM at R = 4 (bf16, B = 1) take R = 2.
constexpr int kStages = 4;

template <class St>
constexpr int kStreamRows = sizeof(St) == 2 ? 4 : 2;

template <int LPR, int R>
constexpr int kStreamTileRows = kWarps*(32 / LPR) * R;

// The lane's NC columns of row (i, j) of a [T, G, N] tensor whose rows are 16-byte aligned with
// unit column stride (stream_supports): vector chunks under one dtype switch.
template <int LPR, int NC, class St>
__device__ __forceinline__ void load_cols(const Arg& a, int64_t i, int j, int sub, float (&r)[NC]) {
  using L = RecLayout<LPR, NC, true, St>;
  auto chunks = [&](const auto* row) {
#pragma unroll
    for (int k = 0; k < NC / L::W; ++k) vload<L::W>(row + L::col(sub, k * L::W), r + k * L::W);
  };
  const int64_t base = i * a.s0 + j * a.s1;
  if (a.dt == DType::bf16)
    chunks(static_cast<const __nv_bfloat16*>(a.p) + base);
  else if (a.dt == DType::f16)
    chunks(static_cast<const __half*>(a.p) + base);
  else
    chunks(static_cast<const float*>(a.p) + base);
}

template <int LPR, int NC, int R, class St>
__global__ void __launch_bounds__(kRecThreads, 3)
    ssm_stream_kernel(const RecParams p, const int64_t items, const int tiles) {
  using L = RecLayout<LPR, NC, true, St>;
  constexpr int kGroupRows = 32 / LPR;
  constexpr int kRows = kStreamTileRows<LPR, R>;
  constexpr int kTile = kRows * LPR * NC;  // elements of a stage
  extern __shared__ __align__(128) unsigned char smem_raw[];
  St* stage_rows = reinterpret_cast<St*>(smem_raw);  // [kStages][kRows][N]
  __shared__ uint64_t full[kStages];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, sub = lane % LPR;
  const int first = warp * (kGroupRows * R) + lane / LPR;  // thread's rows: first + r·kGroupRows
  const bool lead = sub == 0;                              // writes the row's y
  const int P = p.P, N = p.N;
  const SsmIn& in = p.in;
  const int64_t stride = gridDim.x;
  St* const pool_base = static_cast<St*>(p.state);

  // One thread: arm the stage and copy the item's rows (0 bytes for a padding sequence).
  auto issue = [&](int64_t item, int slot, int stage) {
    const int tile = static_cast<int>(item % tiles);
    const int h = static_cast<int>(item / tiles % p.H);
    const int rows = min(kRows, P - tile * kRows);
    const uint32_t bytes = slot >= 0 ? static_cast<uint32_t>(rows * N * sizeof(St)) : 0u;
    mbar_arrive_expect_tx(&full[stage], bytes);
    if (bytes)
      bulk_g2s(stage_rows + stage * kTile,
               pool_base + slot * p.st_slot + h * p.st_h + int64_t(tile) * kRows * N, bytes,
               &full[stage]);
  };

  if (threadIdx.x == 0) {
#pragma unroll
    for (int s = 0; s < kStages; ++s) mbar_init(&full[s], 1);
    mbar_init_fence();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      const int64_t item = blockIdx.x + s * stride;
      if (item >= items) break;
      issue(item, p.slots[item / tiles / p.H], s);
    }
  }

  int i = 0;
#pragma unroll 1
  for (int64_t item = blockIdx.x; item < items; item += stride, ++i) {
    const int stage = i % kStages;
    const int tile = static_cast<int>(item % tiles);
    const int h = static_cast<int>(item / tiles % p.H);
    const int seq = static_cast<int>(item / tiles / p.H);
    const int64_t t = seq;  // one token per sequence
    const int slot = p.slots[seq];
    const int64_t ahead = item + kStages * stride;  // reuses this stage
    const int ahead_slot = threadIdx.x == 0 && ahead < items ? p.slots[ahead / tiles / p.H] : -1;
    const int row0 = tile * kRows + first;
    bool valid[R];
#pragma unroll
    for (int r = 0; r < R; ++r) valid[r] = row0 + r * kGroupRows < P;

    // The token's inputs, independent of the state: issued before the wait.
    float Bv[NC], Cv[NC], xv[R];
    float dtp = 0.0f, A = 0.0f, D_h = 0.0f;
    if (slot >= 0) {
      const int g = in.group(h);
      load_cols<LPR, NC, St>(in.B, t, g, sub, Bv);
      load_cols<LPR, NC, St>(in.C, t, g, sub, Cv);
#pragma unroll
      for (int r = 0; r < R; ++r) xv[r] = valid[r] ? in.x_at(t, h, row0 + r * kGroupRows) : 0.0f;
      dtp = in.dt_eff(t, h);
      A = in.A(h);
      D_h = in.D_skip(h);
    }

    mbar_wait(&full[stage], static_cast<uint32_t>(i / kStages) & 1u);
    float s[R][NC];
    const St* tile_rows = stage_rows + stage * kTile;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (slot >= 0 && valid[r]) {
        load_row<LPR, NC, true>(tile_rows + (first + r * kGroupRows) * N, sub, N, s[r]);
      } else {
#pragma unroll
        for (int c = 0; c < NC; ++c) s[r][c] = 0.0f;
      }
    }
    __syncthreads();  // every thread has its rows: the stage is free
    if (threadIdx.x == 0 && ahead < items) issue(ahead, ahead_slot, stage);

    if (slot < 0) {  // padding: y = 0, pool untouched
#pragma unroll
      for (int r = 0; r < R; ++r)
        if (valid[r] && lead) in.store_y(t, h, row0 + r * kGroupRows, 0.0f);
      continue;
    }
    const float dA = expf(dtp * A);
    float acc[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const float dtx = dtp * xv[r];
      acc[r] = 0.0f;
#pragma unroll
      for (int c = 0; c < NC; ++c) {
        s[r][c] = dA * s[r][c] + dtx * Bv[c];
        acc[r] += s[r][c] * Cv[c];
      }
    }
    // y = S·C over the row group, the R rows' reductions interleaved.
#pragma unroll
    for (int o = LPR / 2; o > 0; o >>= 1)
#pragma unroll
      for (int r = 0; r < R; ++r) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], o);
    St* pool = pool_base + slot * p.st_slot + h * p.st_h;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int prow = row0 + r * kGroupRows;
      if (!valid[r]) continue;
      if (lead) in.store_y(t, h, prow, in.finish(acc[r], D_h, xv[r], t, h, prow));
      store_row<LPR, NC, true>(pool + prow * N, sub, N, s[r]);
    }
  }
}

// v5 helpers: bytes of a float dtype on the device; an 8-byte cp.async (both addresses 8-byte
// aligned); the lane's NC elements of a row by 16-byte st.global.cs (the pool row is not read
// again by this kernel: its lines should be the first L2 victims, not the stream's).
__device__ __forceinline__ int dtype_size_dev(DType d) {
  return d == DType::f32 ? 4 : 2;  // xz_async admits f32, bf16, f16 only
}
__device__ __forceinline__ void cp_async_8(void* dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(smem_u32(dst)), "l"(src)
               : "memory");
}
template <int LPR, int NC, class St>
__device__ __forceinline__ void store_row_cs(St* row, int sub, const float (&r)[NC]) {
  using L = RecLayout<LPR, NC, true, St>;
  static_assert(L::W * sizeof(St) == 16, "16-byte chunks");
#pragma unroll
  for (int j = 0; j < NC / L::W; ++j) {
    uint4 u;
    St* e = reinterpret_cast<St*>(&u);
#pragma unroll
    for (int i = 0; i < L::W; ++i) e[i] = from_f32<St>(r[j * L::W + i]);
    asm volatile("st.global.cs.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"l"(row + L::col(sub, j * L::W)),
                 "r"(u.x), "r"(u.y), "r"(u.z), "r"(u.w)
                 : "memory");
  }
}

// ---- v4: persistent warps, each streaming its own run of items (ssm_step.cuda_warp) ----------
//
// v3 (75% of copy at B 256 f32) has 3 processors (blocks) per SM, a block barrier per 16 KiB
// item and serial round trips in each item (z inside the output's finish, after the arithmetic).
// v4 = the GDN decode v4 scheme (gdn.cu): every warp is an independent processor over the
// contiguous run of items [w·items/W, (w+1)·items/W) (item = (row tile, h, sequence), tile
// fastest); an item is R rows a thread, kGroupRows·R rows (4 KiB at N = 128: f32 8 rows, R = 2;
// bf16 16 rows, R = 4), copied lane by lane (each lane its own 16-byte chunks, the v2 register
// layout) into one of kWarpStages per-warp shared-memory stages with cp.async, kWarpStages items
// ahead; cp.async.wait_group is the lane's whole synchronisation for its state chunks. Before the
// stage wait: the item's slot and the next-issued one's, x and z of the thread's rows, and for
// the first item of a (sequence, head) run B, C (16-byte vector loads), dt', A, D; B and C are
// then kept for the run's later items in a per-warp shared-memory cache. No block barrier.
constexpr int kWarpBlockWarps = 4;
constexpr int kWarpStages = 3;

template <class St>
constexpr int kWarpRows = sizeof(St) == 2 ? 4 : 2;  // R: a 4 KiB item at N = 128

template <int LPR, int NC, int R, class St, bool kV5 = false>
struct SsmWarpTile {
  using L = RecLayout<LPR, NC, true, St>;
  static_assert(L::W * sizeof(St) == 16, "v4 needs 16-byte state chunks");
  static constexpr int kChunksPerRow = NC / L::W;
  static constexpr int kChunks = R * kChunksPerRow;  // a lane's 16-byte chunks of an item
  static constexpr int kGroupRows = 32 / LPR;
  static constexpr int kItemRows = kGroupRows * R;  // rows of an item
  // v5: the item's x and z values (kItemRows elements each, 2- or 4-byte dtypes) after the
  // state chunks, in 8-byte cp.async pieces (x by lanes 0.., z by lanes 16..).
  static constexpr int kXZOffset = kChunks * 32 * 16;  // [kChunks][32 lanes] 16-byte chunks
  static constexpr int kXZMax = kItemRows * 4;         // bytes of one of x, z at most
  static_assert(kItemRows * 2 >= 8 && kXZMax / 8 <= 16, "x, z: 1..16 pieces of 8 bytes");
  static constexpr int kStageBytes = kXZOffset + (kV5 ? (2 * kXZMax + 15) / 16 * 16 : 0);
  // After the stages: the run's B and C (f32), [2][NC / 4][LPR] float4.
  static constexpr int kCacheOffset = kWarpStages * kStageBytes;
  static constexpr int kWarpBytes = kCacheOffset + 2 * NC * LPR * 4;
};

// v5 (kV5, ssm_step.cuda_warp2): v4 waits in every item on the x and z loads of the thread's rows
// (issued at the top of the item, consumed after the stage wait: a full round trip per item
// while the item's state landed items earlier). v5 copies the item's x and z values into its
// stage with the state, kWarpStages items ahead (p.xz_async: rows of x / z 8-byte aligned, P a
// multiple of the item rows; else v4's loads), and writes the state back with st.global.cs.
template <int LPR, int NC, int R, class St, bool kV5 = false>
__global__ void __launch_bounds__(kWarpBlockWarps * 32, 3)
    ssm_warp_kernel(const RecParams p, const int items, const int tiles) {
  using WT = SsmWarpTile<LPR, NC, R, St, kV5>;
  using L = typename WT::L;
  constexpr int W = L::W, CPR = WT::kChunksPerRow, kGroupRows = WT::kGroupRows;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int sub = lane % LPR, group_row = lane / LPR;
  const bool lead = sub == 0;  // writes the row's y
  unsigned char* const warp_smem = smem_raw + warp * WT::kWarpBytes;
  const int64_t gw = int64_t{blockIdx.x} * kWarpBlockWarps + warp;
  const int64_t nw = int64_t{gridDim.x} * kWarpBlockWarps;
  const int begin = static_cast<int>(gw * items / nw),
            end = static_cast<int>((gw + 1) * items / nw);
  const int P = p.P, H = p.H;
  const SsmIn& in = p.in;
  St* const pool_base = static_cast<St*>(p.state);

  // The item's state chunks into `stage` (none for a padding sequence). No commit.
  auto issue = [&](int item, int slot, int stage) {
    if (slot < 0) return;
    const int key = item / tiles, tile = item - key * tiles;
    const int h = key % H;
    unsigned char* const st = warp_smem + stage * WT::kStageBytes;
    const St* head = pool_base + slot * p.st_slot + h * p.st_h;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int row = tile * WT::kItemRows + r * kGroupRows + group_row;
      if (row < P) {
#pragma unroll
        for (int cc = 0; cc < CPR; ++cc)
          cp_async16(st + ((r * CPR + cc) * 32 + lane) * 16,
                     head + row * p.st_p + L::col(sub, cc * W));
      }
    }
    if constexpr (kV5) {
      if (p.xz_async) {
        const int seq = key / H;
        const int row = tile * WT::kItemRows;  // P % kItemRows == 0
        const bool is_z = lane >= 16;
        const Arg& a = is_z ? in.z : in.x;
        const int piece = lane % 16;
        const int bytes = WT::kItemRows * static_cast<int>(dtype_size_dev(a.dt));
        if (a.p != nullptr && piece * 8 < bytes) {
          const unsigned char* src =
              static_cast<const unsigned char*>(a.p) +
              (int64_t{seq} * a.s0 + int64_t{h} * a.s1 + row) * dtype_size_dev(a.dt) + piece * 8;
          cp_async_8(st + WT::kXZOffset + (is_z ? WT::kXZMax : 0) + piece * 8, src);
        }
      }
    }
  };

#pragma unroll
  for (int s = 0; s < kWarpStages; ++s) {
    const int item = begin + s;
    if (item < end) issue(item, p.slots[item / tiles / H], s);
    cp_commit();  // one group per stage, empty ones too: the wait count stays uniform
  }

  float dtp = 0.0f, dA = 1.0f, D_h = 0.0f;  // the current run's dt', exp(dt'·A), D
  int prep_key = -1;                        // the (sequence, head) they belong to
  float4* const cache_b = reinterpret_cast<float4*>(warp_smem + WT::kCacheOffset);  // [NC/4][LPR]
  float4* const cache_c = cache_b + NC / 4 * LPR;

  int i = 0;
#pragma unroll 1
  for (int item = begin; item < end; ++item, ++i) {
    const int stage = i % kWarpStages;
    const int key = item / tiles, tile = item - key * tiles;
    const int seq = key / H, h = key - seq * H;
    const int64_t t = seq;                 // one token per sequence
    const int ahead = item + kWarpStages;  // issued into this stage once it is read
    const int slot = p.slots[seq];
    const int ahead_slot = ahead < end ? p.slots[ahead / tiles / H] : -1;
    const bool new_head = slot >= 0 && key != prep_key;
    const int row0 = tile * WT::kItemRows + group_row;  // thread rows row0 + r·kGroupRows
    bool valid[R];
#pragma unroll
    for (int r = 0; r < R; ++r) valid[r] = row0 + r * kGroupRows < P;

    // The token's inputs, independent of the state: in flight during the stage wait (v5 with
    // p.xz_async: in the stage, read after it).
    const bool xz_staged = kV5 && p.xz_async;
    float xv[R], zv[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int prow = row0 + r * kGroupRows;
      const bool use = slot >= 0 && valid[r] && !xz_staged;
      xv[r] = use ? in.x_at(t, h, prow) : 0.0f;
      zv[r] = use && in.z.p ? load_any(in.z.p, in.z.dt, t * in.z.s0 + h * in.z.s1 + prow) : 0.0f;
    }
    float Bv[NC], Cv[NC];
    float dtp_new = 0.0f, A_new = 0.0f, D_new = 0.0f;
    if (new_head) {
      const int g = in.group(h);
      load_cols<LPR, NC, St>(in.B, t, g, sub, Bv);
      load_cols<LPR, NC, St>(in.C, t, g, sub, Cv);
      dtp_new = in.dt_eff(t, h);
      A_new = in.A(h);
      D_new = in.D_skip(h);
    }

    cp_wait<kWarpStages - 1>();  // this item's chunks (the lane's own) have landed
    __syncwarp();                // and the run's B, C cache written by the first row group
    const unsigned char* const st = warp_smem + stage * WT::kStageBytes;
    float s[R][NC];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (slot >= 0 && valid[r]) {
#pragma unroll
        for (int cc = 0; cc < CPR; ++cc)
          vload<W>(reinterpret_cast<const St*>(st + ((r * CPR + cc) * 32 + lane) * 16),
                   s[r] + cc * W);
      } else {
#pragma unroll
        for (int c = 0; c < NC; ++c) s[r][c] = 0.0f;
      }
    }
    if (xz_staged && slot >= 0) {
      const unsigned char* xz = st + WT::kXZOffset;
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const int local = r * kGroupRows + group_row;  // the row within the item
        xv[r] = load_any(xz, in.x.dt, local);
        zv[r] = in.z.p ? load_any(xz + WT::kXZMax, in.z.dt, local) : 0.0f;
      }
    }
    if (slot >= 0 && !new_head) {
#pragma unroll
      for (int j = 0; j < NC / 4; ++j) {
        const float4 b = cache_b[j * LPR + sub], c = cache_c[j * LPR + sub];
        Bv[4 * j] = b.x, Bv[4 * j + 1] = b.y, Bv[4 * j + 2] = b.z, Bv[4 * j + 3] = b.w;
        Cv[4 * j] = c.x, Cv[4 * j + 1] = c.y, Cv[4 * j + 2] = c.z, Cv[4 * j + 3] = c.w;
      }
    }
    __syncwarp();  // every lane has read the stage (and the cache): both may be rewritten
    if (ahead < end) issue(ahead, ahead_slot, stage);
    cp_commit();

    if (slot < 0) {  // padding: y = 0, pool untouched
#pragma unroll
      for (int r = 0; r < R; ++r)
        if (valid[r] && lead) in.store_y(t, h, row0 + r * kGroupRows, 0.0f);
      continue;
    }
    if (new_head) {
      prep_key = key;
      dtp = dtp_new;
      dA = expf(dtp_new * A_new);
      D_h = D_new;
      if (lane < LPR) {  // read by the run's later items (after their first __syncwarp)
#pragma unroll
        for (int j = 0; j < NC / 4; ++j) {
          cache_b[j * LPR + sub] =
              make_float4(Bv[4 * j], Bv[4 * j + 1], Bv[4 * j + 2], Bv[4 * j + 3]);
          cache_c[j * LPR + sub] =
              make_float4(Cv[4 * j], Cv[4 * j + 1], Cv[4 * j + 2], Cv[4 * j + 3]);
        }
      }
    }
    float acc[R];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const float dtx = dtp * xv[r];
      acc[r] = 0.0f;
#pragma unroll
      for (int c = 0; c < NC; ++c) {
        s[r][c] = dA * s[r][c] + dtx * Bv[c];
        acc[r] += s[r][c] * Cv[c];
      }
    }
    // y = S·C over the row group, the R rows' reductions interleaved.
#pragma unroll
    for (int o = LPR / 2; o > 0; o >>= 1)
#pragma unroll
      for (int r = 0; r < R; ++r) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], o);
    St* const pool = pool_base + slot * p.st_slot + h * p.st_h;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int prow = row0 + r * kGroupRows;
      if (!valid[r]) continue;
      if (lead) {
        float y = acc[r] + D_h * xv[r];  // (S·C + D·x) · silu(z), as SsmIn::finish
        if (in.z.p) y *= zv[r] / (1.0f + expf(-zv[r]));
        in.store_y(t, h, prow, y);
      }
      if (kV5 && p.cs_store)
        store_row_cs<LPR, NC, St>(pool + prow * p.st_p, sub, s[r]);
      else
        store_row<LPR, NC, true>(pool + prow * p.st_p, sub, p.N, s[r]);
    }
  }
}

// ---- host side -----------------------------------------------------------------------------

bool rows_aligned(const Tensor& s) {
  const size_t esz = dtype_size(s.dtype());
  return reinterpret_cast<uintptr_t>(s.data()) % 16 == 0 && (s.stride(0) * esz) % 16 == 0 &&
         (s.stride(1) * esz) % 16 == 0 && (s.stride(2) * esz) % 16 == 0;
}

// What the recurrent kernels refuse: N > 256 (a lane holds at most 8 interleaved columns) and a
// pool that is not f32 or bf16. N in {32, 64, 128, 256} with 16-byte aligned pool rows takes the
// vector path; any other N <= 256 or unaligned rows take the scalar interleaved path (slower, not
// refused).
Reason rec_supports_n(int64_t N, const Tensor& state) {
  if (N > 256) return str("N=", N, " > 256 is not built");
  if (state.dtype() != DType::f32 && state.dtype() != DType::bf16)
    return str("state ", dtype_name(state.dtype()), " is not built (f32, bf16)");
  return {};
}

// N → the row-group layout (LPR lanes per row, NC columns per lane, VEC). VEC: N in {32, 64, 128,
// 256} with 16-byte aligned rows, 8 lanes a row (4 at N = 32, 16 at N = 256), 16-byte chunks. Else
// (any N <= 256, or unaligned rows): 32 lanes a row, NC = N / 32 rounded up, interleaved scalar
// columns.
template <class Body>
void dispatch_nc(int64_t N, bool vec, Body&& body) {
  using std::integral_constant;
  if (vec) {
    switch (N) {
      case 32:
        body(integral_constant<int, 4>{}, integral_constant<int, 8>{}, std::true_type{});
        return;
      case 64:
        body(integral_constant<int, 8>{}, integral_constant<int, 8>{}, std::true_type{});
        return;
      case 128:
        body(integral_constant<int, 8>{}, integral_constant<int, 16>{}, std::true_type{});
        return;
      case 256:
        body(integral_constant<int, 16>{}, integral_constant<int, 16>{}, std::true_type{});
        return;
      default:
        break;
    }
  }
  const int nc = static_cast<int>((N + 31) / 32);
  if (nc <= 1)
    body(integral_constant<int, 32>{}, integral_constant<int, 1>{}, std::false_type{});
  else if (nc <= 2)
    body(integral_constant<int, 32>{}, integral_constant<int, 2>{}, std::false_type{});
  else if (nc <= 4)
    body(integral_constant<int, 32>{}, integral_constant<int, 4>{}, std::false_type{});
  else
    body(integral_constant<int, 32>{}, integral_constant<int, 8>{}, std::false_type{});
}

template <Mode mode>
void launch_rec(const RecParams& p, const Tensor& state, int64_t seqs, Context& ctx) {
  if (seqs == 0) return;
  dispatch_nc(p.N, rows_aligned(state), [&](auto lpr, auto nc, auto vec) {
    dispatch_state(state.dtype(), [&](auto ts) {
      constexpr int LPR = decltype(lpr)::value, NC = decltype(nc)::value;
      constexpr bool VEC = decltype(vec)::value;
      using TS = decltype(ts);
      constexpr int rows = RecLayout<LPR, NC, VEC, TS>::kRows;
      const dim3 grid(static_cast<unsigned>((p.P + rows - 1) / rows), static_cast<unsigned>(p.H),
                      static_cast<unsigned>(seqs));
      ssm_rec_kernel<mode, LPR, NC, VEC, TS><<<grid, kRecThreads, 0, as_stream(ctx.stream())>>>(p);
      HYBRID_CUDA_CHECK_LAUNCH();
    });
  });
}

void set_pool(RecParams& p, const Tensor& state) {
  p.state = state.data();
  p.st_slot = state.stride(0), p.st_h = state.stride(1), p.st_p = state.stride(2);
  p.H = static_cast<int>(state.size(1)), p.P = static_cast<int>(state.size(2));
  p.N = static_cast<int>(state.size(3));
}

// ---- ssm_step --------------------------------------------------------------------------------

Reason step_supports(const SsmStep& a) {
  return rec_supports_n(a.B.size(2), a.state);
}

// The parameters every ssm_step launch shares: inputs, pool, slots.
RecParams step_params(const SsmStep& a) {
  RecParams p;
  p.in = ssm_in(a.x, a.dt, a.A_log, a.B, a.C, a.D, a.dt_bias, a.z, a.y, a.dt_softplus, a.dt_min,
                a.dt_max);
  set_pool(p, a.state);
  p.slots = a.state_slots.data_as<const int>();
  return p;
}

void step_cuda(const SsmStep& a, Context& ctx) {
  const RecParams p = step_params(a);
  launch_rec<Mode::step>(p, a.state, a.state_slots.size(0), ctx);
}

// v3: what ssm_step.cuda_stream refuses beyond v2 (the v2 kernel takes these): N not in {32, 64,
// 128, 256}, pool rows not packed (row stride != N: a tile is one contiguous bulk copy) or not
// 16-byte aligned, B / C rows that are not 16-byte aligned with unit column stride (vector
// loads), devices before sm_90 (TMA bulk copies).
Reason step_stream_supports(const SsmStep& a) {
  if (Reason r = step_supports(a)) return r;
  const int64_t N = a.B.size(2);
  if (N != 32 && N != 64 && N != 128 && N != 256) return str("N=", N, " not in {32, 64, 128, 256}");
  if (!rows_aligned(a.state) || a.state.stride(2) != N)
    return std::string("state: rows must be packed (row stride N) and 16-byte aligned");
  for (const Tensor* t : {&a.B, &a.C}) {
    const size_t esz = dtype_size(t->dtype());
    if (t->stride(2) != 1 || reinterpret_cast<uintptr_t>(t->data()) % 16 ||
        (t->stride(0) * esz) % 16 || (t->stride(1) * esz) % 16)
      return std::string("B, C: rows must be 16-byte aligned with unit column stride");
  }
  const int major = device_info().major;
  if (major < 9) return str("bulk copies need sm_90 (device is sm_", major, "x)");
  return {};
}

void step_stream_cuda(const SsmStep& a, Context& ctx) {
  RecParams p = step_params(a);
  const int64_t seqs = a.state_slots.size(0);
  if (seqs == 0) return;
  const int64_t min_items = 2 * int64_t{device_info().sms};
  dispatch_nc(p.N, true, [&](auto lpr, auto nc, auto vec) {
    dispatch_state(a.state.dtype(), [&](auto ts) {
      if constexpr (decltype(vec)::value) {  // always: N is one of the vector sizes
        constexpr int LPR = decltype(lpr)::value, NC = decltype(nc)::value;
        using TS = decltype(ts);
        auto run = [&](auto rows_per_thread) {
          constexpr int R = decltype(rows_per_thread)::value;
          constexpr int rows = kStreamTileRows<LPR, R>;
          const int tiles = (p.P + rows - 1) / rows;
          const int64_t items = seqs * p.H * tiles;
          auto* kernel = ssm_stream_kernel<LPR, NC, R, TS>;
          constexpr size_t smem = size_t{kStages} * rows * LPR * NC * sizeof(TS);
          const int64_t blocks =
              persistent_blocks(reinterpret_cast<const void*>(kernel), kRecThreads, smem, items);
          kernel<<<static_cast<unsigned>(blocks), kRecThreads, smem, as_stream(ctx.stream())>>>(
              p, items, tiles);
          HYBRID_CUDA_CHECK_LAUNCH();
        };
        constexpr int kBig = kStreamRows<TS>;
        constexpr int big_rows = kStreamTileRows<LPR, kBig>;
        if constexpr (kBig != 2) {
          if (seqs * p.H * ((p.P + big_rows - 1) / big_rows) < min_items) {
            run(std::integral_constant<int, 2>{});
            return;
          }
        }
        run(std::integral_constant<int, kBig>{});
      }
    });
  });
}

// v4 (ssm_warp_kernel): what it refuses beyond v2: HYBRID_SSM_STEP_V4=0 (the switch that lets v3
// / v2 run and be timed beside it), N not in {32, 64, 128, 256}, pool rows not 16-byte aligned,
// B / C rows that are not 16-byte aligned with unit column stride (vector loads), more than
// 2^31 − 1 items, devices before sm_80 (cp.async). Unlike v3 the pool rows need not be packed.
Reason warp_supports_for(const SsmStep& a, bool v5) {
  // v5 (cuda_warp2) answers to its own switch only, so v4 can be timed beside it and vice versa.
  static const bool v4_off = env_is_zero("HYBRID_SSM_STEP_V4");
  static const bool v5_off = env_is_zero("HYBRID_SSM_STEP_V5");
  if (v5 ? v5_off : v4_off)
    return std::string(v5 ? "HYBRID_SSM_STEP_V5=0" : "HYBRID_SSM_STEP_V4=0");
  if (Reason r = step_supports(a)) return r;
  const int64_t N = a.B.size(2);
  if (N != 32 && N != 64 && N != 128 && N != 256) return str("N=", N, " not in {32, 64, 128, 256}");
  if (!rows_aligned(a.state)) return std::string("state: rows must be 16-byte aligned");
  for (const Tensor* t : {&a.B, &a.C}) {
    const size_t esz = dtype_size(t->dtype());
    if (t->stride(2) != 1 || reinterpret_cast<uintptr_t>(t->data()) % 16 ||
        (t->stride(0) * esz) % 16 || (t->stride(1) * esz) % 16)
      return std::string("B, C: rows must be 16-byte aligned with unit column stride");
  }
  const int64_t rows = 4 * (a.state.dtype() == DType::bf16 ? 4 : 2) / (N == 256 ? 2 : 1);
  if (a.state_slots.size(0) * a.state.size(1) * ((a.state.size(2) + rows - 1) / rows) >
      std::numeric_limits<int>::max())
    return std::string("more than 2^31 - 1 items");
  const int major = device_info().major;
  if (major < 8) return str("cp.async needs sm_80 (device is sm_", major, "x)");
  return {};
}

// v5: x and z (when given) of f32 / bf16 / f16 with unit element stride and 8-byte aligned rows
// (base and the two outer strides) can be copied into the stages by 8-byte cp.async.
bool xz_rows_aligned(const Tensor& t) {
  if (!t.defined()) return true;
  if (t.dtype() != DType::f32 && t.dtype() != DType::bf16 && t.dtype() != DType::f16) return false;
  const size_t esz = dtype_size(t.dtype());
  return t.stride(2) == 1 && reinterpret_cast<uintptr_t>(t.data()) % 8 == 0 &&
         (t.stride(0) * esz) % 8 == 0 && (t.stride(1) * esz) % 8 == 0;
}

template <bool kV5>
void launch_step_warp(const SsmStep& a, Context& ctx) {
  // v5's streaming write-back is on unless HYBRID_DECODE_V5_CS=0 (as gdn.cu's v5).
  static const bool cs_stores = !env_is_zero("HYBRID_DECODE_V5_CS");
  RecParams p = step_params(a);
  const int64_t seqs = a.state_slots.size(0);
  if (seqs == 0) return;
  dispatch_nc(p.N, true, [&](auto lpr, auto nc, auto vec) {
    dispatch_state(a.state.dtype(), [&](auto ts) {
      if constexpr (decltype(vec)::value) {  // always: N is one of the vector sizes
        constexpr int LPR = decltype(lpr)::value, NC = decltype(nc)::value;
        using TS = decltype(ts);
        constexpr int R = kWarpRows<TS>;
        using WT = SsmWarpTile<LPR, NC, R, TS, kV5>;
        const int tiles = (p.P + WT::kItemRows - 1) / WT::kItemRows;
        const int64_t items = seqs * p.H * tiles;
        p.xz_async =
            kV5 && p.P % WT::kItemRows == 0 && xz_rows_aligned(a.x) && xz_rows_aligned(a.z);
        p.cs_store = cs_stores;
        auto* kernel = ssm_warp_kernel<LPR, NC, R, TS, kV5>;
        constexpr size_t smem = size_t{kWarpBlockWarps} * WT::kWarpBytes;
        const int64_t blocks =
            persistent_blocks(reinterpret_cast<const void*>(kernel), kWarpBlockWarps * 32, smem,
                              (items + kWarpBlockWarps - 1) / kWarpBlockWarps);
        kernel<<<static_cast<unsigned>(blocks), kWarpBlockWarps * 32, smem,
                 as_stream(ctx.stream())>>>(p, static_cast<int>(items), tiles);
        HYBRID_CUDA_CHECK_LAUNCH();
      }
    });
  });
}

Reason step_warp_supports(const SsmStep& a) {
  return warp_supports_for(a, false);
}

void step_warp_cuda(const SsmStep& a, Context& ctx) {
  launch_step_warp<false>(a, ctx);
}

// v5 (ssm_step.cuda_warp2): what v4 serves, under HYBRID_SSM_STEP_V5 instead of _V4; x / z that
// fail xz_rows_aligned take v4's loads inside the same kernel.
Reason step_warp2_supports(const SsmStep& a) {
  return warp_supports_for(a, true);
}

void step_warp2_cuda(const SsmStep& a, Context& ctx) {
  launch_step_warp<true>(a, ctx);
}

// ---- ssm_step_record / ssm_replay ------------------------------------------------------------

Reason record_supports(const SsmStepRecord& a) {
  return rec_supports_n(a.B.size(2), a.state);
}

void record_cuda(const SsmStepRecord& a, Context& ctx) {
  RecParams p;
  p.in = ssm_in(a.x, a.dt, a.A_log, a.B, a.C, a.D, a.dt_bias, a.z, a.y, a.dt_softplus, a.dt_min,
                a.dt_max);
  set_pool(p, a.state);
  p.cu_seqlens = a.cu_seqlens.data_as<const int>();
  p.slots = a.state_slots.data_as<const int>();
  if (a.mask.defined()) p.mask = a.mask.data(), p.mask_dt = a.mask.dtype();
  p.dA_log = arg(a.dA_log);
  p.dBx_log = arg(a.dBx_log);
  p.state_out = arg(a.state_out);
  launch_rec<Mode::record>(p, a.state, a.state_slots.size(0), ctx);
}

Reason replay_supports(const SsmReplay& a) {
  return rec_supports_n(a.dBx_log.size(3), a.state);
}

void replay_cuda(const SsmReplay& a, Context& ctx) {
  RecParams p;
  set_pool(p, a.state);
  p.in.H = p.H, p.in.P = p.P, p.in.N = p.N, p.in.G = 1;
  p.cu_seqlens = a.cu_seqlens.data_as<const int>();
  p.slots = a.state_slots.data_as<const int>();
  p.num_steps = a.num_steps.data_as<const int>();
  if (a.mask.defined()) p.mask = a.mask.data(), p.mask_dt = a.mask.dtype();
  p.dA_log = arg(a.dA_log);
  p.dBx_log = arg(a.dBx_log);
  launch_rec<Mode::replay>(p, a.state, a.state_slots.size(0), ctx);
}

// ---- ssm_step.cuda_tile (decode v7) ----------------------------------------------------------
//
// gdn_recurrent.cuda_tile's shape for Mamba-2 decode: one warp per (sequence b, head h, tile of
// 8 state rows p0..p0+7), the tile's h [8, N = 128] f32 in registers (lane l: columns 4l..4l+3 of
// each row, 8 streamed 16-byte loads of an f32 pool, 8-byte for bf16, all issued before any
// arithmetic). Blocks of 1 warp (state_tile.cuh; 4-warp blocks measured 1-3% slower), grid
// (H·P / 8, batch); at Mamba2 B 256 (H 80, P 64) that is 163840 warps.
// Per row p, as the CPU reference and ssm_warp_kernel:
//   h[p, n] ← dA · h[p, n] + (dt' · x[p]) · B[g, n];   y[p] = (Σ_n h[p, n] C[g, n] + D x[p]) ·
//   silu(z[p])
// The 8 row sums reduce over the warp by halving (xor 16 / 8 / 4 split the rows, xor 2 / 1
// complete: 9 shuffles); lane l then holds row 4·bit4 + 2·bit3 + bit2 and the lanes with
// l % 4 = 0 write y.
constexpr int kSsmTileRows = 8;
constexpr int kSsmTileWarps = 4;

template <class S>
__global__ void __launch_bounds__(kSsmTileWarps * 32, 7) ssm_tile_kernel(const RecParams p) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int tiles_per_head = p.P / kSsmTileRows;
  const int tile = blockIdx.x * (blockDim.x / 32) + warp;
  const int h = tile / tiles_per_head, p0 = (tile % tiles_per_head) * kSsmTileRows;
  const int b = blockIdx.y;
  const SsmIn& in = p.in;
  const int slot = p.slots[b];
  if (slot < 0) {  // padding: y = 0, the pool is not touched
    if (lane < kSsmTileRows) in.store_y(b, h, p0 + lane, 0.0f);
    return;
  }
  S* const pool =
      static_cast<S*>(p.state) + slot * p.st_slot + h * p.st_h + (int64_t)p0 * p.st_p + 4 * lane;
  const int rs = static_cast<int>(p.st_p);  // row stride in elements
  float s[kSsmTileRows][4];
#pragma unroll
  for (int r = 0; r < kSsmTileRows; ++r) tile_load4(pool + r * rs, s[r]);
  // Every input of the tile is loaded as raw bits (raw_any) before any is converted: through
  // load_any, whose dtype branch converts inside, its ~20 loads were as many round trips in a row.
  const int g = in.group(h);
  const int row = (lane >> 4 & 1) * 4 + (lane >> 3 & 1) * 2 + (lane >> 2 & 1);  // y row written
  const int64_t bo = b * in.B.s0 + g * in.B.s1 + 4 * lane,
                co = b * in.C.s0 + g * in.C.s1 + 4 * lane, xo = b * in.x.s0 + h * in.x.s1 + p0;
  uint32_t rB[4], rC[4], rx[kSsmTileRows];
#pragma unroll
  for (int c = 0; c < 4; ++c)
    rB[c] = raw_any(in.B.p, in.B.dt, bo + c), rC[c] = raw_any(in.C.p, in.C.dt, co + c);
#pragma unroll
  for (int r = 0; r < kSsmTileRows; ++r) rx[r] = raw_any(in.x.p, in.x.dt, xo + r);
  const uint32_t r_dt = raw_any(in.dt.p, in.dt.dt, b * in.dt.s0 + h);
  const uint32_t r_bias =
      in.dt_bias.p ? raw_any(in.dt_bias.p, in.dt_bias.dt, h * in.dt_bias.s0) : 0u;
  const uint32_t r_A = raw_any(in.A_log.p, in.A_log.dt, h * in.A_log.s0);
  const uint32_t r_D = in.D.p ? raw_any(in.D.p, in.D.dt, h * in.D.s0) : 0u;
  const uint32_t r_z = in.z.p ? raw_any(in.z.p, in.z.dt, b * in.z.s0 + h * in.z.s1 + p0 + row) : 0u;
  const uint32_t r_xrow = raw_any(in.x.p, in.x.dt, xo + row);
  float Bv[4], Cv[4], x[kSsmTileRows];
#pragma unroll
  for (int c = 0; c < 4; ++c)
    Bv[c] = float_of_raw(in.B.dt, rB[c]), Cv[c] = float_of_raw(in.C.dt, rC[c]);
#pragma unroll
  for (int r = 0; r < kSsmTileRows; ++r) x[r] = float_of_raw(in.x.dt, rx[r]);
  float dt_biased = float_of_raw(in.dt.dt, r_dt);
  if (in.dt_bias.p) dt_biased += float_of_raw(in.dt_bias.dt, r_bias);
  const float dtp = in.dt_finish(dt_biased);
  const float dA = expf(dtp * -expf(float_of_raw(in.A_log.dt, r_A)));
  const float D_h = in.D.p ? float_of_raw(in.D.dt, r_D) : 0.0f;
  float acc[kSsmTileRows];
#pragma unroll
  for (int r = 0; r < kSsmTileRows; ++r) {
    const float dtx = dtp * x[r];
    float a = 0.0f;
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      s[r][c] = dA * s[r][c] + dtx * Bv[c];
      a += s[r][c] * Cv[c];
    }
    acc[r] = a;
  }
  const float total = tile_halving_sum<16>(acc, lane);
  if ((lane & 3) == 0) {
    const float zv = in.z.p ? float_of_raw(in.z.dt, r_z) : 0.0f;
    in.store_y(b, h, p0 + row, in.gate(total + D_h * float_of_raw(in.x.dt, r_xrow), zv));
  }
#pragma unroll
  for (int r = 0; r < kSsmTileRows; ++r) tile_store4(pool + r * rs, s[r]);
}

// What the tile kernel takes: N = 128 (a lane's 4 columns), P a multiple of 32 (from the 4-warp
// blocks of 8-row tiles it was measured with; the 1-warp blocks need only 8, untested on a GPU), a
// pool with 16-byte aligned rows (N contiguous), B and C rows with unit column stride, at most
// 65535 sequences (grid y). HYBRID_SSM_STEP_TILE=0 refuses it (cuda_warp2 runs).
Reason step_tile_supports(const SsmStep& a) {
  static const bool off = env_is_zero("HYBRID_SSM_STEP_TILE");
  if (off) return std::string("HYBRID_SSM_STEP_TILE=0");
  if (Reason r = step_supports(a)) return r;
  const int64_t N = a.B.size(2), P = a.state.size(2);
  if (N != 128) return str("N=", N, ": the tile kernel is for N = 128");
  if (P % 32 != 0) return str("P=", P, " is not a multiple of 32");
  if (!rows_aligned(a.state) || a.state.stride(3) != 1)
    return std::string("state: rows must be 16-byte aligned with N contiguous");
  if (a.B.stride(2) != 1 || a.C.stride(2) != 1)
    return std::string("B, C: unit column stride needed");
  return state_tile_refusal(a.state.dtype(), a.state.size(1) * P / kSsmTileRows,
                            a.state_slots.size(0));
}

void step_tile_cuda(const SsmStep& a, Context& ctx) {
  RecParams p = step_params(a);
  const int64_t batch = a.state_slots.size(0);
  if (batch == 0) return;
  const dim3 grid = state_tile_grid(int64_t{p.H} * p.P / kSsmTileRows, batch);
  if (a.state.dtype() == DType::bf16)
    ssm_tile_kernel<__nv_bfloat16><<<grid, 32, 0, as_stream(ctx.stream())>>>(p);
  else
    ssm_tile_kernel<float><<<grid, 32, 0, as_stream(ctx.stream())>>>(p);
  HYBRID_CUDA_CHECK_LAUNCH();
}

}  // namespace

void register_ssm(Registry& r) {
  // v4 (persistent warps streaming through per-warp cp.async stages; HYBRID_SSM_STEP_V4=0 turns
  // it off), v3 (shared-memory streaming by blocks); the v2 kernel below stays as the fallback.
  // v7 (one warp per 8-row state tile in registers; HYBRID_SSM_STEP_TILE=0).
  r.add<SsmStep>("ssm_step.cuda_tile", DeviceType::cuda, 4, step_tile_supports, step_tile_cuda);
  r.add<SsmStep>("ssm_step.cuda_warp2", DeviceType::cuda, 3, step_warp2_supports, step_warp2_cuda);
  r.add<SsmStep>("ssm_step.cuda_warp", DeviceType::cuda, 2, step_warp_supports, step_warp_cuda);
  r.add<SsmStep>("ssm_step.cuda_stream", DeviceType::cuda, 1, step_stream_supports,
                 step_stream_cuda);
  r.add<SsmStep>("ssm_step.cuda", DeviceType::cuda, 0, step_supports, step_cuda);
  r.add<SsmStepRecord>("ssm_step_record.cuda", DeviceType::cuda, 0, record_supports, record_cuda);
  r.add<SsmReplay>("ssm_replay.cuda", DeviceType::cuda, 0, replay_supports, replay_cuda);
}

}  // namespace hybrid::cuda
