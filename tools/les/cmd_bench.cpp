// `les bench`: the published staging (baseline -> +lookahead -> +load optimization -> +mixed
// precision -> +speculation) measured on this machine in one run; Markdown on stdout, optionally
// JSON and a PNG chart. The measuring is in les/bench/ (staged.h); this file is the command line.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "args.h"
#include "les/model/kv_cache.h"
#include "commands.h"
#include "common.h"
#include "les/bench/report.h"
#include "les/bench/staged.h"
#include "les/engine/memory_choice.h"
#include "les/util/error.h"

namespace les::cli {

namespace {

// --quick's speculation row: a GGUF next to the model whose name contains "draft" (first by name).
std::string find_draft_next_to(const std::string& model) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path dir = fs::path(model).parent_path().empty() ? fs::path(".") : fs::path(model).parent_path();
  std::vector<std::string> found;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (e.path().extension() == ".gguf" && name.find("draft") != std::string::npos &&
        !fs::equivalent(e.path(), fs::path(model), ec)) {
      found.push_back(e.path().string());
    }
  }
  std::sort(found.begin(), found.end());
  return found.empty() ? std::string() : found.front();
}

}  // namespace

int cmd_bench(int argc, char** argv) {
  Args a("bench",
         "the published staging measured on this machine: les bench -m MODEL [--mem SIZE|auto] [--quick]\n"
         "  rows: resident, baseline (naive loader, on-demand, original GGUF), +lookahead, +load optimization\n"
         "  (packed, direct I/O), +mixed precision (--mixed), +speculation (--draft or --spec-oracle);\n"
         "  repeats interleaved after a warm-up, medians; Markdown on stdout",
         {{{"-m", "--model"}, true, "the original GGUF", "FILE"},
          {{"--mem"}, true, "memory budget for every row, e.g. 58M, 4G; auto (the default): the automatic budget "
                            "where the model does not fit in memory, else (and with --quick) the budget whose "
                            "baseline cache holds 25% of the experts", "SIZE|auto"},
          {{"-t", "--threads"}, true, "threads (default 2)", "N"},
          {{"-ctk", "--cache-type-k"}, true, "KV cache type of K, as les run takes it (default f16)", "TYPE"},
          {{"-ctv", "--cache-type-v"}, true, "KV cache type of V (default f16)", "TYPE"},
          {{"-n", "--n-predict"}, true, "tokens generated per run (default 64; --quick: 128)", "N"},
          {{"-p", "--prompt"}, true, "prompt text (default: fixed pseudo-random tokens)", "TEXT"},
          {{"-f", "--prompt-file"}, true, "prompt: the first --prompt-tokens tokens of this text file", "FILE"},
          {{"--prompt-tokens"}, true, "prompt length in tokens (default 64)", "N"},
          {{"--reps"}, true, "counted repeats after the warm-up (default 3)", "R"},
          {{"--packed"}, true, "the model packed by les pack (default: packed into a temporary directory)", "FILE"},
          {{"--mixed"}, true, "a mixed-precision file of the model (les quantize --target-size); packed if it is not",
           "FILE"},
          {{"--draft", "-md"}, true, "+speculation: a dense draft model, or a DSpark drafter (architecture dflash)",
           "FILE"},
          {{"--spec-oracle"}, true, "+speculation: the oracle draft (the recorded output, each token kept with "
                                    "probability A) instead of --draft", "A"},
          {{"--rows"}, true, "rows to run: resident,baseline,lookahead,loadopt,mixed,spec (default all)", "LIST"},
          {{"--no-oracle"}, false, "do not run the routing oracle beside the lookahead rows"},
          {{"--oracle-depth"}, true, "layers ahead the routing oracle's perfect guess is prefetched (default 1)", "N"},
          {{"--md"}, true, "also write the Markdown table to FILE", "FILE"},
          {{"--json"}, true, "write the results as JSON", "FILE"},
          {{"--png"}, true, "draw our ratios beside the published ones (needs gnuplot)", "FILE"},
          {{"--work-dir"}, true, "where temporary packed files go (default: next to --json/--md/--png, else the current directory)", "DIR"},
          {{"--probe-refresh"}, false, "measure the disk again for the ceilings (the device probe is cached per device)"},
          {{"--quick-probe"}, false, "a short device probe of its own for the ceilings (about 1 s, not cached; --quick implies it)"},
          {{"--quick"}, false, "about a minute on a small model: 25% cache share, a draft model found next to the "
                               "model (*draft*.gguf) as the speculation row"},
          {{"--isa"}, true, "kernel ISA: scalar, avx2, avxvnni, avx512 (default: best available)", "ISA"}});
  a.parse(argc, argv);
  if (a.help_requested()) {
    std::fputs(a.usage().c_str(), stdout);
    return 0;
  }
  if (!a.positional().empty()) throw Error(strfmt("unexpected argument '%s'", a.positional()[0].c_str()));
  apply_isa_flag(a);

  bench::BenchOptions o;
  const bool quick = a.has("--quick");
  o.model = a.required("--model");
  const std::string mem = a.str("--mem", quick ? "" : "auto");
  if (mem == "auto") {
    // Every row streams within one budget: the automatic one where the model does not fit in
    // memory (memory_choice.h); where it fits, the budget whose baseline cache holds a quarter of
    // the experts (as --quick), so that the rows measure streaming.
    const ModelFootprint fp = footprint_of(gguf::read_file(o.model), o.model);
    MemoryRequest mr;
    mr.mem_auto = true;
    const MemoryChoice ch = choose_memory(fp, mr, MemoryFacts::of_this_machine());
    if (ch.mode == MemoryMode::stream) {
      o.mem = ch.budget;
      std::fprintf(stderr, "les bench: %s\n", ch.why.c_str());
    } else {
      o.cache_share = 0.25;
      std::fprintf(stderr, "les bench: the model fits in memory (%s); every row streams within the budget whose "
                           "baseline cache holds 25%% of its experts (--mem SIZE sets one)\n", ch.why.c_str());
    }
  } else if (!mem.empty()) {
    o.mem = parse_size(mem, "--mem");
    if (o.mem == 0) throw Error("--mem must be > 0");
  } else {
    o.cache_share = 0.25;
  }
  o.threads = static_cast<int>(a.i64("--threads", 2));
  o.type_k = parse_kv_type(a.str("--cache-type-k", "f16"), "--cache-type-k");
  o.type_v = parse_kv_type(a.str("--cache-type-v", "f16"), "--cache-type-v");
  // --quick: a short device probe of its own (the ceilings' bandwidth), not the cached full one.
  o.quick_probe = quick || a.has("--quick-probe");
  o.probe_refresh = a.has("--probe-refresh");
  o.n_gen = static_cast<int>(a.i64("--n-predict", quick ? 128 : 64));
  o.prompt_tokens = static_cast<int>(a.i64("--prompt-tokens", 64));
  o.reps = static_cast<int>(a.i64("--reps", 3));
  o.prompt_text = a.str("--prompt");
  o.prompt_file = a.str("--prompt-file");
  if (a.has("--prompt") && a.has("--prompt-file")) throw Error("give -p TEXT or --prompt-file FILE, not both");
  o.packed = a.str("--packed");
  o.mixed = a.str("--mixed");
  o.draft = a.str("--draft");
  if (a.has("--spec-oracle")) {
    if (a.has("--draft")) throw Error("give --draft FILE or --spec-oracle A, not both");
    o.spec_oracle = a.f64("--spec-oracle", 0);
    if (o.spec_oracle < 0 || o.spec_oracle > 1) throw Error("--spec-oracle: the acceptance must be in [0, 1]");
  }
  if (quick && o.draft.empty() && o.spec_oracle < 0) o.draft = find_draft_next_to(o.model);
  o.rows = bench::parse_rows(a.str("--rows", "all"));
  o.oracles = !a.has("--no-oracle");
  o.oracle_depth = static_cast<int>(a.i64("--oracle-depth", 1));
  if (o.oracle_depth < 1) throw Error("--oracle-depth must be >= 1");
  // Temporary packed files go next to the output (the first of --json, --md, --png), else here.
  o.work_dir = a.str("--work-dir");
  for (const char* f : {"--json", "--md", "--png"}) {
    if (o.work_dir.empty() && a.has(f)) {
      const std::filesystem::path dir = std::filesystem::path(a.str(f)).parent_path();
      o.work_dir = (dir.empty() ? std::filesystem::path(".") : dir).string();
    }
  }
  o.tty = ::isatty(2) != 0;

  std::string command = "les bench";
  for (int i = 0; i < argc; ++i) command += std::string(" ") + argv[i];

  bench::BenchReport r;
  try {
    r = bench::run_staged_bench(o);
  } catch (...) {
    if (o.tty) std::fputs("\r\033[K", stderr);  // the progress line gives way to the error
    throw;
  }
  r.command = command;
  const std::string md = bench::format_markdown(r);
  std::fputs(md.c_str(), stdout);
  std::fflush(stdout);
  if (a.has("--md")) write_file_atomic(a.str("--md"), md.data(), md.size());
  if (a.has("--json")) {
    const std::string js = bench::format_json(r);
    write_file_atomic(a.str("--json"), js.data(), js.size());
  }
  if (a.has("--png")) {
    std::string why;
    if (bench::write_chart_png(r, a.str("--png"), &why)) {
      std::fprintf(stderr, "les bench: chart written to %s\n", a.str("--png").c_str());
    } else {
      std::fprintf(stderr, "les bench: chart skipped: %s\n", why.c_str());
    }
  }
  if (!r.hashes_ok) {
    std::fprintf(stderr, "\nles bench: LOGITS HASH MISMATCH: %s\n", r.hash_problem.c_str());
    return 3;
  }
  return 0;
}

}  // namespace les::cli
