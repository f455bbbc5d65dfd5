// Block layouts of the quantized types, byte-identical to llama.cpp's (ggml-common.h), so that
// GGUF files from the ecosystem are read as is. Half-precision fields are raw IEEE binary16 bits.
#pragma once

#include <cstdint>

namespace les {

constexpr int QK4_0 = 32;
constexpr int QK4_1 = 32;
constexpr int QK5_0 = 32;
constexpr int QK5_1 = 32;
constexpr int QK8_0 = 32;
constexpr int QK8_1 = 32;
constexpr int QK4_NL = 32;
constexpr int QK_K = 256;        // super-block size of the K-quants (and IQ4_XS)
constexpr int K_SCALE_SIZE = 12; // packed 6-bit scales/mins of Q4_K and Q5_K

using half_bits = uint16_t;

// x = d * q, q in [-8, 7] stored as 4-bit q+8; element j in low nibble of qs[j], j+16 in high.
struct block_q4_0 { half_bits d; uint8_t qs[QK4_0 / 2]; };
// x = d * q + m, q in [0, 15].
struct block_q4_1 { half_bits d; half_bits m; uint8_t qs[QK4_1 / 2]; };
// x = d * q, q in [-16, 15]; 5th bit of element j in bit j of qh.
struct block_q5_0 { half_bits d; uint8_t qh[4]; uint8_t qs[QK5_0 / 2]; };
// x = d * q + m, q in [0, 31].
struct block_q5_1 { half_bits d; half_bits m; uint8_t qh[4]; uint8_t qs[QK5_1 / 2]; };
// x = d * q, q int8.
struct block_q8_0 { half_bits d; int8_t qs[QK8_0]; };
// x = d * q; s = d * sum(q) (activation type of Q4_1/Q5_1).
struct block_q8_1 { half_bits d; half_bits s; int8_t qs[QK8_1]; };

// 16 sub-blocks of 16: x = d * (scales[i] & 15) * q - dmin * (scales[i] >> 4), q in [0, 3].
struct block_q2_K { uint8_t scales[QK_K / 16]; uint8_t qs[QK_K / 4]; half_bits d; half_bits dmin; };
// 16 sub-blocks of 16 with 6-bit signed scales packed in 12 bytes; q in [-4, 3] (2 low bits in qs,
// high bit in hmask, set bit means no -4 offset).
struct block_q3_K { uint8_t hmask[QK_K / 8]; uint8_t qs[QK_K / 4]; uint8_t scales[12]; half_bits d; };
// 8 sub-blocks of 32 with 6-bit scales and mins packed in 12 bytes: x = d*sc*q - dmin*m, q in [0,15].
struct block_q4_K { half_bits d; half_bits dmin; uint8_t scales[K_SCALE_SIZE]; uint8_t qs[QK_K / 2]; };
// As Q4_K with a 5th bit per element in qh.
struct block_q5_K { half_bits d; half_bits dmin; uint8_t scales[K_SCALE_SIZE]; uint8_t qh[QK_K / 8]; uint8_t qs[QK_K / 2]; };
// 16 sub-blocks of 16 with int8 scales: x = d * scales[i] * (q - 32), q 6 bits (4 in ql, 2 in qh).
struct block_q6_K { uint8_t ql[QK_K / 2]; uint8_t qh[QK_K / 4]; int8_t scales[QK_K / 16]; half_bits d; };
// Non-linear 4-bit types: a 4-bit code selects one of the 16 values of kIq4nlValues, which is
// then scaled. Codes are packed as in Q4_0: element j of a 32-element group in the low nibble of
// qs[j], element j+16 in the high nibble.
// x = d * kIq4nlValues[code].
struct block_iq4_nl { half_bits d; uint8_t qs[QK4_NL / 2]; };
// 8 sub-blocks of 32, each with a 6-bit scale ls stored as 4 low bits in scales_l (nibble
// ib % 2 of byte ib / 2) and 2 high bits in scales_h (bits 2ib, 2ib+1):
// x = d * (ls - 32) * kIq4nlValues[code]; sub-block ib's codes in qs[16ib .. 16ib+15].
struct block_iq4_xs { half_bits d; uint16_t scales_h; uint8_t scales_l[QK_K / 64]; uint8_t qs[QK_K / 2]; };
// The 16 values of the IQ4_NL / IQ4_XS codes, ascending (a constant of the format).
inline constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};

// Activation type of the K-quants: x = d * q, float scale, bsums[i] = sum of qs[16i .. 16i+15].
struct block_q8_K { float d; int8_t qs[QK_K]; int16_t bsums[QK_K / 16]; };

// Alignment-1 views of the blocks and of binary16 / float scalars. Kernel rows may start at any
// byte (a GGUF file may declare general.alignment 1; callers promise no alignment), so code that
// reads or writes blocks through typed pointers uses these: a typedef may lower the alignment,
// and the compiler then emits loads that are valid at any address.
typedef block_q4_0 block_q4_0_u __attribute__((aligned(1)));
typedef block_q4_1 block_q4_1_u __attribute__((aligned(1)));
typedef block_q5_0 block_q5_0_u __attribute__((aligned(1)));
typedef block_q5_1 block_q5_1_u __attribute__((aligned(1)));
typedef block_q8_0 block_q8_0_u __attribute__((aligned(1)));
typedef block_q8_1 block_q8_1_u __attribute__((aligned(1)));
typedef block_q2_K block_q2_K_u __attribute__((aligned(1)));
typedef block_q3_K block_q3_K_u __attribute__((aligned(1)));
typedef block_q4_K block_q4_K_u __attribute__((aligned(1)));
typedef block_q5_K block_q5_K_u __attribute__((aligned(1)));
typedef block_q6_K block_q6_K_u __attribute__((aligned(1)));
typedef block_q8_K block_q8_K_u __attribute__((aligned(1)));
typedef block_iq4_nl block_iq4_nl_u __attribute__((aligned(1)));
typedef block_iq4_xs block_iq4_xs_u __attribute__((aligned(1)));
typedef uint16_t half_bits_u __attribute__((aligned(1)));
typedef float float_u __attribute__((aligned(1)));

static_assert(sizeof(block_q4_0) == 18);
static_assert(sizeof(block_q4_1) == 20);
static_assert(sizeof(block_q5_0) == 22);
static_assert(sizeof(block_q5_1) == 24);
static_assert(sizeof(block_q8_0) == 34);
static_assert(sizeof(block_q8_1) == 36);
static_assert(sizeof(block_q2_K) == 84);
static_assert(sizeof(block_q3_K) == 110);
static_assert(sizeof(block_q4_K) == 144);
static_assert(sizeof(block_q5_K) == 176);
static_assert(sizeof(block_q6_K) == 210);
static_assert(sizeof(block_q8_K) == 292);
static_assert(sizeof(block_iq4_nl) == 18);
static_assert(sizeof(block_iq4_xs) == 136);

}  // namespace les
