#include "hybrid/core/dtype.h"

#include <cmath>

#include "hybrid/core/error.h"

namespace hybrid {

uint16_t f16_from_f32(float f) {
  const uint32_t u = f32_bits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return static_cast<uint16_t>(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));
  if (abs == 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u);
  const int exp = static_cast<int>(abs >> 23) - 127;           // unbiased exponent of f
  if (exp > 15) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf (before rounding)
  uint32_t mant = (abs & 0x7fffffu) | (abs >= 0x00800000u ? 0x800000u : 0u);  // 24-bit significand
  int shift;           // how many low bits of `mant` are dropped
  uint32_t exp_field;  // f16 biased exponent before rounding carry
  if (exp >= -14) {    // normal f16
    shift = 13;
    exp_field = static_cast<uint32_t>(exp + 15);
  } else {  // subnormal f16 (or underflow to zero)
    shift = 13 + (-14 - exp);
    exp_field = 0;
    if (shift > 24) return sign;  // below half the smallest subnormal
  }
  uint32_t kept = mant >> shift;
  const uint32_t rest = mant & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  if (rest > half || (rest == half && (kept & 1u))) kept += 1;  // round to nearest even
  // `kept` carries the implicit bit for normals (bit 10); adding the exponent field positions it.
  uint32_t result;
  if (exp_field == 0) {
    result = kept;  // subnormal; a carry into bit 10 becomes the smallest normal, as it should
  } else {
    result = ((exp_field) << 10) + (kept - 0x400u);  // kept in [0x400, 0x800]; carry bumps exp
  }
  if (result >= 0x7c00u) result = 0x7c00u;  // rounded up to inf
  return static_cast<uint16_t>(sign | result);
}

float f32_from_f16(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    // zero or subnormal: mant * 2^-24, exact in f32
    const float v = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -v : v;
  }
  if (exp == 31) return f32_from_bits(sign | 0x7f800000u | (mant << 13));
  return f32_from_bits(sign | ((exp + 112u) << 23) | (mant << 13));
}

double load_element(const void* base, DType t, int64_t i) {
  switch (t) {
    case DType::f32:
      return static_cast<const float*>(base)[i];
    case DType::f16:
      return f32_from_f16(static_cast<const uint16_t*>(base)[i]);
    case DType::bf16:
      return f32_from_bf16(static_cast<const uint16_t*>(base)[i]);
    case DType::i32:
      return static_cast<const int32_t*>(base)[i];
    case DType::i64:
      return static_cast<double>(static_cast<const int64_t*>(base)[i]);
    case DType::u8:
      return static_cast<const uint8_t*>(base)[i];
    case DType::u32:
      return static_cast<const uint32_t*>(base)[i];
    case DType::f64:
      return static_cast<const double*>(base)[i];
  }
  fail("[dtype] unknown dtype ", static_cast<int>(t));
}

void store_element(void* base, DType t, int64_t i, double value) {
  switch (t) {
    case DType::f32:
      static_cast<float*>(base)[i] = static_cast<float>(value);
      return;
    case DType::f16:
      static_cast<uint16_t*>(base)[i] = f16_from_f32(static_cast<float>(value));
      return;
    case DType::bf16:
      static_cast<uint16_t*>(base)[i] = bf16_from_f32(static_cast<float>(value));
      return;
    case DType::i32:
      static_cast<int32_t*>(base)[i] = static_cast<int32_t>(value);
      return;
    case DType::i64:
      static_cast<int64_t*>(base)[i] = static_cast<int64_t>(value);
      return;
    case DType::u8:
      static_cast<uint8_t*>(base)[i] = static_cast<uint8_t>(value);
      return;
    case DType::u32:
      static_cast<uint32_t*>(base)[i] = static_cast<uint32_t>(value);
      return;
    case DType::f64:
      static_cast<double*>(base)[i] = value;
      return;
  }
  fail("[dtype] unknown dtype ", static_cast<int>(t));
}

}  // namespace hybrid
