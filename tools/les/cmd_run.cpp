#include <algorithm>
#include <cstdio>
#include <memory>
#include <fstream>
#include <sstream>

#include "args.h"
#include "commands.h"
#include "common.h"
#include "les/model/context.h"
#include "les/sched/budget.h"
#include "les/sched/stream_report.h"
#include "les/sched/streaming_experts.h"
#include "les/session/generate.h"
#include "les/spec/make_drafter.h"
#include "les/spec/spec_report.h"
#include "les/util/error.h"
#include "les/util/hash.h"

namespace les::cli {

int cmd_run(int argc, char** argv) {
  Args a("run", "generate text: les run -m FILE -p PROMPT [-n N] [-t T] [--temp T] [--seed S]",
         {{{"-m", "--model"}, true, "model file (GGUF)", "FILE"},
          {{"-p", "--prompt"}, true, "prompt text", "TEXT"},
          {{"-f", "--file"}, true, "read the prompt from a file", "FILE"},
          {{"-n", "--n-predict"}, true, "tokens to generate (default 128, -1 = until end)", "N"},
          {{"-t", "--threads"}, true, "threads (default 2)", "N"},
          {{"-c", "--ctx-size"}, true, "context size (default: model's, at most 4096)", "N"},
          {{"-b", "--batch-size"}, true, "prompt tokens per forward pass (default 256)", "N"},
          {{"--temp"}, true, "temperature (default 0.8; 0 = greedy)", "T"},
          {{"--top-k"}, true, "top-k sampling (default 40, 0 = off)", "K"},
          {{"--top-p"}, true, "top-p sampling (default 0.95, 1 = off)", "P"},
          {{"--min-p"}, true, "min-p sampling (default 0.05, 0 = off)", "P"},
          {{"--repeat-penalty"}, true, "repetition penalty (default 1.0 = off)", "X"},
          {{"--repeat-last-n"}, true, "tokens the penalty looks back (default 64)", "N"},
          {{"-s", "--seed"}, true, "random seed (default 42): same seed, same output", "S"},
          {{"--chat"}, false, "wrap the prompt in the ChatML template (qwen-family chat)"},
          {{"--ignore-eos"}, false, "keep generating past end-of-generation tokens"},
          {{"--no-display-prompt"}, false, "do not echo the prompt"},
          {{"--isa"}, true, "kernel ISA: scalar, avx2, avxvnni, avx512 (default: best available)", "ISA"},
          {{"--mem"}, true, "hard memory budget, e.g. 3G: dense weights resident, experts streamed from storage "
                            "through an expert cache (default: whole model mapped in memory)", "SIZE"},
          {{"--schedule"}, true, "expert schedule with --mem: lookahead (default) or ondemand", "S"},
          {{"--io"}, true, "expert reads with --mem: uring (default), pread, naive (buffered + copy)", "MODE"},
          {{"--policy"}, true, "expert cache eviction policy: lru, lfu, lrfu, arc, 2q, s3fifo, tinylfu, lpart, "
                               "each also as NAME+pred (default lrfu+pred)", "NAME"},
          {{"--predict-extra"}, true, "lookahead: prefetch the predicted top k+M experts (default 0)", "M"},
          {{"--no-refine"}, false, "lookahead: do not re-predict the next layer's experts from this layer's output", ""},
          {{"--no-refine-cancel"}, false, "lookahead: keep unstarted prefetches the refined prediction drops", ""},
          {{"--measure-ahead2"}, false, "lookahead: also measure a two-layers-ahead prediction (statistics only)", ""},
          {{"--throttle"}, false, "lookahead: skip guesses whose recent precision is below half the disk's busy fraction", ""},
          {{"--prefetch-ahead2"}, false, "lookahead: also prefetch the two-layers-ahead guess into the disk's idle time (speculative reads; pays when compute and I/O are balanced, costs when the disk is the bottleneck)", ""},
          {{"--prefetch-budget"}, true, "lookahead: prefetch bytes per token at most X times the demand (default 1.5)", "X"},
          {{"--queue-depth"}, true, "reads in flight (default 8)", "N"},
          {{"--prefetch-inflight"}, true, "lookahead: prefetch bytes in flight at most, bounding the wait they add to a miss (default: two experts)", "SIZE"},
          {{"--verify-reads"}, false, "with --mem: check each expert read against its checksum (a model packed by "
                                      "les pack); a mismatch is an error naming the layer and expert"},
          {{"--spec"}, true, "speculative decoding: none (default), draft (a small model, --draft FILE), dspark (a DSpark/dflash "
                             "block drafter reading the target's hidden states, --draft FILE), mtp (the model's own MTP head, qwen35moe), ngram (prompt lookup); lossless: greedy output is identical, sampling keeps the distribution", "KIND"},
          {{"--draft", "-md"}, true, "the draft model (--spec draft) or DSpark drafter (--spec dspark)", "FILE"},
          {{"--draft-max"}, true, "tokens drafted per round at most (default 6)", "N"},
          {{"--draft-min"}, true, "a round drafts at least N tokens or none (default 0)", "N"},
          {{"--draft-p-min"}, true, "cut a draft at the first token whose drafter confidence is below P (default 0)", "P"},
          {{"--spec-fixed"}, false, "always draft --draft-max tokens (default: load-aware depth, chosen each round from "
                                    "measured acceptance and verification cost; 0 when speculation does not pay)"},
          {{"--stats"}, false, "print expert streaming and speculation statistics at the end"},
          {{"--stats-json"}, true, "write expert streaming statistics as JSON", "FILE"}});
  a.parse(argc, argv);
  if (a.help_requested()) { std::fputs(a.usage().c_str(), stdout); return 0; }
  apply_isa_flag(a);

  std::string prompt = a.str("--prompt");
  if (a.has("--file")) {
    std::ifstream f(a.str("--file"), std::ios::binary);
    if (!f) throw Error(strfmt("cannot read prompt file '%s'", a.str("--file").c_str()));
    std::stringstream ss;
    ss << f.rdbuf();
    prompt = ss.str();
  }
  if (!a.has("--prompt") && !a.has("--file")) throw Error("give a prompt with -p TEXT or -f FILE");

  GenerateParams gp;
  gp.n_predict = static_cast<int>(a.i64("--n-predict", 128));
  gp.sampling.temp = static_cast<float>(a.f64("--temp", 0.8));
  gp.sampling.top_k = static_cast<int>(a.i64("--top-k", 40));
  gp.sampling.top_p = static_cast<float>(a.f64("--top-p", 0.95));
  gp.sampling.min_p = static_cast<float>(a.f64("--min-p", 0.05));
  gp.sampling.repeat_penalty = static_cast<float>(a.f64("--repeat-penalty", 1.0));
  gp.sampling.repeat_last_n = static_cast<int>(a.i64("--repeat-last-n", 64));
  gp.sampling.seed = static_cast<uint64_t>(a.i64("--seed", 42));
  gp.stop_at_eog = !a.has("--ignore-eos");
  if (gp.sampling.top_p <= 0 || gp.sampling.top_p > 1) throw Error("--top-p must be in (0, 1]");
  if (gp.sampling.min_p < 0 || gp.sampling.min_p > 1) throw Error("--min-p must be in [0, 1]");
  if (gp.sampling.top_k < 0) throw Error("--top-k must be >= 0");

  const bool streaming = a.has("--mem");
  auto model = Model::load(a.required("--model"), LoadOptions{.map_experts = !streaming});
  Tokenizer tok(vocab_from_gguf(model->gguf()));
  ContextParams cp;
  cp.n_threads = static_cast<int>(a.i64("--threads", 2));
  cp.n_ctx = static_cast<int>(a.i64("--ctx-size", 0));
  cp.n_batch = static_cast<int>(a.i64("--batch-size", 256));
  if (cp.n_threads < 1 || cp.n_threads > 256) throw Error("--threads must be in [1, 256]");
  if (cp.n_ctx < 0) throw Error("--ctx-size must be >= 0");
  if (cp.n_ctx == 0) cp.n_ctx = std::min(model->config().n_ctx_train, 4096);

  DrafterOptions dopt;
  dopt.kind = a.str("--spec", "none");
  dopt.draft_path = a.str("--draft", "");
  dopt.n_threads = cp.n_threads;
  dopt.n_ctx = cp.n_ctx;
  dopt.sampling = gp.sampling;
  std::unique_ptr<Drafter> drafter = make_drafter(dopt, *model);
  if (drafter) {
    gp.drafter = drafter.get();
    gp.depth.k_max = static_cast<int>(a.i64("--draft-max", 6));
    gp.depth.k_min = static_cast<int>(a.i64("--draft-min", 0));
    gp.depth.adaptive = !a.has("--spec-fixed");
    gp.draft_p_min = static_cast<float>(a.f64("--draft-p-min", 0.0));
    if (gp.depth.k_max < 1 || gp.depth.k_max > 64) throw Error("--draft-max must be in [1, 64]");
    if (gp.depth.k_min < 0 || gp.depth.k_min > gp.depth.k_max) throw Error("--draft-min must be in [0, --draft-max]");
    if (gp.draft_p_min < 0 || gp.draft_p_min > 1) throw Error("--draft-p-min must be in [0, 1]");
  } else {
    for (const char* f : {"--draft", "--draft-max", "--draft-min", "--draft-p-min", "--spec-fixed"}) {
      if (a.has(f)) throw Error(strfmt("%s needs --spec", f));
    }
  }

  if (a.has("--stats") && !streaming && !drafter) throw Error("--stats needs --mem (expert streaming) or --spec");

  std::unique_ptr<StreamingExperts> experts;
  BudgetPlan plan;
  if (streaming) {
    StreamingOptions so;
    so.schedule = parse_schedule(a.str("--schedule", "lookahead"));
    so.io_mode = storage::parse_io_mode(a.str("--io", "uring"));
    so.policy = a.str("--policy", cache::kDefaultPolicy);
    so.predict_extra = static_cast<int>(a.i64("--predict-extra", 0));
    so.prefetch_budget = a.f64("--prefetch-budget", 1.5);
    so.queue_depth = static_cast<int>(a.i64("--queue-depth", 8));
    if (a.has("--prefetch-inflight")) so.prefetch_inflight = parse_size(a.str("--prefetch-inflight"), "--prefetch-inflight");
    so.verify_reads = a.has("--verify-reads");
    so.refine = !a.has("--no-refine");
    so.refine_cancel = !a.has("--no-refine-cancel");
    so.measure_ahead2 = a.has("--measure-ahead2");
    so.prefetch_ahead2 = a.has("--prefetch-ahead2");
    so.throttle = a.has("--throttle");
    if (so.queue_depth < 1 || so.queue_depth > 1024) throw Error("--queue-depth must be in [1, 1024]");
    if (so.predict_extra < 0) throw Error("--predict-extra must be >= 0");
    const uint64_t mem = parse_size(a.str("--mem"), "--mem");
    const uint64_t slot = StreamingExperts::slot_bytes_for(*model, so.io_mode);
    plan = plan_budget(*model, mem, cp.n_ctx, cp.n_batch, slot, drafter ? drafter->resident_bytes() : 0);
    so.cache_bytes = plan.cache;
    if (drafter && gp.depth.adaptive) {
      // The drafter's share of the cache is withheld (never touched) rather than missing: when
      // the depth controller gives speculation up, the drafter is freed and the slots go in use.
      so.cache_bytes = plan_budget(*model, mem, cp.n_ctx, cp.n_batch, slot, 0).cache;
      so.withheld_bytes = so.cache_bytes - plan.cache;
    }
    experts = std::make_unique<StreamingExperts>(*model, so);
    if (so.withheld_bytes > 0) {
      StreamingExperts* ex = experts.get();
      gp.on_drafter_released = [ex](uint64_t) { ex->release_withheld(); };
      gp.drafter_cache_share = ex->withheld_share();
    }
    std::fprintf(stderr, "%s\n", plan.describe().c_str());
  } else {
    for (const char* f : {"--schedule", "--io", "--policy", "--predict-extra", "--prefetch-budget", "--queue-depth",
                          "--prefetch-inflight", "--no-refine", "--no-refine-cancel", "--measure-ahead2", "--prefetch-ahead2", "--throttle", "--stats-json", "--verify-reads"}) {
      if (a.has(f)) throw Error(strfmt("%s needs --mem (expert streaming)", f));
    }
  }
  Context ctx(*model, cp, experts.get());

  std::string text = prompt;
  if (a.has("--chat")) text = apply_chatml({{"user", prompt}}, true);
  const std::vector<int32_t> ids = tok.encode(text, true, a.has("--chat"));
  if (!a.has("--no-display-prompt")) {
    std::fputs(prompt.c_str(), stdout);
    std::fflush(stdout);
  }
  uint64_t bytes_at_first = 0;
  bool first = true;
  auto bytes_read = [&] {
    if (!experts) return uint64_t{0};
    const LayerStreamStats t = experts->stats().total();
    return t.bytes_demand + t.bytes_prefetch;
  };
  const GenerateStats st = generate(ctx, tok, ids, gp, [&](int32_t, const std::string& piece) {
    if (first) {
      bytes_at_first = bytes_read();
      first = false;
    }
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
    return true;
  });
  std::fputc('\n', stdout);
  std::fprintf(stderr,
               "\nprompt: %d tokens in %.3f s (%.1f tok/s) | decode: %d tokens, %.1f tok/s | stop: %s\n"
               "final logits hash: %s\n",
               st.n_prompt, st.prompt_seconds, st.prompt_tps(), st.n_generated, st.gen_tps(), st.stop_reason.c_str(),
               hex64(st.final_logits_hash).c_str());
  if (drafter && a.has("--stats")) {
    std::fprintf(stderr, "%s", format_spec_stats(st, bytes_read() - bytes_at_first).c_str());
  }
  if (experts) {
    RunSummary rs;
    rs.decode_tps = st.gen_tps();
    rs.prompt_tps = st.prompt_tps();
    rs.wall_s = st.prompt_seconds + st.gen_seconds;
    rs.peak_rss = peak_rss_bytes();
    rs.budget = plan.total;
    if (a.has("--stats")) std::fprintf(stderr, "\n%s", format_stream_table(experts->stats(), rs).c_str());
    if (a.has("--stats-json")) {
      const std::string js = stream_stats_json(experts->stats(), rs);
      write_file_atomic(a.str("--stats-json"), js.data(), js.size());
    }
  }
  return 0;
}

}  // namespace les::cli
