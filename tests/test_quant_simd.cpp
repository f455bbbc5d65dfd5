// The kernels of every SIMD ISA this CPU has (x86-64: avx2, avxvnni, avx512; aarch64: neon,
// dotprod, i8mm; the others skip and say so)
// against the scalar table and against an independent double-precision reference written here
// (dequantize-then-dot from the block layouts). Dot products must agree within float rounding;
// activation quantizers must be bit-identical to the scalar ones; a table's batched product
// (gemm) must give its vec_dot's results bit for bit, for any number of rows and tokens.

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <ostream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "les/quant/blocks.h"
#include "les/quant/kernels.h"
#include "les/quant/kernels_internal.h"
#include "les/quant/types.h"
#include "les/util/fp16.h"
#include "skip.h"

namespace les {

// gtest prints test parameters through this (by name rather than as bytes).
void PrintTo(Isa isa, std::ostream* os) { *os << isa_name(isa); }

namespace {

constexpr Type kDotTypes[] = {Type::Q4_K, Type::Q5_K,   Type::Q6_K,   Type::Q3_K, Type::Q2_K,
                              Type::Q8_0, Type::Q4_0,   Type::Q5_0,   Type::Q4_1, Type::Q5_1,
                              Type::IQ4_NL, Type::IQ4_XS, Type::F16, Type::BF16, Type::F32};
constexpr Type kActTypes[] = {Type::Q8_K, Type::Q8_0, Type::Q8_1, Type::F16, Type::BF16};

int tid(Type t) { return static_cast<int>(t); }

class QuantSimd : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (!isa_supported(GetParam())) LES_SKIP_CPU(isa_name(GetParam()) << ": not supported by this CPU");
    scalar_ = kernel_table(Isa::scalar);
    simd_ = kernel_table(GetParam());
    if (!simd_) LES_SKIP_CPU(isa_name(GetParam()) << ": kernels not compiled for this architecture");
    ASSERT_NE(scalar_, nullptr);
  }
  const KernelTable* scalar_ = nullptr;
  const KernelTable* simd_ = nullptr;
};

// ---------------------------------------------------------------------------------------------
// Byte buffers at a chosen misalignment.

struct Buf {
  std::vector<uint8_t> mem;
  size_t off = 0;
  Buf(size_t bytes, size_t offset) : mem(bytes + 64, 0xA5), off(offset) {}
  uint8_t* data() {
    // 32-byte aligned base inside mem, then the requested offset.
    const auto base = reinterpret_cast<uintptr_t>(mem.data());
    return mem.data() + (32 - base % 32) % 32 + off;
  }
};

// A buffer between two inaccessible pages, to catch reads or writes outside a row: the bytes
// handed out start right after the leading guard page or end right before the trailing one.
class Guarded {
 public:
  explicit Guarded(size_t bytes) {
    page_ = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    data_pages_ = (bytes + page_ - 1) / page_;
    len_ = (data_pages_ + 2) * page_;
    void* m = mmap(nullptr, len_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) return;
    base_ = static_cast<uint8_t*>(m);
    mprotect(base_, page_, PROT_NONE);
    mprotect(base_ + (data_pages_ + 1) * page_, page_, PROT_NONE);
  }
  ~Guarded() {
    if (base_) munmap(base_, len_);
  }
  Guarded(const Guarded&) = delete;
  Guarded& operator=(const Guarded&) = delete;
  bool ok() const { return base_ != nullptr; }
  uint8_t* at_start() { return base_ + page_; }
  uint8_t* at_end(size_t bytes) { return base_ + (data_pages_ + 1) * page_ - bytes; }

 private:
  uint8_t* base_ = nullptr;
  size_t page_ = 0, data_pages_ = 0, len_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Random data.

struct Gen {
  std::mt19937_64 rng;
  explicit Gen(uint64_t seed) : rng(seed) {}
  uint8_t byte() { return static_cast<uint8_t>(rng() & 0xff); }
  float uni(float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(rng); }
  int irange(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); }
  half_bits half(float lo, float hi) { return f32_to_fp16(uni(lo, hi)); }
};

void put16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }
void put_f32(uint8_t* p, float v) { std::memcpy(p, &v, 4); }
uint16_t get16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
float get_f32(const uint8_t* p) {
  float v;
  std::memcpy(&v, p, 4);
  return v;
}
float h(const uint8_t* p) { return fp16_to_f32(get16(p)); }

enum class Fill { random, all_max, zero_scales, huge_scales, tiny_scales };

