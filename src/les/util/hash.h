// Content hashes: xxh3-64 of byte ranges (logit fingerprints, packed-expert checksums).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace les {

uint64_t hash64(const void* data, size_t n, uint64_t seed = 0);
// 16 lowercase hex digits.
std::string hex64(uint64_t h);

}  // namespace les
