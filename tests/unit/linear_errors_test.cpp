// Bad input to linear: each names the op, the argument and what was wrong.
#include <gtest/gtest.h>

#include <vector>

#include "expect_error.h"
#include "hybrid/ops/linear.h"

using namespace hybrid;

namespace {
struct LinearFixture : ::testing::Test {
  // x [T=4, in=8], W [out=3, in=8], bias [3], y [4, 3]
  std::vector<float> x = std::vector<float>(4 * 8, 1.0f), w = std::vector<float>(3 * 8, 0.5f),
                     b = std::vector<float>(3, 1.0f), y = std::vector<float>(4 * 3, -7.0f);
  Context ctx;
  Tensor t(std::vector<float>& v, std::vector<int64_t> shape, DType d = DType::f32) {
    return Tensor(v.data(), d, Device::cpu(), shape);
  }
  Linear args() {
    Linear a;
    a.x = t(x, {4, 8});
    a.weight = t(w, {3, 8});
    a.bias = t(b, {3});
    a.y = t(y, {4, 3});
    return a;
  }
};
}  // namespace

TEST_F(LinearFixture, ValidCallRuns) {
  linear(args(), ctx);
  for (float v : y) EXPECT_FLOAT_EQ(v, 8 * 0.5f + 1.0f);
}

TEST_F(LinearFixture, WrongRank) {
  Linear a = args();
  a.x = t(x, {32});
  EXPECT_HYBRID_ERROR(linear(a, ctx), "[linear] x: expected [T, in] f32|bf16|f16, got [32] f32");
  a = args();
  a.weight = t(w, {24});
  EXPECT_HYBRID_ERROR(linear(a, ctx),
                      "[linear] weight: expected [out, in] f32|bf16|f16, got [24] f32");
}

TEST_F(LinearFixture, WrongShape) {
  Linear a = args();
  a.weight = t(w, {3, 7});
  EXPECT_HYBRID_ERROR(linear(a, ctx),
                      "[linear] weight: expected [out=3, in=8] f32|bf16|f16, got [3, 7] f32");
  a = args();
  a.y = t(y, {4, 2});
  EXPECT_HYBRID_ERROR(linear(a, ctx),
                      "[linear] y: expected [T=4, out=3] f32|bf16|f16, got [4, 2] f32");
  a = args();
  a.bias = t(b, {2});
  EXPECT_HYBRID_ERROR(linear(a, ctx), "[linear] bias: expected [out=3] f32|bf16|f16, got [2] f32");
}

TEST_F(LinearFixture, WrongDtype) {
  Linear a = args();
  a.x = t(x, {4, 8}, DType::i32);
  EXPECT_HYBRID_ERROR(linear(a, ctx), "[linear] x: expected [T, in] f32|bf16|f16, got [4, 8] i32");
  a = args();
  a.y = t(y, {4, 3}, DType::u32);
  EXPECT_HYBRID_ERROR(linear(a, ctx),
                      "[linear] y: expected [T=4, out=3] f32|bf16|f16, got [4, 3] u32");
}

TEST_F(LinearFixture, WrongStride) {
  Linear a = args();
  a.x = Tensor(x.data(), DType::f32, Device::cpu(), {4, 4}, {8, 2});
  a.weight = t(w, {3, 4});
  EXPECT_HYBRID_ERROR(linear(a, ctx), "[linear] x: the last dimension must be contiguous");
  a = args();
  a.y = Tensor(y.data(), DType::f32, Device::cpu(), {4, 3}, {0, 1});
  EXPECT_HYBRID_ERROR(linear(a, ctx), "[linear] y: strides must be positive");
}

TEST_F(LinearFixture, StridedRowsAccepted) {
  // x rows read out of a wider buffer (row stride 8, 4 columns used).
  Linear a = args();
  a.x = Tensor(x.data(), DType::f32, Device::cpu(), {4, 4}, {8, 1});
  a.weight = t(w, {3, 4});
  linear(a, ctx);
  EXPECT_FLOAT_EQ(y[0], 4 * 0.5f + 1.0f);
}
