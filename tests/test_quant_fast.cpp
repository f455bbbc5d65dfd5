// The fast weight quantizer (quantize_row_fast, quantize_fast*.cpp): every ISA's version is bit
// for bit the portable one on varied data (tails, misaligned rows, importance, extreme
// magnitudes); its importance-weighted squared error is within 2% of the reference quantizer's
// (aggregate per type, on synthetic rows and on rows of the trained model); zero, constant, huge
// and tiny rows are handled as the reference handles them; scales are always finite.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "les/convert/quantize_model.h"
#include "les/gguf/gguf.h"
#include "les/quant/finite.h"
#include "les/quant/kernels.h"
#include "les/quant/quant_common.h"
#include "les/quant/quantize_fast.h"
#include "les/quant/types.h"
#include "les/synth/synth.h"
#include "les/util/error.h"
#include "les/util/mapped_file.h"
#include "les/util/thread_pool.h"
#include "test_util.h"

namespace les {
namespace {

// The types with a fast version.
const Type kFastTypes[] = {Type::Q2_K, Type::Q3_K, Type::Q4_K,   Type::Q5_K,   Type::Q6_K,
                           Type::IQ4_XS, Type::IQ4_NL, Type::Q4_0, Type::Q5_0, Type::Q8_0};

int tid(Type t) { return static_cast<int>(t); }

// Deterministic data (splitmix64; Irwin-Hall Gaussians).
class Gen {
 public:
  explicit Gen(uint64_t seed) : s_(seed * 0x9e3779b97f4a7c15ull + 0x51ed27ull) {}
  uint64_t next() {
    uint64_t z = (s_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  float uniform() { return static_cast<float>(next() >> 40) * 0x1.0p-24f; }
  float gaussian() {
    float s = 0;
    for (int i = 0; i < 12; ++i) s += uniform();
    return s - 6.0f;
  }

 private:
  uint64_t s_;
};

enum class Dist { gaussian, heavy_tailed, outliers, offset, sparse };
const Dist kDists[] = {Dist::gaussian, Dist::heavy_tailed, Dist::outliers, Dist::offset, Dist::sparse};
const char* dist_name(Dist d) {
  switch (d) {
    case Dist::gaussian: return "gaussian";
    case Dist::heavy_tailed: return "heavy-tailed";
    case Dist::outliers: return "outliers";
    case Dist::offset: return "offset";
    case Dist::sparse: return "sparse";
  }
  return "?";
}

// Gaussian; heavy-tailed (Gaussian over sqrt(uniform), capped at 60 sigma); Gaussian with 1%
// outliers 20x larger; all values near +2 sigma; 70% exact zeros.
std::vector<float> gen_row(Gen& g, Dist d, int64_t n, float scale) {
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) {
    float y = g.gaussian();
    if (d == Dist::heavy_tailed) y = y / std::max(std::sqrt(g.uniform()), 1.0f / 60.0f);
    if (d == Dist::outliers && g.uniform() < 0.01f) y *= 20.0f;
    if (d == Dist::offset) y = 2.0f + 0.5f * y;
    if (d == Dist::sparse && g.uniform() < 0.7f) y = 0;
    v = y * scale;
  }
  return x;
}

// About 1/8 of the columns 100x the others, jittered by [0.5, 1.5).
std::vector<float> skewed_importance(Gen& g, int64_t n) {
  std::vector<float> imp(static_cast<size_t>(n));
  for (auto& v : imp) v = (g.uniform() < 0.125f ? 100.0f : 1.0f) * (0.5f + g.uniform());
  return imp;
}

std::vector<uint8_t> quant_with(WeightQuantizeFn fn, Type t, const std::vector<float>& x, const float* imp) {
  std::vector<uint8_t> q(row_bytes(t, static_cast<int64_t>(x.size())));
  fn(x.data(), q.data(), static_cast<int64_t>(x.size()), imp);
  return q;
}

std::vector<uint8_t> quant_ref(Type t, const std::vector<float>& x, const float* imp) {
  std::vector<uint8_t> q(row_bytes(t, static_cast<int64_t>(x.size())));
  quantize_row_ref(t, x.data(), q.data(), static_cast<int64_t>(x.size()), imp);
  return q;
}

std::vector<uint8_t> quant_fast(Type t, const std::vector<float>& x, const float* imp) {
  std::vector<uint8_t> q(row_bytes(t, static_cast<int64_t>(x.size())));
  quantize_row_fast(t, x.data(), q.data(), static_cast<int64_t>(x.size()), imp);
  return q;
}

std::vector<float> dequant(Type t, const std::vector<uint8_t>& q, int64_t n) {
  std::vector<float> y(static_cast<size_t>(n));
  dequantize_row(t, q.data(), y.data(), n);
  return y;
}

// sum_i w_i (x_i - y_i)^2, w = 1 without importance.
double weighted_error(const std::vector<float>& x, const std::vector<float>& y, const float* imp) {
  double e = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double d = static_cast<double>(x[i]) - y[i];
    e += (imp ? imp[i] : 1.0) * d * d;
  }
  return e;
}

double weighted_norm(const std::vector<float>& x, const float* imp) {
  double s = 0;
  for (size_t i = 0; i < x.size(); ++i) s += (imp ? imp[i] : 1.0) * static_cast<double>(x[i]) * x[i];
  return s;
}

// The ISAs this CPU runs besides the portable one.
std::vector<Isa> simd_isas() {
  std::vector<Isa> v;
  for (Isa isa : {Isa::avx2, Isa::avx512}) {
    if (kernel_table(isa) && static_cast<int>(isa) <= static_cast<int>(detect_isa())) v.push_back(isa);
  }
  return v;
}

// ---------------------------------------------------------------------------------------------

TEST(QuantFast, GeneratorVaries) {
  Gen g(1);
  for (Dist d : kDists) {
    const auto x = gen_row(g, d, 4096, 1.0f);
    double s = 0, amax = 0;
    int zeros = 0;
    for (float v : x) {
      s += static_cast<double>(v) * v;
      amax = std::max(amax, std::fabs(static_cast<double>(v)));
      zeros += v == 0;
    }
    EXPECT_GT(s / 4096, d == Dist::sparse ? 0.2 : 0.8) << dist_name(d);
    EXPECT_GT(amax, d == Dist::gaussian || d == Dist::sparse ? 3.0 : d == Dist::offset ? 3.5 : 12.0)
        << dist_name(d);
    EXPECT_EQ(zeros > 2000, d == Dist::sparse) << dist_name(d);
  }
  EXPECT_NE(gen_row(g, Dist::gaussian, 64, 1.0f), gen_row(g, Dist::gaussian, 64, 1.0f));
}

TEST(QuantFast, TablesHaveEveryWeightType) {
  for (Isa isa : {Isa::scalar, Isa::avx2, Isa::avx512}) {
    const KernelTable* kt = kernel_table(isa);
    if (!kt) continue;
    for (uint32_t id = 0; id < kTypeSlots; ++id) {
      const auto ti = type_info(id);
      if (ti && ti->weight_type) {
        EXPECT_NE(kt->quantize_fast[id], nullptr) << isa_name(isa) << " " << ti->name;
      }
    }
  }
}

// The IQ4 code search (32 buckets of width 8 plus one comparison) is the nearest value of the
// codebook, the lower one on a tie, for every float: midpoints and their float neighbours, bucket
// boundaries and theirs, random values of every magnitude, infinities and NaN.
TEST(QuantFast, Iq4CodeSearchIsNearestValue) {
  std::vector<float> v;
  for (float m : kIq4Midpoints) {
    for (float c : {m, std::nextafter(m, -1e9f), std::nextafter(m, 1e9f)}) v.push_back(c);
  }
  for (int b = -20; b <= 20; ++b) {
    const float e = 8.0f * static_cast<float>(b);
    for (float c : {e, std::nextafter(e, -1e9f), std::nextafter(e, 1e9f)}) v.push_back(c);
  }
  Gen g(3);
  for (int i = 0; i < 100000; ++i) v.push_back(g.gaussian() * (i % 3 == 0 ? 3.0f : i % 3 == 1 ? 60.0f : 1e5f));
  for (int i = 0; i < 20000; ++i) {
    uint32_t u = static_cast<uint32_t>(g.next());
    float f;
    std::memcpy(&f, &u, 4);
    v.push_back(f);
  }
  for (float c : {0.0f, -0.0f, std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::denorm_min(), 127.0f, -128.0f,
                  128.0f, -129.0f}) {
    v.push_back(c);
  }
  while (v.size() % 16) v.push_back(0.0f);
  for (size_t i = 0; i < v.size(); i += 16) {
    float codes[16];
    fastq::iq4_codes_portable(v.data() + i, codes);
    for (int j = 0; j < 16; ++j) {
      ASSERT_EQ(static_cast<int>(codes[j]), nearest_iq4(v[i + j])) << std::hexfloat << v[i + j];
    }
  }
}

// Every SIMD version gives the portable version's bytes: rows of 1..(a few batches) groups, so
// that batches are full and partial; inputs and outputs at odd addresses; with and without
// importance (skewed, partly zero, all zero); magnitudes from subnormal-scale to near the fp16
// limit.
TEST(QuantFast, SimdBitIdenticalToPortable) {
  const std::vector<Isa> isas = simd_isas();
  if (isas.empty()) LES_SKIP_CPU("no SIMD ISA on this CPU");
  const KernelTable& sc = *kernel_table(Isa::scalar);
  int rows = 0;
  for (Type t : kFastTypes) {
    const int64_t bs = block_size(t);
    const std::vector<int64_t> blocks = bs == 32 ? std::vector<int64_t>{1, 2, 15, 16, 17, 33}
                                                 : std::vector<int64_t>{1, 2, 3, 5};
    Gen g(100 + static_cast<uint64_t>(t));
    int k = 0;
    for (int64_t nb : blocks) {
      const int64_t n = nb * bs;
      for (Dist d : kDists) {
        for (float scale : {1e-6f, 1.0f, 3e3f}) {
          ++k;
          // misaligned input: the row starts one float into the buffer
          std::vector<float> xbuf(static_cast<size_t>(n) + 1);
          const auto row = gen_row(g, d, n, scale);
          std::copy(row.begin(), row.end(), xbuf.begin() + 1);
          const float* x = xbuf.data() + 1;
          std::vector<float> imp = skewed_importance(g, n);
          if (k % 3 == 1) {
            for (int64_t i = 0; i < n; ++i) {
              if ((i / 16) % 3 == 0) imp[static_cast<size_t>(i)] = 0;
            }
          }
          if (k % 5 == 2) std::fill(imp.begin(), imp.end(), 0.0f);
          const size_t bytes = row_bytes(t, n);
          for (const float* ip : {static_cast<const float*>(nullptr), static_cast<const float*>(imp.data())}) {
            std::vector<uint8_t> want(bytes + 3), got(bytes + 3);
            sc.quantize_fast[tid(t)](x, want.data() + 3, n, ip);
            for (Isa isa : isas) {
              std::fill(got.begin(), got.end(), 0xA5);
              kernel_table(isa)->quantize_fast[tid(t)](x, got.data() + 3, n, ip);
              ASSERT_TRUE(std::equal(want.begin() + 3, want.end(), got.begin() + 3))
                  << isa_name(isa) << " " << type_name(t) << " n=" << n << " " << dist_name(d) << " scale " << scale
                  << (ip ? " importance" : "");
              ASSERT_EQ(got[0], 0xA5);  // nothing written before the row
              ASSERT_EQ(got[2], 0xA5);
              ++rows;
            }
          }
        }
      }
    }
  }
  std::printf("%d rows bit-identical\n", rows);
}

// Deterministic, and quantize_row_fast is the active table's entry.
TEST(QuantFast, DeterministicAndDispatched) {
  Gen g(7);
  for (Type t : kFastTypes) {
    const auto x = gen_row(g, Dist::outliers, 1024, 0.3f);
    const auto imp = skewed_importance(g, 1024);
    const auto a = quant_fast(t, x, imp.data());
    EXPECT_EQ(a, quant_fast(t, x, imp.data())) << type_name(t);
    EXPECT_EQ(a, quant_with(kernels().quantize_fast[tid(t)], t, x, imp.data())) << type_name(t);
  }
  // The other weight types are the reference quantizer.
  for (Type t : {Type::Q4_1, Type::Q5_1, Type::F16, Type::BF16, Type::F32}) {
    const auto x = gen_row(g, Dist::gaussian, 512, 1.0f);
    const auto imp = skewed_importance(g, 512);
    EXPECT_EQ(quant_fast(t, x, imp.data()), quant_ref(t, x, imp.data())) << type_name(t);
  }
}

// The quality contract: over every distribution, magnitude and importance case together, the
// fast quantizer's weighted squared error (relative to the weighted norm of each row, so that
// all rows count alike) is at most 2% above the reference's, per type.
TEST(QuantFast, WeightedErrorWithinTwoPercentOfReference) {
  constexpr int64_t n = 1024;
  for (Type t : kFastTypes) {
    Gen g(500 + static_cast<uint64_t>(t));
    double ef = 0, er = 0;
    int rows = 0, worse = 0;
    for (Dist d : kDists) {
      for (int r = 0; r < 24; ++r) {
        const float scale = r % 3 == 0 ? 0.01f : r % 3 == 1 ? 1.0f : 200.0f;
        const auto x = gen_row(g, d, n, scale);
        const auto imp = skewed_importance(g, n);
        const float* ip = r % 2 ? imp.data() : nullptr;
        const double norm = weighted_norm(x, ip);
        const double f = weighted_error(x, dequant(t, quant_fast(t, x, ip), n), ip) / norm;
        const double e = weighted_error(x, dequant(t, quant_ref(t, x, ip), n), ip) / norm;
        ef += f;
        er += e;
        worse += f > 1.05 * e;
        ++rows;
      }
    }
    std::printf("%-7s fast/reference weighted error %.4f  (%d of %d rows more than 5%% worse)\n", type_name(t),
                ef / er, worse, rows);
    EXPECT_GT(er, 0.0);
    EXPECT_LE(ef, 1.02 * er) << type_name(t);
  }
}

// Zero rows dequantize to zero, constant rows to within 2% (as the reference), and extreme
// magnitudes (fp16-subnormal scales, scales near the fp16 limit, values below any fp16 step) give
// finite scales and, over the rows of each magnitude, a weighted error within 5% of the
// reference's (the scale grid is coarse there, so single rows may differ more).
TEST(QuantFast, ZeroConstantAndExtremeRows) {
  for (Type t : kFastTypes) {
    const int64_t n = 2 * std::max<int64_t>(block_size(t), 256);
    const std::vector<float> zero(static_cast<size_t>(n), 0.0f);
    for (float v : dequant(t, quant_fast(t, zero, nullptr), n)) ASSERT_EQ(v, 0.0f) << type_name(t);
    for (float c : {0.75f, -3.0f, 1e-4f}) {
      const std::vector<float> x(static_cast<size_t>(n), c);
      for (float v : dequant(t, quant_fast(t, x, nullptr), n)) ASSERT_NEAR(v, c, std::fabs(c) * 0.02f) << type_name(t);
    }
    Gen g(900 + static_cast<uint64_t>(t));
    for (float scale : {1e-30f, 1e-8f, 1e-5f, 1e4f, 1e6f}) {
      double ef = 0, er = 0;
      for (int r = 0; r < 8; ++r) {
        const auto x = gen_row(g, r % 2 ? Dist::outliers : Dist::gaussian, n, scale);
        const auto imp = skewed_importance(g, n);
        const float* ip = r % 4 < 2 ? nullptr : imp.data();
        const auto q = quant_fast(t, x, ip);
        ASSERT_FALSE(find_nonfinite(t, q.data(), n).has_value()) << type_name(t) << " scale " << scale;
        const auto y = dequant(t, q, n);
        for (float v : y) ASSERT_TRUE(std::isfinite(v)) << type_name(t) << " scale " << scale;
        const double norm = weighted_norm(x, ip);
        ef += weighted_error(x, y, ip) / norm;
        er += weighted_error(x, dequant(t, quant_ref(t, x, ip), n), ip) / norm;
      }
      std::printf("%-7s scale %g: fast/reference weighted error %.4f\n", type_name(t), scale, ef / er);
      EXPECT_LE(ef, 1.05 * er) << type_name(t) << " scale " << scale;
    }
    // The largest values fp16 scales can represent, and beyond (saturated, still finite), and
    // values no finite scale can represent.
    for (float big : {6e4f, 3e38f, std::numeric_limits<float>::infinity()}) {
      std::vector<float> x = gen_row(g, Dist::gaussian, n, 1.0f);
      x[5] = big;
      x[static_cast<size_t>(n) - 3] = -big;
      const auto q = quant_fast(t, x, nullptr);
      ASSERT_FALSE(find_nonfinite(t, q.data(), n).has_value()) << type_name(t) << " " << big;
    }
  }
}

TEST(QuantFast, ImportanceZeroOrPartlyZero) {
  Gen g(11);
  for (Type t : kFastTypes) {
    std::vector<float> x = gen_row(g, Dist::outliers, 1024, 2.0f);
    for (size_t i = 256; i < 512; ++i) x[i] = 0;
    std::vector<float> imp = skewed_importance(g, 1024);
    for (size_t i = 0; i < imp.size(); ++i) {
      if ((i / 16) % 2 == 0 || i >= 768) imp[i] = 0;
    }
    const auto y = dequant(t, quant_fast(t, x, imp.data()), 1024);
    for (size_t i = 0; i < y.size(); ++i) {
      ASSERT_TRUE(std::isfinite(y[i])) << type_name(t) << " " << i;
      if (i >= 256 && i < 512) {
        ASSERT_EQ(y[i], 0.0f) << type_name(t) << " " << i;
      }
    }
    // An importance of zero everywhere is no importance.
    const std::vector<float> z(1024, 0.0f);
    EXPECT_EQ(quant_fast(t, x, z.data()), quant_fast(t, x, nullptr)) << type_name(t);
  }
}

TEST(QuantFast, Errors) {
  std::vector<float> x(512, 1.0f), imp(512, 1.0f);
  std::vector<uint8_t> y(4096);
  EXPECT_THROW(quantize_row_fast(Type::Q4_K, x.data(), y.data(), 100), Error);
  EXPECT_THROW(quantize_row_fast(Type::I32, x.data(), y.data(), 32), Error);
  EXPECT_THROW(quantize_row_fast(static_cast<Type>(99), x.data(), y.data(), 32), Error);
  imp[3] = -1;
  EXPECT_THROW(quantize_row_fast(Type::Q4_K, x.data(), y.data(), 256, imp.data()), Error);
  imp[3] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_THROW(quantize_row_fast(Type::Q4_K, x.data(), y.data(), 256, imp.data()), Error);
  imp[3] = 0;
  EXPECT_NO_THROW(quantize_row_fast(Type::Q4_K, x.data(), y.data(), 256, imp.data()));
  EXPECT_NO_THROW(quantize_row_fast(Type::Q4_0, x.data(), y.data(), 0));
}

// Rows of a trained model (the bundled dense draft's Q8_0 matrices, dequantized: its trained
// weights to within 8-bit rounding): the same 2% contract, without and with an importance (another
// row's squared values as a stand-in for activation statistics).
TEST(QuantFast, TrainedModelRowsWithinTwoPercentOfReference) {
  const std::string path = les::test::tiny_draft_path();
  LES_REQUIRE_FILE(path);
  const gguf::File f = gguf::read_file(path);
  const MappedFile map = MappedFile::open(path);
  std::vector<std::vector<float>> rows;
  for (const auto& t : f.tensors) {
    if (t.ne.size() < 2 || t.ne[0] % 256 != 0 || t.type != Type::Q8_0) continue;
    const int64_t n_rows = t.n_elements() / t.ne[0];
    for (int k = 0; k < 6; ++k) {
      const int64_t r = (k * n_rows) / 6 + k;
      std::vector<float> x(static_cast<size_t>(t.ne[0]));
      dequantize_row(t.type, map.data() + f.data_offset + t.offset + static_cast<size_t>(r) * row_bytes(t.type, t.ne[0]),
                     x.data(), t.ne[0]);
      rows.push_back(std::move(x));
    }
  }
  ASSERT_GT(rows.size(), 100u);
  for (Type t : kFastTypes) {
    double ef = 0, er = 0;
    for (size_t r = 0; r < rows.size(); ++r) {
      const auto& x = rows[r];
      const int64_t n = static_cast<int64_t>(x.size());
      std::vector<float> imp(x.size());
      for (size_t i = 0; i < x.size(); ++i) imp[i] = rows[(r + 1) % rows.size()][i % rows[(r + 1) % rows.size()].size()];
      for (float& v : imp) v = v * v;
      const float* ip = r % 2 ? imp.data() : nullptr;
      const double norm = weighted_norm(x, ip);
      if (!(norm > 0)) continue;
      ef += weighted_error(x, dequant(t, quant_fast(t, x, ip), n), ip) / norm;
      er += weighted_error(x, dequant(t, quant_ref(t, x, ip), n), ip) / norm;
    }
    if (t == Type::Q8_0) {
      // Rows that were Q8_0 blocks: both quantizers find the same scales again, losslessly.
      EXPECT_EQ(ef, 0.0);
      EXPECT_EQ(er, 0.0);
      continue;
    }
    std::printf("%-7s trained rows: fast/reference weighted error %.4f (%zu rows)\n", type_name(t), ef / er,
                rows.size());
    EXPECT_LE(ef, 1.02 * er) << type_name(t);
  }
}

// convert_rows quantizes with the method asked for (fast by default), with the importance of
// each matrix, whatever the thread count.
TEST(QuantFast, ConvertRowsUsesTheChosenQuantizer) {
  Gen g(21);
  const std::vector<int64_t> ne = {512, 6, 3};  // 3 matrices of 6 rows
  const int64_t rows = 18;
  const auto x = gen_row(g, Dist::heavy_tailed, 512 * rows, 0.05f);
  std::vector<std::vector<float>> imp;
  for (int m = 0; m < 3; ++m) imp.push_back(skewed_importance(g, 512));
  const ImportanceFn importance = [&](const std::string& name, int m, std::vector<float>&) -> const float* {
    EXPECT_EQ(name, "t.weight");
    return imp[static_cast<size_t>(m)].data();
  };
  for (Type t : {Type::Q3_K, Type::IQ4_XS, Type::Q4_0}) {
    const size_t rb = row_bytes(t, 512);
    for (QuantMethod method : {QuantMethod::fast, QuantMethod::exact}) {
      std::vector<uint8_t> want(rb * rows);
      for (int64_t r = 0; r < rows; ++r) {
        const float* xr = x.data() + r * 512;
        const float* ip = imp[static_cast<size_t>(r / 6)].data();
        if (method == QuantMethod::fast) {
          quantize_row_fast(t, xr, want.data() + r * rb, 512, ip);
        } else {
          quantize_row_ref(t, xr, want.data() + r * rb, 512, ip);
        }
      }
      for (int threads : {1, 2}) {
        ThreadPool pool(threads);
        std::vector<uint8_t> got(rb * rows);
        // rows 4.. of the tensor: row0 picks the right matrices' importance
        convert_rows(reinterpret_cast<const uint8_t*>(x.data() + 4 * 512), Type::F32, t, ne, 4, rows - 4,
                     got.data() + 4 * rb, "t.weight", importance, pool, method);
        EXPECT_TRUE(std::equal(want.begin() + 4 * static_cast<long>(rb), want.end(), got.begin() + 4 * static_cast<long>(rb)))
            << type_name(t) << (method == QuantMethod::fast ? " fast" : " exact") << " threads " << threads;
      }
    }
    std::vector<uint8_t> def(rb * rows), fast(rb * rows);
    ThreadPool pool(1);
    convert_rows(reinterpret_cast<const uint8_t*>(x.data()), Type::F32, t, ne, 0, rows, def.data(), "t.weight",
                 importance, pool);
    convert_rows(reinterpret_cast<const uint8_t*>(x.data()), Type::F32, t, ne, 0, rows, fast.data(), "t.weight",
                 importance, pool, QuantMethod::fast);
    EXPECT_EQ(def, fast) << type_name(t);
  }
}

// les quantize: the fast quantizer by default, the reference with --exact; every converted
// matrix holds exactly what the chosen quantizer makes of the source rows.
TEST(QuantFast, QuantizeCommandDefaultAndExact) {
  const std::string dir = les::test::temp_dir();
  synth::SynthSpec spec = synth::shape_spec("tiny");
  spec.type = "f16";
  spec.n_embd = 256;  // rows of 256: K-quant matrices
  spec.n_ff_exp = 256;
  const std::string in = dir + "/in.gguf", fast = dir + "/fast.gguf", exact = dir + "/exact.gguf";
  synth::write_synth_model(spec, in);
  ASSERT_EQ(les::test::run_les("quantize '" + in + "' '" + fast + "' q3_K -t 2"), 0);
  ASSERT_EQ(les::test::run_les("quantize '" + in + "' '" + exact + "' q3_K -t 2 --exact"), 0);
  const gguf::File fi = gguf::read_file(in), ff = gguf::read_file(fast), fe = gguf::read_file(exact);
  const MappedFile mi = MappedFile::open(in), mf = MappedFile::open(fast), me = MappedFile::open(exact);
  int checked = 0;
  for (const auto& t : ff.tensors) {
    if (t.type != Type::Q3_K) continue;
    const auto* src = fi.find_tensor(t.name);
    const auto* ex = fe.find_tensor(t.name);
    ASSERT_NE(src, nullptr);
    ASSERT_NE(ex, nullptr);
    ASSERT_EQ(ex->type, Type::Q3_K);
    const int64_t n = t.ne[0], rows = t.n_elements() / n;
    const size_t rb = row_bytes(Type::Q3_K, n), sb = row_bytes(src->type, n);
    for (int64_t r = 0; r < rows; r += std::max<int64_t>(1, rows / 7)) {
      std::vector<float> x(static_cast<size_t>(n));
      dequantize_row(src->type, mi.data() + fi.data_offset + src->offset + static_cast<size_t>(r) * sb, x.data(), n);
      std::vector<uint8_t> qf(rb), qe(rb);
      quantize_row_fast(Type::Q3_K, x.data(), qf.data(), n);
      quantize_row_ref(Type::Q3_K, x.data(), qe.data(), n);
      ASSERT_EQ(0, std::memcmp(qf.data(), mf.data() + ff.data_offset + t.offset + static_cast<size_t>(r) * rb, rb))
          << t.name << " row " << r;
      ASSERT_EQ(0, std::memcmp(qe.data(), me.data() + fe.data_offset + ex->offset + static_cast<size_t>(r) * rb, rb))
          << t.name << " row " << r;
      ++checked;
    }
  }
  EXPECT_GT(checked, 20);
  std::string err;
  EXPECT_EQ(les::test::run_les("quantize --help", &err), 0);
  (void)std::system(("rm -rf '" + dir + "'").c_str());
}

}  // namespace
}  // namespace les
