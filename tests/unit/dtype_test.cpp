// DType conversions, bit for bit, against oracles built from the definitions in double precision.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "hybrid/core/dtype.h"

using namespace hybrid;

namespace {

// Nearest representable value among `grid` (sorted ascending, finite, non-negative, with the bit
// patterns in `bits`), ties to the even pattern. Returns the pattern.
uint16_t nearest_even(double x, const std::vector<double>& grid,
                      const std::vector<uint16_t>& bits) {
  auto it = std::lower_bound(grid.begin(), grid.end(), x);
  if (it == grid.begin()) return bits.front();
  if (it == grid.end()) return bits.back();
  size_t hi = it - grid.begin(), lo = hi - 1;
  const double dlo = x - grid[lo], dhi = grid[hi] - x;
  if (dlo < dhi) return bits[lo];
  if (dhi < dlo) return bits[hi];
  return (bits[lo] & 1) ? bits[hi] : bits[lo];
}

struct Grid {
  std::vector<double> values;
  std::vector<uint16_t> bits;
};

// Every finite non-negative value of a 16-bit float format, plus max + ulp (the value the exponent
// would reach if it were unbounded) carrying the pattern of inf: so values from halfway between max
// and max + ulp up (the tie goes to the even pattern, inf) round to inf.
Grid positive_grid(float (*to_f32)(uint16_t), uint16_t inf_bits, double past_max) {
  Grid g;
  for (uint32_t b = 0; b < inf_bits; ++b) {
    g.values.push_back(to_f32(static_cast<uint16_t>(b)));
    g.bits.push_back(static_cast<uint16_t>(b));
  }
  g.values.push_back(past_max);
  g.bits.push_back(inf_bits);
  return g;
}

uint16_t oracle_round(float f, const Grid& g) {
  const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
  const double a = std::fabs(static_cast<double>(f));
  return sign | nearest_even(a, g.values, g.bits);
}

float f16_value(uint16_t h) {  // the definition: (-1)^s · 2^(e-15) · (1 + m/1024), or subnormal
  const int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
  double v = e == 0 ? std::ldexp(m, -24) : std::ldexp(1024 + m, e - 25);
  return static_cast<float>(s ? -v : v);
}

std::vector<float> test_floats() {
  std::vector<float> v = {0.0f,
                          -0.0f,
                          1.0f,
                          -1.0f,
                          0.1f,
                          65504.0f,
                          65519.99f,
                          65520.0f,
                          1e-8f,
                          5.9604645e-8f,
                          2.9802322e-8f,
                          2.98023259e-8f,
                          6.1035156e-5f,
                          3.0e38f,
                          std::numeric_limits<float>::max(),
                          std::numeric_limits<float>::denorm_min(),
                          std::numeric_limits<float>::min()};
  std::mt19937 gen(1234);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 200000; ++i) {
    uint32_t u = bits(gen);
    if ((u & 0x7f800000u) == 0x7f800000u) continue;  // inf / NaN are tested separately
    v.push_back(f32_from_bits(u));
  }
  // Values near the f16 range, where rounding is interesting.
  std::uniform_real_distribution<float> small(-70000.0f, 70000.0f), tiny(-1e-4f, 1e-4f);
  for (int i = 0; i < 100000; ++i) v.push_back(small(gen)), v.push_back(tiny(gen));
  // Exact ties: for bf16, the halfway points between neighbours.
  for (uint32_t hi = 0x3f80; hi < 0x3f90; ++hi) v.push_back(f32_from_bits((hi << 16) | 0x8000u));
  return v;
}

}  // namespace

TEST(DType, SizesAndNames) {
  EXPECT_EQ(dtype_size(DType::f32), 4u);
  EXPECT_EQ(dtype_size(DType::bf16), 2u);
  EXPECT_EQ(dtype_size(DType::f16), 2u);
  EXPECT_EQ(dtype_size(DType::i64), 8u);
  EXPECT_EQ(dtype_size(DType::u8), 1u);
  EXPECT_EQ(dtype_name(DType::bf16), "bf16");
  EXPECT_EQ(dtype_name(DType::u32), "u32");
}

TEST(DType, Bf16ToF32IsTheTopHalf) {
  for (uint32_t b = 0; b < 65536; ++b)
    EXPECT_EQ(f32_bits(f32_from_bf16(static_cast<uint16_t>(b))), b << 16);
}

