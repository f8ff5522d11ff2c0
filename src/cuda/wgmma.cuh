// Hopper warpgroup MMA (wgmma, sm_90a) building blocks, PTX inline. One warpgroup = 4 warps of
// consecutive ranks (128 threads); every wgmma instruction is issued by all 128 together.
//
//   desc(smem, lbo, sbo)     shared-memory matrix descriptor, no swizzle ("interleave" layout).
//                            The operand is made of 8 x 8 core matrices of 16-byte rows, each
//                            core matrix 128 contiguous bytes:
//                              K-major  (each M / N row's K elements contiguous): element
//                                (mn = 8i + r, k = 8j + t) at i·sbo + j·lbo + 16r + 2t;
//                              MN-major (each K row's M / N elements contiguous): element
//                                (mn = 8i + t, k = 8j + r) at i·sbo + j·lbo + 16r + 2t.
//                            So sbo steps along M / N and lbo along K in both. A k16 step is two
//                            core matrices along K: the next step's descriptor is at + 2·lbo.
//   desc_sw128(smem, lbo, sbo)  the same for a 128-byte-swizzled operand (layout type 1): rows of
//                            128 bytes (64 bf16), 8-row groups of 1024 bytes, each row's 16-byte
//                            pieces XOR-permuted by the row's index mod 8 (sw128(r, c); TMA's
//                            CU_TENSOR_MAP_SWIZZLE_128B), the tile 1024-byte aligned. Checked on
//                            the H200 (session 17's probe):
//                              K-major: rows = M / N, 64 K elements a row; sbo = 1024 (the next 8
//                                rows), lbo unused; the k16 step j of a row is at + 32j bytes;
//                              MN-major: rows = K, 64 M / N elements a row; sbo = 1024 (the next
//                                8 K rows), lbo = the byte distance to the next 64 M / N
//                                columns; the k16 step j is at + 2048j bytes.
//   fence()                  wgmma.fence: orders this thread's register writes (accumulators, A
//                            fragments) before the wgmma instructions that read them.
//   fence_async_smem()       fence.proxy.async.shared::cta: this thread's ordinary shared-memory
//                            writes (st.shared, cp.async) become visible to wgmma's async proxy;
//                            then a barrier, then the wgmma.
//   commit() / wait<N>()     close the group of wgmmas issued since the last commit / wait until at
//                            most N groups are pending (their accumulators are then readable and
//                            their register A operands may be overwritten).
//   mma_m64nNk16_rs<kTransB>(d, a, b, accumulate)
//                            d (+)= A·B, bf16 operands, f32 accumulators (accumulate = false:
//                            d = A·B). A [64 m][16 k] from registers: warp w of the group holds
//                            rows 16w..16w+15 as the m16n8k16 A fragment (a0: row g, k 2q..2q+1;
//                            a1: row g + 8; a2, a3: the same at k + 8; g = lane / 4, q = lane % 4).
//                            B [16 k][N n] by descriptor, K-major (kTransB = 0) or MN-major (1).
//                            d[4j + e] is row 16w + g + 8·(e / 2), column 8j + 2q + e % 2 (the
//                            m16n8 accumulator layout of n-tile j).
//   mma_m64n64k16_ss(d, a, b, accumulate), mma_m64n128k16_ss
//                            the same with A from shared memory too (K-major descriptor).
//   fence_operand(x)         an empty asm that reads and writes x: placed around fence / wait so
//                            that the compiler moves no ordinary use of an accumulator or A
//                            register across them (the asm statements keep their order).
#pragma once

#include <cstdint>

#include "cuda/mma.cuh"

// The accumulator operands of a wgmma's inline asm: d[0..31] / d[0..63] read and written.
#define HYBRID_WGMMA_D8(d, i)                                                                 \
  "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
      "+f"(d[i + 6]), "+f"(d[i + 7])
#define HYBRID_WGMMA_D32(d) \
  HYBRID_WGMMA_D8(d, 0), HYBRID_WGMMA_D8(d, 8), HYBRID_WGMMA_D8(d, 16), HYBRID_WGMMA_D8(d, 24)
