// CUDA: ssm_chunk_scan, the Mamba-2 chunked SSD prefill (include/hybrid/ops/ssm.h). Variants, by
// priority: cuda_v6 (5, v3 with leaner state and output kernels, see "v6" below;
// HYBRID_SSM_CHUNK_V6=0 turns it off), cuda_v3 (4, v2 with C·Bᵀ once per (chunk, group) and dt' /
// cs precomputed; see "v3" at the v2 kernels; HYBRID_SSM_CHUNK_V3=0 turns it off), cuda_v2 (3,
// tensor cores everywhere: P = 64, bf16 x / B / C / y; see "v2" below), cuda_tiled_mma (2),
// cuda_tiled (1), cuda (0, any P, N <= 256; described first). HYBRID_SSM_CHUNK_STAGES=1 (and a
// debug log level) logs v2 / v3's per-kernel times (StageTimer).
//
// Shared math (include/hybrid/ops/ssm.h), per token t and head h, g = h / (H / G):
//   dt' = clamp(softplus?(dt[t,h] + dt_bias[h]), dt_min, dt_max),  dA = exp(dt' · -exp(A_log[h]))
//   S[p,n] ← dA · S[p,n] + (dt' · x[t,h,p]) · B[t,g,n]
//   y[t,h,p] = (Σ_n S[p,n] · C[t,g,n] + D[h] · x[t,h,p]) · silu(z[t,h,p])
//
// ---- chunked scan (ssm_chunk_scan), the SSD decomposition in four launches ----
//   scan_offsets:  chunk_off[s] = Σ_{i<s} ceil(len_i / Q)                      (one thread)
//   scan_chunk_state  grid (chunk, h): dt'_j, cs_j = Σ_{k≤j} dt'_k·A into the workspace and the
//                  chunk-local state Sc[p,n] = Σ_j exp(cs_last - cs_j)·dt'_j·x_j[p]·B_j[n]
//                  (16-token tiles of x and B in shared memory; 256 threads × 32 outputs).
//   scan_state_pass grid (P·N / 256, h, seq): the sequential spine over the chunks of a
//                  sequence, one thread per state element: S_enter[c] = S (written over Sc[c]),
//                  S ← exp(cs_last[c])·S + Sc[c]; chunk_states rows; final state to the pool.
//   scan_output    grid (chunk, h, Q / 16): 16 rows i of the chunk × all P:
//                  y_i = exp(cs_i)·Σ_n C_i[n]·S_enter[p,n] + Σ_{j≤i} (C_i·B_j)·exp(cs_i -
//                  cs_j)·dt'_j·x_j[p]
//                  (+ D·x_i) · silu(z_i); C rows, 16-token B / x tiles and the 16×16 decay-masked
//                  C·Bᵀ block in shared memory.
// FLOPs per token and head ≈ 2·P·N (chunk state) + 2·P·N (inter) + Q·(N + P) (intra, causal half);
// at Mamba2 shapes and Q = 256 ≈ 0.13 MFLOP, all on CUDA cores in f32. The workspace holds
// Sc / S_enter [chunks, H, P, N] f32 plus dt' and cs [chunks, H, Q].
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cuda/bulk_pipe.cuh"
#include "cuda/common.cuh"
#include "cuda/dtype.cuh"
#include "cuda/kernels.h"
#include "cuda/mma.cuh"
#include "cuda/ssm_common.cuh"
#include "cuda/wgmma.cuh"
#include "hybrid/ops/ssm.h"

namespace hybrid::cuda {

namespace {

// ---- chunked scan kernels ----------------------------------------------------------------------

constexpr int kScanThreads = 256;
constexpr int kTile = 16;     // tokens per B / x tile, rows i per output block
constexpr int kMaxPN = 8192;  // state elements per pass of scan_chunk_state (256 × 32)
constexpr int kAccState = kMaxPN / kScanThreads;
constexpr int kMaxDim = 256;  // P, N ≤ 256
constexpr int kAccOut = kTile * kMaxDim / kScanThreads;

struct ScanParams {
  SsmIn in;
  int Q = 0, seqs = 0;
  const int* cu_seqlens = nullptr;    // [seqs + 1]
  const int* slots = nullptr;         // [seqs]
  const void* has_initial = nullptr;  // [seqs] u8 | i32, or null
  DType has_initial_dt = DType::i32;
  void* state = nullptr;  // pool [slots, H, P, N], St
  DType st_dt = DType::f32;
  int64_t st_slot = 0, st_h = 0, st_p = 0;
  Arg chunk_states;  // [num_chunks, H, P, N] or null
  // Workspace.
  int* chunk_off = nullptr;  // [seqs + 1]
  float* dts = nullptr;      // [max_chunks, H, Q]: dt'
  float* css = nullptr;      // [max_chunks, H, Q]: cumulative dt'·A
  float* Sws = nullptr;      // [max_chunks, H, P, N]: Sc, then S_enter
  float* CB = nullptr;       // v3: [max_chunks, G, Q, Q]: C_i·B_j of the chunk (tiles j0 ≤ i0);
                             // bf16 at the same element offsets in v6 (HYBRID_SSM_CHUNK_CB_BF16)
  // HYBRID_SSM_CHUNK_CHAIN (v6_state_kernel's kChain): [0] the blocks' ticket counter, [1 + c·H +
  // h] set once chunk c's end state is in Sws (zeroed before the launch); Se [max_chunks, H, P, N]
  // bf16, S_enter for the output kernel.
  int* chain = nullptr;
  __nv_bfloat16* Se = nullptr;
};

__global__ void scan_offsets_kernel(const int* cu, int seqs, int Q, int* off) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  int acc = 0;
  off[0] = 0;
  for (int s = 0; s < seqs; ++s) {
    const int len = cu[s + 1] - cu[s];
    acc += (len + Q - 1) / Q;
    off[s + 1] = acc;
  }
}

// The chunk c belongs to sequence s with off[s] <= c < off[s + 1]; -1 if c is past the end.
__device__ __forceinline__ int find_seq(const int* off, int seqs, int c) {
  if (c >= off[seqs]) return -1;
  int lo = 0, hi = seqs - 1;  // off[lo] <= c, answer in [lo, hi]
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (off[mid] <= c)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

struct ChunkLoc {
  int seq, slot, t0, L;
};

__device__ __forceinline__ bool locate(const ScanParams& p, int c, ChunkLoc& loc) {
  loc.seq = find_seq(p.chunk_off, p.seqs, c);
  if (loc.seq < 0) return false;
  const int k = c - p.chunk_off[loc.seq];
  loc.t0 = p.cu_seqlens[loc.seq] + k * p.Q;
  loc.L = min(p.Q, p.cu_seqlens[loc.seq + 1] - loc.t0);
  loc.slot = p.slots[loc.seq];
  return true;
}

// Grid (max_chunks, H), 256 threads. dt', cs into the workspace; Sc[p,n] =
// Σ_j exp(cs_last - cs_j)·dt'_j · x_j[p] · B_j[n]. FLOPs 2·L·P·N; bytes L·(P + N) in, P·N·4 out.
__global__ void __launch_bounds__(kScanThreads) scan_chunk_state_kernel(const ScanParams p) {
  const int c = blockIdx.x, h = blockIdx.y, tid = threadIdx.x;
  ChunkLoc loc;
  if (!locate(p, c, loc) || loc.slot < 0) return;
  const SsmIn& in = p.in;
  const int P = in.P, N = in.N, PN = P * N, Q = p.Q, L = loc.L;
  __shared__ float dts[256], css[256];
  __shared__ float xw[kTile][kMaxDim], Bs[kTile][kMaxDim];
  const float A = in.A(h);
  for (int j = tid; j < Q; j += kScanThreads) dts[j] = j < L ? in.dt_eff(loc.t0 + j, h) : 0.0f;
  __syncthreads();
  // cs_j = Σ_{k≤j} dt'_k·A: warp 0, lane l scans Q/32 contiguous entries, then the lane totals.
  if (tid < 32) {
    const int per = Q / 32, j0 = tid * per;
    float run = 0.0f;
    for (int j = j0; j < j0 + per; ++j) {
      run += dts[j] * A;
      css[j] = run;
    }
    float incl = run;  // inclusive scan of the lane totals
    for (int o = 1; o < 32; o <<= 1) {
      const float v = __shfl_up_sync(0xffffffffu, incl, o);
      if (tid >= o) incl += v;
    }
    const float before = incl - run;
    for (int j = j0; j < j0 + per; ++j) css[j] += before;
  }
  __syncthreads();
  const int64_t wrow = (static_cast<int64_t>(c) * in.H + h) * Q;
  for (int j = tid; j < L; j += kScanThreads) {
    p.dts[wrow + j] = dts[j];
    p.css[wrow + j] = css[j];
  }
  const float cs_last = css[L - 1];
  const int g = in.group(h);
  float* Sc = p.Sws + (static_cast<int64_t>(c) * in.H + h) * PN;
  for (int o0 = 0; o0 < PN; o0 += kMaxPN) {
    float acc[kAccState];
#pragma unroll
    for (int r = 0; r < kAccState; ++r) acc[r] = 0.0f;
    for (int j0 = 0; j0 < L; j0 += kTile) {
      __syncthreads();  // the previous tile is consumed
      for (int e = tid; e < kTile * P; e += kScanThreads) {
        const int jj = e / P, pp = e % P, j = j0 + jj;
        xw[jj][pp] = j < L ? expf(cs_last - css[j]) * dts[j] * in.x_at(loc.t0 + j, h, pp) : 0.0f;
      }
      for (int e = tid; e < kTile * N; e += kScanThreads) {
        const int jj = e / N, n = e % N, j = j0 + jj;
        Bs[jj][n] =
            j < L ? load_any(in.B.p, in.B.dt, (loc.t0 + j) * in.B.s0 + g * in.B.s1 + n) : 0.0f;
      }
      __syncthreads();
#pragma unroll
      for (int r = 0; r < kAccState; ++r) {
        const int o = o0 + tid + r * kScanThreads;
        if (o < PN) {
          const int pp = o / N, n = o % N;
#pragma unroll
          for (int jj = 0; jj < kTile; ++jj) acc[r] += xw[jj][pp] * Bs[jj][n];
        }
      }
    }
#pragma unroll
    for (int r = 0; r < kAccState; ++r) {
      const int o = o0 + tid + r * kScanThreads;
      if (o < PN) Sc[o] = acc[r];
    }
  }
}

// Grid (ceil(P·N / 256), H, seqs): the spine over the chunks of one sequence, per element.
template <class St>
__global__ void __launch_bounds__(kScanThreads) scan_state_pass_kernel(const ScanParams p) {
  const int seq = blockIdx.z, h = blockIdx.y;
  const int P = p.in.P, N = p.in.N, PN = P * N, H = p.in.H, Q = p.Q;
  const int o = blockIdx.x * kScanThreads + threadIdx.x;
  if (o >= PN) return;
  const int pp = o / N, n = o % N;
  const int slot = p.slots[seq];
  const int c0 = p.chunk_off[seq], c1 = p.chunk_off[seq + 1];
  auto chunk_row = [&](int c) {
    return c * p.chunk_states.s0 + h * p.chunk_states.s1 + pp * p.chunk_states.s2 + n;
  };
  if (slot < 0) {  // padding: zero chunk_states rows, pool untouched
    if (p.chunk_states.p)
      for (int c = c0; c < c1; ++c)
        store_any(const_cast<void*>(p.chunk_states.p), p.chunk_states.dt, chunk_row(c), 0.0f);
    return;
  }
  St* pool = static_cast<St*>(p.state) + slot * p.st_slot + h * p.st_h + pp * p.st_p + n;
  const bool initial = p.has_initial && flag_at(p.has_initial, p.has_initial_dt, seq);
  float S = initial ? to_f32(*pool) : 0.0f;
  const int len = p.cu_seqlens[seq + 1] - p.cu_seqlens[seq];
  for (int c = c0; c < c1; ++c) {
    const int L = min(Q, len - (c - c0) * Q);
    const int64_t row = static_cast<int64_t>(c) * H + h;
    const float cs_last = p.css[row * Q + L - 1];
    float* w = p.Sws + row * PN + o;
    const float sc = *w;
    *w = S;  // the state entering chunk c
    S = expf(cs_last) * S + sc;
    if (p.chunk_states.p)
      store_any(const_cast<void*>(p.chunk_states.p), p.chunk_states.dt, chunk_row(c), S);
  }
  *pool = from_f32<St>(S);
}

// Grid (max_chunks, H, Q / 16), dynamic shared memory (see scan_output_smem). Rows
// i in [i0, i0 + 16) of chunk c, every p:
//   y_i[p] = exp(cs_i)·Σ_n C_i[n]·S_enter[p,n] + Σ_{j≤i} (C_i·B_j)·exp(cs_i - cs_j)·dt'_j·x_j[p]
// FLOPs per row 2·P·N (inter) + (i+1)·2·(N + P) (intra).
__global__ void __launch_bounds__(kScanThreads) scan_output_kernel(const ScanParams p) {
  const int c = blockIdx.x, h = blockIdx.y, tid = threadIdx.x;
  const int i0 = blockIdx.z * kTile;
  ChunkLoc loc;
  if (!locate(p, c, loc) || i0 >= loc.L) return;
  const SsmIn& in = p.in;
  const int P = in.P, N = in.N, PN = P * N, Q = p.Q;
  const int rows = min(kTile, loc.L - i0);
  const int outs = kTile * P;  // outputs o = i·P + p of this block (rows ≥ `rows` unused)
  if (loc.slot < 0) {          // padding: y = 0
    for (int o = tid; o < rows * P; o += kScanThreads)
      in.store_y(loc.t0 + i0 + o / P, h, o % P, 0.0f);
    return;
  }
  extern __shared__ float smem[];
  const int ldn = N + 1;         // padded rows: C·Bᵀ reads rows of Bs across lanes
  float* Cs = smem;              // [16][N + 1]
  float* Bs = Cs + kTile * ldn;  // [16][N + 1]
  float* Xs = Bs + kTile * ldn;  // [16][max(P, 16)]: x tile, or S_enter tile [n][p]
  const int ldx = max(P, kTile);
  float* M = Xs + kTile * ldx;           // [16][17]: decay-masked C·Bᵀ · dt'
  float* css = M + kTile * (kTile + 1);  // [Q]
  float* dts = css + Q;                  // [Q]
  const int64_t wrow = static_cast<int64_t>(c) * in.H + h;
  const int jmax = i0 + rows;  // tokens j < jmax feed these rows
  for (int j = tid; j < jmax; j += kScanThreads) {
    css[j] = p.css[wrow * Q + j];
    dts[j] = p.dts[wrow * Q + j];
  }
  const int g = in.group(h);
  for (int e = tid; e < kTile * N; e += kScanThreads) {
    const int ii = e / N, n = e % N;
    Cs[ii * ldn + n] =
        ii < rows ? load_any(in.C.p, in.C.dt, (loc.t0 + i0 + ii) * in.C.s0 + g * in.C.s1 + n)
                  : 0.0f;
  }
  float acc[kAccOut];
#pragma unroll
  for (int r = 0; r < kAccOut; ++r) acc[r] = 0.0f;

  // Inter-chunk: Σ_n C_i[n]·S_enter[p,n], n in tiles of 16 (Xs holds S_enter[p, n0 + nn] as
  // [nn][p]).
  const float* Se = p.Sws + wrow * PN;
  for (int n0 = 0; n0 < N; n0 += kTile) {
    __syncthreads();
    for (int e = tid; e < kTile * P; e += kScanThreads) {
      const int pp = e / kTile, nn = e % kTile;
      Xs[nn * ldx + pp] = n0 + nn < N ? Se[pp * N + n0 + nn] : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int r = 0; r < kAccOut; ++r) {
      const int o = tid + r * kScanThreads;
      if (o < outs) {
        const int ii = o / P, pp = o % P;
        const int nend = min(kTile, N - n0);
        for (int nn = 0; nn < nend; ++nn) acc[r] += Cs[ii * ldn + n0 + nn] * Xs[nn * ldx + pp];
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kAccOut; ++r) {
    const int o = tid + r * kScanThreads;
    if (o < outs && o / P < rows) acc[r] *= expf(css[i0 + o / P]);
  }

  // Intra-chunk: tiles of 16 tokens j < jmax.
  for (int j0 = 0; j0 < jmax; j0 += kTile) {
    __syncthreads();
    for (int e = tid; e < kTile * N; e += kScanThreads) {
      const int jj = e / N, n = e % N, j = j0 + jj;
      Bs[jj * ldn + n] =
          j < jmax ? load_any(in.B.p, in.B.dt, (loc.t0 + j) * in.B.s0 + g * in.B.s1 + n) : 0.0f;
    }
    for (int e = tid; e < kTile * P; e += kScanThreads) {
      const int jj = e / P, pp = e % P, j = j0 + jj;
      Xs[jj * ldx + pp] = j < jmax ? in.x_at(loc.t0 + j, h, pp) : 0.0f;
    }
    __syncthreads();
    {  // M[ii][jj] = (C_i·B_j)·exp(cs_i - cs_j)·dt'_j for j ≤ i, else 0: one entry per thread
      const int ii = tid / kTile, jj = tid % kTile, i = i0 + ii, j = j0 + jj;
      float m = 0.0f;
      if (ii < rows && j <= i) {
        float dot = 0.0f;
        for (int n = 0; n < N; ++n) dot += Cs[ii * ldn + n] * Bs[jj * ldn + n];
        m = dot * expf(css[i] - css[j]) * dts[j];
      }
      M[ii * (kTile + 1) + jj] = m;
    }
    __syncthreads();
#pragma unroll
    for (int r = 0; r < kAccOut; ++r) {
      const int o = tid + r * kScanThreads;
      if (o < outs) {
        const int ii = o / P, pp = o % P;
#pragma unroll
        for (int jj = 0; jj < kTile; ++jj) acc[r] += M[ii * (kTile + 1) + jj] * Xs[jj * ldx + pp];
      }
    }
  }

  const float D_h = in.D_skip(h);
#pragma unroll
  for (int r = 0; r < kAccOut; ++r) {
    const int o = tid + r * kScanThreads;
    if (o < outs && o / P < rows) {
      const int ii = o / P, pp = o % P;
      const int64_t t = loc.t0 + i0 + ii;
      in.store_y(t, h, pp, in.finish(acc[r], D_h, in.x_at(t, h, pp), t, h, pp));
    }
  }
}

size_t scan_output_smem(int P, int N, int Q) {
  return sizeof(float) *
         (2 * kTile * (N + 1) + kTile * std::max(P, kTile) + kTile * (kTile + 1) + 2 * Q);
}

// ---- chunked scan, tiled variant (P = 64, N % 64 == 0) ---------------------------------------
// The same decomposition as above, with every product done as a 64 × 64 output tile per block
// (256 threads, a 4 × 4 register micro-tile each, k staged 32 at a time in shared memory), and
// C·Bᵀ computed once per (chunk, group) instead of once per head:
//   scan_dt        grid (chunk, h), one warp: dt', cs into the workspace
//   scan_cb        grid (chunk, g, (Q/64)² tiles, lower half): CB[c,g,i,j] = C_i·B_j   (f32, ws)
//   scan_state_t   grid (chunk, h, N/64): Sc[p, n-tile] = Σ_j (w_j·x_j[p])·B_j[n]
//   scan_state_pass (shared with the general path)
//   scan_out_t     grid (chunk, h, Q/64): y rows i-tile × P = exp(cs_i)·C_i·S_enterᵀ +
//                  Σ_{j≤i} (CB[i,j]·exp(cs_i - cs_j)·dt'_j)·x_j   (+ D·x, gate)
// FLOPs per token and head: 2·P·N (state) + 2·P·N (inter) + ≈ Q·P (intra) + per group Q·N (CB);
// FMA-bound on CUDA cores (each staged element feeds 64 FMAs; 2 LDS.128 per 16 FMAs).
constexpr int kFT = 64;   // output tile edge
constexpr int kFK = 32;   // k per shared-memory stage
constexpr int kFLd = 68;  // padded row (floats; 16-byte aligned rows, 4-way conflicts on stores)

struct FTile {
  __align__(16) float a[kFK][kFLd];  // a[k][row]
  __align__(16) float b[kFK][kFLd];  // b[k][col]
};

// acc[r][c] += Σ_k a[k][ty·4 + r] · b[k][tx·4 + c]
__device__ __forceinline__ void tile_fma(const FTile& s, float (&acc)[4][4], int tx, int ty) {
#pragma unroll 8
  for (int k = 0; k < kFK; ++k) {
    const float4 a = *reinterpret_cast<const float4*>(&s.a[k][ty * 4]);
    const float4 b = *reinterpret_cast<const float4*>(&s.b[k][tx * 4]);
    const float av[4] = {a.x, a.y, a.z, a.w}, bv[4] = {b.x, b.y, b.z, b.w};
#pragma unroll
    for (int r = 0; r < 4; ++r)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[r][c] += av[r] * bv[c];
  }
}

// dst[kk][cc] = f(kk, cc) for kk < 32, cc < 64. k_fast: consecutive threads take consecutive kk
// (the source is contiguous along k), else consecutive cc.
template <class F>
__device__ __forceinline__ void stage(float (*dst)[kFLd], bool k_fast, F&& f) {
  for (int e = threadIdx.x; e < kFK * kFT; e += kScanThreads) {
    const int kk = k_fast ? e % kFK : e / kFT;
    const int cc = k_fast ? e / kFK : e % kFT;
    dst[kk][cc] = f(kk, cc);
  }
}

// Grid (max_chunks, ceil(H / 8)), 8 warps: warp w the head h = 8·blockIdx.y + w; dt'_j and
// cs_j = Σ_{k≤j} dt'_k·A for j < L into p.dts / p.css [chunk][h][Q]. Lane l sums its Q/32
// contiguous entries j0 = l·Q/32.., then the lane totals are scanned (dt_eff's arithmetic). A
// lane's loads (its dt, dt_bias, A_log) go out together as raw bits (raw_any) and are converted
// once all are in flight, and the 8 heads of a block read the same 32-byte sectors of dt [T][H].
// The results leave through shared memory (the warp's 2 × Q floats, a pad word every 32 so that
// neither side conflicts) as coalesced rows, lane l the entries l + 32k. Stored straight from the
// lanes' contiguous entries, each store instruction of a warp wrote 4 bytes into 32 different
// sectors (~2.7 M sector writes at Mamba2 1 x 16384 against ~0.33 M): 32.5 µs under ncu at that
// shape, 13.4 µs staged (session 26 run 1; the whole call 691 -> 670 µs). The loads issued
// together, 8 heads a block or one a block, did not move it (session 25 runs 4, 7, 8).
constexpr int kDtHeads = 8;
__global__ void __launch_bounds__(32 * kDtHeads) scan_dt_kernel(const ScanParams p) {
  constexpr int kPadded = 256 + 256 / 32;         // one head's Q entries, a pad word every 32
  __shared__ float staged[kDtHeads][2][kPadded];  // dt', cs
  const int c = blockIdx.x, w = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int h = blockIdx.y * kDtHeads + w;
  ChunkLoc loc;
  if (h >= p.in.H || !locate(p, c, loc) || loc.slot < 0) return;
  const SsmIn& in = p.in;
  const int Q = p.Q, per = Q / 32, j0 = lane * per;
  const bool has_bias = in.dt_bias.p != nullptr;
  const uint32_t a_raw = raw_any(in.A_log.p, in.A_log.dt, h * in.A_log.s0);
  const uint32_t bias_raw = has_bias ? raw_any(in.dt_bias.p, in.dt_bias.dt, h * in.dt_bias.s0) : 0;
  uint32_t dt_raw[8];
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    const int j = j0 + k;
    dt_raw[k] = k < per && j < loc.L ? raw_any(in.dt.p, in.dt.dt, (loc.t0 + j) * in.dt.s0 + h) : 0;
  }
  const float A = -expf(float_of_raw(in.A_log.dt, a_raw));  // in.A(h)
  const float bias = float_of_raw(in.dt_bias.dt, bias_raw);
  float v[8];
#pragma unroll
  for (int k = 0; k < 8; ++k) {  // in.dt_eff(t0 + j, h)
    float d = float_of_raw(in.dt.dt, dt_raw[k]);
    if (has_bias) d += bias;
    v[k] = k < per && j0 + k < loc.L ? in.dt_finish(d) : 0.0f;
  }
  float cs[8];
  float run = 0.0f;
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    run += v[k] * A;
    cs[k] = run;
  }
  float incl = run;
  for (int o = 1; o < 32; o <<= 1) {
    const float u = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += u;
  }
  const float before = incl - run;
  const int64_t row = (static_cast<int64_t>(c) * in.H + h) * Q;
  // Entry j at j + j/32: lane l's writes (8l + k at Q 256) and reads (l + 32k) each hit 32 banks.
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    const int j = j0 + k;
    if (k < per) staged[w][0][j + j / 32] = v[k], staged[w][1][j + j / 32] = cs[k] + before;
  }
  __syncwarp();
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    const int j = lane + 32 * k;
    if (k < per && j < loc.L) {
      p.dts[row + j] = staged[w][0][j + k];  // j / 32 == k
      p.css[row + j] = staged[w][1][j + k];
    }
  }
}

