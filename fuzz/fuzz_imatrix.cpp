// Fuzz target: the importance-matrix reader (llama.cpp's GGUF form and legacy .dat form) on arbitrary
// bytes. Contract under test: any input parses or throws les::Error; nothing else escapes, nothing
// reads out of bounds, and a parsed matrix is self-consistent (sizes, finite values, counts >= 0) so
// that column_weights() is safe for every matrix of every entry.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "les/imatrix/imatrix.h"
#include "les/util/error.h"

namespace {

void require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz_imatrix: postcondition failed: %s\n", what);
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  les::ImportanceMatrix m;
  try {
    m = les::parse_imatrix(data, size, "fuzz");
  } catch (const les::Error&) {
    return 0;
  }
  require(!m.entries.empty(), "at least one entry");
  require(m.chunk_count >= 0 && m.chunk_size >= 0, "chunk count and size");
  std::vector<float> scratch;
  for (const auto& [name, e] : m.entries) {
    require(e.n_in >= 1 && e.n_mat >= 1, "shape");
    require(e.in_sum2.size() == static_cast<size_t>(e.n_in * e.n_mat), "in_sum2 size");
    require(e.counts.size() == static_cast<size_t>(e.n_mat), "counts size");
    for (float c : e.counts) require(std::isfinite(c) && c >= 0, "count finite and >= 0");
    for (float v : e.in_sum2) require(std::isfinite(v), "sum finite");
    for (int64_t k = 0; k < e.n_mat && k < 4; ++k) {
      const float* w = m.column_weights(name, static_cast<int>(k), scratch);
      require(w == nullptr || scratch.size() == static_cast<size_t>(e.n_in), "column weights size");
    }
  }
  return 0;
}
