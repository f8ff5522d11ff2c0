// Bad input to conv1d_causal / conv1d_update: each names the op, the argument and what was wrong.
#include <gtest/gtest.h>

#include <vector>

#include "expect_error.h"
#include "hybrid/ops/conv.h"

using namespace hybrid;

namespace {
constexpr int64_t T = 6, C = 4, W = 4, kPool = 3;

struct ConvFixture : ::testing::Test {
  std::vector<float> x = std::vector<float>(T * 2 * C, 1.0f), w = std::vector<float>(C * W, 0.25f),
                     bias = std::vector<float>(C, 0.0f), out = std::vector<float>(T * C),
                     state = std::vector<float>(kPool * C * (W - 1), 1.0f);
  std::vector<int32_t> cu = {0, 2, 6}, slots = {0, 2}, init = {1, 0};
  Context ctx;
  Tensor f32(std::vector<float>& v, std::vector<int64_t> shape) {
    return Tensor(v.data(), DType::f32, Device::cpu(), shape);
  }
  Tensor i32(std::vector<int32_t>& v) {
    return Tensor(v.data(), DType::i32, Device::cpu(), {static_cast<int64_t>(v.size())});
  }
  Conv1dCausal causal() {
    Conv1dCausal a;
    a.x = f32(x, {T, C});
    a.weight = f32(w, {C, W});
    a.bias = f32(bias, {C});
    a.out = f32(out, {T, C});
    a.conv_state = f32(state, {kPool, C, W - 1});
    a.cu_seqlens = i32(cu);
    a.state_slots = i32(slots);
    a.has_initial_state = i32(init);
    return a;
  }
  Conv1dUpdate update() {
    Conv1dUpdate a;
    a.x = f32(x, {2, C});
    a.weight = f32(w, {C, W});
    a.out = f32(out, {2, C});
    a.conv_state = f32(state, {kPool, C, W - 1});
    a.state_slots = i32(slots);
    return a;
  }
};
}  // namespace

TEST_F(ConvFixture, ValidCallsRun) {
  conv1d_causal(causal(), ctx);
  EXPECT_FLOAT_EQ(out[0], 1.0f);       // sequence 0 from state of ones: 4 · 0.25 · 1
  EXPECT_FLOAT_EQ(out[2 * C], 0.25f);  // sequence 1 from zeros, first token
  EXPECT_FLOAT_EQ(state[2 * C * 3], 1.0f);
  conv1d_update(update(), ctx);
  Conv1dUpdate in_place = update();
  in_place.out = in_place.x;  // the same view: allowed
  conv1d_update(in_place, ctx);
}

TEST_F(ConvFixture, WrongRank) {
  Conv1dCausal a = causal();
  a.x = f32(x, {T, C, 1});
  EXPECT_HYBRID_ERROR(conv1d_causal(a, ctx),
                      "[conv1d_causal] x: expected [T, C] f32|bf16, got [6, 4, 1] f32");
  Conv1dUpdate u = update();
  u.conv_state = f32(state, {kPool, C * (W - 1)});
  EXPECT_HYBRID_ERROR(
      conv1d_update(u, ctx),
      "[conv1d_update] conv_state: expected [slots, C=4, W-1=3] f32|bf16, got [3, 12] f32");
}

TEST_F(ConvFixture, WrongShape) {
  Conv1dCausal a = causal();
  a.weight = f32(w, {C - 1, W});
  EXPECT_HYBRID_ERROR(conv1d_causal(a, ctx),
                      "[conv1d_causal] weight: expected [C=4, W] f32|bf16, got [3, 4] f32");
  a = causal();
  a.bias = f32(bias, {C - 1});
  EXPECT_HYBRID_ERROR(conv1d_causal(a, ctx),
                      "[conv1d_causal] bias: expected [C=4] f32|bf16, got [3] f32");
  a = causal();
  a.conv_state = f32(state, {1, C, W});
  EXPECT_HYBRID_ERROR(
      conv1d_causal(a, ctx),
      "[conv1d_causal] conv_state: expected [slots, C=4, W-1=3] f32|bf16, got [1, 4, 4] f32");
  a = causal();
  a.out = f32(out, {T - 1, C});
  EXPECT_HYBRID_ERROR(conv1d_causal(a, ctx),
                      "[conv1d_causal] out: expected [T=6, C=4] f32|bf16, got [5, 4] f32");
  a = causal();
  a.has_initial_state = Tensor(init.data(), DType::i32, Device::cpu(), {1});
  EXPECT_HYBRID_ERROR(conv1d_causal(a, ctx),
                      "[conv1d_causal] has_initial_state: expected [N=2] i32|u8, got [1] i32");
  Conv1dUpdate u = update();
  u.state_slots = Tensor(slots.data(), DType::i32, Device::cpu(), {1});
  EXPECT_HYBRID_ERROR(conv1d_update(u, ctx),
                      "[conv1d_update] state_slots: expected [N=2] i32, got [1] i32");
}

TEST_F(ConvFixture, WrongDtype) {
  Conv1dCausal a = causal();
  a.x = Tensor(x.data(), DType::f16, Device::cpu(), {T, C});
  EXPECT_HYBRID_ERROR(conv1d_causal(a, ctx),
                      "[conv1d_causal] x: expected [T, C] f32|bf16, got [6, 4] f16");
  a = causal();
  a.cu_seqlens = Tensor(cu.data(), DType::u32, Device::cpu(), {3});
  EXPECT_HYBRID_ERROR(conv1d_causal(a, ctx),
                      "[conv1d_causal] cu_seqlens: expected [N+1] i32, got [3] u32");
  Conv1dUpdate u = update();
  u.conv_state = Tensor(state.data(), DType::f16, Device::cpu(), {kPool, C, W - 1});
  EXPECT_HYBRID_ERROR(
      conv1d_update(u, ctx),
      "[conv1d_update] conv_state: expected [slots, C=4, W-1=3] f32|bf16, got [3, 4, 3] f16");
}

