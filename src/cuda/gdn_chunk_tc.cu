// CUDA: gdn_chunk_prefill, tensor-core variant (K = V = 128), priority 10. All three stages use
// mma.sync m16n8k16 (bf16 operands, f32 accumulate) and keep their intermediates in bf16 in the
// workspace: K̂ [T, Hk, K] (L2-normalised once, by stage 1), W [T, Hv, K], U and V_new [T, Hv, V],
// h [chunks, Hv, V, K] (the index kernel and the workspace plan are shared with the general
// variant in gdn_chunk.cu). W, V_new and h were rounded to bf16 before every MMA that reads
// them in any case, so storing them in bf16 changes no result; U is the one extra rounding.
//   1. wu_tc_kernel     grid (chunks, Hv), 128 threads: γ, A = β K̂K̂ᵀ ⊙ decay, T = (I + A)^{-1}
//                       (blocked: 16x16 diagonal blocks, then three block rows), W, U, K̂
//   2. spine_tc_kernel  grid (N, Hv, 128 / SL), 128 threads: the state slice S [SL v, 128 k] in f32
//                       registers across the chunks; W, K̂, U, γ of chunk c+1 load (cp.async)
//                       while chunk c computes
//      spine_ws_kernel  (sm_90a) grid (N, Hv, 2), 256 threads: the same step on wgmma for a 64-row
//                       slice, a producer warpgroup beside it (see "the warpgroup spine" below);
//                       with Out != NoOut (the fused output: the default where this spine runs;
//                       HYBRID_GDN_CHUNK_WS_OUT) the producer computes stage 3's output too, on
//                       wgmma (ws_output), in the pipeline with P̃ from stage 1 (kPt)
//   3. output_tc_kernel grid (chunks, Hv), 128 threads: O from Q̂, K̂, h[c], V_new
// `cuda_tc_v4_fused` (priority 40) runs stage 3 inside the cluster spine instead (spine_tc_kernel
// with Out != NoOut; stage 1 also writes Q̂ to the workspace): no h, no V_new in the workspace, no
// third launch; it refuses (supports()) wherever the cluster spine cannot run.
//
// Spine: block (sequence n, hv, V slice of SL = 32 rows, or 16 when N·Hv·8 blocks fit on the GPU
// at once), 4 warps, S in accumulator fragments (warp w owns k columns [32w, 32w + 32)). Per chunk
// of L <= 64 tokens (rows past L are zero):
//   h[c] = bf16(S) (workspace);  Sb = bf16(S) in shared memory
//   V_new [64, SL] = U − W [64, 128] · Sbᵀ          (warp w: tokens 16w..16w+15, SL/8 n-tiles)
//   S ← e^{γ_L} S + (V_new ⊙ e^{γ_L−γ})ᵀ [SL, 64] · K̂ [64, 128] (warp w: SL/16 m-tiles x 4 n-tiles;
//                                                      K̂ fragments by ldmatrix.trans)
// MMA FLOPs per chunk and slice: 2·64·SL·128·2 (1 MFLOP at SL = 32); the chain of chunks is the
// critical path (2 barriers per chunk, its loads prefetched one chunk ahead).
#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "cuda/dtype.cuh"
#include "cuda/gdn_chunk.cuh"
#include "cuda/kernels.h"
#include "cuda/mma.cuh"
#include "cuda/warp.cuh"
#include "cuda/wgmma.cuh"

namespace hybrid::cuda {

namespace gdn_chunk {
namespace {

constexpr int kD = 128;      // K = V
constexpr int kWP = kD + 8;  // padded row (bf16) of 128-wide tiles
constexpr int kTP = kC + 8;  // padded row (bf16) of 64-wide tiles

using bf16 = __nv_bfloat16;
using bf162 = __nv_bfloat162;

constexpr float kLog2e = 1.4426950408889634f;

// The decay of an intra-chunk product tile's fragment (mma layout: x[0..1] row i_lo, x[2..3] row
// i_lo + 8, columns j and j + 1), in place: x_ij ← x_ij · 2^{g_i − g_j} where j <= i < L, else 0
// (g in log2 units: γ log2 e). P̃ = tril(Q̂K̂ᵀ ⊙ e^{γ_i−γ_j}) in stage 1, stage 3 and ws_output.
__device__ __forceinline__ void tril_decay(float* x, int j, int i_lo, int L, float g_lo, float g_hi,
                                           float gj0, float gj1) {
  const int i_hi = i_lo + 8;
  x[0] = j <= i_lo && i_lo < L ? x[0] * exp2_approx(g_lo - gj0) : 0.0f;
  x[1] = j + 1 <= i_lo && i_lo < L ? x[1] * exp2_approx(g_lo - gj1) : 0.0f;
  x[2] = j <= i_hi && i_hi < L ? x[2] * exp2_approx(g_hi - gj0) : 0.0f;
  x[3] = j + 1 <= i_hi && i_hi < L ? x[3] * exp2_approx(g_hi - gj1) : 0.0f;
}

// A chunk's gate, by warp 0 of the block (or of a warpgroup) for head hv: g and β of tokens
// 2·lane and 2·lane + 1 (zeros past L), loaded before the rows so that the round trips overlap;
// then γ = the inclusive cumsum of g over the chunk, into shared memory as γ log2 e (gl), β (bet)
// and β e^γ (beg), and to p.gamma.
struct ChunkGate {
  float g0 = 0.0f, g1 = 0.0f, b0 = 0.0f, b1 = 0.0f;
};
__device__ __forceinline__ ChunkGate chunk_gate_load(const Params& p, int t0, int L, int hv,
                                                     int lane) {
  const int i0 = 2 * lane, i1 = i0 + 1;
  ChunkGate x;
  if (i0 < L) {
    x.g0 = p.g[(int64_t)(t0 + i0) * p.g_t + hv];
    x.b0 = p.beta[(int64_t)(t0 + i0) * p.b_t + hv];
  }
  if (i1 < L) {
    x.g1 = p.g[(int64_t)(t0 + i1) * p.g_t + hv];
    x.b1 = p.beta[(int64_t)(t0 + i1) * p.b_t + hv];
  }
  return x;
}
__device__ __forceinline__ void chunk_gate_store(const Params& p, const ChunkGate& x, int t0, int L,
                                                 int hv, int lane, float* gl, float* bet,
                                                 float* beg) {
  const int i0 = 2 * lane, i1 = i0 + 1;
  const float cum = warp_inclusive_scan(x.g0 + x.g1, lane);  // (over the pair sums)
  const float c1 = cum, c0 = cum - x.g1;
  gl[i0] = c0 * kLog2e, gl[i1] = c1 * kLog2e;
  bet[i0] = x.b0, bet[i1] = x.b1;
  beg[i0] = x.b0 * expf(c0), beg[i1] = x.b1 * expf(c1);
  if (i0 < L) p.gamma[(int64_t)(t0 + i0) * p.Hv + hv] = c0;
  if (i1 < L) p.gamma[(int64_t)(t0 + i1) * p.Hv + hv] = c1;
}

// Two consecutive bf16 of a shared row as one 32-bit fragment register.
__device__ __forceinline__ uint32_t ld2(const bf16* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}

// A fragment (16x16, row-major [m][k] rows of `ld` elements) at (m0, k0); g = lane/4, q = lane%4.
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const bf16* s, int ld, int m0, int k0,
                                       int g, int q) {
  a[0] = ld2(s + (m0 + g) * ld + k0 + 2 * q);
  a[1] = ld2(s + (m0 + g + 8) * ld + k0 + 2 * q);
  a[2] = ld2(s + (m0 + g) * ld + k0 + 2 * q + 8);
  a[3] = ld2(s + (m0 + g + 8) * ld + k0 + 2 * q + 8);
}

// B fragment (16x8, stored [n][k]) at (n0, k0).
__device__ __forceinline__ void load_b(uint32_t (&b)[2], const bf16* s, int ld, int n0, int k0,
                                       int g, int q) {
  b[0] = ld2(s + (n0 + g) * ld + k0 + 2 * q);
  b[1] = ld2(s + (n0 + g) * ld + k0 + 2 * q + 8);
}

// B fragments of two n-tiles from a tile stored [k][n] (row-major, rows of `ld` elements, 16-byte
// aligned): k rows k0..k0+15, columns n0..n0+15. b0 = n-tile n0, b1 = n-tile n0 + 8. Lanes 0-15
// address rows k0 + lane of columns n0.., lanes 16-31 the same rows at n0 + 8 (matrices 2, 3).
__device__ __forceinline__ void load_b2_trans(uint32_t (&b0)[2], uint32_t (&b1)[2], const bf16* s,
                                              int ld, int k0, int n0, int lane) {
  const bf16* row = s + (k0 + (lane & 15)) * ld + n0 + 8 * (lane >> 4);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(b0[0]), "=r"(b0[1]), "=r"(b1[0]), "=r"(b1[1])
               : "r"(smem_u32(row)));
}

// Async copies global -> shared (cp_async16, cp_commit: cuda/mma.cuh); src_bytes = 0 zero-fills
// (src must still be a valid address).
__device__ __forceinline__ void cp_async4(void* dst, const void* src, int src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_u32(dst)), "l"(src),
               "r"(src_bytes)
               : "memory");
}
// Cluster and mbarrier primitives of the cluster spine (sm_90).
__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;\n" : "=r"(r));
  return r;
}
// Every thread of every block of the cluster arrives (release), then waits for all (acquire).
__device__ __forceinline__ void cluster_arrive() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() {
  asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void mbar_init(uint64_t* bar, int count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(count)
               : "memory");
}
__device__ __forceinline__ void mbar_init_fence() {
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
// The one arrival of the barrier's phase, expecting `bytes` of copies (from any block).
__device__ __forceinline__ void mbar_arrive_expect(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(bar)),
               "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        " selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(smem_u32(bar)), "r"(parity)
        : "memory");
  } while (!done);
}
// `bytes` (a multiple of 16, both addresses 16-byte aligned) from global memory into the shared
// memory of every block of the cluster in `mask`, at dst's offset, completing on each one's bar.
__device__ __forceinline__ void bulk_multicast(void* dst, const void* src, uint32_t bytes,
                                               uint64_t* bar, uint16_t mask) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.multicast::cluster "
      "[%0], [%1], %2, [%3], %4;\n" ::"r"(smem_u32(dst)),
      "l"(src), "r"(bytes), "r"(smem_u32(bar)), "h"(mask)
      : "memory");
}

template <int N>
__device__ __forceinline__ void cp_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Split-sequence spine (N = 1 only, where the host knows the sequence's length): the sequence's
// chunks in S segments of G chunks. Per chunk the state map is affine, S ← S·M_c + B_c with
// M_c = e^{γ_L} I − Wᵀ diag(e^{γ_L−γ}) K̂ (K x K, the same for every row of S) and B_c the chunk's
// update from S = 0; so a segment maps S ↦ S·M_s + B_s, where B_s is the segment run from zero
// and M_s the segment run of the K x K identity with U = 0 (each row of M a "state" row).
//   pass 1 (one launch, grid (S, Hv, 2·V/SL)): segment 0 runs in full (h, V_new, checkpoints)
//          from the pool and leaves its end state in start[1]; segments s >= 1 run B_s (blocks
//          z < V/SL) and M_s (z >= V/SL) and write nothing else.
//   pass 2 (segment_combine_kernel): start[s + 1] = start[s]·M_s + B_s for s = 1..S−2 (f32).
//   pass 3 (grid (S − 1, Hv, V/SL)): segments 1..S−1 run in full from start[s]; the last one
//          writes the pool.
// Work: 3x the spine's for the later segments, for a chain of 2G + S − 2 steps instead of S·G.
struct SpineSplit {
  int seg_chunks = 0;      // G; 0: no split (block x = sequence, all its chunks)
  int segments = 1;        // S
  int seg_base = 0;        // segment of block x = 0
  int pass1 = 0;           // 1: pass 1 (segment 0 full, the others B_s and M_s)
  float* start = nullptr;  // [S, Hv, V, K] start state of each segment (s >= 1)
  float* b = nullptr;      // [S, Hv, V, K] B_s
  float* m = nullptr;      // [S, Hv, K, K] M_s
  // Piece of the pipelined prefill (N = 1, no split; piece_end > 0): chunks [piece_begin,
  // min(nch, piece_end)) of the sequence, from the pool (piece_begin = 0) or from carry, to carry
  // when chunks remain after the piece, else to the pool. A piece that starts at or past the
  // sequence's last chunk does nothing (the piece that held that chunk wrote the pool).
  int piece_begin = 0, piece_end = 0;
  float* carry = nullptr;  // [Hv, V, K] f32 state between pieces
};

// A padding sequence's spine block (slot < 0): zero the checkpoint rows v0..v0+rows−1 of head hv
// whose checkpoints end in chunks [cs_begin, cs_end) of sequence n (len tokens); the pool is
// untouched. Every thread of the block takes part.
__device__ void zero_padding_checkpoints(const Params& p, int n, int hv, int v0, int rows, int len,
                                         int cs_begin, int cs_end) {
  if (p.every <= 0) return;
  for (int j = 0; j < len / p.every; ++j) {
    const int end = (j + 1) * p.every;
    if (end <= cs_begin * kC || end > cs_end * kC) continue;
    for (int e = threadIdx.x; e < rows * kD; e += blockDim.x)
      p.ckpt[(p.first_ckpt[n] + j) * p.ck_row + hv * p.ck_head + (int64_t)(v0 + e / kD) * p.ck_v +
             e % kD] = 0.0f;
  }
}

// A padding sequence's output (spines with the fused output): zeros in the rows of tokens
// [t_begin, t_begin + tokens), columns v0..v0+rows−1 of head hv. Every thread of the block takes
// part.
template <class Out>
__device__ __forceinline__ void zero_padding_output(const Params& p, int hv, int v0, int rows,
                                                    int t_begin, int tokens) {
  Out* out = static_cast<Out*>(p.out);
  for (int e = threadIdx.x; e < tokens * rows; e += blockDim.x)
    out[(int64_t)(t_begin + e / rows) * p.o_t + hv * p.o_h + v0 + e % rows] = from_f32<Out>(0.0f);
}

// Shared memory of the spine with SL V rows per block and a ring of NW buffers for W, U and γ
// (K̂ always has 2): Ws [NW][64][136], Ks [2][64][136], Us [NW][64][SL + 8], Sb [SL][136],
// VT [SL][72] (bf16), γ [NW][64] f32. NW = 2: 93 696 bytes at SL = 32, 82 944 at SL = 16;
// NW = 3 (SL = 16 only): 103 680 bytes, still two blocks per SM (2 x (103 680 + 1 KiB reserved)
// <= 228 KiB).
// The cluster spine adds 5 mbarriers (8 bytes each) at the end; the fused output (FO) then Vn
// [SL][72] (bf16, V_new unscaled [v][i]): 106 024 bytes at SL = 16, NW = 3.
template <int SL, int NW = 2, int CZ = 0, bool FO = false>
constexpr int spine_smem() {
  return (NW * kC * kWP + 2 * kC * kWP + NW * kC * (SL + 8) + SL * kWP + SL * kTP) * 2 +
         NW * kC * 4 + (CZ > 0 ? 5 * 8 : 0) + (FO ? SL * kTP * 2 : 0);
}
static_assert(2 * (spine_smem<16, 3, 8>() + 1024) <= 228 * 1024,
              "deep-ring spine: 2 blocks per SM");
static_assert(spine_smem<16, 3>() % 8 == 0, "cluster spine: mbarriers 8-byte aligned");
static_assert(2 * (spine_smem<16, 3, 8, true>() + 1024) <= 228 * 1024,
              "fused-output spine: 2 blocks per SM");

// Out type of the spine when it does not compute the output (every variant but v4).
struct NoOut {};

// Two floats as one bf16x2 fragment register (lo: the lower column).
__device__ __forceinline__ uint32_t pack_bf162(float lo, float hi) {
  const bf162 x = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&x);
}

// SL = 32 (4 blocks per head) or 16 (8 blocks per head, for grids too small to fill the GPU):
// SL / 16 m-tiles of S per warp, SL / 8 n-tiles of V_new.
// NW = 2: W, U, γ and K̂ of chunk c+1 are copied (one cp.async group) while chunk c computes.
// NW = 3 (the deep ring of `cuda_tc_v3`): W, U, γ of chunk c+2 and K̂ of chunk c+1 are copied
// while chunk c computes, as two groups committed in that order each chunk (empty ones too, so
// that the counts below hold at the ends): A_c = {K̂(c+1)}, B_c = {W, U, γ of c+2}; the
// prologue commits B_{-2} = {W, U, γ of 0}, A_{-1} = {K̂(0)}, B_{-1} = {W, U, γ of 1}. At the
// start of chunk c the groups ..., B_{c-2}, A_{c-1}, B_{c-1} are committed and W(c) is in
// B_{c-2}: wait_group 2. Before the S update, A_c and B_c are committed too and K̂(c) is in
// A_{c-1}: wait_group 3, then the barrier that publishes VT publishes K̂ as well. So W / U / γ
// get two chunks of time to land, K̂ a chunk and a half, instead of one chunk.
// CZ > 0, "CL" (the cluster spine; SL = 16, NW = 3; launched as clusters of CZ = 8 or 4 slice
// blocks of one (run, head), which all run the same chunks): W and K̂ are read from L2 once per
// cluster instead of once per block. Block r of the cluster copies rows r, r + CZ, .. of each tile
// (256 contiguous bytes each) with cp.async.bulk multicast to all CZ blocks; each block's mbarrier
// of the buffer (fullW[3], fullK[2], one arrival: its thread 0's expect_tx of the 64 rows' 16 KiB)
// completes when all 64 have landed.
// Rows past L are copies of row L − 1 (no zero fill): their V_new is replaced by 0 and their VT
// column is 0, so they add nothing. Reuse: a block issues into a buffer only after a cluster
// barrier whose arrive every block makes at the end of the chunk that last read it, so no block
// still reads it and its barrier's previous phase is complete. U and γ stay per block (cp.async,
// one group per chunk: group c holds chunk c's, wait_group 1 at the start of chunk c).
// Out != NoOut, "FO" (`cuda_tc_v4_fused`; CL only): stage 3 fused in. Per chunk, besides the
// above, the block computes its output slice O[i][v0..v0+SL−1] = scale·(e^{γ_i} (Q̂ Sbᵀ)[i] +
// Σ_{j<=i} (q̂_i·k̂_j) e^{γ_i−γ_j} V_new[j]) (warp w: tokens 16w..16w+15) and writes no h:
//   Q̂ A fragments of the warp's 16 rows (bf16 workspace p.qn, written by stage 1) are loaded
//   into registers at the start of the chunk; Q̂·Sbᵀ runs right after V_new (before the second
//   barrier, as the next chunk overwrites Sb after its first); V_new is also kept unscaled as
//   Vn [v][i]; after the S update, P = tril(Q̂ K̂ᵀ ⊙ decay) in accumulators (n-tiles past the
//   warp's diagonal skipped) becomes the A operand of P·V_new directly (the m16n8 C layout of two
//   n-tiles is the m16k16 A layout), then the rows < L are stored. The cluster arrive moves after
//   these MMAs (they read the chunk's K̂ buffer).
template <class St, int SL, int NW = 2, int CZ = 0, class Out = NoOut>
__global__ void __launch_bounds__(128) spine_tc_kernel(const Params p, const SpineSplit sp) {
  static_assert(NW == 2 || NW == 3, "ring of 2 or 3 buffers");
  static_assert(CZ == 0 || (SL == 16 && NW == 3 && (CZ == 4 || CZ == 8)),
                "cluster spine: 16-row slices, ring of 3, clusters of 4 or 8");
  constexpr bool CL = CZ > 0;
  constexpr bool FO = !std::is_same_v<Out, NoOut>;
  static_assert(!FO || CL, "fused output: cluster spine only");
  constexpr int kCZ = CL ? CZ : 1;  // cluster size in the (CL-only) multicast code
  constexpr int kMT = SL / 16, kNV = SL / 8, kUP = SL + 8;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* Ws = reinterpret_cast<bf16*>(smem_raw);         // [NW][64][136] W rows [i][d]
  bf16* Ks = Ws + NW * kC * kWP;                        // [2][64][136]  K̂ rows [i][d]
  bf16* Us = Ks + 2 * kC * kWP;                         // [NW][64][SL+8] U slice [i][v]
  bf16* Sb = Us + NW * kC * kUP;                        // [SL][136]     bf16(S) [v][d]
  bf16* VT = Sb + SL * kWP;                             // [SL][72]      (V_new·e)ᵀ [v][i]
  float* gs = reinterpret_cast<float*>(VT + SL * kTP);  // [NW][64]      γ
  uint64_t* fullW = reinterpret_cast<uint64_t*>(gs + NW * kC);  // [3] (CL only)
  uint64_t* fullK = fullW + 3;                                  // [2] (CL only)
  bf16* Vn = reinterpret_cast<bf16*>(fullK + 2);                // [SL][72] (FO only)

  constexpr int kZ = kD / SL;  // V slices per head
  const bool split = sp.seg_chunks > 0;
  // A pipeline piece after the first is launched programmatically (HYBRID_GDN_CHUNK_PIPE_PDL):
  // its blocks are placed while the piece before finishes its last chunks, and wait here for its
  // completion (the carry) before reading anything; elsewhere this returns at once.
  if (!split && sp.piece_end > 0) grid_dependency_wait();
  const int n = split ? 0 : blockIdx.x, seg = split ? sp.seg_base + blockIdx.x : 0;
  const int hv = blockIdx.y, hk = hv / p.ratio;
  // Kind of run: full (h, V_new, checkpoints; seg 0 or pass 3), or pass 1's B_s / M_s.
  const bool local = split && sp.pass1 && seg > 0;
  const bool trans = local && blockIdx.z >= kZ;
  if (split && sp.pass1 && seg == 0 && blockIdx.z >= kZ) return;
  const int v0 = (blockIdx.z % kZ) * SL;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, q = lane % 4;
  const int bos = p.cu[n], len = p.cu[n + 1] - bos;
  const int nch = (len + kC - 1) / kC;
  const bool piece = !split && sp.piece_end > 0;
  const int cs_begin = split ? seg * sp.seg_chunks : piece ? sp.piece_begin : 0;
  const int cs_end = split   ? min(nch, cs_begin + sp.seg_chunks)
                     : piece ? min(nch, sp.piece_end)
                             : nch;
  if (piece && cs_begin > 0 && cs_begin >= nch) return;
  const int slot = p.slots[n * p.slots_s];
  // Padding: zero the checkpoint rows that end in this block's chunks; the pool is untouched.
  if (slot < 0) {
    if (!local) zero_padding_checkpoints(p, n, hv, v0, SL, len, cs_begin, cs_end);
    if constexpr (FO)  // its output rows of this slice and segment are zeros too
      if (!local)
        zero_padding_output<Out>(p, hv, v0, SL, bos + cs_begin * kC,
                                 min(len, cs_end * kC) - cs_begin * kC);
    return;
  }
  St* pool = static_cast<St*>(p.state) + slot * p.st_slot + hv * p.st_head;
  const bool from_pool = !p.has_init || p.has_init[n * p.has_init_s] != 0;
  const int64_t seg_stride = (int64_t)p.Hv * kD * kD, head = (int64_t)hv * kD * kD;

  // S fragment (rows v0..v0+SL−1): s[mt][nt][r] is S[v][d] with v = mt·16 + g + 8·(r / 2),
  // d = 32·warp + nt·8 + 2q + r % 2 (the m16n8 accumulator layout).
  float s[kMT][4][4];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int v = mt * 16 + g + 8 * (r / 2), d = 32 * warp + nt * 8 + 2 * q + r % 2;
        float x;
        if (local)  // B_s from zero, M_s from the identity
          x = trans && v0 + v == d ? 1.0f : 0.0f;
        else if (seg > 0)
          x = sp.start[seg * seg_stride + head + (int64_t)(v0 + v) * kD + d];
        else if (piece && cs_begin > 0)
          x = sp.carry[head + (int64_t)(v0 + v) * kD + d];
        else
          x = from_pool ? to_f32(pool[(int64_t)(v0 + v) * p.st_row + d]) : 0.0f;
        s[mt][nt][r] = x;
      }

  const bf16* w = static_cast<const bf16*>(p.w);
  const bf16* u = static_cast<const bf16*>(p.u);
  const bf16* kn = static_cast<const bf16*>(p.kn);
  bf16* vnew = static_cast<bf16*>(p.vnew);
  bf16* h = static_cast<bf16*>(p.h);
  // A [kC][kPieces · 8] bf16 tile of chunk rows into shared memory (row stride dst_stride), by
  // 16-byte cp.async pieces: thread tid copies piece tid % kPieces of rows tid / kPieces + kRows·k
  // (kRows = 128 / kPieces rows per pass of the block). Those are the (row, piece) pairs of a loop
  // e = tid, tid + 128, .. over kC·kPieces pieces, written as one base address plus per-pass
  // strides: ncu's source page (session 5, run M) showed that loop, with blockDim.x as its step,
  // at ~31 instructions per 16-byte copy and ~52% of the spine's instructions. src0 points at
  // row t0's first element; row i is src0 + i·t_stride. Rows i >= L are zero-filled (source
  // clamped to row L − 1); a full chunk (L = kC, all but a sequence's last) takes no clamp.
  auto copy_tile = [&](auto pieces, bf16* dst, int dst_stride, const bf16* src0, int64_t t_stride,
                       int L) {
    constexpr int kPieces = decltype(pieces)::value, kRows = 128 / kPieces;
    static_assert(128 % kPieces == 0 && kC % kRows == 0, "whole passes of the 128 threads");
    const int row = tid / kPieces, col = 8 * (tid % kPieces);
    bf16* d = dst + row * dst_stride + col;
    if (L == kC) {
      const bf16* src = src0 + row * t_stride + col;
#pragma unroll
      for (int k = 0; k < kC / kRows; ++k)
        cp_async16(d + k * kRows * dst_stride, src + k * kRows * t_stride, 16);
    } else {
#pragma unroll
      for (int k = 0; k < kC / kRows; ++k) {
        const int i = row + k * kRows;
        cp_async16(d + k * kRows * dst_stride, src0 + min(i, L - 1) * t_stride + col,
                   i < L ? 16 : 0);
      }
    }
  };
  using RowPieces = std::integral_constant<int, kD / 8>;    // W, K̂ rows: 16 pieces
  using SlicePieces = std::integral_constant<int, SL / 8>;  // U slice rows: 2 or 4 pieces
  const int64_t tv_stride = (int64_t)p.Hv * kD, tk_stride = (int64_t)p.Hk * kD;
  // Chunk cs of this sequence: W rows and γ into ring buffer bw (CL: U slice and γ only, W comes
  // by multicast); the U slice (SL / 8 x 16 bytes per row) too. No commit (the caller groups the
  // copies).
  auto copy_u = [&](int cs, int bw) {
    const int t0 = bos + cs * kC, L = min(kC, len - cs * kC);
    copy_tile(SlicePieces{}, Us + bw * kC * kUP, kUP, u + ((int64_t)t0 * p.Hv + hv) * kD + v0,
              tv_stride, L);
    if (tid < kC)
      cp_async4(gs + bw * kC + tid, p.gamma + (int64_t)(t0 + min(tid, L - 1)) * p.Hv + hv,
                tid < L ? 4 : 0);
  };
  auto copy_wu = [&](int cs, int bw) {
    const int t0 = bos + cs * kC, L = min(kC, len - cs * kC);
    copy_tile(RowPieces{}, Ws + bw * kC * kWP, kWP, w + ((int64_t)t0 * p.Hv + hv) * kD, tv_stride,
              L);
    copy_u(cs, bw);
  };
  // K̂ rows of chunk cs into buffer bk.
  auto copy_k = [&](int cs, int bk) {
    const int t0 = bos + cs * kC, L = min(kC, len - cs * kC);
    copy_tile(RowPieces{}, Ks + bk * kC * kWP, kWP, kn + ((int64_t)t0 * p.Hk + hk) * kD, tk_stride,
              L);
  };
  // CL: this block's 64 / CZ rows of chunk cs's W (is_k = false) or K̂ tile to all blocks of the
  // cluster, and this block's own barrier armed for the 64 rows.
  const uint32_t rank = CL ? cluster_rank() : 0;
  auto multicast = [&](int cs, bool is_k, bf16* dst, uint64_t* bar) {
    const int t0 = bos + cs * kC, L = min(kC, len - cs * kC);
    if (tid == 0) mbar_arrive_expect(bar, kC * kD * sizeof(bf16));
    if (tid < kC / kCZ) {
      const int i = static_cast<int>(rank) + kCZ * tid;
      const int64_t t = t0 + min(i, L - 1);
      const bf16* src = is_k ? kn + (t * p.Hk + hk) * kD : w + (t * p.Hv + hv) * kD;
      bulk_multicast(dst + i * kWP, src, kD * sizeof(bf16), bar, (1u << kCZ) - 1);
    }
  };

  if constexpr (CL) {
    if (tid == 0) {
      for (int b = 0; b < 3; ++b) mbar_init(fullW + b, 1);
      for (int b = 0; b < 2; ++b) mbar_init(fullK + b, 1);
      mbar_init_fence();
    }
    cluster_arrive();  // every block's barriers initialised before any copy can complete on them
    cluster_wait();
    if (cs_begin < cs_end) {
      multicast(cs_begin, false, Ws, fullW);
      multicast(cs_begin, true, Ks, fullK);
      copy_u(cs_begin, 0);
    }
    cp_commit();
    if (cs_begin + 1 < cs_end) {
      multicast(cs_begin + 1, false, Ws + kC * kWP, fullW + 1);
      copy_u(cs_begin + 1, 1);
    }
    cp_commit();
    cluster_arrive();  // paired with the cluster wait of the first chunk (or the one after the
                       // loop)
  } else if constexpr (NW == 2) {
    if (cs_begin < cs_end) {
      copy_wu(cs_begin, 0);
      copy_k(cs_begin, 0);
      cp_commit();
    }
  } else {  // B_{-2}, A_{-1}, B_{-1} (see above)
    if (cs_begin < cs_end) copy_wu(cs_begin, 0);
    cp_commit();
    if (cs_begin < cs_end) copy_k(cs_begin, 0);
    cp_commit();
    if (cs_begin + 1 < cs_end) copy_wu(cs_begin + 1, 1);
    cp_commit();
  }
  const int c_first = p.first_chunk[n];
  for (int cs = cs_begin; cs < cs_end; ++cs) {
    const int j = cs - cs_begin, bk = j & 1, bw = NW == 2 ? bk : j % NW;
    // Two chunks before the piece's end, the next piece's blocks may be placed (they wait above).
    if (piece && cs == max(cs_begin, cs_end - 2)) grid_dependents_launch();
    const int c = c_first + cs, t0 = bos + cs * kC, L = min(kC, len - cs * kC);
    // FO: A fragments of Q̂ rows 16·warp.. (zeros past L), issued now, first used after V_new.
    [[maybe_unused]] uint32_t qa[FO ? kD / 16 : 1][4];
    if constexpr (FO) {
      const bf16* qn = static_cast<const bf16*>(p.qn);
      const int r_lo = 16 * warp + g, r_hi = r_lo + 8;
      const bf16* q_lo = qn + ((int64_t)(t0 + r_lo) * p.Hk + hk) * kD + 2 * q;
      const bf16* q_hi = qn + ((int64_t)(t0 + r_hi) * p.Hk + hk) * kD + 2 * q;
      const bool in_lo = !local && r_lo < L, in_hi = !local && r_hi < L;
#pragma unroll
      for (int kt = 0; kt < kD / 16; ++kt) {
        qa[kt][0] = in_lo ? ld2(q_lo + 16 * kt) : 0u;
        qa[kt][1] = in_hi ? ld2(q_hi + 16 * kt) : 0u;
        qa[kt][2] = in_lo ? ld2(q_lo + 16 * kt + 8) : 0u;
        qa[kt][3] = in_hi ? ld2(q_hi + 16 * kt + 8) : 0u;
      }
    }
    // This thread's copies of W, U, γ of chunk cs have landed (NW = 2: the only group in flight,
    // K̂ too; NW = 3: B_{cs-2}, with A_{cs-1} and B_{cs-1} allowed in flight).
    if constexpr (CL) {
      mbar_wait(fullW + bw, (j / 3) & 1);  // W of chunk cs (this buffer's (j / 3)-th use)
      cp_wait<1>();                        // U, γ of chunk cs (group j; group j + 1 in flight)
    } else if constexpr (NW == 2) {
      cp_wait<0>();
    } else {
      cp_wait<2>();
    }
    // Sb = bf16(S): every read of Sb by the previous chunk came before its second barrier.
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int nt = 0; nt < 4; ++nt)
#pragma unroll
        for (int r = 0; r < 4; r += 2) {
          const int v = mt * 16 + g + 8 * (r / 2), d = 32 * warp + nt * 8 + 2 * q;
          *reinterpret_cast<bf162*>(Sb + v * kWP + d) =
              __floats2bfloat162_rn(s[mt][nt][r], s[mt][nt][r + 1]);
        }
    __syncthreads();  // chunk cs's buffers (every thread's copies) and Sb visible
    // NW = 2: chunk cs + 1 into buffers bk ^ 1, whose last reads (chunk cs − 1) all came before
    // the barrier above; it lands while this chunk computes. NW = 3: K̂ of cs + 1 into bk ^ 1
    // (last read by chunk cs − 1's S update) and W, U, γ of cs + 2 into (j + 2) % 3 (last read
    // by chunk cs − 1 before its second barrier), both before the barrier above.
    if constexpr (CL) {
      // Every block of the cluster has finished chunk cs − 1 (its arrive at the end of it), so
      // K̂ buffer bk ^ 1 and W / U / γ buffer (j + 2) % 3 are free in all of them.
      cluster_wait();
      if (cs + 1 < cs_end) multicast(cs + 1, true, Ks + (bk ^ 1) * kC * kWP, fullK + (bk ^ 1));
      if (cs + 2 < cs_end) {
        multicast(cs + 2, false, Ws + ((j + 2) % NW) * kC * kWP, fullW + (j + 2) % NW);
        copy_u(cs + 2, (j + 2) % NW);
      }
      cp_commit();  // group j + 2
    } else if constexpr (NW == 2) {
      if (cs + 1 < cs_end) {
        copy_wu(cs + 1, bk ^ 1);
        copy_k(cs + 1, bk ^ 1);
        cp_commit();
      }
    } else {
      if (cs + 1 < cs_end) copy_k(cs + 1, bk ^ 1);
      cp_commit();  // A_cs
      if (cs + 2 < cs_end) copy_wu(cs + 2, (j + 2) % NW);
      cp_commit();  // B_cs
    }

    // h[c] rows v0..v0+SL−1 = Sb, 16 bytes per store: thread tid stores piece tid % 16 of rows
    // tid / 16 + 8k (copy_tile's mapping).
    if (!(local || FO)) {
      bf16* hc = h + ((int64_t)c * p.Hv + hv) * kD * kD + (int64_t)v0 * kD;
      const int row = tid / (kD / 8), col = 8 * (tid % (kD / 8));
#pragma unroll
      for (int k = 0; k < SL / (128 / (kD / 8)); ++k) {
        const int v = row + k * (128 / (kD / 8));
        *reinterpret_cast<uint4*>(hc + v * kD + col) =
            *reinterpret_cast<const uint4*>(Sb + v * kWP + col);
      }
    }

    const bf16* ws = Ws + bw * kC * kWP;
    const bf16* ks = Ks + bk * kC * kWP;
    const bf16* us = Us + bw * kC * kUP;
    const float* gb = gs + bw * kC;
    const float g_last = gb[L - 1];
    const int i_lo = 16 * warp + g, i_hi = i_lo + 8;
    const float e_lo = i_lo < L ? expf(g_last - gb[i_lo]) : 0.0f;
    const float e_hi = i_hi < L ? expf(g_last - gb[i_hi]) : 0.0f;

    // V_new rows 16·warp..: acc[nt] over v = nt·8 + 2q (+1), tokens i_lo (r 0, 1), i_hi (r 2, 3).
    float acc[kNV][4] = {};
