// IEEE binary16 and bfloat16 conversions, exact and portable (no ISA assumptions).
// Rounding: round-to-nearest-even for both, as llama.cpp's reference conversions do.
#pragma once

#include <cstdint>
#include <cstring>

namespace les {

inline uint32_t f32_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float bits_f32(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

inline float fp16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    if (mant == 0) return bits_f32(sign);
    // subnormal: normalise
    int e = -1;
    do { mant <<= 1; ++e; } while ((mant & 0x400u) == 0);
    mant &= 0x3ffu;
    return bits_f32(sign | (static_cast<uint32_t>(112 - e) << 23) | (mant << 13));
  }
  if (exp == 31) return bits_f32(sign | 0x7f800000u | (mant << 13));
  return bits_f32(sign | ((exp + 112) << 23) | (mant << 13));
}

inline uint16_t f32_to_fp16(float f) {
  const uint32_t x = f32_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) {  // inf or nan
    return static_cast<uint16_t>(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0u));
  }
  if (absx >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (absx < 0x38800000u) {  // subnormal or zero in half
    if (absx < 0x33000000u) return static_cast<uint16_t>(sign);  // < half of smallest subnormal
    const uint32_t e = absx >> 23;
    const uint32_t m = (absx & 0x7fffffu) | 0x800000u;
    // exact: value = m * 2^(e-150); half subnormal unit = 2^-24 -> q = m * 2^(e-126)
    const uint32_t sh = 126 - e;  // >= 1
    uint32_t q = m >> sh;
    const uint32_t rem = m & ((1u << sh) - 1u);
    const uint32_t halfway = 1u << (sh - 1);
    if (rem > halfway || (rem == halfway && (q & 1u))) ++q;
    return static_cast<uint16_t>(sign | q);
  }
  // normal
  uint32_t h = ((absx >> 13) - (112u << 10));
  const uint32_t rem = absx & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

inline float bf16_to_f32(uint16_t b) { return bits_f32(static_cast<uint32_t>(b) << 16); }

inline uint16_t f32_to_bf16(float f) {
  uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 64u);  // quiet nan
  return static_cast<uint16_t>((u + (0x7fffu + ((u >> 16) & 1u))) >> 16);
}

// Round-trip through half precision: what llama.cpp does to activations before an F16 product.
inline float round_fp16(float f) { return fp16_to_f32(f32_to_fp16(f)); }

}  // namespace les
