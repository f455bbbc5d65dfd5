// Run-time kernel dispatch: CPU feature detection, the per-ISA kernel tables, the active table,
// and the type-generic row (de)quantization entry points.
//
// The tables are built once, on first use, by a thread-safe static initialiser; after that they
// are immutable. The only mutable global is the pointer to the active table (an atomic).

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <initializer_list>
#include <string>

#include "les/quant/kernels.h"
#include "les/quant/kernels_internal.h"
#include "les/quant/quantize_fast.h"
#include "les/util/error.h"

#if defined(__x86_64__) || defined(_M_X64)
#define LES_DISPATCH_X86 1
#include <cpuid.h>
#else
#define LES_DISPATCH_X86 0
#endif

#if defined(__aarch64__)
#define LES_DISPATCH_ARM 1
#include <asm/hwcap.h>
#include <sys/auxv.h>
#else
#define LES_DISPATCH_ARM 0
#endif

namespace les {
namespace {

struct CpuFeatures {
  bool avx2 = false;         // AVX2 + FMA + F16C + BMI2, ymm state enabled by the OS
  bool avx_vnni = false;     // avx2 + AVX-VNNI (VEX-encoded vpdpbusd/vpdpwssd)
  bool avx512 = false;       // avx2 + AVX-512 F/BW/VL/DQ/VNNI, zmm/opmask state enabled by the OS
  bool avx512_bf16 = false;  // avx512 + AVX512-BF16
  bool gfni = false;         // avx512 + GFNI
  bool neon = false;         // aarch64 Advanced SIMD (HWCAP_ASIMD)
  bool dotprod = false;      // neon + SDOT/UDOT (HWCAP_ASIMDDP)
  bool i8mm = false;         // dotprod + SMMLA/UMMLA (HWCAP2_I8MM)
};

#if LES_DISPATCH_X86
uint64_t read_xcr0() {
  uint32_t eax = 0, edx = 0;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<uint64_t>(edx) << 32) | eax;
}

CpuFeatures probe_cpu() {
  CpuFeatures f;
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool osxsave = c & (1u << 27);
  const bool avx = c & (1u << 28);
  const bool fma = c & (1u << 12);
  const bool f16c = c & (1u << 29);
  if (!osxsave || !avx) return f;  // xgetbv is only available with OSXSAVE
  const uint64_t xcr0 = read_xcr0();
  const bool os_ymm = (xcr0 & 0x06) == 0x06;  // SSE + AVX state
  const bool os_zmm = (xcr0 & 0xe6) == 0xe6;  // + opmask, ZMM_Hi256, Hi16_ZMM
  if (__get_cpuid_max(0, nullptr) < 7) return f;
  __cpuid_count(7, 0, a, b, c, d);
  const unsigned max_subleaf = a;
  const bool avx2 = b & (1u << 5);
  const bool bmi2 = b & (1u << 8);
  const bool avx512f = b & (1u << 16);
  const bool avx512dq = b & (1u << 17);
  const bool avx512bw = b & (1u << 30);
  const bool avx512vl = b & (1u << 31);
  const bool avx512vnni = c & (1u << 11);
  const bool gfni = c & (1u << 8);
  f.avx2 = os_ymm && avx2 && fma && f16c && bmi2;
  f.avx512 = f.avx2 && os_zmm && avx512f && avx512dq && avx512bw && avx512vl && avx512vnni;
  f.gfni = f.avx512 && gfni;
  if (max_subleaf >= 1) {
    __cpuid_count(7, 1, a, b, c, d);
    f.avx_vnni = f.avx2 && (a & (1u << 4));
    f.avx512_bf16 = f.avx512 && (a & (1u << 5));
  }
  return f;
}
#elif LES_DISPATCH_ARM
// The kernel reports what the CPU (or qemu's emulated CPU model) implements in the aux vector.
CpuFeatures probe_cpu() {
  CpuFeatures f;
  const unsigned long hw = getauxval(AT_HWCAP);
  const unsigned long hw2 = getauxval(AT_HWCAP2);
  f.neon = hw & HWCAP_ASIMD;
  f.dotprod = f.neon && (hw & HWCAP_ASIMDDP);
#ifdef HWCAP2_I8MM
  f.i8mm = f.dotprod && (hw2 & HWCAP2_I8MM);
#else
  f.i8mm = f.dotprod && (hw2 & (1ul << 13));
#endif
  return f;
}
#else
CpuFeatures probe_cpu() { return {}; }
#endif

const CpuFeatures& cpu() {
  static const CpuFeatures f = probe_cpu();
  return f;
}

struct Tables {
  KernelTable table[kNumIsa];
  bool present[kNumIsa];
};

// Drops the gemm entries that `t` inherited from `below` for types whose vec_dot `t` overrides
// without its own gemm: an inherited gemm would not match the new vec_dot bit for bit.
void drop_stale_gemms(KernelTable& t, const KernelTable& below) {
  for (int i = 0; i < kTypeSlots; ++i) {
    if (t.vec_dot[i] != below.vec_dot[i] && t.gemm[i] == below.gemm[i]) t.gemm[i] = nullptr;
  }
}

// Each ISA's table starts as a copy of the one below it and overrides what it provides.
Tables build_tables() {
  Tables s{};
  s.table[0].isa = Isa::scalar;
  fill_kernel_table_scalar(s.table[0]);
  fill_fast_quantizers_scalar(s.table[0]);
  s.present[0] = true;
#if LES_DISPATCH_X86 || LES_DISPATCH_ARM
  [[maybe_unused]] auto derive = [&](Isa isa, Isa below, std::initializer_list<void (*)(KernelTable&)> fills) {
    KernelTable& t = s.table[static_cast<int>(isa)];
    const KernelTable& b = s.table[static_cast<int>(below)];
    t = b;
    t.isa = isa;
    for (auto fill : fills) fill(t);
    drop_stale_gemms(t, b);
    s.present[static_cast<int>(isa)] = true;
  };
#endif
#if LES_DISPATCH_X86
  derive(Isa::avx2, Isa::scalar,
         {fill_kernel_table_avx2, fill_kernel_table_avx2_tiles, fill_dequantizers_avx2, fill_fast_quantizers_avx2,
          fill_kernel_table_avx2_iq2, fill_kernel_table_avx2_iq3, fill_kernel_table_avx2_iq1,
          fill_kernel_table_avx2_lowbit});
  derive(Isa::avx_vnni, Isa::avx2,
         {fill_kernel_table_avx_vnni, fill_kernel_table_avxvnni_iq2, fill_kernel_table_avxvnni_iq3,
          fill_kernel_table_avxvnni_iq1, fill_kernel_table_avxvnni_lowbit});
  derive(Isa::avx512, Isa::avx2,
         {fill_kernel_table_avx512, fill_fast_quantizers_avx512, fill_kernel_table_avx512_iq2,
          fill_kernel_table_avx512_iq3, fill_kernel_table_avx512_iq1, fill_kernel_table_avx512_lowbit});
#endif
#if LES_DISPATCH_ARM
  derive(Isa::neon, Isa::scalar,
         {fill_kernel_table_neon_q32, fill_kernel_table_neon_k456, fill_kernel_table_neon_k23x, fill_kernel_table_neon_iq2,
          fill_kernel_table_neon_iq3, fill_kernel_table_neon_iq1, fill_kernel_table_neon_lowbit});
  derive(Isa::dotprod, Isa::neon,
         {fill_kernel_table_dotprod_q32, fill_kernel_table_dotprod_k456, fill_kernel_table_dotprod_k23x,
          fill_kernel_table_dotprod_iq2, fill_kernel_table_dotprod_iq3, fill_kernel_table_dotprod_iq1,
          fill_kernel_table_dotprod_lowbit});
  derive(Isa::i8mm, Isa::dotprod,
         {fill_kernel_table_i8mm_q32, fill_kernel_table_i8mm_k456, fill_kernel_table_i8mm_k23x, fill_kernel_table_i8mm_iq2,
          fill_kernel_table_i8mm_iq3, fill_kernel_table_i8mm_iq1, fill_kernel_table_i8mm_lowbit});
#endif
  return s;
}

const Tables& tables() {
  static const Tables s = build_tables();
  return s;
}

// The table in use; nullptr until first use or set_active_isa.
std::atomic<const KernelTable*> g_active{nullptr};

std::string type_label(Type t) {
  const auto ti = type_info(static_cast<uint32_t>(t));
  return ti ? std::string(ti->name) : strfmt("type id %u", static_cast<unsigned>(t));
}

// Validates (t, n) for a row operation; returns the table index of t.
int check_row(const char* what, Type t, int64_t n) {
  const auto ti = type_info(static_cast<uint32_t>(t));
  if (!ti) throw Error(strfmt("%s: unsupported type %s", what, type_label(t).c_str()));
  if (n < 0 || n % ti->block_size != 0) {
    throw Error(strfmt("%s: row length %lld is not a multiple of the %s block size %lld", what,
                       static_cast<long long>(n), ti->name,
                       static_cast<long long>(ti->block_size)));
  }
  return static_cast<int>(t);
}

}  // namespace

