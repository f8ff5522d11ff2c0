// CUDA: argmax, top_k, sample_rows, softmax_mass and repetition_penalty (each described above its
// kernels). argmax takes two launches (a row of logits is 151936 entries: one block a row would
// read 608 KB on one SM).
//   argmax_partial_kernel: grid N·chunks, 256 threads; block (n, c) scans entries
//     [c·per_chunk, (c + 1)·per_chunk) of row n (coalesced, each thread in ascending v), keeping
//     (max, lowest v) and whether it saw a NaN or +inf; two warp reductions; writes the pair, or
//     v = -1 for a chunk that saw a NaN / +inf, to the workspace.
//   argmax_final_kernel: a warp a row over its chunks' pairs, the same rule; -1 for a bad row or
//     one whose maximum is -inf (only -inf entries), as the CPU reference.
// chunks = ceil(V / 2048) clamped to [1, 64]: 64 blocks a row at Qwen3-Next's vocab. Bytes: N·V
// elements read once, N·chunks·8 + N·4 written. Ties keep the lowest v at every step (a thread's
// scan is ascending, the reductions compare v), so the result equals the CPU's bit for bit.
//
// top_k: one block of 1024 threads a row. A radix select over the row's 32-bit rank keys (the
// float's bits made order-preserving, -0 as +0, NaN above +inf) finds τ, the k-th largest key, in
// four passes of 8 bits: each pass histograms the digit of the keys that match the digits chosen
// so far (a histogram a warp in shared memory, summed after the pass), then warp 0 picks the digit
// holding the wanted rank. A fifth pass collects the keys above
// τ and, when every key equal to τ fits, those too; otherwise (ties at the boundary) each warp
// counts the equal keys of its stretch of ids, and walks it in id order from the count of the
// warps before it, taking the lowest ids. Each thread loads 8 keys at a time. The k composite keys
// (key << 32 | ~id) are sorted descending by a bitonic sort in shared memory: larger value first,
// lower id first. Bytes: 5 reads of the row (the first from DRAM, then L2), k·8 written. k <= 1024.
#include <algorithm>
#include <climits>
#include <cstdint>

#include "cuda/common.cuh"
#include "cuda/dtype.cuh"
#include "cuda/kernels.h"
#include "cuda/warp.cuh"
#include "hybrid/ops/sampling.h"

namespace hybrid::cuda {

namespace {

constexpr int kArgThreads = 256, kArgMaxChunks = 64, kArgMinPerChunk = 2048;

// (bv, bi) <- the better of (bv, bi) and (v, i): the larger value, the lower id on ties; NaN never
// wins (both comparisons are false); bi = INT_MAX means none yet.
__device__ __forceinline__ void take(float& bv, int& bi, float v, int i) {
  if (v > bv || (v == bv && i < bi)) bv = v, bi = i;
}

__device__ __forceinline__ void warp_best(float& bv, int& bi) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, bv, off);
    const int oi = __shfl_xor_sync(0xffffffffu, bi, off);
    take(bv, bi, ov, oi);
  }
}

template <class T>
__global__ void __launch_bounds__(kArgThreads)
    argmax_partial_kernel(const T* __restrict__ x, int64_t ldx, int V, int chunks, int per_chunk,
                          float* __restrict__ part_v, int* __restrict__ part_i) {
  const int n = blockIdx.x / chunks, c = blockIdx.x % chunks;
  const int v0 = c * per_chunk, v1 = min(V, v0 + per_chunk);
  const T* row = x + static_cast<int64_t>(n) * ldx;
  float bv = -INFINITY;
  int bi = INT_MAX;
  bool bad = false;
  // Unrolled so that a thread's ~9 loads (a 2374-entry chunk) go out together, not one round
  // trip each; the order of take() stays ascending.
#pragma unroll 8
  for (int v = v0 + static_cast<int>(threadIdx.x); v < v1; v += kArgThreads) {
    const float f = to_f32(row[v]);
    bad |= isnan(f) || f == INFINITY;
    take(bv, bi, f, v);
  }
  warp_best(bv, bi);
  bad = __any_sync(0xffffffffu, bad);
  __shared__ float sv[kArgThreads / 32];
  __shared__ int si[kArgThreads / 32];
  __shared__ bool sbad[kArgThreads / 32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) sv[warp] = bv, si[warp] = bi, sbad[warp] = bad;
  __syncthreads();
  if (warp != 0) return;
  bv = lane < kArgThreads / 32 ? sv[lane] : -INFINITY;
  bi = lane < kArgThreads / 32 ? si[lane] : INT_MAX;
  bad = lane < kArgThreads / 32 && sbad[lane];
  warp_best(bv, bi);
  bad = __any_sync(0xffffffffu, bad);
  if (lane == 0) {
    part_v[blockIdx.x] = bv;
    part_i[blockIdx.x] = bad ? -1 : bi;
  }
}

