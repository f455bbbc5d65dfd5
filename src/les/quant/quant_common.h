// Helpers shared by the reference (quant_ref.cpp) and fast (quantize_fast*.cpp) weight quantizers:
// fp16 scale choice, integer rounding, and the packing of levels and scales into block fields.
// Internal: include only from src/les/quant/*.cpp and tests.
//
// The functions are `static inline`: files compiled with AVX flags include this header, and an
// out-of-line copy of an ordinary inline function compiled there could be the one the linker
// keeps for every caller, CPUs without AVX included. Internal linkage keeps each file's copy its
// own.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "les/quant/blocks.h"
#include "les/util/fp16.h"

namespace les {

// float -> half, saturating to the largest finite half instead of overflowing to infinity (a
// scale of infinity would turn a whole block into inf/nan).
static inline half_bits f2h_sat(float f) {
  constexpr float kHalfMax = 65504.0f;
  return f32_to_fp16(std::clamp(f, -kHalfMax, kHalfMax));
}

// fp16 scale D ~ v / k for a block whose largest value v (any sign) must be an integer multiple
// of D of magnitude <= |k|: the nearest fp16 value, moved away from zero by as many ulps as needed
// when rounding went down (or underflowed to zero, which would wipe out the block). 0 iff v == 0.
static inline half_bits fit_scale(float v, int k) {
  if (v == 0) return 0;
  half_bits h = f2h_sat(v / static_cast<float>(k));
  const float lim = static_cast<float>(k < 0 ? -k : k) + 0.5f;
  for (int i = 0; i < 8 && (h & 0x7fff) < 0x7bff; ++i) {
    const float D = fp16_to_f32(h);
    if (D != 0 && std::fabs(v / D) <= lim) break;
    h = static_cast<half_bits>((h & 0x8000) | ((h & 0x7fff) + 1));  // next magnitude, same sign
  }
  return h;
}

// Round to nearest, ties to even, for |v| < 2^22; identical to llama.cpp's nearest_int (which
// adds 1.5 * 2^23 and reads the mantissa bits) under the default rounding mode.
static inline int nearest_int(float v) {
  const float t = v + 12582912.0f;
  uint32_t u;
  std::memcpy(&u, &t, 4);
  return static_cast<int>(u & 0x007fffffu) - 0x00400000;
}

// Nearest level of v in [lo, hi]; v is clamped before rounding so any finite v is safe.
static inline int qround(float v, int lo, int hi) {
  v = std::clamp(v, static_cast<float>(lo) - 1.0f, static_cast<float>(hi) + 1.0f);
  return std::clamp(nearest_int(v), lo, hi);
}

// Packs 8 scales and 8 mins, each in [0, 63], into the 12 bytes of Q4_K/Q5_K.
static inline void pack_scale_min_k4(const uint8_t sc[8], const uint8_t mn[8], uint8_t* q) {
  for (int j = 0; j < 4; ++j) {
    q[j] = static_cast<uint8_t>(sc[j] | ((sc[j + 4] >> 4) << 6));
    q[j + 4] = static_cast<uint8_t>(mn[j] | ((mn[j + 4] >> 4) << 6));
    q[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0x0f) | ((mn[j + 4] & 0x0f) << 4));
  }
}

// Packs 16 signed scales in [-32, 31] into the 12 bytes of Q3_K.
static inline void pack_scales_q3k(const int sc[16], uint8_t* s) {
  std::memset(s, 0, 12);
  for (int j = 0; j < 16; ++j) {
    const int u = sc[j] + 32;
    if (j < 8) {
      s[j] |= static_cast<uint8_t>(u & 0x0f);
    } else {
      s[j - 8] |= static_cast<uint8_t>((u & 0x0f) << 4);
    }
    s[8 + j % 4] |= static_cast<uint8_t>((u >> 4) << (2 * (j / 4)));
  }
}

// 2-bit packing of 256 levels U (low 2 bits used) shared by Q2_K and the low bits of Q3_K:
// element 128h + 32k + l at bits 2k of qs[32h + l].
static inline void pack_2bit(const int* U, uint8_t* qs) {
  for (int h = 0; h < 2; ++h) {
    for (int l = 0; l < 32; ++l) {
      int v = 0;
      for (int k = 0; k < 4; ++k) v |= (U[128 * h + 32 * k + l] & 3) << (2 * k);
      qs[32 * h + l] = static_cast<uint8_t>(v);
    }
  }
}

// 5-bit packing of 32 levels shared by Q5_0/Q5_1: low nibbles as Q4_0, bit 4 of element e in bit
// e of qh.
static inline void pack_q5(const int* U, uint8_t* qs, uint8_t* qh) {
  std::memset(qh, 0, 4);
  for (int j = 0; j < 16; ++j) {
    qs[j] = static_cast<uint8_t>((U[j] & 0x0f) | ((U[j + 16] & 0x0f) << 4));
  }
  for (int e = 0; e < 32; ++e) qh[e / 8] |= static_cast<uint8_t>(((U[e] >> 4) & 1) << (e % 8));
}

// Codes of 32 elements into 16 bytes: element j in the low nibble of qs[j], j + 16 in the high.
static inline void pack_iq4_32(const int* C, uint8_t* qs) {
  for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>(C[j] | (C[j + 16] << 4));
}

// Midpoints between consecutive values of kIq4nlValues: the nearest code of v is the number of
// midpoints v exceeds (the lower code on a tie; a NaN gives 0).
inline constexpr float kIq4Midpoints[15] = {-115.5f, -93.5f, -74.0f, -57.0f, -42.0f, -28.5f, -16.0f, -4.5f,
                                            7.0f,    19.0f,  31.5f,  45.5f,  61.0f,  79.0f,  101.0f};

// Index of the codebook value nearest to v (no branches: the compiler vectorises it).
static inline int nearest_iq4(float v) {
  int c = 0;
  for (float m : kIq4Midpoints) c += v > m;
  return c;
}

constexpr int kIq4ZeroCode = 8;  // the code of an all-zero group (value 1, times d = 0)

}  // namespace les