bool cpu_has_avx512_bf16() { return cpu().avx512_bf16; }
bool cpu_has_gfni() { return cpu().gfni; }

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::scalar: return "scalar";
    case Isa::avx2: return "avx2";
    case Isa::avx_vnni: return "avxvnni";
    case Isa::avx512: return "avx512";
    case Isa::neon: return "neon";
    case Isa::dotprod: return "dotprod";
    case Isa::i8mm: return "i8mm";
  }
  return "unknown";
}

bool parse_isa(const char* name, Isa& isa) {
  for (int i = 0; i < kNumIsa; ++i) {
    if (std::string(name) == isa_name(static_cast<Isa>(i))) {
      isa = static_cast<Isa>(i);
      return true;
    }
  }
  return false;
}

bool isa_supported(Isa isa) {
  const CpuFeatures& f = cpu();
  switch (isa) {
    case Isa::scalar: return true;
    case Isa::avx2: return f.avx2;
    case Isa::avx_vnni: return f.avx_vnni;
    case Isa::avx512: return f.avx512;
    case Isa::neon: return f.neon;
    case Isa::dotprod: return f.dotprod;
    case Isa::i8mm: return f.i8mm;
  }
  return false;
}

Isa detect_isa() {
  for (int i = kNumIsa - 1; i > 0; --i) {
    if (isa_supported(static_cast<Isa>(i))) return static_cast<Isa>(i);
  }
  return Isa::scalar;
}

