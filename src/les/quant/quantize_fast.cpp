// The fast weight quantizer on portable lanes (16 floats in plain C++: the scalar table's entries,
// and what the AVX versions are tested against bit for bit), plus the baseline-compiled fp16
// helpers every ISA's copy calls.
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
  static F fms(const F& a, const F& b, const F& c) {  // a * b - c, rounded once
    F r;
    for (int i = 0; i < 16; ++i) r.v[i] = std::fma(a.v[i], b.v[i], -c.v[i]);
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
  template <class Op>
  static M cmp(const F& a, const F& b, Op op) {
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
  // table[floor(idx)] for idx in [0, 32).
  static F lookup32(const float* table, const F& idx) {
    F r;
    for (int i = 0; i < 16; ++i) r.v[i] = table[static_cast<int>(idx.v[i]) & 31];
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

void fastq::iq4_codes_portable(const float* v, float* codes) {
  LanesPortable::store(codes, fastq::FastQuant<LanesPortable>::nearest_code(LanesPortable::load(v)));
}

void fill_fast_quantizers_scalar(KernelTable& t) {
  for (int id = 0; id < kTypeSlots; ++id) {
    const auto ti = type_info(static_cast<uint32_t>(id));
    if (ti && ti->weight_type) t.quantize_fast[id] = ref_weight_quantizer(static_cast<Type>(id));
  }
  fastq::FastQuantizers<LanesPortable>::fill(t);
}

}  // namespace les