#pragma unroll
    for (int kt = 0; kt < kD / 16; ++kt) {
      uint32_t a[4];
      load_a(a, ws, kWP, 16 * warp, 16 * kt, g, q);
#pragma unroll
      for (int nt = 0; nt < kNV; ++nt) {
        uint32_t bb[2];
        load_b(bb, Sb, kWP, nt * 8, 16 * kt, g, q);
        mma_bf16(acc[nt], a, bb);
      }
    }
#pragma unroll
    for (int nt = 0; nt < kNV; ++nt)
#pragma unroll
      for (int hi = 0; hi < 2; ++hi) {
        const int i = hi ? i_hi : i_lo, v = nt * 8 + 2 * q;
        const float2 uu =
            trans ? make_float2(0.0f, 0.0f)  // M_s: U = 0
                  : __bfloat1622float2(*reinterpret_cast<const bf162*>(us + i * kUP + v));
        const float vn0 = i < L ? uu.x - acc[nt][2 * hi] : 0.0f;
        const float vn1 = i < L ? uu.y - acc[nt][2 * hi + 1] : 0.0f;
        if (i < L && !local && !FO)  // FO: the output is computed here, nothing reads V_new
          *reinterpret_cast<bf162*>(vnew + ((int64_t)(t0 + i) * p.Hv + hv) * kD + v0 + v) =
              __floats2bfloat162_rn(vn0, vn1);
        const float e = hi ? e_hi : e_lo;
        VT[v * kTP + i] = __float2bfloat16_rn(vn0 * e);
        VT[(v + 1) * kTP + i] = __float2bfloat16_rn(vn1 * e);
        if constexpr (FO) {
          Vn[v * kTP + i] = __float2bfloat16_rn(vn0);
          Vn[(v + 1) * kTP + i] = __float2bfloat16_rn(vn1);
        }
      }
    // FO: O = e^{γ_i} (Q̂ Sbᵀ) for tokens i_lo (r 0, 1), i_hi (r 2, 3), v = nt·8 + 2q (+1).
    [[maybe_unused]] float oacc[FO ? kNV : 1][4] = {};
    if constexpr (FO) {
      if (!local) {
#pragma unroll
        for (int kt = 0; kt < kD / 16; ++kt)
#pragma unroll
          for (int nt = 0; nt < kNV; ++nt) {
            uint32_t bb[2];
            load_b(bb, Sb, kWP, nt * 8, 16 * kt, g, q);
            mma_bf16(oacc[nt], qa[kt], bb);
          }
        const float eq_lo = expf(gb[i_lo]), eq_hi = expf(gb[i_hi]);
#pragma unroll
        for (int nt = 0; nt < kNV; ++nt) {
          oacc[nt][0] *= eq_lo, oacc[nt][1] *= eq_lo;
          oacc[nt][2] *= eq_hi, oacc[nt][3] *= eq_hi;
        }
      }
    }
    if constexpr (CL)
      mbar_wait(fullK + bk, (j / 2) & 1);  // K̂ of chunk cs (this buffer's (j / 2)-th use)
    else if constexpr (NW == 3)
      cp_wait<3>();   // K̂ of chunk cs (A_{cs-1}) has landed
    __syncthreads();  // VT visible (NW = 3: and K̂ of chunk cs)

    // S ← e^{γ_L} S + VT · K̂ (k = tokens); K̂ [i][d] is the B tile stored [k][n].
    const float decay = expf(g_last);
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
      for (int nt = 0; nt < 4; ++nt)
#pragma unroll
        for (int r = 0; r < 4; ++r) s[mt][nt][r] *= decay;
#pragma unroll
    for (int kt = 0; kt < kC / 16; ++kt) {
      uint32_t a[kMT][4];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) load_a(a[mt], VT, kTP, 16 * mt, 16 * kt, g, q);
#pragma unroll
      for (int np = 0; np < 2; ++np) {
        uint32_t b0[2], b1[2];
        load_b2_trans(b0, b1, ks, kWP, 16 * kt, 32 * warp + 16 * np, lane);
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          mma_bf16(s[mt][2 * np], a[mt], b0);
          mma_bf16(s[mt][2 * np + 1], a[mt], b1);
        }
      }
    }
    // FO: O += P·V_new, P = tril(Q̂ K̂ᵀ ⊙ e^{γ_i−γ_j}) for the warp's rows (n-tiles of j past
    // the diagonal are zero and skipped), then the rows < L of the slice are stored.
    if constexpr (FO) {
      if (!local) {
        float pa[kC / 8][4] = {};
#pragma unroll
        for (int kt = 0; kt < kD / 16; ++kt)
#pragma unroll
          for (int nt = 0; nt < kC / 8; ++nt)
            if (nt <= 2 * warp + 1) {
              uint32_t bb[2];
              load_b(bb, ks, kWP, nt * 8, 16 * kt, g, q);
              mma_bf16(pa[nt], qa[kt], bb);
            }
#pragma unroll
        for (int nt = 0; nt < kC / 8; ++nt)
#pragma unroll
          for (int r = 0; r < 4; ++r) {
            const int i = r < 2 ? i_lo : i_hi, jj = nt * 8 + 2 * q + r % 2;
            pa[nt][r] = jj <= i && i < L ? pa[nt][r] * expf(gb[i] - gb[jj]) : 0.0f;
          }
#pragma unroll
        for (int kt = 0; kt < kC / 16; ++kt) {
          if (kt > warp) continue;  // P columns 16kt.. are past every row of this warp
          uint32_t a[4];
          a[0] = pack_bf162(pa[2 * kt][0], pa[2 * kt][1]);
          a[1] = pack_bf162(pa[2 * kt][2], pa[2 * kt][3]);
          a[2] = pack_bf162(pa[2 * kt + 1][0], pa[2 * kt + 1][1]);
          a[3] = pack_bf162(pa[2 * kt + 1][2], pa[2 * kt + 1][3]);
#pragma unroll
          for (int nt = 0; nt < kNV; ++nt) {
            uint32_t bb[2];
            load_b(bb, Vn, kTP, nt * 8, 16 * kt, g, q);
            mma_bf16(oacc[nt], a, bb);
          }
        }
        Out* out = static_cast<Out*>(p.out);
#pragma unroll
        for (int nt = 0; nt < kNV; ++nt)
#pragma unroll
          for (int r = 0; r < 4; ++r) {
            const int i = r < 2 ? i_lo : i_hi, v = nt * 8 + 2 * q + r % 2;
            if (i < L)
              out[(int64_t)(t0 + i) * p.o_t + hv * p.o_h + v0 + v] =
                  from_f32<Out>(p.scale * oacc[nt][r]);
          }
      }
    }
    // CL: this block is done reading chunk cs's W, U, γ (before the second barrier) and K̂ (the
    // MMAs above; FO: and the output's): the next chunk's cluster wait lets the other blocks
    // reuse those buffers.
    if constexpr (CL) cluster_arrive();
    const int end = cs * kC + L;
    if (p.every > 0 && end % p.every == 0 && !local) {
      float* ck = p.ckpt + (p.first_ckpt[n] + end / p.every - 1) * p.ck_row + hv * p.ck_head;
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int nt = 0; nt < 4; ++nt)
#pragma unroll
          for (int r = 0; r < 4; ++r) {
            const int v = mt * 16 + g + 8 * (r / 2), d = 32 * warp + nt * 8 + 2 * q + r % 2;
            ck[(int64_t)(v0 + v) * p.ck_v + d] = s[mt][nt][r];
          }
    }
    // No barrier here: the next chunk writes Sb (read before this chunk's second barrier), then
    // VT and the ring buffers only after its first barrier, which every thread reaches after its
    // MMAs.
  }
  // CL: paired with the last arrive. Every copy into a block is one of its own chunks, which it
  // waited for; this wait also keeps every block of the cluster resident until all are done.
  if constexpr (CL) cluster_wait();
  // End state: the pool (no split, or the last segment, or the last piece), else start[1]
  // (segment 0 in pass 1), B_s or M_s (pass 1), the carry (a piece before the last); the middle
  // segments of pass 3 end where start[s + 1] already is.
  float* to = nullptr;
  if (local)
    to = (trans ? sp.m : sp.b) + seg * seg_stride + head;
  else if (split && seg == 0 && sp.segments > 1)
    to = sp.start + seg_stride + head;
  else if (sp.piece_end > 0 && sp.seg_chunks == 0 &&
           sp.piece_end < (p.cu[1] - p.cu[0] + kC - 1) / kC)  // a piece (n = 0) before the last
    to = sp.carry + head;
  const bool to_pool = split ? seg == sp.segments - 1 : !to;
  if (!to && !to_pool) return;
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int v = mt * 16 + g + 8 * (r / 2), d = 32 * warp + nt * 8 + 2 * q + r % 2;
        if (to)
          to[(int64_t)(v0 + v) * kD + d] = s[mt][nt][r];
        else
          pool[(int64_t)(v0 + v) * p.st_row + d] = from_f32<St>(s[mt][nt][r]);
      }
}

// ---- the warpgroup spine (`spine_ws_kernel`, sm_90a; the pipeline's spine) ----
//
// The chunk step on wgmma. Block (n, hv, 64-row V slice), two warpgroups. Warpgroup 0 (the
// consumer) holds S [64 v, 128 k] in f32 wgmma accumulators (warp w: V rows v0 + 16w..+15) and
// computes the step transposed, so that S and V_new never leave its registers:
//   Sa = bf16(S), the A operand as it stands (two accumulator n-tiles = one k16 A fragment);
//   h[c] = Sa                                (stmatrix into the staging area);
//   Pᵀ [64 v, 64 i] = Sa · Wᵀ                (8 x wgmma m64n64k16; W [i][d] is the K-major B);
//   V_newᵀ = Uᵀ − Pᵀ, columns i >= L zero    (Uᵀ fragments by ldmatrix.trans of U [i][v]);
//   V_new rows                               (stmatrix.trans into the staging area);
//   S ← e^{γ_L} S + (V_newᵀ ⊙ e^{γ_L−γ_i}) · K̂ (4 x wgmma m64n128k16; K̂ [i][d] the MN-major B).
// 12 wgmma a chunk where spine_tc_kernel's warps issue 128 mma.sync and 68 ldmatrix each. The
// consumer touches no global memory inside the loop: warpgroup 1 (the producer) copies W, K̂, U, γ
// (cp.async, two chunks ahead: a ring of 3) and stores h and V_new from the double-buffered
// staging area. mbarriers (use k of a barrier waits for phase parity k & 1):
//   full[b]   (128 producer arrivals): buffer b's copies have landed (each producer thread's
//             cp.async.mbarrier.arrive; the consumer's fence.proxy.async after its wait hands them
//             to wgmma);
//   empty[b]  (128 consumer arrivals): the consumer is done with buffer b (after its S update);
//   staged[s] (128 consumer arrivals): staging s holds chunk j's h and V_new rows (s = j % 2);
//   freed[s]  (128 producer arrivals): the producer has stored staging s.
// Shared memory, a ring buffer of (128-byte swizzle, wgmma.cuh's sw128 / desc_sw128):
//   W [64 i][128 d] as two [64 i][64 d] halves (8 KiB each), K-major B (sbo 1024; the k16 step
//     kt at half kt / 4, + 32·(kt % 4) bytes);
//   K̂ [64 i][128 d], the same layout, read as the MN-major B (lbo 8 KiB: the next 64 d; sbo
//     1024; the k16 step kt at + 2048·kt bytes);
//   U [64 i][64 v] (ldmatrix.trans at swizzled addresses); γ [64] f32;
// then the two staging buffers (h [64 v][136], V_new [64 i][72], bf16) and the 10 mbarriers:
// 179 280 bytes, one block per SM (64 blocks at Hv 32: the pipeline's stage blocks take the other
// SMs). The bf16 rounding points are spine_tc_kernel's (S before W·Sᵀ and into h, V_new·e before
// the S update); the decays are exp2_approx of γ·log2 e. Unsplit runs only: a pipeline piece
// (sp.piece_begin / piece_end / carry, as in spine_tc_kernel) or every chunk of each sequence.
// Out != NoOut (the fused output; tc_run picks it, see ws_out_auto): the producer also copies Q̂
// (stage 1's p.qn) into the ring (58 368 bytes a stage), the consumer stages h and V_newᵀ as
// swizzled wgmma operands (24 576 bytes a buffer; 224 336 in all), and the producer computes the
// output from them (ws_output) in place of the h and V_new stores: no h workspace, no stage 3.
// kPt (the pipeline's default; tc_run's ws_pt): P̃ comes from stage 1 (p.pt) into the ring in
// place of γ and Q̂ (49 152 bytes a stage), Q̂ into a ring of two tiles of its own, γ after the
// staging (230 240 bytes in all).
// Session 16 (docs/PERFORMANCE.md): 1 x 8192 / 32768 / 131072 415 / 1568 / 5817 µs in the
// pipeline against the 32-row spine's 463 / 1685 / 6447; session 17, the swizzled tiles: 352 /
// 1334 / 5081-5097 µs (the spine alone 257 -> 150 µs at 1 x 8192).
constexpr int kWgRows = 64;                  // V rows per block
constexpr int kWgTile = kC * kD * 2;         // W or K̂ tile bytes (16 KiB): two 64-column halves
constexpr int kWgUOff = 2 * kWgTile;         // U [64 i][64 v] (8 KiB)
constexpr int kWgGOff = kWgUOff + kC * 128;  // γ [64] f32
constexpr int kWgStage = (kWgGOff + kC * 4 + 1023) / 1024 * 1024;  // 41 984 bytes
// The fused output's stages (kOut):
//  - P computed by the producer (kPt false): the stage, then Q̂ [64 i][128 d]: 58 368 bytes;
//  - P̃ from stage 1 (kPt): W, K̂, U, then P̃ [64 i][64 j] (8 KiB, one swizzled 64-column half)
//    where the others have γ: 49 152 bytes; γ of the ring's buffers [3][64] f32 after the staging,
//    Q̂ in a ring of two tiles of its own (a ring of 3 with Q̂ and P̃ would not fit).
constexpr int kWgQOff = kWgStage;
constexpr int kWgPOff = kWgUOff + kC * 128;
constexpr int kWsQRing = 2;
constexpr int kWsRing = 3;
template <bool kOut, bool kPt>
constexpr int ws_stage() {
  return !kOut ? kWgStage : kPt ? kWgPOff + kC * 128 : kWgQOff + kWgTile;
}
constexpr int kWsHLd = kD + 8, kWsVLd = kWgRows + 8;  // staging rows (bf16): h [64 v], V_new [64 i]
constexpr int kWsStaging = kWgRows * kWsHLd * 2 + kC * kWsVLd * 2;  // 26 624 bytes a buffer
// kOut's staging, the fused output's wgmma B operands (128-byte swizzle, K-major):
constexpr int kWsHOut = 2 * (kWgRows * 128);            // h [64 v][128 d]: two 8 KiB halves
constexpr int kWsStagingOut = kWsHOut + kWgRows * 128;  // + V_newᵀ [64 v][64 j]: 24 576 bytes
template <bool kOut>
constexpr int ws_staging() {
  return kOut ? kWsStagingOut : kWsStaging;
}
// The ring, kPt's Q̂ ring, the staging, kPt's γ, the barriers (kPt's qfull too).
template <bool kOut, bool kPt = false>
constexpr int ws_smem() {
  constexpr bool kPtRing = kOut && kPt;
  return kWsRing * ws_stage<kOut, kPt>() + (kPtRing ? kWsQRing * kWgTile : 0) +
         2 * ws_staging<kOut>() + (kPtRing ? kWsRing * kC * 4 : 0) +
         (2 * kWsRing + 4 + (kPtRing ? kWsQRing : 0)) * 8;
}
// 179 280 bytes; ws_smem<true>() 224 336; ws_smem<true, true>() 230 240
constexpr int kWsSmem = ws_smem<false>();
static_assert(ws_smem<true, true>() <= 227 * 1024,
              "the fused output's rings fit the shared memory");
static_assert(ws_stage<true, false>() % 1024 == 0 && ws_stage<true, true>() % 1024 == 0 &&
                  kWgStage % 1024 == 0 && kWsStagingOut % 1024 == 0,
              "stages and staging 1024-byte aligned (the 128-byte swizzle)");

__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_u32(bar)) : "memory");
}

// The fused output of the warpgroup spine (spine_ws_kernel<St, Out, kPt>), computed on wgmma by
// the producer warpgroup from the ring (Q̂, K̂ or P̃, γ of the chunk) and the staging (h = bf16(S)
// and V_newᵀ, which the consumer writes for it in 128-byte-swizzled K-major tiles), so that
// neither h nor V_new goes to global memory and stage 3 does not run. output_tc_kernel's v7 math
// and rounding for the block's 64 v columns:
//   O = Q̂ hᵀ                                  [64 i][64 v]: A = Q̂ fragments (ldmatrix from the
//                                            swizzled Q̂ tile), B = h [v][d] K-major (staging)
//   P̃ = bf16(tril(Q̂K̂ᵀ ⊙ e^{γ_i−γ_j})), rows i < L
//   O_P = P̃ V_new                             A = P̃ fragments, B = V_newᵀ [v][j] K-major (staging)
//   O = scale·(e^{γ_i} O + O_P)
// P̃ is either computed here (kPt false: P = Q̂K̂ᵀ on 8 more wgmma with K̂ [j][d] the K-major B
// from the ring, then the decay of 32 products a thread, between two waits) or stage 1's (kPt:
// wu_tc5_kernel's kWriteP, copied into the ring), which makes this warpgroup's step one group of
// 12 wgmma and shortens the chain of chunks, which waits on it (session 19: the spine alone at
// 1 x 8192 200 µs against 236, 150 without the output) at the cost of stage 1 (118 -> 158 µs).
// Warp w of the warpgroup owns tokens 16w..16w+15 (wgmma's row split); rows i >= L are not
// stored (Q̂, K̂ and P̃ rows past L are zero-filled, V_new rows past L zero). O leaves through the
// warp's own Q̂ rows of the tile, for 16-byte row stores.
// Session 17's first form ran these products on mma.sync with 2-byte stores and took 1 x 8192
// from 334 to 623 µs (session 18 run 1); on wgmma 490, with the staged stores 396 (ptxas then
// serialised every wgmma of the kernel, see below), without the serialisation 347 (run 4).
template <class Out, bool kPt>
__device__ __forceinline__ void ws_output(const Params& p, const unsigned char* st,
                                          unsigned char* qt, const float* gs,
                                          const unsigned char* stg, uint64_t* staged,
                                          uint32_t phase, int t0, int L, int hv, int v0, int warp,
                                          int lane) {
  const int g = lane / 4, q = lane % 4;
  // A fragments of k16 step ks: rows 16w + (lane & 15), columns 16ks + 8·(lane >> 4): Q̂ (two
  // 64-column halves) and P̃ (one).
  const int a_row = 16 * warp + (lane & 15);
  uint32_t qa[8][4], pa[4][4];
#pragma unroll
  for (int ks = 0; ks < 8; ++ks)
    ldmatrix_x4(qa[ks],
                qt + (ks / 4) * (kWgTile / 2) + wgmma::sw128(a_row, 2 * (ks % 4) + (lane >> 4)));
  if constexpr (kPt)
#pragma unroll
    for (int kt = 0; kt < 4; ++kt)
      ldmatrix_x4(pa[kt], st + kWgPOff + wgmma::sw128(a_row, 2 * kt + (lane >> 4)));
  // B K-major [64 n][128 k] in two swizzled 64-column halves: k16 step ks.
  auto b128 = [](const unsigned char* tile, int ks) {
    return wgmma::desc_sw128(tile + (ks / 4) * (kWgTile / 2) + (ks % 4) * 32, 16, 1024);
  };
  auto pv = [&](float(&acc)[32], bool add) {  // acc (+)= P̃ V_new
#pragma unroll
    for (int kt = 0; kt < 4; ++kt)
      wgmma::mma_m64n64k16_rs<0>(acc, pa[kt], wgmma::desc_sw128(stg + kWsHOut + kt * 32, 16, 1024),
                                 add || kt > 0);
  };
  float oacc[32], pacc[32];
  // The staging first: a spin loop between a wgmma and its wait makes ptxas serialise every wgmma
  // of the kernel, the consumer's too (C7514; session 18).
  mbar_wait(staged, phase);  // h and V_newᵀ staged (the consumer fenced them to the async proxy)
  wgmma::fence_operand(qa);
  if constexpr (kPt) wgmma::fence_operand(pa);
  wgmma::fence();
  if constexpr (!kPt) {
#pragma unroll
    for (int ks = 0; ks < 8; ++ks)
      wgmma::mma_m64n64k16_rs<0>(pacc, qa[ks], b128(st + kWgTile, ks), ks > 0);
    wgmma::commit();
  }
#pragma unroll
  for (int ks = 0; ks < 8; ++ks) wgmma::mma_m64n64k16_rs<0>(oacc, qa[ks], b128(stg, ks), ks > 0);
  if constexpr (kPt) pv(pacc, false);
  wgmma::commit();
  wgmma::wait<0>();
  wgmma::fence_operand(oacc);
  wgmma::fence_operand(pacc);
  // d[4nt + e]: row i_lo (e < 2) or i_hi, column 8nt + 2q + e % 2.
  const int i_lo = 16 * warp + g, i_hi = i_lo + 8;
  const float e_lo = expf(gs[i_lo]), e_hi = expf(gs[i_hi]);
  if constexpr (!kPt) {  // P̃ from P = Q̂K̂ᵀ, as stage 1's kWriteP computes it; O ← e^{γ_i} O + O_P
    const float gl_lo = gs[i_lo] * kLog2e, gl_hi = gs[i_hi] * kLog2e;
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      oacc[4 * nt] *= e_lo, oacc[4 * nt + 1] *= e_lo;
      oacc[4 * nt + 2] *= e_hi, oacc[4 * nt + 3] *= e_hi;
      const int j = nt * 8 + 2 * q;
      const float2 gj = *reinterpret_cast<const float2*>(gs + j);
      tril_decay(pacc + 4 * nt, j, i_lo, L, gl_lo, gl_hi, gj.x * kLog2e, gj.y * kLog2e);
    }
#pragma unroll
    for (int kt = 0; kt < 4; ++kt) {  // bf16(P̃) as the A fragments of k16 step kt (j = 16kt..)
      const float* lo = pacc + 8 * kt;
      pa[kt][0] = pack_bf16(lo[0], lo[1]), pa[kt][1] = pack_bf16(lo[2], lo[3]);
      pa[kt][2] = pack_bf16(lo[4], lo[5]), pa[kt][3] = pack_bf16(lo[6], lo[7]);
    }
    wgmma::fence_operand(pa);
    wgmma::fence_operand(oacc);
    wgmma::fence();
    pv(oacc, true);
    wgmma::commit();
    wgmma::wait<0>();
    wgmma::fence_operand(oacc);
  }
  // O goes out through the warp's own 16 rows of the Q̂ tile (only this warp's ldmatrix read
  // them, into qa), swizzled like the tile, so that the global stores are 16-byte and whole rows
  // (the output rows 16-byte aligned: vec_output): a row of 64 v is 128 bytes (bf16: half 0 of
  // the tile) or 256 (f32: its 128-byte halves in halves 0 and 1).
  constexpr bool kF32 = std::is_same_v<Out, float>;
  __syncwarp();  // every lane's ldmatrix of these rows is done (racecheck's warp-level WAR)
