// CUDA: the attention family over the paged KV cache [num_pages, page_size, Hkv, D]:
// kv_append, attn_decode (split-KV flash-decoding with the GQA group packed in one block: the
// tensor-core decode_tc_kernel for bf16 / f16, the CUDA-core attn_kernel otherwise),
// rope_kv_append_attn_decode (seed 003: RoPE + append kernel, then the same decode core) and the
// CUDA-core attn_prefill variant (attn_kernel with one query row per token). The tensor-core
// prefill lives in attention_prefill.cu.
//
// Attention of one query row at position p (query head h, KV head h / group), keys j in [lo, p]:
//   s_j = scale · q·K[j];  out = Σ_j softmax(s)_j V[j]
// computed in the log2 domain (q pre-multiplied by scale·log2 e, exp2) with an online softmax.
//
// attn_kernel: block (query row, KV head · head chunk, split), 4 warps, up to kGC = 8 query heads
// of one GQA group, so the K/V rows are read once per group. The block's key range [lo, p] is cut
// in `splits` equal parts (multiples of 32 keys); each warp takes 32-key tiles of the part:
//   QK:  lane i owns key i of the tile and forms the kGC dots against q in shared memory
//        (16-byte vector loads of its key row); warp max per head; p = exp2(s − m) to shared.
//   PV:  lanes split D (E elements each, BDX lanes per V row, BDY rows at once): coalesced V-row
//        loads, acc[g][E] += p[g]·v; rows summed with shuffles at the end.
// Warps merge in shared memory; one split writes out directly, several write (m, l, o) partials
// to ctx.workspace and attn_merge_kernel combines them (deterministic, no atomics).
// Bytes: each K and V row of the window is read once per (query row, KV head): 2·keys·D·size(C).
// FLOPs: 4·keys·D per query head.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "cuda/attention_common.cuh"
#include "cuda/common.cuh"
#include "cuda/dtype.cuh"
#include "cuda/kernels.h"
#include "cuda/warp.cuh"
#include "hybrid/ops/attention.h"

namespace hybrid::cuda {

namespace attn {

namespace {

constexpr int kWarps = 4;
constexpr int kGC = 8;  // query heads per block (a GQA group, or a chunk of one)
constexpr float kLog2e = 1.4426950408889634f;

struct AttnParams {
  const void* q = nullptr;  // [rows, Hq, D] q_dtype
  DType q_dtype = DType::f32;
  int64_t q_t = 0, q_h = 0;
  Cache k, v;                     // [num_pages, page_size, Hkv, D]
  PageTable pt;                   // [N, max_pages]
  const int* seq_lens = nullptr;  // [N]
  const int* cu = nullptr;        // [N + 1] (prefill rows) or null (decode: row n = sequence n)
  int N = 0, rows = 0, Hq = 0, Hkv = 0, group = 0, hchunks = 1, splits = 1;
  int window = 0;
  float scale_log2 = 1.0f;  // scale · log2 e
  void* out = nullptr;      // [rows, Hq, D] o_dtype
  DType o_dtype = DType::f32;
  int64_t o_t = 0, o_h = 0;
  float* part_o = nullptr;   // [rows, Hq, splits, D] unnormalised Σ 2^(s−m) v
  float* part_ml = nullptr;  // [rows, Hq, splits, 2] (m, l)
  int chunk = 0;  // v5: keys per split from the shapes (a multiple of kTcBN; window 0 only)
};

// Weight 2^(m − M) of a partial state with max m in a merge of max M (0 for an empty state).
__device__ __forceinline__ float merge_weight(float m, float M) {
  return m == -INFINITY ? 0.0f : exp2f(m - M);
}

template <int D, class C>
__global__ void __launch_bounds__(kWarps * 32) attn_kernel(const AttnParams p) {
  constexpr int VEC = 16 / static_cast<int>(sizeof(C));  // elements per 16-byte load
  constexpr int E = (D / 32 > VEC) ? D / 32 : VEC;       // PV: elements per lane
  constexpr int BDX = D / E;                             // PV: lanes per V row
  constexpr int BDY = 32 / BDX;                          // PV: V rows per warp step
  static_assert(BDX * E == D && BDX * BDY == 32, "D must be 64, 128 or 256");

  __shared__ __align__(16) float q_s[kGC][D];           // q · scale · log2 e
  __shared__ __align__(16) float p_s[kWarps][32][kGC];  // tile probabilities
  __shared__ int2 kv_s[kWarps][32];                     // tile keys: (page or −1, row)
  __shared__ __align__(16) float o_s[kWarps][kGC][D];   // per-warp acc for the merge
  __shared__ float ml_s[kWarps][kGC][2];

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int split = blockIdx.z;
  const int hk = blockIdx.y / p.hchunks, hc = blockIdx.y % p.hchunks;
  const int h0 = hk * p.group + hc * kGC;
  const int gc = min(kGC, p.group - hc * kGC);
  const int r = blockIdx.x;

  // Sequence and position of this query row.
  int n, pos;
  if (p.cu == nullptr) {
    n = r;
    pos = p.seq_lens[n] - 1;
  } else {
    n = find_sequence(p.cu, p.N, r);
    const int L = p.cu[n + 1] - p.cu[n];
    pos = p.seq_lens[n] - L + (r - p.cu[n]);
  }
  const int lo = (p.window > 0) ? max(0, pos - p.window + 1) : 0;
  const int nkeys = pos >= 0 ? pos - lo + 1 : 0;  // pos < 0: padding row, no keys
  const int chunk = ((nkeys + p.splits - 1) / p.splits + 31) / 32 * 32;
  const int k_begin = lo + split * chunk;
  const int k_end = min(pos + 1, k_begin + chunk);

  for (int i = threadIdx.x; i < kGC * D; i += blockDim.x) {
    const int g = i / D, d = i % D;
    q_s[g][d] =
        g < gc ? load_any(p.q, p.q_dtype, r * p.q_t + (h0 + g) * p.q_h + d) * p.scale_log2 : 0.0f;
  }
  __syncthreads();

  const C* kc = static_cast<const C*>(p.k.p);
  const C* vc = static_cast<const C*>(p.v.p);
  float m[kGC], l[kGC], acc[kGC][E];
#pragma unroll
  for (int g = 0; g < kGC; ++g) {
    m[g] = -INFINITY, l[g] = 0.0f;
#pragma unroll
    for (int e = 0; e < E; ++e) acc[g][e] = 0.0f;
  }
  const int d0 = (lane % BDX) * E;  // PV: this lane's dims

  for (int t0 = k_begin + warp * 32; t0 < k_end; t0 += kWarps * 32) {
    // QK: lane owns key t0 + lane.
    const int j = t0 + lane;
    int2 kv = make_int2(-1, 0);
    if (j < k_end) kv = p.pt.locate(n, j, p.k.page_size, p.k.num_pages);
    kv_s[warp][lane] = kv;
    float s[kGC];
#pragma unroll
    for (int g = 0; g < kGC; ++g) s[g] = 0.0f;
    if (kv.x >= 0) {
      const C* krow = kc + p.k.offset(kv.x, kv.y, hk);
#pragma unroll 4
      for (int c = 0; c < D; c += VEC) {
        float kf[VEC];
        load_vec<VEC>(krow + c, kf, p.k.aligned);
#pragma unroll
        for (int g = 0; g < kGC; ++g) {
          if (g < gc) {
#pragma unroll
            for (int e = 0; e < VEC; ++e) s[g] = fmaf(q_s[g][c + e], kf[e], s[g]);
          }
        }
      }
    }
    float corr[kGC];
#pragma unroll
    for (int g = 0; g < kGC; ++g) {
      const float sg = kv.x >= 0 ? s[g] : -INFINITY;
      const float m_new = fmaxf(m[g], warp_max(sg));
      float pr = 0.0f;
      if (m_new == -INFINITY) {
        corr[g] = 1.0f;
      } else {
        corr[g] = exp2f(m[g] - m_new);  // 0 while m = −inf
        pr = exp2f(sg - m_new);         // 0 for masked keys
      }
      m[g] = m_new;
      l[g] = l[g] * corr[g] + pr;  // lane-partial sum, reduced at the end
      p_s[warp][lane][g] = pr;
    }
    __syncwarp();
#pragma unroll
    for (int g = 0; g < kGC; ++g)
#pragma unroll
      for (int e = 0; e < E; ++e) acc[g][e] *= corr[g];
    // PV: row group lane / BDX takes keys lane / BDX, + BDY, ... Loads are unconditional (an
    // absent key reads page 0 row 0, which exists when any key of the tile does, and its values
    // are replaced by 0) so that several are in flight.
    if (__any_sync(0xffffffffu, kv.x >= 0)) {
#pragma unroll 4
      for (int jj = lane / BDX; jj < 32; jj += BDY) {
        const int2 key = kv_s[warp][jj];
        const bool ok = key.x >= 0;
        float vf[E];
        const C* vrow = vc + (ok ? p.v.offset(key.x, key.y, hk) : int64_t{0}) + d0;
#pragma unroll
        for (int c = 0; c < E; c += VEC) load_vec<VEC>(vrow + c, vf + c, p.v.aligned);
#pragma unroll
        for (int e = 0; e < E; ++e) vf[e] = ok ? vf[e] : 0.0f;
        float pg[kGC];
#pragma unroll
        for (int g = 0; g < kGC; g += 4) {
          const float4 x = *reinterpret_cast<const float4*>(&p_s[warp][jj][g]);
          pg[g] = x.x, pg[g + 1] = x.y, pg[g + 2] = x.z, pg[g + 3] = x.w;
        }
#pragma unroll
        for (int g = 0; g < kGC; ++g)
#pragma unroll
          for (int e = 0; e < E; ++e) acc[g][e] = fmaf(pg[g], vf[e], acc[g][e]);
      }
    }
    __syncwarp();
  }

  // Warp totals: l over lanes, acc over the BDY row groups.
#pragma unroll
  for (int g = 0; g < kGC; ++g) {
    l[g] = warp_sum(l[g]);
#pragma unroll
    for (int e = 0; e < E; ++e)
      for (int o = BDX; o < 32; o <<= 1) acc[g][e] += __shfl_xor_sync(0xffffffffu, acc[g][e], o);
  }
  if (lane < BDX) {
#pragma unroll
    for (int g = 0; g < kGC; ++g)
#pragma unroll
      for (int e = 0; e < E; ++e) o_s[warp][g][d0 + e] = acc[g][e];
  }
  if (lane == 0) {
#pragma unroll
    for (int g = 0; g < kGC; ++g) ml_s[warp][g][0] = m[g], ml_s[warp][g][1] = l[g];
  }
  __syncthreads();

  // Block merge of the warps; one split: normalised output, else a partial state.
  for (int i = threadIdx.x; i < gc * D; i += blockDim.x) {
    const int g = i / D, d = i % D;
    float M = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) M = fmaxf(M, ml_s[w][g][0]);
    float L = 0.0f, O = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float wt = merge_weight(ml_s[w][g][0], M);
      L += wt * ml_s[w][g][1];
      O += wt * o_s[w][g][d];
    }
    const int h = h0 + g;
    if (p.splits == 1) {
      store_any(p.out, p.o_dtype, r * p.o_t + h * p.o_h + d, L > 0.0f ? O / L : 0.0f);
    } else {
      const int64_t ps = (static_cast<int64_t>(r) * p.Hq + h) * p.splits + split;
      p.part_o[ps * D + d] = O;
      if (d == 0) p.part_ml[ps * 2] = M, p.part_ml[ps * 2 + 1] = L;
    }
  }
}

// Combines the split partials of one (row, head): out = Σ_s 2^(m_s−M) o_s / Σ_s 2^(m_s−M) l_s.
// Block (row · Hq + h), D threads; splits <= kMaxSplits. A split with m_s = −inf (no keys) is
// skipped: its o_s may be unwritten.
constexpr int kMaxSplits = 256;
__global__ void attn_merge_kernel(const AttnParams p, int D) {
  __shared__ float m_s[kMaxSplits], l_s[kMaxSplits], w_s[kMaxSplits];
  const int rh = blockIdx.x;
  const int r = rh / p.Hq, h = rh % p.Hq;
  const float* ml = p.part_ml + static_cast<int64_t>(rh) * p.splits * 2;
  const float* po = p.part_o + static_cast<int64_t>(rh) * p.splits * D;
  for (int s = threadIdx.x; s < p.splits; s += blockDim.x)
    m_s[s] = ml[2 * s], l_s[s] = ml[2 * s + 1];
  __syncthreads();
  float M = -INFINITY;
  for (int s = 0; s < p.splits; ++s) M = fmaxf(M, m_s[s]);
  for (int s = threadIdx.x; s < p.splits; s += blockDim.x) {
    w_s[s] = merge_weight(m_s[s], M);
    l_s[s] *= w_s[s];
  }
  __syncthreads();
  float L = 0.0f;
  for (int s = 0; s < p.splits; ++s) L += l_s[s];
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float O = 0.0f;
#pragma unroll 8
    for (int s = 0; s < p.splits; ++s)
      if (w_s[s] != 0.0f) O += w_s[s] * po[static_cast<int64_t>(s) * D + d];
    store_any(p.out, p.o_dtype, r * p.o_t + h * p.o_h + d, L > 0.0f ? O / L : 0.0f);
  }
}

