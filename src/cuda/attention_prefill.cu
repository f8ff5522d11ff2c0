// CUDA: attn_prefill on tensor cores (FlashAttention-2 style), bf16 q and caches, D 64/128/256.
//
// Causal varlen prefill over the paged cache: query row i of sequence n sits at position
// p_i = seq_lens[n] − L_n + i and attends to keys j in [lo_i, p_i] (lo_i = 0 or p_i − W + 1):
//   S = scale · Q Kᵀ, P = softmax(S) (online, log2 domain), O = P V.
//
// Tiling: block (query tile of kBM = 64 rows of one sequence, query head), 4 warps × 16 rows.
// Per key tile of kBN = 64 keys (32 at D = 256) (gathered through the page table with cp.async,
// 16-byte pieces, XOR-swizzled rows in shared memory; one page lookup per row): S [16 ×
// 64] per warp by mma.sync m16n8k16 (bf16 in, f32 accumulate; Q and K fragments by ldmatrix),
// running max / sum per row, P rounded to bf16 and O [16 × D] += P V (V fragments by
// ldmatrix.trans). K of tile i+1 loads while P V of tile i runs; V of tile i loads while S of tile
// i runs. Shared memory: Q, K, V tiles, (64 + 2 · kBN) · D · 2 bytes. FLOPs: 4 · D per (query, key)
// pair of the causal window (≈ 4 · T² · D · Hq / 2 causal); bytes: K/V of the window per (query
// tile, head) from L2, Q and O once. A small planning kernel lists the (sequence, first row) of
// every query tile in the workspace (the tile count depends on cu_seqlens, which live on the
// device); blocks past the list exit.
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>

#include "cuda/attention_common.cuh"
#include "cuda/bulk_pipe.cuh"
#include "cuda/common.cuh"
#include "cuda/dtype.cuh"
#include "cuda/kernels.h"
#include "cuda/tensor_map.cuh"
#include "cuda/wgmma.cuh"
#include "hybrid/ops/attention.h"

namespace hybrid::cuda {

namespace attn {

namespace {

constexpr int kBM = 64, kThreads = 128;
// Keys per tile: 64, or 32 at D = 256 (the S and O fragments then fit 255 registers).
template <int D>
constexpr int kBN = D == 256 ? 32 : 64;
constexpr float kLog2e = 1.4426950408889634f;

struct PrefillParams {
  const __nv_bfloat16* q = nullptr;  // [T, Hq, D]
  int64_t q_t = 0, q_h = 0;
  Cache k, v;                     // [num_pages, page_size, Hkv, D] bf16
  PageTable pt;                   // [N, max_pages]
  const int* cu = nullptr;        // [N + 1]
  const int* seq_lens = nullptr;  // [N]
  int2* tiles = nullptr;          // [max_tiles] (sequence, first row) or (−1, 0)
  int N = 0, T = 0, Hq = 0, group = 1, max_tiles = 0, window = 0;
  int tile_rows = kBM;  // query rows per tile (plan_tiles_kernel): kBM, or kBM2 for the fa2 kernel
  float scale_log2 = 1.0f;
  void* out = nullptr;  // [T, Hq, D]
  DType o_dtype = DType::bf16;
  int64_t o_t = 0, o_h = 0;
};

// One thread: the query tiles of every sequence in order, longest-key-range (last) tiles first.
__global__ void plan_tiles_kernel(const PrefillParams p) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  int b = 0;
  for (int n = 0; n < p.N; ++n) {
    const int L = p.cu[n + 1] - p.cu[n];
    for (int r0 = 0; r0 < L && b < p.max_tiles; r0 += p.tile_rows) p.tiles[b++] = make_int2(n, r0);
  }
  for (; b < p.max_tiles; ++b) p.tiles[b] = make_int2(-1, 0);
}

template <int D>
__global__ void __launch_bounds__(kThreads) prefill_tc_kernel(const PrefillParams p) {
  constexpr int CH = D / 8;  // 16-byte chunks per row
  constexpr int BN = kBN<D>;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  __nv_bfloat16* q_s = reinterpret_cast<__nv_bfloat16*>(smem_raw);  // [kBM, D]
  __nv_bfloat16* k_s = q_s + kBM * D;                               // [BN, D]
  __nv_bfloat16* v_s = k_s + BN * D;                                // [BN, D]

  const int2 tile = p.tiles[p.max_tiles - 1 - blockIdx.x];  // last tiles (most keys) first
  if (tile.x < 0) return;
  const int n = tile.x, r0 = tile.y;
  const int h = blockIdx.y, hk = h / p.group;
  const int L = p.cu[n + 1] - p.cu[n];
  const int rows = min(kBM, L - r0);
  const int prefix = p.seq_lens[n] - L;
  const int pos0 = prefix + r0;          // position of the tile's first row
  const int pos_last = pos0 + rows - 1;  // last row's position (the last key needed)
  const int t0 = p.cu[n] + r0;           // packed row of the first query
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;

  if (pos0 < 0) {  // invalid seq_lens (< L): write zeros rather than read anything
    for (int i = tid; i < rows * D; i += kThreads)
      store_any(p.out, p.o_dtype, (t0 + i / D) * p.o_t + h * p.o_h + i % D, 0.0f);
    return;
  }
  const int lo_first = p.window > 0 ? max(0, pos0 - p.window + 1) : 0;
  const int lo_last = p.window > 0 ? max(0, pos_last - p.window + 1) : 0;
  const int j_begin = lo_first / BN * BN;

  // Q tile (rows past `rows` zero-filled).
  for (int i = tid; i < kBM * CH; i += kThreads) {
    const int r = i / CH, ch = i % CH;
    const bool ok = r < rows;
    const __nv_bfloat16* src = p.q + (ok ? (t0 + r) * p.q_t + h * p.q_h + ch * 8 : 0);
    cp_async16(q_s + swz<D>(r, ch), src, ok ? 16 : 0);
  }
  // K or V tile of keys [j0, j0 + BN) through the page table (invalid keys zero-filled). Thread
  // tid copies, in step `it`, 16-byte chunk ch = c % CH of row r = c / CH, c = tid + 128·it: a warp
  // covers 32 / CH whole rows per step, BN / 4 rows per tile. Their page lookups are done once,
  // lane i < BN / 4 taking the warp's i-th row (step i / RPI, row i % RPI of it), and passed to
  // the copying lanes through row_off_s (offset −1: key absent; through shared memory rather than
  // shuffles so that no register stays live across the copy loop: the D 256 kernel is at 255).
  constexpr int RPI = 32 / CH;               // rows per warp per step
  constexpr int STEPS = BN * CH / kThreads;  // steps per tile
  static_assert(CH <= 32 && STEPS * RPI == BN / 4 && BN / 4 <= 32, "whole rows per warp");
  __shared__ int row_off_s[kThreads / 32][BN / 4];
  auto load_kv = [&](const Cache& c, __nv_bfloat16* dst, int j0) {
    const __nv_bfloat16* base = static_cast<const __nv_bfloat16*>(c.p);
    __syncwarp();  // the warp's lanes are done reading the previous call's offsets
    if (lane < BN / 4) {
      const int r = (warp * 32 + (lane / RPI) * kThreads) / CH + lane % RPI;
      const int j = j0 + r;
      int off = -1;  // element offset; the cache's offsets fit in 31 bits (supports())
      if (j <= pos_last) {
        const int2 kv = p.pt.locate(n, j, c.page_size, c.num_pages);
        if (kv.x >= 0) off = static_cast<int>(c.offset(kv.x, kv.y, hk));
      }
      row_off_s[warp][lane] = off;
    }
    __syncwarp();
#pragma unroll 1
    for (int it = 0; it < STEPS; ++it) {
      const int o = row_off_s[warp][it * RPI + lane / CH];
      const int i = tid + it * kThreads;
      const int r = i / CH, ch = i % CH;
      const bool ok = o >= 0;
      cp_async16(dst + swz<D>(r, ch), base + (ok ? o + ch * 8 : 0), ok ? 16 : 0);
    }
  };
  load_kv(p.k, k_s, j_begin);
  cp_commit();

  float o[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  const int g = lane / 4, c4 = lane % 4;
  // This thread's two rows (g and g + 8 of the warp's 16) and their key ranges.
  int row_pos[2], row_lo[2];
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int r = warp * 16 + g + hr * 8;
    row_pos[hr] = r < rows ? pos0 + r : -1;  // padding rows attend to nothing
    row_lo[hr] = p.window > 0 ? max(0, row_pos[hr] - p.window + 1) : 0;
  }

  for (int j0 = j_begin; j0 <= pos_last; j0 += BN) {
    load_kv(p.v, v_s, j0);
    cp_commit();
    cp_wait<1>();  // Q and K of this tile
    __syncthreads();

    // S = Q Kᵀ for the warp's 16 rows × 64 keys.
    float s[BN / 8][4];
#pragma unroll
    for (int i = 0; i < BN / 8; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t a[4];
      ldmatrix_x4(a, q_s + swz<D>(warp * 16 + (lane % 16), kk * 2 + lane / 16));
#pragma unroll
      for (int nt = 0; nt < BN / 16; ++nt) {
        uint32_t b[4];
        ldmatrix_x4(b,
                    k_s + swz<D>(nt * 16 + (lane % 8) + (lane / 16) * 8, kk * 2 + (lane / 8) % 2));
        mma_bf16(s[2 * nt], a, b[0], b[1]);
        mma_bf16(s[2 * nt + 1], a, b[2], b[3]);
      }
    }
    // Mask (causal, window, and keys past the tile's end) only where the tile needs it.
    const bool full = j0 + BN - 1 <= pos0 && j0 >= lo_last;
    float corr[2];
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      float mx = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float& x = s[nt][hr * 2 + e];
          x *= p.scale_log2;
          if (!full) {
            const int j = j0 + nt * 8 + c4 * 2 + e;
            if (j > row_pos[hr] || j < row_lo[hr]) x = -INFINITY;
          }
          mx = fmaxf(mx, x);
        }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m[hr], mx);
      corr[hr] = m_new == -INFINITY ? 1.0f : exp2f(m[hr] - m_new);
      const float base = m_new == -INFINITY ? 0.0f : m_new;
      float sum = 0.0f;
#pragma unroll
      for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float& x = s[nt][hr * 2 + e];
          x = exp2f(x - base);  // masked: exp2(−inf) = 0
          sum += x;
        }
      l[hr] = l[hr] * corr[hr] + sum;  // thread-partial, reduced over the quad at the end
      m[hr] = m_new;
    }
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt) {
      o[dt][0] *= corr[0], o[dt][1] *= corr[0];
      o[dt][2] *= corr[1], o[dt][3] *= corr[1];
    }
    __syncthreads();  // every warp is done with k_s
    if (j0 + BN <= pos_last) load_kv(p.k, k_s, j0 + BN);
    cp_commit();
    cp_wait<1>();  // V of this tile
    __syncthreads();

    // O += P V.
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      uint32_t a[4];
      a[0] = pack_bf16(s[2 * kk][0], s[2 * kk][1]);
      a[1] = pack_bf16(s[2 * kk][2], s[2 * kk][3]);
      a[2] = pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      a[3] = pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
      for (int dt = 0; dt < D / 16; ++dt) {
        uint32_t b[4];
        ldmatrix_x4_trans(
            b, v_s + swz<D>(kk * 16 + (lane % 8) + ((lane / 8) % 2) * 8, dt * 2 + lane / 16));
        mma_bf16(o[2 * dt], a, b[0], b[1]);
        mma_bf16(o[2 * dt + 1], a, b[2], b[3]);
      }
    }
    __syncthreads();  // every warp is done with v_s
  }
  cp_wait<0>();

  // Normalise and store rows g, g + 8 of the warp.
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    float tot = l[hr];
    tot += __shfl_xor_sync(0xffffffffu, tot, 1);
    tot += __shfl_xor_sync(0xffffffffu, tot, 2);
    const int r = warp * 16 + g + hr * 8;
    if (r >= rows) continue;
    const float inv = tot > 0.0f ? 1.0f / tot : 0.0f;
    const int64_t ob = (t0 + r) * p.o_t + h * p.o_h;
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt) {
      const int d = dt * 8 + c4 * 2;
      store_any(p.out, p.o_dtype, ob + d, o[dt][hr * 2] * inv);
      store_any(p.out, p.o_dtype, ob + d + 1, o[dt][hr * 2 + 1] * inv);
    }
  }
}

// ---- prefill_fa2_kernel (attn_prefill.cuda_fa2) -----------------------------------------------
//
// Block = (query head, tile of kBM2 = 128 query rows of one sequence), 8 warps × 16 rows; the
// grid's x is the head, so the heads of one GQA group (same K/V) run side by side, and tiles go
// last (most keys) first. Per key tile of kBN<D> keys (32 at D 256, 64 otherwise), K and V are
// double-buffered: at the top of tile i a thread waits for its copies of tile i, one barrier
// makes everyone's visible and retires tile i − 1 (every warp is past it), then the copies of
// tile i + 1 go into the other stage and run during all of tile i's S = Q Kᵀ, softmax and O += P V
// (one barrier per tile; the single-buffered prefill_tc_kernel has three). The page lookup of a
// row is done once for K and V. A warp whose 16 rows all lie before the tile (causal) or past
// its keys (window) skips the tile's math (it would be an exact no-op: every score masked);
// masks are applied only on tiles that cut the warp's rows. Shared memory: Q 128 · D and 2 · 2 ·
// kBN · D, bf16: 128 KiB at D 256, 96 KiB at D 128, 48 KiB at D 64. Registers: as
// prefill_tc_kernel per thread (O 16 × D and S 16 × kBN per warp), 255 at D 256: one block
// (8 warps) per SM.
constexpr int kBM2 = 128, kWarps2 = kBM2 / 16, kThreads2 = kWarps2 * 32;