#pragma unroll
  for (int hi = 0; hi < 2; ++hi) {
    const int r = hi ? i_hi : i_lo;
    const float e = hi ? e_hi : e_lo;
#pragma unroll
    for (int nt = 0; nt < 8; ++nt) {
      const int x = 4 * nt + 2 * hi;
      const float o0 = p.scale * (kPt ? fmaf(e, oacc[x], pacc[x]) : oacc[x]);
      const float o1 = p.scale * (kPt ? fmaf(e, oacc[x + 1], pacc[x + 1]) : oacc[x + 1]);
      if constexpr (kF32)
        *reinterpret_cast<float2*>(qt + (nt / 4) * (kWgTile / 2) +
                                   wgmma::sw128(r, 2 * (nt % 4) + q / 2) + 8 * (q % 2)) =
            make_float2(o0, o1);
      else
        *reinterpret_cast<uint32_t*>(qt + wgmma::sw128(r, nt) + 4 * q) = pack_bf16(o0, o1);
    }
  }
  __syncwarp();
  constexpr int kPieces = kF32 ? 16 : 8;  // 16-byte pieces of a row
  Out* out = static_cast<Out*>(p.out) + (int64_t)t0 * p.o_t + hv * p.o_h + v0;
#pragma unroll
  for (int k = 0; k < 16 * kPieces / 32; ++k) {
    const int c = lane % kPieces, r = 16 * warp + lane / kPieces + (32 / kPieces) * k;
    if (r < L)
      *reinterpret_cast<uint4*>(out + (int64_t)r * p.o_t + c * (16 / sizeof(Out))) =
          *reinterpret_cast<const uint4*>(qt + (c / 8) * (kWgTile / 2) + wgmma::sw128(r, c % 8));
  }
}

// This thread's cp.async copies issued so far arrive on `bar` once they have all landed: one
// arrival, counted in the barrier's init count (.noinc), in place of a wait_group.
__device__ __forceinline__ void cp_async_arrive_noinc(uint64_t* bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" ::"r"(smem_u32(bar))
               : "memory");
}

template <class St, class Out = NoOut, bool kPt = false>
__global__ void __launch_bounds__(256, 1) spine_ws_kernel(const Params p, const SpineSplit sp) {
  constexpr int NW = kWsRing;
  constexpr bool kOut = !std::is_same_v<Out, NoOut>;  // the fused output (see below)
  static_assert(kOut || !kPt, "P̃ from stage 1: the fused output only");
  constexpr int kStage = ws_stage<kOut, kPt>();
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  if (smem_u32(smem_raw) % 1024 != 0) __trap();  // the swizzled tiles need it (no static smem)
  const int tid = threadIdx.x;
  // kOut: the warpgroup's role from lane 0's index, so that ptxas sees a warp-uniform branch: with
  // wgmma in both roles a plain tid test made it serialise every wgmma of the kernel (C7520,
  // "compiler-inserted WG.AR in divergent path").
  const bool producer = kOut ? __shfl_sync(0xffffffffu, tid / 128, 0) == 1 : tid >= 128;
  const int ct = tid % 128, warp = ct / 32, lane = ct % 32, q = lane % 4;
  grid_dependency_wait();  // a piece after the first: the carry (see spine_tc_kernel)
  const int n = blockIdx.x, hv = blockIdx.y, hk = hv / p.ratio, v0 = blockIdx.z * kWgRows;
  const int bos = p.cu[n], len = p.cu[n + 1] - bos;
  const int nch = (len + kC - 1) / kC;
  const bool piece = sp.piece_end > 0;  // a pipeline piece, else the whole sequence
  const int cs_begin = piece ? sp.piece_begin : 0, cs_end = piece ? min(nch, sp.piece_end) : nch;
  if (cs_begin > 0 && cs_begin >= nch) return;
  const int slot = p.slots[n * p.slots_s];
  if (slot < 0) {  // padding: zero the checkpoint rows that end in this piece; the pool untouched
    zero_padding_checkpoints(p, n, hv, v0, kWgRows, len, cs_begin, cs_end);
    if constexpr (kOut)  // and the output rows of this piece's chunks, this block's 64 v
      zero_padding_output<Out>(p, hv, v0, kWgRows, bos + cs_begin * kC,
                               min(len, cs_end * kC) - cs_begin * kC);
    return;
  }
  constexpr int kStaging = ws_staging<kOut>();
  // The ring (NW stages), kPt's Q̂ ring, the staging (s at stg0 + s·kStaging), kPt's γ of the
  // ring's buffers, the barriers (kPt: qfull[b], 128 producer arrivals: Q̂ tile b has landed).
  unsigned char* qring = smem_raw + NW * kStage;
  unsigned char* stg0 = qring + (kPt ? kWsQRing * kWgTile : 0);
  unsigned char* gam0 = stg0 + 2 * kStaging;
  auto gamma_of = [&](int b) {  // γ [64] f32 of ring buffer b
    return reinterpret_cast<float*>(kPt ? gam0 + b * kC * 4 : smem_raw + b * kStage + kWgGOff);
  };
  uint64_t* full = reinterpret_cast<uint64_t*>(gam0 + (kPt ? NW * kC * 4 : 0));
  uint64_t* empty = full + NW;
  uint64_t* staged = empty + NW;
  uint64_t* freed = staged + 2;
  uint64_t* qfull = freed + 2;
  if (tid == 0) {
    for (int b = 0; b < NW; ++b) mbar_init(full + b, 128), mbar_init(empty + b, 128);
    for (int s = 0; s < 2; ++s) mbar_init(staged + s, 128), mbar_init(freed + s, 128);
    if constexpr (kPt)
      for (int b = 0; b < kWsQRing; ++b) mbar_init(qfull + b, 128);
  }
  __syncthreads();
  const int64_t tv_stride = (int64_t)p.Hv * kD, tk_stride = (int64_t)p.Hk * kD;
  const int64_t head = (int64_t)hv * kD * kD;
  const int t_first = bos + cs_begin * kC, runs = cs_end - cs_begin;

  if (producer) {
    // Copy pieces of thread ct, fixed for the run: W and K̂ rows rw + 8k (16-byte piece pw of the
    // row), U rows ru + 16k (piece pu), γ row ct (ct < 64). Source pointers at the run's first
    // chunk; chunk j adds j·64 rows. A full chunk copies without clamps; the last, partial one
    // clamps its sources to row L − 1 and zero-fills rows >= L. Each 8 lanes read 128 contiguous
    // bytes of one row and write one 128-byte row of the swizzled tile: one shared-memory
    // wavefront. (Into the unswizzled core-matrix layouts, every 16-byte piece took a wavefront
    // of its own, 8x the ideal (ncu, session 17): ~4300 wavefronts a chunk, longer than the
    // consumer's whole step.)
    const int rw = ct / 16, pw = ct % 16, ru = ct / 8, pu = ct % 8;
    const bf16* w_src =
        static_cast<const bf16*>(p.w) + ((int64_t)(t_first + rw) * p.Hv + hv) * kD + 8 * pw;
    const bf16* k_src =
        static_cast<const bf16*>(p.kn) + ((int64_t)(t_first + rw) * p.Hk + hk) * kD + 8 * pw;
    const bf16* u_src =
        static_cast<const bf16*>(p.u) + (int64_t)(t_first + ru) * tv_stride + hv * kD + v0 + 8 * pu;
    const float* g_src = p.gamma + (int64_t)(t_first + min(ct, kC - 1)) * p.Hv + hv;
    const uint32_t w_dst = (pw / 8) * (kWgTile / 2) + wgmma::sw128(rw, pw % 8),
                   k_dst = kWgTile + w_dst;
    const uint32_t u_dst = kWgUOff + wgmma::sw128(ru, pu), p_dst = kWgPOff + wgmma::sw128(ru, pu);
    const int c_first = p.first_chunk[n];
    // kOut: Q̂ rows as K̂'s (into the stage, or kPt's Q̂ ring); kPt: P̃ rows as U's (the chunk's
    // [64][64] tile).
    const uint32_t q_dst = (kPt ? 0 : kWgQOff) + w_dst;
    const bf16* q_src =
        kOut ? static_cast<const bf16*>(p.qn) + ((int64_t)(t_first + rw) * p.Hk + hk) * kD + 8 * pw
             : nullptr;
    const bf16* p_src = kPt ? static_cast<const bf16*>(p.pt) +
                                  ((int64_t)(c_first + cs_begin) * p.Hv + hv) * kC * kC + ru * kC +
                                  8 * pu
                            : nullptr;
    const int64_t p_chunk = (int64_t)p.Hv * kC * kC;  // P̃ elements from one chunk to the next
    auto copy_chunk = [&](int j) {
      const int cs = cs_begin + j, L = min(kC, len - cs * kC), dc = j * kC;
      unsigned char* st = smem_raw + (j % NW) * kStage;
      unsigned char* gd = reinterpret_cast<unsigned char*>(gamma_of(j % NW)) + ct * 4;
      const bf16* wc = w_src + dc * tv_stride;
      const bf16* kc = k_src + dc * tk_stride;
      const bf16* uc = u_src + dc * tv_stride;
      const bf16* pc = kPt ? p_src + j * p_chunk : nullptr;
      if (L == kC) {
#pragma unroll
        for (int k = 0; k < kC / 8; ++k) {
          cp_async16(st + w_dst + k * 1024, wc + k * 8 * tv_stride, 16);
          cp_async16(st + k_dst + k * 1024, kc + k * 8 * tk_stride, 16);
          if constexpr (kOut && !kPt)
            cp_async16(st + q_dst + k * 1024, q_src + (dc + k * 8) * tk_stride, 16);
        }
#pragma unroll
        for (int k = 0; k < kC / 16; ++k) {
          cp_async16(st + u_dst + k * 2048, uc + k * 16 * tv_stride, 16);
          if constexpr (kPt) cp_async16(st + p_dst + k * 2048, pc + k * 16 * kC, 16);
        }
        if (ct < kC) cp_async4(gd, g_src + dc * p.Hv, 4);
      } else {
#pragma unroll
        for (int k = 0; k < kC / 8; ++k) {
          const int i = rw + 8 * k, dr = min(i, L - 1) - rw, bytes = i < L ? 16 : 0;
          cp_async16(st + w_dst + k * 1024, wc + dr * tv_stride, bytes);
          cp_async16(st + k_dst + k * 1024, kc + dr * tk_stride, bytes);
          if constexpr (kOut && !kPt)
            cp_async16(st + q_dst + k * 1024, q_src + (dc + dr) * tk_stride, bytes);
        }
#pragma unroll
        for (int k = 0; k < kC / 16; ++k) {
          const int i = ru + 16 * k, dr = min(i, L - 1) - ru, bytes = i < L ? 16 : 0;
          cp_async16(st + u_dst + k * 2048, uc + dr * tv_stride, bytes);
          if constexpr (kPt) cp_async16(st + p_dst + k * 2048, pc + dr * kC, bytes);
        }
        if (ct < kC) cp_async4(gd, g_src + (dc + min(ct, L - 1) - ct) * p.Hv, ct < L ? 4 : 0);
      }
    };
    // kPt: chunk j's Q̂ into Q̂ tile j % 2 (free once output j − 2 is done), arriving on qfull.
    auto copy_q = [&](int j) {
      const int L = min(kC, len - (cs_begin + j) * kC), dc = j * kC;
      unsigned char* qt = qring + (j % kWsQRing) * kWgTile;
#pragma unroll
      for (int k = 0; k < kC / 8; ++k) {
        const int i = rw + 8 * k, dr = min(i, L - 1) - rw;
        cp_async16(qt + q_dst + k * 1024, q_src + (dc + dr) * tk_stride, i < L ? 16 : 0);
      }
      cp_async_arrive_noinc(qfull + j % kWsQRing);
    };
    // Chunk j's copies arrive on full[j % NW] when they land (cp.async.mbarrier.arrive), so the
    // producer never waits on its own copies: it only waits for a buffer to be free.
#pragma unroll
    for (int k = 0; k < NW - 1; ++k)
      if (k < runs) copy_chunk(k), cp_async_arrive_noinc(full + k);
    if constexpr (kPt) copy_q(0);
    const int64_t h_chunk = (int64_t)p.Hv * kD * kD;
    // Output pieces: h [64 v][128] of chunk c is 16 KB contiguous (piece ct + 128k: row / 16,
    // 16-byte column % 16); V_new rows t0 + (ct + 128k) / 8, piece (ct % 8) of the 128-byte slice.
    // (kOut: neither goes out; the workspace has no h.)
    bf16* h_out = kOut ? nullptr
                       : static_cast<bf16*>(p.h) + (int64_t)(c_first + cs_begin) * h_chunk + head +
                             (int64_t)v0 * kD + 8 * ct;
    bf16* v_out = kOut ? nullptr
                       : static_cast<bf16*>(p.vnew) + (int64_t)(t_first + ct / 8) * tv_stride +
                             hv * kD + v0 + 8 * (ct % 8);
    for (int j = 0; j < runs; ++j) {
      if (j + NW - 1 < runs) {
        if (j >= 1) mbar_wait(empty + (j - 1) % NW, ((j - 1) / NW) & 1);  // chunk j − 1 is done
        copy_chunk(j + NW - 1);
        cp_async_arrive_noinc(full + (j + NW - 1) % NW);
      }
      // Chunk j's outputs.
      const int s = j % 2, L = min(kC, len - (cs_begin + j) * kC);
      if constexpr (kOut) {
        if constexpr (kPt)
          if (j + 1 < runs) copy_q(j + 1);
        // This chunk's Q̂, K̂ or P̃, and γ: every producer thread's copies landed (the consumer
        // waited on the same phase of full; the buffers are refilled only after this iteration);
        // ws_output waits for the staging itself.
        mbar_wait(full + j % NW, (j / NW) & 1);
        if constexpr (kPt) mbar_wait(qfull + j % kWsQRing, (j / kWsQRing) & 1);
        wgmma::fence_async_smem();  // K̂ (kPt false) is a wgmma operand
        unsigned char* st = smem_raw + (j % NW) * kStage;
        ws_output<Out, kPt>(p, st, kPt ? qring + (j % kWsQRing) * kWgTile : st + kWgQOff,
                            gamma_of(j % NW), stg0 + s * kStaging, staged + s, (j / 2) & 1,
                            bos + (cs_begin + j) * kC, L, hv, v0, warp, lane);
        mbar_arrive(freed + s);
        // Every producer warp is done with ring buffer j % NW and Q̂ tile j % 2 before any of
        // them refills it (the next iterations' copies): warps read each other's copied rows.
        asm volatile("bar.sync 1, 128;\n" ::: "memory");
        continue;
      }
      mbar_wait(staged + s, (j / 2) & 1);
      const bf16* hs = reinterpret_cast<const bf16*>(stg0 + s * kStaging);
      const bf16* vs = hs + kWgRows * kWsHLd;
      bf16* hc = h_out + (int64_t)j * h_chunk;
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        const int pc = ct + 128 * k;
        *reinterpret_cast<uint4*>(hc + 1024 * k) =
            *reinterpret_cast<const uint4*>(hs + (pc / 16) * kWsHLd + 8 * (pc % 16));
      }
      bf16* vc = v_out + (int64_t)j * kC * tv_stride;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int i = ct / 8 + 16 * k;
        if (i < L)
          *reinterpret_cast<uint4*>(vc + 16 * k * tv_stride) =
              *reinterpret_cast<const uint4*>(vs + i * kWsVLd + 8 * (ct % 8));
      }
      mbar_arrive(freed + s);
    }
    return;
  }

  // ---- consumer: warpgroup 0 ----
  St* pool = static_cast<St*>(p.state) + slot * p.st_slot + hv * p.st_head;
  const bool from_pool = !p.has_init || p.has_init[n * p.has_init_s] != 0;
  const int rv = 16 * warp + lane / 4;  // this thread's rows rv, rv + 8 of the slice
  float s[64];                          // s[4j + e]: S[v0 + rv + 8·(e / 2)][8j + 2q + e % 2]
  {
    const bool from_carry = cs_begin > 0;
#pragma unroll
    for (int j = 0; j < 16; ++j)
#pragma unroll
      for (int hi = 0; hi < 2; ++hi) {
        const int v = v0 + rv + 8 * hi, d = 8 * j + 2 * q;
        float2 x = make_float2(0.0f, 0.0f);
        if (from_carry)
          x = *reinterpret_cast<const float2*>(sp.carry + head + (int64_t)v * kD + d);
        else if (from_pool)
          x = make_float2(to_f32(pool[(int64_t)v * p.st_row + d]),
                          to_f32(pool[(int64_t)v * p.st_row + d + 1]));
        s[4 * j + 2 * hi] = x.x;
        s[4 * j + 2 * hi + 1] = x.y;
      }
  }
  // Staging addresses (buffer 0; + s·kWsStaging): stmatrix rows of this warp's h rows 16w..;
  // V_new [i][64 v] columns 16w.. by stmatrix.trans.
  bf16* h_st = reinterpret_cast<bf16*>(stg0) +
               (16 * warp + (lane & 7) + 8 * ((lane >> 3) & 1)) * kWsHLd + 8 * (lane >> 4);
  bf16* v_st = reinterpret_cast<bf16*>(stg0) + kWgRows * kWsHLd +
               (8 * (lane >> 4) + (lane & 7)) * kWsVLd + 16 * warp + 8 * ((lane >> 3) & 1);
  // kOut: the same stmatrix rows (row 16w + (lane & 7) + 8·((lane >> 3) & 1), 16-byte piece
  // (lane >> 4) of each 16-column step) into the 128-byte-swizzled K-major tiles h [v][d] and
  // V_newᵀ [v][j] (kWsStagingOut): the piece index XOR the row's (lane & 7).
  unsigned char* sw_row = stg0 + (16 * warp + (lane & 7) + 8 * ((lane >> 3) & 1)) * 128;
  const int sw_x = lane & 7, sw_hl = lane >> 4;
  const uint32_t ut_off =
      kWgUOff + wgmma::sw128(8 * (lane >> 4) + (lane & 7), 2 * warp + ((lane >> 3) & 1));
  constexpr int kStgElems = kStaging / 2;

  auto step = [&](auto full_chunk, int j, const unsigned char* st, const float* gs) {
    constexpr bool kFull = decltype(full_chunk)::value;
    const int L = kFull ? kC : min(kC, len - (cs_begin + j) * kC), so = (j % 2) * kStgElems;
    uint32_t sa[8][4];
#pragma unroll
    for (int kt = 0; kt < 8; ++kt) {
      sa[kt][0] = pack_bf162(s[8 * kt], s[8 * kt + 1]);
      sa[kt][1] = pack_bf162(s[8 * kt + 2], s[8 * kt + 3]);
      sa[kt][2] = pack_bf162(s[8 * kt + 4], s[8 * kt + 5]);
      sa[kt][3] = pack_bf162(s[8 * kt + 6], s[8 * kt + 7]);
    }
    float pt[32];
    wgmma::fence_operand(sa);
    wgmma::fence();
    // (Descriptors as one base plus constants: the address field is address / 16, so an offset
    // inside the shared memory adds offset / 16. Built per product, ptxas spent ~7 instructions a
    // wgmma (mask, shift, or, four R2UR) in the step's chain.)
    const uint64_t dw = wgmma::desc_sw128(st, 16, 1024);
#pragma unroll
    for (int kt = 0; kt < 8; ++kt)
      wgmma::mma_m64n64k16_rs<0>(pt, sa[kt], dw + ((kt / 4) * (kWgTile / 2) + (kt % 4) * 32) / 16,
                                 kt > 0);
    wgmma::commit();
    if (j >= 2)
      mbar_wait(freed + j % 2, ((j - 2) / 2) & 1);  // staging j % 2 stored by the producer
#pragma unroll
    for (int kt = 0; kt < 8; ++kt) {
      if constexpr (kOut)
        stmatrix_x4(
            sw_row + 2 * so + (kt / 4) * (kWsHOut / 2) + (((2 * (kt % 4) + sw_hl) ^ sw_x) << 4),
            sa[kt]);
      else
        stmatrix_x4(h_st + so + 16 * kt, sa[kt]);
    }
    uint32_t ut[16];
#pragma unroll
    for (int jj = 0; jj < 8; jj += 2) {
      uint32_t r4[4];
      ldmatrix_x4_trans(r4, st + ut_off + 8 * jj * 128);
      ut[2 * jj] = r4[0], ut[2 * jj + 1] = r4[1], ut[2 * jj + 2] = r4[2], ut[2 * jj + 3] = r4[3];
    }
    const float gl = gs[L - 1] * kLog2e;
    float ecol[16];
#pragma unroll
    for (int jj = 0; jj < 8; ++jj) {
      const float2 gg = *reinterpret_cast<const float2*>(gs + 8 * jj + 2 * q);
      ecol[2 * jj] = exp2_approx(fmaf(gg.x, -kLog2e, gl));
      ecol[2 * jj + 1] = exp2_approx(fmaf(gg.y, -kLog2e, gl));
      if (!kFull) {
        if (8 * jj + 2 * q >= L) ecol[2 * jj] = 0.0f;
        if (8 * jj + 2 * q + 1 >= L) ecol[2 * jj + 1] = 0.0f;
      }
    }
    const float decay = exp2_approx(gl);
    wgmma::wait<0>();
    wgmma::fence_operand(pt);
#pragma unroll
    for (int r = 0; r < 64; ++r) s[r] *= decay;
    uint32_t va[4][4], vt[16];
#pragma unroll
    for (int jj = 0; jj < 8; ++jj)
#pragma unroll
      for (int hi = 0; hi < 2; ++hi) {
        const float2 uu = __bfloat1622float2(*reinterpret_cast<const bf162*>(&ut[2 * jj + hi]));
        float a0 = uu.x - pt[4 * jj + 2 * hi], a1 = uu.y - pt[4 * jj + 2 * hi + 1];
        if (!kFull) {
          if (8 * jj + 2 * q >= L) a0 = 0.0f;
          if (8 * jj + 2 * q + 1 >= L) a1 = 0.0f;
        }
        vt[2 * jj + hi] = pack_bf162(a0, a1);
        va[jj / 2][2 * (jj % 2) + hi] = pack_bf162(a0 * ecol[2 * jj], a1 * ecol[2 * jj + 1]);
      }
    wgmma::fence_operand(s);
    wgmma::fence_operand(va);
    wgmma::fence();
    const uint64_t dk = wgmma::desc_sw128(st + kWgTile, kWgTile / 2, 1024);
#pragma unroll
    for (int kt = 0; kt < 4; ++kt)
      wgmma::mma_m64n128k16_rs<1>(s, va[kt], dk + kt * 2048 / 16, true);
    wgmma::commit();
#pragma unroll
    for (int jj = 0; jj < 8; jj += 2) {
      const uint32_t r4[4] = {vt[2 * jj], vt[2 * jj + 1], vt[2 * jj + 2], vt[2 * jj + 3]};
      if constexpr (kOut)
        stmatrix_x4(sw_row + 2 * so + kWsHOut + (((jj + sw_hl) ^ sw_x) << 4), r4);
      else
        stmatrix_x4_trans(v_st + so + 8 * jj * kWsVLd, r4);
    }
    if constexpr (kOut) wgmma::fence_async_smem();  // the staging is read by the output's wgmma
    mbar_arrive(staged + j % 2);  // releases this thread's staging writes to the producer
    wgmma::wait<0>();
    wgmma::fence_operand(s);
  };

  for (int j = 0; j < runs; ++j) {
    const int cs = cs_begin + j;
    if (cs == max(cs_begin, cs_end - 2)) grid_dependents_launch();  // the next piece may place
    mbar_wait(full + j % NW, (j / NW) & 1);
    wgmma::fence_async_smem();
    // (The stage broadcast from lane 0: warp-uniform to the compiler, so that the descriptors of
    // the step's wgmma, derived from it, live in uniform registers.)
    const unsigned char* st = smem_raw + __shfl_sync(0xffffffffu, j % NW, 0) * kStage;
    const int L = min(kC, len - cs * kC);
    const float* gs = gamma_of(j % NW);
    if (L == kC)
      step(std::true_type{}, j, st, gs);
    else
      step(std::false_type{}, j, st, gs);
    mbar_arrive(empty + j % NW);  // every read of buffer j % NW is done (the S update waited)
    const int end = cs * kC + L;
    if (p.every > 0 && end % p.every == 0) {
      float* ck = p.ckpt + (p.first_ckpt[n] + end / p.every - 1) * p.ck_row + hv * p.ck_head;
#pragma unroll
      for (int jj = 0; jj < 16; ++jj)
#pragma unroll
        for (int hi = 0; hi < 2; ++hi)
          *reinterpret_cast<float2*>(ck + (int64_t)(v0 + rv + 8 * hi) * p.ck_v + 8 * jj + 2 * q) =
              make_float2(s[4 * jj + 2 * hi], s[4 * jj + 2 * hi + 1]);
    }
  }
  const bool to_carry = piece && sp.piece_end < nch;
#pragma unroll
  for (int j = 0; j < 16; ++j)
#pragma unroll
    for (int hi = 0; hi < 2; ++hi) {
      const int v = v0 + rv + 8 * hi, d = 8 * j + 2 * q;
      if (to_carry) {
        *reinterpret_cast<float2*>(sp.carry + head + (int64_t)v * kD + d) =
            make_float2(s[4 * j + 2 * hi], s[4 * j + 2 * hi + 1]);
      } else {
        pool[(int64_t)v * p.st_row + d] = from_f32<St>(s[4 * j + 2 * hi]);
        pool[(int64_t)v * p.st_row + d + 1] = from_f32<St>(s[4 * j + 2 * hi + 1]);
      }
    }
#else
  __trap();  // built without sm_90a code: wg_spine_available() is false, the host never launches it
#endif
}