// The same combination, wider (attn_decode.cuda_tc2): block (row · Hq + h, 32 columns of D), 256
// threads. Thread t < splits reads split t's (m, l); M and L = Σ_s 2^(m_s−M) l_s by warp shuffles
// and 8 shared partials; then thread (lane c, warp j) sums the splits s ≡ j (mod 8) of column c,
// every load independent of the others (an empty split, weight 0, is dropped by a select: its o_s
// may be unwritten), and warp 0 adds the 8 partial sums in a fixed order (deterministic).
// kAfterPrimary (v4): launched with programmatic stream serialisation while the decode kernel
// runs; griddepcontrol.wait holds the block until that grid has completed and its partials are
// visible.
// kEarlyLoad (v5): thread (lane c, warp j) loads its splits' o_s[c] (s ≡ j mod 8, at most
// kMaxSplits / 8 = 32 registers) right after the wait, together with the (m, l) loads, so the
// merge makes one L2 round trip instead of two (the weights are applied when they are known).
constexpr int kMergeCols = 32, kMergeWarps = 8, kMergeThreads = kMergeCols * kMergeWarps;
static_assert(kMergeThreads >= kMaxSplits, "one split per thread for (m, l)");
template <bool kAfterPrimary, bool kEarlyLoad = false>
__global__ void __launch_bounds__(kMergeThreads) attn_merge_wide_kernel(const AttnParams p, int D) {
  if constexpr (kAfterPrimary) grid_dependency_wait();
  constexpr int kPerWarp = kMaxSplits / kMergeWarps;
  float xs[kEarlyLoad ? kPerWarp : 1];
  if constexpr (kEarlyLoad) {
    const float* po0 = p.part_o + static_cast<int64_t>(blockIdx.x) * p.splits * D;
    const int d0 = blockIdx.y * kMergeCols + threadIdx.x % 32;
#pragma unroll
    for (int i = 0; i < kPerWarp; ++i) {
      const int s = threadIdx.x / 32 + i * kMergeWarps;
      xs[i] = s < p.splits ? po0[static_cast<int64_t>(s) * D + d0] : 0.0f;
    }
  }
  __shared__ float w_s[kMaxSplits];
  __shared__ float red_s[2][kMergeWarps];
  __shared__ float o_s[kMergeWarps][kMergeCols];
  const int rh = blockIdx.x;
  const int r = rh / p.Hq, h = rh % p.Hq;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const float* ml = p.part_ml + static_cast<int64_t>(rh) * p.splits * 2;
  const float* po = p.part_o + static_cast<int64_t>(rh) * p.splits * D;
  const bool has = tid < p.splits;
  const float m = has ? ml[2 * tid] : -INFINITY;
  const float l = has ? ml[2 * tid + 1] : 0.0f;
  float M = warp_max(m);
  if (lane == 0) red_s[0][warp] = M;
  __syncthreads();
  M = red_s[0][0];
#pragma unroll
  for (int j = 1; j < kMergeWarps; ++j) M = fmaxf(M, red_s[0][j]);
  const float w = has ? merge_weight(m, M) : 0.0f;
  if (has) w_s[tid] = w;
  const float lw = warp_sum(w * l);
  if (lane == 0) red_s[1][warp] = lw;
  __syncthreads();
  float L = 0.0f;
#pragma unroll
  for (int j = 0; j < kMergeWarps; ++j) L += red_s[1][j];

  const int d = blockIdx.y * kMergeCols + lane;
  float O = 0.0f;
  if constexpr (kEarlyLoad) {
#pragma unroll
    for (int i = 0; i < kPerWarp; ++i) {
      const int s = warp + i * kMergeWarps;
      if (s < p.splits) {
        const float ws = w_s[s];
        O += ws != 0.0f ? ws * xs[i] : 0.0f;  // same order as below: s = warp, warp + 8, ...
      }
    }
  } else {
#pragma unroll 8
    for (int s = warp; s < p.splits; s += kMergeWarps) {
      const float x = po[static_cast<int64_t>(s) * D + d];
      const float ws = w_s[s];
      O += ws != 0.0f ? ws * x : 0.0f;
    }
  }
  o_s[warp][lane] = O;
  __syncthreads();
  if (warp == 0) {
    float tot = 0.0f;
#pragma unroll
    for (int j = 0; j < kMergeWarps; ++j) tot += o_s[j][lane];
    store_any(p.out, p.o_dtype, r * p.o_t + h * p.o_h + d, L > 0.0f ? tot / L : 0.0f);
  }
}