// scan_dt_kernel over every (chunk, head).
void launch_scan_dt(const ScanParams& p, unsigned chunks, unsigned heads, cudaStream_t stream) {
  const dim3 grid(chunks, (heads + kDtHeads - 1) / kDtHeads);
  scan_dt_kernel<<<grid, 32 * kDtHeads, 0, stream>>>(p);
  HYBRID_CUDA_CHECK_LAUNCH();
}

// Grid (max_chunks, G, (Q/64)²): tile (ti, tj) of CB[c, g] = C·Bᵀ over the chunk, tj ≤ ti.
// FLOPs 2·64·64·N per tile.
__global__ void __launch_bounds__(kScanThreads) scan_cb_kernel(const ScanParams p, float* CB) {
  const int c = blockIdx.x, g = blockIdx.y, nt = p.Q / kFT;
  const int ti = blockIdx.z / nt, tj = blockIdx.z % nt;
  ChunkLoc loc;
  if (tj > ti || !locate(p, c, loc) || loc.slot < 0 || ti * kFT >= loc.L) return;
  const SsmIn& in = p.in;
  const int i0 = ti * kFT, j0 = tj * kFT, L = loc.L, Q = p.Q;
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  __shared__ FTile s;
  float acc[4][4] = {};
  for (int k0 = 0; k0 < in.N; k0 += kFK) {
    __syncthreads();
    stage(s.a, true, [&](int kk, int ii) {
      const int i = i0 + ii;
      return i < L ? load_any(in.C.p, in.C.dt, (loc.t0 + i) * in.C.s0 + g * in.C.s1 + k0 + kk)
                   : 0.0f;
    });
    stage(s.b, true, [&](int kk, int jj) {
      const int j = j0 + jj;
      return j < L ? load_any(in.B.p, in.B.dt, (loc.t0 + j) * in.B.s0 + g * in.B.s1 + k0 + kk)
                   : 0.0f;
    });
    __syncthreads();
    tile_fma(s, acc, tx, ty);
  }
  float* out = CB + (static_cast<int64_t>(c) * in.G + g) * Q * Q;
#pragma unroll
  for (int r = 0; r < 4; ++r)
    *reinterpret_cast<float4*>(out + (i0 + ty * 4 + r) * Q + j0 + tx * 4) =
        make_float4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]);
}

// Grid (max_chunks, H, N/64): Sc[p, n0 + ·] = Σ_j (exp(cs_last - cs_j)·dt'_j·x_j[p])·B_j[n].
// P = 64. FLOPs 2·L·64·64 per block.
__global__ void __launch_bounds__(kScanThreads) scan_state_t_kernel(const ScanParams p) {
  const int c = blockIdx.x, h = blockIdx.y, n0 = blockIdx.z * kFT;
  ChunkLoc loc;
  if (!locate(p, c, loc) || loc.slot < 0) return;
  const SsmIn& in = p.in;
  const int L = loc.L, Q = p.Q, N = in.N, g = in.group(h);
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int64_t row = static_cast<int64_t>(c) * in.H + h;
  __shared__ FTile s;
  __shared__ float w[256];
  const float cs_last = p.css[row * Q + L - 1];
  for (int j = threadIdx.x; j < L; j += kScanThreads)
    w[j] = expf(cs_last - p.css[row * Q + j]) * p.dts[row * Q + j];
  float acc[4][4] = {};
  for (int j0 = 0; j0 < L; j0 += kFK) {
    __syncthreads();  // w is written / the previous stage is consumed
    stage(s.a, false, [&](int kk, int pp) {
      const int j = j0 + kk;
      return j < L ? w[j] * in.x_at(loc.t0 + j, h, pp) : 0.0f;
    });
    stage(s.b, false, [&](int kk, int nn) {
      const int j = j0 + kk;
      return j < L ? load_any(in.B.p, in.B.dt, (loc.t0 + j) * in.B.s0 + g * in.B.s1 + n0 + nn)
                   : 0.0f;
    });
    __syncthreads();
    tile_fma(s, acc, tx, ty);
  }
  float* Sc = p.Sws + row * kFT * N;
#pragma unroll
  for (int r = 0; r < 4; ++r)
    *reinterpret_cast<float4*>(Sc + (ty * 4 + r) * N + n0 + tx * 4) =
        make_float4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]);
}

// Grid (max_chunks, H, Q/64): rows [i0, i0 + 64) of the chunk × all 64 p. FLOPs per block
// 2·64·64·N (inter) + 2·64·64·(i0 + 64) (intra).
__global__ void __launch_bounds__(kScanThreads)
    scan_out_t_kernel(const ScanParams p, const float* CB) {
  const int c = blockIdx.x, h = blockIdx.y, i0 = blockIdx.z * kFT;
  ChunkLoc loc;
  if (!locate(p, c, loc) || i0 >= loc.L) return;
  const SsmIn& in = p.in;
  const int L = loc.L, Q = p.Q, N = in.N, g = in.group(h);
  const int rows = min(kFT, L - i0), jmax = i0 + rows;
  if (loc.slot < 0) {  // padding: y = 0
    for (int o = threadIdx.x; o < rows * kFT; o += kScanThreads)
      in.store_y(loc.t0 + i0 + o / kFT, h, o % kFT, 0.0f);
    return;
  }
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  const int64_t row = static_cast<int64_t>(c) * in.H + h;
  __shared__ FTile s;
  __shared__ float cs_s[256], dt_s[256];
  for (int j = threadIdx.x; j < jmax; j += kScanThreads) {
    cs_s[j] = p.css[row * Q + j];
    dt_s[j] = p.dts[row * Q + j];
  }
  float acc[4][4] = {};
  // Inter-chunk: Σ_n C_i[n]·S_enter[p, n].
  const float* Se = p.Sws + row * kFT * N;
  for (int k0 = 0; k0 < N; k0 += kFK) {
    __syncthreads();
    stage(s.a, true, [&](int kk, int ii) {
      return ii < rows
                 ? load_any(in.C.p, in.C.dt, (loc.t0 + i0 + ii) * in.C.s0 + g * in.C.s1 + k0 + kk)
                 : 0.0f;
    });
    stage(s.b, true, [&](int kk, int pp) { return Se[pp * N + k0 + kk]; });
    __syncthreads();
    tile_fma(s, acc, tx, ty);
  }
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int ii = ty * 4 + r;
    const float d = ii < rows ? expf(cs_s[i0 + ii]) : 0.0f;
#pragma unroll
    for (int q = 0; q < 4; ++q) acc[r][q] *= d;
  }
  // Intra-chunk: Σ_{j≤i} (CB[i,j]·exp(cs_i - cs_j)·dt'_j)·x_j[p].
  const float* cb = CB + (static_cast<int64_t>(c) * in.G + g) * Q * Q;
  for (int j0 = 0; j0 < jmax; j0 += kFK) {
    __syncthreads();
    stage(s.a, true, [&](int kk, int ii) {
      const int i = i0 + ii, j = j0 + kk;
      return (ii < rows && j <= i) ? cb[i * Q + j] * expf(cs_s[i] - cs_s[j]) * dt_s[j] : 0.0f;
    });
    stage(s.b, false, [&](int kk, int pp) {
      const int j = j0 + kk;
      return j < jmax ? in.x_at(loc.t0 + j, h, pp) : 0.0f;
    });
    __syncthreads();
    tile_fma(s, acc, tx, ty);
  }
  const float D_h = in.D_skip(h);
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int ii = ty * 4 + r;
    if (ii >= rows) continue;
    const int64_t t = loc.t0 + i0 + ii;
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int pp = tx * 4 + q;
      in.store_y(t, h, pp, in.finish(acc[r][q], D_h, in.x_at(t, h, pp), t, h, pp));
    }
  }
}

// ---- output tile on tensor cores (y bf16) ---------------------------------------------------
// scan_out_t with both products as bf16 mma.sync m16n8k16 (f32 accumulate), from the same
// f32 shared-memory stages (rounded to bf16 when the fragments are built). 8 warps: warp w owns
// rows (w % 4)·16 .. +16 and columns (w / 4)·32 .. +32 of the 64 × 64 tile (4 n-blocks of 8).
// Accumulator layout (PTX m16n8k16, f32 C/D): element e of n-block nb is row lane/4 (+8 for
// e ≥ 2), column nb·8 + (lane % 4)·2 + (e & 1). Used only when y is bf16: C·S_enter and the
// decay-masked C·Bᵀ are rounded to bf16 (as mamba_ssm's Triton kernel does), which the bf16
// tolerance of y absorbs; the states (chunk_states, pool) stay f32 CUDA-core sums.

// acc[nb][e] += Σ_k a[k][row]·b[k][col] over the stage's 32 k, bf16 inputs.
__device__ __forceinline__ void tile_mma(const FTile& s, float (&acc)[4][4], int warp, int lane) {
  const int r0 = (warp % 4) * 16 + lane / 4, c0 = (warp / 4) * 32 + lane / 4;
  const int kq = (lane % 4) * 2;
#pragma unroll
  for (int k16 = 0; k16 < kFK; k16 += 16) {
    const int k = k16 + kq;
    const uint32_t a0 = pack_bf16(s.a[k][r0], s.a[k + 1][r0]);
    const uint32_t a1 = pack_bf16(s.a[k][r0 + 8], s.a[k + 1][r0 + 8]);
    const uint32_t a2 = pack_bf16(s.a[k + 8][r0], s.a[k + 9][r0]);
    const uint32_t a3 = pack_bf16(s.a[k + 8][r0 + 8], s.a[k + 9][r0 + 8]);
#pragma unroll
    for (int nb = 0; nb < 4; ++nb) {
      const int cc = c0 + nb * 8;
      const uint32_t b0 = pack_bf16(s.b[k][cc], s.b[k + 1][cc]);
      const uint32_t b1 = pack_bf16(s.b[k + 8][cc], s.b[k + 9][cc]);
      const uint32_t a[4] = {a0, a1, a2, a3};
      mma_bf16(acc[nb], a, b0, b1);
    }
  }
}

// Grid (max_chunks, H, Q/64), as scan_out_t.
__global__ void __launch_bounds__(kScanThreads)
    scan_out_mma_kernel(const ScanParams p, const float* CB) {
  const int c = blockIdx.x, h = blockIdx.y, i0 = blockIdx.z * kFT;
  ChunkLoc loc;
  if (!locate(p, c, loc) || i0 >= loc.L) return;
  const SsmIn& in = p.in;
  const int L = loc.L, Q = p.Q, N = in.N, g = in.group(h);
  const int rows = min(kFT, L - i0), jmax = i0 + rows;
  if (loc.slot < 0) {  // padding: y = 0
    for (int o = threadIdx.x; o < rows * kFT; o += kScanThreads)
      in.store_y(loc.t0 + i0 + o / kFT, h, o % kFT, 0.0f);
    return;
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(c) * in.H + h;
  __shared__ FTile s;
  __shared__ float cs_s[256], dt_s[256];
  for (int j = threadIdx.x; j < jmax; j += kScanThreads) {
    cs_s[j] = p.css[row * Q + j];
    dt_s[j] = p.dts[row * Q + j];
  }
  float acc[4][4] = {};
  // Inter-chunk: Σ_n C_i[n]·S_enter[p, n].
  const float* Se = p.Sws + row * kFT * N;
  for (int k0 = 0; k0 < N; k0 += kFK) {
    __syncthreads();
    stage(s.a, true, [&](int kk, int ii) {
      return ii < rows
                 ? load_any(in.C.p, in.C.dt, (loc.t0 + i0 + ii) * in.C.s0 + g * in.C.s1 + k0 + kk)
                 : 0.0f;
    });
    stage(s.b, true, [&](int kk, int pp) { return Se[pp * N + k0 + kk]; });
    __syncthreads();
    tile_mma(s, acc, warp, lane);
  }
  const int r_lo = (warp % 4) * 16 + lane / 4;  // this lane's rows r_lo and r_lo + 8
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const int ii = r_lo + (e >= 2 ? 8 : 0);
    const float d = ii < rows ? expf(cs_s[i0 + ii]) : 0.0f;
#pragma unroll
    for (int nb = 0; nb < 4; ++nb) acc[nb][e] *= d;
  }
  // Intra-chunk: Σ_{j≤i} (CB[i,j]·exp(cs_i - cs_j)·dt'_j)·x_j[p].
  const float* cb = CB + (static_cast<int64_t>(c) * in.G + g) * Q * Q;
  for (int j0 = 0; j0 < jmax; j0 += kFK) {
    __syncthreads();
    stage(s.a, true, [&](int kk, int ii) {
      const int i = i0 + ii, j = j0 + kk;
      return (ii < rows && j <= i) ? cb[i * Q + j] * expf(cs_s[i] - cs_s[j]) * dt_s[j] : 0.0f;
    });
    stage(s.b, false, [&](int kk, int pp) {
      const int j = j0 + kk;
      return j < jmax ? in.x_at(loc.t0 + j, h, pp) : 0.0f;
    });
    __syncthreads();
    tile_mma(s, acc, warp, lane);
  }
  const float D_h = in.D_skip(h);
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const int ii = r_lo + (e >= 2 ? 8 : 0);
    if (ii >= rows) continue;
    const int64_t t = loc.t0 + i0 + ii;
#pragma unroll
    for (int nb = 0; nb < 4; ++nb) {
      const int pp = (warp / 4) * 32 + nb * 8 + (lane % 4) * 2 + (e & 1);
      in.store_y(t, h, pp, in.finish(acc[nb][e], D_h, in.x_at(t, h, pp), t, h, pp));
    }
  }
}

// ---- v2: the SSD on tensor cores (P = 64; bf16 x, B, C, y with 16-byte aligned rows) -------
// Every product is bf16 mma.sync m16n8k16 (f32 accumulate) with ldmatrix fragments from padded
// bf16 shared memory; ldmatrix.trans gives the transposed operands (x and B are stored as they
// lie in memory, token-major). Four launches:
//   scan_offsets  (shared with v1)
//   v2_state  grid (H, chunk), 8 warps: dt', cs (warp scan) into the workspace, then
//             Sc[p, n] = Σ_j (w_j·x_j[p])·B_j[n], w_j = exp(cs_last - cs_j)·dt'_j: M = P (4 warps
//             × 16 rows), N split in two halves over the warp pairs, K = the chunk's tokens in
//             64-token stages. w·x is split into bf16 hi + lo (two MMAs), so Sc keeps ~2⁻¹⁶
//             relative error: the states (pool, chunk_states) are f32 results.
//   v2_pass   grid (P·N / 1024, H, seq): the spine, 4 state elements per thread: S_enter[c] as
//             bf16 (the output kernel's operand), S ← exp(cs_last)·S + Sc[c], chunk_states, pool.
//   v2_out    grid (H · Q/64, chunk), 4 warps × 16 rows i, tiles staged with cp.async (the next B
//             and x tiles load while the current ones are used): acc = exp(cs_i)·C_i·S_enterᵀ, then
//             per 64-token j tile up to the diagonal, flash-attention shaped: S = C·B_jᵀ into
//             registers, S ⊙ exp(cs_i - cs_j)·dt'_j (j ≤ i) rounded to bf16 and used straight as
//             the A fragments of acc += S·X_j (the accumulator layout of m16n8 is the A layout of
//             k16). No C·Bᵀ workspace. Epilogue: + D·x, · silu(z), bf16 pairs.
// v3 (cuda_v3): scan_dt (chunk, h) writes dt', cs first and v2_state<N, kPre> reads them with all
// warps; v3_cb (G · tiles, chunk) writes C·Bᵀ [chunks, G, Q, Q] f32 once per group (lower 64×64
// tiles) right before v3_out<N>, which reads each tile instead of recomputing it per head (half
// of v2_out's MMAs at N = 128); same values as v2's in-register product.
// Rounding: the y path rounds S_enter and the masked C·Bᵀ to bf16 (as mamba_ssm does) and uses the
// fast exp for the decays (relative error ~1e-6 over the chunk's range); y is bf16.
constexpr int kV2P = 64;   // head dim P
constexpr int kV2J = 64;   // tokens per j stage; rows i per output block
constexpr int kV2Pad = 8;  // bf16 row padding (16 B): the 8 rows of an ldmatrix hit 8 bank groups
constexpr int kV2StateThreads = 256, kV2OutThreads = 128, kV2PassThreads = 256;
using bf16 = __nv_bfloat16;