// Pass 2 of the split spine: start[s + 1] = start[s]·M_s + B_s for s = 1..S−2, in f32. Block
// (hv, 32 rows of V), 256 threads: thread (r = tid / 8) owns row r, columns tid % 8 + 8j.
__global__ void __launch_bounds__(256) segment_combine_kernel(const Params p, const SpineSplit sp) {
  __shared__ float X[32][kD + 1];  // start[s] rows (padded: rows differ by one bank)
  __shared__ float Mt[32][kD];     // 32 rows of M_s
  if (p.slots[0] < 0) return;      // N = 1: a padding sequence has no state to combine
  const int hv = blockIdx.x, v0 = blockIdx.y * 32, tid = threadIdx.x, r = tid / 8, c0 = tid % 8;
  const int64_t seg_stride = (int64_t)p.Hv * kD * kD, head = (int64_t)hv * kD * kD;
  for (int e = tid; e < 32 * kD; e += blockDim.x)
    X[e / kD][e % kD] = sp.start[seg_stride + head + (int64_t)(v0 + e / kD) * kD + e % kD];
  __syncthreads();
  for (int s = 1; s + 1 < sp.segments; ++s) {
    const float* M = sp.m + s * seg_stride + head;
    const float* B = sp.b + s * seg_stride + head + (int64_t)(v0 + r) * kD;
    float acc[16];
#pragma unroll
    for (int j = 0; j < 16; ++j) acc[j] = B[c0 + 8 * j];
    for (int k0 = 0; k0 < kD; k0 += 32) {
      for (int e = tid; e < 32 * kD; e += blockDim.x)
        Mt[e / kD][e % kD] = M[(int64_t)(k0 + e / kD) * kD + e % kD];
      __syncthreads();
#pragma unroll 4
      for (int kk = 0; kk < 32; ++kk) {
        const float x = X[r][k0 + kk];
#pragma unroll
        for (int j = 0; j < 16; ++j) acc[j] += x * Mt[kk][c0 + 8 * j];
      }
      __syncthreads();  // Mt is refilled; after the last tile, every read of X is done
    }
    float* out = sp.start + (s + 1) * seg_stride + head + (int64_t)(v0 + r) * kD;
#pragma unroll
    for (int j = 0; j < 16; ++j) {
      X[r][c0 + 8 * j] = acc[j];
      out[c0 + 8 * j] = acc[j];
    }
    __syncthreads();
  }
}

// Stage 1 on tensor cores, one (chunk, hv), 4 warps; warp w owns rows 16w..16w+15 (rows past
// L are zero):
//   γ = cumsum g (warp scan);  G = K̂ K̂ᵀ (mma);  A_ij = β_i G_ij e^{γ_i−γ_j} (i > j);
//   T = (I + A)^{-1} (f32): warp b inverts diagonal block b (lane j: column 16b + j, forward
//   substitution), then block rows 1..3 in turn: R = −A[rows, :16b] T[:16b, :16b],
//   T[rows, :16b] = T_bb R;
//   W = (T·diag(β e^γ)) K̂,  U = (T·diag(β)) V (mma, bf16 T; K̂ and V fragments by
//   ldmatrix.trans) to the workspace in bf16; K̂ in bf16 (by the blocks with hv % ratio = 0).
// Shared: Kb, Vb [64][136] bf16; A, R [16][48], T [64][65] f32 (Tb, Tu [64][72] bf16 reuse A and R
// once T is known); β, γ, β e^γ: 71 936 bytes, three blocks per SM. MMA FLOPs per chunk:
// 2·64·64·128·3 = 3.1 MFLOP.
constexpr int kWuSmem = 2 * kC * kWP * 2 + (2 * kC * (kC + 1) + 16 * 48 + 3 * kC) * 4;
static_assert(2 * kC * kTP * 2 <= (kC * (kC + 1) + 16 * 48) * 4, "Tb, Tu must fit in A and R");

// kFastInverse (the `cuda_tc_v3` variant): the same inverse with compile-time loops, so that the
// shared-memory loads of each sum are issued together instead of one dependent iteration at a
// time: the diagonal block's column is kept in registers (16 values, fully unrolled), and the
// block rows' sums run over all m < r0 (r0 = 16, 32, 48 unrolled; the added T entries above the
// diagonal are exact zeros, before the first nonzero term in the first sum and after the last
// in the second, so the results are the same up to the sign of an exact zero).
//
// kWriteQ (the `cuda_tc_v4_fused` variant, whose spine computes the output): the blocks that write
// K̂ also write Q̂ = q / sqrt(‖q‖² + 1e-6) (or q without l2norm) in bf16 to p.qn [T, Hk, K], in two
// groups of 8 rows after K̂ and V (the same rounding as stage 3's Q̂).
template <class In, bool kFastInverse = false, bool kWriteQ = false>
__global__ void __launch_bounds__(128, 3) wu_tc_kernel(const Params p) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* Kb = reinterpret_cast<bf16*>(smem_raw);         // [64][136]  K̂ [j][d]
  bf16* Vb = Kb + kC * kWP;                             // [64][136]  V [j][v]
  float* Af = reinterpret_cast<float*>(Vb + kC * kWP);  // [64][65]
  float* Rs = Af + kC * (kC + 1);                       // [16][16b]  block row right-hand side
  float* Tm = Rs + 16 * 48;                             // [64][65]
  float* bet = Tm + kC * (kC + 1);                      // [64]
  float* gam = bet + kC;                                // [64]
  float* beg = gam + kC;                                // [64]
  bf16* Tb = reinterpret_cast<bf16*>(Af);               // [64][72]   T diag(βe^γ), after T
  bf16* Tu = Tb + kC * kTP;                             // [64][72]   T diag(β), after T
  constexpr int ld = kC + 1;
  const int c = p.chunk_base + blockIdx.x;
  if (c >= p.first_chunk[p.N]) return;
  const int n = chunk_sequence(p.first_chunk, p.N, c);
  if (p.slots[n * p.slots_s] < 0) return;
  const int t0 = p.cu[n] + (c - p.first_chunk[n]) * kC;
  const int L = min(kC, p.cu[n + 1] - t0);
  const int hv = blockIdx.y, hk = hv / p.ratio;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, q = lane % 4;
  const In* kin = static_cast<const In*>(p.k);
  const In* vin = static_cast<const In*>(p.v);
  bf16* kn = static_cast<bf16*>(p.kn);
  const bool write_kn = hv % p.ratio == 0;
  // γ inputs first (warp 0: tokens 2·lane, 2·lane + 1), so their loads overlap the rows'.
  const int i0 = 2 * lane, i1 = i0 + 1;
  ChunkGate gate;
  if (warp == 0) gate = chunk_gate_load(p, t0, L, hv, lane);
  const float g0 = gate.g0, g1 = gate.g1, bt0 = gate.b0, bt1 = gate.b1;
  // K̂ and V rows (zeros past L): warp w takes rows w + 4r, lane l columns 4l..4l+3; each group
  // of 8 rows is loaded before any of it is used (one global round trip per group).
  for (int grp = 0; grp < 2; ++grp) {
    float xk[8][4], xv[8][4];
#pragma unroll
    for (int r = 0; r < 8; ++r) {
      const int i = warp + 4 * (8 * grp + r);
      const int64_t t = t0 + i;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int d = 4 * lane + j;
        xk[r][j] = i < L ? to_f32(kin[t * p.k_t + hk * p.k_h + d]) : 0.0f;
        xv[r][j] = i < L ? to_f32(vin[t * p.v_t + hv * p.v_h + d]) : 0.0f;
      }
    }
#pragma unroll
    for (int r = 0; r < 8; ++r) {
      const int i = warp + 4 * (8 * grp + r);
      const int64_t t = t0 + i;
      float kk = 0.0f;
#pragma unroll
      for (int j = 0; j < 4; ++j) kk += xk[r][j] * xk[r][j];
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) kk += __shfl_xor_sync(0xffffffffu, kk, o);
      const float ik = p.l2norm ? 1.0f / sqrtf(kk + 1e-6f) : 1.0f;
      bf16 kb[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) kb[j] = __float2bfloat16_rn(xk[r][j] * ik);
      bf162* krow = reinterpret_cast<bf162*>(Kb + i * kWP + 4 * lane);
      bf162* vrow = reinterpret_cast<bf162*>(Vb + i * kWP + 4 * lane);
      krow[0] = __halves2bfloat162(kb[0], kb[1]);
      krow[1] = __halves2bfloat162(kb[2], kb[3]);
      vrow[0] = __floats2bfloat162_rn(xv[r][0], xv[r][1]);
      vrow[1] = __floats2bfloat162_rn(xv[r][2], xv[r][3]);
      if (write_kn && i < L) {
        bf162* dst = reinterpret_cast<bf162*>(kn + (t * p.Hk + hk) * kD + 4 * lane);
        dst[0] = __halves2bfloat162(kb[0], kb[1]);
        dst[1] = __halves2bfloat162(kb[2], kb[3]);
      }
    }
  }
  if constexpr (kWriteQ) {
    if (write_kn) {
      const In* qin = static_cast<const In*>(p.q);
      bf16* qn = static_cast<bf16*>(p.qn);
      for (int grp = 0; grp < 2; ++grp) {
        float xq[8][4];
#pragma unroll
        for (int r = 0; r < 8; ++r) {
          const int i = warp + 4 * (8 * grp + r);
          const int64_t t = t0 + i;
#pragma unroll
          for (int j = 0; j < 4; ++j)
            xq[r][j] = i < L ? to_f32(qin[t * p.q_t + hk * p.q_h + 4 * lane + j]) : 0.0f;
        }
#pragma unroll
        for (int r = 0; r < 8; ++r) {
          const int i = warp + 4 * (8 * grp + r);
          float qq = 0.0f;
#pragma unroll
          for (int j = 0; j < 4; ++j) qq += xq[r][j] * xq[r][j];
#pragma unroll
          for (int o = 16; o > 0; o >>= 1) qq += __shfl_xor_sync(0xffffffffu, qq, o);
          const float iq = p.l2norm ? 1.0f / sqrtf(qq + 1e-6f) : 1.0f;
          if (i < L) {
            bf162* dst =
                reinterpret_cast<bf162*>(qn + ((t0 + i) * (int64_t)p.Hk + hk) * kD + 4 * lane);
            dst[0] = __floats2bfloat162_rn(xq[r][0] * iq, xq[r][1] * iq);
            dst[1] = __floats2bfloat162_rn(xq[r][2] * iq, xq[r][3] * iq);
          }
        }
      }
    }
  }
  if (warp == 0) {  // γ: inclusive scan of the pair sums over the lanes
    const float cum = warp_inclusive_scan(g0 + g1, lane);
    const float c1 = cum, c0 = cum - g1;
    gam[i0] = c0, gam[i1] = c1;
    bet[i0] = bt0, bet[i1] = bt1;
    beg[i0] = bt0 * expf(c0), beg[i1] = bt1 * expf(c1);
    if (i0 < L) p.gamma[(int64_t)(t0 + i0) * p.Hv + hv] = c0;
    if (i1 < L) p.gamma[(int64_t)(t0 + i1) * p.Hv + hv] = c1;
  }
  for (int e = tid; e < kC * kC; e += blockDim.x)
    Tm[(e / kC) * ld + e % kC] = e / kC == e % kC ? 1.0f : 0.0f;
  __syncthreads();
  {  // A rows 16·warp..
    float acc[8][4] = {};
#pragma unroll
    for (int ks = 0; ks < kD / 16; ++ks) {
      uint32_t a[4];
      load_a(a, Kb, kWP, 16 * warp, 16 * ks, g, q);
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        uint32_t b[2];
        load_b(b, Kb, kWP, nt * 8, 16 * ks, g, q);
        mma_bf16(acc[nt], a, b);
      }
    }
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int i = 16 * warp + g + 8 * (r / 2), j = nt * 8 + 2 * q + r % 2;
        Af[i * ld + j] = j < i && i < L ? bet[i] * acc[nt][r] * expf(gam[i] - gam[j]) : 0.0f;
      }
  }
  __syncthreads();
  // Diagonal block of warp w: lane j < 16 owns column col = 16w + j; its entries T_m,col for
  // m <= col are the identity's, the rest it writes itself row by row (no barrier needed).
  if constexpr (kFastInverse) {
    if (lane < 16) {  // t[ii] = T[b0 + ii][b0 + lane]: 0 above the diagonal, 1 on it
      const int b0 = 16 * warp;
      float t[16];
#pragma unroll
      for (int ii = 0; ii < 16; ++ii) {
        float sum = 0.0f;
#pragma unroll
        for (int mm = 0; mm < ii; ++mm) sum += Af[(b0 + ii) * ld + b0 + mm] * t[mm];
        t[ii] = ii > lane ? -sum : (ii == lane ? 1.0f : 0.0f);
      }
#pragma unroll
      for (int ii = 1; ii < 16; ++ii)
        if (ii > lane) Tm[(b0 + ii) * ld + b0 + lane] = t[ii];
    }
    __syncthreads();
    // Block rows 1..3 as below, r0 a compile-time constant in each.
#pragma unroll
    for (int rb = 1; rb < kC / 16; ++rb) {
      const int r0 = 16 * rb;
#pragma unroll 1
      for (int e = tid; e < 16 * r0; e += blockDim.x) {
        const int i = r0 + e / r0, j = e % r0;
        float sum = 0.0f;
#pragma unroll
        for (int m = 0; m < r0; ++m) sum += Af[i * ld + m] * Tm[m * ld + j];  // T_mj = 0, m < j
        Rs[e] = -sum;
      }
      __syncthreads();
#pragma unroll 1
      for (int e = tid; e < 16 * r0; e += blockDim.x) {
        const int ii = e / r0, i = r0 + ii, j = e % r0;
        float sum = 0.0f;
#pragma unroll
        for (int mm = 0; mm < 16; ++mm)  // T[i][r0 + mm] = 0 for mm > ii
          sum += Tm[i * ld + r0 + mm] * Rs[mm * r0 + j];
        Tm[i * ld + j] = sum;
      }
      __syncthreads();
    }
  } else {
    if (lane < 16) {
      const int b0 = 16 * warp, col = b0 + lane;
      for (int i = b0 + 1; i < b0 + 16; ++i) {
        float sum = 0.0f;
        for (int m = b0; m < i; ++m) sum += Af[i * ld + m] * Tm[m * ld + col];
        if (i > col) Tm[i * ld + col] = -sum;
      }
    }
    __syncthreads();
    // Block rows 1..3, rows r0..r0+15 and columns j < r0:
    //   (I + A_bb) T[rows, j] = −A[rows, :r0] T[:r0, j].
    for (int r0 = 16; r0 < kC; r0 += 16) {
      for (int e = tid; e < 16 * r0; e += blockDim.x) {
        const int i = r0 + e / r0, j = e % r0;
        float sum = 0.0f;
        for (int m = j; m < r0; ++m) sum += Af[i * ld + m] * Tm[m * ld + j];
        Rs[e] = -sum;
      }
      __syncthreads();
      for (int e = tid; e < 16 * r0; e += blockDim.x) {
        const int ii = e / r0, i = r0 + ii, j = e % r0;
        float sum = 0.0f;
        for (int mm = 0; mm <= ii; ++mm) sum += Tm[i * ld + r0 + mm] * Rs[mm * r0 + j];
        Tm[i * ld + j] = sum;
      }
      __syncthreads();
    }
  }
  // Tb, Tu over A and R (dead since the last barrier).
  for (int e = tid; e < kC * kC; e += blockDim.x) {
    const int i = e / kC, j = e % kC;
    const float t = Tm[i * ld + j];
    Tb[i * kTP + j] = __float2bfloat16_rn(t * beg[j]);
    Tu[i * kTP + j] = __float2bfloat16_rn(t * bet[j]);
  }
  __syncthreads();
  bf16* w = static_cast<bf16*>(p.w);
  bf16* u = static_cast<bf16*>(p.u);
#pragma unroll
  for (int pass = 0; pass < 2; ++pass) {  // 0: W = Tb K̂, 1: U = Tu V (B tiles stored [j][d])
    const bf16* As = pass == 0 ? Tb : Tu;
    const bf16* Bs = pass == 0 ? Kb : Vb;
    bf16* dst = pass == 0 ? w : u;
    float acc[16][4] = {};
#pragma unroll
    for (int ks = 0; ks < kC / 16; ++ks) {
      uint32_t a[4];
      load_a(a, As, kTP, 16 * warp, 16 * ks, g, q);
#pragma unroll
      for (int np = 0; np < 8; ++np) {
        uint32_t b0[2], b1[2];
        load_b2_trans(b0, b1, Bs, kWP, 16 * ks, 16 * np, lane);
        mma_bf16(acc[2 * np], a, b0);
        mma_bf16(acc[2 * np + 1], a, b1);
      }
    }
#pragma unroll
    for (int nt = 0; nt < 16; ++nt)
#pragma unroll
      for (int r = 0; r < 4; r += 2) {
        const int i = 16 * warp + g + 8 * (r / 2), d = nt * 8 + 2 * q;
        if (i < L)
          *reinterpret_cast<bf162*>(dst + ((int64_t)(t0 + i) * p.Hv + hv) * kD + d) =
              __floats2bfloat162_rn(acc[nt][r], acc[nt][r + 1]);
      }
  }
}

// Stage 1, v5 (`cuda_tc_v5`): the same math as wu_tc_kernel with far fewer instructions per block,
// which is what bounded the old kernel (three 4-warp blocks per SM, ~5000 instructions per warp,
// most of them the inverse's scalar f32 shared-memory sums and 2-byte loads):
//  - rows of k, v (and q for kWriteQ) by 16-byte loads (kVec: bf16 inputs with 16-byte aligned
//    rows; else 8 scalar loads per row piece), all 16 of a thread issued before any is used (one
//    global round trip); thread t takes rows t/16 + 8r (r = 0..7), columns 8(t%16)..+7; the L2
//    norm is a 16-lane shuffle sum;
//  - γ scaled by log2 e once, so every decay is one exp2f;
//  - T = (I + A)^{-1} by block forward substitution on tensor cores: each warp inverts its 16x16
//    diagonal block in registers (lane j: column j, as before), then block rows r = 1..3 in turn:
//    warp c < r computes T_rc = −T_rr Σ_{m=c}^{r−1} A_rm T_mc as Y_cᵀ = (Σ T_mcᵀ A_rmᵀ) T_rrᵀ (the
//    first product's accumulators are the second's A operand, no shared round trip), each product
//    in split bf16 (x = hi + lo, hi·hi + hi·lo + lo·hi: ~2^-16 relative, so T keeps f32-like
//    accuracy before its one rounding to bf16 in Tb / Tu); no identity fill (upper blocks are
//    zeroed when Tb / Tu are formed);
//  - W and U staged through the (then dead) K̂ and V tiles and written with 16-byte stores.
// Shared: Kb, Vb [64][136] bf16; A [64][72] f32 (Tb, Tu [64][72] bf16 over it once T is known);
// T [64][68] f32; β, γ·log2e, β e^γ [64]: 71 424 bytes, three blocks per SM.
constexpr int kAP = kC + 8;  // f32 row of A: float2 fragment loads conflict-free
constexpr int kTQ = kC + 4;  // f32 row of T: scalar fragment loads conflict-free
constexpr int kWu5Smem = 2 * kC * kWP * 2 + kC * kAP * 4 + kC * kTQ * 4 + 3 * kC * 4;
static_assert(2 * kC * kTP * 2 <= kC * kAP * 4, "Tb, Tu must fit in A");
static_assert(3 * (kWu5Smem + 1024) <= 228 * 1024, "stage 1 v5: three blocks per SM");
// v7 with 16-byte rows: T [64][68] f32 over the V tile (same bytes; V is loaded into it only once
// T is dead): 54 016 bytes, four blocks per SM (and at most 128 registers).
constexpr int kWu7Smem = 2 * kC * kWP * 2 + kC * kAP * 4 + 3 * kC * 4;
static_assert(kC * kTQ * 4 == kC * kWP * 2, "stage 1 v7: T fits the V tile exactly");
static_assert(4 * (kWu7Smem + 1024) <= 228 * 1024, "stage 1 v7: four blocks per SM");