template <int D>
constexpr size_t fa2_smem_bytes() {
  return (static_cast<size_t>(kBM2) + 2 * 2 * kBN<D>)*D * sizeof(__nv_bfloat16);
}

template <int D>
__global__ void __launch_bounds__(kThreads2, 1) prefill_fa2_kernel(const PrefillParams p) {
  constexpr int CH = D / 8;  // 16-byte chunks per row
  constexpr int BN = kBN<D>;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  __nv_bfloat16* q_s = reinterpret_cast<__nv_bfloat16*>(smem_raw);  // [kBM2, D]
  __nv_bfloat16* kv_s = q_s + kBM2 * D;                             // [2 stages][K, V][BN, D]

  const int2 tile = p.tiles[p.max_tiles - 1 - blockIdx.y];  // last tiles (most keys) first
  if (tile.x < 0) return;
  const int n = tile.x, r0 = tile.y;
  const int h = blockIdx.x, hk = h / p.group;
  const int L = p.cu[n + 1] - p.cu[n];
  const int rows = min(kBM2, L - r0);
  const int prefix = p.seq_lens[n] - L;
  const int pos0 = prefix + r0;          // position of the tile's first row
  const int pos_last = pos0 + rows - 1;  // last row's position (the last key needed)
  const int t0 = p.cu[n] + r0;           // packed row of the first query
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;

  if (pos0 < 0) {  // invalid seq_lens (< L): write zeros rather than read anything
    for (int i = tid; i < rows * D; i += kThreads2)
      store_any(p.out, p.o_dtype, (t0 + i / D) * p.o_t + h * p.o_h + i % D, 0.0f);
    return;
  }
  const int lo_first = p.window > 0 ? max(0, pos0 - p.window + 1) : 0;
  const int j_begin = lo_first / BN * BN;

  // Q tile (rows past `rows` zero-filled); joins the first K/V tile's commit group.
  for (int i = tid; i < kBM2 * CH; i += kThreads2) {
    const int r = i / CH, ch = i % CH;
    const bool ok = r < rows;
    const __nv_bfloat16* src = p.q + (ok ? (t0 + r) * p.q_t + h * p.q_h + ch * 8 : 0);
    cp_async16(q_s + swz<D>(r, ch), src, ok ? 16 : 0);
  }
  // K and V of keys [j0, j0 + BN) into stage st (invalid keys zero-filled). Thread tid copies, in
  // step `it`, 16-byte chunk ch = c % CH of row r = c / CH, c = tid + 256·it: a warp covers
  // RPI = 32 / CH whole rows per step, BN / 8 rows per tile. Lane i < BN / 8 looks up the warp's
  // i-th row (step i / RPI, row i % RPI of it) once for K and V and passes the two offsets to the
  // copying lanes through row_off_s (−1: key absent).
  constexpr int RPI = 32 / CH;                // rows per warp per step
  constexpr int STEPS = BN * CH / kThreads2;  // steps per tile
  static_assert(CH <= 32 && STEPS * RPI == BN / kWarps2 && BN / kWarps2 <= 32, "whole rows");
  __shared__ int2 row_off_s[kWarps2][BN / kWarps2];
  const __nv_bfloat16* kbase = static_cast<const __nv_bfloat16*>(p.k.p);
  const __nv_bfloat16* vbase = static_cast<const __nv_bfloat16*>(p.v.p);
  auto load_kv = [&](int st, int j0) {
    __nv_bfloat16* ks = kv_s + st * 2 * BN * D;
    __nv_bfloat16* vs = ks + BN * D;
    __syncwarp();  // the warp's lanes are done reading the previous call's offsets
    if (lane < BN / kWarps2) {
      const int r = (warp * 32 + (lane / RPI) * kThreads2) / CH + lane % RPI;
      const int j = j0 + r;
      int2 off = make_int2(-1, 0);  // element offsets; below 2^31 (supports())
      if (j <= pos_last) {
        const int2 kv = p.pt.locate(n, j, p.k.page_size, p.k.num_pages);
        if (kv.x >= 0)
          off = make_int2(static_cast<int>(p.k.offset(kv.x, kv.y, hk)),
                          static_cast<int>(p.v.offset(kv.x, kv.y, hk)));
      }
      row_off_s[warp][lane] = off;
    }
    __syncwarp();
#pragma unroll 1
    for (int it = 0; it < STEPS; ++it) {
      const int2 o = row_off_s[warp][it * RPI + lane / CH];
      const int c = tid + it * kThreads2;
      const int r = c / CH, ch = c % CH;
      const bool ok = o.x >= 0;
      cp_async16(ks + swz<D>(r, ch), kbase + (ok ? o.x + ch * 8 : 0), ok ? 16 : 0);
      cp_async16(vs + swz<D>(r, ch), vbase + (ok ? o.y + ch * 8 : 0), ok ? 16 : 0);
    }
  };
  load_kv(0, j_begin);
  cp_commit();

  float o[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  const int g = lane / 4, c4 = lane % 4;
  // This thread's two rows (g and g + 8 of the warp's 16) and their key ranges.
  int row_pos[2], row_lo[2];
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int r = warp * 16 + g + hr * 8;
    row_pos[hr] = r < rows ? pos0 + r : -1;  // padding rows attend to nothing
    row_lo[hr] = p.window > 0 ? max(0, row_pos[hr] - p.window + 1) : 0;
  }
  // The warp's valid rows: positions [w_first, w_last] (none when the warp is past `rows`), keys
  // [w_lo_first, w_last] reach at least one of them, [w_lo_last, w_first] reach all of them.
  const int w_rows = min(16, rows - warp * 16);
  const int w_first = pos0 + warp * 16, w_last = w_first + w_rows - 1;
  const int w_lo_first = p.window > 0 ? max(0, w_first - p.window + 1) : 0;
  const int w_lo_last = p.window > 0 ? max(0, w_last - p.window + 1) : 0;

  int st = 0;
  for (int j0 = j_begin; j0 <= pos_last; j0 += BN, st ^= 1) {
    cp_wait<0>();     // this thread's copies of tile j0 (and Q) landed ...
    __syncthreads();  // ... everyone's; and every warp is done with the other stage
    if (j0 + BN <= pos_last) load_kv(st ^ 1, j0 + BN);
    cp_commit();
    // Skip a tile no row of the warp reaches (exact no-op: every score would be masked).
    if (w_rows <= 0 || j0 > w_last || j0 + BN - 1 < w_lo_first) continue;
    const __nv_bfloat16* ks = kv_s + st * 2 * BN * D;
    const __nv_bfloat16* vs = ks + BN * D;

    // S = Q Kᵀ for the warp's 16 rows × BN keys.
    float s[BN / 8][4];
#pragma unroll
    for (int i = 0; i < BN / 8; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t a[4];
      ldmatrix_x4(a, q_s + swz<D>(warp * 16 + (lane % 16), kk * 2 + lane / 16));
#pragma unroll
      for (int nt = 0; nt < BN / 16; ++nt) {
        uint32_t b[4];
        ldmatrix_x4(b,
                    ks + swz<D>(nt * 16 + (lane % 8) + (lane / 16) * 8, kk * 2 + (lane / 8) % 2));
        mma_bf16(s[2 * nt], a, b[0], b[1]);
        mma_bf16(s[2 * nt + 1], a, b[2], b[3]);
      }
    }
    // Masks (causal, window, padding rows) only where the tile cuts the warp's rows.
    const bool full = j0 + BN - 1 <= w_first && j0 >= w_lo_last && w_rows == 16;
    float corr[2];
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      float mx = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float& x = s[nt][hr * 2 + e];
          x *= p.scale_log2;
          if (!full) {
            const int j = j0 + nt * 8 + c4 * 2 + e;
            if (j > row_pos[hr] || j < row_lo[hr]) x = -INFINITY;
          }
          mx = fmaxf(mx, x);
        }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m[hr], mx);
      corr[hr] = m_new == -INFINITY ? 1.0f : exp2f(m[hr] - m_new);
      const float base = m_new == -INFINITY ? 0.0f : m_new;
      float sum = 0.0f;
#pragma unroll
      for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float& x = s[nt][hr * 2 + e];
          x = exp2f(x - base);  // masked: exp2(−inf) = 0
          sum += x;
        }
      l[hr] = l[hr] * corr[hr] + sum;  // thread-partial, reduced over the quad at the end
      m[hr] = m_new;
    }

    // O = O · corr + P V (P rounded to bf16 as the A operand, straight from S).
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt) {
      o[dt][0] *= corr[0], o[dt][1] *= corr[0];
      o[dt][2] *= corr[1], o[dt][3] *= corr[1];
    }
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      uint32_t a[4];
      a[0] = pack_bf16(s[2 * kk][0], s[2 * kk][1]);
      a[1] = pack_bf16(s[2 * kk][2], s[2 * kk][3]);
      a[2] = pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      a[3] = pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
      for (int dt = 0; dt < D / 16; ++dt) {
        uint32_t b[4];
        ldmatrix_x4_trans(
            b, vs + swz<D>(kk * 16 + (lane % 8) + ((lane / 8) % 2) * 8, dt * 2 + lane / 16));
        mma_bf16(o[2 * dt], a, b[0], b[1]);
        mma_bf16(o[2 * dt + 1], a, b[2], b[3]);
      }
    }
  }
  cp_wait<0>();  // no copy left in flight (the last commit group is empty)

  // Normalise and store rows g, g + 8 of the warp.
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    float tot = l[hr];
    tot += __shfl_xor_sync(0xffffffffu, tot, 1);
    tot += __shfl_xor_sync(0xffffffffu, tot, 2);
    const int r = warp * 16 + g + hr * 8;
    if (r >= rows) continue;
    const float inv = tot > 0.0f ? 1.0f / tot : 0.0f;
    const int64_t ob = (t0 + r) * p.o_t + h * p.o_h;
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt) {
      const int d = dt * 8 + c4 * 2;
      store_any(p.out, p.o_dtype, ob + d, o[dt][hr * 2] * inv);
      store_any(p.out, p.o_dtype, ob + d + 1, o[dt][hr * 2 + 1] * inv);
    }
  }
}

// ---- prefill_fa2b_kernel (attn_prefill.cuda_fa2b, D 256) --------------------------------------
//
// FlashAttention-2's own D 256 forward point, which prefill_fa2_kernel differs from in its key
// tile: block = (query head, 128-row query tile), 8 warps × 16 rows, Q in shared memory (each
// warp re-reads its 16 × 256 Q fragments per key tile), key tiles of kBNb = 64 (prefill_fa2_kernel:
// 32), K and V double-buffered by cp.async (one barrier per tile; FA2 single-buffers them with two
// barriers per tile). Per warp and key tile: S = Q Kᵀ [16 × 64] (32 f32 registers per thread) by
// 16 · 8 mma.m16n8k16, P rounded to bf16 in registers as the A operand of O += P V [16 × 256]
// (128 f32 registers per thread) by 4 · 32 mma; V fragments by ldmatrix.trans.
//
// Shared-memory reads per warp and 64-key tile: Q 16 ldmatrix.x4 (8 KiB), K 64 (32 KiB), V 64
// (32 KiB) = 72 KiB for 256 mma (1.05 MFLOP): 69 KiB/MFLOP, against 76 for 32-key tiles (the Q
// reads are spread over twice the keys). Each S accumulator chain has 8 independent mma per k-step
// (4 at BN 32), and the barrier, the wait and the softmax reductions come once per 64 keys.
// Shared memory: Q 64 KiB + 2 stages × (K, V) × 32 KiB = 192 KiB; one block (8 warps) per SM.
//
// Fragment addresses: in a [rows × 256] tile whose 16-byte chunks are XOR-swizzled by row & 7
// (swz<256>), lane l's ldmatrix row R has R & 7 = l & 7 for every operand below, and its chunk is
// 8a + 2b + c (c = 0 or 1 by lane, k-step or column step kk = 4a + b); since 2b + c < 8,
// chunk ^ (R & 7) = 8a + ((2b + c) ^ (l & 7)): byte offset R · 512 + 128 a + (((2b + c) ^ (l & 7))
// << 4). Each operand keeps the four lane offsets of b = 0..3; a, the n-tile and the k-tile are
// immediates.
constexpr int kBNb = 64;

constexpr size_t fa2b_smem_bytes() {
  return (static_cast<size_t>(kBM2) + 2 * 2 * kBNb) * 256 * sizeof(__nv_bfloat16);
}

// ldmatrix from a 32-bit shared-memory address (offsets added as immediates).
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

