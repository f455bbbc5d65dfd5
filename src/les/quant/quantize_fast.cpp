// The fast weight quantizer on portable lanes (16 floats in plain C++: the scalar table's entries,
// and what the AVX versions are tested against bit for bit), plus the baseline-compiled helpers
// every ISA's copy calls: fp16 scale fitting and the block packers.
//
// Each lane operation below is specified as exactly what the AVX instructions compute (IEEE
// single precision, round to nearest even; min/max and compare semantics of minps/maxps/cmpps,
// NaN included), so that the one algorithm of quantize_fast_impl.h gives the same bits here and
// there. This file and the AVX ones are compiled with -ffp-contract=off (CMakeLists.txt): a
// product the algorithm rounds must never be fused into an FMA behind its back.

#include "les/quant/quantize_fast.h"

#include <cmath>
#include <cstring>

#include "les/quant/kernels_internal.h"
#include "les/quant/quant_common.h"

namespace les {
namespace fastq {

half_bits fp16_scale_for(float v, int k) { return fit_scale(v, k); }
half_bits fp16_saturating(float v) { return f2h_sat(v); }
float fp16_value(half_bits h) { return fp16_to_f32(h); }

namespace {

// Levels as ints: L[i] + offset for n elements.
inline void to_ints(const float* L, int offset, int n, int* U) {
  for (int i = 0; i < n; ++i) U[i] = static_cast<int>(L[i]) + offset;
}

}  // namespace

void pack_q2_K(const float* L, const int* sc, const int* mn, half_bits d, half_bits dmin, uint8_t* vy) {
  auto* y = reinterpret_cast<block_q2_K_u*>(vy);
  int U[QK_K];
  to_ints(L, 0, QK_K, U);
  for (int g = 0; g < 16; ++g) y->scales[g] = static_cast<uint8_t>(sc[g] | (mn[g] << 4));
  pack_2bit(U, y->qs);
  y->d = d;
  y->dmin = dmin;
}

void pack_q3_K(const float* L, const int* sc, half_bits d, uint8_t* vy) {
  auto* y = reinterpret_cast<block_q3_K_u*>(vy);
  int U[QK_K];
  to_ints(L, 4, QK_K, U);  // 0..7; bit 2 goes to hmask
  pack_scales_q3k(sc, y->scales);
  std::memset(y->hmask, 0, sizeof(y->hmask));
  for (int e = 0; e < QK_K; ++e) {
    if (U[e] & 4) y->hmask[e % 32] |= static_cast<uint8_t>(1 << (e / 32));
  }
  pack_2bit(U, y->qs);
  y->d = d;
}

namespace {

template <bool kQ5, class Block>
void pack_q45_K(const float* L, const int* sc, const int* mn, half_bits d, half_bits dmin, Block* y) {
  int U[QK_K];
  to_ints(L, 0, QK_K, U);
  uint8_t sc8[8], mn8[8];
  for (int g = 0; g < 8; ++g) {
    sc8[g] = static_cast<uint8_t>(sc[g]);
    mn8[g] = static_cast<uint8_t>(mn[g]);
  }
  pack_scale_min_k4(sc8, mn8, y->scales);
  if constexpr (kQ5) std::memset(y->qh, 0, sizeof(y->qh));
  for (int c = 0; c < 4; ++c) {
    for (int l = 0; l < 32; ++l) {
      const int a = U[64 * c + l], b = U[64 * c + 32 + l];
      y->qs[32 * c + l] = static_cast<uint8_t>((a & 0x0f) | ((b & 0x0f) << 4));
      if constexpr (kQ5) y->qh[l] |= static_cast<uint8_t>(((a >> 4) << (2 * c)) | ((b >> 4) << (2 * c + 1)));
    }
  }
  y->d = d;
  y->dmin = dmin;
}

}  // namespace

void pack_q4_K(const float* L, const int* sc, const int* mn, half_bits d, half_bits dmin, uint8_t* y) {
  pack_q45_K<false>(L, sc, mn, d, dmin, reinterpret_cast<block_q4_K_u*>(y));
}

void pack_q5_K(const float* L, const int* sc, const int* mn, half_bits d, half_bits dmin, uint8_t* y) {
  pack_q45_K<true>(L, sc, mn, d, dmin, reinterpret_cast<block_q5_K_u*>(y));
}

void pack_q6_K(const float* L, const int* sc, half_bits d, uint8_t* vy) {
  auto* y = reinterpret_cast<block_q6_K_u*>(vy);
  int U[QK_K];
  to_ints(L, 32, QK_K, U);  // 0..63
  for (int g = 0; g < 16; ++g) y->scales[g] = static_cast<int8_t>(sc[g]);
  for (int h = 0; h < 2; ++h) {
    for (int l = 0; l < 32; ++l) {
      const int* u = U + 128 * h + l;  // u[32k]: element 128h + 32k + l
      y->ql[64 * h + l] = static_cast<uint8_t>((u[0] & 0x0f) | ((u[64] & 0x0f) << 4));
      y->ql[64 * h + 32 + l] = static_cast<uint8_t>((u[32] & 0x0f) | ((u[96] & 0x0f) << 4));
      y->qh[32 * h + l] =
          static_cast<uint8_t>((u[0] >> 4) | ((u[32] >> 4) << 2) | ((u[64] >> 4) << 4) | ((u[96] >> 4) << 6));
    }
  }
  y->d = d;
}

void pack_iq4_xs(const float* C, const int* sc, half_bits d, uint8_t* vy) {
  auto* y = reinterpret_cast<block_iq4_xs_u*>(vy);
  int U[QK_K];
  to_ints(C, 0, QK_K, U);
  std::memset(y->scales_l, 0, sizeof(y->scales_l));
  uint16_t sh = 0;
  for (int g = 0; g < 8; ++g) {
    const int ls = sc[g] + 32;  // 0..63
    y->scales_l[g / 2] |= static_cast<uint8_t>((ls & 0x0f) << (4 * (g % 2)));
    sh = static_cast<uint16_t>(sh | ((ls >> 4) << (2 * g)));
  }
  y->scales_h = sh;
  for (int g = 0; g < 8; ++g) pack_iq4_32(U + 32 * g, y->qs + 16 * g);
  y->d = d;
}

void pack_q4_0(const float* L, half_bits d, uint8_t* vy) {
  auto* y = reinterpret_cast<block_q4_0_u*>(vy);
  int U[32];
  to_ints(L, 8, 32, U);
  for (int j = 0; j < 16; ++j) y->qs[j] = static_cast<uint8_t>(U[j] | (U[j + 16] << 4));
  y->d = d;
}

void pack_q5_0(const float* L, half_bits d, uint8_t* vy) {
  auto* y = reinterpret_cast<block_q5_0_u*>(vy);
  int U[32];
  to_ints(L, 16, 32, U);
  pack_q5(U, y->qs, y->qh);
  y->d = d;
}

void pack_q8_0(const float* L, half_bits d, uint8_t* vy) {
  auto* y = reinterpret_cast<block_q8_0_u*>(vy);
  for (int j = 0; j < 32; ++j) y->qs[j] = static_cast<int8_t>(L[j]);
  y->d = d;
}

void pack_iq4_nl(const float* C, half_bits d, uint8_t* vy) {
  auto* y = reinterpret_cast<block_iq4_nl_u*>(vy);
  int U[32];
  to_ints(C, 0, 32, U);
  pack_iq4_32(U, y->qs);
  y->d = d;
}

}  // namespace fastq

namespace {

// 16 lanes in plain C++. Each operation is the lane-wise IEEE operation of the corresponding
// AVX instruction.
struct LanesPortable {
  struct F {
    float v[16];
  };
  struct M {
    bool b[16];
  };

