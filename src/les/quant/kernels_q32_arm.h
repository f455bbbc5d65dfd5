// Shared pieces of the aarch64 kernels of the 32-element block types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0,
// IQ4_NL against Q8_0/Q8_1 activations): block decoders to signed bytes and the vec_dot / gemm
// drivers that fix the float evaluation order, parameterized by the integer product of each ISA.
//
// Exactness: every block gives one exact int32 sum (the same integer as the scalar reference),
// then per output, in block order, with two accumulators (even and odd blocks):
//   acc[i % 2] = fma(float(sum_i), d_w * d_a, acc[i % 2])        (and, for Q4_1/Q5_1,
//   acc[i % 2] = fma(m_w, s_a, acc[i % 2]) after it); result = acc[0] + acc[1].
// The gemms of the dotprod and i8mm files evaluate exactly this sequence per output, so they are
// bit-identical to the dotprod vec_dot.
//
// Everything here is in an anonymous namespace: each ISA's file gets its own copy compiled with its
// own flags, and no copy built with +dotprod/+i8mm can be picked for another file by the linker.
#pragma once

#include <arm_neon.h>

#include <cstdint>
#include <cstring>

#include "les/quant/blocks.h"

namespace les {
namespace {

inline float load_half(const uint8_t* p) {
  __fp16 h;
  std::memcpy(&h, p, 2);
  return static_cast<float>(h);
}

// A decoder turns one weight block into its 32 values as signed bytes: lo = elements 0..15,
// hi = elements 16..31. kAffine: x = d * q + m (activation Q8_1, whose s field carries d_a * sum).
// kWide: the values may include -128 (two products may then overflow int16).
struct DecQ4_0 {
  static constexpr size_t kBytes = sizeof(block_q4_0);
  static constexpr bool kAffine = false, kWide = false;
  static inline void decode(const uint8_t* b, int8x16_t& lo, int8x16_t& hi) {
    const uint8x16_t q = vld1q_u8(b + 2);
    lo = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(q, vdupq_n_u8(0x0f))), vdupq_n_s8(8));
    hi = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(q, 4)), vdupq_n_s8(8));
  }
};

struct DecQ4_1 {
  static constexpr size_t kBytes = sizeof(block_q4_1);
  static constexpr bool kAffine = true, kWide = false;
  static inline void decode(const uint8_t* b, int8x16_t& lo, int8x16_t& hi) {
    const uint8x16_t q = vld1q_u8(b + 4);
    lo = vreinterpretq_s8_u8(vandq_u8(q, vdupq_n_u8(0x0f)));
    hi = vreinterpretq_s8_u8(vshrq_n_u8(q, 4));
  }
};

// Bit e of the 32-bit qh, as 0xff/0x00 per element: lo = elements 0..15, hi = 16..31.
inline void q5_high_bits(const uint8_t* qh, uint8x16_t& lo, uint8x16_t& hi) {
  static constexpr uint8_t kLoIdx[16] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1};
  static constexpr uint8_t kBit[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
  uint32_t bits;
  std::memcpy(&bits, qh, 4);
  const uint8x16_t all = vreinterpretq_u8_u32(vdupq_n_u32(bits));
  const uint8x16_t idx = vld1q_u8(kLoIdx);
  lo = vtstq_u8(vqtbl1q_u8(all, idx), vld1q_u8(kBit));
  hi = vtstq_u8(vqtbl1q_u8(all, vaddq_u8(idx, vdupq_n_u8(2))), vld1q_u8(kBit));
}

struct DecQ5_0 {
  static constexpr size_t kBytes = sizeof(block_q5_0);
  static constexpr bool kAffine = false, kWide = false;
  // q - 16 = nibble - (bit clear ? 16 : 0)
  static inline void decode(const uint8_t* b, int8x16_t& lo, int8x16_t& hi) {
    uint8x16_t hl, hh;
    q5_high_bits(b + 2, hl, hh);
    const uint8x16_t q = vld1q_u8(b + 6);
    const uint8x16_t c16 = vdupq_n_u8(0x10);
    lo = vreinterpretq_s8_u8(vsubq_u8(vandq_u8(q, vdupq_n_u8(0x0f)), vbicq_u8(c16, hl)));
    hi = vreinterpretq_s8_u8(vsubq_u8(vshrq_n_u8(q, 4), vbicq_u8(c16, hh)));
  }
};

struct DecQ5_1 {
  static constexpr size_t kBytes = sizeof(block_q5_1);
  static constexpr bool kAffine = true, kWide = false;
  static inline void decode(const uint8_t* b, int8x16_t& lo, int8x16_t& hi) {
    uint8x16_t hl, hh;
    q5_high_bits(b + 4, hl, hh);
    const uint8x16_t q = vld1q_u8(b + 8);
    const uint8x16_t c16 = vdupq_n_u8(0x10);
    lo = vreinterpretq_s8_u8(vorrq_u8(vandq_u8(q, vdupq_n_u8(0x0f)), vandq_u8(c16, hl)));
    hi = vreinterpretq_s8_u8(vsriq_n_u8(vandq_u8(c16, hh), q, 4));
  }
};

struct DecQ8_0 {
  static constexpr size_t kBytes = sizeof(block_q8_0);
  static constexpr bool kAffine = false, kWide = true;
  static inline void decode(const uint8_t* b, int8x16_t& lo, int8x16_t& hi) {
    lo = vld1q_s8(reinterpret_cast<const int8_t*>(b + 2));
    hi = vld1q_s8(reinterpret_cast<const int8_t*>(b + 18));
  }
};

