// Bad input to kv_append / attn_decode / attn_prefill / rope_kv_append_attn_decode: each names the
// op, the argument and what was wrong. Plus a few small valid calls with known answers.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "expect_error.h"
#include "hybrid/ops/attention.h"

using namespace hybrid;

namespace {
// N = 2 sequences, Hq = 4, Hkv = 2, D = 8; caches of 4 pages of 4 rows; page_table [[0, 1], [2, 3]]
// (capacity 8 per sequence); seq_lens {3, 5}.
struct AttnFixture : ::testing::Test {
  static constexpr int64_t N = 2, Hq = 4, Hkv = 2, D = 8, P = 4, S = 4;
  std::vector<float> q = std::vector<float>(N * Hq * D, 0.5f), out = std::vector<float>(N * Hq * D);
  std::vector<float> k = std::vector<float>(N * Hkv * D, 1.0f),
                     v = std::vector<float>(N * Hkv * D, 2.0f);
  std::vector<float> kc = std::vector<float>(P * S * Hkv * D, 0.1f),
                     vc = std::vector<float>(P * S * Hkv * D, 0.2f);
  std::vector<int32_t> table = {0, 1, 2, 3}, lens = {3, 5}, pos = {2, 4}, cu = {0, 1, 2};
  Context ctx;

  Tensor f32(std::vector<float>& b, std::initializer_list<int64_t> shape) {
    return Tensor(b.data(), DType::f32, Device::cpu(), shape);
  }
  Tensor i32(std::vector<int32_t>& b, std::initializer_list<int64_t> shape) {
    return Tensor(b.data(), DType::i32, Device::cpu(), shape);
  }
  AttnDecode decode() {
    AttnDecode a;
    a.q = f32(q, {N, Hq, D});
    a.k_cache = f32(kc, {P, S, Hkv, D});
    a.v_cache = f32(vc, {P, S, Hkv, D});
    a.page_table = i32(table, {N, 2});
    a.seq_lens = i32(lens, {N});
    a.out = f32(out, {N, Hq, D});
    return a;
  }
  KvAppend append() {
    KvAppend a;
    a.k = f32(k, {N, Hkv, D});
    a.v = f32(v, {N, Hkv, D});
    a.k_cache = f32(kc, {P, S, Hkv, D});
    a.v_cache = f32(vc, {P, S, Hkv, D});
    a.page_table = i32(table, {N, 2});
    a.positions = i32(pos, {N});
    return a;
  }
  AttnPrefill prefill() {
    AttnPrefill a;
    a.q = f32(q, {N, Hq, D});
    a.k_cache = f32(kc, {P, S, Hkv, D});
    a.v_cache = f32(vc, {P, S, Hkv, D});
    a.page_table = i32(table, {N, 2});
    a.cu_seqlens = i32(cu, {N + 1});
    a.seq_lens = i32(lens, {N});
    a.out = f32(out, {N, Hq, D});
    return a;
  }
  RopeKvAppendAttnDecode fused() {
    RopeKvAppendAttnDecode a;
    a.q = f32(q, {N, Hq, D});
    a.k = f32(k, {N, Hkv, D});
    a.v = f32(v, {N, Hkv, D});
    a.k_cache = f32(kc, {P, S, Hkv, D});
    a.v_cache = f32(vc, {P, S, Hkv, D});
    a.page_table = i32(table, {N, 2});
    a.seq_lens = i32(lens, {N});
    a.out = f32(out, {N, Hq, D});
    a.rotary_dim = 4;
    return a;
  }
};
}  // namespace

// ---- valid calls ------------------------------------------------------------------------------

TEST_F(AttnFixture, AppendThenDecodeOfOneTokenReturnsItsValue) {
  lens = {1, 1};
  pos = {0, 0};
  for (int64_t i = 0; i < N * Hkv * D; ++i) v[i] = static_cast<float>(i);
  kv_append(append(), ctx);
  attn_decode(decode(), ctx);
  // One key: softmax weight 1, out[n, h] = v[n, h / 2].
  for (int64_t n = 0; n < N; ++n)
    for (int64_t h = 0; h < Hq; ++h)
      for (int64_t d = 0; d < D; ++d)
        EXPECT_EQ(out[(n * Hq + h) * D + d], v[(n * Hkv + h / 2) * D + d]);
}

TEST_F(AttnFixture, AppendWritesTheRowOfThePage) {
  kv_append(append(), ctx);
  // Sequence 1, position 4 -> page table[1][1] = 3, row 0.
  EXPECT_EQ(kc[(3 * S + 0) * Hkv * D], 1.0f);
  EXPECT_EQ(vc[(3 * S + 0) * Hkv * D], 2.0f);
  EXPECT_EQ(kc[(3 * S + 1) * Hkv * D], 0.1f);  // the next row is untouched
}