// ---- tensor-core split-KV decode (bf16 / f16) ------------------------------------------------

// decode_tc_kernel: block (split, KV head · 16-head chunk, sequence), 4 warps. The chunk's query
// heads (gc <= 16 of the GQA group) are the 16 rows of the m16n8k16 A operand, zero rows past gc,
// so every K/V row of the split is read once per (sequence, KV head). The split's keys
// [k_begin, k_end) of the window [lo, p] come in tiles of kTcBN = 64 keys, gathered through the
// page table by 16-byte cp.async into XOR-swizzled shared memory (kTcStages<D> tiles in flight;
// keys past k_end or on an invalid page are zero-filled and masked). Warp w owns keys
// 16w..16w+15 of every tile:
//   S [16 × 16] = Q Kᵀ (ldmatrix Q and K, D/16 · 2 mma), scaled to the log2 domain and masked;
//   running max m and sum l per row (online softmax over the warp's keys);
//   O [16 × D] = O · 2^(m_old − m_new) + P V, P rounded to C in registers as the A operand,
//   V fragments by ldmatrix.trans (D/16 · 2 mma).
// After the last tile the 4 warps' (m, l, O) merge in shared memory (reusing the tile buffers);
// one split writes out, several write (m, l, O) partials for attn_merge_kernel. A split with no
// keys (past the sequence's length: the split count comes from shapes, not from the device
// lengths) writes only m = −inf and exits; the merge skips it.
constexpr int kTcWarps = 4, kTcThreads = kTcWarps * 32;
constexpr int kTcRows = 16;           // query heads per block (mma rows)
constexpr int kTcBN = 16 * kTcWarps;  // keys per tile
template <int D>
constexpr int kTcStages = 3;  // 3 · 64 KiB at D = 256 (one block per SM), 3 · 32 KiB at D = 128
template <int D>
constexpr int kTcOStride = D + 8;  // f32 row stride of the warp-merge buffer (bank spread)

template <int D>
constexpr size_t tc_smem_bytes() {
  return (static_cast<size_t>(kTcRows) * D + static_cast<size_t>(kTcStages<D>) * 2 * kTcBN * D) * 2;
}

