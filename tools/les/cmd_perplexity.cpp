#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "args.h"
#include "commands.h"
#include "common.h"
#include "les/model/kv_cache.h"
#include "les/quality/measure.h"
#include "les/quality/vocab_check.h"
#include "les/tokenizer/tokenizer.h"
#include "les/util/error.h"

namespace les::cli {

namespace {

using namespace les::quality;
using Clock = std::chrono::steady_clock;

std::string read_text_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error(strfmt("cannot read text file '%s'", path.c_str()));
  std::stringstream ss;
  ss << f.rdbuf();
  if (f.bad()) throw Error(strfmt("error reading text file '%s'", path.c_str()));
  std::string s = ss.str();
  if (s.empty()) throw Error(strfmt("text file '%s' is empty", path.c_str()));
  return s;
}

std::string format_duration(double s) {
  if (!(s >= 0) || !std::isfinite(s)) return "?";
  const long t = std::lround(s);
  if (t >= 3600) return strfmt("%ldh%02ldm", t / 3600, (t % 3600) / 60);
  if (t >= 60) return strfmt("%ldm%02lds", t / 60, t % 60);
  return strfmt("%lds", t);
}

// Progress on stderr: redrawn in place on a terminal, a line per ~10% otherwise.
class ProgressLine {
 public:
  ProgressLine() : tty_(isatty(STDERR_FILENO) != 0), start_(Clock::now()) {}
  void operator()(const MeasureStatus& s) {
    const double secs = std::chrono::duration<double>(Clock::now() - start_).count();
    const double eta = s.windows_done ? secs / s.windows_done * (s.windows_total - s.windows_done) : 0;
    std::string line = strfmt("[%d/%d windows] ppl %.4f", s.windows_done, s.windows_total, s.ppl);
    if (s.mean_kld >= 0) line += strfmt("  mean KLD %.6f", s.mean_kld);
    line += strfmt("  %.2f s/window  ETA %s", s.windows_done ? secs / s.windows_done : 0.0, format_duration(eta).c_str());
    const bool last = s.windows_done == s.windows_total;
    if (tty_) {
      std::fprintf(stderr, "\r%s   %s", line.c_str(), last ? "\n" : "");
    } else {
      const int step = std::max(1, s.windows_total / 10);
      if (last || s.windows_done % step == 0) std::fprintf(stderr, "%s\n", line.c_str());
    }
    std::fflush(stderr);
  }
  double seconds() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

 private:
  bool tty_;
  Clock::time_point start_;
};

nlohmann::json ppl_json(const PerplexitySummary& p) {
  return {{"ppl", p.ppl}, {"ppl_se", p.ppl_se}, {"mean_nll", p.mean_nll}, {"mean_nll_se", p.mean_nll_se},
          {"top1_accuracy", p.top1}, {"predictions", p.count}};
}

void print_ppl(const char* label, const PerplexitySummary& p) {
  std::printf("%s%sPPL = %.4f +/- %.4f   mean NLL %.5f +/- %.5f nats/token   top-1 accuracy %.4f   (%zu predictions)\n",
              label, *label ? " " : "", p.ppl, p.ppl_se, p.mean_nll, p.mean_nll_se, p.top1, p.count);
}

void print_kld(const KldResult& r) {
  print_ppl("test", r.test);
  print_ppl("base", r.base);
  std::printf("ln(PPL(test)/PPL(base)) = %.6f +/- %.6f\n\n", r.ln_ppl_ratio, r.ln_ppl_ratio_se);
  const KldSummary& k = r.kld;
  std::printf("KL divergence KL(base || test), nats/token, %zu tokens\n", k.count);
  std::printf("  mean    %.6f +/- %.6f\n", k.mean, k.mean_se);
  std::printf("  median  %.6f\n  p90     %.6f\n  p95     %.6f\n  p99     %.6f\n  p99.9   %.6f\n  max     %.6f\n", k.median,
              k.p90, k.p95, k.p99, k.p999, k.max);
  std::printf("same top-1 token (llama.cpp's \"same top p\"): %.3f +/- %.3f %%\n", 100 * k.same_top1,
              100 * k.same_top1_se);
}

nlohmann::json kld_json(const KldResult& r) {
  const KldSummary& k = r.kld;
  return {{"test", ppl_json(r.test)},
          {"base", ppl_json(r.base)},
          {"ln_ppl_ratio", r.ln_ppl_ratio},
          {"ln_ppl_ratio_se", r.ln_ppl_ratio_se},
          {"kld",
           {{"mean", k.mean}, {"mean_se", k.mean_se}, {"min", k.min}, {"median", k.median}, {"p90", k.p90},
            {"p95", k.p95}, {"p99", k.p99}, {"p99_9", k.p999}, {"max", k.max}, {"count", k.count}}},
          {"same_top1", k.same_top1},
          {"same_top1_se", k.same_top1_se}};
}

// The first index where the text's tokens and the file's differ, or -1.
int64_t first_difference(const std::vector<int32_t>& text, std::span<const int32_t> file) {
  for (size_t i = 0; i < file.size(); ++i) {
    if (i >= text.size() || text[i] != file[i]) return static_cast<int64_t>(i);
  }
  return -1;
}

}  // namespace