TEST_F(AttnFixture, AppendSkipsNegativePositions) {
  pos = {-1, -1};
  kv_append(append(), ctx);
  for (float x : kc) EXPECT_EQ(x, 0.1f);
}

TEST_F(AttnFixture, PagesBeforeTheWindowAreNotRead) {
  table = {0, 1, -1, 3};  // sequence 1: page 0 slid out of a window of 1 (query at position 4)
  AttnDecode a = decode();
  a.window = 1;
  attn_decode(a, ctx);
  EXPECT_NEAR(out[Hq * D], 0.2f, 1e-6f);
  a.window = 0;
  EXPECT_HYBRID_ERROR(attn_decode(a, ctx),
                      "[attn_decode] page_table[1, 0]=-1 is out of range [0, num_pages=4)");
}

TEST_F(AttnFixture, PaddingSequenceGivesZeros) {
  lens = {0, 5};
  std::fill(out.begin(), out.end(), 7.0f);
  attn_decode(decode(), ctx);
  for (int64_t i = 0; i < Hq * D; ++i) EXPECT_EQ(out[i], 0.0f);
}

// ---- attn_decode ----------------------------------------------------------------------------

TEST_F(AttnFixture, DecodeWrongRank) {
  AttnDecode a = decode();
  a.q = f32(q, {N * Hq, D});
  EXPECT_HYBRID_ERROR(attn_decode(a, ctx),
                      "[attn_decode] q: expected [N, Hq, D] f32|bf16|f16, got [8, 8] f32");
  a = decode();
  a.k_cache = f32(kc, {P * S, Hkv, D});
  EXPECT_HYBRID_ERROR(attn_decode(a, ctx),
                      "[attn_decode] k_cache: expected [num_pages, page_size, Hkv, D] "
                      "f32|bf16|f16, got [16, 2, 8] f32");
}

TEST_F(AttnFixture, DecodeWrongShape) {
  AttnDecode a = decode();
  a.k_cache = f32(kc, {P, S, Hkv * 2, D / 2});
  EXPECT_HYBRID_ERROR(attn_decode(a, ctx),
                      "[attn_decode] k_cache: expected [num_pages=4, page_size=4, Hkv=4, D=8] "
                      "f32|bf16|f16, got [4, 4, 4, 4] f32");
  a = decode();
  a.v_cache = f32(vc, {P, S, 1, D});
  EXPECT_HYBRID_ERROR(attn_decode(a, ctx),
                      "[attn_decode] v_cache: expected [num_pages=4, page_size=4, Hkv=2, D=8] f32, "
                      "got [4, 4, 1, 8] f32");
  a = decode();
  a.page_table = i32(table, {1, 2});
  EXPECT_HYBRID_ERROR(attn_decode(a, ctx),
                      "[attn_decode] page_table: expected [N=2, max_pages] i32, got [1, 2] i32");
  a = decode();
  a.out = f32(out, {N, Hq, D / 2});
  EXPECT_HYBRID_ERROR(
      attn_decode(a, ctx),
      "[attn_decode] out: expected [N=2, Hq=4, D=8] f32|bf16|f16, got [2, 4, 4] f32");
}

TEST_F(AttnFixture, DecodeWrongDtype) {
  AttnDecode a = decode();
  a.seq_lens = Tensor(lens.data(), DType::f32, Device::cpu(), {N});
  EXPECT_HYBRID_ERROR(attn_decode(a, ctx),
                      "[attn_decode] seq_lens: expected [N=2] i32, got [2] f32");
  a = decode();
  a.v_cache = Tensor(vc.data(), DType::bf16, Device::cpu(), {P, S, Hkv, D});
  EXPECT_HYBRID_ERROR(attn_decode(a, ctx),
                      "[attn_decode] v_cache: expected [num_pages=4, page_size=4, Hkv=2, D=8] f32, "
                      "got [4, 4, 2, 8] bf16");
}

TEST_F(AttnFixture, DecodeWrongStride) {
  AttnDecode a = decode();
  a.q = Tensor(q.data(), DType::f32, Device::cpu(), {N, Hq, D / 2}, {Hq * D, D, 2});
  a.k_cache = f32(kc, {P, S, Hkv, D / 2});
  a.v_cache = f32(vc, {P, S, Hkv, D / 2});
  a.out = f32(out, {N, Hq, D / 2});
  EXPECT_HYBRID_ERROR(attn_decode(a, ctx),
                      "[attn_decode] q: the last dimension must be contiguous");
}

TEST_F(AttnFixture, HqNotAMultipleOfHkv) {
  AttnDecode a = decode();
  a.q = f32(q, {N, 3, D});
  a.out = f32(out, {N, 3, D});
  EXPECT_HYBRID_ERROR(attn_decode(a, ctx), "[attn_decode] Hq=3 must be a multiple of Hkv=2");
}