// x0, x1 as bf16x2 hi and lo registers with x ≈ hi + lo (lo = bf16(x − hi)).
__device__ __forceinline__ void split_bf162(float x0, float x1, uint32_t& hi, uint32_t& lo) {
  const bf162 h = __floats2bfloat162_rn(x0, x1);
  const float2 hf = __bfloat1622float2(h);
  const bf162 l = __floats2bfloat162_rn(x0 - hf.x, x1 - hf.y);
  hi = *reinterpret_cast<const uint32_t*>(&h);
  lo = *reinterpret_cast<const uint32_t*>(&l);
}
// c += a·b with both split: a_lo·b_hi + a_hi·b_lo + a_hi·b_hi (small terms first).
__device__ __forceinline__ void mma_split(float (&c)[4], const uint32_t (&ah)[4],
                                          const uint32_t (&al)[4], const uint32_t (&bh)[2],
                                          const uint32_t (&bl)[2]) {
  mma_bf16(c, al, bh);
  mma_bf16(c, ah, bl);
  mma_bf16(c, ah, bh);
}
// Eight floats as eight bf16 (16 bytes).
__device__ __forceinline__ uint4 pack8_bf16(const float (&x)[8], float s) {
  uint4 r;
  r.x = pack_bf162(x[0] * s, x[1] * s);
  r.y = pack_bf162(x[2] * s, x[3] * s);
  r.z = pack_bf162(x[4] * s, x[5] * s);
  r.w = pack_bf162(x[6] * s, x[7] * s);
  return r;
}
__device__ __forceinline__ void unpack8_bf16(float (&x)[8], const uint4& r) {
  const uint32_t w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const float2 f = __bfloat1622float2(*reinterpret_cast<const bf162*>(&w[j]));
    x[2 * j] = f.x, x[2 * j + 1] = f.y;
  }
}
// Sum over the 16 lanes of a half warp (lanes 0-15 and 16-31 separately); all 32 lanes call it.
__device__ __forceinline__ float half_warp_sum(float x) {
#pragma unroll
  for (int o = 8; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

// acc [16 rows][64 j] = X K̂ᵀ over the column tiles np <= last (16 keys each, two n-tiles), X's
// rows from a [64][136] bf16 tile by ldmatrix (x_row: this lane's row 16·block + (lane & 15),
// column 8·(lane >> 4)), K̂ [j][d] the B operand (k_row: row (lane & 7) + 8·(lane >> 4), column
// 8·((lane >> 3) & 1)); stage 1 v7's lower-triangle products (A with X = K̂, P̃ with X = Q̂).
__device__ __forceinline__ void tril_products(float (&acc)[8][4], const bf16* x_row,
                                              const bf16* k_row, int last) {
#pragma unroll
  for (int ks = 0; ks < kD / 16; ++ks) {
    uint32_t a[4];
    ldmatrix_x4(a, x_row + 16 * ks);
#pragma unroll
    for (int np = 0; np < 4; ++np)
      if (np <= last) {
        uint32_t b[4];
        ldmatrix_x4(b, k_row + 16 * np * kWP + 16 * ks);
        mma_bf16(acc[2 * np], a, b[0], b[1]);
        mma_bf16(acc[2 * np + 1], a, b[2], b[3]);
      }
  }
}

// T = (I + A)^{-1} (stage 1 v5 / v7 and the pair kernel), as the comment above wu_tc5_kernel
// says: A [64][72] f32 (blocks below the diagonal filled), T [64][68] f32 (blocks on and below it
// written). Warp w (of the 4 that own A and T) first its diagonal block by lanes j < 16 (column
// 16w + j: t[ii] = T[16w + ii][16w + j], 0 above the diagonal, 1 on it; all 16 entries written),
// then block rows rb = 1..3 in turn, each after a block-wide barrier: every thread of the block
// calls it, and the caller's barrier ends it.
__device__ __forceinline__ void solve_t(const float* Af, float* Tm, int warp, int lane) {
  const int g = lane / 4, q = lane % 4;
  if (lane < 16) {
    const int b0 = 16 * warp;
    float t[16];
#pragma unroll
    for (int ii = 0; ii < 16; ++ii) {
      float sum = 0.0f;
#pragma unroll
      for (int mm = 0; mm < ii; ++mm) sum += Af[(b0 + ii) * kAP + b0 + mm] * t[mm];
      t[ii] = ii > lane ? -sum : (ii == lane ? 1.0f : 0.0f);
    }
#pragma unroll
    for (int ii = 0; ii < 16; ++ii) Tm[(b0 + ii) * kTQ + b0 + lane] = t[ii];
  }
  // Block rows rb = 1..3: warp cb < rb computes T[rb][cb] (16 x 16 block at rows r0 = 16rb,
  // columns c0 = 16cb). Y_cᵀ[c][i] = Σ_m Xᵀ.. as above wu_tc5_kernel; fragments (g = lane/4,
  // q = lane%4): first A operand a(c, m) = T[m0 + m][c0 + c], first B b(m, i) = A[r0 + i][m0 + m]
  // (float2 of an A row), second A = the first's accumulators (m16n8 C layout of two n-tiles =
  // m16k16 A layout), second B b(i', i) = T[r0 + i][r0 + i'] (float2 of a T row).
#pragma unroll
  for (int rb = 1; rb < kC / 16; ++rb) {
    __syncthreads();  // T blocks of rows < rb and the diagonal blocks written
    if (warp < rb) {
      const int r0 = 16 * rb, c0 = 16 * warp;
      float xt[2][4] = {};
      for (int mb = warp; mb < rb; ++mb) {
        const int m0 = 16 * mb;
        const float* tc = Tm + c0 + g;
        uint32_t ah[4], al[4];
        split_bf162(tc[(m0 + 2 * q) * kTQ], tc[(m0 + 2 * q + 1) * kTQ], ah[0], al[0]);
        split_bf162(tc[(m0 + 2 * q) * kTQ + 8], tc[(m0 + 2 * q + 1) * kTQ + 8], ah[1], al[1]);
        split_bf162(tc[(m0 + 2 * q + 8) * kTQ], tc[(m0 + 2 * q + 9) * kTQ], ah[2], al[2]);
        split_bf162(tc[(m0 + 2 * q + 8) * kTQ + 8], tc[(m0 + 2 * q + 9) * kTQ + 8], ah[3], al[3]);
#pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
          const float* ar = Af + (r0 + nt * 8 + g) * kAP + m0 + 2 * q;
          const float2 x0 = *reinterpret_cast<const float2*>(ar);
          const float2 x1 = *reinterpret_cast<const float2*>(ar + 8);
          uint32_t bh[2], bl[2];
          split_bf162(x0.x, x0.y, bh[0], bl[0]);
          split_bf162(x1.x, x1.y, bh[1], bl[1]);
          mma_split(xt[nt], ah, al, bh, bl);
        }
      }
      uint32_t xh[4], xl[4];
      split_bf162(xt[0][0], xt[0][1], xh[0], xl[0]);
      split_bf162(xt[0][2], xt[0][3], xh[1], xl[1]);
      split_bf162(xt[1][0], xt[1][1], xh[2], xl[2]);
      split_bf162(xt[1][2], xt[1][3], xh[3], xl[3]);
      float yt[2][4] = {};
#pragma unroll
      for (int nt = 0; nt < 2; ++nt) {
        const float* tr = Tm + (r0 + nt * 8 + g) * kTQ + r0 + 2 * q;
        const float2 x0 = *reinterpret_cast<const float2*>(tr);
        const float2 x1 = *reinterpret_cast<const float2*>(tr + 8);
        uint32_t bh[2], bl[2];
        split_bf162(x0.x, x0.y, bh[0], bl[0]);
        split_bf162(x1.x, x1.y, bh[1], bl[1]);
        mma_split(yt[nt], xh, xl, bh, bl);
      }
#pragma unroll
      for (int nt = 0; nt < 2; ++nt)
#pragma unroll
        for (int r = 0; r < 4; ++r) {
          const int cc = g + 8 * (r / 2), i = nt * 8 + 2 * q + r % 2;
          Tm[(r0 + i) * kTQ + c0 + cc] = -yt[nt][r];
        }
    }
  }
}

// Tb = T diag(β e^γ), Tu = T diag(β) in bf16 [64][72] (stage 1 v7 and the pair kernel), the
// blocks on and below the diagonal (above it, where T was not filled, zeros by a select, no
// branch): thread (warp, lane) of the 4 warps takes columns j = 2·lane, j + 1 of rows warp + 4e.
__device__ __forceinline__ void form_tb_tu(const float* Tm, const float* beg, const float* bet,
                                           bf16* Tb, bf16* Tu, int warp, int lane) {
  const int j = 2 * lane;
  const float bg0 = beg[j], bg1 = beg[j + 1], bu0 = bet[j], bu1 = bet[j + 1];
#pragma unroll
  for (int e = 0; e < kC / 4; ++e) {
    const int i = warp + 4 * e;  // block row i / 16 = e / 4
    const bool lower = j / 16 <= e / 4;
    const float2 t = *reinterpret_cast<const float2*>(Tm + i * kTQ + j);
    const float t0v = lower ? t.x : 0.0f, t1v = lower ? t.y : 0.0f;
    *reinterpret_cast<uint32_t*>(Tb + i * kTP + j) = pack_bf162(t0v * bg0, t1v * bg1);
    *reinterpret_cast<uint32_t*>(Tu + i * kTP + j) = pack_bf162(t0v * bu0, t1v * bu1);
  }
}

// A rows 16·warp.. of the block's 4 warps from K̂K̂ᵀ's lower column tiles (acc: tril_products
// with last = warp): A_ij = β_i (k̂_i·k̂_j) e^{γ_i−γ_j} for j < i < L, else 0 (gl: γ log2 e), into
// A [64][72] f32; the column tiles past the warp's diagonal are not written (never read).
__device__ __forceinline__ void store_a_rows(const float (&acc)[8][4], float* A, const float* gl,
                                             const float* bet, int warp, int lane, int L) {
  const int ia = 16 * warp + lane / 4, ib = ia + 8, q = lane % 4;
  const float gia = gl[ia], gib = gl[ib], bia = bet[ia], bib = bet[ib];
#pragma unroll
  for (int nt = 0; nt < 8; ++nt)
    if (nt / 2 <= warp) {
      const int j = nt * 8 + 2 * q;
      const float2 gj = *reinterpret_cast<const float2*>(gl + j);
      float2 xa, xb;
      xa.x = j < ia && ia < L ? bia * acc[nt][0] * exp2_approx(gia - gj.x) : 0.0f;
      xa.y = j + 1 < ia && ia < L ? bia * acc[nt][1] * exp2_approx(gia - gj.y) : 0.0f;
      xb.x = j < ib && ib < L ? bib * acc[nt][2] * exp2_approx(gib - gj.x) : 0.0f;
      xb.y = j + 1 < ib && ib < L ? bib * acc[nt][3] * exp2_approx(gib - gj.y) : 0.0f;
      *reinterpret_cast<float2*>(A + ia * kAP + j) = xa;
      *reinterpret_cast<float2*>(A + ib * kAP + j) = xb;
    }
}

// kVec: In is bf16 and every row piece used here is 16-byte aligned (host check: vec_inputs).
// kV7 (`cuda_tc_v7`): the same math with fewer instructions per warp (see the v7 notes below the
// kernel's comment block: raw V stores, rsqrtf, ldmatrix fragments, lower-triangle-only Gram and
// W / U products, Tb / Tu with per-thread fixed columns).
// kWriteP (the warpgroup spine's fused output; v7 with 16-byte rows and kWriteQ): every block also
// loads Q̂ into the V tile (dead until T) and writes P̃ = tril(Q̂K̂ᵀ ⊙ e^{γ_i−γ_j}) (rows i < L, bf16)
// to p.pt, so that the spine's producer does not compute it (see ws_output).
template <class In, bool kVec, bool kWriteQ = false, bool kV7 = false, bool kWriteP = false>
__global__ void __launch_bounds__(128, (kV7 && kVec) ? 4 : 3) wu_tc5_kernel(const Params p) {
  static_assert(!kVec || std::is_same_v<In, bf16>, "16-byte rows: bf16 inputs only");
  static_assert(!kWriteP || (kVec && kV7 && kWriteQ), "P̃: v7 with 16-byte rows and Q̂ only");
  // kLate (v7 with 16-byte rows): V rows loaded only after T is dead, T over the V tile
  // (kWu7Smem, four blocks per SM); else V first and T after A (kWu5Smem).
  constexpr bool kLate = kV7 && kVec;
  // The pipeline's stage-1 pieces after the first are launched programmatically (no piece reads
  // another's results): the next piece's blocks may be placed once this one's have all started,
  // into the slots its last wave leaves.
  grid_dependents_launch();
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* Kb = reinterpret_cast<bf16*>(smem_raw);         // [64][136] K̂ [j][d], then W rows
  bf16* Vb = Kb + kC * kWP;                             // [64][136] V [j][v], then U rows
  float* Af = reinterpret_cast<float*>(Vb + kC * kWP);  // [64][72]  A
  float* Tm = kLate ? reinterpret_cast<float*>(Vb) : Af + kC * kAP;  // [64][68] T (lower blocks)
  float* bet = kLate ? Af + kC * kAP : Tm + kC * kTQ;                // [64] β
  float* gl = bet + kC;                                              // [64] γ log2 e
  float* beg = gl + kC;                                              // [64] β e^γ
  bf16* Tb = reinterpret_cast<bf16*>(Af);  // [64][72] T diag(βe^γ), after T
  bf16* Tu = Tb + kC * kTP;                // [64][72] T diag(β), after T
  const int c = p.chunk_base + blockIdx.x;
  if (c >= p.first_chunk[p.N]) return;
  const int n = chunk_sequence(p.first_chunk, p.N, c);
  if (p.slots[n * p.slots_s] < 0) return;
  const int t0 = p.cu[n] + (c - p.first_chunk[n]) * kC;
  const int L = min(kC, p.cu[n + 1] - t0);
  const int hv = blockIdx.y, hk = hv / p.ratio;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, q = lane % 4;
  const In* kin = static_cast<const In*>(p.k);
  const In* vin = static_cast<const In*>(p.v);
  bf16* kn = static_cast<bf16*>(p.kn);
  const bool write_kn = hv % p.ratio == 0;
  // γ inputs first, so that their loads overlap the rows'.
  ChunkGate gate;
  if (warp == 0) gate = chunk_gate_load(p, t0, L, hv, lane);
  // Row pieces: rows rr + 8r, columns c8..c8+7 (zeros past L).
  const int rr = tid / 16, c8 = 8 * (tid % 16);
  // This thread's 8 row pieces of a [T, ., 128] input from row t0 + rr (`first`, column c8 added),
  // rows 8 apart (`t_stride` elements a row), zeros past L; 16-byte loads, all issued before use.
  auto load_rows8 = [&](const In* first, int64_t t_stride, uint4(&dst)[8]) {
    const int64_t step = 8 * t_stride;
#pragma unroll
    for (int r = 0; r < 8; ++r) {
      dst[r] = make_uint4(0, 0, 0, 0);
      if (rr + 8 * r < L) dst[r] = *reinterpret_cast<const uint4*>(first);
      first += step;
    }
  };
  // K̂ = k / sqrt(‖k‖² + 1e-6) (or k) and V into shared memory; K̂ to the workspace.
  auto put_kv = [&](int i, const float(&xk)[8], const float(&xv)[8]) {
    float kk = 0.0f;
#pragma unroll
    for (int j = 0; j < 8; ++j) kk += xk[j] * xk[j];
    kk = half_warp_sum(kk);
    float ik = 1.0f;
    if constexpr (kV7)
      ik = p.l2norm ? rsqrtf(kk + 1e-6f) : 1.0f;
    else
      ik = p.l2norm ? 1.0f / sqrtf(kk + 1e-6f) : 1.0f;
    const uint4 kp = pack8_bf16(xk, ik);
    *reinterpret_cast<uint4*>(Kb + i * kWP + c8) = kp;
    *reinterpret_cast<uint4*>(Vb + i * kWP + c8) = pack8_bf16(xv, 1.0f);
    if (write_kn && i < L)
      *reinterpret_cast<uint4*>(kn + ((int64_t)(t0 + i) * p.Hk + hk) * kD + c8) = kp;
  };
  auto put_q = [&](int i, const float(&xq)[8]) {
    float qq = 0.0f;
#pragma unroll
    for (int j = 0; j < 8; ++j) qq += xq[j] * xq[j];
    qq = half_warp_sum(qq);
    float iq = 1.0f;
    if constexpr (kV7)
      iq = p.l2norm ? rsqrtf(qq + 1e-6f) : 1.0f;
    else
      iq = p.l2norm ? 1.0f / sqrtf(qq + 1e-6f) : 1.0f;
    if (i < L)
      *reinterpret_cast<uint4*>(static_cast<bf16*>(p.qn) + ((int64_t)(t0 + i) * p.Hk + hk) * kD +
                                c8) = pack8_bf16(xq, iq);
  };
  const In* qin = static_cast<const In*>(p.q);
  if constexpr (kVec && kV7) {  // as below, row addresses by pointer steps of 8 rows (no 64-bit
                                // multiplies per row), V stored as loaded, 1/‖k‖ by rsqrtf
    // (V rows come after T: kLate.)
    uint4 rk[8];
    load_rows8(kin + (int64_t)(t0 + rr) * p.k_t + hk * p.k_h + c8, p.k_t, rk);
    // K̂ rows rr + 8r of the workspace [T, Hk, K]: 8·Hk·K elements (Hk·K 16-byte units) apart;
    // addressed as uint4 so that the stores stay 16-byte (STG.128).
    uint4* const knr = reinterpret_cast<uint4*>(kn + ((int64_t)(t0 + rr) * p.Hk + hk) * kD + c8);
    const int kn_step = p.Hk * kD;
#pragma unroll
    for (int r = 0; r < 8; ++r) {
      const int i = rr + 8 * r;
      float xk[8];
      unpack8_bf16(xk, rk[r]);
      float kk = 0.0f;
#pragma unroll
      for (int j = 0; j < 8; ++j) kk += xk[j] * xk[j];
      kk = half_warp_sum(kk);
      const float ik = p.l2norm ? rsqrtf(kk + 1e-6f) : 1.0f;
      const uint4 kp = pack8_bf16(xk, ik);
      *reinterpret_cast<uint4*>(Kb + i * kWP + c8) = kp;
      if (write_kn && i < L) knr[r * kn_step] = kp;
    }
    if constexpr (kWriteQ) {
      if (kWriteP || write_kn) {  // kWriteP: every block, for P̃ (Q̂ to p.qn only where write_kn)
        uint4 rq[8];
        load_rows8(qin + (int64_t)(t0 + rr) * p.q_t + hk * p.q_h + c8, p.q_t, rq);
        uint4* const qnr = reinterpret_cast<uint4*>(static_cast<bf16*>(p.qn) +
                                                    ((int64_t)(t0 + rr) * p.Hk + hk) * kD + c8);
#pragma unroll
        for (int r = 0; r < 8; ++r) {
          float xq[8];
          unpack8_bf16(xq, rq[r]);
          float qq = 0.0f;
#pragma unroll
          for (int j = 0; j < 8; ++j) qq += xq[j] * xq[j];
          qq = half_warp_sum(qq);
          const float iq = p.l2norm ? rsqrtf(qq + 1e-6f) : 1.0f;
          const uint4 qp = pack8_bf16(xq, iq);
          if ((!kWriteP || write_kn) && rr + 8 * r < L) qnr[r * kn_step] = qp;
          if constexpr (kWriteP) *reinterpret_cast<uint4*>(Vb + (rr + 8 * r) * kWP + c8) = qp;
        }
      }
    }
  } else if constexpr (kVec) {
    uint4 rk[8], rv[8];
#pragma unroll
    for (int r = 0; r < 8; ++r) {
      const int i = rr + 8 * r;
      const int64_t t = t0 + i;
      rk[r] = make_uint4(0, 0, 0, 0), rv[r] = make_uint4(0, 0, 0, 0);
      if (i < L) {
        rk[r] = *reinterpret_cast<const uint4*>(kin + t * p.k_t + hk * p.k_h + c8);
        rv[r] = *reinterpret_cast<const uint4*>(vin + t * p.v_t + hv * p.v_h + c8);
      }
    }
#pragma unroll
    for (int r = 0; r < 8; ++r) {
      float xk[8], xv[8];
      unpack8_bf16(xk, rk[r]);
      unpack8_bf16(xv, rv[r]);
      put_kv(rr + 8 * r, xk, xv);
    }
    if constexpr (kWriteQ) {
      if (write_kn) {
        uint4 rq[8];
#pragma unroll
        for (int r = 0; r < 8; ++r) {
          const int i = rr + 8 * r;
          rq[r] = make_uint4(0, 0, 0, 0);
          if (i < L)
            rq[r] =
                *reinterpret_cast<const uint4*>(qin + (int64_t)(t0 + i) * p.q_t + hk * p.q_h + c8);
        }
#pragma unroll
        for (int r = 0; r < 8; ++r) {
          float xq[8];
          unpack8_bf16(xq, rq[r]);
          put_q(rr + 8 * r, xq);
        }
      }
    }
  } else {  // two rows per round trip (32 floats of k and v per thread)
#pragma unroll
    for (int r2 = 0; r2 < 8; r2 += 2) {
      float xk[2][8], xv[2][8];
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int i = rr + 8 * (r2 + h);
        const int64_t t = t0 + i;
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          xk[h][j] = i < L ? to_f32(kin[t * p.k_t + hk * p.k_h + c8 + j]) : 0.0f;
          xv[h][j] = i < L ? to_f32(vin[t * p.v_t + hv * p.v_h + c8 + j]) : 0.0f;
        }
      }
#pragma unroll
      for (int h = 0; h < 2; ++h) put_kv(rr + 8 * (r2 + h), xk[h], xv[h]);
    }
    if constexpr (kWriteQ) {
      if (write_kn) {
#pragma unroll
        for (int r2 = 0; r2 < 8; r2 += 4) {
          float xq[4][8];
#pragma unroll
          for (int h = 0; h < 4; ++h) {
            const int i = rr + 8 * (r2 + h);
#pragma unroll
            for (int j = 0; j < 8; ++j)
              xq[h][j] =
                  i < L ? to_f32(qin[(int64_t)(t0 + i) * p.q_t + hk * p.q_h + c8 + j]) : 0.0f;
          }
#pragma unroll
          for (int h = 0; h < 4; ++h) put_q(rr + 8 * (r2 + h), xq[h]);
        }
      }
    }
  }
  if (warp == 0) chunk_gate_store(p, gate, t0, L, hv, lane, gl, bet, beg);
  __syncthreads();
  if constexpr (kV7) {  // A rows 16·warp.. as below, only the column tiles 16np.. with np <= warp
    // (A_ij = 0 for j >= i; the blocks above the diagonal are never read). Fragments by ldmatrix:
    // A = K̂ rows 16·warp + (lane & 15), columns + 8·(lane >> 4); B (two n-tiles of K̂ [j][d]) rows
    // 16np + (lane & 7) + 8·(lane >> 4), columns + 8·((lane >> 3) & 1).
    float acc[8][4] = {};
    const bf16* b_row = Kb + ((lane & 7) + 8 * (lane >> 4)) * kWP + 8 * ((lane >> 3) & 1);
    tril_products(acc, Kb + (16 * warp + (lane & 15)) * kWP + 8 * (lane >> 4), b_row, warp);
    store_a_rows(acc, Af, gl, bet, warp, lane, L);
    const int ia = 16 * warp + g, ib = ia + 8;
    const float gia = gl[ia], gib = gl[ib];
    if constexpr (kWriteP) {
      // P̃ rows 16·warp.. as A's, from the same K̂ fragments with Q̂ (the V tile, [64][136]) as
      // the A operand: P̃_ij = (q̂_i·k̂_j) e^{γ_i−γ_j} for j <= i < L, else 0 (ws_output's P before
      // session 19, rounded to bf16 the same way). It leaves through the warp's own Q̂ rows (only
      // this warp reads them) for 16-byte row stores into p.pt [chunk][hv][64 i][64 j]; rows
      // i >= L are not stored (the spine's copy zero-fills them). T goes over the V tile only
      // after the barrier below.
      float pacc[8][4] = {};
      tril_products(pacc, Vb + (16 * warp + (lane & 15)) * kWP + 8 * (lane >> 4), b_row, warp);
      __syncwarp();  // every lane's ldmatrix of the warp's Q̂ rows is done
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {  // column tiles past the warp's diagonal stay 0 (j > i)
        const int j = nt * 8 + 2 * q;
        const float2 gj = *reinterpret_cast<const float2*>(gl + j);
        tril_decay(pacc[nt], j, ia, L, gia, gib, gj.x, gj.y);
        *reinterpret_cast<uint32_t*>(Vb + ia * kWP + j) = pack_bf162(pacc[nt][0], pacc[nt][1]);
        *reinterpret_cast<uint32_t*>(Vb + ib * kWP + j) = pack_bf162(pacc[nt][2], pacc[nt][3]);
      }
      __syncwarp();
      bf16* pt = static_cast<bf16*>(p.pt) + ((int64_t)c * p.Hv + hv) * kC * kC;
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        const int r = 16 * warp + lane / 8 + 4 * k;
        if (r < L)
          *reinterpret_cast<uint4*>(pt + r * kC + 8 * (lane % 8)) =
              *reinterpret_cast<const uint4*>(Vb + r * kWP + 8 * (lane % 8));
      }
    }
  } else {  // A rows 16·warp.. (f32): A_ij = β_i (k̂_i·k̂_j) e^{γ_i−γ_j}, i > j, i < L
    float acc[8][4] = {};
#pragma unroll
    for (int ks = 0; ks < kD / 16; ++ks) {
      uint32_t a[4];
      load_a(a, Kb, kWP, 16 * warp, 16 * ks, g, q);
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        uint32_t b[2];
        load_b(b, Kb, kWP, nt * 8, 16 * ks, g, q);
        mma_bf16(acc[nt], a, b);
      }
    }
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int r = 0; r < 4; r += 2) {
        const int i = 16 * warp + g + 8 * (r / 2), j = nt * 8 + 2 * q;
        const float bi = bet[i], gi = gl[i];
        float2 x;
        x.x = j < i && i < L ? bi * acc[nt][r] * exp2f(gi - gl[j]) : 0.0f;
        x.y = j + 1 < i && i < L ? bi * acc[nt][r + 1] * exp2f(gi - gl[j + 1]) : 0.0f;
        *reinterpret_cast<float2*>(Af + i * kAP + j) = x;
      }
  }
  __syncthreads();
  solve_t(Af, Tm, warp, lane);
  __syncthreads();  // T complete; A dead
  // kLate: V rows (as k's: rows rr + 8r, columns c8..c8+7, zeros past L) into registers now, into
  // the V tile (over T) after the barrier that ends Tb / Tu.
  uint4 rv[8];
  if constexpr (kLate) load_rows8(vin + (int64_t)(t0 + rr) * p.v_t + hv * p.v_h + c8, p.v_t, rv);
  if constexpr (kV7) {
    form_tb_tu(Tm, beg, bet, Tb, Tu, warp, lane);  // (the v7 products read only these blocks)
  } else {
    // Tb, Tu over A (blocks above the diagonal are zero; T was not filled there).
    for (int e = tid; e < kC * kC / 2; e += blockDim.x) {
      const int i = e / (kC / 2), j = 2 * (e % (kC / 2));
      const float2 t = j / 16 <= i / 16 ? *reinterpret_cast<const float2*>(Tm + i * kTQ + j)
                                        : make_float2(0.0f, 0.0f);
      *reinterpret_cast<uint32_t*>(Tb + i * kTP + j) = pack_bf162(t.x * beg[j], t.y * beg[j + 1]);
      *reinterpret_cast<uint32_t*>(Tu + i * kTP + j) = pack_bf162(t.x * bet[j], t.y * bet[j + 1]);
    }
  }
  __syncthreads();        // Tb, Tu written; T dead
  if constexpr (kLate) {  // read first by the U pass, after the W pass's barrier
#pragma unroll
    for (int r = 0; r < 8; ++r) *reinterpret_cast<uint4*>(Vb + (rr + 8 * r) * kWP + c8) = rv[r];
  }
  bf16* w = static_cast<bf16*>(p.w);
  bf16* u = static_cast<bf16*>(p.u);
#pragma unroll
  for (int pass = 0; pass < 2; ++pass) {  // 0: W = Tb K̂, 1: U = Tu V (B tiles stored [j][d])
    const bf16* As = pass == 0 ? Tb : Tu;
    bf16* Bs = pass == 0 ? Kb : Vb;
    bf16* dst = pass == 0 ? w : u;
    float acc[16][4] = {};
#pragma unroll
    for (int ks = 0; ks < kC / 16; ++ks) {
      if (kV7 && ks > warp) continue;  // v7: Tb / Tu rows 16·warp.. are 0 past column 16·warp + 15
      uint32_t a[4];
      if constexpr (kV7)  // rows 16·warp + (lane & 15), columns 16ks + 8·(lane >> 4)
        ldmatrix_x4(a, As + (16 * warp + (lane & 15)) * kTP + 16 * ks + 8 * (lane >> 4));
      else
        load_a(a, As, kTP, 16 * warp, 16 * ks, g, q);
#pragma unroll
      for (int np = 0; np < 8; ++np) {
        uint32_t b0[2], b1[2];
        load_b2_trans(b0, b1, Bs, kWP, 16 * ks, 16 * np, lane);
        mma_bf16(acc[2 * np], a, b0);
        mma_bf16(acc[2 * np + 1], a, b1);
      }
    }
    __syncthreads();  // every warp is done reading Bs: its rows 16·warp.. take this warp's result
#pragma unroll
    for (int nt = 0; nt < 16; ++nt)
#pragma unroll
      for (int r = 0; r < 4; r += 2) {
        const int i = 16 * warp + g + 8 * (r / 2), d = nt * 8 + 2 * q;
        *reinterpret_cast<uint32_t*>(Bs + i * kWP + d) = pack_bf162(acc[nt][r], acc[nt][r + 1]);
      }
    __syncwarp();
    if constexpr (kV7) {  // lane: rows 16·warp + lane / 16 + 2e, columns 8·(lane % 16)..; the
                          // destination rows 2·Hv·K elements apart
      const int i0 = 16 * warp + lane / 16, d8 = 8 * (lane % 16);
      uint4* const dr = reinterpret_cast<uint4*>(dst + ((int64_t)(t0 + i0) * p.Hv + hv) * kD + d8);
      const int d_step = p.Hv * kD / 4;  // 2 rows in 16-byte units
#pragma unroll
      for (int e = 0; e < 8; ++e)
        if (i0 + 2 * e < L)
          dr[e * d_step] = *reinterpret_cast<const uint4*>(Bs + (i0 + 2 * e) * kWP + d8);
    } else {
#pragma unroll
      for (int e = lane; e < 16 * (kD / 8); e += 32) {
        const int i = 16 * warp + e / (kD / 8), d8 = 8 * (e % (kD / 8));
        if (i < L)
          *reinterpret_cast<uint4*>(dst + ((int64_t)(t0 + i) * p.Hv + hv) * kD + d8) =
              *reinterpret_cast<const uint4*>(Bs + i * kWP + d8);
      }
    }
  }
}

// Stage 1 for a pair of value heads of one key head (`HYBRID_GDN_WU_PAIR=0` turns it off): where
// the spine takes P̃ from stage 1 (kWriteP's calls) and the GVA ratio is even, one block of two
// warpgroups takes a chunk of heads hv0 = 2·blockIdx.y (warpgroup 0) and hv0 + 1 (warpgroup 1),
// which share k and q. What they share is done once:
//  - the k and q rows: 256 threads, rows tid/16 + 16r (r = 0..3), all 8 loads a thread issued
//    together (wu_tc5_kernel: 128 threads, 8 rows of k, then 8 of q after k's normalisation);
//  - K̂ and Q̂, normalised once and written once to the workspace (where hv0 % ratio == 0);
//  - the lower blocks of K̂K̂ᵀ (warpgroup 0) and Q̂K̂ᵀ (warpgroup 1), each product turned into
//    both heads' A = β_i (k̂_i·k̂_j) e^{γ_i−γ_j} (into each head's A tile) or
//    P̃ = (q̂_i·k̂_j) e^{γ_i−γ_j} (to p.pt, staged through the warp's own Q̂ rows).
// Then each warpgroup solves its head's T and forms Tb, Tu, U and W as wu_tc5_kernel's v7 path
// (kLate: T over the head's V tile, V rows loaded once T is dead), except that U comes first and
// both results are staged in the V tile: the K̂ tile is shared and read by both warpgroups.
// Every barrier is block-wide (both warpgroups run the same steps). Why: session 24's ncu of
// wu_tc5_kernel's first piece at 1 x 8192 (82.7 µs, run 3) has 25% of the stall samples on
// k's loads and normalisation, 14% on q's, 13% on the K̂K̂ᵀ product and 13% on Q̂K̂ᵀ: per head,
// the pair does half of each. Measured (session 24 runs 4-5, same run against one head a block):
// stage 1 alone 160 -> 150 µs at 1 x 8192 (predicted a quarter off: the blocks now wait at the
// barriers before the T solve and in it), the pipeline 312 -> 308-310 µs at 1 x 8192 and
// 1146 -> 1115-1120 at 1 x 32768.
// Shared: K̂, Q̂ [64][136] bf16; per head a V tile [64][136] bf16 (T [64][68] f32 over it first),
// A [64][72] f32 (Tb, Tu over it), β, γ·log2e, β e^γ [64]: 108 032 bytes, two blocks per SM (16
// warps a SM, as four wu_tc5_kernel v7 blocks).
constexpr int kPairHead = kC * kWP * 2 + kC * kAP * 4 + 3 * kC * 4;  // one head's tiles
constexpr int kPairSmem = 2 * kC * kWP * 2 + 2 * kPairHead;
static_assert(kC * kTQ * 4 == kC * kWP * 2, "stage 1 pair: T fits the V tile exactly");
static_assert(2 * (kPairSmem + 1024) <= 228 * 1024, "stage 1 pair: two blocks per SM");

