#include "les/bench/run_row.h"

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>

#include "les/model/context.h"
#include "les/sched/budget.h"
#include "les/session/generate.h"
#include "les/spec/make_drafter.h"
#include "les/spec/oracle_drafter.h"
#include "les/tokenizer/tokenizer.h"
#include "les/util/error.h"

namespace les::bench {

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The streaming statistics at one moment (decode-phase figures are differences of two).
struct Snapshot {
  LayerStreamStats total{};
  storage::IoCounters io{};
};

Snapshot snapshot(const StreamingExperts* ex) {
  Snapshot s;
  if (ex) {
    s.total = ex->stats().total();
    s.io = ex->stats().io;
  }
  return s;
}

// Greedy generation of in.n_gen tokens; measures everything but load and TTFT.
struct GenOutcome {
  GenerateStats st;
  Snapshot first, last;
  double first_token_t = 0;
};

GenOutcome generate_measured(Context& ctx, const Tokenizer& tok, StreamingExperts* ex, Drafter* drafter,
                             const RunInputs& in, std::vector<int32_t>* generated) {
  GenerateParams gp;
  gp.n_predict = in.n_gen;
  gp.sampling.temp = 0;
  gp.stop_at_eog = false;
  gp.drafter = drafter;
  gp.depth.k_max = in.draft_max;
  gp.depth.adaptive = true;
  if (ex && ex->withheld_bytes() > 0) {
    gp.on_drafter_released = [ex](uint64_t) { ex->release_withheld(); };
    gp.drafter_cache_share = ex->withheld_share();
  }
  GenOutcome g;
  const bool progress = !in.progress_prefix.empty();
  int n = 0;
  g.st = generate(ctx, tok, in.prompt, gp, [&](int32_t id, const std::string&) {
    if (n == 0) {
      g.first_token_t = now_s();
      g.first = snapshot(ex);
    }
    ++n;
    if (generated) generated->push_back(id);
    if (progress && (n % 8 == 0 || n == in.n_gen)) {
      std::fprintf(stderr, "\r\033[K%s %d/%d tokens", in.progress_prefix.c_str(), n, in.n_gen);
    }
    return true;
  });
  g.last = snapshot(ex);
  return g;
}

}  // namespace

