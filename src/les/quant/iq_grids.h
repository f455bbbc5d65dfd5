// Codebooks and sign tables of the i-quants (IQ1_S/IQ1_M, IQ2_XXS/IQ2_XS/IQ2_S, IQ3_XXS/IQ3_S) and the
// E2M1 values of MXFP4/NVFP4: constants of the GGUF format (llama.cpp's ggml-common.h). The grids are
// defined per family in iq1_grids.cpp, iq2_grids.cpp and iq3_grids.cpp.
#pragma once

#include <cstdint>

namespace les {

// Grid points; entry i holds its elements as bytes, element k in byte k (little-endian).
extern const uint64_t kIq2xxsGrid[256];  // IQ2_XXS: 8 elements in {8, 25, 43}
extern const uint64_t kIq2xsGrid[512];   // IQ2_XS: the same values
extern const uint64_t kIq2sGrid[1024];   // IQ2_S: the same values
extern const uint32_t kIq3xxsGrid[256];  // IQ3_XXS: 4 elements in {4, 12, 20, 28, 36, 44, 52, 62}
extern const uint32_t kIq3sGrid[512];    // IQ3_S: 4 elements in {1, 3, 5, ..., 15}
extern const uint64_t kIq1sGrid[2048];   // IQ1_S, IQ1_M: 8 elements in {-1, 0, 1} (as int8 bytes)

// IQ1_S / IQ1_M: the grid value is shifted by +-delta before scaling.
inline constexpr float kIq1sDelta = 0.125f;
inline constexpr float kIq1mDelta = 0.125f;

// The sign bytes of the IQ2/IQ3 types: a 7-bit code c stores the signs of 8 elements, bit k set
// meaning element k is negative; the eighth sign is the parity of the first seven (an even number
// of negatives in every group of eight).
constexpr uint8_t iq2_signs(int c) {
  const unsigned v = static_cast<unsigned>(c) & 127u;
  unsigned parity = 0;
  for (int k = 0; k < 7; ++k) parity ^= (v >> k) & 1u;
  return static_cast<uint8_t>(v | (parity << 7));
}

// E2M1 values times two (0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives, doubled to integers), as
// MXFP4 and NVFP4 store them: code c is value kFp4Values[c] / 2 before scaling.
inline constexpr int8_t kFp4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

}  // namespace les
