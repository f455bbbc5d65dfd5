// Random tensor rows generated directly in their storage type: quantized blocks are built from
// random codes and fixed scales (no float quantization pass), so that a 17 GB model is produced at
// memory speed. Every row is a pure function of (key, row index): the result never depends on how
// rows are split among threads.
#pragma once

#include <cstdint>
#include <string_view>

#include "les/quant/types.h"

namespace les::synth {

// splitmix64 finaliser: a bijective 64-bit mix.
inline uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Key of a tensor: a function of the seed and the tensor name only.
uint64_t tensor_key(uint64_t seed, std::string_view name);

// wyrand: a small, fast generator with good statistical quality (passes BigCrush/PractRand).
struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(mix64(seed)) {}
  Rng(uint64_t key, uint64_t stream) : s(mix64(key ^ mix64(stream))) {}
  uint64_t next() {
    s += 0xa0761d6478bd642full;
    const __uint128_t t = static_cast<__uint128_t>(s) * (s ^ 0xe7037ed1a0b428dbull);
    return static_cast<uint64_t>(t >> 64) ^ static_cast<uint64_t>(t);
  }
  double uniform() { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0); }  // [0, 1)
  // Approximately standard normal: sum of four 16-bit uniforms, scaled (Irwin-Hall, |x| <= 3.46).
  float normal() {
    const uint64_t r = next();
    const uint32_t s4 = static_cast<uint32_t>(r & 0xffff) + static_cast<uint32_t>((r >> 16) & 0xffff) +
                        static_cast<uint32_t>((r >> 32) & 0xffff) + static_cast<uint32_t>(r >> 48);
    return (static_cast<float>(s4) * (1.0f / 65536.0f) - 2.0f) * 1.7320508f;
  }
};

// Fills row `row` (n elements, n a multiple of the type's block size) of type t at dst with
// i.i.d. values symmetric about 0 with standard deviation sigma (exactly, up to the F16 rounding
// of the block scale): quantized types get uniform codes over a symmetric range, float types
// approximately normal values. sigma may be 0 (all zeros).
void fill_random_row(Type t, float sigma, uint64_t key, int64_t row, int64_t n, void* dst);

// n approximately normal floats of standard deviation sigma for row `row` of a tensor.
void fill_normal_row(float sigma, uint64_t key, int64_t row, int64_t n, float* dst);

}  // namespace les::synth
