// Scalar reference of IQ3_XXS, IQ3_S: dequantization, dot products against Q8_K (llama.cpp's
// evaluation order: an exact integer sum per super-block, then one float product per block) and
// the importance-weighted quantizers.
//
// Both types store 256 weights as 64 groups of 4 whose magnitudes are a point of a codebook
// (iq_grids.h) and 8 sub-blocks of 32 with a 4-bit scale ls:
//   IQ3_XXS: x = d * (0.5 + ls) * 0.5 * kIq3xxsGrid[q] * sign   (values 4, 12, ..., 52, 62)
//   IQ3_S:   x = d * (1 + 2 ls) * kIq3sGrid[q] * sign             (values 1, 3, ..., 15)
// Every grid point is 4 levels l in 0..7 (value ~ 2l + 1, times 4 for IQ3_XXS), a point of the
// 8^4 lattice; the codebooks hold 256 resp. 512 of its 4096 points.

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "les/quant/blocks.h"
#include "les/quant/iq3_common.h"
#include "les/quant/iq_grids.h"
#include "les/quant/kernels_internal.h"
#include "les/quant/quant_common.h"
#include "les/util/error.h"
#include "les/util/fp16.h"

namespace les {
namespace {
namespace iq3_ref {

// ---------------------------------------------------------------------------------------------
// Dequantization (llama.cpp's float order: db = d * scale factor, then db * grid value, negated
// where the sign bit is set).

void dequant_iq3_xxs(const void* vx, float* y, int64_t n) {
  const auto* x = static_cast<const block_iq3_xxs_u*>(vx);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float d = fp16_to_f32(x[i].d);
    for (int ib = 0; ib < QK_K / 32; ++ib) {
      const uint32_t aux = iq3xxs_signs_scale(x[i].qs, ib);
      const float db = d * (0.5f + static_cast<float>(aux >> 28)) * 0.5f;
      for (int g = 0; g < 8; ++g, y += 4) {
        const uint8_t signs = iq2_signs(static_cast<int>((aux >> (7 * (g / 2))) & 127));
        const uint32_t grid = kIq3xxsGrid[x[i].qs[8 * ib + g]];
        for (int j = 0; j < 4; ++j) {
          const float v = db * static_cast<float>((grid >> (8 * j)) & 0xff);
          y[j] = (signs >> (4 * (g % 2) + j)) & 1 ? -v : v;
        }
      }
    }
  }
}

void dequant_iq3_s(const void* vx, float* y, int64_t n) {
  const auto* x = static_cast<const block_iq3_s_u*>(vx);
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float d = fp16_to_f32(x[i].d);
    for (int ib = 0; ib < QK_K / 32; ++ib) {
      const float db = d * static_cast<float>(1 + 2 * iq3s_scale(x[i].scales, ib));
      for (int g = 0; g < 8; ++g, y += 4) {
        const uint8_t signs = x[i].signs[4 * ib + g / 2];
        const uint32_t grid = kIq3sGrid[iq3s_index(x[i].qs, x[i].qh, ib, g)];
        for (int j = 0; j < 4; ++j) {
          const float v = db * static_cast<float>((grid >> (8 * j)) & 0xff);
          y[j] = (signs >> (4 * (g % 2) + j)) & 1 ? -v : v;
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Dot products with Q8_K: per super-block the exact integer sum over sub-blocks of
// (2 ls + 1) * sum(grid * sign * q8), then sumf += (d_w * d_a) * sum in block order; IQ3_XXS
// multiplies the total by 0.25 at the end (its grid values are 4x those of IQ3_S).

float dot_iq3_xxs(int64_t n, const void* vw, const void* va) {
  const auto* x = static_cast<const block_iq3_xxs_u*>(vw);
  const auto* y = static_cast<const block_q8_K_u*>(va);
  float sumf = 0;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float d = fp16_to_f32(x[i].d) * y[i].d;
    const int8_t* q8 = y[i].qs;
    int32_t bsum = 0;
    for (int ib = 0; ib < QK_K / 32; ++ib) {
      const uint32_t aux = iq3xxs_signs_scale(x[i].qs, ib);
      int32_t sumi = 0;
      for (int g = 0; g < 8; ++g, q8 += 4) {
        const uint8_t signs = iq2_signs(static_cast<int>((aux >> (7 * (g / 2))) & 127));
        const uint32_t grid = kIq3xxsGrid[x[i].qs[8 * ib + g]];
        for (int j = 0; j < 4; ++j) {
          const int v = static_cast<int>((grid >> (8 * j)) & 0xff) * q8[j];
          sumi += (signs >> (4 * (g % 2) + j)) & 1 ? -v : v;
        }
      }
      bsum += sumi * static_cast<int32_t>(2 * (aux >> 28) + 1);
    }
    sumf += d * static_cast<float>(bsum);
  }
  return 0.25f * sumf;
}

float dot_iq3_s(int64_t n, const void* vw, const void* va) {
  const auto* x = static_cast<const block_iq3_s_u*>(vw);
  const auto* y = static_cast<const block_q8_K_u*>(va);
  float sumf = 0;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const float d = fp16_to_f32(x[i].d) * y[i].d;
    const int8_t* q8 = y[i].qs;
    int32_t bsum = 0;
    for (int ib = 0; ib < QK_K / 32; ++ib) {
      int32_t sumi = 0;
      for (int g = 0; g < 8; ++g, q8 += 4) {
        const uint8_t signs = x[i].signs[4 * ib + g / 2];
        const uint32_t grid = kIq3sGrid[iq3s_index(x[i].qs, x[i].qh, ib, g)];
        for (int j = 0; j < 4; ++j) {
          const int v = static_cast<int>((grid >> (8 * j)) & 0xff) * q8[j];
          sumi += (signs >> (4 * (g % 2) + j)) & 1 ? -v : v;
        }
      }
      bsum += sumi * (1 + 2 * iq3s_scale(x[i].scales, ib));
    }
    sumf += d * static_cast<float>(bsum);
  }
  return sumf;
}

// ---------------------------------------------------------------------------------------------
// Quantization.
//
// The search is llama.cpp's (quantize_row_iq3_xxs_impl / iq3_s_impl): per sub-block of 32, with
// weights w_i = imp_i * sqrt(sigma2 + x_i^2) (sigma2 = 2 * mean square of the super-block) or
// x_i^2 without importance, the magnitudes |x_i| are rounded to levels l = round((x/s - 1) / 2)
// in 0..7 for 31 (IQ3_XXS) or 19 (IQ3_S) trial scales s around max/15; a group of 4 levels that
// is not a codebook point becomes the nearest codebook point (weighted) among its precomputed
// neighbours; the scale with the best weighted least-squares fit wins, and off-grid groups are
// re-rounded once against it. IQ3_XXS stores 7 signs per 8 elements (even parity): where the
// count of negatives is odd, the element of least w x^2 flips.
//
// Our step after that search: the fp16 super-scale d and the 4-bit scales ls are chosen by the
// weighted error of the final, stored values (the true codebook values, 62 included), over a
// range of d around max(scale) / 31, instead of one fixed d.

constexpr int kLattice = 4096;  // 8^4 points of 4 levels, 3 bits each (element k at bits 3k)

// A codebook seen as lattice points, with the neighbours of every point off the codebook.
struct Iq3Lattice {
  int grid_size = 0;
  uint8_t level[512][4];          // levels 0..7 of codebook point i
  int16_t index_of[kLattice];     // lattice point -> codebook index, or -1
  int32_t first[kLattice + 1];    // off-codebook point p: its neighbours are near[first[p] .. first[p+1])
  std::vector<uint16_t> near;
};

// Neighbours of an off-codebook point: the codebook points at the `rings` smallest squared
// distances (in levels), as llama.cpp's iq3xs_init_impl chooses them (2 for IQ3_XXS, 3 for IQ3_S).
Iq3Lattice make_lattice(const uint32_t* grid, int grid_size, int value_shift, int rings) {
  Iq3Lattice t;
  t.grid_size = grid_size;
  std::fill(std::begin(t.index_of), std::end(t.index_of), int16_t{-1});
  for (int i = 0; i < grid_size; ++i) {
    int p = 0;
    for (int k = 0; k < 4; ++k) {
      const int v = static_cast<int>((grid[i] >> (8 * k)) & 0xff);
      const int l = v >> value_shift;  // IQ3_XXS: 4, 12, ..., 52, 62 >> 3; IQ3_S: 1, 3, ..., 15 >> 1
      LES_ASSERT(l >= 0 && l < 8);
      t.level[i][k] = static_cast<uint8_t>(l);
      p |= l << (3 * k);
    }
    LES_ASSERT(t.index_of[p] < 0);
    t.index_of[p] = static_cast<int16_t>(i);
  }
  std::vector<std::pair<int, int>> by_dist(static_cast<size_t>(grid_size));
  for (int p = 0; p < kLattice; ++p) {
    t.first[p] = static_cast<int32_t>(t.near.size());
    if (t.index_of[p] >= 0) continue;
    for (int i = 0; i < grid_size; ++i) {
      int d2 = 0;
      for (int k = 0; k < 4; ++k) {
        const int diff = t.level[i][k] - ((p >> (3 * k)) & 7);
        d2 += diff * diff;
      }
      by_dist[static_cast<size_t>(i)] = {d2, i};
    }
    std::sort(by_dist.begin(), by_dist.end());
    int ring = 1;
    for (size_t j = 0; j < by_dist.size(); ++j) {
      if (j > 0 && by_dist[j].first > by_dist[j - 1].first && ++ring > rings) break;
      t.near.push_back(static_cast<uint16_t>(by_dist[j].second));
    }
  }
  t.first[kLattice] = static_cast<int32_t>(t.near.size());
  return t;
}

// Built once per codebook (thread-safe: function-local statics).
const Iq3Lattice& lattice_xxs() {
  static const Iq3Lattice t = make_lattice(kIq3xxsGrid, 256, 3, 2);
  return t;
}
const Iq3Lattice& lattice_s() {
  static const Iq3Lattice t = make_lattice(kIq3sGrid, 512, 1, 3);
  return t;
}

// Codebook index for the group of 4 magnitudes xv (weights sw) at scale s: their rounded levels
// if those form a codebook point, else the neighbour with the least weighted error. Writes the
// levels to L; sets on_grid.
int nearest_point(const Iq3Lattice& t, const float* xv, const float* sw, float inv_s, float s, uint8_t* L,
                  bool& on_grid) {
  int p = 0;
  for (int k = 0; k < 4; ++k) p |= std::clamp(nearest_int(0.5f * (inv_s * xv[k] - 1)), 0, 7) << (3 * k);
  int best = t.index_of[p];
  on_grid = best >= 0;
  if (!on_grid) {
    float best_d2 = INFINITY;
    for (int32_t j = t.first[p]; j < t.first[p + 1]; ++j) {
      const int i = t.near[static_cast<size_t>(j)];
      float d2 = 0;
      for (int k = 0; k < 4; ++k) {
        const float diff = s * static_cast<float>(2 * t.level[i][k] + 1) - xv[k];
        d2 += sw[k] * diff * diff;
      }
      if (d2 < best_d2 || best < 0) {
        best_d2 = d2;
        best = i;
      }
    }
  }
  std::memcpy(L, t.level[best], 4);
  return best;
}

// One sub-block of 32 after the search: codebook indices, sign bits (bit j of sign[g/2] for
// element 8 (g/2) + j), and the weighted sums that fix its error as a function of its scale t:
// E(t) = sum w x^2 - 2 t B + t^2 C with x^ = t * value (value: the stored codebook values).
struct SubBlock {
  uint16_t index[8];
  uint8_t sign[4];
  float scale;   // the fitted scale in units of the levels 2l + 1 (0: all zero)
  double B, C;
};

// The search of llama.cpp's quantizer on one sub-block; xb[32] values, w[32] weights.
SubBlock search_sub_block(const Iq3Lattice& t, const float* xb, const float* w, bool parity_signs,
                          int n_trials) {
  SubBlock r{};
  float xv[32], sw[32];
  for (int i = 0; i < 32; ++i) {
    xv[i] = std::fabs(xb[i]);
    sw[i] = std::sqrt(w[i]);
  }
  for (int k = 0; k < 4; ++k) {
    int negatives = 0;
    uint8_t s = 0;
    for (int j = 0; j < 8; ++j) {
      if (xb[8 * k + j] < 0) {
        s = static_cast<uint8_t>(s | (1u << j));
        ++negatives;
      }
    }
    if (parity_signs && negatives % 2) {
      // The stored sign of the least important element is wrong: its magnitude becomes -|x|.
      int jmin = 0;
      for (int j = 1; j < 8; ++j) {
        const float a = w[8 * k + j] * xb[8 * k + j] * xb[8 * k + j];
        if (a < w[8 * k + jmin] * xb[8 * k + jmin] * xb[8 * k + jmin]) jmin = j;
      }
      xv[8 * k + jmin] = -xv[8 * k + jmin];
      s = static_cast<uint8_t>(s ^ (1u << jmin));
    }
    r.sign[k] = s;
  }
  float mx = xv[0];
  for (int i = 1; i < 32; ++i) mx = std::max(mx, xv[i]);
  const int zero_point = t.index_of[0];
  if (!(mx > 1e-8f)) {
    for (auto& q : r.index) q = static_cast<uint16_t>(zero_point);
    return r;
  }
  uint8_t L[32], Lt[32];
  std::memset(L, 0, sizeof(L));
  bool on[8], on_t[8];
  for (bool& b : on) b = parity_signs;  // as llama.cpp: IQ3_XXS starts "on grid", IQ3_S does not
  float scale = mx / 15, best = 0;
  int idx[8], idx_t[8];
  for (int k = 0; k < 8; ++k) idx[k] = zero_point;
  for (int is = -n_trials; is <= n_trials; ++is) {
    const float id = (15 + 0.2f * static_cast<float>(is)) / mx;
    const float s = 1 / id;
    for (int k = 0; k < 8; ++k) idx_t[k] = nearest_point(t, xv + 4 * k, sw + 4 * k, id, s, Lt + 4 * k, on_t[k]);
    float sumqx = 0, sumq2 = 0;
    for (int i = 0; i < 32; ++i) {
      const float q = static_cast<float>(2 * Lt[i] + 1);
      sumqx += w[i] * xv[i] * q;
      sumq2 += w[i] * q * q;
    }
    if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
      scale = sumqx / sumq2;
      best = scale * sumqx;
      std::memcpy(L, Lt, sizeof(L));
      std::memcpy(on, on_t, sizeof(on));
      std::memcpy(idx, idx_t, sizeof(idx));
    }
  }
  bool any_off = false;
  for (bool b : on) any_off |= !b;
  if (any_off && scale > 0) {
    // Off-grid groups re-rounded against the chosen scale (IQ3_XXS only those; IQ3_S all).
    const float id = 1 / scale;
    for (int k = 0; k < 8; ++k) {
      if (parity_signs && on[k]) continue;
      bool unused;
      idx[k] = nearest_point(t, xv + 4 * k, sw + 4 * k, id, scale, L + 4 * k, unused);
    }
    float sumqx = 0, sumq2 = 0;
    for (int i = 0; i < 32; ++i) {
      const float q = static_cast<float>(2 * L[i] + 1);
      sumqx += w[i] * xv[i] * q;
      sumq2 += w[i] * q * q;
    }
    if (sumq2 > 0) scale = sumqx / sumq2;
  }
  if (scale < 0) {
    // Cannot happen with a positive fit, but a negative scale is the same fit with every sign
    // flipped (for IQ3_XXS all 8 of a group keep their even parity).
    scale = -scale;
    for (uint8_t& s : r.sign) s = static_cast<uint8_t>(~s);
  }
  if (!std::isfinite(scale)) scale = 0;
  for (int k = 0; k < 8; ++k) r.index[k] = static_cast<uint16_t>(idx[k]);
  r.scale = scale;
  return r;
}

// Weighted sums B = sum w x v, C = sum w v^2 of a sub-block over its stored values v (codebook
// value * sign, in units where the sub-block's scale multiplies them).
void error_terms(SubBlock& r, const uint32_t* grid, float value_unit, const float* xb, const float* w) {
  double B = 0, C = 0;
  for (int k = 0; k < 8; ++k) {
    for (int j = 0; j < 4; ++j) {
      const int e = 4 * k + j;
      float v = static_cast<float>((grid[r.index[k]] >> (8 * j)) & 0xff) * value_unit;
      if ((r.sign[e / 8] >> (e % 8)) & 1) v = -v;
      B += static_cast<double>(w[e]) * xb[e] * v;
      C += static_cast<double>(w[e]) * v * v;
    }
  }
  r.B = B;
  r.C = C;
}

// Chooses the fp16 super-scale and the 8 scales ls in 0..15 (sub-block scale d * (2 ls + 1)) by
// the weighted error of the stored values. Returns d's bits; writes ls[8].
half_bits choose_scales(const SubBlock* sb, int* ls) {
  float max_scale = 0;
  for (int ib = 0; ib < 8; ++ib) max_scale = std::max(max_scale, sb[ib].scale);
  std::fill(ls, ls + 8, 0);
  if (!(max_scale > 0)) return 0;
  double best_err = INFINITY;
  half_bits best_d = 0;
  for (int step = -8; step <= 16; ++step) {
    half_bits dh = f2h_sat(max_scale / 31 * (1 + 0.005f * static_cast<float>(step)));
    if ((dh & 0x7fff) == 0) dh = 1;  // underflow: the smallest subnormal rather than a zero block
    const double d = fp16_to_f32(dh);
    if (!(d > 0)) continue;
    double err = 0;
    int trial[8];
    for (int ib = 0; ib < 8; ++ib) {
      const SubBlock& r = sb[ib];
      const double fit = r.C > 0 ? std::clamp(0.5 * (r.B / r.C / d - 1), 0.0, 15.0) : 0.0;
      int l = std::clamp(static_cast<int>(std::lround(fit)), 0, 15);  // (a NaN fit: any l)
      double e = d * (2 * l + 1) * (d * (2 * l + 1) * r.C - 2 * r.B);
      for (int c : {l - 1, l + 1}) {
        if (c < 0 || c > 15) continue;
        const double t = d * (2 * c + 1);
        const double ec = t * (t * r.C - 2 * r.B);
        if (ec < e) {
          e = ec;
          l = c;
        }
      }
      trial[ib] = l;
      err += e;
    }
    if (err < best_err) {
      best_err = err;
      best_d = dh;
      std::copy(trial, trial + 8, ls);
    }
  }
  return best_d;
}

// Per-element fitting weights of sub-block xb[32] (see above). A sub-block whose importance is
// all zero takes the weights of no importance (any fit is as good there).
void sub_block_weights(const float* xb, const float* imp, float sigma2, float* w) {
  bool informative = false;
  for (int i = 0; imp && i < 32; ++i) informative |= imp[i] > 0;
  for (int i = 0; i < 32; ++i) w[i] = informative ? imp[i] * std::sqrt(sigma2 + xb[i] * xb[i]) : xb[i] * xb[i];
}

float super_block_sigma2(const float* x) {
  float s = 0;
  for (int i = 0; i < QK_K; ++i) s += x[i] * x[i];
  return 2 * s / QK_K;
}

void qref_iq3_xxs(const float* x, void* vy, int64_t n, const float* imp) {
  const Iq3Lattice& t = lattice_xxs();
  auto* y = static_cast<block_iq3_xxs_u*>(vy);
  for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
    const float* ib_imp = imp ? imp + i * QK_K : nullptr;
    const float sigma2 = super_block_sigma2(x);
    SubBlock sb[8];
    float w[32];
    for (int ib = 0; ib < 8; ++ib) {
      sub_block_weights(x + 32 * ib, ib_imp ? ib_imp + 32 * ib : nullptr, sigma2, w);
      sb[ib] = search_sub_block(t, x + 32 * ib, w, true, 15);
      // Stored values are grid / 4 in units of the scale (d (0.5 + ls) 0.5 grid = d (2ls+1) grid/4).
      error_terms(sb[ib], kIq3xxsGrid, 0.25f, x + 32 * ib, w);
    }
    int ls[8];
    block_iq3_xxs out{};
    out.d = choose_scales(sb, ls);
    for (int ib = 0; ib < 8; ++ib) {
      uint32_t aux = static_cast<uint32_t>(ls[ib]) << 28;
      for (int k = 0; k < 4; ++k) aux |= static_cast<uint32_t>(sb[ib].sign[k] & 127) << (7 * k);
      for (int k = 0; k < 8; ++k) out.qs[8 * ib + k] = static_cast<uint8_t>(sb[ib].index[k]);
      std::memcpy(out.qs + QK_K / 4 + 4 * ib, &aux, 4);
    }
    std::memcpy(&y[i], &out, sizeof(out));
  }
}

void qref_iq3_s(const float* x, void* vy, int64_t n, const float* imp) {
  const Iq3Lattice& t = lattice_s();
  auto* y = static_cast<block_iq3_s_u*>(vy);
  for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K) {
    const float* ib_imp = imp ? imp + i * QK_K : nullptr;
    const float sigma2 = super_block_sigma2(x);
    SubBlock sb[8];
    float w[32];
    for (int ib = 0; ib < 8; ++ib) {
      sub_block_weights(x + 32 * ib, ib_imp ? ib_imp + 32 * ib : nullptr, sigma2, w);
      sb[ib] = search_sub_block(t, x + 32 * ib, w, false, 9);
      error_terms(sb[ib], kIq3sGrid, 1.0f, x + 32 * ib, w);
    }
    int ls[8];
    block_iq3_s out{};
    out.d = choose_scales(sb, ls);
    for (int ib = 0; ib < 8; ++ib) {
      for (int k = 0; k < 8; ++k) {
        out.qs[8 * ib + k] = static_cast<uint8_t>(sb[ib].index[k] & 255);
        out.qh[ib] = static_cast<uint8_t>(out.qh[ib] | ((sb[ib].index[k] >> 8) << k));
      }
      for (int k = 0; k < 4; ++k) out.signs[4 * ib + k] = sb[ib].sign[k];
      out.scales[ib / 2] = static_cast<uint8_t>(out.scales[ib / 2] | (ls[ib] << (4 * (ib % 2))));
    }
    std::memcpy(&y[i], &out, sizeof(out));
  }
}

}  // namespace iq3_ref
}  // namespace

void fill_kernel_table_scalar_iq3(KernelTable& t) {
  t.dequantize[static_cast<int>(Type::IQ3_XXS)] = iq3_ref::dequant_iq3_xxs;
  t.dequantize[static_cast<int>(Type::IQ3_S)] = iq3_ref::dequant_iq3_s;
  t.vec_dot[static_cast<int>(Type::IQ3_XXS)] = iq3_ref::dot_iq3_xxs;
  t.vec_dot[static_cast<int>(Type::IQ3_S)] = iq3_ref::dot_iq3_s;
}

RefQuantizeFn ref_weight_quantizer_iq3(Type t) {
  switch (t) {
    case Type::IQ3_XXS: return iq3_ref::qref_iq3_xxs;
    case Type::IQ3_S: return iq3_ref::qref_iq3_s;
    default: return nullptr;
  }
}

}  // namespace les
