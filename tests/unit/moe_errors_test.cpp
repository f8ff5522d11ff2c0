// Bad input to moe_route / moe_experts: each names the op, the argument and what was wrong.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "expect_error.h"
#include "hybrid/ops/moe.h"

using namespace hybrid;

namespace {

Tensor cpu(void* p, DType t, std::initializer_list<int64_t> shape) {
  return Tensor(p, t, Device::cpu(), shape);
}

// T=4 tokens, E=8 experts, top-2.
struct MoeRouteErrors : ::testing::Test {
  std::vector<float> logits = std::vector<float>(4 * 8), weights = std::vector<float>(4 * 2),
                     bias = std::vector<float>(8, 0.0f);
  std::vector<int32_t> ids = std::vector<int32_t>(4 * 2);
  Context ctx;
  MoeRouteErrors() {
    for (size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>(i % 8);
  }
  MoeRoute args() {
    MoeRoute a;
    a.logits = cpu(logits.data(), DType::f32, {4, 8});
    a.ids = cpu(ids.data(), DType::i32, {4, 2});
    a.weights = cpu(weights.data(), DType::f32, {4, 2});
    a.top_k = 2;
    a.renormalize = true;
    return a;
  }
};

// T=3 tokens, E=4 experts, k=2, Dm=6, I=5.
struct MoeExpertsErrors : ::testing::Test {
  std::vector<float> x = std::vector<float>(3 * 6, 0.5f),
                     gate_up = std::vector<float>(4 * 10 * 6, 0.1f),
                     down = std::vector<float>(4 * 6 * 5, 0.1f),
                     weights = std::vector<float>(3 * 2, 0.5f), out = std::vector<float>(3 * 6);
  std::vector<int32_t> ids = {0, 1, 2, 3, 3, 0};
  Context ctx;
  MoeExperts args() {
    MoeExperts a;
    a.x = cpu(x.data(), DType::f32, {3, 6});
    a.gate_up = cpu(gate_up.data(), DType::f32, {4, 10, 6});
    a.down = cpu(down.data(), DType::f32, {4, 6, 5});
    a.ids = cpu(ids.data(), DType::i32, {3, 2});
    a.weights = cpu(weights.data(), DType::f32, {3, 2});
    a.out = cpu(out.data(), DType::f32, {3, 6});
    return a;
  }
};

// The same routing with MLX 4-bit experts: Dm=64, I=32, group 32 (gate_up: 8 words and 2 groups a
// row, down: 4 words and 1 group a row).
struct MoeExpertsQErrors : ::testing::Test {
  std::vector<float> x = std::vector<float>(3 * 64, 0.5f),
                     weights = std::vector<float>(3 * 2, 0.5f), out = std::vector<float>(3 * 64);
  std::vector<uint32_t> gu_w = std::vector<uint32_t>(4 * 64 * 8, 0x12345678u),
                        dn_w = std::vector<uint32_t>(4 * 64 * 4, 0x9abcdef0u);
  std::vector<float> gu_s = std::vector<float>(4 * 64 * 2, 0.01f),
                     gu_b = std::vector<float>(4 * 64 * 2, -0.05f),
                     dn_s = std::vector<float>(4 * 64 * 1, 0.02f),
                     dn_b = std::vector<float>(4 * 64 * 1, -0.1f);
  std::vector<int32_t> ids = {0, 1, 2, 3, 3, 0};
  Context ctx;
  MoeExpertsQ args() {
    MoeExpertsQ a;
    a.x = cpu(x.data(), DType::f32, {3, 64});
    a.gate_up = {cpu(gu_w.data(), DType::u32, {4, 64, 8}), cpu(gu_s.data(), DType::f32, {4, 64, 2}),
                 cpu(gu_b.data(), DType::f32, {4, 64, 2}), 4, 32};
    a.down = {cpu(dn_w.data(), DType::u32, {4, 64, 4}), cpu(dn_s.data(), DType::f32, {4, 64, 1}),
              cpu(dn_b.data(), DType::f32, {4, 64, 1}), 4, 32};
    a.ids = cpu(ids.data(), DType::i32, {3, 2});
    a.weights = cpu(weights.data(), DType::f32, {3, 2});
    a.out = cpu(out.data(), DType::f32, {3, 64});
    return a;
  }
};

}  // namespace

// ---- moe_experts_q ---------------------------------------------------------------------------

TEST_F(MoeExpertsQErrors, ValidCallRuns) {
  moe_experts_q(args(), ctx);
  for (float v : out) ASSERT_TRUE(std::isfinite(v));
}

TEST_F(MoeExpertsQErrors, IdOutOfRangeNamesThePair) {
  ids[3] = 4;
  EXPECT_HYBRID_ERROR(moe_experts_q(args(), ctx),
                      "[moe_experts_q] ids[1, 1] = 4 is out of range [0, E=4)");
}

TEST_F(MoeExpertsQErrors, UnsupportedBitsAndGroup) {
  MoeExpertsQ a = args();
  a.gate_up.bits = 3;
  EXPECT_HYBRID_ERROR(moe_experts_q(a, ctx),
                      "[moe_experts_q] gate_up.bits = 3 is not supported (supported: 4, 8)");
  a = args();
  a.down.group_size = 48;
  EXPECT_HYBRID_ERROR(moe_experts_q(a, ctx), "down.group_size = 48 is not supported");
}

TEST_F(MoeExpertsQErrors, PackedWordsMustMatchTheInputs) {
  MoeExpertsQ a = args();
  a.gate_up.weight = cpu(gu_w.data(), DType::u32, {4, 64, 4});  // 32 inputs, not Dm = 64
  EXPECT_HYBRID_ERROR(moe_experts_q(a, ctx), "[moe_experts_q] gate_up.weight: expected");
  a = args();
  a.down.biases = cpu(dn_b.data(), DType::f32, {4, 32, 1});  // rows must be Dm = 64
  EXPECT_HYBRID_ERROR(moe_experts_q(a, ctx), "[moe_experts_q] down.biases: expected");
}

TEST_F(MoeExpertsQErrors, ScalesAndBiasesShareADtype) {
  MoeExpertsQ a = args();
  std::vector<uint16_t> half(4 * 64 * 1, 0);
  a.down.biases = cpu(half.data(), DType::bf16, {4, 64, 1});
  EXPECT_HYBRID_ERROR(moe_experts_q(a, ctx), "[moe_experts_q] down.biases: expected");
}

// ---- moe_route -------------------------------------------------------------------------------

TEST_F(MoeRouteErrors, ValidCallRuns) {
  moe_route(args(), ctx);
  // logits 0..7 in every row: experts 7 and 6, softmax weights e^1 : e^0 renormalised.
  EXPECT_EQ(ids[0], 7);
  EXPECT_EQ(ids[1], 6);
  EXPECT_NEAR(weights[0], 1.0 / (1.0 + std::exp(-1.0)), 1e-6);
  EXPECT_NEAR(weights[0] + weights[1], 1.0f, 1e-6f);
}

TEST_F(MoeRouteErrors, TiesRankTheLowerIdFirst) {
  for (float& l : logits) l = 1.0f;
  moe_route(args(), ctx);
  EXPECT_EQ(ids[0], 0);
  EXPECT_EQ(ids[1], 1);
  EXPECT_NEAR(weights[0], 0.5f, 1e-6f);
}

TEST_F(MoeRouteErrors, WrongRank) {
  MoeRoute a = args();
  a.logits = cpu(logits.data(), DType::f32, {32});
  EXPECT_HYBRID_ERROR(moe_route(a, ctx),
                      "[moe_route] logits: expected [T, E] f32|bf16|f16, got [32] f32");
}

TEST_F(MoeRouteErrors, WrongDtype) {
  MoeRoute a = args();
  a.logits = cpu(logits.data(), DType::i32, {4, 8});
  EXPECT_HYBRID_ERROR(moe_route(a, ctx),
                      "[moe_route] logits: expected [T, E] f32|bf16|f16, got [4, 8] i32");
  a = args();
  a.ids = cpu(ids.data(), DType::f32, {4, 2});
  EXPECT_HYBRID_ERROR(moe_route(a, ctx),
                      "[moe_route] ids: expected [T=4, top_k=2] i32, got [4, 2] f32");
}

TEST_F(MoeRouteErrors, WrongShape) {
  MoeRoute a = args();
  a.weights = cpu(weights.data(), DType::f32, {2, 4});
  EXPECT_HYBRID_ERROR(moe_route(a, ctx),
                      "[moe_route] weights: expected [T=4, top_k=2] f32|bf16|f16, got [2, 4] f32");
  a = args();
  a.bias = cpu(bias.data(), DType::f32, {7});
  EXPECT_HYBRID_ERROR(moe_route(a, ctx), "[moe_route] bias: expected [E=8] f32|bf16, got [7] f32");
}

TEST_F(MoeRouteErrors, TopKOutOfRange) {
  MoeRoute a = args();
  a.top_k = 9;
  EXPECT_HYBRID_ERROR(moe_route(a, ctx), "[moe_route] top_k must be in [1, E=8], got 9");
  a.top_k = 0;
  EXPECT_HYBRID_ERROR(moe_route(a, ctx), "[moe_route] top_k must be in [1, E=8], got 0");
  a.top_k = -1;
  EXPECT_HYBRID_ERROR(moe_route(a, ctx), "[moe_route] top_k must be in [1, E=8], got -1");
}

TEST_F(MoeRouteErrors, BadGroups) {
  MoeRoute a = args();
  a.n_group = 3;
  EXPECT_HYBRID_ERROR(moe_route(a, ctx), "[moe_route] n_group 3 must be positive and divide E=8");
  a.n_group = 8;
  EXPECT_HYBRID_ERROR(moe_route(a, ctx),
                      "[moe_route] groups must hold at least 2 experts (a group scores its top 2), "
                      "got E=8 / n_group=8");
  a.n_group = 2;
  a.topk_group = 3;
  EXPECT_HYBRID_ERROR(moe_route(a, ctx), "[moe_route] topk_group must be in [1, n_group=2], got 3");
  a.n_group = 4;
  a.topk_group = 1;
  a.top_k = 3;
  a.ids = cpu(ids.data(), DType::i32, {2, 3});
  a.weights = cpu(weights.data(), DType::f32, {2, 3});
  a.logits = cpu(logits.data(), DType::f32, {2, 8});
  EXPECT_HYBRID_ERROR(moe_route(a, ctx),
                      "[moe_route] top_k=3 exceeds the 2 experts of topk_group=1 groups");
}

TEST_F(MoeRouteErrors, BadScaling) {
  MoeRoute a = args();
  a.scaling = 0.0f;
  EXPECT_HYBRID_ERROR(moe_route(a, ctx), "[moe_route] scaling must be positive, got 0");
}

TEST_F(MoeRouteErrors, WrongStride) {
  MoeRoute a = args();
  a.logits = Tensor(logits.data(), DType::f32, Device::cpu(), {4, 4}, {8, 2});
  a.top_k = 2;
  EXPECT_HYBRID_ERROR(moe_route(a, ctx),
                      "[moe_route] logits: the last dimension must be contiguous");
}

TEST_F(MoeRouteErrors, SharedExpert) {
  // Folded in: one more column, id E = 8, weight sigmoid(gate) (1 without a gate).
  std::vector<int32_t> ids3(4 * 3);
  std::vector<float> weights3(4 * 3), gate = {0.0f, 1.0f, -1.0f, 2.0f};
  MoeRoute a = args();
  a.shared_expert = true;
  EXPECT_HYBRID_ERROR(moe_route(a, ctx),
                      "[moe_route] ids: expected [T=4, top_k + 1 (shared "
                      "expert)=3] i32, got [4, 2] i32");
  a.ids = cpu(ids3.data(), DType::i32, {4, 3});
  a.weights = cpu(weights3.data(), DType::f32, {4, 3});
  a.shared_gate = cpu(gate.data(), DType::f32, {4, 1});
  moe_route(a, ctx);
  for (int t = 0; t < 4; ++t) {
    EXPECT_EQ(ids3[t * 3 + 0], 7);  // logits 0..7: experts 7 and 6 win
    EXPECT_EQ(ids3[t * 3 + 2], 8);
    EXPECT_NEAR(weights3[t * 3 + 2], 1.0 / (1.0 + std::exp(-gate[t])), 1e-6);
  }
  a.shared_gate = cpu(gate.data(), DType::f32, {2, 2});
  EXPECT_HYBRID_ERROR(moe_route(a, ctx),
                      "[moe_route] shared_gate: expected [T=4, 1=1] f32|bf16|f16, got [2, 2] f32");
  a = args();
  a.shared_gate = cpu(gate.data(), DType::f32, {4, 1});
  EXPECT_HYBRID_ERROR(moe_route(a, ctx),
                      "[moe_route] shared_gate is given but shared_expert is false");
}

// ---- moe_experts -----------------------------------------------------------------------------

TEST_F(MoeExpertsErrors, ValidCallRuns) {
  moe_experts(args(), ctx);
  // Every expert is the same: g = u = 0.1·6·0.5 = 0.3, h = silu(0.3)·0.3, y = 0.1·5·h; Σ w = 1.
  const double g = 0.3, h = g / (1.0 + std::exp(-g)) * g;
  EXPECT_NEAR(out[0], 0.5 * h, 1e-6);
}

TEST_F(MoeExpertsErrors, WrongRank) {
  MoeExperts a = args();
  a.down = cpu(down.data(), DType::f32, {4, 30});
  EXPECT_HYBRID_ERROR(moe_experts(a, ctx),
                      "[moe_experts] down: expected [E, Dm, I] f32|bf16|f16, got [4, 30] f32");
  a = args();
  a.ids = cpu(ids.data(), DType::i32, {6});
  EXPECT_HYBRID_ERROR(moe_experts(a, ctx),
                      "[moe_experts] ids: expected [T, k] i32|i64, got [6] i32");
}

TEST_F(MoeExpertsErrors, WrongDtype) {
  MoeExperts a = args();
  a.ids = cpu(ids.data(), DType::f32, {3, 2});
  EXPECT_HYBRID_ERROR(moe_experts(a, ctx),
                      "[moe_experts] ids: expected [T, k] i32|i64, got [3, 2] f32");
  a = args();
  a.gate_up = cpu(gate_up.data(), DType::i32, {4, 10, 6});
  EXPECT_HYBRID_ERROR(
      moe_experts(a, ctx),
      "[moe_experts] gate_up: expected [E=4, 2*I=10, Dm=6] f32|bf16|f16, got [4, 10, 6] i32");
}

TEST_F(MoeExpertsErrors, WrongShape) {
  MoeExperts a = args();
  a.down = cpu(down.data(), DType::f32, {4, 5, 6});
  EXPECT_HYBRID_ERROR(
      moe_experts(a, ctx),
      "[moe_experts] down: expected [E=4, Dm=6, I=6] f32|bf16|f16, got [4, 5, 6] f32");
  a = args();
  a.weights = cpu(weights.data(), DType::f32, {2, 3});
  EXPECT_HYBRID_ERROR(moe_experts(a, ctx),
                      "[moe_experts] weights: expected [T=3, k=2] f32|bf16|f16, got [2, 3] f32");
  a = args();
  a.out = cpu(out.data(), DType::f32, {3, 5});
  EXPECT_HYBRID_ERROR(moe_experts(a, ctx),
                      "[moe_experts] out: expected [T=3, Dm=6] f32|bf16|f16, got [3, 5] f32");
}

TEST_F(MoeExpertsErrors, GateUpRowsNotTwiceI) {
  MoeExperts a = args();
  a.gate_up = cpu(gate_up.data(), DType::f32, {4, 5, 6});
  EXPECT_HYBRID_ERROR(
      moe_experts(a, ctx),
      "[moe_experts] gate_up: expected [E=4, 2*I=10, Dm=6] f32|bf16|f16, got [4, 5, 6] f32");
  // relu2 experts hold only up: I rows.
  a = args();
  a.activation = MoeActivation::relu2;
  EXPECT_HYBRID_ERROR(
      moe_experts(a, ctx),
      "[moe_experts] gate_up: expected [E=4, I=5, Dm=6] f32|bf16|f16, got [4, 10, 6] f32");
}

TEST_F(MoeExpertsErrors, KOutOfRange) {
  MoeExperts a = args();
  std::vector<int32_t> many(3 * 5, 0);
  std::vector<float> w(3 * 5, 0.2f);
  a.ids = cpu(many.data(), DType::i32, {3, 5});
  a.weights = cpu(w.data(), DType::f32, {3, 5});
  EXPECT_HYBRID_ERROR(moe_experts(a, ctx),
                      "[moe_experts] ids: k (experts per token) must be in [1, E=4], got 5");
  a.ids = cpu(many.data(), DType::i32, {3, 0});
  a.weights = cpu(w.data(), DType::f32, {3, 0});
  EXPECT_HYBRID_ERROR(moe_experts(a, ctx),
                      "[moe_experts] ids: k (experts per token) must be in [1, E=4], got 0");
}

TEST_F(MoeExpertsErrors, ExpertIdOutOfRange) {
  MoeExperts a = args();
  ids[3] = 4;
  EXPECT_HYBRID_ERROR(moe_experts(a, ctx), "[moe_experts] ids[1, 1] = 4 is out of range [0, E=4)");
  ids[3] = 3;
  ids[4] = -1;
  EXPECT_HYBRID_ERROR(moe_experts(a, ctx), "[moe_experts] ids[2, 0] = -1 is out of range [0, E=4)");
  std::vector<int64_t> ids64 = {0, 1, 2, 3, 3, 1LL << 40};
  a.ids = cpu(ids64.data(), DType::i64, {3, 2});
  EXPECT_HYBRID_ERROR(moe_experts(a, ctx),
                      "[moe_experts] ids[2, 1] = 1099511627776 is out of range [0, E=4)");
}

TEST_F(MoeExpertsErrors, WrongStride) {
  MoeExperts a = args();
  std::vector<float> wide(3 * 12, 0.5f);
  a.x = Tensor(wide.data(), DType::f32, Device::cpu(), {3, 6}, {12, 2});
  EXPECT_HYBRID_ERROR(moe_experts(a, ctx),
                      "[moe_experts] x: the last dimension must be contiguous");
  a = args();
  a.down = Tensor(down.data(), DType::f32, Device::cpu(), {4, 6, 5}, {30, 1, 6});
  EXPECT_HYBRID_ERROR(moe_experts(a, ctx),
                      "[moe_experts] down: the last dimension must be contiguous");
}
