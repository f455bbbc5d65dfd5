// Importance-weighted reference quantization (quantize_row_ref with an importance vector):
// without importance the output is bit for bit what the plain quantizer produced before
// importance existed (golden hashes); with a skewed importance every quantized type lowers the
// importance-weighted error sum_i imp_i (x_i - deq_i)^2, in aggregate and in most rows.

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "les/quant/kernels.h"
#include "les/quant/types.h"
#include "les/util/error.h"

namespace les {
namespace {

// Types whose quantizer searches scales (and so uses the importance).
const Type kQuantTypes[] = {Type::Q4_0, Type::Q4_1, Type::Q5_0, Type::Q5_1, Type::Q8_0,   Type::Q2_K,
                            Type::Q3_K, Type::Q4_K, Type::Q5_K, Type::Q6_K, Type::IQ4_NL, Type::IQ4_XS};

// Deterministic data from integer arithmetic and IEEE basic operations only (no libm), so the
// golden hashes below hold on any conforming platform.
class Gen {
 public:
  explicit Gen(uint64_t seed) : s_(seed * 0x9e3779b97f4a7c15ull + 0x1234567ull) {}
  uint64_t next() {  // splitmix64
    uint64_t z = (s_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  float uniform() { return static_cast<float>(next() >> 40) * 0x1.0p-24f; }  // [0, 1)
  // Irwin-Hall: the sum of 12 uniforms minus 6, mean 0, variance 1, close to a Gaussian.
  float gaussian() {
    float s = 0;
    for (int i = 0; i < 12; ++i) s += uniform();
    return s - 6.0f;
  }

 private:
  uint64_t s_;
};

enum class Dist { gaussian, heavy_tailed, outliers };
const Dist kDists[] = {Dist::gaussian, Dist::heavy_tailed, Dist::outliers};
const char* dist_name(Dist d) {
  switch (d) {
    case Dist::gaussian: return "gaussian";
    case Dist::heavy_tailed: return "heavy-tailed";
    case Dist::outliers: return "outliers";
  }
  return "?";
}

// A row of n values at magnitude `scale`: Gaussian; heavy-tailed (a Gaussian over the square root
// of a uniform, a tail like a Student t with 2 degrees of freedom, capped at 60 sigma); or Gaussian
// with 1% outliers 20x larger.
std::vector<float> gen_row(Gen& g, Dist d, int64_t n, float scale) {
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) {
    float y = g.gaussian();
    if (d == Dist::heavy_tailed) y = y / std::max(std::sqrt(g.uniform()), 1.0f / 60.0f);
    if (d == Dist::outliers && g.uniform() < 0.01f) y *= 20.0f;
    v = y * scale;
  }
  return x;
}

// Skewed importance: about 1/8 of the columns 100x the others, each jittered by [0.5, 1.5).
std::vector<float> skewed_importance(Gen& g, int64_t n) {
  std::vector<float> imp(static_cast<size_t>(n));
  for (auto& v : imp) v = (g.uniform() < 0.125f ? 100.0f : 1.0f) * (0.5f + g.uniform());
  return imp;
}

std::vector<uint8_t> quantize(Type t, const std::vector<float>& x, const float* imp) {
  std::vector<uint8_t> q(row_bytes(t, static_cast<int64_t>(x.size())));
  quantize_row_ref(t, x.data(), q.data(), static_cast<int64_t>(x.size()), imp);
  return q;
}

std::vector<float> dequantize(Type t, const std::vector<uint8_t>& q, int64_t n) {
  std::vector<float> y(static_cast<size_t>(n));
  dequantize_row(t, q.data(), y.data(), n);
  return y;
}

// sum_i imp_i (x_i - y_i)^2
double weighted_error(const std::vector<float>& x, const std::vector<float>& y, const std::vector<float>& imp) {
  double e = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double d = static_cast<double>(x[i]) - y[i];
    e += imp[i] * d * d;
  }
  return e;
}

uint64_t fnv1a(uint64_t h, const std::vector<uint8_t>& bytes) {
  for (uint8_t b : bytes) {
    h ^= b;
    h *= 0x100000001b3ull;
  }
  return h;
}

// Hash of quantize_row_ref(t, x, y, n) over 60 seeded rows of 512 (3 distributions, magnitudes
// 1e-3..1e3, some rows with all-zero 32-element chunks).
uint64_t plain_output_hash(Type t) {
  Gen g(2024);
  uint64_t h = 0xcbf29ce484222325ull;
  for (int r = 0; r < 60; ++r) {
    const float scale = r % 3 == 0 ? 1e-3f : r % 3 == 1 ? 1.0f : 1e3f;
    std::vector<float> x = gen_row(g, kDists[r % 3], 512, scale);
    if (r % 4 == 3) {
      for (size_t i = 0; i < x.size(); ++i) {
        if ((i / 32) % 3 == 1) x[i] = 0;
      }
    }
    h = fnv1a(h, quantize(t, x, nullptr));
  }
  return h;
}

// ---------------------------------------------------------------------------------------------

TEST(QuantImportance, GeneratorVaries) {
  Gen g(1);
  for (Dist d : kDists) {
    const auto x = gen_row(g, d, 4096, 1.0f);
    double mean = 0, var = 0, amax = 0;
    for (float v : x) mean += v;
    mean /= static_cast<double>(x.size());
    for (float v : x) {
      var += (v - mean) * (v - mean);
      amax = std::max(amax, std::fabs(static_cast<double>(v)));
    }
    var /= static_cast<double>(x.size());
    EXPECT_NEAR(mean, 0.0, d == Dist::gaussian ? 0.05 : 0.5) << dist_name(d);
    if (d == Dist::gaussian) {
      EXPECT_NEAR(var, 1.0, 0.1);
      EXPECT_GT(amax, 3.0);
    } else {
      EXPECT_GT(amax, 12.0) << dist_name(d);  // the tails are there
    }
  }
  const auto imp = skewed_importance(g, 4096);
  int heavy = 0;
  for (float v : imp) heavy += v >= 50.0f;
  EXPECT_GT(heavy, 4096 / 10);
  EXPECT_LT(heavy, 4096 / 6);
}

// The plain quantizer (no importance) is bit for bit what it was before importance existed; the
// hashes were recorded with the quantizer of that time (IQ4_NL/IQ4_XS: when they were added).
TEST(QuantImportance, NullImportanceReproducesPlainOutput) {
  struct Golden {
    Type t;
    uint64_t hash;
  };
  const Golden golden[] = {
      {Type::F32, 0xfce72ac1cd54ac02ull}, {Type::F16, 0x98529735c2e6d40aull}, {Type::BF16, 0xb22508a8ff12a68cull},
      {Type::Q4_0, 0xa66efb93489db07dull}, {Type::Q4_1, 0xd5ee94d02a2c05d7ull}, {Type::Q5_0, 0xa56f7556675d8b65ull},
      {Type::Q5_1, 0xd914964bc4bb549full}, {Type::Q8_0, 0xd4719e5a4263fddcull}, {Type::Q8_1, 0xf235642124db410full},
      {Type::Q2_K, 0xccb4c464ab45b9beull}, {Type::Q3_K, 0xa9657f330f505db2ull}, {Type::Q4_K, 0xdc4865f0b4f760daull},
      {Type::Q5_K, 0x34c354c34d9cd489ull}, {Type::Q6_K, 0xf60743abeda17b6full}, {Type::Q8_K, 0x39c57e9bd8ed71b4ull},
      {Type::IQ4_NL, 0xb73d28e1d953f550ull}, {Type::IQ4_XS, 0x0d2ced7956f89746ull},
  };
  for (const Golden& gd : golden) {
    const uint64_t h = plain_output_hash(gd.t);
    EXPECT_EQ(h, gd.hash) << type_name(gd.t) << std::hex << " hash 0x" << h;
  }
}

// Types without a scale search ignore the importance; an importance of zero everywhere says
// nothing about the row, which is then quantized as without importance.
TEST(QuantImportance, IgnoredOrUninformativeImportanceChangesNothing) {
  Gen g(5);
  const auto x = gen_row(g, Dist::gaussian, 512, 0.5f);
  const auto imp = skewed_importance(g, 512);
  const std::vector<float> zero(512, 0.0f);
  for (Type t : {Type::F32, Type::F16, Type::BF16, Type::Q8_1, Type::Q8_K}) {
    EXPECT_EQ(quantize(t, x, imp.data()), quantize(t, x, nullptr)) << type_name(t);
  }
  for (Type t : kQuantTypes) {
    EXPECT_EQ(quantize(t, x, zero.data()), quantize(t, x, nullptr)) << type_name(t);
    EXPECT_NE(quantize(t, x, imp.data()), quantize(t, x, nullptr)) << type_name(t) << " ignores the importance";
  }
}

// Importance zero on part of the row: those columns do not constrain the fit, the others do; the
// result is finite and exact zeros stay zero.
TEST(QuantImportance, PartlyZeroImportance) {
  Gen g(6);
  for (Type t : kQuantTypes) {
    std::vector<float> x = gen_row(g, Dist::outliers, 1024, 2.0f);
    for (size_t i = 256; i < 512; ++i) x[i] = 0;
    std::vector<float> imp = skewed_importance(g, 1024);
    for (size_t i = 0; i < imp.size(); ++i) {
      if ((i / 16) % 2 == 0 || i >= 768) imp[i] = 0;  // whole groups and single elements at zero
    }
    const auto y = dequantize(t, quantize(t, x, imp.data()), 1024);
    for (size_t i = 0; i < y.size(); ++i) {
      ASSERT_TRUE(std::isfinite(y[i])) << type_name(t) << " " << i;
      if (i >= 256 && i < 512) {
        ASSERT_EQ(y[i], 0.0f) << type_name(t) << " " << i;
      }
    }
  }
}

TEST(QuantImportance, InvalidImportanceIsAnError) {
  std::vector<float> x(256, 1.0f), imp(256, 1.0f);
  std::vector<uint8_t> y(row_bytes(Type::Q4_K, 256));
  imp[17] = -1.0f;
  EXPECT_THROW(quantize_row_ref(Type::Q4_K, x.data(), y.data(), 256, imp.data()), Error);
  imp[17] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_THROW(quantize_row_ref(Type::Q4_K, x.data(), y.data(), 256, imp.data()), Error);
  imp[17] = std::numeric_limits<float>::infinity();
  EXPECT_THROW(quantize_row_ref(Type::Q4_K, x.data(), y.data(), 256, imp.data()), Error);
  imp[17] = 0.0f;
  EXPECT_NO_THROW(quantize_row_ref(Type::Q4_K, x.data(), y.data(), 256, imp.data()));
}

// The property importance exists for: under a skewed importance, the importance-weighted error
// is lower with it than without, for every type and distribution, over all rows together (by a
// margin) and in at least 80% of the rows one by one.
TEST(QuantImportance, WeightedErrorIsLowerWithImportance) {
  constexpr int64_t n = 512;
  constexpr int rows = 100;
  for (Type t : kQuantTypes) {
    for (Dist d : kDists) {
      Gen g(1000 + static_cast<uint64_t>(t) * 10 + static_cast<uint64_t>(d));
      const auto imp = skewed_importance(g, n);
      double with = 0, without = 0;
      int better = 0;
      for (int r = 0; r < rows; ++r) {
        const float scale = r % 2 ? 0.02f : 3.0f;
        const auto x = gen_row(g, d, n, scale);
        const double ew = weighted_error(x, dequantize(t, quantize(t, x, imp.data()), n), imp);
        const double eu = weighted_error(x, dequantize(t, quantize(t, x, nullptr), n), imp);
        // rows of both magnitudes count alike in the aggregate
        const double norm = static_cast<double>(scale) * scale;
        with += ew / norm;
        without += eu / norm;
        better += ew < eu;
      }
      const double ratio = with / without;
      std::printf("%-7s %-12s weighted error with/without importance %.3f, lower in %d/%d rows\n", type_name(t),
                  dist_name(d), ratio, better, rows);
      EXPECT_LT(ratio, 0.97) << type_name(t) << " " << dist_name(d);
      EXPECT_GE(better, rows * 8 / 10) << type_name(t) << " " << dist_name(d);
    }
  }
}

// Prints, for the report, the relative RMS error per element (sqrt(sum (x - y)^2 / sum x^2)) and
// its importance-weighted form, with and without a skewed importance, on Gaussian data.
TEST(QuantImportance, RmseReport) {
  constexpr int64_t n = 512;
  constexpr int rows = 200;
  std::printf("%-7s %-14s %12s %18s\n", "type", "importance", "rel rmse", "weighted rel rmse");
  for (Type t : {Type::IQ4_NL, Type::IQ4_XS, Type::Q4_K, Type::Q4_0}) {
    for (bool use_imp : {false, true}) {
      Gen g(77);
      const auto imp = skewed_importance(g, n);
      double e = 0, s = 0, ew = 0, sw = 0;
      for (int r = 0; r < rows; ++r) {
        const auto x = gen_row(g, Dist::gaussian, n, 1.0f);
        const auto y = dequantize(t, quantize(t, x, use_imp ? imp.data() : nullptr), n);
        for (int64_t i = 0; i < n; ++i) {
          const double d = static_cast<double>(x[i]) - y[i];
          e += d * d;
          s += static_cast<double>(x[i]) * x[i];
          ew += imp[i] * d * d;
          sw += imp[i] * static_cast<double>(x[i]) * x[i];
        }
      }
      std::printf("%-7s %-14s %12.4f %18.4f\n", type_name(t), use_imp ? "skewed (100x)" : "none", std::sqrt(e / s),
                  std::sqrt(ew / sw));
    }
  }
}

}  // namespace
}  // namespace les