// kVer 3 (attn_decode.cuda_tc2) and 4: Q arrives by 16-byte cp.async (q 16-byte aligned, checked
// by tc2_query_reason), issued before seq_lens is read and committed with the first tile, so the
// block's prologue is three round trips (seq_lens, page table, data). kVer 2 (cuda_tc): Q is
// loaded element by element through load_any, whose dtype branches serialise the loads.
// kVer 4 (attn_decode.cuda_tc3) adds:
//  - K/V copies with an L2 evict-first policy: each K/V row is read once per call, so its lines
//    should be the victims of the next fills, not lines that other data (e.g. a previous kernel's
//    dirty output, which costs a write-back per evicted line) holds in L2;
//  - the page-table entries of tile i + S − 1 loaded one tile ahead (a register per lookup lane),
//    so issuing a tile's copies never waits on a page-table round trip; the prologue loads the
//    entries of its S − 1 tiles before issuing any copy (one round trip, not S − 1);
//  - an L2 prefetch of the sequence's page-table row at the start, spread over the splits, so the
//    first lookups (issued once seq_lens has arrived) hit L2;
//  - griddepcontrol.launch_dependents at the start, so the merge kernel (launched with
//    programmatic stream serialisation) is resident and waiting when the last block exits.
// kVer 5 (attn_decode.cuda_tc4; window 0, the few-(sequence, KV head) regime, see
// decode_tc4_supports) takes the split's key range from the shapes: [split · p.chunk,
// (split + 1) · p.chunk), p.chunk = ⌈keys_max / splits⌉ rounded up to a tile, so k_begin is known
// before seq_lens arrives. The prologue issues the seq_lens load, then the page-table loads of
// its S − 1 tiles and their copies (bounded by the chunk and the table row, not by the length),
// and reads the length only after that: the first data round trip starts one round trip earlier
// (seq_lens and the page table are fetched concurrently instead of one after the other). Keys at
// or past the length are masked at compute time (j < k_end); the loop never issues tiles past
// ntiles (known by then). A split past the length (ntiles = 0) waits for its speculative copies
// and writes m = −inf.
template <int D, class C, int kVer>
__global__ void __launch_bounds__(kTcThreads) decode_tc_kernel(const AttnParams p) {
  constexpr bool kQAsync = kVer >= 3;
  constexpr bool kV4 = kVer >= 4;
  constexpr bool kV5 = kVer >= 5;
  constexpr int CH = D / 8;  // 16-byte chunks per row
  constexpr int BN = kTcBN, S = kTcStages<D>, OS = kTcOStride<D>;
  static_assert((BN * CH) % kTcThreads == 0, "whole tile loads per thread");
  static_assert(kTcWarps * kTcRows * OS * 4 <= S * 2 * BN * D * 2, "merge buffer fits the tiles");
  extern __shared__ __align__(128) unsigned char smem_raw[];
  C* q_s = reinterpret_cast<C*>(smem_raw);  // [16, D] swizzled
  C* kv_s = q_s + kTcRows * D;              // [S][K, V][BN, D] swizzled
  __shared__ bool ok_s[S][BN];              // key of the tile present (in range, valid page)
  __shared__ float ml_s[kTcWarps][kTcRows][2];

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int split = blockIdx.x;
  const int hk = blockIdx.y / p.hchunks, hc = blockIdx.y % p.hchunks;
  const int h0 = hk * p.group + hc * kTcRows;
  const int gc = min(kTcRows, p.group - hc * kTcRows);
  const int n = blockIdx.z;

  if constexpr (kV4) {
    grid_dependents_launch();
    // Lines c = split, split + splits, ... (< 8 per block) of the page-table row [max_pages]: the
    // splits of this (sequence, head chunk) together touch 8 · splits lines (32 entries each at
    // unit stride), the whole row when max_pages <= 256 · splits.
    if (tid < 8) {
      const int col = (split + tid * p.splits) * 32;
      if (col < p.pt.max_pages) prefetch_l2(p.pt.p + n * p.pt.s0 + col * p.pt.s1);
    }
  }

  if constexpr (kQAsync) {
    // Q of the chunk's heads, rows past gc zero-filled; joins the first tile's commit group.
    const C* qbase = static_cast<const C*>(p.q);
#pragma unroll
    for (int i = tid; i < kTcRows * CH; i += kTcThreads) {
      const int r = i / CH, ch = i % CH;
      const bool ok = r < gc;
      cp_async16(q_s + swz<D>(r, ch), qbase + (ok ? n * p.q_t + (h0 + r) * p.q_h + ch * 8 : 0),
                 ok ? 16 : 0);
    }
  }

  // Keys of this split: [lo, pos] cut in p.splits chunks of whole tiles (v5: [0, keys_max) cut
  // in chunks of p.chunk keys, then clipped to [0, pos]).
  const C* kbase = static_cast<const C*>(p.k.p);
  const C* vbase = static_cast<const C*>(p.v.p);
  // K and V of tile i (keys k_begin + 64i ..) into stage i % S, and its key flags. Thread tid
  // copies, in step `it`, 16-byte chunk ch = c % CH of row r = c / CH, c = tid + 128·it: a warp
  // covers 32 / CH whole rows per step (coalesced), 16 rows per tile. The page lookups of those
  // 16 rows are done once, lane i < 16 taking the warp's i-th row (step i / RPI, row i % RPI of
  // it), and broadcast by shuffles (offset −1: key absent).
  constexpr int RPI = 32 / CH;                 // rows per warp per step: 1, 2, 4
  constexpr int STEPS = BN * CH / kTcThreads;  // 16, 8, 4
  static_assert(CH <= 32 && STEPS * RPI == 16, "16 rows per warp per tile");
  // The tile row whose page lane (< 16) of this warp looks up.
  const int look_row = (warp * 32 + ((lane % 16) / RPI) * kTcThreads) / CH + lane % RPI;
  // Copies of tile i from the lookup lanes' element offsets (k_off −1: key absent).
  auto issue_tile = [&](int i, int k_off, int v_off, uint64_t policy) {
    C* ks = kv_s + (i % S) * 2 * BN * D;
    C* vs = ks + BN * D;
#pragma unroll
    for (int it = 0; it < STEPS; ++it) {
      const int src = it * RPI + lane / CH;  // the lane that looked up this step's row
      const int ko = __shfl_sync(0xffffffffu, k_off, src);
      const int vo = __shfl_sync(0xffffffffu, v_off, src);
      const int c = tid + it * kTcThreads;
      const int r = c / CH, ch = c % CH;
      const bool ok = ko >= 0;
      if constexpr (kV4) {
        cp_async16_hint(ks + swz<D>(r, ch), kbase + (ok ? ko + ch * 8 : 0), ok ? 16 : 0, policy);
        cp_async16_hint(vs + swz<D>(r, ch), vbase + (ok ? vo + ch * 8 : 0), ok ? 16 : 0, policy);
      } else {
        cp_async16(ks + swz<D>(r, ch), kbase + (ok ? ko + ch * 8 : 0), ok ? 16 : 0);
        cp_async16(vs + swz<D>(r, ch), vbase + (ok ? vo + ch * 8 : 0), ok ? 16 : 0);
      }
      if (ch == 0) ok_s[i % S][r] = ok;
    }
  };
  const int len = p.seq_lens[n];  // v5: consumed only after the prologue's copies are issued
  int k_begin = 0, chunk = p.chunk;
  if constexpr (kV5) k_begin = split * chunk;
  // v5 prologue state (declared here, filled before the length is read).
  uint64_t policy = 0;
  if constexpr (kV5) {
    policy = l2_evict_first_policy();
    // Raw page-table entries of the first S − 1 tiles of the chunk (lane < 16: its look_row).
    int pages[S - 1];
#pragma unroll
    for (int i = 0; i < S - 1; ++i) {
      pages[i] = -1;
      const int j = k_begin + i * BN + look_row;
      if (lane < 16 && i * BN < chunk) {
        const int col = j / p.k.page_size;
        if (col < p.pt.max_pages) pages[i] = p.pt.p[n * p.pt.s0 + col * p.pt.s1];
      }
    }
#pragma unroll
    for (int i = 0; i < S - 1; ++i) {
      if (i * BN < chunk) {
        int k_off = -1, v_off = 0;
        if (pages[i] >= 0 && pages[i] < p.k.num_pages) {
          const int j = k_begin + i * BN + look_row;
          const int row = j - (j / p.k.page_size) * p.k.page_size;
          k_off = static_cast<int>(p.k.offset(pages[i], row, hk));
          v_off = static_cast<int>(p.v.offset(pages[i], row, hk));
        }
        issue_tile(i, k_off, v_off, policy);
      }
      cp_commit();  // Q joins group 0
    }
  }
  const int pos = len - 1;  // −1: padding sequence
  const int lo = p.window > 0 ? max(0, pos - p.window + 1) : 0;
  const int nkeys = pos >= 0 ? pos - lo + 1 : 0;
  if constexpr (!kV5) {
    chunk = ((nkeys + p.splits - 1) / p.splits + BN - 1) / BN * BN;
    k_begin = lo + split * chunk;
  }
  const int k_end = min(pos + 1, k_begin + chunk);
  const int ntiles = k_end > k_begin ? (k_end - k_begin + BN - 1) / BN : 0;

  if (ntiles == 0) {
    if constexpr (kQAsync) {
      cp_commit();
      cp_wait<0>();  // no copy (Q, v5's speculative tiles) left in flight into shared memory
    }
    for (int i = tid; i < gc * D; i += kTcThreads) {
      const int h = h0 + i / D, d = i % D;
      if (p.splits == 1) {
        store_any(p.out, p.o_dtype, n * p.o_t + h * p.o_h + d, 0.0f);
      } else if (d == 0) {
        const int64_t ps = (static_cast<int64_t>(n) * p.Hq + h) * p.splits + split;
        p.part_ml[ps * 2] = -INFINITY, p.part_ml[ps * 2 + 1] = 0.0f;
      }
    }
    return;
  }

  auto load_tile = [&](int i) {
    const int j0 = k_begin + i * BN;
    int k_off = -1, v_off = 0;  // element offsets: below 2^31 (tc_decode_reason)
    if (lane < 16) {
      const int j = j0 + look_row;
      if (j < k_end) {
        const int2 kv = p.pt.locate(n, j, p.k.page_size, p.k.num_pages);
        if (kv.x >= 0) {
          k_off = static_cast<int>(p.k.offset(kv.x, kv.y, hk));
          v_off = static_cast<int>(p.v.offset(kv.x, kv.y, hk));
        }
      }
    }
    issue_tile(i, k_off, v_off, 0);
  };
  // v4: the raw page-table entry of lane (< 16)'s row of tile i (−1: past the split or the table
  // row; range-checked in issue_looked_up, as PageTable::locate does), loaded a tile ahead.
  auto look_up = [&](int i) {
    int page = -1;
    const int j = k_begin + i * BN + look_row;
    if (lane < 16 && i < ntiles && j < k_end) {
      const int col = j / p.k.page_size;
      if (col < p.pt.max_pages) page = p.pt.p[n * p.pt.s0 + col * p.pt.s1];
    }
    return page;
  };
  auto issue_looked_up = [&](int i, int page, uint64_t policy) {
    int k_off = -1, v_off = 0;
    if (page >= 0 && page < p.k.num_pages) {  // only lookup lanes hold a page
      const int j = k_begin + i * BN + look_row;
      const int row = j - (j / p.k.page_size) * p.k.page_size;
      k_off = static_cast<int>(p.k.offset(page, row, hk));
      v_off = static_cast<int>(p.v.offset(page, row, hk));
    }
    issue_tile(i, k_off, v_off, policy);
  };

  if constexpr (!kQAsync) {
    // Q of the chunk's heads, rows past gc zero (q has C's dtype: the conversion is exact).
    for (int i = tid; i < kTcRows * D; i += kTcThreads) {
      const int r = i / D, d = i % D;
      const float x = r < gc ? load_any(p.q, p.q_dtype, n * p.q_t + (h0 + r) * p.q_h + d) : 0.0f;
      q_s[swz<D>(r, d / 8) + d % 8] = from_f32<C>(x);
    }
  }
  int page_next = -1;  // v4: lane's page-table entry for tile i + S − 1, loaded during tile i − 1
  if constexpr (kV5) {
    page_next = look_up(S - 1);  // the prologue's tiles are in flight already
  } else if constexpr (kV4) {
    policy = l2_evict_first_policy();
    int pages[S - 1];
#pragma unroll
    for (int i = 0; i < S - 1; ++i) pages[i] = look_up(i);  // all loads before any copy
#pragma unroll
    for (int i = 0; i < S - 1; ++i) {
      if (i < ntiles) issue_looked_up(i, pages[i], policy);
      cp_commit();
    }
    page_next = look_up(S - 1);
  } else {
#pragma unroll
    for (int i = 0; i < S - 1; ++i) {
      if (i < ntiles) load_tile(i);
      cp_commit();
    }
  }

  float o[D / 8][4];
#pragma unroll
  for (int i = 0; i < D / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
  const int g = lane / 4, c4 = lane % 4;

  for (int i = 0; i < ntiles; ++i) {
    cp_wait<S - 2>();  // tile i landed (this thread's copies) ...
    if constexpr (kV5) {
      // The prologue's tiles were copied before the length was known: their rows at or past
      // k_end hold whatever the cache has there (unwritten rows may be NaN / Inf bit patterns,
      // and P = 0 times NaN is NaN in the PV mma; masking the scores only covers K). The thread
      // zeroes its own V chunks of those rows (its copies have landed; the barrier publishes).
      if (i < S - 1 && k_begin + (i + 1) * BN > k_end) {
        C* vz = kv_s + (i % S) * 2 * BN * D + BN * D;
#pragma unroll
        for (int it = 0; it < STEPS; ++it) {
          const int c = tid + it * kTcThreads;
          const int r = c / CH, ch = c % CH;
          if (k_begin + i * BN + r >= k_end)
            *reinterpret_cast<uint4*>(vz + swz<D>(r, ch)) = make_uint4(0u, 0u, 0u, 0u);
        }
      }
    }
    __syncthreads();  // ... everyone's; and every warp is done with tile i − 1's stage
    if constexpr (kV4) {
      if (i + S - 1 < ntiles) issue_looked_up(i + S - 1, page_next, policy);
      cp_commit();
      page_next = look_up(i + S);  // used by the next tile's issue: its latency hides behind this
    } else {
      if (i + S - 1 < ntiles) load_tile(i + S - 1);
      cp_commit();
    }
    const int st = i % S;
    const C* ks = kv_s + st * 2 * BN * D;
    const C* vs = ks + BN * D;

    // S = Q Kᵀ for this warp's 16 keys: s[nt][0..1] row g, s[nt][2..3] row g + 8, keys
    // 16·warp + 8·nt + 2·c4 + {0, 1}.
    float s[2][4];
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t a[4], b[4];
      ldmatrix_x4(a, q_s + swz<D>(lane % 16, kk * 2 + lane / 16));
      ldmatrix_x4(b,
                  ks + swz<D>(warp * 16 + (lane % 8) + (lane / 16) * 8, kk * 2 + (lane / 8) % 2));
      mma16<C>(s[0], a, b[0], b[1]);
      mma16<C>(s[1], a, b[2], b[3]);
    }
    float corr[2];
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      float mx = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < 2; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float& x = s[nt][hr * 2 + e];
          const int key = warp * 16 + nt * 8 + c4 * 2 + e;
          bool present = ok_s[st][key];
          // v5: the prologue's tiles were issued before the length was known.
          if constexpr (kV5) present = present && k_begin + i * BN + key < k_end;
          x = present ? x * p.scale_log2 : -INFINITY;
          mx = fmaxf(mx, x);
        }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m[hr], mx);
      corr[hr] = m_new == -INFINITY ? 1.0f : exp2f(m[hr] - m_new);  // 0 while m = −inf
      const float base = m_new == -INFINITY ? 0.0f : m_new;
      float sum = 0.0f;
