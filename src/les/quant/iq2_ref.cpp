// Scalar reference of IQ2_XXS, IQ2_XS, IQ2_S: dequantization, dot products against Q8_K
// activations (llama.cpp's evaluation order) and the importance-weighted quantizers.
//
// Formats (blocks.h): 256-element super-blocks with an fp16 scale d; every group of 8 elements is
// a point of a codebook (kIq2xxsGrid / kIq2xsGrid / kIq2sGrid: bytes in {8, 25, 43}) with 8 signs;
// a sub-block scale ls in [0, 15] (per 32 elements for IQ2_XXS, per 16 for the others) gives
//   x = d * (0.5 + ls) * 0.25 * grid[k] * sign[k].
// Dot products: per super-block an exact integer sum  bsum = sum_sub (2 ls + 1) * sum q8 * grid * sign,
// then sumf += (d_w * d_a) * bsum in block order, and the result is 0.125 * sumf (llama.cpp's
// generic kernels: agreement within float rounding, bit for bit where that code is compiled
// without contraction).

#include <algorithm>
#include <cstddef>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "les/quant/blocks.h"
#include "les/quant/iq2_common.h"
#include "les/quant/iq_grids.h"
#include "les/quant/kernels_internal.h"
#include "les/quant/quant_common.h"
#include "les/util/error.h"
#include "les/util/fp16.h"

