// IQ1_S and IQ1_M: the scalar reference against llama.cpp (tests/data/quant/iq1_ref.bin, made by
// make_refs_iq1.cpp: dequantization bit for bit, dot products within float rounding), every SIMD
// table this CPU runs against the scalar one (the IQ1 kernels of every ISA form the same exact
// integer per block and the same float sequence, so they agree bit for bit; gemm likewise for
// any number of rows and tokens, misaligned, at page ends), and the importance-weighted
// quantizers (error against llama.cpp's on the same rows and importance, importance helps where
// it is skewed, deterministic, needs importance).

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <ostream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "data/quant/iq1_rows.h"
#include "les/quant/blocks.h"
#include "les/quant/iq1_common.h"
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

constexpr Type kIq1Types[] = {Type::IQ1_S, Type::IQ1_M};

int tid(Type t) { return static_cast<int>(t); }

uint32_t f32_bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// ---------------------------------------------------------------------------------------------
// Test data.

struct Gen {
  std::mt19937_64 rng;
  explicit Gen(uint64_t seed) : rng(seed) {}
  uint8_t byte() { return static_cast<uint8_t>(rng() & 0xff); }
  float uni(float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(rng); }
  int irange(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); }
};

enum class Fill { random, every_index, all_max, all_min, zero_scales, huge_scales, tiny_scales };

// A weight row of type t with n elements at p (row_bytes(t, n) bytes): random bytes, then per
// fill: every grid index in turn with both delta signs and every sub-block scale (every_index),
// index 2047 / scale 7 / negative delta everywhere (all_max), index 0 / scale 0 (all_min), and
// super-scales that are random, zero, the largest finite halves or subnormal.
void gen_weights(Gen& g, Type t, uint8_t* p, int64_t n, Fill fill, int64_t first_block = 0) {
  const size_t bb = row_bytes(t, QK_K);
  const int ty = tid(t);
  for (size_t i = 0; i < row_bytes(t, n); ++i) p[i] = g.byte();
  for (int64_t b = 0; b < n / QK_K; ++b) {
    uint8_t* x = p + b * bb;
    const int64_t bi = first_block + b;
    if (fill == Fill::every_index) {
      for (int k = 0; k < 32; ++k) {
        iq1_rows::set_group(ty, x, k, static_cast<int>((32 * bi + k) % 2048), static_cast<int>((k / 4 + bi / 64) % 2));
      }
      iq1_rows::set_scales(ty, x, static_cast<int>(bi % 8));
    }
    if (fill == Fill::all_max || fill == Fill::all_min) {
      for (int k = 0; k < 32; ++k) iq1_rows::set_group(ty, x, k, fill == Fill::all_max ? 2047 : 0, fill == Fill::all_max);
      iq1_rows::set_scales(ty, x, fill == Fill::all_max ? 7 : 0);
    }
    half_bits d = f32_to_fp16(g.uni(-0.05f, 0.1f));
    if (fill == Fill::zero_scales) d = static_cast<half_bits>(g.byte() & 1 ? 0x8000 : 0);
    if (fill == Fill::huge_scales) d = static_cast<half_bits>((g.byte() & 1 ? 0x8000 : 0) | (0x7bff - (g.byte() & 0x0f)));
    if (fill == Fill::tiny_scales) d = static_cast<half_bits>(1 + (g.byte() & 0x3ff));
    iq1_rows::set_d(ty, x, d);
  }
}

enum class ActFill { random, extremes, zero_blocks, huge };

// A Q8_K activation row of n elements: random floats quantized by the reference quantizer, or
// bytes chosen directly (extremes: -128 and 127 only, the ends of int8; bsums kept consistent).
void gen_acts(Gen& g, uint8_t* p, int64_t n, ActFill fill) {
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) {
    x[j] = g.uni(-1.0f, 1.0f) * (fill == ActFill::huge ? 3e4f : 2.0f);
    if (fill == ActFill::zero_blocks && (j / QK_K) % 2 == 0) x[j] = 0;
  }
  quantize_row_q8_K_act(x.data(), p, n);
  if (fill != ActFill::extremes) return;
  for (int64_t b = 0; b < n / QK_K; ++b) {
    block_q8_K y;
    std::memcpy(&y, p + b * sizeof(block_q8_K), sizeof y);
    for (int j = 0; j < QK_K; ++j) y.qs[j] = (g.byte() % 3) ? -128 : 127;
    for (int k = 0; k < QK_K / 16; ++k) {
      int s = 0;
      for (int j = 0; j < 16; ++j) s += y.qs[16 * k + j];
      y.bsums[k] = static_cast<int16_t>(s);
    }
    y.d = g.uni(-0.02f, 0.02f);
    std::memcpy(p + b * sizeof(block_q8_K), &y, sizeof y);
  }
}