// kWriteP = false (the default at GVA ratio 2; HYBRID_GDN_WU_PAIR=2 at any even ratio): the calls
// where stage 1 writes Q̂ but not P̃ (the fused spine outside the pipeline and from 1024 chunks:
// 8 x 4096, Hv 64, 1 x 131072); each warpgroup then computes K̂K̂ᵀ itself for its own head's A
// (the same product twice, side by side, rather than one warpgroup writing both heads').
// Measured (session 25 run 3): 8 x 4096 1068 -> 1024 µs, 1 x 131072 4383 -> 4131; at ratio 4
// (Hv 64) 476 -> 487, so not there.
template <bool kWriteP>
__global__ void __launch_bounds__(256, 2) wu_pair_kernel(const Params p) {
  grid_dependents_launch();  // (as wu_tc5_kernel: the pipeline's later pieces)
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* Kb = reinterpret_cast<bf16*>(smem_raw);  // [64][136] K̂ [j][d]
  bf16* Qb = Kb + kC * kWP;                      // [64][136] Q̂ [i][d], then P̃ rows (own warp's)
  const int tid = threadIdx.x, wg = tid / 128, warp = tid % 128 / 32, lane = tid % 32;
  const int g = lane / 4, q = lane % 4;
  // This warpgroup's head: V tile (T first), A tile (Tb, Tu later), β, γ log2 e, β e^γ; and the
  // other head's A tile and γ, β (the shared products write both heads' A).
  unsigned char* head0 = reinterpret_cast<unsigned char*>(Qb + kC * kWP);
  auto head_v = [&](int e) { return reinterpret_cast<bf16*>(head0 + e * kPairHead); };
  auto head_a = [&](int e) { return reinterpret_cast<float*>(head_v(e) + kC * kWP); };
  auto head_b = [&](int e) { return head_a(e) + kC * kAP; };  // β; γ log2 e at + kC; βe^γ + 2kC
  bf16* Vb = head_v(wg);
  float* Tm = reinterpret_cast<float*>(Vb);
  float* Af = head_a(wg);
  float* bet = head_b(wg);
  float* gl = bet + kC;
  float* beg = gl + kC;
  bf16* Tb = reinterpret_cast<bf16*>(Af);  // [64][72] T diag(βe^γ), after T
  bf16* Tu = Tb + kC * kTP;                // [64][72] T diag(β), after T
  const int c = p.chunk_base + blockIdx.x;
  if (c >= p.first_chunk[p.N]) return;
  const int n = chunk_sequence(p.first_chunk, p.N, c);
  if (p.slots[n * p.slots_s] < 0) return;
  const int t0 = p.cu[n] + (c - p.first_chunk[n]) * kC;
  const int L = min(kC, p.cu[n + 1] - t0);
  const int hv0 = 2 * blockIdx.y, hv = hv0 + wg, hk = hv0 / p.ratio;
  const bool write_kn = hv0 % p.ratio == 0;
  // γ inputs first (each warpgroup's warp 0 for its head).
  ChunkGate gate;
  if (warp == 0) gate = chunk_gate_load(p, t0, L, hv, lane);
  // k and q rows rr + 16r (r = 0..3), columns c8..c8 + 7 (zeros past L), 16-byte loads.
  {
    const int rr = tid / 16, c8 = 8 * (tid % 16);
    const bf16* kf = static_cast<const bf16*>(p.k) + (int64_t)(t0 + rr) * p.k_t + hk * p.k_h + c8;
    const bf16* qf = static_cast<const bf16*>(p.q) + (int64_t)(t0 + rr) * p.q_t + hk * p.q_h + c8;
    uint4 rk[4], rq[4];
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      rk[r] = make_uint4(0, 0, 0, 0), rq[r] = make_uint4(0, 0, 0, 0);
      if (rr + 16 * r < L) {
        rk[r] = *reinterpret_cast<const uint4*>(kf + 16 * r * p.k_t);
        rq[r] = *reinterpret_cast<const uint4*>(qf + 16 * r * p.q_t);
      }
    }
    // K̂ / Q̂ rows of the workspace [T, Hk, K]: 16·Hk·K elements (2·Hk·K 16-byte units) apart.
    const int64_t ws_row = ((int64_t)(t0 + rr) * p.Hk + hk) * kD + c8;
    uint4* const knr = reinterpret_cast<uint4*>(static_cast<bf16*>(p.kn) + ws_row);
    uint4* const qnr = reinterpret_cast<uint4*>(static_cast<bf16*>(p.qn) + ws_row);
    const int ws_step = 2 * p.Hk * kD;
    // x / sqrt(‖x‖² + 1e-6) (or x) of a row piece: the norm over the row's 16 lanes.
    auto normalised = [&](const uint4& raw) {
      float x[8];
      unpack8_bf16(x, raw);
      float xx = 0.0f;
#pragma unroll
      for (int j = 0; j < 8; ++j) xx += x[j] * x[j];
      xx = half_warp_sum(xx);
      return pack8_bf16(x, p.l2norm ? rsqrtf(xx + 1e-6f) : 1.0f);
    };
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int i = rr + 16 * r;
      const uint4 kp = normalised(rk[r]), qp = normalised(rq[r]);
      *reinterpret_cast<uint4*>(Kb + i * kWP + c8) = kp;
      if constexpr (kWriteP) *reinterpret_cast<uint4*>(Qb + i * kWP + c8) = qp;
      if (write_kn && i < L) knr[r * ws_step] = kp, qnr[r * ws_step] = qp;
    }
  }
  if (warp == 0) chunk_gate_store(p, gate, t0, L, hv, lane, gl, bet, beg);  // this head's
  __syncthreads();
  {  // The shared products, rows 16·warp.. (column tiles np <= warp: the lower blocks), as
     // wu_tc5_kernel's v7: warpgroup 0 K̂K̂ᵀ -> both heads' A, warpgroup 1 Q̂K̂ᵀ -> both heads' P̃
     // (kWriteP; else each warpgroup K̂K̂ᵀ -> its own head's A).
    const int ia = 16 * warp + g, ib = ia + 8;
    const bf16* b_row = Kb + ((lane & 7) + 8 * (lane >> 4)) * kWP + 8 * ((lane >> 3) & 1);
    const bf16* x_tile = wg == 0 || !kWriteP ? Kb : Qb;
    float acc[8][4] = {};
    tril_products(acc, x_tile + (16 * warp + (lane & 15)) * kWP + 8 * (lane >> 4), b_row, warp);
    if constexpr (!kWriteP) {
      store_a_rows(acc, Af, gl, bet, warp, lane, L);
    } else if (wg == 0) {
#pragma unroll
      for (int e = 0; e < 2; ++e)
        store_a_rows(acc, head_a(e), head_b(e) + kC, head_b(e), warp, lane, L);
    } else {
      // P̃ of head hv0 + e: the decayed tile in bf16 over this warp's own Q̂ rows (only this warp
      // reads them), then 16-byte row stores into p.pt [chunk][hv][64 i][64 j]; rows i >= L are
      // not stored (the spine's copy zero-fills them).
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float* ge = head_b(e) + kC;
        const float gia = ge[ia], gib = ge[ib];
        __syncwarp();  // the warp's ldmatrix of its Q̂ rows (e = 0) or its stores (e = 1) done
#pragma unroll
        for (int nt = 0; nt < 8; ++nt) {  // column tiles past the warp's diagonal stay 0 (j > i)
          const int j = nt * 8 + 2 * q;
          const float2 gj = *reinterpret_cast<const float2*>(ge + j);
          float x[4] = {acc[nt][0], acc[nt][1], acc[nt][2], acc[nt][3]};
          tril_decay(x, j, ia, L, gia, gib, gj.x, gj.y);
          *reinterpret_cast<uint32_t*>(Qb + ia * kWP + j) = pack_bf162(x[0], x[1]);
          *reinterpret_cast<uint32_t*>(Qb + ib * kWP + j) = pack_bf162(x[2], x[3]);
        }
        __syncwarp();
        bf16* pt = static_cast<bf16*>(p.pt) + ((int64_t)c * p.Hv + hv0 + e) * kC * kC;
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          const int r = 16 * warp + lane / 8 + 4 * k;
          if (r < L)
            *reinterpret_cast<uint4*>(pt + r * kC + 8 * (lane % 8)) =
                *reinterpret_cast<const uint4*>(Qb + r * kWP + 8 * (lane % 8));
        }
      }
    }
  }
  __syncthreads();              // both heads' A complete
  solve_t(Af, Tm, warp, lane);  // this warpgroup's head (its own A and T tiles)
  __syncthreads();              // T complete; A dead
  // V rows of this head (thread wt = tid % 128: rows wt/16 + 8r, columns 8·(wt % 16)..) into
  // registers now, into the V tile (over T) once Tb / Tu are formed.
  const int vr = tid % 128 / 16, v8 = 8 * (tid % 16);
  uint4 rv[8];
  {
    const bf16* vf = static_cast<const bf16*>(p.v) + (int64_t)(t0 + vr) * p.v_t + hv * p.v_h + v8;
#pragma unroll
    for (int r = 0; r < 8; ++r) {
      rv[r] = make_uint4(0, 0, 0, 0);
      if (vr + 8 * r < L) rv[r] = *reinterpret_cast<const uint4*>(vf + 8 * r * p.v_t);
    }
  }
  form_tb_tu(Tm, beg, bet, Tb, Tu, warp, lane);
  __syncthreads();  // Tb, Tu written; T dead
#pragma unroll
  for (int r = 0; r < 8; ++r) *reinterpret_cast<uint4*>(Vb + (vr + 8 * r) * kWP + v8) = rv[r];
  __syncthreads();  // V in its tile
  // U = Tu V, then W = Tb K̂ (B tiles stored [j][d]); Tb / Tu rows 16·warp.. are 0 past column
  // 16·warp + 15. Each result leaves through this warp's rows of the V tile (U: once every warp
  // is done reading V; W: once this warp's U rows are stored) by 16-byte row stores.
#pragma unroll
  for (int pass = 0; pass < 2; ++pass) {
    const bf16* As = pass == 0 ? Tu : Tb;
    const bf16* Bs = pass == 0 ? Vb : Kb;
    bf16* dst = static_cast<bf16*>(pass == 0 ? p.u : p.w);
    float acc[16][4] = {};
#pragma unroll
    for (int ks = 0; ks < kC / 16; ++ks) {
      if (ks > warp) continue;
      uint32_t a[4];
      ldmatrix_x4(a, As + (16 * warp + (lane & 15)) * kTP + 16 * ks + 8 * (lane >> 4));
#pragma unroll
      for (int np = 0; np < 8; ++np) {
        uint32_t b0[2], b1[2];
        load_b2_trans(b0, b1, Bs, kWP, 16 * ks, 16 * np, lane);
        mma_bf16(acc[2 * np], a, b0);
        mma_bf16(acc[2 * np + 1], a, b1);
      }
    }
    if (pass == 0)
      __syncthreads();  // every warp is done reading V: its rows 16·warp.. take this warp's U
    else
      __syncwarp();  // this warp's U rows are stored: they take its W
#pragma unroll
    for (int nt = 0; nt < 16; ++nt)
#pragma unroll
      for (int r = 0; r < 4; r += 2) {
        const int i = 16 * warp + g + 8 * (r / 2), d = nt * 8 + 2 * q;
        *reinterpret_cast<uint32_t*>(Vb + i * kWP + d) = pack_bf162(acc[nt][r], acc[nt][r + 1]);
      }
    __syncwarp();
    // lane: rows 16·warp + lane / 16 + 2e, columns 8·(lane % 16)..; destination rows 2·Hv·K
    // elements apart.
    const int r0 = 16 * warp + lane / 16, d8 = 8 * (lane % 16);
    uint4* const dr = reinterpret_cast<uint4*>(dst + ((int64_t)(t0 + r0) * p.Hv + hv) * kD + d8);
    const int d_step = p.Hv * kD / 4;  // 2 rows in 16-byte units
#pragma unroll
    for (int e = 0; e < 8; ++e)
      if (r0 + 2 * e < L)
        dr[e * d_step] = *reinterpret_cast<const uint4*>(Vb + (r0 + 2 * e) * kWP + d8);
  }
}

// Stage 3 on tensor cores, one (chunk, hv), 4 warps; warp w owns tokens 16w..16w+15:
//   O = e^γ ⊙ (Q̂ h[c]ᵀ)                       (mma: A = Q̂ [i][d], B = h [v][d])
//   P = tril(Q̂ K̂ᵀ ⊙ e^{γ_i−γ_j}) [64, 64]     (mma: B = K̂ [j][d]; P in bf16 over the warp's own
//                                                Q̂ rows, which only that warp reads)
//   O = scale·(O + P V_new)                    (mma: A = P [i][j], B = V_new [j][v] by
//                                                ldmatrix.trans, V_new over h once every warp
//                                                is done with h)
// K̂ and h[c] (bf16 workspace) arrive by cp.async while the warps normalise Q, V_new while P is
// computed. Shared (bf16, padded rows): Qs, Ks [64][136], Hs [128][136] (V_new [64][136] after
// h), γ [64]: 69 888 bytes, three blocks per SM. MMA FLOPs per chunk: 2·64·128·128 +
// 2·64·64·128 + 2·64·64·128 = 4.2 MFLOP; bytes: q (16 KiB bf16), K̂, V_new (16 KiB each), h
// (32 KiB), out (16 KiB bf16).
constexpr int kOutSmem = (2 * kC * kWP + kD * kWP) * 2 + kC * 4;

//
// kVecIn, kVecOut (`cuda_tc_v5`, host check vec_inputs / vec_output): q rows by 16-byte loads
// (thread t: rows t/16 + 8r, columns 8(t%16)..+7, all 8 loads issued before any is used, the L2
// norm a 16-lane shuffle sum), and the output staged in shared memory (each warp its own 16 rows,
// over h / V_new once every warp is done with V_new) and written with 16-byte stores, instead of
// 64 2-byte loads and 64 scalar stores per thread.
template <class In, class Out, bool kVecIn = false, bool kVecOut = false, bool kV7 = false>
__global__ void __launch_bounds__(128, 3) output_tc_kernel(const Params p) {
  static_assert(!kVecIn || std::is_same_v<In, bf16>, "16-byte q rows: bf16 only");
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16* Qs = reinterpret_cast<bf16*>(smem_raw);          // [64][136]  Q̂, then P (own rows)
  bf16* Ks = Qs + kC * kWP;                              // [64][136]  K̂
  bf16* Hs = Ks + kC * kWP;                              // [128][136] h[v][d]
  bf16* Vs = Hs;                                         // [64][136]  V_new [j][v], after h
  float* gam = reinterpret_cast<float*>(Hs + kD * kWP);  // [64]
  // Element (r, c) of a 128-wide tile. v7: rows unpadded and swizzled (swz16, mma.cuh; into
  // padded 272-byte rows the copies took 2.6x the ideal wavefronts: ncu, session 17); before v7,
  // padded rows of kWP.
  auto at = [](int r, int c) { return kV7 ? swz16<bf16>(r, c, kD) : r * kWP + c; };
  const int c = p.chunk_base + blockIdx.x;
  if (c >= p.first_chunk[p.N]) return;
  const int n = chunk_sequence(p.first_chunk, p.N, c);
  const int s0 = (c - p.first_chunk[n]) * kC, t0 = p.cu[n] + s0;
  const int L = min(kC, p.cu[n + 1] - t0);
  const int hv = blockIdx.y, hk = hv / p.ratio;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, q = lane % 4;
  Out* out = static_cast<Out*>(p.out);
  if (p.slots[n * p.slots_s] < 0) {
    for (int e = tid; e < L * kD; e += blockDim.x)
      out[(int64_t)(t0 + e / kD) * p.o_t + hv * p.o_h + e % kD] = from_f32<Out>(0.0f);
    return;
  }
  // K̂ rows (zeros past L; source clamped to row L − 1) and h[c], 16 bytes per copy.
  if constexpr (kV7) {  // thread: rows tid / 16 + 8r, columns 8·(tid % 16).. (no per-copy divides)
    const int r0 = tid / 16, c8 = 8 * (tid % 16);
    const bf16* kn = static_cast<const bf16*>(p.kn) + ((int64_t)t0 * p.Hk + hk) * kD + c8;
    const int kn_row = p.Hk * kD;
#pragma unroll
    for (int r = 0; r < kC / 8; ++r) {
      const int j = r0 + 8 * r;
      cp_async16(Ks + at(j, c8), kn + (int64_t)min(j, L - 1) * kn_row, j < L ? 16 : 0);
    }
    const bf16* h =
        static_cast<const bf16*>(p.h) + ((int64_t)c * p.Hv + hv) * kD * kD + r0 * kD + c8;
#pragma unroll
    for (int r = 0; r < kD / 8; ++r) cp_async16(Hs + at(r0 + 8 * r, c8), h + 8 * r * kD, 16);
    cp_commit();
  } else {
    const bf16* kn = static_cast<const bf16*>(p.kn);
    const bf16* h = static_cast<const bf16*>(p.h) + ((int64_t)c * p.Hv + hv) * kD * kD;
    for (int e = tid; e < kC * (kD / 8); e += blockDim.x) {
      const int j = e / (kD / 8), c8 = 8 * (e % (kD / 8));
      const int64_t t = t0 + min(j, L - 1);
      cp_async16(Ks + j * kWP + c8, kn + (t * p.Hk + hk) * kD + c8, j < L ? 16 : 0);
    }
    for (int e = tid; e < kD * (kD / 8); e += blockDim.x) {
      const int v = e / (kD / 8), c8 = 8 * (e % (kD / 8));
      cp_async16(Hs + v * kWP + c8, h + v * kD + c8, 16);
    }
    cp_commit();
  }
  const In* qin = static_cast<const In*>(p.q);
  if constexpr (kVecIn) {
    const int rr = tid / 16, c8 = 8 * (tid % 16);
    uint4 rq[8];
    const In* qr = qin + (int64_t)(t0 + rr) * p.q_t + hk * p.q_h + c8;  // row rr; rows 8 apart
#pragma unroll
    for (int r = 0; r < 8; ++r) {
      const int i = rr + 8 * r;
      rq[r] = make_uint4(0, 0, 0, 0);
      if constexpr (kV7) {
        if (i < L) rq[r] = *reinterpret_cast<const uint4*>(qr + 8 * r * p.q_t);
      } else if (i < L) {
        rq[r] = *reinterpret_cast<const uint4*>(qin + (int64_t)(t0 + i) * p.q_t + hk * p.q_h + c8);
      }
    }
    if (tid < kC) gam[tid] = tid < L ? p.gamma[(int64_t)(t0 + tid) * p.Hv + hv] : 0.0f;
#pragma unroll
    for (int r = 0; r < 8; ++r) {
      float xq[8];
      unpack8_bf16(xq, rq[r]);
      float qq = 0.0f;
#pragma unroll
      for (int j = 0; j < 8; ++j) qq += xq[j] * xq[j];
      qq = half_warp_sum(qq);
      float iq = 1.0f;
      if constexpr (kV7)
        iq = p.l2norm ? rsqrtf(qq + 1e-6f) : 1.0f;
      else
        iq = p.l2norm ? 1.0f / sqrtf(qq + 1e-6f) : 1.0f;
      *reinterpret_cast<uint4*>(Qs + at(rr + 8 * r, c8)) = pack8_bf16(xq, iq);
    }
  } else {
    // Q̂ rows (zeros past L): warp w takes rows w + 4r, lane l columns 4l..4l+3; all 16 rows are
    // loaded before any is used (one global round trip).
    float xq[16][4];
#pragma unroll
    for (int r = 0; r < 16; ++r) {
      const int i = warp + 4 * r;
      const int64_t t = t0 + i;
#pragma unroll
      for (int j = 0; j < 4; ++j)
        xq[r][j] = i < L ? to_f32(qin[t * p.q_t + hk * p.q_h + 4 * lane + j]) : 0.0f;
    }
    if (lane < 16) {
      const int i = warp + 4 * lane;
      gam[i] = i < L ? p.gamma[(int64_t)(t0 + i) * p.Hv + hv] : 0.0f;
    }
#pragma unroll
    for (int r = 0; r < 16; ++r) {
      const int i = warp + 4 * r;
      float qq = 0.0f;
#pragma unroll
      for (int j = 0; j < 4; ++j) qq += xq[r][j] * xq[r][j];
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) qq += __shfl_xor_sync(0xffffffffu, qq, o);
      const float iq = p.l2norm ? 1.0f / sqrtf(qq + 1e-6f) : 1.0f;
#pragma unroll
      for (int j = 0; j < 4; j += 2)
        *reinterpret_cast<bf162*>(Qs + i * kWP + 4 * lane + j) =
            __floats2bfloat162_rn(xq[r][j] * iq, xq[r][j + 1] * iq);
    }
  }
  cp_wait<0>();
  __syncthreads();  // Q̂, γ, K̂, h visible

  // O rows 16·warp..: 16 n-tiles of v.
  float acc[16][4] = {};
  // v7 fragments by ldmatrix: A (16x16 of a [m][k] tile) rows + (lane & 15), columns
  // + 8·(lane >> 4); B (two n-tiles of a [n][k] tile) rows + (lane & 7) + 8·(lane >> 4), columns
  // + 8·((lane >> 3) & 1).
  const int a_row = 16 * warp + (lane & 15), a_col = 8 * (lane >> 4);
  const int b_row = (lane & 7) + 8 * (lane >> 4), b_col = 8 * ((lane >> 3) & 1);
#pragma unroll
  for (int ks = 0; ks < kD / 16; ++ks) {
    uint32_t a[4];
    if constexpr (kV7) {
      ldmatrix_x4(a, Qs + at(a_row, a_col + 16 * ks));
#pragma unroll
      for (int np = 0; np < 8; ++np) {
        uint32_t b[4];
        ldmatrix_x4(b, Hs + at(b_row + 16 * np, b_col + 16 * ks));
        mma_bf16(acc[2 * np], a, b[0], b[1]);
        mma_bf16(acc[2 * np + 1], a, b[2], b[3]);
      }
      continue;
    }
    load_a(a, Qs, kWP, 16 * warp, 16 * ks, g, q);
#pragma unroll
    for (int nt = 0; nt < 16; ++nt) {
      uint32_t b[2];
      load_b(b, Hs, kWP, nt * 8, 16 * ks, g, q);
      mma_bf16(acc[nt], a, b);
    }
  }
  const int i_lo = 16 * warp + g, i_hi = i_lo + 8;
  const float e_lo = expf(gam[i_lo]), e_hi = expf(gam[i_hi]);
#pragma unroll
  for (int nt = 0; nt < 16; ++nt) {
    acc[nt][0] *= e_lo, acc[nt][1] *= e_lo;
    acc[nt][2] *= e_hi, acc[nt][3] *= e_hi;
  }
  __syncthreads();      // every warp is done with h: V_new rows (zeros past L) replace it
  if constexpr (kV7) {  // as for K̂ above
    const int r0 = tid / 16, c8 = 8 * (tid % 16);
    const bf16* vnew = static_cast<const bf16*>(p.vnew) + ((int64_t)t0 * p.Hv + hv) * kD + c8;
    const int vn_row = p.Hv * kD;
#pragma unroll
    for (int r = 0; r < kC / 8; ++r) {
      const int j = r0 + 8 * r;
      cp_async16(Vs + at(j, c8), vnew + (int64_t)min(j, L - 1) * vn_row, j < L ? 16 : 0);
    }
    cp_commit();
  } else {
    const bf16* vnew = static_cast<const bf16*>(p.vnew);
    for (int e = tid; e < kC * (kD / 8); e += blockDim.x) {
      const int j = e / (kD / 8), c8 = 8 * (e % (kD / 8));
      const int64_t t = t0 + min(j, L - 1);
      cp_async16(Vs + j * kWP + c8, vnew + (t * p.Hv + hv) * kD + c8, j < L ? 16 : 0);
    }
    cp_commit();
  }

  // P rows 16·warp..: 8 n-tiles of j, written in bf16 over this warp's Q̂ rows.
  if constexpr (kV7) {  // only the column tiles 16np.. with np <= warp (P_ij = 0 for j > i; the
                        // P·V_new product below skips the others); decays by one ex2 each
    float pa[8][4] = {};
#pragma unroll
    for (int ks = 0; ks < kD / 16; ++ks) {
      uint32_t a[4];
      ldmatrix_x4(a, Qs + at(a_row, a_col + 16 * ks));
#pragma unroll
      for (int np = 0; np < 4; ++np)
        if (np <= warp) {
          uint32_t b[4];
          ldmatrix_x4(b, Ks + at(b_row + 16 * np, b_col + 16 * ks));
          mma_bf16(pa[2 * np], a, b[0], b[1]);
          mma_bf16(pa[2 * np + 1], a, b[2], b[3]);
        }
    }
    __syncwarp();  // every lane's reads of these Q̂ rows are done before P overwrites them
    const float gl_lo = gam[i_lo] * kLog2e, gl_hi = gam[i_hi] * kLog2e;
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
      if (nt / 2 <= warp) {
        const int j = nt * 8 + 2 * q;
        const float2 gj = *reinterpret_cast<const float2*>(gam + j);
        tril_decay(pa[nt], j, i_lo, L, gl_lo, gl_hi, gj.x * kLog2e, gj.y * kLog2e);
        *reinterpret_cast<bf162*>(Qs + at(i_lo, j)) = __floats2bfloat162_rn(pa[nt][0], pa[nt][1]);
        *reinterpret_cast<bf162*>(Qs + at(i_hi, j)) = __floats2bfloat162_rn(pa[nt][2], pa[nt][3]);
      }
  } else {
    float pa[8][4] = {};
#pragma unroll
    for (int ks = 0; ks < kD / 16; ++ks) {
      uint32_t a[4];
      load_a(a, Qs, kWP, 16 * warp, 16 * ks, g, q);
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        uint32_t b[2];
        load_b(b, Ks, kWP, nt * 8, 16 * ks, g, q);
        mma_bf16(pa[nt], a, b);
      }
    }
    __syncwarp();  // every lane's reads of these Q̂ rows are done before P overwrites them
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int r = 0; r < 4; r += 2) {
        const int i = 16 * warp + g + 8 * (r / 2), j = nt * 8 + 2 * q;
        const float p0 = j <= i && i < L ? pa[nt][r] * expf(gam[i] - gam[j]) : 0.0f;
        const float p1 = j + 1 <= i && i < L ? pa[nt][r + 1] * expf(gam[i] - gam[j + 1]) : 0.0f;
        *reinterpret_cast<bf162*>(Qs + i * kWP + j) = __floats2bfloat162_rn(p0, p1);
      }
  }
  cp_wait<0>();
  __syncthreads();  // V_new visible (and each warp's P rows)

#pragma unroll
  for (int ks = 0; ks < kC / 16; ++ks) {
    if (kV7 && ks > warp) continue;  // v7: P rows 16·warp.. are 0 past column 16·warp + 15
    uint32_t a[4];
    if constexpr (kV7)
      ldmatrix_x4(a, Qs + at(a_row, a_col + 16 * ks));
    else
      load_a(a, Qs, kWP, 16 * warp, 16 * ks, g, q);
#pragma unroll
    for (int np = 0; np < 8; ++np) {
      uint32_t b0[2], b1[2];
      if constexpr (kV7) {  // load_b2_trans's fragments at the swizzled rows
        uint32_t r4[4];
        ldmatrix_x4_trans(r4, Vs + at(16 * ks + (lane & 15), 16 * np + 8 * (lane >> 4)));
        b0[0] = r4[0], b0[1] = r4[1], b1[0] = r4[2], b1[1] = r4[3];
      } else {
        load_b2_trans(b0, b1, Vs, kWP, 16 * ks, 16 * np, lane);
      }
      mma_bf16(acc[2 * np], a, b0);
      mma_bf16(acc[2 * np + 1], a, b1);
    }
  }
  if constexpr (kVecOut) {
    // Rows 16·warp.. of O (Out, rows of kOP elements) over Hs once every warp is done with V_new;
    // then this warp's rows < L out, 16 bytes per store.
    constexpr int kOP = kD + 16 / sizeof(Out);  // padded row, a multiple of 16 bytes
    static_assert(kC * kOP * sizeof(Out) <= kD * kWP * sizeof(bf16), "O fits over h");
    Out* Os = reinterpret_cast<Out*>(Hs);
    __syncthreads();
#pragma unroll
    for (int nt = 0; nt < 16; ++nt)
#pragma unroll
      for (int r = 0; r < 4; r += 2) {
        const int i = r < 2 ? i_lo : i_hi, v = nt * 8 + 2 * q;
        if constexpr (std::is_same_v<Out, bf16>)
          *reinterpret_cast<uint32_t*>(Os + i * kOP + v) =
              pack_bf162(p.scale * acc[nt][r], p.scale * acc[nt][r + 1]);
        else
          *reinterpret_cast<float2*>(Os + i * kOP + v) =
              make_float2(p.scale * acc[nt][r], p.scale * acc[nt][r + 1]);
      }
    __syncwarp();
    constexpr int kPer = 16 / sizeof(Out);  // elements per 16-byte store
    if constexpr (kV7) {  // lane: rows 16·warp + lane / kPieces + kRows·e, columns kPer·(lane %
                          // kPieces)..
      constexpr int kPieces = kD / kPer, kRows = 32 / kPieces;
      const int i0 = 16 * warp + lane / kPieces, v = kPer * (lane % kPieces);
      uint4* const orow =
          reinterpret_cast<uint4*>(out + (int64_t)(t0 + i0) * p.o_t + hv * p.o_h + v);
      const int64_t o_step =
          kRows * p.o_t / kPer;  // kRows rows in 16-byte units (host: o_t % kPer = 0)
#pragma unroll
      for (int e = 0; e < 16 / kRows; ++e)
        if (i0 + kRows * e < L)
          orow[e * o_step] = *reinterpret_cast<const uint4*>(Os + (i0 + kRows * e) * kOP + v);
    } else {
#pragma unroll
      for (int e = lane; e < 16 * (kD / kPer); e += 32) {
        const int i = 16 * warp + e / (kD / kPer), v = kPer * (e % (kD / kPer));
        if (i < L)
          *reinterpret_cast<uint4*>(out + (int64_t)(t0 + i) * p.o_t + hv * p.o_h + v) =
              *reinterpret_cast<const uint4*>(Os + i * kOP + v);
      }
    }
  } else {
#pragma unroll
    for (int nt = 0; nt < 16; ++nt)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int i = r < 2 ? i_lo : i_hi, v = nt * 8 + 2 * q + r % 2;
        if (i < L)
          out[(int64_t)(t0 + i) * p.o_t + hv * p.o_h + v] = from_f32<Out>(p.scale * acc[nt][r]);
      }
  }
}

Reason tc_supports(const GdnChunkPrefill& a) {
  if (a.q.size(2) != kD || a.v.size(2) != kD)
    return std::string("tensor-core variant: K = V = 128 only (compile-time tile), got K=") +
           std::to_string(a.q.size(2)) + ", V=" + std::to_string(a.v.size(2));
  if (a.q.size(0) > (int64_t{1} << 30))
    return std::string("tensor-core variant: T must be < 2^30 (32-bit token indices)");
  return std::nullopt;
}

// Split-sequence spine limits: at most kMaxSegments segments, each of at least kMinSegChunks
// chunks (shorter segments would spend more on M_s and the combine than they save).
constexpr int kMaxSegments = 16;
constexpr int kMinSegChunks = 4;

// Segments of the split spine for this call (1: no split), and why not when it is 1.
int spine_segments(const Params& p, bool narrow, int sms, std::string& why) {
  if (p.N != 1) {
    why = "N = " + std::to_string(p.N) + " sequences (the split needs N = 1)";
    return 1;
  }
  if (!narrow) {
    why = "Hv = " + std::to_string(p.Hv) + " fills the GPU with 16-row slices already";
    return 1;
  }
  // Pass 1 runs Hv·8 blocks for segment 0 and Hv·16 for each later one, two blocks per SM.
  const int64_t set = int64_t{p.Hv} * (kD / 16);
  const int nch = (p.T + kC - 1) / kC;
  int S = 1;
  while (S < kMaxSegments && set * (2 * (S + 1) - 1) <= int64_t{2} * sms &&
         nch / (S + 1) >= kMinSegChunks)
    ++S;
  if (S == 1) {
    why = std::to_string(nch) + " chunks: fewer than 2 segments of " +
          std::to_string(kMinSegChunks) + " chunks, or no room for pass 1's blocks";
    return 1;
  }
  return S;
}

