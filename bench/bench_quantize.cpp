// Throughput of the weight quantizers: quantize_row_ref against quantize_row_fast for each type,
// with 1 and 2 threads (rows shared out as les quantize's convert_rows does). With --from TYPE
// the rows are first stored as TYPE and every timed row is dequantized from it before being
// quantized, as `les quantize` converts a model (--from q4_K: the 30B source file's type).
//
//   bench_quantize [--rows R] [--cols C] [--ref-rows R] [--threads 1,2] [--reps N]
//                  [--importance] [--from TYPE] [--isa scalar|avx2|avx512] [--type T]...
//
// Rows: Gaussian with 1% outliers 8x larger (--cols default 2048, the width of Qwen3-30B-A3B's
// expert rows). Reports million weights per second (wall clock, best of the repeats) and per
// CPU-second of the process (a rate per thread, much less sensitive to other load on the
// machine); the speed-up is the ratio of the CPU rates.
// Not a test: numbers depend on the machine and its load.

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "les/quant/blocks.h"
#include "les/quant/kernels.h"
#include "les/quant/types.h"
#include "les/util/thread_pool.h"

using namespace les;

namespace {

constexpr Type kTypes[] = {Type::Q2_K, Type::Q3_K, Type::Q4_K,   Type::Q5_K, Type::Q6_K,
                           Type::IQ4_XS, Type::IQ4_NL, Type::Q4_0, Type::Q5_0, Type::Q8_0};

double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

struct Rate {
  double wall = 0;  // M weights / s
  double cpu = 0;   // M weights / CPU-second
};

// Best of `reps` passes over rows [0, n_rows) of x (or of the source rows src of type from).
Rate measure(bool fast, Type t, const std::vector<float>& x, const std::vector<float>& imp,
             const std::vector<uint8_t>& src, Type from, int64_t cols, int64_t n_rows, int threads, int reps) {
  ThreadPool pool(threads);
  const size_t out_row = row_bytes(t, cols);
  const size_t src_row = src.empty() ? 0 : row_bytes(from, cols);
  std::vector<uint8_t> out(out_row * static_cast<size_t>(n_rows));
  Rate best;
  for (int rep = 0; rep < reps; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    const double c0 = process_cpu_seconds();
    pool.parallel_for(n_rows, 4, [&](int, int64_t r0, int64_t r1) {
      std::vector<float> tmp(static_cast<size_t>(cols));
      for (int64_t r = r0; r < r1; ++r) {
        const float* row = x.data() + r * cols;
        if (!src.empty()) {
          dequantize_row(from, src.data() + static_cast<size_t>(r) * src_row, tmp.data(), cols);
          row = tmp.data();
        }
        const float* ip = imp.empty() ? nullptr : imp.data() + (r % 8) * cols;
        void* y = out.data() + static_cast<size_t>(r) * out_row;
        if (fast) {
          quantize_row_fast(t, row, y, cols, ip);
        } else {
          quantize_row_ref(t, row, y, cols, ip);
        }
      }
    });
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double cpu = process_cpu_seconds() - c0;
    const double w = static_cast<double>(n_rows) * static_cast<double>(cols) / 1e6;
    best.wall = std::max(best.wall, w / wall);
    best.cpu = std::max(best.cpu, w / cpu);
  }
  return best;
}

std::vector<int> parse_list(const std::string& s) {
  std::vector<int> v;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) v.push_back(std::max(1, std::atoi(item.c_str())));
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t rows = 2048, cols = 2048, ref_rows = 128;
  int reps = 3;
  bool with_importance = false;
  std::vector<int> thread_counts = {1, 2};
  std::vector<Type> types;
  Type from = Type::F32;
  bool have_from = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    auto type_arg = [&]() {
      const auto t = parse_type(next());
      if (!t) {
        std::fprintf(stderr, "unknown type\n");
        std::exit(2);
      }
      return *t;
    };
    if (a == "--rows") rows = std::max<int64_t>(1, std::atoll(next()));
    else if (a == "--cols") cols = std::atoll(next());
    else if (a == "--ref-rows") ref_rows = std::max<int64_t>(1, std::atoll(next()));
    else if (a == "--reps") reps = std::max(1, std::atoi(next()));
    else if (a == "--threads") thread_counts = parse_list(next());
    else if (a == "--importance") with_importance = true;
    else if (a == "--isa") {
      const std::string name = next();
      const Isa isa = name == "scalar" ? Isa::scalar : name == "avx2" ? Isa::avx2 : Isa::avx512;
      if ((name != "scalar" && name != "avx2" && name != "avx512") || !set_active_isa(isa)) {
        std::fprintf(stderr, "--isa %s: unknown or not supported by this CPU\n", name.c_str());
        return 2;
      }
    }
    else if (a == "--from") {
      from = type_arg();
      have_from = true;
    } else if (a == "--type") {
      types.push_back(type_arg());
    } else {
      std::fprintf(stderr,
                   "usage: %s [--rows R] [--cols C] [--ref-rows R] [--threads 1,2] [--reps N] [--importance] "
                   "[--from TYPE] [--isa ISA] [--type T]...\n",
                   argv[0]);
      return 2;
    }
  }
  if (types.empty()) types.assign(std::begin(kTypes), std::end(kTypes));
  if (cols <= 0 || cols % QK_K != 0) {
    std::fprintf(stderr, "--cols must be a positive multiple of %d\n", QK_K);
    return 2;
  }
  ref_rows = std::min(ref_rows, rows);

  std::mt19937_64 rng(42);
  std::normal_distribution<float> gauss(0.0f, 0.02f);
  std::uniform_real_distribution<float> unif(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(rows * cols));
  for (float& v : x) v = gauss(rng) * (unif(rng) < 0.01f ? 8.0f : 1.0f);
  std::vector<float> imp;
  if (with_importance) {
    imp.resize(static_cast<size_t>(8 * cols));
    for (float& v : imp) v = (unif(rng) < 0.125f ? 100.0f : 1.0f) * (0.5f + unif(rng));
  }
  std::vector<uint8_t> src;
  if (have_from) {
    src.resize(row_bytes(from, cols) * static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) {
      quantize_row_fast(from, x.data() + r * cols, src.data() + static_cast<size_t>(r) * row_bytes(from, cols), cols);
    }
  }

  std::printf("weight quantization, rows of %lld (%lld rows fast, %lld reference), ISA %s%s%s; M weights/s, "
              "wall (best of %d) and per CPU-second\n",
              static_cast<long long>(cols), static_cast<long long>(rows), static_cast<long long>(ref_rows),
              isa_name(kernels().isa), with_importance ? ", with importance" : "",
              have_from ? (std::string(", dequantized from ") + type_name(from)).c_str() : "", reps);
  std::printf("%-7s %7s", "type", "threads");
  std::printf(" %10s %10s %10s %10s %8s\n", "ref wall", "ref cpu", "fast wall", "fast cpu", "cpu x");
  for (Type t : types) {
    for (int th : thread_counts) {
      const Rate r = measure(false, t, x, imp, src, from, cols, ref_rows, th, 2);
      const Rate f = measure(true, t, x, imp, src, from, cols, rows, th, reps);
      std::printf("%-7s %7d %10.1f %10.1f %10.1f %10.1f %7.1fx\n", type_name(t), th, r.wall, r.cpu, f.wall, f.cpu,
                  f.cpu / r.cpu);
      std::fflush(stdout);
    }
  }
  return 0;
}
