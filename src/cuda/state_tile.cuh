// Four consecutive elements of a recurrent-state row (16 bytes of f32, 8 bytes of bf16), loaded
// and stored with the streaming cache hint (.cs): a decode step reads each pool element once and
// writes it once, so its lines should be the first victims in L1 / L2. Used by the tile decode
// kernels (gdn_tile_kernel, ssm_tile_kernel), whose lane l holds columns 4l..4l+3 of its rows.
// The pointer must be aligned to the access (16 / 8 bytes).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace hybrid::cuda {

__device__ __forceinline__ void tile_load4(const float* p, float (&r)[4]) {
  const float4 x = __ldcs(reinterpret_cast<const float4*>(p));
  r[0] = x.x, r[1] = x.y, r[2] = x.z, r[3] = x.w;
}
__device__ __forceinline__ void tile_load4(const __nv_bfloat16* p, float (&r)[4]) {
  const uint2 x = __ldcs(reinterpret_cast<const uint2*>(p));
  const __nv_bfloat16* e = reinterpret_cast<const __nv_bfloat16*>(&x);
#pragma unroll
  for (int i = 0; i < 4; ++i) r[i] = __bfloat162float(e[i]);
}
__device__ __forceinline__ void tile_store4(float* p, const float (&r)[4]) {
  __stcs(reinterpret_cast<float4*>(p), make_float4(r[0], r[1], r[2], r[3]));
}
__device__ __forceinline__ void tile_store4(__nv_bfloat16* p, const float (&r)[4]) {
  uint2 x;
  __nv_bfloat16* e = reinterpret_cast<__nv_bfloat16*>(&x);
#pragma unroll
  for (int i = 0; i < 4; ++i) e[i] = __float2bfloat16_rn(r[i]);
  __stcs(reinterpret_cast<uint2*>(p), x);
}

}  // namespace hybrid::cuda
