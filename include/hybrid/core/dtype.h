// Element types and exact conversions between them.
//
// bf16 = the top 16 bits of an IEEE f32 (1 sign, 8 exponent, 7 mantissa); f32 -> bf16 rounds to
// nearest, ties to even, and keeps NaN a (quiet) NaN. f16 = IEEE binary16 (1, 5, 10) with
// subnormals; f32 -> f16 rounds to nearest-even, overflows to inf.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace hybrid {

// f64 serves host-precision results of a few ops (softmax_mass); no op computes in it, no
// checkpoint tensor loads as it (safetensors' F64 is refused).
enum class DType : uint8_t { f32, f16, bf16, i32, i64, u8, u32, f64 };

constexpr size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32:
      return 4;
    case DType::f16:
      return 2;
    case DType::bf16:
      return 2;
    case DType::i32:
      return 4;
    case DType::i64:
      return 8;
    case DType::u8:
      return 1;
    case DType::u32:
      return 4;
    case DType::f64:
      return 8;
  }
  return 0;
}

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::f32:
      return "f32";
    case DType::f16:
      return "f16";
    case DType::bf16:
      return "bf16";
    case DType::i32:
      return "i32";
    case DType::i64:
      return "i64";
    case DType::u8:
      return "u8";
    case DType::u32:
      return "u32";
    case DType::f64:
      return "f64";
  }
  return "?";
}

constexpr bool dtype_is_float(DType t) {
  return t == DType::f32 || t == DType::f16 || t == DType::bf16;
}

inline uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float f32_from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// f32 -> bf16, round to nearest even; NaN stays NaN (quiet bit set).
inline uint16_t bf16_from_f32(float f) {
  uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  uint32_t rounding_bias = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding_bias) >> 16);
}
inline float f32_from_bf16(uint16_t h) {
  return f32_from_bits(static_cast<uint32_t>(h) << 16);
}

// f32 -> f16 (IEEE binary16), round to nearest even, with subnormals and overflow to inf.
uint16_t f16_from_f32(float f);
// f16 -> f32, exact (every f16 value, subnormals included, is an f32 value).
float f32_from_f16(uint16_t h);

// Storage types with the conversions above; usable as element types of host tensors.
struct bf16_t {
  uint16_t bits = 0;
  bf16_t() = default;
  explicit bf16_t(float f) : bits(bf16_from_f32(f)) {}
  explicit operator float() const { return f32_from_bf16(bits); }
};
struct f16_t {
  uint16_t bits = 0;
  f16_t() = default;
  explicit f16_t(float f) : bits(f16_from_f32(f)) {}
  explicit operator float() const { return f32_from_f16(bits); }
};

// Reads element `i` of a host array of dtype `t` as a double (integers converted exactly up to
// 2^53); writes a double into one, rounding as the conversions above do.
double load_element(const void* base, DType t, int64_t i);
void store_element(void* base, DType t, int64_t i, double value);

}  // namespace hybrid
