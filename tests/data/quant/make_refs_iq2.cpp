// Writes tests/data/quant/iq2_ref.bin: llama.cpp's results on IQ2_XXS / IQ2_XS / IQ2_S data, read by
// tests/test_quant_iq2.cpp. Not built by CMake; the compile command is in tests/data/quant/README.md.
//
// File: "LESIQ2R1", then sections, each a header of four uint32 {type id, kind, rows, n} and data:
//   kind 1 (products): weights [rows][row bytes], Q8_K activations [rows][row bytes] (llama.cpp's
//     activation quantizer), dequantized-row hashes uint64 [rows] (FNV-1a 64 over the float bits
//     of llama.cpp's to_float), vec_dot results float [rows] (llama.cpp's CPU vec_dot).
//   kind 2 (quantizer): x [rows][n] fp16, importance [rows][n] fp16, llama.cpp's
//     ggml_quantize_chunk output with that row's importance [rows][row bytes].
// Weight blocks: every grid index with random signs and scales, random bytes, and adversarial
// ones (all bits set, all zero, zero / largest / subnormal / negative scales). Deterministic.

#include <cmath>
#include <cstdint>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "ggml-cpu.h"
#include "ggml.h"

namespace {

struct Rng {
  uint64_t s;
  uint64_t next() {  // splitmix64
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uni() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  double normal() {
    const double u = uni() + 1e-300, v = uni();
    return std::sqrt(-2 * std::log(u)) * std::cos(6.283185307179586 * v);
  }
};

void put(FILE* f, const void* p, size_t n) {
  if (std::fwrite(p, 1, n, f) != n) {
    std::perror("write");
    std::exit(1);
  }
}
void put_u32(FILE* f, uint32_t v) { put(f, &v, 4); }

uint64_t fnv(const float* v, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, &v[i], 4);
    for (int b = 0; b < 4; ++b) {
      h ^= (u >> (8 * b)) & 0xff;
      h *= 0x100000001b3ull;
    }
  }
  return h;
}

constexpr int kQK = 256;

// Writes the fp16 scale d into a block (offset 0 in all three layouts).
void set_d(uint8_t* b, uint16_t h) { std::memcpy(b, &h, 2); }

// One weight block of type t, variant v (see the file comment); blk counts blocks of the type.
void make_block(ggml_type t, size_t bb, int blk, Rng& r, uint8_t* b) {
  const int n_grid = t == GGML_TYPE_IQ2_XXS ? 256 : t == GGML_TYPE_IQ2_XS ? 512 : 1024;
  const int grid_blocks = n_grid / 32;
  for (size_t i = 0; i < bb; ++i) b[i] = static_cast<uint8_t>(r.next());
  const float dval = static_cast<float>((r.uni() * 0.1 + 1e-3) * (r.next() & 1 ? -1 : 1));
  set_d(b, ggml_fp32_to_fp16(dval));
  if (blk < grid_blocks) {  // every grid index once, in order
    for (int g = 0; g < 32; ++g) {
      const int idx = 32 * blk + g;
      if (t == GGML_TYPE_IQ2_XXS) {
        b[2 + 8 * (g / 4) + g % 4] = static_cast<uint8_t>(idx);
      } else if (t == GGML_TYPE_IQ2_XS) {
        uint16_t q;
        std::memcpy(&q, b + 2 + 2 * g, 2);
        q = static_cast<uint16_t>((q & ~511u) | idx);
        std::memcpy(b + 2 + 2 * g, &q, 2);
      } else {
        b[2 + g] = static_cast<uint8_t>(idx & 255);
        uint8_t& qh = b[2 + 64 + g / 4];
        qh = static_cast<uint8_t>((qh & ~(3u << (2 * (g % 4)))) | ((idx >> 8) << (2 * (g % 4))));
      }
    }
    return;
  }
  switch ((blk - grid_blocks) % 8) {
    case 0: break;  // random bytes, moderate scale
    case 1: std::memset(b, 0xff, bb); set_d(b, 0x7bff); break;        // every field max, d = 65504
    case 2: std::memset(b, 0xff, bb); set_d(b, 0xfbff); break;        // d = -65504
    case 3: std::memset(b, 0, bb); break;                             // all zero (d = 0)
    case 4: set_d(b, 0); break;                                       // d = 0, random codes
    case 5: set_d(b, static_cast<uint16_t>(1 + (r.next() & 0x3ff))); break;  // subnormal d
    case 6: set_d(b, static_cast<uint16_t>(0x7800 | (r.next() & 0x3ff))); break;  // huge d
    case 7: std::memset(b + 2, 0, bb - 2); break;                     // grid 0, no signs, ls 0
  }
}