// sum |w_i * a_i| in double from the dequantized rows (the scale of a dot product's rounding).
double abs_dot(const KernelTable& t, Type wt, const uint8_t* w, const uint8_t* a, int64_t n) {
  std::vector<float> wf(static_cast<size_t>(n)), af(static_cast<size_t>(n));
  t.dequantize[tid(wt)](w, wf.data(), n);
  dequantize_row(Type::Q8_K, a, af.data(), n);
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += std::fabs(static_cast<double>(wf[i]) * af[i]);
  return s;
}

// Byte buffers at a chosen misalignment.
struct Buf {
  std::vector<uint8_t> mem;
  size_t off = 0;
  Buf(size_t bytes, size_t offset) : mem(bytes + 64, 0xA5), off(offset) {}
  uint8_t* data() {
    const auto base = reinterpret_cast<uintptr_t>(mem.data());
    return mem.data() + (32 - base % 32) % 32 + off;
  }
};

// A buffer between two inaccessible pages: what it hands out starts right after the leading guard
// page or ends right before the trailing one.
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
// llama.cpp's results (tests/data/quant/iq1_ref.bin; format in make_refs_iq1.cpp).

struct RefCase {
  Type type;
  int64_t n;
  std::vector<uint8_t> w, a;
  float dot;
  uint64_t hash;
  std::vector<float> values;  // empty if not stored
};

struct RefData {
  std::vector<RefCase> cases;
  int matrices = 0, rows = 0, cols = 0;
  std::vector<double> quant_err[2];  // [IQ1_S, IQ1_M][matrix * rows + row]
};

class Reader {
 public:
  explicit Reader(const std::string& path) : in_(path, std::ios::binary) {}
  bool ok() const { return static_cast<bool>(in_); }
  template <class T>
  T get() {
    T v{};
    read(&v, sizeof v);
    return v;
  }
  void read(void* p, size_t n) {
    in_.read(static_cast<char*>(p), static_cast<std::streamsize>(n));
    if (!in_) throw Error("iq1_ref.bin: truncated");
  }

 private:
  std::ifstream in_;
};

RefData load_refs() {
  const std::string path = test::source_dir() + "/tests/data/quant/iq1_ref.bin";
  Reader r(path);
  if (!r.ok()) throw Error("cannot open " + path);
  char magic[8];
  r.read(magic, 8);
  if (std::memcmp(magic, "LESIQ1R1", 8) != 0) throw Error(path + ": bad magic");
  RefData d;
  const auto n_cases = r.get<uint32_t>();
  for (uint32_t c = 0; c < n_cases; ++c) {
    RefCase rc;
    rc.type = static_cast<Type>(r.get<uint32_t>());
    rc.n = r.get<uint32_t>();
    const auto flags = r.get<uint32_t>();
    if ((rc.type != Type::IQ1_S && rc.type != Type::IQ1_M) || rc.n <= 0 || rc.n % QK_K || rc.n > (1 << 20)) {
      throw Error(path + ": bad case header");
    }
    rc.w.resize(row_bytes(rc.type, rc.n));
    rc.a.resize(row_bytes(Type::Q8_K, rc.n));
    r.read(rc.w.data(), rc.w.size());
    r.read(rc.a.data(), rc.a.size());
    rc.dot = r.get<float>();
    rc.hash = r.get<uint64_t>();
    if (flags & 1) {
      rc.values.resize(static_cast<size_t>(rc.n));
      r.read(rc.values.data(), rc.values.size() * sizeof(float));
    }
    d.cases.push_back(std::move(rc));
  }
  d.matrices = static_cast<int>(r.get<uint32_t>());
  d.rows = static_cast<int>(r.get<uint32_t>());
  d.cols = static_cast<int>(r.get<uint32_t>());
  if (d.matrices != iq1_rows::kMatrices || d.rows != iq1_rows::kRows || d.cols != iq1_rows::kCols) {
    throw Error(path + ": made for other quantizer rows than iq1_rows.h's (make it again)");
  }
  for (auto& e : d.quant_err) {
    e.resize(static_cast<size_t>(d.matrices) * d.rows);
    for (double& v : e) v = r.get<double>();
  }
  return d;
}