Type act_type(Type w) {
  switch (w) {
    case Type::F32: return Type::F32;
    case Type::F16: return Type::F16;
    case Type::BF16: return Type::BF16;
    case Type::Q4_0:
    case Type::Q5_0:
    case Type::Q8_0:
    case Type::IQ4_NL:
    case Type::MXFP4:
    case Type::NVFP4: return Type::Q8_0;
    case Type::Q4_1:
    case Type::Q5_1: return Type::Q8_1;
    case Type::Q2_K:
    case Type::Q3_K:
    case Type::Q4_K:
    case Type::Q5_K:
    case Type::Q6_K:
    case Type::IQ4_XS:
    case Type::IQ2_XXS:
    case Type::IQ2_XS:
    case Type::IQ2_S:
    case Type::IQ3_XXS:
    case Type::IQ3_S:
    case Type::IQ1_S:
    case Type::IQ1_M:
    case Type::TQ1_0:
    case Type::TQ2_0: return Type::Q8_K;
    default: break;
  }
  throw Error(strfmt("no dot product kernel for weight type %s", type_label(w).c_str()));
}

const KernelTable* kernel_table(Isa isa) {
  const int i = static_cast<int>(isa);
  if (i < 0 || i >= kNumIsa) return nullptr;
  const Tables& s = tables();
  return s.present[i] ? &s.table[i] : nullptr;
}

