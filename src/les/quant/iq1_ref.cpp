// Scalar reference of IQ1_S and IQ1_M: dequantization, dot products against Q8_K (llama.cpp's
// integer sums and float evaluation order, ggml-cpu/quants.c's generic kernels) and the
// importance-weighted quantizers (the algorithm of llama.cpp's quantize_iq1_s / quantize_iq1_m).
//
// Layouts (blocks.h): 8 elements per grid point of kIq1sGrid (values -1, 0, 1), shifted by a
// delta of +-1/8 and scaled by d * (2 ls + 1) with a 3-bit ls per 32 (IQ1_S) or 16 (IQ1_M)
// elements.

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "les/quant/blocks.h"
#include "les/quant/iq1_common.h"
#include "les/quant/iq_grids.h"
#include "les/quant/kernels_internal.h"
#include "les/util/error.h"
#include "les/util/fp16.h"

namespace les {

const uint64_t* iq1_signed_grid() {
  struct Table {
    uint64_t v[4096];
    Table() {
      for (uint32_t s = 0; s < 2; ++s) {
        for (uint32_t i = 0; i < 2048; ++i) {
          uint64_t e = 0;
          for (int k = 0; k < 8; ++k) {
            const auto g = static_cast<int8_t>(kIq1sGrid[i] >> (8 * k));
            const int w = 8 * g + (s ? -1 : 1);
            e |= static_cast<uint64_t>(static_cast<uint8_t>(w)) << (8 * k);
          }
          v[(s << 11) | i] = e;
        }
      }
    }
  };
  static const Table table;
  return table.v;
}

namespace {
namespace iq1_ref {

// Element k (-1, 0 or 1) of grid point i.
inline int grid_value(uint32_t i, int k) { return static_cast<int8_t>(kIq1sGrid[i] >> (8 * k)); }

// ---------------------------------------------------------------------------------------------
// Dequantization: x = (d * (2 ls + 1)) * (grid + delta), delta = -+kIq1sDelta, as llama.cpp.

void dequant_iq1_s(const void* vx, float* y, int64_t n) {
  const auto* x = static_cast<const block_iq1_s_u*>(vx);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float d = fp16_to_f32(x[i].d);
    for (int ib = 0; ib < QK_K / 32; ++ib) {
      const uint16_t qh = x[i].qh[ib];
      const float dl = d * static_cast<float>(iq1s_scale(qh));
      const float delta = (qh & 0x8000) ? -kIq1sDelta : kIq1sDelta;
      for (int l = 0; l < 4; ++l, y += 8) {
        const uint32_t g = x[i].qs[4 * ib + l] | (((qh >> (3 * l)) & 7u) << 8);
        for (int k = 0; k < 8; ++k) y[k] = dl * (static_cast<float>(grid_value(g, k)) + delta);
      }
    }
  }
}

void dequant_iq1_m(const void* vx, float* y, int64_t n) {
  const auto* x = static_cast<const block_iq1_m_u*>(vx);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    uint16_t sc[4];
    iq1m_scale_words(x[i].scales, sc);
    const float d = fp16_to_f32(iq1m_d_bits(sc));
    for (int g8 = 0; g8 < QK_K / 8; ++g8, y += 8) {
      const uint32_t si = iq1m_signed_index(x[i].qs + 4 * (g8 / 4), x[i].qh + 2 * (g8 / 4), g8 % 4);
      const float dl = d * static_cast<float>(iq1m_scale(sc, g8 / 2));
      const float delta = (si & 0x800) ? -kIq1mDelta : kIq1mDelta;
      for (int k = 0; k < 8; ++k) y[k] = dl * (static_cast<float>(grid_value(si & 0x7ff, k)) + delta);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Dot products against Q8_K. Per block the exact integers of llama.cpp's generic kernels:
// sumi = sum over sub-blocks of (2 ls + 1) * (grid . q8), and the delta term sumi1 = sum of
// (2 ls + 1) * sign * (activations' sum) (IQ1_S: from the Q8_K bsums, which must be the sums of
// qs as every Q8_K quantizer writes them); then, in float, sumf += d_w * d_a * (sumi + 1/8 * sumi1)
// block after block. (sumi + sumi1 / 8 is exact in float: both stay below 2^22.)

float dot_iq1_s(int64_t n, const void* vw, const void* va) {
  const auto* x = static_cast<const block_iq1_s_u*>(vw);
  const auto* y = static_cast<const block_q8_K_u*>(va);
  float sumf = 0;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const int8_t* q8 = y[i].qs;
    int sumi = 0, sumi1 = 0;
    for (int ib = 0; ib < QK_K / 32; ++ib) {
      const uint16_t qh = x[i].qh[ib];
      const int ls = iq1s_scale(qh);
      int lsum = 0;
      for (int l = 0; l < 4; ++l, q8 += 8) {
        const uint32_t g = x[i].qs[4 * ib + l] | (((qh >> (3 * l)) & 7u) << 8);
        for (int k = 0; k < 8; ++k) lsum += q8[k] * grid_value(g, k);
      }
      sumi += ls * lsum;
      sumi1 += ls * ((qh & 0x8000) ? -1 : 1) * (y[i].bsums[2 * ib] + y[i].bsums[2 * ib + 1]);
    }
    sumf += fp16_to_f32(x[i].d) * y[i].d * (static_cast<float>(sumi) + kIq1sDelta * static_cast<float>(sumi1));
  }
  return sumf;
}

float dot_iq1_m(int64_t n, const void* vw, const void* va) {
  const auto* x = static_cast<const block_iq1_m_u*>(vw);
  const auto* y = static_cast<const block_q8_K_u*>(va);
  float sumf = 0;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    uint16_t sc[4];
    iq1m_scale_words(x[i].scales, sc);
    const int8_t* q8 = y[i].qs;
    int sumi1 = 0, sumi2 = 0;
    for (int ib = 0; ib < QK_K / 32; ++ib) {
      int grid_sum[2] = {0, 0}, delta_sum[2] = {0, 0};
      for (int l = 0; l < 4; ++l, q8 += 8) {
        const uint32_t si = iq1m_signed_index(x[i].qs + 4 * ib, x[i].qh + 2 * ib, l);
        int lsum1 = 0, lsum2 = 0;
        for (int k = 0; k < 8; ++k) {
          lsum1 += q8[k] * grid_value(si & 0x7ff, k);
          lsum2 += q8[k];
        }
        grid_sum[l / 2] += lsum1;
        delta_sum[l / 2] += (si & 0x800) ? -lsum2 : lsum2;
      }
      const int ls1 = iq1m_scale(sc, 2 * ib), ls2 = iq1m_scale(sc, 2 * ib + 1);
      sumi1 += grid_sum[0] * ls1 + grid_sum[1] * ls2;
      sumi2 += delta_sum[0] * ls1 + delta_sum[1] * ls2;
    }
    sumf += fp16_to_f32(iq1m_d_bits(sc)) * y[i].d *
            (static_cast<float>(sumi1) + kIq1mDelta * static_cast<float>(sumi2));
  }
  return sumf;
}


// ---------------------------------------------------------------------------------------------
// Quantization (llama.cpp's quantize_iq1_s / quantize_iq1_m algorithm, with the importance
// weights w_i = importance_i * sqrt(sigma2 + x_i^2), sigma2 = 2 * mean square of the super-block):
// 1. Per sub-block (32 elements for IQ1_S, 16 for IQ1_M), the best levels in {-1, 0, 1} + delta:
//    the values sorted, every split of them into three runs (low -> -1, middle -> 0, high -> 1)
//    scored by the weighted least-squares fit sumqx^2 / sumq2 for each delta sign (IQ1_M: the
//    sign of each group of 8 separately), exhaustively from prefix sums.
// 2. Each group of 8 levels that is not a grid point is replaced by the best of its grid
//    neighbours (those at the three smallest distances) under the weights at that scale, and the
//    sub-block scale refitted.
// 3. The fp16 super-scale and the 3-bit sub-block scales: where llama.cpp takes d = max / 15
//    times a fixed factor and rounds each scale to the nearest odd multiple, we try a range of
//    super-scales (each after fp16 rounding) and keep the one of least weighted error, the odd
//    multiples chosen per sub-block for it (the best one: the error is quadratic in it).
// A sub-block whose values are all (nearly) zero takes the grid's all-zero point (llama.cpp
// leaves grid point 0, all -1, there); one whose importance is all zero is fitted with importance 1.

// The grid's neighbour tables, in level coordinates (element value + 1 in {0, 1, 2}); a group
// of 8 levels is keyed by sum level_k * 3^k.
struct Iq1Neighbours {
  static constexpr int kKeys = 6561;  // 3^8
  int16_t on_grid[kKeys];             // grid index of the point, -1 if it is not on the grid
  uint8_t level[2048][8];             // levels of each grid point
  std::vector<uint32_t> first;        // [kKeys + 1]: neighbours of key k are list[first[k] .. first[k+1])
  std::vector<uint16_t> list;         // grid indices, by distance then index
  int zero_point = -1;                // grid index of (0, ..., 0)

