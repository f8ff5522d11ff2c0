// Bad input to ssm_step / ssm_step_record / ssm_replay / ssm_chunk_scan: each names the op, the
// argument and what was wrong. Also: valid calls run, and record + replay(len) == state_out.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "expect_error.h"
#include "hybrid/ops/ssm.h"

using namespace hybrid;

namespace {

// T = 3 tokens in two sequences (lengths 1 and 2), H = 4, P = 2, N = 4, G = 2, pool of 3 slots.
struct SsmFixture : ::testing::Test {
  static constexpr int64_t T = 3, H = 4, P = 2, N = 4, G = 2, kSlots = 3;
  std::vector<float> x = filled(T * H * P, 0.5f), dt = filled(T * H, 0.1f), A_log = filled(H, 0.0f),
                     B = filled(T * G * N, 0.25f), C = filled(T * G * N, 1.0f),
                     state = filled(kSlots * H * P * N, 0.0f), y = filled(T * H * P, 0.0f),
                     dA_log = filled(T * H, 0.0f), dBx_log = filled(T * H * P * N, 0.0f),
                     state_out = filled(2 * H * P * N, 0.0f);
  std::vector<int32_t> slots = {2, 0}, step_slots = {1, -1, 0}, cu = {0, 1, 3}, k = {1, 2};
  Context ctx;

  static std::vector<float> filled(int64_t n, float v) { return std::vector<float>(n, v); }
  Tensor f32(std::vector<float>& v, std::initializer_list<int64_t> shape) {
    return Tensor(v.data(), DType::f32, Device::cpu(), shape);
  }
  Tensor i32(std::vector<int32_t>& v) {
    return Tensor(v.data(), DType::i32, Device::cpu(), {static_cast<int64_t>(v.size())});
  }
  template <class Args>
  void inputs(Args& a) {
    a.x = f32(x, {T, H, P});
    a.dt = f32(dt, {T, H});
    a.A_log = f32(A_log, {H});
    a.B = f32(B, {T, G, N});
    a.C = f32(C, {T, G, N});
    a.state = f32(state, {kSlots, H, P, N});
    a.y = f32(y, {T, H, P});
  }
  SsmStep step() {
    SsmStep a;
    inputs(a);
    a.state_slots = i32(step_slots);
    return a;
  }
  SsmStepRecord record() {
    SsmStepRecord a;
    inputs(a);
    a.cu_seqlens = i32(cu);
    a.state_slots = i32(slots);
    a.dA_log = f32(dA_log, {T, H});
    a.dBx_log = f32(dBx_log, {T, H, P, N});
    a.state_out = f32(state_out, {2, H, P, N});
    return a;
  }
  SsmReplay replay() {
    SsmReplay a;
    a.dA_log = f32(dA_log, {T, H});
    a.dBx_log = f32(dBx_log, {T, H, P, N});
    a.cu_seqlens = i32(cu);
    a.state_slots = i32(slots);
    a.num_steps = i32(k);
    a.state = f32(state, {kSlots, H, P, N});
    return a;
  }
  SsmChunkScan scan() {
    SsmChunkScan a;
    inputs(a);
    a.cu_seqlens = i32(cu);
    a.state_slots = i32(slots);
    a.chunk_size = 64;
    return a;
  }
};

}  // namespace

TEST_F(SsmFixture, ValidCallsRun) {
  for (size_t i = 0; i < state.size(); ++i) state[i] = 0.01f * static_cast<float>(i % 17);
  ssm_step_record(record(), ctx);
  // record leaves the snapshots alone; replaying every step gives the recorded final states
  ssm_replay(replay(), ctx);
  for (int64_t j = 0; j < H * P * N; ++j) {
    EXPECT_NEAR(state[2 * H * P * N + j], state_out[j], 1e-6f);              // sequence 0 in slot 2
    EXPECT_NEAR(state[0 * H * P * N + j], state_out[H * P * N + j], 1e-6f);  // sequence 1 in slot 0
  }
  ssm_step(step(), ctx);
  EXPECT_EQ(y[1 * H * P], 0.0f);  // padding sequence: y = 0
  SsmChunkScan s = scan();
  std::vector<float> chunks = filled(2 * H * P * N, -1.0f);
  s.chunk_states = f32(chunks, {2, H, P, N});
  ssm_chunk_scan(s, ctx);
  EXPECT_EQ(chunks[0], state[2 * H * P * N]);  // sequence 0's only chunk = its final state
}

