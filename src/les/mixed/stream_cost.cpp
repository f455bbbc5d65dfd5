#include "les/mixed/stream_cost.h"

#include <algorithm>
#include <cmath>

#include "les/cache/policy.h"
#include "les/cache/replay.h"
#include "les/model/context.h"
#include "les/model/matmul.h"
#include "les/model/router.h"
#include "les/sched/budget.h"
#include "les/util/error.h"

namespace les::mixed {

double StreamPrices::cost(const TensorGroup& g, uint64_t bytes, int n_expert, int top_k) const {
  if (g.routed_experts && g.layer >= 0 && g.layer < static_cast<int>(miss_rate.size())) {
    return miss_rate[static_cast<size_t>(g.layer)] * top_k * static_cast<double>(bytes) / std::max(1, n_expert);
  }
  return dense_price * static_cast<double>(bytes);
}

namespace {

// Routing of the calibration windows: [token][layer][k], layers with a router only.
cache::RoutingTrace record_routing(const Model& model, std::span<const int32_t> tokens, int n_ctx, int n_windows,
                                   int n_threads) {
  const ModelConfig& c = model.config();
  cache::RoutingTrace tr;
  tr.n_layers = c.n_layer;
  tr.top_k = c.n_expert_used;
  tr.n_experts = c.n_expert;
  ContextParams cp;
  cp.n_ctx = n_ctx;
  cp.n_batch = n_ctx;
  cp.n_threads = n_threads;
  Context ctx(model, cp);
  ThreadPool pool(1);
  QuantizedActs scratch;
  std::vector<float> logits;
  std::vector<std::vector<int32_t>> per_layer(static_cast<size_t>(c.n_layer));
  ctx.set_observer([&](int layer, const char* name, const float* x, int64_t n_tok, int64_t width) {
    if (layer < 0 || layer >= c.n_layer || std::string(name) != "ffn_norm") return;
    const LayerWeights& L = model.weights().layers[static_cast<size_t>(layer)];
    if (!L.router.present()) return;
    logits.resize(static_cast<size_t>(n_tok) * static_cast<size_t>(c.n_expert));
    matmul(L.router, x, n_tok, width, logits.data(), c.n_expert, pool, scratch);
    std::vector<int32_t> ids(static_cast<size_t>(n_tok) * static_cast<size_t>(c.n_expert_used));
    std::vector<float> w(ids.size());
    route_layer(router_params(c), L, logits.data(), n_tok, ids.data(), w.data());
    per_layer[static_cast<size_t>(layer)].insert(per_layer[static_cast<size_t>(layer)].end(), ids.begin(), ids.end());
  });
  const int64_t n_avail = static_cast<int64_t>(tokens.size()) / n_ctx;
  const int n_win = static_cast<int>(std::min<int64_t>(n_avail, n_windows));
  for (int w = 0; w < n_win; ++w) {
    ctx.rollback(0);
    ctx.eval(tokens.subspan(static_cast<size_t>(w) * static_cast<size_t>(n_ctx), static_cast<size_t>(n_ctx)), false);
  }
  tr.n_tokens = n_win * n_ctx;
  tr.experts.resize(static_cast<size_t>(tr.n_tokens) * tr.n_layers * tr.top_k);
  for (int l = 0; l < tr.n_layers; ++l) {
    const auto& v = per_layer[static_cast<size_t>(l)];
    for (int t = 0; t < tr.n_tokens; ++t) {
      for (int j = 0; j < tr.top_k; ++j) {
        // Dense layers (no router) route every token to expert 0.
        tr.experts[(static_cast<size_t>(t) * tr.n_layers + l) * tr.top_k + j] =
            v.empty() ? 0 : v[static_cast<size_t>(t) * tr.top_k + j];
      }
    }
  }
  return tr;
}

// Bytes streamed per token, per-layer miss rates, at a cache of `slots` experts.
double streamed(const cache::RoutingTrace& tr, size_t slots, double expert_bytes, std::vector<double>* miss_rate) {
  cache::PolicyParams pp;
  pp.capacity = slots;
  pp.n_layers = tr.n_layers;
  pp.top_k = tr.top_k;
  auto policy = cache::make_policy("lrfu", pp);
  cache::ReplayOptions ro;
  ro.capacity = slots;
  ro.protect_layer = true;
  const cache::ReplayStats st = cache::replay(tr, *policy, ro);
  if (miss_rate) {
    miss_rate->assign(static_cast<size_t>(tr.n_layers), 0.0);
    for (int l = 0; l < tr.n_layers; ++l) {
      const double acc = static_cast<double>(st.layer_accesses[static_cast<size_t>(l)]);
      (*miss_rate)[static_cast<size_t>(l)] = acc > 0 ? static_cast<double>(st.layer_misses[static_cast<size_t>(l)]) / acc : 0;
    }
  }
  return static_cast<double>(st.misses) * expert_bytes / std::max(1, tr.n_tokens);
}

}  // namespace

StreamPrices stream_prices(const Model& model, const std::vector<TensorGroup>& groups,
                           std::span<const int32_t> calib_tokens, int n_ctx, int n_windows, int n_threads,
                           uint64_t mem_budget, double ref_bpw) {
  const ModelConfig& c = model.config();
  if (!c.moe) throw Error("--mem: the streaming cost model needs a mixture-of-experts model");
  // Reference allocation: every group at ref_bpw.
  double dense_ref = 0, expert_ref = 0;
  for (const TensorGroup& g : groups) {
    const double b = static_cast<double>(g.n_elements()) * ref_bpw / 8.0;
    (g.routed_experts ? expert_ref : dense_ref) += b;
  }
  uint64_t other_dense = 0;  // norms, routers kept as they are, ...
  {
    std::vector<std::string> in_group;
    for (const TensorGroup& g : groups) {
      for (const auto& t : g.tensors) in_group.push_back(t.name);
    }
    std::sort(in_group.begin(), in_group.end());
    for (const auto& t : model.gguf().tensors) {
      if (!std::binary_search(in_group.begin(), in_group.end(), t.name)) other_dense += t.n_bytes;
    }
  }
  const int n_moe_layers = std::max(1, c.n_layer - c.n_layer_dense_lead);  // dense lead layers stream nothing
  const double expert_bytes = expert_ref / (static_cast<double>(c.n_expert) * n_moe_layers);
  // State from the budget split of the source model (KV cache, work buffers, overhead).
  const BudgetPlan src = plan_budget(model, std::max<uint64_t>(mem_budget, uint64_t(1) << 40), n_ctx, n_ctx, 1);
  const uint64_t state = src.kv + src.recurrent + src.work + src.overhead;
  const double fixed = static_cast<double>(state + other_dense) + dense_ref;
  const double min_cache = expert_bytes * c.n_expert_used;
  if (static_cast<double>(mem_budget) < fixed + min_cache) {
    throw Error(strfmt("--mem %.1f MiB cannot hold the dense tensors at %.2f bits per weight (%.1f MiB), the state "
                       "(%.1f MiB) and %d experts",
                       static_cast<double>(mem_budget) / 1048576.0, ref_bpw, (dense_ref + other_dense) / 1048576.0,
                       static_cast<double>(state) / 1048576.0, c.n_expert_used));
  }
  StreamPrices p;
  p.cache_bytes = static_cast<uint64_t>(static_cast<double>(mem_budget) - fixed);
  const cache::RoutingTrace tr = record_routing(model, calib_tokens, n_ctx, n_windows, n_threads);
  const size_t n_keys = static_cast<size_t>(c.n_expert) * static_cast<size_t>(n_moe_layers);
  const size_t room = std::max<size_t>(c.n_expert_used, static_cast<size_t>(static_cast<double>(p.cache_bytes) / expert_bytes));
  const size_t slots = std::min(n_keys, room);
  p.cache_experts = slots;
  p.stream_bytes_per_token = streamed(tr, slots, expert_bytes, &p.miss_rate);
  // A dense byte costs what a byte less of cache costs: the slope of streamed bytes over cache
  // size, measured between the cache and 10% (at least one expert) less; nothing while the
  // smaller cache still holds every expert.
  const size_t fewer_room = std::max<size_t>(c.n_expert_used, room - std::max<size_t>(1, room / 10));
  const size_t fewer = std::min(n_keys, fewer_room);
  if (fewer < slots) {
    const double more = streamed(tr, fewer, expert_bytes, nullptr);
    p.dense_price =
        std::max(0.0, (more - p.stream_bytes_per_token) / (static_cast<double>(room - fewer_room) * expert_bytes));
  }
  return p;
}

}  // namespace les::mixed