#pragma unroll
      for (int nt = 0; nt < 2; ++nt)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float& x = s[nt][hr * 2 + e];
          x = exp2f(x - base);  // masked: exp2(−inf) = 0
          sum += x;
        }
      l[hr] = l[hr] * corr[hr] + sum;  // thread-partial, reduced over the quad at the end
      m[hr] = m_new;
    }

    // O = O · corr + P V over the warp's 16 keys (P as the A operand, straight from S).
    uint32_t a[4];
    a[0] = pack2<C>(s[0][0], s[0][1]);
    a[1] = pack2<C>(s[0][2], s[0][3]);
    a[2] = pack2<C>(s[1][0], s[1][1]);
    a[3] = pack2<C>(s[1][2], s[1][3]);
#pragma unroll
    for (int dt = 0; dt < D / 16; ++dt) {
      o[2 * dt][0] *= corr[0], o[2 * dt][1] *= corr[0];
      o[2 * dt][2] *= corr[1], o[2 * dt][3] *= corr[1];
      o[2 * dt + 1][0] *= corr[0], o[2 * dt + 1][1] *= corr[0];
      o[2 * dt + 1][2] *= corr[1], o[2 * dt + 1][3] *= corr[1];
      uint32_t b[4];
      ldmatrix_x4_trans(
          b, vs + swz<D>(warp * 16 + (lane % 8) + ((lane / 8) % 2) * 8, dt * 2 + lane / 16));
      mma16<C>(o[2 * dt], a, b[0], b[1]);
      mma16<C>(o[2 * dt + 1], a, b[2], b[3]);
    }
  }
  cp_wait<0>();
  __syncthreads();  // every warp is done with the tiles: their memory becomes the merge buffer

  // Warp states to shared memory: o_s [warp][row][OS], ml_s [warp][row] (l summed over the quad).
  float* o_s = reinterpret_cast<float*>(kv_s);
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int row = g + hr * 8;
    float* dst = o_s + (warp * kTcRows + row) * OS;
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt)
      *reinterpret_cast<float2*>(dst + dt * 8 + c4 * 2) =
          make_float2(o[dt][hr * 2], o[dt][hr * 2 + 1]);
    float tot = l[hr];
    tot += __shfl_xor_sync(0xffffffffu, tot, 1);
    tot += __shfl_xor_sync(0xffffffffu, tot, 2);
    if (c4 == 0) ml_s[warp][row][0] = m[hr], ml_s[warp][row][1] = tot;
  }
  __syncthreads();

  // Block merge of the warps; one split: normalised output, else a partial state.
  for (int i = tid; i < gc * D; i += kTcThreads) {
    const int r = i / D, d = i % D;
    float M = -INFINITY;
#pragma unroll
    for (int w = 0; w < kTcWarps; ++w) M = fmaxf(M, ml_s[w][r][0]);
    float L = 0.0f, O = 0.0f;
#pragma unroll
    for (int w = 0; w < kTcWarps; ++w) {
      const float wt = merge_weight(ml_s[w][r][0], M);
      L += wt * ml_s[w][r][1];
      O += wt * o_s[(w * kTcRows + r) * OS + d];
    }
    const int h = h0 + r;
    if (p.splits == 1) {
      store_any(p.out, p.o_dtype, n * p.o_t + h * p.o_h + d, L > 0.0f ? O / L : 0.0f);
    } else {
      const int64_t ps = (static_cast<int64_t>(n) * p.Hq + h) * p.splits + split;
      p.part_o[ps * D + d] = O;
      if (d == 0) p.part_ml[ps * 2] = M, p.part_ml[ps * 2 + 1] = L;
    }
  }
}

// ---- kv_append -------------------------------------------------------------------------------

// Block per token t (sequence n from cu_seqlens, or n = t): K/V rows [Hkv, D] to position
// positions[t] (negative: skipped; a page outside [0, num_pages) is skipped too).
struct AppendParams {
  const void* k = nullptr;  // [T, Hkv, D] k_dtype
  const void* v = nullptr;  // [T, Hkv, D] v_dtype
  DType k_dtype = DType::f32, v_dtype = DType::f32;
  int64_t k_t = 0, k_h = 0, v_t = 0, v_h = 0;
  Cache kc, vc;
  PageTable pt;
  const int* cu = nullptr;         // [N + 1] or null
  const int* positions = nullptr;  // [T]
  int N = 0, Hkv = 0, D = 0;
};

template <class C>
__global__ void kv_append_kernel(const AppendParams a) {
  const int t = blockIdx.x;
  const int n = a.cu ? find_sequence(a.cu, a.N, t) : t;
  const int pos = a.positions[t];
  if (pos < 0) return;
  const int2 kv = a.pt.locate(n, pos, a.kc.page_size, a.kc.num_pages);
  if (kv.x < 0) return;
  C* kc = static_cast<C*>(const_cast<void*>(a.kc.p));
  C* vc = static_cast<C*>(const_cast<void*>(a.vc.p));
  for (int i = threadIdx.x; i < a.Hkv * a.D; i += blockDim.x) {
    const int h = i / a.D, d = i % a.D;
    kc[a.kc.offset(kv.x, kv.y, h) + d] =
        from_f32<C>(load_any(a.k, a.k_dtype, t * a.k_t + h * a.k_h + d));
    vc[a.vc.offset(kv.x, kv.y, h) + d] =
        from_f32<C>(load_any(a.v, a.v_dtype, t * a.v_t + h * a.v_h + d));
  }
}

// ---- rope + append (first kernel of rope_kv_append_attn_decode) ------------------------------

// Block per sequence n (p = seq_lens[n] − 1; seq_lens[n] = 0: nothing): rotated q rows to q_rot
// (q's dtype, contiguous [N, Hq, D]); rotated k (rounded to k's dtype) and v to the caches.
// RoPE as the rope op (cpu/rope_math.h): inv_freq via f64 pow rounded to f32, f32 angle, cos/sin
// in f64 rounded to f32, products rounded separately (no FMA contraction):
//   y[i] = x[i]c − x[i+half]s, y[i+half] = x[i+half]c + x[i]s, y[d >= rd] = x[d].
struct RopeParams {
  AppendParams ap;
  const void* q = nullptr;  // [N, Hq, D] q_dtype
  DType q_dtype = DType::f32;
  int64_t q_t = 0, q_h = 0;
  void* q_rot = nullptr;  // [N, Hq, D] q_dtype, contiguous
  const int* seq_lens = nullptr;
  int Hq = 0, rotary_dim = 0;
  float theta = 1e4f;
};

