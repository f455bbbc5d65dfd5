// TQ1_0, TQ2_0, MXFP4, NVFP4: the scalar reference against llama.cpp's own results
// (tests/data/quant/lowbit_ref.bin, made by make_refs_lowbit.cpp: dequantization bit for bit, dot
// products within float rounding, quantization without importance byte for byte), every SIMD
// table of this CPU against the scalar one (dot products within rounding, gemm bit-identical to
// the table's vec_dot for any shape, no access outside the rows), and the quantizers
// (importance-weighted error, determinism, errors on bad input).

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "les/quant/blocks.h"
#include "les/quant/kernels.h"
#include "les/quant/kernels_internal.h"
#include "les/quant/types.h"
#include "les/util/error.h"
#include "les/util/fp16.h"
#include "skip.h"
#include "test_util.h"

namespace les {
namespace {

constexpr Type kLowbitTypes[] = {Type::TQ1_0, Type::TQ2_0, Type::MXFP4, Type::NVFP4};
constexpr Isa kSimdIsas[] = {Isa::avx2, Isa::avx_vnni, Isa::avx512, Isa::neon, Isa::dotprod, Isa::i8mm};

int tid(Type t) { return static_cast<int>(t); }

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// The tables this CPU runs (scalar first).
std::vector<const KernelTable*> runnable_tables() {
  std::vector<const KernelTable*> v{kernel_table(Isa::scalar)};
  for (Isa isa : kSimdIsas) {
    if (isa_supported(isa) && kernel_table(isa)) v.push_back(kernel_table(isa));
  }
  return v;
}

// Sum of |w_i * a_i| of a weight row and an activation row (the scale of a dot's rounding error).
double magnitude(Type wt, const uint8_t* w, const uint8_t* a, int64_t n) {
  const KernelTable* s = kernel_table(Isa::scalar);
  std::vector<float> dw(static_cast<size_t>(n)), da(static_cast<size_t>(n));
  s->dequantize[tid(wt)](w, dw.data(), n);
  s->dequantize[tid(act_type(wt))](a, da.data(), n);
  double m = 0;
  for (int64_t i = 0; i < n; ++i) m += std::fabs(static_cast<double>(dw[i]) * da[i]);
  return m;
}

// ---------------------------------------------------------------------------------------------
// llama.cpp's results (format: make_refs_lowbit.cpp).

struct DotCase {
  Type t;
  int64_t n, rows;
  std::vector<uint8_t> w, a;
  std::vector<float> deq, dot;
};
struct QuantCase {
  Type t;
  int64_t n, rows;
  std::vector<float> x, imp;
  std::vector<uint8_t> q;  // llama.cpp's quantization without importance
};
struct Refs {
  std::vector<DotCase> dots;
  std::vector<QuantCase> quants;
  std::string error;  // why the file could not be read
};

class Reader {
 public:
  explicit Reader(std::vector<uint8_t> b) : b_(std::move(b)) {}
  bool take(void* out, size_t n) {
    if (n > b_.size() - pos_) return false;
    std::memcpy(out, b_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  template <class T>
  bool vec(std::vector<T>& v, size_t count) {
    v.resize(count);
    return take(v.data(), count * sizeof(T));
  }
  bool u32(uint32_t& v) { return take(&v, 4); }
  bool done() const { return pos_ == b_.size(); }

 private:
  std::vector<uint8_t> b_;
  size_t pos_ = 0;
};

Refs load_refs() {
  Refs r;
  Reader in(test::read_bytes(test::source_dir() + "/tests/data/quant/lowbit_ref.bin"));
  char magic[8];
  if (!in.take(magic, 8) || std::memcmp(magic, "LESLOWB1", 8) != 0) {
    r.error = "tests/data/quant/lowbit_ref.bin: missing or not a LESLOWB1 file";
    return r;
  }
  for (int k = 0; k < 4; ++k) {
    uint32_t t, n, rows;
    DotCase d;
    if (!in.u32(t) || !in.u32(n) || !in.u32(rows)) break;
    d.t = static_cast<Type>(t);
    d.n = n;
    d.rows = rows;
    const Type at = act_type(d.t);
    if (!in.vec(d.w, rows * row_bytes(d.t, n)) || !in.vec(d.a, rows * row_bytes(at, n)) ||
        !in.vec(d.deq, static_cast<size_t>(rows) * n) || !in.vec(d.dot, rows)) {
      break;
    }
    r.dots.push_back(std::move(d));
    QuantCase q;
    if (!in.u32(t) || !in.u32(n) || !in.u32(rows)) break;
    q.t = static_cast<Type>(t);
    q.n = n;
    q.rows = rows;
    if (!in.vec(q.x, static_cast<size_t>(rows) * n) || !in.vec(q.imp, n) || !in.vec(q.q, rows * row_bytes(q.t, n))) break;
    r.quants.push_back(std::move(q));
  }
  if (r.dots.size() != 4 || r.quants.size() != 4 || !in.done()) r.error = "tests/data/quant/lowbit_ref.bin: truncated";
  return r;
}

const Refs& refs() {
  static const Refs r = load_refs();
  return r;
}

TEST(LowbitLlama, FileCoversEveryType) {
  ASSERT_EQ(refs().error, "");
  for (size_t k = 0; k < 4; ++k) {
    EXPECT_EQ(refs().dots[k].t, kLowbitTypes[k]);
    EXPECT_EQ(refs().quants[k].t, kLowbitTypes[k]);
  }
}

// Dequantization equals llama.cpp's dequantize_row_<type> bit for bit, in every table.
TEST(LowbitLlama, DequantizeBitExact) {
  ASSERT_EQ(refs().error, "");
  for (const KernelTable* t : runnable_tables()) {
    for (const DotCase& c : refs().dots) {
      ASSERT_NE(t->dequantize[tid(c.t)], nullptr) << type_name(c.t);
      std::vector<float> y(static_cast<size_t>(c.n));
      const size_t rb = row_bytes(c.t, c.n);
      int bad = 0;
      for (int64_t r = 0; r < c.rows; ++r) {
        t->dequantize[tid(c.t)](c.w.data() + r * rb, y.data(), c.n);
        for (int64_t i = 0; i < c.n; ++i) {
          const float want = c.deq[static_cast<size_t>(r * c.n + i)];
          if (bits(y[static_cast<size_t>(i)]) != bits(want) && bad++ < 5) {
            ADD_FAILURE() << type_name(c.t) << " " << isa_name(t->isa) << " row " << r << " element " << i << ": "
                          << y[static_cast<size_t>(i)] << " vs llama.cpp " << want;
          }
        }
      }
    }
  }
}

// Dot products against llama.cpp's CPU kernel on its own activations, within 1e-5 of the sum of
// |w * a| (a different float order: llama.cpp's SIMD kernels); where llama.cpp's overflows, ours does.
TEST(LowbitLlama, VecDotAgrees) {
  ASSERT_EQ(refs().error, "");
  for (const KernelTable* t : runnable_tables()) {
    for (const DotCase& c : refs().dots) {
      const Type at = act_type(c.t);
      const size_t rb = row_bytes(c.t, c.n), ab = row_bytes(at, c.n);
      double worst = 0;
      for (int64_t r = 0; r < c.rows; ++r) {
        const uint8_t* w = c.w.data() + r * rb;
        const uint8_t* a = c.a.data() + r * ab;
        const float got = t->vec_dot[tid(c.t)](c.n, w, a);
        const float want = c.dot[static_cast<size_t>(r)];
        if (!std::isfinite(want)) {  // overflowed (MXFP4 scales up to 2^127): inf or nan by the order of the sums
          EXPECT_FALSE(std::isfinite(got)) << type_name(c.t) << " " << isa_name(t->isa) << " row " << r << ": " << got;
          continue;
        }
        double mag = magnitude(c.t, w, a, c.n);
        if (!std::isfinite(mag)) mag = std::fabs(want);  // a weight overflowed float: 12 * 2^127
        const double err = std::fabs(static_cast<double>(got) - want);
        EXPECT_LE(err, 1e-5 * mag + 1e-30) << type_name(c.t) << " " << isa_name(t->isa) << " row " << r << ": " << got
                                           << " vs llama.cpp " << want;
        if (mag > 0) worst = std::max(worst, err / mag);
      }
      std::printf("[ lowbit   ] %s %s: max |dot - llama.cpp| / sum|w*a| = %.3g\n", type_name(c.t), isa_name(t->isa),
                  worst);
    }
  }
}

// The rows really vary: every code byte value and every scale byte occurs in the reference blocks
// (the adversarial part of make_refs_lowbit.cpp), and the dots are not all equal.
TEST(LowbitLlama, ReferenceDataVaries) {
  ASSERT_EQ(refs().error, "");
  for (const DotCase& c : refs().dots) {
    std::vector<bool> seen(256);
    const size_t bb = info(c.t).block_bytes;
    for (size_t b = 0; b < c.w.size() / bb; ++b) {
      const uint8_t* p = c.w.data() + b * bb;
      if (c.t == Type::NVFP4) {
        for (int s = 0; s < 4; ++s) seen[p[s]] = true;
      } else if (c.t == Type::MXFP4) {
        for (int k = 1; k < 17; ++k) seen[p[k]] = true;
      } else {
        for (size_t k = 0; k + 2 < bb; ++k) seen[p[k]] = true;
      }
    }
    EXPECT_EQ(std::count(seen.begin(), seen.end(), true), 256) << type_name(c.t);
    std::vector<float> d = c.dot;
    std::sort(d.begin(), d.end());
    EXPECT_GT(std::unique(d.begin(), d.end()) - d.begin(), c.rows / 2) << type_name(c.t);
  }
}

// ---------------------------------------------------------------------------------------------
// Random and adversarial rows.

struct Gen {
  std::mt19937_64 rng;
  explicit Gen(uint64_t seed) : rng(seed) {}
  uint8_t byte() { return static_cast<uint8_t>(rng() & 0xff); }
  float uni(float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(rng); }
  int irange(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); }
};

enum class Fill { random, all_max, all_min, zero_scales, huge_scales, tiny_scales };
constexpr Fill kFills[] = {Fill::random, Fill::all_max, Fill::all_min, Fill::zero_scales, Fill::huge_scales,
                           Fill::tiny_scales};

void put16(uint8_t* p, uint16_t v) { std::memcpy(p, &v, 2); }

// A weight row of n elements: random code bytes (all_max / all_min: the codes of the largest /
// most negative values) and scales by `fill`. Scales stay finite and small enough that no dot
// below overflows a float (huge: MXFP4 up to 2^106, NVFP4 up to 224, TQ up to 65504).
void gen_weights(Gen& g, Type t, uint8_t* p, int64_t n, Fill fill) {
  const size_t bb = info(t).block_bytes;
  const int64_t nb = n / block_size(t);
  for (int64_t b = 0; b < nb; ++b) {
    uint8_t* x = p + b * bb;
    for (size_t k = 0; k < bb; ++k) x[k] = g.byte();
    switch (t) {
      case Type::TQ1_0:
      case Type::TQ2_0: {
        const size_t nq = bb - 2;
        if (fill == Fill::all_max) std::memset(x, t == Type::TQ1_0 ? 0xFF : 0xAA, nq);  // codes 2 (+1)
        if (fill == Fill::all_min) std::memset(x, 0x00, nq);
        if (t == Type::TQ2_0 && fill == Fill::all_max && (b & 1)) std::memset(x, 0xFF, nq);  // code 3 (+2)
        half_bits d = f32_to_fp16(g.uni(-0.1f, 0.1f));
        if (fill == Fill::zero_scales) d = 0;
        if (fill == Fill::huge_scales) d = static_cast<half_bits>(0x7bff - (g.byte() & 15));
        if (fill == Fill::huge_scales && (g.byte() & 1)) d |= 0x8000;
        if (fill == Fill::tiny_scales) d = static_cast<half_bits>(1 + (g.byte() & 0x3ff));
        put16(x + nq, d);
        break;
      }
      case Type::MXFP4:
        x[0] = static_cast<uint8_t>(g.irange(110, 135));
        if (fill == Fill::all_max) std::memset(x + 1, (b & 1) ? 0x77 : 0xFF, 16);
        if (fill == Fill::all_min) std::memset(x + 1, 0xFF, 16);
        if (fill == Fill::zero_scales) x[0] = 0;  // 2^-128: the smallest scale there is
        if (fill == Fill::huge_scales) x[0] = static_cast<uint8_t>(g.irange(220, 234));
        if (fill == Fill::tiny_scales) x[0] = static_cast<uint8_t>(g.irange(0, 8));
        break;
      case Type::NVFP4:
        if (fill == Fill::all_max) std::memset(x + 4, (b & 1) ? 0x77 : 0xFF, 32);
        if (fill == Fill::all_min) std::memset(x + 4, 0xFF, 32);
        for (int s = 0; s < 4; ++s) {
          if (fill == Fill::zero_scales) x[s] = (s & 1) ? 0x7F : 0x00;  // both read as 0
          if (fill == Fill::huge_scales) x[s] = static_cast<uint8_t>(0x70 + g.irange(0, 14) + (s & 1) * 0x80);
          if (fill == Fill::tiny_scales) x[s] = static_cast<uint8_t>(g.irange(1, 7));
        }
        break;
      default: FAIL() << "not a low-bit type";
    }
  }
}

enum class ActFill { random, min_int8, max_int8 };

// An activation row (Q8_K or Q8_0) with random or extreme quants and consistent Q8_K block sums.
void gen_acts(Gen& g, Type at, uint8_t* p, int64_t n, ActFill fill) {
  auto q8 = [&]() -> int8_t {
    if (fill == ActFill::min_int8) return -128;
    if (fill == ActFill::max_int8) return 127;
    return static_cast<int8_t>(g.byte());
  };
  if (at == Type::Q8_0) {
    for (int64_t b = 0; b < n / 32; ++b) {
      uint8_t* y = p + b * sizeof(block_q8_0);
      put16(y + offsetof(block_q8_0, d), f32_to_fp16(g.uni(-0.05f, 0.05f)));
      for (int j = 0; j < 32; ++j) y[offsetof(block_q8_0, qs) + j] = static_cast<uint8_t>(q8());
    }
    return;
  }
  for (int64_t b = 0; b < n / QK_K; ++b) {
    uint8_t* y = p + b * sizeof(block_q8_K);
    const float d = g.uni(-0.05f, 0.05f);
    std::memcpy(y + offsetof(block_q8_K, d), &d, 4);
    for (int s = 0; s < 16; ++s) {
      int sum = 0;
      for (int j = 0; j < 16; ++j) {
        const int8_t q = q8();
        y[offsetof(block_q8_K, qs) + 16 * s + j] = static_cast<uint8_t>(q);
        sum += q;
      }
      const auto bs = static_cast<int16_t>(sum);
      std::memcpy(y + offsetof(block_q8_K, bsums) + 2 * s, &bs, 2);
    }
  }
}

// Byte buffers at a chosen misalignment.
struct Buf {
  std::vector<uint8_t> mem;
  size_t off;
  Buf(size_t bytes, size_t offset) : mem(bytes + 128, 0xA5), off(offset) {}
  uint8_t* data() {
    const auto base = reinterpret_cast<uintptr_t>(mem.data());
    return mem.data() + (64 - base % 64) % 64 + off;
  }
};

// A buffer between two inaccessible pages: bytes handed out start right after the leading guard
// page or end right before the trailing one.
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

class LowbitSimd : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (!isa_supported(GetParam())) LES_SKIP_CPU(isa_name(GetParam()) << ": not supported by this CPU");
    simd_ = kernel_table(GetParam());
    if (!simd_) LES_SKIP_CPU(isa_name(GetParam()) << ": kernels not compiled for this architecture");
    scalar_ = kernel_table(Isa::scalar);
  }
  // simd's vec_dot against the scalar one within 1e-5 of sum |w*a|.
  void check_dot(Type t, const uint8_t* w, const uint8_t* a, int64_t n, const std::string& what) {
    const float s = scalar_->vec_dot[tid(t)](n, w, a);
    const float v = simd_->vec_dot[tid(t)](n, w, a);
    const double mag = magnitude(t, w, a, n);
    ASSERT_TRUE(std::isfinite(s)) << type_name(t) << " " << what;
    EXPECT_LE(std::fabs(static_cast<double>(v) - s), 1e-5 * mag + 1e-30)
        << type_name(t) << " " << isa_name(simd_->isa) << " n=" << n << " " << what << ": " << v << " vs scalar " << s;
  }
  const KernelTable* scalar_ = nullptr;
  const KernelTable* simd_ = nullptr;
};

// Every SIMD table runs kernels of its own for these types (so the comparisons below test SIMD
// code, not the scalar reference against itself) and has a gemm. On aarch64: dotprod replaces
// neon's vec_dot and gemm; i8mm keeps dotprod's vec_dot and replaces its gemm (SMMLA tiles).
TEST_P(LowbitSimd, TablesHaveOwnKernels) {
  for (Type t : kLowbitTypes) {
    EXPECT_NE(simd_->vec_dot[tid(t)], nullptr) << type_name(t);
    EXPECT_NE(simd_->vec_dot[tid(t)], scalar_->vec_dot[tid(t)]) << type_name(t) << " " << isa_name(simd_->isa);
    EXPECT_NE(simd_->gemm[tid(t)], nullptr) << type_name(t) << " " << isa_name(simd_->isa);
    const Isa isa = GetParam();
    if (isa == Isa::dotprod) {
      const KernelTable* neon = kernel_table(Isa::neon);
      EXPECT_NE(simd_->vec_dot[tid(t)], neon->vec_dot[tid(t)]) << type_name(t);
      EXPECT_NE(simd_->gemm[tid(t)], neon->gemm[tid(t)]) << type_name(t);
    }
    if (isa == Isa::i8mm) {
      const KernelTable* dotprod = kernel_table(Isa::dotprod);
      EXPECT_EQ(simd_->vec_dot[tid(t)], dotprod->vec_dot[tid(t)]) << type_name(t);
      EXPECT_NE(simd_->gemm[tid(t)], dotprod->gemm[tid(t)]) << type_name(t);
    }
  }
}

TEST_P(LowbitSimd, VecDotMatchesScalar) {
  Gen g(5);
  for (Type t : kLowbitTypes) {
    const Type at = act_type(t);
    const int64_t u = block_size(t);
    for (int64_t k : {1, 2, 3, 4, 5, 7, 8, 9, 13, 17, 90}) {
      const int64_t n = k * u;
      for (Fill wf : kFills) {
        for (ActFill af : {ActFill::random, ActFill::min_int8, ActFill::max_int8}) {
          for (size_t off : {0, 1, 7}) {
            Buf w(row_bytes(t, n), off), a(row_bytes(at, n), (off * 3) % 8);
            gen_weights(g, t, w.data(), n, wf);
            gen_acts(g, at, a.data(), n, af);
            check_dot(t, w.data(), a.data(), n,
                      "fill " + std::to_string(static_cast<int>(wf)) + " act " + std::to_string(static_cast<int>(af)));
          }
        }
      }
    }
  }
}

// gemm_rows equals the table's vec_dot bit for bit for every output, for 1..9 rows x 1..9
// activation rows, padded (odd) strides and misaligned buffers; y's padding is left untouched.
void check_gemm(const KernelTable* t, Type wt, int64_t n, int64_t nr, int64_t nc, size_t pad, size_t off, Gen& g,
                Fill wf, ActFill af) {
  const Type at = act_type(wt);
  const size_t wrb = row_bytes(wt, n) + pad, arb = row_bytes(at, n) + pad;
  Buf wb(wrb * static_cast<size_t>(nr), off), ab(arb * static_cast<size_t>(nc), (off * 5 + 3) % 8);
  for (int64_t r = 0; r < nr; ++r) gen_weights(g, wt, wb.data() + r * wrb, n, wf);
  for (int64_t c = 0; c < nc; ++c) gen_acts(g, at, ab.data() + c * arb, n, af);
  const int64_t ys = nr + 3;
  const float sentinel = -12345.5f;
  std::vector<float> y(static_cast<size_t>(ys * nc), sentinel);
  gemm_rows(*t, wt, n, wb.data(), wrb, nr, ab.data(), arb, nc, y.data(), ys);
  int bad = 0;
  for (int64_t c = 0; c < nc; ++c) {
    for (int64_t r = 0; r < ys; ++r) {
      const float got = y[static_cast<size_t>(c * ys + r)];
      if (r >= nr) {
        EXPECT_EQ(bits(got), bits(sentinel)) << "gemm wrote outside its outputs";
        continue;
      }
      const float want = t->vec_dot[tid(wt)](n, wb.data() + r * wrb, ab.data() + c * arb);
      if (bits(got) != bits(want) && bad++ < 3) {
        ADD_FAILURE() << type_name(wt) << " " << isa_name(t->isa) << " gemm != vec_dot at row " << r << " act " << c
                      << " of " << nr << "x" << nc << ", n=" << n << ": " << got << " vs " << want;
      }
    }
  }
}

TEST_P(LowbitSimd, GemmMatchesVecDotBitForBit) {
  Gen g(21);
  for (Type t : kLowbitTypes) {
    const int64_t u = block_size(t);
    for (int64_t n : {u, 2 * u, 3 * u, 5 * u, 9 * u}) {
      for (int64_t nr = 1; nr <= 9; ++nr) {
        for (int64_t nc = 1; nc <= 9; ++nc) {
          const size_t pad = static_cast<size_t>((nr + nc) % 3) * 7;
          check_gemm(simd_, t, n, nr, nc, pad, static_cast<size_t>(nr % 8), g, Fill::random, ActFill::random);
        }
      }
    }
    for (Fill wf : kFills) {
      for (ActFill af : {ActFill::random, ActFill::min_int8, ActFill::max_int8}) {
        check_gemm(simd_, t, 13 * u, 6, 5, 1, 3, g, wf, af);
      }
    }
    check_gemm(simd_, t, 90 * 32 / u * u, 37, 23, 0, 0, g, Fill::random, ActFill::random);  // a model's shape
  }
}

// Rows placed against inaccessible pages: one byte read outside a row crashes the test.
TEST_P(LowbitSimd, StaysInsideRows) {
  Gen g(11);
  for (Type t : kLowbitTypes) {
    const Type at = act_type(t);
    const int64_t u = block_size(t);
    for (int64_t n : {u, 2 * u, 3 * u, 5 * u, 8 * u, 9 * u, 17 * u, 33 * u}) {
      const size_t wbytes = row_bytes(t, n), abytes = row_bytes(at, n);
      Guarded gw(wbytes), ga(abytes);
      ASSERT_TRUE(gw.ok() && ga.ok());
      for (int where = 0; where < 2; ++where) {
        uint8_t* w = where ? gw.at_end(wbytes) : gw.at_start();
        uint8_t* a = where ? ga.at_end(abytes) : ga.at_start();
        gen_weights(g, t, w, n, Fill::random);
        gen_acts(g, at, a, n, ActFill::random);
        check_dot(t, w, a, n, where ? "row at page end" : "row at page start");
        std::vector<float> y(static_cast<size_t>(n));
        simd_->dequantize[tid(t)](w, y.data(), n);
      }
    }
  }
}

// Matrix-vector products over a matrix whose last row ends at an inaccessible page (prefetches
// run past it): each output equals the table's vec_dot bit for bit.
TEST_P(LowbitSimd, MatrixVectorAtTheEndOfAMapping) {
  Gen g(13);
  for (Type t : kLowbitTypes) {
    const Type at = act_type(t);
    const int64_t u = block_size(t);
    for (int64_t n : {u, 8 * u, 33 * u}) {
      for (int64_t nr : {1, 3, 9, 17}) {
        const size_t wrb = row_bytes(t, n), abytes = row_bytes(at, n);
        Guarded gw(wrb * static_cast<size_t>(nr)), ga(abytes);
        ASSERT_TRUE(gw.ok() && ga.ok());
        uint8_t* w = gw.at_end(wrb * static_cast<size_t>(nr));
        uint8_t* a = ga.at_end(abytes);
        for (int64_t r = 0; r < nr; ++r) gen_weights(g, t, w + r * wrb, n, Fill::random);
        gen_acts(g, at, a, n, ActFill::random);
        std::vector<float> y(static_cast<size_t>(nr));
        gemm_rows(*simd_, t, n, w, wrb, nr, a, abytes, 1, y.data(), nr);
        for (int64_t r = 0; r < nr; ++r) {
          EXPECT_EQ(bits(y[static_cast<size_t>(r)]), bits(simd_->vec_dot[tid(t)](n, w + r * wrb, a)))
              << type_name(t) << " " << isa_name(simd_->isa) << " row " << r << " of " << nr << ", n=" << n;
        }
      }
    }
  }
}


// Without importance the quantizers write llama.cpp's bytes (quantize_chunk without an imatrix).
TEST(LowbitLlama, QuantizeWithoutImportanceMatchesLlama) {
  ASSERT_EQ(refs().error, "");
  for (const QuantCase& c : refs().quants) {
    const size_t rb = row_bytes(c.t, c.n);
    std::vector<uint8_t> q(rb);
    for (int64_t r = 0; r < c.rows; ++r) {
      quantize_row_ref(c.t, c.x.data() + r * c.n, q.data(), c.n);
      EXPECT_EQ(std::memcmp(q.data(), c.q.data() + r * rb, rb), 0) << type_name(c.t) << " row " << r;
    }
  }
}

// Squared errors of a quantized row weighted by w (nullptr: 1).
double weighted_sq_error(Type t, const float* x, const uint8_t* q, int64_t n, const float* w) {
  std::vector<float> y(static_cast<size_t>(n));
  dequantize_row(t, q, y.data(), n);
  double e = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double r = static_cast<double>(y[static_cast<size_t>(i)]) - x[i];
    e += (w ? w[i] : 1.0) * r * r;
  }
  return e;
}

