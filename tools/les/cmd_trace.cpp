#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "args.h"
#include "commands.h"
#include "common.h"
#include "engine_flags.h"
#include "les/engine/engine.h"
#include "les/trace/routing_recorder.h"
#include "les/util/error.h"

namespace les::cli {

// les trace: a model's routing over a text, in windows that each start from an empty context (as
// the perplexity protocol evaluates them), written as .npy files (trace/routing_recorder.h) that
// bench_cache_policy and the cache replays read.
int cmd_trace(int argc, char** argv) {
  Args a("trace",
         "record a model's routing over a text: les trace -m FILE -f TEXT -o PREFIX [--probs] [-c N] [--windows N]\n"
         "  writes PREFIX.routing-experts.npy, .routing-weights.npy, .routing-tokens.npy, .sequence-starts.npy\n"
         "  (and .routing-probs.npy with --probs); each window of -c tokens is one sequence from an empty context",
         with_flags({{{"-f", "--file"}, true, "the text", "FILE"},
                     {{"-p", "--prompt"}, true, "the text, given inline", "TEXT"},
                     {{"-o", "--output"}, true, "output prefix", "PREFIX"},
                     {{"--probs"}, false, "also write the router's softmax over every expert (f16 [T][L][E])"},
                     {{"--windows"}, true, "windows to evaluate at most (default: all whole windows)", "N"}},
                    engine_flag_specs()));
  a.parse(argc, argv);
  if (a.help_requested()) { std::fputs(a.usage().c_str(), stdout); return 0; }
  apply_isa_flag(a);
  std::string text = a.str("--prompt", "");
  if (a.has("--file") == a.has("--prompt")) throw Error("give the text with -f FILE or -p TEXT");
  if (a.has("--file")) {
    std::ifstream f(a.str("--file"), std::ios::binary);
    if (!f) throw Error(strfmt("cannot read text file '%s'", a.str("--file").c_str()));
    std::stringstream ss;
    ss << f.rdbuf();
    text = ss.str();
  }
  const std::string prefix = a.required("--output");
  const int max_windows = static_cast<int>(a.i64("--windows", 0));
  if (max_windows < 0) throw Error("--windows must be >= 0");
  EngineOptions eo = engine_options_from(a);
  if (eo.drafter.kind != "none") throw Error("les trace records plain forward passes: drop --spec");
  Engine engine(std::move(eo));
  print_memory_choice(engine);
  RoutingRecorder rec(engine.model().config(), a.has("--probs"));  // refuses a dense model
  const std::vector<int32_t> ids = engine.tokenize(text, false);
  const int w = engine.n_ctx();
  const int n_win = static_cast<int>(ids.size()) / w;
  if (n_win == 0) {
    throw Error(strfmt("the text has %zu tokens: fewer than one window of %d (-c sets the window)", ids.size(), w));
  }
  const int windows = max_windows > 0 ? std::min(max_windows, n_win) : n_win;
  Context& ctx = engine.context();
  rec.attach(ctx);
  for (int i = 0; i < windows; ++i) {
    const std::span<const int32_t> win(ids.data() + static_cast<size_t>(i) * w, static_cast<size_t>(w));
    ctx.rollback(0);
    rec.start_sequence();
    rec.add_tokens(win);
    ctx.eval(win, false);
    std::fprintf(stderr, "\rles trace: %d/%d windows of %d tokens", i + 1, windows, w);
  }
  ctx.set_routing_observer(nullptr);
  std::fprintf(stderr, "\n");
  rec.save(prefix);
  std::printf("wrote %s.routing-{experts,weights,tokens%s}.npy and %s.sequence-starts.npy: %d tokens, %d windows\n",
              prefix.c_str(), a.has("--probs") ? ",probs" : "", prefix.c_str(), rec.n_tokens(), windows);
  return 0;
}

}  // namespace les::cli
