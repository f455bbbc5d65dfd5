// IQ3_XXS and IQ3_S: the scalar reference against llama.cpp's results (tests/data/quant/
// iq3_ref.bin, made by make_refs_iq3.cpp), every SIMD table this CPU has against the scalar one
// (vec_dot within float rounding, gemm bit-identical to the same table's vec_dot, rows at the end
// of a mapped page), and the quantizers (error against llama.cpp's on the same rows, importance,
// determinism, errors).

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
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

constexpr Type kIq3Types[] = {Type::IQ3_XXS, Type::IQ3_S};
constexpr size_t kQ8KBytes = sizeof(block_q8_K);

int tid(Type t) { return static_cast<int>(t); }
size_t block_bytes(Type t) { return t == Type::IQ3_XXS ? sizeof(block_iq3_xxs) : sizeof(block_iq3_s); }
int grid_size(Type t) { return t == Type::IQ3_XXS ? 256 : 512; }

// ---------------------------------------------------------------------------------------------
// The reference file.

struct Reader {
  std::vector<uint8_t> bytes;
  size_t pos = 0;
  bool ok = true;
  void take(void* p, size_t n) {
    if (pos + n > bytes.size()) {
      ok = false;
      std::memset(p, 0, n);
      return;
    }
    std::memcpy(p, bytes.data() + pos, n);
    pos += n;
  }
  uint32_t u32() {
    uint32_t v;
    take(&v, 4);
    return v;
  }
  std::vector<uint8_t> raw(size_t n) {
    std::vector<uint8_t> v(ok && pos + n <= bytes.size() ? n : 0);
    if (v.size() != n) ok = false;
    if (!v.empty()) take(v.data(), n);
    return v;
  }
};

struct RefDot {
  uint32_t first, blocks;
  float value;
};
struct RefType {
  Type type;
  uint32_t n_blk = 0;
  std::vector<uint8_t> blocks;
  std::vector<float> deq;
  std::vector<RefDot> dots;
  std::vector<uint8_t> quant_imp, quant_plain;  // llama.cpp's quantization of the rows
};
struct RefFile {
  std::vector<uint8_t> acts;  // Q8_K blocks
  uint32_t n_act = 0;
  RefType types[2];
  uint32_t rows = 0, cols = 0;
  std::vector<float> x, imp;
  bool ok = false;
};

const RefFile& ref_file() {
  static const RefFile f = [] {
    RefFile r;
    Reader in;
    std::ifstream s(test::source_dir() + "/tests/data/quant/iq3_ref.bin", std::ios::binary);
    in.bytes.assign(std::istreambuf_iterator<char>(s), std::istreambuf_iterator<char>());
    char magic[8];
    in.take(magic, 8);
    if (!in.ok || std::memcmp(magic, "IQ3REF1", 8) != 0) return r;
    r.n_act = in.u32();
    r.acts = in.raw(r.n_act * kQ8KBytes);
    for (RefType& t : r.types) {
      t.type = static_cast<Type>(in.u32());
      t.n_blk = in.u32();
      t.blocks = in.raw(t.n_blk * block_bytes(t.type));
      t.deq.resize(t.n_blk * QK_K);
      in.take(t.deq.data(), t.deq.size() * 4);
      const uint32_t n_dot = in.u32();
      for (uint32_t i = 0; i < n_dot && in.ok; ++i) {
        RefDot d;
        d.first = in.u32();
        d.blocks = in.u32();
        in.take(&d.value, 4);
        t.dots.push_back(d);
      }
    }
    r.rows = in.u32();
    r.cols = in.u32();
    for (auto* v : {&r.x, &r.imp}) {
      v->resize(r.rows * r.cols);
      for (float& f : *v) {
        uint16_t h;
        in.take(&h, 2);
        f = fp16_to_f32(h);
      }
    }
    for (int k = 0; k < 2; ++k) {
      const auto type = static_cast<Type>(in.u32());
      RefType& t = r.types[k];
      if (type != t.type) return r;
      const size_t bytes = r.rows * (r.cols / QK_K) * block_bytes(type);
      t.quant_imp = in.raw(bytes);
      t.quant_plain = in.raw(bytes);
    }
    r.ok = in.ok && in.pos == in.bytes.size() && r.types[0].type == Type::IQ3_XXS && r.types[1].type == Type::IQ3_S;
    return r;
  }();
  return f;
}