TEST_F(SsmFixture, WrongRank) {
  SsmStep a = step();
  a.x = f32(x, {T, H * P});
  EXPECT_HYBRID_ERROR(ssm_step(a, ctx),
                      "[ssm_step] x: expected [batch, H, P] f32|bf16|f16, got [3, 8] f32");
  SsmReplay r = replay();
  r.dBx_log = f32(dBx_log, {T, H, P * N});
  EXPECT_HYBRID_ERROR(
      ssm_replay(r, ctx),
      "[ssm_replay] dBx_log: expected [T=3, H=4, P, N] f32|bf16, got [3, 4, 8] f32");
}

TEST_F(SsmFixture, WrongShape) {
  SsmStep a = step();
  a.dt = f32(dt, {T, 3});
  EXPECT_HYBRID_ERROR(ssm_step(a, ctx),
                      "[ssm_step] dt: expected [batch=3, H=4] f32|bf16|f16, got [3, 3] f32");
  a = step();
  a.C = f32(C, {T, G, 3});
  EXPECT_HYBRID_ERROR(ssm_step(a, ctx),
                      "[ssm_step] C: expected [batch=3, G=2, N=4] f32|bf16|f16, got [3, 2, 3] f32");
  a = step();
  a.D = f32(A_log, {3});
  EXPECT_HYBRID_ERROR(ssm_step(a, ctx), "[ssm_step] D: expected [H=4] f32|bf16, got [3] f32");
  a = step();
  a.z = f32(y, {T, H, 1});
  EXPECT_HYBRID_ERROR(ssm_step(a, ctx),
                      "[ssm_step] z: expected [batch=3, H=4, P=2] f32|bf16|f16, got [3, 4, 1] f32");
  a = step();
  a.state = f32(state, {kSlots, H, N, P});
  EXPECT_HYBRID_ERROR(
      ssm_step(a, ctx),
      "[ssm_step] state: expected [slots, H=4, P=2, N=4] f32|bf16, got [3, 4, 4, 2] f32");
  SsmStepRecord r = record();
  r.dA_log = f32(dA_log, {T, H - 1});
  EXPECT_HYBRID_ERROR(ssm_step_record(r, ctx),
                      "[ssm_step_record] dA_log: expected [T=3, H=4] f32|bf16, got [3, 3] f32");
  r = record();
  r.state_out = f32(state_out, {1, H, P, N});
  EXPECT_HYBRID_ERROR(ssm_step_record(r, ctx),
                      "[ssm_step_record] state_out: expected [seqs=2, H=4, P=2, N=4] f32|bf16, got "
                      "[1, 4, 2, 4] f32");
  SsmChunkScan s = scan();
  std::vector<float> chunks = filled(3 * H * P * N, 0.0f);
  s.chunk_states = f32(chunks, {3, H, P, N});
  EXPECT_HYBRID_ERROR(ssm_chunk_scan(s, ctx),
                      "[ssm_chunk_scan] chunk_states: expected [num_chunks=2, H=4, P=2, N=4] "
                      "f32|bf16, got [3, 4, 2, 4] f32");
  s = scan();
  std::vector<int32_t> flags = {1, 0, 1};
  s.has_initial_state = i32(flags);
  EXPECT_HYBRID_ERROR(ssm_chunk_scan(s, ctx),
                      "[ssm_chunk_scan] has_initial_state: expected [seqs=2] u8|i32, got [3] i32");
}

