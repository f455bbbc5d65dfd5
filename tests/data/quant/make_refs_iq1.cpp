// Writes tests/data/quant/iq1_ref.bin: llama.cpp's results for IQ1_S and IQ1_M, which
// tests/test_quant_iq1.cpp compares les's kernels with. Not built by CMake; the compile command
// is in tests/data/quant/README.md. Deterministic (fixed seeds).
//
// Format (little-endian):
//   "LESIQ1R1"; u32 n_cases
//   per case: u32 type (GGUF id), u32 n (elements), u32 flags (1: dequantized values stored)
//             u8 weights[n / 256 * block bytes], u8 q8_K activations[n / 256 * 292]
//             f32 dot            (llama.cpp's CPU vec_dot of the two)
//             u64 hash           (FNV-1a 64 of the bytes of llama.cpp's dequantized floats)
//             f32 values[n]      if flags & 1 (the dequantized floats themselves)
//   u32 matrices, rows, cols (iq1_rows.h), then for IQ1_S and for IQ1_M:
//             f64 err[matrices][rows]: sum over the row of importance * (x - dequant(quant(x)))^2
//             for llama.cpp's quantize_iq1_s / quantize_iq1_m with that importance

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "ggml-cpu.h"
#include "ggml.h"
#include "iq1_rows.h"

namespace {

constexpr int kQK = 256;
constexpr size_t kQ8KBytes = 292;

size_t block_bytes(ggml_type t) { return t == GGML_TYPE_IQ1_S ? 50 : 56; }

uint16_t half_bits(float f) { return ggml_fp32_to_fp16(f); }

enum class WFill { random, every_index, all_max, all_zero_index, huge_d, tiny_d, zero_d, negative_d };
enum class AFill { random, constant, alternating, zero, outlier, mixed_blocks };

void gen_weights(iq1_rows::Rng& r, ggml_type t, int64_t n, WFill fill, std::vector<uint8_t>& w) {
  const int64_t nb = n / kQK;
  w.assign(static_cast<size_t>(nb) * block_bytes(t), 0);
  for (auto& v : w) v = static_cast<uint8_t>(r.next());
  for (int64_t i = 0; i < nb; ++i) {
    uint8_t* b = w.data() + i * block_bytes(t);
    uint16_t d = half_bits((r.uni() - 0.3f) * 0.1f);
    switch (fill) {
      case WFill::random: break;
      case WFill::every_index:  // block i holds grid indices 32i .. 32i + 31, scales cycling
        for (int g = 0; g < 32; ++g) iq1_rows::set_group(t, b, g, static_cast<int>((32 * i + g) % 2048), (g / 4 + i) % 2);
        iq1_rows::set_scales(t, b, static_cast<int>(i % 8));
        break;
      case WFill::all_max:
        for (int g = 0; g < 32; ++g) iq1_rows::set_group(t, b, g, 2047, 1);
        iq1_rows::set_scales(t, b, 7);
        break;
      case WFill::all_zero_index:
        for (int g = 0; g < 32; ++g) iq1_rows::set_group(t, b, g, 0, 0);
        iq1_rows::set_scales(t, b, 0);
        break;
      case WFill::huge_d: d = static_cast<uint16_t>(0x7bff - (r.next() & 0x7)); break;
      case WFill::tiny_d: d = static_cast<uint16_t>(1 + (r.next() & 0x3ff)); break;
      case WFill::zero_d: d = 0; break;
      case WFill::negative_d: d = half_bits(-0.5f - r.uni()); break;
    }
    iq1_rows::set_d(t, b, d);
  }
}

void gen_acts(iq1_rows::Rng& r, int64_t n, AFill fill, std::vector<uint8_t>& a) {
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) {
    switch (fill) {
      case AFill::random: x[j] = r.normal() * (0.1f + 3.0f * r.uni()); break;
      case AFill::constant: x[j] = 1.5f; break;
      case AFill::alternating: x[j] = (j % 3) ? -2.0f : 2.0f; break;
      case AFill::zero: x[j] = 0.0f; break;
      case AFill::outlier: x[j] = (j % 97 == 5) ? 1000.0f : r.normal() * 1e-3f; break;
      case AFill::mixed_blocks: x[j] = ((j / kQK) % 2) ? 0.0f : r.normal() * 50.0f; break;
    }
  }
  a.assign(static_cast<size_t>(n / kQK) * kQ8KBytes, 0);
  ggml_get_type_traits_cpu(GGML_TYPE_Q8_K)->from_float(x.data(), a.data(), n);
}

uint64_t fnv1a(const void* p, size_t bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  const auto* c = static_cast<const uint8_t*>(p);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ c[i]) * 0x100000001b3ull;
  return h;
}

struct Out {
  std::vector<uint8_t> bytes;
  void raw(const void* p, size_t n) {
    const auto* c = static_cast<const uint8_t*>(p);
    bytes.insert(bytes.end(), c, c + n);
  }
  void u32(uint32_t v) { raw(&v, 4); }
};