// sum |w_i * a_i| over a row, from dequantized values (the scale of a dot product's rounding).
double abs_dot(Type t, const uint8_t* w, const uint8_t* a, int64_t n) {
  std::vector<float> wf(n);
  kernel_table(Isa::scalar)->dequantize[tid(t)](w, wf.data(), n);
  double s = 0;
  for (int64_t b = 0; b < n / QK_K; ++b) {
    block_q8_K q;
    std::memcpy(&q, a + b * kQ8KBytes, kQ8KBytes);
    for (int i = 0; i < QK_K; ++i) s += std::fabs(static_cast<double>(wf[b * QK_K + i]) * q.d * q.qs[i]);
  }
  return s;
}

TEST(QuantIq3, ReferenceFileReads) {
  const RefFile& f = ref_file();
  ASSERT_TRUE(f.ok) << "tests/data/quant/iq3_ref.bin is missing or malformed (tests/data/quant/README.md)";
  EXPECT_GE(f.n_act, f.types[0].n_blk);
  // The generator covers every codebook index of both types.
  for (const RefType& t : f.types) {
    std::vector<bool> seen(grid_size(t.type));
    for (uint32_t b = 0; b < t.n_blk; ++b) {
      const uint8_t* p = t.blocks.data() + b * block_bytes(t.type) + 2;
      for (int g = 0; g < 64; ++g) seen[t.type == Type::IQ3_XXS ? p[g] : p[g] | (((p[64 + g / 8] >> (g % 8)) & 1) << 8)] = true;
    }
    EXPECT_EQ(std::count(seen.begin(), seen.end(), true), grid_size(t.type)) << type_name(t.type);
  }
}

// Dequantization: the same floats as llama.cpp's to_float, bit for bit (and at every ISA).
TEST(QuantIq3, DequantizeMatchesLlamaCpp) {
  const RefFile& f = ref_file();
  ASSERT_TRUE(f.ok);
  for (int i = 0; i < kNumIsa; ++i) {
    const auto isa = static_cast<Isa>(i);
    const KernelTable* kt = kernel_table(isa);
    if (!kt || !isa_supported(isa)) continue;
    for (const RefType& t : f.types) {
      std::vector<float> y(t.deq.size());
      kt->dequantize[tid(t.type)](t.blocks.data(), y.data(), static_cast<int64_t>(y.size()));
      int bad = 0;
      for (size_t j = 0; j < y.size(); ++j) {
        if (std::memcmp(&y[j], &t.deq[j], 4) != 0 && ++bad <= 3) {
          ADD_FAILURE() << isa_name(isa) << " " << type_name(t.type) << " element " << j << ": " << y[j]
                        << " vs llama.cpp " << t.deq[j];
        }
      }
      EXPECT_EQ(bad, 0);
    }
  }
}