__global__ void argmax_final_kernel(const float* __restrict__ part_v,
                                    const int* __restrict__ part_i, int chunks,
                                    int32_t* __restrict__ out, int64_t out_s0) {
  const int n = blockIdx.x, lane = threadIdx.x;
  float bv = -INFINITY;
  int bi = INT_MAX;
  bool bad = false;
  for (int c = lane; c < chunks; c += 32) {
    const int i = part_i[n * chunks + c];
    if (i < 0)
      bad = true;
    else
      take(bv, bi, part_v[n * chunks + c], i);
  }
  warp_best(bv, bi);
  bad = __any_sync(0xffffffffu, bad);
  if (lane == 0) out[n * out_s0] = bad || bv == -INFINITY || bi == INT_MAX ? -1 : bi;
}

// A row of V entries in chunks of at least kArgMinPerChunk, at most kArgMaxChunks a row (64 at
// 151936): argmax's and sample_rows' grid of N·chunks blocks.
struct RowChunks {
  int chunks, per_chunk;
  int64_t parts;
  RowChunks(int64_t N, int V)
      : chunks(std::min(kArgMaxChunks, std::max(1, (V + kArgMinPerChunk - 1) / kArgMinPerChunk))),
        per_chunk((V + chunks - 1) / chunks),
        parts(N * chunks) {}
};

// The per-(row, chunk) partials in the context's workspace: each chunk's max and its id (-1: the
// chunk saw a NaN / +inf), then (with_sums) each chunk's Σw in f64, 8-byte aligned after them.
struct ChunkParts {
  float* v;
  int* i;
  double* sum;
};
ChunkParts chunk_parts(const RowChunks& rc, bool with_sums, Context& ctx) {
  char* ws =
      static_cast<char*>(ctx.workspace(static_cast<size_t>(rc.parts) * (with_sums ? 16 : 8)));
  return {reinterpret_cast<float*>(ws), reinterpret_cast<int*>(ws + rc.parts * 4),
          with_sums ? reinterpret_cast<double*>(ws + rc.parts * 8) : nullptr};
}

void argmax_cuda(const Argmax& a, Context& ctx) {
  const int64_t N = a.x.size(0);
  const int V = static_cast<int>(a.x.size(1));
  if (N == 0) return;
  const RowChunks rc(N, V);
  const int chunks = rc.chunks, per_chunk = rc.per_chunk;
  const int64_t parts = rc.parts;
  const ChunkParts cp = chunk_parts(rc, false, ctx);
  const cudaStream_t st = as_stream(ctx.stream());
  dispatch_float(a.x.dtype(), Argmax::op_name, [&](auto t) {
    using T = decltype(t);
    argmax_partial_kernel<T><<<static_cast<unsigned>(parts), kArgThreads, 0, st>>>(
        a.x.data_as<const T>(), a.x.stride(0), V, chunks, per_chunk, cp.v, cp.i);
    HYBRID_CUDA_CHECK_LAUNCH();
  });
  argmax_final_kernel<<<static_cast<unsigned>(N), 32, 0, st>>>(
      cp.v, cp.i, chunks, a.out.data_as<int32_t>(), a.out.stride(0));
  HYBRID_CUDA_CHECK_LAUNCH();
}

// ---- top_k ------------------------------------------------------------------------------------

constexpr int kTopThreads = 1024, kTopMaxK = 1024;

// The order-preserving key of top_k (as the CPU's): larger ranks first.
__device__ __forceinline__ uint32_t rank_key(float x) {
  if (isnan(x)) return UINT32_MAX;
  const uint32_t b = __float_as_uint(x == 0.0f ? 0.0f : x);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

// (key, id) as one integer: larger key first, then the lower id.
__device__ __forceinline__ unsigned long long compose(uint32_t key, int v) {
  return (static_cast<unsigned long long>(key) << 32) | (0xffffffffu - static_cast<uint32_t>(v));
}

// One radix-select step, run by warp 0 over a 256-bin histogram: the digit d whose bin holds the
// `need`-th largest key (1-based) among the keys counted, `above` = the keys in larger bins, and
// `count` = the bin's size. Lane l takes the bins 255 − 8l − j (j < 8), so the lanes scan the
// digits in descending order; the one lane whose run of bins holds the rank writes the results.
__device__ __forceinline__ void radix_pick_digit(const uint32_t* hist, int lane, uint32_t need,
                                                 uint32_t& digit, uint32_t& above,
                                                 uint32_t& count) {
  uint32_t c[8], sum = 0;
#pragma unroll
  for (int j = 0; j < 8; ++j) sum += c[j] = hist[255 - 8 * lane - j];
  const uint32_t incl = warp_inclusive_scan(sum, lane);
  const uint32_t before = incl - sum;
  if (before < need && need <= incl) {
    uint32_t acc = before;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      if (acc + c[j] >= need && acc < need) {
        digit = 255u - 8u * lane - j;
        above = acc;
        count = c[j];
      }
      acc += c[j];
    }
  }
}

// Bitonic sort of keys[0, P) in shared memory, descending, by a block of kTopThreads threads (P a
// power of two; the caller pads with 0, which sorts last). Ends with a barrier when P > 1.
__device__ __forceinline__ void bitonic_sort_desc(unsigned long long* keys, int P, int tid) {
  for (int size = 2; size <= P; size <<= 1) {
    for (int stride = size / 2; stride > 0; stride >>= 1) {
      for (int i = tid; i < P; i += kTopThreads) {
        const int j = i ^ stride;
        if (j > i) {
          const unsigned long long a = keys[i], b = keys[j];
          if ((i & size) == 0 ? a < b : a > b) keys[i] = b, keys[j] = a;
        }
      }
      __syncthreads();
    }
  }
}

