// Field access shared by the IQ2_XXS / IQ2_XS / IQ2_S kernels (scalar and SIMD) and quantizers.
// Internal: include only from src/les/quant/*.cpp and tests. Functions are `static inline` (files
// compiled with ISA flags include this header; see quant_common.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "les/quant/blocks.h"
#include "les/quant/types.h"

namespace les {

// Sub-block ib (0..7) of an IQ2_XXS block: 4 grid indices (kIq2xxsGrid), 4 seven-bit sign codes
// (iq2_signs) and the 4-bit scale ls. qs: the block's qs field as bytes (64 bytes, any alignment).
struct Iq2xxsSub {
  uint8_t grid[4];
  uint8_t sign_code[4];
  int ls;
};
static inline Iq2xxsSub iq2xxs_sub(const uint8_t* qs, int ib) {
  uint32_t aux[2];
  std::memcpy(aux, qs + 8 * ib, 8);
  Iq2xxsSub s;
  for (int l = 0; l < 4; ++l) {
    s.grid[l] = static_cast<uint8_t>(aux[0] >> (8 * l));
    s.sign_code[l] = static_cast<uint8_t>((aux[1] >> (7 * l)) & 127);
  }
  s.ls = static_cast<int>(aux[1] >> 28);
  return s;
}

// The kIq2sGrid index (10 bits) of group g (0..31) of an IQ2_S block: the low 8 bits in qs[g],
// the high 2 at bits 2(g%4) of qh[g/4].
static inline int iq2s_grid_index(const uint8_t* qs, const uint8_t* qh, int g) {
  return qs[g] | (((qh[g / 4] >> (2 * (g % 4))) & 3) << 8);
}

}  // namespace les

namespace les {

// The codebooks as 16-bit codes, for kernels that expand grid points with byte permutes: entry i's
// element k has level (code >> 2k) & 3 in {0, 1, 2} standing for the grid byte 8, 25, 43. lo / hi:
// the code's low / high byte. Built once (iq2_ref.cpp); size 256 (IQ2_XXS), 512 (IQ2_XS), 1024 (IQ2_S).
struct Iq2Codes {
  alignas(64) uint8_t lo[1024];
  alignas(64) uint8_t hi[1024];
};
const Iq2Codes& iq2_codes(Type t);

}  // namespace les