  Iq1Neighbours() {
    std::fill(std::begin(on_grid), std::end(on_grid), static_cast<int16_t>(-1));
    for (int i = 0; i < 2048; ++i) {
      int key = 0;
      for (int k = 7; k >= 0; --k) {
        level[i][k] = static_cast<uint8_t>(grid_value(static_cast<uint32_t>(i), k) + 1);
        key = 3 * key + level[i][k];
      }
      on_grid[key] = static_cast<int16_t>(i);
      if (key == 3280) zero_point = i;  // all levels 1: sum 3^k for k < 8
    }
    LES_ASSERT(zero_point >= 0);
    first.assign(kKeys + 1, 0);
    std::vector<uint8_t> dist(2048);
    for (int key = 0; key < kKeys; ++key) {
      first[key] = static_cast<uint32_t>(list.size());
      if (on_grid[key] >= 0) continue;
      uint8_t lv[8];
      for (int k = 0, v = key; k < 8; ++k, v /= 3) lv[k] = static_cast<uint8_t>(v % 3);
      // The three smallest distinct squared distances, then the points at them in order.
      int best[3] = {99, 99, 99};
      for (int i = 0; i < 2048; ++i) {
        int d = 0;
        for (int k = 0; k < 8; ++k) d += (level[i][k] - lv[k]) * (level[i][k] - lv[k]);
        dist[i] = static_cast<uint8_t>(d);
        if (d < best[0]) {
          best[2] = best[1], best[1] = best[0], best[0] = d;
        } else if (d > best[0] && d < best[1]) {
          best[2] = best[1], best[1] = d;
        } else if (d > best[1] && d < best[2]) {
          best[2] = d;
        }
      }
      for (int b = 0; b < 3 && best[b] < 99; ++b) {
        for (int i = 0; i < 2048; ++i) {
          if (dist[i] == best[b]) list.push_back(static_cast<uint16_t>(i));
        }
      }
    }
    first[kKeys] = static_cast<uint32_t>(list.size());
  }
};

const Iq1Neighbours& neighbours() {
  static const Iq1Neighbours n;
  return n;
}

// The level values of a group: {-1, 0, 1} + delta, delta = +1/8 (sign 0) or -1/8 (sign 1).
inline const float* level_values(int sign) {
  static constexpr float kPlus[3] = {-1 + kIq1sDelta, kIq1sDelta, 1 + kIq1sDelta};
  static constexpr float kMinus[3] = {-1 - kIq1sDelta, -kIq1sDelta, 1 - kIq1sDelta};
  return sign ? kMinus : kPlus;
}

// The grid point for a group of 8 with levels L[8] (0..2) at scale `scale` with level values xx:
// the point itself if it is on the grid, else its neighbour of least weighted squared error.
int grid_point(const Iq1Neighbours& nb, const uint8_t* L, const float* x, const float* w, float scale, const float* xx) {
  int key = 0;
  for (int k = 7; k >= 0; --k) key = 3 * key + L[k];
  if (nb.on_grid[key] >= 0) return nb.on_grid[key];
  int best = nb.list[nb.first[key]];
  float best_err = FLT_MAX;
  for (uint32_t j = nb.first[key]; j < nb.first[key + 1]; ++j) {
    const uint8_t* lv = nb.level[nb.list[j]];
    float err = 0;
    for (int k = 0; k < 8; ++k) {
      const float diff = scale * xx[lv[k]] - x[k];
      err += w[k] * diff * diff;
    }
    if (err < best_err) {
      best_err = err;
      best = nb.list[j];
    }
  }
  return best;
}

// A sub-block's fit: per group of 8 a grid point and a delta sign, and the weighted sums that give
// its error at any scale s: sum w (s q - x)^2 = sx2 - 2 s sqx + s^2 sq2.
struct SubFit {
  int point[4] = {0, 0, 0, 0};
  int sign[4] = {0, 0, 0, 0};
  double sqx = 0, sq2 = 0, sx2 = 0;
  float scale = 0;  // best scale sqx / sq2 (0 for a sub-block left at zero)
};

// Sums of a fit over its ng groups at the points it holds.
void fit_sums(const Iq1Neighbours& nb, int ng, const float* x, const float* w, SubFit& f) {
  f.sqx = f.sq2 = f.sx2 = 0;
  for (int g = 0; g < ng; ++g) {
    const float* xx = level_values(f.sign[g]);
    for (int k = 0; k < 8; ++k) {
      const double q = xx[nb.level[f.point[g]][k]];
      const double xv = x[8 * g + k];
      f.sqx += w[8 * g + k] * q * xv;
      f.sq2 += w[8 * g + k] * q * q;
      f.sx2 += w[8 * g + k] * xv * xv;
    }
  }
}

// Steps 1 and 2 for one sub-block of n = 8 * ng elements (ng = 4 for IQ1_S, 2 for IQ1_M).
// per_group_sign: each group chooses its delta sign (IQ1_M); otherwise one sign for all (IQ1_S).
SubFit fit_sub_block(const Iq1Neighbours& nb, int ng, bool per_group_sign, const float* x, const float* w) {
  const int n = 8 * ng;
  SubFit f;
  float amax = 0;
  for (int i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  if (amax < 1e-12f) {
    for (int g = 0; g < ng; ++g) f.point[g] = nb.zero_point;
    fit_sums(nb, ng, x, w, f);
    return f;
  }
  // Sorted order; prefix sums of w x and w per part (a part is a group of 8 where each group
  // chooses its delta sign, else the whole sub-block).
  int order[32];
  for (int i = 0; i < n; ++i) order[i] = i;
  std::sort(order, order + n, [&](int a, int b) { return x[a] < x[b] || (x[a] == x[b] && a < b); });
  const int parts = per_group_sign ? ng : 1;
  float px[4][33], pw[4][33];
  for (int p = 0; p < parts; ++p) px[p][0] = pw[p][0] = 0;
  for (int j = 0; j < n; ++j) {
    const int i = order[j];
    for (int p = 0; p < parts; ++p) {
      const bool mine = !per_group_sign || i / 8 == p;
      px[p][j + 1] = px[p][j] + (mine ? w[i] * x[i] : 0.0f);
      pw[p][j + 1] = pw[p][j] + (mine ? w[i] : 0.0f);
    }
  }
  // For levels v0 < v1 < v2 = v1 + 1 = v0 + 2 on runs [0, i1), [i1, i2), [i2, n) of a part:
  // sumqx = v2 X - px[i1] - px[i2], sumq2 = v2^2 W + (v0^2 - v1^2) pw[i1] + (v1^2 - v2^2) pw[i2].
  const int n_combos = 1 << parts;  // delta sign per part
  float best_score = -FLT_MAX, best_scale = 0;
  int best_i1 = -1, best_i2 = -1, best_combo = 0;
  for (int i1 = 0; i1 <= n; ++i1) {
    for (int i2 = i1; i2 <= n; ++i2) {
      float qx[4][2], q2[4][2];
      for (int p = 0; p < parts; ++p) {
        for (int s = 0; s < 2; ++s) {
          const float* v = level_values(s);
          qx[p][s] = px[p][n] * v[2] - px[p][i1] - px[p][i2];
          q2[p][s] = pw[p][n] * v[2] * v[2] + pw[p][i1] * (v[0] * v[0] - v[1] * v[1]) + pw[p][i2] * (v[1] * v[1] - v[2] * v[2]);
        }
      }
      for (int c = 0; c < n_combos; ++c) {
        float sumqx = 0, sumq2 = 0;
        for (int p = 0; p < parts; ++p) {
          sumqx += qx[p][(c >> p) & 1];
          sumq2 += q2[p][(c >> p) & 1];
        }
        if (sumq2 > 0 && sumqx * sumqx > best_score * sumq2) {
          best_scale = sumqx / sumq2;
          best_score = best_scale * sumqx;
          best_i1 = i1, best_i2 = i2, best_combo = c;
        }
      }
    }
  }
  if (best_i1 < 0) {  // nothing has weight: the zero point
    for (int g = 0; g < ng; ++g) f.point[g] = nb.zero_point;
    fit_sums(nb, ng, x, w, f);
    return f;
  }
  uint8_t L[32];
  for (int j = 0; j < n; ++j) L[order[j]] = static_cast<uint8_t>(j < best_i1 ? 0 : j < best_i2 ? 1 : 2);
  int sign[4];
  for (int g = 0; g < ng; ++g) sign[g] = per_group_sign ? (best_combo >> g) & 1 : best_combo & 1;
  if (best_scale < 0) {  // the mirrored levels with the opposite deltas fit as well at -scale
    for (int j = 0; j < n; ++j) L[j] = static_cast<uint8_t>(2 - L[j]);
    for (int g = 0; g < ng; ++g) sign[g] ^= 1;
    best_scale = -best_scale;
  }
  bool all_on_grid = true;
  for (int g = 0; g < ng; ++g) {
    f.sign[g] = sign[g];
    f.point[g] = grid_point(nb, L + 8 * g, x + 8 * g, w + 8 * g, best_scale, level_values(sign[g]));
    int key = 0;
    for (int k = 7; k >= 0; --k) key = 3 * key + L[8 * g + k];
    all_on_grid = all_on_grid && nb.on_grid[key] >= 0;
  }
  fit_sums(nb, ng, x, w, f);
  f.scale = best_scale;
  if (!all_on_grid && f.sqx > 0 && f.sq2 > 0) f.scale = static_cast<float>(f.sqx / f.sq2);
  return f;
}

// The odd multiplier 2 l + 1 (l in 0..7) of super-scale D closest to the best scale of a fit.
inline int best_l(const SubFit& f, float D) {
  if (!(D > 0) || f.sq2 <= 0) return 0;
  const float m = static_cast<float>(f.sqx / f.sq2) / D;
  return std::clamp(static_cast<int>(std::lround(0.5f * (m - 1.0f))), 0, 7);
}

// Weighted error of the fits at super-scale D with the best multipliers; stores them in l.
double total_error(const SubFit* f, int nsub, float D, int* l) {
  double e = 0;
  for (int s = 0; s < nsub; ++s) {
    l[s] = best_l(f[s], D);
    const double sc = static_cast<double>(D) * (2 * l[s] + 1);
    e += f[s].sx2 - 2 * sc * f[s].sqx + sc * sc * f[s].sq2;
  }
  return e;
}

// Step 3: the fp16 super-scale of least weighted error and the multipliers l for it; 0 (all
// values zero) where nothing beats that, as for an all-zero super-block or one too small for
// fp16.
half_bits choose_super_scale(const SubFit* f, int nsub, int* l) {
  float max_scale = 0;
  double best_err = 0;
  for (int s = 0; s < nsub; ++s) {
    max_scale = std::max(max_scale, f[s].scale);
    best_err += f[s].sx2;
    l[s] = 0;
  }
  if (!(max_scale > 0)) return 0;
  constexpr float kHalfMax = 65504.0f;
  half_bits best = 0;
  int lt[16];
  // Candidates: the largest scale as the multiple 15 - t / 4 of D for t = -4 .. 28 (D from
  // max / 16 to max / 8), each rounded to fp16.
  for (int t = -4; t <= 28; ++t) {
    const float want = std::min(max_scale / (15.0f - 0.25f * static_cast<float>(t)), kHalfMax);
    const half_bits h = f32_to_fp16(want);
    const float D = fp16_to_f32(h);
    if (!(D > 0)) continue;
    const double e = total_error(f, nsub, D, lt);
    if (e < best_err) {
      best_err = e;
      best = h;
      std::copy(lt, lt + nsub, l);
    }
  }
  return best;
}

// Weights of a super-block's sub-block of n elements (step 1's w_i), importance 1 where the
// sub-block's importance is all zero.
void sub_block_weights(int n, const float* x, const float* imp, float sigma2, float* w) {
  bool any = false;
  for (int i = 0; i < n; ++i) any = any || imp[i] > 0;
  for (int i = 0; i < n; ++i) w[i] = (any ? imp[i] : 1.0f) * std::sqrt(sigma2 + x[i] * x[i]);
}

float super_block_sigma2(const float* x) {
  float sumx2 = 0;
  for (int i = 0; i < QK_K; ++i) sumx2 += x[i] * x[i];
  return 2 * sumx2 / QK_K;
}

// The quantizers' argument checks: an importance vector is required (as llama.cpp requires one),
// and the values must be finite (the sort of step 1 needs an order).
void check_args(const char* type, const float* x, int64_t n, const float* imp) {
  if (!imp) {
    throw Error(std::string(type) +
                " needs an importance matrix (--imatrix): without one its 1.5-1.75 bits per weight lose too much");
  }
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(x[i])) {
      throw Error(std::string(type) + ": weight " + std::to_string(i) + " of the row is not finite (" + std::to_string(x[i]) + ")");
    }
  }
}

void qref_iq1_s(const float* x, void* vy, int64_t n, const float* imp) {
  check_args("iq1_s", x, n, imp);
  const Iq1Neighbours& nb = neighbours();
  auto* y = static_cast<block_iq1_s_u*>(vy);
  for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K, imp += QK_K) {
    const float sigma2 = super_block_sigma2(x);
    SubFit f[8];
    for (int ib = 0; ib < 8; ++ib) {
      float w[32];
      sub_block_weights(32, x + 32 * ib, imp + 32 * ib, sigma2, w);
      f[ib] = fit_sub_block(nb, 4, false, x + 32 * ib, w);
    }
    int l[8];
    const half_bits d = choose_super_scale(f, 8, l);
    block_iq1_s out{};
    out.d = d;
    for (int ib = 0; ib < 8; ++ib) {
      uint16_t qh = static_cast<uint16_t>((l[ib] << 12) | (f[ib].sign[0] << 15));
      for (int g = 0; g < 4; ++g) {
        out.qs[4 * ib + g] = static_cast<uint8_t>(f[ib].point[g] & 0xff);
        qh = static_cast<uint16_t>(qh | ((f[ib].point[g] >> 8) << (3 * g)));
      }
      out.qh[ib] = qh;
    }
    std::memcpy(&y[i], &out, sizeof out);
  }
}