// With llama.cpp's skewed importance: our weighted quantization against llama.cpp's (which
// ignores the imatrix for these types). Under the weights it minimises (importance * sqrt(sigma2 +
// x^2)) it is never worse on a row beyond fp16 rounding of the scale; under the importance alone
// (the expected squared output error) it is better in total.
TEST(LowbitLlama, ImportanceBeatsLlamaWeightedError) {
  ASSERT_EQ(refs().error, "");
  for (const QuantCase& c : refs().quants) {
    const size_t rb = row_bytes(c.t, c.n);
    std::vector<uint8_t> q(rb);
    double ours = 0, theirs = 0;
    for (int64_t r = 0; r < c.rows; ++r) {
      const float* x = c.x.data() + r * c.n;
      quantize_row_ref(c.t, x, q.data(), c.n, c.imp.data());
      const int64_t group = c.t == Type::TQ1_0 || c.t == Type::TQ2_0 ? QK_K : c.n;  // sigma2's span
      std::vector<float> w(static_cast<size_t>(c.n));
      for (int64_t g = 0; g < c.n; g += group) {
        double s2 = 0;
        for (int64_t i = g; i < g + group; ++i) s2 += static_cast<double>(x[i]) * x[i];
        const float sigma2 = static_cast<float>(s2 / static_cast<double>(group));
        for (int64_t i = g; i < g + group; ++i) w[i] = c.imp[i] * std::sqrt(sigma2 + x[i] * x[i]);
      }
      const double mine_w = weighted_sq_error(c.t, x, q.data(), c.n, w.data());
      const double theirs_w = weighted_sq_error(c.t, x, c.q.data() + r * rb, c.n, w.data());
      EXPECT_LE(mine_w, theirs_w * 1.002 + 1e-30) << type_name(c.t) << " row " << r;
      ours += weighted_sq_error(c.t, x, q.data(), c.n, c.imp.data());
      theirs += weighted_sq_error(c.t, x, c.q.data() + r * rb, c.n, c.imp.data());
    }
    EXPECT_LT(ours, theirs) << type_name(c.t);
    std::printf("[ lowbit   ] %s: importance-weighted RMSE ours / llama.cpp's = %.4f\n", type_name(c.t),
                std::sqrt(ours / theirs));
  }
}