__global__ void __launch_bounds__(kThreads2, 1) prefill_fa2b_kernel(const PrefillParams p) {
  constexpr int D = 256, CH = D / 8;  // 32 16-byte chunks per row
  constexpr int BN = kBNb;
  constexpr uint32_t kRowBytes = D * sizeof(__nv_bfloat16);  // 512
  constexpr uint32_t kTileBytes = BN * kRowBytes;            // one K or V tile: 32 KiB
  extern __shared__ __align__(128) unsigned char smem_raw[];
  __nv_bfloat16* q_s = reinterpret_cast<__nv_bfloat16*>(smem_raw);  // [kBM2, D]
  __nv_bfloat16* kv_s = q_s + kBM2 * D;                             // [2 stages][K, V][BN, D]

  const int2 tile = p.tiles[p.max_tiles - 1 - blockIdx.y];  // last tiles (most keys) first
  if (tile.x < 0) return;
  const int n = tile.x, r0 = tile.y;
  const int h = blockIdx.x, hk = h / p.group;
  const int L = p.cu[n + 1] - p.cu[n];
  const int rows = min(kBM2, L - r0);
  const int prefix = p.seq_lens[n] - L;
  const int pos0 = prefix + r0;          // position of the tile's first row
  const int pos_last = pos0 + rows - 1;  // last row's position (the last key needed)
  const int t0 = p.cu[n] + r0;           // packed row of the first query
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;

  if (pos0 < 0) {  // invalid seq_lens (< L): write zeros rather than read anything
    for (int i = tid; i < rows * D; i += kThreads2)
      store_any(p.out, p.o_dtype, (t0 + i / D) * p.o_t + h * p.o_h + i % D, 0.0f);
    return;
  }
  const int lo_first = p.window > 0 ? max(0, pos0 - p.window + 1) : 0;
  const int j_begin = lo_first / BN * BN;

  // Q tile (rows past `rows` zero-filled); joins the first K/V tile's commit group.
  for (int i = tid; i < kBM2 * CH; i += kThreads2) {
    const int r = i / CH, ch = i % CH;
    const bool ok = r < rows;
    const __nv_bfloat16* src = p.q + (ok ? (t0 + r) * p.q_t + h * p.q_h + ch * 8 : 0);
    cp_async16(q_s + swz<D>(r, ch), src, ok ? 16 : 0);
  }
  // K and V of keys [j0, j0 + BN) into stage st (invalid keys zero-filled): prefill_fa2_kernel's
  // loader at BN 64. CH = 32: in step `it` (0..7) warp w copies row w + 8·it, lane = its chunk;
  // lane i < 8 looks up row w + 8·i once for K and V and passes the offsets through row_off_s.
  constexpr int STEPS = BN * CH / kThreads2;  // 8 steps per tile
  static_assert(CH == 32 && STEPS == BN / kWarps2, "one whole row per warp and step");
  __shared__ int2 row_off_s[kWarps2][BN / kWarps2];
  const __nv_bfloat16* kbase = static_cast<const __nv_bfloat16*>(p.k.p);
  const __nv_bfloat16* vbase = static_cast<const __nv_bfloat16*>(p.v.p);
  auto load_kv = [&](int st, int j0) {
    __nv_bfloat16* ks = kv_s + st * 2 * BN * D;
    __nv_bfloat16* vs = ks + BN * D;
    __syncwarp();  // the warp's lanes are done reading the previous call's offsets
    if (lane < STEPS) {
      const int j = j0 + warp + lane * kWarps2;
      int2 off = make_int2(-1, 0);  // element offsets; below 2^31 (supports())
      if (j <= pos_last) {
        const int2 kv = p.pt.locate(n, j, p.k.page_size, p.k.num_pages);
        if (kv.x >= 0)
          off = make_int2(static_cast<int>(p.k.offset(kv.x, kv.y, hk)),
                          static_cast<int>(p.v.offset(kv.x, kv.y, hk)));
      }
      row_off_s[warp][lane] = off;
    }
    __syncwarp();
#pragma unroll 1
    for (int it = 0; it < STEPS; ++it) {
      const int2 o = row_off_s[warp][it];
      const int r = warp + it * kWarps2;
      const bool ok = o.x >= 0;
      cp_async16(ks + swz<D>(r, lane), kbase + (ok ? o.x + lane * 8 : 0), ok ? 16 : 0);
      cp_async16(vs + swz<D>(r, lane), vbase + (ok ? o.y + lane * 8 : 0), ok ? 16 : 0);
    }
  };
  load_kv(0, j_begin);
  cp_commit();

  // Lane offsets of the fragments (see the header): b = k-step (Q, K) or column step (V) mod 4.
  const uint32_t q_u32 = smem_u32(q_s), kv_u32 = smem_u32(kv_s);
  const uint32_t l7 = lane & 7;
  uint32_t q_off[4], k_off[4], v_off[4];
#pragma unroll
  for (int b = 0; b < 4; ++b) {
    // Q (A operand): row warp·16 + l % 16, chunk bit c = l / 16.
    q_off[b] = q_u32 + (warp * 16 + lane % 16) * kRowBytes + (((2 * b + lane / 16) ^ l7) << 4);
    // K (B operand of S, rows = keys): row l % 8 + (l / 16)·8 of the n-tile, c = (l / 8) % 2.
    k_off[b] = (lane % 8 + (lane / 16) * 8) * kRowBytes + (((2 * b + (lane / 8) % 2) ^ l7) << 4);
    // V (B operand of P V by .trans, rows = keys): row l % 8 + ((l / 8) % 2)·8 of the k-tile,
    // c = l / 16.
    v_off[b] = (lane % 8 + ((lane / 8) % 2) * 8) * kRowBytes + (((2 * b + lane / 16) ^ l7) << 4);
  }

  float o[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  const int g = lane / 4, c4 = lane % 4;
  // This thread's two rows (g and g + 8 of the warp's 16) and their key ranges.
  int row_pos[2], row_lo[2];
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int r = warp * 16 + g + hr * 8;
    row_pos[hr] = r < rows ? pos0 + r : -1;  // padding rows attend to nothing
    row_lo[hr] = p.window > 0 ? max(0, row_pos[hr] - p.window + 1) : 0;
  }
  // The warp's valid rows: positions [w_first, w_last] (none when the warp is past `rows`), keys
  // [w_lo_first, w_last] reach at least one of them, [w_lo_last, w_first] reach all of them.
  const int w_rows = min(16, rows - warp * 16);
  const int w_first = pos0 + warp * 16, w_last = w_first + w_rows - 1;
  const int w_lo_first = p.window > 0 ? max(0, w_first - p.window + 1) : 0;
  const int w_lo_last = p.window > 0 ? max(0, w_last - p.window + 1) : 0;

  int st = 0;
  for (int j0 = j_begin; j0 <= pos_last; j0 += BN, st ^= 1) {
    cp_wait<0>();     // this thread's copies of tile j0 (and Q) landed ...
    __syncthreads();  // ... everyone's; and every warp is done with the other stage
    if (j0 + BN <= pos_last) load_kv(st ^ 1, j0 + BN);
    cp_commit();
    // Skip a tile no row of the warp reaches (exact no-op: every score would be masked).
    if (w_rows <= 0 || j0 > w_last || j0 + BN - 1 < w_lo_first) continue;
    const uint32_t ks_u32 = kv_u32 + st * 2 * kTileBytes;
    const uint32_t vs_u32 = ks_u32 + kTileBytes;

    // S = Q Kᵀ for the warp's 16 rows × 64 keys: k-step kk = 4a + b covers dims 16kk..16kk+15.
    float s[BN / 8][4];
#pragma unroll
    for (int i = 0; i < BN / 8; ++i) s[i][0] = s[i][1] = s[i][2] = s[i][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t a[4];
      ldsm_x4(a, q_off[kk % 4] + (kk / 4) * 128);
#pragma unroll
      for (int nt = 0; nt < BN / 16; ++nt) {
        uint32_t b[4];
        ldsm_x4(b, ks_u32 + k_off[kk % 4] + (kk / 4) * 128 + nt * 16 * kRowBytes);
        mma_bf16(s[2 * nt], a, b[0], b[1]);
        mma_bf16(s[2 * nt + 1], a, b[2], b[3]);
      }
    }
    // Masks (causal, window, padding rows) only where the tile cuts the warp's rows.
    const bool full = j0 + BN - 1 <= w_first && j0 >= w_lo_last && w_rows == 16;
    float corr[2];
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      float mx = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float& x = s[nt][hr * 2 + e];
          x *= p.scale_log2;
          if (!full) {
            const int j = j0 + nt * 8 + c4 * 2 + e;
            if (j > row_pos[hr] || j < row_lo[hr]) x = -INFINITY;
          }
          mx = fmaxf(mx, x);
        }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m[hr], mx);
      corr[hr] = m_new == -INFINITY ? 1.0f : exp2_approx(m[hr] - m_new);
      const float base = m_new == -INFINITY ? 0.0f : m_new;
      float sum = 0.0f;
#pragma unroll
      for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float& x = s[nt][hr * 2 + e];
          x = exp2_approx(x - base);  // masked: exp2(−inf) = 0
          sum += x;
        }
      l[hr] = l[hr] * corr[hr] + sum;  // thread-partial, reduced over the quad at the end
      m[hr] = m_new;
    }

    // O = O · corr (skipped, warp-uniformly, when no row max of the warp moved: corr = 1 exactly)
    // + P V (P rounded to bf16 as the A operand, straight from S).
    if (__any_sync(0xffffffffu, corr[0] != 1.0f || corr[1] != 1.0f)) {
#pragma unroll
      for (int dt = 0; dt < D / 8; ++dt) {
        o[dt][0] *= corr[0], o[dt][1] *= corr[0];
        o[dt][2] *= corr[1], o[dt][3] *= corr[1];
      }
    }
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      uint32_t a[4];
      a[0] = pack_bf16(s[2 * kk][0], s[2 * kk][1]);
      a[1] = pack_bf16(s[2 * kk][2], s[2 * kk][3]);
      a[2] = pack_bf16(s[2 * kk + 1][0], s[2 * kk + 1][1]);
      a[3] = pack_bf16(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
      for (int dt = 0; dt < D / 16; ++dt) {  // column step dt = 4a + b: dims 16dt..16dt+15
        uint32_t b[4];
        ldsm_x4_trans(b, vs_u32 + v_off[dt % 4] + (dt / 4) * 128 + kk * 16 * kRowBytes);
        mma_bf16(o[2 * dt], a, b[0], b[1]);
        mma_bf16(o[2 * dt + 1], a, b[2], b[3]);
      }
    }
  }
  cp_wait<0>();  // no copy left in flight (the last commit group is empty)

  // Normalise and store rows g, g + 8 of the warp.
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    float tot = l[hr];
    tot += __shfl_xor_sync(0xffffffffu, tot, 1);
    tot += __shfl_xor_sync(0xffffffffu, tot, 2);
    const int r = warp * 16 + g + hr * 8;
    if (r >= rows) continue;
    const float inv = tot > 0.0f ? 1.0f / tot : 0.0f;
    const int64_t ob = (t0 + r) * p.o_t + h * p.o_h;
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt) {
      const int d = dt * 8 + c4 * 2;
      store_any(p.out, p.o_dtype, ob + d, o[dt][hr * 2] * inv);
      store_any(p.out, p.o_dtype, ob + d + 1, o[dt][hr * 2 + 1] * inv);
    }
  }
}

// ---- prefill_fa2c_kernel (attn_prefill.cuda_fa2c, D 256) --------------------------------------
//
// prefill_fa2b_kernel's block (query head, 128-row query tile, 8 warps, Q in shared memory, grid
// and tile plan, loader, two K/V stages of 64 keys, one block barrier per tile), with the warps in
// pairs: pair pr = warp / 2 owns query rows 32·pr .. 32·pr + 31, and half hf = warp % 2 of the
// pair computes S = Q Kᵀ for those 32 rows and keys 32·hf .. 32·hf + 31 of the tile, and then
// O [32 × 128] for dims 128·hf .. 128·hf + 127 over all 64 keys. The two halves exchange their
// partial row maxima and their P [32 × 32] (bf16) through shared memory between two named
// barriers of the pair (bar.sync 1 + pr, 64). Per warp and tile the fragments read from shared
// memory are Q 32 ldmatrix.x4 + K 32 (S) and V 32 + P 4 (P V) = 100 (50 KiB; fa2b: 144, 72 KiB)
// for the same 256 mma: fa2b is bound by shared-memory bandwidth (8 warps × 144 × 512 B = 4608
// clk of 128 B/clk per block tile of ~7630; PERFORMANCE.md, "attn_prefill.cuda_fa2c"), this
// kernel ~3360 with its P stores. Registers per thread as fa2b: S 2 × 4 × 4 (32 rows × 32 keys), O
// 2 × 16 × 4 (32 rows × 128 dims), four rows per thread (m, l per row).
//
// The scale is folded into the exponent: the row max is taken over the raw scores (scale > 0,
// supports(); fl(x · c) is monotonic in x then, so max(fl(x · c)) = fl(max(x) · c) exactly) and
// P = exp2(fma(s, scale·log2 e, −m)). Masks (causal, window, padding rows) only on tiles that cut
// the pair's rows, in their own branch; the pair skips a tile none of its 32 rows reaches.
// Fragment addresses as fa2b's (rows of every operand have row & 7 = lane & 7); P in shared
// memory is [32 rows][64 + 8 keys] bf16 per pair (row stride 144 B: the 32-bit stores of the
// accumulator layout and the ldmatrix rows fall in distinct banks), written with plain 32-bit
// stores and read back by ldmatrix.x4 in the A-operand pattern (row lane % 16, 8 keys × lane / 16).
constexpr int kPairs = kWarps2 / 2;  // 4 pairs of warps, 32 query rows each
constexpr int kPStride = kBNb + 8;   // P row stride in bf16 (144 bytes)

constexpr size_t fa2c_smem_bytes() {
  return fa2b_smem_bytes() + static_cast<size_t>(kPairs) * 32 * kPStride * sizeof(__nv_bfloat16) +
         2 * kPairs * 2 * 32 * sizeof(float);  // P, then (max, sum)[pair][half][row] floats
}

// Barrier of the two warps of a pair (ids 1..4; 0 is __syncthreads).
__device__ __forceinline__ void pair_sync(int id) {
  asm volatile("bar.sync %0, 64;\n" ::"r"(id) : "memory");
}

