// Scalar reference kernels for every supported type: dequantization, reference-quality weight
// quantization (optionally importance-weighted), llama.cpp-exact activation quantization and dot
// products.
//
// Layouts are llama.cpp's (see blocks.h). The dot products follow the integer/float evaluation
// order of llama.cpp's generic (scalar) kernels: exact integer sums per block or sub-block, then
// the same float products and accumulation order, so results agree with llama.cpp's to within
// float rounding (bit for bit where llama.cpp's own scalar code is used).
//
// Everything here is pure functions of their arguments; the only output is through the table
// filled by fill_kernel_table_scalar().

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "les/quant/blocks.h"
#include "les/quant/kernels_internal.h"
#include "les/quant/quant_common.h"
#include "les/util/fp16.h"

namespace les {
namespace {

// ---------------------------------------------------------------------------------------------
// Small helpers

inline float h2f(half_bits h) { return fp16_to_f32(h); }

// Little-endian 32-bit load of 4 bytes (the qh fields of Q5_0/Q5_1 are a uint32 in llama.cpp).
inline uint32_t load_u32le(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}

// Scale j (0..7) and min j of the 12-byte packed 6-bit scales of Q4_K/Q5_K.
inline void unpack_scale_min_k4(int j, const uint8_t* q, uint8_t* sc, uint8_t* mn) {
  if (j < 4) {
    *sc = q[j] & 63;
    *mn = q[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4));
    *mn = static_cast<uint8_t>((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

// Signed scale j (0..15, in [-32, 31]) of the 12-byte packed scales of Q3_K.
inline int unpack_scale_q3k(int j, const uint8_t* s) {
  const int lo4 = j < 8 ? (s[j] & 0x0f) : (s[j - 8] >> 4);
  const int hi2 = (s[8 + j % 4] >> (2 * (j / 4))) & 3;
  return (lo4 | (hi2 << 4)) - 32;
}

// ---------------------------------------------------------------------------------------------
// Dequantization (exact llama.cpp semantics, including the float evaluation order).

void dequant_f32(const void* vx, float* y, int64_t n) {
  std::memcpy(y, vx, static_cast<size_t>(n) * sizeof(float));
}

void dequant_f16(const void* vx, float* y, int64_t n) {
  const auto* x = static_cast<const half_bits_u*>(vx);
  for (int64_t i = 0; i < n; ++i) y[i] = fp16_to_f32(x[i]);
}

void dequant_bf16(const void* vx, float* y, int64_t n) {
  const auto* x = static_cast<const half_bits_u*>(vx);
  for (int64_t i = 0; i < n; ++i) y[i] = bf16_to_f32(x[i]);
}

void dequant_q4_0(const void* vx, float* y, int64_t n) {
  const auto* x = static_cast<const block_q4_0_u*>(vx);
  for (int64_t i = 0; i < n / QK4_0; ++i, y += QK4_0) {
    const float d = h2f(x[i].d);
    for (int j = 0; j < QK4_0 / 2; ++j) {
      y[j] = static_cast<float>((x[i].qs[j] & 0x0f) - 8) * d;
      y[j + QK4_0 / 2] = static_cast<float>((x[i].qs[j] >> 4) - 8) * d;
    }
  }
}

void dequant_q4_1(const void* vx, float* y, int64_t n) {
  const auto* x = static_cast<const block_q4_1_u*>(vx);
  for (int64_t i = 0; i < n / QK4_1; ++i, y += QK4_1) {
    const float d = h2f(x[i].d);
    const float m = h2f(x[i].m);
    for (int j = 0; j < QK4_1 / 2; ++j) {
      y[j] = static_cast<float>(x[i].qs[j] & 0x0f) * d + m;
      y[j + QK4_1 / 2] = static_cast<float>(x[i].qs[j] >> 4) * d + m;
    }
  }
}

void dequant_q5_0(const void* vx, float* y, int64_t n) {
  const auto* x = static_cast<const block_q5_0_u*>(vx);
  for (int64_t i = 0; i < n / QK5_0; ++i, y += QK5_0) {
    const float d = h2f(x[i].d);
    const uint32_t qh = load_u32le(x[i].qh);
    for (int j = 0; j < QK5_0 / 2; ++j) {
      const int h0 = static_cast<int>((qh >> j) & 1u) << 4;
      const int h1 = static_cast<int>((qh >> (j + 16)) & 1u) << 4;
      y[j] = static_cast<float>(((x[i].qs[j] & 0x0f) | h0) - 16) * d;
      y[j + QK5_0 / 2] = static_cast<float>(((x[i].qs[j] >> 4) | h1) - 16) * d;
    }
  }
}

void dequant_q5_1(const void* vx, float* y, int64_t n) {
  const auto* x = static_cast<const block_q5_1_u*>(vx);
  for (int64_t i = 0; i < n / QK5_1; ++i, y += QK5_1) {
    const float d = h2f(x[i].d);
    const float m = h2f(x[i].m);
    const uint32_t qh = load_u32le(x[i].qh);
    for (int j = 0; j < QK5_1 / 2; ++j) {
      const int h0 = static_cast<int>((qh >> j) & 1u) << 4;
      const int h1 = static_cast<int>((qh >> (j + 16)) & 1u) << 4;
      y[j] = static_cast<float>((x[i].qs[j] & 0x0f) | h0) * d + m;
      y[j + QK5_1 / 2] = static_cast<float>((x[i].qs[j] >> 4) | h1) * d + m;
    }
  }
}

void dequant_q8_0(const void* vx, float* y, int64_t n) {
  const auto* x = static_cast<const block_q8_0_u*>(vx);
  for (int64_t i = 0; i < n / QK8_0; ++i, y += QK8_0) {
    const float d = h2f(x[i].d);
    for (int j = 0; j < QK8_0; ++j) y[j] = static_cast<float>(x[i].qs[j]) * d;
  }
}

void dequant_q8_1(const void* vx, float* y, int64_t n) {
  const auto* x = static_cast<const block_q8_1_u*>(vx);
  for (int64_t i = 0; i < n / QK8_1; ++i, y += QK8_1) {
    const float d = h2f(x[i].d);
    for (int j = 0; j < QK8_1; ++j) y[j] = static_cast<float>(x[i].qs[j]) * d;
  }
}

// Q2_K: 2-bit values of element 128h + 32k + l at bits 2k of qs[32h + l]; sub-block of 16
// elements j = element / 16 has scale scales[j] & 15 and min scales[j] >> 4.
void dequant_q2_K(const void* vx, float* y, int64_t n) {
  const auto* x = static_cast<const block_q2_K_u*>(vx);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float d = h2f(x[i].d);
    const float dmin = h2f(x[i].dmin);
    for (int e = 0; e < QK_K; ++e) {
      const int h = e / 128, k = (e % 128) / 32, l = e % 32;
      const uint8_t sc = x[i].scales[e / 16];
      const float dl = d * static_cast<float>(sc & 0x0f);
      const float ml = dmin * static_cast<float>(sc >> 4);
      const int q = (x[i].qs[32 * h + l] >> (2 * k)) & 3;
      *y++ = dl * static_cast<float>(q) - ml;
    }
  }
}

// Q3_K: low 2 bits as Q2_K; the third bit of element e is bit e / 32 of hmask[e % 32] (clear
// means subtract 4).
void dequant_q3_K(const void* vx, float* y, int64_t n) {
  const auto* x = static_cast<const block_q3_K_u*>(vx);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float d_all = h2f(x[i].d);
    int sc[16];
    for (int g = 0; g < 16; ++g) sc[g] = unpack_scale_q3k(g, x[i].scales);
    for (int e = 0; e < QK_K; ++e) {
      const int h = e / 128, k = (e % 128) / 32, l = e % 32;
      const float dl = d_all * static_cast<float>(sc[e / 16]);
      const int lo = (x[i].qs[32 * h + l] >> (2 * k)) & 3;
      const int q = lo - (((x[i].hmask[l] >> (e / 32)) & 1) ? 0 : 4);
      *y++ = dl * static_cast<float>(q);
    }
  }
}

// Q4_K: chunk c of 64 elements uses qs[32c .. 32c+31]: low nibbles are sub-block 2c, high
// nibbles sub-block 2c+1.
void dequant_q4_K(const void* vx, float* y, int64_t n) {
  const auto* x = static_cast<const block_q4_K_u*>(vx);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float d = h2f(x[i].d);
    const float dmin = h2f(x[i].dmin);
    for (int c = 0; c < QK_K / 64; ++c) {
      uint8_t sc, mn;
      unpack_scale_min_k4(2 * c, x[i].scales, &sc, &mn);
      const float d1 = d * sc, m1 = dmin * mn;
      unpack_scale_min_k4(2 * c + 1, x[i].scales, &sc, &mn);
      const float d2 = d * sc, m2 = dmin * mn;
      const uint8_t* q = x[i].qs + 32 * c;
      for (int l = 0; l < 32; ++l) *y++ = d1 * static_cast<float>(q[l] & 0x0f) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * static_cast<float>(q[l] >> 4) - m2;
    }
  }
}

// Q5_K: as Q4_K; the 5th bit of element 64c + l is bit 2c of qh[l], of 64c + 32 + l bit 2c+1.
void dequant_q5_K(const void* vx, float* y, int64_t n) {
  const auto* x = static_cast<const block_q5_K_u*>(vx);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float d = h2f(x[i].d);
    const float dmin = h2f(x[i].dmin);
    for (int c = 0; c < QK_K / 64; ++c) {
      uint8_t sc, mn;
      unpack_scale_min_k4(2 * c, x[i].scales, &sc, &mn);
      const float d1 = d * sc, m1 = dmin * mn;
      unpack_scale_min_k4(2 * c + 1, x[i].scales, &sc, &mn);
      const float d2 = d * sc, m2 = dmin * mn;
      const uint8_t* ql = x[i].qs + 32 * c;
      const uint8_t* qh = x[i].qh;
      for (int l = 0; l < 32; ++l) {
        const int q = (ql[l] & 0x0f) + (((qh[l] >> (2 * c)) & 1) ? 16 : 0);
        *y++ = d1 * static_cast<float>(q) - m1;
      }
      for (int l = 0; l < 32; ++l) {
        const int q = (ql[l] >> 4) + (((qh[l] >> (2 * c + 1)) & 1) ? 16 : 0);
        *y++ = d2 * static_cast<float>(q) - m2;
      }
    }
  }
}

// Q6_K: 6-bit value of element e = 128h + 32k + l (l < 32), minus 32: low 4 bits in
// ql[64h + l + 32(k&1)] (low nibble for k < 2, high nibble for k >= 2), high 2 bits at bits 2k of
// qh[32h + l]; scale scales[e / 16].
inline int q6k_value(const block_q6_K_u& b, int e) {
  const int h = e / 128, k = (e % 128) / 32, l = e % 32;
  const uint8_t lbyte = b.ql[64 * h + l + 32 * (k & 1)];
  const int lo = k < 2 ? (lbyte & 0x0f) : (lbyte >> 4);
  const int hi = (b.qh[32 * h + l] >> (2 * k)) & 3;
  return (lo | (hi << 4)) - 32;
}

void dequant_q6_K(const void* vx, float* y, int64_t n) {
  const auto* x = static_cast<const block_q6_K_u*>(vx);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float d = h2f(x[i].d);
    for (int e = 0; e < QK_K; ++e) {
      *y++ = d * static_cast<float>(x[i].scales[e / 16]) * static_cast<float>(q6k_value(x[i], e));
    }
  }
}

