// Field access of the IQ3_XXS / IQ3_S blocks shared by the scalar reference (iq3_ref.cpp) and the
// SIMD kernels (kernels_iq3_<isa>.cpp). Internal: include only from src/les/quant/*.cpp and tests.
// static inline for the reason given in quant_common.h (files built with ISA flags include it).
#pragma once

#include <cstdint>
#include <cstring>

#include "les/quant/blocks.h"

namespace les {

// IQ3_XXS: the uint32 of sub-block ib (0..7) after the 64 grid indices of qs: four 7-bit sign
// codes (bits 7g..7g+6 for elements 8g..8g+7 of the sub-block) and the scale ls in bits 28..31.
static inline uint32_t iq3xxs_signs_scale(const uint8_t* qs, int ib) {
  uint32_t v;
  std::memcpy(&v, qs + QK_K / 4 + 4 * ib, 4);
  return v;
}

// IQ3_S: scale ls (0..15) of sub-block ib.
static inline int iq3s_scale(const uint8_t* scales, int ib) { return (scales[ib / 2] >> (4 * (ib % 2))) & 15; }

// IQ3_S: 9-bit codebook index of group g (0..7, elements 4g..4g+3) of sub-block ib: low 8 bits in
// qs[8 ib + g], the 9th in bit g of qh[ib].
static inline int iq3s_index(const uint8_t* qs, const uint8_t* qh, int ib, int g) {
  return qs[8 * ib + g] | (((qh[ib] >> g) & 1) << 8);
}

}  // namespace les