const RefData& refs() {
  static const RefData d = load_refs();
  return d;
}

uint64_t fnv1a(const void* p, size_t bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  const auto* c = static_cast<const uint8_t*>(p);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ c[i]) * 0x100000001b3ull;
  return h;
}

// The tables to check: scalar and every SIMD ISA this CPU runs.
std::vector<const KernelTable*> runnable_tables() {
  std::vector<const KernelTable*> out;
  for (int i = 0; i < kNumIsa; ++i) {
    const auto isa = static_cast<Isa>(i);
    if (isa_supported(isa) && kernel_table(isa)) out.push_back(kernel_table(isa));
  }
  return out;
}

TEST(Iq1Ref, SignedGridIsEightTimesGridPlusDelta) {
  const uint64_t* sg = iq1_signed_grid();
  for (uint32_t i = 0; i < 4096; ++i) {
    for (int k = 0; k < 8; ++k) {
      const int g = static_cast<int8_t>(kIq1sGrid[i & 2047] >> (8 * k));
      ASSERT_TRUE(g >= -1 && g <= 1);
      ASSERT_EQ(static_cast<int8_t>(sg[i] >> (8 * k)), 8 * g + ((i & 2048) ? -1 : 1)) << "entry " << i;
    }
  }
}

TEST(Iq1Ref, DataCoversTheFormat) {
  // The reference cases hold every grid index of both types and vary (not one repeated block).
  const RefData& d = refs();
  ASSERT_GE(d.cases.size(), 40u);
  for (Type t : kIq1Types) {
    std::vector<bool> seen(2048, false);
    int cases = 0;
    for (const RefCase& rc : d.cases) {
      if (rc.type != t) continue;
      ++cases;
      for (int64_t b = 0; b < rc.n / QK_K; ++b) {
        const uint8_t* x = rc.w.data() + b * row_bytes(t, QK_K);
        for (int l = 0; l < 32; ++l) {
          const uint32_t si = t == Type::IQ1_S
                                  ? iq1s_signed_index(x + 2 + 4 * (l / 4), static_cast<uint16_t>(x[34 + 2 * (l / 4)] | (x[35 + 2 * (l / 4)] << 8)), l % 4)
                                  : iq1m_signed_index(x + 4 * (l / 4), x + 32 + 2 * (l / 4), l % 4);
          seen[si & 2047] = true;
        }
      }
    }
    EXPECT_GE(cases, 20) << type_name(t);
    for (int i = 0; i < 2048; ++i) ASSERT_TRUE(seen[i]) << type_name(t) << " grid index " << i;
  }
}

// Dequantization bit for bit, dot products within 1e-5 of sum |w a|, at every ISA.
TEST(Iq1Ref, MatchesLlamaCpp) {
  const RefData& d = refs();
  for (const KernelTable* t : runnable_tables()) {
    double worst_dot = 0;
    for (size_t c = 0; c < d.cases.size(); ++c) {
      const RefCase& rc = d.cases[c];
      const std::string where = std::string(isa_name(t->isa)) + " case " + std::to_string(c) + " " + type_name(rc.type);
      std::vector<float> y(static_cast<size_t>(rc.n));
      t->dequantize[tid(rc.type)](rc.w.data(), y.data(), rc.n);
      EXPECT_EQ(fnv1a(y.data(), y.size() * sizeof(float)), rc.hash) << where << ": dequantized values differ";
      for (size_t i = 0; i < rc.values.size(); ++i) {
        ASSERT_EQ(f32_bits_of(y[i]), f32_bits_of(rc.values[i])) << where << " element " << i << ": " << y[i] << " vs llama.cpp " << rc.values[i];
      }
      const float dot = t->vec_dot[tid(rc.type)](rc.n, rc.w.data(), rc.a.data());
      const double scale = abs_dot(*t, rc.type, rc.w.data(), rc.a.data(), rc.n);
      const double err = std::fabs(static_cast<double>(dot) - rc.dot);
      EXPECT_LE(err, 1e-5 * scale + 1e-30) << where << ": " << dot << " vs llama.cpp " << rc.dot;
      if (scale > 0) worst_dot = std::max(worst_dot, err / scale);
    }
    std::printf("[iq1] %s vs llama.cpp: dequantize bit-exact, vec_dot max |err| / sum|w a| = %.3g\n", isa_name(t->isa), worst_dot);
  }
}

