// Collects an importance matrix from a Context's forward passes, as llama-imatrix does: for each
// weight matrix the sum of squares of every input column over the rows that entered its products,
// and the number of those rows. A routed expert counts the (token, slot) rows routed to it; a dense
// matrix counts its rows, except products of fewer than min_dense_rows rows (llama.cpp skips them:
// they are token generation, not evaluation); the LM head only with process_output ("output.weight",
// never a tied token_embd.weight); tensors outside blocks ("blk.") never.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "les/imatrix/imatrix.h"
#include "les/model/context.h"

namespace les {

struct ImatrixCollectOptions {
  bool process_output = false;   // also collect output.weight (llama-imatrix --process-output)
  int64_t min_dense_rows = 16;   // llama-imatrix's minimum batch for non-expert products
};

class ImatrixCollector {
 public:
  // n_expert: the routed experts per layer of the model (the matrix count of its expert stacks).
  explicit ImatrixCollector(int n_expert, ImatrixCollectOptions opt = {});

  // Makes this collector ctx's matmul observer (ctx.set_matmul_observer({}) detaches it). The
  // collector must outlive the attachment.
  void attach(Context& ctx);

  // One product's input rows x [n_rows][n_in] (the MatmulInputObserver contract). Throws les::Error
  // for a tensor seen before with another width, an expert index out of range, or a non-finite sum.
  void add(const std::string& tensor, int expert, const float* x, int64_t n_rows, int64_t n_in);

  // Adds a matrix read from a file (llama-imatrix --in-file). A legacy-form matrix stores means times
  // calls: its sums and counts are scaled by chunk_size (the tokens per chunk of this collection), as
  // llama.cpp does. Throws les::Error when an entry's shape differs from what was collected.
  void merge(const ImportanceMatrix& m, int chunk_size);

  // The matrix so far. chunk_count is the largest count divided by chunk_size (llama.cpp's rule:
  // the number of chunks the dense products saw); chunk_size and datasets are recorded as given.
  ImportanceMatrix result(int chunk_size, std::vector<std::string> datasets) const;

  bool empty() const { return acc_.empty(); }

 private:
  struct Accum {
    int64_t n_in = 0, n_mat = 0;
    std::vector<double> sum2;   // [n_mat][n_in]
    std::vector<int64_t> count; // [n_mat]
  };
  Accum& entry(const std::string& tensor, int64_t n_in, int64_t n_mat);

  int n_expert_;
  ImatrixCollectOptions opt_;
  std::map<std::string, Accum> acc_;
};

// llama-imatrix's evaluation chunks: the first n_chunks (all when < 0) consecutive windows of
// chunk_tokens tokens of the whole text's tokens (a partial last window is dropped), each to be
// evaluated from an empty context; bos >= 0 replaces each window's first token (a vocabulary that
// adds BOS). Throws les::Error when the tokens do not fill one window.
std::vector<std::vector<int32_t>> imatrix_chunks(const std::vector<int32_t>& tokens, int chunk_tokens, int n_chunks,
                                                 int32_t bos);

}  // namespace les