// kBatch keys of a thread, ids base + u·stride + lane_or_tid (u < kBatch), loaded together (one
// round trip instead of kBatch: run 4 measured 288 µs a row with one load per loop iteration).
constexpr int kTopBatch = 8;
template <class T>
__device__ __forceinline__ void load_keys(const T* row, int V, int first, int stride,
                                          uint32_t (&key)[kTopBatch]) {
#pragma unroll
  for (int u = 0; u < kTopBatch; ++u) {
    const int v = first + u * stride;
    key[u] = v < V ? rank_key(to_f32(row[v])) : 0u;
  }
}

template <class T>
__global__ void __launch_bounds__(kTopThreads)
    top_k_kernel(const T* __restrict__ x, int64_t ldx, int V, int k, int32_t* __restrict__ ids,
                 int64_t ld_ids, float* __restrict__ vals, int64_t ld_vals,
                 const int* __restrict__ only_rows) {
  // only_rows (top_k.cuda_filter's fallback): the rows whose candidates overflowed; others exit.
  if (only_rows && !only_rows[blockIdx.x]) return;
  constexpr int kWarps = kTopThreads / 32;
  __shared__ uint32_t hist[256], warp_hist[kWarps][256];
  __shared__ unsigned long long keys[kTopMaxK];
  __shared__ uint32_t s_digit, s_above, s_count, s_warp_eq[kWarps];
  __shared__ int n_gt, n_eq;
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const T* row = x + static_cast<int64_t>(blockIdx.x) * ldx;

  // Radix select: prefix / mask are the digits chosen so far; `need` is the wanted rank (1-based)
  // among the keys that match them.
  uint32_t prefix = 0, mask = 0, need = static_cast<uint32_t>(k);
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int i = lane; i < 256; i += 32) warp_hist[warp][i] = 0;
    __syncwarp();
    // A histogram a warp (its lanes' shared-memory atomics collide only within the warp), summed
    // after the pass. Run 5 had one histogram with __match_any_sync aggregation: 285 µs a row.
    for (int base = 0; base < V; base += kTopThreads * kTopBatch) {
      uint32_t key[kTopBatch];
      load_keys(row, V, base + tid, kTopThreads, key);
#pragma unroll
      for (int u = 0; u < kTopBatch; ++u)
        if (base + u * kTopThreads + tid < V && (key[u] & mask) == prefix)
          atomicAdd(&warp_hist[warp][(key[u] >> shift) & 255u], 1u);
    }
    __syncthreads();
    if (tid < 256) {
      uint32_t sum = 0;
#pragma unroll 8
      for (int w = 0; w < kWarps; ++w) sum += warp_hist[w][tid];
      hist[tid] = sum;
    }
    __syncthreads();
    if (warp == 0) radix_pick_digit(hist, lane, need, s_digit, s_above, s_count);
    __syncthreads();
    prefix |= s_digit << shift;
    mask |= 255u << shift;
    need -= s_above;
  }
  // τ = prefix: `need` of the s_count keys equal to τ are wanted, and all k − need keys above it.
  const uint32_t tau = prefix;
  const int above = k - static_cast<int>(need);
  const bool all_equal = s_count == need;
  if (tid == 0) n_gt = 0, n_eq = 0;
  __syncthreads();
  if (all_equal) {
    for (int base = 0; base < V; base += kTopThreads * kTopBatch) {
      uint32_t key[kTopBatch];
      load_keys(row, V, base + tid, kTopThreads, key);
#pragma unroll
      for (int u = 0; u < kTopBatch; ++u) {
        const int v = base + u * kTopThreads + tid;
        if (v < V && key[u] > tau) keys[atomicAdd(&n_gt, 1)] = compose(key[u], v);
        if (v < V && key[u] == tau) keys[above + atomicAdd(&n_eq, 1)] = compose(key[u], v);
      }
    }
  } else {
    // Ties at the boundary (equal values, or -inf fill when fewer than k entries are finite): the
    // `need` lowest ids among the keys equal to τ. Warp w owns ids [w·seg, (w + 1)·seg); it
    // counts its equal keys, then walks its ids in order with ballots from the count of the warps
    // before it, and stops once `need` are placed.
    const int seg =
        ((V + kWarps - 1) / kWarps + 32 * kTopBatch - 1) / (32 * kTopBatch) * (32 * kTopBatch);
    const int lo = warp * seg, hi = min(V, lo + seg);
    uint32_t eq = 0;
    for (int base = lo; base < hi; base += 32 * kTopBatch) {
      uint32_t key[kTopBatch];
      load_keys(row, hi, base + lane, 32, key);
#pragma unroll
      for (int u = 0; u < kTopBatch; ++u) {
        const int v = base + u * 32 + lane;
        if (v < hi && key[u] > tau) keys[atomicAdd(&n_gt, 1)] = compose(key[u], v);
        eq += v < hi && key[u] == tau;
      }
    }
    eq = warp_sum(eq);
    if (lane == 0) s_warp_eq[warp] = eq;
    __syncthreads();
    uint32_t rank = 0;
    for (int w = 0; w < warp; ++w) rank += s_warp_eq[w];
    for (int base = lo; base < hi && rank < need; base += 32 * kTopBatch) {
      uint32_t key[kTopBatch];
      load_keys(row, hi, base + lane, 32, key);
#pragma unroll
      for (int u = 0; u < kTopBatch; ++u) {
        const int v = base + u * 32 + lane;
        const bool is_eq = v < hi && key[u] == tau;
        const unsigned b = __ballot_sync(0xffffffffu, is_eq);
        const uint32_t r = rank + __popc(b & ((1u << lane) - 1u));
        if (is_eq && r < need) keys[above + r] = compose(tau, v);
        rank += __popc(b);
      }
    }
  }
  // Bitonic sort of keys[0, P) descending, P the power of two >= k, padded with 0 (last).
  int P = 1;
  while (P < k) P <<= 1;
  __syncthreads();
  for (int i = k + tid; i < P; i += kTopThreads) keys[i] = 0;
  __syncthreads();
  bitonic_sort_desc(keys, P, tid);
  for (int j = tid; j < k; j += kTopThreads) {
    const int v = static_cast<int>(0xffffffffu - static_cast<uint32_t>(keys[j]));
    ids[static_cast<int64_t>(blockIdx.x) * ld_ids + j] = v;
    vals[static_cast<int64_t>(blockIdx.x) * ld_vals + j] = to_f32(row[v]);
  }
}