__global__ void __launch_bounds__(kThreads2, 1) prefill_fa2c_kernel(const PrefillParams p) {
  constexpr int D = 256, CH = D / 8;  // 32 16-byte chunks per row
  constexpr int BN = kBNb;
  constexpr uint32_t kRowBytes = D * sizeof(__nv_bfloat16);     // 512
  constexpr uint32_t kTileBytes = BN * kRowBytes;               // one K or V tile: 32 KiB
  constexpr uint32_t kPRow = kPStride * sizeof(__nv_bfloat16);  // 144
  extern __shared__ __align__(128) unsigned char smem_raw[];
  __nv_bfloat16* q_s = reinterpret_cast<__nv_bfloat16*>(smem_raw);        // [kBM2, D]
  __nv_bfloat16* kv_s = q_s + kBM2 * D;                                   // [2 stages][K, V][BN, D]
  __nv_bfloat16* p_s = kv_s + 2 * 2 * BN * D;                             // [kPairs][32][kPStride]
  float* red_s = reinterpret_cast<float*>(p_s + kPairs * 32 * kPStride);  // [2][kPairs][2][32]

  const int2 tile = p.tiles[p.max_tiles - 1 - blockIdx.y];  // last tiles (most keys) first
  if (tile.x < 0) return;
  const int n = tile.x, r0 = tile.y;
  const int h = blockIdx.x, hk = h / p.group;
  const int L = p.cu[n + 1] - p.cu[n];
  const int rows = min(kBM2, L - r0);
  const int prefix = p.seq_lens[n] - L;
  const int pos0 = prefix + r0;          // position of the tile's first row
  const int pos_last = pos0 + rows - 1;  // last row's position (the last key needed)
  const int t0 = p.cu[n] + r0;           // packed row of the first query
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;

  if (pos0 < 0) {  // invalid seq_lens (< L): write zeros rather than read anything
    for (int i = tid; i < rows * D; i += kThreads2)
      store_any(p.out, p.o_dtype, (t0 + i / D) * p.o_t + h * p.o_h + i % D, 0.0f);
    return;
  }
  const int lo_first = p.window > 0 ? max(0, pos0 - p.window + 1) : 0;
  const int j_begin = lo_first / BN * BN;

  // Q tile (rows past `rows` zero-filled); joins the first K/V tile's commit group.
  for (int i = tid; i < kBM2 * CH; i += kThreads2) {
    const int r = i / CH, ch = i % CH;
    const bool ok = r < rows;
    const __nv_bfloat16* src = p.q + (ok ? (t0 + r) * p.q_t + h * p.q_h + ch * 8 : 0);
    cp_async16(q_s + swz<D>(r, ch), src, ok ? 16 : 0);
  }
  // K / V loader: prefill_fa2b_kernel's (warp w copies rows w + 8·it, one lookup per row).
  constexpr int STEPS = BN * CH / kThreads2;  // 8 steps per tile
  static_assert(CH == 32 && STEPS == BN / kWarps2, "one whole row per warp and step");
  __shared__ int2 row_off_s[kWarps2][BN / kWarps2];
  const __nv_bfloat16* kbase = static_cast<const __nv_bfloat16*>(p.k.p);
  const __nv_bfloat16* vbase = static_cast<const __nv_bfloat16*>(p.v.p);
  auto load_kv = [&](int st, int j0) {
    __nv_bfloat16* ks = kv_s + st * 2 * BN * D;
    __nv_bfloat16* vs = ks + BN * D;
    __syncwarp();  // the warp's lanes are done reading the previous call's offsets
    if (lane < STEPS) {
      const int j = j0 + warp + lane * kWarps2;
      int2 off = make_int2(-1, 0);  // element offsets; below 2^31 (supports())
      if (j <= pos_last) {
        const int2 kv = p.pt.locate(n, j, p.k.page_size, p.k.num_pages);
        if (kv.x >= 0)
          off = make_int2(static_cast<int>(p.k.offset(kv.x, kv.y, hk)),
                          static_cast<int>(p.v.offset(kv.x, kv.y, hk)));
      }
      row_off_s[warp][lane] = off;
    }
    __syncwarp();
#pragma unroll 1
    for (int it = 0; it < STEPS; ++it) {
      const int2 o = row_off_s[warp][it];
      const int r = warp + it * kWarps2;
      const bool ok = o.x >= 0;
      cp_async16(ks + swz<D>(r, lane), kbase + (ok ? o.x + lane * 8 : 0), ok ? 16 : 0);
      cp_async16(vs + swz<D>(r, lane), vbase + (ok ? o.y + lane * 8 : 0), ok ? 16 : 0);
    }
  };
  load_kv(0, j_begin);
  cp_commit();

  const int pr = warp / 2, hf = warp % 2, bar_id = 1 + pr;
  const int g = lane / 4, c4 = lane % 4;
  // Lane offsets of the fragments (fa2b's, see its header; b = k-step or column step mod 4).
  const uint32_t q_u32 = smem_u32(q_s), kv_u32 = smem_u32(kv_s);
  const uint32_t l7 = lane & 7;
  uint32_t q_off[4], k_off[4];
#pragma unroll
  for (int b = 0; b < 4; ++b) {
    // Q (A operand): row 32·pr + l % 16 (+ 16 for the second m-tile), chunk bit c = l / 16.
    q_off[b] = q_u32 + (pr * 32 + lane % 16) * kRowBytes + (((2 * b + lane / 16) ^ l7) << 4);
    // K (B operand of S, rows = keys): key 32·hf + l % 8 + (l / 16)·8 of the half, c = (l / 8) % 2.
    k_off[b] =
        (hf * 32 + lane % 8 + (lane / 16) * 8) * kRowBytes + (((2 * b + (lane / 8) % 2) ^ l7) << 4);
  }
  // P of the pair: this half writes keys 32·hf.., reads the other half's (A-operand pattern).
  uint32_t* const pp = reinterpret_cast<uint32_t*>(p_s + pr * 32 * kPStride);
  const uint32_t p_u32 = smem_u32(pp);
  float* red_max = red_s + (pr * 2) * 32;             // [half][32 rows]
  float* red_sum = red_s + ((kPairs + pr) * 2) * 32;  // [half][32 rows]

  float o[2][D / 16][4];  // [m-tile][8-dim column of this half][4]
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int i = 0; i < D / 16; ++i) o[mt][i][0] = o[mt][i][1] = o[mt][i][2] = o[mt][i][3] = 0.0f;
  // Row i = 2·mt + hr of this thread: pair row 16·mt + g + 8·hr. m in the scaled log2 domain.
  float m[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY}, l[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  // The pair's valid rows: positions [p_first, p_last] (none when the pair is past `rows`); keys
  // [p_lo_first, p_last] reach at least one of them, [p_lo_last, p_first] reach all of them. As
  // ranges of tile starts j0: the pair works on tiles j0 in [act_lo, act_hi] and needs no mask on
  // j0 in [full_lo, full_hi] (empty ranges when the pair has no rows / fewer than 32).
  // The four bounds live in shared memory (written here, published by the loop's first barrier,
  // read after each barrier), not in registers: they would be live across the S phase, where the
  // 255 registers are full.
  __shared__ int4 pair_rng_s[kPairs];  // (act_lo, act_hi, full_lo, full_hi) per pair
  const int p_rows = min(32, rows - pr * 32);
  if (hf == 0 && lane == 0) {
    const int p_first = pos0 + pr * 32, p_last = p_first + p_rows - 1;
    const int p_lo_first = p.window > 0 ? max(0, p_first - p.window + 1) : 0;
    const int p_lo_last = p.window > 0 ? max(0, p_last - p.window + 1) : 0;
    pair_rng_s[pr] = make_int4(p_lo_first - (BN - 1), p_rows > 0 ? p_last : INT_MIN, p_lo_last,
                               p_rows == 32 ? p_first - (BN - 1) : INT_MIN);
  }
  const float sc = p.scale_log2;

  int st = 0;
  for (int j0 = j_begin; j0 <= pos_last; j0 += BN, st ^= 1) {
    cp_wait<0>();     // this thread's copies of tile j0 (and Q) landed ...
    __syncthreads();  // ... everyone's; and every warp is done with the other stage
    if (j0 + BN <= pos_last) load_kv(st ^ 1, j0 + BN);
    cp_commit();
    // Skip a tile no row of the pair reaches (both halves alike). The skipping pair still passes
    // its two pair barriers, so that every warp passes the same barriers per tile: with pairs
    // skipping and others not, compute-sanitizer racecheck reported the next tile's cp.async into
    // this stage as racing with the V reads of the previous one (session 5, run L), across the
    // __syncthreads that orders them.
    const int4 rng = pair_rng_s[pr];
    if (j0 > rng.y || j0 < rng.x) {
      pair_sync(bar_id);
      pair_sync(bar_id);
      continue;
    }
    const uint32_t ks_u32 = kv_u32 + st * 2 * kTileBytes;
    const uint32_t vs_u32 = ks_u32 + kTileBytes;

    // S = Q Kᵀ: 32 rows × this half's 32 keys; k-step kk = 4a + b covers dims 16kk..16kk+15.
    float s[2][4][4];
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int i = 0; i < 4; ++i) s[mt][i][0] = s[mt][i][1] = s[mt][i][2] = s[mt][i][3] = 0.0f;
#pragma unroll
    for (int a = 0; a < 4; ++a) {
      const uint32_t qa = a * 128, ka = ks_u32 + a * 128;
#pragma unroll
      for (int b4 = 0; b4 < 4; ++b4) {
        uint32_t a0[4], a1[4];
        ldsm_x4(a0, q_off[b4] + qa);
        ldsm_x4(a1, q_off[b4] + qa + 16 * kRowBytes);
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
          uint32_t b[4];
          ldsm_x4(b, ka + k_off[b4] + nt * 16 * kRowBytes);
          mma_bf16(s[0][2 * nt], a0, b[0], b[1]);
          mma_bf16(s[0][2 * nt + 1], a0, b[2], b[3]);
          mma_bf16(s[1][2 * nt], a1, b[0], b[1]);
          mma_bf16(s[1][2 * nt + 1], a1, b[2], b[3]);
        }
      }
    }
    // Masks (causal, window, padding rows) only where the tile cuts the pair's rows.
    const bool full = j0 <= rng.w && j0 >= rng.z;
    if (!full) {
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
          const int r = pr * 32 + mt * 16 + g + hr * 8;
          const int pos = r < rows ? pos0 + r : -1;  // padding rows attend to nothing
          const int lo = p.window > 0 ? max(0, pos - p.window + 1) : 0;
#pragma unroll
          for (int nt = 0; nt < 4; ++nt)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const int j = j0 + hf * 32 + nt * 8 + c4 * 2 + e;
              if (j > pos || j < lo) s[mt][nt][hr * 2 + e] = -INFINITY;
            }
        }
    }
    // Row maxima of the raw scores over this half's keys (quad shuffles), then over the pair.
    float mx[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int mt = i / 2, hr = i % 2;
      float v = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) v = fmaxf(v, fmaxf(s[mt][nt][hr * 2], s[mt][nt][hr * 2 + 1]));
      v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
      v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
      mx[i] = v;
      if (c4 == 0) red_max[hf * 32 + mt * 16 + g + hr * 8] = v;
    }
    pair_sync(bar_id);
    float corr[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int mt = i / 2, hr = i % 2;
      const float v = fmaxf(mx[i], red_max[(hf ^ 1) * 32 + mt * 16 + g + hr * 8]);
      const float m_new = fmaxf(m[i], v * sc);  // both halves: the same value
      corr[i] = m_new == -INFINITY ? 1.0f : exp2_approx(m[i] - m_new);
      const float nb = m_new == -INFINITY ? 0.0f : -m_new;
      float sum = 0.0f;
#pragma unroll
      for (int nt = 0; nt < 4; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float& x = s[mt][nt][hr * 2 + e];
          x = exp2_approx(fmaf(x, sc, nb));  // masked: exp2(−inf) = 0
          sum += x;
        }
      l[i] = l[i] * corr[i] + sum;  // thread-partial over this half's keys
      m[i] = m_new;
    }
    uint32_t ln;  // %laneid (asm volatile: recomputed per tile, see v_off below)
    asm volatile("mov.u32 %0, %%laneid;\n" : "=r"(ln));
    uint32_t* const p_w = pp + (ln / 4) * (kPStride / 2) + hf * 16 + ln % 4;
    // P rounded to bf16: A fragments of this half's two k-steps, and the same words to shared
    // memory for the other half (word (row, key / 2): row 16·mt + g + 8·hr, key 32·hf + 8·nt +
    // 2·c4).
    uint32_t pa[2][2][4];  // [m-tile][k-step of this half][4]
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int nt = 0; nt < 4; ++nt)
#pragma unroll
        for (int hr = 0; hr < 2; ++hr) {
          const uint32_t w = pack_bf16(s[mt][nt][hr * 2], s[mt][nt][hr * 2 + 1]);
          pa[mt][nt / 2][(nt % 2) * 2 + hr] = w;
          p_w[(mt * 16 + hr * 8) * (kPStride / 2) + nt * 4] = w;
        }
    // O = O · corr (skipped, warp-uniformly, when no row max of the pair moved: corr = 1 exactly).
    if (__any_sync(0xffffffffu,
                   corr[0] != 1.0f || corr[1] != 1.0f || corr[2] != 1.0f || corr[3] != 1.0f)) {
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int dt = 0; dt < D / 16; ++dt) {
          o[mt][dt][0] *= corr[2 * mt], o[mt][dt][1] *= corr[2 * mt];
          o[mt][dt][2] *= corr[2 * mt + 1], o[mt][dt][3] *= corr[2 * mt + 1];
        }
    }
    pair_sync(bar_id);  // both halves of P written
    // The V and P lane offsets, computed here from %laneid (an asm volatile, so not hoisted out
    // of the loop): they are not live across the S phase, where O, S and the Q / K fragments in
    // flight fill the 255 registers (hoisted, they cost 40 bytes of spills).
    uint32_t v_off[4];
