// Writes iq3_ref.bin: llama.cpp's results for IQ3_XXS and IQ3_S on blocks made here (random and
// adversarial, fixed seed), read by tests/test_quant_iq3.cpp. Not built by CMake; see README.md.
//
// File layout (little-endian):
//   "IQ3REF1\0"
//   u32 n_act; n_act Q8_K blocks (made by llama.cpp's from_float; the last 4 set by hand)
//   per type (IQ3_XXS, then IQ3_S):
//     u32 type id, u32 n_blk; n_blk blocks; n_blk * 256 floats (llama.cpp's to_float)
//     u32 n_dot; n_dot x {u32 first block, u32 blocks, f32 vec_dot} (weight block first + j
//     against activation block j)
//   quantizer rows: u32 rows, u32 cols; fp16 x[rows * cols]; fp16 importance[rows * cols]
//     per type: u32 type id; quantize_chunk with the importance; quantize_chunk without

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "ggml-cpu.h"
#include "ggml.h"

namespace {

constexpr int kQK = 256;
constexpr int kBlocks = 40;
constexpr int kActBlocks = kBlocks;
constexpr size_t kQ8KBytes = 292;

std::mt19937_64 rng(20261206);
float uni(float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(rng); }
float gauss() { return std::normal_distribution<float>(0.0f, 1.0f)(rng); }
uint32_t bits(int n) { return static_cast<uint32_t>(rng()) & ((1u << n) - 1); }

std::vector<uint8_t> out;
void put(const void* p, size_t n) { out.insert(out.end(), static_cast<const uint8_t*>(p), static_cast<const uint8_t*>(p) + n); }
void put32(uint32_t v) { put(&v, 4); }

uint16_t half_of(float f) { return ggml_fp32_to_fp16(f); }

// d of a weight block: mostly ordinary, sometimes extreme.
uint16_t block_d(int b) {
  switch (b) {
    case 1: return 0x7bff;                 // 65504, largest half
    case 2: return 0x0001;                 // smallest subnormal
    case 3: return 0;                      // zero
    case 4: return half_of(-0.75f);        // negative
    case 5: return 0x0400;                 // smallest normal
    default: return half_of(uni(1e-4f, 0.05f));
  }
}

// Fills weight block b of IQ3_XXS (98 bytes) or IQ3_S (110 bytes). Blocks 6.. cover every
// codebook index in turn; some have all indices / scales / signs at their extremes.
void make_block(bool is_s, int b, uint8_t* p) {
  const uint16_t d = block_d(b);
  std::memcpy(p, &d, 2);
  uint8_t* q = p + 2;
  const int groups = 64;
  const int grid_size = is_s ? 512 : 256;
  for (int g = 0; g < groups; ++g) {
    int idx;
    if (b == 7) idx = grid_size - 1;
    else if (b == 8) idx = 0;
    else if (b >= 9 && b < 9 + grid_size / 64) idx = (b - 9) * 64 + g;  // every index once
    else idx = static_cast<int>(bits(is_s ? 9 : 8));
    if (!is_s) {
      q[g] = static_cast<uint8_t>(idx);
    } else {
      q[g] = static_cast<uint8_t>(idx & 255);
      if (g % 8 == 0) q[64 + g / 8] = 0;
      q[64 + g / 8] = static_cast<uint8_t>(q[64 + g / 8] | ((idx >> 8) << (g % 8)));
    }
  }
  for (int ib = 0; ib < 8; ++ib) {
    uint32_t scale = bits(4);
    if (b == 7 || b == 10) scale = 15;
    if (b == 8 || b == 11) scale = 0;
    if (!is_s) {
      uint32_t signs = bits(28);
      if (b == 7) signs = (1u << 28) - 1;
      if (b == 8) signs = 0;
      const uint32_t aux = signs | (scale << 28);
      std::memcpy(q + 64 + 4 * ib, &aux, 4);
    } else {
      uint8_t* signs = q + 64 + 8 + 4 * ib;
      for (int k = 0; k < 4; ++k) signs[k] = static_cast<uint8_t>(b == 7 ? 0xff : b == 8 ? 0 : bits(8));
      uint8_t* scales = q + 64 + 8 + 32;
      if (ib % 2 == 0) scales[ib / 2] = 0;
      scales[ib / 2] = static_cast<uint8_t>(scales[ib / 2] | (scale << (4 * (ib % 2))));
    }
  }
}

// Q8_K block by hand: d and all qs equal to v (bsums consistent).
void act_by_hand(uint8_t* p, float d, int v) {
  std::memcpy(p, &d, 4);
  for (int i = 0; i < kQK; ++i) p[4 + i] = static_cast<uint8_t>(static_cast<int8_t>(v));
  for (int i = 0; i < 16; ++i) {
    const int16_t s = static_cast<int16_t>(16 * v);
    std::memcpy(p + 4 + kQK + 2 * i, &s, 2);
  }
}

void write_type(ggml_type type, bool is_s, const std::vector<uint8_t>& acts) {
  const size_t bsz = is_s ? 110 : 98;
  std::vector<uint8_t> w(kBlocks * bsz);
  for (int b = 0; b < kBlocks; ++b) make_block(is_s, b, w.data() + b * bsz);
  std::vector<float> deq(kBlocks * kQK);
  ggml_get_type_traits(type)->to_float(w.data(), deq.data(), kBlocks * kQK);
  put32(static_cast<uint32_t>(type));
  put32(kBlocks);
  put(w.data(), w.size());
  put(deq.data(), deq.size() * 4);
  const auto* cpu = ggml_get_type_traits_cpu(type);
  struct Dot { uint32_t first, blocks; float v; };
  std::vector<Dot> dots;
  auto dot = [&](uint32_t first, uint32_t blocks) {
    float s = 0;
    cpu->vec_dot(static_cast<int>(blocks * kQK), &s, 0, w.data() + first * bsz, 0, acts.data(), 0, 1);
    dots.push_back({first, blocks, s});
  };
  for (uint32_t b = 0; b < kBlocks; ++b) dot(b, 1);
  for (uint32_t b = 0; b + 3 <= kBlocks; b += 5) dot(b, 3);
  dot(6, kBlocks - 6);
  dot(0, kBlocks);
  put32(static_cast<uint32_t>(dots.size()));
  for (const Dot& d : dots) {
    put32(d.first);
    put32(d.blocks);
    put(&d.v, 4);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const char* path = argc > 1 ? argv[1] : "iq3_ref.bin";
  ggml_cpu_init();
  put("IQ3REF1", 8);

  // Activations: rows of different character, quantized by llama.cpp; 4 set by hand at the extremes.
  std::vector<uint8_t> acts(kActBlocks * kQ8KBytes);
  const auto* q8k = ggml_get_type_traits_cpu(GGML_TYPE_Q8_K);
  for (int b = 0; b < kActBlocks - 4; ++b) {
    std::vector<float> x(kQK);
    for (int i = 0; i < kQK; ++i) {
      x[i] = b % 3 == 0 ? gauss() : b % 3 == 1 ? uni(-1, 1) * std::exp(uni(-4, 4)) : uni(-100, 100);
    }
    if (b == 5) x[17] = 1e4f;  // one spike
    q8k->from_float(x.data(), acts.data() + b * kQ8KBytes, kQK);
  }
  act_by_hand(acts.data() + (kActBlocks - 4) * kQ8KBytes, 1.0f, 127);
  act_by_hand(acts.data() + (kActBlocks - 3) * kQ8KBytes, 1.0f, -127);
  act_by_hand(acts.data() + (kActBlocks - 2) * kQ8KBytes, 3e-3f, 127);
  act_by_hand(acts.data() + (kActBlocks - 1) * kQ8KBytes, 1e-30f, -127);
  put32(kActBlocks);
  put(acts.data(), acts.size());

  write_type(GGML_TYPE_IQ3_XXS, false, acts);
  write_type(GGML_TYPE_IQ3_S, true, acts);

  // Quantizer rows: Gaussian rows of varied scale with outliers, one heavy-tailed, one with an
  // all-zero sub-block; importance per column, log-normal (skewed), some columns zero.
  const int rows = 12, cols = 1024;
  std::vector<float> x(rows * cols), imp(rows * cols);
  std::vector<float> col_imp(cols);
  for (int c = 0; c < cols; ++c) col_imp[c] = c % 37 == 0 ? 0.0f : std::exp(1.5f * gauss());
  for (int r = 0; r < rows; ++r) {
    const float s = std::exp(uni(-6, 0));
    for (int c = 0; c < cols; ++c) {
      float v = s * gauss();
      if (r == 3) v = s * gauss() / std::max(0.05f, std::fabs(gauss()));  // heavy tail
      if (r == 4 && c < 32) v = 0;
      if (c % 101 == 7) v *= 8;  // outliers
      x[r * cols + c] = ggml_fp16_to_fp32(half_of(v));
      imp[r * cols + c] = ggml_fp16_to_fp32(half_of(col_imp[c] * uni(0.8f, 1.2f)));
    }
  }
  put32(rows);
  put32(cols);
  for (float v : x) {
    const uint16_t h = half_of(v);
    put(&h, 2);
  }
  for (float v : imp) {
    const uint16_t h = half_of(v);
    put(&h, 2);
  }
  for (ggml_type type : {GGML_TYPE_IQ3_XXS, GGML_TYPE_IQ3_S}) {
    put32(static_cast<uint32_t>(type));
    const size_t bytes = ggml_row_size(type, cols) * rows;
    std::vector<uint8_t> q(bytes);
    ggml_quantize_chunk(type, x.data(), q.data(), 0, rows, cols, imp.data());
    put(q.data(), q.size());
    ggml_quantize_chunk(type, x.data(), q.data(), 0, rows, cols, nullptr);
    put(q.data(), q.size());
  }

  FILE* f = std::fopen(path, "wb");
  if (!f || std::fwrite(out.data(), 1, out.size(), f) != out.size() || std::fclose(f) != 0) {
    std::fprintf(stderr, "cannot write %s\n", path);
    return 1;
  }
  std::printf("%s: %zu bytes\n", path, out.size());
  return 0;
}