namespace les {
namespace {
namespace iq2_ref {

// Byte k of grid point g.
inline int grid_byte(uint64_t g, int k) { return static_cast<int>((g >> (8 * k)) & 0xff); }

// ---------------------------------------------------------------------------------------------
// Dequantization: llama.cpp's values and float order (db = d * (0.5 + ls) * 0.25, then db * grid,
// negated where the sign bit is set).

// 8 elements of grid point g with sign byte s, scaled by db.
inline void put8(float* y, float db, uint64_t g, uint8_t s) {
  for (int k = 0; k < 8; ++k) {
    const float v = db * static_cast<float>(grid_byte(g, k));
    y[k] = (s >> k) & 1 ? -v : v;
  }
}

void dequant_iq2_xxs(const void* vx, float* y, int64_t n) {
  const auto* x = static_cast<const block_iq2_xxs_u*>(vx);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float d = fp16_to_f32(x[i].d);
    for (int ib = 0; ib < QK_K / 32; ++ib) {
      const Iq2xxsSub sub = iq2xxs_sub(reinterpret_cast<const uint8_t*>(&x[i]) + offsetof(block_iq2_xxs, qs), ib);
      const float db = d * (0.5f + static_cast<float>(sub.ls)) * 0.25f;
      for (int l = 0; l < 4; ++l, y += 8) put8(y, db, kIq2xxsGrid[sub.grid[l]], iq2_signs(sub.sign_code[l]));
    }
  }
}

void dequant_iq2_xs(const void* vx, float* y, int64_t n) {
  const auto* x = static_cast<const block_iq2_xs_u*>(vx);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float d = fp16_to_f32(x[i].d);
    for (int ib = 0; ib < QK_K / 32; ++ib) {
      const float db[2] = {d * (0.5f + static_cast<float>(x[i].scales[ib] & 0x0f)) * 0.25f,
                           d * (0.5f + static_cast<float>(x[i].scales[ib] >> 4)) * 0.25f};
      for (int l = 0; l < 4; ++l, y += 8) {
        const uint16_t q = x[i].qs[4 * ib + l];
        put8(y, db[l / 2], kIq2xsGrid[q & 511], iq2_signs(q >> 9));
      }
    }
  }
}

void dequant_iq2_s(const void* vx, float* y, int64_t n) {
  const auto* x = static_cast<const block_iq2_s_u*>(vx);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float d = fp16_to_f32(x[i].d);
    for (int ib = 0; ib < QK_K / 32; ++ib) {
      const float db[2] = {d * (0.5f + static_cast<float>(x[i].scales[ib] & 0x0f)) * 0.25f,
                           d * (0.5f + static_cast<float>(x[i].scales[ib] >> 4)) * 0.25f};
      for (int l = 0; l < 4; ++l, y += 8) {
        put8(y, db[l / 2], kIq2sGrid[iq2s_grid_index(x[i].qs, x[i].qh, 4 * ib + l)], x[i].qs[QK_K / 8 + 4 * ib + l]);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Dot products against Q8_K.

// sum_k q8[k] * grid[k] * sign[k] over one group of 8.
inline int dot8(const int8_t* q8, uint64_t g, uint8_t s) {
  int sum = 0;
  for (int k = 0; k < 8; ++k) {
    const int p = q8[k] * grid_byte(g, k);
    sum += (s >> k) & 1 ? -p : p;
  }
  return sum;
}

// The float steps shared by the three types: sumf += (d_w * d_a) * bsum per block, 0.125 at the end.
// Blocks are passed as bytes (rows may start at any byte: a template argument would drop the
// alignment-1 attribute of the block_*_u typedefs); each type's d is its first field.
template <size_t BlockBytes, int (*BlockSum)(const uint8_t*, const int8_t*)>
float dot_q8_K(int64_t n, const void* vw, const void* va) {
  const auto* x = static_cast<const uint8_t*>(vw);
  const auto* y = static_cast<const block_q8_K_u*>(va);
  float sumf = 0;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const uint8_t* b = x + static_cast<size_t>(i) * BlockBytes;
    half_bits dw;
    std::memcpy(&dw, b, sizeof dw);
    const float d = fp16_to_f32(dw) * y[i].d;
    sumf += d * static_cast<float>(BlockSum(b, y[i].qs));
  }
  return 0.125f * sumf;
}

int bsum_iq2_xxs(const uint8_t* p, const int8_t* q8) {
  const auto& b = *reinterpret_cast<const block_iq2_xxs_u*>(p);
  int bsum = 0;
  for (int ib = 0; ib < QK_K / 32; ++ib) {
    const Iq2xxsSub sub = iq2xxs_sub(reinterpret_cast<const uint8_t*>(&b) + offsetof(block_iq2_xxs, qs), ib);
    int sumi = 0;
    for (int l = 0; l < 4; ++l, q8 += 8) sumi += dot8(q8, kIq2xxsGrid[sub.grid[l]], iq2_signs(sub.sign_code[l]));
    bsum += sumi * (2 * sub.ls + 1);
  }
  return bsum;
}

int bsum_iq2_xs(const uint8_t* p, const int8_t* q8) {
  const auto& b = *reinterpret_cast<const block_iq2_xs_u*>(p);
  int bsum = 0;
  for (int ib = 0; ib < QK_K / 32; ++ib) {
    for (int h = 0; h < 2; ++h) {
      int sumi = 0;
      for (int l = 2 * h; l < 2 * h + 2; ++l, q8 += 8) {
        const uint16_t q = b.qs[4 * ib + l];
        sumi += dot8(q8, kIq2xsGrid[q & 511], iq2_signs(q >> 9));
      }
      bsum += sumi * (2 * ((b.scales[ib] >> (4 * h)) & 0x0f) + 1);
    }
  }
  return bsum;
}

int bsum_iq2_s(const uint8_t* p, const int8_t* q8) {
  const auto& b = *reinterpret_cast<const block_iq2_s_u*>(p);
  int bsum = 0;
  for (int ib = 0; ib < QK_K / 32; ++ib) {
    for (int h = 0; h < 2; ++h) {
      int sumi = 0;
      for (int l = 2 * h; l < 2 * h + 2; ++l, q8 += 8) {
        sumi += dot8(q8, kIq2sGrid[iq2s_grid_index(b.qs, b.qh, 4 * ib + l)], b.qs[QK_K / 8 + 4 * ib + l]);
      }
      bsum += sumi * (2 * ((b.scales[ib] >> (4 * h)) & 0x0f) + 1);
    }
  }
  return bsum;
}


// ---------------------------------------------------------------------------------------------
// Quantization (llama.cpp's algorithm family, with the codebook's true values).
//
// Every group of 8 elements becomes a codebook point: 8 levels in {0, 1, 2} whose values are the
// grid bytes {8, 25, 43} / 8 = V[level] = {1, 3.125, 5.375}, times the sub-block scale
// t = d * (2 ls + 1), with a sign per element. The quantizer fits |x| (signs stored apart; IQ2_XXS
// and IQ2_XS need an even number of negatives per group, so the element of least weighted
// magnitude takes the wrong sign when the count is odd, as in llama.cpp). Weights
// w_i = importance_i * sqrt(sigma2 + x_i^2) (llama.cpp's; sigma2 the super-block's mean square,
// doubled for IQ2_S; IQ2_S without importance: 0.25 sigma2 + x_i^2).
// Per sub-block: for a range of trial scales, each group takes the nearest levels; a point that is
// not in the codebook is replaced by the best of its precomputed nearest codebook points (the
// neighbour table, built once); the trial with the largest (sum w x q)^2 / sum w q^2 wins and is
// polished by one more pass at its fitted scale. Per super-block: d is chosen among a few values
// near max_scale / 31 by the total weighted error after each sub-block's best ls for it, then
// every group is re-fitted at its final scale and ls re-chosen (twice).

constexpr float kLevelValue[3] = {1.0f, 25.0f / 8.0f, 43.0f / 8.0f};
constexpr int kPoints = 6561;  // 3^8 points of levels {0, 1, 2}

// A codebook's points and its neighbour table.
struct Codebook {
  int size = 0;
  std::vector<uint8_t> levels;      // [size][8] levels of each grid point
  std::vector<int16_t> index_of;    // [kPoints] grid index of a point (base-3 code), or -1
  std::vector<int32_t> nb_begin;    // [kPoints + 1] range of the point's neighbours in nb
  std::vector<uint16_t> nb;         // grid indices: for off-grid points, the grid points at the
                                    // `shells` smallest distances (in value space)
};

int base3(const uint8_t* l) {
  int p = 0;
  for (int k = 7; k >= 0; --k) p = 3 * p + l[k];
  return p;
}

Codebook build_codebook(const uint64_t* grid, int size, int shells) {
  Codebook c;
  c.size = size;
  c.levels.resize(static_cast<size_t>(size) * 8);
  c.index_of.assign(kPoints, -1);
  for (int i = 0; i < size; ++i) {
    for (int k = 0; k < 8; ++k) {
      const int b = grid_byte(grid[i], k);
      c.levels[8 * i + k] = static_cast<uint8_t>(b == 8 ? 0 : b == 25 ? 1 : 2);
    }
    c.index_of[base3(&c.levels[8 * i])] = static_cast<int16_t>(i);
  }
  c.nb_begin.assign(kPoints + 1, 0);
  std::vector<std::pair<float, int>> dist(static_cast<size_t>(size));
  for (int p = 0; p < kPoints; ++p) {
    c.nb_begin[p] = static_cast<int32_t>(c.nb.size());
    if (c.index_of[p] >= 0) continue;
    uint8_t lp[8];
    for (int k = 0, v = p; k < 8; ++k, v /= 3) lp[k] = static_cast<uint8_t>(v % 3);
    for (int i = 0; i < size; ++i) {
      float d2 = 0;
      for (int k = 0; k < 8; ++k) {
        const float diff = kLevelValue[c.levels[8 * i + k]] - kLevelValue[lp[k]];
        d2 += diff * diff;
      }
      dist[i] = {d2, i};
    }
    std::sort(dist.begin(), dist.end());
    int have = 0;
    for (int i = 0; i < size; ++i) {
      if (i > 0 && dist[i].first > dist[i - 1].first + 1e-6f && ++have == shells) break;
      c.nb.push_back(static_cast<uint16_t>(dist[i].second));
    }
  }
  c.nb_begin[kPoints] = static_cast<int32_t>(c.nb.size());
  return c;
}

// Built on first use, once per type (thread-safe function-local statics).
const Codebook& codebook(Type t) {
  if (t == Type::IQ2_XXS) {
    static const Codebook xxs = build_codebook(kIq2xxsGrid, 256, 2);
    return xxs;
  }
  if (t == Type::IQ2_XS) {
    static const Codebook xs = build_codebook(kIq2xsGrid, 512, 2);
    return xs;
  }
  static const Codebook s = build_codebook(kIq2sGrid, 1024, 2);
  return s;
}

// The codebook point for the 8 values x (>= 0 but one may be negative) with weights w at scale t:
// the nearest levels if they form a grid point, else the best listed neighbour. Returns its index.
int fit_group(const Codebook& c, const float* x, const float* w, float t) {
  uint8_t l[8];
  for (int k = 0; k < 8; ++k) {
    const float v = x[k] / t;
    l[k] = static_cast<uint8_t>(v > 0.5f * (kLevelValue[1] + kLevelValue[2]) ? 2 : v > 0.5f * (kLevelValue[0] + kLevelValue[1]) ? 1 : 0);
  }
  const int p = base3(l);
  if (c.index_of[p] >= 0) return c.index_of[p];
  int best = c.nb[c.nb_begin[p]];
  float best_err = std::numeric_limits<float>::infinity();
  for (int32_t j = c.nb_begin[p]; j < c.nb_begin[p + 1]; ++j) {
    const uint8_t* lv = &c.levels[8 * c.nb[j]];
    float err = 0;
    for (int k = 0; k < 8; ++k) {
      const float diff = x[k] - t * kLevelValue[lv[k]];
      err += w[k] * diff * diff;
    }
    if (err < best_err) {
      best_err = err;
      best = c.nb[j];
    }
  }
  return best;
}

// sum w x q and sum w q^2 of 8 values against grid point g.
void group_sums(const Codebook& c, int g, const float* x, const float* w, double& sxq, double& sqq) {
  const uint8_t* lv = &c.levels[8 * g];
  for (int k = 0; k < 8; ++k) {
    const double q = kLevelValue[lv[k]];
    sxq += static_cast<double>(w[k]) * x[k] * q;
    sqq += static_cast<double>(w[k]) * q * q;
  }
}

// Best points and scale of a sub-block of G elements (G/8 groups); returns the fitted scale (0 if
// nothing fits) and the sums of its fit.
template <int G>
float fit_sub_block(const Codebook& c, const float* x, const float* w, int* idx, double& sxq, double& sqq) {
  float mx = 0;
  for (int i = 0; i < G; ++i) mx = std::max(mx, x[i]);
  sxq = sqq = 0;
  for (int g = 0; g < G / 8; ++g) idx[g] = 0;
  if (!(mx > 1e-20f)) return 0;
  double best = -1;
  float scale = 0;
  int trial[G / 8];
  auto evaluate = [&](float t) {
    double a = 0, b = 0;
    for (int g = 0; g < G / 8; ++g) {
      trial[g] = fit_group(c, x + 8 * g, w + 8 * g, t);
      group_sums(c, trial[g], x + 8 * g, w + 8 * g, a, b);
    }
    if (a > 0 && b > 0 && a * a / b > best) {
      best = a * a / b;
      scale = static_cast<float>(a / b);
      sxq = a;
      sqq = b;
      std::copy(trial, trial + G / 8, idx);
    }
  };
  for (int is = -12; is <= 12; ++is) evaluate(mx / (kLevelValue[2] + 0.1f * static_cast<float>(is)));
  for (int pass = 0; pass < 2 && scale > 0; ++pass) evaluate(scale);
  return scale;
}

// Quantizes one super-block. G: sub-block size (32 or 16); parity: signs must come in even counts
// per group. Outputs per group: grid index and sign byte; per sub-block: ls; and d.
template <int G>
void quantize_super_block(Type type, const float* x, const float* imp, bool parity, float sigma_mul, int* grid,
                          uint8_t* signs, int* ls, half_bits* d_out) {
  constexpr int kSub = QK_K / G;
  const Codebook& c = codebook(type);
  float sumx2 = 0;
  for (int i = 0; i < QK_K; ++i) sumx2 += x[i] * x[i];
  const float sigma2 = sigma_mul * sumx2 / QK_K;
  float w[QK_K], xv[QK_K];
  for (int i = 0; i < QK_K; ++i) {
    w[i] = imp ? imp[i] * std::sqrt(sigma2 + x[i] * x[i]) : 0.25f * sigma2 + x[i] * x[i];
  }
  for (int s = 0; s < kSub; ++s) {  // a sub-block whose importance is all zero: any fit is as good
    float sw = 0;
    for (int i = 0; i < G; ++i) sw += w[G * s + i];
    if (!(sw > 0)) {
      for (int i = 0; i < G; ++i) w[G * s + i] = std::sqrt(sigma2 + x[G * s + i] * x[G * s + i]);
    }
  }
  for (int g = 0; g < QK_K / 8; ++g) {
    uint8_t sb = 0;
    for (int k = 0; k < 8; ++k) {
      const int i = 8 * g + k;
      xv[i] = std::fabs(x[i]);
      if (x[i] < 0) sb = static_cast<uint8_t>(sb | (1u << k));
    }
    if (parity && (__builtin_popcount(sb) & 1)) {
      int kmin = 0;
      for (int k = 1; k < 8; ++k) {
        if (w[8 * g + k] * xv[8 * g + k] * xv[8 * g + k] < w[8 * g + kmin] * xv[8 * g + kmin] * xv[8 * g + kmin]) kmin = k;
      }
      xv[8 * g + kmin] = -xv[8 * g + kmin];
      sb = static_cast<uint8_t>(sb ^ (1u << kmin));
    }
    signs[g] = sb;
  }
  float scale[kSub];
  double sxq[kSub], sqq[kSub], sxx[kSub];
  float max_scale = 0;
  for (int s = 0; s < kSub; ++s) {
    scale[s] = fit_sub_block<G>(c, xv + G * s, w + G * s, grid + G / 8 * s, sxq[s], sqq[s]);
    sxx[s] = 0;
    for (int i = 0; i < G; ++i) sxx[s] += static_cast<double>(w[G * s + i]) * xv[G * s + i] * xv[G * s + i];
    max_scale = std::max(max_scale, scale[s]);
  }
  if (!(max_scale > 0)) {
    *d_out = 0;
    for (int s = 0; s < kSub; ++s) ls[s] = 0;
    return;
  }
  // ls for a sub-block at super-scale d: the odd multiple 2 ls + 1 of d nearest the fitted scale
  // (the error is a parabola in the scale), and its weighted error.
  auto best_ls = [&](int s, float d, double& err) {
    int best = 0;
    double best_err = std::numeric_limits<double>::infinity();
    const double f = sqq[s] > 0 ? sxq[s] / sqq[s] / d : 0;
    const double half = std::clamp((f - 1) / 2, 0.0, 15.0);  // NaN input: no conversion of a NaN to int
    const int l0 = half >= 0 ? static_cast<int>(half) : 0;
    for (int l = l0; l <= std::min(15, l0 + 1); ++l) {
      const double t = static_cast<double>(d) * (2 * l + 1);
      const double e = sxx[s] - 2 * t * sxq[s] + t * t * sqq[s];
      if (e < best_err) {
        best_err = e;
        best = l;
      }
    }
    err = best_err;
    return best;
  };
  half_bits best_h = 0;
  double best_total = std::numeric_limits<double>::infinity();
  for (int k = 0; k <= 12; ++k) {
    const half_bits h = f2h_sat(max_scale / 31.0f * (0.88f + 0.01f * static_cast<float>(k)));
    const float d = fp16_to_f32(h);
    if (!(d > 0)) continue;
    double total = 0;
    for (int s = 0; s < kSub; ++s) {
      double e;
      best_ls(s, d, e);
      total += e;
    }
    if (total < best_total) {
      best_total = total;
      best_h = h;
    }
  }
  if (best_h == 0) best_h = fit_scale(max_scale, 31);
  const float d = fp16_to_f32(best_h);
  for (int s = 0; s < kSub; ++s) {
    double e;
    ls[s] = best_ls(s, d, e);
  }
  // Re-fit every group at its sub-block's final scale, then re-choose ls.
  for (int pass = 0; pass < 2; ++pass) {
    for (int s = 0; s < kSub; ++s) {
      const float t = d * static_cast<float>(2 * ls[s] + 1);
      double a = 0, b = 0;
      for (int g = G / 8 * s; g < G / 8 * (s + 1); ++g) {
        const int cand = fit_group(c, xv + 8 * g, w + 8 * g, t);
        double a0 = 0, b0 = 0, a1 = 0, b1 = 0;
        group_sums(c, grid[g], xv + 8 * g, w + 8 * g, a0, b0);
        group_sums(c, cand, xv + 8 * g, w + 8 * g, a1, b1);
        if (-2 * t * a1 + t * t * b1 < -2 * t * a0 + t * t * b0) {
          grid[g] = cand;
          a0 = a1;
          b0 = b1;
        }
        a += a0;
        b += b0;
      }
      sxq[s] = a;
      sqq[s] = b;
      double e;
      ls[s] = best_ls(s, d, e);
    }
  }
  *d_out = best_h;
}

void require_importance(const float* imp, const char* type) {
  if (!imp) {
    throw Error(std::string(type) + " needs an importance matrix (--imatrix): without one its 2-bit codebook loses too much");
  }
}

void qref_iq2_xxs(const float* x, void* vy, int64_t n, const float* imp) {
  require_importance(imp, "iq2_xxs");
  auto* y = static_cast<block_iq2_xxs_u*>(vy);
  for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K, imp += QK_K) {
    int grid[32], ls[8];
    uint8_t signs[32];
    half_bits d;
    quantize_super_block<32>(Type::IQ2_XXS, x, imp, true, 1.0f, grid, signs, ls, &d);
    uint8_t qs[64];
    for (int ib = 0; ib < 8; ++ib) {
      uint32_t aux0 = 0, aux1 = static_cast<uint32_t>(ls[ib]) << 28;
      for (int l = 0; l < 4; ++l) {
        aux0 |= static_cast<uint32_t>(grid[4 * ib + l]) << (8 * l);
        aux1 |= static_cast<uint32_t>(signs[4 * ib + l] & 127) << (7 * l);
      }
      std::memcpy(qs + 8 * ib, &aux0, 4);
      std::memcpy(qs + 8 * ib + 4, &aux1, 4);
    }
    y[i].d = d;
    std::memcpy(reinterpret_cast<uint8_t*>(&y[i]) + offsetof(block_iq2_xxs, qs), qs, 64);
  }
}

void qref_iq2_xs(const float* x, void* vy, int64_t n, const float* imp) {
  require_importance(imp, "iq2_xs");
  auto* y = static_cast<block_iq2_xs_u*>(vy);
  for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K, imp += QK_K) {
    int grid[32], ls[16];
    uint8_t signs[32];
    half_bits d;
    quantize_super_block<16>(Type::IQ2_XS, x, imp, true, 1.0f, grid, signs, ls, &d);
    y[i].d = d;
    for (int g = 0; g < 32; ++g) y[i].qs[g] = static_cast<uint16_t>(grid[g] | ((signs[g] & 127) << 9));
    for (int ib = 0; ib < 8; ++ib) y[i].scales[ib] = static_cast<uint8_t>(ls[2 * ib] | (ls[2 * ib + 1] << 4));
  }
}

void qref_iq2_s(const float* x, void* vy, int64_t n, const float* imp) {
  auto* y = static_cast<block_iq2_s_u*>(vy);
  for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
    int grid[32], ls[16];
    uint8_t signs[32];
    half_bits d;
    quantize_super_block<16>(Type::IQ2_S, x, imp ? imp + i * QK_K : nullptr, false, 2.0f, grid, signs, ls, &d);
    y[i].d = d;
    for (int g = 0; g < 32; ++g) {
      y[i].qs[g] = static_cast<uint8_t>(grid[g] & 255);
      y[i].qs[QK_K / 8 + g] = signs[g];
    }
    for (int ib = 0; ib < 8; ++ib) {
      y[i].qh[ib] = 0;
      for (int l = 0; l < 4; ++l) y[i].qh[ib] = static_cast<uint8_t>(y[i].qh[ib] | ((grid[4 * ib + l] >> 8) << (2 * l)));
      y[i].scales[ib] = static_cast<uint8_t>(ls[2 * ib] | (ls[2 * ib + 1] << 4));
    }
  }
}

}  // namespace iq2_ref
}  // namespace