void dequant_iq4_nl(const void* vx, float* y, int64_t n) {
  const auto* x = static_cast<const block_iq4_nl_u*>(vx);
  for (int64_t i = 0; i < n / QK4_NL; ++i, y += QK4_NL) {
    const float d = h2f(x[i].d);
    for (int j = 0; j < QK4_NL / 2; ++j) {
      y[j] = d * static_cast<float>(kIq4nlValues[x[i].qs[j] & 0x0f]);
      y[j + QK4_NL / 2] = d * static_cast<float>(kIq4nlValues[x[i].qs[j] >> 4]);
    }
  }
}

// Signed scale ls - 32 of sub-block ib (0..7) of an IQ4_XS block.
inline int iq4xs_scale(const block_iq4_xs_u& b, int ib) {
  const int lo = (b.scales_l[ib / 2] >> (4 * (ib % 2))) & 0x0f;
  const int hi = (b.scales_h >> (2 * ib)) & 3;
  return (lo | (hi << 4)) - 32;
}

void dequant_iq4_xs(const void* vx, float* y, int64_t n) {
  const auto* x = static_cast<const block_iq4_xs_u*>(vx);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float d = h2f(x[i].d);
    for (int ib = 0; ib < QK_K / 32; ++ib, y += 32) {
      const float dl = d * static_cast<float>(iq4xs_scale(x[i], ib));
      const uint8_t* qs = x[i].qs + 16 * ib;
      for (int j = 0; j < 16; ++j) {
        y[j] = dl * static_cast<float>(kIq4nlValues[qs[j] & 0x0f]);
        y[j + 16] = dl * static_cast<float>(kIq4nlValues[qs[j] >> 4]);
      }
    }
  }
}

void dequant_q8_K(const void* vx, float* y, int64_t n) {
  const auto* x = static_cast<const block_q8_K_u*>(vx);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    for (int j = 0; j < QK_K; ++j) *y++ = x[i].d * static_cast<float>(x[i].qs[j]);
  }
}

// ---------------------------------------------------------------------------------------------
// Plain conversions (also the activation "quantizers" of F32/F16/BF16 weights).

void quant_f32(const float* x, void* y, int64_t n) {
  std::memcpy(y, x, static_cast<size_t>(n) * sizeof(float));
}

void quant_f16(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<half_bits_u*>(vy);
  for (int64_t i = 0; i < n; ++i) y[i] = f32_to_fp16(x[i]);
}

void quant_bf16(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<half_bits_u*>(vy);
  for (int64_t i = 0; i < n; ++i) y[i] = f32_to_bf16(x[i]);
}

// ---------------------------------------------------------------------------------------------
// Reference-quality weight quantization.
//
// Group fitting: a group of n <= 256 values is approximated as d*L (symmetric types) or
// d*L + m (types with a min), with integer levels L, minimising the weighted squared error
// sum w_i (x_i - x^_i)^2. We try a range of inverse scales, fit d (and m) by weighted least
// squares for the levels each one gives, keep the best, and polish by re-rounding against the
// fitted scale. Without an importance vector the weights w_i = rms(group) + |x_i| favour large
// values a little, as llama.cpp's K-quant quantizers do; with one, w_i = imp_i * sqrt(sigma2 +
// x_i^2) (group_weights). Super-block scales are then rounded to fp16 first
// (fit_scale: never to zero, never so low that the largest sub-block scale overflows its integer
// range), the integer sub-block scales are taken relative to the rounded value so they absorb
// the fp16 rounding, and each sub-block scale (and min) is chosen among its neighbouring
// integers by the error of the final levels.

constexpr int kMaxGroup = QK_K;

void importance(int n, const float* x, float* w) {
  double s2 = 0;
  for (int i = 0; i < n; ++i) s2 += static_cast<double>(x[i]) * x[i];
  const float rms = static_cast<float>(std::sqrt(s2 / n));
  for (int i = 0; i < n; ++i) w[i] = rms + std::fabs(x[i]);
}

// Mean of x_i^2 over n elements (sigma2 of group_weights: taken over the row for the 32-element
// block types, over the super-block for the 256-element ones).
float mean_square(int64_t n, const float* x) {
  double s2 = 0;
  for (int64_t i = 0; i < n; ++i) s2 += static_cast<double>(x[i]) * x[i];
  return n > 0 ? static_cast<float>(s2 / static_cast<double>(n)) : 0.0f;
}

