// quantize against MLX itself, and the round-trip error bound.
//
// The goldens are mx.quantize's outputs (mlx 0.32.4, CPU) for a bf16 W [4, 64] built from exact
// binary fractions, so that many codes sit exactly on rounding ties (MLX rounds half to even):
//   W[0, j] = ((7j) mod 41 - 20) / 16        ties everywhere
//   W[1, j] = -((5j) mod 23) / 32 - 0.25     all negative
//   W[2, j] = 0 (j < 32), 0.375 (j >= 32)    all-zero group, constant group
//   W[3, j] = -1.25 (j < 32), (j mod 3) / 8  negative constant group, three-valued group
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "hybrid/ops/quant.h"

using namespace hybrid;

namespace {

// Deterministic normal numbers (splitmix64 + Box-Muller).
struct Normal {
  uint64_t state;
  double uniform() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return static_cast<double>((z ^ (z >> 31)) >> 11) * 0x1.0p-53;
  }
  double operator()(double mean, double sigma) {
    const double u1 = 1.0 - uniform(), u2 = uniform();
    return mean + sigma * std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
  }
};

std::vector<uint16_t> golden_w() {
  std::vector<uint16_t> w(4 * 64);
  for (int j = 0; j < 64; ++j) {
    w[0 * 64 + j] = bf16_from_f32(static_cast<float>((7 * j) % 41 - 20) / 16.0f);
    w[1 * 64 + j] = bf16_from_f32(-static_cast<float>((5 * j) % 23) / 32.0f - 0.25f);
    w[2 * 64 + j] = bf16_from_f32(j < 32 ? 0.0f : 0.375f);
    w[3 * 64 + j] = bf16_from_f32(j < 32 ? -1.25f : static_cast<float>(j % 3) / 8.0f);
  }
  return w;
}

struct Quantized {
  std::vector<uint32_t> words;
  std::vector<uint16_t> scales, biases;  // bf16 bits
};

Quantized run_quantize(std::vector<uint16_t>& w, int64_t rows, int64_t in, int bits, int gs) {
  Quantized q;
  q.words.assign(rows * in * bits / 32, 0xdeadbeefu);
  q.scales.assign(rows * in / gs, 0xffff);
  q.biases.assign(rows * in / gs, 0xffff);
  Quantize a;
  a.w = Tensor(w.data(), DType::bf16, Device::cpu(), {rows, in});
  a.q.weight = Tensor(q.words.data(), DType::u32, Device::cpu(), {rows, in * bits / 32});
  a.q.scales = Tensor(q.scales.data(), DType::bf16, Device::cpu(), {rows, in / gs});
  a.q.biases = Tensor(q.biases.data(), DType::bf16, Device::cpu(), {rows, in / gs});
  a.q.bits = bits;
  a.q.group_size = gs;
  Context ctx;
  quantize(a, ctx);
  return q;
}

}  // namespace

TEST(QuantizeMlx, FourBitGroup32MatchesMlx) {
  std::vector<uint16_t> w = golden_w();
  const Quantized q = run_quantize(w, 4, 64, 4, 32);
  const std::vector<uint32_t> words = {
      0x30eb8630u, 0x9641ec96u, 0xfca741fcu, 0x52fda742u, 0x58be0368u, 0xf258adf2u, 0xacf247adu,
      0x469cf147u, 0x7ad158bfu, 0xbe259c03u, 0xf369d147u, 0x37ad158bu, 0x7be259c0u, 0xbf369d14u,
      0x037ad158u, 0x47be259cu, 0x00000000u, 0x00000000u, 0x00000000u, 0x00000000u, 0x00000000u,
      0x00000000u, 0x00000000u, 0x00000000u, 0x00000000u, 0x00000000u, 0x00000000u, 0x00000000u,
      0xf07f07f0u, 0x07f07f07u, 0x7f07f07fu, 0xf07f07f0u};
  const std::vector<uint16_t> scales = {0x3e20, 0xbe20, 0x3d40, 0x3d40,
                                        0xb3d7, 0xb3d7, 0xb3d7, 0xbc89};
  const std::vector<uint16_t> biases = {0xbfa0, 0x3fa0, 0xbf70, 0xbf70,
                                        0x0000, 0x3ec0, 0xbfa0, 0x3e80};
  EXPECT_EQ(q.words, words);
  EXPECT_EQ(q.scales, scales);
  EXPECT_EQ(q.biases, biases);
}

