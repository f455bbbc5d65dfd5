// Micro-benchmarks of the dot-product kernels, at each ISA this CPU supports. Three modes:
//
//   bench_kernels [--vec-dot] [--rows R] [--cols C] [--reps N] [--type T]...
//       matrix-vector products over a rows x cols weight matrix (default 4096 x 2048, 4.7 MB at
//       Q4_K: in L2/L3, so this measures the kernels, not DRAM) as matmul runs them (the table's
//       gemm over blocks of 64 rows; --vec-dot: one vec_dot per row); GB/s of weight bytes
//       (median of repeats) and the speed-up over scalar.
//   bench_kernels --tokens N [--rows R] [--cols C] [--reps N] [--type T]...
//       batched products (prefill-shaped): the same matrix times N activation rows, through the
//       table's gemm and through one vec_dot per output (the same results); GMAC/s and the gain.
//   bench_kernels --decode [--mb M] [--rows R] [--cols C] [--threads T] [--reps N] [--type T]...
//       decode-shaped products from DRAM: M MB of weights (default 2048, far beyond any cache)
//       cut into matrices of R rows (default 768 x 2048: one expert's gate/up of the 30B-A3B
//       shape), each multiplied with one token by les::matmul on T threads, in a shuffled
//       order; next to the machine's read bandwidth measured on the same buffer with the same
//       threads (an AVX2 read of every byte). GB/s of weight bytes and the fraction of the read
//       bandwidth. The buffer is on transparent huge pages (as the engine's expert cache and
//       resident models are); --pages small|both also runs it on 4 KiB pages (the TLB's share).
//
// Not a test: numbers depend on the machine and its load. Single-threaded modes time the thread's
// CPU time (time spent descheduled on a shared machine does not count); --decode times wall time.

#include <immintrin.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <string>
#include <vector>

#include "les/model/matmul.h"
#include "les/quant/blocks.h"
#include "les/quant/kernels.h"
#include "les/quant/types.h"
#include "les/storage/io.h"
#include "les/util/fp16.h"
#include "les/util/thread_pool.h"

using namespace les;

namespace {

constexpr Type kTypes[] = {Type::Q4_K, Type::Q5_K, Type::Q6_K, Type::Q3_K, Type::Q2_K,   Type::Q8_0,
                           Type::Q4_0, Type::Q5_0, Type::Q4_1, Type::Q5_1, Type::IQ4_NL, Type::IQ4_XS,
                           Type::F16,  Type::BF16, Type::F32,
                           Type::IQ2_XXS, Type::IQ2_XS, Type::IQ2_S, Type::IQ3_XXS, Type::IQ3_S, Type::IQ1_S,
                           Type::IQ1_M, Type::TQ1_0, Type::TQ2_0, Type::MXFP4, Type::NVFP4};

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
    case Type::IQ2_XXS: return {offsetof(block_iq2_xxs, d)};
    case Type::IQ2_XS: return {offsetof(block_iq2_xs, d)};
    case Type::IQ2_S: return {offsetof(block_iq2_s, d)};
    case Type::IQ3_XXS: return {offsetof(block_iq3_xxs, d)};
    case Type::IQ3_S: return {offsetof(block_iq3_s, d)};
    case Type::IQ1_S: return {offsetof(block_iq1_s, d)};
    case Type::TQ1_0: return {offsetof(block_tq1_0, d)};
    case Type::TQ2_0: return {offsetof(block_tq2_0, d)};
    default: return {};
  }
}

