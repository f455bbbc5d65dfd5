// Micro-benchmark of the vec_dot kernels: a matrix-vector product over a rows x cols weight
// matrix (default 4096 x 2048) for every weight type, at each ISA this CPU supports. Reports GB/s
// of weight bytes (median of repeats) and the speed-up over scalar.
//
//   bench_kernels [--rows R] [--cols C] [--reps N] [--type q4_K]...
//
// Not a test: numbers depend on the machine and its load. The default matrix (4.7 MB at Q4_K)
// sits in L2/L3, so this measures kernel throughput rather than DRAM bandwidth.

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "les/quant/blocks.h"
#include "les/quant/kernels.h"
#include "les/quant/types.h"
#include "les/util/fp16.h"

using namespace les;

namespace {

constexpr Type kTypes[] = {Type::Q4_K, Type::Q5_K, Type::Q6_K, Type::Q3_K, Type::Q2_K,   Type::Q8_0,
                           Type::Q4_0, Type::Q5_0, Type::Q4_1, Type::Q5_1, Type::IQ4_NL, Type::IQ4_XS,
                           Type::F16,  Type::BF16, Type::F32};

// Offsets of the fp16 fields of a block (replaced by sane values so no NaN/inf/denormal
// arithmetic skews the timing).
std::vector<size_t> half_fields(Type t) {
  switch (t) {
    case Type::Q4_0: return {offsetof(block_q4_0, d)};
    case Type::Q4_1: return {offsetof(block_q4_1, d), offsetof(block_q4_1, m)};
    case Type::Q5_0: return {offsetof(block_q5_0, d)};
    case Type::Q5_1: return {offsetof(block_q5_1, d), offsetof(block_q5_1, m)};
    case Type::Q8_0: return {offsetof(block_q8_0, d)};
    case Type::Q2_K: return {offsetof(block_q2_K, d), offsetof(block_q2_K, dmin)};
    case Type::Q3_K: return {offsetof(block_q3_K, d)};
    case Type::Q4_K: return {offsetof(block_q4_K, d), offsetof(block_q4_K, dmin)};
    case Type::Q5_K: return {offsetof(block_q5_K, d), offsetof(block_q5_K, dmin)};
    case Type::Q6_K: return {offsetof(block_q6_K, d)};
    case Type::IQ4_NL: return {offsetof(block_iq4_nl, d)};
    case Type::IQ4_XS: return {offsetof(block_iq4_xs, d)};
    default: return {};
  }
}

void fill_weights(std::mt19937_64& rng, Type t, std::vector<uint8_t>& w, int64_t n_elems) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  if (t == Type::F32 || t == Type::F16 || t == Type::BF16) {
    for (int64_t i = 0; i < n_elems; ++i) {
      const float v = u(rng);
      if (t == Type::F32) std::memcpy(w.data() + 4 * i, &v, 4);
      const uint16_t hv = t == Type::F16 ? f32_to_fp16(v) : f32_to_bf16(v);
      if (t != Type::F32) std::memcpy(w.data() + 2 * i, &hv, 2);
    }
    return;
  }
  for (auto& b : w) b = static_cast<uint8_t>(rng());
  const size_t bb = info(t).block_bytes;
  const auto fields = half_fields(t);
  for (size_t off = 0; off + bb <= w.size(); off += bb) {
    for (size_t f : fields) {
      const uint16_t hv = f32_to_fp16(0.01f * (1.0f + u(rng)));
      std::memcpy(w.data() + off + f, &hv, 2);
    }
  }
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Median seconds of one full matrix-vector product.
double time_matvec(VecDotFn fn, const std::vector<uint8_t>& w, size_t row_b, int64_t rows, int64_t cols,
                   const std::vector<uint8_t>& a, int reps, float* sink) {
  std::vector<double> t;
  float acc = 0;
  // warm-up (caches, page faults, clocks)
  for (int64_t r = 0; r < rows; ++r) acc += fn(cols, w.data() + r * row_b, a.data());
  for (int k = 0; k < reps; ++k) {
    const double t0 = now_s();
    for (int64_t r = 0; r < rows; ++r) acc += fn(cols, w.data() + r * row_b, a.data());
    t.push_back(now_s() - t0);
  }
  *sink += acc;
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int64_t rows = 4096, cols = 2048;
  int reps = 21;
  std::vector<Type> types;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--rows") rows = std::atoll(next());
    else if (a == "--cols") cols = std::atoll(next());
    else if (a == "--reps") reps = std::max(1, std::atoi(next()));
    else if (a == "--type") {
      const auto t = parse_type(next());
      if (!t) {
        std::fprintf(stderr, "unknown type\n");
        return 2;
      }
      types.push_back(*t);
    } else {
      std::fprintf(stderr, "usage: %s [--rows R] [--cols C] [--reps N] [--type T]...\n", argv[0]);
      return 2;
    }
  }
  if (types.empty()) types.assign(std::begin(kTypes), std::end(kTypes));
  if (cols % QK_K != 0) {
    std::fprintf(stderr, "--cols must be a multiple of %d\n", QK_K);
    return 2;
  }

  std::vector<Isa> isas = {Isa::scalar};
  for (Isa isa : {Isa::avx2, Isa::avx512}) {
    if (static_cast<int>(isa) <= static_cast<int>(detect_isa()) && kernel_table(isa)) isas.push_back(isa);
  }

  std::printf("vec_dot throughput, %lld x %lld matrix, median of %d, GB/s of weight bytes (detected ISA: %s)\n",
              static_cast<long long>(rows), static_cast<long long>(cols), reps, isa_name(detect_isa()));
  std::printf("%-6s %9s", "type", "MB");
  for (Isa isa : isas) std::printf(" %10s", isa_name(isa));
  if (isas.size() > 1) std::printf(" %9s", "speedup");
  std::printf("\n");

  std::mt19937_64 rng(1234);
  float sink = 0;
  for (Type t : types) {
    const Type at = act_type(t);
    const size_t row_b = row_bytes(t, cols);
    std::vector<uint8_t> w(row_b * rows);
    fill_weights(rng, t, w, rows * cols);
    std::vector<float> xf(cols);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (auto& v : xf) v = u(rng);
    std::vector<uint8_t> a(row_bytes(at, cols));
    kernel_table(Isa::scalar)->quantize[static_cast<int>(at)](xf.data(), a.data(), cols);

    std::printf("%-6s %9.2f", type_name(t), static_cast<double>(w.size()) / 1e6);
    std::vector<double> gbs;
    for (Isa isa : isas) {
      const VecDotFn fn = kernel_table(isa)->vec_dot[static_cast<int>(t)];
      if (!fn) {
        std::printf(" %10s", "-");
        gbs.push_back(0);
        continue;
      }
      // scalar kernels are slow: fewer repeats
      const int r = isa == Isa::scalar ? std::max(1, reps / 4) : reps;
      const double s = time_matvec(fn, w, row_b, rows, cols, a, r, &sink);
      gbs.push_back(static_cast<double>(w.size()) / s / 1e9);
      std::printf(" %10.2f", gbs.back());
      std::fflush(stdout);
    }
    if (gbs.size() > 1 && gbs[0] > 0) std::printf(" %8.1fx", gbs.back() / gbs[0]);
    std::printf("\n");
  }
  std::printf("(checksum %g)\n", static_cast<double>(sink));
  return 0;
}