// Fragment addresses (lane l, r = l & 7, sel = (l >> 3) & 1, hi = l >> 4), for a tile at
// (row0, col0) of a row-major bf16 array with leading dimension ld:
//   A [m][k], no trans:  (m0 + r + 8·sel, k0 + 8·hi)  -> a0..a3
//   A stored [k][m]:     (k0 + r + 8·hi, m0 + 8·sel)  with .trans -> a0..a3
//   B stored [n][k]:     (n0 + r + 8·hi, k0 + 8·sel)  -> b0, b1 of n8 block n0, b0, b1 of n0 + 8
//   B stored [k][n]:     (k0 + r + 8·sel, n0 + 8·hi)  with .trans -> the same
struct Lane {
  int r, sel, hi;
  __device__ explicit Lane(int lane) : r(lane & 7), sel((lane >> 3) & 1), hi(lane >> 4) {}
};

__device__ __forceinline__ uint4 zero4() {
  return make_uint4(0u, 0u, 0u, 0u);
}
__device__ __forceinline__ uint4 ld16(const bf16* p) {
  return *reinterpret_cast<const uint4*>(p);
}
__device__ __forceinline__ void st16(bf16* p, uint4 v) {
  *reinterpret_cast<uint4*>(p) = v;
}

// Dynamic shared memory of v2_state: x·w hi and lo [64 j][P + 8], B [64 j][N + 8] (bf16), then
// dt', cs and w [256] (f32).
size_t v2_state_smem(int N) {
  return sizeof(bf16) * (2 * kV2J * (kV2P + kV2Pad) + kV2J * (N + kV2Pad)) +
         sizeof(float) * 3 * 256;
}

// Grid (H, max_chunks), 256 threads. NB = n8 blocks per warp (N / 16). kPre (v3): dt' and cs were
// written by scan_dt_kernel (the same arithmetic, so the same values); every thread reads one
// token's instead of warp 0 computing the chunk's while the other 7 warps wait.
template <int N, bool kPre = false>
__global__ void __launch_bounds__(kV2StateThreads) v2_state_kernel(const ScanParams p) {
  constexpr int NB = N / 16, ldx = kV2P + kV2Pad, ldb = N + kV2Pad;
  const int h = blockIdx.x, c = blockIdx.y, tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  ChunkLoc loc;
  if (!locate(p, c, loc) || loc.slot < 0) return;
  const SsmIn& in = p.in;
  const int Q = p.Q, L = loc.L, g = in.group(h);
  extern __shared__ __align__(16) unsigned char v2_smem[];
  bf16* xh = reinterpret_cast<bf16*>(v2_smem);  // [64 j][ldx]: bf16(w_j·x_j[p])
  bf16* xl = xh + kV2J * ldx;                   // [64 j][ldx]: the remainder, rounded
  bf16* bs = xl + kV2J * ldx;                   // [64 j][ldb]: B_j[n]
  float* cs_s = reinterpret_cast<float*>(bs + kV2J * ldb);
  float* w_s = cs_s + 256;

  // dt'_j, cs_j = Σ_{k≤j} dt'_k·A (warp 0: lane l scans Q/32 contiguous entries, then the lane
  // totals), w_j = exp(cs_last - cs_j)·dt'_j (0 past the chunk's end).
  if constexpr (kPre) {
    const int64_t row = (static_cast<int64_t>(c) * in.H + h) * Q;
    const float cs_last = p.css[row + L - 1];
    for (int j = tid; j < Q; j += kV2StateThreads)
      w_s[j] = j < L ? expf(cs_last - p.css[row + j]) * p.dts[row + j] : 0.0f;
  } else if (warp == 0) {
    const int per = Q / 32, j0 = lane * per;
    const float A = in.A(h);
    float v[8], cs[8], run = 0.0f;
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const int j = j0 + k;
      v[k] = (k < per && j < L) ? in.dt_eff(loc.t0 + j, h) : 0.0f;
      run += v[k] * A;
      cs[k] = run;
    }
    float incl = run;
    for (int o = 1; o < 32; o <<= 1) {
      const float u = __shfl_up_sync(0xffffffffu, incl, o);
      if (lane >= o) incl += u;
    }
    const float before = incl - run;
    const int64_t row = (static_cast<int64_t>(c) * in.H + h) * Q;
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const int j = j0 + k;
      if (k < per) cs_s[j] = cs[k] + before;
      if (k < per && j < L) {
        p.dts[row + j] = v[k];
        p.css[row + j] = cs[k] + before;
      }
    }
    __syncwarp();
    const float cs_last = cs_s[L - 1];
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      const int j = j0 + k;
      if (k < per) w_s[j] = j < L ? expf(cs_last - cs_s[j]) * v[k] : 0.0f;
    }
  }

  const bf16* X = static_cast<const bf16*>(in.x.p);
  const bf16* Bg = static_cast<const bf16*>(in.B.p);
  const int wm = warp % 4, wn = warp / 4;  // rows p [16·wm, +16), columns n [wn·N/2, +N/2)
  const Lane ln(lane);
  float acc[NB][4] = {};
  for (int j0 = 0; j0 < L; j0 += kV2J) {
    __syncthreads();  // w_s written (first stage) / the previous stage consumed
    for (int e = tid; e < kV2J * kV2P / 8; e += kV2StateThreads) {
      const int jj = e / (kV2P / 8), p8 = (e % (kV2P / 8)) * 8, j = j0 + jj;
      uint4 hi = zero4(), lo = zero4();
      if (j < L) {
        const uint4 raw = ld16(X + (loc.t0 + j) * in.x.s0 + h * in.x.s1 + p8);
        const __nv_bfloat162* xv = reinterpret_cast<const __nv_bfloat162*>(&raw);
        __nv_bfloat162* hv = reinterpret_cast<__nv_bfloat162*>(&hi);
        __nv_bfloat162* lv = reinterpret_cast<__nv_bfloat162*>(&lo);
        const float wj = w_s[j];
#pragma unroll
        for (int q = 0; q < 4; ++q) {
          const float2 f = __bfloat1622float2(xv[q]);
          const float a = wj * f.x, b = wj * f.y;
          hv[q] = __floats2bfloat162_rn(a, b);
          const float2 hf = __bfloat1622float2(hv[q]);
          lv[q] = __floats2bfloat162_rn(a - hf.x, b - hf.y);
        }
      }
      st16(xh + jj * ldx + p8, hi);
      st16(xl + jj * ldx + p8, lo);
    }
    for (int e = tid; e < kV2J * N / 8; e += kV2StateThreads) {
      const int jj = e / (N / 8), n8 = (e % (N / 8)) * 8, j = j0 + jj;
      st16(bs + jj * ldb + n8,
           j < L ? ld16(Bg + (loc.t0 + j) * in.B.s0 + g * in.B.s1 + n8) : zero4());
    }
    __syncthreads();
#pragma unroll
    for (int k0 = 0; k0 < kV2J; k0 += 16) {
      if (j0 + k0 < L) {  // rows past the end are zeros: skip their MMAs
        uint32_t ah[4], al[4];
        const int xo = (k0 + ln.r + 8 * ln.hi) * ldx + wm * 16 + 8 * ln.sel;
        ldmatrix_x4_trans(ah, xh + xo);
        ldmatrix_x4_trans(al, xl + xo);
#pragma unroll
        for (int nb = 0; nb < NB; nb += 2) {
          uint32_t b[4];
          ldmatrix_x4_trans(
              b, bs + (k0 + ln.r + 8 * ln.sel) * ldb + wn * (N / 2) + nb * 8 + 8 * ln.hi);
          mma_bf16(acc[nb], ah, b[0], b[1]);
          mma_bf16(acc[nb], al, b[0], b[1]);
          mma_bf16(acc[nb + 1], ah, b[2], b[3]);
          mma_bf16(acc[nb + 1], al, b[2], b[3]);
        }
      }
    }
  }
  // Sc [P][N] f32: accumulator element e of n8 block nb is row lane/4 (+8 for e ≥ 2), column
  // nb·8 + (lane % 4)·2 + (e & 1).
  float* Sc = p.Sws + (static_cast<int64_t>(c) * in.H + h) * kV2P * N;
  const int pr = wm * 16 + lane / 4;
#pragma unroll
  for (int nb = 0; nb < NB; ++nb) {
    const int n = wn * (N / 2) + nb * 8 + (lane % 4) * 2;
    *reinterpret_cast<float2*>(Sc + pr * N + n) = make_float2(acc[nb][0], acc[nb][1]);
    *reinterpret_cast<float2*>(Sc + (pr + 8) * N + n) = make_float2(acc[nb][2], acc[nb][3]);
  }
}

// Grid (ceil(P·N / 1024), H, seqs), 256 threads × 4 consecutive state elements: the spine over
// the chunks of one sequence. Reads Sc (f32), writes S_enter (bf16), chunk_states, the pool.
// kEmptyOnly (under the chained state kernel, which does the rest): only the zero-length
// sequences, whose pools are rewritten (0 without has_initial) and which have no chunk.
template <class St, bool kEmptyOnly = false>
__global__ void __launch_bounds__(kV2PassThreads) v2_pass_kernel(const ScanParams p, bf16* Se) {
  const int seq = blockIdx.z, h = blockIdx.y;
  const int N = p.in.N, PN = kV2P * N, H = p.in.H, Q = p.Q;
  const int o = (blockIdx.x * kV2PassThreads + threadIdx.x) * 4;
  if (o >= PN) return;
  const int pp = o / N, n = o % N;  // N % 16 == 0: the 4 elements share the row pp
  const int slot = p.slots[seq];
  const int c0 = p.chunk_off[seq], c1 = p.chunk_off[seq + 1];
  if (kEmptyOnly && c1 > c0) return;
  const Arg& cst = p.chunk_states;
  auto chunk_row = [&](int c) { return c * cst.s0 + h * cst.s1 + pp * cst.s2 + n; };
  if (slot < 0) {  // padding: zero chunk_states rows, pool untouched
    if (cst.p)
      for (int c = c0; c < c1; ++c)
        for (int q = 0; q < 4; ++q)
          store_any(const_cast<void*>(cst.p), cst.dt, chunk_row(c) + q, 0.0f);
    return;
  }
  St* pool = static_cast<St*>(p.state) + slot * p.st_slot + h * p.st_h + pp * p.st_p + n;
  const bool initial = p.has_initial && flag_at(p.has_initial, p.has_initial_dt, seq);
  float S[4];
#pragma unroll
  for (int q = 0; q < 4; ++q) S[q] = initial ? to_f32(pool[q]) : 0.0f;
  const int len = p.cu_seqlens[seq + 1] - p.cu_seqlens[seq];
  // Chunks in batches of kAhead: their Sc and cs_last loads are issued together (they do not
  // depend on S), so the chain waits for one memory round trip per batch, not per chunk.
  constexpr int kAhead = 8;
  for (int cb = c0; cb < c1; cb += kAhead) {
    float4 sc[kAhead];
    float decay[kAhead];
#pragma unroll
    for (int k = 0; k < kAhead; ++k) {
      const int c = cb + k;
      if (c < c1) {
        const int L = min(Q, len - (c - c0) * Q);
        const int64_t row = static_cast<int64_t>(c) * H + h;
        decay[k] = expf(__ldg(p.css + row * Q + L - 1));
        sc[k] = __ldg(reinterpret_cast<const float4*>(p.Sws + row * PN + o));
      }
    }
#pragma unroll
    for (int k = 0; k < kAhead; ++k) {
      const int c = cb + k;
      if (c >= c1) break;
      const int64_t row = static_cast<int64_t>(c) * H + h;
      const __nv_bfloat162 enter[2] = {__floats2bfloat162_rn(S[0], S[1]),
                                       __floats2bfloat162_rn(S[2], S[3])};
      *reinterpret_cast<uint2*>(Se + row * PN + o) = *reinterpret_cast<const uint2*>(enter);
      S[0] = decay[k] * S[0] + sc[k].x;
      S[1] = decay[k] * S[1] + sc[k].y;
      S[2] = decay[k] * S[2] + sc[k].z;
      S[3] = decay[k] * S[3] + sc[k].w;
      if (cst.p)
#pragma unroll
        for (int q = 0; q < 4; ++q)
          store_any(const_cast<void*>(cst.p), cst.dt, chunk_row(c) + q, S[q]);
    }
  }
#pragma unroll
  for (int q = 0; q < 4; ++q) pool[q] = from_f32<St>(S[q]);
}

// Dynamic shared memory of v2_out: C rows and the B tile [64][N + 8] (S_enter [64 p][N + 8] shares
// the B tile's space: it is consumed before the first j tile), x tile [64][P + 8] (bf16), cs and
// dt' [256] (f32). N = 128: 46 KiB, so 4 blocks (16 warps) per SM with 126 registers.
size_t v2_out_smem(int N) {
  return sizeof(bf16) * (2 * kV2J * (N + kV2Pad) + kV2J * (kV2P + kV2Pad)) +
         sizeof(float) * 2 * 256;
}

// v3: the C·Bᵀ tile [64 i][64 j] f32 in the B tile's space, rows of kCBLd floats (72: the float2
// fragment reads of a half warp, 4 rows × 4 column pairs, hit 32 distinct banks).
constexpr int kCBLd = 72;
size_t v3_out_smem(int N) {
  const size_t b_space = std::max(sizeof(bf16) * kV2J * (N + kV2Pad), sizeof(float) * kV2J * kCBLd);
  return sizeof(bf16) * (kV2J * (N + kV2Pad) + kV2J * (kV2P + kV2Pad)) + b_space +
         sizeof(float) * 2 * 256;
}

// Rows [i0, i0 + 64) of chunk c, head h, every p (grid (H · Q/64, max_chunks), 128 threads).
// kN = 0: N from the arguments (v2); kN = 64 / 128 / 256: N known when compiled (v3), so the k
// loops over N unroll and the tile-load index math divides by constants. kCB (v3): the C·Bᵀ
// tiles come from p.CB (v3_cb_kernel, once per group) instead of being recomputed per head: the
// B tile load becomes a load of the f32 C·Bᵀ tile, and its 64-MMA product per warp a 16-float2
// read of this lane's accumulator positions.
template <int kN, bool kCB>
__device__ __forceinline__ void out_body(const ScanParams& p, const bf16* Se) {
  const int nt = p.Q / kV2J;
  const int h = blockIdx.x / nt, ti = nt - 1 - blockIdx.x % nt;  // the longest rows first
  const int c = blockIdx.y, i0 = ti * kV2J;
  ChunkLoc loc;
  if (!locate(p, c, loc) || i0 >= loc.L) return;
  const SsmIn& in = p.in;
  const int L = loc.L, N = kN ? kN : in.N, Q = p.Q, g = in.group(h);
  const int rows = min(kV2J, L - i0), jmax = i0 + rows;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  if (loc.slot < 0) {  // padding: y = 0
    for (int o = tid; o < rows * kV2P; o += kV2OutThreads)
      in.store_y(loc.t0 + i0 + o / kV2P, h, o % kV2P, 0.0f);
    return;
  }
  const int ldn = N + kV2Pad, ldx = kV2P + kV2Pad, nv = N / 8;
  extern __shared__ __align__(16) unsigned char v2_smem[];
  bf16* Cs = reinterpret_cast<bf16*>(v2_smem);  // [64 i][ldn]
  bf16* Bs = Cs + kV2J * ldn;                   // [64 j][ldn] (kCB: C·Bᵀ [64 i][kCBLd] f32)
  bf16* Ss = Bs;                                // [64 p][ldn]: S_enter, before the first j tile
  const int b_space = kCB ? max(kV2J * ldn, 2 * kV2J * kCBLd) : kV2J * ldn;  // bf16 elements
  bf16* Xs = Bs + b_space;                                                   // [64 j][ldx]
  float* cs_s = reinterpret_cast<float*>(Xs + kV2J * ldx);
  float* dt_s = cs_s + 256;
  const int64_t row = static_cast<int64_t>(c) * in.H + h;
  const bf16* X = static_cast<const bf16*>(in.x.p);
  const bf16* Bg = static_cast<const bf16*>(in.B.p);
  const bf16* Cg = static_cast<const bf16*>(in.C.p);
  // Tile loads (cp.async, zero rows past the tokens that feed these rows). The j loop is a
  // two-stage pipeline over single buffers: the B tile of j tile jt + 1 loads while S·X of tile jt
  // runs, and its x tile while C·Bᵀ of tile jt + 1 runs. Commit order: {C, S_enter}, X[0], B[0],
  // then per tile B[jt + 1], X[jt + 1] (empty groups past the last tile keep the counts uniform).
  auto load_B = [&](int j0) {
    if constexpr (kCB) {  // C·Bᵀ rows i0.., columns j0.. (16 floats a row per 4 threads)
      const float* src = p.CB + (static_cast<int64_t>(c) * in.G + g) * Q * Q + i0 * Q + j0;
      float* dst = reinterpret_cast<float*>(Bs);
      for (int e = tid; e < kV2J * kV2J / 4; e += kV2OutThreads) {
        const int r = e / (kV2J / 4), c4 = (e % (kV2J / 4)) * 4;
        cp_async16(dst + r * kCBLd + c4, src + r * Q + c4);
      }
    } else {
      for (int e = tid; e < kV2J * nv; e += kV2OutThreads) {
        const int r = e / nv, n8 = (e % nv) * 8, j = j0 + r;
        const bool ok = j < jmax;
        cp_async16(Bs + r * ldn + n8, Bg + (loc.t0 + (ok ? j : 0)) * in.B.s0 + g * in.B.s1 + n8,
                   ok ? 16 : 0);
      }
    }
  };
  auto load_X = [&](int j0) {
    for (int e = tid; e < kV2J * kV2P / 8; e += kV2OutThreads) {
      const int r = e / (kV2P / 8), p8 = (e % (kV2P / 8)) * 8, j = j0 + r;
      const bool ok = j < jmax;
      cp_async16(Xs + r * ldx + p8, X + (loc.t0 + (ok ? j : 0)) * in.x.s0 + h * in.x.s1 + p8,
                 ok ? 16 : 0);
    }
  };
  for (int e = tid; e < kV2J * nv; e += kV2OutThreads) {
    const int r = e / nv, n8 = (e % nv) * 8, i = i0 + r;
    const bool ok = i < L;
    cp_async16(Cs + r * ldn + n8, Cg + (loc.t0 + (ok ? i : 0)) * in.C.s0 + g * in.C.s1 + n8,
               ok ? 16 : 0);
    cp_async16(Ss + r * ldn + n8, Se + row * kV2P * N + r * N + n8);
  }
  cp_commit();
  load_X(0);
  cp_commit();
  for (int j = tid; j < jmax; j += kV2OutThreads) {
    cs_s[j] = p.css[row * Q + j];
    dt_s[j] = p.dts[row * Q + j];
  }
  cp_wait<1>();  // C and S_enter landed (X[0] may be in flight)
  __syncthreads();
  const Lane ln(lane);
  const int a_off = (warp * 16 + ln.r + 8 * ln.sel) * ldn + 8 * ln.hi;  // + k0: C fragments
  float acc[8][4] = {};
  // Inter-chunk: acc[i][p] = Σ_n C_i[n]·S_enter[p, n], then · exp(cs_i).
  for (int k0 = 0; k0 < N; k0 += 16) {
    uint32_t a[4];
    ldmatrix_x4(a, Cs + a_off + k0);
#pragma unroll
    for (int nb = 0; nb < 8; nb += 2) {
      uint32_t b[4];
      ldmatrix_x4(b, Ss + (nb * 8 + ln.r + 8 * ln.hi) * ldn + k0 + 8 * ln.sel);
      mma_bf16(acc[nb], a, b[0], b[1]);
      mma_bf16(acc[nb + 1], a, b[2], b[3]);
    }
  }
  const int ia = i0 + warp * 16 + lane / 4, ib = ia + 8;  // this lane's rows
  const float cs_a = ia < L ? cs_s[ia] : 0.0f, cs_b = ib < L ? cs_s[ib] : 0.0f;
  {
    const float da = ia < L ? __expf(cs_a) : 0.0f, db = ib < L ? __expf(cs_b) : 0.0f;
#pragma unroll
    for (int nb = 0; nb < 8; ++nb) {
      acc[nb][0] *= da, acc[nb][1] *= da;
      acc[nb][2] *= db, acc[nb][3] *= db;
    }
  }
  __syncthreads();  // S_enter (in the B tile's space) is consumed
  load_B(0);
  cp_commit();
  // Intra-chunk: 64-token j tiles up to the diagonal one.
  for (int jt = 0; jt <= ti; ++jt) {
    const int j0 = jt * kV2J;
    // B[jt] landed: pending groups are {X[0], B[0]} at jt = 0 (wait for all), else {B[jt], X[jt]}.
    if (jt == 0)
      cp_wait<0>();
    else
      cp_wait<1>();
    __syncthreads();
    // On the diagonal tile warp w's rows need only j < 16·(w + 1): n8 blocks < 2w + 2.
    const bool diag = jt == ti;
    const int nb_end = diag ? 2 * warp + 2 : 8;
    float s[8][4] = {};
    if constexpr (kCB) {  // this lane's accumulator positions of the C·Bᵀ tile
      const float* cb =
          reinterpret_cast<const float*>(Bs) + (warp * 16 + lane / 4) * kCBLd + (lane % 4) * 2;
#pragma unroll
      for (int nb = 0; nb < 8; ++nb) {
        const float2 u = *reinterpret_cast<const float2*>(cb + nb * 8);
        const float2 v = *reinterpret_cast<const float2*>(cb + 8 * kCBLd + nb * 8);
        s[nb][0] = u.x, s[nb][1] = u.y, s[nb][2] = v.x, s[nb][3] = v.y;
      }
    } else {
      for (int k0 = 0; k0 < N; k0 += 16) {
        uint32_t a[4];
        ldmatrix_x4(a, Cs + a_off + k0);
#pragma unroll
        for (int nb = 0; nb < 8; nb += 2) {
          if (nb < nb_end) {
            uint32_t b[4];
            ldmatrix_x4(b, Bs + (nb * 8 + ln.r + 8 * ln.hi) * ldn + k0 + 8 * ln.sel);
            mma_bf16(s[nb], a, b[0], b[1]);
            mma_bf16(s[nb + 1], a, b[2], b[3]);
          }
        }
      }
    }
    __syncthreads();  // every warp is done with B[jt]: load B[jt + 1] into its space
    if (jt < ti) load_B(j0 + kV2J);
    cp_commit();
    // S[i][j] ← S·exp(cs_i - cs_j)·dt'_j for j ≤ i < L, else 0.
#pragma unroll
    for (int nb = 0; nb < 8; ++nb) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int j = j0 + nb * 8 + (lane % 4) * 2 + (e & 1), i = e < 2 ? ia : ib;
        const float cs_i = e < 2 ? cs_a : cs_b;
        s[nb][e] = (j <= i && i < L) ? s[nb][e] * __expf(cs_i - cs_s[j]) * dt_s[j] : 0.0f;
      }
    }
    cp_wait<1>();  // X[jt] landed (B[jt + 1] may be in flight)
    __syncthreads();
    // acc += S·X_j: the accumulators of n8 blocks 2kt, 2kt + 1 are the A fragment of k16 block kt.
