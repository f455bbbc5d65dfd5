// SIMD dequantizers (dequantize_avx2.cpp) against the scalar ones, bit for bit, on blocks of
// random bits (every scale and min code, fp16 scales of every magnitude including subnormals and
// zero), in rows of 1..9 blocks at misaligned addresses.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "les/quant/blocks.h"
#include "les/quant/kernels.h"
#include "les/quant/types.h"
#include "les/util/fp16.h"
#include "skip.h"

namespace les {
namespace {

// Random finite fp16 bits (any exponent but the infinity/NaN one).
uint16_t random_finite_half(std::mt19937_64& rng) {
  for (;;) {
    const auto h = static_cast<uint16_t>(rng());
    if (((h >> 10) & 31) != 31) return h;
  }
}

TEST(DequantSimd, Q4KBitIdenticalToScalar) {
  const KernelTable* scalar = kernel_table(Isa::scalar);
  ASSERT_NE(scalar, nullptr);
  int checked = 0;
  for (Isa isa : {Isa::avx2, Isa::avx512}) {
    const KernelTable* kt = kernel_table(isa);
    if (!kt || static_cast<int>(isa) > static_cast<int>(detect_isa())) continue;
    EXPECT_NE(kt->dequantize[static_cast<int>(Type::Q4_K)], scalar->dequantize[static_cast<int>(Type::Q4_K)]);
    std::mt19937_64 rng(7 + static_cast<uint64_t>(isa));
    for (int64_t nb = 1; nb <= 9; ++nb) {
      for (size_t misalign : {0u, 1u, 3u}) {
        const int64_t n = nb * QK_K;
        std::vector<uint8_t> buf(static_cast<size_t>(nb) * sizeof(block_q4_K) + misalign);
        for (auto& b : buf) b = static_cast<uint8_t>(rng());
        uint8_t* q = buf.data() + misalign;
        for (int64_t b = 0; b < nb; ++b) {
          uint8_t* blk = q + b * static_cast<int64_t>(sizeof(block_q4_K));
          const uint16_t d = random_finite_half(rng), dmin = random_finite_half(rng);
          std::memcpy(blk + offsetof(block_q4_K, d), &d, 2);
          std::memcpy(blk + offsetof(block_q4_K, dmin), &dmin, 2);
        }
        std::vector<float> want(static_cast<size_t>(n) + 1), got(static_cast<size_t>(n) + 1);
        scalar->dequantize[static_cast<int>(Type::Q4_K)](q, want.data() + 1, n);
        kt->dequantize[static_cast<int>(Type::Q4_K)](q, got.data() + 1, n);
        ASSERT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * sizeof(float)))
            << isa_name(isa) << " blocks " << nb << " misalign " << misalign;
        ++checked;
      }
    }
  }
  if (checked == 0) LES_SKIP_CPU("no SIMD ISA on this CPU");
}

}  // namespace
}  // namespace les