#pragma unroll
    for (int b = 0; b < 4; ++b)
      // V (B operand of P V by .trans, rows = keys): key l % 8 + ((l / 8) % 2)·8 of the k-step,
      // c = l / 16; dims from 128·hf: chunks 16·hf.., + 256·hf bytes (outside the XOR's 3 bits).
      v_off[b] = (ln % 8 + ((ln / 8) % 2) * 8) * kRowBytes + hf * 256 +
                 (((2 * b + ln / 16) ^ (ln & 7)) << 4);
    const uint32_t p_rd = p_u32 + (ln % 16) * kPRow + (hf ^ 1) * 64 + (ln / 16) * 16;
    // O [32 × 128] += P V over the tile's 64 keys: this half's keys from registers, then the
    // other half's from shared memory. V column step dt = 4a + b: dims 128·hf + 16dt...
    auto pv = [&](const uint32_t(&x0)[4], const uint32_t(&x1)[4], uint32_t vbase_u32) {
#pragma unroll
      for (int dt = 0; dt < D / 32; ++dt) {
        uint32_t b[4];
        ldsm_x4_trans(b, vbase_u32 + v_off[dt % 4] + (dt / 4) * 128);
        mma_bf16(o[0][2 * dt], x0, b[0], b[1]);
        mma_bf16(o[0][2 * dt + 1], x0, b[2], b[3]);
        mma_bf16(o[1][2 * dt], x1, b[0], b[1]);
        mma_bf16(o[1][2 * dt + 1], x1, b[2], b[3]);
      }
    };
#pragma unroll
    for (int kl = 0; kl < 2; ++kl)
      pv(pa[0][kl], pa[1][kl], vs_u32 + (hf * 32 + kl * 16) * kRowBytes);
#pragma unroll
    for (int kl = 0; kl < 2; ++kl) {
      uint32_t x0[4], x1[4];
      ldsm_x4(x0, p_rd + kl * 32);
      ldsm_x4(x1, p_rd + kl * 32 + 16 * kPRow);
      pv(x0, x1, vs_u32 + ((hf ^ 1) * 32 + kl * 16) * kRowBytes);
    }
  }
  cp_wait<0>();             // no copy left in flight (the last commit group is empty)
  if (p_rows <= 0) return;  // both halves of the pair alike

  // Row sums: over the quad, then the two halves (fa2c's own slot: no hazard with red_max).
  float tot[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    float v = l[i];
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    v += __shfl_xor_sync(0xffffffffu, v, 2);
    tot[i] = v;
    if (c4 == 0) red_sum[hf * 32 + (i / 2) * 16 + g + (i % 2) * 8] = v;
  }
  pair_sync(bar_id);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int mt = i / 2, hr = i % 2;
    const float t = tot[i] + red_sum[(hf ^ 1) * 32 + mt * 16 + g + hr * 8];
    const int r = pr * 32 + mt * 16 + g + hr * 8;
    if (r >= rows) continue;
    const float inv = t > 0.0f ? 1.0f / t : 0.0f;
    const int64_t ob = (t0 + r) * p.o_t + h * p.o_h;
#pragma unroll
    for (int dt = 0; dt < D / 16; ++dt) {
      const int d = hf * 128 + dt * 8 + c4 * 2;
      store_any(p.out, p.o_dtype, ob + d, o[mt][dt][hr * 2] * inv);
      store_any(p.out, p.o_dtype, ob + d + 1, o[mt][dt][hr * 2 + 1] * inv);
    }
  }
}

Reason prefill_tc_supports(const AttnPrefill& a) {
  const int64_t D = a.q.size(2);
  if (D != 64 && D != 128 && D != 256)
    return "head dim D=" + std::to_string(D) + " is not one of 64, 128, 256";
  if (a.q.dtype() != DType::bf16 || a.k_cache.dtype() != DType::bf16)
    return std::string("tensor-core prefill needs bf16 q and caches");
  auto aligned = [](const Tensor& t, int dims) {
    if (reinterpret_cast<uintptr_t>(t.data()) % 16 != 0) return false;
    for (int i = 0; i < dims; ++i)
      if (t.stride(i) % 8 != 0) return false;
    return true;
  };
  if (!aligned(a.q, 2) || !aligned(a.k_cache, 3) || !aligned(a.v_cache, 3))
    return std::string("q and caches must be 16-byte aligned (base and strides)");
  if (a.k_cache.numel() >= (int64_t{1} << 31) || a.q.numel() >= (int64_t{1} << 31))
    return std::string("tensors too large for 32-bit row indices");
  if (!offsets_fit_int32(a.k_cache) || !offsets_fit_int32(a.v_cache))
    return std::string("cache element offsets must stay below 2^31");
  return std::nullopt;
}

template <int D>
void launch_tc(const PrefillParams& p, cudaStream_t st) {
  const size_t smem = static_cast<size_t>(kBM + 2 * kBN<D>) * D * sizeof(__nv_bfloat16);
  ensure_dynamic_smem(prefill_tc_kernel<D>, smem);
  prefill_tc_kernel<D><<<dim3(p.max_tiles, p.Hq), kThreads, smem, st>>>(p);
  HYBRID_CUDA_CHECK_LAUNCH();
}

// The fields of every tensor-core prefill launch (tile list not yet placed).
PrefillParams prefill_params(const AttnPrefill& a) {
  PrefillParams p;
  p.q = a.q.data_as<const __nv_bfloat16>();
  p.q_t = a.q.stride(0), p.q_h = a.q.stride(1);
  auto cache = [](const Tensor& c) {
    Cache k;
    k.p = c.data();
    k.s_page = c.stride(0), k.s_row = c.stride(1), k.s_head = c.stride(2);
    k.page_size = static_cast<int>(c.size(1)), k.num_pages = static_cast<int>(c.size(0));
    k.aligned = true;
    return k;
  };
  p.k = cache(a.k_cache), p.v = cache(a.v_cache);
  p.pt.p = a.page_table.data_as<const int>();
  p.pt.s0 = a.page_table.stride(0), p.pt.s1 = a.page_table.stride(1);
  p.pt.max_pages = static_cast<int>(a.page_table.size(1));
  p.cu = a.cu_seqlens.data_as<const int>();
  p.seq_lens = a.seq_lens.data_as<const int>();
  p.N = static_cast<int>(a.cu_seqlens.size(0) - 1);
  p.T = static_cast<int>(a.q.size(0));
  p.Hq = static_cast<int>(a.q.size(1));
  p.group = p.Hq / static_cast<int>(a.k_cache.size(2));
  p.window = static_cast<int>(std::min<int64_t>(a.window, INT32_MAX));
  p.scale_log2 = (a.scale ? *a.scale : 1.0f / std::sqrt(static_cast<float>(a.q.size(2)))) * kLog2e;
  p.out = a.out.data(), p.o_dtype = a.out.dtype();
  p.o_t = a.out.stride(0), p.o_h = a.out.stride(1);
  return p;
}

// The query tiles of `rows` rows: their list in the workspace (Σ_n ceil(L_n / rows) <= T / rows
// + N entries), filled on the device by plan_tiles_kernel. False when there is nothing to compute.
bool plan_tiles(PrefillParams& p, int rows, Context& ctx, cudaStream_t st) {
  p.tile_rows = rows;
  p.max_tiles = p.T / rows + p.N;
  p.tiles = static_cast<int2*>(
      ctx.workspace(static_cast<size_t>(std::max(p.max_tiles, 1)) * sizeof(int2)));
  if (p.T == 0 || p.Hq == 0) return false;
  plan_tiles_kernel<<<1, 32, 0, st>>>(p);
  HYBRID_CUDA_CHECK_LAUNCH();
  return true;
}

void prefill_tc_cuda(const AttnPrefill& a, Context& ctx) {
  PrefillParams p = prefill_params(a);
  const int64_t D = a.q.size(2);
  const cudaStream_t st = as_stream(ctx.stream());
  if (!plan_tiles(p, kBM, ctx, st)) return;
  switch (D) {
    case 64:
      launch_tc<64>(p, st);
      break;
    case 128:
      launch_tc<128>(p, st);
      break;
    default:
      launch_tc<256>(p, st);
      break;
  }
}

Reason prefill_fa2_supports(const AttnPrefill& a) {
  if (Reason r = prefill_tc_supports(a)) return r;
  const int64_t tiles = a.q.size(0) / kBM2 + (a.cu_seqlens.size(0) - 1);
  if (tiles > 65535)
    return "fa2 prefill takes at most 65535 query tiles (grid y), got " + std::to_string(tiles);
  if (a.q.size(1) > 65535) return std::string("fa2 prefill takes at most 65535 query heads");
  return std::nullopt;
}

template <int D>
void launch_fa2(const PrefillParams& p, cudaStream_t st) {
  constexpr size_t smem = fa2_smem_bytes<D>();
  ensure_dynamic_smem(prefill_fa2_kernel<D>, smem);
  prefill_fa2_kernel<D><<<dim3(p.Hq, p.max_tiles), kThreads2, smem, st>>>(p);
  HYBRID_CUDA_CHECK_LAUNCH();
}

void prefill_fa2_cuda(const AttnPrefill& a, Context& ctx) {
  PrefillParams p = prefill_params(a);
  const cudaStream_t st = as_stream(ctx.stream());
  if (!plan_tiles(p, kBM2, ctx, st)) return;
  switch (a.q.size(2)) {
    case 64:
      launch_fa2<64>(p, st);
      break;
    case 128:
      launch_fa2<128>(p, st);
      break;
    default:
      launch_fa2<256>(p, st);
      break;
  }
}

// attn_prefill.cuda_fa2b is on unless HYBRID_ATTN_PREFILL_V4=0 (then cuda_fa2 serves D 256, so both
// can be tested and timed from one build).
bool prefill_v4_enabled() {
  static const bool on = !env_is_zero("HYBRID_ATTN_PREFILL_V4");
  return on;
}

Reason prefill_fa2b_supports(const AttnPrefill& a) {
  if (!prefill_v4_enabled()) return std::string("HYBRID_ATTN_PREFILL_V4=0");
  if (a.q.size(2) != 256)
    return "fa2b prefill is the D 256 kernel (64-key tiles double-buffered fill 192 KiB of shared "
           "memory; cuda_fa2 serves D 64 / 128), got D=" +
           std::to_string(a.q.size(2));
  return prefill_fa2_supports(a);
}

// The D 256 kernels' launch (fa2b, fa2c): the 128-row query tiles planned on the device, then
// grid (Hq, tiles) of kThreads2 threads with `smem` bytes of dynamic shared memory.
void launch_d256_tiles(const AttnPrefill& a, Context& ctx, void (*kernel)(const PrefillParams),
                       size_t smem) {
  PrefillParams p = prefill_params(a);
  const cudaStream_t st = as_stream(ctx.stream());
  if (!plan_tiles(p, kBM2, ctx, st)) return;
  ensure_dynamic_smem(kernel, smem);
  kernel<<<dim3(p.Hq, p.max_tiles), kThreads2, smem, st>>>(p);
  HYBRID_CUDA_CHECK_LAUNCH();
}

void prefill_fa2b_cuda(const AttnPrefill& a, Context& ctx) {
  launch_d256_tiles(a, ctx, prefill_fa2b_kernel, fa2b_smem_bytes());
}

// attn_prefill.cuda_fa2c is on unless HYBRID_ATTN_PREFILL_V5=0 (then cuda_fa2b serves D 256, so
// both can be tested and timed from one build).
bool prefill_v5_enabled() {
  static const bool on = !env_is_zero("HYBRID_ATTN_PREFILL_V5");
  return on;
}

Reason prefill_fa2c_supports(const AttnPrefill& a) {
  if (!prefill_v5_enabled()) return std::string("HYBRID_ATTN_PREFILL_V5=0");
  if (a.q.size(2) != 256)
    return "fa2c prefill is the D 256 kernel (warp pairs over 64-key tiles; cuda_fa2 serves D 64 / "
           "128), got D=" +
           std::to_string(a.q.size(2));
  if (a.scale && !(*a.scale > 0.0f))
    return std::string(
        "fa2c prefill takes the row max of the unscaled scores, so it needs scale > 0 (cuda_fa2b "
        "serves other scales)");
  return prefill_fa2_supports(a);
}

void prefill_fa2c_cuda(const AttnPrefill& a, Context& ctx) {
  launch_d256_tiles(a, ctx, prefill_fa2c_kernel, fa2c_smem_bytes());
}

