#include "les/quant/finite.h"

#include <cmath>
#include <cstddef>
#include <cstring>

#include "les/quant/blocks.h"
#include "les/util/error.h"

namespace les {

namespace {

struct Field {
  size_t offset;
  const char* name;
};

// Where the scales of each block type lie; n = number of fields.
struct Scales {
  Field f[2];
  int n;
  bool f32;  // Q8_K's scale is a float, the others binary16
};

std::optional<Scales> scales_of(Type t) {
  switch (t) {
    case Type::Q4_0: return Scales{{{offsetof(block_q4_0, d), "d"}, {}}, 1, false};
    case Type::Q4_1: return Scales{{{offsetof(block_q4_1, d), "d"}, {offsetof(block_q4_1, m), "m"}}, 2, false};
    case Type::Q5_0: return Scales{{{offsetof(block_q5_0, d), "d"}, {}}, 1, false};
    case Type::Q5_1: return Scales{{{offsetof(block_q5_1, d), "d"}, {offsetof(block_q5_1, m), "m"}}, 2, false};
    case Type::Q8_0: return Scales{{{offsetof(block_q8_0, d), "d"}, {}}, 1, false};
    case Type::Q8_1: return Scales{{{offsetof(block_q8_1, d), "d"}, {offsetof(block_q8_1, s), "s"}}, 2, false};
    case Type::Q2_K:
      return Scales{{{offsetof(block_q2_K, d), "d"}, {offsetof(block_q2_K, dmin), "dmin"}}, 2, false};
    case Type::Q3_K: return Scales{{{offsetof(block_q3_K, d), "d"}, {}}, 1, false};
    case Type::Q4_K:
      return Scales{{{offsetof(block_q4_K, d), "d"}, {offsetof(block_q4_K, dmin), "dmin"}}, 2, false};
    case Type::Q5_K:
      return Scales{{{offsetof(block_q5_K, d), "d"}, {offsetof(block_q5_K, dmin), "dmin"}}, 2, false};
    case Type::Q6_K: return Scales{{{offsetof(block_q6_K, d), "d"}, {}}, 1, false};
    case Type::Q8_K: return Scales{{{offsetof(block_q8_K, d), "d"}, {}}, 1, true};
    case Type::IQ4_NL: return Scales{{{offsetof(block_iq4_nl, d), "d"}, {}}, 1, false};
    case Type::IQ4_XS: return Scales{{{offsetof(block_iq4_xs, d), "d"}, {}}, 1, false};
    case Type::IQ2_XXS: return Scales{{{offsetof(block_iq2_xxs, d), "d"}, {}}, 1, false};
    case Type::IQ2_XS: return Scales{{{offsetof(block_iq2_xs, d), "d"}, {}}, 1, false};
    case Type::IQ2_S: return Scales{{{offsetof(block_iq2_s, d), "d"}, {}}, 1, false};
    case Type::IQ3_XXS: return Scales{{{offsetof(block_iq3_xxs, d), "d"}, {}}, 1, false};
    case Type::IQ3_S: return Scales{{{offsetof(block_iq3_s, d), "d"}, {}}, 1, false};
    case Type::IQ1_S: return Scales{{{offsetof(block_iq1_s, d), "d"}, {}}, 1, false};
    case Type::TQ1_0: return Scales{{{offsetof(block_tq1_0, d), "d"}, {}}, 1, false};
    case Type::TQ2_0: return Scales{{{offsetof(block_tq2_0, d), "d"}, {}}, 1, false};
    default: return std::nullopt;
  }
}

uint16_t load16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return h;
}

uint32_t load32(const uint8_t* p) {
  uint32_t u;
  std::memcpy(&u, p, 4);
  return u;
}

// Exponent all ones: infinity (mantissa 0) or NaN.
bool f16_bad(uint16_t h) { return (h & 0x7c00) == 0x7c00; }
bool f16_nan(uint16_t h) { return f16_bad(h) && (h & 0x03ff) != 0; }
bool bf16_bad(uint16_t h) { return (h & 0x7f80) == 0x7f80; }
bool bf16_nan(uint16_t h) { return bf16_bad(h) && (h & 0x007f) != 0; }
bool f32_bad(uint32_t u) { return (u & 0x7f800000u) == 0x7f800000u; }
bool f32_nan(uint32_t u) { return f32_bad(u) && (u & 0x007fffffu) != 0; }

}  // namespace

