#include "les/cache/replay.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <set>

#include "les/util/error.h"

namespace les::cache {

namespace {

uint64_t splitmix64(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Standard normal deviates (Box-Muller), deterministic for a seed.
class Gauss {
 public:
  explicit Gauss(uint64_t seed) : s_(seed) {}
  double next() {
    if (have_) { have_ = false; return spare_; }
    const double u1 = (static_cast<double>(splitmix64(s_) >> 11) + 0.5) * 0x1.0p-53;
    const double u2 = static_cast<double>(splitmix64(s_) >> 11) * 0x1.0p-53;
    const double r = std::sqrt(-2.0 * std::log(u1));
    spare_ = r * std::sin(2.0 * M_PI * u2);
    have_ = true;
    return r * std::cos(2.0 * M_PI * u2);
  }

 private:
  uint64_t s_;
  double spare_ = 0;
  bool have_ = false;
};

void check_capacity(const RoutingTrace& tr, size_t capacity) {
  if (capacity < static_cast<size_t>(tr.top_k)) {
    throw Error(strfmt("cache replay: capacity %zu is smaller than top-k %d (one layer's experts must fit)",
                       capacity, tr.top_k));
  }
}

}  // namespace

Predictions emulate_predictions(const RoutingTrace& tr, const PredictorModel& model, int depth) {
  if (!tr.has_probs()) throw Error("emulate_predictions: the trace has no router probabilities");
  if (depth < 1 || depth > tr.n_experts) throw Error(strfmt("emulate_predictions: bad depth %d", depth));
  Predictions p;
  p.n_tokens = tr.n_tokens;
  p.n_layers = tr.n_layers;
  p.depth = depth;
  p.model = model;
  p.ranked.assign(static_cast<size_t>(tr.n_tokens) * tr.n_layers * depth, 0);
  Gauss g(model.seed);
  uint64_t coin = model.seed ^ 0x5851f42d4c957f2dull;
  const int e = tr.n_experts;
  std::vector<double> score(e);
  std::vector<int32_t> idx(e);
  for (int t = 0; t < tr.n_tokens; ++t) {
    for (int l = 0; l < tr.n_layers; ++l) {
      const float* pr = tr.router_probs(t, l);
      const bool hard = static_cast<double>(splitmix64(coin) >> 11) * 0x1.0p-53 < model.hard_fraction;
      const double sigma = hard ? model.hard_sigma : model.sigma;
      for (int i = 0; i < e; ++i) {
        score[i] = std::log(std::max(static_cast<double>(pr[i]), 1e-12)) + sigma * g.next();
      }
      std::iota(idx.begin(), idx.end(), 0);
      std::partial_sort(idx.begin(), idx.begin() + depth, idx.end(), [&](int32_t a, int32_t b) {
        return score[a] != score[b] ? score[a] > score[b] : a < b;
      });
      std::copy(idx.begin(), idx.begin() + depth,
                p.ranked.begin() + (static_cast<ptrdiff_t>(t) * tr.n_layers + l) * depth);
    }
  }
  return p;
}

Predictions emulate_predictions_at_recall(const RoutingTrace& tr, double recall, int depth, uint64_t seed) {
  const int K = tr.top_k, E = tr.n_experts;
  if (!(recall >= 0 && recall <= 1)) throw Error(strfmt("emulate_predictions_at_recall: recall %g not in [0, 1]", recall));
  if (depth < K || depth > E) throw Error(strfmt("emulate_predictions_at_recall: depth %d not in [%d, %d]", depth, K, E));
  Predictions p;
  p.n_tokens = tr.n_tokens;
  p.n_layers = tr.n_layers;
  p.depth = depth;
  p.ranked.assign(static_cast<size_t>(tr.n_tokens) * tr.n_layers * depth, -1);
  uint64_t state = seed ^ 0x2545f4914f6cdd1dull;
  auto uniform = [&] { return static_cast<double>(splitmix64(state) >> 11) * 0x1.0p-53; };
  auto below = [&](int n) { return static_cast<int>(splitmix64(state) % static_cast<uint64_t>(n)); };
  std::vector<uint8_t> taken(static_cast<size_t>(E));
  for (int t = 0; t < tr.n_tokens; ++t) {
    for (int l = 0; l < tr.n_layers; ++l) {
      int32_t* r = p.ranked.data() + (static_cast<size_t>(t) * tr.n_layers + l) * depth;
      std::fill(taken.begin(), taken.end(), 0);
      const int32_t* sel = tr.selected(t, l);
      for (int j = 0; j < K; ++j) taken[static_cast<size_t>(sel[j])] = 1;
      // A free position in [lo, hi) (hi clamped to depth), or -1.
      auto place = [&](int lo, int hi, int32_t e) {
        hi = std::min(hi, depth);
        if (lo >= hi) return false;
        for (int tries = 0; tries < 4 * (hi - lo); ++tries) {
          const int pos = lo + below(hi - lo);
          if (r[pos] < 0) { r[pos] = e; return true; }
        }
        for (int pos = lo; pos < hi; ++pos) {
          if (r[pos] < 0) { r[pos] = e; return true; }
        }
        return false;
      };
      for (int j = 0; j < K; ++j) {
        const int32_t e = sel[j];
        if (uniform() < recall && place(0, K, e)) continue;
        if (uniform() < recall && place(K, 2 * K, e)) continue;
        if (2 * K < depth && uniform() < 0.5) place(2 * K, depth, e);  // somewhere further down, or not ranked
      }
      // Fill: unselected experts in random order, then (a ranking of nearly every expert) the
      // selected ones no position took.
      std::vector<int32_t> fill;
      for (int32_t e = 0; e < E; ++e) {
        if (!taken[static_cast<size_t>(e)]) fill.push_back(e);
      }
      for (size_t i = fill.size(); i > 1; --i) std::swap(fill[i - 1], fill[static_cast<size_t>(below(static_cast<int>(i)))]);
      for (int j = 0; j < K; ++j) {
        if (std::find(r, r + depth, sel[j]) == r + depth) fill.push_back(sel[j]);
      }
      size_t next = 0;
      for (int pos = 0; pos < depth; ++pos) {
        if (r[pos] < 0) r[pos] = fill[next++];
      }
    }
  }
  return p;
}

double prediction_recall(const RoutingTrace& tr, const Predictions& pred, int m) {
  m = std::min(m, pred.depth);
  uint64_t found = 0, total = 0;
  for (int t = 0; t < tr.n_tokens; ++t) {
    for (int l = 1; l < tr.n_layers; ++l) {
      const int32_t* sel = tr.selected(t, l);
      const int32_t* pr = pred.at(t, l);
      for (int j = 0; j < tr.top_k; ++j) {
        found += std::find(pr, pr + m, sel[j]) != pr + m;
        ++total;
      }
    }
  }
  return total ? static_cast<double>(found) / static_cast<double>(total) : 0.0;
}

PredictorModel calibrate_predictor(const RoutingTrace& tr, PredictorModel model, double target) {
  double lo = 0.0, hi = 8.0;  // recall@4 decreases with sigma
  for (int it = 0; it < 24; ++it) {
    model.sigma = 0.5 * (lo + hi);
    const double r = prediction_recall(tr, emulate_predictions(tr, model, 4), 4);
    (r > target ? lo : hi) = model.sigma;
  }
  model.sigma = 0.5 * (lo + hi);
  return model;
}

ReplayStats replay(const RoutingTrace& tr, EvictionPolicy& policy, const ReplayOptions& opt) {
  check_capacity(tr, opt.capacity);
  const Predictions* pred = opt.predict_m > 0 ? opt.predictions : nullptr;
  if (opt.predict_m > 0 && !pred) throw Error("cache replay: predict_m > 0 needs predictions");
  if (pred && (pred->n_tokens != tr.n_tokens || pred->n_layers != tr.n_layers || opt.predict_m > pred->depth)) {
    throw Error("cache replay: predictions do not match the trace or are too shallow");
  }
  if (opt.prefetch && opt.predict_m + tr.top_k > static_cast<int>(opt.capacity)) {
    throw Error(strfmt("cache replay: prefetching %d experts needs capacity >= %d", opt.predict_m,
                       opt.predict_m + tr.top_k));
  }
  const int E = tr.n_experts;
  const size_t n_keys = static_cast<size_t>(tr.n_layers) * E;
  auto dense = [E](ExpertKey k) { return static_cast<size_t>(key_layer(k)) * E + key_expert(k); };

  std::vector<uint8_t> resident(n_keys, 0);
  std::vector<uint8_t> prefetched_unused(n_keys, 0);
  std::vector<uint8_t> busy(n_keys, 0);  // in use (current layer) or in flight (current prefetch)
  size_t n_resident = 0;
  ReplayStats st;
  st.layer_accesses.assign(static_cast<size_t>(tr.n_layers), 0);
  st.layer_misses.assign(static_cast<size_t>(tr.n_layers), 0);

  auto evictable = [&](ExpertKey k) { return !busy[dense(k)]; };
  auto make_room = [&]() {
    while (n_resident >= opt.capacity) {
      ExpertKey v = 0;
      if (!policy.victim(evictable, &v)) throw Error(strfmt("cache replay: policy %s found no victim", policy.name()));
      const size_t d = key_layer(v) < tr.n_layers && key_expert(v) < E ? dense(v) : n_keys;
      if (d >= n_keys || !resident[d] || busy[d]) {
        throw Error(strfmt("cache replay: policy %s chose key 0x%x that is not resident or not evictable",
                           policy.name(), v));
      }
      resident[d] = 0;
      if (prefetched_unused[d]) { ++st.prefetch_unused; prefetched_unused[d] = 0; }
      --n_resident;
      ++st.evictions;
      policy.on_evict(v);
    }
  };

  uint64_t clock = 0;
  for (int t = 0; t < tr.n_tokens; ++t) {
    for (int l = 0; l < tr.n_layers; ++l) {
      const int32_t* sel = tr.selected(t, l);
      policy.on_route(l, sel, tr.top_k, clock);
      if (opt.protect_layer) {
        for (int j = 0; j < tr.top_k; ++j) busy[dense(make_key(l, sel[j]))] = 1;
      }
      if (pred && l + 1 < tr.n_layers) {
        const int32_t* pr = pred->at(t, l + 1);
        for (int j = 0; j < opt.predict_m; ++j) policy.on_predict(make_key(l + 1, pr[j]), clock);
      }
      for (int j = 0; j < tr.top_k; ++j) {
        const ExpertKey k = make_key(l, sel[j]);
        const size_t d = dense(k);
        ++st.accesses;
        ++st.layer_accesses[static_cast<size_t>(l)];
        if (resident[d]) {
          ++st.hits;
          prefetched_unused[d] = 0;
          policy.on_hit(k, clock);
        } else {
          ++st.misses;
          ++st.layer_misses[static_cast<size_t>(l)];
          make_room();
          resident[d] = 1;
          ++n_resident;
          policy.on_insert(k, clock);
        }
        ++clock;
      }
      for (int j = 0; j < tr.top_k; ++j) busy[dense(make_key(l, sel[j]))] = 0;
      // Prefetch for layer l+1 happens while layer l computes; modelled after its accesses so the
      // layer's own demand loads come first (demand reads have priority in the engine).
      if (pred && opt.prefetch && l + 1 < tr.n_layers) {
        const int32_t* pr = pred->at(t, l + 1);
        for (int j = 0; j < opt.predict_m; ++j) busy[dense(make_key(l + 1, pr[j]))] = 1;
        for (int j = 0; j < opt.predict_m; ++j) {
          const ExpertKey k = make_key(l + 1, pr[j]);
          const size_t d = dense(k);
          if (resident[d]) continue;
          make_room();
          resident[d] = 1;
          prefetched_unused[d] = 1;
          ++n_resident;
          ++st.prefetches;
          policy.on_insert(k, clock);
        }
        for (int j = 0; j < opt.predict_m; ++j) busy[dense(make_key(l + 1, pr[j]))] = 0;
      }
    }
  }
  return st;
}

ReplayStats replay_belady(const RoutingTrace& tr, size_t capacity, bool protect_layer) {
  check_capacity(tr, capacity);
  const int E = tr.n_experts;
  const size_t n_keys = static_cast<size_t>(tr.n_layers) * E;
  const size_t n = tr.n_accesses();
  // Access i (token-major, then layer, then router order) touches dense key key_of[i].
  std::vector<uint32_t> key_of(n);
  for (int t = 0, i = 0; t < tr.n_tokens; ++t) {
    for (int l = 0; l < tr.n_layers; ++l) {
      const int32_t* sel = tr.selected(t, l);
      for (int j = 0; j < tr.top_k; ++j) key_of[i++] = static_cast<uint32_t>(l) * E + sel[j];
    }
  }
  constexpr uint64_t kNever = std::numeric_limits<uint64_t>::max();
  std::vector<uint64_t> next_use(n);
  std::vector<uint64_t> upcoming(n_keys, kNever);
  for (size_t i = n; i-- > 0;) {
    next_use[i] = upcoming[key_of[i]];
    upcoming[key_of[i]] = i;
  }
  // Resident keys ordered by next use (largest first), ties by key.
  std::set<std::pair<uint64_t, uint32_t>, std::greater<>> order;
  std::vector<uint64_t> cur_next(n_keys, 0);
  std::vector<uint8_t> resident(n_keys, 0), busy(n_keys, 0);
  ReplayStats st;
  const size_t per_layer = static_cast<size_t>(tr.top_k);
  for (size_t base = 0; base < n; base += per_layer) {
    if (protect_layer) {
      for (size_t j = 0; j < per_layer; ++j) busy[key_of[base + j]] = 1;
    }
    for (size_t j = 0; j < per_layer; ++j) {
      const size_t i = base + j;
      const uint32_t k = key_of[i];
      ++st.accesses;
      if (resident[k]) {
        ++st.hits;
        order.erase({cur_next[k], k});
      } else {
        ++st.misses;
        if (order.size() >= capacity) {
          auto it = order.begin();
          while (busy[it->second]) ++it;  // at most top_k - 1 steps
          resident[it->second] = 0;
          order.erase(it);
          ++st.evictions;
        }
        resident[k] = 1;
      }
      cur_next[k] = next_use[i];
      order.insert({cur_next[k], k});
    }
    for (size_t j = 0; j < per_layer; ++j) busy[key_of[base + j]] = 0;
  }
  return st;
}

}  // namespace les::cache