int cmd_perplexity(int argc, char** argv) {
  Args a("perplexity",
         "perplexity of a model on a text, and KL divergence against a base model:\n"
         "  les perplexity -m MODEL -f TEXT [-c 512] [--kl-base BASE.gguf | --save-logits F | --kl-logits F]\n"
         "  The text is cut into consecutive windows of -c tokens (a partial last one is dropped); each is\n"
         "  evaluated from an empty context, and tokens --first..c-1 of each are scored (the logits at\n"
         "  position j predict token j+1).",
         {{{"-m", "--model"}, true, "model file (GGUF): the model measured", "FILE"},
          {{"-f", "--file"}, true, "text file, tokenized whole (BOS only where the vocabulary's add_bos says so)",
           "TEXT"},
          {{"-c", "--ctx-size"}, true, "tokens per window (default 512; with --kl-logits: the file's)", "N"},
          {{"-t", "--threads"}, true, "threads (default 2)", "N"},
          {{"--chunks"}, true, "evaluate at most N windows (default: all)", "N"},
          {{"--first"}, true, "first scored token of a window (default 1; llama.cpp's log-probability files "
                              "hold c/2+1..c-1, so --save-logits and --kl-logits use c/2+1)", "N"},
          {{"--kl-base"}, true, "base model: KL(base || model) per token, both run on the same windows", "FILE"},
          {{"--save-logits"}, true, "write the model's log-probabilities in llama-perplexity's "
                                    "--kl-divergence-base format (a base for --kl-logits)", "FILE"},
          {{"--kl-logits"}, true, "KL divergence against a base log-probability file (from --save-logits or "
                                  "llama-perplexity --kl-divergence-base); -f optional, checked against it", "FILE"},
          {{"-ctk", "--cache-type-k"}, true, "KV cache type of K: f32 (default: attention as llama.cpp computes it "
                                              "without flash attention), f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, "
                                              "iq4_nl (as its flash attention does)", "TYPE"},
          {{"-ctv", "--cache-type-v"}, true, "KV cache type of V (default f32)", "TYPE"},
          {{"--json"}, true, "also write the results as JSON", "FILE"},
          {{"--isa"}, true, "kernel ISA: scalar, avx2, avxvnni, avx512 (default: best available)", "ISA"}});
  a.parse(argc, argv);
  if (a.help_requested()) { std::fputs(a.usage().c_str(), stdout); return 0; }
  apply_isa_flag(a);

  const int modes = a.has("--kl-base") + a.has("--save-logits") + a.has("--kl-logits");
  if (modes > 1) throw Error("use only one of --kl-base, --save-logits and --kl-logits");
  const bool file_mode = a.has("--save-logits") || a.has("--kl-logits");
  if (!a.has("--file") && !a.has("--kl-logits")) throw Error("give the text with -f TEXT");

  // Open what can fail fast before loading models.
  std::optional<LogprobFile> base_file;
  if (a.has("--kl-logits")) base_file = LogprobFile::open(a.str("--kl-logits"));

  WindowOptions opt;
  opt.n_threads = static_cast<int>(a.i64("--threads", 2));
  opt.type_k = parse_kv_type(a.str("--cache-type-k", "f32"), "--cache-type-k");
  opt.type_v = parse_kv_type(a.str("--cache-type-v", "f32"), "--cache-type-v");
  opt.n_ctx = static_cast<int>(a.i64("--ctx-size", base_file ? base_file->n_ctx() : 512));
  if (opt.n_ctx < 3) throw Error(strfmt("-c must be >= 3, got %d", opt.n_ctx));
  if (base_file && opt.n_ctx != base_file->n_ctx()) {
    throw Error(strfmt("-c %d: %s was made with windows of %d tokens", opt.n_ctx, base_file->path().c_str(),
                       base_file->n_ctx()));
  }
  const int file_first = logprob_first(opt.n_ctx);
  opt.first = static_cast<int>(a.i64("--first", file_mode ? file_first : 1));
  if (file_mode && opt.first != file_first) {
    throw Error(strfmt("--first %d: log-probability files (llama-perplexity's format) score tokens %d..%d of each "
                       "window of %d, so --first must be %d (or left out)",
                       opt.first, file_first, opt.n_ctx - 1, opt.n_ctx, file_first));
  }
  const int64_t chunks = a.i64("--chunks", 0);
  if (chunks < 0 || chunks > INT32_MAX) throw Error(strfmt("--chunks must be >= 0, got %lld", static_cast<long long>(chunks)));
  opt.max_windows = static_cast<int>(chunks);

  const std::string model_path = a.required("--model");
  auto model = Model::load(model_path);
  const Tokenizer tok(vocab_from_gguf(model->gguf()));
  if (tok.add_bos()) opt.bos = tok.bos();

  std::vector<int32_t> tokens;
  std::string text_path;
  if (a.has("--file")) {
    text_path = a.str("--file");
    tokens = tok.encode(read_text_file(text_path), /*add_special=*/true, /*parse_special=*/false);
    if (tokens.size() < static_cast<size_t>(opt.n_ctx)) {
      throw Error(strfmt("'%s' tokenizes to %zu tokens, fewer than one window of %d (use a longer text or a smaller -c)",
                         text_path.c_str(), tokens.size(), opt.n_ctx));
    }
  }

  nlohmann::json js = {{"model", model_path}, {"n_ctx", opt.n_ctx}, {"first", opt.first},
                       {"cache_type_k", kv_type_name(opt.type_k)}, {"cache_type_v", kv_type_name(opt.type_v)}};
  if (!text_path.empty()) {
    js["text"] = text_path;
    js["text_tokens"] = tokens.size();
  }
  ProgressLine progress;
  auto on_progress = [&](const MeasureStatus& s) { progress(s); };

  if (base_file) {
    if (base_file->n_vocab() != model->config().n_vocab) {
      throw Error(strfmt("%s was made with a vocabulary of %d tokens, the model %s has %d", base_file->path().c_str(),
                         base_file->n_vocab(), model_path.c_str(), model->config().n_vocab));
    }
    if (!tokens.empty()) {
      const int64_t d = first_difference(tokens, base_file->tokens());
      if (d >= 0) {
        throw Error(strfmt("%s was made for other tokens than '%s': %s", base_file->path().c_str(), text_path.c_str(),
                           static_cast<size_t>(d) >= tokens.size()
                               ? strfmt("the text has %zu tokens, the file %zu", tokens.size(), base_file->tokens().size()).c_str()
                               : strfmt("token %lld is %d in the file, %d in the text", static_cast<long long>(d),
                                        base_file->tokens()[static_cast<size_t>(d)], tokens[static_cast<size_t>(d)]).c_str()));
      }
    }
    const int n_win = opt.max_windows > 0 ? std::min(opt.max_windows, base_file->n_chunk()) : base_file->n_chunk();
    std::fprintf(stderr, "les perplexity: %s vs base log-probabilities %s: %d windows of %d, scoring tokens %d..%d\n",
                 model_path.c_str(), base_file->path().c_str(), n_win, opt.n_ctx, opt.first, opt.n_ctx - 1);
    const KldResult r = measure_kld(*base_file, *model, opt, on_progress);
    print_kld(r);
    js["base_logits"] = base_file->path();
    js["windows"] = r.n_windows;
    js.update(kld_json(r));
  } else if (a.has("--kl-base")) {
    const std::string base_path = a.str("--kl-base");
    auto base = Model::load(base_path);
    check_same_vocabulary(*base, *model);
    std::fprintf(stderr, "les perplexity: %s vs base %s on %s: %zu tokens, %d windows of %d, scoring tokens %d..%d\n",
                 model_path.c_str(), base_path.c_str(), text_path.c_str(), tokens.size(),
                 count_windows(tokens.size(), opt), opt.n_ctx, opt.first, opt.n_ctx - 1);
    const KldResult r = measure_kld(*base, *model, tokens, opt, on_progress);
    print_kld(r);
    js["base_model"] = base_path;
    js["windows"] = r.n_windows;
    js.update(kld_json(r));
  } else {
    const int n_win = count_windows(tokens.size(), opt);
    std::unique_ptr<LogprobFileWriter> save;
    if (a.has("--save-logits")) {
      save = std::make_unique<LogprobFileWriter>(
          a.str("--save-logits"), opt.n_ctx, model->config().n_vocab, n_win,
          std::span<const int32_t>(tokens).first(static_cast<size_t>(n_win) * static_cast<size_t>(opt.n_ctx)));
    }
    std::fprintf(stderr, "les perplexity: %s on %s: %zu tokens, %d windows of %d, scoring tokens %d..%d\n",
                 model_path.c_str(), text_path.c_str(), tokens.size(), n_win, opt.n_ctx, opt.first, opt.n_ctx - 1);
    const PerplexityResult r = measure_perplexity(*model, tokens, opt, save.get(), on_progress);
    if (save) {
      save->finish();
      js["saved_logits"] = a.str("--save-logits");
    }
    print_ppl("", r.ppl);
    js["windows"] = r.n_windows;
    js.update(ppl_json(r.ppl));
  }
  js["seconds"] = progress.seconds();
  if (a.has("--json")) {
    const std::string s = js.dump(2) + "\n";
    write_file_atomic(a.str("--json"), s.data(), s.size());
  }
  return 0;
}

}  // namespace les::cli
