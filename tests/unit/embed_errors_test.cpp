// Bad input to embed_gather / embed_gather_q: each names the op, the argument and what was wrong;
// a bad id is reported (with its position) before anything is written.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "expect_error.h"
#include "hybrid/ops/embed.h"

using namespace hybrid;

namespace {
// table [vocab=10, D=64]; ids [T=4]; out [4, 64]. Quantized: 4-bit, group 32.
struct EmbedFixture : ::testing::Test {
  std::vector<float> table = std::vector<float>(10 * 64), out = std::vector<float>(4 * 64, -3.0f);
  std::vector<int32_t> ids = {2, 9, 0, 5};
  std::vector<int64_t> ids64 = {2, 9, 0, 5};
  std::vector<uint32_t> words = std::vector<uint32_t>(10 * 8);
  std::vector<float> scales = std::vector<float>(10 * 2, 1.0f), biases = std::vector<float>(10 * 2);
  Context ctx;
  EmbedFixture() {
    for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<float>(i);
    for (size_t r = 0; r < 10; ++r) {
      for (size_t k = 0; k < 8; ++k) words[r * 8 + k] = 0x11111111u * static_cast<uint32_t>(r);
      biases[r * 2] = biases[r * 2 + 1] = 100.0f * static_cast<float>(r);
    }
  }
  EmbedGather eg() {
    EmbedGather a;
    a.table = Tensor(table.data(), DType::f32, Device::cpu(), {10, 64});
    a.ids = Tensor(ids.data(), DType::i32, Device::cpu(), {4});
    a.out = Tensor(out.data(), DType::f32, Device::cpu(), {4, 64});
    return a;
  }
  EmbedGatherQ egq() {
    EmbedGatherQ a;
    a.table.weight = Tensor(words.data(), DType::u32, Device::cpu(), {10, 8});
    a.table.scales = Tensor(scales.data(), DType::f32, Device::cpu(), {10, 2});
    a.table.biases = Tensor(biases.data(), DType::f32, Device::cpu(), {10, 2});
    a.table.bits = 4;
    a.table.group_size = 32;
    a.ids = Tensor(ids64.data(), DType::i64, Device::cpu(), {4});
    a.out = Tensor(out.data(), DType::f32, Device::cpu(), {4, 64});
    return a;
  }
  bool out_untouched() const {
    for (float v : out)
      if (v != -3.0f) return false;
    return true;
  }
};
}  // namespace

TEST_F(EmbedFixture, ValidCallsRun) {
  embed_gather(eg(), ctx);
  EXPECT_EQ(out[0], table[2 * 64]);
  EXPECT_EQ(out[64 + 63], table[9 * 64 + 63]);
  embed_gather_q(egq(), ctx);  // row r: every code r, scale 1, bias 100 r
  EXPECT_EQ(out[0], 2.0f + 200.0f);
  EXPECT_EQ(out[64 + 40], 9.0f + 900.0f);
}

TEST_F(EmbedFixture, IdOutOfRange) {
  ids[3] = 10;
  EXPECT_HYBRID_ERROR(embed_gather(eg(), ctx),
                      "[embed_gather] ids[3] = 10 is out of range for vocab 10");
  EXPECT_TRUE(out_untouched());
  ids64[2] = 151700;
  EXPECT_HYBRID_ERROR(embed_gather_q(egq(), ctx),
                      "[embed_gather_q] ids[2] = 151700 is out of range for vocab 10");
  EXPECT_TRUE(out_untouched());
}

TEST_F(EmbedFixture, NegativeId) {
  ids[1] = -5;
  EXPECT_HYBRID_ERROR(embed_gather(eg(), ctx),
                      "[embed_gather] ids[1] = -5 is out of range for vocab 10");
  ids64[0] = -1;
  EXPECT_HYBRID_ERROR(embed_gather_q(egq(), ctx),
                      "[embed_gather_q] ids[0] = -1 is out of range for vocab 10");
  EXPECT_TRUE(out_untouched());
}

