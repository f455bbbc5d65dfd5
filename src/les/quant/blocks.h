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

// ---- i-quants: 256-element super-blocks whose groups of 8 (IQ2/IQ1) or 4 (IQ3) elements are
// points of a codebook (iq_grids.h), with separate signs. Layouts as in llama.cpp's ggml-common.h.
// IQ2_XXS (2.06 bpw): 8 sub-blocks of 32; sub-block ib uses qs[4ib .. 4ib+3] read as two uint32:
// aux0 holds four 8-bit kIq2xxsGrid indices, aux1 four 7-bit sign codes (bits 7l..7l+6) and a 4-bit
// scale ls = aux1 >> 28: x = d * (0.5 + ls) * 0.25 * grid * sign.
struct block_iq2_xxs { half_bits d; uint16_t qs[QK_K / 8]; };
// IQ2_XS (2.31 bpw): qs[4ib + l] = 9-bit kIq2xsGrid index | 7-bit sign code << 9; scales[ib] holds
// two 4-bit scales (low nibble for the first 16 elements): x = d * (0.5 + ls) * 0.25 * grid * sign.
struct block_iq2_xs { half_bits d; uint16_t qs[QK_K / 8]; uint8_t scales[QK_K / 32]; };
// IQ2_S (2.56 bpw): 10-bit kIq2sGrid indices, low 8 bits in qs[4ib + l], high 2 bits at 2l of
// qh[ib]; sign bytes (8 explicit signs) in qs[QK_K/8 + 4ib + l]; scales as IQ2_XS.
struct block_iq2_s { half_bits d; uint8_t qs[QK_K / 4]; uint8_t qh[QK_K / 32]; uint8_t scales[QK_K / 32]; };
// IQ3_XXS (3.06 bpw): qs[0 .. 63] 8-bit kIq3xxsGrid indices (4 elements each); then per sub-block
// ib a uint32 of four 7-bit sign codes and a 4-bit scale (bits 28..31):
// x = d * (0.5 + ls) * 0.5 * grid * sign.
struct block_iq3_xxs { half_bits d; uint8_t qs[3 * QK_K / 8]; };
// IQ3_S (3.44 bpw): 9-bit kIq3sGrid indices (low 8 bits in qs, 9th bit in qh), 8 explicit sign
// bits per byte of signs, 4-bit scales for sub-blocks of 32: x = d * (1 + 2 ls) * grid * sign.
struct block_iq3_s {
  half_bits d;
  uint8_t qs[QK_K / 4];
  uint8_t qh[QK_K / 32];
  uint8_t signs[QK_K / 8];
  uint8_t scales[QK_K / 64];
};
// IQ1_S (1.56 bpw): 11-bit kIq1sGrid indices (low 8 bits in qs, high 3 bits at 3l of qh[ib]); per
// sub-block of 32, qh[ib] bits 12..14 a 3-bit scale and bit 15 the sign of the delta:
// x = d * (2 ls + 1) * (grid +- kIq1sDelta).
struct block_iq1_s { half_bits d; uint8_t qs[QK_K / 8]; uint16_t qh[QK_K / 32]; };
// IQ1_M (1.75 bpw): no stored d: the fp16 super-scale is spread over the top nibbles of the four
// uint16 of scales. Per group of 8, 3 high index bits + a delta sign bit in qh; 3-bit scales for
// groups of 16.
struct block_iq1_m { uint8_t qs[QK_K / 8]; uint8_t qh[QK_K / 16]; uint8_t scales[QK_K / 32]; };

// ---- ternary types: x = d * t, t in {-1, 0, 1} stored as t + 1.
// TQ1_0 (1.69 bpw): 5 trits per byte of qs (base 3, scaled to a byte: q = ceil(v * 256 / 243)),
// 4 per byte of qh.
struct block_tq1_0 { uint8_t qs[(QK_K - 4 * QK_K / 64) / 5]; uint8_t qh[QK_K / 64]; half_bits d; };
// TQ2_0 (2.06 bpw): 2 bits per element.
struct block_tq2_0 { uint8_t qs[QK_K / 4]; half_bits d; };

// ---- 4-bit floats (E2M1 codes, kFp4Values).
constexpr int QK_MXFP4 = 32;
constexpr int QK_NVFP4 = 64;
constexpr int QK_NVFP4_SUB = 16;
// MXFP4: an E8M0 scale e (2^(e - 127)) for 32 codes, packed as Q4_0 (element j low nibble of qs[j],
// j + 16 high).
struct block_mxfp4 { uint8_t e; uint8_t qs[QK_MXFP4 / 2]; };
// NVFP4: four UE4M3 scales, one per 16 elements, and 64 codes packed per 16-element sub-block
// as Q4_0 packs 32.
struct block_nvfp4 { uint8_t d[QK_NVFP4 / QK_NVFP4_SUB]; uint8_t qs[QK_NVFP4 / 2]; };

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
typedef block_iq2_xxs block_iq2_xxs_u __attribute__((aligned(1)));
typedef block_iq2_xs block_iq2_xs_u __attribute__((aligned(1)));
typedef block_iq2_s block_iq2_s_u __attribute__((aligned(1)));
typedef block_iq3_xxs block_iq3_xxs_u __attribute__((aligned(1)));
typedef block_iq3_s block_iq3_s_u __attribute__((aligned(1)));
typedef block_iq1_s block_iq1_s_u __attribute__((aligned(1)));
typedef block_iq1_m block_iq1_m_u __attribute__((aligned(1)));
typedef block_tq1_0 block_tq1_0_u __attribute__((aligned(1)));
typedef block_tq2_0 block_tq2_0_u __attribute__((aligned(1)));
typedef block_mxfp4 block_mxfp4_u __attribute__((aligned(1)));
typedef block_nvfp4 block_nvfp4_u __attribute__((aligned(1)));
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

static_assert(sizeof(block_iq2_xxs) == 66);
static_assert(sizeof(block_iq2_xs) == 74);
static_assert(sizeof(block_iq2_s) == 82);
static_assert(sizeof(block_iq3_xxs) == 98);
static_assert(sizeof(block_iq3_s) == 110);
static_assert(sizeof(block_iq1_s) == 50);
static_assert(sizeof(block_iq1_m) == 56);
static_assert(sizeof(block_tq1_0) == 54);
static_assert(sizeof(block_tq2_0) == 66);
static_assert(sizeof(block_mxfp4) == 17);
static_assert(sizeof(block_nvfp4) == 36);

}  // namespace les