// ---- sample_rows --------------------------------------------------------------------------------
// Three launches over argmax's chunks (64 a row at 151936 entries):
//   argmax_partial_kernel: each chunk's max and whether it saw a NaN / +inf;
//   sample_sum_kernel: grid N·chunks; the row's max from the chunk maxima, then the chunk's
//     Σ w (f64; w = exp((x − max) / T), kept when > 0 and >= min_p);
//   sample_pick_kernel: a block a row; Σw over the chunks in chunk order, the chunk where the
//     running sum passes u·Σw, then that chunk's ids scanned in order (each thread a contiguous
//     stretch, a block scan of the stretches' sums): the first kept id past the target.
// Bytes: N·V elements read twice (the second from L2) and one chunk's a third time.

// The row's max and whether it is refused (a NaN / +inf, or only -inf), from its chunks' partials.
__device__ __forceinline__ void row_max(const float* part_v, const int* part_i, int chunks, int n,
                                        float& zmax, bool& refused) {
  float m = -INFINITY;
  bool bad = false;
  for (int c = threadIdx.x % 32; c < chunks; c += 32) {
    m = fmaxf(m, part_v[n * chunks + c]);
    bad |= part_i[n * chunks + c] < 0;
  }
  zmax = m = warp_max(m);
  refused = __any_sync(0xffffffffu, bad) || m == -INFINITY;
}

__device__ __forceinline__ double kept_weight(float x, float zmax, double temperature,
                                              double min_p) {
  const double e = exp((static_cast<double>(x) - zmax) / temperature);
  return e > 0 && e >= min_p ? e : 0.0;
}

// Block sum of a double (kArgThreads threads); every thread gets it.
__device__ __forceinline__ double block_sum(double v, double* red /* [kArgThreads / 32] */) {
  v = warp_sum(v);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  __syncthreads();
  if (lane == 0) red[warp] = v;
  __syncthreads();
  double t = 0;
  for (int w = 0; w < kArgThreads / 32; ++w) t += red[w];
  return t;
}

template <class T>
__global__ void __launch_bounds__(kArgThreads)
    sample_sum_kernel(const T* __restrict__ x, int64_t ldx, int V, int chunks, int per_chunk,
                      const float* __restrict__ part_v, const int* __restrict__ part_i,
                      double temperature, double min_p, double* __restrict__ part_sum) {
  const int n = blockIdx.x / chunks, c = blockIdx.x % chunks;
  __shared__ float s_max;
  __shared__ bool s_refused;
  __shared__ double red[kArgThreads / 32];
  if (threadIdx.x < 32) {
    float zmax;
    bool refused;
    row_max(part_v, part_i, chunks, n, zmax, refused);
    if (threadIdx.x == 0) s_max = zmax, s_refused = refused;
  }
  __syncthreads();
  if (s_refused) {
    if (threadIdx.x == 0) part_sum[blockIdx.x] = 0;
    return;
  }
  const float zmax = s_max;
  const int v0 = c * per_chunk, v1 = min(V, v0 + per_chunk);
  const T* row = x + static_cast<int64_t>(n) * ldx;
  double sum = 0;
#pragma unroll 8
  for (int v = v0 + static_cast<int>(threadIdx.x); v < v1; v += kArgThreads)
    sum += kept_weight(to_f32(row[v]), zmax, temperature, min_p);
  sum = block_sum(sum, red);
  if (threadIdx.x == 0) part_sum[blockIdx.x] = sum;
}