// ---------------------------------------------------------------------------------------------
// Quantizers on rows made here.

std::vector<float> gaussian_row(Gen& g, int64_t n, float scale) {
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = nd(g.rng);
  return x;
}

// Relative RMSE of the round trip on Gaussian rows is within the format's bound, and with a
// skewed importance the importance-weighted error is lower than without it.
TEST(LowbitQuantize, RoundTripAndImportance) {
  Gen g(31);
  const int64_t n = 1024;
  for (Type t : kLowbitTypes) {
    const double bound = t == Type::TQ1_0 || t == Type::TQ2_0 ? 0.9 : 0.2;  // rms error / rms x
    double with = 0, without = 0;
    for (int row = 0; row < 6; ++row) {
      const float scale = std::pow(10.0f, g.uni(-4.0f, 2.0f));
      const std::vector<float> x = gaussian_row(g, n, scale);
      std::vector<float> imp(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) imp[static_cast<size_t>(i)] = (i % 5 == 0) ? 100.0f : g.uni(0.0f, 0.05f);
      std::vector<uint8_t> q0(row_bytes(t, n)), q1(row_bytes(t, n));
      quantize_row_ref(t, x.data(), q0.data(), n);
      quantize_row_ref(t, x.data(), q1.data(), n, imp.data());
      double sx = 0;
      for (float v : x) sx += static_cast<double>(v) * v;
      const double rel = std::sqrt(weighted_sq_error(t, x.data(), q0.data(), n, nullptr) / sx);
      EXPECT_LE(rel, bound) << type_name(t) << " row " << row;
      EXPECT_GT(rel, 0.0) << type_name(t) << " row " << row << ": a lossless round trip of Gaussian data?";
      without += weighted_sq_error(t, x.data(), q0.data(), n, imp.data()) / sx;
      with += weighted_sq_error(t, x.data(), q1.data(), n, imp.data()) / sx;
    }
    EXPECT_LT(with, 0.95 * without) << type_name(t);
  }
}