#define HYBRID_WGMMA_D64(d)                                                                    \
  HYBRID_WGMMA_D32(d), HYBRID_WGMMA_D8(d, 32), HYBRID_WGMMA_D8(d, 40), HYBRID_WGMMA_D8(d, 48), \
      HYBRID_WGMMA_D8(d, 56)

namespace hybrid::cuda::wgmma {

__device__ __forceinline__ uint64_t desc(const void* smem, uint32_t lbo, uint32_t sbo) {
  return static_cast<uint64_t>((smem_u32(smem) & 0x3FFFFu) >> 4) |
         static_cast<uint64_t>((lbo >> 4) & 0x3FFFu) << 16 |
         static_cast<uint64_t>((sbo >> 4) & 0x3FFFu) << 32;
}
__device__ __forceinline__ uint64_t desc_sw128(const void* smem, uint32_t lbo, uint32_t sbo) {
  return desc(smem, lbo, sbo) | uint64_t{1} << 62;  // layout type 1: 128-byte swizzle
}
// Byte offset of 16-byte piece c (0..7) of row r in a 128-byte-swizzled tile of 128-byte rows
// (the tile 1024-byte aligned): the pieces of each row XOR-permuted by the row's index mod 8.
__host__ __device__ __forceinline__ constexpr uint32_t sw128(uint32_t r, uint32_t c) {
  return r * 128 + ((c ^ (r % 8)) * 16);
}
__device__ __forceinline__ void fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void fence_async_smem() {
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}
__device__ __forceinline__ void commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
template <int R>
__device__ __forceinline__ void fence_operand(float (&x)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(x[i])::"memory");
}
template <int R>
__device__ __forceinline__ void fence_operand(uint32_t (&x)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+r"(x[i])::"memory");
}
template <int R, int C>
__device__ __forceinline__ void fence_operand(uint32_t (&x)[R][C]) {
#pragma unroll
  for (int i = 0; i < R; ++i) fence_operand(x[i]);
}

template <int kTransB>
__device__ __forceinline__ void mma_m64n64k16_rs(float (&d)[32], const uint32_t (&a)[4], uint64_t b,
                                                 bool accumulate) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %38, 0;\n"
      " wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
      "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
      "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31"
      "}, {%32,%33,%34,%35}, %36, p, 1, 1, %37;\n}\n"
      : HYBRID_WGMMA_D32(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "n"(kTransB),
        "r"(static_cast<int>(accumulate)));
}

// d (+)= A·B with both operands from shared memory by descriptor, K-major (no transposes): A [64
// m][16 k], B [16 k][64 n]. d's layout as mma_m64n64k16_rs's.
__device__ __forceinline__ void mma_m64n64k16_ss(float (&d)[32], uint64_t a, uint64_t b,
                                                 bool accumulate) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %34, 0;\n"
      " wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
      "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
      "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31"
      "}, %32, %33, p, 1, 1, 0, 0;\n}\n"
      : HYBRID_WGMMA_D32(d)
      : "l"(a), "l"(b), "r"(static_cast<int>(accumulate)));
}

// The same with N = 128 (B [16 k][128 n], K-major): d's 64 values as mma_m64n128k16_rs's.
__device__ __forceinline__ void mma_m64n128k16_ss(float (&d)[64], uint64_t a, uint64_t b,
                                                  bool accumulate) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %66, 0;\n"
      " wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
      "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
      "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
      "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
      "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63"
      "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
      : HYBRID_WGMMA_D64(d)
      : "l"(a), "l"(b), "r"(static_cast<int>(accumulate)));
}

template <int kTransB>
__device__ __forceinline__ void mma_m64n128k16_rs(float (&d)[64], const uint32_t (&a)[4],
                                                  uint64_t b, bool accumulate) {
  asm volatile(
      "{\n .reg .pred p;\n setp.ne.b32 p, %70, 0;\n"
      " wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
      "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
      "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,"
      "%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,"
      "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63"
      "}, {%64,%65,%66,%67}, %68, p, 1, 1, %69;\n}\n"
      : HYBRID_WGMMA_D64(d)
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "n"(kTransB),
        "r"(static_cast<int>(accumulate)));
}

}  // namespace hybrid::cuda::wgmma
