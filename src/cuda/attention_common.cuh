// Shared by the attention CUDA files: the paged cache view, page-table lookups, varlen row search,
// runtime-dtype loads/stores, and the cp.async / ldmatrix / mma.sync wrappers of the tensor-core
// kernels.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "cuda/dtype.cuh"
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

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16-byte async copy global -> shared; src_bytes = 0 zero-fills.
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(dst)), "l"(src),
               "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void cp_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void cp_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_u32(p)));
}

// c[4] += a[4] · b[2]: m16n8k16, bf16 inputs, f32 accumulate.
__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// The same with f16 inputs.
__device__ __forceinline__ void mma_f16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                        uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// m16n8k16 in the element type C (__nv_bfloat16 or __half).
template <class C>
__device__ __forceinline__ void mma16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                      uint32_t b1) {
  if constexpr (std::is_same_v<C, __half>)
    mma_f16(c, a, b0, b1);
  else
    mma_bf16(c, a, b0, b1);
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}
__device__ __forceinline__ uint32_t pack_f16(float lo, float hi) {
  const __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}
// Two f32 values rounded to C (lo in the low half), as one 32-bit fragment register.
template <class C>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (std::is_same_v<C, __half>)
    return pack_f16(lo, hi);
  else
    return pack_bf16(lo, hi);
}

// Element offset of (row, 16-byte chunk ch) in a [rows, D] 16-bit tile with XOR-swizzled chunks.
template <int D>
__device__ __forceinline__ int swz(int row, int ch) {
  return row * D + ((ch ^ (row & 7)) << 3);
}

}  // namespace hybrid::cuda::attn