__device__ __forceinline__ void rope_pair(float x0, float x1, int i, int pos, int rd, float theta,
                                          float& y0, float& y1) {
  const float e = static_cast<float>(2 * i) / static_cast<float>(rd);
  const float inv =
      __fdiv_rn(1.0f, static_cast<float>(pow(static_cast<double>(theta), static_cast<double>(e))));
  const float angle = __fmul_rn(static_cast<float>(pos), inv);
  const float c = static_cast<float>(cos(static_cast<double>(angle)));
  const float s = static_cast<float>(sin(static_cast<double>(angle)));
  y0 = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
  y1 = __fadd_rn(__fmul_rn(x1, c), __fmul_rn(x0, s));
}

template <class C>
__global__ void rope_append_kernel(const RopeParams r) {
  const int n = blockIdx.x;
  const int len = r.seq_lens[n];
  if (len <= 0) return;
  const int pos = len - 1;
  const int D = r.ap.D, half = r.rotary_dim / 2;
  // q heads then k heads: element d of head h.
  const int2 kv = r.ap.pt.locate(n, pos, r.ap.kc.page_size, r.ap.kc.num_pages);
  C* kc = static_cast<C*>(const_cast<void*>(r.ap.kc.p));
  C* vc = static_cast<C*>(const_cast<void*>(r.ap.vc.p));
  const int total = (r.Hq + r.ap.Hkv) * D;
  for (int i = threadIdx.x; i < total; i += blockDim.x) {
    const int h = i / D, d = i % D;
    const bool is_q = h < r.Hq;
    const void* x = is_q ? r.q : r.ap.k;
    const DType dt = is_q ? r.q_dtype : r.ap.k_dtype;
    const int64_t base = is_q ? n * r.q_t + h * r.q_h : n * r.ap.k_t + (h - r.Hq) * r.ap.k_h;
    float y;
    if (d < r.rotary_dim) {
      const int ii = d < half ? d : d - half;
      float y0, y1;
      rope_pair(load_any(x, dt, base + ii), load_any(x, dt, base + ii + half), ii, pos,
                r.rotary_dim, r.theta, y0, y1);
      y = d < half ? y0 : y1;
    } else {
      y = load_any(x, dt, base + d);
    }
    y = round_to(dt, y);
    if (is_q) {
      store_any(r.q_rot, dt, (static_cast<int64_t>(n) * r.Hq + h) * D + d, y);
    } else if (kv.x >= 0) {
      const int hk = h - r.Hq;
      kc[r.ap.kc.offset(kv.x, kv.y, hk) + d] = from_f32<C>(y);
      vc[r.ap.vc.offset(kv.x, kv.y, hk) + d] =
          from_f32<C>(load_any(r.ap.v, r.ap.v_dtype, n * r.ap.v_t + hk * r.ap.v_h + d));
    }
  }
}

// ---- host side -------------------------------------------------------------------------------

Cache cache_of(const Tensor& c) {
  Cache k;
  k.p = c.data();
  k.s_page = c.stride(0), k.s_row = c.stride(1), k.s_head = c.stride(2);
  k.page_size = static_cast<int>(c.size(1));
  k.num_pages = static_cast<int>(c.size(0));
  const int64_t es = static_cast<int64_t>(dtype_size(c.dtype()));
  k.aligned = reinterpret_cast<uintptr_t>(c.data()) % 16 == 0 && (k.s_page * es) % 16 == 0 &&
              (k.s_row * es) % 16 == 0 && (k.s_head * es) % 16 == 0;
  return k;
}

PageTable table_of(const Tensor& t) {
  PageTable pt;
  pt.p = t.data_as<const int>();
  pt.s0 = t.stride(0), pt.s1 = t.stride(1);
  pt.max_pages = static_cast<int>(t.size(1));
  return pt;
}

Reason dims_supported(int64_t D, const Tensor& cache) {
  if (D != 64 && D != 128 && D != 256)
    return "head dim D=" + std::to_string(D) + " is not one of 64, 128, 256";
  if (cache.numel() >= (int64_t{1} << 31) || cache.size(0) * cache.size(1) >= (int64_t{1} << 31))
    return std::string("cache too large for 32-bit row indices");
  return std::nullopt;
}

template <int D>
void launch_attn_d(const AttnParams& p, DType cache, cudaStream_t st) {
  const dim3 grid(p.rows, p.Hkv * p.hchunks, p.splits);
  dispatch_float(cache, "attention", [&](auto c) {
    using C = decltype(c);
    attn_kernel<D, C><<<grid, kWarps * 32, 0, st>>>(p);
    HYBRID_CUDA_CHECK_LAUNCH();
  });
}

template <int D, class C, int kVer>
void launch_tc_d(const AttnParams& p, cudaStream_t st) {
  constexpr size_t smem = tc_smem_bytes<D>();
  ensure_dynamic_smem(decode_tc_kernel<D, C, kVer>, smem);
  const dim3 grid(p.splits, p.Hkv * p.hchunks, p.N);
  decode_tc_kernel<D, C, kVer><<<grid, kTcThreads, smem, st>>>(p);
  HYBRID_CUDA_CHECK_LAUNCH();
}

template <int D, int kVer>
void launch_tc_dtype(const AttnParams& p, DType cache, cudaStream_t st) {
  if (cache == DType::f16)
    launch_tc_d<D, __half, kVer>(p, st);
  else
    launch_tc_d<D, __nv_bfloat16, kVer>(p, st);
}

// The v4 merge: attn_merge_wide_kernel<true> launched with programmatic stream serialisation (it
// may start while decode_tc_kernel<.., 4> runs and waits for it in griddepcontrol.wait), or as a
// plain launch with HYBRID_ATTN_DECODE_PDL=0; early_load (v5): attn_merge_wide_kernel<true, true>.
void launch_merge_v4(const AttnParams& p, int64_t D, cudaStream_t st, bool early_load = false) {
  static const bool pdl = !env_is_zero("HYBRID_ATTN_DECODE_PDL");
  const dim3 grid(p.rows * p.Hq, static_cast<unsigned>(D / kMergeCols));
  launch_programmatic(
      early_load ? attn_merge_wide_kernel<true, true> : attn_merge_wide_kernel<true>, grid,
      dim3(kMergeThreads), 0, st, pdl, p, static_cast<int>(D));
}

// Which attention kernel runs: the CUDA-core attn_kernel (any dtypes, decode and prefill rows),
// the tensor-core decode_tc_kernel (decode rows only) with element-wise Q loads and the narrow
// merge (v2, attn_decode.cuda_tc), or with cp.async Q and the wide merge (v3,
// attn_decode.cuda_tc2; q 16-byte aligned).
// attn_decode.cuda_tc3: v3 plus evict-first K/V copies, page lookups a tile ahead, the
// page-table prefetch and the programmatic (early) launch of the merge.
// attn_decode.cuda_tc4 (v5): v4 with the split ranges from the shapes and the prologue's copies
// issued before the length arrives (window 0, few (sequence, KV head) pairs).
enum class Core { cuda_core, tensor_core, tensor_core_v3, tensor_core_v4, tensor_core_v5 };

// Fills the fields shared by every attention launch and picks the split count from the shapes
// (keys_max: the page-table capacity, or the window; the real lengths live on the device, so the
// grid never depends on them and the launch can be captured in a CUDA graph).
void plan_attention(AttnParams& p, const Tensor& k_cache, const Tensor& v_cache,
                    const Tensor& page_table, int64_t D, int64_t window, std::optional<float> scale,
                    Core core) {
  p.k = cache_of(k_cache), p.v = cache_of(v_cache);
  p.pt = table_of(page_table);
  p.Hkv = static_cast<int>(k_cache.size(2));
  p.group = p.Hq / p.Hkv;
  const bool tc = core != Core::cuda_core;
  const int heads_per_block = tc ? kTcRows : kGC;
  p.hchunks = (p.group + heads_per_block - 1) / heads_per_block;
  p.window = static_cast<int>(std::min<int64_t>(window, INT32_MAX));
  const float sc = scale ? *scale : 1.0f / std::sqrt(static_cast<float>(D));
  p.scale_log2 = sc * kLog2e;
  int64_t keys_max = k_cache.size(1) * page_table.size(1);
  if (window > 0) keys_max = std::min(keys_max, window);
  const int64_t blocks = std::max<int64_t>(1, static_cast<int64_t>(p.rows) * p.Hkv * p.hchunks);
  // Resident blocks per SM: the CUDA-core kernel ~3 (registers, ~160 per thread at 128 threads);
  // the tensor-core kernel 1 at D 256 (200 KiB of shared memory), 2 at D 128, 4 at D 64. Pick the
  // split count s minimising waves(s) · (keys/s + 64), 64 keys standing for a block's fixed cost
  // (q load, pipeline fill, merge, partial write), s <= kMaxSplits and >= 64 keys per split.
  const int64_t per_sm = !tc ? 3 : (D == 256 ? 1 : (D == 128 ? 2 : 4));
  const int64_t resident = sm_count() * per_sm;
  const int64_t s_max = std::clamp<int64_t>(keys_max / 64, 1, kMaxSplits);
  int64_t splits = 1;
  double best = 0.0;
  for (int64_t s = 1; s <= s_max; ++s) {
    const double waves = static_cast<double>((blocks * s + resident - 1) / resident);
    const double cost = waves * (static_cast<double>(keys_max) / static_cast<double>(s) + 64.0);
    if (s == 1 || cost < best) best = cost, splits = s;
  }
  // HYBRID_ATTN_SPLITS=N (N >= 1; every call planned here: decode, the fused rope + append +
  // decode, the simple prefill) replaces the choice, clamped to 1..s_max, to time other split
  // counts beside it (the B 1 decode target's open question: session 19, docs/PERFORMANCE.md).
  static const int splits_env = env_int("HYBRID_ATTN_SPLITS", 0);
  if (splits_env > 0) splits = std::clamp<int64_t>(splits_env, 1, s_max);
  p.splits = static_cast<int>(splits);
  // v5: keys per split from the shapes, whole tiles (splits ≤ keys_max / 64, so every chunk but
  // possibly the last ones is non-empty).
  p.chunk = static_cast<int>(((keys_max + splits - 1) / splits + kTcBN - 1) / kTcBN * kTcBN);
}

