// Tensor-core and async-copy building blocks (sm_80+, PTX inline) shared by the kernels that use
// mma.sync: attention (decode and prefill), the GDN chunked prefill, the Mamba-2 chunk scan.
//
//   cp_async16(dst, src, n)     16 bytes global -> shared without registers (cp.async.cg, L2 only);
//                               n = 0 stores zeros and reads nothing. Completion is per commit
//                               group: cp_commit(); cp_wait<k>() waits until at most k of this
//                               thread's newest groups are pending; a __syncthreads() publishes.
//   swz16<T>(r, c, w)           element offset of (r, c) in a shared tile of unpadded rows of w
//                               elements whose 16-byte pieces are XOR-swizzled by r % 8.
//   ldmatrix_x4[_trans](r, p)   four 8×8 b16 matrices from shared memory; lanes 8m..8m+7 give the
//                               row addresses of matrix m (.trans: each matrix transposed).
//   stmatrix_x4[_trans](p, r)   the inverse: four 8×8 b16 matrices to shared memory (sm_90).
//   mma_bf16 / mma_f16 / mma16  c[4] += a[4]·b[2]: m16n8k16, f32 accumulate (PTX fragment layout).
//   pack_bf16 / pack_f16 / pack2  two floats as one 16-bit-pair fragment register; unpack_bf16
//                               the inverse for bf16.
//   exp2_approx(x)              2^x by ex2.approx.ftz (the MUFU alone).
//   grid_dependents_launch()    programmatic dependent launch (sm_90): lets the next kernel of the
//   grid_dependency_wait()      stream, launched with the programmatic-serialization attribute,
//                               start early; its wait returns once this grid has completed and its
//                               writes are visible (both no-ops without such a launch).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

namespace hybrid::cuda {

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void cp_async16(void* dst, const void* src, int src_bytes = 16) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(dst)), "l"(src),
               "r"(src_bytes)
               : "memory");
}
// The same with an L2 cache policy (l2_evict_first_policy()): for data read once, so that its
// lines are the first victims of later fills instead of lines other kernels still hold (e.g. the
// dirty lines a previous kernel left in L2, which would cost a write-back each).
__device__ __forceinline__ void cp_async16_hint(void* dst, const void* src, int src_bytes,
                                                uint64_t policy) {
  asm volatile(
      "cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2, %3;\n" ::"r"(smem_u32(dst)),
      "l"(src), "r"(src_bytes), "l"(policy)
      : "memory");
}
__device__ __forceinline__ uint64_t l2_evict_first_policy() {
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;\n" : "=l"(policy));
  return policy;
}
// Fetch the 128-byte line holding p into L2 (a hint: nothing waits for it; p must be valid).
__device__ __forceinline__ void prefetch_l2(const void* p) {
  asm volatile("prefetch.global.L2 [%0];\n" ::"l"(p));
}
__device__ __forceinline__ void cp_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void cp_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void grid_dependents_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void grid_dependency_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
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

// Four 8×8 b16 matrices to shared memory (sm_90): register m holds matrix m's fragment (row
// lane/4, columns 2·(lane%4), +1); lanes 8m..8m+7 give the row addresses of matrix m (.trans: each
// matrix stored transposed, so the fragment's columns become the stored rows).
__device__ __forceinline__ void stmatrix_x4(void* p, const uint32_t (&r)[4]) {
  asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1,%2,%3,%4};\n" ::"r"(smem_u32(p)),
               "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
               : "memory");
}
__device__ __forceinline__ void stmatrix_x4_trans(void* p, const uint32_t (&r)[4]) {
  asm volatile(
      "stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1,%2,%3,%4};\n" ::"r"(smem_u32(p)),
      "r"(r[0]), "r"(r[1]), "r"(r[2]), "r"(r[3])
      : "memory");
}

// c[4] += a[4] · (b0, b1): m16n8k16, bf16 inputs, f32 accumulate.
__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void mma_bf16(float (&c)[4], const uint32_t (&a)[4],
                                         const uint32_t (&b)[2]) {
  mma_bf16(c, a, b[0], b[1]);
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

// 2^x by the MUFU alone (ex2.approx.ftz: exp2f without its denormal-range fix-up, relative error
// ~2^-22; results below 2^-126 flush to 0). The decay factors of the chunked scans, e^{a − b} with
// a <= b, as exp2_approx((a − b)·log2 e).
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// Element offset of (r, c) in a shared-memory tile of rows of w elements of T (2 or 4 bytes; w·size
// a multiple of 128), the rows unpadded and each row's 16-byte pieces XOR-swizzled by r % 8: the 8
// rows an ldmatrix reads at one piece hit 8 bank groups, and each 8 lanes' 16-byte cp.async of
// 128 contiguous bytes of a row fill one aligned 128-byte segment, one shared-memory wavefront
// (padded rows take two or more). Inside a 128-byte row this is the wgmma / TMA 128-byte swizzle.
template <class T>
__host__ __device__ __forceinline__ constexpr int swz16(int r, int c, int w) {
  static_assert(sizeof(T) == 2 || sizeof(T) == 4, "16- or 32-bit elements");
  constexpr int kShift = sizeof(T) == 2 ? 3 : 2;  // log2 of the elements of a 16-byte piece
  return r * w + ((((c >> kShift) ^ (r & 7)) << kShift) | (c & ((1 << kShift) - 1)));
}

// Two floats as one bf16x2 fragment register (lo in the low half), round to nearest even.
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}
// The inverse for bf16: a pair (lo in the low half) as two floats by two bit operations (a bf16
// is the top half of an f32); __bfloat1622float2 takes three (PRMT, then a shift for each half).
__device__ __forceinline__ float2 unpack_bf16(uint32_t v) {
  return make_float2(__uint_as_float(v << 16), __uint_as_float(v & 0xffff0000u));
}
// The same as f16x2.
__device__ __forceinline__ uint32_t pack_f16(float lo, float hi) {
  const __half2 v = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}
// Two f32 values rounded to C (__nv_bfloat16 or __half; lo in the low half), as one 32-bit
// fragment register.
template <class C>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (std::is_same_v<C, __half>)
    return pack_f16(lo, hi);
  else
    return pack_bf16(lo, hi);
}

}  // namespace hybrid::cuda