// vec_dot of every table this CPU runs against llama.cpp's, within 1e-5 of sum |w a|.
TEST(QuantIq3, VecDotMatchesLlamaCpp) {
  const RefFile& f = ref_file();
  ASSERT_TRUE(f.ok);
  for (int i = 0; i < kNumIsa; ++i) {
    const auto isa = static_cast<Isa>(i);
    const KernelTable* kt = kernel_table(isa);
    if (!kt || !isa_supported(isa)) continue;
    for (const RefType& t : f.types) {
      double worst = 0;
      for (const RefDot& d : t.dots) {
        const uint8_t* w = t.blocks.data() + d.first * block_bytes(t.type);
        const int64_t n = d.blocks * QK_K;
        const float got = kt->vec_dot[tid(t.type)](n, w, f.acts.data());
        const double scale = abs_dot(t.type, w, f.acts.data(), n);
        const double err = std::fabs(static_cast<double>(got) - d.value);
        EXPECT_LE(err, 1e-5 * scale + 1e-30) << isa_name(isa) << " " << type_name(t.type) << " blocks " << d.first
                                              << "+" << d.blocks << ": " << got << " vs llama.cpp " << d.value;
        if (scale > 0) worst = std::max(worst, err / scale);
      }
      char buf[32];
      std::snprintf(buf, sizeof(buf), "%.3g", worst);
      RecordProperty(std::string(isa_name(isa)) + "_" + type_name(t.type) + "_max_rel_err", buf);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// SIMD tables against the scalar one.

struct Gen {
  std::mt19937_64 rng;
  explicit Gen(uint64_t seed) : rng(seed) {}
  uint8_t byte() { return static_cast<uint8_t>(rng() & 0xff); }
  float uni(float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(rng); }
  int irange(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); }
};

enum class Fill { random, max_codes, min_codes, extreme_d, zero_scales };

// A row of n weights: random bytes (every field of these types accepts any bits) with a finite d;
// or every index / scale / sign at an extreme.
void gen_weights(Gen& g, Type t, uint8_t* w, int64_t n, Fill fill) {
  const size_t bsz = block_bytes(t);
  for (int64_t b = 0; b < n / QK_K; ++b) {
    uint8_t* p = w + b * bsz;
    for (size_t i = 0; i < bsz; ++i) p[i] = g.byte();
    half_bits d = f32_to_fp16(g.uni(-0.05f, 0.05f));
    if (fill == Fill::extreme_d) d = (b % 3 == 0) ? 0x7bff : (b % 3 == 1) ? 0xfbff : 0x0001;
    std::memcpy(p, &d, 2);
    if (fill == Fill::max_codes || fill == Fill::min_codes) {
      const uint8_t v = fill == Fill::max_codes ? 0xff : 0x00;
      std::memset(p + 2, v, bsz - 2);  // indices, 9th bits, signs and scales all set or all clear
    }
    if (fill == Fill::zero_scales) {
      if (t == Type::IQ3_XXS) {
        for (int ib = 0; ib < 8; ++ib) p[2 + 64 + 4 * ib + 3] &= 0x0f;
      } else {
        std::memset(p + 2 + 64 + 8 + 32, 0, 4);
      }
    }
  }
}

enum class ActFill { random, max, min, mixed_extremes };

// Q8_K activations: random d and qs in [-127, 127] (-128 never comes from the quantizer, but the
// kernels must not care), or all at an extreme.
void gen_acts(Gen& g, uint8_t* a, int64_t n, ActFill fill) {
  for (int64_t b = 0; b < n / QK_K; ++b) {
    block_q8_K q;
    q.d = g.uni(0.001f, 2.0f);
    for (int i = 0; i < QK_K; ++i) {
      int v = g.irange(-127, 127);
      if (fill == ActFill::max) v = 127;
      if (fill == ActFill::min) v = -128;
      if (fill == ActFill::mixed_extremes) v = g.irange(0, 1) ? 127 : -128;
      q.qs[i] = static_cast<int8_t>(v);
    }
    for (int j = 0; j < QK_K / 16; ++j) {
      int s = 0;
      for (int i = 0; i < 16; ++i) s += q.qs[16 * j + i];
      q.bsums[j] = static_cast<int16_t>(s);
    }
    std::memcpy(a + b * kQ8KBytes, &q, kQ8KBytes);
  }
}

class QuantIq3Simd : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (!isa_supported(GetParam())) LES_SKIP_CPU(isa_name(GetParam()) << ": not supported by this CPU");
    simd_ = kernel_table(GetParam());
    if (!simd_) LES_SKIP_CPU(isa_name(GetParam()) << ": kernels not compiled for this architecture");
    scalar_ = kernel_table(Isa::scalar);
    ASSERT_NE(scalar_, nullptr);
  }
  // The SIMD vec_dot within float rounding of the scalar one: both sum exact integers per block,
  // only the float accumulation may differ.
  void check_dot(Type t, const uint8_t* w, const uint8_t* a, int64_t n, const char* what) {
    const float want = scalar_->vec_dot[tid(t)](n, w, a);
    const float got = simd_->vec_dot[tid(t)](n, w, a);
    const double tol = 4e-7 * static_cast<double>(n / QK_K + 1) * abs_dot(t, w, a, n);
    if (std::isfinite(want)) {
      EXPECT_LE(std::fabs(static_cast<double>(got) - want), tol)
          << type_name(t) << " n=" << n << " " << what << ": " << got << " vs scalar " << want;
    } else {
      EXPECT_EQ(std::isnan(got), std::isnan(want)) << type_name(t) << " " << what;
    }
  }
  const KernelTable* scalar_ = nullptr;
  const KernelTable* simd_ = nullptr;
};