// Workspace bytes of the split partials (0 for one split).
size_t partial_bytes(const AttnParams& p, int64_t D) {
  return p.splits > 1 ? static_cast<size_t>(p.rows) * p.Hq * p.splits * (D + 2) * sizeof(float) : 0;
}

// Launches the attention kernel of `core` and, for several splits, the merge; ws:
// partial_bytes(p, D) bytes of workspace.
void launch_attention(AttnParams p, int64_t D, DType cache, void* ws, Core core, Context& ctx) {
  if (p.rows == 0) return;
  if (p.splits > 1) {
    p.part_o = static_cast<float*>(ws);
    p.part_ml = p.part_o + static_cast<size_t>(p.rows) * p.Hq * p.splits * D;
  }
  const cudaStream_t st = as_stream(ctx.stream());
  auto launch_d = [&](auto d) {
    constexpr int kD = decltype(d)::value;
    switch (core) {
      case Core::tensor_core:
        launch_tc_dtype<kD, 2>(p, cache, st);
        break;
      case Core::tensor_core_v3:
        launch_tc_dtype<kD, 3>(p, cache, st);
        break;
      case Core::tensor_core_v4:
        launch_tc_dtype<kD, 4>(p, cache, st);
        break;
      case Core::tensor_core_v5:
        launch_tc_dtype<kD, 5>(p, cache, st);
        break;
      default:
        launch_attn_d<kD>(p, cache, st);
        break;
    }
  };
  switch (D) {
    case 64:
      launch_d(std::integral_constant<int, 64>{});
      break;
    case 128:
      launch_d(std::integral_constant<int, 128>{});
      break;
    default:
      launch_d(std::integral_constant<int, 256>{});
      break;
  }
  if (p.splits > 1) {
    if (core == Core::tensor_core_v4 || core == Core::tensor_core_v5) {
      launch_merge_v4(p, D, st, core == Core::tensor_core_v5);
    } else if (core == Core::tensor_core_v3) {
      const dim3 grid(p.rows * p.Hq, static_cast<unsigned>(D / kMergeCols));
      attn_merge_wide_kernel<false><<<grid, kMergeThreads, 0, st>>>(p, static_cast<int>(D));
    } else {
      attn_merge_kernel<<<p.rows * p.Hq, static_cast<int>(D), 0, st>>>(p, static_cast<int>(D));
    }
    HYBRID_CUDA_CHECK_LAUNCH();
  }
}

// Why the tensor-core decode core cannot take q of dtype q_dtype over these caches (nullopt: it
// can): it needs 16-bit caches (bf16 or f16) with q of the same dtype (q is fed to the mma as is),
// 16-byte aligned cache bases and strides (cp.async), at most 65535 sequences (grid z), and
// cache element offsets below 2^31 (carried in int).
Reason tc_decode_reason(DType q_dtype, int64_t N, const Tensor& k_cache, const Tensor& v_cache) {
  if (k_cache.dtype() != DType::bf16 && k_cache.dtype() != DType::f16)
    return std::string("tensor-core decode needs bf16 or f16 caches");
  if (q_dtype != k_cache.dtype())
    return std::string("tensor-core decode needs q in the caches' dtype");
  if (!cache_of(k_cache).aligned || !cache_of(v_cache).aligned)
    return std::string("tensor-core decode needs 16-byte aligned cache bases and strides");
  if (N > 65535)
    return "tensor-core decode takes at most 65535 sequences, got " + std::to_string(N);
  if (!offsets_fit_int32(k_cache) || !offsets_fit_int32(v_cache))
    return std::string("tensor-core decode needs cache offsets below 2^31 elements");
  return std::nullopt;
}

// Why v3 (cp.async Q) cannot read this q (nullopt: it can): base and strides 16-byte aligned.
Reason tc2_query_reason(const Tensor& q) {
  const int64_t es = static_cast<int64_t>(dtype_size(q.dtype()));
  if (reinterpret_cast<uintptr_t>(q.data()) % 16 != 0 || (q.stride(0) * es) % 16 != 0 ||
      (q.stride(1) * es) % 16 != 0)
    return std::string("tensor-core decode v3 needs q 16-byte aligned (base and strides)");
  return std::nullopt;
}

AttnParams query_params(const Tensor& q, const Tensor& out) {
  AttnParams p;
  p.q = q.data(), p.q_dtype = q.dtype(), p.q_t = q.stride(0), p.q_h = q.stride(1);
  p.out = out.data(), p.o_dtype = out.dtype(), p.o_t = out.stride(0), p.o_h = out.stride(1);
  p.rows = static_cast<int>(q.size(0));
  p.Hq = static_cast<int>(q.size(1));
  return p;
}

// ---- ops ----

Reason append_supports(const KvAppend& a) {
  if (a.k_cache.numel() >= (int64_t{1} << 31))
    return std::string("cache too large for 32-bit row indices");
  return std::nullopt;
}

void append_cuda(const KvAppend& a, Context& ctx) {
  AppendParams p;
  p.k = a.k.data(), p.k_dtype = a.k.dtype(), p.k_t = a.k.stride(0), p.k_h = a.k.stride(1);
  p.v = a.v.data(), p.v_dtype = a.v.dtype(), p.v_t = a.v.stride(0), p.v_h = a.v.stride(1);
  p.kc = cache_of(a.k_cache), p.vc = cache_of(a.v_cache), p.pt = table_of(a.page_table);
  p.cu = a.cu_seqlens.defined() ? a.cu_seqlens.data_as<const int>() : nullptr;
  p.N = a.cu_seqlens.defined() ? static_cast<int>(a.cu_seqlens.size(0) - 1)
                               : static_cast<int>(a.k.size(0));
  p.positions = a.positions.data_as<const int>();
  p.Hkv = static_cast<int>(a.k.size(1)), p.D = static_cast<int>(a.k.size(2));
  const int T = static_cast<int>(a.k.size(0));
  if (T == 0) return;
  dispatch_float(a.k_cache.dtype(), "kv_append", [&](auto c) {
    using C = decltype(c);
    kv_append_kernel<C><<<T, 256, 0, as_stream(ctx.stream())>>>(p);
    HYBRID_CUDA_CHECK_LAUNCH();
  });
}

Reason decode_supports(const AttnDecode& a) {
  return dims_supported(a.q.size(2), a.k_cache);
}

void decode_with(const AttnDecode& a, Core core, Context& ctx) {
  AttnParams p = query_params(a.q, a.out);
  p.seq_lens = a.seq_lens.data_as<const int>();
  p.N = p.rows;
  plan_attention(p, a.k_cache, a.v_cache, a.page_table, a.q.size(2), a.window, a.scale, core);
  void* ws = ctx.workspace(partial_bytes(p, a.q.size(2)));
  launch_attention(p, a.q.size(2), a.k_cache.dtype(), ws, core, ctx);
}

void decode_cuda(const AttnDecode& a, Context& ctx) {
  decode_with(a, Core::cuda_core, ctx);
}

Reason decode_tc_supports(const AttnDecode& a) {
  if (Reason r = dims_supported(a.q.size(2), a.k_cache)) return r;
  return tc_decode_reason(a.q.dtype(), a.q.size(0), a.k_cache, a.v_cache);
}

