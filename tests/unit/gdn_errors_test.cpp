// Bad input to gdn_recurrent, gdn_prep_chunk, gdn_prep_step, gdn_record, gdn_replay: each names
// the op, the argument and what was wrong.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "expect_error.h"
#include "hybrid/ops/gdn.h"

using namespace hybrid;

namespace {

// T = 3 tokens in N = 2 sequences (2 + 1), Hk = 1, Hv = 2, K = V = 4, a pool of 3 slots.
constexpr int64_t T = 3, Hk = 1, Hv = 2, K = 4, V = 4, N = 2, P = 3;

struct GdnErrors : ::testing::Test {
  std::vector<float> q = std::vector<float>(T * Hk * K, 0.5f), k = q,
                     v = std::vector<float>(T * Hv * V, 1.0f),
                     g = std::vector<float>(T * Hv, -0.1f), beta = std::vector<float>(T * Hv, 0.5f),
                     state = std::vector<float>(P * Hv * V * K, 0.0f),
                     out = std::vector<float>(T * Hv * V),
                     per_token = std::vector<float>(T * Hv * V * K),
                     tape_k = std::vector<float>(T * Hk * K),
                     tape_u = std::vector<float>(T * Hv * V),
                     tape_alpha = std::vector<float>(T * Hv), big = std::vector<float>(4096);
  std::vector<int32_t> cu{0, 2, 3}, slots{2, 0}, flags{1, 0}, ks{2, 1};
  Context ctx;

  Tensor f32(std::vector<float>& d, std::initializer_list<int64_t> shape) {
    return Tensor(d.data(), DType::f32, Device::cpu(), shape);
  }
  Tensor i32(std::vector<int32_t>& d, std::initializer_list<int64_t> shape) {
    return Tensor(d.data(), DType::i32, Device::cpu(), shape);
  }
  GdnRecurrent recurrent() {
    GdnRecurrent a;
    a.q = f32(q, {T, Hk, K});
    a.k = f32(k, {T, Hk, K});
    a.v = f32(v, {T, Hv, V});
    a.g = f32(g, {T, Hv});
    a.beta = f32(beta, {T, Hv});
    a.state = f32(state, {P, Hv, V, K});
    a.cu_seqlens = i32(cu, {N + 1});
    a.state_slots = i32(slots, {N});
    a.out = f32(out, {T, Hv, V});
    a.use_qk_l2norm = true;
    return a;
  }
  GdnRecord record() {
    GdnRecurrent r = recurrent();
    GdnRecord a;
    a.q = r.q, a.k = r.k, a.v = r.v, a.g = r.g, a.beta = r.beta, a.state = r.state;
    a.cu_seqlens = r.cu_seqlens, a.state_slots = r.state_slots, a.out = r.out;
    a.tape_k = f32(tape_k, {T, Hk, K});
    a.tape_u = f32(tape_u, {T, Hv, V});
    a.tape_alpha = f32(tape_alpha, {T, Hv});
    return a;
  }
  GdnReplay replay() {
    GdnReplay a;
    a.tape_k = f32(tape_k, {T, Hk, K});
    a.tape_u = f32(tape_u, {T, Hv, V});
    a.tape_alpha = f32(tape_alpha, {T, Hv});
    a.state = f32(state, {P, Hv, V, K});
    a.cu_seqlens = i32(cu, {N + 1});
    a.state_slots = i32(slots, {N});
    a.num_tokens = i32(ks, {N});
    return a;
  }
  // conv_out [T, 2·Hk·K + Hv·V] = [3, 16] out of `big`; weights [Hk, K].
  GdnPrepChunk prep_chunk() {
    GdnPrepChunk a;
    a.conv_out = f32(big, {T, 2 * Hk * K + Hv * V});
    a.a = f32(g, {T, Hv});
    a.b = f32(beta, {T, Hv});
    a.A_log = Tensor(big.data() + 1000, DType::f32, Device::cpu(), {Hv});
    a.dt_bias = Tensor(big.data() + 1010, DType::f32, Device::cpu(), {Hv});
    a.q_norm_weight = Tensor(big.data() + 1020, DType::f32, Device::cpu(), {Hk, K});
    a.k_norm_weight = Tensor(big.data() + 1030, DType::f32, Device::cpu(), {Hk, K});
    a.state = f32(state, {P, Hv, V, K});
    a.cu_seqlens = i32(cu, {N + 1});
    a.state_slots = i32(slots, {N});
    a.y = f32(out, {T, Hv, V});
    return a;
  }
  GdnPrepStep prep_step() {
    GdnPrepChunk c = prep_chunk();
    GdnPrepStep a;
    a.conv_out = c.conv_out.slice(0, 0, N), a.a = c.a.slice(0, 0, N), a.b = c.b.slice(0, 0, N);
    a.A_log = c.A_log, a.dt_bias = c.dt_bias;
    a.q_norm_weight = c.q_norm_weight, a.k_norm_weight = c.k_norm_weight;
    a.state = c.state;
    a.state_slots = c.state_slots;
    a.y = c.y.slice(0, 0, N);
    return a;
  }
};

}  // namespace