// Whether an importance vector imp[n] (may be nullptr) says anything: some element is > 0.
bool informative(int n, const float* imp) {
  for (int i = 0; imp && i < n; ++i) {
    if (imp[i] > 0) return true;
  }
  return false;
}

// Fitting weights w[n] of a group. With an importance vector imp[n] (per-element, >= 0) that is
// not all zero over the group: w_i = imp_i * sqrt(sigma2 + x_i^2), llama.cpp's weighting of an
// importance matrix (sigma2 keeps some weight on the small values). Otherwise (imp == nullptr, or
// nothing in the group matters, where any fit is as good as another) the unweighted default,
// importance() above, so that results without importance are those of the plain quantizer.
void group_weights(int n, const float* x, const float* imp, float sigma2, float* w) {
  if (!informative(n, imp)) {
    importance(n, x, w);
    return;
  }
  for (int i = 0; i < n; ++i) w[i] = imp[i] * std::sqrt(sigma2 + x[i] * x[i]);
}

// The importance of group g of `size` elements, or nullptr without importance.
inline const float* imp_at(const float* imp, int64_t g, int64_t size) { return imp ? imp + g * size : nullptr; }

// Symmetric fit: x ~ d * L, L in [lo, hi]. Returns d (0 with L = 0 for an all-zero group).
float fit_sym(int n, const float* x, const float* w, int lo, int hi, int* L) {
  float amax = 0, mx = 0;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      mx = x[i];
    }
  }
  if (amax == 0) {
    std::fill(L, L + n, 0);
    return 0.0f;
  }
  int Lt[kMaxGroup];
  double best_gain = -1, best_d = 0;  // gain = (sum w x L)^2 / sum w L^2 = error reduction
  auto try_iscale = [&](float iscale) {
    double slx = 0, sll = 0;
    for (int i = 0; i < n; ++i) {
      const int l = qround(iscale * x[i], lo, hi);
      Lt[i] = l;
      slx += static_cast<double>(w[i]) * x[i] * l;
      sll += static_cast<double>(w[i]) * l * l;
    }
    if (sll > 0 && slx * slx > best_gain * sll) {
      best_gain = slx * slx / sll;
      best_d = slx / sll;
      std::copy(Lt, Lt + n, L);
      return true;
    }
    return false;
  };
  for (int k = -10; k <= 10; ++k) {
    try_iscale((static_cast<float>(lo) + 0.1f * k) / mx);
    try_iscale((static_cast<float>(hi) + 0.1f * k) / mx);
  }
  for (int it = 0; it < 4 && best_d != 0; ++it) {
    if (!try_iscale(static_cast<float>(1.0 / best_d))) break;
  }
  return static_cast<float>(best_d);
}

// Affine fit: x ~ d * L + m, L in [0, nmax], d >= 0; with nonpos_min, m <= 0 (the K-quants store
// -m as a non-negative min). Returns d and stores m.
float fit_affine(int n, const float* x, const float* w, int nmax, int* L, float* m_out,
                 bool nonpos_min) {
  float lo = x[0], hi = x[0];
  for (int i = 1; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  if (nonpos_min && lo > 0) lo = 0;
  if (hi == lo) {
    std::fill(L, L + n, 0);
    *m_out = lo;
    return 0.0f;
  }
  int Lt[kMaxGroup];
  double best_err = std::numeric_limits<double>::infinity(), best_d = 0, best_m = 0;
  auto try_fit = [&](float iscale, float base) {
    double sw = 0, sl = 0, sll = 0, sx = 0, sxl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = qround(iscale * (x[i] - base), 0, nmax);
      Lt[i] = l;
      const double wi = w[i];
      sw += wi;
      sl += wi * l;
      sll += wi * l * l;
      sx += wi * x[i];
      sxl += wi * x[i] * l;
    }
    const double det = sw * sll - sl * sl;
    if (!(det > 0)) return false;
    double d = (sw * sxl - sx * sl) / det;
    double m = (sll * sx - sl * sxl) / det;
    if (nonpos_min && m > 0) {
      m = 0;
      d = sxl / sll;
    }
    if (!(d > 0)) return false;
    double err = 0;
    for (int i = 0; i < n; ++i) {
      const double r = d * Lt[i] + m - x[i];
      err += w[i] * r * r;
    }
    if (err < best_err) {
      best_err = err;
      best_d = d;
      best_m = m;
      std::copy(Lt, Lt + n, L);
      return true;
    }
    return false;
  };
  for (int k = -10; k <= 10; ++k) try_fit((static_cast<float>(nmax) + 0.1f * k) / (hi - lo), lo);
  for (int it = 0; it < 4 && best_d > 0; ++it) {
    if (!try_fit(static_cast<float>(1.0 / best_d), static_cast<float>(best_m))) break;
  }
  if (!(best_d > 0)) {  // degenerate (cannot happen for hi > lo, kept as a safe fallback)
    best_d = (hi - lo) / nmax;
    best_m = lo;
    for (int i = 0; i < n; ++i) L[i] = qround((x[i] - lo) / static_cast<float>(best_d), 0, nmax);
  }
  *m_out = static_cast<float>(best_m);
  return static_cast<float>(best_d);
}

// Levels of a symmetric group for the final (stored) scale d.
void requant_sym(int n, const float* x, float d, int lo, int hi, int* L) {
  for (int i = 0; i < n; ++i) L[i] = d != 0 ? qround(x[i] / d, lo, hi) : 0;
}

// Legacy symmetric types: one fp16 scale per 32 elements, L in [lo, hi] stored as L - lo.
template <int kBits>
void quant_legacy_sym(const float* x, const float* imp, float sigma2, half_bits* d_out, int* U) {
  constexpr int lo = -(1 << (kBits - 1)), hi = (1 << (kBits - 1)) - 1;
  float w[32];
  int L[32];
  group_weights(32, x, imp, sigma2, w);
  const float d = fit_sym(32, x, w, lo, hi, L);
  *d_out = f2h_sat(d);
  if (fp16_to_f32(*d_out) == 0 && d != 0) *d_out = fit_scale(d, 1);  // underflow: keep a step
  requant_sym(32, x, h2f(*d_out), lo, hi, L);
  for (int j = 0; j < 32; ++j) U[j] = L[j] - lo;
}

// Legacy affine types: fp16 scale d and fp16 min m per 32 elements, x = d*L + m.
template <int kBits>
void quant_legacy_affine(const float* x, const float* imp, float sigma2, half_bits* d_out, half_bits* m_out,
                         int* U) {
  constexpr int nmax = (1 << kBits) - 1;
  float w[32];
  group_weights(32, x, imp, sigma2, w);
  float m = 0;
  const float d = fit_affine(32, x, w, nmax, U, &m, false);
  *d_out = f2h_sat(d);
  if (fp16_to_f32(*d_out) == 0 && d != 0) *d_out = fit_scale(d, 1);  // underflow: keep a step
  *m_out = f2h_sat(m);
  const float dh = h2f(*d_out), mh = h2f(*m_out);
  for (int j = 0; j < 32; ++j) U[j] = dh > 0 ? qround((x[j] - mh) / dh, 0, nmax) : 0;
}

void qref_q4_0(const float* x, void* vy, int64_t n, const float* imp) {
  auto* y = static_cast<block_q4_0_u*>(vy);
  const float sigma2 = imp ? mean_square(n, x) : 0.0f;
  for (int64_t i = 0; i < n / QK4_0; ++i, x += QK4_0) {
    int U[32];
    quant_legacy_sym<4>(x, imp_at(imp, i, QK4_0), sigma2, &y[i].d, U);
    for (int j = 0; j < 16; ++j) y[i].qs[j] = static_cast<uint8_t>(U[j] | (U[j + 16] << 4));
  }
}

