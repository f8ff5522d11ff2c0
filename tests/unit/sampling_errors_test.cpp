// Bad input to the sampling ops (argmax, top_k, sample_rows, softmax_mass, repetition_penalty):
// each error names the op, the argument and what was wrong; valid calls give Sampler's choice
// (argmax: the first maximum, -1 for rows Sampler refuses; top_k: the k largest in order).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "expect_error.h"
#include "hybrid/ops/sampling.h"

using namespace hybrid;

namespace {
// x [N=3, V=5] f32, out [3] i32.
struct ArgmaxFixture : ::testing::Test {
  std::vector<float> x = {1,         7,         3,         7,         0,   // tie: id 1
                          -INFINITY, -INFINITY, -INFINITY, -INFINITY, -2,  // id 4
                          0,         NAN,       5,         1,         1};  // NaN: -1
  std::vector<int32_t> out = std::vector<int32_t>(3, 99);
  std::vector<int64_t> out64 = std::vector<int64_t>(3, 99);
  Context ctx;
  Argmax args() {
    Argmax a;
    a.x = Tensor(x.data(), DType::f32, Device::cpu(), {3, 5});
    a.out = Tensor(out.data(), DType::i32, Device::cpu(), {3});
    return a;
  }
};
}  // namespace

TEST_F(ArgmaxFixture, ValidCallPicksTheFirstMaximum) {
  argmax(args(), ctx);
  EXPECT_EQ(out, (std::vector<int32_t>{1, 4, -1}));
}

TEST_F(ArgmaxFixture, BadArgumentsNameTheProblem) {
  Argmax a = args();
  a.out = Tensor(out.data(), DType::i32, Device::cpu(), {2});
  EXPECT_HYBRID_ERROR(argmax(a, ctx), "[argmax] out");
  a = args();
  a.out = Tensor(out64.data(), DType::i64, Device::cpu(), {3});
  EXPECT_HYBRID_ERROR(argmax(a, ctx), "[argmax] out");
  a = args();
  a.x = Tensor(x.data(), DType::f32, Device::cpu(), {15});
  EXPECT_HYBRID_ERROR(argmax(a, ctx), "[argmax] x");
  a = args();
  a.x = Tensor(x.data(), DType::f32, Device::cpu(), {3, 0});
  EXPECT_HYBRID_ERROR(argmax(a, ctx), "V = 0");
  a = args();
  a.x = Tensor(x.data(), DType::i32, Device::cpu(), {3, 5});
  EXPECT_HYBRID_ERROR(argmax(a, ctx), "[argmax] x");
  EXPECT_EQ(out, std::vector<int32_t>(3, 99)) << "a refused call writes nothing";
}

TEST_F(ArgmaxFixture, TopKOrdersByValueThenId) {
  std::vector<int32_t> ids(3 * 2, 99);
  std::vector<float> values(3 * 2, 99.0f);
  TopK a{.x = Tensor(x.data(), DType::f32, Device::cpu(), {3, 5}),
         .ids = Tensor(ids.data(), DType::i32, Device::cpu(), {3, 2}),
         .values = Tensor(values.data(), DType::f32, Device::cpu(), {3, 2})};
  top_k(a, ctx);
  // Row 0: 7 at ids 1 and 3 (lower first); row 1: -2, then the first -inf; row 2: NaN first.
  EXPECT_EQ(ids, (std::vector<int32_t>{1, 3, 4, 0, 1, 2}));
  EXPECT_EQ(values[0], 7.0f);
  EXPECT_EQ(values[3], -INFINITY);
  EXPECT_TRUE(std::isnan(values[4]));
  EXPECT_EQ(values[5], 5.0f);
}

TEST_F(ArgmaxFixture, TopKBadArgumentsNameTheProblem) {
  std::vector<int32_t> ids(3 * 6, 99);
  std::vector<float> values(3 * 6, 99.0f);
  auto args_k = [&](int64_t k) {
    return TopK{.x = Tensor(x.data(), DType::f32, Device::cpu(), {3, 5}),
                .ids = Tensor(ids.data(), DType::i32, Device::cpu(), {3, k}),
                .values = Tensor(values.data(), DType::f32, Device::cpu(), {3, k})};
  };
  EXPECT_HYBRID_ERROR(top_k(args_k(6), ctx), "[top_k] k (ids' columns) must be in [1, V=5], got 6");
  TopK a = args_k(2);
  a.values = Tensor(values.data(), DType::f32, Device::cpu(), {3, 3});
  EXPECT_HYBRID_ERROR(top_k(a, ctx), "[top_k] values: expected [N=3, k=2] f32, got [3, 3] f32");
  a = args_k(2);
  a.ids = Tensor(ids.data(), DType::i64, Device::cpu(), {3, 1});
  EXPECT_HYBRID_ERROR(top_k(a, ctx), "[top_k] ids");
  a = args_k(2);
  a.x = Tensor(x.data(), DType::i32, Device::cpu(), {3, 5});
  EXPECT_HYBRID_ERROR(top_k(a, ctx), "[top_k] x");
  EXPECT_EQ(ids, std::vector<int32_t>(3 * 6, 99)) << "a refused call writes nothing";
}