// ---------------------------------------------------------------------------------------------
// Quantizers.

// sum importance * (x - dequant(quant(x)))^2 over a row of n.
double weighted_error(Type t, const float* x, const float* imp, int64_t n) {
  std::vector<uint8_t> q(row_bytes(t, n));
  quantize_row_ref(t, x, q.data(), n, imp);
  std::vector<float> y(static_cast<size_t>(n));
  dequantize_row(t, q.data(), y.data(), n);
  double e = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(x[i]) - y[i];
    e += static_cast<double>(imp[i]) * d * d;
  }
  return e;
}

TEST(Iq1Quant, NeedsImportance) {
  std::vector<float> x(QK_K, 0.5f);
  std::vector<uint8_t> q(row_bytes(Type::IQ1_M, QK_K));
  for (Type t : kIq1Types) {
    try {
      quantize_row_ref(t, x.data(), q.data(), QK_K, nullptr);
      ADD_FAILURE() << type_name(t) << ": quantized without importance";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("importance matrix"), std::string::npos) << e.what();
    }
  }
}

TEST(Iq1Quant, RefusesBadInput) {
  std::vector<float> x(QK_K, 0.5f), imp(QK_K, 1.0f);
  std::vector<uint8_t> q(row_bytes(Type::IQ1_M, QK_K));
  for (Type t : kIq1Types) {
    imp[7] = std::nanf("");
    EXPECT_THROW(quantize_row_ref(t, x.data(), q.data(), QK_K, imp.data()), Error) << type_name(t) << " NaN importance";
    imp[7] = -1.0f;
    EXPECT_THROW(quantize_row_ref(t, x.data(), q.data(), QK_K, imp.data()), Error) << type_name(t) << " negative importance";
    imp[7] = 1.0f;
    for (float bad : {std::nanf(""), INFINITY, -INFINITY}) {
      x[200] = bad;
      EXPECT_THROW(quantize_row_ref(t, x.data(), q.data(), QK_K, imp.data()), Error) << type_name(t) << " weight " << bad;
    }
    x[200] = 0.5f;
    EXPECT_THROW(quantize_row_ref(t, x.data(), q.data(), QK_K - 8, imp.data()), Error) << "partial block";
  }
}

// The importance-weighted error of llama.cpp's quantizer on the same rows and importance
// (iq1_rows.h, errors in iq1_ref.bin): ours must not be worse by more than 5% on any kind of
// matrix (it is lower overall).
TEST(Iq1Quant, ErrorAgainstLlamaCpp) {
  const RefData& d = refs();
  for (int ti = 0; ti < 2; ++ti) {
    const Type t = kIq1Types[ti];
    double ours_all = 0, theirs_all = 0;
    for (int m = 0; m < iq1_rows::kMatrices; ++m) {
      const iq1_rows::Matrix mat = iq1_rows::make(m);
      double ours = 0, theirs = 0;
      for (int r = 0; r < iq1_rows::kRows; ++r) {
        ours += weighted_error(t, mat.x.data() + static_cast<size_t>(r) * iq1_rows::kCols, mat.importance.data(), iq1_rows::kCols);
        theirs += d.quant_err[ti][static_cast<size_t>(m) * iq1_rows::kRows + r];
      }
      ASSERT_GT(theirs, 0);
      std::printf("[iq1] %s matrix %d: weighted error ours / llama.cpp = %.4f\n", type_name(t), m, ours / theirs);
      EXPECT_LE(ours, 1.05 * theirs) << type_name(t) << " matrix kind " << m;
      ours_all += ours;
      theirs_all += theirs;
    }
    std::printf("[iq1] %s all: weighted error ours / llama.cpp = %.4f (weighted RMSE ratio %.4f)\n", type_name(t),
                ours_all / theirs_all, std::sqrt(ours_all / theirs_all));
    EXPECT_LE(ours_all, theirs_all) << type_name(t);
  }
}