#pragma unroll
    for (int kt = 0; kt < kV2J / 16; ++kt) {
      if (!diag || kt <= warp) {
        const uint32_t a[4] = {pack_bf16(s[2 * kt][0], s[2 * kt][1]),
                               pack_bf16(s[2 * kt][2], s[2 * kt][3]),
                               pack_bf16(s[2 * kt + 1][0], s[2 * kt + 1][1]),
                               pack_bf16(s[2 * kt + 1][2], s[2 * kt + 1][3])};
#pragma unroll
        for (int nb = 0; nb < 8; nb += 2) {
          uint32_t b[4];
          ldmatrix_x4_trans(b, Xs + (kt * 16 + ln.r + 8 * ln.sel) * ldx + nb * 8 + 8 * ln.hi);
          mma_bf16(acc[nb], a, b[0], b[1]);
          mma_bf16(acc[nb + 1], a, b[2], b[3]);
        }
      }
    }
    __syncthreads();  // every warp is done with X[jt]: load X[jt + 1] into its space
    if (jt < ti) load_X(j0 + kV2J);
    cp_commit();
  }
  // y = (acc + D·x)·silu(z), two adjacent p per store.
  const float D_h = in.D_skip(h);
  bf16* Y = static_cast<bf16*>(const_cast<void*>(in.y.p));
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int i = half ? ib : ia;
    if (i >= L) continue;
    const int64_t t = loc.t0 + i;
#pragma unroll
    for (int nb = 0; nb < 8; ++nb) {
      const int pp = nb * 8 + (lane % 4) * 2;
      const float2 xv = __bfloat1622float2(
          *reinterpret_cast<const __nv_bfloat162*>(X + t * in.x.s0 + h * in.x.s1 + pp));
      const float v0 = in.finish(acc[nb][2 * half], D_h, xv.x, t, h, pp);
      const float v1 = in.finish(acc[nb][2 * half + 1], D_h, xv.y, t, h, pp + 1);
      *reinterpret_cast<__nv_bfloat162*>(Y + t * in.y.s0 + h * in.y.s1 + pp) =
          __floats2bfloat162_rn(v0, v1);
    }
  }
}

__global__ void __launch_bounds__(kV2OutThreads) v2_out_kernel(const ScanParams p, const bf16* Se) {
  out_body<0, false>(p, Se);
}

// v3: N fixed when compiled, C·Bᵀ from p.CB; at most 128 registers so 4 blocks (16 warps) stay
// resident per SM (N = 64: 3 blocks, 170 registers: at 128 it spilled 4 bytes).
template <int N>
__global__ void __launch_bounds__(kV2OutThreads, N == 64 ? 3 : 4)
    v3_out_kernel(const ScanParams p, const bf16* Se) {
  out_body<N, true>(p, Se);
}

// Dynamic shared memory of v3_cb: C rows and B rows [64][N + 8] (bf16).
size_t v3_cb_smem(int N) {
  return sizeof(bf16) * 2 * kV2J * (N + kV2Pad);
}

// Grid (G · nt(nt + 1)/2, max_chunks), nt = Q / 64, 128 threads (4 warps × 16 rows i): the tile
// (ti, jt ≤ ti) of CB[c, g] = C_i·B_jᵀ over n, i in [64·ti, +64), j in [64·jt, +64), f32. Rows
// and columns past the chunk's tokens are zeros (C, B rows loaded as zeros); every tile with
// 64·ti < L is written whole, so v3_out reads no uninitialized workspace. Padding chunks
// (slot < 0) are skipped: v3_out writes y = 0 there without reading CB. FLOPs 2·64·64·N a tile.
// kBf16: CB in bf16 (the same element offsets, half the bytes) for v6_out_kernel<N, true>.
template <int N, bool kBf16 = false>
__global__ void __launch_bounds__(kV2OutThreads) v3_cb_kernel(const ScanParams p) {
  constexpr int ldn = N + kV2Pad, nv = N / 8;
  const int ntri = (p.Q / kV2J) * (p.Q / kV2J + 1) / 2;
  const int g = blockIdx.x / ntri, c = blockIdx.y;
  int k = blockIdx.x % ntri, ti = 0;  // k = ti(ti + 1)/2 + jt
  while (k > ti) k -= ++ti;
  const int jt = k, i0 = ti * kV2J, j0 = jt * kV2J;
  ChunkLoc loc;
  if (!locate(p, c, loc) || loc.slot < 0 || i0 >= loc.L) return;
  const SsmIn& in = p.in;
  const int L = loc.L, Q = p.Q, tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  extern __shared__ __align__(16) unsigned char v2_smem[];
  bf16* Cs = reinterpret_cast<bf16*>(v2_smem);  // [64 i][ldn]
  bf16* Bs = Cs + kV2J * ldn;                   // [64 j][ldn]
  const bf16* Cg = static_cast<const bf16*>(in.C.p);
  const bf16* Bg = static_cast<const bf16*>(in.B.p);
  for (int e = tid; e < kV2J * nv; e += kV2OutThreads) {
    const int r = e / nv, n8 = (e % nv) * 8, i = i0 + r, j = j0 + r;
    cp_async16(Cs + r * ldn + n8, Cg + (loc.t0 + (i < L ? i : 0)) * in.C.s0 + g * in.C.s1 + n8,
               i < L ? 16 : 0);
    cp_async16(Bs + r * ldn + n8, Bg + (loc.t0 + (j < L ? j : 0)) * in.B.s0 + g * in.B.s1 + n8,
               j < L ? 16 : 0);
  }
  cp_commit();
  cp_wait<0>();
  __syncthreads();
  const Lane ln(lane);
  float s[8][4] = {};
#pragma unroll
  for (int k0 = 0; k0 < N; k0 += 16) {
    uint32_t a[4];
    ldmatrix_x4(a, Cs + (warp * 16 + ln.r + 8 * ln.sel) * ldn + 8 * ln.hi + k0);
#pragma unroll
    for (int nb = 0; nb < 8; nb += 2) {
      uint32_t b[4];
      ldmatrix_x4(b, Bs + (nb * 8 + ln.r + 8 * ln.hi) * ldn + k0 + 8 * ln.sel);
      mma_bf16(s[nb], a, b[0], b[1]);
      mma_bf16(s[nb + 1], a, b[2], b[3]);
    }
  }
  // Accumulator element e of n8 block nb: row lane/4 (+8 for e ≥ 2), column nb·8 + (lane%4)·2 +
  // e&1.
  const int64_t base = (static_cast<int64_t>(c) * in.G + g) * Q * Q;
  const int ia = i0 + warp * 16 + lane / 4;
  if constexpr (kBf16) {
    __nv_bfloat162* out = reinterpret_cast<__nv_bfloat162*>(reinterpret_cast<bf16*>(p.CB) + base);
#pragma unroll
    for (int nb = 0; nb < 8; ++nb) {
      const int j = j0 + nb * 8 + (lane % 4) * 2;
      out[(ia * Q + j) / 2] = __floats2bfloat162_rn(s[nb][0], s[nb][1]);
      out[((ia + 8) * Q + j) / 2] = __floats2bfloat162_rn(s[nb][2], s[nb][3]);
    }
  } else {
    float* out = p.CB + base;
#pragma unroll
    for (int nb = 0; nb < 8; ++nb) {
      const int j = j0 + nb * 8 + (lane % 4) * 2;
      *reinterpret_cast<float2*>(out + ia * Q + j) = make_float2(s[nb][0], s[nb][1]);
      *reinterpret_cast<float2*>(out + (ia + 8) * Q + j) = make_float2(s[nb][2], s[nb][3]);
    }
  }
}

// ---- v6 (cuda_v6): v3 with an output kernel that issues fewer instructions per MMA ------------
// Same grid, block (4 warps × 16 rows i), shared-memory space, cp.async pipeline and products as
// v3_out<N> (the tiles' rows unpadded and swizzled instead, session 17); what changes is the work
// around the MMAs (SASS of v3_out<128> per warp and 64-token j tile: 32 HMMA among ≈ 900
// instructions, ≈ 480 of them the per-element decay mask):
//   * off-diagonal j tiles (j < i0 ≤ i) need no mask, and their decay factors through a block
//     reference R = cs_{i0}: exp(cs_i − cs_j)·dt'_j = exp(cs_i − R)·w_j, w_j = exp(R − cs_j)·dt'_j.
//     w_j (j < i0) is computed once per block into the dt' array (one exp per token, not one per
//     element and head row), so a C·Bᵀ element costs one FMUL (w pairs read as float2); the row
//     factor exp(cs_i − R) is applied once to the accumulator, right before the diagonal tile,
//     and the inter-chunk term is scaled by exp(R) instead of exp(cs_i) (their product). With
//     dt' ≥ 0 (softplus or dt_min ≥ 0) cs falls monotonically, so every factor is ≤ 1 (no
//     overflow); an underflowed factor means the true decay is below 2⁻¹²⁶ as well.
//   * the diagonal tile keeps v3's direct exp(cs_i − cs_j)·dt'_j (the same operand rounding), only
//     for the n8 blocks the warp's rows reach (nb < 2·warp + 2), branch-free (ex2.approx on cs
//     pre-scaled by log2 e, a select for j ≤ i), cs / dt' pairs read as float2.
//   * tile loads (C, S_enter, C·Bᵀ, x) from per-thread base pointers computed once: a cp.async is
//     an add and the copy, not ≈ 25 instructions of 64-bit index math with divisions.
//   * the epilogue reads x_i for D·x from the x tile still in shared memory (the diagonal tile's
//     rows are the block's rows i) instead of global memory.
// Rounding as v3 except the decays on off-diagonal tiles (product of two f32 exps instead of one;
// relative difference ~1e-7, far below the bf16 rounding of the masked C·Bᵀ operand).

// kCbBf16 (the default since session 19; `HYBRID_SSM_CHUNK_CB_BF16=0` keeps f32): the C·Bᵀ tiles
// come from v3_cb_kernel<N, true> in bf16, [64 i][64 j] swizzled in the same space. Each 64 x 64
// tile read from L2 is 8 KiB instead of 16 (at Mamba2 1 x 16384 the blocks read ~820 MB of f32
// C·Bᵀ, ~40% of their ~1.9 GB of tile reads); the element is rounded to bf16 before the decay
// scaling and again after it (one more rounding of the masked operand). Session 19 (same runs):
// the out stage 379 -> 348-354 µs, Mamba2 1 x 16384 727 -> 696, 8 x 4096 1424 -> 1363, the
// grouped H 128 G 8 shapes 1166 -> 1116 and 2317 -> 2216 (predicted 670-700 at Mamba2 1 x 16384).
template <int N, bool kCbBf16 = false>
__global__ void __launch_bounds__(kV2OutThreads, N == 64 ? 3 : 4)
    v6_out_kernel(const ScanParams p, const bf16* Se) {
  constexpr int ldn = N + kV2Pad, ldx = kV2P + kV2Pad, nv = N / 8;
  constexpr float kLog2e = 1.4426950408889634f;
  static_assert(256 <= 2 * kV2OutThreads, "two tokens of cs / dt' a thread cover Q <= 256");
  // Q / 64 is 1, 2 or 4 (ssm_chunk_scan checks Q): the block's head and i tile by shifts.
  const int lg_nt = p.Q == 256 ? 2 : (p.Q == 128 ? 1 : 0), nt = 1 << lg_nt;
  const int h = blockIdx.x >> lg_nt;
  const int ti = nt - 1 - static_cast<int>(blockIdx.x & (nt - 1));  // the longest rows first
  const int c = blockIdx.y, i0 = ti * kV2J;
  ChunkLoc loc;
  if (!locate(p, c, loc) || i0 >= loc.L) return;
  const SsmIn& in = p.in;
  const int L = loc.L, Q = p.Q;
  const int rows = min(kV2J, L - i0), jmax = i0 + rows;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  if (loc.slot < 0) {  // padding: y = 0
    for (int o = tid; o < rows * kV2P; o += kV2OutThreads)
      in.store_y(loc.t0 + i0 + o / kV2P, h, o % kV2P, 0.0f);
    return;
  }
  // The loads the prologue's arithmetic waits on, first: cs_{i0}, cs and dt' of this thread's
  // tokens j = tid, tid + 128 (< jmax) and D, so that their round trips overlap the copies' address
  // arithmetic below (issued after the copies, the cs loads were the kernel's top stall: session
  // 27 run 1's ncu).
  const int64_t row = static_cast<int64_t>(c) * in.H + h;
  const float csR = p.css[row * Q + i0];
  float cs_r[2] = {}, dt_r[2] = {};
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    const int j = tid + k * kV2OutThreads;
    if (j < jmax) cs_r[k] = p.css[row * Q + j], dt_r[k] = p.dts[row * Q + j];
  }
  const float D_h = in.D_skip(h);
  const int g = in.group(h);
  extern __shared__ __align__(16) unsigned char v2_smem[];  // v3_out_smem(N) bytes
  // v3's spaces (padded rows), holding the unpadded swizzled tiles (sb / sf below):
  bf16* Cs = reinterpret_cast<bf16*>(v2_smem);  // [64 i][N]
  bf16* Bs = Cs + kV2J * ldn;                   // C·Bᵀ [64 i][64 j] f32
  bf16* Ss = Bs;                                // [64 p][N]: S_enter, first
  constexpr int b_space = kV2J * ldn > 2 * kV2J * kCBLd ? kV2J * ldn : 2 * kV2J * kCBLd;
  bf16* Xs = Bs + b_space;                                  // [64 j][64 p]
  float* cs_s = reinterpret_cast<float*>(Xs + kV2J * ldx);  // [256]: cs_j·log2 e (j ≥ i0)
  float* w_s = cs_s + 256;  // [256]: w_j = exp(R − cs_j)·dt'_j for j < i0, dt'_j for j ≥ i0
  const bf16* X = static_cast<const bf16*>(in.x.p);
  const bf16* Cg = static_cast<const bf16*>(in.C.p);
  // The tiles' rows unpadded (N or 64 bf16, 64 f32) and swizzled (swz16, mma.cuh): into the
  // padded rows the copies took 2.2x the ideal wavefronts (ncu, session 17). sb: element (r, c) of
  // a bf16 tile of rows of w; sf: of the f32 C·Bᵀ tile [64 i][64 j].
  auto sb = [](int r, int c, int w) { return swz16<bf16>(r, c, w); };
  auto sf = [](int r, int c) { return swz16<float>(r, c, kV2J); };

  // Per-thread copy slots. C / S_enter: 16-byte chunk (r, n8), r = tid / nv + k·(128 / nv).
  // C·Bᵀ: row tid / 16 + 8k, float column (tid % 16)·4. x: row tid / 8 + 16k, column (tid % 8)·8.
  constexpr int kCRows = kV2OutThreads / nv;  // rows of C a pass of the block covers
  {
    const int r0 = tid / nv, n8 = (tid % nv) * 8;
    const bf16* csrc = Cg + (loc.t0 + i0 + r0) * in.C.s0 + g * in.C.s1 + n8;
    const bf16* ssrc = Se + row * kV2P * N + r0 * N + n8;
    // A whole tile of C rows (every i tile but a partial last one) takes its copies without the
    // zero-fill selects.
    if (i0 + kV2J <= L) {
#pragma unroll
      for (int k = 0; k < kV2J / kCRows; ++k) {
        const int r = r0 + k * kCRows;
        cp_async16(Cs + sb(r, n8, N), csrc + k * kCRows * in.C.s0);
        cp_async16(Ss + sb(r, n8, N), ssrc + k * kCRows * N);
      }
    } else {
#pragma unroll
      for (int k = 0; k < kV2J / kCRows; ++k) {
        const int r = r0 + k * kCRows;
        const bool ok = i0 + r < L;
        cp_async16(Cs + sb(r, n8, N), ok ? csrc + k * kCRows * in.C.s0 : Cg, ok ? 16 : 0);
        cp_async16(Ss + sb(r, n8, N), ssrc + k * kCRows * N);
      }
    }
  }
  cp_commit();
  const int xr0 = tid / 8, xp8 = (tid % 8) * 8;
  const bf16* x_src = X + (loc.t0 + xr0) * in.x.s0 + h * in.x.s1 + xp8;  // token j = xr0
  bf16* x_dst = Xs + sb(xr0, xp8, kV2P);  // rows xr0 + 16k: + 16k·64
  const int64_t x_step = 16 * in.x.s0;
  auto load_X = [&](int j0) {
    const bf16* src = x_src + j0 * in.x.s0;
    if (j0 + kV2J <= jmax) {  // a whole tile (all but a partial diagonal one): no selects
#pragma unroll
      for (int k = 0; k < 4; ++k) cp_async16(x_dst + 16 * k * kV2P, src + k * x_step);
    } else {
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const bool ok = j0 + xr0 + 16 * k < jmax;
        cp_async16(x_dst + 16 * k * kV2P, ok ? src + k * x_step : X, ok ? 16 : 0);
      }
    }
  };
  const int64_t cb_base = (static_cast<int64_t>(c) * in.G + g) * Q * Q;
  // f32: row tid / 16 + 8k, float column (tid % 16)·4; bf16: row tid / 8 + 16k, column (tid % 8)·8.
  const float* cb_src = p.CB + cb_base + (i0 + tid / 16) * Q + (tid % 16) * 4;
  float* cb_dst = reinterpret_cast<float*>(Bs) + sf(tid / 16, (tid % 16) * 4);  // + 8k·64
  const bf16* cbh_src =
      reinterpret_cast<const bf16*>(p.CB) + cb_base + (i0 + tid / 8) * Q + (tid % 8) * 8;
  bf16* cbh_dst = Bs + sb(tid / 8, (tid % 8) * 8, kV2J);  // + 16k·64
  auto load_CB = [&](int j0) {  // C·Bᵀ rows i0.., columns j0.. (written whole by v3_cb)
    if constexpr (kCbBf16) {
#pragma unroll
      for (int k = 0; k < 4; ++k) cp_async16(cbh_dst + 16 * k * kV2J, cbh_src + 16 * k * Q + j0);
    } else {
#pragma unroll
      for (int k = 0; k < 8; ++k) cp_async16(cb_dst + 8 * k * kV2J, cb_src + 8 * k * Q + j0);
    }
  };
  load_X(0);
  cp_commit();
  // cs, dt' of tokens j < jmax; w_j for j < i0 (R = cs_{i0}, i0 < L).
