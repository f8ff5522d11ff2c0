// CUDA: argmax, in two launches (a row of logits is 151936 entries: one block a row would read
// 608 KB on one SM).
//   argmax_partial_kernel: grid N·chunks, 256 threads; block (n, c) scans entries
//     [c·per_chunk, (c + 1)·per_chunk) of row n (coalesced, each thread in ascending v), keeping
//     (max, lowest v) and whether it saw a NaN or +inf; two warp reductions; writes the pair, or
//     v = -1 for a chunk that saw a NaN / +inf, to the workspace.
//   argmax_final_kernel: a warp a row over its chunks' pairs, the same rule; -1 for a bad row or
//     one whose maximum is -inf (only -inf entries), as the CPU reference.
// chunks = ceil(V / 2048) clamped to [1, 64]: 64 blocks a row at Qwen3-Next's vocab. Bytes: N·V
// elements read once, N·chunks·8 + N·4 written. Ties keep the lowest v at every step (a thread's
// scan is ascending, the reductions compare v), so the result equals the CPU's bit for bit.
#include <algorithm>
#include <climits>

#include "cuda/common.cuh"
#include "cuda/dtype.cuh"
#include "cuda/kernels.h"
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

void argmax_cuda(const Argmax& a, Context& ctx) {
  const int64_t N = a.x.size(0);
  const int V = static_cast<int>(a.x.size(1));
  if (N == 0) return;
  const int chunks =
      std::min(kArgMaxChunks, std::max(1, (V + kArgMinPerChunk - 1) / kArgMinPerChunk));
  const int per_chunk = (V + chunks - 1) / chunks;
  const int64_t parts = N * chunks;
  char* ws = static_cast<char*>(ctx.workspace(static_cast<size_t>(parts) * 8));
  float* part_v = reinterpret_cast<float*>(ws);
  int* part_i = reinterpret_cast<int*>(ws + parts * 4);
  const cudaStream_t st = as_stream(ctx.stream());
  dispatch_float(a.x.dtype(), Argmax::op_name, [&](auto t) {
    using T = decltype(t);
    argmax_partial_kernel<T><<<static_cast<unsigned>(parts), kArgThreads, 0, st>>>(
        a.x.data_as<const T>(), a.x.stride(0), V, chunks, per_chunk, part_v, part_i);
    HYBRID_CUDA_CHECK_LAUNCH();
  });
  argmax_final_kernel<<<static_cast<unsigned>(N), 32, 0, st>>>(
      part_v, part_i, chunks, a.out.data_as<int32_t>(), a.out.stride(0));
  HYBRID_CUDA_CHECK_LAUNCH();
}

}  // namespace

void register_sampling(Registry& r) {
  r.add<Argmax>("argmax.cuda", DeviceType::cuda, 10, nullptr, argmax_cuda);
}

}  // namespace hybrid::cuda
