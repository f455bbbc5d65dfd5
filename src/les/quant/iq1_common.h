// IQ1_S / IQ1_M helpers shared by the scalar reference (iq1_ref.cpp) and the SIMD kernels
// (kernels_iq1_<isa>.cpp): field extraction and the signed grid the SIMD dot products multiply.
// Internal: include only from src/les/quant/*.cpp and tests.
//
// Functions are `static inline` (as in quant_common.h): files compiled with ISA flags include
// this header, and each file must keep its own copy.
#pragma once

#include <cstdint>
#include <cstring>

#include "les/quant/blocks.h"

namespace les {

// The signed grid: entry (s << 11) | i (s = delta sign bit, i = kIq1sGrid index) holds the 8 bytes
// 8 * kIq1sGrid[i][k] + (s ? -1 : +1), i.e. 8 * (grid + delta) with delta = -+1/8 as an integer
// in {-9, -7, -1, 1, 7, 9}. A sub-block dot with it is 8 * (grid dot + delta * sum of the
// activations), exactly; the IQ1 vec_dots need nothing else per element. Built once, on first
// use (thread-safe); 4096 entries, 32 KiB.
const uint64_t* iq1_signed_grid();

// IQ1_S: the 12-bit signed-grid index of group l (0..3) of sub-block ib: 8 low bits from qs,
// 3 high bits from qh[ib] (bits 3l..3l+2), the delta sign from bit 15.
static inline uint32_t iq1s_signed_index(const uint8_t* qs, uint16_t qh, int l) {
  return qs[l] | (((qh >> (3 * l)) & 7u) << 8) | ((qh >> 15) << 11);
}
// IQ1_S: the scale multiplier 2 * ls + 1 (1..15) of a sub-block.
static inline int iq1s_scale(uint16_t qh) { return 2 * ((qh >> 12) & 7) + 1; }

// IQ1_M: the 12-bit signed-grid index of group l (0..3) of sub-block ib, whose qh bytes are
// qh[0], qh[1]: a nibble of qh (low nibble for even l) holds 3 high index bits and the sign.
static inline uint32_t iq1m_signed_index(const uint8_t* qs, const uint8_t* qh, int l) {
  return qs[l] | (((static_cast<uint32_t>(qh[l / 2]) >> (4 * (l % 2))) & 15u) << 8);
}
// IQ1_M: the four scale words of a block (little-endian uint16s).
static inline void iq1m_scale_words(const uint8_t* scales, uint16_t sc[4]) {
  for (int k = 0; k < 4; ++k) sc[k] = static_cast<uint16_t>(scales[2 * k] | (scales[2 * k + 1] << 8));
}
// IQ1_M: the fp16 super-scale bits, spread over the top nibbles of the scale words.
static inline uint16_t iq1m_d_bits(const uint16_t sc[4]) {
  return static_cast<uint16_t>((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000));
}
// IQ1_M: the scale multiplier 2 * ls + 1 (1..15) of group pair h (0..15, 16 elements each).
static inline int iq1m_scale(const uint16_t sc[4], int h) { return 2 * ((sc[h / 4] >> (3 * (h % 4))) & 7) + 1; }

}  // namespace les