TEST_P(QuantIq3Simd, VecDotMatchesScalar) {
  Gen g(3);
  for (Type t : kIq3Types) {
    for (int64_t blocks : {1, 2, 3, 7, 8, 9, 16}) {
      const int64_t n = blocks * QK_K;
      for (Fill wf : {Fill::random, Fill::max_codes, Fill::min_codes, Fill::extreme_d, Fill::zero_scales}) {
        for (ActFill af : {ActFill::random, ActFill::max, ActFill::min, ActFill::mixed_extremes}) {
          for (size_t off : {0, 1, 3}) {
            std::vector<uint8_t> wb(blocks * block_bytes(t) + off), ab(blocks * kQ8KBytes + off);
            gen_weights(g, t, wb.data() + off, n, wf);
            gen_acts(g, ab.data() + off, n, af);
            check_dot(t, wb.data() + off, ab.data() + off, n, "random/adversarial");
          }
        }
      }
    }
  }
  // Every codebook index in every group position, with every sign pattern.
  for (Type t : kIq3Types) {
    const int64_t n = (grid_size(t) / 64 + 1) * QK_K;
    std::vector<uint8_t> wb(n / QK_K * block_bytes(t)), ab(n / QK_K * kQ8KBytes);
    gen_weights(g, t, wb.data(), n, Fill::random);
    for (int64_t b = 0; b < n / QK_K; ++b) {
      uint8_t* p = wb.data() + b * block_bytes(t) + 2;
      for (int k = 0; k < 64; ++k) {
        const int idx = static_cast<int>((b * 64 + k + 17 * b) % grid_size(t));
        p[k] = static_cast<uint8_t>(idx & 255);
        if (t == Type::IQ3_S) p[64 + k / 8] = static_cast<uint8_t>((p[64 + k / 8] & ~(1 << (k % 8))) | ((idx >> 8) << (k % 8)));
      }
    }
    gen_acts(g, ab.data(), n, ActFill::random);
    check_dot(t, wb.data(), ab.data(), n, "every index");
  }
}

// gemm must give the vec_dot of its own table bit for bit, for any tile shape.
TEST_P(QuantIq3Simd, GemmMatchesVecDotBitForBit) {
  Gen g(5);
  for (Type t : kIq3Types) {
    for (int64_t blocks : {1, 3, 8}) {
      const int64_t n = blocks * QK_K;
      for (int nr = 1; nr <= 9; ++nr) {
        for (int nc = 1; nc <= 9; ++nc) {
          const size_t w_stride = blocks * block_bytes(t) + static_cast<size_t>(nr % 3);  // odd strides
          const size_t a_stride = blocks * kQ8KBytes + static_cast<size_t>(nc % 2) * 5;
          const int64_t y_stride = nr + 2;
          std::vector<uint8_t> wb(w_stride * nr + 1), ab(a_stride * nc + 3);
          uint8_t* w = wb.data() + 1;  // misaligned
          uint8_t* a = ab.data() + 3;
          const Fill wf = (nr + nc) % 5 == 0 ? Fill::max_codes : Fill::random;
          for (int r = 0; r < nr; ++r) gen_weights(g, t, w + r * w_stride, n, wf);
          for (int c = 0; c < nc; ++c) gen_acts(g, a + c * a_stride, n, (nr * nc) % 7 == 0 ? ActFill::min : ActFill::random);
          std::vector<float> y(static_cast<size_t>(y_stride) * nc, -1.0f);
          gemm_rows(*simd_, t, n, w, w_stride, nr, a, a_stride, nc, y.data(), y_stride);
          for (int c = 0; c < nc; ++c) {
            for (int r = 0; r < nr; ++r) {
              const float want = simd_->vec_dot[tid(t)](n, w + r * w_stride, a + c * a_stride);
              const float got = y[c * y_stride + r];
              ASSERT_EQ(std::memcmp(&want, &got, 4), 0) << type_name(t) << " nr=" << nr << " nc=" << nc << " r=" << r
                                                        << " c=" << c << ": " << got << " vs vec_dot " << want;
            }
            for (int64_t r = nr; r < y_stride; ++r) EXPECT_EQ(y[c * y_stride + r], -1.0f) << "wrote outside its rows";
          }
        }
      }
    }
  }
}