void qref_q4_1(const float* x, void* vy, int64_t n, const float* imp) {
  auto* y = static_cast<block_q4_1_u*>(vy);
  const float sigma2 = imp ? mean_square(n, x) : 0.0f;
  for (int64_t i = 0; i < n / QK4_1; ++i, x += QK4_1) {
    int U[32];
    quant_legacy_affine<4>(x, imp_at(imp, i, QK4_1), sigma2, &y[i].d, &y[i].m, U);
    for (int j = 0; j < 16; ++j) y[i].qs[j] = static_cast<uint8_t>(U[j] | (U[j + 16] << 4));
  }
}

void qref_q5_0(const float* x, void* vy, int64_t n, const float* imp) {
  auto* y = static_cast<block_q5_0_u*>(vy);
  const float sigma2 = imp ? mean_square(n, x) : 0.0f;
  for (int64_t i = 0; i < n / QK5_0; ++i, x += QK5_0) {
    int U[32];
    quant_legacy_sym<5>(x, imp_at(imp, i, QK5_0), sigma2, &y[i].d, U);
    pack_q5(U, y[i].qs, y[i].qh);
  }
}

void qref_q5_1(const float* x, void* vy, int64_t n, const float* imp) {
  auto* y = static_cast<block_q5_1_u*>(vy);
  const float sigma2 = imp ? mean_square(n, x) : 0.0f;
  for (int64_t i = 0; i < n / QK5_1; ++i, x += QK5_1) {
    int U[32];
    quant_legacy_affine<5>(x, imp_at(imp, i, QK5_1), sigma2, &y[i].d, &y[i].m, U);
    pack_q5(U, y[i].qs, y[i].qh);
  }
}

// Weighted squared error sum w_i (x_i - d * L_i)^2 of a symmetric group at the stored scale d.
double sym_error(int n, const float* x, const float* w, float d, const int* L) {
  double err = 0;
  for (int i = 0; i < n; ++i) {
    const double r = static_cast<double>(d * static_cast<float>(L[i])) - x[i];
    err += w[i] * r * r;
  }
  return err;
}

// Q8_0 weights: d = amax / 127 rounded to fp16 first (fit_scale), then q = round(x / d) against
// the stored scale (llama.cpp's quantize_row_q8_0_ref divides by the unrounded scale instead).
// With importance, the weighted fit (fit_sym) competes with that scale; the lower weighted error
// at the stored scale wins.
void qref_q8_0(const float* x, void* vy, int64_t n, const float* imp) {
  auto* y = static_cast<block_q8_0_u*>(vy);
  const float sigma2 = imp ? mean_square(n, x) : 0.0f;
  for (int64_t i = 0; i < n / QK8_0; ++i, x += QK8_0) {
    float amax = 0;
    for (int j = 0; j < QK8_0; ++j) amax = std::max(amax, std::fabs(x[j]));
    y[i].d = fit_scale(amax, 127);
    const float d = h2f(y[i].d);
    int L[QK8_0];
    requant_sym(QK8_0, x, d, -127, 127, L);
    if (informative(QK8_0, imp_at(imp, i, QK8_0))) {
      float w[QK8_0];
      int Lw[QK8_0];
      group_weights(QK8_0, x, imp_at(imp, i, QK8_0), sigma2, w);
      const float dw = fit_sym(QK8_0, x, w, -127, 127, Lw);
      half_bits hw = f2h_sat(dw);
      if (fp16_to_f32(hw) == 0 && dw != 0) hw = fit_scale(dw, 1);
      requant_sym(QK8_0, x, h2f(hw), -127, 127, Lw);
      if (sym_error(QK8_0, x, w, h2f(hw), Lw) < sym_error(QK8_0, x, w, d, L)) {
        y[i].d = hw;
        std::copy(Lw, Lw + QK8_0, L);
      }
    }
    for (int j = 0; j < QK8_0; ++j) y[i].qs[j] = static_cast<int8_t>(L[j]);
  }
}

// Affine K-quants (Q2_K, Q4_K, Q5_K): groups of G elements, levels [0, nmax], integer scales and
// mins in [0, smax] relative to the fp16 super-scales d and dmin; x^ = (d*sc)*L - (dmin*mn).
// Outputs the levels U[256], integer scales sc[256/G], mins mn[256/G] and the two fp16 scales.
// imp: the super-block's importance [256] or nullptr.
template <int G>
void quant_k_affine(const float* x, const float* imp, int nmax, int smax, int* U, int* sc, int* mn,
                    half_bits* d_out, half_bits* dmin_out) {
  constexpr int NG = QK_K / G;
  float wt[QK_K], scale[NG], minv[NG];
  const float sigma2 = imp ? mean_square(QK_K, x) : 0.0f;
  for (int g = 0; g < NG; ++g) {
    group_weights(G, x + G * g, imp_at(imp, g, G), sigma2, wt + G * g);
    float m = 0;
    scale[g] = fit_affine(G, x + G * g, wt + G * g, nmax, U + G * g, &m, true);
    minv[g] = -m;
  }
  const float max_scale = *std::max_element(scale, scale + NG);
  const float max_min = *std::max_element(minv, minv + NG);
  *d_out = fit_scale(max_scale, smax);
  *dmin_out = fit_scale(max_min, smax);
  const float D = h2f(*d_out), DM = h2f(*dmin_out);
  int Lt[G];
  for (int g = 0; g < NG; ++g) {
    const float* xg = x + G * g;
    const float* wg = wt + G * g;
    const int s0 = D > 0 ? qround(scale[g] / D, 0, smax) : 0;
    const int m0 = DM > 0 ? qround(minv[g] / DM, 0, smax) : 0;
    double best = std::numeric_limits<double>::infinity();
    for (int s = std::max(0, s0 - 1); s <= std::min(smax, s0 + 1); ++s) {
      for (int mi = std::max(0, m0 - 1); mi <= std::min(smax, m0 + 1); ++mi) {
        const float dl = D * static_cast<float>(s), ml = DM * static_cast<float>(mi);
        double err = 0;
        for (int i = 0; i < G; ++i) {
          Lt[i] = dl > 0 ? qround((xg[i] + ml) / dl, 0, nmax) : 0;
          const double r = static_cast<double>(dl * static_cast<float>(Lt[i]) - ml) - xg[i];
          err += wg[i] * r * r;
        }
        if (err < best) {
          best = err;
          sc[g] = s;
          mn[g] = mi;
          std::copy(Lt, Lt + G, U + G * g);
        }
      }
    }
  }
}

// Symmetric K-quants (Q3_K, Q6_K): groups of 16, levels [lo, hi], signed integer scales in
// [slo, shi] relative to the fp16 super-scale d (the largest group scale maps to slo).
// imp: the super-block's importance [256] or nullptr.
void quant_k_sym(const float* x, const float* imp, int lo, int hi, int slo, int shi, int* L, int* sc,
                 half_bits* d_out) {
  constexpr int G = 16, NG = QK_K / G;
  float wt[QK_K], scale[NG];
  float max_scale = 0, amax = 0;
  const float sigma2 = imp ? mean_square(QK_K, x) : 0.0f;
  for (int g = 0; g < NG; ++g) {
    group_weights(G, x + G * g, imp_at(imp, g, G), sigma2, wt + G * g);
    scale[g] = fit_sym(G, x + G * g, wt + G * g, lo, hi, L + G * g);
    if (std::fabs(scale[g]) > amax) {
      amax = std::fabs(scale[g]);
      max_scale = scale[g];
    }
  }
  *d_out = fit_scale(max_scale, slo);
  const float D = h2f(*d_out);
  int Lt[G];
  for (int g = 0; g < NG; ++g) {
    const float* xg = x + G * g;
    const float* wg = wt + G * g;
    const int s0 = D != 0 ? qround(scale[g] / D, slo, shi) : 0;
    double best = std::numeric_limits<double>::infinity();
    for (int s = std::max(slo, s0 - 1); s <= std::min(shi, s0 + 1); ++s) {
      const float dl = D * static_cast<float>(s);
      requant_sym(G, xg, dl, lo, hi, Lt);
      double err = 0;
      for (int i = 0; i < G; ++i) {
        const double r = static_cast<double>(dl * static_cast<float>(Lt[i])) - xg[i];
        err += wg[i] * r * r;
      }
      if (err < best) {
        best = err;
        sc[g] = s;
        std::copy(Lt, Lt + G, L + G * g);
      }
    }
  }
}