void drop_page_cache(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

void warm_page_cache(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  std::vector<char> buf(size_t(4) << 20);
  while (::read(fd, buf.data(), buf.size()) > 0) {
  }
  ::close(fd);
}

RunMeasure run_row_once(const RowPlan& plan, const RunInputs& in, std::vector<int32_t>* generated) {
  if (plan.resident) warm_page_cache(plan.file);
  else drop_page_cache(plan.file);
  RunMeasure m;
  const double t_start = now_s();
  auto model = Model::load(plan.file, LoadOptions{.map_experts = plan.resident});
  const ModelConfig& c = model->config();
  Tokenizer tok(vocab_from_gguf(model->gguf()));
  const int n_ctx = in.n_ctx();
  for (int l = 0; l < c.n_layer; ++l) m.expert_bytes_total += model->expert_size(l) * static_cast<uint64_t>(c.n_expert);

  std::unique_ptr<Drafter> drafter;
  if (plan.drafter == "oracle") {
    if (in.recording.size() <= in.prompt.size()) throw Error("the oracle drafter has no recorded continuation");
    drafter = std::make_unique<OracleDrafter>(in.recording, plan.acceptance, c.n_vocab, 17);
  } else if (!plan.drafter.empty()) {
    DrafterOptions o;
    o.kind = plan.drafter;
    o.draft_path = plan.drafter_path;
    o.n_threads = in.threads;
    o.n_ctx = n_ctx;
    o.sampling.temp = 0;
    drafter = make_drafter(o, *model);
  }

  std::unique_ptr<StreamingExperts> ex;
  StreamingOptions so;
  if (!plan.resident) {
    so.schedule = plan.schedule;
    so.io_mode = plan.io;
    const uint64_t slot = StreamingExperts::slot_bytes_for(*model, plan.io);
    const BudgetPlan bp = plan_budget(*model, plan.mem, n_ctx, 256, slot, drafter ? drafter->resident_bytes() : 0);
    so.cache_bytes = bp.cache;
    m.cache_bytes = bp.cache;
    if (drafter && drafter->resident_bytes() > 0) {
      // As les run does: the drafter's share of the cache is withheld (never touched) rather than
      // missing, and goes in use if the depth controller gives speculation up and frees the drafter.
      so.cache_bytes = plan_budget(*model, plan.mem, n_ctx, 256, slot, 0).cache;
      so.withheld_bytes = so.cache_bytes - bp.cache;
    }
    if (plan.oracle) {
      // The recording run: same prompt and generation, so the same routing (logits are
      // identical across schedules). Its cache is freed before the measured run's is made.
      so.oracle = std::make_shared<RoutingOracle>(c.n_layer);
      so.oracle_depth = plan.oracle_depth;
      StreamingOptions rec = so;
      rec.schedule = Schedule::ondemand;
      rec.oracle_record = true;
      {
        StreamingExperts rex(*model, rec);
        Context ctx(*model, ContextParams{.n_ctx = n_ctx, .n_threads = in.threads}, &rex);
        RunInputs quiet = in;
        quiet.progress_prefix.clear();
        generate_measured(ctx, tok, &rex, nullptr, quiet, nullptr);
      }
      drop_page_cache(plan.file);
    }
    ex = std::make_unique<StreamingExperts>(*model, so);
  }
  Context ctx(*model, ContextParams{.n_ctx = n_ctx, .n_threads = in.threads}, ex.get());
  m.load_s = now_s() - t_start;

  const GenOutcome g = generate_measured(ctx, tok, ex.get(), drafter.get(), in, generated);
  m.ttft_s = g.first_token_t - t_start;
  m.prompt_s = g.st.prompt_seconds;
  m.gen_s = g.st.gen_seconds;
  m.n_prompt = g.st.n_prompt;
  m.n_generated = g.st.n_generated;
  m.decode_tps = g.st.gen_tps();
  m.prefill_tps = g.st.prompt_tps();
  m.logits_hash = g.st.final_logits_hash;
  const LayerStreamStats& a = g.first.total;
  const LayerStreamStats& b = g.last.total;
  m.selected = b.selected - a.selected;
  m.hits = b.hits - a.hits;
  m.in_flight = b.in_flight - a.in_flight;
  m.bytes_read = (b.bytes_demand + b.bytes_prefetch) - (a.bytes_demand + a.bytes_prefetch);
  m.bytes_wasted = b.bytes_wasted - a.bytes_wasted;
  m.stall_s = b.stall_s - a.stall_s;
  m.io_bytes = g.last.io.bytes - g.first.io.bytes;
  m.io_busy_us = g.last.io.busy_us - g.first.io.busy_us;
  m.spec_rounds = g.st.spec.rounds;
  m.spec_drafted = g.st.spec.drafted;
  m.spec_accepted = g.st.spec.accepted;
  m.spec_released_at = g.st.spec.released_at;
  return m;
}

std::string encode_run(const RunMeasure& m, const std::vector<int32_t>& tokens) {
  std::string s(sizeof m + tokens.size() * sizeof(int32_t), '\0');
  std::memcpy(s.data(), &m, sizeof m);
  if (!tokens.empty()) std::memcpy(s.data() + sizeof m, tokens.data(), tokens.size() * sizeof(int32_t));
  return s;
}

void decode_run(const std::string& bytes, RunMeasure* m, std::vector<int32_t>* tokens) {
  if (bytes.size() < sizeof(RunMeasure) || (bytes.size() - sizeof(RunMeasure)) % sizeof(int32_t) != 0) {
    throw Error(strfmt("a measuring process returned %zu bytes, not a run's result", bytes.size()));
  }
  std::memcpy(m, bytes.data(), sizeof(RunMeasure));
  tokens->resize((bytes.size() - sizeof(RunMeasure)) / sizeof(int32_t));
  if (!tokens->empty()) std::memcpy(tokens->data(), bytes.data() + sizeof(RunMeasure), tokens->size() * sizeof(int32_t));
}

}  // namespace les::bench
