// Which execution pipes the kernels' AVX-512 instructions share, measured: the throughput of one
// instruction alone and of two interleaved (24 independent instructions per loop iteration, 12
// destinations, sources that never change). Two instructions that each run 2 per cycle and
// together 4 per cycle use different pipes; together 2 per cycle, the same ones. The clock is
// estimated from a chain of dependent integer adds (one per cycle).
//
// Built as build/isa_ports; runs on an x86-64 CPU with AVX-512 VNNI and GFNI (elsewhere it says
// so and exits). docs/kernels.md has what it measured on a Zen 5 VM and what the kernels made of it.

#include <chrono>
#include <cstdio>

#if defined(__x86_64__)

namespace {

template <class F>
double seconds(F f, long iters) {
  const auto t0 = std::chrono::steady_clock::now();
  f(iters);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double g_ghz = 0;

// An asm operand prefix as printed: "%%" as "%", without the trailing comma.
const char* label(const char* a) {
  static char buf[4][64];
  static int k = 0;
  char* out = buf[k++ % 4];
  int j = 0;
  for (int i = 0; a[i] && j < 63; ++i) {
    if (a[i] == '%' && a[i + 1] == '%') continue;
    out[j++] = a[i];
  }
  if (j > 0 && out[j - 1] == ',') --j;
  out[j] = 0;
  return out;
}

}  // namespace

#define CLOBBER "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11"
// A and B are instruction prefixes that end with their source operands; the destination follows.
#define PAIR(A, B, d) A "%%zmm" #d "\n\t" B "%%zmm" #d "\n\t"
#define BODY(A, B)                                                                                                  \
  PAIR(A, B, 0) PAIR(A, B, 1) PAIR(A, B, 2) PAIR(A, B, 3) PAIR(A, B, 4) PAIR(A, B, 5) PAIR(A, B, 6) PAIR(A, B, 7) \
      PAIR(A, B, 8) PAIR(A, B, 9) PAIR(A, B, 10) PAIR(A, B, 11)
#define MEASURE(A, B)                                                                                     \
  do {                                                                                                    \
    const long n = 20000000;                                                                              \
    const double t = seconds([](long k) { for (long i = 0; i < k; ++i) asm volatile(BODY(A, B)::: CLOBBER); }, n); \
    std::printf("%-32s + %-32s %5.2f per cycle\n", label(A), label(B), 24.0 * n / t / 1e9 / g_ghz);                     \
  } while (0)

#define SHUFB "vpshufb %%zmm14,%%zmm15,"
#define GF2P8 "vgf2p8affineqb $0,%%zmm14,%%zmm15,"
#define PERMW "vpermw %%zmm14,%%zmm15,"
#define SHUFI "vshufi64x2 $0x4e,%%zmm14,%%zmm15,"
#define BCAST "vbroadcasti64x4 (%%rsp),"
#define SHUFD "vpshufd $0x55,%%zmm15,"
#define DPBUSD "vpdpbusd %%zmm14,%%zmm15,"
#define DPWSSD "vpdpwssd %%zmm14,%%zmm15,"
#define MADDUBS "vpmaddubsw %%zmm14,%%zmm15,"
#define MULLD "vpmulld %%zmm14,%%zmm15,"
#define FMADD "vfmadd231ps %%zmm14,%%zmm15,"
#define PROLD "vprold $2,%%zmm15,"
#define SRLD "vpsrld $2,%%zmm15,"
#define SRLVD "vpsrlvd %%zmm14,%%zmm15,"
#define CVT "vcvtdq2ps %%zmm15,"
#define AND "vpandd %%zmm14,%%zmm15,"
#define TERN "vpternlogd $0xf8,%%zmm14,%%zmm15,"

int main() {
  if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") ||
      !__builtin_cpu_supports("avx512vnni") || !__builtin_cpu_supports("gfni")) {
    std::printf("isa_ports: needs AVX-512 (F, BW, VNNI) and GFNI; this CPU lacks one\n");
    return 0;
  }
  const long n = 50000000;
  const double tc = seconds([](long k) {
    long x = 0;
    for (long i = 0; i < k; ++i) asm volatile("add $1,%0\n\tadd $1,%0\n\tadd $1,%0\n\tadd $1,%0" : "+r"(x));
  }, n);
  g_ghz = 4.0 * n / tc / 1e9;
  std::printf("clock about %.2f GHz (a chain of dependent adds)\n", g_ghz);
  asm volatile("vpxord %%zmm14,%%zmm14,%%zmm14\n\tvpxord %%zmm15,%%zmm15,%%zmm15" ::: "xmm14", "xmm15");
  // alone
  MEASURE(SHUFB, SHUFB);
  MEASURE(GF2P8, GF2P8);
  MEASURE(PERMW, PERMW);
  MEASURE(BCAST, BCAST);
  MEASURE(SHUFD, SHUFD);
  MEASURE(DPBUSD, DPBUSD);
  MEASURE(MADDUBS, MADDUBS);
  MEASURE(MULLD, MULLD);
  MEASURE(FMADD, FMADD);
  MEASURE(PROLD, PROLD);
  MEASURE(SRLD, SRLD);
  MEASURE(SRLVD, SRLVD);
  MEASURE(CVT, CVT);
  MEASURE(AND, AND);
  MEASURE(TERN, TERN);
  // pairs: shuffles, multiplies, shifts
  MEASURE(SHUFB, GF2P8);
  MEASURE(SHUFB, PERMW);
  MEASURE(SHUFB, SHUFI);
  MEASURE(SHUFB, BCAST);
  MEASURE(SHUFB, SHUFD);
  MEASURE(SHUFB, MADDUBS);
  MEASURE(SHUFB, DPBUSD);
  MEASURE(GF2P8, DPBUSD);
  MEASURE(MADDUBS, DPWSSD);
  MEASURE(DPBUSD, FMADD);
  MEASURE(PROLD, DPBUSD);
  MEASURE(PROLD, SHUFB);
  MEASURE(SRLD, DPBUSD);
  MEASURE(SRLD, SHUFB);
  MEASURE(SRLVD, DPBUSD);
  MEASURE(CVT, DPBUSD);
  MEASURE(CVT, SHUFB);
  MEASURE(AND, DPBUSD);
  MEASURE(TERN, SHUFB);
  return 0;
}

#else

int main() {
  std::printf("isa_ports: x86-64 only\n");
  return 0;
}

#endif
