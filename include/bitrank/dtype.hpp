// Storage dtypes and the f16 / bf16 conversions.
//
// f16 and bf16 are 16-bit storage types (no arithmetic): convert to f32,
// compute, convert back. f32 → f16/bf16 rounds to nearest, ties to even;
// subnormals, ±inf and NaN are handled exactly (NaN stays NaN, keeping the
// sign and the top mantissa bits, quietened). f16/bf16 → f32 is exact.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

namespace bitrank {

enum class DType : std::uint8_t { f32, f16, bf16, u32, f64 };

std::string_view dtype_name(DType t);
std::size_t dtype_size(DType t);

struct f16 {
  std::uint16_t bits = 0;
};
struct bf16 {
  std::uint16_t bits = 0;
};

inline std::uint32_t f32_bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float f32_from_bits(std::uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// f32 → f16, round to nearest even.
inline f16 to_f16(float f) {
  const std::uint32_t x = f32_bits(f);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const std::uint32_t exp = (x >> 23) & 0xffu;
  std::uint32_t man = x & 0x7fffffu;
  if (exp == 0xffu) {  // inf or NaN: NaN keeps its top payload bits and is made quiet
    if (man == 0) return f16{static_cast<std::uint16_t>(sign | 0x7c00u)};
    return f16{static_cast<std::uint16_t>(sign | 0x7e00u | (man >> 13))};
  }
  const int e = static_cast<int>(exp) - 127 + 15;  // rebiased exponent
  if (e >= 31) return f16{static_cast<std::uint16_t>(sign | 0x7c00u)};  // overflow → inf
  if (e <= 0) {  // f16 subnormal or zero
    if (e < -10) return f16{static_cast<std::uint16_t>(sign)};  // below half the smallest subnormal
    man |= 0x800000u;                                          // implicit bit
    const int shift = 14 - e;                                  // 14..24
    std::uint32_t half = man >> shift;
    const std::uint32_t rem = man & ((1u << shift) - 1u);
    const std::uint32_t mid = 1u << (shift - 1);
    if (rem > mid || (rem == mid && (half & 1u))) ++half;  // may carry into the smallest normal: correct
    return f16{static_cast<std::uint16_t>(sign | half)};
  }
  std::uint32_t half = (static_cast<std::uint32_t>(e) << 10) | (man >> 13);
  const std::uint32_t rem = man & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) ++half;  // a carry may round up to inf: correct
  return f16{static_cast<std::uint16_t>(sign | half)};
}

// f16 → f32, exact.
inline float to_f32(f16 h) {
  const std::uint32_t sign = (static_cast<std::uint32_t>(h.bits) & 0x8000u) << 16;
  const std::uint32_t exp = (h.bits >> 10) & 0x1fu;
  std::uint32_t man = h.bits & 0x3ffu;
  if (exp == 0x1fu) return f32_from_bits(sign | 0x7f800000u | (man << 13));
  if (exp == 0) {
    if (man == 0) return f32_from_bits(sign);
    int e = -1;  // normalise the subnormal
    do {
      ++e;
      man <<= 1;
    } while ((man & 0x400u) == 0);
    return f32_from_bits(sign | (static_cast<std::uint32_t>(127 - 15 - e) << 23) | ((man & 0x3ffu) << 13));
  }
  return f32_from_bits(sign | ((exp + 127 - 15) << 23) | (man << 13));
}

// f32 → bf16, round to nearest even; NaN stays a quiet NaN.
inline bf16 to_bf16(float f) {
  const std::uint32_t x = f32_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return bf16{static_cast<std::uint16_t>((x >> 16) | 0x40u)};
  const std::uint32_t lsb = (x >> 16) & 1u;
  return bf16{static_cast<std::uint16_t>((x + 0x7fffu + lsb) >> 16)};
}

inline float to_f32(bf16 b) { return f32_from_bits(static_cast<std::uint32_t>(b.bits) << 16); }

// The value f rounds to in f16, as f32 (what an f16 operand holds).
inline float round_f16(float f) { return to_f32(to_f16(f)); }

}  // namespace bitrank