std::optional<NonFinite> find_nonfinite(Type t, const void* data, int64_t n_elements) {
  const auto* p = static_cast<const uint8_t*>(data);
  const TypeInfo& ti = info(t);
  LES_ASSERT(n_elements >= 0 && n_elements % ti.block_size == 0);
  const int64_t n_blocks = n_elements / ti.block_size;
  switch (t) {
    case Type::F32:
      for (int64_t i = 0; i < n_blocks; ++i) {
        const uint32_t u = load32(p + 4 * i);
        if (f32_bad(u)) return NonFinite{i, "value", f32_nan(u)};
      }
      return std::nullopt;
    case Type::F16:
    case Type::BF16: {
      const bool bf = t == Type::BF16;
      for (int64_t i = 0; i < n_blocks; ++i) {
        const uint16_t h = load16(p + 2 * i);
        if (bf ? bf16_bad(h) : f16_bad(h)) return NonFinite{i, "value", bf ? bf16_nan(h) : f16_nan(h)};
      }
      return std::nullopt;
    }
    case Type::IQ1_M:
      // The fp16 super-scale is spread over the top nibbles of the four uint16 of scales.
      for (int64_t b = 0; b < n_blocks; ++b) {
        const uint8_t* sc = p + static_cast<size_t>(b) * ti.block_bytes + offsetof(block_iq1_m, scales);
        uint16_t h = 0;
        for (int k = 0; k < 4; ++k) h = static_cast<uint16_t>(h | ((sc[2 * k + 1] >> 4) << (4 * k)));
        if (f16_bad(h)) return NonFinite{b, "d", f16_nan(h)};
      }
      return std::nullopt;
    case Type::MXFP4:
      // E8M0 scales: 0xff is NaN (OCP MX); every other byte is a power of two.
      for (int64_t b = 0; b < n_blocks; ++b) {
        if (p[static_cast<size_t>(b) * ti.block_bytes + offsetof(block_mxfp4, e)] == 0xff) return NonFinite{b, "e", true};
      }
      return std::nullopt;
    default: break;  // NVFP4: every UE4M3 byte is a finite scale (0x7f reads as zero, as llama.cpp does)
  }
  const std::optional<Scales> sc = scales_of(t);
  if (!sc) return std::nullopt;  // integer types
  for (int64_t b = 0; b < n_blocks; ++b) {
    const uint8_t* blk = p + static_cast<size_t>(b) * ti.block_bytes;
    for (int k = 0; k < sc->n; ++k) {
      const Field& f = sc->f[k];
      if (sc->f32) {
        const uint32_t u = load32(blk + f.offset);
        if (f32_bad(u)) return NonFinite{b, f.name, f32_nan(u)};
      } else {
        const uint16_t h = load16(blk + f.offset);
        if (f16_bad(h)) return NonFinite{b, f.name, f16_nan(h)};
      }
    }
  }
  return std::nullopt;
}

std::string describe_nonfinite(Type t, const NonFinite& nf) {
  const char* what = nf.nan ? "NaN" : "infinite";
  const int64_t bs = info(t).block_size;
  if (bs == 1) return strfmt("element %lld is %s", static_cast<long long>(nf.block), what);
  return strfmt("block %lld (elements %lld..%lld): scale %s is %s", static_cast<long long>(nf.block),
                static_cast<long long>(nf.block * bs), static_cast<long long>(nf.block * bs + bs - 1), nf.field,
                what);
}

}  // namespace les