TEST_F(AttnFixture, NegativeWindow) {
  AttnDecode a = decode();
  a.window = -1;
  EXPECT_HYBRID_ERROR(attn_decode(a, ctx),
                      "[attn_decode] window must be >= 0 (0 = no window), got -1");
}

TEST_F(AttnFixture, NonFiniteScale) {
  AttnDecode a = decode();
  a.scale = std::numeric_limits<float>::quiet_NaN();
  EXPECT_HYBRID_ERROR(attn_decode(a, ctx), "[attn_decode] scale must be finite");
}

TEST_F(AttnFixture, PageTableEntryOutOfRange) {
  table = {0, 1, 2, 4};
  EXPECT_HYBRID_ERROR(attn_decode(decode(), ctx),
                      "[attn_decode] page_table[1, 1]=4 is out of range [0, num_pages=4)");
  table = {-2, 1, 2, 3};
  EXPECT_HYBRID_ERROR(attn_decode(decode(), ctx),
                      "[attn_decode] page_table[0, 0]=-2 is out of range [0, num_pages=4)");
}

TEST_F(AttnFixture, SeqLenAbovePageCapacity) {
  lens = {3, 9};
  EXPECT_HYBRID_ERROR(attn_decode(decode(), ctx),
                      "[attn_decode] seq_lens[1]=9 is out of range: the page table row holds "
                      "max_pages·page_size = 2·4 = 8 positions");
  lens = {-1, 5};
  EXPECT_HYBRID_ERROR(attn_decode(decode(), ctx), "[attn_decode] seq_lens[0]=-1 is out of range");
}

// ---- kv_append --------------------------------------------------------------------------------

TEST_F(AttnFixture, AppendWrongShape) {
  KvAppend a = append();
  a.v = f32(v, {N, Hkv, D / 2});
  EXPECT_HYBRID_ERROR(kv_append(a, ctx),
                      "[kv_append] v: expected [T=2, Hkv=2, D=8] f32|bf16|f16, got [2, 2, 4] f32");
  a = append();
  a.k_cache = f32(kc, {P, S, 1, 2 * D});
  EXPECT_HYBRID_ERROR(kv_append(a, ctx),
                      "[kv_append] k_cache: expected [num_pages=4, page_size=4, Hkv=2, D=8] "
                      "f32|bf16|f16, got [4, 4, 1, 16] f32");
  a = append();
  a.positions = i32(pos, {1});
  EXPECT_HYBRID_ERROR(kv_append(a, ctx), "[kv_append] positions: expected [T=2] i32, got [1] i32");
}

TEST_F(AttnFixture, AppendWithoutCuSeqlensNeedsOneRowPerSequence) {
  KvAppend a = append();
  a.page_table = i32(table, {1, 4});
  EXPECT_HYBRID_ERROR(kv_append(a, ctx),
                      "[kv_append] page_table: expected [N=2, max_pages] i32, got [1, 4] i32");
}

TEST_F(AttnFixture, AppendPositionOutOfRange) {
  pos = {2, 8};
  EXPECT_HYBRID_ERROR(kv_append(append(), ctx),
                      "[kv_append] positions[1]=8 (sequence 1) is out of range: the page table row "
                      "holds max_pages·page_size = 2·4 = 8 positions");
}

TEST_F(AttnFixture, AppendPageTableEntryOutOfRange) {
  table = {0, 1, 9, 3};
  pos = {2, 1};
  EXPECT_HYBRID_ERROR(kv_append(append(), ctx),
                      "[kv_append] page_table[1, 0]=9 is out of range [0, num_pages=4)");
}

TEST_F(AttnFixture, AppendBadCuSeqlens) {
  KvAppend a = append();
  a.cu_seqlens = i32(cu, {N + 1});
  cu = {0, 2, 1};
  EXPECT_HYBRID_ERROR(
      kv_append(a, ctx),
      "[kv_append] cu_seqlens must be non-decreasing: cu_seqlens[2]=1 < cu_seqlens[1]=2");
  cu = {0, 1, 1};
  EXPECT_HYBRID_ERROR(kv_append(a, ctx), "[kv_append] cu_seqlens[N=2]=1 must equal T=2");
  cu = {1, 1, 2};
  EXPECT_HYBRID_ERROR(kv_append(a, ctx), "[kv_append] cu_seqlens[0] must be 0, got 1");
  a.cu_seqlens = Tensor(cu.data(), DType::i64, Device::cpu(), {1});
  EXPECT_HYBRID_ERROR(kv_append(a, ctx),
                      "[kv_append] cu_seqlens: expected [N + 1] i32, got [1] i64");
}

