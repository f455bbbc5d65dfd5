#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "args.h"
#include "commands.h"
#include "common.h"
#include "les/convert/quantize_model.h"
#include "les/imatrix/imatrix.h"
#include "les/mixed/mixed_plan.h"
#include "les/tokenizer/tokenizer.h"
#include "les/util/error.h"
#include "les/util/progress.h"

namespace les::cli {

namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(strfmt("cannot read calibration text %s", path.c_str()));
  std::stringstream ss;
  ss << in.rdbuf();
  if (ss.str().empty()) throw Error(strfmt("calibration text %s is empty", path.c_str()));
  return ss.str();
}

std::vector<Type> parse_type_list(const std::string& s) {
  std::vector<Type> v;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    auto t = parse_type(item);
    if (!t || !info(*t).weight_type) throw Error(strfmt("--types: unknown weight type '%s'", item.c_str()));
    v.push_back(*t);
  }
  return v;
}

}  // namespace

int cmd_quantize(int argc, char** argv) {
  Args a("quantize",
         "convert a model's weights:\n"
         "  les quantize IN.gguf OUT.gguf TYPE [--imatrix FILE]   TYPE: a type (q4_K, iq4_xs, iq2_xxs, q8_0, f16: every\n"
         "      matrix), a recipe (q4_k_m, Q3_K_S, iq2_m, IQ3_XS, mxfp4_moe, ...) or a llama.cpp ftype in upper case\n"
         "      (Q2_K, Q6_K, IQ4_XS, IQ2_XXS, IQ1_S, TQ1_0: its recipe); each tensor gets the type llama-quantize gives\n"
         "      it. IQ1_S IQ1_M IQ2_XXS IQ2_XS IQ2_S IQ2_M IQ3_XXS IQ3_XS Q2_K_S need --imatrix, as in llama-quantize\n"
         "  les quantize IN.gguf OUT.gguf --target-size SIZE | --target-bpw B --calib TEXT [--imatrix FILE]\n"
         "      mixed precision: each tensor group's type chosen from its measured sensitivity (KL divergence on\n"
         "      the calibration text) for the least predicted KL divergence within the target; the types that need\n"
         "      an importance matrix (IQ1_*, IQ2_*, IQ3_XXS) are candidates only with --imatrix",
         {{{"-t", "--threads"}, true, "threads (default 2)", "N"},
          {{"--force"}, false, "overwrite OUT if it exists"},
          {{"--exact"}, false, "use the reference quantizer (about 40x slower; the default fast one's weighted error "
                               "is within ~0.3% of it)"},
          {{"--imatrix"}, true, "importance matrix (llama.cpp's imatrix format, or les imatrix)", "FILE"},
          {{"--target-size"}, true, "mixed precision: output file size (e.g. 30M, 38108864)", "SIZE"},
          {{"--target-bpw"}, true, "mixed precision: bits per weight over all tensors", "B"},
          {{"--calib"}, true, "mixed precision: calibration text", "TEXT"},
          {{"--calib-windows"}, true, "calibration windows per sensitivity measurement (default 4)", "N"},
          {{"-c", "--ctx-size"}, true, "calibration window length (default 512, at most the training context)", "N"},
          {{"--types"}, true, "candidate types, comma-separated (default: every type les runs)", "LIST"},
          {{"--mem"}, true, "mixed precision: price bytes by what they cost when streaming within this memory budget "
                            "(expert bytes per miss, dense bytes by the cache they take)", "BUDGET"},
          {{"--mem-tokens"}, true, "with --mem: calibration tokens whose routing is replayed through the expert "
                                   "cache for the per-layer miss rates (default 1024, windows of up to 512)", "N"},
          {{"--save-sensitivity"}, true, "mixed precision: also write the measured sensitivity (JSON)", "FILE"},
          {{"--sensitivity"}, true, "mixed precision: use a sensitivity saved by --save-sensitivity instead of measuring",
           "FILE"},
          {{"--probe"}, false, "mixed precision: measure one type per group and predict the others from their "
                               "weighted errors (for models too large to measure every type)"},
          {{"--probe-experts"}, true, "with --probe: convert at most N used experts per expert group and scale "
                                      "the measured KL divergence by their share of the routed rows", "N"},
          {{"--dry-run"}, false, "mixed precision: print the recipe, write nothing"},
          {{"--recipe-json"}, true, "also write the recipe as JSON", "FILE"}});
  a.parse(argc, argv);
  if (a.help_requested()) { std::fputs(a.usage().c_str(), stdout); return 0; }
  const bool mixed = a.has("--target-size") || a.has("--target-bpw");
  if (a.positional().size() != (mixed ? 2u : 3u)) {
    throw Error(mixed ? "expected IN.gguf OUT.gguf with --target-size/--target-bpw (no TYPE)" : "expected IN.gguf OUT.gguf TYPE");
  }
  const std::string& in = a.positional()[0];
  const std::string& out = a.positional()[1];
  const int n_threads = static_cast<int>(a.i64("--threads", 2));
  if (n_threads < 1 || n_threads > 256) throw Error("--threads must be in [1, 256]");
  if (!a.has("--force") && !a.has("--dry-run") && access(out.c_str(), F_OK) == 0) {
    throw Error(strfmt("%s exists (use --force to overwrite)", out.c_str()));
  }
  const gguf::File in_file = gguf::read_file(in);
  const QuantMethod method = a.has("--exact") ? QuantMethod::exact : QuantMethod::fast;

  ImportanceMatrix imatrix;
  ImportanceFn importance;
  if (a.has("--imatrix")) {
    imatrix = read_imatrix(a.str("--imatrix"));
    fit_imatrix_to_model(imatrix, in_file);
    check_imatrix_matches(imatrix, in_file);
    importance = [&imatrix](const std::string& tensor, int expert, std::vector<float>& scratch) {
      return imatrix.column_weights(tensor, expert, scratch);
    };
    std::fprintf(stderr, "quantize: importance matrix %s (%zu tensors, %d chunks)\n", a.str("--imatrix").c_str(),
                 imatrix.entries.size(), imatrix.chunk_count);
  }

  QuantizePlan plan;
  if (mixed) {
    if (a.has("--target-size") && a.has("--target-bpw")) throw Error("give --target-size or --target-bpw, not both");
    if (!a.has("--calib") && (!a.has("--sensitivity") || a.has("--mem"))) {
      throw Error("mixed precision needs a calibration text (--calib TEXT)");
    }
    mixed::MixedOptions mo;
    if (a.has("--target-size")) mo.target_bytes = parse_size(a.str("--target-size"), "--target-size");
    if (a.has("--target-bpw")) {
      mo.target_bpw = a.f64("--target-bpw", 0);
      if (!(mo.target_bpw > 0 && mo.target_bpw <= 32)) throw Error("--target-bpw must be in (0, 32]");
    }
    if (mo.target_bytes == 0 && mo.target_bpw == 0) throw Error("--target-size must be > 0");
    if (a.has("--calib")) {
      const std::string text = read_text(a.str("--calib"));
      Tokenizer tok(vocab_from_gguf(in_file));
      mo.calib_tokens = tok.encode(text, true, false);
    }
    mixed::SensitivityReport loaded, measured;
    if (a.has("--sensitivity")) {
      const std::string sp = a.str("--sensitivity");
      loaded = mixed::sensitivity_from_json(read_text(sp), in_file, sp);
      mo.measured = &loaded;
    }
    mo.report_out = &measured;
    const std::string arch = in_file.get_string("general.architecture", "");
    const int n_ctx_train = static_cast<int>(in_file.get_int(arch + ".context_length", 512));
    mo.sensitivity.n_ctx = static_cast<int>(a.i64("--ctx-size", std::min(512, n_ctx_train)));
    if (mo.sensitivity.n_ctx < 2) throw Error("--ctx-size must be >= 2");
    mo.sensitivity.n_windows = static_cast<int>(a.i64("--calib-windows", 4));
    if (mo.sensitivity.n_windows < 1) throw Error("--calib-windows must be >= 1");
    mo.sensitivity.n_threads = n_threads;
    mo.sensitivity.probe_only = a.has("--probe");
    mo.sensitivity.probe_experts = static_cast<int>(a.i64("--probe-experts", 0));
    if (mo.sensitivity.probe_experts < 0) throw Error("--probe-experts must be >= 0");
    if (a.has("--probe-experts") && !a.has("--probe")) throw Error("--probe-experts needs --probe");
    mo.sensitivity.method = method;
    if (a.has("--types")) mo.sensitivity.candidates = parse_type_list(a.str("--types"));
    if (a.has("--mem")) mo.mem_budget = parse_size(a.str("--mem"), "--mem");
    if (a.has("--mem-tokens") && !a.has("--mem")) throw Error("--mem-tokens needs --mem");
    mo.route_tokens = static_cast<int>(a.i64("--mem-tokens", 1024));
    if (mo.route_tokens < 1) throw Error("--mem-tokens must be >= 1");
    mo.route_window = std::min(mo.route_window, n_ctx_train);
    mo.importance = importance;
    mo.imatrix_name = a.str("--imatrix");
    if (a.has("--calib") && static_cast<int64_t>(mo.calib_tokens.size()) < mo.sensitivity.n_ctx) {
      throw Error(strfmt("calibration text %s has %zu tokens, fewer than one window of %d (--ctx-size)",
                         a.str("--calib").c_str(), mo.calib_tokens.size(), mo.sensitivity.n_ctx));
    }
    if (mo.mem_budget > 0) {
      std::fprintf(stderr, "quantize: streaming cost model: routing %d calibration tokens, replayed through the expert "
                           "cache that --mem %s leaves\n",
                   std::min<int>(mo.route_tokens, static_cast<int>(mo.calib_tokens.size())), a.str("--mem").c_str());
    }
    Progress bar("sensitivity", 1);
    // Where stderr is not a terminal (a log), a plain line every 30 s instead of the bar.
    const bool tty = isatty(STDERR_FILENO);
    const auto t0 = std::chrono::steady_clock::now();
    auto last = t0;
    const mixed::MixedRecipe r = mixed::plan_mixed(in, mo, [&](int done, int total, const std::string& what) {
      bar.set_total(static_cast<uint64_t>(total));
      bar.update(static_cast<uint64_t>(done));
      const auto now = std::chrono::steady_clock::now();
      if (!tty && (now - last > std::chrono::seconds(30) || done == total)) {
        last = now;
        const double el = std::chrono::duration<double>(now - t0).count();
        std::fprintf(stderr, "sensitivity: %d/%d measurements, %.0f s, ETA %.0f s (%s)\n", done, total, el,
                     done > 0 ? el * (total - done) / done : 0.0, what.c_str());
      }
    });
    bar.finish();
    std::fprintf(stderr, "sensitivity: %d measurements of %d calibration positions each in %.1f s\n", r.measurements,
                 r.calib_tokens, r.seconds);
    std::fputs(mixed::format_recipe(r).c_str(), stdout);
    if (r.cost_model == "stream") {
      std::printf("streaming cost: %.2f MiB per token (a uniform file of the target size: %.2f MiB per token)\n",
                  r.stream_bytes_per_token / 1048576.0, r.stream_bytes_per_token_ref / 1048576.0);
    }
    if (a.has("--save-sensitivity")) {
      const std::string js = mixed::sensitivity_to_json(
          measured, in_file, "calibration " + a.str("--calib") + ", imatrix " + (a.has("--imatrix") ? a.str("--imatrix") : "none"));
      write_file_atomic(a.str("--save-sensitivity"), js.data(), js.size());
    }
    if (a.has("--recipe-json")) {
      const std::string js = mixed::recipe_to_json(r);
      write_file_atomic(a.str("--recipe-json"), js.data(), js.size());
    }
    if (a.has("--dry-run")) return 0;
    plan = mixed::plan_from_recipe(r, in_file, n_threads);
    plan.method = method;
  } else {
    for (const char* f : {"--calib", "--calib-windows", "--mem", "--mem-tokens", "--sensitivity", "--save-sensitivity", "--probe", "--probe-experts", "--ctx-size", "--types", "--dry-run", "--recipe-json"}) {
      if (a.has(f)) throw Error(strfmt("%s is for mixed precision (--target-size or --target-bpw)", f));
    }
    plan = parse_quantize_plan(a.positional()[2]);
    plan.n_threads = n_threads;
    plan.method = method;
  }
  Progress bar("quantize", 1);
  quantize_model(in, out, plan, [&](uint64_t done, uint64_t total) {
    bar.set_total(total);
    bar.update(done);
  }, importance);
  bar.finish();
  std::fprintf(stderr, "wrote %s\n", out.c_str());
  return 0;
}

}  // namespace les::cli