void decode_tc_cuda(const AttnDecode& a, Context& ctx) {
  decode_with(a, Core::tensor_core, ctx);
}

Reason decode_tc2_supports(const AttnDecode& a) {
  if (Reason r = decode_tc_supports(a)) return r;
  return tc2_query_reason(a.q);
}

void decode_tc2_cuda(const AttnDecode& a, Context& ctx) {
  decode_with(a, Core::tensor_core_v3, ctx);
}

// v4 (attn_decode.cuda_tc3) is on unless HYBRID_ATTN_DECODE_V4=0 (then v3 serves attn_decode and
// the fused op, so both can be tested and timed from one build).
bool decode_v4_enabled() {
  static const bool on = !env_is_zero("HYBRID_ATTN_DECODE_V4");
  return on;
}

Reason decode_tc3_supports(const AttnDecode& a) {
  if (!decode_v4_enabled()) return std::string("HYBRID_ATTN_DECODE_V4=0");
  return decode_tc2_supports(a);
}

void decode_tc3_cuda(const AttnDecode& a, Context& ctx) {
  decode_with(a, Core::tensor_core_v4, ctx);
}

// v5 (attn_decode.cuda_tc4) is on unless HYBRID_ATTN_DECODE_V5=0 (then v4 serves attn_decode).
bool decode_v5_enabled() {
  static const bool on = !env_is_zero("HYBRID_ATTN_DECODE_V5");
  return on;
}

// What v5 refuses beyond v4: HYBRID_ATTN_DECODE_V5=0; a sliding window (the split ranges start at
// the window's low end, which depends on the length); more (sequence, KV head, head chunk)
// triples than a quarter of the SMs (B 32 / 128: v4's per-length plan already streams at
// 3.9-4.3 TB/s there, and its chunks follow each sequence's length); key capacities past 2^30
// (the split ranges reach splits · chunk <= keys_max + 64 · splits <= 2 · keys_max, in int).
Reason decode_tc4_supports(const AttnDecode& a) {
  if (!decode_v5_enabled()) return std::string("HYBRID_ATTN_DECODE_V5=0");
  if (Reason r = decode_tc2_supports(a)) return r;  // v4's needs, not its switch
  if (a.window > 0) return std::string("sliding window: v4 serves it");
  const int64_t Hq = a.q.size(1), Hkv = a.k_cache.size(2);
  const int64_t pairs = a.q.size(0) * Hkv * ((Hq / Hkv + kTcRows - 1) / kTcRows);
  if (pairs * 4 > sm_count())
    return "N*Hkv*chunks=" + std::to_string(pairs) + " > SMs/4: v4's per-length plan serves it";
  if (a.k_cache.size(1) * a.page_table.size(1) > (int64_t{1} << 30))
    return std::string("key capacity past 2^30");
  return std::nullopt;
}

void decode_tc4_cuda(const AttnDecode& a, Context& ctx) {
  decode_with(a, Core::tensor_core_v5, ctx);
}

Reason prefill_simple_supports(const AttnPrefill& a) {
  return dims_supported(a.q.size(2), a.k_cache);
}

void prefill_simple_cuda(const AttnPrefill& a, Context& ctx) {
  AttnParams p = query_params(a.q, a.out);
  p.seq_lens = a.seq_lens.data_as<const int>();
  p.cu = a.cu_seqlens.data_as<const int>();
  p.N = static_cast<int>(a.cu_seqlens.size(0) - 1);
  plan_attention(p, a.k_cache, a.v_cache, a.page_table, a.q.size(2), a.window, a.scale,
                 Core::cuda_core);
  void* ws = ctx.workspace(partial_bytes(p, a.q.size(2)));
  launch_attention(p, a.q.size(2), a.k_cache.dtype(), ws, Core::cuda_core, ctx);
}

Reason fused_supports(const RopeKvAppendAttnDecode& a) {
  return dims_supported(a.q.size(2), a.k_cache);
}

// Two launches (plus the merge): rope + append, then decode attention over the cache with the
// rotated q. The second launch reads the appended row after the first completed (stream order),
// so there is no write-then-read hazard between blocks.
void fused_cuda(const RopeKvAppendAttnDecode& a, Context& ctx) {
  const int N = static_cast<int>(a.q.size(0)), Hq = static_cast<int>(a.q.size(1));
  const int64_t D = a.q.size(2);
  AttnParams p = query_params(a.q, a.out);
  p.seq_lens = a.seq_lens.data_as<const int>();
  p.N = N;
  // The rotated q (q's dtype, in the 256-byte aligned workspace with rows of Hq · D elements, so
  // 16-byte aligned for D in {64, 128, 256}) feeds the tensor-core decode core when it can take
  // it: v4 (attn_decode.cuda_tc3's; v3 with HYBRID_ATTN_DECODE_V4=0), or v2 with
  // kFusedDecodeV3 = false.
  constexpr bool kFusedDecodeV3 = true;
  const Core core = tc_decode_reason(a.q.dtype(), N, a.k_cache, a.v_cache)
                        ? Core::cuda_core
                        : (!kFusedDecodeV3       ? Core::tensor_core
                           : decode_v4_enabled() ? Core::tensor_core_v4
                                                 : Core::tensor_core_v3);
  plan_attention(p, a.k_cache, a.v_cache, a.page_table, D, a.window, a.scale, core);
  // One workspace request: q_rot [N, Hq, D] (q's dtype) then the split partials.
  const size_t qrot_bytes =
      (static_cast<size_t>(N) * Hq * D * dtype_size(a.q.dtype()) + 255) / 256 * 256;
  char* ws = static_cast<char*>(ctx.workspace(qrot_bytes + partial_bytes(p, D)));
  if (N == 0) return;
  RopeParams r;
  r.ap.k = a.k.data(), r.ap.k_dtype = a.k.dtype();
  r.ap.k_t = a.k.stride(0), r.ap.k_h = a.k.stride(1);
  r.ap.v = a.v.data(), r.ap.v_dtype = a.v.dtype();
  r.ap.v_t = a.v.stride(0), r.ap.v_h = a.v.stride(1);
  r.ap.kc = cache_of(a.k_cache), r.ap.vc = cache_of(a.v_cache), r.ap.pt = table_of(a.page_table);
  r.ap.N = N, r.ap.Hkv = static_cast<int>(a.k.size(1)), r.ap.D = static_cast<int>(D);
  r.q = a.q.data(), r.q_dtype = a.q.dtype(), r.q_t = a.q.stride(0), r.q_h = a.q.stride(1);
  r.q_rot = ws;
  r.seq_lens = p.seq_lens;
  r.Hq = Hq, r.rotary_dim = static_cast<int>(a.rotary_dim), r.theta = a.theta;
  dispatch_float(a.k_cache.dtype(), "rope_kv_append_attn_decode", [&](auto c) {
    using C = decltype(c);
    rope_append_kernel<C><<<N, 256, 0, as_stream(ctx.stream())>>>(r);
    HYBRID_CUDA_CHECK_LAUNCH();
  });
  p.q = ws, p.q_t = Hq * D, p.q_h = D;
  launch_attention(p, D, a.k_cache.dtype(), ws + qrot_bytes, core, ctx);
}

}  // namespace

}  // namespace attn

void register_attention_prefill_tc(Registry& r);

void register_attention(Registry& r) {
  using namespace attn;
  r.add<KvAppend>("kv_append.cuda", DeviceType::cuda, 0, append_supports, append_cuda);
  r.add<AttnDecode>("attn_decode.cuda_tc4", DeviceType::cuda, 40, decode_tc4_supports,
                    decode_tc4_cuda);
  r.add<AttnDecode>("attn_decode.cuda_tc3", DeviceType::cuda, 30, decode_tc3_supports,
                    decode_tc3_cuda);
  r.add<AttnDecode>("attn_decode.cuda_tc2", DeviceType::cuda, 20, decode_tc2_supports,
                    decode_tc2_cuda);
  r.add<AttnDecode>("attn_decode.cuda_tc", DeviceType::cuda, 10, decode_tc_supports,
                    decode_tc_cuda);
  r.add<AttnDecode>("attn_decode.cuda", DeviceType::cuda, 0, decode_supports, decode_cuda);
  r.add<AttnPrefill>("attn_prefill.cuda_simple", DeviceType::cuda, 0, prefill_simple_supports,
                     prefill_simple_cuda);
  r.add<RopeKvAppendAttnDecode>("rope_kv_append_attn_decode.cuda", DeviceType::cuda, 0,
                                fused_supports, fused_cuda);
  register_attention_prefill_tc(r);
}

}  // namespace hybrid::cuda