#pragma unroll
  for (int k = 0; k < 2; ++k) {
    const int j = tid + k * kV2OutThreads;
    if (j < jmax) {
      cs_s[j] = cs_r[k] * kLog2e;
      w_s[j] = j < i0 ? __expf(csR - cs_r[k]) * dt_r[k] : dt_r[k];
    }
  }
  cp_wait<1>();  // C and S_enter landed (X[0] may be in flight)
  __syncthreads();
  const Lane ln(lane);
  const int a_row = warp * 16 + ln.r + 8 * ln.sel;  // C fragments: (a_row, 8·ln.hi + k0)
  float acc[8][4] = {};
  // Inter-chunk: acc[i][p] = Σ_n C_i[n]·S_enter[p, n], then · exp(R) (· exp(cs_i − R) later).
  for (int k0 = 0; k0 < N; k0 += 16) {
    uint32_t a[4];
    ldmatrix_x4(a, Cs + sb(a_row, 8 * ln.hi + k0, N));
#pragma unroll
    for (int nb = 0; nb < 8; nb += 2) {
      uint32_t b[4];
      ldmatrix_x4(b, Ss + sb(nb * 8 + ln.r + 8 * ln.hi, k0 + 8 * ln.sel, N));
      mma_bf16(acc[nb], a, b[0], b[1]);
      mma_bf16(acc[nb + 1], a, b[2], b[3]);
    }
  }
  {
    const float eR = __expf(csR);
#pragma unroll
    for (int nb = 0; nb < 8; ++nb)
#pragma unroll
      for (int e = 0; e < 4; ++e) acc[nb][e] *= eR;
  }
  const int ra = warp * 16 + lane / 4;  // this lane's rows i0 + ra, i0 + ra + 8
  const int ia = i0 + ra, ib = ia + 8;
  const int jl = (lane % 4) * 2;  // this lane's first column in an n8 block
  __syncthreads();                // S_enter (in the C·Bᵀ tile's space) is consumed
  load_CB(0);
  cp_commit();
  const float* cb = reinterpret_cast<const float*>(Bs);
  for (int jt = 0; jt <= ti; ++jt) {
    const int j0 = jt * kV2J;
    // C·Bᵀ[jt] landed: pending groups are {X[0], CB[0]} at jt = 0 (wait for all), else
    // {CB[jt], X[jt]}.
    if (jt == 0)
      cp_wait<0>();
    else
      cp_wait<1>();
    __syncthreads();
    const bool diag = jt == ti;
    float s[8][4];
#pragma unroll
    for (int nb = 0; nb < 8; ++nb) {
      float2 u, v;
      if constexpr (kCbBf16) {
        u = unpack_bf16(*reinterpret_cast<const uint32_t*>(Bs + sb(ra, nb * 8 + jl, kV2J)));
        v = unpack_bf16(*reinterpret_cast<const uint32_t*>(Bs + sb(ra + 8, nb * 8 + jl, kV2J)));
      } else {
        u = *reinterpret_cast<const float2*>(cb + sf(ra, nb * 8 + jl));
        v = *reinterpret_cast<const float2*>(cb + sf(ra + 8, nb * 8 + jl));
      }
      s[nb][0] = u.x, s[nb][1] = u.y, s[nb][2] = v.x, s[nb][3] = v.y;
    }
    __syncthreads();  // every warp holds its C·Bᵀ[jt] values: load C·Bᵀ[jt + 1] into the space
    if (jt < ti) load_CB(j0 + kV2J);
    cp_commit();
    if (!diag) {  // j < i0 ≤ i: s ← s·w_j
#pragma unroll
      for (int nb = 0; nb < 8; ++nb) {
        const float2 w = *reinterpret_cast<const float2*>(w_s + j0 + nb * 8 + jl);
        s[nb][0] *= w.x, s[nb][1] *= w.y, s[nb][2] *= w.x, s[nb][3] *= w.y;
      }
    } else {
      // Row factor exp(cs_i − R) onto everything so far (0 for rows past the chunk's end), then
      // s ← s·exp(cs_i − cs_j)·dt'_j for j ≤ i (j0 = i0): warp w's rows reach n8 blocks < 2w + 2.
      const float ca = ia < L ? cs_s[ia] : 0.0f, cb_ = ib < L ? cs_s[ib] : 0.0f;
      const float csR2 = csR * kLog2e;
      const float fa = ia < L ? exp2_approx(ca - csR2) : 0.0f;
      const float fb = ib < L ? exp2_approx(cb_ - csR2) : 0.0f;
#pragma unroll
      for (int nb = 0; nb < 8; ++nb) {
        acc[nb][0] *= fa, acc[nb][1] *= fa;
        acc[nb][2] *= fb, acc[nb][3] *= fb;
      }
      const int nb_end = 2 * warp + 2;
#pragma unroll
      for (int nb = 0; nb < 8; ++nb) {
        if (nb < nb_end) {
          const int jj = nb * 8 + jl;  // column of element 0 within the tile (j = i0 + jj)
          const float2 cj = *reinterpret_cast<const float2*>(cs_s + j0 + jj);
          const float2 dj = *reinterpret_cast<const float2*>(w_s + j0 + jj);
          s[nb][0] = jj <= ra ? s[nb][0] * exp2_approx(ca - cj.x) * dj.x : 0.0f;
          s[nb][1] = jj + 1 <= ra ? s[nb][1] * exp2_approx(ca - cj.y) * dj.y : 0.0f;
          s[nb][2] = jj <= ra + 8 ? s[nb][2] * exp2_approx(cb_ - cj.x) * dj.x : 0.0f;
          s[nb][3] = jj + 1 <= ra + 8 ? s[nb][3] * exp2_approx(cb_ - cj.y) * dj.y : 0.0f;
        } else {
          s[nb][0] = s[nb][1] = s[nb][2] = s[nb][3] = 0.0f;
        }
      }
    }
    cp_wait<1>();  // X[jt] landed (C·Bᵀ[jt + 1] may be in flight)
    __syncthreads();
    // acc += S·X_j: the accumulators of n8 blocks 2kt, 2kt + 1 are the A fragment of k16 block kt.
#pragma unroll
    for (int kt = 0; kt < kV2J / 16; ++kt) {
      if (!diag || kt <= warp) {
        const uint32_t a[4] = {pack_bf16(s[2 * kt][0], s[2 * kt][1]),
                               pack_bf16(s[2 * kt][2], s[2 * kt][3]),
                               pack_bf16(s[2 * kt + 1][0], s[2 * kt + 1][1]),
                               pack_bf16(s[2 * kt + 1][2], s[2 * kt + 1][3])};
#pragma unroll
        for (int nb = 0; nb < 8; nb += 2) {
          uint32_t b[4];
          ldmatrix_x4_trans(b, Xs + sb(kt * 16 + ln.r + 8 * ln.sel, nb * 8 + 8 * ln.hi, kV2P));
          mma_bf16(acc[nb], a, b[0], b[1]);
          mma_bf16(acc[nb + 1], a, b[2], b[3]);
        }
      }
    }
    __syncthreads();  // every warp is done with X[jt]: load X[jt + 1] into its space
    if (jt < ti) load_X(j0 + kV2J);
    cp_commit();
  }
  // y = (acc + D·x)·silu(z), two adjacent p per store; x_i from the x tile (= X[ti], rows i0..).
  // Without z (the Mamba2 / Nemotron-H call) a pair is an LDS, two FFMA, a pack and a store at a
  // constant offset from the row pointer.
  bf16* Y = static_cast<bf16*>(const_cast<void*>(in.y.p));
  const bool gate = in.z.p != nullptr;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int i = half ? ib : ia;
    if (i >= L) continue;
    const int64_t t = loc.t0 + i;
    const int xr = ra + 8 * half;
    bf16* yrow = Y + t * in.y.s0 + h * in.y.s1 + jl;
    if (!gate) {
#pragma unroll
      for (int nb = 0; nb < 8; ++nb) {
        const float2 xv =
            unpack_bf16(*reinterpret_cast<const uint32_t*>(Xs + sb(xr, nb * 8 + jl, kV2P)));
        *reinterpret_cast<__nv_bfloat162*>(yrow + nb * 8) = __floats2bfloat162_rn(
            acc[nb][2 * half] + D_h * xv.x, acc[nb][2 * half + 1] + D_h * xv.y);
      }
    } else {
#pragma unroll
      for (int nb = 0; nb < 8; ++nb) {
        const int pp = nb * 8 + jl;
        const float2 xv =
            unpack_bf16(*reinterpret_cast<const uint32_t*>(Xs + sb(xr, nb * 8 + jl, kV2P)));
        const float v0 = in.finish(acc[nb][2 * half], D_h, xv.x, t, h, pp);
        const float v1 = in.finish(acc[nb][2 * half + 1], D_h, xv.y, t, h, pp + 1);
        *reinterpret_cast<__nv_bfloat162*>(yrow + nb * 8) = __floats2bfloat162_rn(v0, v1);
      }
    }
  }
}

// ---- the chained state (the default at H >= 80; HYBRID_SSM_CHUNK_CHAIN=1 always, =0 never) -----
// v6_state_kernel<N, kSplit, true> does v2_pass's work too, so that no pass kernel reads the
// chunk states back: each block takes a ticket (atomicAdd: chunk-major (chunk, head) order, so a
// block only ever waits on an earlier ticket, whose block is running or done), computes its Sc as
// before, then
//   S_enter(c) = the pool's state (the sequence's first chunk, has_initial) or 0, or the end state
//                chunk c − 1 published (flag p.chain[1 + (c − 1)·H + h], its Sws rows read
//                through L2);
//   Se(c) = bf16(S_enter(c)); S_end(c) = e^{cs_last}·S_enter(c) + Sc   (v2_pass's expression)
//   chunk_states[c] = S_end(c) (if asked); the pool = S_end(c) at the sequence's last chunk, else
//   S_end(c) into Sws (chunk c's rows) and the flag set (release, after a block barrier).
// The end states go through L2 to the next chunk's block, which is usually already waiting: the
// pass kernel's read of every Sc from DRAM (170 MB at Mamba2 1 x 16384) and its launch go away.
// Each chunk waits for chunk c − 1: the 64 chunks of a head at 1 x 16384 form a serial path.
// Session 26 run 3's step (flag, L2 read, update, Se and end-state stores, __threadfence(),
// release) took ~5.4 µs a chunk: the chained state kernel 346 µs against 231 + 83 for the state
// and pass kernels at Mamba2 (H 80), slower; faster at Nemotron-H (H 128), 1111 -> 1058 µs. Run 6's
// step (the end state stored and released first, no __threadfence(), Se after) takes ~4.7 µs:
// 303 µs at H 80, the call 669 -> 659 µs; Nemotron-H 1011 µs. A decoupled look-back (publish Sc,
// walk back over the chunks still running) was slower (run 4: 389 µs at H 80, 1075 -> 1191 at H
// 128): the walk's waits and L2 reads hold the block's SM slot as the plain chain's wait does,
// and its Sc and end states double the stores. Spans of 2 or 4 chunks a block, one step a span
// (the Sacc so far stashed and decayed at each chunk boundary), were slower too (session 27 run 1:
// 307 / 352 µs against 303): what the chain costs is not its serial path but each block's SM slot
// held through its wait and its own step, and a span's longer blocks and idle sibling blocks gave
// back more than the fewer steps saved.
// Zero-length sequences have no chunk: v2_pass_kernel<St, true> writes their pools.
// The heads from which the chain is the default: with fewer, the serial path (~4.7 µs a chunk)
// outlasts the state and pass kernels it replaces (~61 ns a (chunk, head) at Mamba2's shape,
// break-even H ≈ 77); measured faster at H 80 and 128.
constexpr int kChainMinHeads = 80;
__device__ __forceinline__ void chain_padding(const ScanParams& p, int c, int h) {
  const Arg& cst = p.chunk_states;
  if (!cst.p) return;
  const int N = p.in.N;
  for (int e = threadIdx.x; e < kV2P * N; e += blockDim.x)
    store_any(const_cast<void*>(cst.p), cst.dt, c * cst.s0 + h * cst.s1 + (e / N) * cst.s2 + e % N,
              0.0f);
}

__device__ __forceinline__ int load_acquire(const int* f) {
  int v;
  asm volatile("ld.acquire.gpu.global.b32 %0, [%1];" : "=r"(v) : "l"(f) : "memory");
  return v;
}
__device__ __forceinline__ void store_release(int* f, int v) {
  asm volatile("st.release.gpu.global.b32 [%0], %1;" ::"l"(f), "r"(v) : "memory");
}

// The chain step of chunk c, head h for the thread's Sc fragments acc[nb][0..3] (rows pr, pr + 8;
// columns n0 + nb·8, + 1), as v6_state_kernel leaves them. Every thread of the block calls it.
template <int N>
__device__ __forceinline__ void chain_step(const ScanParams& p, const ChunkLoc& loc, int c, int h,
                                           const float (&acc)[N / 16][4], int pr, int n0, int tid) {
  constexpr int NB = N / 16, PN = kV2P * N;
  const SsmIn& in = p.in;
  const int seq = loc.seq, c_first = p.chunk_off[seq], c_last = p.chunk_off[seq + 1] - 1;
  const int64_t row = static_cast<int64_t>(c) * in.H + h;
  auto at = [&](int nb, int e) { return (pr + 8 * (e / 2)) * N + n0 + nb * 8 + e % 2; };
  float S[NB][4];
  if (c == c_first) {
    const bool initial = p.has_initial && flag_at(p.has_initial, p.has_initial_dt, seq);
    const int64_t pool = loc.slot * p.st_slot + h * p.st_h;
#pragma unroll
    for (int nb = 0; nb < NB; ++nb)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int o = at(nb, e);
        S[nb][e] = initial ? load_any(p.state, p.st_dt, pool + (o / N) * p.st_p + o % N) : 0.0f;
      }
  } else {
    if (tid == 0) {
      const int* f = p.chain + 1 + (row - in.H);  // chunk c − 1, head h
      while (load_acquire(f) == 0) {
      }
    }
    __syncthreads();  // (thread 0's acquire, then the block's loads through L2)
    const float* prev = p.Sws + (row - in.H) * PN;
#pragma unroll
    for (int nb = 0; nb < NB; ++nb)
#pragma unroll
      for (int e = 0; e < 4; e += 2) {
        const float2 v = __ldcg(reinterpret_cast<const float2*>(prev + at(nb, e)));
        S[nb][e] = v.x, S[nb][e + 1] = v.y;
      }
  }
  // S_enter rounded for Se (packed bf16 pairs), then S_end = e^{cs_last}·S_enter + Sc in S.
  const float decay = expf(p.css[row * p.Q + loc.L - 1]);
  uint32_t se_pairs[NB][2];
#pragma unroll
  for (int nb = 0; nb < NB; ++nb)
#pragma unroll
    for (int e = 0; e < 4; e += 2) {
      const __nv_bfloat162 v = __floats2bfloat162_rn(S[nb][e], S[nb][e + 1]);
      se_pairs[nb][e / 2] = *reinterpret_cast<const uint32_t*>(&v);
      S[nb][e] = decay * S[nb][e] + acc[nb][e];
      S[nb][e + 1] = decay * S[nb][e + 1] + acc[nb][e + 1];
    }
  if (c == c_last) {  // the pool (its base again here, the load's loop above written out again:
                      // one base for both branches stayed live across the wait and spilled; a
                      // shared offset lambda changed the SASS and made the kernel 3% slower,
                      // 303 -> 313 µs at Mamba2 1 x 16384: session 26 run 7)
    const int64_t pool = loc.slot * p.st_slot + h * p.st_h;
#pragma unroll
    for (int nb = 0; nb < NB; ++nb)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int o = at(nb, e);
        store_any(p.state, p.st_dt, pool + (o / N) * p.st_p + o % N, S[nb][e]);
      }
  } else {  // the end state for chunk c + 1, published first: the next block waits on it alone
    float* out = p.Sws + row * PN;
#pragma unroll
    for (int nb = 0; nb < NB; ++nb)
#pragma unroll
      for (int e = 0; e < 4; e += 2)
        __stcg(reinterpret_cast<float2*>(out + at(nb, e)), make_float2(S[nb][e], S[nb][e + 1]));
    // Every thread's rows stored, then thread 0's release publishes them (cumulative over the
    // barrier, as CUTLASS's semaphore relies on; no __threadfence(), which run 3's form had).
    __syncthreads();
    if (tid == 0) store_release(p.chain + 1 + row, 1);
  }
  // What no other block of this kernel reads, after the release: Se(c) and chunk_states[c].
  bf16* se = p.Se + row * PN;
  const Arg& cst = p.chunk_states;
#pragma unroll
  for (int nb = 0; nb < NB; ++nb)
#pragma unroll
    for (int e = 0; e < 4; e += 2) {
      *reinterpret_cast<uint32_t*>(se + at(nb, e)) = se_pairs[nb][e / 2];
      if (cst.p) {
        const int o = at(nb, e);
        const int64_t d = c * cst.s0 + h * cst.s1 + (o / N) * cst.s2 + o % N;
        store_any(const_cast<void*>(cst.p), cst.dt, d, S[nb][e]);
        store_any(const_cast<void*>(cst.p), cst.dt, d + 1, S[nb][e + 1]);
      }
    }
}

// v6 chunk state: v2_state<N, kPre = true>'s products and values (the same w_j, the same hi / lo
// split, the same MMAs in the same order, so Sc is bit-identical), with the tile loads pipelined:
// v2_state loads x and B with plain loads straight into shared memory at the top of each 64-token
// stage (a full memory round trip per stage, exposed: its stall is long scoreboard) and
// recomputes 64-bit addresses per element chunk. Here B stages are double-buffered with cp.async
// (B[s + 1] is copied while the MMAs of stage s run) and the thread's two x chunks of stage s + 1
// are loaded into registers before the MMAs of stage s (split into hi / lo at the top of stage
// s + 1); every copy address is a base pointer set once per thread plus a stage offset.
// Dynamic shared memory: x·w hi and lo [64 j][P + 8], B [2][64 j][N + 8] (bf16), w [256] (f32).
size_t v6_state_smem(int N) {
  return sizeof(bf16) * (2 * kV2J * (kV2P + kV2Pad) + 2 * kV2J * (N + kV2Pad)) +
         sizeof(float) * 256;
}

// Blocks of 8 warps per SM the registers allow: 62 / 80 / 128 registers at N = 64 / 128 / 256.
constexpr int v6_state_blocks(int N) {
  return N == 256 ? 2 : (N == 128 ? 3 : 4);
}