template <class T>
__global__ void __launch_bounds__(kArgThreads)
    sample_pick_kernel(const T* __restrict__ x, int64_t ldx, int V, int chunks, int per_chunk,
                       const float* __restrict__ part_v, const int* __restrict__ part_i,
                       const double* __restrict__ part_sum, const int64_t* __restrict__ draws,
                       int64_t draws_s0, double temperature, double min_p,
                       int32_t* __restrict__ out, int64_t out_s0) {
  const int n = blockIdx.x;
  __shared__ float s_max;
  __shared__ bool s_refused;
  __shared__ int s_chunk, s_first, s_last;
  __shared__ double s_before, s_target, red[kArgThreads / 32];
  if (threadIdx.x < 32) {
    float zmax;
    bool refused;
    row_max(part_v, part_i, chunks, n, zmax, refused);
    if (threadIdx.x == 0) {
      s_max = zmax, s_refused = refused;
      // Σw in chunk order; the chunk where the running sum passes u·Σw (or, if rounding leaves
      // it short, the last chunk with a kept id: its last kept id is the answer).
      double total = 0;
      for (int c = 0; c < chunks; ++c) total += part_sum[n * chunks + c];
      const double u = static_cast<double>(draws[n * draws_s0]) * 0x1.0p-53;
      const double target = u * total;
      double before = 0;
      int chunk = -1, last = -1;
      for (int c = 0; c < chunks; ++c) {
        const double w = part_sum[n * chunks + c];
        if (w > 0) last = c;
        if (chunk < 0 && w > 0 && target < before + w) {
          chunk = c;
          s_before = before;
        }
        if (chunk < 0) before += w;
      }
      s_target = target;
      s_chunk = chunk >= 0 ? chunk : -1 - last;  // <= -1: "the last kept id of chunk -1 - s_chunk"
      s_first = INT_MAX;
      s_last = -1;
    }
  }
  __syncthreads();
  if (s_refused) {
    if (threadIdx.x == 0) out[n * out_s0] = -1;
    return;
  }
  const bool past = s_chunk < 0;
  const int c = past ? -1 - s_chunk : s_chunk;
  const int v0 = c * per_chunk, v1 = min(V, v0 + per_chunk);
  const T* row = x + static_cast<int64_t>(n) * ldx;
  const float zmax = s_max;
  // Thread t scans ids [a, b) of the chunk, in order.
  const int len = v1 - v0, per = (len + kArgThreads - 1) / kArgThreads;
  const int a = v0 + static_cast<int>(threadIdx.x) * per, b = min(v1, a + per);
  double mine = 0;
  for (int v = a; v < b; ++v) mine += kept_weight(to_f32(row[v]), zmax, temperature, min_p);
  // Exclusive scan of the stretches' sums over the block (warp scan, then the warps' totals).
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const double incl = warp_inclusive_scan(mine, lane);
  if (lane == 31) red[warp] = incl;
  __syncthreads();
  double running = s_before + incl - mine;
  for (int w = 0; w < warp; ++w) running += red[w];
  int first = INT_MAX, last = -1;
  for (int v = a; v < b; ++v) {
    const double w = kept_weight(to_f32(row[v]), zmax, temperature, min_p);
    if (!(w > 0)) continue;
    last = v;
    running += w;
    if (!past && first == INT_MAX && s_target < running) first = v;
  }
  if (first != INT_MAX) atomicMin(&s_first, first);
  if (last >= 0) atomicMax(&s_last, last);
  __syncthreads();
  if (threadIdx.x == 0) out[n * out_s0] = s_first != INT_MAX ? s_first : s_last;
}

// argmax_partial_kernel then sample_sum_kernel over x (dtype T): each chunk's max, then its Σw of
// the weights kept at (temperature, min_p), into chunk_parts' partials (with the sums).
template <class T>
ChunkParts chunk_sums(const Tensor& x, const RowChunks& rc, double temperature, double min_p,
                      Context& ctx) {
  const ChunkParts cp = chunk_parts(rc, true, ctx);
  const cudaStream_t st = as_stream(ctx.stream());
  const int V = static_cast<int>(x.size(1));
  argmax_partial_kernel<T><<<static_cast<unsigned>(rc.parts), kArgThreads, 0, st>>>(
      x.data_as<const T>(), x.stride(0), V, rc.chunks, rc.per_chunk, cp.v, cp.i);
  HYBRID_CUDA_CHECK_LAUNCH();
  sample_sum_kernel<T><<<static_cast<unsigned>(rc.parts), kArgThreads, 0, st>>>(
      x.data_as<const T>(), x.stride(0), V, rc.chunks, rc.per_chunk, cp.v, cp.i, temperature, min_p,
      cp.sum);
  HYBRID_CUDA_CHECK_LAUNCH();
  return cp;
}

void sample_rows_cuda(const SampleRows& a, Context& ctx) {
  const int64_t N = a.x.size(0);
  if (N == 0) return;
  const double temperature = a.temperature, min_p = a.min_p;
  dispatch_float(a.x.dtype(), SampleRows::op_name, [&](auto t) {
    using T = decltype(t);
    const RowChunks rc(N, static_cast<int>(a.x.size(1)));
    const ChunkParts cp = chunk_sums<T>(a.x, rc, temperature, min_p, ctx);
    sample_pick_kernel<T><<<static_cast<unsigned>(N), kArgThreads, 0, as_stream(ctx.stream())>>>(
        a.x.data_as<const T>(), a.x.stride(0), static_cast<int>(a.x.size(1)), rc.chunks,
        rc.per_chunk, cp.v, cp.i, cp.sum, a.draws.data_as<const int64_t>(), a.draws.stride(0),
        temperature, min_p, a.out.data_as<int32_t>(), a.out.stride(0));
    HYBRID_CUDA_CHECK_LAUNCH();
  });
}