TEST_F(EmbedFixture, WrongRankShapeDtype) {
  EmbedGather a = eg();
  a.ids = Tensor(ids.data(), DType::i32, Device::cpu(), {2, 2});
  EXPECT_HYBRID_ERROR(embed_gather(a, ctx),
                      "[embed_gather] ids: expected [T] i32|i64, got [2, 2] i32");
  a = eg();
  a.ids = Tensor(table.data(), DType::f32, Device::cpu(), {4});
  EXPECT_HYBRID_ERROR(embed_gather(a, ctx),
                      "[embed_gather] ids: expected [T] i32|i64, got [4] f32");
  a = eg();
  a.table = Tensor(table.data(), DType::f32, Device::cpu(), {640});
  EXPECT_HYBRID_ERROR(embed_gather(a, ctx),
                      "[embed_gather] table: expected [vocab, D] f32|bf16|f16, got [640] f32");
  a = eg();
  a.out = Tensor(out.data(), DType::f32, Device::cpu(), {4, 32});
  EXPECT_HYBRID_ERROR(embed_gather(a, ctx),
                      "[embed_gather] out: expected [T=4, D=64] f32|bf16|f16, got [4, 32] f32");
  a = eg();
  a.out = Tensor(out.data(), DType::i32, Device::cpu(), {4, 64});
  EXPECT_HYBRID_ERROR(embed_gather(a, ctx),
                      "[embed_gather] out: expected [T=4, D=64] f32|bf16|f16, got [4, 64] i32");
}

TEST_F(EmbedFixture, WrongStride) {
  EmbedGather a = eg();
  a.table = Tensor(table.data(), DType::f32, Device::cpu(), {10, 32}, {64, 2});
  a.out = Tensor(out.data(), DType::f32, Device::cpu(), {4, 32});
  EXPECT_HYBRID_ERROR(embed_gather(a, ctx),
                      "[embed_gather] table: the last dimension must be contiguous");
  a = eg();
  a.ids = Tensor(ids.data(), DType::i32, Device::cpu(), {4}, {-1});
  EXPECT_HYBRID_ERROR(embed_gather(a, ctx), "[embed_gather] ids: strides must be positive");
}

TEST_F(EmbedFixture, QuantizedTableErrors) {
  EmbedGatherQ a = egq();
  a.table.weight = Tensor(words.data(), DType::u32, Device::cpu(), {10, 16});
  EXPECT_HYBRID_ERROR(
      embed_gather_q(a, ctx),
      "[embed_gather_q] table.weight: expected [rows, D*bits/32=8] u32, got [10, 16] u32");
  a = egq();
  a.table.bits = 6;
  EXPECT_HYBRID_ERROR(embed_gather_q(a, ctx),
                      "[embed_gather_q] table.bits = 6 is not supported (supported: 4, 8)");
  a = egq();
  a.table.group_size = 48;
  EXPECT_HYBRID_ERROR(
      embed_gather_q(a, ctx),
      "[embed_gather_q] table.group_size = 48 is not supported (supported: 32, 64, 128)");
  a = egq();
  a.table.group_size = 128;
  EXPECT_HYBRID_ERROR(embed_gather_q(a, ctx),
                      "[embed_gather_q] D=64 is not divisible by table.group_size=128");
  a = egq();
  a.table.scales = Tensor(scales.data(), DType::f32, Device::cpu(), {9, 2});
  EXPECT_HYBRID_ERROR(embed_gather_q(a, ctx),
                      "[embed_gather_q] table.scales: expected [rows=10, D/group_size=2] "
                      "f32|bf16|f16, got [9, 2] f32");
  a = egq();
  a.ids = Tensor(ids64.data(), DType::i64, Device::cpu(), {3});
  EXPECT_HYBRID_ERROR(embed_gather_q(a, ctx),
                      "[embed_gather_q] ids: expected [T=4] i32|i64, got [3] i64");
  EXPECT_TRUE(out_untouched());
}