// kSplit = false (HYBRID_SSM_CHUNK_STATE_SPLIT=0; session 25 run 1: 4% faster, but 17 of the 41
// cases fail the f32 state tolerance, so only to measure):
// w_j·x_j rounded to bf16 once, no lo tile and half the MMAs, as mamba_ssm's _chunk_state_fwd
// rounds B_j·scale_j to x's dtype once. Session 24's ncu of this kernel (run 3, Mamba2 1 x 16384,
// 233 µs) puts 27.5% of its stall samples on the MMA line (short scoreboard on the ldmatrix,
// math), the split's doubled product among them.
template <int N, bool kSplit = true, bool kChain = false>
__global__ void __launch_bounds__(kV2StateThreads, v6_state_blocks(N))
    v6_state_kernel(const ScanParams p) {
  constexpr int NB = N / 16, ldx = kV2P + kV2Pad, ldb = N + kV2Pad, nv = N / 8;
  constexpr int kBRows = kV2StateThreads / nv;  // B rows one pass of the block copies
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  int h = blockIdx.x, c = blockIdx.y;
  if constexpr (kChain) {  // (chunk, head) in ticket order: every earlier ticket's block runs
    __shared__ int ticket;
    if (tid == 0) ticket = atomicAdd(p.chain, 1);
    __syncthreads();
    h = ticket % p.in.H, c = ticket / p.in.H;
  }
  ChunkLoc loc;
  if (!locate(p, c, loc)) return;
  if (kChain && loc.slot < 0) {  // padding: zero chunk_states rows (v2_pass's part)
    chain_padding(p, c, h);
    return;
  }
  if (loc.slot < 0) return;
  const SsmIn& in = p.in;
  const int Q = p.Q, L = loc.L, g = in.group(h);
  extern __shared__ __align__(16) unsigned char v2_smem[];
  bf16* xh = reinterpret_cast<bf16*>(v2_smem);  // [64 j][ldx]: bf16(w_j·x_j[p])
  bf16* xl = xh + kV2J * ldx;                   // [64 j][ldx]: the remainder, rounded
  bf16* bs = xl + kV2J * ldx;                   // [2][64 j][ldb]: B_j[n], two stages
  float* w_s = reinterpret_cast<float*>(bs + 2 * kV2J * ldb);  // [256]

  const bf16* X = static_cast<const bf16*>(in.x.p);
  const bf16* Bg = static_cast<const bf16*>(in.B.p);
  // B: chunk (r, n8) with r = tid / nv + k·kBRows; x: rows tid / 8 + 32k, columns (tid % 8)·8.
  const int br0 = tid / nv, bn8 = (tid % nv) * 8;
  const bf16* b_src = Bg + (loc.t0 + br0) * in.B.s0 + g * in.B.s1 + bn8;  // token j = br0
  bf16* b_dst = bs + br0 * ldb + bn8;
  auto load_B = [&](int j0, int buf) {
    const bf16* src = b_src + j0 * in.B.s0;
#pragma unroll
    for (int k = 0; k < kV2J / kBRows; ++k) {
      const bool ok = j0 + br0 + k * kBRows < L;
      cp_async16(b_dst + buf * kV2J * ldb + k * kBRows * ldb, ok ? src + k * kBRows * in.B.s0 : Bg,
                 ok ? 16 : 0);
    }
  };
  const int xr0 = tid / 8, xp8 = (tid % 8) * 8;
  const bf16* x_src = X + (loc.t0 + xr0) * in.x.s0 + h * in.x.s1 + xp8;  // token j = xr0
  uint4 xv[2];
  auto load_x = [&](int j0) {
#pragma unroll
    for (int k = 0; k < 2; ++k)
      xv[k] = j0 + xr0 + 32 * k < L ? ld16(x_src + (j0 + 32 * k) * in.x.s0) : zero4();
  };
  load_B(0, 0);
  cp_commit();
  load_x(0);
  {  // w_j = exp(cs_last - cs_j)·dt'_j (0 past the chunk's end), as v2_state<N, true>
    const int64_t row = (static_cast<int64_t>(c) * in.H + h) * Q;
    const float cs_last = p.css[row + L - 1];
    for (int j = tid; j < Q; j += kV2StateThreads)
      w_s[j] = j < L ? expf(cs_last - p.css[row + j]) * p.dts[row + j] : 0.0f;
  }
  const int wm = warp % 4, wn = warp / 4;  // rows p [16·wm, +16), columns n [wn·N/2, +N/2)
  const Lane ln(lane);
  float acc[NB][4] = {};
  __syncthreads();  // w_s written
  for (int j0 = 0, buf = 0; j0 < L; j0 += kV2J, buf ^= 1) {
    // x of stage j0 (in registers) → hi / lo tiles (the previous stage's MMAs are done).
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const int jj = xr0 + 32 * k;
      uint4 hi, lo;
      const uint32_t* xq = reinterpret_cast<const uint32_t*>(&xv[k]);
      uint32_t* hv = reinterpret_cast<uint32_t*>(&hi);
      uint32_t* lv = reinterpret_cast<uint32_t*>(&lo);
      const float wj = w_s[j0 + jj];
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const float2 f = unpack_bf16(xq[q]);
        const float a = wj * f.x, b = wj * f.y;
        hv[q] = pack_bf16(a, b);
        const float2 hf = unpack_bf16(hv[q]);
        lv[q] = pack_bf16(a - hf.x, b - hf.y);
      }
      st16(xh + jj * ldx + xp8, hi);
      if constexpr (kSplit) st16(xl + jj * ldx + xp8, lo);
    }
    // The next stage's B (cp.async, the other buffer: its last reader was stage j0 - 64) and x.
    const bool more = j0 + kV2J < L;
    if (more) load_B(j0 + kV2J, buf ^ 1);
    cp_commit();
    if (more) load_x(j0 + kV2J);
    cp_wait<1>();  // B of this stage landed
    __syncthreads();
    const bf16* bcur = bs + buf * kV2J * ldb;
#pragma unroll
    for (int k0 = 0; k0 < kV2J; k0 += 16) {
      if (j0 + k0 < L) {  // rows past the end are zeros: skip their MMAs
        uint32_t ah[4], al[4];
        const int xo = (k0 + ln.r + 8 * ln.hi) * ldx + wm * 16 + 8 * ln.sel;
        ldmatrix_x4_trans(ah, xh + xo);
        if constexpr (kSplit) ldmatrix_x4_trans(al, xl + xo);
#pragma unroll
        for (int nb = 0; nb < NB; nb += 2) {
          uint32_t b[4];
          ldmatrix_x4_trans(
              b, bcur + (k0 + ln.r + 8 * ln.sel) * ldb + wn * (N / 2) + nb * 8 + 8 * ln.hi);
          mma_bf16(acc[nb], ah, b[0], b[1]);
          if constexpr (kSplit) mma_bf16(acc[nb], al, b[0], b[1]);
          mma_bf16(acc[nb + 1], ah, b[2], b[3]);
          if constexpr (kSplit) mma_bf16(acc[nb + 1], al, b[2], b[3]);
        }
      }
    }
    __syncthreads();  // hi / lo and this B buffer are consumed
  }
  const int pr = wm * 16 + lane / 4;
  if constexpr (kChain) {
    chain_step<N>(p, loc, c, h, acc, pr, wn * (N / 2) + (lane % 4) * 2, tid);
    return;
  }
  // Sc [P][N] f32, as v2_state.
  float* Sc = p.Sws + (static_cast<int64_t>(c) * in.H + h) * kV2P * N;
#pragma unroll
  for (int nb = 0; nb < NB; ++nb) {
    const int n = wn * (N / 2) + nb * 8 + (lane % 4) * 2;
    *reinterpret_cast<float2*>(Sc + pr * N + n) = make_float2(acc[nb][0], acc[nb][1]);
    *reinterpret_cast<float2*>(Sc + (pr + 8) * N + n) = make_float2(acc[nb][2], acc[nb][3]);
  }
}

// ---- v6's output on wgmma (HYBRID_SSM_CHUNK_OUT_WG=1; slower than v6_out, kept as the base of a
// warp-specialised form) ------------------------------------------------------------------------
// Measured (session 25, Mamba2 1 x 16384, H 80): correct (41 cases, memcheck clean) but the output
// stage 347 -> 460 µs (run 2): one block a SM, its copies not overlapped with its products, and
// each j tile a chain of global C·Bᵀ loads, exps, 4 wgmma and a wait. Two warpgroups a block on
// paired i tiles with cs / dt' from L1 (112 KiB, two blocks a SM, 128 registers with spills: run
// 5) was slower still, 567 µs: 52% of the stall samples on the L1 loads of cs / dt' and the
// spilled epilogue addresses (run 6's ncu), 0.6 eligible warps a scheduler. The next form needs a
// producer warp (x, C, S_enter, C·Bᵀ through a ring) so that the consumers never wait on memory.
// One block a (chunk c, head h) of Q / 64 warpgroups; warpgroup t the chunk's rows
// i = 64t .. 64t + 63. The products are attention's (C·Bᵀ masked by the decay plays P, x plays V):
//   O = C_t S_enterᵀ · e^R                   N/16 wgmma m64n64k16, C_t [64 i][N] and S_enter
//                                            [64 p][N] both K-major from shared memory;
//                                            R = cs_{64t} (v6_out's reference)
//   for j tiles jt < t:  O += (C·Bᵀ[t][jt] ⊙ w_j) X_jt      w_j = e^{R − cs_j}·dt'_j
//   diagonal jt = t:     O ← O·e^{cs_i − R};  O += (C·Bᵀ[t][t] ⊙ e^{cs_i − cs_j}·dt'_j, j ≤ i) X_t
//                                            4 wgmma m64n64k16 a tile: A from registers (the
//                                            C·Bᵀ tile loaded from global in the accumulator
//                                            layout, scaled, packed to bf16), X_jt the MN-major B
//   y_i = (O + D·x_i) (· silu(z_i))          from the accumulators, x_i from the x tile t
// The same decays and roundings as v6_out (C·Bᵀ in bf16, the masked operand rounded to bf16); the
// exps by ex2.approx on cs·log2 e. What changes: each x tile is copied once a (chunk, head), not
// once per i tile (4 copies of 4 tiles against v6's 10), and each warpgroup's products run with no
// block barrier between them (v6_out: two barriers and two cp.async waits around each tile's 32
// HMMA a warp; session 24 run 3's ncu: 339 µs at Mamba2 1 x 16384, 22% of mma.sync's rate).
// Everything is copied once at the start (cp.async, 128-byte swizzle: x [Q/64][64 j][64 p],
// C [Q/64][N/64][64 i][64 n], S_enter [N/64][64 p][64 n]), then one barrier; a warpgroup past the
// chunk's end leaves after it. Shared memory at Q 256: 114 KiB at N 128 (one block a SM), 74 KiB
// at N 64. Registers: O 32, the tile's A fragments 16, the next tile's C·Bᵀ pairs 16 (loaded while
// this tile's products run).
constexpr int kOutWgTile = 64 * 128;  // one 64-row × 64-column bf16 tile, 128-byte swizzled

size_t out_wg_smem(int N, int Q) {
  const int nt = Q / kV2J, nb = N / 64;
  return static_cast<size_t>(nt + nt * nb + nb) * kOutWgTile + 2 * 256 * sizeof(float);
}

// The copies of out_wg_kernel and out_ws_kernel (cp.async, 16-byte pieces into the 128-byte
// swizzle; thread `tid` of `nt`): x [Q/64][64 j][64 p] of head h and C [Q/64][N/64][64 i][64 n] of
// group g, rows past the chunk's end zero-filled (never read from global); S_enter
// [N/64][64 p][64 n] (bf16, the pass kernel's).
template <int N>
__device__ __forceinline__ void ow_copy_x(unsigned char* xs, const SsmIn& in, const ChunkLoc& loc,
                                          int h, int Q, int tid, int nt) {
  const bf16* X = static_cast<const bf16*>(in.x.p);
#pragma unroll 1  // (unrolled, out_ws_kernel's producer spills its addresses)
  for (int e = tid; e < Q * 8; e += nt) {
    const int j = e / 8, u = e % 8;
    const bool ok = j < loc.L;
    cp_async16(xs + (j / 64) * kOutWgTile + wgmma::sw128(j % 64, u),
               ok ? X + (loc.t0 + j) * in.x.s0 + h * in.x.s1 + 8 * u : X, ok ? 16 : 0);
  }
}
template <int N>
__device__ __forceinline__ void ow_copy_c(unsigned char* ct, const SsmIn& in, const ChunkLoc& loc,
                                          int g, int Q, int tid, int nt) {
  constexpr int NB = N / 64;
  const bf16* Cg = static_cast<const bf16*>(in.C.p);
#pragma unroll 1  // (unrolled, out_ws_kernel's producer spills its addresses)
  for (int e = tid; e < Q * (N / 8); e += nt) {
    const int i = e / (N / 8), u = e % (N / 8);
    const bool ok = i < loc.L;
    cp_async16(ct + ((i / 64) * NB + u / 8) * kOutWgTile + wgmma::sw128(i % 64, u % 8),
               ok ? Cg + (loc.t0 + i) * in.C.s0 + g * in.C.s1 + 8 * u : Cg, ok ? 16 : 0);
  }
}
template <int N>
__device__ __forceinline__ void ow_copy_s(unsigned char* ss, const bf16* se, int tid, int nt) {
#pragma unroll 1  // (unrolled, out_ws_kernel's producer spills its addresses)
  for (int e = tid; e < kV2P * (N / 8); e += nt) {
    const int r = e / (N / 8), u = e % (N / 8);
    cp_async16(ss + (u / 8) * kOutWgTile + wgmma::sw128(r, u % 8), se + r * N + 8 * u, 16);
  }
}

// One warpgroup's i tile t (rows i0 = 64t ..) of the (chunk c, head h) of group g, i0 < L: the
// products and the epilogue above (out_wg_kernel's comment), from x tiles xs, C tiles ct (all of
// the chunk's: tile (t, b) at + (t·NB + b)·8 KiB), S_enter tiles ss, and cs / dt' (0 past L):
// cs_s holds cs·log2 e (kRawCs false) or cs (kRawCs: scaled here, the same product).
template <int N, bool kRawCs>
__device__ __forceinline__ void ow_tile(const ScanParams& p, const ChunkLoc& loc, int c, int h,
                                        int g, int t, const unsigned char* xs,
                                        const unsigned char* ct, const unsigned char* ss,
                                        const float* cs_s, const float* dt_s, int warp, int lane) {
  constexpr int NB = N / 64;
  constexpr float kLog2e = 1.4426950408889634f;
  const SsmIn& in = p.in;
  const int L = loc.L, Q = p.Q, i0 = kV2J * t;
  auto cs_at = [&](int j) { return kRawCs ? cs_s[j] * kLog2e : cs_s[j]; };
  // This thread's accumulator rows ia = i0 + ra, ib = ia + 8 and columns 8n + jl, + 1 (n = 0..7).
  const int ra = warp * 16 + lane / 4, ia = i0 + ra, ib = ia + 8, jl = 2 * (lane % 4);
  const float csR2 = cs_at(i0);  // R·log2 e
  float acc[32];
  {  // O = C_t S_enterᵀ (k = n, N/16 steps; a step's descriptors + 32 bytes, + 8 KiB a block)
    const uint64_t da = wgmma::desc_sw128(ct + t * NB * kOutWgTile, 16, 1024);
    const uint64_t db = wgmma::desc_sw128(ss, 16, 1024);
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < N / 16; ++kk) {
      const int off = ((kk / 4) * kOutWgTile + (kk % 4) * 32) / 16;
      wgmma::mma_m64n64k16_ss(acc, da + off, db + off, kk > 0);
    }
    wgmma::commit();
  }
  // C·Bᵀ tile (t, jt) of the (chunk, group) [Q i][Q j] bf16 (v3_cb_kernel<N, true>, written whole
  // for jt <= t): this thread's pairs in the accumulator layout, r[2n] row ia, r[2n + 1] row ib.
  const bf16* cb_row = reinterpret_cast<const bf16*>(p.CB) +
                       (static_cast<int64_t>(c) * in.G + g) * Q * Q + static_cast<int64_t>(ia) * Q +
                       jl;
  auto load_cb = [&](int jt, uint32_t(&r)[16]) {
#pragma unroll
    for (int n = 0; n < 8; ++n) {
      r[2 * n] = *reinterpret_cast<const uint32_t*>(cb_row + kV2J * jt + 8 * n);
      r[2 * n + 1] = *reinterpret_cast<const uint32_t*>(cb_row + 8 * Q + kV2J * jt + 8 * n);
    }
  };
  uint32_t cb[16];
  load_cb(0, cb);
  wgmma::wait<0>();
  wgmma::fence_operand(acc);
  {
    const float eR = exp2f(csR2);
#pragma unroll
    for (int e = 0; e < 32; ++e) acc[e] *= eR;
  }
  for (int jt = 0; jt <= t; ++jt) {
    const bool diag = jt == t;
    const int j0 = kV2J * jt;
    float ca = 0.0f, cb_ = 0.0f;
    if (diag) {  // the row factor e^{cs_i − R} on O (0 for rows past the end)
      ca = cs_at(ia), cb_ = cs_at(ib);
      const float fa = ia < L ? exp2_approx(ca - csR2) : 0.0f;
      const float fb = ib < L ? exp2_approx(cb_ - csR2) : 0.0f;
#pragma unroll
      for (int n = 0; n < 8; ++n)
        acc[4 * n] *= fa, acc[4 * n + 1] *= fa, acc[4 * n + 2] *= fb, acc[4 * n + 3] *= fb;
    }
    // The A fragments of k16 step kt (columns j0 + 16kt ..): n-tile n = 2kt + hn gives a[kt][2hn]
    // (row ia) and a[kt][2hn + 1] (row ib). Off the diagonal (j < i0 <= i) each value times w_j;
    // on it times e^{cs_i − cs_j}·dt'_j where j <= i (rows past the end: 0, never an exp of cs_j
    // alone, which could overflow).
    uint32_t a[4][4];
#pragma unroll
    for (int n = 0; n < 8; ++n) {
      const float2 u = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&cb[2 * n]));
      const float2 v = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&cb[2 * n + 1]));
      const int jj = 8 * n + jl;  // column within the tile
      const float c0 = cs_at(j0 + jj), c1 = cs_at(j0 + jj + 1);
      const float d0 = dt_s[j0 + jj], d1 = dt_s[j0 + jj + 1];
      float x0, x1, x2, x3;
      if (!diag) {
        const float w0 = exp2_approx(csR2 - c0) * d0, w1 = exp2_approx(csR2 - c1) * d1;
        x0 = u.x * w0, x1 = u.y * w1, x2 = v.x * w0, x3 = v.y * w1;
      } else {
        x0 = jj <= ra && ia < L ? u.x * exp2_approx(ca - c0) * d0 : 0.0f;
        x1 = jj + 1 <= ra && ia < L ? u.y * exp2_approx(ca - c1) * d1 : 0.0f;
        x2 = jj <= ra + 8 && ib < L ? v.x * exp2_approx(cb_ - c0) * d0 : 0.0f;
        x3 = jj + 1 <= ra + 8 && ib < L ? v.y * exp2_approx(cb_ - c1) * d1 : 0.0f;
      }
      a[n / 2][2 * (n % 2)] = pack_bf16(x0, x1);
      a[n / 2][2 * (n % 2) + 1] = pack_bf16(x2, x3);
    }
    if (!diag) load_cb(jt + 1, cb);  // the next tile's pairs fly while this one's products run
    wgmma::fence_operand(a);
    wgmma::fence_operand(acc);
    wgmma::fence();
    const uint64_t dx = wgmma::desc_sw128(xs + jt * kOutWgTile, kOutWgTile, 1024);
#pragma unroll
    for (int kt = 0; kt < 4; ++kt)
      wgmma::mma_m64n64k16_rs<1>(acc, a[kt], dx + kt * 2048 / 16, true);
    wgmma::commit();
    wgmma::wait<0>();
    wgmma::fence_operand(acc);
    wgmma::fence_operand(a);  // (the A registers stay untouched until the products are done)
  }
  // y = (O + D·x)·silu(z), two adjacent p a store; x_i from x tile t (rows i0..).
  const float D_h = in.D_skip(h);
  bf16* Y = static_cast<bf16*>(const_cast<void*>(in.y.p));
  const bool gate = in.z.p != nullptr;
  const unsigned char* xt = xs + t * kOutWgTile;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int i = half ? ib : ia, xr = ra + 8 * half;
    if (i >= L) continue;
    const int64_t tok = loc.t0 + i;
    bf16* yrow = Y + tok * in.y.s0 + h * in.y.s1 + jl;