// A buffer between two inaccessible pages (reads past a row fault).
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

// Rows that end (or start) exactly at a page boundary: no kernel reads past its row.
TEST_P(QuantIq3Simd, StaysInsideRows) {
  Gen g(11);
  for (Type t : kIq3Types) {
    for (int64_t blocks : {1, 2, 3, 5, 9, 17}) {
      const int64_t n = blocks * QK_K;
      const size_t wbytes = blocks * block_bytes(t), abytes = blocks * kQ8KBytes;
      for (int nr : {1, 4, 5}) {
        Guarded gw(wbytes * nr), ga(abytes * 3);
        ASSERT_TRUE(gw.ok() && ga.ok());
        for (int where = 0; where < 2; ++where) {
          uint8_t* w = where ? gw.at_end(wbytes * nr) : gw.at_start();
          uint8_t* a = where ? ga.at_end(abytes * 3) : ga.at_start();
          gen_weights(g, t, w, n * nr, Fill::random);
          gen_acts(g, a, n * 3, ActFill::random);
          check_dot(t, w + (nr - 1) * wbytes, a + 2 * abytes, n, where ? "row at page end" : "row at page start");
          std::vector<float> y(static_cast<size_t>(nr) * 3);
          gemm_rows(*simd_, t, n, w, wbytes, nr, a, abytes, 3, y.data(), nr);
          for (int c = 0; c < 3; ++c) {
            const float want = simd_->vec_dot[tid(t)](n, w + (nr - 1) * wbytes, a + c * abytes);
            EXPECT_EQ(y[c * nr + nr - 1], want);
          }
          std::vector<float> deq(n);
          simd_->dequantize[tid(t)](w + (nr - 1) * wbytes, deq.data(), n);
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Isas, QuantIq3Simd,
                         ::testing::Values(Isa::avx2, Isa::avx_vnni, Isa::avx512, Isa::neon, Isa::dotprod, Isa::i8mm),
                         [](const ::testing::TestParamInfo<Isa>& info) { return std::string(isa_name(info.param)); });

#if defined(__aarch64__)
// The aarch64 tables hold kernels of their own for these types, so the cases above test them and
// not entries inherited from the ISA below: neon and dotprod a vec_dot and a gemm each, i8mm an
// SMMLA gemm over the dotprod vec_dot it keeps.
TEST(QuantIq3SimdArm, ArmTablesHaveTheirOwnKernels) {
  const KernelTable* scalar = kernel_table(Isa::scalar);
  const KernelTable* neon = kernel_table(Isa::neon);
  const KernelTable* dotprod = kernel_table(Isa::dotprod);
  const KernelTable* i8mm = kernel_table(Isa::i8mm);
  ASSERT_TRUE(scalar && neon && dotprod && i8mm);
  for (Type t : kIq3Types) {
    const int k = tid(t);
    EXPECT_NE(neon->vec_dot[k], scalar->vec_dot[k]) << type_name(t);
    EXPECT_NE(neon->gemm[k], nullptr) << type_name(t);
    EXPECT_NE(dotprod->vec_dot[k], neon->vec_dot[k]) << type_name(t);
    EXPECT_NE(dotprod->gemm[k], nullptr) << type_name(t);
    EXPECT_NE(dotprod->gemm[k], neon->gemm[k]) << type_name(t);
    EXPECT_EQ(i8mm->vec_dot[k], dotprod->vec_dot[k]) << type_name(t);
    EXPECT_NE(i8mm->gemm[k], nullptr) << type_name(t);
    EXPECT_NE(i8mm->gemm[k], dotprod->gemm[k]) << type_name(t);
  }
}
#endif

// ---------------------------------------------------------------------------------------------
// Quantizers.

// sum_i imp_i (x_i - y_i)^2 with imp (or 1 where imp is null).
double weighted_sq_error(const float* x, const float* y, const float* imp, int64_t n) {
  double e = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(x[i]) - y[i];
    e += (imp ? imp[i] : 1.0) * d * d;
  }
  return e;
}

std::vector<float> round_trip(Type t, const float* x, int64_t n, const float* imp) {
  std::vector<uint8_t> q(n / QK_K * block_bytes(t));
  quantize_row_ref(t, x, q.data(), n, imp);
  std::vector<float> y(n);
  dequantize_row(t, q.data(), y.data(), n);
  return y;
}

// Our quantizer's weighted error on llama.cpp's rows is no worse than 1.05x llama.cpp's own (with
// the importance, weighted by it; without, weighted by x^2, what both minimise then).
TEST(QuantIq3, QuantizerErrorAgainstLlamaCpp) {
  const RefFile& f = ref_file();
  ASSERT_TRUE(f.ok);
  const int64_t n = f.cols;
  for (const RefType& t : f.types) {
    for (bool with_imp : {true, false}) {
      const std::vector<uint8_t>& theirs = with_imp ? t.quant_imp : t.quant_plain;
      double ours_total = 0, theirs_total = 0;
      for (uint32_t r = 0; r < f.rows; ++r) {
        const float* x = f.x.data() + r * n;
        const float* imp = f.imp.data() + r * n;
        std::vector<float> w(n);
        for (int64_t i = 0; i < n; ++i) w[i] = with_imp ? imp[i] : x[i] * x[i];
        const std::vector<float> ours = round_trip(t.type, x, n, with_imp ? imp : nullptr);
        std::vector<float> ref(n);
        dequantize_row(t.type, theirs.data() + r * (n / QK_K) * block_bytes(t.type), ref.data(), n);
        const double eo = weighted_sq_error(x, ours.data(), w.data(), n);
        const double et = weighted_sq_error(x, ref.data(), w.data(), n);
        EXPECT_LE(eo, 1.10 * et) << type_name(t.type) << " row " << r << (with_imp ? " with" : " without")
                                 << " importance";
        ours_total += eo;
        theirs_total += et;
      }
      const double ratio = std::sqrt(ours_total / theirs_total);
      EXPECT_LE(ratio, 1.05) << type_name(t.type) << (with_imp ? " with" : " without") << " importance";
      RecordProperty(std::string(type_name(t.type)) + (with_imp ? "_rmse_ratio_imp" : "_rmse_ratio_plain"),
                     std::to_string(ratio));
      std::printf("%s %s importance: weighted RMSE ours / llama.cpp = %.4f\n", type_name(t.type),
                  with_imp ? "with" : "without", ratio);
    }
  }
}

// Round trip: the relative RMS error of a Gaussian row is that of a 3-bit codebook (bounded), and
// a row that is exactly representable comes back exactly.
TEST(QuantIq3, RoundTripBounded) {
  Gen g(21);
  const int64_t n = 4 * QK_K;
  std::vector<float> x(n);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (float scale : {1e-3f, 1.0f, 3e4f}) {
    for (float& v : x) v = scale * nd(g.rng);
    for (Type t : kIq3Types) {
      const std::vector<float> y = round_trip(t, x.data(), n, nullptr);
      const double rel = std::sqrt(weighted_sq_error(x.data(), y.data(), nullptr, n) /
                                   weighted_sq_error(x.data(), std::vector<float>(n).data(), nullptr, n));
      EXPECT_LT(rel, t == Type::IQ3_XXS ? 0.25 : 0.22) << type_name(t) << " scale " << scale;
      EXPECT_GT(rel, 0.01) << type_name(t) << " (a 3-bit type cannot be this exact on Gaussian data)";
    }
  }
  // Tiny values (super-scale near the fp16 subnormals) do not vanish.
  for (float& v : x) v = 1e-6f * nd(g.rng);
  for (Type t : kIq3Types) {
    const std::vector<float> y = round_trip(t, x.data(), n, nullptr);
    const double rel = std::sqrt(weighted_sq_error(x.data(), y.data(), nullptr, n) /
                                 weighted_sq_error(x.data(), std::vector<float>(n).data(), nullptr, n));
    EXPECT_LT(rel, 0.6) << type_name(t) << " at 1e-6";
  }
  // A zero super-block stays zero; a zero sub-block next to non-zero ones comes out at the
  // smallest magnitude of its codebook (the format has no zero), tiny next to the others.
  std::fill(x.begin(), x.end(), 0.0f);
  for (int i = 300; i < 600; ++i) x[i] = nd(g.rng);
  for (Type t : kIq3Types) {
    const std::vector<float> y = round_trip(t, x.data(), n, nullptr);
    for (int i = 0; i < 256; ++i) ASSERT_EQ(y[i], 0.0f) << type_name(t);
    for (int i = 768; i < n; ++i) ASSERT_EQ(y[i], 0.0f) << type_name(t);
    float mx = 0;
    for (int i = 300; i < 600; ++i) mx = std::max(mx, std::fabs(x[i]));
    for (int i = 640; i < 768; ++i) ASSERT_LE(std::fabs(y[i]), 0.05f * mx) << type_name(t) << " element " << i;
  }
  // A dequantized block quantizes back to itself up to the fp16 scale (IQ3_S: exactly representable).
  for (Type t : kIq3Types) {
    std::vector<uint8_t> q(n / QK_K * block_bytes(t));
    gen_weights(g, t, q.data(), n, Fill::random);
    for (int64_t b = 0; b < n / QK_K; ++b) {
      const half_bits d = f32_to_fp16(0.01f);
      std::memcpy(q.data() + b * block_bytes(t), &d, 2);
    }
    std::vector<float> src(n);
    dequantize_row(t, q.data(), src.data(), n);
    const std::vector<float> y = round_trip(t, src.data(), n, nullptr);
    const double rel = std::sqrt(weighted_sq_error(src.data(), y.data(), nullptr, n) /
                                 weighted_sq_error(src.data(), std::vector<float>(n).data(), nullptr, n));
    EXPECT_LT(rel, 0.05) << type_name(t) << ": a point of the format should come back (nearly) as it was";
  }
}

// Skewed importance: the importance-weighted error is lower when the quantizer is told it.
TEST(QuantIq3, ImportanceLowersWeightedError) {
  Gen g(31);
  const int64_t n = 8 * QK_K;
  std::vector<float> x(n), imp(n);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int64_t i = 0; i < n; ++i) {
    x[i] = nd(g.rng);
    imp[i] = (i % 7 == 0) ? 50.0f * g.uni(0.5f, 1.5f) : g.uni(0.0f, 0.1f);
  }
  for (Type t : kIq3Types) {
    const std::vector<float> with = round_trip(t, x.data(), n, imp.data());
    const std::vector<float> without = round_trip(t, x.data(), n, nullptr);
    const double ew = weighted_sq_error(x.data(), with.data(), imp.data(), n);
    const double eo = weighted_sq_error(x.data(), without.data(), imp.data(), n);
    EXPECT_LT(ew, 0.8 * eo) << type_name(t);
  }
}

// Same input, same bytes (also from several threads at once: the neighbour tables are built once).
TEST(QuantIq3, QuantizerDeterministic) {
  Gen g(41);
  const int64_t n = 2 * QK_K;
  std::vector<float> x(n), imp(n);
  for (int64_t i = 0; i < n; ++i) {
    x[i] = g.uni(-2.0f, 2.0f);
    imp[i] = g.uni(0.0f, 3.0f);
  }
  for (Type t : kIq3Types) {
    const size_t bytes = n / QK_K * block_bytes(t);
    std::vector<uint8_t> a(bytes), b(bytes, 0x5a);
    quantize_row_ref(t, x.data(), a.data(), n, imp.data());
    quantize_row_ref(t, x.data(), b.data(), n, imp.data());
    EXPECT_EQ(a, b) << type_name(t);
  }
}

// Bad input is refused with an error naming the problem.
TEST(QuantIq3, QuantizerRefusesBadInput) {
  const int64_t n = QK_K;
  std::vector<float> x(n, 1.0f), imp(n, 1.0f);
  std::vector<uint8_t> q(sizeof(block_iq3_s));
  for (Type t : kIq3Types) {
    imp[5] = std::nanf("");
    EXPECT_THROW(quantize_row_ref(t, x.data(), q.data(), n, imp.data()), Error) << type_name(t);
    imp[5] = -1.0f;
    EXPECT_THROW(quantize_row_ref(t, x.data(), q.data(), n, imp.data()), Error) << type_name(t);
    imp[5] = 1.0f;
    EXPECT_THROW(quantize_row_ref(t, x.data(), q.data(), n - 32, imp.data()), Error) << type_name(t);
    // Without importance IQ3 quantizes (llama.cpp's weights x^2).
    EXPECT_NO_THROW(quantize_row_ref(t, x.data(), q.data(), n, nullptr)) << type_name(t);
  }
}

}  // namespace
}  // namespace les
