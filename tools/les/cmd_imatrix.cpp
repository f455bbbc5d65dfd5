// `les imatrix`: an importance matrix of a model over a text, in llama.cpp's GGUF imatrix form.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>

#include "args.h"
#include "commands.h"
#include "common.h"
#include "les/imatrix/collector.h"
#include "les/imatrix/imatrix.h"
#include "les/model/context.h"
#include "les/sched/budget.h"
#include "les/sched/streaming_experts.h"
#include "les/tokenizer/tokenizer.h"
#include "les/util/error.h"

namespace les::cli {

namespace {

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error(strfmt("cannot read the text file '%s': %s", path.c_str(), std::strerror(errno)));
  std::stringstream ss;
  ss << f.rdbuf();
  if (f.bad()) throw Error(strfmt("cannot read the text file '%s'", path.c_str()));
  std::string s = ss.str();
  if (s.empty()) throw Error(strfmt("the text file '%s' is empty", path.c_str()));
  return s;
}

// Fails now, not after the collection, when the output's directory cannot take a new file.
void check_writable(const std::string& out) {
  struct stat st {};
  if (::stat(out.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    throw Error(strfmt("cannot write the output '%s': it is a directory", out.c_str()));
  }
  const size_t slash = out.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : out.substr(0, slash));
  std::string probe = dir + "/.les-imatrix-XXXXXX";
  const int fd = ::mkstemp(probe.data());
  if (fd < 0) {
    throw Error(strfmt("cannot write the output '%s': cannot create a file in '%s': %s", out.c_str(), dir.c_str(),
                       std::strerror(errno)));
  }
  ::close(fd);
  ::unlink(probe.c_str());
}

// Negative log-likelihood of token `next` under logits [n_vocab] (log-softmax in double).
double nll(const float* logits, int n_vocab, int32_t next) {
  const float mx = *std::max_element(logits, logits + n_vocab);
  double sum = 0;
  for (int i = 0; i < n_vocab; ++i) sum += std::exp(static_cast<double>(logits[i]) - mx);
  return std::log(sum) - (static_cast<double>(logits[next]) - mx);
}

std::string fmt_seconds(double s) {
  if (s >= 3600) return strfmt("%dh%02dm", static_cast<int>(s / 3600), static_cast<int>(std::fmod(s, 3600) / 60));
  if (s >= 60) return strfmt("%dm%02ds", static_cast<int>(s / 60), static_cast<int>(std::fmod(s, 60)));
  return strfmt("%.1fs", s);
}

}  // namespace

