// Bad input to residual_add / silu_mul / sigmoid_mul / relu2: each names the op, the argument and
// what was wrong.
#include <gtest/gtest.h>

#include <vector>

#include "expect_error.h"
#include "hybrid/ops/elementwise.h"

using namespace hybrid;

namespace {
Tensor t2(std::vector<float>& v, int64_t rows, int64_t cols, DType dt = DType::f32) {
  return Tensor(v.data(), dt, Device::cpu(), {rows, cols});
}

struct ElementwiseFixture : ::testing::Test {
  std::vector<float> a = std::vector<float>(4 * 8, 1.0f), b = std::vector<float>(4 * 8, 2.0f),
                     out = std::vector<float>(4 * 16, 0.0f),
                     wide = std::vector<float>(4 * 16, 0.5f);
  Context ctx;
  ResidualAdd add_args() {
    ResidualAdd r;
    r.a = t2(a, 4, 8);
    r.b = t2(b, 4, 8);
    r.out = t2(out, 4, 8);
    return r;
  }
};
}  // namespace

TEST_F(ElementwiseFixture, ValidCallsRun) {
  residual_add(add_args(), ctx);
  EXPECT_FLOAT_EQ(out[0], 3.0f);
  ResidualAdd in_place = add_args();
  in_place.out = in_place.a;  // the same view: allowed
  residual_add(in_place, ctx);
  EXPECT_FLOAT_EQ(a[0], 3.0f);
  Relu2 r;
  r.x = t2(b, 4, 8);
  r.out = t2(out, 4, 8);
  relu2(r, ctx);
  EXPECT_FLOAT_EQ(out[5], 4.0f);
}

TEST_F(ElementwiseFixture, ResidualAddWrongRank) {
  ResidualAdd r = add_args();
  r.a = Tensor(a.data(), DType::f32, Device::cpu(), {32});
  EXPECT_HYBRID_ERROR(residual_add(r, ctx),
                      "[residual_add] a: expected [T, D] f32|bf16|f16, got [32] f32");
}

TEST_F(ElementwiseFixture, ResidualAddWrongShape) {
  ResidualAdd r = add_args();
  r.b = t2(b, 4, 7);
  EXPECT_HYBRID_ERROR(residual_add(r, ctx),
                      "[residual_add] b: expected [T=4, D=8] f32|bf16|f16, got [4, 7] f32");
}

TEST_F(ElementwiseFixture, ResidualAddWrongDtype) {
  ResidualAdd r = add_args();
  r.out = t2(out, 4, 8, DType::i32);
  EXPECT_HYBRID_ERROR(residual_add(r, ctx),
                      "[residual_add] out: expected [T=4, D=8] f32|bf16|f16, got [4, 8] i32");
}

TEST_F(ElementwiseFixture, ResidualAddWrongStride) {
  ResidualAdd r = add_args();
  r.a = Tensor(wide.data(), DType::f32, Device::cpu(), {4, 8}, {16, 2});
  EXPECT_HYBRID_ERROR(residual_add(r, ctx),
                      "[residual_add] a: the last dimension must be contiguous");
}

TEST_F(ElementwiseFixture, ResidualAddPartialOverlap) {
  ResidualAdd r = add_args();
  r.out = Tensor(a.data() + 1, DType::f32, Device::cpu(), {3, 8});
  r.a = t2(a, 3, 8);
  r.b = t2(b, 3, 8);
  EXPECT_HYBRID_ERROR(residual_add(r, ctx),
                      "[residual_add] out overlaps a without being the same view");
}

TEST_F(ElementwiseFixture, SiluMulMismatchedI) {
  SiluMul s;
  s.gate = t2(a, 4, 8);
  s.up = t2(b, 4, 6);
  s.out = t2(out, 4, 8);
  EXPECT_HYBRID_ERROR(silu_mul(s, ctx),
                      "[silu_mul] up: expected [T=4, I=8] f32|bf16|f16, got [4, 6] f32");
  s.up = t2(b, 4, 8);
  s.gate = t2(a, 4, 6);
  EXPECT_HYBRID_ERROR(silu_mul(s, ctx),
                      "[silu_mul] gate: expected [T=4, I=8] f32|bf16|f16, got [4, 6] f32");
}