TEST_F(GdnErrors, ValidCallsRun) {
  for (size_t i = 0; i < state.size(); ++i) state[i] = 0.01f * static_cast<float>(i % 7);
  GdnRecurrent a = recurrent();
  a.has_initial_state = i32(flags, {N});
  a.states_per_token = f32(per_token, {T, Hv, V, K});
  gdn_recurrent(a, ctx);
  for (float o : out) EXPECT_TRUE(std::isfinite(o));
  gdn_record(record(), ctx);
  gdn_replay(replay(), ctx);
  gdn_prep_chunk(prep_chunk(), ctx);
  gdn_prep_step(prep_step(), ctx);
}

TEST_F(GdnErrors, WrongRank) {
  GdnRecurrent a = recurrent();
  a.q = f32(q, {T * Hk * K});
  EXPECT_HYBRID_ERROR(gdn_recurrent(a, ctx),
                      "[gdn_recurrent] q: expected [T, Hk, K] f32|bf16|f16, got [12] f32");
}

TEST_F(GdnErrors, WrongShape) {
  GdnRecurrent a = recurrent();
  a.k = f32(k, {T, Hk, 2});
  EXPECT_HYBRID_ERROR(
      gdn_recurrent(a, ctx),
      "[gdn_recurrent] k: expected [T=3, Hk=1, K=4] f32|bf16|f16, got [3, 1, 2] f32");
  a = recurrent();
  a.out = f32(out, {T, Hv, 2});
  EXPECT_HYBRID_ERROR(gdn_recurrent(a, ctx), "[gdn_recurrent] out: expected [T=3, Hv=2, V=4]");
  a = recurrent();
  a.state = f32(state, {P, Hv, K, 2});
  EXPECT_HYBRID_ERROR(
      gdn_recurrent(a, ctx),
      "[gdn_recurrent] state: expected [slots, Hv=2, V=4, K=4] f32|bf16, got [3, 2, 4, 2] f32");
}

TEST_F(GdnErrors, WrongDtype) {
  GdnRecurrent a = recurrent();
  a.g = Tensor(g.data(), DType::bf16, Device::cpu(), {T, Hv});
  EXPECT_HYBRID_ERROR(gdn_recurrent(a, ctx),
                      "[gdn_recurrent] g: expected [T=3, Hv=2] f32, got [3, 2] bf16");
  a = recurrent();
  a.cu_seqlens = Tensor(cu.data(), DType::u32, Device::cpu(), {N + 1});
  EXPECT_HYBRID_ERROR(gdn_recurrent(a, ctx),
                      "[gdn_recurrent] cu_seqlens: expected [N+1] i32, got [3] u32");
  a = recurrent();
  a.state = Tensor(state.data(), DType::f16, Device::cpu(), {P, Hv, V, K});
  EXPECT_HYBRID_ERROR(gdn_recurrent(a, ctx),
                      "[gdn_recurrent] state: expected [slots, Hv, V, K] f32|bf16");
}

TEST_F(GdnErrors, WrongStride) {
  GdnRecurrent a = recurrent();
  a.v = Tensor(big.data(), DType::f32, Device::cpu(), {T, Hv, V}, {2 * Hv * V, 2 * V, 2});
  EXPECT_HYBRID_ERROR(gdn_recurrent(a, ctx),
                      "[gdn_recurrent] v: the last dimension must be contiguous");
  a = recurrent();
  a.q = Tensor(big.data() + 100, DType::f32, Device::cpu(), {T, Hk, K}, {-K, K, 1});
  EXPECT_HYBRID_ERROR(gdn_recurrent(a, ctx), "[gdn_recurrent] q: strides must be positive");
}

TEST_F(GdnErrors, StridedRowsAreAccepted) {
  GdnRecurrent a = recurrent();  // q, k, v as rows of a packed [T, 2·Hk·K + Hv·V] buffer
  const int64_t C = 2 * Hk * K + Hv * V;
  a.q = Tensor(big.data(), DType::f32, Device::cpu(), {T, Hk, K}, {C, K, 1});
  a.k = Tensor(big.data() + Hk * K, DType::f32, Device::cpu(), {T, Hk, K}, {C, K, 1});
  a.v = Tensor(big.data() + 2 * Hk * K, DType::f32, Device::cpu(), {T, Hv, V}, {C, V, 1});
  gdn_recurrent(a, ctx);
}