// ---- softmax_mass -----------------------------------------------------------------------------
// sample_rows' first two launches (chunk maxima; each chunk's Σw in f64 with min_p 0, so every
// w > 0 counts), then mass_total_kernel: one warp a row adds the chunk sums in chunk order (lane 0:
// a fixed order, so the result does not depend on the launch) and writes NaN for a refused row.
__global__ void mass_total_kernel(const float* __restrict__ part_v, const int* __restrict__ part_i,
                                  const double* __restrict__ part_sum, int chunks,
                                  double* __restrict__ out, int64_t out_s0) {
  const int n = blockIdx.x;
  float zmax;
  bool refused;
  row_max(part_v, part_i, chunks, n, zmax, refused);
  if (threadIdx.x != 0) return;
  double total = 0;
  for (int c = 0; c < chunks; ++c) total += part_sum[static_cast<int64_t>(n) * chunks + c];
  out[n * out_s0] = refused ? nan("") : total;
}

void softmax_mass_cuda(const SoftmaxMass& a, Context& ctx) {
  const int64_t N = a.x.size(0);
  if (N == 0) return;
  dispatch_float(a.x.dtype(), SoftmaxMass::op_name, [&](auto t) {
    using T = decltype(t);
    const RowChunks rc(N, static_cast<int>(a.x.size(1)));
    const ChunkParts cp = chunk_sums<T>(a.x, rc, a.temperature, 0.0, ctx);
    mass_total_kernel<<<static_cast<unsigned>(N), 32, 0, as_stream(ctx.stream())>>>(
        cp.v, cp.i, cp.sum, rc.chunks, a.out.data_as<double>(), a.out.stride(0));
    HYBRID_CUDA_CHECK_LAUNCH();
  });
}

Reason top_k_supports(const TopK& a) {
  if (a.ids.size(1) > kTopMaxK)
    return str("k=", a.ids.size(1), " above ", kTopMaxK, " (the shared-memory sort)");
  return {};
}

void top_k_cuda(const TopK& a, Context& ctx) {
  const int64_t N = a.x.size(0);
  if (N == 0) return;
  const cudaStream_t st = as_stream(ctx.stream());
  dispatch_float(a.x.dtype(), TopK::op_name, [&](auto t) {
    using T = decltype(t);
    top_k_kernel<T><<<static_cast<unsigned>(N), kTopThreads, 0, st>>>(
        a.x.data_as<const T>(), a.x.stride(0), static_cast<int>(a.x.size(1)),
        static_cast<int>(a.ids.size(1)), a.ids.data_as<int32_t>(), a.ids.stride(0),
        a.values.data_as<float>(), a.values.stride(0), nullptr);
    HYBRID_CUDA_CHECK_LAUNCH();
  });
}

// ---- top_k.cuda_filter -----------------------------------------------------------------------
// Filter, then select, over argmax's chunks (64 a row at V = 151936), 4 launches and a memset:
//   seg_max_kernel: grid N·chunks, 256 threads: each warp the largest key of 4 of the chunk's
//     32 stretches of contiguous ids -> S = 32·chunks stretch maxima a row (2048 at 151936).
//   tau_kernel: a block a row: τ0 = the k-th largest stretch maximum (radix select in shared
//     memory; 0, taking everything, when k > S). Those k maxima are k distinct entries >= τ0,
//     so every one of the row's top k has a key >= τ0.
//   filter_kernel: grid N·chunks: the chunk's entries with key >= τ0 appended (warp-aggregated
//     global atomics) to the row's candidate list, at most kFilterCap.
//   select_kernel: a block a row: the candidates sorted (bitonic, descending composite key) and
//     the first k written; a row with more than kFilterCap candidates (ties or -inf fill at the
//     boundary) is marked, and top_k_kernel (above) then runs for the marked rows only.
// Bytes: the row read twice (stretch maxima, filter), the candidates a few KB. For logits the
// candidates number ~k + a few (k 40: ~45; k 1024: ~1.5K).
constexpr int kFilterThreads = 256, kStretchesPerChunk = 32, kFilterCap = 4096;

template <class T>
__global__ void __launch_bounds__(kFilterThreads)
    seg_max_kernel(const T* __restrict__ x, int64_t ldx, int V, int chunks, int per_chunk,
                   uint32_t* __restrict__ seg_max) {
  const int n = blockIdx.x / chunks, c = blockIdx.x % chunks;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int v0 = c * per_chunk, v1 = min(V, v0 + per_chunk);
  const int len = max(0, v1 - v0);
  const int per = (len + kStretchesPerChunk - 1) / kStretchesPerChunk;
  const T* row = x + static_cast<int64_t>(n) * ldx;
  constexpr int kPerWarp = kStretchesPerChunk / (kFilterThreads / 32);
#pragma unroll
  for (int j = 0; j < kPerWarp; ++j) {
    const int sidx = warp * kPerWarp + j;
    const int a = v0 + sidx * per, b = min(v1, a + per);
    uint32_t m = 0;
#pragma unroll 4
    for (int v = a + lane; v < b; v += 32) m = max(m, rank_key(to_f32(row[v])));
    for (int o = 16; o > 0; o >>= 1) m = max(m, __shfl_xor_sync(0xffffffffu, m, o));
    if (lane == 0)
      seg_max[static_cast<int64_t>(n) * chunks * kStretchesPerChunk + c * kStretchesPerChunk +
              sidx] = m;
  }
}

