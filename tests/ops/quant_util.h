// MLX affine quantization in the cases (quant and moe): packed sizes, random quantized weights,
// and the f64 dequantization oracle (written from quant.h's formula, not from a kernel).
#pragma once

#include <cstdint>
#include <vector>

#include "ops/harness.h"

namespace hybrid::test {

// u32 words of a packed row of `in` codes of `bits` bits.
inline int64_t packed_words(int64_t in, int bits) {
  return in * bits / 32;
}

// W[r, j] = scales[r, j/gs] · q[r, j] + biases[r, j/gs] from packed words (logical order), for
// `rows` rows of `in` codes (row-major values of the weight / scales / biases slots).
inline std::vector<double> oracle_dequantize(const std::vector<double>& words,
                                             const std::vector<double>& scales,
                                             const std::vector<double>& biases, int64_t rows,
                                             int64_t in, int bits, int gs) {
  std::vector<double> w(static_cast<size_t>(rows * in));
  const int64_t nw = packed_words(in, bits), ng = in / gs;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < in; ++j) {
      const uint64_t word = static_cast<uint64_t>(words[r * nw + j * bits / 32]);
      const double q = static_cast<double>((word >> (j * bits % 32)) & ((1u << bits) - 1));
      w[r * in + j] = scales[r * ng + j / gs] * q + biases[r * ng + j / gs];
    }
  return w;
}

// Random packed words (slot `weight`) with scales and biases (slots `scales`, `biases`; any
// shape, row-major groups) such that W ~ uniform in about ±range (both signs of scale, as MLX
// produces them).
inline void fill_quantized(Slot& weight, Slot& sc, Slot& bi, Rng& rng, int bits, double range) {
  fill_int(weight, rng, 0, 0xffffffffll);
  const double n = (1 << bits) - 1;
  for (int64_t i = 0; i < sc.numel(); ++i) {
    const double scale = rng.uniform(0.6, 1.0) * 2.0 * range / n * (rng.uniform() < 0.5 ? -1 : 1);
    sc.set(i, scale);
    bi.set(i, -scale * n / 2 + rng.uniform(-0.1, 0.1) * range);
  }
}

}  // namespace hybrid::test