// ---- attn_prefill.cuda_wg: the same prefill on wgmma (sm_90a) ---------------------------------
//
// The default D 128 / 256 prefill since session 22 (form 6 below since session 23, form 4 before;
// HYBRID_ATTN_PREFILL_WG=0 turns it off, =1..6 picks a form). Per warpgroup (128 threads, 64 query
// rows) and key tile of 64 keys (128 at D 128 in form 6: S by m64n128k16, kBN below):
//   S [64 × 64] = Q Kᵀ     D/16 wgmma m64n64k16, Q and K both from shared memory (K-major)
//   the online softmax of S in registers (thread: rows 16w + g and 16w + g + 8, 16 columns each,
//   a row's max and sum over the quad's 4 lanes; causal mask key > position → −inf)
//   O [64 × D] += P V      4 · D/128 wgmma m64n128k16, P from registers (S's accumulator layout
//                          is the A fragment's of its k16 steps), V from shared memory (MN-major)
// Q [64][D] a warpgroup and two stages of K and V [64 keys][D], each tile as D/64 blocks of 64
// rows × 128 bytes in the 128-byte swizzle (wgmma::sw128; block b at b·8 KB), filled by cp.async
// 16-byte pieces (keys through the page table, keys past the tile's last position zero-filled and
// never read from the cache); the next tile's copies fly while one computes. Why: the mma.sync
// kernels (fa2c) reach 257-293 TFLOP/s at D 256, SDPA's cuDNN kernel (wgmma, TMA) 530-641; a
// warpgroup's wgmma issues a 64 × 64 × 16 product in one instruction where mma.sync needs 32
// plus their ldmatrix.
// kWG = 1 (=1): one warpgroup a block, 64 rows. kWG = 2 (=2): two, 128 query rows a block
// (warpgroup w: rows 64w..64w + 63, its own Q tile) sharing every K / V tile: half the copies and
// page lookups a row, and one warpgroup's wgmma can run under the other's softmax (192 KB of shared
// memory at D 256; 256 threads at up to 255 registers). A warpgroup skips the products of key
// tiles past its last row's position (it still copies and meets the barriers).
// kStagger (with kWG = 2; =3, and =4): warpgroup 1 issues a tile's products only after warpgroup
// 0 has issued its own (named barrier 1: warpgroup 0 arrives, 1 waits), so that the tensor pipe
// takes warpgroup 0's before 1's and their softmaxes alternate instead of both running with the
// pipe idle.
// kOverlap (=4 with kStagger; =5 without): each warpgroup issues S of tile t + 1
// before P V of tile t and runs tile t + 1's softmax while its P V runs (below).
// kProducer (=6, the default): =5 with a third warpgroup that
// copies K and V (TMA boxes for whole tiles, else cp.async, 128 / kBN threads a key row) into rings
// of NS = 2 stages guarded by full / empty mbarriers; the consumers never meet
// at a block-wide barrier (forms 1-5 meet twice a tile: ncu of =4, session 22 run 7, found 19% of
// the stall samples at those barriers and the pipe idle while warpgroup 1 finished each tile).
// setmaxnreg: 224 registers for the consumers (ptxas uses up to R215 at D 256), 56 for the
// producer; launched at 168 (384 threads). Prediction: T 16384 401 -> 480-540 TFLOP/s. Session 23
// run 1 (same run, alternated, TFLOP/s; =4 in brackets): T 4096 / 16384 D 256 390 / 415 (342 /
// 397), T 4096 D 128 315 (265), and the short prompts 1 x 512 / 1 x 1024 / 8 x 512 65 / 156 / 183
// (57 / 146 / 159; fa2c 47 / 111 / 131): faster everywhere, under the prediction at T 16384. ncu
// (run 2, T 4096): the consumers wait on full_k in 13% of the samples, the producer's address
// arithmetic and 16-byte copies take issue slots beside them (one producer warp per scheduler), the
// L2 66% busy. Since then (runs 4-9): TMA, the lazy rescale, uniform wgmma descriptors, the
// unscaled row maximum and the mask only where needed: 539 / 584 / 387 (run 9), 1.00x SDPA cuDNN at
// T 4096 and 16384, D 256, in run 11 (docs/PERFORMANCE.md, session 23).
//
// Session 22 run 5 (same run, alternated; T 4096 / 16384 at D 256, Hq 16 / Hkv 2; T 4096 at D 128,
// Hq 32 / Hkv 8), TFLOP/s: fa2c 258 / 293 / 195; =1 193 / 213 / 228; =2 328 / 371 / 255;
// =3 328 / 373 / 262; =4 340 / 401 / 265; =5 342 / 400 / 261. Same run, SDPA's cuDNN kernel
// 534 / 687 (0.62x / 0.58x for =4), its flash kernel 255 / 313 (1.30x / 1.28x).
//
// K / V stages: 2 each. (Form 6 at D 128 had 3 with 64-key tiles; with 128-key tiles two fill
// the same 160 KB.)
constexpr int kWgStages = 2;
// Q tiles ([64][D] each), the K and V stages ([kBN][D] each); under kProducer then its 4 · NS
// mbarriers.
template <int D, int kWG, bool kProducer = false, int kBN = 64>
constexpr size_t wg_smem_bytes() {
  constexpr int NS = kWgStages;
  return static_cast<size_t>(kWG * kBM + 2 * NS * kBN) * D * sizeof(__nv_bfloat16) +
         (kProducer ? 4 * NS * sizeof(uint64_t) : 0);
}

// Form 6's arguments beside PrefillParams. The TMA maps of the K and V caches: 4-D bf16 views
// (column, head, row, page) whose boxes are 64 columns × 1 head × `rows` rows × 1 page in the
// 128-byte swizzle (one 8 KB block of a stage where rows = 64); rows = 0: no maps (every copy by
// cp.async).
// keep_scale (form 6): O's rescale is skipped where every row of the warp kept its maximum (each
// factor exactly 1: the product would leave O unchanged); HYBRID_ATTN_PREFILL_LAZY=0: never.
struct WgArgs {
  CUtensorMap k, v;
  int rows = 0;
  bool keep_scale = false;
  // The causal mask only on tiles that need it (HYBRID_ATTN_PREFILL_DIAG_MASK=0: on every tile;
  // session 23 run 9: +3.4-4.6%).
  bool diag_mask = false;
};

// S's k16 step for a key tile of 64 (32 accumulators a thread) or 128 keys (64).
__device__ __forceinline__ void mma_s_tile(float (&s)[32], uint64_t a, uint64_t b, bool acc) {
  wgmma::mma_m64n64k16_ss(s, a, b, acc);
}
__device__ __forceinline__ void mma_s_tile(float (&s)[64], uint64_t a, uint64_t b, bool acc) {
  wgmma::mma_m64n128k16_ss(s, a, b, acc);
}

// kBN: keys a tile, 64; or 128 (form 6 at D 128: S [64 × 128] by m64n128k16, P V over 8 k16
// steps; the K / V tiles [128][D] as D/64 blocks of 128 rows × 128 bytes).
template <int D, int kWG, bool kStagger = false, bool kOverlap = false, bool kProducer = false,
          int kBN = 64>
__global__ void __launch_bounds__(128 * (kWG + kProducer), 1)
    prefill_wg_kernel(const PrefillParams p, const __grid_constant__ WgArgs args) {
  static_assert(!kStagger || kWG == 2, "the stagger orders two warpgroups");
  static_assert(!kProducer || (kWG == 2 && kOverlap && !kStagger),
                "the producer form: two consumer warpgroups, overlapped, unstaggered");
  static_assert(kBN == 64 || (kBN == 128 && kProducer && D == 128),
                "128-key tiles: the producer form at D 128 only");
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  constexpr int kBlock = 64 * 128;            // bytes of one 64-row × 64-column swizzled block
  constexpr int kTile = D / 64 * kBlock;      // one [64][D] tile (Q)
  constexpr int kKVBlock = kBN * 128;         // one kBN-row × 64-column block of a K / V tile
  constexpr int kKVTile = D / 64 * kKVBlock;  // one [kBN][D] K / V tile
  // (The lambdas below spell these kBN / 2 and kBN / 16 in their parameter types: a local
  // constexpr there crashes cicc 13.0.)
  constexpr int SN = kBN / 2;   // S's accumulators a thread
  constexpr int PK = kBN / 16;  // P V's k16 steps
  constexpr int NH = D / 128;   // O's 128-column halves
  constexpr int CH = D / 8;     // 16-byte pieces of a row
  extern __shared__ __align__(1024) unsigned char wg_smem[];
  if (smem_u32(wg_smem) % 1024 != 0) __trap();  // the swizzled tiles need it (no static smem)
  constexpr int NS = kWgStages;
  unsigned char* q_s = wg_smem;            // warpgroup w's Q tile at + w·kTile
  unsigned char* k_s = q_s + kWG * kTile;  // stage s at + s·kKVTile
  unsigned char* v_s = k_s + NS * kKVTile;

  // The block's values (its tile, the sequence's bounds, the warpgroup) broadcast from lane 0:
  // warp- uniform to the compiler, so that the loop counters, stages and wgmma descriptors derived
  // from them live in uniform registers. (Loaded or thread-derived, they were per-thread values:
  // each wgmma's two descriptors were rebuilt in ordinary registers and moved over by four R2UR,
  // ~12 instructions a wgmma; session 23 run 5.)
  auto uniform = [](int x) { return __shfl_sync(0xffffffffu, x, 0); };
  const int2 tile = p.tiles[p.max_tiles - 1 - blockIdx.y];  // last tiles (most keys) first
  const int n = uniform(tile.x), r0 = uniform(tile.y);
  if (n < 0) return;
  const int h = blockIdx.x, hk = h / p.group;
  const int cu_n = uniform(p.cu[n]);
  const int L = uniform(p.cu[n + 1]) - cu_n;
  const int rows = min(kBM * kWG, L - r0);
  const int pos0 = uniform(p.seq_lens[n]) - L + r0;  // position of the tile's first row
  const int pos_last = pos0 + rows - 1;              // last row's position (the last key needed)
  const int t0 = cu_n + r0;                          // packed row of the first query
  const int tid = threadIdx.x, wg = uniform(tid / 128), warp = tid % 128 / 32, lane = tid % 32;
  const int g = lane / 4, q4 = lane % 4;
  if (pos0 < 0) {  // invalid seq_lens (< L): write zeros rather than read anything
    for (int i = tid; i < rows * D; i += 128 * (kWG + kProducer))
      store_any(p.out, p.o_dtype, (t0 + i / D) * p.o_t + h * p.o_h + i % D, 0.0f);
    return;
  }

  // Copies. Q: 2 threads a row (row tid / 2 of tile tid / 128), thread u = tid % 2 its pieces
  // u, u + 2, u + 4, ... K and V: TPR = 2·kWG threads a key row, thread u = tid % TPR its pieces u,
  // u + TPR, ...: each copy instruction's threads of a row take TPR adjacent 16-byte pieces (whole
  // 32-byte sectors; session 22's profile of contiguous runs a thread, pieces 128 bytes apart in
  // one instruction, showed half of every sector fetched twice and the L2 63% busy at 206 TFLOP/s).
  // Shared side: one instruction's 32 pieces fall in one 8 KB block, 8 rows × 4 swizzled
  // positions, 4 wavefronts for 512 bytes (no conflict beyond the minimum).
  auto piece = [&](int r, int c) { return (c / 8) * kBlock + wgmma::sw128(r, c % 8); };
  auto kv_piece = [&](int r, int c) { return (c / 8) * kKVBlock + wgmma::sw128(r, c % 8); };
  if (!kProducer || tid < 128 * kWG) {  // (the consumers' threads; the producer copies K, V)
    const int qr = tid / 2, qu = tid % 2;
    const bool ok = qr < rows;
    const __nv_bfloat16* src = p.q + (ok ? (t0 + qr) * p.q_t + h * p.q_h : 0);
    unsigned char* qd = q_s + (qr / kBM) * kTile;
#pragma unroll
    for (int c = qu; c < CH; c += 2)
      cp_async16(qd + piece(qr % kBM, c), src + (ok ? c * 8 : 0), ok ? 16 : 0);
  }
  constexpr int TPR = 2 * kWG;  // threads a key row
  const int cr = tid / TPR, cu = tid % TPR;
  const int tiles = pos_last / kBN + 1;
  // Key j's row in the K and V caches (element offsets; −1 past the block's last position, which
  // is never read, or where the page table has no page). The caches share page count and size
  // (the op checks it): one lookup for both, and for any one of them.
  auto key_page = [&](int j) {  // (page, row in it) of key j; page −1: none, or past pos_last
    return j <= pos_last ? p.pt.locate(n, j, p.k.page_size, p.k.num_pages) : make_int2(-1, 0);
  };
  auto kv_offsets = [&](int2 pg) {
    return pg.x >= 0 ? longlong2{p.k.offset(pg.x, pg.y, hk), p.v.offset(pg.x, pg.y, hk)}
                     : longlong2{-1, -1};
  };
  // Row cr of key tile `kt` of a cache into `dst` (a stage): keys past the block's last position
  // zero-filled and never read from the cache; no copy for tiles past the last.
  auto load_rows = [&](const Cache& kv, int kt, unsigned char* dst) {
    if (kt >= tiles) return;
    const int2 pg = key_page(kt * kBN + cr);
    const int64_t off = pg.x >= 0 ? kv.offset(pg.x, pg.y, hk) : -1;
    const __nv_bfloat16* base = static_cast<const __nv_bfloat16*>(kv.p);
#pragma unroll
    for (int c = cu; c < CH; c += TPR)
      cp_async16(dst + kv_piece(cr, c), base + (off >= 0 ? off + c * 8 : 0), off >= 0 ? 16 : 0);
  };
  auto load_kv = [&](int kt, int stage) {  // K and V of key tile kt into stage `stage`
    const longlong2 off = kv_offsets(key_page(kt * kBN + cr));
    const int64_t ko = off.x, vo = off.y;
    const __nv_bfloat16* k_base = static_cast<const __nv_bfloat16*>(p.k.p);
    const __nv_bfloat16* v_base = static_cast<const __nv_bfloat16*>(p.v.p);
    unsigned char* kd = k_s + stage * kKVTile;
    unsigned char* vd = v_s + stage * kKVTile;
#pragma unroll
    for (int c = cu; c < CH; c += TPR) {
      cp_async16(kd + kv_piece(cr, c), k_base + (ko >= 0 ? ko + c * 8 : 0), ko >= 0 ? 16 : 0);
      cp_async16(vd + kv_piece(cr, c), v_base + (vo >= 0 ? vo + c * 8 : 0), vo >= 0 ? 16 : 0);
    }
  };

  // kProducer: warpgroup kWG copies K and V into rings of NS stages; the consumers wait on
  // full_k / full_v (128 producer arrivals: each producer thread's copies landed) and release on
  // empty_k / empty_v (8 arrivals: each consumer warp, both warpgroups, for every tile). Use u of
  // stage s (tile u·NS + s) completes phase u: waits take parity u & 1.
  uint64_t* full_k = reinterpret_cast<uint64_t*>(v_s + NS * kKVTile);
  uint64_t* full_v = full_k + NS;
  uint64_t* empty_k = full_v + NS;
  uint64_t* empty_v = empty_k + NS;
  if constexpr (kProducer) {
    if (tid == 0) {
      for (int i = 0; i < NS; ++i) {
        mbar_init(full_k + i, 128);
        mbar_init(full_v + i, 128);
        mbar_init(empty_k + i, 8);
        mbar_init(empty_v + i, 8);
      }
      mbar_init_fence();
    }
    __syncthreads();  // (the last block-wide barrier)
    if (tid >= 128 * kWG) {
      // The producer: PTR = 128 / kBN threads a key row (pr = pt / PTR), thread pu = pt % PTR its
      // pieces pu, pu + PTR, ... (at kBN 64 each copy instruction's 2 threads of a row: one whole
      // 32-byte sector). K of tile kt, then V of tile kt; each waits for its stage's release by the
      // consumers of tile kt − NS.
      // With TMA maps (args.rows = R > 0) a whole tile (every key at or before pos_last, every
      // page present) comes as boxes of R rows × 64 columns instead: the first thread of each
      // R-row segment (pu = 0, pr % R = 0: one page, or one 64-row part of one) arms the stage
      // with its boxes' bytes and issues them; the other threads arrive plainly (128 arrivals as
      // under cp.async). The tile with keys past pos_last keeps the zero-filling copies.
      asm volatile("setmaxnreg.dec.sync.aligned.u32 56;\n" ::: "memory");
      // (The copy loops stay rolled: unrolled, their addresses spill at the producer's 56
      // registers.)
      constexpr int PTR = 128 / kBN;
      const int pt = tid - 128 * kWG, pr = pt / PTR, pu = pt % PTR;
      const __nv_bfloat16* k_base = static_cast<const __nv_bfloat16*>(p.k.p);
      const __nv_bfloat16* v_base = static_cast<const __nv_bfloat16*>(p.v.p);
      const int R = args.rows;
      if (R > 0 && pt == 0) {
        asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&args.k))
                     : "memory");
        asm volatile("prefetch.tensormap [%0];\n" ::"l"(reinterpret_cast<uint64_t>(&args.v))
                     : "memory");
      }
      for (int kt = 0; kt < tiles; ++kt) {
        const int st = kt % NS, use = kt / NS;
        const int2 pg = key_page(kt * kBN + pr);
        const longlong2 off = kv_offsets(pg);
        bool tma = R > 0 && kt * kBN + kBN - 1 <= pos_last;  // (uniform over the producer)
        if (tma) {  // ... and every row's page present (an AND over the producer's 128 threads)
          uint32_t all;
          asm volatile(
              "{\n.reg .pred in, out;\nsetp.ne.u32 in, %1, 0;\n"
              "bar.red.and.pred out, 4, 128, in;\nselp.u32 %0, 1, 0, out;\n}\n"
              : "=r"(all)
              : "r"(static_cast<uint32_t>(pg.x >= 0))
              : "memory");
          tma = all != 0;
        }
        const bool issuer = tma && pu == 0 && pr % R == 0;
        const uint32_t box_bytes = static_cast<uint32_t>(D * R * 2);  // D / 64 boxes of R rows
        // One cache's tile (K, then V) into stage st, once the consumers released it.
        auto fill = [&](uint64_t* empty, uint64_t* full, unsigned char* dst, const CUtensorMap* map,
                        const __nv_bfloat16* base, int64_t off) {
          if (use > 0) mbar_wait(empty + st, (use - 1) & 1);
          if (issuer) {
            mbar_arrive_expect_tx(full + st, box_bytes);
#pragma unroll
            for (int b = 0; b < D / 64; ++b)
              tma_load_4d(dst + b * kKVBlock + pr * 128, map, 64 * b, hk, pg.y, pg.x, full + st);
          } else if (tma) {
            mbar_arrive(full + st);
          } else {
            for (int c = pu; c < CH; c += PTR)
              cp_async16(dst + kv_piece(pr, c), base + (off >= 0 ? off + c * 8 : 0),
                         off >= 0 ? 16 : 0);
            cp_async_mbar_arrive(full + st);
          }
        };
        fill(empty_k, full_k, k_s + st * kKVTile, &args.k, k_base, off.x);
        fill(empty_v, full_v, v_s + st * kKVTile, &args.v, v_base, off.y);
      }
      cp_commit();  // its copies land before it exits
      cp_wait<0>();
      return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 224;\n" ::: "memory");
  }

  float o[NH][64];