TEST(DType, F32ToBf16RoundsToNearestEven) {
  const Grid g = positive_grid(f32_from_bf16, 0x7f80,
                               /* max bf16 + ulp */ std::ldexp(1.0, 128));
  for (float f : test_floats()) ASSERT_EQ(bf16_from_f32(f), oracle_round(f, g)) << "f = " << f;
  EXPECT_EQ(bf16_from_f32(f32_from_bits(0x3f808000u)), 0x3f80);  // tie -> even (down)
  EXPECT_EQ(bf16_from_f32(f32_from_bits(0x3f818000u)), 0x3f82);  // tie -> even (up)
  EXPECT_EQ(bf16_from_f32(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_EQ(bf16_from_f32(-std::numeric_limits<float>::infinity()), 0xff80);
  const uint16_t nan = bf16_from_f32(std::numeric_limits<float>::quiet_NaN());
  EXPECT_TRUE(std::isnan(f32_from_bf16(nan)));
  EXPECT_TRUE(std::isnan(
      f32_from_bf16(bf16_from_f32(f32_from_bits(0x7f800001u)))));  // signalling NaN stays NaN
}

TEST(DType, F16ToF32IsExactForEveryPattern) {
  for (uint32_t b = 0; b < 65536; ++b) {
    const uint16_t h = static_cast<uint16_t>(b);
    const float f = f32_from_f16(h);
    if (((h >> 10) & 31) == 31) {
      EXPECT_EQ((h & 1023) != 0, std::isnan(f)) << std::hex << b;
      if ((h & 1023) == 0) {
        EXPECT_TRUE(std::isinf(f));
      }
      continue;
    }
    ASSERT_EQ(f32_bits(f), f32_bits(f16_value(h))) << std::hex << b;
    ASSERT_EQ(f16_from_f32(f), h) << "round trip of " << std::hex << b;
  }
}

TEST(DType, F32ToF16RoundsToNearestEvenWithSubnormals) {
  const Grid g = positive_grid(f32_from_f16, 0x7c00, 65536.0);  // 65504 + ulp (32)
  for (float f : test_floats()) ASSERT_EQ(f16_from_f32(f), oracle_round(f, g)) << "f = " << f;
  EXPECT_EQ(f16_from_f32(65519.0f), 0x7bff);
  EXPECT_EQ(f16_from_f32(65520.0f), 0x7c00);       // tie at the top rounds to inf
  EXPECT_EQ(f16_from_f32(5.9604645e-8f), 0x0001);  // smallest subnormal
  EXPECT_EQ(f16_from_f32(2.9802322e-8f), 0x0000);  // exactly half of it: tie to even (zero)
  EXPECT_EQ(f16_from_f32(-std::numeric_limits<float>::infinity()), 0xfc00);
  EXPECT_TRUE(std::isnan(f32_from_f16(f16_from_f32(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(DType, LoadStoreElement) {
  uint16_t h[2];
  store_element(h, DType::bf16, 1, 1.5);
  EXPECT_EQ(h[1], 0x3fc0);
  EXPECT_EQ(load_element(h, DType::bf16, 1), 1.5);
  int64_t big[1];
  store_element(big, DType::i64, 0, 4294967296.0);
  EXPECT_EQ(big[0], 4294967296LL);
  uint32_t u[1];
  store_element(u, DType::u32, 0, 4000000000.0);
  EXPECT_EQ(load_element(u, DType::u32, 0), 4000000000.0);
}

// f64 (softmax_mass's output): 8 bytes, named "f64", not a compute float type, and elements
// stored and loaded without rounding.
TEST(DTypeF64, StoresAndLoadsExactly) {
  EXPECT_EQ(dtype_size(DType::f64), 8u);
  EXPECT_EQ(dtype_name(DType::f64), "f64");
  EXPECT_FALSE(dtype_is_float(DType::f64));
  double v[2] = {0, 0};
  const double x = 1.0 + std::ldexp(1.0, -50);  // not representable in f32
  store_element(v, DType::f64, 1, x);
  EXPECT_EQ(v[1], x);
  EXPECT_EQ(load_element(v, DType::f64, 1), x);
}