Isa default_isa() {
  const Isa best = detect_isa();
  const char* env = std::getenv("LES_ISA");
  if (!env || !*env) return best;
  Isa want;
  if (!parse_isa(env, want) || !isa_supported(want) || !kernel_table(want)) {
    std::string runs;
    for (int i = 0; i < kNumIsa; ++i) {
      const Isa isa = static_cast<Isa>(i);
      if (isa_supported(isa) && kernel_table(isa)) runs += std::string(runs.empty() ? "" : ", ") + isa_name(isa);
    }
    std::fprintf(stderr, "les: LES_ISA=%s is not a kernel ISA this CPU runs (%s); using %s\n", env, runs.c_str(),
                 isa_name(best));
    return best;
  }
  return want;
}

const KernelTable& kernels() {
  const KernelTable* p = g_active.load(std::memory_order_acquire);
  if (p) return *p;
  const KernelTable* best = kernel_table(default_isa());
  LES_ASSERT(best != nullptr);
  // Another thread may have set it meanwhile (first use or set_active_isa): keep theirs.
  if (g_active.compare_exchange_strong(p, best, std::memory_order_acq_rel)) return *best;
  return *p;
}

bool set_active_isa(Isa isa) {
  const int i = static_cast<int>(isa);
  if (i < 0 || i >= kNumIsa || !isa_supported(isa)) return false;
  const KernelTable* t = kernel_table(isa);
  if (!t) return false;
  g_active.store(t, std::memory_order_release);
  return true;
}

void gemm_rows(const KernelTable& t, Type w, int64_t n, const void* wr, size_t w_stride, int64_t nr, const void* a,
               size_t a_stride, int64_t nc, float* y, int64_t y_stride) {
  const auto id = static_cast<uint32_t>(w);
  LES_ASSERT(id < kTypeSlots && t.vec_dot[id] != nullptr);
  if (t.gemm[id]) {
    t.gemm[id](n, wr, w_stride, nr, a, a_stride, nc, y, y_stride);
    return;
  }
  const VecDotFn dot = t.vec_dot[id];
  const auto* wb = static_cast<const uint8_t*>(wr);
  const auto* ab = static_cast<const uint8_t*>(a);
  for (int64_t c = 0; c < nc; ++c) {
    for (int64_t r = 0; r < nr; ++r) {
      y[c * y_stride + r] = dot(n, wb + static_cast<size_t>(r) * w_stride, ab + static_cast<size_t>(c) * a_stride);
    }
  }
}

namespace {

// Throws unless every importance[i] is finite and >= 0.
void check_importance(const char* what, const float* importance, int64_t n) {
  for (int64_t i = 0; importance && i < n; ++i) {
    if (!(importance[i] >= 0) || !std::isfinite(importance[i])) {
      throw Error(strfmt("%s: importance[%lld] = %g (must be finite and >= 0)", what,
                         static_cast<long long>(i), static_cast<double>(importance[i])));
    }
  }
}

}  // namespace

void quantize_row_ref(Type t, const float* x, void* y, int64_t n, const float* importance) {
  check_row("quantize_row_ref", t, n);
  const RefQuantizeFn fn = ref_weight_quantizer(t);
  if (!fn) throw Error(strfmt("quantize_row_ref: cannot quantize to %s", type_label(t).c_str()));
  check_importance("quantize_row_ref", importance, n);
  fn(x, y, n, importance);
}

void quantize_row_fast(Type t, const float* x, void* y, int64_t n, const float* importance) {
  const int id = check_row("quantize_row_fast", t, n);
  const WeightQuantizeFn fn = id < kTypeSlots ? kernels().quantize_fast[id] : nullptr;
  if (!fn) throw Error(strfmt("quantize_row_fast: cannot quantize to %s", type_label(t).c_str()));
  check_importance("quantize_row_fast", importance, n);
  fn(x, y, n, importance);
}

void dequantize_row(Type t, const void* x, float* y, int64_t n) {
  const int id = check_row("dequantize_row", t, n);
  const DequantizeFn fn = id < kTypeSlots ? kernels().dequantize[id] : nullptr;
  if (!fn) throw Error(strfmt("dequantize_row: cannot dequantize %s", type_label(t).c_str()));
  fn(x, y, n);
}

}  // namespace les