// HYBRID_GDN_CHUNK_STAGES=1: CUDA events around each stage's launches and, per call, one log line
// with each stage's µs. It is a diagnostic asked for by name, so the line is logged at warn level
// (the default level shows it) and the call waits for its last event; off (no events, no waiting)
// when the variable is unset or not "1", and while the stream is being captured into a graph.
class StageTimer {
 public:
  explicit StageTimer(Context& ctx) : stream_(as_stream(ctx.stream())) {
    const char* env = std::getenv("HYBRID_GDN_CHUNK_STAGES");
    if (!env || std::string(env) != "1") return;
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(stream_, &capture) != cudaSuccess ||
        capture != cudaStreamCaptureStatusNone) {
      (void)cudaGetLastError();  // clear a failed query's error; no timing under capture
      return;
    }
    for (auto& e : events_) HYBRID_CUDA_CHECK(cudaEventCreate(&e));
    on_ = true;
  }
  StageTimer(const StageTimer&) = delete;
  StageTimer& operator=(const StageTimer&) = delete;
  ~StageTimer() {
    if (on_)
      for (auto& e : events_) cudaEventDestroy(e);
  }
  bool on() const { return on_; }
  // Event i (0: before the index kernel, 1: before stage 1, 2: before the spine, 3: before stage
  // 3, 4: after it).
  void mark(int i) {
    if (on_) HYBRID_CUDA_CHECK(cudaEventRecord(events_[i], stream_));
  }
  void report(Context& ctx, const std::string& what) {
    if (!on_) return;
    HYBRID_CUDA_CHECK(cudaEventSynchronize(events_[kEvents - 1]));
    float ms[kEvents - 1];
    for (int i = 0; i + 1 < kEvents; ++i)
      HYBRID_CUDA_CHECK(cudaEventElapsedTime(&ms[i], events_[i], events_[i + 1]));
    auto us = [](float x) { return std::to_string(static_cast<int>(x * 1000.0f + 0.5f)); };
    ctx.log(LogLevel::warn, "[gdn_chunk_prefill] stages (" + what + "): index " + us(ms[0]) +
                                " us, stage 1 (wu) " + us(ms[1]) + " us, spine " + us(ms[2]) +
                                " us, stage 3 (output) " + us(ms[3]) + " us, total " +
                                us(ms[0] + ms[1] + ms[2] + ms[3]) + " us");
  }

 private:
  static constexpr int kEvents = 5;
  cudaStream_t stream_;
  cudaEvent_t events_[kEvents] = {};
  bool on_ = false;
};

// What `cuda_tc_v3` changes over `cuda_tc` (each can be turned off here to bisect on the GPU).
struct TcOptions {
  bool deep_ring = false;      // spine: W, U, γ copied two chunks ahead (16-row slices only;
                               // 32-row slices keep the ring of 2 and say so at debug level)
  bool fast_inverse = false;   // stage 1: the inverse in compile-time loops (wu_tc_kernel)
  bool cluster_spine = false;  // with deep_ring: W and K̂ multicast to the 8 slices of a head
                               // (spine_tc_kernel CL), when its clusters all fit at once
  bool fused_output = false;   // with cluster_spine (`cuda_tc_v4_fused`): stage 3 inside the
                               // spine (spine_tc_kernel FO), Q̂ from stage 1, no h; the caller
                               // has checked fused_cluster_size() > 0
  bool wu_v5 = false;          // stage 1 by wu_tc5_kernel (`cuda_tc_v5`)
  bool wu_v7 = false;          // with wu_v5: wu_tc5_kernel's kV7 path (`cuda_tc_v7`)
  bool out_v5 = false;         // stage 3 with 16-byte q loads / out stores (`cuda_tc_v5`)
  bool out_v7 = false;         // with out_v5 and 16-byte q rows: output_tc_kernel's kV7 path
  bool pipeline = false;       // stages 1 and 3 beside the spine, piece by piece (`cuda_tc_v9`;
                               // pipe_plan says where)
  std::string name;            // the variant's name for the stage timer (empty: from the flags)
};

// ensure_dynamic_smem, and the largest shared-memory carveout (set once per kernel and device:
// the attribute stays). Every tensor-core kernel here asks for it: stages 1 and 3 fit three or
// four blocks per SM, the spine two, and the pipeline runs them side by side.
template <class Kernel>
void prepare_kernel(Kernel* kern, size_t smem) {
  ensure_dynamic_smem(kern, smem);
  static std::mutex mu;
  static std::set<std::pair<const void*, int>> done;
  int dev = 0;
  HYBRID_CUDA_CHECK(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lock(mu);
  if (!done.insert({reinterpret_cast<const void*>(kern), dev}).second) return;
  HYBRID_CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributePreferredSharedMemoryCarveout,
                                         cudaSharedmemCarveoutMaxShared));
}

// One spine launch (`threads` a block): plain, or by cudaLaunchKernelEx with the pipeline
// piece's attributes (priority != 0: ahead of the stage blocks; programmatic: placed while the
// piece before ends, waiting in the kernel) or clusters of (1, 1, cluster_z) slice blocks.
template <class Kernel>
void launch_spine(Kernel* kern, dim3 grid, int smem, cudaStream_t stream, int priority,
                  bool programmatic, int cluster_z, const Params& p, const SpineSplit& run,
                  int threads = 128) {
  if (priority == 0 && !programmatic && cluster_z == 0) {
    kern<<<grid, threads, smem, stream>>>(p, run);
    HYBRID_CUDA_CHECK_LAUNCH();
    return;
  }
  cudaLaunchAttribute attr[3];
  int na = 0;
  if (priority != 0) {
    attr[na].id = cudaLaunchAttributePriority;
    attr[na++].val.priority = priority;
  }
  if (programmatic) {
    attr[na].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[na++].val.programmaticStreamSerializationAllowed = 1;
  }
  if (cluster_z > 0) {
    attr[na].id = cudaLaunchAttributeClusterDimension;
    attr[na].val.clusterDim.x = 1;
    attr[na].val.clusterDim.y = 1;
    attr[na++].val.clusterDim.z = static_cast<unsigned>(cluster_z);
  }
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = dim3(threads);
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cfg.attrs = attr;
  cfg.numAttrs = na;
  HYBRID_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kern, p, run));
}

// Whether spine_ws_kernel can run on the current device: built with sm_90a code, on a compute
// capability 9 GPU (9.0 is the only one; device_info() caches it per device).
bool wg_spine_available() {
#if defined(HYBRID_CUDA_SM90A)
  return device_info().major == 9;
#else
  return false;
#endif
}

// ---- the pipelined prefill (`cuda_tc_v9`) ------------------------------------------------------
//
// Stages 1 and 3 need the whole GPU for 183 and 115 µs at 1 x 8192 (session 6's stage timer),
// while the spine, 128 dependent chunk steps of ~2.3 µs, leaves most of every SM's issue slots
// idle. Cut the sequence's chunks into pieces; stage 1 of piece i runs on a side stream ahead of
// the spine, the spine's piece i (one launch, state carried in f32 between pieces) waits for it,
// and stage 3 of piece i runs on a second side stream once the spine's piece i is done:
//   side 1:  wu(0) wu(1) wu(2) ...
//   main:         spine(0) spine(1) spine(2) ...
//   side 2:                 out(0)   out(1)  ...
// so only wu(0), the spine and the last out are on the critical path. Fork and join by events
// (graph-capturable: the side streams join the capture through the fork event and end joined).
// N = 1 without the split spine only (pieces are chunk ranges of the one sequence, whose length
// the host knows; the fused-output spine gives way to it); elsewhere cuda_tc_v9 runs as
// cuda_tc_v7.
constexpr int kMaxPieces = 32;

// The side streams and events of the pipeline, per device, created on first use. The mutex is
// held while a call enqueues its pieces, so calls from two host threads cannot interleave their
// event records.
struct PipeSync {
  std::mutex mu;
  cudaStream_t wu = nullptr, out = nullptr;
  cudaEvent_t fork = nullptr, out_done = nullptr;
  cudaEvent_t wu_done[kMaxPieces] = {}, spine_done[kMaxPieces] = {};
  int greatest_priority = 0;  // the device's highest stream priority (the spine's, when asked)
};

PipeSync& pipe_sync() {
  static std::mutex mu;
  static std::map<int, std::unique_ptr<PipeSync>> per_device;
  int dev = 0;
  HYBRID_CUDA_CHECK(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lock(mu);
  auto& ps = per_device[dev];
  if (!ps) {
    auto made = std::make_unique<PipeSync>();
    int least = 0, greatest = 0;
    HYBRID_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    made->greatest_priority = greatest;
    HYBRID_CUDA_CHECK(cudaStreamCreateWithPriority(&made->wu, cudaStreamNonBlocking, least));
    HYBRID_CUDA_CHECK(cudaStreamCreateWithPriority(&made->out, cudaStreamNonBlocking, least));
    auto event = [](cudaEvent_t& e) {
      HYBRID_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    };
    event(made->fork);
    event(made->out_done);
    for (int i = 0; i < kMaxPieces; ++i) event(made->wu_done[i]), event(made->spine_done[i]);
    ps = std::move(made);
  }
  return *ps;
}

// Chunk bounds of the pieces (bounds[0] = 0 < .. < bounds[pieces] = p.max_chunks), or fewer than
// two pieces with the reason in why. M chunks a piece, the first and the last M / 2 (the parts of
// stages 1 and 3 that nothing hides), at most kMaxPieces (M grows for long sequences). M =
// HYBRID_GDN_CHUNK_PIPE_CHUNKS, else a quarter of the chunks within [64, 128]. Session 14 run 3,
// 1 x 8192 / 32768 / 131072 (Hv 32, the 32-row spine): M 8 550 / 1799 / 6497 µs, 16 494 / 1801 /
// 6517, 24 476 / 1748 / 6530, 32 465 / 1699 / 6499 (v7: 521 / 2085 / 8279): each boundary costs
// the spine a drain and a ramp, so fewer pieces win until the exposed first stage 1 and last
// stage 3 grow. Session 17 runs 6-7 (the warpgroup spine with swizzled tiles, 2.5x faster than
// stages 1 and 3 beside it): M 16 398 / 1478, 32 351 / 1335 / 5081-5097, 48 343 / 1285, 64 335 /
// 1279-1287 / 5059-5090, 96 - / 1264 / 5026, 128 - / 1265 / 4948 (at 1 x 8192, M >= 96 leaves
// one piece: 520).
std::vector<int> pipe_plan(const Params& p, int segments, bool timed, std::string& why) {
  std::vector<int> bounds;
  if (p.N != 1) {
    why = "pipeline: N = " + std::to_string(p.N) + " (one sequence only)";
    return bounds;
  }
  // The 32-row spine must leave room beside it: at most one block per SM (Hv 64 at 1 x 8192:
  // 256 blocks, two per SM, left stages 1 and 3 no room and took 0.880 ms against v7's 0.791).
  if (int64_t{p.Hv} * (kD / 32) > sm_count()) {
    why = "pipeline: Hv·4 = " + std::to_string(int64_t{p.Hv} * (kD / 32)) +
          " spine blocks of 32 rows would not leave room on " + std::to_string(sm_count()) + " SMs";
    return bounds;
  }
  if (segments > 1) {
    why = "pipeline: the split spine runs (" + std::to_string(segments) + " segments)";
    return bounds;
  }
  if (timed) {
    why = "pipeline: off under HYBRID_GDN_CHUNK_STAGES=1 (the stage timer times serial stages)";
    return bounds;
  }
  const int total = p.max_chunks;
  // HYBRID_GDN_CHUNK_PIPE_RATIO=r (percent): pieces shrinking by r / 100 from the first, s_k =
  // max(x·r^k, min), x = total·(1 − r), min = HYBRID_GDN_CHUNK_PIPE_MIN (default 16) chunks; the
  // piece that would leave less than min takes the rest. Stage 1's pieces run back to back on
  // their stream, the first on every SM and the others on the 68 SMs the spine leaves, where they
  // do ~0.65 as many chunks a µs as the spine (1 x 8192: ~2.35 µs a chunk against ~1.56, session
  // 20), so a piece's stage 1 ends before the spine has done the piece before it only when each
  // piece is at most ~0.65 of the one before.
  // HYBRID_GDN_CHUNK_PIPE_SIZES=a,b,c: the pieces' chunk counts, the last one taking the rest.
  static const std::vector<int> sizes = [] {
    std::vector<int> v;
    const char* e = std::getenv("HYBRID_GDN_CHUNK_PIPE_SIZES");
    for (const char* c = e; c != nullptr && *c != '\0';) {
      char* end = nullptr;
      const long x = std::strtol(c, &end, 10);
      if (end == c || x < 1) break;
      v.push_back(static_cast<int>(x));
      c = *end == ',' ? end + 1 : end;
    }
    return v;
  }();
  if (!sizes.empty()) {
    bounds.push_back(0);
    for (int s : sizes) {
      if (bounds.back() + s >= total || static_cast<int>(bounds.size()) >= kMaxPieces) break;
      bounds.push_back(bounds.back() + s);
    }
    bounds.push_back(total);
    if (bounds.size() < 3) {
      why = "pipeline: HYBRID_GDN_CHUNK_PIPE_SIZES leaves one piece";
      bounds.clear();
    }
    return bounds;
  }
  // The default below 1024 chunks (where stage 1 writes P̃ and bounds the pipeline), from 128 (where
  // the even plan below starts): r 50 up to 256 chunks, else 65, pieces of at least 16 (session 20
  // runs 3-5, same-run against the even plan: 1 x 8192 (65, 32, 16, 16) 313-314 µs against 325,
  // 1 x 32768 (180, 117, 76, 49, 32, 21, 16, 22) 1149-1151 against 1161-1196; r 65 at 1 x 8192 and
  // r 50 at 1 x 32768 lost, and so did every ratio at 1 x 131072). At 1 x 16384 (257 chunks) the
  // even plan beat r 65 in four same-run pairs on two machines (session 21 runs 2 and 4: 602-606
  // against 607-613 µs; r 50 618, r 75 643), so from 257 chunks the even plan runs up to 383
  // (where r 65 takes over is not measured: 384 is halfway between 257 and 513 on a log scale).
  // Session 24 (run 5, with stage 1 in pairs of heads, twice each): 1 x 32768 r 70 1092-1094 µs
  // against r 65 1114-1115 (r 60 1134, r 55 1154), so r 70 from 384 chunks; 1 x 8192 kept r 50
  // (307.7-307.9 µs; r 40 / 45 / 55 / 60 318-320 / 313-314 / 309-310 / 315-317).
  // HYBRID_GDN_CHUNK_PIPE_RATIO=100: the even plan everywhere.
  static const int ratio_env = env_int("HYBRID_GDN_CHUNK_PIPE_RATIO", 0);
  const int ratio = ratio_env > 0                  ? ratio_env
                    : total >= 1024 || total < 128 ? 0
                    : total <= 256                 ? 50
                    : total < 384                  ? 0
                                                   : 70;
  if (ratio > 0 && ratio < 100) {
    static const int min_piece = std::max(2, env_int("HYBRID_GDN_CHUNK_PIPE_MIN", 16));
    const double r = ratio / 100.0;
    double x = total * (1.0 - r);
    bounds.push_back(0);
    int done = 0;
    while (done < total && static_cast<int>(bounds.size()) < kMaxPieces) {
      int s = std::max(min_piece, static_cast<int>(std::lround(x)));
      if (total - done - s < min_piece) s = total - done;
      done += s;
      bounds.push_back(done);
      x *= r;
    }
    bounds.back() = total;
    if (bounds.size() < 3) {
      why = "pipeline: " + std::to_string(total) + " chunks, fewer than two pieces at ratio " +
            std::to_string(ratio) + "%";
      bounds.clear();
    }
    return bounds;
  }
  static const int chunks = env_int("HYBRID_GDN_CHUNK_PIPE_CHUNKS", 0);
  int m = chunks > 0 ? std::max(2, chunks) : std::clamp(total / 4, 64, 128);
  m = std::max(m, (total + kMaxPieces - 3) / (kMaxPieces - 2));
  if (total < 2 * m) {
    why = "pipeline: " + std::to_string(total) + " chunks, fewer than two pieces of " +
          std::to_string(m);
    return bounds;
  }
  bounds.push_back(0);
  for (int c = m / 2; c < total - m / 2; c += m) bounds.push_back(c);
  bounds.push_back(total);
  return bounds;
}

// The 16-byte row loads of wu_tc5_kernel / output_tc_kernel (kVecIn): bf16 inputs whose rows of k,
// v (and q when with_q) start 16-byte aligned (base pointers and element strides multiples of 8).
bool vec_inputs(const Params& p, DType in, bool with_q) {
  if (in != DType::bf16) return false;
  auto al = [](const void* x) { return reinterpret_cast<uintptr_t>(x) % 16 == 0; };
  auto st = [](int64_t s) { return s % 8 == 0; };
  bool ok = al(p.k) && al(p.v) && st(p.k_t) && st(p.k_h) && st(p.v_t) && st(p.v_h);
  if (with_q) ok = ok && al(p.q) && st(p.q_t) && st(p.q_h);
  return ok;
}
// The 16-byte output stores of output_tc_kernel (kVecOut): out rows 16-byte aligned (elem: the
// output's size).
bool vec_output(const Params& p, size_t elem) {
  const int64_t per = static_cast<int64_t>(16 / elem);
  return reinterpret_cast<uintptr_t>(p.out) % 16 == 0 && p.o_t % per == 0 && p.o_h % per == 0;
}

// Clusters of the cluster spine that fit on the GPU at once (0 if the query fails), per pool
// dtype; the kernel's shared-memory attributes are set here as for its launch.
template <class St, int CZ, class Out = NoOut>
int spine_cluster_capacity() {
  static const int clusters = [] {
    auto* kern = spine_tc_kernel<St, 16, 3, CZ, Out>;
    constexpr int smem = spine_smem<16, 3, CZ, !std::is_same_v<Out, NoOut>>();
    if (cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem) !=
            cudaSuccess ||
        cudaFuncSetAttribute(kern, cudaFuncAttributePreferredSharedMemoryCarveout,
                             cudaSharedmemCarveoutMaxShared) != cudaSuccess) {
      (void)cudaGetLastError();
      return 0;
    }
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(1, 1, CZ);
    cfg.blockDim = dim3(128);
    cfg.dynamicSmemBytes = smem;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = 1;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = CZ;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    int n = 0;
    if (cudaOccupancyMaxActiveClusters(&n, kern, &cfg) != cudaSuccess) {
      (void)cudaGetLastError();
      return 0;
    }
    return n;
  }();
  return clusters;
}

// Segments S and chunks per segment G of the spine (G = 0: no split), as tc_run splits it, and
// whether it has 16-row slices (N·Hv·8 blocks fit two per SM).
int spine_plan(const Params& p, int sms, bool& narrow, int& G, std::string& no_split) {
  narrow = int64_t{p.N} * p.Hv * (kD / 16) <= int64_t{2} * sms;
  int S = spine_segments(p, narrow, sms, no_split);
  G = 0;
  if (S > 1) {  // G chunks per segment; S again so that no segment is empty
    const int nch = (p.T + kC - 1) / kC;
    G = (nch + S - 1) / S;
    S = (nch + G - 1) / G;
  }
  return S;
}

// HYBRID_GDN_CHUNK_CLUSTER=8|4|0: the cluster size the spine must use (0: none), or -1 when unset
// or any other value (then the capacity query decides). Read once per process.
int forced_cluster_size() {
  static const int forced = [] {
    const char* v = std::getenv("HYBRID_GDN_CHUNK_CLUSTER");
    if (v == nullptr) return -1;
    const std::string s(v);
    return s == "8" ? 8 : s == "4" ? 4 : s == "0" ? 0 : -1;
  }();
  return forced;
}

// Cluster size (8 or 4) of the fused-output spine for this call, or 0 with the reason in why:
// it needs the 16-row slices and all clusters of its largest launch placed at once, as the
// cluster spine does (HYBRID_GDN_CHUNK_CLUSTER=8|4 forces the size, =0 refuses).
int fused_cluster_size(const GdnChunkPrefill& a, std::string& why) {
  const Params p = make_params(a);
  const int sms = sm_count();
  bool narrow = false;
  int G = 0;
  std::string no_split;
  const int S = spine_plan(p, sms, narrow, G, no_split);
  if (!narrow) {
    why = "fused output: N·Hv·8 = " + std::to_string(int64_t{p.N} * p.Hv * (kD / 16)) +
          " spine blocks of 16 rows do not fit two per SM on " + std::to_string(sms) +
          " SMs, so the spine has 32-row slices, which run without clusters";
    return 0;
  }
  const int forced = forced_cluster_size();
  if (forced == 0) {
    why = "fused output: HYBRID_GDN_CHUNK_CLUSTER=0 turns the cluster spine off";
    return 0;
  }
  if (forced > 0) return forced;
  const int64_t blocks = int64_t{S > 1 ? S : p.N} * p.Hv * (S > 1 ? 2 * kD / 16 : kD / 16);
  int cap8 = 0, cap4 = 0;
  auto caps = [&](auto ts, auto to) {
    cap8 = spine_cluster_capacity<decltype(ts), 8, decltype(to)>();
    cap4 = spine_cluster_capacity<decltype(ts), 4, decltype(to)>();
  };
  auto with_out = [&](auto ts) {
    if (a.out.dtype() == DType::bf16)
      caps(ts, bf16{});
    else
      caps(ts, float{});
  };
  if (a.state.dtype() == DType::bf16)
    with_out(bf16{});
  else
    with_out(float{});
  if (int64_t{cap8} * 8 >= blocks) return 8;
  if (int64_t{cap4} * 4 >= blocks) return 4;
  why = "fused output: the spine's " + std::to_string(blocks) +
        " blocks do not all fit at once as clusters of 8 (" + std::to_string(cap8) +
        " fit) or of 4 (" + std::to_string(cap4) + " fit)";
  return 0;
}