void fill_weights(std::mt19937_64& rng, Type t, uint8_t* w, size_t bytes, int64_t n_elems) {
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  if (t == Type::F32 || t == Type::F16 || t == Type::BF16) {
    for (int64_t i = 0; i < n_elems; ++i) {
      const float v = u(rng);
      if (t == Type::F32) std::memcpy(w + 4 * i, &v, 4);
      const uint16_t hv = t == Type::F16 ? f32_to_fp16(v) : f32_to_bf16(v);
      if (t != Type::F32) std::memcpy(w + 2 * i, &hv, 2);
    }
    return;
  }
  for (size_t i = 0; i < bytes; i += 8) {
    const uint64_t r = rng();
    std::memcpy(w + i, &r, std::min<size_t>(8, bytes - i));
  }
  const size_t bb = info(t).block_bytes;
  const auto fields = half_fields(t);
  for (size_t off = 0; off + bb <= bytes; off += bb) {
    for (size_t f : fields) {
      const uint16_t hv = f32_to_fp16(0.01f * (1.0f + u(rng)));
      std::memcpy(w + off + f, &hv, 2);
    }
    uint8_t* b = w + off;
    if (t == Type::IQ1_M) {  // the fp16 super-scale is the top nibbles of the four scale uint16
      const uint16_t hv = f32_to_fp16(0.01f * (1.0f + u(rng)));
      auto* sc = b + offsetof(block_iq1_m, scales);
      for (int k = 0; k < 4; ++k) sc[2 * k + 1] = static_cast<uint8_t>((sc[2 * k + 1] & 0x0f) | (((hv >> (4 * k)) & 0xf) << 4));
    } else if (t == Type::MXFP4) {  // E8M0 scale near 2^-7
      b[offsetof(block_mxfp4, e)] = static_cast<uint8_t>(118 + rng() % 4);
    } else if (t == Type::NVFP4) {  // UE4M3 scales near 2^-4
      for (int k = 0; k < 4; ++k) b[offsetof(block_nvfp4, d) + k] = static_cast<uint8_t>(0x18 + rng() % 8);
    }
  }
}