#pragma unroll
    for (int n = 0; n < 8; ++n) {
      const int pp = 8 * n + jl;
      const float2 xv = __bfloat1622float2(
          *reinterpret_cast<const __nv_bfloat162*>(xt + wgmma::sw128(xr, pp / 8) + (pp % 8) * 2));
      const float o0 = acc[4 * n + 2 * half], o1 = acc[4 * n + 2 * half + 1];
      const float v0 = gate ? in.finish(o0, D_h, xv.x, tok, h, pp) : o0 + D_h * xv.x;
      const float v1 = gate ? in.finish(o1, D_h, xv.y, tok, h, pp + 1) : o1 + D_h * xv.y;
      *reinterpret_cast<__nv_bfloat162*>(yrow + 8 * n) = __floats2bfloat162_rn(v0, v1);
    }
  }
}

template <int N>
__global__ void __launch_bounds__(512, 1) out_wg_kernel(const ScanParams p, const bf16* Se) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int NB = N / 64;  // 64-column blocks of a C / S_enter row
  constexpr float kLog2e = 1.4426950408889634f;
  const int h = blockIdx.x, c = blockIdx.y, tid = threadIdx.x, lane = tid % 32;
  const int wg = __shfl_sync(0xffffffffu, tid / 128, 0), warp = tid % 128 / 32;
  const int Q = p.Q, nt = Q / kV2J;
  ChunkLoc loc;
  if (!locate(p, c, loc)) return;
  const SsmIn& in = p.in;
  const int L = loc.L, g = in.group(h);
  if (loc.slot < 0) {  // padding: y = 0
    for (int o = tid; o < L * kV2P; o += blockDim.x)
      in.store_y(loc.t0 + o / kV2P, h, o % kV2P, 0.0f);
    return;
  }
  extern __shared__ __align__(1024) unsigned char wo_smem[];
  if (smem_u32(wo_smem) % 1024 != 0) __trap();      // the swizzled tiles need it (no static smem)
  unsigned char* xs = wo_smem;                      // x tile jt at + jt·8 KiB: [64 j][64 p]
  unsigned char* cs_t = xs + nt * kOutWgTile;       // C tile (t, b) at + (t·NB + b)·8 KiB
  unsigned char* ss = cs_t + nt * NB * kOutWgTile;  // S_enter block b at + b·8 KiB: [64 p][64 n]
  float* cs_s = reinterpret_cast<float*>(ss + NB * kOutWgTile);  // [256] cs_j·log2 e (0 past L)
  float* dt_s = cs_s + 256;                                      // [256] dt'_j (0 past L)

  const int64_t row = static_cast<int64_t>(c) * in.H + h;
  ow_copy_x<N>(xs, in, loc, h, Q, tid, blockDim.x);
  ow_copy_c<N>(cs_t, in, loc, g, Q, tid, blockDim.x);
  ow_copy_s<N>(ss, Se + row * kV2P * N, tid, blockDim.x);
  cp_commit();
  for (int j = tid; j < Q; j += blockDim.x) {
    cs_s[j] = j < L ? p.css[row * Q + j] * kLog2e : 0.0f;
    dt_s[j] = j < L ? p.dts[row * Q + j] : 0.0f;
  }
  cp_wait<0>();
  wgmma::fence_async_smem();
  __syncthreads();  // (the only block-wide barrier)
  if (kV2J * wg >= L) return;
  ow_tile<N, false>(p, loc, c, h, g, wg, xs, cs_t, ss, cs_s, dt_s, warp, lane);
#else
  __trap();  // built without sm_90a code: out_wg_supported refuses, the host never launches it
#endif
}

// ---- v6's output on wgmma, warp-specialised (HYBRID_SSM_CHUNK_OUT_WG=2; correct, but slower than
// v6_out: 414 µs against 342 at Mamba2 1 x 16384, session 26 run 2) ------------------------------
// out_wg_kernel's products and epilogue (ow_tile) fed by a producer warp, so that copies and
// products overlap (out_wg_kernel copies everything, waits, computes: 460 µs against v6_out's 347).
// Persistent blocks, one a SM: block b takes a contiguous range of the (chunk, head) items
// c·H + h (chunk-major, over the chunks that exist: chunk_off[seqs]), so that consecutive items
// share their chunk's C (and C·Bᵀ in L2). Threads: Q/64 consumer warpgroups (setmaxnreg: 112
// registers), then one producer warpgroup (32).
//   producer: per item with a state slot, into stage k % 3 (once the consumers have released its
//             previous use: `empty`): x [Q/64 tiles], S_enter [N/64 tiles], cs and dt' [Q] f32
//             (zero past L), by cp.async arriving on `full` when landed; on a new (chunk, group),
//             first C [Q/64][N/64 tiles] into the one C buffer once every consumer warp is done
//             with the previous C (`cempty`), arriving on `cfull`.
//   consumer warpgroup w: for its k-th item, i tile t = (w + k) % (Q/64): the tiles rotate, so
//             that each warpgroup's j tiles average (Q/64 + 1) / 2 an item instead of warpgroup
//             Q/64 − 1 always taking Q/64 (the ring of 3 lets the warpgroups drift apart by up to
//             two items); then one arrival a warp on `empty` (and on `cempty` after a C's last
//             item). Items of padding sequences (no slot): y = 0 by the consumers, no stage.
// Shared memory at Q 256, N 128: C 64 KiB + 3 stages of 50 KiB = 214 KiB (one block a SM, 20
// warps); N 64: 158 KiB. Prediction (session 25): the output stage 347 -> 170-230 µs at Mamba2 1 x
// 16384 (its bytes ~130 µs at the copy ceiling: x in, y out, S_enter in), the call 691 -> 520-580.
constexpr int kOwsStages = 3;
constexpr int kOwsConsumerRegs = 112, kOwsProducerRegs = 32;  // setmaxnreg's counts

// One stage: x tiles [Q/64], S_enter tiles [N/64], cs [Q] and dt' [Q] (f32), rounded up to 1 KiB.
__host__ __device__ constexpr int ows_stage_bytes(int N, int Q) {
  return ((Q / kV2J + N / 64) * kOutWgTile + 2 * Q * 4 + 1023) / 1024 * 1024;
}

// The registers a thread ptxas gave a kernel (what a launch allocates per thread).
template <class Kernel>
int kernel_regs(Kernel* kernel) {
  cudaFuncAttributes fa{};
  HYBRID_CUDA_CHECK(cudaFuncGetAttributes(&fa, reinterpret_cast<const void*>(kernel)));
  return fa.numRegs;
}

size_t out_ws_smem(int N, int Q) {
  return static_cast<size_t>(Q / kV2J) * (N / 64) * kOutWgTile +
         static_cast<size_t>(kOwsStages) * ows_stage_bytes(N, Q) +
         (2 * kOwsStages + 2) * sizeof(uint64_t);
}

template <int N>
__global__ void __launch_bounds__(5 * 128, 1) out_ws_kernel(const ScanParams p, const bf16* Se) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int NB = N / 64;  // 64-column blocks of a C / S_enter row
  const int Q = p.Q, nt = Q / kV2J, consumers = nt * 128;
  const int tid = threadIdx.x, lane = tid % 32;
  const SsmIn& in = p.in;
  extern __shared__ __align__(1024) unsigned char ws_smem[];
  if (smem_u32(ws_smem) % 1024 != 0) __trap();  // the swizzled tiles need it (no static smem)
  unsigned char* ct = ws_smem;                  // C tile (t, b) at + (t·NB + b)·8 KiB
  unsigned char* stages = ct + nt * NB * kOutWgTile;
  const int stage_bytes = ows_stage_bytes(N, Q);
  uint64_t* full = reinterpret_cast<uint64_t*>(stages + kOwsStages * stage_bytes);
  uint64_t* empty = full + kOwsStages;
  uint64_t* cfull = empty + kOwsStages;
  uint64_t* cempty = cfull + 1;
  if (tid == 0) {
    for (int s = 0; s < kOwsStages; ++s) {
      mbar_init(full + s, 128);              // the producer's threads (cp.async.mbarrier.arrive)
      mbar_init(empty + s, consumers / 32);  // one arrival a consumer warp
    }
    mbar_init(cfull, 128);
    mbar_init(cempty, consumers / 32);
    mbar_init_fence();
  }
  __syncthreads();
  // The block's items [first, last); item it: chunk c = it / H, head h = it % H, false for a
  // padding sequence's chunk (y = 0, no stage).
  // (at most 65535 chunks, as scan_v2_supports checks, times H: an int)
  const int items = p.chunk_off[p.seqs] * in.H;
  const int share = (items + gridDim.x - 1) / gridDim.x;
  const int first = min(items, static_cast<int>(blockIdx.x) * share),
            last = min(items, first + share);
  auto item = [&](int it, int& c, int& h, ChunkLoc& loc) {
    c = it / in.H, h = it % in.H;
    locate(p, c, loc);  // (c < chunk_off[seqs]: found)
    return loc.slot >= 0;
  };

  if (tid >= consumers) {  // the producer warpgroup
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kOwsProducerRegs) : "memory");
    const int ptid = tid - consumers;
    int k = 0, epoch = -1, cur_c = -1, cur_g = -1;
    for (int it = first; it < last; ++it) {
      int c, h;
      ChunkLoc loc;
      if (!item(it, c, h, loc)) continue;
      const int g = in.group(h);
      if (c != cur_c || g != cur_g) {  // a new C, once every consumer warp is done with the last
        if (epoch >= 0) mbar_wait(cempty, epoch & 1);
        ++epoch, cur_c = c, cur_g = g;
        ow_copy_c<N>(ct, in, loc, g, Q, ptid, 128);
        cp_async_mbar_arrive(cfull);
      }
      const int s = k % kOwsStages;
      if (k >= kOwsStages) mbar_wait(empty + s, (k / kOwsStages - 1) & 1);
      unsigned char* st = stages + s * stage_bytes;
      const int64_t row = static_cast<int64_t>(c) * in.H + h;
      ow_copy_x<N>(st, in, loc, h, Q, ptid, 128);
      ow_copy_s<N>(st + nt * kOutWgTile, Se + row * kV2P * N, ptid, 128);
      float* cs_d = reinterpret_cast<float*>(st + (nt + NB) * kOutWgTile);  // cs [Q], then dt' [Q]
      for (int e = ptid; e < Q / 2; e += 128) {  // 16-byte pieces, the bytes past L zero-filled
        const int dt_row = e / (Q / 4), j = 4 * (e % (Q / 4));
        const int bytes = max(0, min(16, 4 * (loc.L - j)));
        const float* src = (dt_row ? p.dts : p.css) + row * Q + j;
        cp_async16(cs_d + dt_row * Q + j, bytes > 0 ? src : p.css, bytes);
      }
      cp_async_mbar_arrive(full + s);
      ++k;
    }
    cp_commit();  // its copies land before it exits
    cp_wait<0>();
    return;
  }

  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kOwsConsumerRegs) : "memory");
  const int wg = __shfl_sync(0xffffffffu, tid / 128, 0), warp = tid % 128 / 32;
  int k = 0, epoch = -1, cur_c = -1, cur_g = -1;
  for (int it = first; it < last; ++it) {
    int c, h;
    ChunkLoc loc;
    if (!item(it, c, h, loc)) {
      for (int o = tid; o < loc.L * kV2P; o += consumers)
        in.store_y(loc.t0 + o / kV2P, h, o % kV2P, 0.0f);
      continue;
    }
    const int g = in.group(h);
    if (c != cur_c || g != cur_g) {
      ++epoch, cur_c = c, cur_g = g;
      mbar_wait(cfull, epoch & 1);
    }
    const int s = k % kOwsStages;
    mbar_wait(full + s, (k / kOwsStages) & 1);
    wgmma::fence_async_smem();  // the stage's and C's tiles are wgmma operands
    const unsigned char* st = stages + s * stage_bytes;
    const float* cs_s = reinterpret_cast<const float*>(st + (nt + NB) * kOutWgTile);
    const int t = (wg + k) % nt;
    if (kV2J * t < loc.L)
      ow_tile<N, true>(p, loc, c, h, g, t, st, ct, st + nt * kOutWgTile, cs_s, cs_s + Q, warp,
                       lane);
    __syncwarp();
    if (lane == 0) mbar_arrive(empty + s);  // this warp's reads of the stage are done
    bool last_of_c = true;  // the next item with a stage has another (chunk, group), or none
    for (int nx = it + 1; nx < last; ++nx) {
      int c2, h2;
      ChunkLoc loc2;
      if (!item(nx, c2, h2, loc2)) continue;
      last_of_c = c2 != c || in.group(h2) != g;
      break;
    }
    if (last_of_c && lane == 0) mbar_arrive(cempty);
    ++k;
  }
#else
  __trap();  // built without sm_90a code: the host never launches it
#endif
}

// ---- host side -----------------------------------------------------------------------------

// ---- ssm_chunk_scan --------------------------------------------------------------------------

Reason scan_supports(const SsmChunkScan& a) {
  const int64_t P = a.x.size(2), N = a.B.size(2);
  if (P > kMaxDim || N > kMaxDim) return str("P=", P, ", N=", N, ": both must be <= 256");
  return {};
}

size_t align_up(size_t v) {
  return (v + 255) & ~size_t{255};
}

void scan_cuda(const SsmChunkScan& a, Context& ctx) {
  const int64_t T = a.x.size(0), H = a.x.size(1), P = a.x.size(2), N = a.B.size(2);
  const int64_t seqs = a.state_slots.size(0), Q = a.chunk_size;
  if (seqs == 0) return;
  const int64_t max_chunks = T / Q + seqs;  // ≥ Σ ceil(len_i / Q)
  // One workspace: chunk_off | dt' | cs | Sc / S_enter.
  const size_t off_b = align_up(sizeof(int) * (seqs + 1));
  const size_t q_b = align_up(sizeof(float) * max_chunks * H * Q);
  const size_t s_b = align_up(sizeof(float) * max_chunks * H * P * N);
  char* ws = static_cast<char*>(ctx.workspace(off_b + 2 * q_b + s_b));
  ScanParams p;
  p.in = ssm_in(a.x, a.dt, a.A_log, a.B, a.C, a.D, a.dt_bias, a.z, a.y, a.dt_softplus, a.dt_min,
                a.dt_max);
  p.Q = static_cast<int>(Q), p.seqs = static_cast<int>(seqs);
  p.cu_seqlens = a.cu_seqlens.data_as<const int>();
  p.slots = a.state_slots.data_as<const int>();
  if (a.has_initial_state.defined())
    p.has_initial = a.has_initial_state.data(), p.has_initial_dt = a.has_initial_state.dtype();
  p.state = a.state.data();
  p.st_slot = a.state.stride(0), p.st_h = a.state.stride(1), p.st_p = a.state.stride(2);
  p.chunk_states = arg(a.chunk_states);
  p.chunk_off = reinterpret_cast<int*>(ws);
  p.dts = reinterpret_cast<float*>(ws + off_b);
  p.css = reinterpret_cast<float*>(ws + off_b + q_b);
  p.Sws = reinterpret_cast<float*>(ws + off_b + 2 * q_b);
  cudaStream_t stream = as_stream(ctx.stream());

  scan_offsets_kernel<<<1, 32, 0, stream>>>(p.cu_seqlens, p.seqs, p.Q, p.chunk_off);
  HYBRID_CUDA_CHECK_LAUNCH();
  const unsigned hh = static_cast<unsigned>(H);
  scan_chunk_state_kernel<<<dim3(static_cast<unsigned>(max_chunks), hh), kScanThreads, 0, stream>>>(
      p);
  HYBRID_CUDA_CHECK_LAUNCH();
  const dim3 pass_grid(static_cast<unsigned>((P * N + kScanThreads - 1) / kScanThreads), hh,
                       static_cast<unsigned>(seqs));
  dispatch_state(a.state.dtype(), [&](auto ts) {
    scan_state_pass_kernel<decltype(ts)><<<pass_grid, kScanThreads, 0, stream>>>(p);
    HYBRID_CUDA_CHECK_LAUNCH();
  });
  const size_t smem = scan_output_smem(static_cast<int>(P), static_cast<int>(N), p.Q);
  if (smem > 48 * 1024) ensure_dynamic_smem(scan_output_kernel, smem);
  scan_output_kernel<<<dim3(static_cast<unsigned>(max_chunks), hh,
                            static_cast<unsigned>(Q / kTile)),
                       kScanThreads, smem, stream>>>(p);
  HYBRID_CUDA_CHECK_LAUNCH();
}

Reason scan_tiled_supports(const SsmChunkScan& a) {
  const int64_t P = a.x.size(2), N = a.B.size(2);
  if (P != 64) return str("P=", P, ": the tiled scan is built for P = 64");
  if (N % 64 != 0 || N > kMaxDim) return str("N=", N, ": the tiled scan needs N % 64 == 0, <= 256");
  return {};
}

Reason scan_mma_supports(const SsmChunkScan& a) {
  if (a.y.dtype() != DType::bf16) return std::string("y must be bf16 (bf16 tensor-core products)");
  return scan_tiled_supports(a);
}

void scan_tiled_run(const SsmChunkScan& a, Context& ctx, bool mma) {
  const int64_t T = a.x.size(0), H = a.x.size(1), P = a.x.size(2), N = a.B.size(2);
  const int64_t G = a.B.size(1), seqs = a.state_slots.size(0), Q = a.chunk_size;
  if (seqs == 0) return;
  const int64_t max_chunks = T / Q + seqs;  // ≥ Σ ceil(len_i / Q)
  // One workspace: chunk_off | dt' | cs | Sc / S_enter | CB [max_chunks, G, Q, Q].
  const size_t off_b = align_up(sizeof(int) * (seqs + 1));
  const size_t q_b = align_up(sizeof(float) * max_chunks * H * Q);
  const size_t s_b = align_up(sizeof(float) * max_chunks * H * P * N);
  const size_t cb_b = align_up(sizeof(float) * max_chunks * G * Q * Q);
  char* ws = static_cast<char*>(ctx.workspace(off_b + 2 * q_b + s_b + cb_b));
  ScanParams p;
  p.in = ssm_in(a.x, a.dt, a.A_log, a.B, a.C, a.D, a.dt_bias, a.z, a.y, a.dt_softplus, a.dt_min,
                a.dt_max);
  p.Q = static_cast<int>(Q), p.seqs = static_cast<int>(seqs);
  p.cu_seqlens = a.cu_seqlens.data_as<const int>();
  p.slots = a.state_slots.data_as<const int>();
  if (a.has_initial_state.defined())
    p.has_initial = a.has_initial_state.data(), p.has_initial_dt = a.has_initial_state.dtype();
  p.state = a.state.data();
  p.st_slot = a.state.stride(0), p.st_h = a.state.stride(1), p.st_p = a.state.stride(2);
  p.chunk_states = arg(a.chunk_states);
  p.chunk_off = reinterpret_cast<int*>(ws);
  p.dts = reinterpret_cast<float*>(ws + off_b);
  p.css = reinterpret_cast<float*>(ws + off_b + q_b);
  p.Sws = reinterpret_cast<float*>(ws + off_b + 2 * q_b);
  float* CB = reinterpret_cast<float*>(ws + off_b + 2 * q_b + s_b);
  cudaStream_t stream = as_stream(ctx.stream());
  const unsigned mc = static_cast<unsigned>(max_chunks), hh = static_cast<unsigned>(H);
  const unsigned nt = static_cast<unsigned>(Q / kFT);

  scan_offsets_kernel<<<1, 32, 0, stream>>>(p.cu_seqlens, p.seqs, p.Q, p.chunk_off);
  HYBRID_CUDA_CHECK_LAUNCH();
  launch_scan_dt(p, mc, hh, stream);
  scan_cb_kernel<<<dim3(mc, static_cast<unsigned>(G), nt * nt), kScanThreads, 0, stream>>>(p, CB);
  HYBRID_CUDA_CHECK_LAUNCH();
  scan_state_t_kernel<<<dim3(mc, hh, static_cast<unsigned>(N / kFT)), kScanThreads, 0, stream>>>(p);
  HYBRID_CUDA_CHECK_LAUNCH();
  const dim3 pass_grid(static_cast<unsigned>((P * N + kScanThreads - 1) / kScanThreads), hh,
                       static_cast<unsigned>(seqs));
  dispatch_state(a.state.dtype(), [&](auto ts) {
    scan_state_pass_kernel<decltype(ts)><<<pass_grid, kScanThreads, 0, stream>>>(p);
    HYBRID_CUDA_CHECK_LAUNCH();
  });
  if (mma)
    scan_out_mma_kernel<<<dim3(mc, hh, nt), kScanThreads, 0, stream>>>(p, CB);
  else
    scan_out_t_kernel<<<dim3(mc, hh, nt), kScanThreads, 0, stream>>>(p, CB);
  HYBRID_CUDA_CHECK_LAUNCH();
}

