#include <cstdio>
#include <fstream>
#include <sstream>

#include "args.h"
#include "commands.h"
#include "common.h"
#include "les/model/kv_cache.h"
#include "les/plan/plan.h"
#include "les/util/error.h"

namespace les::cli {

int cmd_plan(int argc, char** argv) {
  Args a("plan",
         "what running a model here will look like: where the memory goes, the decode and prefill speed to expect "
         "and their bounds, what a larger budget or a mixed-precision file would give; from a short calibration "
         "(a few dozen tokens decoded as les run would, the time is printed): les plan -m FILE [--mem SIZE|auto]",
         {{{"-m", "--model"}, true, "model file (GGUF)", "FILE"},
          {{"--mem"}, true, "the budget to plan for (default auto: what les run would choose)", "SIZE|auto"},
          {{"-c", "--ctx-size"}, true, "context size (default: chosen as les run chooses it)", "N"},
          {{"-ctk", "--cache-type-k"}, true, "KV cache type of K (default f16; the others are compared too)", "TYPE"},
          {{"-ctv", "--cache-type-v"}, true, "KV cache type of V (default f16)", "TYPE"},
          {{"-t", "--threads"}, true, "threads (default 2)", "N"},
          {{"--spec"}, true, "speculative decoding to plan for: draft, dspark (with --draft FILE), mtp, ngram", "KIND"},
          {{"--draft", "-md"}, true, "the drafter file (its memory shares the budget)", "FILE"},
          {{"-n", "--n-predict"}, true, "the generation to predict decode speed for, in tokens (default 128, as les run; "
                                        "a cold cache's first misses weigh less in a longer one)", "N"},
          {{"--bpw"}, true, "price a mixed-precision file with experts at B bits per weight (default 3.5)", "B"},
          {{"-p", "--prompt"}, true, "calibrate on this prompt (your typical text: routing, and so speed, depends on it; "
                                     "default: a built-in English paragraph's first 16 tokens)", "TEXT"},
          {{"-f", "--file"}, true, "calibrate on the prompt in this file", "FILE"},
          {{"--calib-tokens"}, true, "calibration: tokens decoded (default 96; the first half warms the replayed cache, the second gives the steady state)", "N"},
          {{"--no-calibrate"}, false, "memory only: no calibration run"},
          {{"--probe-refresh"}, false, "measure the disk again (the device probe is cached per device)"},
          {{"--quick-probe"}, false, "a short device probe of its own (about 1 s, not cached) instead of the cached full one"},
          {{"--json"}, true, "also write the plan as JSON (decode_tok_s at the top level)", "FILE"},
          {{"--isa"}, true, "kernel ISA: scalar, avx2, avxvnni, avx512 (default: best available)", "ISA"}});
  a.parse(argc, argv);
  if (a.help_requested()) { std::fputs(a.usage().c_str(), stdout); return 0; }
  if (!a.positional().empty()) throw Error(strfmt("unexpected argument '%s'", a.positional()[0].c_str()));
  apply_isa_flag(a);
  plan::PlanOptions o;
  o.model = a.required("--model");
  const std::string mem = a.str("--mem", "auto");
  if (mem != "auto") {
    o.mem = parse_size(mem, "--mem");
    if (o.mem == 0) throw Error("--mem must be more than 0");
  }
  o.n_ctx = static_cast<int>(a.i64("--ctx-size", 0));
  if (o.n_ctx < 0) throw Error("--ctx-size must be >= 0");
  o.type_k = parse_kv_type(a.str("--cache-type-k", "f16"), "--cache-type-k");
  o.type_v = parse_kv_type(a.str("--cache-type-v", "f16"), "--cache-type-v");
  o.threads = static_cast<int>(a.i64("--threads", 2));
  o.spec = a.str("--spec", "");
  o.draft = a.str("--draft", "");
  if (!o.draft.empty() && o.spec.empty()) throw Error("--draft needs --spec");
  o.mixed_bpw = a.f64("--bpw", 3.5);
  o.gen_tokens = static_cast<int>(a.i64("--n-predict", 128));
  if (o.gen_tokens < 1 || o.gen_tokens > 1000000) throw Error("-n must be in [1, 1000000]");
  if (!(o.mixed_bpw > 0 && o.mixed_bpw <= 16)) throw Error("--bpw must be in (0, 16]");
  o.calib_tokens = static_cast<int>(a.i64("--calib-tokens", 96));
  if (o.calib_tokens < 8 || o.calib_tokens > 4096) throw Error("--calib-tokens must be in [8, 4096]");
  o.calibrate = !a.has("--no-calibrate");
  if (a.has("--prompt") && a.has("--file")) throw Error("give -p TEXT or -f FILE, not both");
  o.prompt = a.str("--prompt", "");
  if (a.has("--file")) {
    std::ifstream f(a.str("--file"), std::ios::binary);
    if (!f) throw Error(strfmt("cannot read prompt file '%s'", a.str("--file").c_str()));
    std::stringstream ss;
    ss << f.rdbuf();
    o.prompt = ss.str();
    if (o.prompt.empty()) throw Error(strfmt("prompt file '%s' is empty", a.str("--file").c_str()));
  }
  o.probe_refresh = a.has("--probe-refresh");
  o.quick_probe = a.has("--quick-probe");
  const plan::PlanReport r = plan::make_plan(o);
  std::fputs(plan::plan_text(r).c_str(), stdout);
  if (a.has("--json")) {
    const std::string js = plan::plan_json(r);
    write_file_atomic(a.str("--json"), js.data(), js.size());
  }
  return 0;
}

}  // namespace les::cli
