// Shared by the attention CUDA files: the paged cache view, page-table lookups, varlen row search,
// runtime-dtype loads/stores, and the cp.async / ldmatrix / mma.sync wrappers of the tensor-core
// kernels.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "cuda/dtype.cuh"
#include "cuda/mma.cuh"
#include "hybrid/core/dtype.h"
#include "hybrid/core/tensor.h"

namespace hybrid::cuda::attn {

// One cache [num_pages, page_size, Hkv, D] (D contiguous); strides in elements.
struct Cache {
  const void* p = nullptr;
  int64_t s_page = 0, s_row = 0, s_head = 0;
  int page_size = 1, num_pages = 0;
  bool aligned = false;  // base and strides allow 16-byte vector loads of row pieces
  __device__ __forceinline__ int64_t offset(int page, int row, int h) const {
    return page * s_page + row * s_row + h * s_head;
  }
};

// page_table [N, max_pages] i32.
struct PageTable {
  const int* p = nullptr;
  int64_t s0 = 0, s1 = 0;
  int max_pages = 0;
  // (page, row) of position pos of sequence n; page −1 when the position lies past the table row
  // or the entry is outside [0, num_pages) (device values are never trusted to index memory).
  __device__ __forceinline__ int2 locate(int n, int pos, int page_size, int num_pages) const {
    const int col = pos / page_size;
    if (pos < 0 || col >= max_pages) return make_int2(-1, 0);
    const int page = p[n * s0 + col * s1];
    if (page < 0 || page >= num_pages) return make_int2(-1, 0);
    return make_int2(page, pos - col * page_size);
  }
};

// Host: whether every element offset of t (from its data pointer) fits in 31 bits, so that
// kernels may carry them in int (strides non-negative; empty tensors fit).
inline bool offsets_fit_int32(const Tensor& t) {
  int64_t last = 0;
  for (int i = 0; i < t.rank(); ++i) {
    if (t.size(i) == 0) return true;
    if (t.stride(i) < 0) return false;
    last += (t.size(i) - 1) * t.stride(i);
  }
  return last < (int64_t{1} << 31) - 16;  // + a 16-byte piece
}

// The sequence n holding packed row t: the largest n with cu[n] <= t (then cu[n + 1] > t).
__device__ __forceinline__ int find_sequence(const int* cu, int N, int t) {
  int lo = 0, hi = N - 1;  // answer in [lo, hi]
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (cu[mid] <= t)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

// v rounded to dtype dt (as a tensor of that dtype would store it), back in f32.
__device__ __forceinline__ float round_to(DType dt, float v) {
  switch (dt) {
    case DType::bf16:
      return __bfloat162float(__float2bfloat16_rn(v));
    case DType::f16:
      return __half2float(__float2half_rn(v));
    default:
      return v;
  }
}

// N elements (N · sizeof(C) a multiple of 16 bytes) from p to f32; 16-byte loads when aligned.
template <int N, class C>
__device__ __forceinline__ void load_vec(const C* p, float* out, bool aligned) {
  constexpr int kPer = 16 / static_cast<int>(sizeof(C));
  static_assert(N % kPer == 0, "load_vec: whole 16-byte pieces");
  if (aligned) {
#pragma unroll
    for (int c = 0; c < N; c += kPer) {
      const uint4 raw = *reinterpret_cast<const uint4*>(p + c);
      const C* x = reinterpret_cast<const C*>(&raw);
#pragma unroll
      for (int e = 0; e < kPer; ++e) out[c + e] = to_f32(x[e]);
    }
  } else {
#pragma unroll
    for (int e = 0; e < N; ++e) out[e] = to_f32(p[e]);
  }
}

// ---- tensor-core building blocks (sm_80+) ----

// smem_u32, cp_async16 / cp_commit / cp_wait, ldmatrix_x4[_trans], mma_bf16 / mma_f16 / mma16 and
// pack_bf16 / pack_f16 / pack2 are in cuda/mma.cuh.

// Element offset of (row, 16-byte chunk ch) in a [rows, D] 16-bit tile with XOR-swizzled chunks.
template <int D>
__device__ __forceinline__ int swz(int row, int ch) {
  return swz16<uint16_t>(row, ch << 3, D);
}

}  // namespace hybrid::cuda::attn