// The same bytes every time and from concurrent threads; zero rows give zeros; the ternary types
// give only -d, 0, d.
TEST(LowbitQuantize, DeterministicZeroAndTernary) {
  Gen g(37);
  const int64_t n = 768;
  for (Type t : kLowbitTypes) {
    const std::vector<float> x = gaussian_row(g, n, 0.3f);
    std::vector<float> imp(static_cast<size_t>(n));
    for (auto& v : imp) v = g.uni(0.0f, 2.0f);
    std::vector<uint8_t> a(row_bytes(t, n)), b(row_bytes(t, n)), c(row_bytes(t, n));
    quantize_row_ref(t, x.data(), a.data(), n, imp.data());
    std::thread th([&] { quantize_row_ref(t, x.data(), c.data(), n, imp.data()); });
    quantize_row_ref(t, x.data(), b.data(), n, imp.data());
    th.join();
    EXPECT_EQ(a, b) << type_name(t);
    EXPECT_EQ(a, c) << type_name(t);

    const std::vector<float> zero(static_cast<size_t>(n), 0.0f);
    std::vector<float> y(static_cast<size_t>(n), 1.0f);
    for (const float* im : {static_cast<const float*>(nullptr), static_cast<const float*>(imp.data())}) {
      quantize_row_ref(t, zero.data(), a.data(), n, im);
      dequantize_row(t, a.data(), y.data(), n);
      for (float v : y) ASSERT_EQ(v, 0.0f) << type_name(t);
    }
    if (t == Type::TQ1_0 || t == Type::TQ2_0) {
      quantize_row_ref(t, x.data(), a.data(), n, imp.data());
      dequantize_row(t, a.data(), y.data(), n);
      for (int64_t b0 = 0; b0 < n; b0 += QK_K) {
        float d = 0;
        for (int64_t i = b0; i < b0 + QK_K; ++i) d = std::max(d, std::fabs(y[static_cast<size_t>(i)]));
        EXPECT_GT(d, 0.0f);
        for (int64_t i = b0; i < b0 + QK_K; ++i) {
          const float v = y[static_cast<size_t>(i)];
          EXPECT_TRUE(v == 0.0f || v == d || v == -d) << type_name(t) << " element " << i << " = " << v;
        }
      }
    }
  }
}

