// IQ2_XXS, IQ2_XS, IQ2_S: the scalar reference against llama.cpp (tests/data/quant/iq2_ref.bin,
// made by make_refs_iq2.cpp: dequantization bit for bit, dot products within float rounding), the
// kernels of every ISA this CPU has against the scalar table (dot products within float
// rounding, gemm bit-identical to the same table's vec_dot, no read outside a row), and the
// quantizers (error bounds, importance, determinism, errors, quality against llama.cpp's).

#include <gtest/gtest.h>
#include <sys/mman.h>
#if defined(__x86_64__)
#include <cpuid.h>
#endif
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <ostream>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>
#include <cstdio>

#include "les/quant/blocks.h"
#include "les/quant/iq2_common.h"
#include "les/quant/iq_grids.h"
#include "les/quant/kernels.h"
#include "les/quant/kernels_internal.h"
#include "les/quant/types.h"
#include "les/util/error.h"
#include "les/util/fp16.h"
#include "skip.h"
#include "test_util.h"

namespace les {
namespace {

constexpr Type kIq2Types[] = {Type::IQ2_XXS, Type::IQ2_XS, Type::IQ2_S};

int tid(Type t) { return static_cast<int>(t); }
uint32_t fbits(float f) { return f32_bits(f); }
size_t rbytes(Type t, int64_t n) { return row_bytes(t, n); }
int grid_size(Type t) { return t == Type::IQ2_XXS ? 256 : t == Type::IQ2_XS ? 512 : 1024; }

uint64_t fnv(const float* v, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t u = fbits(v[i]);
    for (int b = 0; b < 4; ++b) {
      h ^= (u >> (8 * b)) & 0xff;
      h *= 0x100000001b3ull;
    }
  }
  return h;
}

// ---------------------------------------------------------------------------------------------
// Independent reference: dequantized weights times dequantized activations, in double.

struct RefDot {
  double value;  // sum w_i a_i
  double mag;    // sum |w_i a_i|
};

RefDot ref_dot(Type t, const uint8_t* w, const uint8_t* a, int64_t n) {
  std::vector<float> wf(static_cast<size_t>(n));
  kernel_table(Isa::scalar)->dequantize[tid(t)](w, wf.data(), n);
  RefDot r{0, 0};
  for (int64_t b = 0; b < n / QK_K; ++b) {
    block_q8_K q;
    std::memcpy(&q, a + b * sizeof(block_q8_K), sizeof q);
    for (int j = 0; j < QK_K; ++j) {
      const double p = static_cast<double>(wf[b * QK_K + j]) * q.d * q.qs[j];
      r.value += p;
      r.mag += std::fabs(p);
    }
  }
  return r;
}

// Float rounding of a dot product over n elements whose products sum to mag in magnitude.
double tolerance(double mag) { return 1e-5 * mag + 1e-35; }

// ---------------------------------------------------------------------------------------------
// llama.cpp's results.

struct RefSection {
  Type type;
  int kind;
  int rows;
  int64_t n;
  std::vector<uint8_t> data;
};

std::vector<RefSection> load_refs() {
  const std::string path = test::source_dir() + "/tests/data/quant/iq2_ref.bin";
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << path;
  std::vector<uint8_t> all((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<RefSection> out;
  if (all.size() < 8 || std::memcmp(all.data(), "LESIQ2R1", 8) != 0) {
    ADD_FAILURE() << path << ": not an iq2 reference file";
    return out;
  }
  size_t pos = 8;
  while (pos + 16 <= all.size()) {
    uint32_t h[4];
    std::memcpy(h, all.data() + pos, 16);
    pos += 16;
    RefSection s{static_cast<Type>(h[0]), static_cast<int>(h[1]), static_cast<int>(h[2]), h[3], {}};
    const size_t rb = rbytes(s.type, s.n), ab = rbytes(Type::Q8_K, s.n);
    const size_t rows = static_cast<size_t>(s.rows);
    const size_t size = s.kind == 1 ? rows * (rb + ab + 8 + 4) : rows * (4 * static_cast<size_t>(s.n) + rb);
    if (pos + size > all.size()) {
      ADD_FAILURE() << path << ": truncated";
      return out;
    }
    s.data.assign(all.begin() + static_cast<std::ptrdiff_t>(pos), all.begin() + static_cast<std::ptrdiff_t>(pos + size));
    pos += size;
    out.push_back(std::move(s));
  }
  EXPECT_EQ(pos, all.size()) << path;
  return out;
}

const std::vector<RefSection>& refs() {
  static const std::vector<RefSection> r = load_refs();
  return r;
}

// The products section of a file: rows of weights, activations, dequantization hashes, dots.
struct Products {
  const RefSection* s;
  size_t rb, ab;
  const uint8_t* w(int r) const { return s->data.data() + r * rb; }
  const uint8_t* a(int r) const { return s->data.data() + s->rows * rb + r * ab; }
  uint64_t hash(int r) const {
    uint64_t h;
    std::memcpy(&h, s->data.data() + s->rows * (rb + ab) + 8 * r, 8);
    return h;
  }
  float dot(int r) const {
    float v;
    std::memcpy(&v, s->data.data() + s->rows * (rb + ab + 8) + 4 * r, 4);
    return v;
  }
};

Products products_of(Type t) {
  for (const RefSection& s : refs()) {
    if (s.type == t && s.kind == 1) return Products{&s, rbytes(t, s.n), rbytes(Type::Q8_K, s.n)};
  }
  ADD_FAILURE() << type_name(t) << ": no products section";
  return Products{nullptr, 0, 0};
}

TEST(Iq2LlamaCpp, FileCoversEveryGridIndex) {
  for (Type t : kIq2Types) {
    const Products p = products_of(t);
    ASSERT_NE(p.s, nullptr);
    // Decoding every group's grid index through the dequantized values is indirect; read the
    // fields instead.
    std::set<int> seen;
    const size_t bb = info(t).block_bytes;
    for (int r = 0; r < p.s->rows; ++r) {
      for (int64_t b = 0; b < p.s->n / QK_K; ++b) {
        const uint8_t* blk = p.w(r) + b * bb;
        for (int g = 0; g < 32; ++g) {
          if (t == Type::IQ2_XXS) {
            seen.insert(blk[2 + 8 * (g / 4) + g % 4]);
          } else if (t == Type::IQ2_XS) {
            uint16_t q;
            std::memcpy(&q, blk + 2 + 2 * g, 2);
            seen.insert(q & 511);
          } else {
            seen.insert(iq2s_grid_index(blk + 2, blk + 66, g));
          }
        }
      }
    }
    EXPECT_EQ(seen.size(), static_cast<size_t>(grid_size(t))) << type_name(t);
  }
}

TEST(Iq2LlamaCpp, DequantizeBitExact) {
  const KernelTable* s = kernel_table(Isa::scalar);
  for (Type t : kIq2Types) {
    const Products p = products_of(t);
    ASSERT_NE(p.s, nullptr);
    ASSERT_NE(s->dequantize[tid(t)], nullptr) << type_name(t);
    std::vector<float> y(static_cast<size_t>(p.s->n));
    for (int r = 0; r < p.s->rows; ++r) {
      s->dequantize[tid(t)](p.w(r), y.data(), p.s->n);
      EXPECT_EQ(fnv(y.data(), y.size()), p.hash(r)) << type_name(t) << " row " << r;
    }
  }
}

// Every table of this CPU (scalar first) against llama.cpp's CPU vec_dot.
TEST(Iq2LlamaCpp, VecDotWithinRounding) {
  for (Isa isa : {Isa::scalar, Isa::avx2, Isa::avx_vnni, Isa::avx512, Isa::neon, Isa::dotprod, Isa::i8mm}) {
    const KernelTable* k = kernel_table(isa);
    if (!k || !isa_supported(isa)) continue;
    for (Type t : kIq2Types) {
      const Products p = products_of(t);
      ASSERT_NE(p.s, nullptr);
      for (int r = 0; r < p.s->rows; ++r) {
        const RefDot ref = ref_dot(t, p.w(r), p.a(r), p.s->n);
        const float v = k->vec_dot[tid(t)](p.s->n, p.w(r), p.a(r));
        EXPECT_NEAR(v, p.dot(r), tolerance(ref.mag)) << type_name(t) << " " << isa_name(isa) << " row " << r;
        EXPECT_NEAR(v, ref.value, tolerance(ref.mag)) << type_name(t) << " " << isa_name(isa) << " row " << r;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Generated data for the ISA tables.

struct Gen {
  std::mt19937_64 rng;
  explicit Gen(uint64_t seed) : rng(seed) {}
  uint8_t byte() { return static_cast<uint8_t>(rng() & 0xff); }
  float uni(float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(rng); }
  int irange(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); }
};

enum class WFill { random, all_max, zero_d, huge_d, tiny_d, grid_sweep, no_signs };
constexpr WFill kWFills[] = {WFill::random, WFill::all_max, WFill::zero_d,   WFill::huge_d,
                             WFill::tiny_d, WFill::grid_sweep, WFill::no_signs};
enum class AFill { random, min_int8, max_int8, quantized };
constexpr AFill kAFills[] = {AFill::random, AFill::min_int8, AFill::max_int8, AFill::quantized};

void put_d(uint8_t* b, half_bits h) { std::memcpy(b, &h, 2); }

// A weight row of n elements: random bytes with a finite d, or one of the adversarial fills. The
// grid sweep walks every grid index in order from a random start.
void gen_weights(Gen& g, Type t, uint8_t* p, int64_t n, WFill fill) {
  const size_t bb = info(t).block_bytes;
  int sweep = g.irange(0, grid_size(t) - 1);
  for (int64_t b = 0; b < n / QK_K; ++b) {
    uint8_t* blk = p + b * bb;
    for (size_t i = 0; i < bb; ++i) blk[i] = fill == WFill::all_max ? 0xff : g.byte();
    const half_bits sign = g.byte() & 1 ? 0x8000 : 0;
    switch (fill) {
      case WFill::all_max: put_d(blk, 0x7bff); break;
      case WFill::zero_d: put_d(blk, 0); break;
      case WFill::huge_d: put_d(blk, static_cast<half_bits>(sign | (0x7bff - (g.byte() & 0x0f)))); break;
      case WFill::tiny_d: put_d(blk, static_cast<half_bits>(sign | (1 + (g.byte() & 0x3ff)))); break;
      default: put_d(blk, f32_to_fp16(g.uni(-0.1f, 0.1f))); break;
    }
    if (fill == WFill::grid_sweep) {
      for (int k = 0; k < 32; ++k, sweep = (sweep + 1) % grid_size(t)) {
        if (t == Type::IQ2_XXS) {
          blk[2 + 8 * (k / 4) + k % 4] = static_cast<uint8_t>(sweep);
        } else if (t == Type::IQ2_XS) {
          const uint16_t q = static_cast<uint16_t>((g.byte() & 0x7f) << 9 | sweep);
          std::memcpy(blk + 2 + 2 * k, &q, 2);
        } else {
          blk[2 + k] = static_cast<uint8_t>(sweep & 255);
          uint8_t& qh = blk[66 + k / 4];
          qh = static_cast<uint8_t>((qh & ~(3u << (2 * (k % 4)))) | ((sweep >> 8) << (2 * (k % 4))));
        }
      }
    }
    if (fill == WFill::no_signs) {
      if (t == Type::IQ2_XXS) {
        for (int ib = 0; ib < 8; ++ib) {
          uint32_t aux;
          std::memcpy(&aux, blk + 2 + 8 * ib + 4, 4);
          aux &= 0xf0000000u;
          std::memcpy(blk + 2 + 8 * ib + 4, &aux, 4);
        }
      } else if (t == Type::IQ2_XS) {
        for (int k = 0; k < 32; ++k) blk[2 + 2 * k + 1] &= 0x01;
      } else {
        std::memset(blk + 2 + 32, 0, 32);
      }
    }
  }
}

// A Q8_K activation row: random bytes (-128 included) with random bsums-consistent sums, all
// -128, all 127, or the Q8_K quantization of random floats at a random scale.
void gen_acts(Gen& g, uint8_t* p, int64_t n, AFill fill) {
  if (fill == AFill::quantized) {
    std::vector<float> x(static_cast<size_t>(n));
    const float scale = std::ldexp(1.0f, g.irange(-12, 12));
    for (auto& v : x) v = g.uni(-1.0f, 1.0f) * scale;
    kernel_table(Isa::scalar)->quantize[tid(Type::Q8_K)](x.data(), p, n);
    return;
  }
  for (int64_t b = 0; b < n / QK_K; ++b) {
    block_q8_K q;
    q.d = g.uni(-0.05f, 0.05f);
    for (int j = 0; j < QK_K; ++j) {
      q.qs[j] = fill == AFill::min_int8 ? int8_t{-128} : fill == AFill::max_int8 ? int8_t{127}
                                                                                 : static_cast<int8_t>(g.byte());
    }
    for (int s = 0; s < QK_K / 16; ++s) {
      int sum = 0;
      for (int j = 0; j < 16; ++j) sum += q.qs[16 * s + j];
      q.bsums[s] = static_cast<int16_t>(sum);
    }
    std::memcpy(p + b * sizeof q, &q, sizeof q);
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

// A buffer between two inaccessible pages: a row handed out ends right before the trailing one.
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
// The ISA tables.

class Iq2Simd : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (!isa_supported(GetParam())) LES_SKIP_CPU(isa_name(GetParam()) << ": not supported by this CPU");
    simd_ = kernel_table(GetParam());
    if (!simd_) LES_SKIP_CPU(isa_name(GetParam()) << ": kernels not compiled for this architecture");
    scalar_ = kernel_table(Isa::scalar);
  }
  // The ISA's vec_dot within float rounding of the double reference and of the scalar table.
  void check_dot(Type t, const uint8_t* w, const uint8_t* a, int64_t n, const std::string& what) {
    const RefDot r = ref_dot(t, w, a, n);
    const float v = simd_->vec_dot[tid(t)](n, w, a);
    const float s = scalar_->vec_dot[tid(t)](n, w, a);
    EXPECT_NEAR(v, r.value, tolerance(r.mag)) << type_name(t) << " " << isa_name(simd_->isa) << " n=" << n << " " << what;
    EXPECT_NEAR(v, s, 2 * tolerance(r.mag)) << type_name(t) << " " << isa_name(simd_->isa) << " vs scalar, n=" << n
                                           << " " << what;
    // These kernels form the scalar reference's integer sums and follow its float order.
    EXPECT_EQ(fbits(v), fbits(s)) << type_name(t) << " " << isa_name(simd_->isa) << " not bit-identical to scalar, n="
                                  << n << " " << what;
  }
  const KernelTable* scalar_ = nullptr;
  const KernelTable* simd_ = nullptr;
};

TEST_P(Iq2Simd, VecDotMatchesReference) {
  Gen g(42);
  for (Type t : kIq2Types) {
    for (int64_t n : {256, 512, 768, 1280, 2048, 4096}) {
      for (WFill wf : kWFills) {
        for (AFill af : kAFills) {
          const size_t woff = static_cast<size_t>(g.irange(0, 63)), aoff = static_cast<size_t>(g.irange(0, 63));
          Buf wb(rbytes(t, n), woff), ab(rbytes(Type::Q8_K, n), aoff);
          gen_weights(g, t, wb.data(), n, wf);
          gen_acts(g, ab.data(), n, af);
          check_dot(t, wb.data(), ab.data(), n,
                    "fill " + std::to_string(static_cast<int>(wf)) + "/" + std::to_string(static_cast<int>(af)));
          if (wf == WFill::zero_d) {
            EXPECT_EQ(simd_->vec_dot[tid(t)](n, wb.data(), ab.data()), 0.0f);
          }
        }
      }
    }
  }
}

// nr weight rows x nc activation rows with padded strides and misaligned buffers: every output
// equals the table's vec_dot bit for bit, and nothing outside the outputs is written.
void check_gemm(const KernelTable* k, Type t, int64_t n, int64_t nr, int64_t nc, size_t pad, size_t off, Gen& g,
                WFill wf, AFill af) {
  const size_t wrb = rbytes(t, n) + pad, arb = rbytes(Type::Q8_K, n) + pad;
  Buf wb(wrb * static_cast<size_t>(nr), off), ab(arb * static_cast<size_t>(nc), (off * 5 + 3) % 64);
  for (int64_t r = 0; r < nr; ++r) gen_weights(g, t, wb.data() + r * wrb, n, wf);
  for (int64_t c = 0; c < nc; ++c) gen_acts(g, ab.data() + c * arb, n, af);
  const int64_t ys = nr + 3;
  const float sentinel = -12345.5f;
  std::vector<float> y(static_cast<size_t>(ys * nc), sentinel);
  gemm_rows(*k, t, n, wb.data(), wrb, nr, ab.data(), arb, nc, y.data(), ys);
  int bad = 0;
  for (int64_t c = 0; c < nc; ++c) {
    for (int64_t r = 0; r < ys; ++r) {
      const float got = y[static_cast<size_t>(c * ys + r)];
      if (r >= nr) {
        EXPECT_EQ(fbits(got), fbits(sentinel)) << "gemm wrote outside its outputs";
        continue;
      }
      const float want = k->vec_dot[tid(t)](n, wb.data() + r * wrb, ab.data() + c * arb);
      if (fbits(got) != fbits(want) && bad++ < 3) {
        ADD_FAILURE() << type_name(t) << " " << isa_name(k->isa) << " gemm != vec_dot at row " << r << " act " << c
                      << " of " << nr << "x" << nc << ", n=" << n << ": " << got << " vs " << want;
      }
    }
  }
}

TEST_P(Iq2Simd, GemmBitIdenticalToVecDot) {
  Gen g(21);
  for (Type t : kIq2Types) {
    for (int64_t n : {256, 768, 1280}) {
      for (int64_t nr = 1; nr <= 9; ++nr) {
        for (int64_t nc = 1; nc <= 9; ++nc) {
          const size_t pad = static_cast<size_t>((nr + nc) % 3) * 7;
          check_gemm(simd_, t, n, nr, nc, pad, static_cast<size_t>((nr * 7 + nc) % 64), g, WFill::random, AFill::random);
        }
      }
    }
    for (WFill wf : kWFills) {
      for (AFill af : kAFills) check_gemm(simd_, t, 512, 5, 7, 3, 1, g, wf, af);
    }
    check_gemm(simd_, t, 2048, 64, 1, 0, 0, g, WFill::random, AFill::quantized);  // decode shape
    check_gemm(simd_, t, 768, 17, 33, 5, 9, g, WFill::random, AFill::quantized);  // prefill shape
  }
}

// Rows that start on a page or end exactly at its end, next to inaccessible pages: a kernel
// reading one byte outside its rows crashes the test.
TEST_P(Iq2Simd, StaysInsideRows) {
  Gen g(11);
  for (Type t : kIq2Types) {
    for (int64_t n : {256, 512, 768, 2304}) {
      for (int64_t nr : {1, 3, 8}) {
        const size_t wbytes = rbytes(t, n) * static_cast<size_t>(nr), abytes = rbytes(Type::Q8_K, n) * 2;
        Guarded gw(wbytes), ga(abytes);
        ASSERT_TRUE(gw.ok() && ga.ok());
        for (int where = 0; where < 2; ++where) {
          uint8_t* w = where ? gw.at_end(wbytes) : gw.at_start();
          uint8_t* a = where ? ga.at_end(abytes) : ga.at_start();
          for (int64_t r = 0; r < nr; ++r) gen_weights(g, t, w + r * rbytes(t, n), n, WFill::random);
          gen_acts(g, a, 2 * n, AFill::random);
          check_dot(t, w + (nr - 1) * rbytes(t, n), a + rbytes(Type::Q8_K, n), n, "row at page edge");
          std::vector<float> y(static_cast<size_t>(nr * 2));
          gemm_rows(*simd_, t, n, w, rbytes(t, n), nr, a, rbytes(Type::Q8_K, n), 2, y.data(), nr);
          for (int64_t c = 0; c < 2; ++c) {
            for (int64_t r = 0; r < nr; ++r) {
              EXPECT_EQ(fbits(y[c * nr + r]), fbits(simd_->vec_dot[tid(t)](n, w + r * rbytes(t, n),
                                                                            a + c * rbytes(Type::Q8_K, n))));
            }
          }
        }
      }
    }
  }
}

// The x86 tables above AVX2 and the aarch64 ones say which kernels they have; the test data
// really varies.
TEST_P(Iq2Simd, DataVaries) {
  Gen g(3);
  for (Type t : kIq2Types) {
    std::vector<uint8_t> w(rbytes(t, 512)), a(rbytes(Type::Q8_K, 512));
    gen_weights(g, t, w.data(), 512, WFill::random);
    gen_acts(g, a.data(), 512, AFill::random);
    std::vector<float> f(512);
    scalar_->dequantize[tid(t)](w.data(), f.data(), 512);
    std::set<float> vals(f.begin(), f.end());
    EXPECT_GT(vals.size(), 30u) << type_name(t);
    std::set<uint8_t> bytes(a.begin(), a.end());
    EXPECT_GT(bytes.size(), 100u);
    EXPECT_NE(simd_->vec_dot[tid(t)], nullptr);
  }
}


// ---------------------------------------------------------------------------------------------
// Quantizers.

// sum importance_i (x_i - x^_i)^2 of a row quantized to t and dequantized.
double weighted_error(Type t, const std::vector<float>& x, const std::vector<float>& imp,
                      const std::vector<uint8_t>& q) {
  std::vector<float> back(x.size());
  kernel_table(Isa::scalar)->dequantize[tid(t)](q.data(), back.data(), static_cast<int64_t>(x.size()));
  double e = 0;
  for (size_t i = 0; i < x.size(); ++i) e += static_cast<double>(imp[i]) * (x[i] - back[i]) * (x[i] - back[i]);
  return e;
}

std::vector<uint8_t> quantize(Type t, const std::vector<float>& x, const float* imp) {
  std::vector<uint8_t> q(rbytes(t, static_cast<int64_t>(x.size())));
  quantize_row_ref(t, x.data(), q.data(), static_cast<int64_t>(x.size()), imp);
  return q;
}

std::vector<float> gaussian(Gen& g, size_t n, float scale) {
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> x(n);
  for (auto& v : x) v = nd(g.rng);
  return x;
}

TEST(Iq2Quant, XxsAndXsNeedImportance) {
  const std::vector<float> x(512, 0.5f);
  for (Type t : {Type::IQ2_XXS, Type::IQ2_XS}) {
    std::vector<uint8_t> q(rbytes(t, 512));
    try {
      quantize_row_ref(t, x.data(), q.data(), 512, nullptr);
      ADD_FAILURE() << type_name(t) << " quantized without an importance vector";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("needs an importance matrix"), std::string::npos) << e.what();
    }
  }
  // IQ2_S has llama.cpp's fallback weights.
  std::vector<uint8_t> q(rbytes(Type::IQ2_S, 512));
  EXPECT_NO_THROW(quantize_row_ref(Type::IQ2_S, x.data(), q.data(), 512, nullptr));
}

TEST(Iq2Quant, BadImportanceRefused) {
  const std::vector<float> x(256, 0.5f);
  for (Type t : kIq2Types) {
    for (float bad : {std::numeric_limits<float>::quiet_NaN(), -1.0f, std::numeric_limits<float>::infinity()}) {
      std::vector<float> imp(256, 1.0f);
      imp[77] = bad;
      std::vector<uint8_t> q(rbytes(t, 256));
      EXPECT_THROW(quantize_row_ref(t, x.data(), q.data(), 256, imp.data()), Error) << type_name(t) << " " << bad;
    }
  }
}

// Relative RMSE of gaussian rows (uniform importance) within the format's reach, at every scale,
// and zero rows stay zero.
TEST(Iq2Quant, RoundTripErrorBounded) {
  Gen g(5);
  const double bound[3] = {0.45, 0.40, 0.36};  // IQ2_XXS, IQ2_XS, IQ2_S (llama.cpp: ~0.41, ~0.36, ~0.33)
  for (int ti = 0; ti < 3; ++ti) {
    const Type t = kIq2Types[ti];
    for (float scale : {1e-6f, 0.02f, 1.0f, 3000.0f}) {
      const std::vector<float> x = gaussian(g, 2048, scale);
      const std::vector<float> imp(x.size(), 1.0f);
      const double e = weighted_error(t, x, imp, quantize(t, x, imp.data()));
      double s2 = 0;
      for (float v : x) s2 += static_cast<double>(v) * v;
      EXPECT_LT(std::sqrt(e / s2), bound[ti]) << type_name(t) << " scale " << scale;
    }
    const std::vector<float> zero(512, 0.0f), imp(512, 1.0f);
    const std::vector<uint8_t> q = quantize(t, zero, imp.data());
    std::vector<float> back(512, 1.0f);
    kernel_table(Isa::scalar)->dequantize[tid(t)](q.data(), back.data(), 512);
    for (float v : back) ASSERT_EQ(v, 0.0f) << type_name(t);
  }
}

// Where the importance is skewed, the weighted error is lower with it than with uniform
// importance (or none, for IQ2_S).
TEST(Iq2Quant, ImportanceLowersWeightedError) {
  Gen g(9);
  for (Type t : kIq2Types) {
    double with = 0, uniform = 0;
    for (int row = 0; row < 4; ++row) {
      const std::vector<float> x = gaussian(g, 1024, 0.05f);
      std::vector<float> imp(x.size()), flat(x.size(), 1.0f);
      for (auto& v : imp) v = g.uni(0, 1) < 0.1f ? 50.0f : g.uni(0.01f, 1.0f);
      with += weighted_error(t, x, imp, quantize(t, x, imp.data()));
      uniform += weighted_error(t, x, imp, quantize(t, x, flat.data()));
      if (t == Type::IQ2_S) {
        EXPECT_EQ(quantize(t, x, nullptr).size(), rbytes(t, 1024));
      }
    }
    EXPECT_LT(with, 0.8 * uniform) << type_name(t);
  }
}

// The same bytes from repeated calls and from threads racing on the first use of the tables.
TEST(Iq2Quant, Deterministic) {
  Gen g(13);
  const std::vector<float> x = gaussian(g, 1024, 1.0f);
  std::vector<float> imp(x.size());
  for (auto& v : imp) v = g.uni(0.0f, 2.0f);
  for (Type t : kIq2Types) {
    const std::vector<uint8_t> a = quantize(t, x, imp.data());
    std::vector<uint8_t> b, c;
    std::thread th([&] { b = quantize(t, x, imp.data()); });
    c = quantize(t, x, imp.data());
    th.join();
    EXPECT_EQ(a, b) << type_name(t);
    EXPECT_EQ(a, c) << type_name(t);
  }
}

// On llama.cpp's rows (iq2_ref.bin), with the same importance: the importance-weighted error is
// at most 1.05 times that of llama.cpp's quantizer (both read through the dequantizer that is
// bit-exact with llama.cpp's).
TEST(Iq2Quant, AsGoodAsLlamaCpp) {
  for (const RefSection& s : refs()) {
    if (s.kind != 2) continue;
    const size_t n = static_cast<size_t>(s.n), rb = rbytes(s.type, s.n);
    double ours = 0, theirs = 0;
    for (int r = 0; r < s.rows; ++r) {
      std::vector<float> x(n), imp(n);
      for (size_t i = 0; i < n; ++i) {
        uint16_t hx, hi;
        std::memcpy(&hx, s.data.data() + 2 * (r * n + i), 2);
        std::memcpy(&hi, s.data.data() + 2 * (s.rows * n + r * n + i), 2);
        x[i] = fp16_to_f32(hx);
        imp[i] = fp16_to_f32(hi);
      }
      const uint8_t* llama = s.data.data() + 4 * s.rows * n + r * rb;
      theirs += weighted_error(s.type, x, imp, std::vector<uint8_t>(llama, llama + rb));
      ours += weighted_error(s.type, x, imp, quantize(s.type, x, imp.data()));
    }
    std::printf("[ iq2 ] %s weighted RMSE ratio les / llama.cpp = %.4f\n", type_name(s.type), std::sqrt(ours / theirs));
    EXPECT_LE(ours, 1.05 * 1.05 * theirs) << type_name(s.type);
  }
}

// Each ISA runs kernels of its own (so the tests above test them): avx2, neon and dotprod replace
// the table below; avx512 replaces avx2's where the CPU has AVX512-VBMI; avxvnni keeps avx2's.
TEST_P(Iq2Simd, HasKernelsOfItsOwn) {
  const Isa isa = GetParam();
  // The table each ISA is derived from (dispatch.cpp): i8mm from dotprod, avx512 and avxvnni from avx2.
  const KernelTable* below = kernel_table(isa == Isa::avx2 || isa == Isa::neon ? Isa::scalar
                                          : isa == Isa::dotprod                 ? Isa::neon
                                          : isa == Isa::i8mm                    ? Isa::dotprod
                                                                                : Isa::avx2);
  for (Type t : kIq2Types) {
    EXPECT_NE(simd_->gemm[tid(t)], nullptr) << type_name(t);
    bool own = isa != Isa::avx_vnni && isa != Isa::i8mm;
#if defined(__x86_64__)
    if (isa == Isa::avx512) {
      unsigned a = 0, b = 0, c = 0, d = 0;
      own = __get_cpuid_count(7, 0, &a, &b, &c, &d) && ((c >> 1) & 1u);
    }
#endif
    if (own) {
      EXPECT_NE(simd_->vec_dot[tid(t)], below->vec_dot[tid(t)]) << type_name(t) << " " << isa_name(isa);
    } else {
      EXPECT_EQ(simd_->vec_dot[tid(t)], below->vec_dot[tid(t)]) << type_name(t) << " " << isa_name(isa);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Isas, Iq2Simd,
                         ::testing::Values(Isa::avx2, Isa::avx_vnni, Isa::avx512, Isa::neon, Isa::dotprod, Isa::i8mm),
                         [](const ::testing::TestParamInfo<Isa>& i) { return std::string(isa_name(i.param)); });

}  // namespace
}  // namespace les