TEST_F(GdnErrors, HvNotAMultipleOfHk) {
  GdnRecurrent a = recurrent();
  a.q = f32(q, {T, 2, 2});
  a.k = f32(k, {T, 2, 2});
  a.v = f32(big, {T, 3, V});
  EXPECT_HYBRID_ERROR(gdn_recurrent(a, ctx),
                      "[gdn_recurrent] Hv=3 (v) must be a multiple of Hk=2 (q, k)");
  GdnPrepChunk p = prep_chunk();
  p.q_norm_weight = f32(big, {3, K});
  EXPECT_HYBRID_ERROR(gdn_prep_chunk(p, ctx),
                      "[gdn_prep_chunk] Hv=2 (state) must be a multiple of Hk=3 (q_norm_weight)");
}

TEST_F(GdnErrors, CuSeqlensInvalid) {
  GdnRecurrent a = recurrent();
  cu = {1, 2, 3};
  EXPECT_HYBRID_ERROR(gdn_recurrent(a, ctx), "[gdn_recurrent] cu_seqlens[0] must be 0, got 1");
  cu = {0, 3, 2};
  EXPECT_HYBRID_ERROR(
      gdn_recurrent(a, ctx),
      "[gdn_recurrent] cu_seqlens must be non-decreasing: cu_seqlens[2]=2 < cu_seqlens[1]=3");
  cu = {0, 1, 2};
  EXPECT_HYBRID_ERROR(gdn_recurrent(a, ctx), "[gdn_recurrent] cu_seqlens[N=2]=2 must equal T=3");
  cu = {0, 2, 3};
  a.cu_seqlens = i32(cu, {N});
  EXPECT_HYBRID_ERROR(gdn_recurrent(a, ctx),
                      "[gdn_recurrent] state_slots: expected [N=1] i32, got [2] i32");
  a.cu_seqlens = Tensor(cu.data(), DType::i32, Device::cpu(), {0});
  EXPECT_HYBRID_ERROR(gdn_recurrent(a, ctx),
                      "[gdn_recurrent] cu_seqlens: expected [N+1] with N >= 0");
}

TEST_F(GdnErrors, SlotOutOfRange) {
  slots = {3, 0};
  EXPECT_HYBRID_ERROR(gdn_recurrent(recurrent(), ctx),
                      "[gdn_recurrent] state_slots[0]=3 is out of range: state has 3 slots");
  EXPECT_HYBRID_ERROR(gdn_prep_step(prep_step(), ctx),
                      "[gdn_prep_step] state_slots[0]=3 is out of range: state has 3 slots");
  slots = {-1, 0};  // padding is fine
  gdn_recurrent(recurrent(), ctx);
}

TEST_F(GdnErrors, DuplicateSlot) {
  slots = {1, 1};
  EXPECT_HYBRID_ERROR(gdn_recurrent(recurrent(), ctx),
                      "[gdn_recurrent] state_slots[1]=1 repeats state_slots[0]");
  EXPECT_HYBRID_ERROR(gdn_record(record(), ctx),
                      "[gdn_record] state_slots[1]=1 repeats state_slots[0]");
  EXPECT_HYBRID_ERROR(gdn_prep_chunk(prep_chunk(), ctx),
                      "[gdn_prep_chunk] state_slots[1]=1 repeats state_slots[0]");
  EXPECT_HYBRID_ERROR(gdn_prep_step(prep_step(), ctx),
                      "[gdn_prep_step] state_slots[1]=1 repeats state_slots[0]");
  slots = {-1, -1};  // two padding sequences do not collide
  gdn_recurrent(recurrent(), ctx);
}

TEST_F(GdnErrors, StatesPerTokenShape) {
  GdnRecurrent a = recurrent();
  a.states_per_token = f32(per_token, {T, Hv, K, V / 2});
  EXPECT_HYBRID_ERROR(
      gdn_recurrent(a, ctx),
      "[gdn_recurrent] states_per_token: expected [T=3, Hv=2, V=4, K=4] f32, got [3, 2, 4, 2] f32");
  a.states_per_token = Tensor(per_token.data(), DType::bf16, Device::cpu(), {T, Hv, V, K});
  EXPECT_HYBRID_ERROR(gdn_recurrent(a, ctx),
                      "[gdn_recurrent] states_per_token: expected [T=3, Hv=2, V=4, K=4] f32");
}

TEST_F(GdnErrors, HasInitialStateShapeAndScale) {
  GdnRecurrent a = recurrent();
  a.has_initial_state = i32(flags, {1});
  EXPECT_HYBRID_ERROR(gdn_recurrent(a, ctx),
                      "[gdn_recurrent] has_initial_state: expected [N=2] i32, got [1] i32");
  a = recurrent();
  a.scale = std::numeric_limits<float>::infinity();
  EXPECT_HYBRID_ERROR(gdn_recurrent(a, ctx), "[gdn_recurrent] scale must be finite");
}