void scan_tiled_cuda(const SsmChunkScan& a, Context& ctx) {
  scan_tiled_run(a, ctx, false);
}
void scan_mma_cuda(const SsmChunkScan& a, Context& ctx) {
  scan_tiled_run(a, ctx, true);
}

// ---- v2 / v3 host side -----------------------------------------------------------------------

// HYBRID_SSM_CHUNK_STAGES=1: CUDA events between the launches of one call, then a synchronize
// and one debug-level log line with each kernel's µs (hybrid-ops: add --log debug). Off while the
// stream is being captured into a CUDA graph (no synchronize there). Costs a host sync per call:
// a diagnostic, not for serving.
class StageTimer {
 public:
  StageTimer(Context& ctx, cudaStream_t stream, const char* variant)
      : ctx_(ctx), stream_(stream), variant_(variant) {
    if (!env_on("HYBRID_SSM_CHUNK_STAGES") || ctx.log_level() < LogLevel::debug) return;
    cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    HYBRID_CUDA_CHECK(cudaStreamIsCapturing(stream, &cap));
    if (cap != cudaStreamCaptureStatusNone) return;
    on_ = true;
    mark(nullptr);
  }
  StageTimer(const StageTimer&) = delete;
  StageTimer& operator=(const StageTimer&) = delete;
  ~StageTimer() {
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
  }
  // Records an event after the launches so far; `stage` names the launches since the last mark.
  void mark(const char* stage) {
    if (!on_) return;
    cudaEvent_t e;
    HYBRID_CUDA_CHECK(cudaEventCreate(&e));
    events_.push_back(e);
    HYBRID_CUDA_CHECK(cudaEventRecord(e, stream_));
    if (stage != nullptr) names_.push_back(stage);
  }
  void report(const std::string& shape) {
    if (!on_ || events_.size() < 2) return;
    HYBRID_CUDA_CHECK(cudaEventSynchronize(events_.back()));
    std::string line = str(variant_, " stages (us) [", shape, "]:");
    float total = 0.0f;
    for (size_t k = 0; k + 1 < events_.size(); ++k) {
      float ms = 0.0f;
      HYBRID_CUDA_CHECK(cudaEventElapsedTime(&ms, events_[k], events_[k + 1]));
      total += ms;
      line += str(" ", names_[k], " ", static_cast<int>(ms * 1e4f) / 10.0, ",");
    }
    line += str(" total ", static_cast<int>(total * 1e4f) / 10.0);
    ctx_.log(LogLevel::debug, line);
  }

 private:
  Context& ctx_;
  cudaStream_t stream_;
  const char* variant_;
  bool on_ = false;
  std::vector<cudaEvent_t> events_;
  std::vector<const char*> names_;
};

bool rows16(const Tensor& t) {  // bf16 rows starting on 16-byte boundaries
  if (reinterpret_cast<uintptr_t>(t.data()) % 16 != 0) return false;
  for (int d = 0; d + 1 < t.rank(); ++d)
    if (t.stride(d) % 8 != 0) return false;
  return true;
}

Reason scan_v2_supports(const SsmChunkScan& a) {
  const int64_t P = a.x.size(2), N = a.B.size(2);
  if (P != kV2P) return str("P=", P, ": the tensor-core scan is built for P = 64");
  if (N != 64 && N != 128 && N != 256)
    return str("N=", N, ": the tensor-core scan needs 64/128/256");
  for (const Tensor* t : {&a.x, &a.B, &a.C, &a.y})
    if (t->dtype() != DType::bf16) return std::string("x, B, C and y must be bf16");
  for (const Tensor* t : {&a.x, &a.B, &a.C, &a.y})
    if (!rows16(*t)) return std::string("x, B, C, y rows must start on 16-byte boundaries");
  if (a.x.size(0) / a.chunk_size + a.state_slots.size(0) > 65535)
    return std::string("more than 65535 chunks");
  return {};
}

// v3 = v2 with the output kernel compiled per N (v3_out_kernel<N>). HYBRID_SSM_CHUNK_V3=0 turns it
// off (v2 runs), so both can be tested and timed from one build.
Reason scan_v3_supports(const SsmChunkScan& a) {
  static const bool off = env_is_zero("HYBRID_SSM_CHUNK_V3");
  if (off) return std::string("HYBRID_SSM_CHUNK_V3=0");
  return scan_v2_supports(a);
}

// v6 = v3 with v6_state_kernel<N> (pipelined tile loads) and v6_out_kernel<N> (fewer instructions
// around the output MMAs); same grids and workspace. HYBRID_SSM_CHUNK_V6=0 turns it off (v3 runs).
Reason scan_v6_supports(const SsmChunkScan& a) {
  static const bool off = env_is_zero("HYBRID_SSM_CHUNK_V6");
  if (off) return std::string("HYBRID_SSM_CHUNK_V6=0");
  return scan_v2_supports(a);
}

// version 2, 3 or 6: v6 is v3 with v6_state_kernel and v6_out_kernel (the same grids, workspace
// and other launches).
void scan_v2_run(const SsmChunkScan& a, Context& ctx, int version) {
  const bool v3 = version >= 3;
  const int64_t T = a.x.size(0), H = a.x.size(1), N = a.B.size(2);
  const int64_t seqs = a.state_slots.size(0), Q = a.chunk_size, PN = kV2P * N;
  if (seqs == 0) return;
  const int64_t max_chunks = T / Q + seqs;  // ≥ Σ ceil(len_i / Q)
  const int64_t G = a.B.size(1);
  // One workspace: chunk_off | dt' | cs | Sc (f32) | S_enter (bf16) | v3: CB (f32).
  const size_t off_b = align_up(sizeof(int) * (seqs + 1));
  const size_t q_b = align_up(sizeof(float) * max_chunks * H * Q);
  const size_t s_b = align_up(sizeof(float) * max_chunks * H * PN);
  const size_t e_b = align_up(sizeof(bf16) * max_chunks * H * PN);
  const size_t cb_b = v3 ? align_up(sizeof(float) * max_chunks * G * Q * Q) : 0;
  // HYBRID_SSM_CHUNK_CHAIN: the state kernel chains the chunks itself (v6_state_kernel's kChain)
  // and no pass kernel runs but for the zero-length sequences; its ticket and flags after CB. The
  // default where its serial path hides under the products, H >= kChainMinHeads (see the chained
  // state's comment); =1 always, =0 never. N 256 keeps the pass (its chained kernel would hold S
  // beside Sc: 128 registers, spills).
  static const int chain_asked = env_int("HYBRID_SSM_CHUNK_CHAIN", -1);
  const bool chain =
      (chain_asked == 1 || (chain_asked == -1 && H >= kChainMinHeads)) && version == 6 && N <= 128;
  const size_t chain_b = chain ? align_up(sizeof(int) * (1 + max_chunks * H)) : 0;
  char* ws = static_cast<char*>(ctx.workspace(off_b + 2 * q_b + s_b + e_b + cb_b + chain_b));
  ScanParams p;
  p.in = ssm_in(a.x, a.dt, a.A_log, a.B, a.C, a.D, a.dt_bias, a.z, a.y, a.dt_softplus, a.dt_min,
                a.dt_max);
  p.Q = static_cast<int>(Q), p.seqs = static_cast<int>(seqs);
  p.cu_seqlens = a.cu_seqlens.data_as<const int>();
  p.slots = a.state_slots.data_as<const int>();
  if (a.has_initial_state.defined())
    p.has_initial = a.has_initial_state.data(), p.has_initial_dt = a.has_initial_state.dtype();
  p.state = a.state.data();
  p.st_slot = a.state.stride(0), p.st_h = a.state.stride(1), p.st_p = a.state.stride(2);
  p.chunk_states = arg(a.chunk_states);
  p.chunk_off = reinterpret_cast<int*>(ws);
  p.dts = reinterpret_cast<float*>(ws + off_b);
  p.css = reinterpret_cast<float*>(ws + off_b + q_b);
  p.Sws = reinterpret_cast<float*>(ws + off_b + 2 * q_b);
  bf16* Se = reinterpret_cast<bf16*>(ws + off_b + 2 * q_b + s_b);
  if (v3) p.CB = reinterpret_cast<float*>(ws + off_b + 2 * q_b + s_b + e_b);
  if (chain) p.chain = reinterpret_cast<int*>(ws + off_b + 2 * q_b + s_b + e_b + cb_b);
  p.st_dt = a.state.dtype();
  p.Se = Se;
  cudaStream_t stream = as_stream(ctx.stream());
  const unsigned mc = static_cast<unsigned>(max_chunks), hh = static_cast<unsigned>(H);
  // v6: C·Bᵀ in bf16 (v6_out_kernel's kCbBf16), in the first half of the f32 space;
  // HYBRID_SSM_CHUNK_CB_BF16=0 keeps it in f32.
  static const bool cb_f32_asked = env_is_zero("HYBRID_SSM_CHUNK_CB_BF16");
  const bool cb_bf16 = version == 6 && !cb_f32_asked;
  StageTimer timer(ctx, stream,
                   version == 6 ? "ssm_chunk_scan.cuda_v6"
                   : v3         ? "ssm_chunk_scan.cuda_v3"
                                : "ssm_chunk_scan.cuda_v2");

  scan_offsets_kernel<<<1, 32, 0, stream>>>(p.cu_seqlens, p.seqs, p.Q, p.chunk_off);
  HYBRID_CUDA_CHECK_LAUNCH();
  timer.mark("offsets");
  const size_t st_smem =
      version == 6 ? v6_state_smem(static_cast<int>(N)) : v2_state_smem(static_cast<int>(N));
  auto state = [&](auto kernel) {
    ensure_dynamic_smem(kernel, st_smem);
    kernel<<<dim3(hh, mc), kV2StateThreads, st_smem, stream>>>(p);
    HYBRID_CUDA_CHECK_LAUNCH();
  };
  if (v3) {  // dt', cs for every (chunk, head) first: the state kernel's prologue becomes loads
    launch_scan_dt(p, mc, hh, stream);
    timer.mark("dt");
    // HYBRID_SSM_CHUNK_STATE_SPLIT=0: v6's state products on w·x rounded to bf16 once.
    static const bool one_rounding = env_is_zero("HYBRID_SSM_CHUNK_STATE_SPLIT");
    // (The chain first: it replaces the pass, so it takes the state products whatever else is
    // asked.)
    if (chain) {
      HYBRID_CUDA_CHECK(cudaMemsetAsync(p.chain, 0, chain_b, stream));
      if (N == 64)
        state(v6_state_kernel<64, true, true>);
      else
        state(v6_state_kernel<128, true, true>);
    } else if (version == 6 && one_rounding) {
      if (N == 64)
        state(v6_state_kernel<64, false>);
      else if (N == 128)
        state(v6_state_kernel<128, false>);
      else
        state(v6_state_kernel<256, false>);
    } else if (version == 6 && N == 64)
      state(v6_state_kernel<64>);
    else if (version == 6 && N == 128)
      state(v6_state_kernel<128>);
    else if (version == 6)
      state(v6_state_kernel<256>);
    else if (N == 64)
      state(v2_state_kernel<64, true>);
    else if (N == 128)
      state(v2_state_kernel<128, true>);
    else
      state(v2_state_kernel<256, true>);
  } else if (N == 64) {
    state(v2_state_kernel<64>);
  } else if (N == 128) {
    state(v2_state_kernel<128>);
  } else {
    state(v2_state_kernel<256>);
  }
  timer.mark("state");
  const dim3 pass_grid(static_cast<unsigned>((PN / 4 + kV2PassThreads - 1) / kV2PassThreads), hh,
                       static_cast<unsigned>(seqs));
  dispatch_state(a.state.dtype(), [&](auto ts) {
    if (chain)
      v2_pass_kernel<decltype(ts), true><<<pass_grid, kV2PassThreads, 0, stream>>>(p, Se);
    else
      v2_pass_kernel<decltype(ts)><<<pass_grid, kV2PassThreads, 0, stream>>>(p, Se);
    HYBRID_CUDA_CHECK_LAUNCH();
  });
  timer.mark("pass");
  if (v3) {  // C·Bᵀ once per (chunk, group), right before the output kernel reads it (L2)
    const int64_t nt = Q / kV2J;
    const dim3 cb_grid(static_cast<unsigned>(G * nt * (nt + 1) / 2), mc);
    const size_t cb_smem = v3_cb_smem(static_cast<int>(N));
    auto cb = [&](auto kernel) {
      ensure_dynamic_smem(kernel, cb_smem);
      kernel<<<cb_grid, kV2OutThreads, cb_smem, stream>>>(p);
      HYBRID_CUDA_CHECK_LAUNCH();
    };
    if (cb_bf16 && N == 64)
      cb(v3_cb_kernel<64, true>);
    else if (cb_bf16 && N == 128)
      cb(v3_cb_kernel<128, true>);
    else if (cb_bf16)
      cb(v3_cb_kernel<256, true>);
    else if (N == 64)
      cb(v3_cb_kernel<64>);
    else if (N == 128)
      cb(v3_cb_kernel<128>);
    else
      cb(v3_cb_kernel<256>);
    timer.mark("cb");
  }
  // HYBRID_SSM_CHUNK_OUT_WG=1: v6's output on wgmma (out_wg_kernel; slower than v6_out, see
  // there), =2: its warp-specialised form (out_ws_kernel; slower than v6_out too, see there),
  // where they can run: an sm_90a build on an sm_90 GPU, C·Bᵀ in bf16, N <= 128, Q a
  // multiple of 64 up to 256.
  static const int out_wg_asked = env_int("HYBRID_SSM_CHUNK_OUT_WG", 0);
  if ((out_wg_asked == 1 || out_wg_asked == 2) && version == 6) {
    std::string why;
#if !defined(HYBRID_CUDA_SM90A)
    why = "a build without sm_90a code";
#else
    if (device_info().major != 9) why = "not an sm_90 GPU";
#endif
    if (why.empty() && !cb_bf16) why = "C·Bᵀ in f32 (HYBRID_SSM_CHUNK_CB_BF16=0)";
    if (why.empty() && N > 128) why = str("N=", N, " (its tiles need N <= 128)");
    if (why.empty() && (Q % kV2J != 0 || Q > 256)) why = str("Q=", Q, " (a multiple of 64 <= 256)");
    if (why.empty() && out_wg_asked == 2) {
      // setmaxnreg moves registers within what the launch allocated (ptxas's count × threads):
      // the consumers' 112 and the producer's 32 must fit in it, or the consumers' request is
      // never granted and the block hangs.
      // (ptxas's count per N, queried once)
      static const int ws_regs[2] = {kernel_regs(out_ws_kernel<64>),
                                     kernel_regs(out_ws_kernel<128>)};
      const int regs = ws_regs[N == 64 ? 0 : 1];
      const int64_t threads = 2 * Q + 128;
      if (int64_t{regs} * threads < 2 * Q * kOwsConsumerRegs + 128 * kOwsProducerRegs)
        why =
            str("out_ws_kernel built with ", regs, " registers a thread: too few for setmaxnreg's ",
                kOwsConsumerRegs, " / ", kOwsProducerRegs);
    }
    if (why.empty()) {
      if (out_wg_asked == 2) {  // warp-specialised, persistent: one block a SM
        const size_t smem = out_ws_smem(static_cast<int>(N), static_cast<int>(Q));
        auto* kernel = N == 64 ? out_ws_kernel<64> : out_ws_kernel<128>;
        ensure_dynamic_smem(kernel, smem);
        kernel<<<static_cast<unsigned>(sm_count()), static_cast<unsigned>(2 * Q + 128), smem,
                 stream>>>(p, Se);
      } else {
        const size_t smem = out_wg_smem(static_cast<int>(N), static_cast<int>(Q));
        auto* kernel = N == 64 ? out_wg_kernel<64> : out_wg_kernel<128>;
        ensure_dynamic_smem(kernel, smem);
        kernel<<<dim3(hh, mc), static_cast<unsigned>(2 * Q), smem, stream>>>(p, Se);
      }
      HYBRID_CUDA_CHECK_LAUNCH();
      timer.mark("out");
      timer.report(str(
          "T=", T, " seqs=", seqs, " H=", H, " G=", a.B.size(1), " N=", N, " Q=", Q, " chunks<=",
          max_chunks, out_wg_asked == 2 ? " (out on wgmma, warp-specialised)" : " (out on wgmma)"));
      return;
    }
    ctx.log(LogLevel::debug, "[ssm_chunk_scan] cuda_v6: output on wgmma refused: " + why);
  }
  const size_t out_smem = v3 ? v3_out_smem(static_cast<int>(N)) : v2_out_smem(static_cast<int>(N));
  const dim3 out_grid(hh * static_cast<unsigned>(Q / kV2J), mc);
  auto out = [&](auto kernel) {
    ensure_dynamic_smem(kernel, out_smem);
    kernel<<<out_grid, kV2OutThreads, out_smem, stream>>>(p, Se);
    HYBRID_CUDA_CHECK_LAUNCH();
  };
  if (!v3)
    out(v2_out_kernel);
  else if (cb_bf16 && N == 64)
    out(v6_out_kernel<64, true>);
  else if (cb_bf16 && N == 128)
    out(v6_out_kernel<128, true>);
  else if (cb_bf16)
    out(v6_out_kernel<256, true>);
  else if (version == 6 && N == 64)
    out(v6_out_kernel<64>);
  else if (version == 6 && N == 128)
    out(v6_out_kernel<128>);
  else if (version == 6)
    out(v6_out_kernel<256>);
  else if (N == 64)
    out(v3_out_kernel<64>);
  else if (N == 128)
    out(v3_out_kernel<128>);
  else
    out(v3_out_kernel<256>);
  timer.mark("out");
  timer.report(str("T=", T, " seqs=", seqs, " H=", H, " G=", a.B.size(1), " N=", N, " Q=", Q,
                   " chunks<=", max_chunks));
}

void scan_v2_cuda(const SsmChunkScan& a, Context& ctx) {
  scan_v2_run(a, ctx, 2);
}
void scan_v3_cuda(const SsmChunkScan& a, Context& ctx) {
  scan_v2_run(a, ctx, 3);
}
void scan_v6_cuda(const SsmChunkScan& a, Context& ctx) {
  scan_v2_run(a, ctx, 6);
}

}  // namespace

void register_ssm_chunk(Registry& r) {
  r.add<SsmChunkScan>("ssm_chunk_scan.cuda", DeviceType::cuda, 0, scan_supports, scan_cuda);
  r.add<SsmChunkScan>("ssm_chunk_scan.cuda_tiled", DeviceType::cuda, 1, scan_tiled_supports,
                      scan_tiled_cuda);
  r.add<SsmChunkScan>("ssm_chunk_scan.cuda_tiled_mma", DeviceType::cuda, 2, scan_mma_supports,
                      scan_mma_cuda);
  r.add<SsmChunkScan>("ssm_chunk_scan.cuda_v2", DeviceType::cuda, 3, scan_v2_supports,
                      scan_v2_cuda);
  // cuda_v4 / cuda_v5 (head-slice output kernels, a fused dt/state kernel) measured slower than
  // v3 on the H200 and were removed in session 3: docs/ops/ssm.md, "tried and removed".
  r.add<SsmChunkScan>("ssm_chunk_scan.cuda_v3", DeviceType::cuda, 4, scan_v3_supports,
                      scan_v3_cuda);
  // cuda_v6: v3 with the leaner output kernel (v6_out_kernel). HYBRID_SSM_CHUNK_V6=0: v3 runs.
  r.add<SsmChunkScan>("ssm_chunk_scan.cuda_v6", DeviceType::cuda, 5, scan_v6_supports,
                      scan_v6_cuda);
}

}  // namespace hybrid::cuda
