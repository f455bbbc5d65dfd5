// The operand interleave of the i8mm (SMMLA) tiles, shared by the three ARM kernel families: SMMLA
// takes two rows of 8 bytes per operand, so two rows' 16 bytes become their first halves (zip_lo)
// and their second halves (zip_hi). Include only from a file compiled with +i8mm.
#pragma once

#include <arm_neon.h>

namespace les {
namespace {

inline int8x16_t zip_lo(int8x16_t x, int8x16_t y) {
  return vreinterpretq_s8_s64(vzip1q_s64(vreinterpretq_s64_s8(x), vreinterpretq_s64_s8(y)));
}
inline int8x16_t zip_hi(int8x16_t x, int8x16_t y) {
  return vreinterpretq_s8_s64(vzip2q_s64(vreinterpretq_s64_s8(x), vreinterpretq_s64_s8(y)));
}
inline uint8x16_t zip_lo(uint8x16_t x, uint8x16_t y) {
  return vreinterpretq_u8_u64(vzip1q_u64(vreinterpretq_u64_u8(x), vreinterpretq_u64_u8(y)));
}
inline uint8x16_t zip_hi(uint8x16_t x, uint8x16_t y) {
  return vreinterpretq_u8_u64(vzip2q_u64(vreinterpretq_u64_u8(x), vreinterpretq_u64_u8(y)));
}

}  // namespace
}  // namespace les
