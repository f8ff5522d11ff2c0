// Warp-wide reductions and scans (all 32 lanes take part).
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

// Inclusive prefix sum over the lanes: lane l gets v of lanes 0..l added in one fixed order.
template <class T>
__device__ __forceinline__ T warp_inclusive_scan(T v, int lane) {
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const T n = __shfl_up_sync(0xffffffffu, v, o);
    if (lane >= o) v += n;
  }
  return v;
}

}  // namespace hybrid::cuda