void qref_q2_K(const float* x, void* vy, int64_t n, const float* imp) {
  auto* y = static_cast<block_q2_K_u*>(vy);
  for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
    int U[QK_K], sc[16], mn[16];
    quant_k_affine<16>(x, imp_at(imp, i, QK_K), 3, 15, U, sc, mn, &y[i].d, &y[i].dmin);
    for (int g = 0; g < 16; ++g) y[i].scales[g] = static_cast<uint8_t>(sc[g] | (mn[g] << 4));
    pack_2bit(U, y[i].qs);
  }
}

void qref_q3_K(const float* x, void* vy, int64_t n, const float* imp) {
  auto* y = static_cast<block_q3_K_u*>(vy);
  for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
    int L[QK_K], sc[16];
    quant_k_sym(x, imp_at(imp, i, QK_K), -4, 3, -32, 31, L, sc, &y[i].d);
    pack_scales_q3k(sc, y[i].scales);
    int U[QK_K];
    std::memset(y[i].hmask, 0, sizeof(y[i].hmask));
    for (int e = 0; e < QK_K; ++e) {
      U[e] = L[e] + 4;  // 0..7; bit 2 goes to hmask
      if (U[e] & 4) y[i].hmask[e % 32] |= static_cast<uint8_t>(1 << (e / 32));
    }
    pack_2bit(U, y[i].qs);
  }
}

void qref_q4_K(const float* x, void* vy, int64_t n, const float* imp) {
  auto* y = static_cast<block_q4_K_u*>(vy);
  for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
    int U[QK_K], sc[8], mn[8];
    quant_k_affine<32>(x, imp_at(imp, i, QK_K), 15, 63, U, sc, mn, &y[i].d, &y[i].dmin);
    uint8_t sc8[8], mn8[8];
    for (int g = 0; g < 8; ++g) {
      sc8[g] = static_cast<uint8_t>(sc[g]);
      mn8[g] = static_cast<uint8_t>(mn[g]);
    }
    pack_scale_min_k4(sc8, mn8, y[i].scales);
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        y[i].qs[32 * c + l] = static_cast<uint8_t>(U[64 * c + l] | (U[64 * c + 32 + l] << 4));
      }
    }
  }
}

void qref_q5_K(const float* x, void* vy, int64_t n, const float* imp) {
  auto* y = static_cast<block_q5_K_u*>(vy);
  for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
    int U[QK_K], sc[8], mn[8];
    quant_k_affine<32>(x, imp_at(imp, i, QK_K), 31, 63, U, sc, mn, &y[i].d, &y[i].dmin);
    uint8_t sc8[8], mn8[8];
    for (int g = 0; g < 8; ++g) {
      sc8[g] = static_cast<uint8_t>(sc[g]);
      mn8[g] = static_cast<uint8_t>(mn[g]);
    }
    pack_scale_min_k4(sc8, mn8, y[i].scales);
    std::memset(y[i].qh, 0, sizeof(y[i].qh));
    for (int c = 0; c < 4; ++c) {
      for (int l = 0; l < 32; ++l) {
        const int a = U[64 * c + l], b = U[64 * c + 32 + l];
        y[i].qs[32 * c + l] = static_cast<uint8_t>((a & 0x0f) | ((b & 0x0f) << 4));
        y[i].qh[l] |= static_cast<uint8_t>(((a >> 4) << (2 * c)) | ((b >> 4) << (2 * c + 1)));
      }
    }
  }
}

void qref_q6_K(const float* x, void* vy, int64_t n, const float* imp) {
  auto* y = static_cast<block_q6_K_u*>(vy);
  for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
    int L[QK_K], sc[16];
    quant_k_sym(x, imp_at(imp, i, QK_K), -32, 31, -128, 127, L, sc, &y[i].d);
    for (int g = 0; g < 16; ++g) y[i].scales[g] = static_cast<int8_t>(sc[g]);
    std::memset(y[i].qh, 0, sizeof(y[i].qh));
    for (int e = 0; e < QK_K; ++e) {
      const int u = L[e] + 32;  // 0..63
      const int h = e / 128, k = (e % 128) / 32, l = e % 32;
      uint8_t& lb = y[i].ql[64 * h + l + 32 * (k & 1)];
      if (k < 2) {
        lb = static_cast<uint8_t>((lb & 0xf0) | (u & 0x0f));
      } else {
        lb = static_cast<uint8_t>((lb & 0x0f) | ((u & 0x0f) << 4));
      }
      y[i].qh[32 * h + l] |= static_cast<uint8_t>((u >> 4) << (2 * k));
    }
  }
}

// Non-linear 4-bit types (IQ4_NL, IQ4_XS): x ~ d * V[c] with V = kIq4nlValues and 4-bit codes c.
// The group fit is fit_sym's with the codebook in place of the integer levels: candidate inverse
// scales put the group's largest-magnitude element near either end of the codebook (-127 or
// +113; the codebook is not symmetric, so the sign of d matters), codes are the nearest values,
// d is the weighted least-squares scale for those codes, the best is kept and polished.

// Codebook fit of a group: returns d (0 for an all-zero group) and the codes C.
float fit_iq4(int n, const float* x, const float* w, int* C) {
  float amax = 0, mx = 0;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      mx = x[i];
    }
  }
  if (amax == 0) {
    std::fill(C, C + n, kIq4ZeroCode);
    return 0.0f;
  }
  int Ct[kMaxGroup];
  double best_gain = -1, best_d = 0;
  auto try_iscale = [&](float iscale) {
    double svx = 0, svv = 0;
    for (int i = 0; i < n; ++i) {
      const int c = nearest_iq4(iscale * x[i]);
      const double v = kIq4nlValues[c];
      Ct[i] = c;
      svx += static_cast<double>(w[i]) * x[i] * v;
      svv += static_cast<double>(w[i]) * v * v;
    }
    if (svv > 0 && svx * svx > best_gain * svv) {
      best_gain = svx * svx / svv;
      best_d = svx / svv;
      std::copy(Ct, Ct + n, C);
      return true;
    }
    return false;
  };
  for (int k = -10; k <= 10; ++k) {
    try_iscale(static_cast<float>(kIq4nlValues[0] + k) / mx);
    try_iscale(static_cast<float>(kIq4nlValues[15] + k) / mx);
  }
  for (int it = 0; it < 4 && best_d != 0; ++it) {
    if (!try_iscale(static_cast<float>(1.0 / best_d))) break;
  }
  return static_cast<float>(best_d);
}

// Codes of a group for the final (stored) scale d.
void requant_iq4(int n, const float* x, float d, int* C) {
  for (int i = 0; i < n; ++i) C[i] = d != 0 ? nearest_iq4(x[i] / d) : kIq4ZeroCode;
}

// Weighted squared error of a group's codes C at scale d, evaluated as the dequantizer does.
double iq4_error(int n, const float* x, const float* w, float d, const int* C) {
  double err = 0;
  for (int i = 0; i < n; ++i) {
    const double r = static_cast<double>(d * static_cast<float>(kIq4nlValues[C[i]])) - x[i];
    err += w[i] * r * r;
  }
  return err;
}