// n_tok activation rows of the activation type of t (quantized from random floats).
std::vector<uint8_t> make_acts(std::mt19937_64& rng, Type t, int64_t cols, int64_t n_tok) {
  const Type at = act_type(t);
  const size_t rb = row_bytes(at, cols);
  std::vector<uint8_t> a(rb * static_cast<size_t>(n_tok));
  std::vector<float> xf(static_cast<size_t>(cols));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (int64_t k = 0; k < n_tok; ++k) {
    for (auto& v : xf) v = u(rng);
    kernel_table(Isa::scalar)->quantize[static_cast<int>(at)](xf.data(), a.data() + rb * static_cast<size_t>(k), cols);
  }
  return a;
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// CPU time of the calling thread: on a shared machine, time spent descheduled does not count
// (single-threaded measurements use it; multi-threaded ones need wall time).
double thread_cpu_s() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

template <typename F>
double median_seconds(int reps, F&& f, double (*clock)() = thread_cpu_s) {
  f();  // warm-up (caches, page faults, clocks)
  std::vector<double> t;
  for (int k = 0; k < reps; ++k) {
    const double t0 = clock();
    f();
    t.push_back(clock() - t0);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

struct Options {
  int64_t rows = 4096, cols = 2048, tokens = 0;
  int reps = 21, threads = 2;
  bool decode = false, vec_dot = false;
  bool huge_pages = true, small_pages = false;  // --decode: the buffer's page kinds
  double mb = 2048;
  std::vector<Type> types;
};

std::vector<Isa> supported_isas() {
  std::vector<Isa> isas = {Isa::scalar};
  for (Isa isa : {Isa::avx2, Isa::avx_vnni, Isa::avx512}) {
    if (isa_supported(isa) && kernel_table(isa)) isas.push_back(isa);
  }
  return isas;
}

// Matrix-vector products as matmul runs them (gemm_rows over blocks of 64 rows, one token), or
// (vec_dot) one vec_dot per row.
void run_matvec(const Options& o) {
  const std::vector<Isa> isas = supported_isas();
  std::printf("%s throughput, %lld x %lld matrix, one thread, median of %d, GB/s of weight bytes (detected ISA: %s)\n",
              o.vec_dot ? "vec_dot" : "matrix-vector product", static_cast<long long>(o.rows),
              static_cast<long long>(o.cols), o.reps, isa_name(detect_isa()));
  std::printf("%-6s %9s", "type", "MB");
  for (Isa isa : isas) std::printf(" %10s", isa_name(isa));
  std::printf(" %9s\n", "speedup");
  std::mt19937_64 rng(1234);
  float sink = 0;
  std::vector<float> y(static_cast<size_t>(o.rows));
  for (Type t : o.types) {
    const size_t row_b = row_bytes(t, o.cols);
    std::vector<uint8_t> w(row_b * static_cast<size_t>(o.rows));
    fill_weights(rng, t, w.data(), w.size(), o.rows * o.cols);
    const std::vector<uint8_t> a = make_acts(rng, t, o.cols, 1);
    std::printf("%-6s %9.2f", type_name(t), static_cast<double>(w.size()) / 1e6);
    std::vector<double> gbs;
    for (Isa isa : isas) {
      const KernelTable& kt = *kernel_table(isa);
      const VecDotFn fn = kt.vec_dot[static_cast<int>(t)];
      // scalar kernels are slow: fewer repeats
      const int r = isa == Isa::scalar ? std::max(1, o.reps / 4) : o.reps;
      const double s = median_seconds(r, [&] {
        if (o.vec_dot) {
          for (int64_t i = 0; i < o.rows; ++i) sink += fn(o.cols, w.data() + static_cast<size_t>(i) * row_b, a.data());
        } else {
          for (int64_t i = 0; i < o.rows; i += 64) {
            gemm_rows(kt, t, o.cols, w.data() + static_cast<size_t>(i) * row_b, row_b, std::min<int64_t>(64, o.rows - i),
                      a.data(), 0, 1, y.data() + i, 1);
          }
          sink += y[0];
        }
      });
      gbs.push_back(static_cast<double>(w.size()) / s / 1e9);
      std::printf(" %10.2f", gbs.back());
      std::fflush(stdout);
    }
    std::printf(" %8.1fx\n", gbs.back() / gbs[0]);
  }
  std::printf("(checksum %g)\n", static_cast<double>(sink));
}

void run_tokens(const Options& o) {
  std::vector<Isa> isas = supported_isas();
  isas.erase(isas.begin());  // scalar: far too slow for this
  std::printf("batched products, %lld x %lld matrix times %lld activation rows, one thread, median of %d, GMAC/s:\n"
              "gemm (the table's batched kernel) / dots (one vec_dot per output, same results)\n",
              static_cast<long long>(o.rows), static_cast<long long>(o.cols), static_cast<long long>(o.tokens), o.reps);
  std::printf("%-6s", "type");
  for (Isa isa : isas) std::printf(" %22s", isa_name(isa));
  std::printf("\n");
  std::mt19937_64 rng(1234);
  std::vector<float> y(static_cast<size_t>(o.rows * o.tokens));
  const double macs = static_cast<double>(o.rows) * static_cast<double>(o.cols) * static_cast<double>(o.tokens);
  for (Type t : o.types) {
    const size_t row_b = row_bytes(t, o.cols), arb = row_bytes(act_type(t), o.cols);
    std::vector<uint8_t> w(row_b * static_cast<size_t>(o.rows));
    fill_weights(rng, t, w.data(), w.size(), o.rows * o.cols);
    const std::vector<uint8_t> a = make_acts(rng, t, o.cols, o.tokens);
    std::printf("%-6s", type_name(t));
    for (Isa isa : isas) {
      const KernelTable& kt = *kernel_table(isa);
      // Blocks of 64 rows with every token, as matmul cuts a thread's rows.
      const double sg = median_seconds(o.reps, [&] {
        for (int64_t r = 0; r < o.rows; r += 64) {
          gemm_rows(kt, t, o.cols, w.data() + static_cast<size_t>(r) * row_b, row_b, std::min<int64_t>(64, o.rows - r),
                    a.data(), arb, o.tokens, y.data() + r, o.rows);
        }
      });
      KernelTable dots_only = kt;
      dots_only.gemm[static_cast<int>(t)] = nullptr;
      const double sd = median_seconds(std::max(1, o.reps / 4), [&] {
        for (int64_t r = 0; r < o.rows; r += 64) {
          gemm_rows(dots_only, t, o.cols, w.data() + static_cast<size_t>(r) * row_b, row_b,
                    std::min<int64_t>(64, o.rows - r), a.data(), arb, o.tokens, y.data() + r, o.rows);
        }
      });
      std::printf("   %7.1f / %5.1f %4.1fx", macs / sg / 1e9, macs / sd / 1e9, sd / sg);
      std::fflush(stdout);
    }
    std::printf("\n");
  }
}

// Sum of [p, p + n) as 64-bit words in 64-byte steps (the compiler may not drop the loads).
__attribute__((target("avx2"))) uint64_t read_bytes(const uint8_t* p, size_t n) {
  __m256i acc0 = _mm256_setzero_si256(), acc1 = _mm256_setzero_si256();
  for (size_t i = 0; i + 64 <= n; i += 64) {
    acc0 = _mm256_add_epi64(acc0, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i)));
    acc1 = _mm256_add_epi64(acc1, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
  }
  acc0 = _mm256_add_epi64(acc0, acc1);
  return static_cast<uint64_t>(_mm256_extract_epi64(acc0, 0) + _mm256_extract_epi64(acc0, 3));
}

void run_decode(const Options& o) {
  ThreadPool pool(o.threads);
  const std::vector<Isa> isas = supported_isas();
  std::mt19937_64 rng(1234);
  std::printf("decode-shaped products from DRAM: %.0f MB of weights in matrices of %lld x %lld, one token, %d threads, "
              "median of %d\n",
              o.mb, static_cast<long long>(o.rows), static_cast<long long>(o.cols), o.threads, o.reps);
  std::vector<bool> kinds;  // huge pages?
  if (o.huge_pages) kinds.push_back(true);
  if (o.small_pages) kinds.push_back(false);
  for (Type t : o.types) for (bool huge : kinds) {
    const size_t row_b = row_bytes(t, o.cols);
    const size_t mat_b = row_b * static_cast<size_t>(o.rows);
    const size_t n_mat = std::max<size_t>(1, static_cast<size_t>(o.mb * 1e6) / mat_b);
    const size_t total = n_mat * mat_b;
    // storage::AlignedBuffer: from 32 MiB an anonymous mapping on a 2 MiB boundary with huge
    // pages asked for, as the engine's; refused here, before the first touch, for 4 KiB pages.
    storage::AlignedBuffer w(total);
    if (!huge) ::madvise(w.data(), w.capacity(), MADV_NOHUGEPAGE);
    pool.parallel_for(static_cast<int64_t>(n_mat), 1, [&](int, int64_t b, int64_t e) {
      std::mt19937_64 r(static_cast<uint64_t>(b) * 7919 + 1);
      for (int64_t m = b; m < e; ++m) fill_weights(r, t, w.data() + static_cast<size_t>(m) * mat_b, mat_b, o.rows * o.cols);
    });
    const std::vector<uint8_t> a = make_acts(rng, t, o.cols, 1);
    std::vector<size_t> order(n_mat);
    for (size_t i = 0; i < n_mat; ++i) order[i] = i;
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<uint64_t> sums(static_cast<size_t>(o.threads));
    // Read bandwidth: every byte of the buffer, the same threads, chunks of 1 MiB.
    const int64_t chunk = 1 << 20;
    const int64_t n_chunks = static_cast<int64_t>((total + chunk - 1) / chunk);
    const double s_read = median_seconds(o.reps, [&] {
      pool.parallel_for(n_chunks, 1, [&](int th, int64_t b, int64_t e) {
        for (int64_t c = b; c < e; ++c) {
          const size_t off = static_cast<size_t>(c * chunk);
          sums[static_cast<size_t>(th)] += read_bytes(w.data() + off, std::min<size_t>(static_cast<size_t>(chunk), total - off));
        }
      });
    }, now_s);
    const double bw = static_cast<double>(total) / s_read / 1e9;
    uint64_t check = 0;
    for (uint64_t v : sums) check += v;
    std::printf("%-6s %.0f MB on %s pages: read bandwidth %.1f GB/s (checksum of the bytes read %llx)\n", type_name(t),
                static_cast<double>(total) / 1e6, huge ? "huge" : "4 KiB", bw, static_cast<unsigned long long>(check));
    std::vector<float> y(static_cast<size_t>(o.rows));
    for (Isa isa : isas) {
      if (isa == Isa::scalar) continue;
      set_active_isa(isa);
      QuantizedActs qa;
      qa.type = act_type(t);
      qa.n_in = o.cols;
      qa.n_tok = 1;
      qa.row_bytes = a.size();
      qa.buf = a;
      const double s = median_seconds(o.reps, [&] {
        for (size_t m : order) {
          const Matrix wm{t, o.cols, o.rows, row_b, w.data() + m * mat_b};
          matmul(wm, qa, y.data(), o.rows, pool);
        }
      }, now_s);
      const double gbs = static_cast<double>(total) / s / 1e9;
      // The products' bits (one more pass, untimed): equal between two builds when their kernels
      // give the same results.
      uint64_t h = 1469598103934665603ull;
      for (size_t m : order) {
        const Matrix wm{t, o.cols, o.rows, row_b, w.data() + m * mat_b};
        matmul(wm, qa, y.data(), o.rows, pool);
        for (float f : y) {
          uint32_t b;
          std::memcpy(&b, &f, 4);
          h = (h ^ b) * 1099511628211ull;
        }
      }
      std::printf("  %-8s products %6.1f GB/s = %3.0f%% of the read bandwidth (products hash %016llx)\n", isa_name(isa), gbs,
                  100 * gbs / bw, static_cast<unsigned long long>(h));
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  bool rows_set = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--rows") {
      o.rows = std::atoll(next());
      rows_set = true;
    } else if (a == "--cols") o.cols = std::atoll(next());
    else if (a == "--reps") o.reps = std::max(1, std::atoi(next()));
    else if (a == "--tokens") o.tokens = std::max<int64_t>(1, std::atoll(next()));
    else if (a == "--decode") o.decode = true;
    else if (a == "--vec-dot") o.vec_dot = true;
    else if (a == "--mb") o.mb = std::atof(next());
    else if (a == "--threads") o.threads = std::max(1, std::atoi(next()));
    else if (a == "--pages") {
      const std::string p = next();
      if (p != "huge" && p != "small" && p != "both") {
        std::fprintf(stderr, "--pages: huge, small or both\n");
        return 2;
      }
      o.huge_pages = p != "small";
      o.small_pages = p != "huge";
    }
    else if (a == "--type") {
      const auto t = parse_type(next());
      if (!t) {
        std::fprintf(stderr, "unknown type\n");
        return 2;
      }
      o.types.push_back(*t);
    } else {
      std::fprintf(stderr,
                   "usage: %s [--rows R] [--cols C] [--reps N] [--type T]... [--vec-dot | --tokens N | --decode "
                   "[--mb M] [--threads T] [--pages huge|small|both]]\n",
                   argv[0]);
      return 2;
    }
  }
  if (o.types.empty()) o.types.assign(std::begin(kTypes), std::end(kTypes));
  if (o.cols % QK_K != 0) {
    std::fprintf(stderr, "--cols must be a multiple of %d\n", QK_K);
    return 2;
  }
  if (o.decode) {
    if (!isa_supported(Isa::avx2)) {
      std::fprintf(stderr, "--decode reads memory with AVX2, which this CPU lacks\n");
      return 2;
    }
    if (!rows_set) o.rows = 768;
    run_decode(o);
  } else if (o.tokens > 0) {
    run_tokens(o);
  } else {
    run_matvec(o);
  }
  return 0;
}