TEST_F(SsmFixture, WrongDtype) {
  SsmStep a = step();
  a.state = Tensor(state.data(), DType::i32, Device::cpu(), {kSlots, H, P, N});
  EXPECT_HYBRID_ERROR(
      ssm_step(a, ctx),
      "[ssm_step] state: expected [slots, H=4, P=2, N=4] f32|bf16, got [3, 4, 2, 4] i32");
  a = step();
  a.state_slots = f32(A_log, {3});
  EXPECT_HYBRID_ERROR(ssm_step(a, ctx),
                      "[ssm_step] state_slots: expected [seqs=3] i32, got [3] f32");
  a = step();
  a.A_log = Tensor(A_log.data(), DType::f16, Device::cpu(), {H});
  EXPECT_HYBRID_ERROR(ssm_step(a, ctx), "[ssm_step] A_log: expected [H=4] f32|bf16, got [4] f16");
  SsmStepRecord r = record();
  r.mask = f32(A_log, {T});
  EXPECT_HYBRID_ERROR(ssm_step_record(r, ctx),
                      "[ssm_step_record] mask: expected [T=3] u8|i32|u32, got [3] f32");
  SsmChunkScan s = scan();
  s.cu_seqlens = Tensor(cu.data(), DType::u32, Device::cpu(), {3});
  EXPECT_HYBRID_ERROR(ssm_chunk_scan(s, ctx),
                      "[ssm_chunk_scan] cu_seqlens: expected [seqs + 1] i32, got [3] u32");
}

TEST_F(SsmFixture, WrongStride) {
  SsmStep a = step();
  a.B = Tensor(B.data(), DType::f32, Device::cpu(), {T, G, 2}, {G * N, N, 2});
  a.C = Tensor(C.data(), DType::f32, Device::cpu(), {T, G, 2});
  EXPECT_HYBRID_ERROR(ssm_step(a, ctx), "[ssm_step] B: the last dimension must be contiguous");
  SsmChunkScan s = scan();
  s.y = Tensor(y.data(), DType::f32, Device::cpu(), {T, H, P}, {H * P, 0, 1});
  EXPECT_HYBRID_ERROR(ssm_chunk_scan(s, ctx), "[ssm_chunk_scan] y: strides must be positive");
  SsmReplay r = replay();
  std::vector<int32_t> wide = {0, 9, 1, 9, 3, 9};
  r.cu_seqlens = Tensor(wide.data(), DType::i32, Device::cpu(), {3}, {2});
  EXPECT_HYBRID_ERROR(ssm_replay(r, ctx), "[ssm_replay] cu_seqlens: expected a contiguous tensor");
}

TEST_F(SsmFixture, HeadsMustBeAMultipleOfGroups) {
  SsmStep a = step();
  a.B = f32(B, {T, 3, N});
  a.C = f32(C, {T, 3, N});
  EXPECT_HYBRID_ERROR(ssm_step(a, ctx),
                      "[ssm_step] H=4 must be a multiple of the number of groups G=3");
  SsmChunkScan s = scan();
  s.B = f32(B, {T, 3, N});
  EXPECT_HYBRID_ERROR(ssm_chunk_scan(s, ctx),
                      "[ssm_chunk_scan] H=4 must be a multiple of the number of groups G=3");
}

TEST_F(SsmFixture, ChunkSizeMustBeSupported) {
  SsmChunkScan s = scan();
  for (int64_t q : {0, 32, 100, 512}) {
    s.chunk_size = q;
    EXPECT_HYBRID_ERROR(ssm_chunk_scan(s, ctx),
                        str("[ssm_chunk_scan] chunk_size must be one of 64, 128, 256, got ", q));
  }
}

TEST_F(SsmFixture, SlotOutOfRange) {
  step_slots = {1, 3, 0};
  EXPECT_HYBRID_ERROR(ssm_step(step(), ctx),
                      "[ssm_step] state_slots[1]=3 is out of range: state has 3 slots");
  slots = {0, 7};
  EXPECT_HYBRID_ERROR(ssm_chunk_scan(scan(), ctx),
                      "[ssm_chunk_scan] state_slots[1]=7 is out of range");
  EXPECT_HYBRID_ERROR(ssm_replay(replay(), ctx), "[ssm_replay] state_slots[1]=7 is out of range");
  EXPECT_HYBRID_ERROR(ssm_step_record(record(), ctx),
                      "[ssm_step_record] state_slots[1]=7 is out of range");
}