// τ0 of each row: the k-th largest of its S stretch maxima (0 when k > S). Radix select over the
// S <= 2048 keys in shared memory, 8 bits a pass.
__global__ void __launch_bounds__(kFilterThreads)
    tau_kernel(const uint32_t* __restrict__ seg_max, int S, int k, uint32_t* __restrict__ tau,
               int* __restrict__ count) {
  __shared__ uint32_t keys[kArgMaxChunks * kStretchesPerChunk], hist[256];
  __shared__ uint32_t s_digit, s_above, s_count;
  const int n = blockIdx.x, tid = threadIdx.x, lane = tid % 32;
  if (tid == 0) count[n] = 0;
  if (k > S) {
    if (tid == 0) tau[n] = 0;
    return;
  }
  for (int i = tid; i < S; i += kFilterThreads) keys[i] = seg_max[static_cast<int64_t>(n) * S + i];
  uint32_t prefix = 0, mask = 0, need = static_cast<uint32_t>(k);
  for (int shift = 24; shift >= 0; shift -= 8) {
    hist[tid] = 0;  // kFilterThreads == 256 bins
    __syncthreads();
    for (int i = tid; i < S; i += kFilterThreads)
      if ((keys[i] & mask) == prefix) atomicAdd(&hist[(keys[i] >> shift) & 255u], 1u);
    __syncthreads();
    if (tid < 32) radix_pick_digit(hist, lane, need, s_digit, s_above, s_count);
    __syncthreads();
    prefix |= s_digit << shift;
    mask |= 255u << shift;
    need -= s_above;
    __syncthreads();
  }
  if (tid == 0) tau[n] = prefix;
}

template <class T>
__global__ void __launch_bounds__(kFilterThreads)
    filter_kernel(const T* __restrict__ x, int64_t ldx, int V, int chunks, int per_chunk,
                  const uint32_t* __restrict__ tau, int* __restrict__ count,
                  unsigned long long* __restrict__ cand) {
  const int n = blockIdx.x / chunks, c = blockIdx.x % chunks, lane = threadIdx.x % 32;
  const int v0 = c * per_chunk, v1 = min(V, v0 + per_chunk);
  const T* row = x + static_cast<int64_t>(n) * ldx;
  const uint32_t t0 = tau[n];
  for (int base = v0; base < v1; base += kFilterThreads * kTopBatch) {
    uint32_t key[kTopBatch];
    load_keys(row, v1, base + static_cast<int>(threadIdx.x), kFilterThreads, key);
#pragma unroll
    for (int u = 0; u < kTopBatch; ++u) {
      const int v = base + u * kFilterThreads + static_cast<int>(threadIdx.x);
      const bool take = v < v1 && key[u] >= t0;
      const unsigned b = __ballot_sync(0xffffffffu, take);
      if (!b) continue;
      int first = 0;
      if (lane == __ffs(b) - 1) first = atomicAdd(&count[n], __popc(b));
      first = __shfl_sync(0xffffffffu, first, __ffs(b) - 1);
      const int slot = first + __popc(b & ((1u << lane) - 1u));
      if (take && slot < kFilterCap)
        cand[static_cast<int64_t>(n) * kFilterCap + slot] = compose(key[u], v);
    }
  }
}

template <class T>
__global__ void __launch_bounds__(kTopThreads)
    select_kernel(const T* __restrict__ x, int64_t ldx, int k, const int* __restrict__ count,
                  const unsigned long long* __restrict__ cand, int* __restrict__ overflow,
                  int32_t* __restrict__ ids, int64_t ld_ids, float* __restrict__ vals,
                  int64_t ld_vals) {
  __shared__ unsigned long long keys[kFilterCap];
  const int n = blockIdx.x, tid = threadIdx.x;
  const int m = count[n];
  if (m > kFilterCap) {
    if (tid == 0) overflow[n] = 1;
    return;
  }
  if (tid == 0) overflow[n] = 0;
  int P = 1;
  while (P < m) P <<= 1;
  for (int i = tid; i < P; i += kTopThreads)
    keys[i] = i < m ? cand[static_cast<int64_t>(n) * kFilterCap + i] : 0ull;
  __syncthreads();
  bitonic_sort_desc(keys, P, tid);
  const T* row = x + static_cast<int64_t>(n) * ldx;
  for (int j = tid; j < k; j += kTopThreads) {
    const int v = static_cast<int>(0xffffffffu - static_cast<uint32_t>(keys[j]));
    ids[static_cast<int64_t>(n) * ld_ids + j] = v;
    vals[static_cast<int64_t>(n) * ld_vals + j] = to_f32(row[v]);
  }
}

Reason top_k_filter_supports(const TopK& a) {
  if (env_is_zero("HYBRID_TOP_K_FILTER")) return std::string("HYBRID_TOP_K_FILTER=0");
  return top_k_supports(a);
}

