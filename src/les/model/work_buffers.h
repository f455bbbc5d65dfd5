// Small helpers shared by the forward-pass files: index conversion and grow-only work buffers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace les {

// A non-negative int64 count or index as size_t.
inline size_t sz(int64_t n) { return static_cast<size_t>(n); }

// Grows v to at least n elements (never shrinks: buffers are reused across calls).
template <class T>
void ensure(std::vector<T>& v, size_t n) {
  if (v.size() < n) v.resize(n);
}

}  // namespace les