// IQ4_NL: one fp16 scale per 32 elements.
void qref_iq4_nl(const float* x, void* vy, int64_t n, const float* imp) {
  auto* y = static_cast<block_iq4_nl_u*>(vy);
  const float sigma2 = imp ? mean_square(n, x) : 0.0f;
  for (int64_t i = 0; i < n / QK4_NL; ++i, x += QK4_NL) {
    float w[QK4_NL];
    int C[QK4_NL];
    group_weights(QK4_NL, x, imp_at(imp, i, QK4_NL), sigma2, w);
    const float d = fit_iq4(QK4_NL, x, w, C);
    half_bits dh = f2h_sat(d);
    if (fp16_to_f32(dh) == 0 && d != 0) dh = fit_scale(d, 1);  // underflow: keep a step
    y[i].d = dh;
    requant_iq4(QK4_NL, x, h2f(dh), C);
    pack_iq4_32(C, y[i].qs);
  }
}

// IQ4_XS: 8 groups of 32 with signed 6-bit scales s in [-32, 31] relative to the fp16 super-scale
// (the largest group scale maps to -32, as in quant_k_sym); each group's s is chosen among the
// neighbours of its fitted value by the weighted error of the final codes.
void qref_iq4_xs(const float* x, void* vy, int64_t n, const float* imp) {
  constexpr int G = 32, NG = QK_K / G;
  auto* y = static_cast<block_iq4_xs_u*>(vy);
  for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
    const float* ib = imp_at(imp, i, QK_K);
    const float sigma2 = ib ? mean_square(QK_K, x) : 0.0f;
    float wt[QK_K], scale[NG];
    int C[QK_K];
    float max_scale = 0, amax = 0;
    for (int g = 0; g < NG; ++g) {
      group_weights(G, x + G * g, imp_at(ib, g, G), sigma2, wt + G * g);
      scale[g] = fit_iq4(G, x + G * g, wt + G * g, C + G * g);
      if (std::fabs(scale[g]) > amax) {
        amax = std::fabs(scale[g]);
        max_scale = scale[g];
      }
    }
    y[i].d = fit_scale(max_scale, -32);
    const float D = h2f(y[i].d);
    int Ct[G];
    int sc[NG];
    for (int g = 0; g < NG; ++g) {
      const float* xg = x + G * g;
      const float* wg = wt + G * g;
      const int s0 = D != 0 ? qround(scale[g] / D, -32, 31) : 0;
      double best = std::numeric_limits<double>::infinity();
      sc[g] = s0;
      if (scale[g] == 0) {  // all-zero group: scale 0 (there is no zero code to use instead)
        std::fill(C + G * g, C + G * g + G, kIq4ZeroCode);
        continue;
      }
      for (int s = std::max(-32, s0 - 1); s <= std::min(31, s0 + 1); ++s) {
        const float dl = D * static_cast<float>(s);
        requant_iq4(G, xg, dl, Ct);
        const double err = iq4_error(G, xg, wg, dl, Ct);
        if (err < best) {
          best = err;
          sc[g] = s;
          std::copy(Ct, Ct + G, C + G * g);
        }
      }
    }
    std::memset(y[i].scales_l, 0, sizeof(y[i].scales_l));
    uint16_t sh = 0;
    for (int g = 0; g < NG; ++g) {
      const int ls = sc[g] + 32;  // 0..63
      y[i].scales_l[g / 2] |= static_cast<uint8_t>((ls & 0x0f) << (4 * (g % 2)));
      sh = static_cast<uint16_t>(sh | ((ls >> 4) << (2 * g)));
    }
    y[i].scales_h = sh;
    for (int g = 0; g < NG; ++g) pack_iq4_32(C + G * g, y[i].qs + 16 * g);
  }
}

// ---------------------------------------------------------------------------------------------
// Dot products, in the evaluation order of llama.cpp's generic kernels.

float dot_f32(int64_t n, const void* vw, const void* va) {
  const auto* w = static_cast<const float_u*>(vw);
  const auto* a = static_cast<const float_u*>(va);
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(w[i] * a[i]);
  return static_cast<float>(s);
}

float dot_f16(int64_t n, const void* vw, const void* va) {
  const auto* w = static_cast<const half_bits_u*>(vw);
  const auto* a = static_cast<const half_bits_u*>(va);
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(fp16_to_f32(w[i]) * fp16_to_f32(a[i]));
  return static_cast<float>(s);
}

float dot_bf16(int64_t n, const void* vw, const void* va) {
  const auto* w = static_cast<const half_bits_u*>(vw);
  const auto* a = static_cast<const half_bits_u*>(va);
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(bf16_to_f32(w[i]) * bf16_to_f32(a[i]));
  return static_cast<float>(s);
}

float dot_q4_0(int64_t n, const void* vw, const void* va) {
  const auto* x = static_cast<const block_q4_0_u*>(vw);
  const auto* y = static_cast<const block_q8_0_u*>(va);
  float sumf = 0;
  for (int64_t i = 0; i < n / QK8_0; ++i) {
    int sumi = 0;
    for (int j = 0; j < 16; ++j) {
      sumi += ((x[i].qs[j] & 0x0f) - 8) * y[i].qs[j] + ((x[i].qs[j] >> 4) - 8) * y[i].qs[j + 16];
    }
    sumf += static_cast<float>(sumi) * h2f(x[i].d) * h2f(y[i].d);
  }
  return sumf;
}

float dot_q4_1(int64_t n, const void* vw, const void* va) {
  const auto* x = static_cast<const block_q4_1_u*>(vw);
  const auto* y = static_cast<const block_q8_1_u*>(va);
  float sumf = 0;
  for (int64_t i = 0; i < n / QK8_1; ++i) {
    int sumi = 0;
    for (int j = 0; j < 16; ++j) {
      sumi += (x[i].qs[j] & 0x0f) * y[i].qs[j] + (x[i].qs[j] >> 4) * y[i].qs[j + 16];
    }
    sumf += (h2f(x[i].d) * h2f(y[i].d)) * static_cast<float>(sumi) + h2f(x[i].m) * h2f(y[i].s);
  }
  return sumf;
}

float dot_q5_0(int64_t n, const void* vw, const void* va) {
  const auto* x = static_cast<const block_q5_0_u*>(vw);
  const auto* y = static_cast<const block_q8_0_u*>(va);
  float sumf = 0;
  for (int64_t i = 0; i < n / QK8_0; ++i) {
    const uint32_t qh = load_u32le(x[i].qh);
    int sumi = 0;
    for (int j = 0; j < 16; ++j) {
      const int v0 = ((x[i].qs[j] & 0x0f) | static_cast<int>(((qh >> j) & 1u) << 4)) - 16;
      const int v1 = ((x[i].qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4)) - 16;
      sumi += v0 * y[i].qs[j] + v1 * y[i].qs[j + 16];
    }
    sumf += (h2f(x[i].d) * h2f(y[i].d)) * static_cast<float>(sumi);
  }
  return sumf;
}

float dot_q5_1(int64_t n, const void* vw, const void* va) {
  const auto* x = static_cast<const block_q5_1_u*>(vw);
  const auto* y = static_cast<const block_q8_1_u*>(va);
  float sumf = 0;
  for (int64_t i = 0; i < n / QK8_1; ++i) {
    const uint32_t qh = load_u32le(x[i].qh);
    int sumi = 0;
    for (int j = 0; j < 16; ++j) {
      const int v0 = (x[i].qs[j] & 0x0f) | static_cast<int>(((qh >> j) & 1u) << 4);
      const int v1 = (x[i].qs[j] >> 4) | static_cast<int>(((qh >> (j + 16)) & 1u) << 4);
      sumi += v0 * y[i].qs[j] + v1 * y[i].qs[j + 16];
    }
    sumf += (h2f(x[i].d) * h2f(y[i].d)) * static_cast<float>(sumi) + h2f(x[i].m) * h2f(y[i].s);
  }
  return sumf;
}