// With skewed importance, quantizing with it gives a lower importance-weighted error than
// quantizing with a flat one; the round trip error is bounded relative to the row's energy.
TEST(Iq1Quant, ImportanceHelpsAndErrorIsBounded) {
  for (Type t : kIq1Types) {
    for (int m : {1, 2, 4}) {
      const iq1_rows::Matrix mat = iq1_rows::make(m);
      const std::vector<float> flat(iq1_rows::kCols, 1.0f);
      double with = 0, without = 0, energy = 0;
      for (int r = 0; r < iq1_rows::kRows; ++r) {
        const float* x = mat.x.data() + static_cast<size_t>(r) * iq1_rows::kCols;
        std::vector<uint8_t> q(row_bytes(t, iq1_rows::kCols));
        quantize_row_ref(t, x, q.data(), iq1_rows::kCols, flat.data());
        std::vector<float> y(iq1_rows::kCols);
        dequantize_row(t, q.data(), y.data(), iq1_rows::kCols);
        for (int c = 0; c < iq1_rows::kCols; ++c) {
          without += static_cast<double>(mat.importance[c]) * (x[c] - y[c]) * (x[c] - y[c]);
          energy += static_cast<double>(mat.importance[c]) * x[c] * x[c];
        }
        with += weighted_error(t, x, mat.importance.data(), iq1_rows::kCols);
      }
      EXPECT_LT(with, 0.8 * without) << type_name(t) << " matrix kind " << m;
      EXPECT_LT(with, 0.5 * energy) << type_name(t) << " matrix kind " << m;
    }
  }
}

// Zero rows come back as zeros; extreme magnitudes stay finite and bounded; every block of a
// random row decodes to values of the row's sign pattern more often than not.
TEST(Iq1Quant, ExtremeRows) {
  Gen g(5);
  const int64_t n = 2 * QK_K;
  std::vector<float> imp(n);
  for (auto& v : imp) v = g.uni(0.0f, 2.0f);
  for (Type t : kIq1Types) {
    std::vector<uint8_t> q(row_bytes(t, n));
    std::vector<float> x(n, 0.0f), y(n);
    quantize_row_ref(t, x.data(), q.data(), n, imp.data());
    dequantize_row(t, q.data(), y.data(), n);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(y[i], 0.0f) << type_name(t) << " zero row, element " << i;
    for (float scale : {1e-8f, 1.0f, 3e4f, 1e6f}) {
      for (int64_t i = 0; i < n; ++i) x[i] = scale * g.uni(-1.0f, 1.0f);
      quantize_row_ref(t, x.data(), q.data(), n, imp.data());
      dequantize_row(t, q.data(), y.data(), n);
      double e = 0, energy = 0;
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_TRUE(std::isfinite(y[i])) << type_name(t) << " scale " << scale;
        e += static_cast<double>(x[i] - y[i]) * (x[i] - y[i]);
        energy += static_cast<double>(x[i]) * x[i];
      }
      // 1e-8: below what an fp16 super-scale resolves (no worse than zeros); 1e6: beyond its
      // range (65504 * 15), clipped but finite.
      if (scale == 1e-8f) {
        EXPECT_LE(e, energy) << type_name(t) << " scale " << scale;
      } else if (scale < 1e5f) {
        EXPECT_LT(e, 0.6 * energy) << type_name(t) << " scale " << scale;
      }
    }
    // One sub-block of zeros among ordinary values: it decodes to (near) zero.
    for (int64_t i = 0; i < n; ++i) x[i] = (i >= 64 && i < 96) ? 0.0f : g.uni(-1.0f, 1.0f);
    quantize_row_ref(t, x.data(), q.data(), n, imp.data());
    dequantize_row(t, q.data(), y.data(), n);
    float amax = 0;
    for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(y[i]));
    for (int64_t i = 64; i < 96; ++i) EXPECT_LT(std::fabs(y[i]), 0.2f * amax) << type_name(t) << " element " << i;
  }
}

// Same bytes every time and from several threads at once (the neighbour tables are built once).
TEST(Iq1Quant, DeterministicAndThreadSafe) {
  const iq1_rows::Matrix mat = iq1_rows::make(2);
  for (Type t : kIq1Types) {
    const size_t bytes = row_bytes(t, iq1_rows::kCols);
    std::vector<uint8_t> first(bytes);
    quantize_row_ref(t, mat.x.data(), first.data(), iq1_rows::kCols, mat.importance.data());
    std::vector<std::vector<uint8_t>> out(4, std::vector<uint8_t>(bytes));
    std::vector<std::thread> threads;
    for (int k = 0; k < 4; ++k) {
      threads.emplace_back([&, k] { quantize_row_ref(t, mat.x.data(), out[k].data(), iq1_rows::kCols, mat.importance.data()); });
    }
    for (auto& th : threads) th.join();
    for (int k = 0; k < 4; ++k) EXPECT_EQ(out[k], first) << type_name(t) << " thread " << k;
  }
}

