// Scalar reference of TQ1_0, TQ2_0, MXFP4, NVFP4: dequantization and dot products against the
// activation type in llama.cpp's evaluation order (exact integer sums per block or sub-block,
// then its float products and accumulation order), and the importance-weighted quantizers.
//
// Without importance the quantizers write the bytes llama.cpp's quantize_row_<type>_ref writes;
// with importance each chooses its scales by the weighted error (see the quantizer section).

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "les/quant/blocks.h"
#include "les/quant/iq_grids.h"
#include "les/quant/kernels_internal.h"
#include "les/quant/lowbit_scales.h"
#include "les/quant/quant_common.h"
#include "les/util/error.h"
#include "les/util/fp16.h"

namespace les {
namespace {
namespace lowbit_ref {

inline int tid(Type t) { return static_cast<int>(t); }

// ---------------------------------------------------------------------------------------------
// Ternary digits.
//
// TQ1_0 stores 5 trits per byte as q = ceil(v * 256 / 243) with v the base-3 number whose most
// significant digit is the first element; digit k of q is ((uint8)(q * 3^k) * 3) >> 8 (the
// multiplication by 3^k wraps mod 256, dropping the digits before k). Element order of a block:
// qs[0..31] hold elements 32k + m (digit k of qs[m]) for 0..159; qs[32..47] elements
// 160 + 16k + m (digit k of qs[32 + m]); qh[0..3] elements 240 + 4k + j (digit k of qh[j], four
// digits, the fifth always 0).

inline int trit(uint8_t q, int k) {
  static constexpr uint8_t kPow3[5] = {1, 3, 9, 27, 81};
  const auto s = static_cast<uint8_t>(q * kPow3[k]);
  return (static_cast<int>(s) * 3) >> 8;  // 0, 1, 2
}

// The 256 ternary codes (0, 1, 2) of a TQ1_0 block in element order.
void tq1_codes(const block_tq1_0_u& b, int* t) {
  for (int k = 0; k < 5; ++k) {
    for (int m = 0; m < 32; ++m) t[32 * k + m] = trit(b.qs[m], k);
  }
  for (int k = 0; k < 5; ++k) {
    for (int m = 0; m < 16; ++m) t[160 + 16 * k + m] = trit(b.qs[32 + m], k);
  }
  for (int k = 0; k < 4; ++k) {
    for (int j = 0; j < 4; ++j) t[240 + 4 * k + j] = trit(b.qh[j], k);
  }
}

// The 256 codes (0..3; 3 is not ternary but decodes as +2, as llama.cpp's kernels do) of a TQ2_0
// block: element 128h + 32k + m at bits 2k of qs[32h + m].
void tq2_codes(const block_tq2_0_u& b, int* t) {
  for (int h = 0; h < 2; ++h) {
    for (int k = 0; k < 4; ++k) {
      for (int m = 0; m < 32; ++m) t[128 * h + 32 * k + m] = (b.qs[32 * h + m] >> (2 * k)) & 3;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Dequantization: x = d * (t - 1) for the ternary types, x = value(code) * scale for the FP4
// types (kFp4Values are the E2M1 values doubled; the scales are halved to match).

void dequant_tq1_0(const void* vx, float* y, int64_t n) {
  const auto* x = static_cast<const block_tq1_0_u*>(vx);
  for (int64_t i = 0; i < n / QK_K; ++i, y += QK_K) {
    const float d = fp16_to_f32(x[i].d);
    int t[QK_K];
    tq1_codes(x[i], t);
    for (int j = 0; j < QK_K; ++j) y[j] = static_cast<float>(t[j] - 1) * d;
  }
}

void dequant_tq2_0(const void* vx, float* y, int64_t n) {
  const auto* x = static_cast<const block_tq2_0_u*>(vx);
  for (int64_t i = 0; i < n / QK_K; ++i, y += QK_K) {
    const float d = fp16_to_f32(x[i].d);
    int t[QK_K];
    tq2_codes(x[i], t);
    for (int j = 0; j < QK_K; ++j) y[j] = static_cast<float>(t[j] - 1) * d;
  }
}

void dequant_mxfp4(const void* vx, float* y, int64_t n) {
  const auto* x = static_cast<const block_mxfp4_u*>(vx);
  for (int64_t i = 0; i < n / QK_MXFP4; ++i, y += QK_MXFP4) {
    const float d = e8m0_half_to_f32(x[i].e);
    for (int j = 0; j < QK_MXFP4 / 2; ++j) {
      y[j] = static_cast<float>(kFp4Values[x[i].qs[j] & 0x0f]) * d;
      y[j + QK_MXFP4 / 2] = static_cast<float>(kFp4Values[x[i].qs[j] >> 4]) * d;
    }
  }
}

void dequant_nvfp4(const void* vx, float* y, int64_t n) {
  const auto* x = static_cast<const block_nvfp4_u*>(vx);
  constexpr int H = QK_NVFP4_SUB / 2;
  for (int64_t i = 0; i < n / QK_NVFP4; ++i) {
    for (int s = 0; s < QK_NVFP4 / QK_NVFP4_SUB; ++s, y += QK_NVFP4_SUB) {
      const float d = ue4m3_half_to_f32(x[i].d[s]);
      for (int j = 0; j < H; ++j) {
        y[j] = static_cast<float>(kFp4Values[x[i].qs[H * s + j] & 0x0f]) * d;
        y[j + H] = static_cast<float>(kFp4Values[x[i].qs[H * s + j] >> 4]) * d;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Dot products.

// TQ1_0 / TQ2_0 x Q8_K: per block the integer sum of (t - 1) * q, then sum += float(sum) *
// (d_w * d_a), blocks in order.
template <void (*Codes)(const void*, int*)>
float dot_ternary(int64_t n, const void* vw, const void* va, size_t wb) {
  const auto* w = static_cast<const uint8_t*>(vw);
  const auto* y = static_cast<const block_q8_K_u*>(va);
  float sumf = 0;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    int t[QK_K];
    Codes(w + static_cast<size_t>(i) * wb, t);
    int sum = 0;
    for (int j = 0; j < QK_K; ++j) sum += (t[j] - 1) * y[i].qs[j];
    half_bits dh;
    std::memcpy(&dh, w + static_cast<size_t>(i) * wb + wb - sizeof(half_bits), sizeof dh);
    sumf += static_cast<float>(sum) * (fp16_to_f32(dh) * y[i].d);
  }
  return sumf;
}

void tq1_codes_at(const void* p, int* t) { tq1_codes(*static_cast<const block_tq1_0_u*>(p), t); }
void tq2_codes_at(const void* p, int* t) { tq2_codes(*static_cast<const block_tq2_0_u*>(p), t); }
static_assert(offsetof(block_tq1_0, d) + sizeof(half_bits) == sizeof(block_tq1_0) &&
              offsetof(block_tq2_0, d) + sizeof(half_bits) == sizeof(block_tq2_0), "d ends the block");

float dot_tq1_0(int64_t n, const void* vw, const void* va) {
  return dot_ternary<tq1_codes_at>(n, vw, va, sizeof(block_tq1_0));
}
float dot_tq2_0(int64_t n, const void* vw, const void* va) {
  return dot_ternary<tq2_codes_at>(n, vw, va, sizeof(block_tq2_0));
}

// MXFP4 x Q8_0: per block the two half sums, then sum += (d_a * scale_w) * (sum1 + sum2).
float dot_mxfp4(int64_t n, const void* vw, const void* va) {
  const auto* x = static_cast<const block_mxfp4_u*>(vw);
  const auto* y = static_cast<const block_q8_0_u*>(va);
  float sumf = 0;
  for (int64_t i = 0; i < n / QK_MXFP4; ++i) {
    const float d = fp16_to_f32(y[i].d) * e8m0_half_to_f32(x[i].e);
    int sum1 = 0, sum2 = 0;
    for (int j = 0; j < QK_MXFP4 / 2; ++j) {
      sum1 += y[i].qs[j] * kFp4Values[x[i].qs[j] & 0x0f];
      sum2 += y[i].qs[j + QK_MXFP4 / 2] * kFp4Values[x[i].qs[j] >> 4];
    }
    sumf += d * static_cast<float>(sum1 + sum2);
  }
  return sumf;
}

// NVFP4 x Q8_0 (two Q8_0 blocks per NVFP4 block): per 16-element sub-block s the integer sum
// against its half of Q8_0 block s / 2, then sum += d_a * scale_w * sum (left to right).
float dot_nvfp4(int64_t n, const void* vw, const void* va) {
  const auto* x = static_cast<const block_nvfp4_u*>(vw);
  const auto* y = static_cast<const block_q8_0_u*>(va);
  constexpr int H = QK_NVFP4_SUB / 2;
  float sumf = 0;
  for (int64_t i = 0; i < n / QK_NVFP4; ++i) {
    for (int s = 0; s < QK_NVFP4 / QK_NVFP4_SUB; ++s) {
      const float d = ue4m3_half_to_f32(x[i].d[s]);
      const block_q8_0_u& a = y[2 * i + s / 2];
      const int8_t* q8 = a.qs + (s % 2) * QK_NVFP4_SUB;
      int lo = 0, hi = 0;
      for (int j = 0; j < H; ++j) {
        const uint8_t q = x[i].qs[H * s + j];
        lo += q8[j] * kFp4Values[q & 0x0f];
        hi += q8[j + H] * kFp4Values[q >> 4];
      }
      sumf += fp16_to_f32(a.d) * d * static_cast<float>(lo + hi);
    }
  }
  return sumf;
}


// ---------------------------------------------------------------------------------------------
// Quantizers.
//
// Without importance (or where a block's importance is all zero) each writes the bytes of
// llama.cpp's quantize_row_<type>_ref: TQ1_0 / TQ2_0 take d = absmax and t = round(x / d); MXFP4
// the exponent floor(log2(absmax)) - 2 and the nearest E2M1 value of each element (the first of
// equals); NVFP4 the UE4M3 scale nearest absmax / 6 per 16 elements, then the nearest values.
// With importance the error weights are w_i = importance_i * sqrt(sigma2 + x_i^2) (llama.cpp's
// weighting of an imatrix; sigma2 the mean square of the row, or of the block for the ternary
// types) and the scale minimises sum w_i (x_i - x^_i)^2: for the ternary types exactly (over
// every threshold set of nonzero digits, the weighted least-squares d; then the digits are
// re-rounded at the stored fp16 d), for MXFP4 / NVFP4 among the exponents / UE4M3 codes next to
// llama.cpp's choice, each with its nearest codes (the best codes for a fixed scale, whatever
// the weights).

// Throws Error unless every x[i] is finite (a NaN would silently become some code).
void check_finite(const char* type, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(x[i])) {
      throw Error(strfmt("quantize %s: x[%lld] = %g is not finite", type, static_cast<long long>(i),
                         static_cast<double>(x[i])));
    }
  }
}

float mean_square_of(int64_t n, const float* x) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  return n > 0 ? static_cast<float>(s / static_cast<double>(n)) : 0.0f;
}

// The error weights of n elements, or false where the importance says nothing (nullptr or all 0).
bool error_weights(int n, const float* x, const float* imp, float sigma2, float* w) {
  bool any = false;
  for (int i = 0; imp && i < n; ++i) any = any || imp[i] > 0;
  if (!any) return false;
  for (int i = 0; i < n; ++i) w[i] = imp[i] * std::sqrt(sigma2 + x[i] * x[i]);
  return true;
}

float absmax(int n, const float* x) {
  float amax = 0;
  for (int i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  return amax;
}

// Ternary codes (0, 1, 2 for -1, 0, +1) of a block of 256 and its fp16 scale.
void ternary_codes(const float* x, const float* imp, int* t, half_bits* d_out) {
  float w[QK_K];
  const float sigma2 = imp ? mean_square_of(QK_K, x) : 0.0f;
  if (!error_weights(QK_K, x, imp, sigma2, w)) {
    const float d = absmax(QK_K, x);
    const float id = d != 0 ? 1.0f / d : 0.0f;
    *d_out = f2h_sat(d);
    for (int j = 0; j < QK_K; ++j) t[j] = static_cast<int>(std::lround(x[j] * id)) + 1;
    return;
  }
  // Elements by decreasing |x| (ties by index): the k largest are the nonzero digits.
  int order[QK_K];
  for (int j = 0; j < QK_K; ++j) order[j] = j;
  std::sort(order, order + QK_K, [&](int a, int b) {
    const float fa = std::fabs(x[a]), fb = std::fabs(x[b]);
    return fa > fb || (fa == fb && a < b);
  });
  double total = 0;  // sum w x^2: the error with every digit 0
  for (int j = 0; j < QK_K; ++j) total += static_cast<double>(w[j]) * x[j] * x[j];
  double best_err = total, sw = 0, swa = 0;
  half_bits best_d = 0;
  for (int k = 0; k < QK_K; ++k) {
    const int j = order[k];
    sw += w[j];
    swa += static_cast<double>(w[j]) * std::fabs(x[j]);
    if (sw <= 0 || swa <= 0) continue;
    const half_bits dh = f2h_sat(static_cast<float>(swa / sw));
    const double d = fp16_to_f32(dh);
    const double err = total - 2 * d * swa + d * d * sw;
    if (d > 0 && err < best_err) {
      best_err = err;
      best_d = dh;
    }
  }
  *d_out = best_d;
  const float d = fp16_to_f32(best_d);
  for (int j = 0; j < QK_K; ++j) {
    // the nearest of -d, 0, d (0 on a tie)
    t[j] = d > 0 && std::fabs(x[j]) > 0.5f * d ? (x[j] > 0 ? 2 : 0) : 1;
  }
}

void qref_tq1_0(const float* x, void* vy, int64_t n, const float* imp) {
  check_finite("tq1_0", x, n);
  auto* y = static_cast<block_tq1_0_u*>(vy);
  for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
    int t[QK_K];
    half_bits d;
    ternary_codes(x, imp ? imp + i * QK_K : nullptr, t, &d);
    // q = ceil(v * 256 / 243), v the digits as a base-3 number, the first element most significant
    auto pack = [](int v) { return static_cast<uint8_t>((v * 256 + 242) / 243); };
    for (int m = 0; m < 32; ++m) {
      int v = 0;
      for (int k = 0; k < 5; ++k) v = 3 * v + t[32 * k + m];
      y[i].qs[m] = pack(v);
    }
    for (int m = 0; m < 16; ++m) {
      int v = 0;
      for (int k = 0; k < 5; ++k) v = 3 * v + t[160 + 16 * k + m];
      y[i].qs[32 + m] = pack(v);
    }
    for (int j = 0; j < 4; ++j) {
      int v = 0;
      for (int k = 0; k < 4; ++k) v = 3 * v + t[240 + 4 * k + j];
      y[i].qh[j] = pack(3 * v);  // the fifth digit 0
    }
    y[i].d = d;
  }
}

void qref_tq2_0(const float* x, void* vy, int64_t n, const float* imp) {
  check_finite("tq2_0", x, n);
  auto* y = static_cast<block_tq2_0_u*>(vy);
  for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
    int t[QK_K];
    half_bits d;
    ternary_codes(x, imp ? imp + i * QK_K : nullptr, t, &d);
    for (int h = 0; h < 2; ++h) {
      for (int m = 0; m < 32; ++m) {
        int v = 0;
        for (int k = 0; k < 4; ++k) v |= t[128 * h + 32 * k + m] << (2 * k);
        y[i].qs[32 * h + m] = static_cast<uint8_t>(v);
      }
    }
    y[i].d = d;
  }
}

// Index of the E2M1 value nearest to x at half-scale d (kFp4Values[c] * d), the first of equals.
int nearest_fp4(float x, float d) {
  int best = 0;
  float best_err = std::fabs(static_cast<float>(kFp4Values[0]) * d - x);
  for (int c = 1; c < 16; ++c) {
    const float err = std::fabs(static_cast<float>(kFp4Values[c]) * d - x);
    if (err < best_err) {
      best = c;
      best_err = err;
    }
  }
  return best;
}

// Codes of n elements at half-scale d, and their weighted squared error (w == nullptr: unweighted).
double fp4_codes(int n, const float* x, const float* w, float d, int* c) {
  double err = 0;
  for (int j = 0; j < n; ++j) {
    c[j] = nearest_fp4(x[j], d);
    const double r = static_cast<double>(static_cast<float>(kFp4Values[c[j]]) * d) - x[j];
    err += (w ? w[j] : 1.0) * r * r;
  }
  return err;
}

// Codes of 2h elements into h bytes: element j in the low nibble of byte j, j + h in the high.
void pack_fp4(int h, const int* c, uint8_t* qs) {
  for (int j = 0; j < h; ++j) qs[j] = static_cast<uint8_t>(c[j] | (c[j + h] << 4));
}

// llama.cpp's exponent of a block: floor(log2(absmax)) - 2 + 127 (0 for an all-zero block;
// kept in [0, 254], 255 being E8M0's NaN).
int mxfp4_exponent(float amax) {
  if (!(amax > 0)) return 0;
  const int e = static_cast<int>(std::floor(std::log2(amax))) - 2 + 127;
  return std::clamp(e, 0, 254);
}

void qref_mxfp4(const float* x, void* vy, int64_t n, const float* imp) {
  check_finite("mxfp4", x, n);
  auto* y = static_cast<block_mxfp4_u*>(vy);
  const float sigma2 = imp ? mean_square_of(n, x) : 0.0f;
  for (int64_t i = 0; i < n / QK_MXFP4; ++i, x += QK_MXFP4) {
    float w[QK_MXFP4];
    const bool weighted = error_weights(QK_MXFP4, x, imp ? imp + i * QK_MXFP4 : nullptr, sigma2, w);
    const int e0 = mxfp4_exponent(absmax(QK_MXFP4, x));
    int c[QK_MXFP4], ct[QK_MXFP4];
    double best = fp4_codes(QK_MXFP4, x, weighted ? w : nullptr, e8m0_half_to_f32(static_cast<uint8_t>(e0)), c);
    int e_best = e0;
    for (int e = std::max(0, e0 - 2); weighted && e <= std::min(254, e0 + 1); ++e) {
      if (e == e0) continue;
      const double err = fp4_codes(QK_MXFP4, x, w, e8m0_half_to_f32(static_cast<uint8_t>(e)), ct);
      if (err < best) {
        best = err;
        e_best = e;
        std::copy(ct, ct + QK_MXFP4, c);
      }
    }
    y[i].e = static_cast<uint8_t>(e_best);
    pack_fp4(QK_MXFP4 / 2, c, y[i].qs);
  }
}

// llama.cpp's UE4M3 encoding of a positive scale (ggml_fp32_to_ue4m3): round half up on the
// mantissa, subnormals below 2^-6, at most 0x7E; 0 for x <= 0.
uint8_t ue4m3_encode(float x) {
  if (!(x > 0.0f)) return 0;
  x = std::min(x, 448.0f);
  uint32_t b;
  std::memcpy(&b, &x, 4);
  int e = static_cast<int>((b >> 23) & 0xFF) - 127 + 7;
  if (e <= 0) {
    const int m = std::min(static_cast<int>(x * 512.0f + 0.5f), 7);
    return m < 1 ? 0 : static_cast<uint8_t>(m);
  }
  if (e >= 15) return 0x7E;
  int m = static_cast<int>((b >> 20) & 7) + static_cast<int>((b >> 19) & 1);
  if (m > 7) {
    m = 0;
    if (++e >= 15) return 0x7E;
  }
  return static_cast<uint8_t>((e << 3) | m);
}

void qref_nvfp4(const float* x, void* vy, int64_t n, const float* imp) {
  check_finite("nvfp4", x, n);
  auto* y = static_cast<block_nvfp4_u*>(vy);
  constexpr int S = QK_NVFP4_SUB;
  const float sigma2 = imp ? mean_square_of(n, x) : 0.0f;
  for (int64_t i = 0; i < n / QK_NVFP4; ++i) {
    for (int s = 0; s < QK_NVFP4 / S; ++s, x += S) {
      float w[S];
      const bool weighted = error_weights(S, x, imp ? imp + i * QK_NVFP4 + s * S : nullptr, sigma2, w);
      const int u0 = ue4m3_encode(absmax(S, x) / 6.0f);
      int c[S], ct[S];
      double best = fp4_codes(S, x, weighted ? w : nullptr, ue4m3_half_to_f32(static_cast<uint8_t>(u0)), c);
      int u_best = u0;
      // UE4M3 codes 1..0x7E are increasing values: the neighbours of u0 (0 only where u0 is)
      for (int u = std::max(1, u0 - 3); weighted && u0 != 0 && u <= std::min(0x7E, u0 + 3); ++u) {
        if (u == u0) continue;
        const double err = fp4_codes(S, x, w, ue4m3_half_to_f32(static_cast<uint8_t>(u)), ct);
        if (err < best) {
          best = err;
          u_best = u;
          std::copy(ct, ct + S, c);
        }
      }
      y[i].d[s] = static_cast<uint8_t>(u_best);
      pack_fp4(S / 2, c, y[i].qs + s * (S / 2));
    }
  }
}

}  // namespace lowbit_ref
}  // namespace

void fill_kernel_table_scalar_lowbit(KernelTable& t) {
  namespace k = lowbit_ref;
  t.dequantize[k::tid(Type::TQ1_0)] = k::dequant_tq1_0;
  t.dequantize[k::tid(Type::TQ2_0)] = k::dequant_tq2_0;
  t.dequantize[k::tid(Type::MXFP4)] = k::dequant_mxfp4;
  t.dequantize[k::tid(Type::NVFP4)] = k::dequant_nvfp4;
  t.vec_dot[k::tid(Type::TQ1_0)] = k::dot_tq1_0;
  t.vec_dot[k::tid(Type::TQ2_0)] = k::dot_tq2_0;
  t.vec_dot[k::tid(Type::MXFP4)] = k::dot_mxfp4;
  t.vec_dot[k::tid(Type::NVFP4)] = k::dot_nvfp4;
}

RefQuantizeFn ref_weight_quantizer_lowbit(Type t) {
  namespace k = lowbit_ref;
  switch (t) {
    case Type::TQ1_0: return k::qref_tq1_0;
    case Type::TQ2_0: return k::qref_tq2_0;
    case Type::MXFP4: return k::qref_mxfp4;
    case Type::NVFP4: return k::qref_nvfp4;
    default: return nullptr;
  }
}

}  // namespace les
