// Shared by the CUDA linear, quant and moe families: run-time dtype loads / stores, the
// cuBLASLt GEMM y = x·Wᵀ (+ beta·y) and the CUDA-core fallback GEMM (both defined in linear.cu).
#pragma once

#include <cstddef>
#include <cstdint>

#include "cuda/common.cuh"
#include "cuda/dtype.cuh"
#include "hybrid/core/context.h"

namespace hybrid::cuda {

// Bytes of cuBLASLt workspace the GEMM paths ask for.
constexpr size_t kLtWorkspaceBytes = size_t{32} << 20;

inline size_t align_up(size_t v, size_t a) {
  return (v + a - 1) / a * a;
}

// One GEMM y[T, out] = x[T, in] · W[out, in]ᵀ + beta·y, row-major with row strides (elements)
// ldx, ldw, ldy; x and W share dtype ab (bf16 | f16 | f32), y is ab or f32; f32 accumulation.
// ws / ws_bytes: cuBLASLt workspace. Returns false (having done nothing) when cuBLASLt offers no
// algorithm for the call.
bool lt_linear(Context& ctx, DType ab, DType yt, const void* x, int64_t ldx, const void* w,
               int64_t ldw, void* y, int64_t ldy, int64_t T, int64_t in, int64_t out, float beta,
               void* ws, size_t ws_bytes);

// Whether lt_linear handles this dtype combination at all.
bool lt_linear_dtypes(DType x, DType w, DType y);

// CUDA-core y[t, o] = Σ_i x[t, i]·W[o, i] (+ bias[o]) (+ y[t, o] when accumulate_y), any float
// dtypes; one warp per output row, tokens 4 at a time.
void linear_fallback(Context& ctx, DType xt, const void* x, int64_t ldx, DType wt, const void* w,
                     int64_t ldw, DType bt, const void* bias, DType yt, void* y, int64_t ldy,
                     int64_t T, int64_t in, int64_t out);

// y[t, o] = bias[o] for every t (rounded to y's dtype): the bias of the cuBLASLt paths (then
// beta = 1).
void fill_bias_rows(Context& ctx, DType bt, const void* bias, DType yt, void* y, int64_t ldy,
                    int64_t T, int64_t out);

}  // namespace hybrid::cuda
