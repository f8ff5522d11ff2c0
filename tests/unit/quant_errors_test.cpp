// Bad input to quantize / dequantize / linear_q: each names the op, the argument and what was
// wrong.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "expect_error.h"
#include "hybrid/ops/quant.h"

using namespace hybrid;

namespace {
// W [out=7, in=96], 4-bit, group 32: weight [7, 12] u32, scales / biases [7, 3] bf16.
struct QuantFixture : ::testing::Test {
  std::vector<uint32_t> words = std::vector<uint32_t>(7 * 24, 0x76543210u);
  std::vector<uint16_t> scales = std::vector<uint16_t>(7 * 6, bf16_from_f32(0.5f)),
                        biases = std::vector<uint16_t>(7 * 6, bf16_from_f32(-1.0f));
  std::vector<float> w = std::vector<float>(7 * 96, 0.25f), x = std::vector<float>(2 * 96, 1.0f),
                     y = std::vector<float>(2 * 7, 0.0f), bias = std::vector<float>(8, 0.0f);
  Context ctx;
  QuantizedWeight qw(int bits = 4, int gs = 32) {
    QuantizedWeight q;
    q.weight = Tensor(words.data(), DType::u32, Device::cpu(), {7, 96 * bits / 32});
    q.scales = Tensor(scales.data(), DType::bf16, Device::cpu(), {7, 96 / gs});
    q.biases = Tensor(biases.data(), DType::bf16, Device::cpu(), {7, 96 / gs});
    q.bits = bits;
    q.group_size = gs;
    return q;
  }
  LinearQ lq() {
    LinearQ a;
    a.x = Tensor(x.data(), DType::f32, Device::cpu(), {2, 96});
    a.w = qw();
    a.y = Tensor(y.data(), DType::f32, Device::cpu(), {2, 7});
    return a;
  }
  Dequantize dq() {
    Dequantize a;
    a.q = qw();
    a.w = Tensor(w.data(), DType::f32, Device::cpu(), {7, 96});
    return a;
  }
  Quantize qz() {
    Quantize a;
    a.w = Tensor(w.data(), DType::f32, Device::cpu(), {7, 96});
    a.q = qw();
    return a;
  }
};
}  // namespace

TEST_F(QuantFixture, ValidCallsRun) {
  // codes of 0x76543210: 0, 1, ..., 7 repeating; W = 0.5 q - 1.
  dequantize(dq(), ctx);
  for (int j = 0; j < 96; ++j) EXPECT_FLOAT_EQ(w[j], 0.5f * static_cast<float>(j % 8) - 1.0f);
  linear_q(lq(), ctx);
  EXPECT_FLOAT_EQ(y[0], 12 * (0.5f * 28 - 8));
  std::fill(w.begin(), w.end(), 0.25f);
  quantize(qz(), ctx);  // a constant group: q = 0, bias = the constant
  EXPECT_EQ(words[0], 0u);
  EXPECT_FLOAT_EQ(f32_from_bf16(biases[0]), 0.25f);
}

TEST_F(QuantFixture, UnsupportedBits) {
  LinearQ a = lq();
  a.w.bits = 3;
  EXPECT_HYBRID_ERROR(linear_q(a, ctx), "[linear_q] w.bits = 3 is not supported (supported: 4, 8)");
  Dequantize d = dq();
  d.q.bits = 2;
  EXPECT_HYBRID_ERROR(dequantize(d, ctx),
                      "[dequantize] q.bits = 2 is not supported (supported: 4, 8)");
}

TEST_F(QuantFixture, UnsupportedGroupSize) {
  Quantize a = qz();
  a.q.group_size = 16;
  EXPECT_HYBRID_ERROR(quantize(a, ctx),
                      "[quantize] q.group_size = 16 is not supported (supported: 32, 64, 128)");
  LinearQ l = lq();
  l.w.group_size = 256;
  EXPECT_HYBRID_ERROR(linear_q(l, ctx),
                      "[linear_q] w.group_size = 256 is not supported (supported: 32, 64, 128)");
}

TEST_F(QuantFixture, InNotDivisibleByGroup) {
  LinearQ a = lq();
  a.w.group_size = 64;
  EXPECT_HYBRID_ERROR(linear_q(a, ctx), "[linear_q] in=96 is not divisible by w.group_size=64");
  Quantize q = qz();
  q.q.group_size = 128;
  EXPECT_HYBRID_ERROR(quantize(q, ctx), "[quantize] in=96 is not divisible by q.group_size=128");
}