void qref_iq1_m(const float* x, void* vy, int64_t n, const float* imp) {
  check_args("iq1_m", x, n, imp);
  const Iq1Neighbours& nb = neighbours();
  auto* y = static_cast<block_iq1_m_u*>(vy);
  for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K, imp += QK_K) {
    const float sigma2 = super_block_sigma2(x);
    SubFit f[16];
    for (int ib = 0; ib < 16; ++ib) {
      float w[16];
      sub_block_weights(16, x + 16 * ib, imp + 16 * ib, sigma2, w);
      f[ib] = fit_sub_block(nb, 2, true, x + 16 * ib, w);
    }
    int l[16];
    const half_bits d = choose_super_scale(f, 16, l);
    block_iq1_m out{};
    uint16_t sc[4] = {0, 0, 0, 0};
    for (int ib = 0; ib < 16; ++ib) {
      sc[ib / 4] = static_cast<uint16_t>(sc[ib / 4] | (l[ib] << (3 * (ib % 4))));
      for (int g = 0; g < 2; ++g) {
        const int e = 2 * ib + g;  // group of 8 in the block
        out.qs[e] = static_cast<uint8_t>(f[ib].point[g] & 0xff);
        const int nib = (f[ib].point[g] >> 8) | (f[ib].sign[g] << 3);
        out.qh[e / 2] = static_cast<uint8_t>(out.qh[e / 2] | (nib << (4 * (e % 2))));
      }
    }
    for (int k = 0; k < 4; ++k) {
      sc[k] = static_cast<uint16_t>(sc[k] | (((d >> (4 * k)) & 0xf) << 12));
      out.scales[2 * k] = static_cast<uint8_t>(sc[k] & 0xff);
      out.scales[2 * k + 1] = static_cast<uint8_t>(sc[k] >> 8);
    }
    std::memcpy(&y[i], &out, sizeof out);
  }
}

}  // namespace iq1_ref
}  // namespace

void fill_kernel_table_scalar_iq1(KernelTable& t) {
  t.dequantize[static_cast<int>(Type::IQ1_S)] = iq1_ref::dequant_iq1_s;
  t.dequantize[static_cast<int>(Type::IQ1_M)] = iq1_ref::dequant_iq1_m;
  t.vec_dot[static_cast<int>(Type::IQ1_S)] = iq1_ref::dot_iq1_s;
  t.vec_dot[static_cast<int>(Type::IQ1_M)] = iq1_ref::dot_iq1_m;
}

RefQuantizeFn ref_weight_quantizer_iq1(Type t) {
  if (t == Type::IQ1_S) return iq1_ref::qref_iq1_s;
  if (t == Type::IQ1_M) return iq1_ref::qref_iq1_m;
  return nullptr;
}

}  // namespace les