void fill_kernel_table_scalar_iq2(KernelTable& t) {
  namespace r = iq2_ref;
  t.dequantize[static_cast<int>(Type::IQ2_XXS)] = r::dequant_iq2_xxs;
  t.dequantize[static_cast<int>(Type::IQ2_XS)] = r::dequant_iq2_xs;
  t.dequantize[static_cast<int>(Type::IQ2_S)] = r::dequant_iq2_s;
  t.vec_dot[static_cast<int>(Type::IQ2_XXS)] = r::dot_q8_K<sizeof(block_iq2_xxs), r::bsum_iq2_xxs>;
  t.vec_dot[static_cast<int>(Type::IQ2_XS)] = r::dot_q8_K<sizeof(block_iq2_xs), r::bsum_iq2_xs>;
  t.vec_dot[static_cast<int>(Type::IQ2_S)] = r::dot_q8_K<sizeof(block_iq2_s), r::bsum_iq2_s>;
}

namespace {
namespace iq2_ref {

Iq2Codes make_codes(const uint64_t* grid, int size) {
  Iq2Codes c{};
  for (int i = 0; i < size; ++i) {
    unsigned code = 0;
    for (int k = 0; k < 8; ++k) {
      const int b = grid_byte(grid[i], k);
      code |= static_cast<unsigned>(b == 8 ? 0 : b == 25 ? 1 : 2) << (2 * k);
    }
    c.lo[i] = static_cast<uint8_t>(code & 0xff);
    c.hi[i] = static_cast<uint8_t>(code >> 8);
  }
  return c;
}

}  // namespace iq2_ref
}  // namespace

const Iq2Codes& iq2_codes(Type t) {
  static const Iq2Codes xxs = iq2_ref::make_codes(kIq2xxsGrid, 256);
  static const Iq2Codes xs = iq2_ref::make_codes(kIq2xsGrid, 512);
  static const Iq2Codes s = iq2_ref::make_codes(kIq2sGrid, 1024);
  return t == Type::IQ2_XXS ? xxs : t == Type::IQ2_XS ? xs : s;
}

RefQuantizeFn ref_weight_quantizer_iq2(Type t) {
  switch (t) {
    case Type::IQ2_XXS: return iq2_ref::qref_iq2_xxs;
    case Type::IQ2_XS: return iq2_ref::qref_iq2_xs;
    case Type::IQ2_S: return iq2_ref::qref_iq2_s;
    default: return nullptr;
  }
}

}  // namespace les