TEST_F(QuantFixture, PackedWidthMismatch) {
  LinearQ a = lq();
  a.w.weight = Tensor(words.data(), DType::u32, Device::cpu(), {7, 24});  // 8-bit width, bits = 4
  EXPECT_HYBRID_ERROR(linear_q(a, ctx),
                      "[linear_q] w.weight: expected [rows=7, in*bits/32=12] u32, got [7, 24] u32");
  Dequantize d = dq();
  d.q.bits = 8;  // weight still 4-bit wide
  EXPECT_HYBRID_ERROR(
      dequantize(d, ctx),
      "[dequantize] q.weight: expected [rows=7, in*bits/32=24] u32, got [7, 12] u32");
}

TEST_F(QuantFixture, WrongShape) {
  LinearQ a = lq();
  a.w.scales = Tensor(scales.data(), DType::bf16, Device::cpu(), {7, 2});
  EXPECT_HYBRID_ERROR(
      linear_q(a, ctx),
      "[linear_q] w.scales: expected [rows=7, in/group_size=3] f32|bf16|f16, got [7, 2] bf16");
  a = lq();
  a.y = Tensor(y.data(), DType::f32, Device::cpu(), {2, 6});
  EXPECT_HYBRID_ERROR(linear_q(a, ctx),
                      "[linear_q] w.weight: expected [rows=6, in*bits/32=12] u32, got [7, 12] u32");
  a = lq();
  a.bias = Tensor(bias.data(), DType::f32, Device::cpu(), {8});
  EXPECT_HYBRID_ERROR(linear_q(a, ctx),
                      "[linear_q] bias: expected [out=7] f32|bf16|f16, got [8] f32");
  a = lq();
  a.y = Tensor(y.data(), DType::f32, Device::cpu(), {1, 7});
  EXPECT_HYBRID_ERROR(linear_q(a, ctx),
                      "[linear_q] y: expected [T=2, out=7] f32|bf16|f16, got [1, 7] f32");
  Dequantize d = dq();
  d.w = Tensor(w.data(), DType::f32, Device::cpu(), {6, 96});
  EXPECT_HYBRID_ERROR(
      dequantize(d, ctx),
      "[dequantize] q.weight: expected [rows=6, in*bits/32=12] u32, got [7, 12] u32");
}

TEST_F(QuantFixture, WrongRank) {
  LinearQ a = lq();
  a.x = Tensor(x.data(), DType::f32, Device::cpu(), {192});
  EXPECT_HYBRID_ERROR(linear_q(a, ctx),
                      "[linear_q] x: expected [T, in] f32|bf16|f16, got [192] f32");
  Quantize q = qz();
  q.w = Tensor(w.data(), DType::f32, Device::cpu(), {7, 96, 1});
  EXPECT_HYBRID_ERROR(quantize(q, ctx),
                      "[quantize] w: expected [out, in] f32|bf16|f16, got [7, 96, 1] f32");
}

TEST_F(QuantFixture, WrongDtype) {
  LinearQ a = lq();
  a.w.weight = Tensor(words.data(), DType::i32, Device::cpu(), {7, 12});
  EXPECT_HYBRID_ERROR(linear_q(a, ctx),
                      "[linear_q] w.weight: expected [rows=7, in*bits/32=12] u32, got [7, 12] i32");
  a = lq();
  a.w.biases = Tensor(w.data(), DType::f32, Device::cpu(), {7, 3});  // scales are bf16
  EXPECT_HYBRID_ERROR(
      linear_q(a, ctx),
      "[linear_q] w.biases: expected [rows=7, in/group_size=3] bf16, got [7, 3] f32");
  a = lq();
  a.w.scales = Tensor(words.data(), DType::u32, Device::cpu(), {7, 3});
  EXPECT_HYBRID_ERROR(
      linear_q(a, ctx),
      "[linear_q] w.scales: expected [rows=7, in/group_size=3] f32|bf16|f16, got [7, 3] u32");
  Quantize q = qz();
  q.w = Tensor(w.data(), DType::i32, Device::cpu(), {7, 96});
  EXPECT_HYBRID_ERROR(quantize(q, ctx),
                      "[quantize] w: expected [out, in] f32|bf16|f16, got [7, 96] i32");
}

TEST_F(QuantFixture, WrongStride) {
  LinearQ a = lq();
  a.w.weight = Tensor(words.data(), DType::u32, Device::cpu(), {7, 12}, {24, 2});
  EXPECT_HYBRID_ERROR(linear_q(a, ctx),
                      "[linear_q] w.weight: the last dimension must be contiguous");
  Dequantize d = dq();
  d.w = Tensor(w.data(), DType::f32, Device::cpu(), {7, 96}, {-96, 1});
  EXPECT_HYBRID_ERROR(dequantize(d, ctx), "[dequantize] w: strides must be positive");
  // Strided rows are fine: the packed words of each row inside a wider buffer.
  a = lq();
  a.w.weight = Tensor(words.data(), DType::u32, Device::cpu(), {7, 12}, {24, 1});
  linear_q(a, ctx);
}
