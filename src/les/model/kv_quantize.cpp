#include "les/model/kv_quantize.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "les/util/fp16.h"

namespace les {

namespace kv_quantize_detail {

void store_half(uint8_t* p, float v) {
  const uint16_t h = f32_to_fp16(v);
  std::memcpy(p, &h, 2);
}

// Symmetric blocks: d = (the value of largest magnitude) / -half, q = x / d + half, truncated,
// at most 2 * half - 1.
void block_sym(const float* x, int half, float& d, int* q) {
  float amax = 0, mx = 0;
  for (int j = 0; j < 32; ++j) {
    if (amax < std::fabs(x[j])) {
      amax = std::fabs(x[j]);
      mx = x[j];
    }
  }
  d = mx / static_cast<float>(-half);
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  for (int j = 0; j < 32; ++j) {
    q[j] = std::min(2 * half - 1, static_cast<int>(static_cast<int8_t>(x[j] * id + (static_cast<float>(half) + 0.5f))));
  }
}

// Affine blocks: d = (max - min) / levels, m = min, q = (x - min) / d rounded half up.
void block_affine(const float* x, int levels, bool clamp, float& d, float& m, int* q) {
  float mn = FLT_MAX, mx = -FLT_MAX;
  for (int j = 0; j < 32; ++j) {
    mn = std::min(mn, x[j]);
    mx = std::max(mx, x[j]);
  }
  d = (mx - mn) / static_cast<float>(levels);
  m = mn;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  for (int j = 0; j < 32; ++j) {
    const int v = static_cast<int>(static_cast<uint8_t>(static_cast<int8_t>((x[j] - mn) * id + 0.5f)));
    q[j] = clamp ? std::min(levels, v) : v;
  }
}

// Low four bits of q[j] and q[j + 16] share byte j; the fifth bits go to a 32-bit word.
void pack_nibbles(const int* q, uint8_t* qs) {
  for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>((q[j] & 0x0f) | ((q[j + 16] & 0x0f) << 4));
}
void pack_high_bits(const int* q, uint8_t* qh) {
  uint32_t h = 0;
  for (int j = 0; j < 32; ++j) h |= static_cast<uint32_t>((q[j] >> 4) & 1) << j;
  std::memcpy(qh, &h, 4);
}

}  // namespace kv_quantize_detail

bool kv_quantize_simple(Type t, const float* x, uint8_t* y, int64_t n) {
  using namespace kv_quantize_detail;
  if (t != Type::Q4_0 && t != Type::Q4_1 && t != Type::Q5_0 && t != Type::Q5_1) return false;
  const size_t bb = info(t).block_bytes;
  for (int64_t b = 0; b < n / 32; ++b, x += 32, y += bb) {
    int q[32];
    float d = 0, m = 0;
    switch (t) {
      case Type::Q4_0:  // d, 16 bytes of nibbles
        block_sym(x, 8, d, q);
        store_half(y, d);
        pack_nibbles(q, y + 2);
        break;
      case Type::Q4_1:  // d, m, nibbles
        block_affine(x, 15, true, d, m, q);
        store_half(y, d);
        store_half(y + 2, m);
        pack_nibbles(q, y + 4);
        break;
      case Type::Q5_0:  // d, high bits, nibbles
        block_sym(x, 16, d, q);
        store_half(y, d);
        pack_high_bits(q, y + 2);
        pack_nibbles(q, y + 6);
        break;
      default:  // Q5_1: d, m, high bits, nibbles
        block_affine(x, 31, false, d, m, q);
        store_half(y, d);
        store_half(y + 2, m);
        pack_high_bits(q, y + 4);
        pack_nibbles(q, y + 8);
        break;
    }
  }
  return true;
}

}  // namespace les
