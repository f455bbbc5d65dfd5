// The block scales of MXFP4 (E8M0) and NVFP4 (UE4M3) as floats, halved: kFp4Values holds the
// E2M1 values doubled, so value(code) * scale is the element. Values are llama.cpp's
// (ggml_e8m0_to_fp32_half, ggml_ue4m3_to_fp32), exact in float. Internal: include only from
// src/les/quant/*.cpp and tests. Functions are `static inline` (files compiled with ISA flags
// include this header; see quant_common.h).
#pragma once

#include <cstdint>
#include <cstring>

namespace les {

// 2^(e - 128), e in 0..255 (e = 255, a NaN in E8M0, is 2^127 here, as in llama.cpp): the bits
// (e - 1) << 23 for e >= 2, the subnormals 2^-128, 2^-127 for e = 0, 1.
static constexpr uint32_t e8m0_half_bits(uint8_t e) {
  return e < 2 ? 0x00200000u << e : static_cast<uint32_t>(e - 1) << 23;
}
static inline float e8m0_half_to_f32(uint8_t e) {
  const uint32_t b = e8m0_half_bits(e);
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}

// UE4M3 byte u: exponent bits 3..6 (bias 7), mantissa bits 0..2, bit 7 ignored; 0x00 and 0x7F
// (E4M3's NaN) are 0; exponent 0 is subnormal (m * 2^-9). Returns half the value.
constexpr float ue4m3_half_value(uint8_t u) {
  if (u == 0 || u == 0x7F) return 0.0f;
  const int e = (u >> 3) & 0xF, m = u & 7;
  float v = e == 0 ? static_cast<float>(m) / 512.0f : 1.0f + static_cast<float>(m) / 8.0f;
  for (int k = 7; k < e; ++k) v *= 2.0f;  // 2^(e - 7), exact
  for (int k = e; k < 7 && e != 0; ++k) v /= 2.0f;
  return v * 0.5f;
}

struct Ue4m3Table {
  float v[256];
  constexpr Ue4m3Table() : v{} {
    for (int u = 0; u < 256; ++u) v[u] = ue4m3_half_value(static_cast<uint8_t>(u));
  }
};
inline constexpr Ue4m3Table kUe4m3Half{};

static inline float ue4m3_half_to_f32(uint8_t u) { return kUe4m3Half.v[u]; }

}  // namespace les
