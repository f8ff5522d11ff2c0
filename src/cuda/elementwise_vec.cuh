// Helpers of the memory-bound kernels of the elementwise, rope, embed and conv families:
// N-element vectors of f32 / bf16 / f16 moved in 16-byte pieces, loads of a dtype chosen at run
// time (for the small side tensors: weights, scales, states), and the launch size of grid-stride
// kernels.
#pragma once

#include <cstdint>

#include "cuda/common.cuh"
#include "cuda/dtype.cuh"

namespace hybrid::cuda::vec {

// N elements of T as raw 16-byte pieces (N·sizeof(T) a multiple of 16), or as N scalars.
template <class T, int N>
struct Raw {
  static constexpr bool kWide = (N * sizeof(T)) % 16 == 0;
  static constexpr int kPieces = static_cast<int>((N * sizeof(T) + 15) / 16);
  uint4 piece[kPieces];
  __device__ __forceinline__ T* elem() { return reinterpret_cast<T*>(piece); }
  __device__ __forceinline__ const T* elem() const { return reinterpret_cast<const T*>(piece); }
};

// p must be 16-byte aligned when Raw<T, N>::kWide.
template <class T, int N>
__device__ __forceinline__ void load(const T* p, Raw<T, N>& r) {
  if constexpr (Raw<T, N>::kWide) {
#pragma unroll
    for (int k = 0; k < Raw<T, N>::kPieces; ++k) r.piece[k] = reinterpret_cast<const uint4*>(p)[k];
  } else {
#pragma unroll
    for (int k = 0; k < N; ++k) r.elem()[k] = p[k];
  }
}

template <class T, int N>
__device__ __forceinline__ void store(T* p, const Raw<T, N>& r) {
  if constexpr (Raw<T, N>::kWide) {
#pragma unroll
    for (int k = 0; k < Raw<T, N>::kPieces; ++k) reinterpret_cast<uint4*>(p)[k] = r.piece[k];
  } else {
#pragma unroll
    for (int k = 0; k < N; ++k) p[k] = r.elem()[k];
  }
}

template <class T, int N>
__device__ __forceinline__ void to_floats(const Raw<T, N>& r, float (&v)[N]) {
#pragma unroll
  for (int k = 0; k < N; ++k) v[k] = to_f32(r.elem()[k]);
}

template <class T, int N>
__device__ __forceinline__ void from_floats(const float (&v)[N], Raw<T, N>& r) {
#pragma unroll
  for (int k = 0; k < N; ++k) r.elem()[k] = from_f32<T>(v[k]);
}

// Run-time dtype code of a float tensor: 0 f32, 1 bf16, 2 f16.
inline int dtype_code(DType t) {
  return t == DType::f32 ? 0 : t == DType::bf16 ? 1 : 2;
}

__device__ __forceinline__ float load_any(const void* p, int64_t i, int code) {
  if (code == 0) return static_cast<const float*>(p)[i];
  if (code == 1) return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
  return __half2float(static_cast<const __half*>(p)[i]);
}

// raw_any / float_of_raw (dtype.cuh) by dtype code: loads that go out together, converted after.
__device__ __forceinline__ DType dtype_of_code(int code) {
  return code == 0 ? DType::f32 : code == 1 ? DType::bf16 : DType::f16;
}
__device__ __forceinline__ uint32_t raw_any(const void* p, int64_t i, int code) {
  return hybrid::cuda::raw_any(p, dtype_of_code(code), i);
}
__device__ __forceinline__ float float_of_raw(int code, uint32_t r) {
  return hybrid::cuda::float_of_raw(dtype_of_code(code), r);
}

__device__ __forceinline__ void store_any(void* p, int64_t i, int code, float v) {
  if (code == 0)
    static_cast<float*>(p)[i] = v;
  else if (code == 1)
    static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v);
  else
    static_cast<__half*>(p)[i] = __float2half_rn(v);
}

// x / (1 + e^-x) and 1 / (1 + e^-x) with the accurate expf (as the CPU's std::exp in f32).
__device__ __forceinline__ float silu(float x) {
  return x / (1.0f + expf(-x));
}
__device__ __forceinline__ float sigmoid(float x) {
  return 1.0f / (1.0f + expf(-x));
}

// The same with the fast exponential and division (__expf, __fdividef: a few ulp, 4 instructions
// instead of ~30), for the kernels where the accurate ones would cost more time than the memory
// traffic (activations over bf16 rows). x -> -inf gives -0 / 0 as the accurate forms do.
__device__ __forceinline__ float silu_fast(float x) {
  return __fdividef(x, 1.0f + __expf(-x));
}
__device__ __forceinline__ float sigmoid_fast(float x) {
  return __fdividef(1.0f, 1.0f + __expf(-x));
}

inline bool aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}
// A stride of `elems` elements of `bytes` bytes keeps 16-byte alignment.
inline bool stride16(int64_t elems, size_t bytes) {
  return (elems * static_cast<int64_t>(bytes)) % 16 == 0;
}

// Blocks of a grid-stride launch over `work` items, `per_block` items per block and pass: enough
// to fill the GPU (8 blocks per SM), never more than the work needs.
inline unsigned grid_for(int64_t work, int64_t per_block) {
  const int sms = sm_count();
  const int64_t need = (work + per_block - 1) / per_block;
  const int64_t cap = int64_t{sms} * 8;
  return static_cast<unsigned>(need < 1 ? 1 : need < cap ? need : cap);
}

}  // namespace hybrid::cuda::vec