void top_k_filter_cuda(const TopK& a, Context& ctx) {
  const int64_t N = a.x.size(0);
  if (N == 0) return;
  const int V = static_cast<int>(a.x.size(1)), k = static_cast<int>(a.ids.size(1));
  const RowChunks rc(N, V);
  const int chunks = rc.chunks, per_chunk = rc.per_chunk, S = chunks * kStretchesPerChunk;
  // Workspace: candidates [N, cap] u64, stretch maxima [N, S] u32, τ0 [N], count [N], overflow [N].
  const size_t bytes = static_cast<size_t>(N) * (kFilterCap * 8 + S * 4 + 12);
  char* ws = static_cast<char*>(ctx.workspace(bytes));
  auto* cand = reinterpret_cast<unsigned long long*>(ws);
  auto* seg = reinterpret_cast<uint32_t*>(ws + N * kFilterCap * 8);
  auto* tau = seg + N * S;
  int* count = reinterpret_cast<int*>(tau + N);
  int* overflow = count + N;
  const cudaStream_t st = as_stream(ctx.stream());
  dispatch_float(a.x.dtype(), TopK::op_name, [&](auto t) {
    using T = decltype(t);
    const T* x = a.x.data_as<const T>();
    const int64_t ldx = a.x.stride(0);
    const auto parts = static_cast<unsigned>(rc.parts);
    seg_max_kernel<T><<<parts, kFilterThreads, 0, st>>>(x, ldx, V, chunks, per_chunk, seg);
    HYBRID_CUDA_CHECK_LAUNCH();
    tau_kernel<<<static_cast<unsigned>(N), kFilterThreads, 0, st>>>(seg, S, k, tau, count);
    HYBRID_CUDA_CHECK_LAUNCH();
    filter_kernel<T>
        <<<parts, kFilterThreads, 0, st>>>(x, ldx, V, chunks, per_chunk, tau, count, cand);
    HYBRID_CUDA_CHECK_LAUNCH();
    select_kernel<T><<<static_cast<unsigned>(N), kTopThreads, 0, st>>>(
        x, ldx, k, count, cand, overflow, a.ids.data_as<int32_t>(), a.ids.stride(0),
        a.values.data_as<float>(), a.values.stride(0));
    HYBRID_CUDA_CHECK_LAUNCH();
    top_k_kernel<T><<<static_cast<unsigned>(N), kTopThreads, 0, st>>>(
        x, ldx, V, k, a.ids.data_as<int32_t>(), a.ids.stride(0), a.values.data_as<float>(),
        a.values.stride(0), overflow);
    HYBRID_CUDA_CHECK_LAUNCH();
  });
}

// ---- repetition_penalty ---------------------------------------------------------------------
// A block a row; thread j of the row's ids penalises x[n, ids[n, j]] (ids distinct: no two
// threads touch one entry). Ids outside [0, V) are skipped, counts clamped to [0, H].
__global__ void repetition_penalty_kernel(float* __restrict__ x, int64_t ldx, int V,
                                          const int32_t* __restrict__ ids, int64_t ld_ids, int H,
                                          const int32_t* __restrict__ counts, int64_t counts_s0,
                                          float penalty) {
  const int n = blockIdx.x;
  const int cnt = min(max(counts[n * counts_s0], 0), H);
  for (int j = threadIdx.x; j < cnt; j += blockDim.x) {
    const int id = ids[static_cast<int64_t>(n) * ld_ids + j];
    if (id < 0 || id >= V) continue;
    float& v = x[static_cast<int64_t>(n) * ldx + id];
    v = v > 0 ? __fdiv_rn(v, penalty) : __fmul_rn(v, penalty);
  }
}

void repetition_penalty_cuda(const RepetitionPenalty& a, Context& ctx) {
  const int64_t N = a.x.size(0);
  if (N == 0 || a.ids.size(1) == 0) return;
  repetition_penalty_kernel<<<static_cast<unsigned>(N), 256, 0, as_stream(ctx.stream())>>>(
      a.x.data_as<float>(), a.x.stride(0), static_cast<int>(a.x.size(1)),
      a.ids.data_as<const int32_t>(), a.ids.stride(0), static_cast<int>(a.ids.size(1)),
      a.counts.data_as<const int32_t>(), a.counts.stride(0), a.penalty);
  HYBRID_CUDA_CHECK_LAUNCH();
}

}  // namespace

void register_sampling(Registry& r) {
  r.add<Argmax>("argmax.cuda", DeviceType::cuda, 10, nullptr, argmax_cuda);
  r.add<TopK>("top_k.cuda_filter", DeviceType::cuda, 20, top_k_filter_supports, top_k_filter_cuda);
  r.add<TopK>("top_k.cuda", DeviceType::cuda, 10, top_k_supports, top_k_cuda);
  r.add<SampleRows>("sample_rows.cuda", DeviceType::cuda, 10, nullptr, sample_rows_cuda);
  r.add<SoftmaxMass>("softmax_mass.cuda", DeviceType::cuda, 10, nullptr, softmax_mass_cuda);
  r.add<RepetitionPenalty>("repetition_penalty.cuda", DeviceType::cuda, 10, nullptr,
                           repetition_penalty_cuda);
}

}  // namespace hybrid::cuda
