// Deterministic test data of IQ1_S / IQ1_M shared by the reference generator
// (make_refs_iq1.cpp, linked against llama.cpp) and tests/test_quant_iq1.cpp: block field writers
// and the quantizer comparison's rows, which both programs build from integer arithmetic and
// basic float operations only (no libm), so they are bit-identical on any IEEE machine.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

namespace iq1_rows {

constexpr int kIq1S = 19;  // GGUF type ids
constexpr int kIq1M = 29;

// Sets the fp16 super-scale of a block (IQ1_S: field d; IQ1_M: the top nibbles of its scales).
inline void set_d(int t, uint8_t* b, uint16_t h) {
  if (t == kIq1S) {
    std::memcpy(b, &h, 2);
    return;
  }
  uint8_t* sc = b + 48;
  for (int k = 0; k < 4; ++k) {
    sc[2 * k + 1] = static_cast<uint8_t>((sc[2 * k + 1] & 0x0f) | (((h >> (4 * k)) & 0x0f) << 4));
  }
}

// Sets group g (0..31) of a block to grid index idx (11 bits) with delta sign s; IQ1_S takes the
// sign of a whole sub-block from its group 0.
inline void set_group(int t, uint8_t* b, int g, int idx, int s) {
  if (t == kIq1S) {
    uint8_t* qs = b + 2;
    uint8_t* qhb = b + 34;
    uint16_t qh;
    std::memcpy(&qh, qhb + 2 * (g / 4), 2);
    const int l = g % 4;
    qs[g] = static_cast<uint8_t>(idx & 0xff);
    qh = static_cast<uint16_t>((qh & ~(7u << (3 * l))) | (((idx >> 8) & 7u) << (3 * l)));
    if (l == 0) qh = static_cast<uint16_t>((qh & 0x7fff) | (s ? 0x8000 : 0));
    std::memcpy(qhb + 2 * (g / 4), &qh, 2);
    return;
  }
  uint8_t* qs = b;
  uint8_t* qh = b + 32;
  qs[g] = static_cast<uint8_t>(idx & 0xff);
  const int nib = ((idx >> 8) & 7) | (s ? 8 : 0);
  uint8_t& q = qh[g / 2];
  q = (g % 2) ? static_cast<uint8_t>((q & 0x0f) | (nib << 4)) : static_cast<uint8_t>((q & 0xf0) | nib);
}

// Sets every 3-bit sub-block scale of a block to ls.
inline void set_scales(int t, uint8_t* b, int ls) {
  if (t == kIq1S) {
    for (int ib = 0; ib < 8; ++ib) {
      uint16_t qh;
      std::memcpy(&qh, b + 34 + 2 * ib, 2);
      qh = static_cast<uint16_t>((qh & ~(7u << 12)) | (static_cast<unsigned>(ls) << 12));
      std::memcpy(b + 34 + 2 * ib, &qh, 2);
    }
    return;
  }
  for (int k = 0; k < 4; ++k) {
    uint16_t sc;
    std::memcpy(&sc, b + 48 + 2 * k, 2);
    uint16_t v = static_cast<uint16_t>(sc & 0xf000);
    for (int j = 0; j < 4; ++j) v = static_cast<uint16_t>(v | (ls << (3 * j)));
    std::memcpy(b + 48 + 2 * k, &v, 2);
  }
}

constexpr int kMatrices = 6;   // kinds of weight matrix (see make below)
constexpr int kRows = 8;       // rows per matrix
constexpr int kCols = 1024;    // elements per row (4 super-blocks)

struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed) {}
  uint64_t next() {  // splitmix64
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  float uni() { return static_cast<float>(next() >> 40) * (1.0f / 16777216.0f); }  // [0, 1)
  // Approximately standard normal: the centred sum of 4 uniforms, scaled to unit variance.
  float normal() { return (uni() + uni() + uni() + uni() - 2.0f) * 1.7320508f; }
};

struct Matrix {
  std::vector<float> x;           // [kRows][kCols]
  std::vector<float> importance;  // [kCols], shared by the rows (an imatrix column vector)
};

// Matrix kind m (0 .. kMatrices-1):
//   0: normal weights, mild importance in [0.5, 1.5)
//   1: normal weights, skewed importance u^8 * 100 (a few columns dominate)
//   2: heavy tails (occasional 4-8x outliers), skewed importance
//   3: normal weights, importance zero on every other run of 8 columns, large elsewhere
//   4: scales varying by a factor 16 between groups of 32, skewed importance
//   5: tiny weights (1e-6) with a few ordinary ones, skewed importance
inline Matrix make(int m) {
  Rng r(0x1e51u + 7919u * static_cast<uint64_t>(m));
  Matrix out;
  out.x.resize(static_cast<size_t>(kRows) * kCols);
  out.importance.resize(kCols);
  for (int c = 0; c < kCols; ++c) {
    const float u = r.uni();
    float imp = 0.5f + u;
    if (m != 0) {
      const float u2 = u * u, u4 = u2 * u2;
      imp = u4 * u4 * 100.0f + 1e-3f;
    }
    if (m == 3) imp = ((c / 8) % 2) ? 0.0f : 1.0f + 10.0f * u;
    out.importance[c] = imp;
  }
  for (int row = 0; row < kRows; ++row) {
    const float row_scale = 0.01f + 0.05f * r.uni();
    float group_scale = 1.0f;
    for (int c = 0; c < kCols; ++c) {
      float v = r.normal();
      if (m == 2 && r.uni() < 0.02f) v *= 4.0f + 4.0f * r.uni();
      if (m == 4 && c % 32 == 0) group_scale = 1.0f + 15.0f * r.uni();
      if (m == 5) v = (r.uni() < 0.05f) ? v : v * 1e-4f;
      out.x[static_cast<size_t>(row) * kCols + c] = v * row_scale * (m == 4 ? group_scale : 1.0f);
    }
  }
  return out;
}

}  // namespace iq1_rows