TEST_F(GdnErrors, RecordTapeShape) {
  GdnRecord a = record();
  a.tape_k = f32(tape_k, {T, Hk, K / 2, 2});
  EXPECT_HYBRID_ERROR(gdn_record(a, ctx),
                      "[gdn_record] tape_k: expected [T=3, Hk=1, K=4] f32, got [3, 1, 2, 2] f32");
  a = record();
  a.tape_alpha = Tensor(tape_alpha.data(), DType::bf16, Device::cpu(), {T, Hv});
  EXPECT_HYBRID_ERROR(gdn_record(a, ctx),
                      "[gdn_record] tape_alpha: expected [T=3, Hv=2] f32, got [3, 2] bf16");
}

TEST_F(GdnErrors, ReplayMoreTokensThanRecorded) {
  ks = {2, 2};  // sequence 1 recorded only 1 token
  EXPECT_HYBRID_ERROR(
      gdn_replay(replay(), ctx),
      "[gdn_replay] num_tokens[1]=2 must be in [0, 1] (the recorded tokens of sequence 1)");
  ks = {-1, 0};
  EXPECT_HYBRID_ERROR(gdn_replay(replay(), ctx), "[gdn_replay] num_tokens[0]=-1 must be in [0, 2]");
}

TEST_F(GdnErrors, ReplayShapes) {
  GdnReplay a = replay();
  a.state_out = f32(per_token, {N + 1, Hv, V, K});
  EXPECT_HYBRID_ERROR(
      gdn_replay(a, ctx),
      "[gdn_replay] state_out: expected [N=2, Hv=2, V=4, K=4] f32|bf16, got [3, 2, 4, 4] f32");
  a = replay();
  a.num_tokens = i32(ks, {1});
  EXPECT_HYBRID_ERROR(gdn_replay(a, ctx),
                      "[gdn_replay] num_tokens: expected [N=2] i32, got [1] i32");
  a = replay();
  a.tape_u = f32(big, {T, 3, V});
  EXPECT_HYBRID_ERROR(gdn_replay(a, ctx),
                      "[gdn_replay] tape_alpha: expected [T=3, Hv=3] f32, got [3, 2] f32");
  a = replay();
  a.state = f32(state, {P, Hv, V / 2, 2 * K});
  EXPECT_HYBRID_ERROR(gdn_replay(a, ctx), "[gdn_replay] state: expected [slots, Hv=2, V=4, K=4]");
}

TEST_F(GdnErrors, PrepShapes) {
  GdnPrepChunk a = prep_chunk();
  a.conv_out = f32(big, {T, 15});
  EXPECT_HYBRID_ERROR(
      gdn_prep_chunk(a, ctx),
      "[gdn_prep_chunk] conv_out: expected [T=3, 2*Hk*K+Hv*V=16] f32|bf16|f16, got [3, 15] f32");
  a = prep_chunk();
  a.k_norm_weight = f32(big, {Hk * K});
  EXPECT_HYBRID_ERROR(gdn_prep_chunk(a, ctx),
                      "[gdn_prep_chunk] k_norm_weight: expected [Hk=1, K=4] f32|bf16, got [4] f32");
  a = prep_chunk();
  a.A_log = f32(big, {Hv + 1});
  EXPECT_HYBRID_ERROR(gdn_prep_chunk(a, ctx),
                      "[gdn_prep_chunk] A_log: expected [Hv=2] f32|bf16, got [3] f32");
  a = prep_chunk();
  a.eps = 0.0f;
  EXPECT_HYBRID_ERROR(gdn_prep_chunk(a, ctx), "[gdn_prep_chunk] eps must be positive");
  a = prep_chunk();
  a.y = Tensor(out.data(), DType::i32, Device::cpu(), {T, Hv, V});
  EXPECT_HYBRID_ERROR(
      gdn_prep_chunk(a, ctx),
      "[gdn_prep_chunk] y: expected [T=3, Hv=2, V=4] f32|bf16|f16, got [3, 2, 4] i32");
  GdnPrepStep s = prep_step();
  s.state_slots = i32(slots, {1});
  EXPECT_HYBRID_ERROR(gdn_prep_step(s, ctx),
                      "[gdn_prep_step] state_slots: expected [N=2] i32, got [1] i32");
  s = prep_step();
  s.b = f32(beta, {N, Hv + 1});
  EXPECT_HYBRID_ERROR(gdn_prep_step(s, ctx),
                      "[gdn_prep_step] b: expected [T=2, Hv=2] f32|bf16|f16, got [2, 3] f32");
}
