// Bad input to rope: each names the op, the argument and what was wrong.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "expect_error.h"
#include "hybrid/ops/rope.h"

using namespace hybrid;

namespace {
struct RopeFixture : ::testing::Test {
  // x [T=2, H=3, D=8]
  std::vector<float> x = std::vector<float>(2 * 3 * 8, 1.0f), out = std::vector<float>(2 * 3 * 8);
  std::vector<int32_t> pos = {0, 1};
  Context ctx;
  Rope args() {
    Rope a;
    a.x = Tensor(x.data(), DType::f32, Device::cpu(), {2, 3, 8});
    a.out = Tensor(out.data(), DType::f32, Device::cpu(), {2, 3, 8});
    a.positions = Tensor(pos.data(), DType::i32, Device::cpu(), {2});
    a.rotary_dim = 4;
    a.theta = 10000.0f;
    return a;
  }
};
}  // namespace

TEST_F(RopeFixture, ValidCallRotatesTheFirstRotaryDims) {
  rope(args(), ctx);
  // Token 0 (position 0): identity. Token 1 (position 1), pair i = 0 (inv_freq 1): angle 1 rad.
  EXPECT_FLOAT_EQ(out[0], 1.0f);
  const int64_t t1 = 3 * 8;
  EXPECT_NEAR(out[t1 + 0], std::cos(1.0) - std::sin(1.0), 1e-6);
  EXPECT_NEAR(out[t1 + 2], std::cos(1.0) + std::sin(1.0), 1e-6);
  EXPECT_FLOAT_EQ(out[t1 + 5], 1.0f);  // d >= rotary_dim passes through
}

TEST_F(RopeFixture, InPlaceMatchesOutOfPlace) {
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.01f * static_cast<float>(i);
  rope(args(), ctx);
  Rope a = args();
  a.out = a.x;
  rope(a, ctx);
  EXPECT_EQ(x, out);
}

TEST_F(RopeFixture, WrongRank) {
  Rope a = args();
  a.x = Tensor(x.data(), DType::f32, Device::cpu(), {6, 8});
  EXPECT_HYBRID_ERROR(rope(a, ctx), "[rope] x: expected [T, H, D] f32|bf16|f16, got [6, 8] f32");
}

TEST_F(RopeFixture, WrongShape) {
  Rope a = args();
  a.out = Tensor(out.data(), DType::f32, Device::cpu(), {2, 2, 8});
  EXPECT_HYBRID_ERROR(rope(a, ctx),
                      "[rope] out: expected [T=2, H=3, D=8] f32|bf16|f16, got [2, 2, 8] f32");
  a = args();
  a.positions = Tensor(pos.data(), DType::i32, Device::cpu(), {1});
  EXPECT_HYBRID_ERROR(rope(a, ctx), "[rope] positions: expected [T=2] i32, got [1] i32");
}

TEST_F(RopeFixture, WrongDtype) {
  Rope a = args();
  a.positions = Tensor(pos.data(), DType::f32, Device::cpu(), {2});
  EXPECT_HYBRID_ERROR(rope(a, ctx), "[rope] positions: expected [T=2] i32, got [2] f32");
}

TEST_F(RopeFixture, WrongStride) {
  Rope a = args();
  a.x = Tensor(x.data(), DType::f32, Device::cpu(), {2, 3, 4}, {24, 8, 2});
  a.out = Tensor(out.data(), DType::f32, Device::cpu(), {2, 3, 4});
  EXPECT_HYBRID_ERROR(rope(a, ctx), "[rope] x: the last dimension must be contiguous");
}

TEST_F(RopeFixture, StridedHeadsAreAccepted) {
  // x read out of a packed [T, H, 2·D] projection (Qwen3-Next's q | gate per head).
  std::vector<float> packed(2 * 3 * 16, 1.0f);
  Rope a = args();
  a.x = Tensor(packed.data(), DType::f32, Device::cpu(), {2, 3, 8}, {48, 16, 1});
  rope(a, ctx);
  EXPECT_FLOAT_EQ(out[0], 1.0f);
}

TEST_F(RopeFixture, RotaryDimOdd) {
  Rope a = args();
  a.rotary_dim = 3;
  EXPECT_HYBRID_ERROR(rope(a, ctx), "[rope] rotary_dim 3 must be even and in [2, D=8]");
}

TEST_F(RopeFixture, RotaryDimAboveHeadDim) {
  Rope a = args();
  a.rotary_dim = 10;
  EXPECT_HYBRID_ERROR(rope(a, ctx), "[rope] rotary_dim 10 must be even and in [2, D=8]");
  a.rotary_dim = 0;
  EXPECT_HYBRID_ERROR(rope(a, ctx), "[rope] rotary_dim 0 must be even and in [2, D=8]");
}

TEST_F(RopeFixture, BadTheta) {
  Rope a = args();
  a.theta = 0.0f;
  EXPECT_HYBRID_ERROR(rope(a, ctx), "[rope] theta must be positive and finite, got 0");
}

TEST_F(RopeFixture, InPlaceWithOtherStrides) {
  Rope a = args();
  a.out = Tensor(x.data(), DType::f32, Device::cpu(), {2, 3, 8}, {48, 8, 1});
  EXPECT_HYBRID_ERROR(rope(a, ctx), "[rope] in place, out must have the dtype and strides of x");
}
