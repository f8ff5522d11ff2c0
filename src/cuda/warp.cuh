// Warp-wide reductions (all 32 lanes take part and all receive the result).
#pragma once

namespace hybrid::cuda {

// Any type __shfl_xor_sync takes (float, double, 32-bit integers); one fixed order, so every lane
// and every call gets the same bits.
template <class T>
__device__ __forceinline__ T warp_sum(T v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

}  // namespace hybrid::cuda