int cmd_imatrix(int argc, char** argv) {
  Args a("imatrix",
         "compute an importance matrix (llama.cpp's GGUF imatrix form, for llama-quantize --imatrix):\n"
         "  les imatrix -m MODEL -f TEXT -o FILE [--chunks N] [-c CTX] [-t N] [--in-file FILE ...]",
         {{{"-m", "--model"}, true, "model file (GGUF, original or packed)", "FILE"},
          {{"-f", "--file"}, true, "text to evaluate (tokenized whole, cut into chunks of CTX tokens)", "FILE"},
          {{"-o", "--output"}, true, "output imatrix file (default imatrix.gguf), written atomically", "FILE"},
          {{"--chunks"}, true, "evaluate at most N chunks (default: all)", "N"},
          {{"-c", "--ctx-size"}, true, "tokens per chunk, each chunk from an empty context (default 512)", "N"},
          {{"-b", "--batch-size"}, true, "tokens per forward pass (default: the chunk)", "N"},
          {{"-t", "--threads"}, true, "threads (default 2)", "N"},
          {{"--in-file"}, true, "add an existing imatrix (GGUF or legacy .dat) to the result; repeatable", "FILE"},
          {{"--process-output"}, false, "also collect the LM head (output.weight)"},
          {{"--no-ppl"}, false, "do not compute the perplexity (second half of each chunk)"},
          {{"--parse-special"}, false, "texts of control tokens in the text become those tokens"},
          {{"--mem"}, true, "hard memory budget, e.g. 3G: experts streamed from storage (default: mapped)", "SIZE"},
          {{"--isa"}, true, "kernel ISA: scalar, avx2, avxvnni, avx512 (default: best available)", "ISA"}});
  a.parse(argc, argv);
  if (a.help_requested()) { std::fputs(a.usage().c_str(), stdout); return 0; }
  apply_isa_flag(a);
  const std::string out = a.str("--output", "imatrix.gguf");
  const int ctx_tokens = static_cast<int>(a.i64("--ctx-size", 512));
  const int max_chunks = static_cast<int>(a.i64("--chunks", -1));
  const int n_threads = static_cast<int>(a.i64("--threads", 2));
  const std::vector<std::string> in_files = a.all("--in-file");
  if (ctx_tokens < 2) throw Error("--ctx-size must be >= 2");
  if (n_threads < 1 || n_threads > 256) throw Error("--threads must be in [1, 256]");
  if (a.has("--chunks") && max_chunks < 1) throw Error("--chunks must be >= 1");
  if (!a.has("--file") && in_files.empty()) throw Error("give a text with -f FILE (or --in-file files to combine)");
  check_writable(out);
  const std::string text = a.has("--file") ? read_text(a.str("--file")) : std::string();

  const bool streaming = a.has("--mem");
  auto model = Model::load(a.required("--model"), LoadOptions{.map_experts = !streaming});
  const ModelConfig& cfg = model->config();
  ImatrixCollectOptions co;
  co.process_output = a.has("--process-output");
  ImatrixCollector collector(cfg.n_expert, co);

  std::vector<std::string> datasets;
  for (const std::string& f : in_files) {
    ImportanceMatrix m = read_imatrix(f);
    fit_imatrix_to_model(m, model->gguf());
    check_imatrix_matches(m, model->gguf());
    collector.merge(m, ctx_tokens);
    datasets.insert(datasets.end(), m.datasets.begin(), m.datasets.end());
    std::fprintf(stderr, "les imatrix: added %s (%zu entries, %d chunks)\n", f.c_str(), m.entries.size(),
                 m.chunk_count);
  }

  if (a.has("--file")) {
    const std::string text_path = a.str("--file");
    Tokenizer tok(vocab_from_gguf(model->gguf()));
    const std::vector<int32_t> tokens = tok.encode(text, true, a.has("--parse-special"));
    const std::vector<std::vector<int32_t>> chunks =
        imatrix_chunks(tokens, ctx_tokens, max_chunks, tok.add_bos() ? tok.bos() : -1);
    datasets.push_back(text_path);

    ContextParams cp;
    cp.n_ctx = ctx_tokens;
    cp.n_threads = n_threads;
    cp.n_batch = static_cast<int>(a.i64("--batch-size", ctx_tokens));
    if (cp.n_batch < 1) throw Error("--batch-size must be >= 1");
    std::unique_ptr<StreamingExperts> experts;
    if (streaming) {
      StreamingOptions so;
      const BudgetPlan plan = plan_budget(*model, parse_size(a.str("--mem"), "--mem"), cp.n_ctx, cp.n_batch,
                                          StreamingExperts::layer_slot_bytes_for(*model, so.io_mode));
      so.cache_bytes = plan.cache;
      experts = std::make_unique<StreamingExperts>(*model, so);
      std::fprintf(stderr, "%s\n", plan.describe().c_str());
    }
    Context ctx(*model, cp, experts.get());
    collector.attach(ctx);

    const bool ppl = !a.has("--no-ppl");
    const bool all_logits = ppl || co.process_output;  // the LM head then sees every row, as in llama.cpp
    const bool tty = ::isatty(STDERR_FILENO);
    std::fprintf(stderr, "les imatrix: %zu tokens, %zu chunks of %d tokens, %d threads\n", tokens.size(),
                 chunks.size(), ctx_tokens, n_threads);
    double nll_sum = 0;
    int64_t nll_count = 0;
    const auto t0 = std::chrono::steady_clock::now();
    for (size_t c = 0; c < chunks.size(); ++c) {
      ctx.rollback(0);
      ctx.eval(chunks[c], all_logits);
      if (ppl) {
        for (int i = ctx_tokens / 2; i < ctx_tokens - 1; ++i) {
          nll_sum += nll(ctx.logits(i), cfg.n_vocab, chunks[c][static_cast<size_t>(i + 1)]);
          ++nll_count;
        }
      }
      const double spent = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const double per = spent / static_cast<double>(c + 1);
      std::string line = strfmt("chunk %zu/%zu, %.2f s/chunk, ETA %s", c + 1, chunks.size(), per,
                                fmt_seconds(per * static_cast<double>(chunks.size() - c - 1)).c_str());
      if (ppl) line += strfmt(", ppl %.4f", std::exp(nll_sum / static_cast<double>(nll_count)));
      std::fprintf(stderr, tty ? "\r%s   " : "%s\n", line.c_str());
    }
    if (tty) std::fputc('\n', stderr);
    ctx.set_matmul_observer({});
    if (ppl && nll_count > 0) {
      std::fprintf(stderr, "final estimate: PPL = %.4f over %lld tokens (second half of each chunk)\n",
                   std::exp(nll_sum / static_cast<double>(nll_count)), static_cast<long long>(nll_count));
    }
  }

  const ImportanceMatrix result = collector.result(ctx_tokens, datasets);
  if (result.entries.empty()) throw Error("no importance data collected");
  write_imatrix(result, out);
  std::fprintf(stderr, "les imatrix: wrote %s: %zu entries, %d chunks of %d tokens\n", out.c_str(),
               result.entries.size(), result.chunk_count, result.chunk_size);
  return 0;
}

}  // namespace les::cli