void add_case(Out& out, uint32_t& n_cases, ggml_type t, int64_t n, const std::vector<uint8_t>& w,
              const std::vector<uint8_t>& a) {
  std::vector<float> deq(static_cast<size_t>(n));
  ggml_get_type_traits(t)->to_float(w.data(), deq.data(), n);
  float dot = 0;
  ggml_get_type_traits_cpu(t)->vec_dot(static_cast<int>(n), &dot, 0, w.data(), 0, a.data(), 0, 1);
  const uint32_t flags = n <= 512 ? 1u : 0u;
  out.u32(static_cast<uint32_t>(t));
  out.u32(static_cast<uint32_t>(n));
  out.u32(flags);
  out.raw(w.data(), w.size());
  out.raw(a.data(), a.size());
  out.raw(&dot, 4);
  const uint64_t h = fnv1a(deq.data(), deq.size() * sizeof(float));
  out.raw(&h, 8);
  if (flags & 1) out.raw(deq.data(), deq.size() * sizeof(float));
  ++n_cases;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string path = argc > 1 ? argv[1] : "iq1_ref.bin";
  ggml_cpu_init();
  Out out;
  out.raw("LESIQ1R1", 8);
  const size_t n_cases_at = out.bytes.size();
  uint32_t n_cases = 0;
  out.u32(0);
  iq1_rows::Rng r(20240517);
  std::vector<uint8_t> w, a;
  for (ggml_type t : {GGML_TYPE_IQ1_S, GGML_TYPE_IQ1_M}) {
    // Random blocks against random activations, 1 and 2 blocks.
    for (int k = 0; k < 12; ++k) {
      const int64_t n = kQK * (1 + k % 2);
      gen_weights(r, t, n, WFill::random, w);
      gen_acts(r, n, AFill::random, a);
      add_case(out, n_cases, t, n, w, a);
    }
    // Every grid index once (64 blocks), both delta signs, every scale.
    gen_weights(r, t, 64 * kQK, WFill::every_index, w);
    gen_acts(r, 64 * kQK, AFill::random, a);
    add_case(out, n_cases, t, 64 * kQK, w, a);
    // Adversarial weights against random and alternating activations; random weights against
    // adversarial activations.
    for (WFill wf : {WFill::all_max, WFill::all_zero_index, WFill::huge_d, WFill::tiny_d, WFill::zero_d,
                     WFill::negative_d}) {
      for (AFill af : {AFill::random, AFill::alternating}) {
        gen_weights(r, t, kQK, wf, w);
        gen_acts(r, kQK, af, a);
        add_case(out, n_cases, t, kQK, w, a);
      }
    }
    for (AFill af : {AFill::constant, AFill::zero, AFill::outlier, AFill::mixed_blocks}) {
      const int64_t n = af == AFill::mixed_blocks ? 2 * kQK : kQK;
      gen_weights(r, t, n, WFill::random, w);
      gen_acts(r, n, af, a);
      add_case(out, n_cases, t, n, w, a);
    }
  }
  std::memcpy(out.bytes.data() + n_cases_at, &n_cases, 4);

  // The quantizers' importance-weighted error on the rows of iq1_rows.h.
  out.u32(iq1_rows::kMatrices);
  out.u32(iq1_rows::kRows);
  out.u32(iq1_rows::kCols);
  for (ggml_type t : {GGML_TYPE_IQ1_S, GGML_TYPE_IQ1_M}) {
    for (int m = 0; m < iq1_rows::kMatrices; ++m) {
      const iq1_rows::Matrix mat = iq1_rows::make(m);
      std::vector<uint8_t> q(static_cast<size_t>(iq1_rows::kRows) * iq1_rows::kCols / kQK * block_bytes(t));
      ggml_quantize_chunk(t, mat.x.data(), q.data(), 0, iq1_rows::kRows, iq1_rows::kCols, mat.importance.data());
      std::vector<float> y(iq1_rows::kCols);
      for (int row = 0; row < iq1_rows::kRows; ++row) {
        const size_t row_bytes = static_cast<size_t>(iq1_rows::kCols) / kQK * block_bytes(t);
        ggml_get_type_traits(t)->to_float(q.data() + row * row_bytes, y.data(), iq1_rows::kCols);
        double err = 0;
        for (int c = 0; c < iq1_rows::kCols; ++c) {
          const double e = static_cast<double>(mat.x[static_cast<size_t>(row) * iq1_rows::kCols + c]) - y[c];
          err += static_cast<double>(mat.importance[c]) * e * e;
        }
        out.raw(&err, 8);
      }
    }
  }
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f || std::fwrite(out.bytes.data(), 1, out.bytes.size(), f) != out.bytes.size() || std::fclose(f) != 0) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    return 1;
  }
  std::printf("%s: %u cases, %zu bytes\n", path.c_str(), n_cases, out.bytes.size());
  return 0;
}
