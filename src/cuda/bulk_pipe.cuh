// Streaming a recurrent-state pool through shared memory with 1-D TMA bulk copies (sm_90):
// one thread arms a stage's mbarrier with the byte count it expects and issues
// cp.async.bulk global → shared; every thread of the block waits on the stage's phase parity.
// Used by the decode-v3 kernels (gdn.cu, ssm.cu): a persistent block walks its items (tiles of
// state rows), several tiles ahead in flight whatever the arithmetic of the current one does.
//
// Phase protocol: stage s is used by the block's local items s, s + kStages, ...; the j-th use
// of a stage completes phase j, so item i waits on parity (i / kStages) & 1. A stage armed with
// 0 bytes (padding slot, zero initial state) completes at the arrive itself.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common.cuh"

namespace hybrid::cuda {

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// One thread: a barrier that completes after `count` arrivals (and the expected bytes).
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count)
               : "memory");
#endif
}

// After the inits, before the barrier that publishes them to the block and the async proxy.
__device__ __forceinline__ void mbar_init_fence() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
}

// Arrive once and add `bytes` to the transaction count the current phase waits for.
__device__ __forceinline__ void mbar_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)),
               "r"(bytes)
               : "memory");
#endif
}

// One plain arrival on the barrier's current phase.
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
#endif
}

// The arrival of this thread's cp.async copies issued so far, once they have all landed (counted
// in the barrier's init count: .noinc), in place of a wait_group.
__device__ __forceinline__ void cp_async_mbar_arrive(uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(smem_addr(bar))
               : "memory");
#endif
}

// Bulk copy of `bytes` (a multiple of 16; both addresses 16-byte aligned) into this block's
// shared memory, completing on `bar`.
__device__ __forceinline__ void bulk_g2s(void* dst, const void* src, uint32_t bytes,
                                         uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
          "r"(smem_addr(dst)),
      "l"(src), "r"(bytes), "r"(smem_addr(bar))
      : "memory");
#endif
}

// Tiled TMA copy of one box of a 4-D tensor map (coordinates innermost first, in elements) into
// this block's shared memory, completing on `bar` (armed by mbar_arrive_expect_tx); the box lands
// as the map's swizzle lays it out (the map in kernel parameter, constant or global memory).
__device__ __forceinline__ void tma_load_4d(void* dst, const void* map, int c0, int c1, int c2,
                                            int c3, uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, "
      "{%2, %3, %4, %5}], [%6];" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(smem_addr(bar))
      : "memory");
#endif
}

// Spin until the phase with the given parity has completed.
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "wait_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra wait_%=;\n"
      "}\n" ::"r"(smem_addr(bar)),
      "r"(parity)
      : "memory");
#endif
}

// Host side (resident_blocks, persistent_blocks, device_info): cuda/common.cuh.

}  // namespace hybrid::cuda