#pragma unroll
  for (int hh = 0; hh < NH; ++hh) {
#pragma unroll
    for (int i = 0; i < 64; ++i) o[hh][i] = 0.0f;
    wgmma::fence_operand(o[hh]);  // (zeroed here, not between a later S and P V)
  }
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // rows 16w + g, + 8 (l: this thread's)
  const int row_a = 16 * warp + g;                           // within the warpgroup's 64 rows
  // This warpgroup's rows: 64·wg .. 64·wg + w_rows − 1 of the block's (none past `rows`).
  const int w_rows = min(kBM, rows - kBM * wg), w_pos0 = pos0 + kBM * wg;
  const int w_pos_last = w_pos0 + w_rows - 1;  // (only where w_rows > 0)
  // This warpgroup's tiles: 0 .. w_tiles − 1 (the keys up to its last row; none without rows).
  const int w_tiles = w_rows > 0 ? w_pos_last / kBN + 1 : 0;
  const unsigned char* wq = q_s + wg * kTile;
  // kStagger: only where warpgroup 1 has rows (then it computes every tile of the block).
  const bool stagger = kStagger && rows > kBM;
  auto s_issued = [&] {  // warpgroup 0: its S of this tile is issued
    if (stagger && wg == 0) asm volatile("bar.arrive 1, 256;\n" ::: "memory");
  };
  auto s_wait = [&] {  // warpgroup 1: before its S, warpgroup 0's
    if (stagger && wg == 1) asm volatile("bar.sync 1, 256;\n" ::: "memory");
  };
  // S [64 × kBN] = Q K(tile in stage ks)ᵀ, issued and committed (not waited for).
  auto issue_s = [&](float(&s)[kBN / 2],
                     const unsigned char* ks) {  // (the first k16 step scales s by 0)
    wgmma::fence();
    // (A descriptor's low 14 bits are the address / 16: an offset inside the shared memory adds
    // off / 16 to it, with no carry out of the field.)
    const uint64_t dq = wgmma::desc_sw128(wq, 16, 1024), dk = wgmma::desc_sw128(ks, 16, 1024);
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const int q16 = ((kk / 4) * kBlock + (kk % 4) * 32) / 16;
      const int k16 = ((kk / 4) * kKVBlock + (kk % 4) * 32) / 16;
      mma_s_tile(s, dq + q16, dk + k16, kk > 0);
    }
    wgmma::commit();
  };
  // O += P V(tile in stage vs), issued and committed (not waited for).
  auto issue_pv = [&](const uint32_t(&pa)[kBN / 16][4], const unsigned char* vs) {
    wgmma::fence();
    const uint64_t dv = wgmma::desc_sw128(vs, kKVBlock, 1024);
#pragma unroll
    for (int kk = 0; kk < PK; ++kk)
#pragma unroll
      for (int hh = 0; hh < NH; ++hh)
        wgmma::mma_m64n128k16_rs<1>(o[hh], pa[kk], dv + (kk * 2048 + hh * 2 * kKVBlock) / 16, true);
    wgmma::commit();
  };
  // The online softmax of S (keys j0 ..) in the log2 domain: m and l updated, corr the factor for
  // O, x = P (unrounded). s[4j + e] and x[4j + e]: row row_a + 8·(e / 2), key j0 + 8j + 2·q4 + e
  // % 2. s is only read (under kOverlap a non-wgmma write to S's accumulator registers while P V is
  // in flight makes ptxas serialise every wgmma of the kernel, C7513).
  // The maximum is taken over the unscaled scores (scale > 0: prefill_wg_supports), then scaled
  // once; each p is exp2(s · scale − m) by one FFMA.
  // masked (std::true_type / std::false_type): whether keys past a row's position are masked;
  // without it (a tile wholly at or before the warpgroup's first row) no compare / select.
  auto softmax_m = [&](auto masked, const float(&s)[kBN / 2], int j0, float(&corr)[2],
                       float(&x)[kBN / 2]) {
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int j = 0; j < kBN / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = j0 + 8 * j + 2 * q4 + e % 2, pos = w_pos0 + row_a + 8 * (e / 2);
        x[4 * j + e] = !decltype(masked)::value || key <= pos ? s[4 * j + e] : -INFINITY;
        mx[e / 2] = fmaxf(mx[e / 2], x[4 * j + e]);
      }
    float base[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
      mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
      const float m_new = fmaxf(m[r], mx[r] * p.scale_log2);
      base[r] = m_new == -INFINITY ? 0.0f : m_new;  // a row with no key yet: every p is 0
      corr[r] = exp2_approx(m[r] - base[r]);
      m[r] = m_new;
      l[r] *= corr[r];
    }
