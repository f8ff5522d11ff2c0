// CPU helpers shared by the linear, quant and embed families: the blocked x·Wᵀ driver and the
// unpacking of MLX-quantized rows.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "cpu/common.h"
#include "hybrid/ops/quant.h"

namespace hybrid::cpu {

// Code j (0 <= j < in) of a packed row: bits [(j·bits) mod 32, +bits) of word (j·bits) / 32.
inline uint32_t quant_code(const uint32_t* row, int64_t j, int bits) {
  const int64_t bit = j * bits;
  return (row[bit / 32] >> (bit % 32)) & ((1u << bits) - 1u);
}

// dst[j] = scales[r, g] · q[r, j] + biases[r, g] (f32), g = j / group_size: row r of W [rows, in].
// Walks the packed words (32/bits codes each, lowest bits first), as quant_code() reads them.
template <int kBits>
void dequantize_row_bits(const QuantizedWeight& q, int64_t r, int64_t in, float* dst) {
  constexpr int kPerWord = 32 / kBits;
  constexpr uint32_t kMask = (1u << kBits) - 1u;
  const uint32_t* words = q.weight.data_as<const uint32_t>() + r * q.weight.stride(0);
  for (int64_t g0 = 0; g0 < in; g0 += q.group_size) {
    const float s = load_f32(q.scales, r * q.scales.stride(0) + g0 / q.group_size);
    const float b = load_f32(q.biases, r * q.biases.stride(0) + g0 / q.group_size);
    for (int64_t j = g0; j < g0 + q.group_size; j += kPerWord) {
      const uint32_t word = words[j / kPerWord];
      for (int k = 0; k < kPerWord; ++k)
        dst[j + k] = s * static_cast<float>((word >> (k * kBits)) & kMask) + b;
    }
  }
}
inline void dequantize_row(const QuantizedWeight& q, int64_t r, int64_t in, float* dst) {
  if (q.bits == 4)
    dequantize_row_bits<4>(q, r, in, dst);
  else
    dequantize_row_bits<8>(q, r, in, dst);
}

// dst[i] = t[offset + i] as f32 for i in [0, n): a contiguous run of a float tensor, with one
// dtype switch per run instead of one per element.
inline void load_run_f32(const Tensor& t, int64_t offset, int64_t n, float* dst) {
  switch (t.dtype()) {
    case DType::bf16: {
      const uint16_t* p = t.data_as<const uint16_t>() + offset;
      for (int64_t i = 0; i < n; ++i) dst[i] = f32_from_bf16(p[i]);
      return;
    }
    case DType::f16: {
      const uint16_t* p = t.data_as<const uint16_t>() + offset;
      for (int64_t i = 0; i < n; ++i) dst[i] = f32_from_f16(p[i]);
      return;
    }
    default:
      std::copy_n(t.data_as<const float>() + offset, n, dst);
      return;
  }
}

// Σ a[i]·b[i] in f32 with 8 independent partial sums (so that the compiler can vectorise it).
inline float dot_f32(const float* a, const float* b, int64_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int k = 0; k < 8; ++k) acc[k] += a[i + k] * b[i + k];
  float tail = 0.0f;
  for (; i < n; ++i) tail += a[i] * b[i];
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + tail;
}

// y[t, o] = Σ_i x[t, i] · W[o, i] (+ bias[o]) for x [T, in], W [out, in], y [T, out].
// W is never read whole: each task converts a block of kRows rows to f32 with
// load_rows(o0, n, dst /* [n, in] */) and reuses it for every token, kTokens at a time.
template <class LoadRows>
void linear_blocked(const Tensor& x, const Tensor& bias, const Tensor& y, int64_t out,
                    const Context& ctx, LoadRows&& load_rows) {
  constexpr int64_t kRows = 16, kTokens = 32;
  const int64_t T = x.size(0), in = x.size(1);
  std::vector<float> xf(static_cast<size_t>(T * in));  // [T, in] x in f32, rows packed
  parallel_for(T, ctx, [&](int64_t t) { load_run_f32(x, t * x.stride(0), in, &xf[t * in]); });
  const int64_t blocks = (out + kRows - 1) / kRows;
  parallel_for(blocks, ctx, [&](int64_t blk) {
    const int64_t o0 = blk * kRows, n = std::min(kRows, out - o0);
    std::vector<float> wf(static_cast<size_t>(n * in));  // [n, in] rows o0.. of W in f32
    load_rows(o0, n, wf.data());
    float b[kRows];
    for (int64_t r = 0; r < n; ++r) b[r] = bias.defined() ? load_f32(bias, o0 + r) : 0.0f;
    for (int64_t t0 = 0; t0 < T; t0 += kTokens) {
      const int64_t t1 = std::min(T, t0 + kTokens);
      for (int64_t r = 0; r < n; ++r)
        for (int64_t t = t0; t < t1; ++t)
          store_f32(y, t * y.stride(0) + o0 + r, dot_f32(&xf[t * in], &wf[r * in], in) + b[r]);
    }
  });
}

}  // namespace hybrid::cpu