// The tensor-core op.
void tc_run(const GdnChunkPrefill& a, Context& ctx, const TcOptions& opt) {
  const bool deep_ring = opt.deep_ring;
  Params p = make_params(a);
  const int sms = sm_count();
  // Spine: 32 V rows per block, or 16 when the N·Hv·8 blocks of 16 rows all fit at once (two
  // blocks per SM: 84 KiB or 92 KiB of shared memory each). The chain of chunks is as long
  // either way; 16-row blocks shorten each step and use the SMs 32-row blocks would leave idle.
  bool narrow = false;
  int G = 0;
  std::string no_split;
  const int S = spine_plan(p, sms, narrow, G, no_split);
  const size_t seg_bytes = static_cast<size_t>(S) * p.Hv * kD * kD * sizeof(float);
  StageTimer timer(ctx);
  std::string no_pipe;
  const std::vector<int> pieces =
      opt.pipeline ? pipe_plan(p, S, timer.on(), no_pipe) : std::vector<int>{};
  const bool pipelined = pieces.size() > 2;
  // The pipeline's spine: the warpgroup spine (spine_ws_kernel) where it can run (sm_90a builds on
  // an sm_90 GPU: wg_spine_available()), else, or with HYBRID_GDN_CHUNK_PIPE_SPINE=32, 32-row
  // slices with the ring of 2 (one block per SM at 1 x 8192, Hv 32, leaving room for stage 1 and
  // 3 blocks beside it); =16 (16-row slices, ring of 2: two blocks per SM, room for one stage-1
  // block) or =16r3 (v7's spine at 1 x 8192: 16-row slices, ring of 3, which fill the shared
  // memory of the SMs they are on). Session 14 run 3 (pieces of 16): 32-row 494 / 1801 / 6517 µs
  // at 1 x 8192 / 32768 / 131072, 16 543 / 2062 / 7700, 16r3 553 / 2107 / 7880; session 16 run 5
  // (pieces of 32): ws 415 / 1568 / 5817, 32-row 463 / 1685 / 6447.
  static const std::string pipe_spine = [] {
    const char* v = std::getenv("HYBRID_GDN_CHUNK_PIPE_SPINE");
    return std::string(v ? v : "ws");
  }();
  // Outside the pipeline (the v7 path: batches, Hv 64, short sequences, the stage timer) the
  // warpgroup spine runs an unsplit, unfused spine when its N·Hv·2 blocks fill at least half the
  // SMs. Session 16 runs 8-9: 8 x 4096 (512 blocks) 1661 µs against 1852 with the default spine
  // there, 1 x 8192 at Hv 64 (128 blocks) 746 against 795. Fewer blocks (Hv 32, one sequence too
  // short for the pipeline: 64) keep the mma.sync spines, whose 16- and 32-row slices give 2-4x
  // the blocks (not measured with ws). HYBRID_GDN_CHUNK_WS_SPINE=1 takes it for every unsplit
  // spine (and so times it alone under the stage timer), =0 for none.
  static const int ws_outside = env_int("HYBRID_GDN_CHUNK_WS_SPINE", -1);
  const bool ws_fills = 2 * int64_t{p.N} * p.Hv * (kD / kWgRows) >= sm_count();
  // Fused output (not with the pipeline, which runs stage 3 beside the spine): no h (0 bytes),
  // Q̂ [T, Hk, K] bf16 at the start of p.extra.
  const bool fused = opt.fused_output && !pipelined;
  const bool ws_spine =
      wg_spine_available() &&
      (pipelined ? pipe_spine == "ws"
                 : (ws_outside == 1 || (ws_outside != 0 && ws_fills)) && S == 1 && !fused);
  // The warpgroup spine's fused output (spine_ws_kernel's kOut, ws_output): stage 1 writes Q̂,
  // there is no h workspace, no V_new and no stage 3. Session 18 (same runs, docs/PERFORMANCE.md):
  // unpipelined it wins everywhere (8 x 4096 1450 -> 1064 µs, Hv 64 604 -> 476); pipelined, where
  // stage 1's pieces on the SMs the spine leaves bound it, it wins at 1 x 131072 (4886 -> 4573)
  // and not below (1 x 8192 334 -> 347, 1 x 32768 even), so it is on from 1024 chunks there.
  // (Raw q in the ring, normalised by ws_output, with no Q̂ from stage 1, was slower: 1 x 131072
  // 4573 -> 5230, Hv 64 476 -> 498: stage 1's Q̂ reaches the spine from L2, raw q from DRAM.)
  // Session 19 (runs 2-3): with P̃ from stage 1 (ws_pt; wu_tc5_kernel's kWriteP, v7 with 16-byte
  // rows, which every default call has) the pipeline's fused spine wins below 1024 chunks (1 x
  // 8192 334 -> 328 µs, 1 x 32768 1234 -> 1206, against the unfused spine), where stage 1's
  // pieces bound the pipeline and lose stage 3 beside them; at 1 x 131072 it loses (4548 with the
  // producer's P̃ against 4640), and outside the pipeline, where stage 1 does not run beside the
  // spine, its cost in stage 1 (118 -> 159 µs at 1 x 8192) outweighs the spine's gain (236 ->
  // 205 µs): so the producer computes P̃ itself there.
  // HYBRID_GDN_CHUNK_WS_OUT=1 / 0: always (where the output rows allow 16-byte stores) / never;
  // HYBRID_GDN_CHUNK_WS_PT=1 / 0: P̃ from stage 1 wherever it can / never.
  static const int ws_out_env = env_int("HYBRID_GDN_CHUNK_WS_OUT", -1);
  static const int ws_pt_env = env_int("HYBRID_GDN_CHUNK_WS_PT", -1);
  const bool pt_ok = opt.wu_v5 && opt.wu_v7 && vec_inputs(p, a.q.dtype(), true);
  const bool pt_auto = pipelined && p.max_chunks < 1024;
  const bool ws_out_auto = !pipelined || p.max_chunks >= 1024 || (pt_ok && ws_pt_env != 0);
  const bool ws_fused = ws_spine && (ws_out_env == 1 || (ws_out_env != 0 && ws_out_auto)) &&
                        vec_output(p, dtype_size(a.out.dtype()));
  const bool ws_pt = ws_fused && pt_ok && (ws_pt_env == 1 || (ws_pt_env != 0 && pt_auto));
  const bool q_hat = fused || ws_fused;  // stage 1 writes Q̂ to p.qn (and P̃ to p.pt: ws_pt)
  auto up256 = [](size_t b) { return (b + 255) / 256 * 256; };
  // p.extra: Q̂ [T, Hk, K], P̃ [max_chunks, Hv, 64, 64] (bf16), then the split spine's segments or
  // the pipeline's carry.
  const size_t qn_bytes = q_hat ? up256(static_cast<size_t>(p.T) * p.Hk * kD * sizeof(bf16)) : 0;
  const size_t fused_bytes =
      qn_bytes +
      (ws_pt ? up256(static_cast<size_t>(p.max_chunks) * p.Hv * kC * kC * sizeof(bf16)) : 0);
  // The pipeline's carry: the state [Hv, V, K] f32 between the spine's pieces.
  const size_t carry_bytes = pipelined ? static_cast<size_t>(p.Hv) * kD * kD * sizeof(float) : 0;
  plan_workspace(p, sizeof(bf16), q_hat ? 0 : sizeof(bf16), ctx, sizeof(bf16),
                 fused_bytes + (S > 1 ? 3 * seg_bytes : 0) + carry_bytes);
  if (q_hat) p.qn = p.extra;
  if (ws_pt) p.pt = static_cast<char*>(p.extra) + qn_bytes;
  if (S > 1)
    ctx.log(LogLevel::debug, "[gdn_chunk_prefill] cuda_tc: split-sequence spine, " +
                                 std::to_string(S) + " segments of " + std::to_string(G) +
                                 " chunks");
  else
    ctx.log(LogLevel::debug,
            "[gdn_chunk_prefill] cuda_tc: split-sequence spine not used: " + no_split);
  const bool ring3 = deep_ring && narrow;
  if (deep_ring && !narrow)
    ctx.log(LogLevel::debug,
            "[gdn_chunk_prefill] cuda_tc_v3: spine ring of 2 (32-row spine slices: " +
                std::to_string(int64_t{p.N} * p.Hv * (kD / 16)) +
                " blocks of 16 rows would not fit two per SM; the deep ring needs 16-row slices)");
  timer.mark(0);
  launch_chunk_index(p, ctx);
  timer.mark(1);
  dim3 grid_chunks(static_cast<unsigned>(p.max_chunks), static_cast<unsigned>(p.Hv));
  // Where stages 1 and 3 and the spine launch (the pipeline moves stages 1 and 3 to its side
  // streams and sets p.chunk_base, grid_chunks.x and the spine's piece per launch).
  cudaStream_t wu_stream = as_stream(ctx.stream()), out_stream = wu_stream;
  int spine_priority = 0;           // 0: the launch's default; else cudaLaunchAttributePriority
  bool spine_programmatic = false;  // a pipeline piece after the first (unless _PIPE_PDL=0)
  bool wu_programmatic = false;     // stage 1's pipeline piece after the first, under _WU_PDL=1
  // Stage 1 in pairs of heads (wu_pair_kernel) where it writes P̃ and the GVA ratio is even, and
  // where it writes Q̂ only (wu_pair_kernel<false>) at ratio 2; HYBRID_GDN_WU_PAIR=0: never; =2:
  // Q̂ only at any even ratio too. Session 25 run 3 (same run, =2 against the default of then):
  // 8 x 4096 1068 -> 1024 µs, 1 x 65536 2253 -> 2127, 1 x 131072 4383 -> 4131, but Hv 64 (ratio
  // 4) 476 -> 487, so ratio 4 keeps one head a block there.
  static const int wu_pair_env = env_int("HYBRID_GDN_WU_PAIR", 1);
  const bool wu_pair = wu_pair_env != 0 && p.ratio % 2 == 0;
  const bool wu_pair_q_hat = wu_pair_env == 2 || (wu_pair_env == 1 && p.ratio == 2);
  // Every kernel asks for the largest shared-memory carveout (prepare_kernel).
  auto wu = [&](auto tin) {
    using In = decltype(tin);
    auto* kern = q_hat              ? wu_tc_kernel<In, true, true>
                 : opt.fast_inverse ? wu_tc_kernel<In, true>
                                    : wu_tc_kernel<In, false>;
    int smem = kWuSmem;
    bool pair = false;  // wu_pair_kernel instead of kern
    if (opt.wu_v5) {    // 16-byte row loads where the inputs allow them
      smem = kWu5Smem;
      kern = q_hat ? wu_tc5_kernel<In, false, true> : wu_tc5_kernel<In, false, false>;
      if (opt.wu_v7)
        kern = q_hat ? wu_tc5_kernel<In, false, true, true> : wu_tc5_kernel<In, false, false, true>;
      if constexpr (std::is_same_v<In, bf16>)
        if (vec_inputs(p, DType::bf16, q_hat)) {
          kern = q_hat ? wu_tc5_kernel<In, true, true> : wu_tc5_kernel<In, true, false>;
          if (opt.wu_v7) {  // T over the V tile: 54 016 bytes, four blocks per SM
            kern = ws_pt   ? wu_tc5_kernel<In, true, true, true, true>
                   : q_hat ? wu_tc5_kernel<In, true, true, true>
                           : wu_tc5_kernel<In, true, false, true>;
            smem = kWu7Smem;
            pair = wu_pair && (ws_pt || (q_hat && wu_pair_q_hat));
          }
        }
    }
    if (pair) {
      auto* pk = ws_pt ? wu_pair_kernel<true> : wu_pair_kernel<false>;
      prepare_kernel(pk, kPairSmem);
      launch_programmatic(pk, dim3(grid_chunks.x, grid_chunks.y / 2), dim3(256), kPairSmem,
                          wu_stream, wu_programmatic, p);
      return;
    }
    prepare_kernel(kern, smem);
    launch_programmatic(kern, grid_chunks, dim3(128), smem, wu_stream, wu_programmatic, p);
  };
  auto run_wu = [&] {
    if (a.q.dtype() == DType::bf16)
      wu(__nv_bfloat16{});
    else
      wu(float{});
  };
  if (!pipelined) run_wu();
  timer.mark(2);
  SpineSplit sp;
  if (S > 1) {
    char* base = static_cast<char*>(p.extra) + fused_bytes;
    sp.seg_chunks = G;
    sp.segments = S;
    sp.start = reinterpret_cast<float*>(base);
    sp.b = reinterpret_cast<float*>(base + seg_bytes);
    sp.m = reinterpret_cast<float*>(base + 2 * seg_bytes);
  }
  auto spine = [&](auto ts, auto sl, auto nw, auto cz, auto to) {
    constexpr int SL = decltype(sl)::value, NW = decltype(nw)::value, CZ = decltype(cz)::value;
    using Out = decltype(to);
    constexpr int smem = spine_smem<SL, NW, CZ, !std::is_same_v<Out, NoOut>>();
    auto* kern = spine_tc_kernel<decltype(ts), SL, NW, CZ, Out>;
    prepare_kernel(kern, smem);
    auto launch = [&](unsigned x, unsigned z, const SpineSplit& run) {
      const dim3 grid(x, static_cast<unsigned>(p.Hv), z);
      launch_spine(kern, grid, smem, as_stream(ctx.stream()), CZ == 0 ? spine_priority : 0,
                   CZ == 0 && spine_programmatic, CZ, p, run);
    };
    if (S == 1) {
      launch(static_cast<unsigned>(p.N), kD / SL, sp);
      return;
    }
    SpineSplit pass = sp;  // 1: segment 0 in full, the others' B_s and M_s
    pass.seg_base = 0;
    pass.pass1 = 1;
    launch(static_cast<unsigned>(S), 2 * kD / SL, pass);
    if (S > 2) {  // 2: start[s + 1] = start[s]·M_s + B_s
      segment_combine_kernel<<<dim3(static_cast<unsigned>(p.Hv), kD / 32), 256, 0,
                               as_stream(ctx.stream())>>>(p, sp);
      HYBRID_CUDA_CHECK_LAUNCH();
    }
    pass.seg_base = 1;  // 3: segments 1..S−1 in full from their start states
    pass.pass1 = 0;
    launch(static_cast<unsigned>(S - 1), kD / SL, pass);
  };
  // The deep ring (W, U, γ two chunks ahead) fits two blocks per SM at 16 rows only; the cluster
  // spine is the deep ring with W and K̂ shared by the 8 slices of a head, used when all its
  // clusters of the largest launch fit on the GPU at once (else the deep ring, logged).
  // Clusters of 8 when all of the largest launch's clusters fit at once, else of 4 when those do
  // (half the sharing, easier to place on the GPCs), else no clusters (the deep ring; logged).
  // HYBRID_GDN_CHUNK_CLUSTER=8 or 4 forces the size (to test both on any GPU; a launch whose
  // clusters do not all fit runs them in waves, slower but correct), =0 turns clusters off.
  using i0 = std::integral_constant<int, 0>;
  using i16 = std::integral_constant<int, 16>;
  using i3 = std::integral_constant<int, 3>;
  std::string spine_note;  // the cluster size chosen, for the stage timer's line
  auto with_slice = [&](auto ts) {
    using St = decltype(ts);
    if (ws_spine) {
      auto launch_ws = [&](auto* kern, int smem) {
        prepare_kernel(kern, smem);
        launch_spine(
            kern, dim3(static_cast<unsigned>(p.N), static_cast<unsigned>(p.Hv), kD / kWgRows), smem,
            as_stream(ctx.stream()), spine_priority, spine_programmatic, 0, p, sp, 256);
      };
      const bool out_bf16 = a.out.dtype() == DType::bf16;
      if (!ws_fused)
        launch_ws(spine_ws_kernel<St>, kWsSmem);
      else if (ws_pt)
        out_bf16 ? launch_ws(spine_ws_kernel<St, bf16, true>, ws_smem<true, true>())
                 : launch_ws(spine_ws_kernel<St, float, true>, ws_smem<true, true>());
      else
        out_bf16 ? launch_ws(spine_ws_kernel<St, bf16>, ws_smem<true>())
                 : launch_ws(spine_ws_kernel<St, float>, ws_smem<true>());
      return;
    }
    if (pipelined) {
      if (pipe_spine == "16")
        spine(ts, i16{}, std::integral_constant<int, 2>{}, i0{}, NoOut{});
      else if (pipe_spine == "16r3")
        spine(ts, i16{}, i3{}, i0{}, NoOut{});
      else
        spine(ts, std::integral_constant<int, 32>{}, std::integral_constant<int, 2>{}, i0{},
              NoOut{});
      return;
    }
    if (fused) {  // cuda_tc_v4_fused: the cluster spine with the output (its supports() checked
                  // that clusters of 8 or 4 are possible)
      std::string why;
      const int cz = fused_cluster_size(a, why);
      if (cz == 0) fail("[gdn_chunk_prefill] cuda_tc_v4_fused: ", why);
      spine_note = ", fused clusters of " + std::to_string(cz);
      ctx.log(LogLevel::debug, "[gdn_chunk_prefill] cuda_tc_v4_fused: clusters of " +
                                   std::to_string(cz) + ", " + std::to_string(S) + " segment(s)");
      auto run_out = [&](auto to) {
        if (cz == 8)
          spine(ts, i16{}, i3{}, std::integral_constant<int, 8>{}, to);
        else
          spine(ts, i16{}, i3{}, std::integral_constant<int, 4>{}, to);
      };
      if (a.out.dtype() == DType::bf16)
        run_out(bf16{});
      else
        run_out(float{});
      return;
    }
    if (ring3 && opt.cluster_spine) {
      const int64_t blocks = int64_t{S > 1 ? S : p.N} * p.Hv * (S > 1 ? 2 * kD / 16 : kD / 16);
      const int cap8 = spine_cluster_capacity<St, 8>(), cap4 = spine_cluster_capacity<St, 4>();
      int cz = int64_t{cap8} * 8 >= blocks ? 8 : int64_t{cap4} * 4 >= blocks ? 4 : 0;
      if (forced_cluster_size() >= 0) cz = forced_cluster_size();
      spine_note = ", clusters of " + std::to_string(cz) + " (" + std::to_string(cap8) + " / " +
                   std::to_string(cap4) + " clusters of 8 / 4 fit at once, " +
                   std::to_string(blocks) + " blocks)";
      ctx.log(LogLevel::debug,
              "[gdn_chunk_prefill] cuda_tc_v3_cluster: " + std::to_string(blocks) +
                  " spine blocks; clusters of 8 / 4 that fit at once: " + std::to_string(cap8) +
                  " / " + std::to_string(cap4) +
                  (cz > 0 ? "; clusters of " + std::to_string(cz)
                          : std::string("; no clusters (deep ring only)")) +
                  (forced_cluster_size() >= 0 ? " (HYBRID_GDN_CHUNK_CLUSTER)" : ""));
      if (cz == 8) {
        spine(ts, i16{}, i3{}, std::integral_constant<int, 8>{}, NoOut{});
        return;
      }
      if (cz == 4) {
        spine(ts, i16{}, i3{}, std::integral_constant<int, 4>{}, NoOut{});
        return;
      }
    }
    if (ring3)
      spine(ts, i16{}, i3{}, i0{}, NoOut{});
    else if (narrow)
      spine(ts, i16{}, std::integral_constant<int, 2>{}, i0{}, NoOut{});
    else
      spine(ts, std::integral_constant<int, 32>{}, std::integral_constant<int, 2>{}, i0{}, NoOut{});
  };
  auto run_spine = [&] {
    if (a.state.dtype() == DType::bf16)
      with_slice(bf16{});
    else
      with_slice(float{});
  };
  auto output = [&](auto tin, auto tout) {
    using In = decltype(tin);
    using Out = decltype(tout);
    auto* kern = output_tc_kernel<In, Out>;
    if (opt.out_v5) {
      const bool vin = vec_inputs(p, a.q.dtype(), true), vout = vec_output(p, sizeof(Out));
      if constexpr (std::is_same_v<In, bf16>) {
        kern = vin ? (vout ? output_tc_kernel<In, Out, true, true>
                           : output_tc_kernel<In, Out, true, false>)
                   : (vout ? output_tc_kernel<In, Out, false, true> : kern);
        if (opt.out_v7 && vin)  // the v7 path with 16-byte q rows only (else the v5 kernels)
          kern = vout ? output_tc_kernel<In, Out, true, true, true>
                      : output_tc_kernel<In, Out, true, false, true>;
      } else if (vout)
        kern = output_tc_kernel<In, Out, false, true>;
    }
    prepare_kernel(kern, kOutSmem);
    kern<<<grid_chunks, 128, kOutSmem, out_stream>>>(p);
    HYBRID_CUDA_CHECK_LAUNCH();
  };
  auto with_out = [&](auto tin) {
    if (a.out.dtype() == DType::bf16)
      output(tin, __nv_bfloat16{});
    else
      output(tin, float{});
  };
  auto run_out = [&] {
    if (fused || ws_fused)  // the spine wrote the output (stage 3 shows 0 us)
      return;
    if (a.q.dtype() == DType::bf16)
      with_out(__nv_bfloat16{});
    else
      with_out(float{});
  };
  if (!pipelined) {
    run_spine();
    timer.mark(3);
    run_out();
  } else {
    // Stage 1 of every piece on side stream 1; the spine's pieces on the caller's stream, each
    // after its piece's stage 1; stage 3 of a piece on side stream 2 after its spine piece; the
    // caller's stream then waits for side stream 2's last (side stream 1's last is before the
    // last spine piece).
    PipeSync& ps = pipe_sync();
    std::lock_guard<std::mutex> lock(ps.mu);
    const cudaStream_t main = as_stream(ctx.stream());
    const int n_pieces = static_cast<int>(pieces.size()) - 1;
    sp.carry = reinterpret_cast<float*>(static_cast<char*>(p.extra) + fused_bytes);
    HYBRID_CUDA_CHECK(cudaEventRecord(ps.fork, main));
    HYBRID_CUDA_CHECK(cudaStreamWaitEvent(ps.wu, ps.fork, 0));
    HYBRID_CUDA_CHECK(cudaStreamWaitEvent(ps.out, ps.fork, 0));
    wu_stream = ps.wu;
    out_stream = ps.out;
    // The spine's pieces at the device's highest priority, so that the block scheduler gives them
    // the SMs before the stage-1 / stage-3 blocks waiting beside them (graphs keep it: runtime.cu
    // instantiates with node priorities). HYBRID_GDN_CHUNK_PIPE_PRIORITY=0 launches them plainly:
    // session 14 run 3, 1 x 8192 605 µs against 494 (pieces of 16).
    static const bool prioritised = env_int("HYBRID_GDN_CHUNK_PIPE_PRIORITY", 1) != 0;
    spine_priority = prioritised ? ps.greatest_priority : 0;
    auto piece_grid = [&](int i) {
      p.chunk_base = pieces[i];
      grid_chunks.x = static_cast<unsigned>(pieces[i + 1] - pieces[i]);
    };
    // HYBRID_GDN_CHUNK_WU_PDL=1: stage 1's pieces after the first programmatically, so that each
    // piece's last wave shares the SMs with the next piece's first. Off by default: the spine then
    // waits longer for each piece's last blocks (session 20 run 5: 1 x 8192 in pieces of 65, 32,
    // 16, 16, 313.6 µs plainly against 330.4; 1 x 32768 (180, 117, ..) 1151 against 1188; only
    // plans of many small pieces gained).
    static const bool wu_pdl = env_on("HYBRID_GDN_CHUNK_WU_PDL");
    for (int i = 0; i < n_pieces; ++i) {
      piece_grid(i);
      wu_programmatic = wu_pdl && i > 0;
      run_wu();
      HYBRID_CUDA_CHECK(cudaEventRecord(ps.wu_done[i], ps.wu));
    }
    // The pieces after the first launched programmatically, so that their blocks are placed and
    // waiting (griddepcontrol.wait) when the piece before ends; HYBRID_GDN_CHUNK_PIPE_PDL=0
    // launches them plainly. Session 15 run 2: 1 x 8192 / 32768 / 131072 463 / 1693-1703 /
    // 6659-6696 µs against 468 / 1709 / 6758-6791 (1-1.5%; the first / last piece sizes 8 did not
    // help).
    static const bool programmatic = env_int("HYBRID_GDN_CHUNK_PIPE_PDL", 1) != 0;
    for (int i = 0; i < n_pieces; ++i) {
      HYBRID_CUDA_CHECK(cudaStreamWaitEvent(main, ps.wu_done[i], 0));
      sp.piece_begin = pieces[i];
      sp.piece_end = pieces[i + 1];
      spine_programmatic = programmatic && i > 0;
      run_spine();
      HYBRID_CUDA_CHECK(cudaEventRecord(ps.spine_done[i], main));
      HYBRID_CUDA_CHECK(cudaStreamWaitEvent(ps.out, ps.spine_done[i], 0));
      piece_grid(i);
      run_out();
    }
    HYBRID_CUDA_CHECK(cudaEventRecord(ps.out_done, ps.out));
    HYBRID_CUDA_CHECK(cudaStreamWaitEvent(main, ps.out_done, 0));
    if (ctx.log_level() >= LogLevel::debug) {  // (no strings built per call otherwise)
      std::string sizes;                       // the pieces' chunk counts
      for (int i = 0; i < n_pieces; ++i)
        sizes += (i ? "," : "") + std::to_string(pieces[i + 1] - pieces[i]);
      ctx.log(LogLevel::debug, "[gdn_chunk_prefill] cuda_tc_v9: " + std::to_string(n_pieces) +
                                   " pieces (" + sizes + " chunks), spine " +
                                   (pipe_spine == "ws" && !wg_spine_available()
                                        ? std::string("32 (the warpgroup spine needs sm_90a)")
                                        : pipe_spine) +
                                   (spine_priority != 0 ? " (priority)" : "") +
                                   (programmatic ? " (programmatic)" : ""));
    }
  }
  if (opt.pipeline && !pipelined)
    ctx.log(LogLevel::debug, "[gdn_chunk_prefill] cuda_tc_v9: " + no_pipe);
  timer.mark(4);
  std::string name = !opt.name.empty()               ? opt.name
                     : fused                         ? "cuda_tc_v4_fused"
                     : opt.cluster_spine             ? "cuda_tc_v3_cluster"
                     : deep_ring || opt.fast_inverse ? "cuda_tc_v3"
                                                     : "cuda_tc";
  // The warpgroup spine replaces whichever spine the variant's name describes.
  if (ws_spine)
    name = name.substr(0, name.find(" (")) +
           (ws_pt      ? " (warpgroup spine with the output, P̃ from stage 1)"
            : ws_fused ? " (warpgroup spine with the output)"
                       : " (warpgroup spine)");
  const std::string spine_line = ws_spine ? std::string()
                                          : std::string(", spine ") + (narrow ? "16" : "32") +
                                                "-row slices, ring " + (ring3 ? "3" : "2") + ", " +
                                                std::to_string(S) + " segment(s)" + spine_note;
  timer.report(ctx, name + ", fast inverse " + (opt.fast_inverse ? "on" : "off") + ", T " +
                        std::to_string(p.T) + ", N " + std::to_string(p.N) + ", Hv " +
                        std::to_string(p.Hv) + spine_line);
}

void tc_cuda(const GdnChunkPrefill& a, Context& ctx) {
  tc_run(a, ctx, TcOptions{});
}
void tc_v3_cuda(const GdnChunkPrefill& a, Context& ctx) {
  TcOptions opt;
  opt.deep_ring = true;
  opt.fast_inverse = true;
  tc_run(a, ctx, opt);
}
void tc_v3_cluster_cuda(const GdnChunkPrefill& a, Context& ctx) {
  TcOptions opt;
  opt.deep_ring = true;
  opt.fast_inverse = true;
  opt.cluster_spine = true;
  tc_run(a, ctx, opt);
}
void tc_v4_fused_cuda(const GdnChunkPrefill& a, Context& ctx) {
  TcOptions opt;
  opt.deep_ring = true;
  opt.fast_inverse = true;
  opt.cluster_spine = true;
  opt.fused_output = true;
  tc_run(a, ctx, opt);
}
// Why the fused-output spine (`cuda_tc_v4_fused`'s) cannot serve this call:
// HYBRID_GDN_CHUNK_FUSED=0 (to test and time cuda_tc_v3_cluster beside it) or
// fused_cluster_size()'s reason; nullopt when it can.
Reason fused_spine_refusal(const GdnChunkPrefill& a) {
  static const bool off = env_is_zero("HYBRID_GDN_CHUNK_FUSED");
  if (off) return std::string("fused output: turned off by HYBRID_GDN_CHUNK_FUSED=0");
  std::string why;
  if (fused_cluster_size(a, why) == 0) return why;
  return std::nullopt;
}
// `cuda_tc_v5`: cuda_tc_v4_fused where its fused spine can run, else cuda_tc_v3_cluster, in both
// cases with the v5 stage 1 (wu_tc5_kernel) and, without the fused spine, the v5 stage 3
// (output_tc_kernel's 16-byte paths). `cuda_tc_v7` (v7): the same with wu_tc5_kernel's and
// output_tc_kernel's kV7 paths.
void tc_v5_run(const GdnChunkPrefill& a, Context& ctx, bool v7, bool pipeline = false) {
  TcOptions opt;
  opt.deep_ring = true;
  opt.fast_inverse = true;
  opt.cluster_spine = true;
  opt.wu_v5 = true;
  opt.out_v5 = true;
  opt.wu_v7 = v7;
  opt.out_v7 = v7;
  const Reason not_fused = fused_spine_refusal(a);
  opt.fused_output = !not_fused;
  opt.pipeline = pipeline;  // cuda_tc_v9: the pipeline where its plan has pieces, else v7
  const std::string variant = pipeline ? "cuda_tc_v9" : v7 ? "cuda_tc_v7" : "cuda_tc_v5";
  if (not_fused)
    ctx.log(LogLevel::debug,
            "[gdn_chunk_prefill] " + variant + ": cluster spine and stage 3 (" + *not_fused + ")");
  opt.name = not_fused ? variant + " (cluster spine; not fused: " + *not_fused + ")"
                       : variant + " (fused spine)";
  tc_run(a, ctx, opt);
}
void tc_v5_cuda(const GdnChunkPrefill& a, Context& ctx) {
  tc_v5_run(a, ctx, false);
}
void tc_v7_cuda(const GdnChunkPrefill& a, Context& ctx) {
  tc_v5_run(a, ctx, true);
}
void tc_v9_cuda(const GdnChunkPrefill& a, Context& ctx) {
  tc_v5_run(a, ctx, true, true);
}
// HYBRID_GDN_CHUNK_PIPE=0 refuses every call (to test and time cuda_tc_v7 beside it).
Reason tc_v9_supports(const GdnChunkPrefill& a) {
  if (Reason r = tc_supports(a)) return r;
  static const bool off = env_is_zero("HYBRID_GDN_CHUNK_PIPE");
  if (off) return std::string("v9: turned off by HYBRID_GDN_CHUNK_PIPE=0");
  return std::nullopt;
}
// HYBRID_GDN_CHUNK_V7=0 refuses every call (to test and time cuda_tc_v5 beside it).
Reason tc_v7_supports(const GdnChunkPrefill& a) {
  if (Reason r = tc_supports(a)) return r;
  static const bool off = env_is_zero("HYBRID_GDN_CHUNK_V7");
  if (off) return std::string("v7: turned off by HYBRID_GDN_CHUNK_V7=0");
  return std::nullopt;
}
// HYBRID_GDN_CHUNK_V5=0 refuses every call (to test and time the v4 / v3 variants beside it).
Reason tc_v5_supports(const GdnChunkPrefill& a) {
  if (Reason r = tc_supports(a)) return r;
  static const bool off = env_is_zero("HYBRID_GDN_CHUNK_V5");
  if (off) return std::string("v5: turned off by HYBRID_GDN_CHUNK_V5=0");
  return std::nullopt;
}
// cuda_tc_v3_cluster's shapes, where the fused spine can run as clusters (else the reason).
// HYBRID_GDN_CHUNK_FUSED=0 refuses every call (to test and time cuda_tc_v3_cluster beside it).
Reason tc_v4_supports(const GdnChunkPrefill& a) {
  if (Reason r = tc_supports(a)) return r;
  return fused_spine_refusal(a);
}

}  // namespace
}  // namespace gdn_chunk

void register_gdn_chunk_tc(Registry& r) {
  r.add<GdnChunkPrefill>("gdn_chunk_prefill.cuda_tc", DeviceType::cuda, 10, gdn_chunk::tc_supports,
                         gdn_chunk::tc_cuda);
  // cuda_tc with the spine's W, U, γ copied two chunks ahead (16-row slices; spine_tc_kernel) and
  // stage 1's inverse in compile-time loops (wu_tc_kernel; TcOptions). Remove this line to fall
  // back to cuda_tc.
  r.add<GdnChunkPrefill>("gdn_chunk_prefill.cuda_tc_v3", DeviceType::cuda, 20,
                         gdn_chunk::tc_supports, gdn_chunk::tc_v3_cuda);
  // cuda_tc_v3 with the cluster spine (W and K̂ multicast to the 8 slices of a head). Remove this
  // line to fall back to cuda_tc_v3.
  r.add<GdnChunkPrefill>("gdn_chunk_prefill.cuda_tc_v3_cluster", DeviceType::cuda, 30,
                         gdn_chunk::tc_supports, gdn_chunk::tc_v3_cluster_cuda);
  // cuda_tc_v3_cluster with stage 3 fused into the cluster spine (no h, one launch fewer);
  // refuses, with the reason, where the cluster spine cannot run (then cuda_tc_v3_cluster).
  // Remove this line to fall back to cuda_tc_v3_cluster.
  r.add<GdnChunkPrefill>("gdn_chunk_prefill.cuda_tc_v4_fused", DeviceType::cuda, 40,
                         gdn_chunk::tc_v4_supports, gdn_chunk::tc_v4_fused_cuda);
  // The v5 stage 1 (and stage 3 where the output is not fused) over cuda_tc_v4_fused /
  // cuda_tc_v3_cluster; HYBRID_GDN_CHUNK_V5=0 falls back to those.
  r.add<GdnChunkPrefill>("gdn_chunk_prefill.cuda_tc_v5", DeviceType::cuda, 50,
                         gdn_chunk::tc_v5_supports, gdn_chunk::tc_v5_cuda);
  // cuda_tc_v5 with the v7 stage 1 (wu_tc5_kernel kV7) and stage 3 (output_tc_kernel kV7);
  // HYBRID_GDN_CHUNK_V7=0 falls back to cuda_tc_v5.
  r.add<GdnChunkPrefill>("gdn_chunk_prefill.cuda_tc_v7", DeviceType::cuda, 70,
                         gdn_chunk::tc_v7_supports, gdn_chunk::tc_v7_cuda);
  // cuda_tc_v7 with stages 1 and 3 beside the spine, piece by piece on two side streams, where
  // the plan allows it (one sequence, no split spine); HYBRID_GDN_CHUNK_PIPE=0 falls back to v7.
  r.add<GdnChunkPrefill>("gdn_chunk_prefill.cuda_tc_v9", DeviceType::cuda, 90,
                         gdn_chunk::tc_v9_supports, gdn_chunk::tc_v9_cuda);
}

}  // namespace hybrid::cuda
