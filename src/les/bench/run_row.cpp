#include "les/bench/run_row.h"

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>

#include "les/engine/engine.h"
#include "les/gguf/gguf.h"
#include "les/model/config.h"
#include "les/spec/oracle_drafter.h"
#include "les/util/error.h"
#include "les/util/clock.h"

namespace les::bench {

namespace {

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

GenOutcome generate_measured(Engine& engine, const RunInputs& in, std::vector<int32_t>* generated) {
  EngineRequest req;
  req.n_predict = in.n_gen;
  req.sampling.temp = 0;
  req.stop_at_eog = false;
  GenOutcome g;
  const StreamingExperts* ex = engine.experts();
  const bool progress = !in.progress_prefix.empty();
  int n = 0;
  req.on_token = [&](int32_t id) {
    if (n == 0) {
      g.first_token_t = now_s();
      g.first = snapshot(ex);
    }
    ++n;
    if (generated) generated->push_back(id);
    if (progress && (n % 8 == 0 || n == in.n_gen)) {
      std::fprintf(stderr, "\r\033[K%s %d/%d tokens", in.progress_prefix.c_str(), n, in.n_gen);
    }
  };
  g.st = engine.generate(in.prompt, req, nullptr).stats;
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

RunMeasure run_row_once(const RowPlan& plan, const RunInputs& in, std::vector<int32_t>* generated,
                        std::vector<int32_t>* routing) {
  EngineOptions eo;
  eo.model_path = plan.file;
  eo.context = ContextParams{.n_ctx = in.n_ctx(), .n_threads = in.threads, .n_batch = 256, .type_k = in.type_k,
                             .type_v = in.type_v};
  eo.reuse_prefix = false;
  eo.depth.k_max = in.draft_max;
  eo.depth.adaptive = true;
  if (plan.drafter == "oracle") {
    if (in.recording.size() <= in.prompt.size()) throw Error("the oracle drafter has no recorded continuation");
    eo.drafter_factory = [&](const Model& m) -> std::unique_ptr<Drafter> {
      return std::make_unique<OracleDrafter>(in.recording, plan.acceptance, m.config().n_vocab, 17);
    };
  } else if (!plan.drafter.empty()) {
    eo.drafter.kind = plan.drafter;
    eo.drafter.draft_path = plan.drafter_path;
    eo.drafter.sampling.temp = 0;
  }
  if (!plan.resident) {
    eo.mem = plan.mem;
    eo.streaming.schedule = plan.schedule;
    eo.streaming.io_mode = plan.io;
    eo.streaming.read_chunk = plan.read_chunk;
    if (plan.oracle) {
      // The routing of an earlier run of the same weights and tokens (logits are identical
      // across schedules, so the routing is too).
      if (in.routing.empty()) throw Error("the routing oracle has no recorded routing to replay");
      eo.streaming.oracle = std::make_shared<RoutingOracle>(RoutingOracle::unflatten(in.routing));
      eo.streaming.oracle_depth = plan.oracle_depth;
    }
  }
  if (plan.resident) {
    eo.resident = plan.resident_memory;
    if (plan.resident_memory != ResidentMemory::read) warm_page_cache(plan.file);
  } else {
    drop_page_cache(plan.file);
  }

  if (routing != nullptr && !plan.resident && !plan.oracle) {
    const int n_layer = config_from_gguf(gguf::read_file(plan.file), plan.file).n_layer;
    eo.streaming.oracle = std::make_shared<RoutingOracle>(n_layer);
    eo.streaming.oracle_record = true;
  }

  RunMeasure m;
  const double t_start = now_s();
  Engine engine(eo);
  const ModelConfig& c = engine.model().config();
  for (int l = 0; l < c.n_layer; ++l) m.expert_bytes_total += engine.model().expert_size(l) * static_cast<uint64_t>(c.n_expert);
  m.cache_bytes = engine.budget().cache;
  m.load_s = now_s() - t_start;

  const GenOutcome g = generate_measured(engine, in, generated);
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
  m.expert_compute_s = b.compute_s - a.compute_s;
  m.prefill_bytes_read = a.bytes_demand + a.bytes_prefetch;
  m.prefill_stall_s = a.stall_s;
  m.io_bytes = g.last.io.bytes - g.first.io.bytes;
  m.io_busy_us = g.last.io.busy_us - g.first.io.busy_us;
  m.spec_rounds = g.st.spec.rounds;
  m.spec_drafted = g.st.spec.drafted;
  m.spec_accepted = g.st.spec.accepted;
  m.spec_released_at = g.st.spec.released_at;
  if (routing != nullptr && eo.streaming.oracle_record) *routing = eo.streaming.oracle->flatten();
  return m;
}

// Layout: RunMeasure, the token count (uint32), the tokens, the routing's integers (the rest).
std::string encode_run(const RunMeasure& m, const std::vector<int32_t>& tokens, const std::vector<int32_t>& routing) {
  const uint32_t n = static_cast<uint32_t>(tokens.size());
  std::string s(sizeof m + sizeof n + (tokens.size() + routing.size()) * sizeof(int32_t), '\0');
  char* at = s.data();
  std::memcpy(at, &m, sizeof m);
  at += sizeof m;
  std::memcpy(at, &n, sizeof n);
  at += sizeof n;
  if (!tokens.empty()) std::memcpy(at, tokens.data(), tokens.size() * sizeof(int32_t));
  at += tokens.size() * sizeof(int32_t);
  if (!routing.empty()) std::memcpy(at, routing.data(), routing.size() * sizeof(int32_t));
  return s;
}

void decode_run(const std::string& bytes, RunMeasure* m, std::vector<int32_t>* tokens, std::vector<int32_t>* routing) {
  const size_t head = sizeof(RunMeasure) + sizeof(uint32_t);
  uint32_t n = 0;
  if (bytes.size() >= head) std::memcpy(&n, bytes.data() + sizeof(RunMeasure), sizeof n);
  if (bytes.size() < head || (bytes.size() - head) % sizeof(int32_t) != 0 || (bytes.size() - head) / sizeof(int32_t) < n) {
    throw Error(strfmt("a measuring process returned %zu bytes, not a run's result", bytes.size()));
  }
  std::memcpy(m, bytes.data(), sizeof(RunMeasure));
  const size_t total = (bytes.size() - head) / sizeof(int32_t);
  tokens->resize(n);
  if (n > 0) std::memcpy(tokens->data(), bytes.data() + head, n * sizeof(int32_t));
  if (routing != nullptr) {
    routing->resize(total - n);
    if (total > n) std::memcpy(routing->data(), bytes.data() + head + n * sizeof(int32_t), (total - n) * sizeof(int32_t));
  }
}

}  // namespace les::bench
