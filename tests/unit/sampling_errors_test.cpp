// Bad input to argmax: each error names the op, the argument and what was wrong; a valid call
// picks the first maximum and marks rows Sampler refuses with -1.
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