// Fills a weight row of type t with n elements at p: random bytes, then every half-precision
// field replaced by a finite value (random; 0 for zero_scales; the largest halves, +-65504 and
// nearby, for huge_scales; subnormal halves for tiny_scales).
void gen_weights(Gen& g, Type t, uint8_t* p, int64_t n, Fill fill) {
  const size_t bytes = row_bytes(t, n);
  for (size_t i = 0; i < bytes; ++i) p[i] = fill == Fill::all_max ? 0xff : g.byte();
  auto d = [&](float lo, float hi) -> half_bits {
    if (fill == Fill::zero_scales) return 0;
    const half_bits sign = (lo < 0 && (g.byte() & 1)) ? 0x8000 : 0;
    if (fill == Fill::huge_scales) return static_cast<half_bits>(sign | (0x7bff - (g.byte() & 0x0f)));
    if (fill == Fill::tiny_scales) return static_cast<half_bits>(sign | (1 + (g.byte() & 0x3ff)));
    return g.half(lo, hi);
  };
  const int64_t nb = n / block_size(t);
  const size_t bb = info(t).block_bytes;
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t* x = p + b * bb;
    switch (t) {
      case Type::F32:
        put_f32(x, g.uni(-2.0f, 2.0f));
        break;
      case Type::F16:
        put16(x, g.half(-2.0f, 2.0f));
        break;
      case Type::BF16:
        put16(x, f32_to_bf16(g.uni(-2.0f, 2.0f)));
        break;
      case Type::Q4_0: put16(x + offsetof(block_q4_0, d), d(-0.1f, 0.1f)); break;
      case Type::Q5_0: put16(x + offsetof(block_q5_0, d), d(-0.1f, 0.1f)); break;
      case Type::Q8_0:
        put16(x + offsetof(block_q8_0, d), d(-0.1f, 0.1f));
        // all_max: the extremes 127 and -128 (random bytes include -128 too)
        if (fill == Fill::all_max) {
          for (int j = 0; j < QK8_0; ++j) x[offsetof(block_q8_0, qs) + j] = (j % 3) ? 0x7f : 0x80;
        }
        break;
      case Type::Q4_1:
        put16(x + offsetof(block_q4_1, d), d(0.0f, 0.1f));
        put16(x + offsetof(block_q4_1, m), d(-1.0f, 1.0f));
        break;
      case Type::Q5_1:
        put16(x + offsetof(block_q5_1, d), d(0.0f, 0.1f));
        put16(x + offsetof(block_q5_1, m), d(-1.0f, 1.0f));
        break;
      case Type::Q2_K:
        put16(x + offsetof(block_q2_K, d), d(0.0f, 0.02f));
        put16(x + offsetof(block_q2_K, dmin), d(0.0f, 0.02f));
        break;
      case Type::Q3_K: put16(x + offsetof(block_q3_K, d), d(-0.02f, 0.02f)); break;
      case Type::Q4_K:
        put16(x + offsetof(block_q4_K, d), d(0.0f, 0.02f));
        put16(x + offsetof(block_q4_K, dmin), d(0.0f, 0.02f));
        break;
      case Type::Q5_K:
        put16(x + offsetof(block_q5_K, d), d(0.0f, 0.02f));
        put16(x + offsetof(block_q5_K, dmin), d(0.0f, 0.02f));
        break;
      case Type::Q6_K: put16(x + offsetof(block_q6_K, d), d(-0.02f, 0.02f)); break;
      case Type::IQ4_NL:
        put16(x + offsetof(block_iq4_nl, d), d(-0.01f, 0.01f));
        // all_max: codes 0 and 15, the two ends of the codebook (-127 and 113)
        if (fill == Fill::all_max) {
          for (int j = 0; j < 16; ++j) x[offsetof(block_iq4_nl, qs) + j] = (j % 2) ? 0x00 : 0xf0;
        }
        break;
      case Type::IQ4_XS:
        put16(x + offsetof(block_iq4_xs, d), d(-0.001f, 0.001f));
        if (fill == Fill::all_max) {  // scales ls = 0 (-32, the largest magnitude), codes 0 and 15
          put16(x + offsetof(block_iq4_xs, scales_h), 0);
          std::memset(x + offsetof(block_iq4_xs, scales_l), 0, 4);
          for (int j = 0; j < 128; ++j) x[offsetof(block_iq4_xs, qs) + j] = (j % 3) ? 0x00 : 0xf0;
        }
        break;
      default: FAIL() << "no generator for " << type_name(t);
    }
    if (fill == Fill::zero_scales) {  // sub-block scales too
      if (t == Type::Q2_K) std::memset(x + offsetof(block_q2_K, scales), 0, 16);
      if (t == Type::Q3_K) std::memset(x + offsetof(block_q3_K, scales), 0, 12);
      if (t == Type::Q4_K) std::memset(x + offsetof(block_q4_K, scales), 0, 12);
      if (t == Type::Q5_K) std::memset(x + offsetof(block_q5_K, scales), 0, 12);
      if (t == Type::Q6_K) std::memset(x + offsetof(block_q6_K, scales), 0, 16);
      if (t == Type::IQ4_XS) {  // ls = 32 everywhere: sub-block scales 0
        put16(x + offsetof(block_iq4_xs, scales_h), 0xaaaa);
        std::memset(x + offsetof(block_iq4_xs, scales_l), 0, 4);
      }
    }
  }
}

enum class ActFill { random, min_int8, max_int8 };