void products(FILE* f, ggml_type t, Rng& r) {
  const int rows = 20, blocks_per_row = 4, n = kQK * blocks_per_row;
  const size_t rb = ggml_row_size(t, n), ab = ggml_row_size(GGML_TYPE_Q8_K, n);
  const size_t bb = rb / blocks_per_row;
  std::vector<uint8_t> w(rb * rows), a(ab * rows);
  std::vector<uint64_t> hashes(rows);
  std::vector<float> dots(rows), deq(n), x(n);
  const auto* traits = ggml_get_type_traits(t);
  const auto* cpu = ggml_get_type_traits_cpu(t);
  const auto* q8 = ggml_get_type_traits_cpu(GGML_TYPE_Q8_K);
  if (cpu->vec_dot_type != GGML_TYPE_Q8_K) {
    std::fprintf(stderr, "unexpected vec_dot_type\n");
    std::exit(1);
  }
  for (int row = 0; row < rows; ++row) {
    for (int k = 0; k < blocks_per_row; ++k) make_block(t, bb, row * blocks_per_row + k, r, &w[row * rb + k * bb]);
    // Activations: gaussian at scale 2^e; some rows with a zero block, one huge outlier, or a
    // single nonzero value.
    const double scale = std::ldexp(1.0, static_cast<int>(r.next() % 24) - 12);
    for (int i = 0; i < n; ++i) x[i] = static_cast<float>(r.normal() * scale);
    if (row % 4 == 1) std::fill(x.begin() + kQK, x.begin() + 2 * kQK, 0.0f);
    if (row % 4 == 2) x[static_cast<size_t>(r.next() % n)] = static_cast<float>(1e4 * scale);
    if (row % 4 == 3) {
      std::fill(x.begin(), x.begin() + kQK, 0.0f);
      x[static_cast<size_t>(r.next() % kQK)] = -1.0f;
    }
    q8->from_float(x.data(), &a[row * ab], n);
    traits->to_float(&w[row * rb], deq.data(), n);
    hashes[row] = fnv(deq.data(), n);
    cpu->vec_dot(n, &dots[row], 0, &w[row * rb], 0, &a[row * ab], 0, 1);
  }
  put_u32(f, t);
  put_u32(f, 1);
  put_u32(f, rows);
  put_u32(f, n);
  put(f, w.data(), w.size());
  put(f, a.data(), a.size());
  put(f, hashes.data(), hashes.size() * 8);
  put(f, dots.data(), dots.size() * 4);
}

void quantizer(FILE* f, ggml_type t, Rng& r) {
  const int rows = 12, n = 2 * kQK;
  const size_t rb = ggml_row_size(t, n);
  std::vector<uint16_t> xh(static_cast<size_t>(rows) * n), ih(static_cast<size_t>(rows) * n);
  std::vector<uint8_t> q(rb * rows);
  std::vector<float> x(n), imp(n);
  for (int row = 0; row < rows; ++row) {
    for (int i = 0; i < n; ++i) {
      double v = r.normal();
      switch (row % 4) {
        case 0: break;                                       // gaussian
        case 1: v = v / std::sqrt(0.05 + r.uni()); break;    // heavy tails
        case 2: v = (r.uni() * 2 - 1) * (i % 32 == 0 ? 20 : 1); break;  // uniform with outliers
        case 3: v = v * std::exp(2 * std::sin(i * 0.1)); break;  // slowly varying magnitude
      }
      x[i] = ggml_fp16_to_fp32(ggml_fp32_to_fp16(static_cast<float>(v * 0.02)));
      // Importance: skewed (log-normal), with some zeros in every other row.
      double w = std::exp(2.0 * r.normal());
      if (row % 2 && r.uni() < 0.1) w = 0;
      imp[i] = ggml_fp16_to_fp32(ggml_fp32_to_fp16(static_cast<float>(w)));
      xh[static_cast<size_t>(row) * n + i] = ggml_fp32_to_fp16(x[i]);
      ih[static_cast<size_t>(row) * n + i] = ggml_fp32_to_fp16(imp[i]);
    }
    ggml_quantize_chunk(t, x.data(), &q[row * rb], 0, 1, n, imp.data());
  }
  put_u32(f, t);
  put_u32(f, 2);
  put_u32(f, rows);
  put_u32(f, n);
  put(f, xh.data(), xh.size() * 2);
  put(f, ih.data(), ih.size() * 2);
  put(f, q.data(), q.size());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT.bin\n", argv[0]);
    return 2;
  }
  ggml_cpu_init();
  FILE* f = std::fopen(argv[1], "wb");
  if (!f) {
    std::perror(argv[1]);
    return 1;
  }
  put(f, "LESIQ2R1", 8);
  Rng r{20261206};
  for (ggml_type t : {GGML_TYPE_IQ2_XXS, GGML_TYPE_IQ2_XS, GGML_TYPE_IQ2_S}) {
    products(f, t, r);
    quantizer(f, t, r);
  }
  std::fclose(f);
  return 0;
}