TEST_F(ElementwiseFixture, SiluMulPackedWidthMustBeTwiceI) {
  SiluMul s;
  s.gate_up = t2(wide, 4, 12);
  s.out = t2(out, 4, 8);
  EXPECT_HYBRID_ERROR(silu_mul(s, ctx),
                      "[silu_mul] gate_up: expected [T=4, 2*I=16] f32|bf16|f16, got [4, 12] f32");
}

TEST_F(ElementwiseFixture, SiluMulForms) {
  SiluMul s;
  s.out = t2(out, 4, 8);
  EXPECT_HYBRID_ERROR(silu_mul(s, ctx),
                      "expected gate_up [T, 2*I], or both gate and up [T, I]; got neither");
  s.gate = t2(a, 4, 8);
  EXPECT_HYBRID_ERROR(silu_mul(s, ctx), "got gate only");
  s.up = t2(b, 4, 8);
  s.gate_up = t2(wide, 4, 16);
  EXPECT_HYBRID_ERROR(silu_mul(s, ctx),
                      "[silu_mul] give either gate_up or gate and up, not both forms");
}

TEST_F(ElementwiseFixture, SiluMulOutOverlapsPacked) {
  SiluMul s;
  s.gate_up = t2(wide, 4, 16);
  s.out = t2(wide, 4, 8);
  EXPECT_HYBRID_ERROR(silu_mul(s, ctx),
                      "[silu_mul] out overlaps gate_up without being the same view");
}

TEST_F(ElementwiseFixture, SigmoidMulShapes) {
  SigmoidMul s;
  s.x = Tensor(a.data(), DType::f32, Device::cpu(), {2, 2, 8});
  s.gate = Tensor(wide.data(), DType::f32, Device::cpu(), {2, 2, 8}, {32, 16, 1});  // packed q
  s.out = Tensor(out.data(), DType::f32, Device::cpu(), {2, 2, 8});
  sigmoid_mul(s, ctx);  // valid
  s.gate = t2(wide, 2, 16);
  EXPECT_HYBRID_ERROR(sigmoid_mul(s, ctx),
                      "[sigmoid_mul] gate: expected [T=2, H=2, D=8] f32|bf16|f16, got [2, 16] f32");
  s.x = Tensor();
  EXPECT_HYBRID_ERROR(sigmoid_mul(s, ctx), "[sigmoid_mul] x: expected [T, C] or [T, H, D]");
  s.x = Tensor(a.data(), DType::f32, Device::cpu(), {32});
  EXPECT_HYBRID_ERROR(sigmoid_mul(s, ctx),
                      "[sigmoid_mul] x: expected [T, C] f32|bf16|f16, got [32] f32");
}

TEST_F(ElementwiseFixture, SigmoidMulWrongStride) {
  SigmoidMul s;
  s.x = t2(a, 4, 8);
  s.gate = Tensor(wide.data(), DType::f32, Device::cpu(), {4, 8}, {16, 2});
  s.out = t2(out, 4, 8);
  EXPECT_HYBRID_ERROR(sigmoid_mul(s, ctx),
                      "[sigmoid_mul] gate: the last dimension must be contiguous");
}

TEST_F(ElementwiseFixture, Relu2WrongDtypeAndShape) {
  Relu2 r;
  r.x = t2(a, 4, 8, DType::u8);
  r.out = t2(out, 4, 8);
  EXPECT_HYBRID_ERROR(relu2(r, ctx), "[relu2] x: expected [T, D] f32|bf16|f16, got [4, 8] u8");
  r.x = t2(a, 4, 8);
  r.out = t2(out, 3, 8);
  EXPECT_HYBRID_ERROR(relu2(r, ctx),
                      "[relu2] out: expected [T=4, D=8] f32|bf16|f16, got [3, 8] f32");
}
