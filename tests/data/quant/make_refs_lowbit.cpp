// Writes tests/data/quant/lowbit_ref.bin: llama.cpp's results for TQ1_0, TQ2_0, MXFP4 and NVFP4
// on blocks made here (random and adversarial, fixed seed), read by tests/test_quant_lowbit.cpp.
// Not built by CMake: see tests/data/quant/README.md for the command.
//
// File (little-endian): "LESLOWB1", then for each type a dot section and a quantizer section.
//   dot section:   u32 type, u32 n, u32 rows; weights [rows][row bytes]; activations
//                  [rows][act row bytes] (from_float of llama.cpp's vec_dot_type);
//                  dequantized weights f32 [rows][n] (to_float); vec_dot f32 [rows] (row r
//                  against activation row r, the CPU backend's kernel).
//   quant section: u32 type, u32 n, u32 rows; x f32 [rows][n]; importance f32 [n];
//                  quantize_chunk without importance [rows][row bytes].

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "ggml-cpu.h"
#include "ggml.h"

namespace {

struct Rng {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  uint8_t byte() { return static_cast<uint8_t>(next() >> 56); }
  float uni(float lo, float hi) { return lo + (hi - lo) * static_cast<float>((next() >> 40) * (1.0 / 16777216.0)); }
  float gauss() {
    float s = 0;
    for (int k = 0; k < 6; ++k) s += uni(-1.0f, 1.0f);
    return s;
  }
};

void put_u32(std::FILE* f, uint32_t v) { std::fwrite(&v, 4, 1, f); }
void put(std::FILE* f, const void* p, size_t n) { std::fwrite(p, 1, n, f); }

uint16_t fp16_bits(float v) { return ggml_fp32_to_fp16(v); }

// Weight block b of row r (bytes at p, block size bs bytes) of type t: adversarial for the first
// blocks of the first rows, random after.
void make_block(ggml_type t, uint8_t* p, size_t bs, int r, int b, int nb, Rng& g) {
  for (size_t k = 0; k < bs; ++k) p[k] = g.byte();
  const int which = r * nb + b;  // block number in the section
  auto set_d16 = [&](float v) {
    const uint16_t h = fp16_bits(v);
    std::memcpy(p + bs - 2, &h, 2);  // TQ1_0 / TQ2_0: d ends the block
  };
  switch (t) {
    case GGML_TYPE_TQ1_0:
    case GGML_TYPE_TQ2_0: {
      set_d16(g.uni(-0.05f, 0.05f));
      const size_t nq = bs - 2;
      if (which < 6) {  // every byte value of the code bytes
        for (size_t k = 0; k < nq; ++k) p[k] = static_cast<uint8_t>(which * nq + k);
      }
      if (which == 6) std::memset(p, 0xFF, nq);  // TQ2_0: all codes 3 (+2)
      if (which == 7) std::memset(p, 0x00, nq);
      if (which == 8) set_d16(65504.0f);
      if (which == 9) set_d16(-65504.0f);
      if (which == 10) set_d16(0.0f);
      if (which == 11) {
        const uint16_t h = 0x0001;  // smallest subnormal
        std::memcpy(p + bs - 2, &h, 2);
      }
      if (which == 12) {
        const uint16_t h = 0x8000;  // -0
        std::memcpy(p + bs - 2, &h, 2);
      }
      break;
    }
    case GGML_TYPE_MXFP4: {
      p[0] = static_cast<uint8_t>(112 + g.byte() % 24);  // scales around 2^-16 .. 2^8
      static const uint8_t kE[] = {0, 1, 2, 3, 127, 128, 200, 254, 255};
      if (which < 9) p[0] = kE[which];
      if (which == 9) std::memset(p + 1, 0x77, 16);   // all +6 (doubled: 12)
      if (which == 10) std::memset(p + 1, 0xFF, 16);  // all -6
      if (which == 11) std::memset(p + 1, 0x88, 16);  // all -0
      if (which == 12) std::memset(p + 1, 0x00, 16);
      if (which >= 13 && which < 29) {  // every code in every position
        for (int k = 0; k < 16; ++k) p[1 + k] = static_cast<uint8_t>(((k + which) & 15) | (((k * 7 + which) & 15) << 4));
      }
      break;
    }
    case GGML_TYPE_NVFP4: {
      for (int s = 0; s < 4; ++s) p[s] = static_cast<uint8_t>(which * 4 + s);  // every scale byte (64 blocks)
      if (which == 64) std::memset(p + 4, 0x77, 32);
      if (which == 65) std::memset(p + 4, 0xFF, 32);
      if (which == 66) std::memset(p + 4, 0x88, 32);
      break;
    }
    default: break;
  }
}

// Activation floats of row r: random, with some rows of extremes.
void make_acts(float* x, int64_t n, int r, Rng& g) {
  for (int64_t i = 0; i < n; ++i) x[i] = g.gauss();
  if (r == 1) {
    for (int64_t i = 0; i < n; ++i) x[i] = (i % 2) ? 1000.0f : -1000.0f;  // saturated codes
  }
  if (r == 2) {
    for (int64_t i = 0; i < n; ++i) x[i] = 1e-6f * g.gauss();  // tiny scales
  }
  if (r == 3) {
    for (int64_t i = 0; i < n; ++i) x[i] = (i % 64 == 5) ? 30.0f : 0.01f * g.gauss();  // outliers
  }
  if (r == 4) {
    for (int64_t i = 0; i < n; ++i) x[i] = i < n / 2 ? 0.0f : g.gauss();  // zero blocks
  }
}

void dot_section(std::FILE* f, ggml_type t, int n, int rows, Rng& g) {
  const ggml_type_traits* tt = ggml_get_type_traits(t);
  const ggml_type_traits_cpu* ct = ggml_get_type_traits_cpu(t);
  const size_t rb = ggml_row_size(t, n), ab = ggml_row_size(ct->vec_dot_type, n);
  const int nb = static_cast<int>(n / tt->blck_size);
  std::vector<uint8_t> w(rows * rb), a(rows * ab);
  std::vector<float> deq(static_cast<size_t>(rows) * n), dot(rows), x(n);
  for (int r = 0; r < rows; ++r) {
    for (int b = 0; b < nb; ++b) make_block(t, w.data() + r * rb + b * tt->type_size, tt->type_size, r, b, nb, g);
    make_acts(x.data(), n, r, g);
    ggml_get_type_traits_cpu(ct->vec_dot_type)->from_float(x.data(), a.data() + r * ab, n);
    tt->to_float(w.data() + r * rb, deq.data() + static_cast<size_t>(r) * n, n);
    ct->vec_dot(n, &dot[r], 0, w.data() + r * rb, 0, a.data() + r * ab, 0, 1);
  }
  put_u32(f, static_cast<uint32_t>(t));
  put_u32(f, static_cast<uint32_t>(n));
  put_u32(f, static_cast<uint32_t>(rows));
  put(f, w.data(), w.size());
  put(f, a.data(), a.size());
  put(f, deq.data(), deq.size() * 4);
  put(f, dot.data(), dot.size() * 4);
}

void quant_section(std::FILE* f, ggml_type t, int n, int rows, Rng& g) {
  const size_t rb = ggml_row_size(t, n);
  std::vector<float> x(static_cast<size_t>(rows) * n), imp(n);
  for (int i = 0; i < n; ++i) imp[i] = (i % 7 == 0) ? 50.0f * g.uni(0.5f, 1.0f) : g.uni(0.0f, 1.0f);  // skewed
  for (int r = 0; r < rows; ++r) {
    float* xr = x.data() + static_cast<size_t>(r) * n;
    const float s = std::pow(10.0f, g.uni(-3.0f, 1.0f));
    for (int i = 0; i < n; ++i) xr[i] = s * g.gauss();
    if (r == 1) {
      for (int i = 0; i < n; ++i) xr[i] = s * (i % 3 == 0 ? 1.0f : -0.3f);
    }
    if (r == 2) {
      for (int i = 0; i < n; ++i) xr[i] = (i % 37 == 0) ? 20.0f * s : 0.01f * s * g.gauss();  // outliers
    }
    if (r == 3) {
      for (int i = 0; i < n; ++i) xr[i] = i < 64 ? 0.0f : xr[i];  // zero blocks
    }
  }
  std::vector<uint8_t> q(rows * rb);
  ggml_quantize_chunk(t, x.data(), q.data(), 0, rows, n, nullptr);
  put_u32(f, static_cast<uint32_t>(t));
  put_u32(f, static_cast<uint32_t>(n));
  put_u32(f, static_cast<uint32_t>(rows));
  put(f, x.data(), x.size() * 4);
  put(f, imp.data(), imp.size() * 4);
  put(f, q.data(), q.size());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT.bin\n", argv[0]);
    return 2;
  }
  ggml_cpu_init();
  std::FILE* f = std::fopen(argv[1], "wb");
  if (!f) return 1;
  put(f, "LESLOWB1", 8);
  Rng g{20250601};
  struct Spec {
    ggml_type t;
    int n, rows;
  };
  for (Spec s : {Spec{GGML_TYPE_TQ1_0, 512, 10}, Spec{GGML_TYPE_TQ2_0, 512, 10}, Spec{GGML_TYPE_MXFP4, 256, 16},
                 Spec{GGML_TYPE_NVFP4, 256, 20}}) {
    dot_section(f, s.t, s.n, s.rows, g);
    quant_section(f, s.t, 512, 8, g);
  }
  return std::fclose(f) == 0 ? 0 : 1;
}
