// i8mm (SMMLA) gemm of TQ1_0, TQ2_0, MXFP4, NVFP4. vec_dot stays dotprod's.
//
// Tiles of 2 weight rows x 2 to 8 activation rows: each pair of weight blocks is decoded once
// (lowbit_arm.h) and interleaved 8 bytes per row, as SMMLA takes its operands; per block (NVFP4:
// per 16-element sub-block) SMMLAs give the exact integer sums of a 2x2 tile in lanes
// [r0c0, r0c1, r1c0, r1c1]. The float steps of lowbit_arm.h then run on the four lanes at once
// (the scales multiplied in the same order, one fma per step, the same accumulators and final
// adds), so every output equals the dotprod vec_dot bit for bit. An odd last weight row or
// activation row is computed as a duplicate lane and not stored.

#include <arm_neon.h>

#include "les/quant/kernels_i8mm_zip.h"
#include "les/quant/kernels_internal.h"
#include "les/quant/lowbit_arm.h"

namespace les {
namespace {
namespace lowbit_i8mm {

using lowbit_arm::kQ80d;
using lowbit_arm::kQ80qs;
using lowbit_arm::kQ8Kd;
using lowbit_arm::kQ8Kqs;
using lowbit_arm::load_f32;
using lowbit_arm::load_half;
using lowbit_arm::load_s8;
using lowbit_arm::Mxfp4;
using lowbit_arm::Nvfp4;
using lowbit_arm::TernaryWeights;

// Lanes [r0, r0, r1, r1] and [c0, c1, c0, c1].
inline float32x4_t per_row(float r0, float r1) { return vcombine_f32(vdup_n_f32(r0), vdup_n_f32(r1)); }
inline float32x4_t per_col(float c0, float c1) {
  const float32x2_t c = vset_lane_f32(c1, vdup_n_f32(c0), 1);
  return vcombine_f32(c, c);
}

// The 2x2 integer products of 16 elements: interleaved weights (lo, hi) against x0, x1.
[[gnu::always_inline]] inline int32x4_t mmla16(int32x4_t acc, int8x16_t lo, int8x16_t hi, const uint8_t* x0,
                                               const uint8_t* x1) {
  const int8x16_t a0 = load_s8(x0), a1 = load_s8(x1);
  return vmmlaq_s32(vmmlaq_s32(acc, lo, zip_lo(a0, a1)), hi, zip_hi(a0, a1));
}

// Even and odd blocks (PairAcc, lane-wise).
struct EvenOdd {
  float32x4_t s[2] = {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)};
  float32x4_t result() const { return vaddq_f32(s[0], s[1]); }
};

struct Mxfp4Pair {
  using K = Mxfp4;
  using Acc = EvenOdd;
  int8x16_t lo[2], hi[2];  // [elements 0..15, 16..31] of both rows, interleaved
  float32x4_t d;
  [[gnu::always_inline]] void set(const K::Weights& w0, const K::Weights& w1) {
    lo[0] = zip_lo(w0.lo, w1.lo);
    hi[0] = zip_hi(w0.lo, w1.lo);
    lo[1] = zip_lo(w0.hi, w1.hi);
    hi[1] = zip_hi(w0.hi, w1.hi);
    d = per_row(w0.d, w1.d);
  }
  [[gnu::always_inline]] void update(Acc& acc, const uint8_t* a0, const uint8_t* a1, int64_t i) const {
    int32x4_t s = mmla16(vdupq_n_s32(0), lo[0], hi[0], a0 + kQ80qs, a1 + kQ80qs);
    s = mmla16(s, lo[1], hi[1], a0 + kQ80qs + 16, a1 + kQ80qs + 16);
    const float32x4_t dd = vmulq_f32(d, per_col(load_half(a0 + kQ80d), load_half(a1 + kQ80d)));
    acc.s[i & 1] = vfmaq_f32(acc.s[i & 1], vcvtq_f32_s32(s), dd);
  }
};

template <class T>
struct TernaryPair {
  using K = T;
  using Acc = EvenOdd;
  int8x16_t lo[16], hi[16];
  float32x4_t d;
  [[gnu::always_inline]] void set(const TernaryWeights& w0, const TernaryWeights& w1) {
    for (int j = 0; j < 16; ++j) {
      lo[j] = zip_lo(w0.v[j], w1.v[j]);
      hi[j] = zip_hi(w0.v[j], w1.v[j]);
    }
    d = per_row(w0.d, w1.d);
  }
  [[gnu::always_inline]] void update(Acc& acc, const uint8_t* a0, const uint8_t* a1, int64_t i) const {
    int32x4_t s[2] = {vdupq_n_s32(0), vdupq_n_s32(0)};
    for (int j = 0; j < 16; ++j) s[j % 2] = mmla16(s[j % 2], lo[j], hi[j], a0 + kQ8Kqs + 16 * j, a1 + kQ8Kqs + 16 * j);
    const float32x4_t dd = vmulq_f32(d, per_col(load_f32(a0 + kQ8Kd), load_f32(a1 + kQ8Kd)));
    acc.s[i & 1] = vfmaq_f32(acc.s[i & 1], vcvtq_f32_s32(vaddq_s32(s[0], s[1])), dd);
  }
};

// NVFP4: one lane-wise accumulator per sub-block (LaneAcc's lanes), added as LaneAcc adds them.
struct SubBlocks {
  float32x4_t s[4] = {vdupq_n_f32(0.0f), vdupq_n_f32(0.0f), vdupq_n_f32(0.0f), vdupq_n_f32(0.0f)};
  float32x4_t result() const { return vaddq_f32(vaddq_f32(s[0], s[1]), vaddq_f32(s[2], s[3])); }
};

struct Nvfp4Pair {
  using K = Nvfp4;
  using Acc = SubBlocks;
  int8x16_t lo[4], hi[4];
  float32x4_t d[4];  // sub-block s: [scale of row 0, row 0, row 1, row 1]
  [[gnu::always_inline]] void set(const K::Weights& w0, const K::Weights& w1) {
    for (int s = 0; s < 4; ++s) {
      lo[s] = zip_lo(w0.v[s], w1.v[s]);
      hi[s] = zip_hi(w0.v[s], w1.v[s]);
      d[s] = per_row(w0.ds[s], w1.ds[s]);
    }
  }
  // Sub-blocks 0, 1 against the Q8_0 blocks at a0, a1; 2, 3 against the blocks after them.
  [[gnu::always_inline]] void update(Acc& acc, const uint8_t* a0, const uint8_t* a1, int64_t) const {
    for (int h = 0; h < 2; ++h) {
      const uint8_t* b0 = a0 + h * sizeof(block_q8_0);
      const uint8_t* b1 = a1 + h * sizeof(block_q8_0);
      const float32x4_t da = per_col(load_half(b0 + kQ80d), load_half(b1 + kQ80d));
      for (int p = 0; p < 2; ++p) {
        const int s = 2 * h + p;
        const int32x4_t t = mmla16(vdupq_n_s32(0), lo[s], hi[s], b0 + kQ80qs + 16 * p, b1 + kQ80qs + 16 * p);
        acc.s[s] = vfmaq_f32(acc.s[s], vcvtq_f32_s32(t), vmulq_f32(d[s], da));
      }
    }
  }
};

// Weight rows w0, w1 against NP pairs of activation rows a[2p], a[2p + 1]; out[p] lanes
// [r0c0, r0c1, r1c0, r1c1] of pair p.
template <class P, int NP>
void tile(int64_t nb, const uint8_t* w0, const uint8_t* w1, const uint8_t* const* a, float32x4_t* out) {
  using K = typename P::K;
  typename P::Acc acc[NP];
  for (int64_t i = 0; i < nb; ++i) {
    typename K::Weights d0, d1;
    K::decode(w0 + static_cast<size_t>(i) * K::kWBytes, d0);
    K::decode(w1 + static_cast<size_t>(i) * K::kWBytes, d1);
    P pair;
    pair.set(d0, d1);
    const size_t ao = static_cast<size_t>(i) * K::kABytes;
    for (int p = 0; p < NP; ++p) pair.update(acc[p], a[2 * p] + ao, a[2 * p + 1] + ao, i);
  }
  for (int p = 0; p < NP; ++p) out[p] = acc[p].result();
}

template <class P>
void gemm_mmla(int64_t n, const void* vw, size_t w_stride, int64_t nr, const void* va, size_t a_stride, int64_t nc,
               float* y, int64_t y_stride) {
  const int64_t nb = n / P::K::kBlock;
  const auto* w = static_cast<const uint8_t*>(vw);
  const auto* a = static_cast<const uint8_t*>(va);
  for (int64_t r = 0; r < nr; r += 2) {
    const bool r1_ok = r + 1 < nr;
    const uint8_t* w0 = w + static_cast<size_t>(r) * w_stride;
    const uint8_t* w1 = r1_ok ? w0 + w_stride : w0;
    for (int64_t c = 0; c < nc;) {
      const int np = static_cast<int>(std::min<int64_t>(4, (nc - c + 1) / 2));
      const uint8_t* cols[8];
      for (int k = 0; k < 2 * np; ++k) {
        const int64_t cc = std::min<int64_t>(c + k, nc - 1);  // an odd last row repeats
        cols[k] = a + static_cast<size_t>(cc) * a_stride;
      }
      float32x4_t out[4];
      switch (np) {
        case 4: tile<P, 4>(nb, w0, w1, cols, out); break;
        case 3: tile<P, 3>(nb, w0, w1, cols, out); break;
        case 2: tile<P, 2>(nb, w0, w1, cols, out); break;
        default: tile<P, 1>(nb, w0, w1, cols, out); break;
      }
      for (int p = 0; p < np; ++p, c += 2) {
        const bool c1_ok = c + 1 < nc;
        float* y0 = y + c * y_stride + r;
        y0[0] = vgetq_lane_f32(out[p], 0);
        if (c1_ok) y0[y_stride] = vgetq_lane_f32(out[p], 1);
        if (r1_ok) {
          y0[1] = vgetq_lane_f32(out[p], 2);
          if (c1_ok) y0[y_stride + 1] = vgetq_lane_f32(out[p], 3);
        }
      }
    }
  }
}

}  // namespace lowbit_i8mm
}  // namespace

void fill_kernel_table_i8mm_lowbit(KernelTable& t) {
  namespace k = lowbit_i8mm;
  t.gemm[lowbit_arm::tid(Type::MXFP4)] = k::gemm_mmla<k::Mxfp4Pair>;
  t.gemm[lowbit_arm::tid(Type::NVFP4)] = k::gemm_mmla<k::Nvfp4Pair>;
  t.gemm[lowbit_arm::tid(Type::TQ1_0)] = k::gemm_mmla<k::TernaryPair<lowbit_arm::Tq1>>;
  t.gemm[lowbit_arm::tid(Type::TQ2_0)] = k::gemm_mmla<k::TernaryPair<lowbit_arm::Tq2>>;
}

}  // namespace les