TEST_F(SsmFixture, DuplicatedSlot) {
  step_slots = {2, -1, 2};
  EXPECT_HYBRID_ERROR(ssm_step(step(), ctx), "[ssm_step] state_slots[2]=2 repeats state_slots[0]");
  step_slots = {-1, -1, 2};  // padding slots may repeat
  ssm_step(step(), ctx);
  slots = {1, 1};
  EXPECT_HYBRID_ERROR(ssm_chunk_scan(scan(), ctx),
                      "[ssm_chunk_scan] state_slots[1]=1 repeats state_slots[0]");
}

TEST_F(SsmFixture, BadCuSeqlens) {
  cu = {1, 1, 3};
  EXPECT_HYBRID_ERROR(ssm_chunk_scan(scan(), ctx),
                      "[ssm_chunk_scan] cu_seqlens[0] must be 0, got 1");
  cu = {0, 2, 1};
  EXPECT_HYBRID_ERROR(
      ssm_step_record(record(), ctx),
      "[ssm_step_record] cu_seqlens must be non-decreasing: cu_seqlens[2]=1 < cu_seqlens[1]=2");
  cu = {0, 1, 2};
  EXPECT_HYBRID_ERROR(ssm_replay(replay(), ctx), "[ssm_replay] cu_seqlens[N=2]=2 must equal T=3");
  std::vector<int32_t> wrong_count = {0, 3};  // one sequence but two slots
  SsmChunkScan s = scan();
  cu = {0, 1, 3};
  s.cu_seqlens = i32(wrong_count);
  EXPECT_HYBRID_ERROR(ssm_chunk_scan(s, ctx),
                      "[ssm_chunk_scan] state_slots: expected [seqs=1] i32, got [2] i32");
  std::vector<int32_t> empty;
  s.cu_seqlens = Tensor(empty.data(), DType::i32, Device::cpu(), {0});
  EXPECT_HYBRID_ERROR(ssm_chunk_scan(s, ctx),
                      "[ssm_chunk_scan] cu_seqlens: expected [seqs + 1] with at least one element");
}

TEST_F(SsmFixture, ReplayStepsOutOfRange) {
  k = {2, 1};
  EXPECT_HYBRID_ERROR(
      ssm_replay(replay(), ctx),
      "[ssm_replay] num_steps[0] = 2 is out of range [0, 1] (the length of sequence 0)");
  k = {0, -1};
  EXPECT_HYBRID_ERROR(ssm_replay(replay(), ctx),
                      "[ssm_replay] num_steps[1] = -1 is out of range [0, 2]");
  k = {1, 2, 0};
  EXPECT_HYBRID_ERROR(ssm_replay(replay(), ctx),
                      "[ssm_replay] num_steps: expected [seqs=2] i32, got [3] i32");
}

TEST_F(SsmFixture, BadDtLimit) {
  SsmStep a = step();
  a.dt_min = 0.5f;
  a.dt_max = 0.1f;
  EXPECT_HYBRID_ERROR(ssm_step(a, ctx),
                      "[ssm_step] dt_limit: expected dt_min <= dt_max, got (0.5, 0.1)");
  SsmChunkScan s = scan();
  s.dt_max = std::numeric_limits<float>::quiet_NaN();
  EXPECT_HYBRID_ERROR(ssm_chunk_scan(s, ctx),
                      "[ssm_chunk_scan] dt_limit: expected dt_min <= dt_max");
}

TEST_F(SsmFixture, MissingRequiredTensor) {
  SsmStepRecord r = record();
  r.dBx_log = Tensor();
  EXPECT_HYBRID_ERROR(
      ssm_step_record(r, ctx),
      "[ssm_step_record] dBx_log: expected [T=3, H=4, P=2, N=4] f32|bf16, got undefined");
  SsmReplay p = replay();
  p.num_steps = Tensor();
  EXPECT_HYBRID_ERROR(ssm_replay(p, ctx),
                      "[ssm_replay] num_steps: expected [seqs=2] i32, got undefined");
}
