// Random rows in every weight type. Quantized blocks: fixed (sub-)block scales chosen so that the
// codes, drawn uniformly over a range symmetric about zero, give exactly the requested standard
// deviation; the codes are random bits laid out where the dequantizer reads them.
#include "les/synth/random_fill.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <vector>

#include "les/quant/blocks.h"
#include "les/quant/iq_grids.h"
#include "les/util/error.h"
#include "les/util/fp16.h"
#include "les/util/hash.h"

namespace les::synth {

uint64_t tensor_key(uint64_t seed, std::string_view name) {
  return hash64(name.data(), name.size(), mix64(seed ^ 0x5eed5eed5eed5eedull));
}

namespace {

// Root mean square of the integers 0..n-1 (the magnitude of sign-magnitude codes).
double rms_0_to(int n) {
  double s = 0;
  for (int m = 0; m < n; ++m) s += static_cast<double>(m) * m;
  return std::sqrt(s / n);
}
// Standard deviation of a uniform code over 0..n-1 about its mean (n - 1) / 2.
double sd_uniform(int n) { return std::sqrt((static_cast<double>(n) * n - 1.0) / 12.0); }

// Root mean square of the 16 IQ4_NL / IQ4_XS codebook values.
double rms_iq4_values() {
  double s = 0;
  for (int8_t v : kIq4nlValues) s += static_cast<double>(v) * v;
  return std::sqrt(s / 16);
}

// Random bytes.
void random_bytes(Rng& rng, uint8_t* p, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const uint64_t r = rng.next();
    std::memcpy(p + i, &r, 8);
  }
  if (i < n) {
    const uint64_t r = rng.next();
    std::memcpy(p + i, &r, n - i);
  }
}

// A stream of random bit fields taken from 64-bit words.
struct Bits {
  Rng& rng;
  uint64_t word = 0;
  int left = 0;
  uint32_t take(int nbits) {
    if (left < nbits) {
      word = rng.next();
      left = 64;
    }
    const uint32_t v = static_cast<uint32_t>(word & ((1ull << nbits) - 1));
    word >>= nbits;
    left -= nbits;
    return v;
  }
};

// Sign-magnitude code with magnitude bits `mb`: centre +- (r & mask), r uniform.
inline int sm_code(uint32_t r, int mb, int centre) {
  const int m = static_cast<int>(r & ((1u << mb) - 1));
  return (r >> mb) & 1 ? centre - m : centre + m;
}

void pack_scale_min_k4(const uint8_t sc[8], const uint8_t mn[8], uint8_t out[12]) {
  std::memset(out, 0, 12);
  for (int j = 0; j < 4; ++j) {
    out[j] = sc[j];
    out[j + 4] = mn[j];
  }
  for (int j = 4; j < 8; ++j) {
    out[j + 4] = static_cast<uint8_t>((sc[j] & 0xF) | ((mn[j] & 0xF) << 4));
    out[j - 4] |= static_cast<uint8_t>((sc[j] >> 4) << 6);
    out[j] |= static_cast<uint8_t>((mn[j] >> 4) << 6);
  }
}

// stored: 6-bit scales with the +32 offset.
void pack_scales_q3_K(const uint8_t stored[16], uint8_t out[12]) {
  std::memset(out, 0, 12);
  for (int j = 0; j < 16; ++j) {
    const int l = stored[j];
    if (j < 8) out[j] = static_cast<uint8_t>(l & 0xF);
    else out[j - 8] |= static_cast<uint8_t>((l & 0xF) << 4);
    out[8 + j % 4] |= static_cast<uint8_t>((l >> 4) << (2 * (j / 4)));
  }
}

uint16_t h(double x) { return f32_to_fp16(static_cast<float>(x)); }

// Root mean square of the byte values of a codebook's points (each entry: `per` bytes, read as
// int8 when `signed_bytes`).
template <typename T>
double rms_grid(const T* grid, int n, int per, bool signed_bytes = false) {
  double s = 0;
  for (int i = 0; i < n; ++i) {
    for (int k = 0; k < per; ++k) {
      const auto byte = static_cast<uint8_t>((static_cast<uint64_t>(grid[i]) >> (8 * k)) & 0xff);
      const double v = signed_bytes ? static_cast<int8_t>(byte) : byte;
      s += v * v;
    }
  }
  return std::sqrt(s / (static_cast<double>(n) * per));
}

// Sets nibble `hi` (0: low, 1: high) of `byte` to 4..11, keeping its three low bits random.
void mid_nibble(uint8_t& byte, int hi) {
  const int shift = 4 * hi;
  const int v = (byte >> shift) & 15;
  const int m = 4 + (v & 7);
  byte = static_cast<uint8_t>((byte & ~(15 << shift)) | (m << shift));
}

// Root mean square of a + b * k for k uniform over 0..n-1 (the sub-block scale factors).
double rms_affine(double a, double b, int n) {
  double s = 0;
  for (int k = 0; k < n; ++k) s += (a + b * k) * (a + b * k);
  return std::sqrt(s / n);
}

// Root mean square of the E2M1 values (halved doubles) of MXFP4/NVFP4 over the 16 codes.
double rms_fp4_values() {
  double s = 0;
  for (int8_t v : kFp4Values) s += 0.25 * v * v;
  return std::sqrt(s / 16);
}

// Two neighbouring codes of a monotone scale table value(lo..hi) around `target`, and the
// probability of the upper one that gives mean square target^2: p v_hi^2 + (1 - p) v_lo^2.
struct ScaleMix {
  int lo, hi;
  double p_hi;
};
template <typename Value>
ScaleMix scale_mix(double target, Value value, int lo, int hi) {
  if (!(target > value(lo))) return {lo, lo, 0.0};
  if (target >= value(hi)) return {hi, hi, 0.0};
  int k = lo;
  while (k + 1 < hi && value(k + 1) <= target) ++k;
  const double a = value(k), b = value(k + 1);
  return {k, k + 1, (target * target - a * a) / (b * b - a * a)};
}

// Ternary digits t in {0, 1, 2} (value t - 1), n of them, packed 5 (or 4) per byte the way TQ1_0
// stores them: the base-3 number v with the first digit most significant, as ceil(v * 256 / 3^k).
uint8_t pack_trits(const int* t, int n) {
  int v = 0;
  for (int k = 0; k < n; ++k) v = 3 * v + t[k];
  int pow3 = 1;
  for (int k = 0; k < n; ++k) pow3 *= 3;
  // The first digit is read back as (byte * 3) >> 8 after multiplying by 3^k: scale to 5 digits.
  for (int k = n; k < 5; ++k) { v *= 3; pow3 *= 3; }
  return static_cast<uint8_t>((v * 256 + pow3 - 1) / pow3);
}

}  // namespace