// Bad input is an Error naming the problem: a NaN or infinite weight, a negative or NaN
// importance; a row length not a multiple of the block.
TEST(LowbitQuantize, BadInputIsAnError) {
  for (Type t : kLowbitTypes) {
    const int64_t n = block_size(t) * 2;
    std::vector<float> x(static_cast<size_t>(n), 0.5f), imp(static_cast<size_t>(n), 1.0f);
    std::vector<uint8_t> q(row_bytes(t, n));
    x[3] = std::nanf("");
    EXPECT_THROW(quantize_row_ref(t, x.data(), q.data(), n), Error) << type_name(t);
    x[3] = INFINITY;
    EXPECT_THROW(quantize_row_ref(t, x.data(), q.data(), n, imp.data()), Error) << type_name(t);
    x[3] = 0.5f;
    imp[5] = -1.0f;
    EXPECT_THROW(quantize_row_ref(t, x.data(), q.data(), n, imp.data()), Error) << type_name(t);
    imp[5] = std::nanf("");
    EXPECT_THROW(quantize_row_ref(t, x.data(), q.data(), n, imp.data()), Error) << type_name(t);
    EXPECT_THROW(quantize_row_ref(t, x.data(), q.data(), n - 1), Error) << type_name(t);
    try {
      x[3] = std::nanf("");
      quantize_row_ref(t, x.data(), q.data(), n);
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("x[3]"), std::string::npos) << e.what();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Isas, LowbitSimd, ::testing::ValuesIn(kSimdIsas),
                         [](const ::testing::TestParamInfo<Isa>& p) { return std::string(isa_name(p.param)); });

}  // namespace
}  // namespace les
