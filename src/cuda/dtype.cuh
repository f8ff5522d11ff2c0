// Element types on the device and their f32 conversions (round to nearest even, as the CPU).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "hybrid/core/dtype.h"
#include "hybrid/core/error.h"

namespace hybrid::cuda {

__device__ __forceinline__ float to_f32(float v) {
  return v;
}
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
__device__ __forceinline__ float to_f32(__half v) {
  return __half2float(v);
}

template <class T>
__device__ __forceinline__ T from_f32(float v);
template <>
__device__ __forceinline__ float from_f32<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <>
__device__ __forceinline__ __half from_f32<__half>(float v) {
  return __float2half_rn(v);
}

// The raw bits of p[i] of a float tensor whose dtype is known only at run time (f32: 32 bits; bf16
// / f16: 16 bits), by two predicated loads and no branch, so that several go out back to back;
// float_of_raw converts them once all are in flight. load_any below converts inside its dtype
// branch, so each call waits for its own data before the next call's load can be issued: in the
// decode tile kernels' SASS, 8-20 parameter loads in a row became as many round trips.
__device__ __forceinline__ uint32_t raw_any(const void* p, DType t, int64_t i) {
  return t == DType::f32 ? static_cast<const uint32_t*>(p)[i]
                         : uint32_t{static_cast<const unsigned short*>(p)[i]};
}
__device__ __forceinline__ float float_of_raw(DType t, uint32_t r) {
  if (t == DType::bf16) return __uint_as_float(r << 16);
  if (t == DType::f16) return __half2float(__ushort_as_half(static_cast<unsigned short>(r)));
  return __uint_as_float(r);
}

// p[i] of a float tensor whose dtype is known only at run time (a uniform branch per warp).
__device__ __forceinline__ float load_any(const void* p, DType t, int64_t i) {
  if (t == DType::bf16) return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
  if (t == DType::f16) return __half2float(static_cast<const __half*>(p)[i]);
  return static_cast<const float*>(p)[i];
}
__device__ __forceinline__ void store_any(void* p, DType t, int64_t i, float v) {
  if (t == DType::bf16)
    static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v);
  else if (t == DType::f16)
    static_cast<__half*>(p)[i] = __float2half_rn(v);
  else
    static_cast<float*>(p)[i] = v;
}

// Calls body(T{}) with T the device type of a float dtype: float, __nv_bfloat16 or __half.
template <class Body>
void dispatch_float(DType t, const char* op, Body&& body) {
  switch (t) {
    case DType::f32:
      body(float{});
      return;
    case DType::bf16:
      body(__nv_bfloat16{});
      return;
    case DType::f16:
      body(__half{});
      return;
    default:
      fail("[", op, "] dtype ", dtype_name(t), " is not a float type");
  }
}

// W contiguous elements of type T <-> f32 (16-byte, 8-byte or scalar accesses; p aligned to
// the access it gets).
template <int W, class T>
__device__ __forceinline__ void vload(const T* p, float* r) {
  constexpr int kBytes = W * static_cast<int>(sizeof(T));
  if constexpr (kBytes % 16 == 0) {
    constexpr int kPer = 16 / static_cast<int>(sizeof(T));
#pragma unroll
    for (int v = 0; v < kBytes / 16; ++v) {
      const uint4 u = reinterpret_cast<const uint4*>(p)[v];
      const T* e = reinterpret_cast<const T*>(&u);
#pragma unroll
      for (int i = 0; i < kPer; ++i) r[v * kPer + i] = to_f32(e[i]);
    }
  } else if constexpr (kBytes == 8) {
    const uint2 u = *reinterpret_cast<const uint2*>(p);
    const T* e = reinterpret_cast<const T*>(&u);
#pragma unroll
    for (int i = 0; i < W; ++i) r[i] = to_f32(e[i]);
  } else {
#pragma unroll
    for (int i = 0; i < W; ++i) r[i] = to_f32(p[i]);
  }
}

template <int W, class T>
__device__ __forceinline__ void vstore(T* p, const float* r) {
  constexpr int kBytes = W * static_cast<int>(sizeof(T));
  if constexpr (kBytes % 16 == 0) {
    constexpr int kPer = 16 / static_cast<int>(sizeof(T));
#pragma unroll
    for (int v = 0; v < kBytes / 16; ++v) {
      uint4 u;
      T* e = reinterpret_cast<T*>(&u);
#pragma unroll
      for (int i = 0; i < kPer; ++i) e[i] = from_f32<T>(r[v * kPer + i]);
      reinterpret_cast<uint4*>(p)[v] = u;
    }
  } else if constexpr (kBytes == 8) {
    uint2 u;
    T* e = reinterpret_cast<T*>(&u);
#pragma unroll
    for (int i = 0; i < W; ++i) e[i] = from_f32<T>(r[i]);
    *reinterpret_cast<uint2*>(p) = u;
  } else {
#pragma unroll
    for (int i = 0; i < W; ++i) p[i] = from_f32<T>(r[i]);
  }
}

}  // namespace hybrid::cuda
