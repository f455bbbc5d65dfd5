#include "les/imatrix/collector.h"

#include <algorithm>
#include <cmath>

#include "les/util/error.h"

namespace les {

ImatrixCollector::ImatrixCollector(int n_expert, ImatrixCollectOptions opt) : n_expert_(n_expert), opt_(opt) {
  LES_ASSERT(n_expert >= 1);
}

void ImatrixCollector::attach(Context& ctx) {
  ctx.set_matmul_observer([this](const std::string& tensor, int expert, const float* x, int64_t n_rows,
                                 int64_t n_in) { add(tensor, expert, x, n_rows, n_in); });
}

ImatrixCollector::Accum& ImatrixCollector::entry(const std::string& tensor, int64_t n_in, int64_t n_mat) {
  Accum& a = acc_[tensor];
  if (a.n_mat == 0) {
    a.n_in = n_in;
    a.n_mat = n_mat;
    a.sum2.assign(static_cast<size_t>(n_in * n_mat), 0.0);
    a.count.assign(static_cast<size_t>(n_mat), 0);
  } else if (a.n_in != n_in || a.n_mat != n_mat) {
    throw Error(strfmt("imatrix: tensor '%s' seen as %lld matrices of %lld columns, now %lld of %lld", tensor.c_str(),
                       static_cast<long long>(a.n_mat), static_cast<long long>(a.n_in),
                       static_cast<long long>(n_mat), static_cast<long long>(n_in)));
  }
  return a;
}

void ImatrixCollector::add(const std::string& tensor, int expert, const float* x, int64_t n_rows, int64_t n_in) {
  if (n_rows <= 0) return;
  if (tensor.compare(0, 4, "blk.") != 0 && !(opt_.process_output && tensor == "output.weight")) return;
  if (expert < 0 && n_rows < opt_.min_dense_rows) return;
  if (expert >= n_expert_) {
    throw Error(strfmt("imatrix: expert %d of '%s' is out of range [0, %d)", expert, tensor.c_str(), n_expert_));
  }
  Accum& a = entry(tensor, n_in, expert < 0 ? 1 : n_expert_);
  const size_t mat = expert < 0 ? 0 : static_cast<size_t>(expert);
  double* acc = a.sum2.data() + mat * static_cast<size_t>(n_in);
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* row = x + r * n_in;
    for (int64_t j = 0; j < n_in; ++j) acc[j] += static_cast<double>(row[j]) * row[j];
  }
  a.count[mat] += n_rows;
  for (int64_t j = 0; j < n_in; ++j) {
    if (!std::isfinite(acc[j])) {
      throw Error(strfmt("imatrix: non-finite activations entering '%s'%s (column %lld)", tensor.c_str(),
                         expert < 0 ? "" : strfmt(" expert %d", expert).c_str(), static_cast<long long>(j)));
    }
  }
}

void ImatrixCollector::merge(const ImportanceMatrix& m, int chunk_size) {
  LES_ASSERT(chunk_size >= 1);
  const double scale = m.legacy ? chunk_size : 1.0;
  for (const auto& [name, e] : m.entries) {
    Accum& a = entry(name, e.n_in, e.n_mat);
    for (size_t i = 0; i < a.sum2.size(); ++i) a.sum2[i] += static_cast<double>(e.in_sum2[i]) * scale;
    for (size_t i = 0; i < a.count.size(); ++i) a.count[i] += std::llround(static_cast<double>(e.counts[i]) * scale);
  }
}

ImportanceMatrix ImatrixCollector::result(int chunk_size, std::vector<std::string> datasets) const {
  ImportanceMatrix m;
  m.datasets = std::move(datasets);
  m.chunk_size = chunk_size;
  int64_t max_count = 0;
  for (const auto& [name, a] : acc_) {
    ImatrixEntry e;
    e.n_in = a.n_in;
    e.n_mat = a.n_mat;
    e.in_sum2.assign(a.sum2.begin(), a.sum2.end());
    e.counts.assign(a.count.begin(), a.count.end());
    for (int64_t c : a.count) max_count = std::max(max_count, c);
    m.entries.emplace(name, std::move(e));
  }
  m.chunk_count = chunk_size > 0 ? static_cast<int>(max_count / chunk_size) : 0;
  return m;
}

std::vector<std::vector<int32_t>> imatrix_chunks(const std::vector<int32_t>& tokens, int chunk_tokens, int n_chunks,
                                                 int32_t bos) {
  if (chunk_tokens < 1) throw Error(strfmt("chunk size %d must be >= 1", chunk_tokens));
  const size_t n = static_cast<size_t>(chunk_tokens);
  if (tokens.size() < n) {
    throw Error(strfmt("the text has %zu tokens, fewer than one chunk of %d (use a longer text or a smaller -c)",
                       tokens.size(), chunk_tokens));
  }
  size_t count = tokens.size() / n;
  if (n_chunks >= 0) count = std::min(count, static_cast<size_t>(n_chunks));
  std::vector<std::vector<int32_t>> chunks;
  for (size_t c = 0; c < count; ++c) {
    chunks.emplace_back(tokens.begin() + static_cast<std::ptrdiff_t>(c * n),
                        tokens.begin() + static_cast<std::ptrdiff_t>((c + 1) * n));
    if (bos >= 0) chunks.back()[0] = bos;
  }
  return chunks;
}

}  // namespace les