float dot_q8_0(int64_t n, const void* vw, const void* va) {
  const auto* x = static_cast<const block_q8_0_u*>(vw);
  const auto* y = static_cast<const block_q8_0_u*>(va);
  float sumf = 0;
  for (int64_t i = 0; i < n / QK8_0; ++i) {
    int sumi = 0;
    for (int j = 0; j < QK8_0; ++j) sumi += x[i].qs[j] * y[i].qs[j];
    sumf += static_cast<float>(sumi) * (h2f(x[i].d) * h2f(y[i].d));
  }
  return sumf;
}

float dot_q2_K(int64_t n, const void* vw, const void* va) {
  const auto* x = static_cast<const block_q2_K_u*>(vw);
  const auto* y = static_cast<const block_q8_K_u*>(va);
  float sumf = 0;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    int summs = 0;
    for (int g = 0; g < 16; ++g) summs += y[i].bsums[g] * (x[i].scales[g] >> 4);
    const float dall = y[i].d * h2f(x[i].d);
    const float dmin = y[i].d * h2f(x[i].dmin);
    int isum = 0;
    for (int g = 0; g < 16; ++g) {  // sub-block g = elements 16g .. 16g+15
      int isuml = 0;
      for (int e = 16 * g; e < 16 * g + 16; ++e) {
        const int h = e / 128, k = (e % 128) / 32, l = e % 32;
        isuml += y[i].qs[e] * ((x[i].qs[32 * h + l] >> (2 * k)) & 3);
      }
      isum += (x[i].scales[g] & 0x0f) * isuml;
    }
    sumf += dall * static_cast<float>(isum) - dmin * static_cast<float>(summs);
  }
  return sumf;
}

// Q3_K..Q6_K: llama.cpp's generic kernels accumulate the integer products in 8 lanes (lane =
// element index mod 8), scale each lane by the block's d and sum the lanes at the very end; we
// keep exactly that float order.
float dot_q3_K(int64_t n, const void* vw, const void* va) {
  const auto* x = static_cast<const block_q3_K_u*>(vw);
  const auto* y = static_cast<const block_q8_K_u*>(va);
  float sums[8] = {};
  for (int64_t i = 0; i < n / QK_K; ++i) {
    int sc[16];
    for (int g = 0; g < 16; ++g) sc[g] = unpack_scale_q3k(g, x[i].scales);
    int32_t lane[8] = {};
    for (int e = 0; e < QK_K; ++e) {
      const int h = e / 128, k = (e % 128) / 32, l = e % 32;
      const int lo = (x[i].qs[32 * h + l] >> (2 * k)) & 3;
      const int q = lo - (((x[i].hmask[l] >> (e / 32)) & 1) ? 0 : 4);
      lane[e % 8] += sc[e / 16] * (y[i].qs[e] * q);
    }
    const float d = h2f(x[i].d) * y[i].d;
    for (int l = 0; l < 8; ++l) sums[l] += d * static_cast<float>(lane[l]);
  }
  float sumf = 0;
  for (int l = 0; l < 8; ++l) sumf += sums[l];
  return sumf;
}

template <bool kQ5>
float dot_q45_K(int64_t n, const void* vw, const void* va) {
  // The alignment-1 view of the Q4_K or Q5_K block (the attribute goes on the local typedef: a
  // template argument such as std::conditional_t's would drop it).
  typedef std::conditional_t<kQ5, block_q5_K, block_q4_K> Block __attribute__((aligned(1)));
  const auto* x = static_cast<const Block*>(vw);
  const auto* y = static_cast<const block_q8_K_u*>(va);
  float sums[8] = {};
  float sumf = 0;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    uint8_t sc[8], mn[8];
    for (int g = 0; g < 8; ++g) unpack_scale_min_k4(g, x[i].scales, &sc[g], &mn[g]);
    int sumi = 0;
    for (int j = 0; j < 16; ++j) sumi += y[i].bsums[j] * mn[j / 2];
    int32_t lane[8] = {};
    for (int e = 0; e < QK_K; ++e) {
      const int c = e / 64, hi = (e % 64) / 32, l = e % 32;
      const uint8_t b = x[i].qs[32 * c + l];
      int q = hi ? (b >> 4) : (b & 0x0f);
      if constexpr (kQ5) q += ((x[i].qh[l] >> (2 * c + hi)) & 1) ? 16 : 0;
      lane[e % 8] += sc[e / 32] * (y[i].qs[e] * q);
    }
    const float d = h2f(x[i].d) * y[i].d;
    for (int l = 0; l < 8; ++l) sums[l] += d * static_cast<float>(lane[l]);
    const float dmin = h2f(x[i].dmin) * y[i].d;
    sumf -= dmin * static_cast<float>(sumi);
  }
  for (int l = 0; l < 8; ++l) sumf += sums[l];
  return sumf;
}

float dot_q6_K(int64_t n, const void* vw, const void* va) {
  const auto* x = static_cast<const block_q6_K_u*>(vw);
  const auto* y = static_cast<const block_q8_K_u*>(va);
  float sums[8] = {};
  for (int64_t i = 0; i < n / QK_K; ++i) {
    int32_t lane[8] = {};
    for (int e = 0; e < QK_K; ++e) {
      lane[e % 8] += x[i].scales[e / 16] * (y[i].qs[e] * q6k_value(x[i], e));
    }
    const float d = h2f(x[i].d) * y[i].d;
    for (int l = 0; l < 8; ++l) sums[l] += d * static_cast<float>(lane[l]);
  }
  float sumf = 0;
  for (int l = 0; l < 8; ++l) sumf += sums[l];
  return sumf;
}

// IQ4_NL x Q8_0: per block the two half sums, then d_a * d_w times their sum.
float dot_iq4_nl(int64_t n, const void* vw, const void* va) {
  const auto* x = static_cast<const block_iq4_nl_u*>(vw);
  const auto* y = static_cast<const block_q8_0_u*>(va);
  float sumf = 0;
  for (int64_t i = 0; i < n / QK4_NL; ++i) {
    const float d = h2f(y[i].d) * h2f(x[i].d);
    int sumi1 = 0, sumi2 = 0;
    for (int j = 0; j < QK4_NL / 2; ++j) {
      sumi1 += y[i].qs[j] * kIq4nlValues[x[i].qs[j] & 0x0f];
      sumi2 += y[i].qs[j + QK4_NL / 2] * kIq4nlValues[x[i].qs[j] >> 4];
    }
    sumf += d * static_cast<float>(sumi1 + sumi2);
  }
  return sumf;
}

// IQ4_XS x Q8_K: per sub-block of 32 an integer sum, scaled by (d_w * d_a) * (ls - 32) in float
// and added in sub-block order.
float dot_iq4_xs(int64_t n, const void* vw, const void* va) {
  const auto* x = static_cast<const block_iq4_xs_u*>(vw);
  const auto* y = static_cast<const block_q8_K_u*>(va);
  float sumf = 0;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float d4d8 = h2f(x[i].d) * y[i].d;
    for (int ib = 0; ib < QK_K / 32; ++ib) {
      const float dl = d4d8 * static_cast<float>(iq4xs_scale(x[i], ib));
      const uint8_t* qs = x[i].qs + 16 * ib;
      const int8_t* q8 = y[i].qs + 32 * ib;
      int sumi1 = 0, sumi2 = 0;
      for (int j = 0; j < 16; ++j) {
        sumi1 += q8[j] * kIq4nlValues[qs[j] & 0x0f];
        sumi2 += q8[j + 16] * kIq4nlValues[qs[j] >> 4];
      }
      sumf += dl * static_cast<float>(sumi1 + sumi2);
    }
  }
  return sumf;
}

inline int tid(Type t) { return static_cast<int>(t); }

}  // namespace

