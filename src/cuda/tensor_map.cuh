// Host: TMA tensor maps (CUtensorMap) for the tiled copies of tma_load_4d (bulk_pipe.cuh).
//
// The encoder is a driver function (cuTensorMapEncodeTiled), reached through the runtime's entry
// point query so that the library links no libcuda itself. A map that the driver refuses (an
// address or stride not a multiple of 16 bytes, a dimension too large, an older driver) is
// reported as false: the caller keeps its non-TMA copies.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace hybrid::cuda {

inline PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult got{};
#if CUDART_VERSION >= 12050
    const cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000,
                                                           cudaEnableDefault, &got);
#else
    const cudaError_t e =
        cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &p, cudaEnableDefault, &got);
#endif
    if (e != cudaSuccess || got != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();  // (a failed query must not surface at the next launch check)
      p = nullptr;
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  }();
  return fn;
}

// A 4-D bf16 view (dims innermost first, in elements; strides of dims 1..3 in elements) with
// boxes of box[0..3] elements, 128-byte swizzle (box[0] · 2 must be 128 at most), out-of-range
// elements zero. False (map untouched) where the driver refuses it.
inline bool encode_bf16_map_4d(CUtensorMap& map, const void* base, const uint64_t (&dims)[4],
                               const int64_t (&strides)[3], const uint32_t (&box)[4]) {
  const auto encode = tensor_map_encoder();
  if (encode == nullptr) return false;
  cuuint64_t gdim[4], gstride[3];
  cuuint32_t gbox[4], estride[4] = {1, 1, 1, 1};
  for (int i = 0; i < 4; ++i) gdim[i] = dims[i], gbox[i] = box[i];
  for (int i = 0; i < 3; ++i) {
    if (strides[i] < 0) return false;
    gstride[i] = static_cast<cuuint64_t>(strides[i]) * 2;
  }
  return encode(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, const_cast<void*>(base), gdim, gstride,
                gbox, estride, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

}  // namespace hybrid::cuda