TEST(QuantizeMlx, EightBitGroup64MatchesMlx) {
  std::vector<uint16_t> w = golden_w();
  const Quantized q = run_quantize(w, 4, 64, 8, 64);
  const std::vector<uint32_t> words = {
      0x79a5d2feu, 0xcbf8204cu, 0x1946729fu, 0x6c98c5f1u, 0xbeeb1340u, 0x0d396692u, 0x5f8cb8e5u,
      0xb2de0633u, 0x002c5985u, 0x537fabd8u, 0xa5d2fe26u, 0xf8204c79u, 0x46729fcbu, 0x98c5f119u,
      0xeb13406cu, 0x396692beu, 0x518bc5ffu, 0x74aee817u, 0x97d1003au, 0xbaf4235du, 0xdc0c4680u,
      0xff2e68a2u, 0x17518bc5u, 0x3a74aee8u, 0x5d97d100u, 0x80baf423u, 0xa2dc0c46u, 0xc5ff2e68u,
      0xe817518bu, 0x003a74aeu, 0x235d97d1u, 0x4680baf4u, 0xffffffffu, 0xffffffffu, 0xffffffffu,
      0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0x00000000u, 0x00000000u,
      0x00000000u, 0x00000000u, 0x00000000u, 0x00000000u, 0x00000000u, 0x00000000u, 0x00000000u,
      0x00000000u, 0x00000000u, 0x00000000u, 0x00000000u, 0x00000000u, 0x00000000u, 0x00000000u,
      0xfee9d4feu, 0xd4fee9d4u, 0xe9d4fee9u, 0xfee9d4feu, 0xd4fee9d4u, 0xe9d4fee9u, 0xfee9d4feu,
      0xd4fee9d4u};
  const std::vector<uint16_t> scales = {0xbc21, 0x3b31, 0xbac1, 0x3bc1};
  const std::vector<uint16_t> biases = {0x3fa0, 0xbf70, 0x3ec0, 0xbfa0};
  EXPECT_EQ(q.words, words);
  EXPECT_EQ(q.scales, scales);
  EXPECT_EQ(q.biases, biases);
}

// dequantize(quantize(W)) is within the quantization error of W, per group: |w - ŵ| <= |s|
// (MLX's own test bound: rounding gives |s| / 2, and the code of the far end of a group can be
// clamped after the edge snap), plus, in bf16, the rounding of the stored scale and bias and of
// ŵ itself: 2^-8 · (n·|s| + |b| + |w|).
TEST(QuantizeRoundTrip, WithinQuantizationError) {
  for (DType dt : {DType::f32, DType::bf16})
    for (int bits : {4, 8})
      for (int gs : {32, 64, 128}) {
        const int64_t rows = 16, in = 512, ng = in / gs;
        Normal rng{static_cast<uint64_t>(1234 + bits * 1000 + gs)};
        std::vector<uint8_t> w(rows * in * 4), w_hat(rows * in * 4), sc(rows * ng * 4),
            bi(rows * ng * 4);
        std::vector<uint32_t> words(rows * in * bits / 32);
        for (int64_t r = 0; r < rows; ++r) {
          const double sigma = 0.005 + 0.5 * rng.uniform(), mu = (2 * rng.uniform() - 1) * sigma;
          for (int64_t j = 0; j < in; ++j) store_element(w.data(), dt, r * in + j, rng(mu, sigma));
        }
        Context ctx;
        Quantize q;
        q.w = Tensor(w.data(), dt, Device::cpu(), {rows, in});
        q.q.weight = Tensor(words.data(), DType::u32, Device::cpu(), {rows, in * bits / 32});
        q.q.scales = Tensor(sc.data(), dt, Device::cpu(), {rows, ng});
        q.q.biases = Tensor(bi.data(), dt, Device::cpu(), {rows, ng});
        q.q.bits = bits;
        q.q.group_size = gs;
        quantize(q, ctx);
        Dequantize d;
        d.q = q.q;
        d.w = Tensor(w_hat.data(), dt, Device::cpu(), {rows, in});
        dequantize(d, ctx);
        int bad = 0;
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t j = 0; j < in; ++j) {
            const double s = std::fabs(load_element(sc.data(), dt, r * ng + j / gs));
            const double b = std::fabs(load_element(bi.data(), dt, r * ng + j / gs));
            const double wv = load_element(w.data(), dt, r * in + j);
            const double rounding =
                dt == DType::f32 ? 1e-6 : 0x1.0p-8 * (((1 << bits) - 1) * s + b + std::fabs(wv));
            const double bound = s * (1 + 1e-5) + rounding;
            const double err = std::fabs(wv - load_element(w_hat.data(), dt, r * in + j));
            if (err > bound && bad++ < 3)
              ADD_FAILURE() << dtype_name(dt) << " bits=" << bits << " group=" << gs << " W[" << r
                            << ", " << j << "]: |w - w_hat| = " << err << " > " << bound;
          }
        EXPECT_EQ(bad, 0);
      }
}
