// Bad input to rms_norm / rms_norm_gated: each names the op, the argument and what was wrong.
#include <gtest/gtest.h>

#include <vector>

#include "expect_error.h"
#include "hybrid/ops/norm.h"

using namespace hybrid;

namespace {
struct NormFixture : ::testing::Test {
  std::vector<float> x = std::vector<float>(4 * 8, 1.0f), w = std::vector<float>(8, 1.0f),
                     out = std::vector<float>(4 * 8);
  Context ctx;
  RmsNorm args() {
    RmsNorm a;
    a.x = Tensor(x.data(), DType::f32, Device::cpu(), {4, 8});
    a.weight = Tensor(w.data(), DType::f32, Device::cpu(), {8});
    a.out = Tensor(out.data(), DType::f32, Device::cpu(), {4, 8});
    return a;
  }
};
}  // namespace

TEST_F(NormFixture, ValidCallRuns) {
  rms_norm(args(), ctx);
  EXPECT_NEAR(out[0], 1.0f, 1e-5f);
}

TEST_F(NormFixture, WrongRank) {
  RmsNorm a = args();
  a.x = Tensor(x.data(), DType::f32, Device::cpu(), {32});
  EXPECT_HYBRID_ERROR(rms_norm(a, ctx), "[rms_norm] x: expected [T, D] f32|bf16|f16, got [32] f32");
}

TEST_F(NormFixture, WrongShape) {
  RmsNorm a = args();
  a.weight = Tensor(w.data(), DType::f32, Device::cpu(), {7});
  EXPECT_HYBRID_ERROR(rms_norm(a, ctx), "[rms_norm] weight: expected [D=8] f32|bf16, got [7] f32");
}

TEST_F(NormFixture, WrongDtype) {
  RmsNorm a = args();
  a.out = Tensor(out.data(), DType::i32, Device::cpu(), {4, 8});
  EXPECT_HYBRID_ERROR(rms_norm(a, ctx),
                      "[rms_norm] out: expected [T=4, D=8] f32|bf16|f16, got [4, 8] i32");
}

TEST_F(NormFixture, WrongStride) {
  RmsNorm a = args();
  a.x = Tensor(x.data(), DType::f32, Device::cpu(), {4, 4}, {8, 2});
  a.out = Tensor(out.data(), DType::f32, Device::cpu(), {4, 4});
  a.weight = Tensor(w.data(), DType::f32, Device::cpu(), {4});
  EXPECT_HYBRID_ERROR(rms_norm(a, ctx), "[rms_norm] x: the last dimension must be contiguous");
}

TEST_F(NormFixture, ResidualOutWithoutResidual) {
  RmsNorm a = args();
  a.residual_out = a.out;
  EXPECT_HYBRID_ERROR(rms_norm(a, ctx), "[rms_norm] residual_out is given but residual is not");
}

TEST_F(NormFixture, BadEps) {
  RmsNorm a = args();
  a.eps = 0.0f;
  EXPECT_HYBRID_ERROR(rms_norm(a, ctx), "[rms_norm] eps must be positive");
}

TEST_F(NormFixture, GatedGroupMustDivide) {
  RmsNormGated g;
  g.x = Tensor(x.data(), DType::f32, Device::cpu(), {4, 8});
  g.z = g.x;
  g.out = Tensor(out.data(), DType::f32, Device::cpu(), {4, 8});
  g.weight = Tensor(w.data(), DType::f32, Device::cpu(), {3});
  g.group_size = 3;
  EXPECT_HYBRID_ERROR(rms_norm_gated(g, ctx),
                      "[rms_norm_gated] group_size 3 must be positive and divide C=8");
  g.group_size = 4;
  EXPECT_HYBRID_ERROR(rms_norm_gated(g, ctx),
                      "weight: expected [C=8] or [group_size=4], got [3] f32");
}