// ---------------------------------------------------------------------------------------------
// SIMD tables against the scalar one.

class Iq1Simd : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if (!isa_supported(GetParam())) LES_SKIP_CPU(isa_name(GetParam()) << ": not supported by this CPU");
    scalar_ = kernel_table(Isa::scalar);
    simd_ = kernel_table(GetParam());
    if (!simd_) LES_SKIP_CPU(isa_name(GetParam()) << ": kernels not compiled for this architecture");
    ASSERT_NE(scalar_, nullptr);
  }
  // The SIMD vec_dot gives the scalar's float bit for bit.
  void check_dot(Type t, const uint8_t* w, const uint8_t* a, int64_t n, const std::string& what) {
    const float ref = scalar_->vec_dot[tid(t)](n, w, a);
    const float got = simd_->vec_dot[tid(t)](n, w, a);
    EXPECT_EQ(f32_bits_of(got), f32_bits_of(ref)) << type_name(t) << " n=" << n << " " << what << ": " << got << " vs scalar " << ref;
  }
  const KernelTable* scalar_ = nullptr;
  const KernelTable* simd_ = nullptr;
};

TEST_P(Iq1Simd, VecDotMatchesScalar) {
  Gen g(1);
  for (Type t : kIq1Types) {
    for (Fill wf : {Fill::random, Fill::every_index, Fill::all_max, Fill::all_min, Fill::zero_scales, Fill::huge_scales,
                    Fill::tiny_scales}) {
      for (ActFill af : {ActFill::random, ActFill::extremes, ActFill::zero_blocks, ActFill::huge}) {
        for (int64_t nb : {1, 2, 3, 7, 64}) {
          const int64_t n = nb * QK_K;
          Buf w(row_bytes(t, n), static_cast<size_t>(g.irange(0, 31)));
          Buf a(row_bytes(Type::Q8_K, n), static_cast<size_t>(g.irange(0, 31)));
          gen_weights(g, t, w.data(), n, wf);
          gen_acts(g, a.data(), n, af);
          check_dot(t, w.data(), a.data(), n, "fill " + std::to_string(static_cast<int>(wf)) + "/" + std::to_string(static_cast<int>(af)));
        }
      }
    }
  }
}

TEST_P(Iq1Simd, DequantizeMatchesScalar) {
  Gen g(2);
  for (Type t : kIq1Types) {
    for (Fill wf : {Fill::random, Fill::every_index, Fill::huge_scales, Fill::tiny_scales}) {
      const int64_t n = 64 * QK_K;
      Buf w(row_bytes(t, n), 3);
      gen_weights(g, t, w.data(), n, wf);
      std::vector<float> ref(n), got(n);
      scalar_->dequantize[tid(t)](w.data(), ref.data(), n);
      simd_->dequantize[tid(t)](w.data(), got.data(), n);
      EXPECT_EQ(std::memcmp(ref.data(), got.data(), n * sizeof(float)), 0) << type_name(t);
    }
  }
}

// gemm equals the same table's vec_dot bit for bit for every tile shape (nr, nc in 1..9), with odd
// strides and misaligned rows.
TEST_P(Iq1Simd, GemmMatchesVecDot) {
  Gen g(3);
  for (Type t : kIq1Types) {
    for (int64_t nb : {1, 3}) {
      const int64_t n = nb * QK_K;
      const size_t wrow = row_bytes(t, n), arow = row_bytes(Type::Q8_K, n);
      for (int nr = 1; nr <= 9; ++nr) {
        for (int nc = 1; nc <= 9; ++nc) {
          const size_t w_stride = wrow + static_cast<size_t>(g.irange(0, 7)), a_stride = arow + static_cast<size_t>(g.irange(0, 7));
          Buf w(w_stride * nr, static_cast<size_t>(g.irange(0, 31))), a(a_stride * nc, static_cast<size_t>(g.irange(0, 31)));
          for (int r = 0; r < nr; ++r) gen_weights(g, t, w.data() + r * w_stride, n, r % 3 ? Fill::random : Fill::all_max, r);
          for (int c = 0; c < nc; ++c) gen_acts(g, a.data() + c * a_stride, n, c % 4 == 3 ? ActFill::extremes : ActFill::random);
          const int64_t y_stride = nr + g.irange(0, 3);
          std::vector<float> y(static_cast<size_t>(y_stride * nc), -7.0f);
          gemm_rows(*simd_, t, n, w.data(), w_stride, nr, a.data(), a_stride, nc, y.data(), y_stride);
          for (int c = 0; c < nc; ++c) {
            for (int r = 0; r < nr; ++r) {
              const float want = simd_->vec_dot[tid(t)](n, w.data() + r * w_stride, a.data() + c * a_stride);
              ASSERT_EQ(f32_bits_of(y[c * y_stride + r]), f32_bits_of(want)) << type_name(t) << " nr=" << nr << " nc=" << nc << " r=" << r << " c=" << c;
            }
            for (int64_t r = nr; r < y_stride; ++r) ASSERT_EQ(y[c * y_stride + r], -7.0f) << "wrote past nr";
          }
        }
      }
    }
  }
}