TEST_F(AttnFixture, AppendCacheDtypesMustMatch) {
  KvAppend a = append();
  a.v_cache = Tensor(vc.data(), DType::f16, Device::cpu(), {P, S, Hkv, D});
  EXPECT_HYBRID_ERROR(kv_append(a, ctx),
                      "[kv_append] v_cache: expected [num_pages=4, page_size=4, Hkv=2, D=8] f32, "
                      "got [4, 4, 2, 8] f16");
}

// ---- attn_prefill -----------------------------------------------------------------------------

TEST_F(AttnFixture, PrefillSeqLensMustCountTheNewTokens) {
  AttnPrefill a = prefill();
  a.q = f32(q, {2, Hq, D});
  cu = {0, 0, 2};
  lens = {3, 1};
  EXPECT_HYBRID_ERROR(attn_prefill(a, ctx),
                      "[attn_prefill] seq_lens[1]=1 is less than the 2 new tokens of the sequence");
}

TEST_F(AttnFixture, PrefillCuSeqlensMustEndAtT) {
  cu = {0, 1, 3};
  EXPECT_HYBRID_ERROR(attn_prefill(prefill(), ctx),
                      "[attn_prefill] cu_seqlens[N=2]=3 must equal T=2");
}

TEST_F(AttnFixture, PrefillWrongShape) {
  AttnPrefill a = prefill();
  a.seq_lens = i32(lens, {1});
  EXPECT_HYBRID_ERROR(attn_prefill(a, ctx),
                      "[attn_prefill] seq_lens: expected [N=2] i32, got [1] i32");
  a = prefill();
  a.cu_seqlens = i32(cu, {N, 1});
  EXPECT_HYBRID_ERROR(attn_prefill(a, ctx),
                      "[attn_prefill] cu_seqlens: expected [N + 1] i32, got [2, 1] i32");
}

TEST_F(AttnFixture, PrefillWindowAndPages) {
  AttnPrefill a = prefill();
  a.window = -3;
  EXPECT_HYBRID_ERROR(attn_prefill(a, ctx),
                      "[attn_prefill] window must be >= 0 (0 = no window), got -3");
  a.window = 0;
  table = {0, 1, 2, 7};
  EXPECT_HYBRID_ERROR(attn_prefill(a, ctx),
                      "[attn_prefill] page_table[1, 1]=7 is out of range [0, num_pages=4)");
}

// ---- rope_kv_append_attn_decode -----------------------------------------------------------------

TEST_F(AttnFixture, FusedRotaryDim) {
  RopeKvAppendAttnDecode a = fused();
  a.rotary_dim = 5;
  EXPECT_HYBRID_ERROR(rope_kv_append_attn_decode(a, ctx),
                      "[rope_kv_append_attn_decode] rotary_dim 5 must be even and in [2, D=8]");
  a.rotary_dim = 16;
  EXPECT_HYBRID_ERROR(rope_kv_append_attn_decode(a, ctx),
                      "[rope_kv_append_attn_decode] rotary_dim 16 must be even and in [2, D=8]");
}

TEST_F(AttnFixture, FusedWrongShapes) {
  RopeKvAppendAttnDecode a = fused();
  a.v = f32(v, {N, 1, D});
  EXPECT_HYBRID_ERROR(
      rope_kv_append_attn_decode(a, ctx),
      "[rope_kv_append_attn_decode] v: expected [N=2, Hkv=2, D=8] f32|bf16|f16, got [2, 1, 8] f32");
  a = fused();
  a.k = f32(k, {N, 3, D / 2 + 1});
  EXPECT_HYBRID_ERROR(
      rope_kv_append_attn_decode(a, ctx),
      "[rope_kv_append_attn_decode] k: expected [N=2, Hkv=3, D=8] f32|bf16|f16, got [2, 3, 5] f32");
  a = fused();
  a.k_cache = f32(kc, {P, S, 1, 2 * D});
  a.v_cache = f32(vc, {P, S, 1, 2 * D});
  EXPECT_HYBRID_ERROR(rope_kv_append_attn_decode(a, ctx),
                      "[rope_kv_append_attn_decode] k_cache: expected [num_pages=4, page_size=4, "
                      "Hkv=2, D=8] f32|bf16|f16");
}

TEST_F(AttnFixture, FusedValuesChecked) {
  lens = {3, 9};
  EXPECT_HYBRID_ERROR(rope_kv_append_attn_decode(fused(), ctx),
                      "[rope_kv_append_attn_decode] seq_lens[1]=9 is out of range");
  lens = {3, 5};
  table = {0, 1, 2, -1};
  EXPECT_HYBRID_ERROR(
      rope_kv_append_attn_decode(fused(), ctx),
      "[rope_kv_append_attn_decode] page_table[1, 1]=-1 is out of range [0, num_pages=4)");
}