  static F load(const float* p) {
    F r;
    std::memcpy(r.v, p, sizeof r.v);
    return r;
  }
  static void store(float* p, const F& a) { std::memcpy(p, a.v, sizeof a.v); }
  static F set1(float s) {
    F r;
    for (float& v : r.v) v = s;
    return r;
  }
  template <class Op>
  static F map2(const F& a, const F& b, Op op) {
    F r;
    for (int i = 0; i < 16; ++i) r.v[i] = op(a.v[i], b.v[i]);
    return r;
  }
  static F add(const F& a, const F& b) { return map2(a, b, [](float x, float y) { return x + y; }); }
  static F sub(const F& a, const F& b) { return map2(a, b, [](float x, float y) { return x - y; }); }
  static F mul(const F& a, const F& b) { return map2(a, b, [](float x, float y) { return x * y; }); }
  static F div(const F& a, const F& b) { return map2(a, b, [](float x, float y) { return x / y; }); }
  // minps / maxps: the second operand unless the comparison holds (so a NaN first operand gives b).
  static F min(const F& a, const F& b) { return map2(a, b, [](float x, float y) { return x < y ? x : y; }); }
  static F max(const F& a, const F& b) { return map2(a, b, [](float x, float y) { return x > y ? x : y; }); }
  static F fma(const F& a, const F& b, const F& c) {
    F r;
    for (int i = 0; i < 16; ++i) r.v[i] = std::fma(a.v[i], b.v[i], c.v[i]);
    return r;
  }
  static F abs(const F& a) {
    F r;
    for (int i = 0; i < 16; ++i) r.v[i] = std::fabs(a.v[i]);
    return r;
  }
  static F sqrt(const F& a) {
    F r;
    for (int i = 0; i < 16; ++i) r.v[i] = std::sqrt(a.v[i]);
    return r;
  }
  // Round to nearest, ties to even, keeping the sign of a zero result (roundps / vrndscaleps).
  static float round1(float x) {
    const float ax = std::fabs(x);
    if (!(ax < 8388608.0f)) return x;  // already integral, or NaN
    return std::copysign((ax + 8388608.0f) - 8388608.0f, x);
  }
  static F round(const F& a) {
    F r;
    for (int i = 0; i < 16; ++i) r.v[i] = round1(a.v[i]);
    return r;
  }
  // min(max(round(v), lo), hi): a NaN gives lo.
  static F round_clamp(const F& a, const F& lo, const F& hi) { return min(max(round(a), lo), hi); }
  static M cmp(const F& a, const F& b, bool (*op)(float, float)) {
    M m;
    for (int i = 0; i < 16; ++i) m.b[i] = op(a.v[i], b.v[i]);
    return m;
  }
  static M gt(const F& a, const F& b) { return cmp(a, b, [](float x, float y) { return x > y; }); }
  static M lt(const F& a, const F& b) { return cmp(a, b, [](float x, float y) { return x < y; }); }
  static M eq(const F& a, const F& b) { return cmp(a, b, [](float x, float y) { return x == y; }); }
  static M none() {
    M m;
    for (bool& b : m.b) b = false;
    return m;
  }
  static M and_(const M& a, const M& b) {
    M m;
    for (int i = 0; i < 16; ++i) m.b[i] = a.b[i] && b.b[i];
    return m;
  }
  static M or_(const M& a, const M& b) {
    M m;
    for (int i = 0; i < 16; ++i) m.b[i] = a.b[i] || b.b[i];
    return m;
  }
  static M not_(const M& a) {
    M m;
    for (int i = 0; i < 16; ++i) m.b[i] = !a.b[i];
    return m;
  }
  // m ? b : a
  static F select(const M& m, const F& a, const F& b) {
    F r;
    for (int i = 0; i < 16; ++i) r.v[i] = m.b[i] ? b.v[i] : a.v[i];
    return r;
  }
  // table[idx] for idx holding integers 0..15.
  static F lookup16(const float* table, const F& idx) {
    F r;
    for (int i = 0; i < 16; ++i) r.v[i] = table[static_cast<int>(idx.v[i]) & 15];
    return r;
  }
  // out[i].v[j] = src[j * stride + i] for i, j < 16.
  static void load_transposed(const float* src, int stride, F* out) {
    for (int j = 0; j < 16; ++j) {
      for (int i = 0; i < 16; ++i) out[i].v[j] = src[j * stride + i];
    }
  }
  // dst[j * stride + i] = in[i].v[j] for i, j < 16.
  static void store_transposed(const F* in, float* dst, int stride) {
    for (int j = 0; j < 16; ++j) {
      for (int i = 0; i < 16; ++i) dst[j * stride + i] = in[i].v[j];
    }
  }
};

}  // namespace
}  // namespace les

#include "les/quant/quantize_fast_impl.h"

namespace les {

void fill_fast_quantizers_scalar(KernelTable& t) {
  for (int id = 0; id < 32; ++id) {
    const auto ti = type_info(static_cast<uint32_t>(id));
    if (ti && ti->weight_type) t.quantize_fast[id] = ref_weight_quantizer(static_cast<Type>(id));
  }
  fastq::FastQuantizers<LanesPortable>::fill(t);
}

}  // namespace les