TEST_F(ArgmaxFixture, SoftmaxMassSumsAndNamesBadArguments) {
  // Row 0 at T 1: Σ e^(x - 7) = e^-6 + 1 + e^-4 + 1 + e^-7; at T 2 the exponents halve. Row 1:
  // only id 4 is finite (mass 1). Row 2 has a NaN: NaN.
  std::vector<double> mass(3, -1.0);
  SoftmaxMass a{.x = Tensor(x.data(), DType::f32, Device::cpu(), {3, 5}),
                .out = Tensor(mass.data(), DType::f64, Device::cpu(), {3}),
                .temperature = 1.0f};
  softmax_mass(a, ctx);
  EXPECT_DOUBLE_EQ(mass[0], std::exp(-6.0) + 1 + std::exp(-4.0) + 1 + std::exp(-7.0));
  EXPECT_DOUBLE_EQ(mass[1], 1.0);
  EXPECT_TRUE(std::isnan(mass[2]));
  a.temperature = 2.0f;
  softmax_mass(a, ctx);
  EXPECT_DOUBLE_EQ(mass[0], std::exp(-3.0) + 1 + std::exp(-2.0) + 1 + std::exp(-3.5));
  SoftmaxMass b = a;
  b.temperature = -1.0f;
  EXPECT_HYBRID_ERROR(softmax_mass(b, ctx), "[softmax_mass] temperature must be positive, got -1");
  b = a;
  b.out = Tensor(out.data(), DType::i32, Device::cpu(), {3});
  EXPECT_HYBRID_ERROR(softmax_mass(b, ctx), "[softmax_mass] out");
  b = a;
  b.out = Tensor(mass.data(), DType::f64, Device::cpu(), {2});
  EXPECT_HYBRID_ERROR(softmax_mass(b, ctx), "[softmax_mass] out");
}

TEST_F(ArgmaxFixture, SampleRowsDrawsAndNamesBadArguments) {
  // Row 0 at T 1: w = e^(x - 7) over ids 0..4 = {e^-6, 1, e^-4, 1, e^-7}; u = 0 takes id 0, u
  // just under 1 the last kept id (4). Row 1: only id 4 is finite. Row 2 has a NaN: -1.
  std::vector<int64_t> draws = {0, (int64_t{1} << 53) - 1, 0};
  SampleRows a{.x = Tensor(x.data(), DType::f32, Device::cpu(), {3, 5}),
               .draws = Tensor(draws.data(), DType::i64, Device::cpu(), {3}),
               .out = Tensor(out.data(), DType::i32, Device::cpu(), {3}),
               .temperature = 1.0f};
  sample_rows(a, ctx);
  EXPECT_EQ(out, (std::vector<int32_t>{0, 4, -1}));
  a.min_p = 0.5f;  // keeps ids 1 and 3 of row 0
  sample_rows(a, ctx);
  EXPECT_EQ(out[0], 1);
  SampleRows b = a;
  b.temperature = 0.0f;
  EXPECT_HYBRID_ERROR(sample_rows(b, ctx), "[sample_rows] temperature must be positive, got 0");
  b = a;
  b.min_p = 1.0f;
  EXPECT_HYBRID_ERROR(sample_rows(b, ctx), "[sample_rows] min_p must be in [0, 1), got 1");
  b = a;
  b.draws = Tensor(out.data(), DType::i32, Device::cpu(), {3});
  EXPECT_HYBRID_ERROR(sample_rows(b, ctx), "[sample_rows] draws");
}

TEST_F(ArgmaxFixture, RepetitionPenaltyNamesBadArguments) {
  std::vector<int32_t> ids = {1, 4, 0, 0, 2, 9}, counts = {2, 1, 0};
  RepetitionPenalty a{.x = Tensor(x.data(), DType::f32, Device::cpu(), {3, 5}),
                      .ids = Tensor(ids.data(), DType::i32, Device::cpu(), {3, 2}),
                      .counts = Tensor(counts.data(), DType::i32, Device::cpu(), {3}),
                      .penalty = 2.0f};
  repetition_penalty(a, ctx);
  EXPECT_EQ(x[1], 3.5f);       // 7 / 2
  EXPECT_EQ(x[4], 0.0f);       // 0 · 2
  EXPECT_EQ(x[5], -INFINITY);  // row 1, id 0: -inf · 2
  EXPECT_EQ(x[12], 5.0f);      // row 2: no ids
  counts = {2, 2, 3};
  EXPECT_HYBRID_ERROR(repetition_penalty(a, ctx),
                      "[repetition_penalty] counts[2] = 3 outside [0, H=2]");
  counts = {2, 1, 2};
  EXPECT_HYBRID_ERROR(repetition_penalty(a, ctx),
                      "[repetition_penalty] ids[2, 1] = 9 outside [0, V=5)");
  counts = {2, 1, 1};
  ids[4] = 5;
  EXPECT_HYBRID_ERROR(repetition_penalty(a, ctx),
                      "[repetition_penalty] ids[2, 0] = 5 outside [0, V=5)");
  a.penalty = 0.0f;
  EXPECT_HYBRID_ERROR(repetition_penalty(a, ctx),
                      "[repetition_penalty] penalty must be positive, got 0");
}