// An activation row of type at (an act_type) with n elements: random int8 quants (or all -128 /
// all 127), consistent block sums.
void gen_acts(Gen& g, Type at, uint8_t* p, int64_t n, ActFill fill) {
  auto q8 = [&]() -> int8_t {
    if (fill == ActFill::min_int8) return -128;
    if (fill == ActFill::max_int8) return 127;
    return static_cast<int8_t>(g.byte());
  };
  const int64_t nb = n / block_size(at);
  const size_t bb = info(at).block_bytes;
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t* y = p + b * bb;
    switch (at) {
      case Type::F32: put_f32(y, g.uni(-2.0f, 2.0f)); break;
      case Type::F16: put16(y, g.half(-2.0f, 2.0f)); break;
      case Type::BF16: put16(y, f32_to_bf16(g.uni(-2.0f, 2.0f))); break;
      case Type::Q8_0: {
        put16(y + offsetof(block_q8_0, d), g.half(-0.05f, 0.05f));
        for (int j = 0; j < 32; ++j) y[offsetof(block_q8_0, qs) + j] = static_cast<uint8_t>(q8());
        break;
      }
      case Type::Q8_1: {
        const float d = g.uni(-0.05f, 0.05f);
        put16(y + offsetof(block_q8_1, d), f32_to_fp16(d));
        int sum = 0;
        for (int j = 0; j < 32; ++j) {
          const int8_t q = q8();
          y[offsetof(block_q8_1, qs) + j] = static_cast<uint8_t>(q);
          sum += q;
        }
        put16(y + offsetof(block_q8_1, s), f32_to_fp16(d * static_cast<float>(sum)));
        break;
      }
      case Type::Q8_K: {
        put_f32(y + offsetof(block_q8_K, d), g.uni(-0.05f, 0.05f));
        for (int s = 0; s < 16; ++s) {
          int sum = 0;
          for (int j = 0; j < 16; ++j) {
            const int8_t q = q8();
            y[offsetof(block_q8_K, qs) + 16 * s + j] = static_cast<uint8_t>(q);
            sum += q;
          }
          const int16_t bs = static_cast<int16_t>(sum);
          std::memcpy(y + offsetof(block_q8_K, bsums) + 2 * s, &bs, 2);
        }
        break;
      }
      default: FAIL() << "no generator for " << type_name(at);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Independent reference: weights decoded into a scaled part and an offset part per element
// (w = scaled + offset), activations into d*q; for Q4_1/Q5_1 the offset part pairs with the
// activation block's stored s (as the kernels define it). Returns the dot in double and the sum
// of the magnitudes of all product terms (the scale of the float rounding error).

struct RefDot {
  double value = 0;
  double mag = 0;
};

int q3k_scale(const uint8_t* sc, int j) {  // 6-bit scale j of Q3_K, minus 32
  const int lo = j < 8 ? (sc[j] & 0x0f) : (sc[j - 8] >> 4);
  const int hi = (sc[8 + j % 4] >> (2 * (j / 4))) & 3;
  return (lo | (hi << 4)) - 32;
}
void k4_scale_min(const uint8_t* q, int j, int& sc, int& m) {
  if (j < 4) {
    sc = q[j] & 63;
    m = q[j + 4] & 63;
  } else {
    sc = (q[j + 4] & 0x0f) | ((q[j - 4] >> 6) << 4);
    m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// The IQ4_NL / IQ4_XS codebook (a constant of the format).
constexpr int kIq4Book[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};

// Decodes block b of a weight row into scaled[] and offset[] (block_size elements each).
void decode_weight_block(Type t, const uint8_t* x, double* sc, double* of) {
  switch (t) {
    case Type::F32: sc[0] = get_f32(x); of[0] = 0; return;
    case Type::F16: sc[0] = h(x); of[0] = 0; return;
    case Type::BF16: sc[0] = bf16_to_f32(get16(x)); of[0] = 0; return;
    case Type::Q8_0: {
      const double d = h(x);
      for (int j = 0; j < 32; ++j) sc[j] = d * static_cast<int8_t>(x[2 + j]), of[j] = 0;
      return;
    }
    case Type::Q4_0:
    case Type::Q4_1: {
      const bool one = t == Type::Q4_1;
      const double d = h(x), m = one ? h(x + 2) : 0;
      const uint8_t* qs = x + (one ? 4 : 2);
      for (int j = 0; j < 16; ++j) {
        sc[j] = d * ((qs[j] & 0x0f) - (one ? 0 : 8));
        sc[j + 16] = d * ((qs[j] >> 4) - (one ? 0 : 8));
        of[j] = of[j + 16] = m;
      }
      return;
    }
    case Type::Q5_0:
    case Type::Q5_1: {
      const bool one = t == Type::Q5_1;
      const double d = h(x), m = one ? h(x + 2) : 0;
      const uint8_t* qhp = x + (one ? 4 : 2);
      const uint32_t qh = qhp[0] | (qhp[1] << 8) | (qhp[2] << 16) | (static_cast<uint32_t>(qhp[3]) << 24);
      const uint8_t* qs = qhp + 4;
      for (int j = 0; j < 16; ++j) {
        const int v0 = (qs[j] & 0x0f) | (((qh >> j) & 1) << 4);
        const int v1 = (qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
        sc[j] = d * (v0 - (one ? 0 : 16));
        sc[j + 16] = d * (v1 - (one ? 0 : 16));
        of[j] = of[j + 16] = m;
      }
      return;
    }
    case Type::Q2_K: {
      const uint8_t* scales = x;
      const uint8_t* qs = x + 16;
      const double d = h(x + 80), dmin = h(x + 82);
      for (int e = 0; e < 256; ++e) {
        const int half = e / 128, k = (e % 128) / 32, l = e % 32;
        const int q = (qs[32 * half + l] >> (2 * k)) & 3;
        sc[e] = d * (scales[e / 16] & 0x0f) * q;
        of[e] = -dmin * (scales[e / 16] >> 4);
      }
      return;
    }
    case Type::Q3_K: {
      const uint8_t* hm = x;
      const uint8_t* qs = x + 32;
      const uint8_t* scales = x + 96;
      const double d = h(x + 108);
      for (int e = 0; e < 256; ++e) {
        const int half = e / 128, k = (e % 128) / 32, l = e % 32;
        int q = (qs[32 * half + l] >> (2 * k)) & 3;
        if (!((hm[l] >> (e / 32)) & 1)) q -= 4;
        sc[e] = d * q3k_scale(scales, e / 16) * q;
        of[e] = 0;
      }
      return;
    }
    case Type::Q4_K:
    case Type::Q5_K: {
      const bool five = t == Type::Q5_K;
      const double d = h(x), dmin = h(x + 2);
      const uint8_t* scales = x + 4;
      const uint8_t* qh = x + 16;
      const uint8_t* qs = x + (five ? 48 : 16);
      for (int e = 0; e < 256; ++e) {
        const int c = e / 64, hi = (e % 64) / 32, l = e % 32;
        int q = hi ? (qs[32 * c + l] >> 4) : (qs[32 * c + l] & 0x0f);
        if (five && ((qh[l] >> (2 * c + hi)) & 1)) q += 16;
        int s, m;
        k4_scale_min(scales, e / 32, s, m);
        sc[e] = d * s * q;
        of[e] = -dmin * m;
      }
      return;
    }
    case Type::Q6_K: {
      const uint8_t* ql = x;
      const uint8_t* qh = x + 128;
      const auto* scales = reinterpret_cast<const int8_t*>(x + 192);
      const double d = h(x + 208);
      for (int e = 0; e < 256; ++e) {
        const int half = e / 128, k = (e % 128) / 32, l = e % 32;
        const uint8_t lb = ql[64 * half + 32 * (k & 1) + l];
        const int lo = k < 2 ? (lb & 0x0f) : (lb >> 4);
        const int hb = (qh[32 * half + l] >> (2 * k)) & 3;
        sc[e] = d * scales[e / 16] * ((lo | (hb << 4)) - 32);
        of[e] = 0;
      }
      return;
    }
    case Type::IQ4_NL: {
      const double d = h(x);
      for (int j = 0; j < 16; ++j) {
        sc[j] = d * kIq4Book[x[2 + j] & 0x0f];
        sc[j + 16] = d * kIq4Book[x[2 + j] >> 4];
        of[j] = of[j + 16] = 0;
      }
      return;
    }
    case Type::IQ4_XS: {
      const double d = h(x);
      const uint16_t sh = get16(x + 2);
      const uint8_t* sl = x + 4;
      const uint8_t* qs = x + 8;
      for (int ib = 0; ib < 8; ++ib) {
        const int ls = ((sl[ib / 2] >> (4 * (ib % 2))) & 0x0f) | (((sh >> (2 * ib)) & 3) << 4);
        for (int j = 0; j < 16; ++j) {
          sc[32 * ib + j] = d * (ls - 32) * kIq4Book[qs[16 * ib + j] & 0x0f];
          sc[32 * ib + j + 16] = d * (ls - 32) * kIq4Book[qs[16 * ib + j] >> 4];
          of[32 * ib + j] = of[32 * ib + j + 16] = 0;
        }
      }
      return;
    }
    default: ADD_FAILURE() << "no decoder for " << type_name(t);
  }
}

RefDot ref_dot(Type wt, const uint8_t* w, const uint8_t* a, int64_t n) {
  const Type at = act_type(wt);
  const int64_t bs = block_size(wt);
  const size_t wbb = info(wt).block_bytes;
  const size_t abb = info(at).block_bytes;
  const int64_t abs_ = block_size(at);
  std::vector<double> sc(bs), of(bs), av(n);
  // activations
  for (int64_t b = 0; b < n / abs_; ++b) {
    const uint8_t* y = a + b * abb;
    switch (at) {
      case Type::F32: av[b] = get_f32(y); break;
      case Type::F16: av[b] = h(y); break;
      case Type::BF16: av[b] = bf16_to_f32(get16(y)); break;
      case Type::Q8_0:
        for (int j = 0; j < 32; ++j) av[b * 32 + j] = static_cast<double>(h(y)) * static_cast<int8_t>(y[2 + j]);
        break;
      case Type::Q8_1:
        for (int j = 0; j < 32; ++j) av[b * 32 + j] = static_cast<double>(h(y)) * static_cast<int8_t>(y[4 + j]);
        break;
      case Type::Q8_K:
        for (int j = 0; j < 256; ++j) av[b * 256 + j] = static_cast<double>(get_f32(y)) * static_cast<int8_t>(y[4 + j]);
        break;
      default: ADD_FAILURE();
    }
  }
  RefDot r;
  const bool offset_via_s = at == Type::Q8_1;
  for (int64_t b = 0; b < n / bs; ++b) {
    decode_weight_block(wt, w + b * wbb, sc.data(), of.data());
    for (int64_t j = 0; j < bs; ++j) {
      const double t1 = sc[j] * av[b * bs + j];
      r.value += t1;
      r.mag += std::fabs(t1);
      if (!offset_via_s) {
        const double t2 = of[j] * av[b * bs + j];
        r.value += t2;
        r.mag += std::fabs(t2);
      }
    }
    if (offset_via_s) {  // m * s of the activation block
      const double t2 = of[0] * h(a + b * abb + offsetof(block_q8_1, s));
      r.value += t2;
      r.mag += std::fabs(t2);
    }
  }
  return r;
}

// Float rounding allowance of a dot of n elements whose terms have magnitude sum mag.
double tolerance(Type wt, int64_t n, double mag) {
  double rel = 1e-5;
  if (block_size(wt) == 1) rel = std::max(rel, static_cast<double>(n / 32 + 16) * std::ldexp(1.0, -24));
  return rel * mag + 1e-30;
}

int64_t unit(Type t) { return block_size(t) == 1 ? 1 : block_size(t); }

// One dot comparison: a SIMD table vs the reference here and vs the scalar table.
void check_dot(const KernelTable* scalar, const KernelTable* simd, Type wt, const uint8_t* w, const uint8_t* a,
               int64_t n, const std::string& what) {
  const RefDot r = ref_dot(wt, w, a, n);
  const double tol = tolerance(wt, n, r.mag);
  const float v = simd->vec_dot[tid(wt)](n, w, a);
  EXPECT_NEAR(v, r.value, tol) << type_name(wt) << " " << isa_name(simd->isa) << " vs reference, n=" << n << " " << what;
  if (scalar->vec_dot[tid(wt)]) {
    const float s = scalar->vec_dot[tid(wt)](n, w, a);
    EXPECT_NEAR(v, s, 2 * tol) << type_name(wt) << " " << isa_name(simd->isa) << " vs scalar, n=" << n << " " << what;
  }
}

std::vector<int64_t> quant_lengths(Type at) {
  if (block_size(at) == 1) return {1, 3, 7, 8, 9, 15, 16, 17, 31, 32, 33, 100, 256, 4096, 4097};
  std::vector<int64_t> v;
  for (int64_t k = 1; k <= 8; ++k) v.push_back(k * block_size(at));
  for (int64_t k : {256, 512, 768, 2048, 4096}) v.push_back(k);
  return v;
}

// ---------------------------------------------------------------------------------------------

TEST_P(QuantSimd, TablesHaveEntries) {
  for (Type t : kDotTypes) {
    EXPECT_NE(simd_->vec_dot[tid(t)], nullptr) << type_name(t);
    EXPECT_NE(scalar_->vec_dot[tid(t)], nullptr) << type_name(t);
  }
  for (Type t : kActTypes) {
    EXPECT_NE(simd_->quantize[tid(t)], nullptr) << type_name(t);
    EXPECT_NE(scalar_->quantize[tid(t)], nullptr) << type_name(t);
  }
  // every SIMD table overrides these entries (not merely inherits the scalar ones); avxvnni and
  // avx512 also override the AVX2 dot products they speed up and give each its own gemm
  for (Type t : kDotTypes) EXPECT_NE(simd_->vec_dot[tid(t)], scalar_->vec_dot[tid(t)]) << type_name(t);
  for (Type t : kActTypes) EXPECT_NE(simd_->quantize[tid(t)], scalar_->quantize[tid(t)]) << type_name(t);
  const Isa isa = GetParam();
  if (isa == Isa::avx2 || isa == Isa::neon) return;
  if (isa == Isa::dotprod || isa == Isa::i8mm) {
    // dotprod gives every integer type its own SDOT vec_dot and gemm; i8mm keeps dotprod's
    // vec_dot and replaces the gemm with SMMLA tiles (bit-identical to that vec_dot)
    const KernelTable* neon = kernel_table(Isa::neon);
    const KernelTable* dotprod = kernel_table(Isa::dotprod);
    for (Type t : kDotTypes) {
      if (block_size(t) == 1) continue;
      EXPECT_NE(simd_->gemm[tid(t)], nullptr) << isa_name(isa) << " " << type_name(t);
      if (isa == Isa::dotprod) {
        EXPECT_NE(simd_->vec_dot[tid(t)], neon->vec_dot[tid(t)]) << type_name(t);
      } else {
        EXPECT_EQ(simd_->vec_dot[tid(t)], dotprod->vec_dot[tid(t)]) << type_name(t);
        EXPECT_NE(simd_->gemm[tid(t)], dotprod->gemm[tid(t)]) << type_name(t);
      }
    }
    return;
  }
  const KernelTable* avx2 = kernel_table(Isa::avx2);
  for (Type t : kDotTypes) {
    // AVX-VNNI keeps AVX2's kernels for the float types only
    const bool own = isa == Isa::avx512 || block_size(t) != 1;
    if (!own) {
      EXPECT_EQ(simd_->vec_dot[tid(t)], avx2->vec_dot[tid(t)]) << isa_name(isa) << " " << type_name(t);
      continue;
    }
    EXPECT_NE(simd_->vec_dot[tid(t)], avx2->vec_dot[tid(t)]) << isa_name(isa) << " " << type_name(t);
    EXPECT_NE(simd_->gemm[tid(t)], nullptr) << isa_name(isa) << " " << type_name(t);
  }
}

TEST_P(QuantSimd, GeneratorVaries) {
  Gen g(1);
  for (Type t : kDotTypes) {
    const int64_t bs = unit(t) == 1 ? 64 : unit(t);
    const int64_t n = 4 * bs;
    std::vector<uint8_t> w(row_bytes(t, n));
    gen_weights(g, t, w.data(), n, Fill::random);
    std::set<uint8_t> distinct(w.begin(), w.end());
    EXPECT_GT(distinct.size(), 20u) << type_name(t);
    const size_t bb = row_bytes(t, bs);
    EXPECT_NE(std::memcmp(w.data(), w.data() + bb, bb), 0) << type_name(t);
    std::vector<double> sc(256), of(256);
    if (unit(t) > 1) {
      decode_weight_block(t, w.data(), sc.data(), of.data());
      std::set<double> vals(sc.begin(), sc.begin() + unit(t));
      EXPECT_GT(vals.size(), 3u) << type_name(t);
    }
  }
  for (Type at : kActTypes) {
    const int64_t n = 4 * (unit(at) == 1 ? 64 : unit(at));
    std::vector<uint8_t> a(row_bytes(at, n));
    gen_acts(g, at, a.data(), n, ActFill::random);
    std::set<uint8_t> distinct(a.begin(), a.end());
    EXPECT_GT(distinct.size(), 20u) << type_name(at);
  }
}

// Random rows of 1..8 blocks and the row lengths of real models, at every misalignment, with
// random and quantizer-produced activations.
TEST_P(QuantSimd, VecDotMatchesReference) {
  Gen g(42);
  for (Type wt : kDotTypes) {
    const Type at = act_type(wt);
    const int64_t u = unit(wt);
    std::vector<int64_t> lengths;
    if (u == 1) {
      for (int64_t k = 1; k <= 40; ++k) lengths.push_back(k);
      for (int64_t k : {63, 64, 65, 255, 256, 257, 1000, 4097}) lengths.push_back(k);
    } else {
      for (int64_t k = 1; k <= 8; ++k) lengths.push_back(k * u);
    }
    for (int64_t k : {256, 512, 768, 2048, 4096}) lengths.push_back(k);
    for (const int64_t n : lengths) {
      for (size_t woff = 0; woff < 8; ++woff) {
        const size_t aoff = (woff * 3 + 1) % 8;
        Buf wb(row_bytes(wt, n), woff), ab(row_bytes(at, n), aoff);
        gen_weights(g, wt, wb.data(), n, Fill::random);
        gen_acts(g, at, ab.data(), n, ActFill::random);
        check_dot(scalar_, simd_, wt, wb.data(), ab.data(), n,
                  "random acts, offsets " + std::to_string(woff) + "/" + std::to_string(aoff));
        // activations from the scalar quantizer of random floats (realistic sums and scales)
        std::vector<float> xf(n);
        const float scale = std::ldexp(1.0f, g.irange(-8, 8));
        for (auto& v : xf) v = g.uni(-1.0f, 1.0f) * scale;
        scalar_->quantize[tid(at)](xf.data(), ab.data(), n);
        check_dot(scalar_, simd_, wt, wb.data(), ab.data(), n, "quantized acts, offset " + std::to_string(woff));
      }
    }
  }
}

// Extremes: all-max nibbles / quant bytes, activations all -128 or all 127 (saturated quants),
// zero, huge (+-65504) and subnormal scales.
TEST_P(QuantSimd, VecDotExtremes) {
  Gen g(7);
  for (Type wt : kDotTypes) {
    const Type at = act_type(wt);
    if (block_size(wt) == 1) continue;  // float types have no integer paths
    for (int64_t n : {block_size(wt), 4 * block_size(wt), int64_t{4096}}) {
      for (Fill wf : {Fill::random, Fill::all_max, Fill::zero_scales, Fill::huge_scales, Fill::tiny_scales}) {
        for (ActFill af : {ActFill::random, ActFill::min_int8, ActFill::max_int8}) {
          Buf wb(row_bytes(wt, n), 3), ab(row_bytes(at, n), 5);
          gen_weights(g, wt, wb.data(), n, wf);
          gen_acts(g, at, ab.data(), n, af);
          check_dot(scalar_, simd_, wt, wb.data(), ab.data(), n,
                    "fill " + std::to_string(static_cast<int>(wf)) + " act " + std::to_string(static_cast<int>(af)));
          if (wf == Fill::zero_scales) {
            EXPECT_EQ(simd_->vec_dot[tid(wt)](n, wb.data(), ab.data()), 0.0f) << type_name(wt);
          }
        }
      }
    }
  }
}

// Rows placed against inaccessible pages: a kernel reading (or a quantizer writing) one byte
// outside its row crashes the test.
TEST_P(QuantSimd, StaysInsideRows) {
  Gen g(11);
  for (Type wt : kDotTypes) {
    const Type at = act_type(wt);
    const int64_t u = unit(wt);
    for (int64_t n : {u, 2 * u, 3 * u, 5 * u, 8 * u, 9 * u, 17 * u, 33 * u}) {
      const size_t wbytes = row_bytes(wt, n), abytes = row_bytes(at, n);
      Guarded gw(wbytes), ga(abytes);
      ASSERT_TRUE(gw.ok() && ga.ok());
      for (int where = 0; where < 2; ++where) {
        uint8_t* w = where ? gw.at_end(wbytes) : gw.at_start();
        uint8_t* a = where ? ga.at_end(abytes) : ga.at_start();
        gen_weights(g, wt, w, n, Fill::random);
        gen_acts(g, at, a, n, ActFill::random);
        check_dot(scalar_, simd_, wt, w, a, n, where ? "row at page end" : "row at page start");
      }
    }
  }
  for (Type at : kActTypes) {
    for (int64_t n : quant_lengths(at)) {
      std::vector<float> x(n);
      for (auto& v : x) v = g.uni(-3.0f, 3.0f);
      const size_t ybytes = row_bytes(at, n);
      Guarded gx(n * sizeof(float)), gy(ybytes);
      ASSERT_TRUE(gx.ok() && gy.ok());
      for (int where = 0; where < 2; ++where) {
        auto* xp = reinterpret_cast<float*>(where ? gx.at_end(n * sizeof(float)) : gx.at_start());
        uint8_t* yp = where ? gy.at_end(ybytes) : gy.at_start();
        std::memcpy(xp, x.data(), n * sizeof(float));
        simd_->quantize[tid(at)](xp, yp, n);
        std::vector<uint8_t> ref(ybytes);
        scalar_->quantize[tid(at)](x.data(), ref.data(), n);
        EXPECT_EQ(std::memcmp(ref.data(), yp, ybytes), 0) << type_name(at) << " n=" << n;
      }
    }
  }
}

// Float types: extreme magnitudes (largest halves, tiny values) stay within rounding.
TEST_P(QuantSimd, VecDotFloatExtremes) {
  Gen g(9);
  for (Type wt : {Type::F16, Type::BF16, Type::F32}) {
    for (int64_t n : {int64_t{7}, int64_t{33}, int64_t{4096}}) {
      Buf wb(row_bytes(wt, n), 1), ab(row_bytes(wt, n), 2);
      for (int64_t i = 0; i < n; ++i) {
        const float big = (i % 3 == 0) ? 60000.0f : (i % 3 == 1 ? -1e-4f : 3.0f);
        const float other = (i % 2) ? -0.5f : 2.0f;
        if (wt == Type::F16) {
          put16(wb.data() + 2 * i, f32_to_fp16(big));
          put16(ab.data() + 2 * i, f32_to_fp16(other));
        } else if (wt == Type::BF16) {
          put16(wb.data() + 2 * i, f32_to_bf16(big * 1e10f));
          put16(ab.data() + 2 * i, f32_to_bf16(other));
        } else {
          put_f32(wb.data() + 4 * i, big * 1e20f);
          put_f32(ab.data() + 4 * i, other);
        }
      }
      check_dot(scalar_, simd_, wt, wb.data(), ab.data(), n, "extremes");
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Activation quantizers: bit-identical output.

void expect_same_quant(const KernelTable* scalar, const KernelTable* simd, Type at, const std::vector<float>& x,
                       size_t xoff, size_t yoff, const std::string& what) {
  const int64_t n = static_cast<int64_t>(x.size());
  // input at a varied (4-byte aligned, as floats are) address
  std::vector<uint8_t> xin(x.size() * 4 + 64);
  std::memcpy(xin.data() + xoff, x.data(), x.size() * 4);
  const auto* xp = reinterpret_cast<const float*>(xin.data() + xoff);
  const size_t bytes = row_bytes(at, n);
  Buf ys(bytes, yoff), yv(bytes, yoff);
  scalar->quantize[tid(at)](xp, ys.data(), n);
  simd->quantize[tid(at)](xp, yv.data(), n);
  if (std::memcmp(ys.data(), yv.data(), bytes) != 0) {
    size_t first = 0;
    while (ys.data()[first] == yv.data()[first]) ++first;
    ADD_FAILURE() << type_name(at) << " quantizer differs, n=" << n << " " << what << ": first byte " << first
                  << " of " << bytes << " (block " << first / info(at).block_bytes << ", offset "
                  << first % info(at).block_bytes << "): scalar " << int(ys.data()[first]) << " simd "
                  << int(yv.data()[first]);
  }
}

TEST_P(QuantSimd, QuantizeRandomBitIdentical) {
  Gen g(3);
  for (Type at : kActTypes) {
    for (int64_t n : quant_lengths(at)) {
      for (size_t off = 0; off < 8; ++off) {
        std::vector<float> x(n);
        const float scale = std::ldexp(1.0f, g.irange(-20, 20));
        for (auto& v : x) v = g.uni(-1.0f, 1.0f) * scale;
        expect_same_quant(scalar_, simd_, at, x, 4 * off, off, "random");
      }
    }
  }
}

// Ties, zero blocks, a single nonzero, the largest magnitude appearing with both signs, denormals,
// values at the edges of the half range, inf and NaN (with payloads).
TEST_P(QuantSimd, QuantizeSpecialValuesBitIdentical) {
  Gen g(5);
  const float inf = std::numeric_limits<float>::infinity();
  auto nan_with = [](uint32_t payload) { return bits_f32(0x7f800000u | payload); };
  for (Type at : kActTypes) {
    const int64_t n = block_size(at) == 1 ? 300 : 4 * block_size(at);
    std::vector<std::vector<float>> cases;
    // exact ties after scaling: amax = 127 -> id = 1
    {
      std::vector<float> x(n);
      for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(i % 50) - 25.5f;
      for (int64_t i = 0; i < n; i += 32) x[i] = 127.0f;
      cases.push_back(x);
    }
    cases.push_back(std::vector<float>(n, 0.0f));
    {
      std::vector<float> x(n, 0.0f);
      x[n / 2] = -3.25f;
      cases.push_back(x);
    }
    {
      std::vector<float> x(n, 0.0f);
      x[1] = -2.0f;
      x[5] = 2.0f;
      for (int64_t i = 8; i < n; ++i) x[i] = g.uni(-2.0f, 2.0f);
      cases.push_back(x);
      std::vector<float> y = x;
      y[1] = 2.0f;
      y[5] = -2.0f;
      cases.push_back(y);
    }
    {
      std::vector<float> x(n);
      for (auto& v : x) v = g.uni(-1.0f, 1.0f) * 1e-39f;  // denormal block maxima
      cases.push_back(x);
      for (auto& v : x) v = g.uni(-1.0f, 1.0f) * 1e-36f;
      cases.push_back(x);
      for (auto& v : x) v = g.uni(-1.0f, 1.0f) * 3e38f;
      cases.push_back(x);
      for (int64_t i = 0; i < n; ++i) x[i] = (i % 3 == 0) ? 0.0f : g.uni(-1.0f, 1.0f) * 1e-39f;  // 0 * inf
      cases.push_back(x);
    }
    {
      std::vector<float> x(n);
      for (auto& v : x) v = g.uni(-1.0f, 1.0f);
      x[3] = nan_with(0x1234);  // a NaN element: ignored by amax, quantized through its bits
      x[40 % n] = -inf;         // an infinite element: scale inf, multiplier 0, inf * 0 = NaN
      cases.push_back(x);
    }
    if (block_size(at) == 1) {
      std::vector<float> x = {65504.0f, 65519.0f, 65520.0f, 65536.0f, -65520.0f, 1e6f, 6.1e-5f, 6.0e-8f, 2.9e-8f,
                              3.0e-8f, -5.96e-8f, 1e-10f, -0.0f, inf, -inf, nan_with(1), nan_with(0x400000),
                              nan_with(0x7fffff), -nan_with(0x12345), 1.00048828125f, 1.000732421875f,
                              1.0009765625f, 3.0e38f, bits_f32(0x3f808000u), bits_f32(0x3f818000u),
                              bits_f32(0x3f817fffu), bits_f32(0x7f7fffffu), bits_f32(0x00000001u)};
      while (static_cast<int64_t>(x.size()) < n) x.push_back(bits_f32(static_cast<uint32_t>(g.rng())));
      cases.push_back(x);
    }
    for (size_t c = 0; c < cases.size(); ++c) {
      expect_same_quant(scalar_, simd_, at, cases[c], 4, 1, "special case " + std::to_string(c));
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Batched products: gemm_rows (the table's gemm, or vec_dot per output where it has none) gives
// exactly the table's vec_dot of each (row, activation row) pair.

// Bit pattern of a float (so that -0 and 0 differ and NaNs compare).
uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// nr weight rows and nc activation rows of n elements with the given strides and misalignment;
// every output checked against vec_dot bit for bit, and the padding of y left untouched.
void check_gemm(const KernelTable* t, Type wt, int64_t n, int64_t nr, int64_t nc, size_t pad, size_t off, Gen& g,
                Fill wf, ActFill af, const std::string& what) {
  const Type at = act_type(wt);
  const size_t wrb = row_bytes(wt, n) + pad, arb = row_bytes(at, n) + pad;
  Buf wb(wrb * static_cast<size_t>(nr), off), ab(arb * static_cast<size_t>(nc), (off * 5 + 3) % 8);
  for (int64_t r = 0; r < nr; ++r) gen_weights(g, wt, wb.data() + static_cast<size_t>(r) * wrb, n, wf);
  for (int64_t c = 0; c < nc; ++c) gen_acts(g, at, ab.data() + static_cast<size_t>(c) * arb, n, af);
  const int64_t ys = nr + 3;
  const float sentinel = -12345.5f;
  std::vector<float> y(static_cast<size_t>(ys * nc), sentinel);
  gemm_rows(*t, wt, n, wb.data(), wrb, nr, ab.data(), arb, nc, y.data(), ys);
  const VecDotFn dot = t->vec_dot[tid(wt)];
  int bad = 0;
  for (int64_t c = 0; c < nc; ++c) {
    for (int64_t r = 0; r < ys; ++r) {
      const float got = y[static_cast<size_t>(c * ys + r)];
      if (r >= nr) {
        EXPECT_EQ(bits(got), bits(sentinel)) << "gemm wrote outside its outputs: " << what;
        continue;
      }
      const float want = dot(n, wb.data() + static_cast<size_t>(r) * wrb, ab.data() + static_cast<size_t>(c) * arb);
      if (bits(got) != bits(want) && bad++ < 3) {
        ADD_FAILURE() << type_name(wt) << " " << isa_name(t->isa) << " gemm != vec_dot at row " << r << " act " << c
                      << " of " << nr << "x" << nc << ", n=" << n << " " << what << ": " << got << " vs " << want;
      }
    }
  }
}

// Every shape of a few tiles (1..9 rows x 1..20 activation rows, so every edge tile of every
// table's tile size occurs), row lengths with tails, padded and misaligned rows.
TEST_P(QuantSimd, GemmMatchesVecDotBitForBit) {
  Gen g(21);
  for (Type wt : kDotTypes) {
    const int64_t u = unit(wt);
    const std::vector<int64_t> lengths =
        u == 1 ? std::vector<int64_t>{1, 15, 16, 17, 33, 64, 100, 256, 1000} : std::vector<int64_t>{u, 2 * u, 3 * u, 5 * u, 8 * u};
    for (int64_t n : lengths) {
      for (int64_t nr : {1, 2, 3, 4, 5, 7, 9}) {
        for (int64_t nc : {1, 2, 3, 4, 5, 6, 7, 17, 20}) {
          const size_t pad = static_cast<size_t>((nr + nc) % 3) * 7;
          check_gemm(simd_, wt, n, nr, nc, pad, static_cast<size_t>(nr % 8), g, Fill::random, ActFill::random,
                     "random");
        }
      }
    }
  }
}

// The same on adversarial blocks: saturated quants, extreme and zero scales, extreme activations.
TEST_P(QuantSimd, GemmMatchesVecDotOnExtremes) {
  Gen g(23);
  for (Type wt : kDotTypes) {
    if (block_size(wt) == 1) continue;
    // 32-element blocks: 13 (the AVX2 kernels' 8-block step, whose -128 probe redoes a group, then
    // an odd tail); the others 4.
    const int64_t n = block_size(wt) == 32 ? 13 * 32 : 4 * block_size(wt);
    for (Fill wf : {Fill::all_max, Fill::zero_scales, Fill::huge_scales, Fill::tiny_scales}) {
      for (ActFill af : {ActFill::random, ActFill::min_int8, ActFill::max_int8}) {
        check_gemm(simd_, wt, n, 6, 5, 0, 1, g, wf, af,
                   "fill " + std::to_string(static_cast<int>(wf)) + " act " + std::to_string(static_cast<int>(af)));
      }
    }
  }
}

// Matrix-vector products (one activation row, the decode shape) over a matrix whose last row ends
// at an inaccessible page: the kernels prefetch their row stream ahead of themselves (4 KiB on
// AVX2 / AVX-VNNI, the next rows elsewhere), past the end of the matrix here. A prefetch must
// never fault nor change a result: each output equals the table's vec_dot bit for bit.
TEST_P(QuantSimd, MatrixVectorAtTheEndOfAMapping) {
  Gen g(13);
  for (Type wt : kDotTypes) {
    const Type at = act_type(wt);
    const int64_t u = unit(wt);
    for (int64_t n : {u, 8 * u, 33 * u}) {
      for (int64_t nr : {1, 3, 9}) {
        const size_t wrb = row_bytes(wt, n), abytes = row_bytes(at, n);
        Guarded gw(wrb * static_cast<size_t>(nr)), ga(abytes);
        ASSERT_TRUE(gw.ok() && ga.ok());
        uint8_t* w = gw.at_end(wrb * static_cast<size_t>(nr));
        uint8_t* a = ga.at_end(abytes);
        for (int64_t r = 0; r < nr; ++r) gen_weights(g, wt, w + static_cast<size_t>(r) * wrb, n, Fill::random);
        gen_acts(g, at, a, n, ActFill::random);
        std::vector<float> y(static_cast<size_t>(nr));
        gemm_rows(*simd_, wt, n, w, wrb, nr, a, abytes, 1, y.data(), nr);
        for (int64_t r = 0; r < nr; ++r) {
          const float want = simd_->vec_dot[tid(wt)](n, w + static_cast<size_t>(r) * wrb, a);
          EXPECT_EQ(bits(y[static_cast<size_t>(r)]), bits(want))
              << type_name(wt) << " " << isa_name(simd_->isa) << " row " << r << " of " << nr << ", n=" << n;
        }
      }
    }
  }
}

// A large product, as a model's layer runs it: every activation block of a long row and many
// tiles (also the scalar and avx2 tables, whose products fall back to vec_dot or use their gemm).
TEST_P(QuantSimd, GemmOfModelShape) {
  Gen g(29);
  for (Type wt : {Type::Q4_K, Type::Q6_K, Type::Q8_0, Type::Q5_0, Type::F16}) {
    check_gemm(simd_, wt, 2048, 37, 23, 0, 0, g, Fill::random, ActFill::random, "model shape");
  }
}

#if defined(__x86_64__)
// The avx512 table without its GFNI variants (what a CPU without GFNI runs) against the table in
// use: both the same products bit for bit, on random and adversarial blocks in every tile shape,
// and the GFNI-less kernels against the reference. On a CPU without GFNI the table in use is the
// GFNI-less one (the other tests cover it) and this skips.
TEST(QuantSimdGfni, SameProductsWithAndWithoutGfni) {
  const KernelTable* with = kernel_table(Isa::avx512);
  if (!with || !isa_supported(Isa::avx512)) LES_SKIP_CPU("no AVX-512");
  if (!cpu_has_gfni()) LES_SKIP_CPU("no GFNI: the avx512 table in use is the one without it");
  KernelTable without = *with;
  fill_kernel_table_avx512_without_gfni(without);
  Gen g(31);
  int checked = 0;
  for (Type wt : {Type::Q2_K, Type::Q3_K, Type::Q4_K, Type::Q5_K}) {
    EXPECT_NE(with->vec_dot[tid(wt)], without.vec_dot[tid(wt)]) << type_name(wt) << ": no GFNI variant registered";
    const Type at = act_type(wt);
    for (Fill wf : {Fill::random, Fill::all_max, Fill::zero_scales, Fill::huge_scales, Fill::tiny_scales}) {
      for (ActFill af : {ActFill::random, ActFill::min_int8, ActFill::max_int8}) {
        for (int64_t nb : {1, 3, 8}) {
          const int64_t n = nb * QK_K, nr = 9, nc = 6;
          const size_t wrb = row_bytes(wt, n), arb = row_bytes(at, n);
          std::vector<uint8_t> w(wrb * nr), a(arb * nc);
          for (int64_t r = 0; r < nr; ++r) gen_weights(g, wt, w.data() + r * wrb, n, wf);
          for (int64_t c = 0; c < nc; ++c) gen_acts(g, at, a.data() + c * arb, n, af);
          for (int64_t c_n : {int64_t{1}, int64_t{2}, int64_t{4}, nc}) {  // tile widths 1..4 and an edge
            std::vector<float> y1(static_cast<size_t>(nr * c_n)), y2(y1.size());
            gemm_rows(*with, wt, n, w.data(), wrb, nr, a.data(), arb, c_n, y1.data(), nr);
            gemm_rows(without, wt, n, w.data(), wrb, nr, a.data(), arb, c_n, y2.data(), nr);
            for (size_t i = 0; i < y1.size(); ++i) {
              ASSERT_EQ(bits(y1[i]), bits(y2[i])) << type_name(wt) << " output " << i << " of " << nr << "x" << c_n
                                                  << ", n=" << n << ", fill " << static_cast<int>(wf) << " act "
                                                  << static_cast<int>(af);
            }
          }
          check_dot(kernel_table(Isa::scalar), &without, wt, w.data(), a.data(), n, "without GFNI");
          ++checked;
        }
      }
    }
  }
  EXPECT_EQ(checked, 4 * 5 * 3 * 3);
}

#endif

#if defined(__x86_64__)
// AVX-VNNI's 32-element block kernels are AVX2's with vpdpbusd for vpmaddubsw + vpmaddwd
// (kernels_q32_x86.h): the same int32 lane sums, so every product equals AVX2's bit for bit, in
// every tile shape, on random and extreme blocks (and both match the reference: VecDot*).
TEST(QuantSimdVnni, Q32ProductsEqualAvx2) {
  const KernelTable* vnni = kernel_table(Isa::avx_vnni);
  const KernelTable* avx2 = kernel_table(Isa::avx2);
  if (!vnni || !isa_supported(Isa::avx_vnni)) LES_SKIP_CPU("no AVX-VNNI");
  Gen g(47);
  int checked = 0;
  for (Type wt : {Type::Q4_0, Type::Q5_0, Type::Q4_1, Type::Q5_1, Type::IQ4_NL}) {
    EXPECT_NE(vnni->vec_dot[tid(wt)], avx2->vec_dot[tid(wt)]) << type_name(wt) << ": no VNNI variant registered";
    const Type at = act_type(wt);
    for (Fill wf : {Fill::random, Fill::all_max, Fill::zero_scales, Fill::huge_scales, Fill::tiny_scales}) {
      for (ActFill af : {ActFill::random, ActFill::min_int8, ActFill::max_int8}) {
        for (int64_t nb : {1, 3, 8, 13}) {  // the 4-block groups, their 2- and 1-block tails
          const int64_t n = nb * 32, nr = 11, nc = 6;
          const size_t wrb = row_bytes(wt, n), arb = row_bytes(at, n);
          std::vector<uint8_t> w(wrb * nr), a(arb * nc);
          for (int64_t r = 0; r < nr; ++r) gen_weights(g, wt, w.data() + r * wrb, n, wf);
          for (int64_t c = 0; c < nc; ++c) gen_acts(g, at, a.data() + c * arb, n, af);
          for (int64_t c_n : {int64_t{1}, int64_t{2}, int64_t{4}, nc}) {
            std::vector<float> y1(static_cast<size_t>(nr * c_n)), y2(y1.size());
            gemm_rows(*vnni, wt, n, w.data(), wrb, nr, a.data(), arb, c_n, y1.data(), nr);
            gemm_rows(*avx2, wt, n, w.data(), wrb, nr, a.data(), arb, c_n, y2.data(), nr);
            for (size_t i = 0; i < y1.size(); ++i) {
              ASSERT_EQ(bits(y1[i]), bits(y2[i])) << type_name(wt) << " output " << i << " of " << nr << "x" << c_n
                                                  << ", n=" << n << ", fill " << static_cast<int>(wf) << " act "
                                                  << static_cast<int>(af);
            }
          }
          EXPECT_EQ(bits(vnni->vec_dot[tid(wt)](n, w.data(), a.data())), bits(avx2->vec_dot[tid(wt)](n, w.data(), a.data())))
              << type_name(wt) << " n=" << n;
          ++checked;
        }
      }
    }
  }
  EXPECT_EQ(checked, 5 * 5 * 3 * 4);
}
#endif

#if defined(__x86_64__)
// The AVX2 tiles' vpdpbusd emulation against integer arithmetic: every (u, s) byte pair in all
// four products of a lane (u = 255 with s = -128 saturates a plain vpmaddubsw), accumulators near
// the int32 limits, and random bytes; the u <= 127 path on every u <= 127.
TEST(DpbusdAvx2, ExactForEveryBytePair) {
  if (!isa_supported(Isa::avx2)) LES_SKIP_CPU("no AVX2");
  std::mt19937 rng(7);
  uint8_t u[32];
  int8_t s[32];
  int32_t acc[8], out[8], out7[8];
  auto check = [&](bool u7_too) {
    dpbusd_avx2_emulated(acc, u, s, out, false);
    if (u7_too) dpbusd_avx2_emulated(acc, u, s, out7, true);
    for (int i = 0; i < 8; ++i) {
      int64_t want = acc[i];
      for (int k = 0; k < 4; ++k) want += int64_t{u[4 * i + k]} * s[4 * i + k];
      ASSERT_EQ(out[i], static_cast<int32_t>(want)) << "lane " << i << " u " << int{u[4 * i]} << " s " << int{s[4 * i]};
      if (u7_too) {
        ASSERT_EQ(out7[i], static_cast<int32_t>(want)) << "u7 lane " << i << " u " << int{u[4 * i]};
      }
    }
  };
  for (int x = 0; x < 256; ++x) {
    for (int y0 = 0; y0 < 256; y0 += 8) {
      for (int i = 0; i < 8; ++i) {
        for (int k = 0; k < 4; ++k) {
          u[4 * i + k] = static_cast<uint8_t>(x);
          s[4 * i + k] = static_cast<int8_t>(y0 + i - 128);
        }
        acc[i] = (x + i) % 3 == 0 ? 0 : (x % 2 ? std::numeric_limits<int32_t>::max() - 130000 : std::numeric_limits<int32_t>::min() + 131072);
      }
      check(x <= 127);
    }
  }
  for (int rep = 0; rep < 2000; ++rep) {
    const bool small = rep % 2;
    for (int j = 0; j < 32; ++j) {
      u[j] = static_cast<uint8_t>(small ? rng() % 128 : rng());
      s[j] = static_cast<int8_t>(rng());
    }
    for (int i = 0; i < 8; ++i) acc[i] = static_cast<int32_t>(rng() % 2000001) - 1000000;
    check(small);
  }
}
#endif  // __x86_64__

const Isa kSimdIsas[] = {Isa::avx2, Isa::avx_vnni, Isa::avx512, Isa::neon, Isa::dotprod, Isa::i8mm};

INSTANTIATE_TEST_SUITE_P(Isas, QuantSimd, ::testing::ValuesIn(kSimdIsas),
                         [](const ::testing::TestParamInfo<Isa>& p) { return std::string(isa_name(p.param)); });

// Reports which ISAs this machine could not run (their tests above skip), and checks that the
// tables' products agree across ISAs within rounding on one shared case.
TEST(KernelIsas, ReportsWhichIsasRan) {
  std::string ran = "scalar", missing;
  for (Isa isa : kSimdIsas) {
    std::string& list = isa_supported(isa) ? ran : missing;
    list += (list.empty() ? "" : ", ") + std::string(isa_name(isa));
  }
  std::printf("[ KernelIsas ] ran: %s; could not run (CPU lacks them): %s\n", ran.c_str(),
              missing.empty() ? "none" : missing.c_str());
#if defined(__x86_64__)
  if (isa_supported(Isa::avx512)) {
    std::printf("[ KernelIsas ] avx512 K-quant kernels: %s\n",
                cpu_has_gfni() ? "GFNI variants (and the ones without, checked against them)" : "without GFNI (CPU lacks it)");
  }
#endif
  ::testing::Test::RecordProperty("isas_ran", ran);
  ::testing::Test::RecordProperty("isas_not_run", missing.empty() ? "none" : missing);
  EXPECT_TRUE(isa_supported(Isa::scalar));
  EXPECT_TRUE(isa_supported(detect_isa()));
  for (int i = static_cast<int>(detect_isa()) + 1; i < kNumIsa; ++i) EXPECT_FALSE(isa_supported(static_cast<Isa>(i)));
#if defined(__aarch64__)
  for (Isa x86 : {Isa::avx2, Isa::avx_vnni, Isa::avx512}) EXPECT_FALSE(isa_supported(x86));
  EXPECT_TRUE(isa_supported(Isa::neon));  // every aarch64 CPU has Advanced SIMD
#endif
}

}  // namespace
}  // namespace les