// Rows that start right after or end right before an inaccessible page are read without a fault,
// by vec_dot and by gemm.
TEST_P(Iq1Simd, StaysInsideRows) {
  Gen g(4);
  for (Type t : kIq1Types) {
    for (int64_t nb : {1, 2, 5, 17}) {
      const int64_t n = nb * QK_K;
      const size_t wbytes = row_bytes(t, n), abytes = row_bytes(Type::Q8_K, n);
      Guarded gw(wbytes), ga(abytes);
      ASSERT_TRUE(gw.ok() && ga.ok());
      for (int where = 0; where < 2; ++where) {
        uint8_t* w = where ? gw.at_end(wbytes) : gw.at_start();
        uint8_t* a = where ? ga.at_end(abytes) : ga.at_start();
        gen_weights(g, t, w, n, Fill::random);
        gen_acts(g, a, n, ActFill::random);
        check_dot(t, w, a, n, where ? "row at page end" : "row at page start");
        float y = 0;
        gemm_rows(*simd_, t, n, w, wbytes, 1, a, abytes, 1, &y, 1);
        EXPECT_EQ(f32_bits_of(y), f32_bits_of(scalar_->vec_dot[tid(t)](n, w, a)));
        std::vector<float> deq(static_cast<size_t>(n));
        simd_->dequantize[tid(t)](w, deq.data(), n);
      }
    }
    // Two rows and two tokens, the second of each ending at the page end.
    const int64_t n = 3 * QK_K;
    const size_t wbytes = row_bytes(t, n), abytes = row_bytes(Type::Q8_K, n);
    Guarded gw(2 * wbytes), ga(2 * abytes);
    ASSERT_TRUE(gw.ok() && ga.ok());
    uint8_t* w = gw.at_end(2 * wbytes);
    uint8_t* a = ga.at_end(2 * abytes);
    for (int r = 0; r < 2; ++r) gen_weights(g, t, w + r * wbytes, n, Fill::random);
    for (int c = 0; c < 2; ++c) gen_acts(g, a + c * abytes, n, ActFill::random);
    float y[4];
    gemm_rows(*simd_, t, n, w, wbytes, 2, a, abytes, 2, y, 2);
    for (int c = 0; c < 2; ++c) {
      for (int r = 0; r < 2; ++r) {
        EXPECT_EQ(f32_bits_of(y[2 * c + r]), f32_bits_of(scalar_->vec_dot[tid(t)](n, w + r * wbytes, a + c * abytes)));
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Isa, Iq1Simd,
                         ::testing::Values(Isa::avx2, Isa::avx_vnni, Isa::avx512, Isa::neon, Isa::dotprod, Isa::i8mm),
                         [](const ::testing::TestParamInfo<Isa>& i) { return std::string(isa_name(i.param)); });

#if defined(__aarch64__)
// The aarch64 tables hold kernels of their own for these types, so the cases above test them and
// not entries inherited from the ISA below: neon and dotprod a vec_dot and a gemm each, i8mm an
// SMMLA gemm over the dotprod vec_dot it keeps.
TEST(Iq1SimdArm, ArmTablesHaveTheirOwnKernels) {
  const KernelTable* scalar = kernel_table(Isa::scalar);
  const KernelTable* neon = kernel_table(Isa::neon);
  const KernelTable* dotprod = kernel_table(Isa::dotprod);
  const KernelTable* i8mm = kernel_table(Isa::i8mm);
  ASSERT_TRUE(scalar && neon && dotprod && i8mm);
  for (Type t : kIq1Types) {
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

}  // namespace
}  // namespace les