// ---------------------------------------------------------------------------------------------
// Activation quantizers: bit-exact with what llama.cpp's CPU backend runs on x86-64.
//
// Q8_0 / Q8_1: llama.cpp's x86 build (any AVX or AVX2 build, i.e. every practical one) uses the
// SIMD quantize_row_q8_0/q8_1 of ggml-cpu/arch/x86/quants.c, not quantize_row_q8_0_ref: the
// multiplier is id = 127 / amax (not 1 / d) and rounding is to nearest, ties to even
// (_mm256_round_ps), where the _ref version uses roundf (ties away from zero). We reproduce the
// x86 path. d = amax / 127 is stored as fp16; for Q8_1, s = fp16(d * sum(q)) with the unrounded d.
void quantize_row_q8_0_act(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<block_q8_0_u*>(vy);
  for (int64_t i = 0; i < n / QK8_0; ++i, x += QK8_0) {
    float amax = 0;
    for (int j = 0; j < QK8_0; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    y[i].d = f32_to_fp16(d);
    for (int j = 0; j < QK8_0; ++j) y[i].qs[j] = static_cast<int8_t>(qround(x[j] * id, -127, 127));
  }
}

void quantize_row_q8_1_act(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<block_q8_1_u*>(vy);
  for (int64_t i = 0; i < n / QK8_1; ++i, x += QK8_1) {
    float amax = 0;
    for (int j = 0; j < QK8_1; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    y[i].d = f32_to_fp16(d);
    int sum = 0;
    for (int j = 0; j < QK8_1; ++j) {
      const int q = qround(x[j] * id, -127, 127);
      y[i].qs[j] = static_cast<int8_t>(q);
      sum += q;
    }
    y[i].s = f32_to_fp16(d * static_cast<float>(sum));
  }
}

// Q8_K: llama.cpp's x86 backend uses quantize_row_q8_K_ref. The element of largest magnitude
// (first one on ties) maps to -127: iscale = -127 / max, q = min(127, nearest_int(iscale * x))
// (ties to even), d = 1 / iscale (so d < 0 when that element is positive), bsums per 16.
// An all-zero block gets d = 0 and q = 0 (and bsums = 0; llama.cpp leaves them unwritten).
void quantize_row_q8_K_act(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<block_q8_K_u*>(vy);
  for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
    float max = 0, amax = 0;
    for (int j = 0; j < QK_K; ++j) {
      const float ax = std::fabs(x[j]);
      if (ax > amax) {
        amax = ax;
        max = x[j];
      }
    }
    if (amax == 0) {
      y[i].d = 0;
      std::memset(y[i].qs, 0, sizeof(y[i].qs));
      std::memset(y[i].bsums, 0, sizeof(y[i].bsums));
      continue;
    }
    const float iscale = -127.0f / max;
    for (int j = 0; j < QK_K; ++j) {
      y[i].qs[j] = static_cast<int8_t>(qround(iscale * x[j], -128, 127));
    }
    for (int g = 0; g < QK_K / 16; ++g) {
      int sum = 0;
      for (int j = 0; j < 16; ++j) sum += y[i].qs[16 * g + j];
      y[i].bsums[g] = static_cast<int16_t>(sum);
    }
    y[i].d = 1 / iscale;
  }
}

namespace {

// Quantizers without a use for importance (float conversions, activation types).
template <QuantizeFn F>
void ignoring_importance(const float* x, void* y, int64_t n, const float*) {
  F(x, y, n);
}

}  // namespace

RefQuantizeFn ref_weight_quantizer(Type t) {
  switch (t) {
    case Type::F32: return ignoring_importance<quant_f32>;
    case Type::F16: return ignoring_importance<quant_f16>;
    case Type::BF16: return ignoring_importance<quant_bf16>;
    case Type::Q4_0: return qref_q4_0;
    case Type::Q4_1: return qref_q4_1;
    case Type::Q5_0: return qref_q5_0;
    case Type::Q5_1: return qref_q5_1;
    case Type::Q8_0: return qref_q8_0;
    case Type::Q8_1: return ignoring_importance<quantize_row_q8_1_act>;
    case Type::Q2_K: return qref_q2_K;
    case Type::Q3_K: return qref_q3_K;
    case Type::Q4_K: return qref_q4_K;
    case Type::Q5_K: return qref_q5_K;
    case Type::Q6_K: return qref_q6_K;
    case Type::Q8_K: return ignoring_importance<quantize_row_q8_K_act>;
    case Type::IQ4_NL: return qref_iq4_nl;
    case Type::IQ4_XS: return qref_iq4_xs;
    default: break;
  }
  // The low-bit families keep their quantizers in files of their own (kernels_internal.h).
  for (RefQuantizeFn (*family)(Type) : {ref_weight_quantizer_iq2, ref_weight_quantizer_iq3, ref_weight_quantizer_iq1,
                                        ref_weight_quantizer_lowbit}) {
    if (RefQuantizeFn fn = family(t)) return fn;
  }
  return nullptr;
}

void fill_kernel_table_scalar(KernelTable& t) {
  t.dequantize[tid(Type::F32)] = dequant_f32;
  t.dequantize[tid(Type::F16)] = dequant_f16;
  t.dequantize[tid(Type::BF16)] = dequant_bf16;
  t.dequantize[tid(Type::Q4_0)] = dequant_q4_0;
  t.dequantize[tid(Type::Q4_1)] = dequant_q4_1;
  t.dequantize[tid(Type::Q5_0)] = dequant_q5_0;
  t.dequantize[tid(Type::Q5_1)] = dequant_q5_1;
  t.dequantize[tid(Type::Q8_0)] = dequant_q8_0;
  t.dequantize[tid(Type::Q8_1)] = dequant_q8_1;
  t.dequantize[tid(Type::Q2_K)] = dequant_q2_K;
  t.dequantize[tid(Type::Q3_K)] = dequant_q3_K;
  t.dequantize[tid(Type::Q4_K)] = dequant_q4_K;
  t.dequantize[tid(Type::Q5_K)] = dequant_q5_K;
  t.dequantize[tid(Type::Q6_K)] = dequant_q6_K;
  t.dequantize[tid(Type::Q8_K)] = dequant_q8_K;
  t.dequantize[tid(Type::IQ4_NL)] = dequant_iq4_nl;
  t.dequantize[tid(Type::IQ4_XS)] = dequant_iq4_xs;

  // Activation quantizers (the fast path); weight types go through quantize_row_ref.
  t.quantize[tid(Type::F32)] = quant_f32;
  t.quantize[tid(Type::F16)] = quant_f16;
  t.quantize[tid(Type::BF16)] = quant_bf16;
  t.quantize[tid(Type::Q8_0)] = quantize_row_q8_0_act;
  t.quantize[tid(Type::Q8_1)] = quantize_row_q8_1_act;
  t.quantize[tid(Type::Q8_K)] = quantize_row_q8_K_act;

  t.vec_dot[tid(Type::F32)] = dot_f32;
  t.vec_dot[tid(Type::F16)] = dot_f16;
  t.vec_dot[tid(Type::BF16)] = dot_bf16;
  t.vec_dot[tid(Type::Q4_0)] = dot_q4_0;
  t.vec_dot[tid(Type::Q4_1)] = dot_q4_1;
  t.vec_dot[tid(Type::Q5_0)] = dot_q5_0;
  t.vec_dot[tid(Type::Q5_1)] = dot_q5_1;
  t.vec_dot[tid(Type::Q8_0)] = dot_q8_0;
  t.vec_dot[tid(Type::Q2_K)] = dot_q2_K;
  t.vec_dot[tid(Type::Q3_K)] = dot_q3_K;
  t.vec_dot[tid(Type::Q4_K)] = dot_q45_K<false>;
  t.vec_dot[tid(Type::Q5_K)] = dot_q45_K<true>;
  t.vec_dot[tid(Type::Q6_K)] = dot_q6_K;
  t.vec_dot[tid(Type::IQ4_NL)] = dot_iq4_nl;
  t.vec_dot[tid(Type::IQ4_XS)] = dot_iq4_xs;

  fill_kernel_table_scalar_iq2(t);
  fill_kernel_table_scalar_iq3(t);
  fill_kernel_table_scalar_iq1(t);
  fill_kernel_table_scalar_lowbit(t);
}

}  // namespace les
