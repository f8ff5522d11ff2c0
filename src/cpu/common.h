// Helpers shared by the CPU reference kernels: element access in f32 and a parallel loop.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "hybrid/core/context.h"
#include "hybrid/core/tensor.h"

namespace hybrid::cpu {

// Element `offset` (in elements from t.data()) of a float tensor, as f32.
inline float load_f32(const Tensor& t, int64_t offset) {
  switch (t.dtype()) {
    case DType::bf16:
      return f32_from_bf16(t.data_as<const uint16_t>()[offset]);
    case DType::f16:
      return f32_from_f16(t.data_as<const uint16_t>()[offset]);
    default:
      return t.data_as<const float>()[offset];
  }
}

// Stores v at element `offset`, rounding to the tensor's float dtype.
inline void store_f32(const Tensor& t, int64_t offset, float v) {
  switch (t.dtype()) {
    case DType::bf16:
      t.data_as<uint16_t>()[offset] = bf16_from_f32(v);
      return;
    case DType::f16:
      t.data_as<uint16_t>()[offset] = f16_from_f32(v);
      return;
    default:
      t.data_as<float>()[offset] = v;
      return;
  }
}

// Integer element (i32 or i64) as int64.
inline int64_t load_index(const Tensor& t, int64_t offset) {
  return t.dtype() == DType::i64 ? t.data_as<const int64_t>()[offset]
                                 : t.data_as<const int32_t>()[offset];
}

inline float silu(float x) {
  return x / (1.0f + std::exp(-x));
}
inline float sigmoid(float x) {
  return 1.0f / (1.0f + std::exp(-x));
}
inline float softplus(float x) {
  return x > 20.0f ? x : std::log1p(std::exp(x));
}

// for (i in [0, n)) body(i), spread over ctx.cpu_threads() threads. Iterations must be
// independent.
template <class Body>
void parallel_for(int64_t n, const Context& ctx, Body&& body) {
  const int threads = static_cast<int>(std::min<int64_t>(ctx.cpu_threads(), n));
  if (threads <= 1) {
    for (int64_t i = 0; i < n; ++i) body(i);
    return;
  }
#pragma omp parallel for num_threads(threads) schedule(dynamic, 1)
  for (int64_t i = 0; i < n; ++i) body(i);
}

}  // namespace hybrid::cpu
