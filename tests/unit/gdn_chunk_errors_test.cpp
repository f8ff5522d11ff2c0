// Bad input to gdn_chunk_prefill: each names the op, the argument and what was wrong.
#include <gtest/gtest.h>

#include <cmath>

#include <cstdint>
#include <vector>

#include "expect_error.h"
#include "hybrid/ops/gdn_chunk.h"

using namespace hybrid;

namespace {
// A valid call: T = 6 tokens in 2 sequences of 3, Hk = 1, Hv = 2, K = V = 4, pool of 2 rows.
struct GdnChunkFixture : ::testing::Test {
  static constexpr int64_t T = 6, Hk = 1, Hv = 2, K = 4, V = 4;
  std::vector<float> q = std::vector<float>(T * Hk * K, 0.5f), k = q,
                     v = std::vector<float>(T * Hv * V, 1.0f),
                     g = std::vector<float>(T * Hv, -0.1f), beta = std::vector<float>(T * Hv, 0.5f),
                     pool = std::vector<float>(2 * Hv * V * K, 0.0f),
                     out = std::vector<float>(T * Hv * V),
                     ckpt = std::vector<float>(4 * Hv * V * K);
  std::vector<int32_t> cu = {0, 3, 6}, slots = {0, 1};
  Context ctx;

  static Tensor f32(std::vector<float>& x, std::initializer_list<int64_t> shape) {
    return Tensor(x.data(), DType::f32, Device::cpu(), shape);
  }
  GdnChunkPrefill args() {
    GdnChunkPrefill a;
    a.q = f32(q, {T, Hk, K});
    a.k = f32(k, {T, Hk, K});
    a.v = f32(v, {T, Hv, V});
    a.g = f32(g, {T, Hv});
    a.beta = f32(beta, {T, Hv});
    a.cu_seqlens = Tensor(cu.data(), DType::i32, Device::cpu(), {3});
    a.state_slots = Tensor(slots.data(), DType::i32, Device::cpu(), {2});
    a.state = f32(pool, {2, Hv, V, K});
    a.out = f32(out, {T, Hv, V});
    return a;
  }
};
}  // namespace

TEST_F(GdnChunkFixture, ValidCallRuns) {
  gdn_chunk_prefill(args(), ctx);
  // Token 0 from a zero state: o = scale · β (v·1) (k̂·q̂), q = k, so k̂·q̂ = 1 → 0.5 · 1 / 2.
  EXPECT_NEAR(out[0], 0.25f, 1e-6f);
  EXPECT_NE(pool[0], 0.0f);
}

TEST_F(GdnChunkFixture, WrongRank) {
  GdnChunkPrefill a = args();
  a.q = f32(q, {T, Hk * K});
  EXPECT_HYBRID_ERROR(gdn_chunk_prefill(a, ctx),
                      "[gdn_chunk_prefill] q: expected [T, Hk, K] f32|bf16, got [6, 4] f32");
}

TEST_F(GdnChunkFixture, WrongShape) {
  GdnChunkPrefill a = args();
  a.k = f32(k, {T, Hk, 2});
  EXPECT_HYBRID_ERROR(gdn_chunk_prefill(a, ctx),
                      "[gdn_chunk_prefill] k: expected [T=6, Hk=1, K=4] f32, got [6, 1, 2] f32");
  a = args();
  a.state = f32(pool, {2, Hv, K, V / 2});
  EXPECT_HYBRID_ERROR(gdn_chunk_prefill(a, ctx),
                      "state: expected [slots, Hv=2, V=4, K=4] f32|bf16, got [2, 2, 4, 2] f32");
  a = args();
  a.out = f32(out, {T, Hv * V});
  EXPECT_HYBRID_ERROR(gdn_chunk_prefill(a, ctx), "out: expected [T=6, Hv=2, V=4] f32|bf16");
}

TEST_F(GdnChunkFixture, WrongDtype) {
  GdnChunkPrefill a = args();
  a.g = Tensor(g.data(), DType::bf16, Device::cpu(), {T, Hv});
  EXPECT_HYBRID_ERROR(gdn_chunk_prefill(a, ctx),
                      "[gdn_chunk_prefill] g: expected [T=6, Hv=2] f32, got [6, 2] bf16");
  a = args();
  a.v = Tensor(v.data(), DType::bf16, Device::cpu(), {T, Hv, V});
  EXPECT_HYBRID_ERROR(gdn_chunk_prefill(a, ctx),
                      "v: expected [T=6, Hv, V] f32, got [6, 2, 4] bf16");
  a = args();
  a.state_slots = Tensor(slots.data(), DType::u32, Device::cpu(), {2});
  EXPECT_HYBRID_ERROR(gdn_chunk_prefill(a, ctx), "state_slots: expected [N=2] i32, got [2] u32");
}

TEST_F(GdnChunkFixture, WrongStride) {
  GdnChunkPrefill a = args();
  a.q = Tensor(q.data(), DType::f32, Device::cpu(), {T, Hk, 2}, {K, K, 2});
  a.k = Tensor(k.data(), DType::f32, Device::cpu(), {T, Hk, 2}, {K, K, 1});
  a.state = f32(pool, {4, Hv, V, 2});
  EXPECT_HYBRID_ERROR(gdn_chunk_prefill(a, ctx),
                      "[gdn_chunk_prefill] q: the last dimension must be contiguous (stride 1)");
}

TEST_F(GdnChunkFixture, HeadsNotDivisible) {
  GdnChunkPrefill a = args();
  std::vector<float> q2(T * 3 * K), k2(T * 3 * K);
  a.q = f32(q2, {T, 3, K});
  a.k = f32(k2, {T, 3, K});
  EXPECT_HYBRID_ERROR(gdn_chunk_prefill(a, ctx),
                      "[gdn_chunk_prefill] Hv=2 must be a multiple of Hk=3");
}