void fill_normal_row(float sigma, uint64_t key, int64_t row, int64_t n, float* dst) {
  Rng rng(key, static_cast<uint64_t>(row));
  for (int64_t i = 0; i < n; ++i) dst[i] = sigma * rng.normal();
}

void fill_random_row(Type t, float sigma, uint64_t key, int64_t row, int64_t n, void* dst) {
  LES_ASSERT(n % block_size(t) == 0);
  LES_ASSERT(sigma >= 0.0f && std::isfinite(sigma));
  Rng rng(key, static_cast<uint64_t>(row));
  const int64_t nb = n / block_size(t);
  auto* out = static_cast<uint8_t*>(dst);
  switch (t) {
    case Type::F32: {
      auto* y = static_cast<float*>(dst);
      for (int64_t i = 0; i < n; ++i) y[i] = sigma * rng.normal();
      return;
    }
    case Type::F16: case Type::BF16: {
      auto* y = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) {
        const float v = sigma * rng.normal();
        y[i] = t == Type::F16 ? f32_to_fp16(v) : f32_to_bf16(v);
      }
      return;
    }
    case Type::Q8_0: {
      static const double sd = rms_0_to(128);
      auto* b = reinterpret_cast<block_q8_0*>(out);
      const uint16_t d = h(sigma / sd);
      for (int64_t i = 0; i < nb; ++i) {
        b[i].d = d;
        uint8_t r[QK8_0];
        random_bytes(rng, r, sizeof r);
        for (int j = 0; j < QK8_0; ++j) b[i].qs[j] = static_cast<int8_t>(sm_code(r[j], 7, 0));
      }
      return;
    }
    case Type::Q4_0: {
      static const double sd = rms_0_to(8);
      auto* b = reinterpret_cast<block_q4_0*>(out);
      const uint16_t d = h(sigma / sd);
      for (int64_t i = 0; i < nb; ++i) {
        b[i].d = d;
        uint8_t r[QK4_0 / 2];
        random_bytes(rng, r, sizeof r);
        for (int j = 0; j < QK4_0 / 2; ++j) {
          const int lo = sm_code(r[j] & 0xF, 3, 8), hi = sm_code(r[j] >> 4, 3, 8);
          b[i].qs[j] = static_cast<uint8_t>(lo | (hi << 4));
        }
      }
      return;
    }
    case Type::Q4_1: {
      static const double sd = sd_uniform(16);
      auto* b = reinterpret_cast<block_q4_1*>(out);
      const double d = fp16_to_f32(h(sigma / sd));
      const uint16_t dh = h(d), mh = h(-7.5 * d);
      for (int64_t i = 0; i < nb; ++i) {
        b[i].d = dh;
        b[i].m = mh;
        random_bytes(rng, b[i].qs, sizeof b[i].qs);
      }
      return;
    }
    case Type::Q5_0: {
      static const double sd = rms_0_to(16);
      auto* b = reinterpret_cast<block_q5_0*>(out);
      const uint16_t d = h(sigma / sd);
      for (int64_t i = 0; i < nb; ++i) {
        b[i].d = d;
        Bits bits{rng};
        uint32_t qh = 0;
        for (int j = 0; j < QK5_0 / 2; ++j) {
          const int q0 = sm_code(bits.take(5), 4, 16), q1 = sm_code(bits.take(5), 4, 16);
          b[i].qs[j] = static_cast<uint8_t>((q0 & 0xF) | ((q1 & 0xF) << 4));
          qh |= static_cast<uint32_t>(q0 >> 4) << j;
          qh |= static_cast<uint32_t>(q1 >> 4) << (j + 16);
        }
        std::memcpy(b[i].qh, &qh, 4);
      }
      return;
    }
    case Type::Q5_1: {
      static const double sd = sd_uniform(32);
      auto* b = reinterpret_cast<block_q5_1*>(out);
      const double d = fp16_to_f32(h(sigma / sd));
      const uint16_t dh = h(d), mh = h(-15.5 * d);
      for (int64_t i = 0; i < nb; ++i) {
        b[i].d = dh;
        b[i].m = mh;
        random_bytes(rng, b[i].qh, sizeof b[i].qh);
        random_bytes(rng, b[i].qs, sizeof b[i].qs);
      }
      return;
    }
    case Type::Q2_K: {
      // x = d*10*q - d*15 = 10 d (q - 1.5), q uniform in 0..3.
      static const double sd = 10.0 * sd_uniform(4);
      auto* b = reinterpret_cast<block_q2_K*>(out);
      const uint16_t d = h(sigma / sd);
      for (int64_t i = 0; i < nb; ++i) {
        std::memset(b[i].scales, (15 << 4) | 10, sizeof b[i].scales);
        b[i].d = d;
        b[i].dmin = d;
        random_bytes(rng, b[i].qs, sizeof b[i].qs);
      }
      return;
    }
    case Type::Q3_K: {
      // x = d*16*c, c = +-m, m uniform in 0..3 (c in -3..3).
      static const double sd = 16.0 * rms_0_to(4);
      uint8_t stored[16];
      std::memset(stored, 32 + 16, sizeof stored);
      uint8_t packed[12];
      pack_scales_q3_K(stored, packed);
      auto* b = reinterpret_cast<block_q3_K*>(out);
      const uint16_t d = h(sigma / sd);
      for (int64_t i = 0; i < nb; ++i) {
        std::memcpy(b[i].scales, packed, 12);
        b[i].d = d;
        std::memset(b[i].qs, 0, sizeof b[i].qs);
        std::memset(b[i].hmask, 0, sizeof b[i].hmask);
        Bits bits{rng};
        for (int e = 0; e < QK_K; ++e) {
          const int hh = e / 128, k = (e % 128) / 32, l = e % 32;
          const int c = sm_code(bits.take(3), 2, 0);  // -3..3
          const int hbit = c >= 0 ? 1 : 0;
          const int lo = c >= 0 ? c : c + 4;
          b[i].qs[32 * hh + l] |= static_cast<uint8_t>(lo << (2 * k));
          b[i].hmask[l] |= static_cast<uint8_t>(hbit << (e / 32));
        }
      }
      return;
    }
    case Type::Q4_K: {
      // x = d*8*q - d*60 = 8 d (q - 7.5), q uniform in 0..15.
      static const double sd = 8.0 * sd_uniform(16);
      const uint8_t sc[8] = {8, 8, 8, 8, 8, 8, 8, 8}, mn[8] = {60, 60, 60, 60, 60, 60, 60, 60};
      uint8_t packed[12];
      pack_scale_min_k4(sc, mn, packed);
      auto* b = reinterpret_cast<block_q4_K*>(out);
      const uint16_t d = h(sigma / sd);
      for (int64_t i = 0; i < nb; ++i) {
        b[i].d = d;
        b[i].dmin = d;
        std::memcpy(b[i].scales, packed, 12);
        random_bytes(rng, b[i].qs, sizeof b[i].qs);
      }
      return;
    }
    case Type::Q5_K: {
      // x = d*4*q - d*62 = 4 d (q - 15.5), q uniform in 0..31.
      static const double sd = 4.0 * sd_uniform(32);
      const uint8_t sc[8] = {4, 4, 4, 4, 4, 4, 4, 4}, mn[8] = {62, 62, 62, 62, 62, 62, 62, 62};
      uint8_t packed[12];
      pack_scale_min_k4(sc, mn, packed);
      auto* b = reinterpret_cast<block_q5_K*>(out);
      const uint16_t d = h(sigma / sd);
      for (int64_t i = 0; i < nb; ++i) {
        b[i].d = d;
        b[i].dmin = d;
        std::memcpy(b[i].scales, packed, 12);
        random_bytes(rng, b[i].qh, sizeof b[i].qh);
        random_bytes(rng, b[i].qs, sizeof b[i].qs);
      }
      return;
    }
    case Type::Q6_K: {
      // x = d*64*(q - 32), q = 32 +- m, m uniform in 0..31.
      static const double sd = 64.0 * rms_0_to(32);
      auto* b = reinterpret_cast<block_q6_K*>(out);
      const uint16_t d = h(sigma / sd);
      for (int64_t i = 0; i < nb; ++i) {
        b[i].d = d;
        std::memset(b[i].scales, 64, sizeof b[i].scales);
        std::memset(b[i].ql, 0, sizeof b[i].ql);
        std::memset(b[i].qh, 0, sizeof b[i].qh);
        Bits bits{rng};
        for (int e = 0; e < QK_K; ++e) {
          const int hh = e / 128, k = (e % 128) / 32, l = e % 32;
          const int q = sm_code(bits.take(6), 5, 32);  // 1..63
          uint8_t& lb = b[i].ql[64 * hh + l + 32 * (k & 1)];
          lb |= static_cast<uint8_t>(k < 2 ? (q & 0xF) : ((q & 0xF) << 4));
          b[i].qh[32 * hh + l] |= static_cast<uint8_t>((q >> 4) << (2 * k));
        }
      }
      return;
    }
    case Type::IQ4_NL: {
      // x = +-d * V[c], c uniform over the 16 codebook values (not symmetric about zero, so the
      // sign of d is random per block).
      static const double sd = rms_iq4_values();
      auto* b = reinterpret_cast<block_iq4_nl*>(out);
      const uint16_t d = h(sigma / sd);
      Bits bits{rng};
      for (int64_t i = 0; i < nb; ++i) {
        b[i].d = bits.take(1) ? static_cast<uint16_t>(d ^ 0x8000) : d;
        random_bytes(rng, b[i].qs, sizeof b[i].qs);
      }
      return;
    }
    case Type::IQ4_XS: {
      // x = d * (+-16) * V[c]: sub-block scales ls - 32 = +-16 at random, c uniform.
      static const double sd = 16.0 * rms_iq4_values();
      auto* b = reinterpret_cast<block_iq4_xs*>(out);
      const uint16_t d = h(sigma / sd);
      Bits bits{rng};
      for (int64_t i = 0; i < nb; ++i) {
        b[i].d = d;
        uint16_t sh = 0;
        std::memset(b[i].scales_l, 0, sizeof b[i].scales_l);
        for (int ib = 0; ib < QK_K / 32; ++ib) {
          const int ls = bits.take(1) ? 32 + 16 : 32 - 16;
          b[i].scales_l[ib / 2] |= static_cast<uint8_t>((ls & 0xF) << (4 * (ib % 2)));
          sh = static_cast<uint16_t>(sh | ((ls >> 4) << (2 * ib)));
        }
        b[i].scales_h = sh;
        random_bytes(rng, b[i].qs, sizeof b[i].qs);
      }
      return;
    }
    case Type::IQ2_XXS: case Type::IQ2_XS: case Type::IQ2_S: {
      // x = d * (0.5 + ls) / 4 * g * sign: random grid indices and signs; 4-bit scales ls drawn from
      // 4..11 (the full range would make a row's spread depend on a few sub-blocks).
      static const double sd_xxs = rms_affine(4.5, 1.0, 8) / 4 * rms_grid(kIq2xxsGrid, 256, 8);
      static const double sd_xs = rms_affine(4.5, 1.0, 8) / 4 * rms_grid(kIq2xsGrid, 512, 8);
      static const double sd_s = rms_affine(4.5, 1.0, 8) / 4 * rms_grid(kIq2sGrid, 1024, 8);
      const double sd = t == Type::IQ2_XXS ? sd_xxs : t == Type::IQ2_XS ? sd_xs : sd_s;
      const size_t bb = info(t).block_bytes;
      const uint16_t d = h(sigma / sd);
      for (int64_t i = 0; i < nb; ++i) {
        uint8_t* b = out + static_cast<size_t>(i) * bb;
        random_bytes(rng, b + 2, bb - 2);
        std::memcpy(b, &d, 2);
        if (t == Type::IQ2_XXS) {  // ls: the top nibble of sub-block ib's second uint32
          for (int ib = 0; ib < QK_K / 32; ++ib) mid_nibble(b[offsetof(block_iq2_xxs, qs) + 8 * ib + 7], 1);
        } else {  // two 4-bit scales per byte of scales
          uint8_t* sc = b + (t == Type::IQ2_XS ? offsetof(block_iq2_xs, scales) : offsetof(block_iq2_s, scales));
          for (int ib = 0; ib < QK_K / 32; ++ib) {
            mid_nibble(sc[ib], 0);
            mid_nibble(sc[ib], 1);
          }
        }
      }
      return;
    }
    case Type::IQ3_XXS: case Type::IQ3_S: {
      // IQ3_XXS: x = d * (0.5 + ls) / 2 * g * sign; IQ3_S: x = d * (1 + 2 ls) * g * sign; ls in 4..11.
      static const double sd_xxs = rms_affine(4.5, 1.0, 8) / 2 * rms_grid(kIq3xxsGrid, 256, 4);
      static const double sd_s = rms_affine(9.0, 2.0, 8) * rms_grid(kIq3sGrid, 512, 4);
      const double sd = t == Type::IQ3_XXS ? sd_xxs : sd_s;
      const size_t bb = info(t).block_bytes;
      const uint16_t d = h(sigma / sd);
      for (int64_t i = 0; i < nb; ++i) {
        uint8_t* b = out + static_cast<size_t>(i) * bb;
        random_bytes(rng, b + 2, bb - 2);
        std::memcpy(b, &d, 2);
        if (t == Type::IQ3_XXS) {  // ls: the top nibble of sub-block ib's uint32 after the 64 indices
          for (int ib = 0; ib < QK_K / 32; ++ib) mid_nibble(b[offsetof(block_iq3_xxs, qs) + QK_K / 4 + 4 * ib + 3], 1);
        } else {
          for (int k = 0; k < QK_K / 64; ++k) {
            mid_nibble(b[offsetof(block_iq3_s, scales) + k], 0);
            mid_nibble(b[offsetof(block_iq3_s, scales) + k], 1);
          }
        }
      }
      return;
    }
    case Type::IQ1_S: case Type::IQ1_M: {
      // x = d * (2 ls + 1) * (g +- delta): g in {-1, 0, 1}, 3-bit ls, random delta signs.
      static const double sd =
          rms_affine(1.0, 2.0, 8) * std::sqrt(std::pow(rms_grid(kIq1sGrid, 2048, 8, true), 2) + kIq1sDelta * kIq1sDelta);
      const size_t bb = info(t).block_bytes;
      const uint16_t d = h(sigma / sd);
      for (int64_t i = 0; i < nb; ++i) {
        uint8_t* b = out + static_cast<size_t>(i) * bb;
        if (t == Type::IQ1_S) {
          random_bytes(rng, b + 2, bb - 2);
          std::memcpy(b, &d, 2);
        } else {  // the fp16 super-scale goes to the top nibbles of the four scale words
          random_bytes(rng, b, bb);
          uint8_t* sc = b + offsetof(block_iq1_m, scales);
          for (int k = 0; k < 4; ++k) sc[2 * k + 1] = static_cast<uint8_t>((sc[2 * k + 1] & 0x0f) | (((d >> (4 * k)) & 0xf) << 4));
        }
      }
      return;
    }
    case Type::TQ1_0: case Type::TQ2_0: {
      // x = d * (t - 1), t uniform in {0, 1, 2}.
      static const double sd = std::sqrt(2.0 / 3.0);
      const uint16_t d = h(sigma / sd);
      for (int64_t i = 0; i < nb; ++i) {
        if (t == Type::TQ2_0) {
          auto* b = reinterpret_cast<block_tq2_0*>(out) + i;
          for (uint8_t& q : b->qs) {
            q = 0;
            for (int k = 0; k < 4; ++k) q = static_cast<uint8_t>(q | (rng.next() % 3) << (2 * k));
          }
          b->d = d;
        } else {
          auto* b = reinterpret_cast<block_tq1_0*>(out) + i;
          int tr[5];
          for (uint8_t& q : b->qs) {
            for (int& v : tr) v = static_cast<int>(rng.next() % 3);
            q = pack_trits(tr, 5);
          }
          for (uint8_t& q : b->qh) {
            for (int k = 0; k < 4; ++k) tr[k] = static_cast<int>(rng.next() % 3);
            q = pack_trits(tr, 4);
          }
          b->d = d;
        }
      }
      return;
    }
    case Type::MXFP4: {
      // x = 2^(e - 127) * v, v an E2M1 value. A power of two cannot hit sigma / rms(v), so each
      // block takes one of the two neighbouring exponents, the upper with the probability that
      // makes the mean square exact.
      static const double sd = rms_fp4_values();
      const ScaleMix mix = scale_mix(sigma / sd, [](int k) { return std::ldexp(1.0, k - 127); }, 1, 254);
      auto* b = reinterpret_cast<block_mxfp4*>(out);
      for (int64_t i = 0; i < nb; ++i) {
        b[i].e = static_cast<uint8_t>(rng.uniform() < mix.p_hi ? mix.hi : mix.lo);
        random_bytes(rng, b[i].qs, sizeof b[i].qs);
      }
      return;
    }
    case Type::NVFP4: {
      // x = s * v with s a UE4M3 scale (normal E4M3 values 2^(ex - 7) * (1 + m / 8); llama.cpp
      // reads the byte as half that, its E2M1 table being doubled): per 16 elements one of the two
      // scales around sigma / rms(v), mixed as for MXFP4.
      static const double sd = rms_fp4_values();
      const ScaleMix mix = scale_mix(
          sigma / sd,
          [](int x) {
            const int ex = (x >> 3) & 15, man = x & 7;
            return ex == 0 ? std::ldexp(static_cast<double>(man), -9) : std::ldexp(1.0 + man / 8.0, ex - 7);
          },
          0x01, 0x7e);
      auto* b = reinterpret_cast<block_nvfp4*>(out);
      for (int64_t i = 0; i < nb; ++i) {
        for (uint8_t& sc : b[i].d) sc = static_cast<uint8_t>(rng.uniform() < mix.p_hi ? mix.hi : mix.lo);
        random_bytes(rng, b[i].qs, sizeof b[i].qs);
      }
      return;
    }
    default:
      throw Error(strfmt("synth: no random generator for tensor type %s", type_name(t)));
  }
}

}  // namespace les::synth