#pragma unroll
    for (int j = 0; j < SN; ++j) {
      x[j] = exp2_approx(fmaf(x[j], p.scale_log2, -base[(j % 4) / 2]));
      l[(j % 4) / 2] += x[j];
    }
  };
  auto softmax = [&](const float(&s)[kBN / 2], int j0, float(&corr)[2], float(&x)[kBN / 2]) {
    softmax_m(std::true_type{}, s, j0, corr, x);
  };
  // P as the A fragments of P V's PK k16 steps (keys 16kk .. 16kk + 15): S's accumulator layout
  // is the A fragment's. Under kOverlap only once P V of the tile before completed: P V reads
  // these registers while it runs, and the compiler, which sees its asm read them at the issue,
  // would otherwise put the next P in the same registers (ptxas then serialised every wgmma).
  auto pack_p = [&](const float(&x)[kBN / 2], uint32_t(&pa)[kBN / 16][4]) {
#pragma unroll
    for (int kk = 0; kk < PK; ++kk) {
      pa[kk][0] = pack_bf16(x[8 * kk + 0], x[8 * kk + 1]);
      pa[kk][1] = pack_bf16(x[8 * kk + 2], x[8 * kk + 3]);
      pa[kk][2] = pack_bf16(x[8 * kk + 4], x[8 * kk + 5]);
      pa[kk][3] = pack_bf16(x[8 * kk + 6], x[8 * kk + 7]);
    }
  };
  // (fence_operand after it: the products issued next, S first under kOverlap, find O's new
  // values in place, not multiplied later between their issues.)
  auto rescale_o = [&](const float(&corr)[2]) {
    if (kProducer && args.keep_scale && __all_sync(0xffffffffu, corr[0] == 1.0f && corr[1] == 1.0f))
      return;  // (O unchanged: every factor of the warp's rows is exactly 1)
#pragma unroll
    for (int hh = 0; hh < NH; ++hh) {
#pragma unroll
      for (int i = 0; i < 64; ++i) o[hh][i] *= corr[(i % 4) / 2];
      wgmma::fence_operand(o[hh]);
    }
  };
  auto wait_o = [&] {
    wgmma::wait<0>();
#pragma unroll
    for (int hh = 0; hh < NH; ++hh) wgmma::fence_operand(o[hh]);
  };

  if constexpr (kProducer) {
    // Form 6: form 5's overlap (S of tile t + 1 and P V of tile t issued together, tile t + 1's
    // softmax under P V) on the producer's rings, with no block-wide barrier: each warpgroup waits
    // only for the tiles it reads and releases each stage as its last product on it completes
    // (K of tile t + 1 after S, V of tile t after P V), so the two warpgroups drift freely.
    auto k_ready = [&](int kt) { mbar_wait(full_k + kt % NS, (kt / NS) & 1); };
    auto v_ready = [&](int kt) { mbar_wait(full_v + kt % NS, (kt / NS) & 1); };
    auto k_done = [&](int kt) {
      __syncwarp();
      if (lane == 0) mbar_arrive(empty_k + kt % NS);
    };
    auto v_done = [&](int kt) {
      __syncwarp();
      if (lane == 0) mbar_arrive(empty_v + kt % NS);
    };
    cp_commit();  // this thread's Q copies (in a group: wait_group waits for committed ones only)
    cp_wait<0>();
    wgmma::fence_async_smem();
    asm volatile("bar.sync %0, 128;\n" ::"r"(2 + wg) : "memory");  // ... and its warpgroup's
    uint32_t pa[PK][4];
    if (w_tiles > 0) {  // (every warpgroup with rows has tile 0)
      float s[SN], corr[2], x[SN];
      k_ready(0);
      wgmma::fence_async_smem();
      issue_s(s, k_s);
      wgmma::wait<0>();
      wgmma::fence_operand(s);
      k_done(0);
      softmax(s, 0, corr, x);  // (O is 0: corr unused)
      pack_p(x, pa);
    }
    int t = 0;
    for (; t + 1 < w_tiles; ++t) {
      k_ready(t + 1);
      v_ready(t);
      wgmma::fence_async_smem();
      float s[SN];
      issue_s(s, k_s + ((t + 1) % NS) * kKVTile);
      issue_pv(pa, v_s + (t % NS) * kKVTile);
      wgmma::wait<1>();  // S of tile t + 1 (P V of tile t may still run)
      wgmma::fence_operand(s);
      k_done(t + 1);
      float corr[2], x[SN];
      if (args.diag_mask && (t + 1) * kBN + kBN - 1 <= w_pos0)  // every key at or before each row
        softmax_m(std::false_type{}, s, (t + 1) * kBN, corr, x);
      else
        softmax(s, (t + 1) * kBN, corr, x);
      wait_o();
      v_done(t);
      rescale_o(corr);
      pack_p(x, pa);
    }
    if (t < w_tiles) {  // this warpgroup's last tile
      v_ready(t);
      wgmma::fence_async_smem();
      issue_pv(pa, v_s + (t % NS) * kKVTile);
      wait_o();
      v_done(t);
      ++t;
    }
    // The tiles past this warpgroup's rows (the producer fills every tile of the block): released
    // as they land, so that each release counts both warpgroups of its tile.
    for (; t < tiles; ++t) {
      k_ready(t);
      k_done(t);
      v_ready(t);
      v_done(t);
    }
  } else if constexpr (!kOverlap) {
    // One copy group a tile (K and V; Q's copies join tile 0's); the last tile's loop commits an
    // empty group so that cp_wait<1> always means "tile t landed".
    load_kv(0, 0);
    cp_commit();
    for (int t = 0; t < tiles; ++t) {
      if (t + 1 < tiles) load_kv(t + 1, (t + 1) % 2);
      cp_commit();
      cp_wait<1>();               // this thread's copies of Q and tile t landed
      wgmma::fence_async_smem();  // ... visible to wgmma's async proxy
      __syncthreads();            // ... and every thread's
      // No rows in this warpgroup, or every key of the tile past them (warpgroup-uniform).
      if (t >= w_tiles) {
        s_issued();
        __syncthreads();  // (the loop's closing barrier)
        continue;
      }
      s_wait();
      float s[SN];
      issue_s(s, k_s + (t % 2) * kKVTile);
      s_issued();
      wgmma::wait<0>();
      wgmma::fence_operand(s);
      float corr[2], x[SN];
      uint32_t pa[PK][4];
      softmax(s, t * kBN, corr, x);
      pack_p(x, pa);
      rescale_o(corr);
      issue_pv(pa, v_s + (t % 2) * kKVTile);
      wait_o();
      __syncthreads();  // every warp's reads of stage t % 2 done before tile t + 2's copies
    }
  } else {
    // kOverlap: a warpgroup issues S of tile t + 1 and then P V of tile t, waits for S only
    // (wgmma groups complete in order: wait<1> leaves P V in flight), and runs tile t + 1's
    // softmax under its own P V; then O waits, takes tile t + 1's correction, and the next
    // iteration issues both products again. P of tile t stays in registers (pa) until its P V
    // completes; tile t + 1's waits in f32 (x) and is packed into pa after that.
    // K of tile t + 1 is read in iteration t, V of tile t too, so the copy group X(u) = {V of
    // tile u into V stage u % 2, K of tile u + 1 into K stage (u + 1) % 2}: issued after
    // iteration u − 2's closing barrier (the stages' last readers, S of tile u − 1 and P V of
    // tile u − 2, are then done), waited for at iteration u's start, with X(u + 1) in flight.
    // Prologue: {Q, K of tile 0}, X(0); S of tile 0 and its softmax; X(1).
    load_rows(p.k, 0, k_s);
    cp_commit();
    auto issue_x = [&](int u) {
      load_rows(p.v, u, v_s + (u % 2) * kKVTile);
      load_rows(p.k, u + 1, k_s + ((u + 1) % 2) * kKVTile);
      cp_commit();
    };
    issue_x(0);
    cp_wait<1>();  // Q and K of tile 0
    wgmma::fence_async_smem();
    __syncthreads();
    uint32_t pa[PK][4];
    {
      float s[SN], corr[2], x[SN];
      if (w_tiles > 0) {  // (every warpgroup with rows has tile 0)
        s_wait();
        issue_s(s, k_s);
        s_issued();
        wgmma::wait<0>();
        wgmma::fence_operand(s);
        softmax(s, 0, corr, x);  // (O is 0: corr unused)
        pack_p(x, pa);
      } else {
        s_issued();
      }
    }
    __syncthreads();  // every warpgroup's S of tile 0 read K stage 0
    issue_x(1);
    // Iteration t: X(t) waited for; this warpgroup's products; the closing barrier; X(t + 2) (past
    // the last tile an empty group: it keeps the count). Three loops, each issuing its products
    // unconditionally: both while the warpgroup has tile t + 1, P V alone at its last tile, then
    // none (the barriers, the copies and warpgroup 0's stagger arrivals continue).
    auto top = [&] {
      cp_wait<1>();  // X(t): V of tile t, K of tile t + 1 (X(t + 1) may fly)
      wgmma::fence_async_smem();
      __syncthreads();
    };
    auto close = [&](int t) {
      __syncthreads();  // S of tile t + 1 and P V of tile t done in every warpgroup
      issue_x(t + 2);
    };
    int t = 0;
    for (; t + 1 < w_tiles; ++t) {
      top();
      s_wait();  // (warpgroup 1 has every tile, so it waits in each iteration but the last)
      float s[SN];
      issue_s(s, k_s + ((t + 1) % 2) * kKVTile);
      issue_pv(pa, v_s + (t % 2) * kKVTile);
      s_issued();
      wgmma::wait<1>();  // S of tile t + 1 (P V of tile t may still run)
      wgmma::fence_operand(s);
      float corr[2], x[SN];
      softmax(s, (t + 1) * kBN, corr, x);
      wait_o();
      rescale_o(corr);
      pack_p(x, pa);
      close(t);
    }
    if (t < w_tiles) {  // this warpgroup's last tile
      top();
      issue_pv(pa, v_s + (t % 2) * kKVTile);
      if (t + 1 < tiles) s_issued();
      wait_o();
      close(t);
      ++t;
    }
    for (; t < tiles; ++t) {
      top();
      if (t + 1 < tiles) s_issued();
      close(t);
    }
  }

  // O / l, rows < w_rows; o[hh][4j + e]: row row_a + 8·(e / 2), column 128·hh + 8j + 2·q4 + e % 2.
  float inv[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
    l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
    inv[r] = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
  }
  // bf16 rows of 4-byte pairs: one 32-bit store a pair of columns; else element by element.
  const bool pairs = p.o_dtype == DType::bf16 && reinterpret_cast<uintptr_t>(p.out) % 4 == 0 &&
                     p.o_t % 2 == 0 && p.o_h % 2 == 0;
#pragma unroll
  for (int hh = 0; hh < NH; ++hh)
#pragma unroll
    for (int i = 0; i < 64; i += 2) {
      const int row = row_a + 8 * ((i % 4) / 2);
      if (row >= w_rows) continue;
      const float r = inv[(i % 4) / 2];
      const int64_t at =
          (t0 + kBM * wg + row) * p.o_t + h * p.o_h + 128 * hh + 8 * (i / 4) + 2 * q4;
      if (pairs) {
        *reinterpret_cast<__nv_bfloat162*>(static_cast<__nv_bfloat16*>(p.out) + at) =
            __floats2bfloat162_rn(o[hh][i] * r, o[hh][i + 1] * r);
      } else {
        store_any(p.out, p.o_dtype, at, o[hh][i] * r);
        store_any(p.out, p.o_dtype, at + 1, o[hh][i + 1] * r);
      }
    }
#else
  __trap();  // built without sm_90a code: prefill_wg_supports refuses, the host never launches it
#endif
}

// The kernel's form: HYBRID_ATTN_PREFILL_WG=1 one warpgroup a block, =2 two, =3 two staggered,
// =4 two staggered with each one's softmax under its own P V (kOverlap), =5 two with kOverlap,
// unstaggered; =6 (the default since session 23) =5 with a producer warpgroup (kProducer), and
// since session 24 with 128-key tiles at D 128 (kBN; session 23's form 8: T 4096 D 128 387 -> 487
// TFLOP/s in session 24 run 1, D 256 unchanged); =0 turns the wgmma prefill off (fa2c runs).
int wg_form() {
  static const int n = env_int("HYBRID_ATTN_PREFILL_WG", 6);
  return n;
}

Reason prefill_wg_supports(const AttnPrefill& a) {
  if (wg_form() < 1 || wg_form() > 6)
    return "HYBRID_ATTN_PREFILL_WG=" + std::to_string(wg_form()) +
           " turns the wgmma prefill off (its forms are 1-6)";
#if !defined(HYBRID_CUDA_SM90A)
  (void)a;
  return std::string("the wgmma prefill needs a build with sm_90a code");
#else
  if (device_info().major != 9) return std::string("the wgmma prefill needs an sm_90 GPU");
  if (a.q.size(2) != 128 && a.q.size(2) != 256)
    return "the wgmma prefill takes D 128 or 256, got D=" + std::to_string(a.q.size(2));
  if (a.window > 0) return std::string("the wgmma prefill has no sliding window (fa2c has)");
  if (a.scale && !(*a.scale > 0.0f))
    return std::string(
        "the wgmma prefill takes the row max of the unscaled scores, so it needs scale > 0 "
        "(cuda_fa2b serves other scales)");
  if (a.q.size(0) / kBM + (a.cu_seqlens.size(0) - 1) > 65535)
    return std::string("the wgmma prefill takes at most 65535 query tiles (grid y)");
  return prefill_fa2_supports(a);  // bf16, 16-byte rows, 32-bit offsets, the head count
#endif
}

// Form 6's arguments: its switches (keep_scale, diag_mask) and TMA maps (HYBRID_ATTN_PREFILL_TMA=0:
// none). A 64-key tile must be whole pages or part of one, and a box's rows whole 1024-byte
// swizzle groups: page sizes that are multiples of 64 (boxes of 64 rows) or divide 64 with at
// least 8 rows (boxes of a page). Other page sizes, or caches the driver cannot map (16-byte
// alignment of the base and strides), keep cp.async.
WgArgs wg_args(const AttnPrefill& a, Context& ctx) {
  static const bool off = env_is_zero("HYBRID_ATTN_PREFILL_TMA");
  static const bool rescale_always = env_is_zero("HYBRID_ATTN_PREFILL_LAZY");
  WgArgs args;
  args.keep_scale = !rescale_always;
  static const bool diag_mask = !env_is_zero("HYBRID_ATTN_PREFILL_DIAG_MASK");
  args.diag_mask = diag_mask;
  const int64_t P = a.k_cache.size(1), D = a.k_cache.size(3);
  const int rows = P % 64 == 0 ? 64 : (64 % P == 0 && P >= 8 ? static_cast<int>(P) : 0);
  if (off || rows == 0) return args;
  auto encode = [&](const Tensor& c, CUtensorMap& m) {
    const uint64_t dims[4] = {static_cast<uint64_t>(D), static_cast<uint64_t>(c.size(2)),
                              static_cast<uint64_t>(P), static_cast<uint64_t>(c.size(0))};
    const int64_t strides[3] = {c.stride(2), c.stride(1), c.stride(0)};
    const uint32_t box[4] = {64, 1, static_cast<uint32_t>(rows), 1};
    return c.stride(3) == 1 && encode_bf16_map_4d(m, c.data(), dims, strides, box);
  };
  if (encode(a.k_cache, args.k) && encode(a.v_cache, args.v)) {
    args.rows = rows;
  } else if (ctx.log_level() >= LogLevel::debug) {
    ctx.log(LogLevel::debug, "[attn_prefill] cuda_wg: no TMA maps for these caches (cp.async)");
  }
  return args;
}

template <int D, int kWG, bool kStagger, bool kOverlap, bool kProducer = false, int kBN = 64>
void launch_wg(const AttnPrefill& a, Context& ctx) {
  PrefillParams p = prefill_params(a);
  const cudaStream_t st = as_stream(ctx.stream());
  if (!plan_tiles(p, kBM * kWG, ctx, st)) return;
  constexpr size_t smem = wg_smem_bytes<D, kWG, kProducer, kBN>();
  static_assert(smem <= 227 * 1024, "cuda_wg's tiles fit the shared memory");
  auto* kernel = prefill_wg_kernel<D, kWG, kStagger, kOverlap, kProducer, kBN>;
  ensure_dynamic_smem(kernel, smem);
  WgArgs args;
  if constexpr (kProducer) args = wg_args(a, ctx);
  kernel<<<dim3(p.Hq, p.max_tiles), 128 * (kWG + kProducer), smem, st>>>(p, args);
  HYBRID_CUDA_CHECK_LAUNCH();
}

template <int D>
void launch_wg_form(const AttnPrefill& a, Context& ctx) {
  constexpr int kBN6 = D == 128 ? 128 : 64;  // form 6's key tile
  switch (wg_form()) {
    case 1:
      return launch_wg<D, 1, false, false>(a, ctx);
    case 2:
      return launch_wg<D, 2, false, false>(a, ctx);
    case 3:
      return launch_wg<D, 2, true, false>(a, ctx);
    case 4:
      return launch_wg<D, 2, true, true>(a, ctx);
    case 5:
      return launch_wg<D, 2, false, true>(a, ctx);
    default:  // 6: 128-key tiles at D 128, 64 at D 256
      return launch_wg<D, 2, false, true, true, kBN6>(a, ctx);
  }
}

void prefill_wg_cuda(const AttnPrefill& a, Context& ctx) {
  a.q.size(2) == 128 ? launch_wg_form<128>(a, ctx) : launch_wg_form<256>(a, ctx);
}

}  // namespace

}  // namespace attn

void register_attention_prefill_tc(Registry& r) {
  // cuda_wg under the opt-in attn_prefill.cudnn (50: HYBRID_ATTN_PREFILL_CUDNN=1 asks for it).
  r.add<AttnPrefill>("attn_prefill.cuda_wg", DeviceType::cuda, 45, attn::prefill_wg_supports,
                     attn::prefill_wg_cuda);
  r.add<AttnPrefill>("attn_prefill.cuda_fa2c", DeviceType::cuda, 40, attn::prefill_fa2c_supports,
                     attn::prefill_fa2c_cuda);
  r.add<AttnPrefill>("attn_prefill.cuda_fa2b", DeviceType::cuda, 30, attn::prefill_fa2b_supports,
                     attn::prefill_fa2b_cuda);
  r.add<AttnPrefill>("attn_prefill.cuda_fa2", DeviceType::cuda, 20, attn::prefill_fa2_supports,
                     attn::prefill_fa2_cuda);
  r.add<AttnPrefill>("attn_prefill.cuda_tc", DeviceType::cuda, 10, attn::prefill_tc_supports,
                     attn::prefill_tc_cuda);
}

}  // namespace hybrid::cuda