struct DecIq4Nl {
  static constexpr size_t kBytes = sizeof(block_iq4_nl);
  static constexpr bool kAffine = false, kWide = false;
  static inline void decode(const uint8_t* b, int8x16_t& lo, int8x16_t& hi) {
    const uint8x16_t q = vld1q_u8(b + 2);
    const int8x16_t book = vld1q_s8(kIq4nlValues);
    lo = vqtbl1q_s8(book, vandq_u8(q, vdupq_n_u8(0x0f)));
    hi = vqtbl1q_s8(book, vshrq_n_u8(q, 4));
  }
};

// Activation block layout of decoder D: Q8_1 (d, s, qs) for the affine types, else Q8_0 (d, qs).
template <class D>
struct Act {
  static constexpr size_t kBytes = D::kAffine ? sizeof(block_q8_1) : sizeof(block_q8_0);
  static constexpr size_t kQs = D::kAffine ? 4 : 2;
  static inline void load(const uint8_t* a, int8x16_t& lo, int8x16_t& hi) {
    lo = vld1q_s8(reinterpret_cast<const int8_t*>(a + kQs));
    hi = vld1q_s8(reinterpret_cast<const int8_t*>(a + kQs + 16));
  }
};

// One block's float step on one output (the order every kernel of this family keeps).
template <class D>
inline float block_step(float acc, int32_t sum, const uint8_t* w, const uint8_t* a) {
  acc = __builtin_fmaf(static_cast<float>(sum), load_half(w) * load_half(a), acc);
  if constexpr (D::kAffine) acc = __builtin_fmaf(load_half(w + 2), load_half(a + 2), acc);
  return acc;
}

// vec_dot of a row of decoder D's blocks; Dot::sum(w_lo, w_hi, a_lo, a_hi) is the exact int32
// sum of the 32 products (the ISA's integer product).
template <class D, class Dot>
inline float block_dot(float acc, const uint8_t* w, const uint8_t* a) {
  int8x16_t wl, wh, al, ah;
  D::decode(w, wl, wh);
  Act<D>::load(a, al, ah);
  return block_step<D>(acc, Dot::sum(wl, wh, al, ah), w, a);
}

template <class D, class Dot>
float vec_dot_q32(int64_t n, const void* vw, const void* va) {
  const auto* w = static_cast<const uint8_t*>(vw);
  const auto* a = static_cast<const uint8_t*>(va);
  const int64_t nb = n / 32;
  float even = 0.0f, odd = 0.0f;
  int64_t i = 0;
  for (; i + 1 < nb; i += 2, w += 2 * D::kBytes, a += 2 * Act<D>::kBytes) {
    even = block_dot<D, Dot>(even, w, a);
    odd = block_dot<D, Dot>(odd, w + D::kBytes, a + Act<D>::kBytes);
  }
  if (i < nb) even = block_dot<D, Dot>(even, w, a);
  return even + odd;
}

// NC activation rows against one weight row: each weight block decoded once for the NC products;
// every output's float steps are vec_dot_q32's.
template <class D, class Dot, int NC>
inline void block_dot_cols(float* acc, const uint8_t* w, const uint8_t* a, size_t a_stride) {
  int8x16_t wl, wh;
  D::decode(w, wl, wh);
  for (int c = 0; c < NC; ++c) {
    int8x16_t al, ah;
    const uint8_t* ac = a + c * a_stride;
    Act<D>::load(ac, al, ah);
    acc[c] = block_step<D>(acc[c], Dot::sum(wl, wh, al, ah), w, ac);
  }
}

template <class D, class Dot, int NC>
void row_times_cols(int64_t nb, const uint8_t* w, const uint8_t* a, size_t a_stride, float* y, int64_t y_stride) {
  float even[NC], odd[NC];
  for (int c = 0; c < NC; ++c) even[c] = odd[c] = 0.0f;
  int64_t i = 0;
  for (; i + 1 < nb; i += 2, w += 2 * D::kBytes, a += 2 * Act<D>::kBytes) {
    block_dot_cols<D, Dot, NC>(even, w, a, a_stride);
    block_dot_cols<D, Dot, NC>(odd, w + D::kBytes, a + Act<D>::kBytes, a_stride);
  }
  if (i < nb) block_dot_cols<D, Dot, NC>(even, w, a, a_stride);
  for (int c = 0; c < NC; ++c) y[c * y_stride] = even[c] + odd[c];
}

// GemmFn of decoder D: tiles of one weight row x up to 4 activation rows.
template <class D, class Dot>
void gemm_q32(int64_t n, const void* vw, size_t w_stride, int64_t nr, const void* va, size_t a_stride, int64_t nc,
              float* y, int64_t y_stride) {
  const int64_t nb = n / 32;
  for (int64_t r = 0; r < nr; ++r) {
    const auto* w = static_cast<const uint8_t*>(vw) + r * w_stride;
    int64_t c = 0;
    for (; c + 4 <= nc; c += 4) {
      row_times_cols<D, Dot, 4>(nb, w, static_cast<const uint8_t*>(va) + c * a_stride, a_stride, y + c * y_stride + r,
                                y_stride);
    }
    const auto* a = static_cast<const uint8_t*>(va) + c * a_stride;
    float* yc = y + c * y_stride + r;
    switch (nc - c) {
      case 3: row_times_cols<D, Dot, 3>(nb, w, a, a_stride, yc, y_stride); break;
      case 2: row_times_cols<D, Dot, 2>(nb, w, a, a_stride, yc, y_stride); break;
      case 1: row_times_cols<D, Dot, 1>(nb, w, a, a_stride, yc, y_stride); break;
      default: break;
    }
  }
}

}  // namespace
}  // namespace les