TEST_F(ConvFixture, WrongStride) {
  Conv1dCausal a = causal();
  a.x = Tensor(x.data(), DType::f32, Device::cpu(), {T, C}, {2 * C, 2});
  EXPECT_HYBRID_ERROR(conv1d_causal(a, ctx),
                      "[conv1d_causal] x: the last dimension must be contiguous");
  a = causal();
  a.x = Tensor(x.data(), DType::f32, Device::cpu(), {T, C}, {2 * C, 1});  // strided rows: fine
  conv1d_causal(a, ctx);
  a.conv_state =
      Tensor(state.data(), DType::f32, Device::cpu(), {kPool, C, W - 1}, {1, kPool, kPool * C});
  EXPECT_HYBRID_ERROR(conv1d_causal(a, ctx),
                      "[conv1d_causal] conv_state: the last dimension must be contiguous");
}

TEST_F(ConvFixture, KernelWidthAtLeastTwo) {
  Conv1dCausal a = causal();
  a.weight = f32(w, {C, 1});
  a.conv_state = f32(state, {kPool, C, 0});
  EXPECT_HYBRID_ERROR(conv1d_causal(a, ctx),
                      "[conv1d_causal] weight: kernel width W must be at least 2, got [4, 1] f32");
  Conv1dUpdate u = update();
  u.weight = f32(w, {C, 1});
  EXPECT_HYBRID_ERROR(conv1d_update(u, ctx),
                      "[conv1d_update] weight: kernel width W must be at least 2");
}

TEST_F(ConvFixture, CuSeqlens) {
  Conv1dCausal a = causal();
  cu = {0, 4, 3};
  a.cu_seqlens = i32(cu);
  EXPECT_HYBRID_ERROR(
      conv1d_causal(a, ctx),
      "[conv1d_causal] cu_seqlens must be non-decreasing: cu_seqlens[2]=3 < cu_seqlens[1]=4");
  cu = {0, 2, 5};
  EXPECT_HYBRID_ERROR(conv1d_causal(a, ctx), "[conv1d_causal] cu_seqlens[N=2]=5 must equal T=6");
  cu = {1, 2, 6};
  EXPECT_HYBRID_ERROR(conv1d_causal(a, ctx), "[conv1d_causal] cu_seqlens[0] must be 0, got 1");
  std::vector<int32_t> one = {0};
  a.cu_seqlens = i32(one);
  EXPECT_HYBRID_ERROR(conv1d_causal(a, ctx),
                      "[conv1d_causal] cu_seqlens: expected [N+1] with N >= 1, got [1] i32");
}

TEST_F(ConvFixture, SlotOutOfRange) {
  Conv1dCausal a = causal();
  slots = {0, 3};
  EXPECT_HYBRID_ERROR(conv1d_causal(a, ctx),
                      "[conv1d_causal] state_slots[1]=3 is out of range: conv_state has 3 slots");
  slots = {7, -1};
  EXPECT_HYBRID_ERROR(conv1d_update(update(), ctx),
                      "[conv1d_update] state_slots[0]=7 is out of range: conv_state has 3 slots");
}

TEST_F(ConvFixture, DuplicatedSlot) {
  slots = {2, 2};
  EXPECT_HYBRID_ERROR(conv1d_causal(causal(), ctx),
                      "[conv1d_causal] state_slots[1]=2 repeats state_slots[0]");
  EXPECT_HYBRID_ERROR(conv1d_update(update(), ctx),
                      "[conv1d_update] state_slots[1]=2 repeats state_slots[0]");
  slots = {-1, -1};  // two padding sequences are fine
  conv1d_update(update(), ctx);
}

TEST_F(ConvFixture, StateArgumentsNeedConvState) {
  Conv1dCausal a = causal();
  a.conv_state = Tensor();
  EXPECT_HYBRID_ERROR(conv1d_causal(a, ctx),
                      "[conv1d_causal] state_slots is given but conv_state is not");
  a.state_slots = Tensor();
  EXPECT_HYBRID_ERROR(conv1d_causal(a, ctx),
                      "[conv1d_causal] has_initial_state is given but conv_state is not");
  a.has_initial_state = Tensor();
  conv1d_causal(a, ctx);  // stateless: valid
  a = causal();
  a.state_slots = Tensor();
  EXPECT_HYBRID_ERROR(conv1d_causal(a, ctx),
                      "[conv1d_causal] state_slots: expected [N=2] i32, got undefined");
}

TEST_F(ConvFixture, Overlaps) {
  Conv1dCausal a = causal();
  a.out = a.x;
  EXPECT_HYBRID_ERROR(conv1d_causal(a, ctx), "[conv1d_causal] out must not overlap x");
  Conv1dUpdate u = update();
  u.out = Tensor(x.data() + 1, DType::f32, Device::cpu(), {2, C});
  EXPECT_HYBRID_ERROR(conv1d_update(u, ctx),
                      "[conv1d_update] out overlaps x without being the same view");
  u = update();
  u.out = Tensor(state.data(), DType::f32, Device::cpu(), {2, C});
  EXPECT_HYBRID_ERROR(conv1d_update(u, ctx), "[conv1d_update] out must not overlap conv_state");
}