TEST_F(GdnChunkFixture, CheckpointInterval) {
  GdnChunkPrefill a = args();
  a.checkpoints = f32(ckpt, {4, Hv, V, K});
  a.checkpoint_every = 96;
  EXPECT_HYBRID_ERROR(gdn_chunk_prefill(a, ctx),
                      "[gdn_chunk_prefill] checkpoint_every must be a positive multiple of the "
                      "chunk size 64, got 96");
  a.checkpoint_every = -64;
  EXPECT_HYBRID_ERROR(gdn_chunk_prefill(a, ctx), "got -64");
  a.checkpoint_every = 0;
  EXPECT_HYBRID_ERROR(gdn_chunk_prefill(a, ctx),
                      "[gdn_chunk_prefill] checkpoints is given but checkpoint_every is 0");
  a = args();
  a.checkpoint_every = 64;
  EXPECT_HYBRID_ERROR(gdn_chunk_prefill(a, ctx),
                      "checkpoints: expected [num_checkpoints, Hv=2, V=4, K=4] f32, got undefined");
}

TEST_F(GdnChunkFixture, CheckpointOutputTooSmall) {
  // Sequences of 64 and 130 tokens with checkpoints every 64: 1 + 2 = 3 rows.
  std::vector<float> q2(194 * K), v2(194 * Hv * V), gb(194 * Hv), out2(194 * Hv * V);
  std::vector<int32_t> cu2 = {0, 64, 194};
  GdnChunkPrefill a = args();
  a.q = a.k = f32(q2, {194, Hk, K});
  a.v = a.out = f32(v2, {194, Hv, V});
  a.out = f32(out2, {194, Hv, V});
  a.g = a.beta = f32(gb, {194, Hv});
  a.cu_seqlens = Tensor(cu2.data(), DType::i32, Device::cpu(), {3});
  a.checkpoint_every = 64;
  a.checkpoints = f32(ckpt, {2, Hv, V, K});
  EXPECT_HYBRID_ERROR(gdn_chunk_prefill(a, ctx),
                      "[gdn_chunk_prefill] checkpoints: needs 3 rows (the state after every 64 "
                      "tokens of each sequence), got [2, 2, 4, 4] f32");
  a.checkpoints = f32(ckpt, {3, Hv, V, K});
  gdn_chunk_prefill(a, ctx);  // exactly enough rows
}

TEST_F(GdnChunkFixture, CuSeqlensInvalid) {
  GdnChunkPrefill a = args();
  cu = {1, 3, 6};
  EXPECT_HYBRID_ERROR(gdn_chunk_prefill(a, ctx),
                      "[gdn_chunk_prefill] cu_seqlens[0] must be 0, got 1");
  cu = {0, 4, 3};
  EXPECT_HYBRID_ERROR(gdn_chunk_prefill(a, ctx),
                      "cu_seqlens must be non-decreasing: cu_seqlens[2]=3 < cu_seqlens[1]=4");
  cu = {0, 3, 5};
  EXPECT_HYBRID_ERROR(gdn_chunk_prefill(a, ctx), "cu_seqlens[N=2]=5 must equal T=6");
  a.cu_seqlens = Tensor(cu.data(), DType::i32, Device::cpu(), {1});
  EXPECT_HYBRID_ERROR(gdn_chunk_prefill(a, ctx),
                      "cu_seqlens: expected [N + 1] with N >= 1 sequences, got [1] i32");
  a.cu_seqlens = Tensor(cu.data(), DType::i64, Device::cpu(), {3});
  EXPECT_HYBRID_ERROR(gdn_chunk_prefill(a, ctx), "cu_seqlens: expected [N + 1] i32, got [3] i64");
}

TEST_F(GdnChunkFixture, SlotOutOfRange) {
  GdnChunkPrefill a = args();
  slots = {0, 2};
  EXPECT_HYBRID_ERROR(gdn_chunk_prefill(a, ctx),
                      "[gdn_chunk_prefill] state_slots[1]=2 is out of range: state has 2 "
                      "slots");
}

TEST_F(GdnChunkFixture, DuplicatedSlot) {
  GdnChunkPrefill a = args();
  slots = {1, 1};
  EXPECT_HYBRID_ERROR(gdn_chunk_prefill(a, ctx),
                      "[gdn_chunk_prefill] state_slots[1]=1 repeats state_slots[0]");
  slots = {-1, -1};  // padding sequences may share the negative marker
  out.assign(out.size(), 7.0f);
  pool.assign(pool.size(), 3.0f);
  gdn_chunk_prefill(a, ctx);
  for (float x : pool) EXPECT_EQ(x, 3.0f);
  for (float x : out) EXPECT_EQ(x, 0.0f);
}

TEST_F(GdnChunkFixture, HasInitialStateShape) {
  GdnChunkPrefill a = args();
  std::vector<int32_t> init = {1, 0, 1};
  a.has_initial_state = Tensor(init.data(), DType::i32, Device::cpu(), {3});
  EXPECT_HYBRID_ERROR(gdn_chunk_prefill(a, ctx),
                      "has_initial_state: expected [N=2] i32, got [3] i32");
}

TEST_F(GdnChunkFixture, BadScale) {
  GdnChunkPrefill a = args();
  a.scale = NAN;
  EXPECT_HYBRID_ERROR(gdn_chunk_prefill(a, ctx), "[gdn_chunk_prefill] scale must be finite");
}
