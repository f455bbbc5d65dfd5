#include "les/plan/plan.h"

#include <sys/stat.h>

#include <algorithm>
#include <cmath>

#include "les/bench/run_row.h"
#include "les/gguf/gguf.h"
#include "les/model/model.h"
#include "les/sched/io_probe.h"
#include "les/sched/routing_oracle.h"
#include "les/sched/streaming_experts.h"
#include "les/tokenizer/tokenizer.h"
#include "les/util/clock.h"
#include "les/util/error.h"

namespace les::plan {

namespace {

// The calibration prompt: plain English, repeated to the length asked for.
constexpr const char* kCalibrationText =
    "The history of the city begins with a small settlement on the river, where traders met to exchange "
    "grain, salt and cloth. Over the centuries the market grew into a town with walls, a cathedral and a "
    "university, and its people learned to build bridges, print books and govern themselves. ";

// The calibration prompt: the user's text as les run tokenizes it, or the built-in text's first n
// tokens.
std::vector<int32_t> calibration_prompt(const Model& m, const std::string& text, int n) {
  const Tokenizer tok(vocab_from_gguf(m.gguf()));
  if (!text.empty()) {
    std::vector<int32_t> p = tok.encode(text, true, false);
    if (p.empty()) throw Error("the calibration prompt gives no tokens");
    return p;
  }
  std::vector<int32_t> one = tok.encode(kCalibrationText, false, false);
  if (one.empty()) throw Error("the model's tokenizer gives no tokens for the calibration text");
  std::vector<int32_t> p;
  while (static_cast<int>(p.size()) < n) p.insert(p.end(), one.begin(), one.end());
  p.resize(static_cast<size_t>(n));
  return p;
}

// A recorded routing as a replayable trace: each decode step is one token; a prompt step (a batch:
// each layer's union of experts) becomes as many lead tokens as its largest union needs, each
// layer's union dealt k at a time (wrapping around it to fill the last one). Layers below
// first_layer (a MoE model's dense lead layers: never routed) are left out.
cache::RoutingTrace trace_of(const RoutingOracle& r, int k, int n_expert, int first_layer, int* lead_tokens) {
  cache::RoutingTrace t;
  t.n_layers = r.n_layer() - first_layer;
  t.top_k = k;
  t.n_experts = n_expert;
  *lead_tokens = 0;
  bool decoding = false;
  for (int64_t step = 0; step < r.steps(); ++step) {
    size_t widest = 0;
    bool complete = true;
    for (int l = first_layer; l < r.n_layer(); ++l) {
      const std::vector<int32_t>* ids = r.lookup(step, l);
      if (!ids || ids->empty()) { complete = false; break; }
      widest = std::max(widest, ids->size());
    }
    if (!complete) continue;
    const size_t tokens = (widest + static_cast<size_t>(k) - 1) / static_cast<size_t>(k);
    const bool one_token = widest == static_cast<size_t>(k);
    if (one_token) decoding = true;
    for (size_t tk = 0; tk < tokens; ++tk) {
      for (int l = first_layer; l < r.n_layer(); ++l) {
        const std::vector<int32_t>& ids = *r.lookup(step, l);
        for (int j = 0; j < k; ++j) t.experts.push_back(ids[(tk * static_cast<size_t>(k) + static_cast<size_t>(j)) % ids.size()]);
      }
      ++t.n_tokens;
      if (!decoding) ++*lead_tokens;
    }
  }
  return t;
}

uint64_t file_size(const std::string& path) {
  struct stat st {};
  return !path.empty() && ::stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
}

}  // namespace

PlanReport make_plan(const PlanOptions& o) {
  if (o.model.empty()) throw Error("give the model with -m FILE");
  if (o.threads < 1 || o.threads > 256) throw Error("-t must be in [1, 256]");
  if (o.calib_prompt < 1 || o.calib_tokens < 8) throw Error("the calibration needs a prompt and at least 8 tokens");
  if (o.gen_tokens < 1) throw Error("the generation to plan for needs at least one token");
  const bool speculating = !o.spec.empty() && o.spec != "none";
  if (speculating && (o.spec == "draft" || o.spec == "dspark") && o.draft.empty()) {
    throw Error(strfmt("--spec %s needs --draft FILE", o.spec.c_str()));
  }
  if (!o.draft.empty() && file_size(o.draft) == 0) throw Error(strfmt("cannot read the drafter '%s'", o.draft.c_str()));

  PlanReport r;
  r.model = o.model;
  const gguf::File header = gguf::read_file(o.model);
  const ModelFootprint fp = footprint_of(header, o.model);
  const ModelConfig& c = fp.config;
  r.arch = c.arch_str;
  r.n_layer = c.n_layer;
  r.n_expert = c.n_expert;
  r.n_expert_used = c.n_expert_used;
  r.moe = c.moe;
  r.file_bytes = fp.file_bytes;
  r.dense_bytes = fp.dense_bytes;
  r.expert_bytes = fp.expert_bytes;
  if (c.moe && c.n_expert > 0) {
    const auto expert_layers = std::count_if(fp.layer_expert_bytes.begin(), fp.layer_expert_bytes.end(),
                                             [](uint64_t b) { return b > 0; });
    const double params = 3.0 * c.n_embd * c.n_ff_exp * c.n_expert * static_cast<double>(expert_layers);
    r.expert_bpw = params > 0 ? 8.0 * static_cast<double>(fp.expert_bytes) / params : 0;
  }
  r.drafter_bytes = speculating ? file_size(o.draft) : 0;

  MemoryRequest mr;
  mr.mem = o.mem;
  mr.mem_auto = o.mem == 0;
  mr.n_ctx = o.n_ctx;
  mr.type_k = o.type_k;
  mr.type_v = o.type_v;
  mr.drafter_bytes = r.drafter_bytes;
  r.choice = choose_memory(fp, mr, o.facts ? *o.facts : MemoryFacts::of_this_machine());
  const bool streaming = r.choice.mode == MemoryMode::stream;
  if (speculating) {
    r.notes.push_back(strfmt("--spec %s: the load-aware depth drafts only where verification pays, and gives up (freeing "
                             "the drafter's %.0f MiB for the expert cache) where it does not; the speeds below are plain "
                             "decoding with the drafter's memory taken from the budget",
                             o.spec.c_str(), static_cast<double>(r.drafter_bytes) / (1 << 20)));
  }

  std::unique_ptr<Model> model;
  std::vector<uint64_t> slots;
  if (streaming) {
    model = Model::load(o.model, LoadOptions{.map_experts = false});
    slots = StreamingExperts::layer_slot_bytes_for(*model, storage::default_io_mode());
    r.budget = plan_budget(*model, r.choice.budget, r.choice.n_ctx, 256, slots, r.drafter_bytes, o.type_k, o.type_v);
    r.cache_share = static_cast<double>(r.budget.cache) / static_cast<double>(std::max<uint64_t>(1, fp.expert_bytes));
  }
  // The other cache types at this context: their size, and the expert cache the budget then holds.
  for (Type t : {Type::F32, Type::F16, Type::Q8_0, Type::Q5_0, Type::Q4_0}) {
    if (!c.mla() && c.head_dim_k % block_size(t) != 0) continue;
    KvTypeRow row;
    row.type = t;
    row.kv_bytes = state_bytes(c, fp.has_mtp, r.choice.n_ctx, 256, t, t).kv;
    if (streaming) {
      try {
        row.cache_bytes = plan_budget(*model, r.choice.budget, r.choice.n_ctx, 256, slots, r.drafter_bytes, t, t).cache;
        row.cache_share = static_cast<double>(row.cache_bytes) / static_cast<double>(std::max<uint64_t>(1, fp.expert_bytes));
      } catch (const Error&) {
        row.fits = false;
      }
    }
    r.kv_types.push_back(row);
  }
  if (!o.calibrate) return r;
  if (r.choice.mode == MemoryMode::map && !c.moe) {
    r.notes.push_back("a dense model that does not fit is read from the file's pages as it runs: its speed is the "
                      "disk's random-read speed, not predicted here");
    return r;
  }

  // Calibration: the run les run would make at this budget.
  const double t0 = now_s();
  std::unique_ptr<Model> vocab_model = model ? nullptr : Model::load(o.model, LoadOptions{.map_experts = false});
  const Model& any = model ? *model : *vocab_model;
  bench::RowPlan plan;
  plan.kind = bench::RowKind::lookahead;
  plan.file = o.model;
  plan.resident = !streaming;
  plan.resident_memory = r.choice.mode == MemoryMode::map ? ResidentMemory::map : ResidentMemory::read;
  plan.io = storage::default_io_mode();
  plan.schedule = Schedule::lookahead;
  plan.mem = streaming ? r.budget.total : 0;
  bench::RunInputs in;
  in.prompt = calibration_prompt(any, o.prompt, o.calib_prompt);
  if (static_cast<int>(in.prompt.size()) + o.calib_tokens + 1 > r.choice.n_ctx) {
    throw Error(strfmt("the calibration's %zu prompt and %d generated tokens do not fit the context of %d (-c sets it)",
                       in.prompt.size(), o.calib_tokens, r.choice.n_ctx));
  }
  in.n_gen = o.calib_tokens;
  in.threads = o.threads;
  in.ctx = r.choice.n_ctx;  // the context les run would use: its KV cache shares the budget
  vocab_model.reset();
  std::vector<int32_t> generated, routing;
  const bench::RunMeasure m = bench::run_row_once(plan, in, &generated, streaming ? &routing : nullptr);
  r.calibrated = true;
  r.calib_seconds = now_s() - t0;
  r.calib_prompt = m.n_prompt;
  r.calib_tokens = m.decode_tokens();
  r.measured_decode_tps = m.decode_tps;
  r.measured_prefill_tps = m.prefill_tps;
  r.prefill_tps = m.prefill_tps;
  if (!streaming) {
    r.decode_tps = m.decode_tps;
    r.compute_only_tps = m.decode_tps;
    r.decode_bound = "compute";
    r.prefill_bound = "compute";
    r.hit_rate = 1;
    r.routing_source = "resident: every expert in memory";
    return r;
  }

  // The disk's rates (for the prefill bound and the fallback read rate).
  const double tp = now_s();
  IoProbeOptions po;
  po.refresh = o.probe_refresh;
  po.quick = o.quick_probe;
  const IoProbeResult pr = probe_model_io(*model, po);
  r.probe_cached = pr.cached;
  r.probe_seconds = now_s() - tp;
  r.disk = pr.probe.rates(8);

  Calibration cal;
  cal.tokens = m.decode_tokens();
  cal.seconds = m.decode_tps > 0 ? cal.tokens / m.decode_tps : 0;
  cal.stall_s = m.stall_s;
  cal.expert_compute_s = m.expert_compute_s;
  cal.bytes_read = m.bytes_read;
  cal.io_bytes = m.io_bytes;
  cal.io_busy_s = static_cast<double>(m.io_busy_us) * 1e-6;
  cal.cache_slots = r.budget.n_slots;
  cal.probe_loaded_mbs = r.disk.loaded_mbs;
  cal.probe_idle_mbs = r.disk.idle_mbs;
  int lead = 0;
  const RoutingOracle oracle = RoutingOracle::unflatten(routing);
  cache::RoutingTrace trace = trace_of(oracle, c.n_expert_used, c.n_expert, c.n_layer_dense_lead, &lead);
  const int n_xl = static_cast<int>(slots.size()) - c.n_layer_dense_lead;  // expert layers that stream
  const double expert_avg = static_cast<double>(fp.expert_bytes) /
                            static_cast<double>(std::max(1, c.n_expert * (c.n_layer - c.n_layer_dense_lead)));
  const SpeedModel sm = fit_speed_model(cal, std::move(trace), lead, expert_avg, n_xl * c.n_expert);
  r.routing_source = strfmt("this model's routing of the calibration (%d decoded tokens), replayed", cal.tokens);

  r.gen_tokens = o.gen_tokens;
  r.decode = predict(sm, r.budget.n_slots, o.gen_tokens);
  r.decode_tps = r.decode.tok_s;
  r.steady_tps = r.decode.steady_tok_s;
  r.decode_bound = r.decode.disk_bound ? "disk" : "compute";
  r.compute_only_tps = 1.0 / sm.t_compute;
  const double selected = static_cast<double>(c.n_expert_used) * n_xl;
  r.hit_rate = std::clamp(1.0 - r.decode.misses_per_token / selected, 0.0, 1.0);
  // The prompt's bound: whichever of its compute and its wait for expert reads took longer.
  const double prompt_s = m.prefill_tps > 0 ? m.n_prompt / m.prefill_tps : 0;
  r.prefill_bound = m.prefill_stall_s > prompt_s - m.prefill_stall_s ? "disk" : "compute";
  r.prefill_mb = static_cast<double>(m.prefill_bytes_read) / 1e6;

  // Budgets: a share of the expert bytes each, and where compute becomes the bound.
  const uint64_t fixed = r.budget.fixed();
  const double slot_avg = static_cast<double>(r.budget.cache) / static_cast<double>(std::max<uint64_t>(1, r.budget.n_slots));
  for (double share : {0.25, 0.5, 1.0}) {
    BudgetRow row;
    row.share = share;
    row.mem = fixed + static_cast<uint64_t>(share * static_cast<double>(n_xl) * c.n_expert * slot_avg) + (1u << 20);
    try {
      const BudgetPlan bp = plan_budget(*model, row.mem, r.choice.n_ctx, 256, slots, r.drafter_bytes);
      row.at = predict(sm, bp.n_slots, o.gen_tokens);
    } catch (const Error& e) {
      row.note = e.what();
    }
    r.table.push_back(row);
  }
  const uint64_t cb = compute_bound_slots(sm);
  if (cb > 0) {
    r.compute_bound_mem = fixed + static_cast<uint64_t>(static_cast<double>(cb) * slot_avg) + (1u << 20);
    r.compute_bound_share = static_cast<double>(cb) / (static_cast<double>(n_xl) * c.n_expert);
  }
  // A mixed-precision file: the experts at mixed_bpw, the same budget (more of them fit).
  if (r.expert_bpw > 0 && o.mixed_bpw > 0 && o.mixed_bpw < r.expert_bpw) {
    const double scale = o.mixed_bpw / r.expert_bpw;
    r.mixed_bpw = o.mixed_bpw;
    r.mixed = predict(sm, static_cast<uint64_t>(static_cast<double>(r.budget.n_slots) / scale), o.gen_tokens, scale);
  }
  r.notes.push_back(strfmt("decode speeds are for a %d-token generation from a cold expert cache, as les run -n %d "
                           "starts (the calibration's first %d tokens replayed, then the steady state of its second "
                           "half); the calibration itself measured %.2f tok/s over its %d tokens",
                           o.gen_tokens, o.gen_tokens, cal.tokens, r.measured_decode_tps, cal.tokens));
  return r;
}

}  // namespace les::plan
