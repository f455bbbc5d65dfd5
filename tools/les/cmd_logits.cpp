#include <algorithm>
#include <cstdio>
#include <numeric>
#include <vector>

#include "args.h"
#include "commands.h"
#include "common.h"
#include "les/model/context.h"
#include "les/util/error.h"
#include "les/util/hash.h"

namespace les::cli {

int cmd_logits(int argc, char** argv) {
  Args a("logits", "evaluate a token sequence and print per-position argmax and top-K logits as JSON",
         {{{"-m", "--model"}, true, "model file (GGUF)", "FILE"},
          {{"--tokens"}, true, "comma-separated token ids", "IDS"},
          {{"--top"}, true, "top-K pairs per position (default 10)", "K"},
          {{"--out"}, true, "also write all logits as float32 [position][n_vocab]", "FILE"},
          {{"-t", "--threads"}, true, "threads (default 1)", "N"},
          {{"-b", "--batch-size"}, true, "tokens per forward pass (default 256)", "N"},
          {{"--isa"}, true, "kernel ISA: scalar, avx2, avxvnni, avx512 (default: best available)", "ISA"}});
  a.parse(argc, argv);
  if (a.help_requested()) { std::fputs(a.usage().c_str(), stdout); return 0; }
  apply_isa_flag(a);
  const std::vector<int32_t> tokens = parse_token_list(a.required("--tokens"));
  const int top = static_cast<int>(a.i64("--top", 10));
  if (top < 0) throw Error("--top must be >= 0");

  auto model = Model::load(a.required("--model"));
  ContextParams cp;
  cp.n_threads = static_cast<int>(a.i64("--threads", 1));
  cp.n_batch = static_cast<int>(a.i64("--batch-size", 256));
  cp.n_ctx = std::max<int>(static_cast<int>(tokens.size()), std::min(model->config().n_ctx_train, 4096));
  Context ctx(*model, cp);
  ctx.eval(tokens, true);

  const int nv = model->config().n_vocab;
  const int kk = std::min(top, nv);
  std::printf("{\"n_vocab\": %d, \"n_tokens\": %zu, \"positions\": [\n", nv, tokens.size());
  std::vector<int> idx(static_cast<size_t>(nv));
  for (int i = 0; i < ctx.n_outputs(); ++i) {
    const float* lg = ctx.logits(i);
    std::iota(idx.begin(), idx.end(), 0);
    std::partial_sort(idx.begin(), idx.begin() + kk, idx.end(), [&](int x, int y) {
      return lg[x] > lg[y] || (lg[x] == lg[y] && x < y);
    });
    const int am = static_cast<int>(std::max_element(lg, lg + nv) - lg);
    std::printf("  {\"argmax\": %d, \"top\": [", am);
    for (int j = 0; j < kk; ++j) std::printf("%s[%d, %.6f]", j ? ", " : "", idx[static_cast<size_t>(j)], lg[idx[static_cast<size_t>(j)]]);
    std::printf("]}%s\n", i + 1 < ctx.n_outputs() ? "," : "");
  }
  const float* last = ctx.last_logits();
  std::printf("], \"last_logits_hash\": \"%s\"}\n", hex64(hash64(last, sizeof(float) * static_cast<size_t>(nv))).c_str());

  if (a.has("--out")) {
    std::vector<float> all(static_cast<size_t>(ctx.n_outputs()) * static_cast<size_t>(nv));
    for (int i = 0; i < ctx.n_outputs(); ++i) std::copy(ctx.logits(i), ctx.logits(i) + nv, all.begin() + static_cast<long>(i) * nv);
    write_file_atomic(a.str("--out"), all.data(), all.size() * sizeof(float));
  }
  return 0;
}

}  // namespace les::cli
