// Expert-cache eviction policies replayed on a routing trace (default: the trained tiny MoE's
// 2048-token trace). Prints markdown tables: hit rates of every policy at 10%, 25% and 50% of all
// (layer, expert) keys next to LRU and Belady; with emulated cross-layer predictions as hints and
// with prefetch; then the per-access cost of each policy at the 35B shape (40 x 256 keys; timings
// depend on the machine and its load, the hit rates do not).
//
//   bench_cache_policy [--models DIR] [--experts FILE [--probs FILE] [--starts FILE] [--n-experts E]]
//                      [--recall R] [--json OUT] [--seed N] [--no-timing] [--no-feature-bound]
//
// DIR defaults to tests/data/trained (run from the repository root). A trace without router
// probabilities (--experts alone, e.g. tests/data/traces/deepseek-v2-lite.*) gets predictions
// emulated at recall@K = R (default 0.80, the published cross-layer recall of real models).
// --json OUT writes the engine-semantics, demand-only hit rates of every policy at 10/25/50% of
// the keys next to Belady's (cache/policy_report.h). See docs/cache_policy.md.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "les/cache/history_predictor.h"
#include "les/cache/policy.h"
#include "les/cache/policy_report.h"
#include "les/cache/replay.h"
#include "les/cache/trace.h"
#include "les/util/atomic_file.h"
#include "les/util/error.h"

using namespace les::cache;

namespace {

const double kFractions[] = {0.10, 0.25, 0.50};

std::vector<size_t> capacities(const RoutingTrace& tr) {
  std::vector<size_t> v;
  const double keys = static_cast<double>(tr.n_layers) * tr.n_experts;
  for (double f : kFractions) v.push_back(static_cast<size_t>(f * keys));  // 51, 128, 256 for 512 keys
  return v;
}

PolicyParams params_for(const RoutingTrace& tr, size_t cap) {
  PolicyParams p;
  p.capacity = cap;
  p.n_layers = tr.n_layers;
  p.top_k = tr.top_k;
  return p;
}

ReplayStats run(const RoutingTrace& tr, const std::string& name, size_t cap, const Predictions* pred = nullptr,
                int m = 0, bool prefetch = false) {
  auto pol = make_policy(name, params_for(tr, cap));
  ReplayOptions o;
  o.capacity = cap;
  o.predictions = pred;
  o.predict_m = m;
  o.prefetch = prefetch;
  return replay(tr, *pol, o);
}

double reads_per_token(const RoutingTrace& tr, const ReplayStats& s) {
  return static_cast<double>(s.misses + s.prefetches) / tr.n_tokens;
}

// Offline bound for recency/frequency/layer features (NOT an online policy: its table of reuse
// probabilities is measured on the whole trace, future included). Features of a key at a token:
// its layer, tokens since its last use (bucketed) and a decayed use count (half-life 16 tokens,
// bucketed). The policy evicts the resident key whose class has the lowest measured probability
// of being used at its next opportunity. Any online policy built only on these features is
// unlikely to beat it by much.
double feature_oracle(const RoutingTrace& tr, size_t cap) {
  const int T = tr.n_tokens, L = tr.n_layers, E = tr.n_experts;
  const double lam = std::log(2.0) / 16.0;
  auto age_bucket = [](int a) {
    if (a <= 4) return a;
    if (a <= 8) return 5;
    if (a <= 16) return 6;
    if (a <= 32) return 7;
    if (a <= 100) return 8;
    return 9;
  };
  auto count_bucket = [](double d) { return std::min(29, static_cast<int>(std::floor(d * 2))); };
  struct Hist { int last = -1000; double dec = 0; int dect = 0; };
  auto cls = [&](const Hist& h, int l, int t) {
    const double d = h.dec * std::exp(-lam * (t - h.dect));
    return (l * 10 + age_bucket(t - h.last)) * 30 + count_bucket(d);
  };
  std::vector<uint8_t> used(static_cast<size_t>(T) * L * E, 0);
  for (int t = 0; t < T; ++t)
    for (int l = 0; l < L; ++l)
      for (int j = 0; j < tr.top_k; ++j) used[(static_cast<size_t>(t) * L + l) * E + tr.selected(t, l)[j]] = 1;
  std::vector<double> num(static_cast<size_t>(L) * 300, 0), den(static_cast<size_t>(L) * 300, 0);
  std::vector<Hist> h(static_cast<size_t>(L) * E);
  for (int t = 0; t < T; ++t) {
    for (int l = 0; l < L; ++l)
      for (int e = 0; e < E; ++e) {
        const int c = cls(h[l * E + e], l, t);
        den[c] += 1;
        num[c] += used[(static_cast<size_t>(t) * L + l) * E + e];
      }
    for (int l = 0; l < L; ++l)
      for (int e = 0; e < E; ++e)
        if (used[(static_cast<size_t>(t) * L + l) * E + e]) {
          Hist& x = h[l * E + e];
          x.dec = x.dec * std::exp(-lam * (t - x.dect)) + 1;
          x.dect = x.last = t;
        }
  }
  std::vector<Hist> g(static_cast<size_t>(L) * E);
  std::vector<uint8_t> res(static_cast<size_t>(L) * E, 0);
  size_t n_res = 0;
  uint64_t hits = 0, acc = 0;
  for (int t = 0; t < T; ++t) {
    for (int l = 0; l < L; ++l) {
      for (int j = 0; j < tr.top_k; ++j) {
        const int k = l * E + tr.selected(t, l)[j];
        ++acc;
        if (res[k]) {
          ++hits;
        } else {
          if (n_res >= cap) {
            int best = -1;
            double best_p = 2;
            for (int x = 0; x < L * E; ++x) {
              if (!res[x]) continue;
              const int xl = x / E;
              const int next = xl > l ? t : t + 1;  // the key's next chance to be routed
              const int c = cls(g[x], xl, next);
              const double p = den[c] > 0 ? num[c] / den[c] : 0;
              if (p < best_p) { best_p = p; best = x; }
            }
            res[best] = 0;
            --n_res;
          }
          res[k] = 1;
          ++n_res;
        }
        Hist& x = g[k];
        if (x.last != t) {
          x.dec = x.dec * std::exp(-lam * (t - x.dect)) + 1;
          x.dect = x.last = t;
        }
      }
    }
  }
  return static_cast<double>(hits) / static_cast<double>(acc);
}

// Synthetic routing at the 35B shape for timing: per layer a Zipf(0.8) popularity over a random
// permutation of the experts, plus a 30% chance per slot to repeat one of the previous token's.
RoutingTrace synthetic_trace(int tokens, int layers, int experts, int k, uint64_t seed) {
  RoutingTrace tr;
  tr.n_tokens = tokens;
  tr.n_layers = layers;
  tr.top_k = k;
  tr.n_experts = experts;
  tr.experts.resize(static_cast<size_t>(tokens) * layers * k);
  uint64_t s = seed;
  auto rnd = [&s]() {
    s ^= s << 13; s ^= s >> 7; s ^= s << 17;
    return s;
  };
  std::vector<double> cdf(experts);
  double acc = 0;
  for (int i = 0; i < experts; ++i) cdf[i] = (acc += 1.0 / std::pow(i + 1.0, 0.8));
  std::vector<std::vector<int>> perm(layers, std::vector<int>(experts));
  for (auto& p : perm) {
    for (int i = 0; i < experts; ++i) p[i] = i;
    for (int i = experts - 1; i > 0; --i) std::swap(p[i], p[rnd() % (i + 1)]);
  }
  for (int t = 0; t < tokens; ++t) {
    for (int l = 0; l < layers; ++l) {
      int32_t* sel = tr.experts.data() + (static_cast<size_t>(t) * layers + l) * k;
      int n = 0;
      while (n < k) {
        int e;
        if (t > 0 && rnd() % 10 < 3) {
          e = tr.selected(t - 1, l)[rnd() % k];
        } else {
          const double u = static_cast<double>(rnd() >> 11) * 0x1.0p-53 * acc;
          e = perm[l][std::lower_bound(cdf.begin(), cdf.end(), u) - cdf.begin()];
        }
        if (std::find(sel, sel + n, e) == sel + n) sel[n++] = e;
      }
    }
  }
  return tr;
}

void print_demand_table(const RoutingTrace& tr, const std::vector<size_t>& caps, bool feature_bound) {
  std::vector<double> belady;
  for (size_t c : caps) belady.push_back(replay_belady(tr, c).hit_rate());
  printf("### Demand-only replay, no prediction (README semantics)\n\n");
  printf("Hit rate (fraction of Belady in parentheses).\n\n");
  printf("| policy |");
  for (size_t c : caps) printf(" %zu slots (%.0f%%) |", c, 100.0 * c / (tr.n_layers * tr.n_experts));
  printf("\n|---|");
  for (size_t i = 0; i < caps.size(); ++i) printf("---|");
  printf("\n| belady (offline optimum) |");
  for (double b : belady) printf(" %.3f |", b);
  printf("\n");
  for (const std::string& name : policy_names()) {
    printf("| %s |", name.c_str());
    for (size_t i = 0; i < caps.size(); ++i) {
      const double h = run(tr, name, caps[i]).hit_rate();
      printf(" %.3f (%.2f) |", h, h / belady[i]);
    }
    printf("\n");
  }
  if (feature_bound) {
    printf("| *feature oracle (offline bound, not online)* |");
    for (size_t i = 0; i < caps.size(); ++i) {
      const double h = feature_oracle(tr, caps[i]);
      printf(" %.3f (%.2f) |", h, h / belady[i]);
    }
  }
  printf("\n| *75%% of Belady (target)* |");
  for (double b : belady) printf(" %.3f |", 0.75 * b);
  printf("\n\n");
}

void print_engine_semantics(const RoutingTrace& tr, const std::vector<size_t>& caps) {
  printf("### Engine semantics: a layer's selected experts are in use together (not evictable while it runs)\n\n");
  printf("| policy |");
  for (size_t c : caps) printf(" %zu slots |", c);
  printf("\n|---|");
  for (size_t i = 0; i < caps.size(); ++i) printf("---|");
  printf("\n| belady |");
  for (size_t c : caps) printf(" %.3f |", replay_belady(tr, c, true).hit_rate());
  printf("\n");
  for (const char* name : {"lru", "lrfu", "s3fifo"}) {
    printf("| %s |", name);
    for (size_t c : caps) {
      auto pol = make_policy(name, params_for(tr, c));
      ReplayOptions o;
      o.capacity = c;
      o.protect_layer = true;
      printf(" %.3f |", replay(tr, *pol, o).hit_rate());
    }
    printf("\n");
  }
  printf("\n");
}

void print_hint_table(const RoutingTrace& tr, const std::vector<size_t>& caps, const Predictions& pred) {
  printf("### Emulated predictions as eviction hints only (no prefetch; same reads as demand-only)\n\n");
  printf("While layer l is routed, on_predict() names the emulated predictor's top-4 for layer l+1.\n\n");
  printf("| policy |");
  for (size_t c : caps) printf(" %zu slots |", c);
  printf("\n|---|");
  for (size_t i = 0; i < caps.size(); ++i) printf("---|");
  printf("\n");
  for (const std::string& base : policy_names()) {
    const std::string name = base + "+pred";
    printf("| %s |", name.c_str());
    for (size_t c : caps) printf(" %.3f |", run(tr, name, c, &pred, 4, false).hit_rate());
    printf("\n");
  }
  printf("\n");
}

void print_prefetch_table(const RoutingTrace& tr, const std::vector<size_t>& caps, const Predictions& pred) {
  printf("### Emulated predictions with prefetch (engine-like; not comparable to Belady's demand-only optimum)\n\n");
  printf("While layer l runs, the top-m predicted experts of layer l+1 that are not resident are loaded (after\n");
  printf("layer l's demand loads). Hit = resident when accessed (prefetches assumed to arrive in time).\n");
  printf("Cells: hit rate / expert reads per token (demand + prefetch). Demand-only LRU reads per token:");
  for (size_t c : caps) printf(" %.2f", reads_per_token(tr, run(tr, "lru", c)));
  printf(".\n\n| policy | m |");
  for (size_t c : caps) printf(" %zu slots |", c);
  printf("\n|---|---|");
  for (size_t i = 0; i < caps.size(); ++i) printf("---|");
  printf("\n");
  for (int m : {1, 2, 4}) {
    for (const std::string& base : policy_names()) {
      for (const std::string& name : {base, base + "+pred"}) {
        if (m != 2 && base != "lru" && base != "lrfu") continue;
        printf("| %s | %d |", name.c_str(), m);
        for (size_t c : caps) {
          const ReplayStats s = run(tr, name, c, &pred, m, true);
          printf(" %.3f / %.1f |", s.hit_rate(), reads_per_token(tr, s));
        }
        printf("\n");
      }
    }
  }
  printf("\n");
}

// Predictors from routing history alone (cache/history_predictor.h) next to the emulated
// hidden-state predictor: recall and precision at K, and what prefetching their top-m saves.
void print_history_table(const RoutingTrace& tr, const std::vector<size_t>& caps, const Predictions& hidden) {
  const int K = tr.top_k, depth = std::min(tr.n_experts, 2 * K + 4);
  printf("### Predictors from routing history (online, causal) and the emulated hidden-state predictor\n\n");
  printf("recall@K / recall@2K / precision@K over layers 1..L-1; then lrfu+pred with the top-2 prefetched: hit rate / "
         "expert reads per token at each cache size (demand-only lrfu: ");
  for (size_t c : caps) printf("%.3f / %.1f ", run(tr, "lrfu", c).hit_rate(), reads_per_token(tr, run(tr, "lrfu", c)));
  printf(").\n\n| predictor | recall@%d | recall@%d | precision@%d |", K, 2 * K, K);
  for (size_t c : caps) printf(" %zu slots |", c);
  printf("\n|---|---|---|---|");
  for (size_t i = 0; i < caps.size(); ++i) printf("---|");
  printf("\n");
  auto row = [&](const std::string& name, const Predictions& p) {
    printf("| %s | %.3f | %.3f | %.3f |", name.c_str(), prediction_recall(tr, p, K), prediction_recall(tr, p, 2 * K),
           prediction_precision(tr, p, K));
    for (size_t c : caps) {
      const ReplayStats s = run(tr, "lrfu+pred", c, &p, 2, true);
      printf(" %.3f / %.1f |", s.hit_rate(), reads_per_token(tr, s));
    }
    printf("\n");
  };
  row("hidden state (emulated)", hidden);
  for (HistoryMode m : {HistoryMode::recent, HistoryMode::transition, HistoryMode::combined}) {
    HistoryOptions o;
    o.mode = m;
    row(std::string("history: ") + history_mode_name(m), predict_from_history(tr, depth, o));
  }
  printf("\n");
}

// Speculative verification on streamed experts: verifying k consecutive positions in one pass
// reads the union of their experts once per layer. Replays the trace in groups of k tokens (a
// group's union per layer as one access set, the engine's default eviction policy, demand reads)
// at several cache shares, and prints the expert reads per verification pass against one token's,
// and the acceptance a drafter needs for speculation to pay when the reads dominate: a pass that
// drafts k-1 tokens commits (1 - a^k) / (1 - a) of them on average (a: each draft token's
// acceptance), so it pays when that exceeds the pass's cost in single-token reads.
void print_verification_table(const RoutingTrace& tr) {
  const double fractions[] = {0.08, 0.15, 0.25, 0.50};
  printf("### Verifying k positions at once: expert reads per pass (x one token's) and the acceptance that pays\n\n");
  printf("| cache share | k=1 reads/token | k=2 | k=3 | k=4 | k=5 | k=6 |\n|---|---|---|---|---|---|---|\n");
  for (double f : fractions) {
    const size_t cap = static_cast<size_t>(f * tr.n_layers * tr.n_experts);
    double one = 0;
    printf("| %.0f%% (%zu slots) |", 100 * f, cap);
    for (int k = 1; k <= 6; ++k) {
      RoutingTrace g;
      g.n_layers = tr.n_layers;
      g.n_experts = tr.n_experts;
      g.top_k = k * tr.top_k;
      g.n_tokens = tr.n_tokens / k;
      g.experts.reserve(static_cast<size_t>(g.n_tokens) * g.n_layers * g.top_k);
      for (int t = 0; t < g.n_tokens; ++t)
        for (int l = 0; l < tr.n_layers; ++l)
          for (int i = 0; i < k; ++i)
            for (int j = 0; j < tr.top_k; ++j) g.experts.push_back(tr.selected(t * k + i, l)[j]);
      if (cap < static_cast<size_t>(g.top_k)) { printf(" - |"); continue; }
      // A group's repeated experts are one read: the replay counts the first as the miss.
      const ReplayStats st = run(g, "lrfu", cap);
      const double per_pass = static_cast<double>(st.misses) / g.n_tokens;
      if (k == 1) {
        one = per_pass;
        printf(" %.1f |", per_pass);
        continue;
      }
      const double cost = per_pass / one;  // in single-token reads
      // The acceptance a at which (1 - a^k) / (1 - a) = cost (bisection; none if cost >= k).
      double lo = 0, hi = 1;
      for (int it = 0; it < 50; ++it) {
        const double a = 0.5 * (lo + hi);
        ((1 - std::pow(a, k)) / (1 - a) < cost ? lo : hi) = a;
      }
      if (cost >= k) printf(" %.2fx: never |", cost);
      else printf(" %.2fx: a > %.2f |", cost, 0.5 * (lo + hi));
    }
    printf("\n");
  }
  printf("\n");
}

void print_timing(uint64_t seed) {
  const RoutingTrace tr = synthetic_trace(1000, 40, 256, 8, seed);
  printf("### Cost per access at the 35B shape (synthetic routing: 40 layers x 256 experts, top-8, 1000 tokens)\n\n");
  printf("| policy | 1024 slots: ns/access | 2560 slots: ns/access | 2560 slots, half non-evictable: ns/victim() |\n");
  printf("|---|---|---|---|\n");
  std::vector<std::string> names = policy_names();
  names.push_back("lrfu+pred");
  for (const std::string& name : names) {
    printf("| %s |", name.c_str());
    for (size_t cap : {size_t{1024}, size_t{2560}}) {
      auto pol = make_policy(name, params_for(tr, cap));
      ReplayOptions o;
      o.capacity = cap;
      const auto t0 = std::chrono::steady_clock::now();
      const ReplayStats s = replay(tr, *pol, o);
      const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
      printf(" %.0f |", ns / static_cast<double>(s.accesses));
    }
    // Stress: a full cache where every other key is not evictable; repeated evict + insert.
    const size_t cap = 2560;
    auto pol = make_policy(name, params_for(tr, cap));
    uint64_t clock = 0;
    for (uint32_t i = 0; i < cap; ++i) {
      pol->on_insert(make_key(static_cast<int>(i / 256), static_cast<int>(i % 256)), clock++);
    }
    auto evictable = [](ExpertKey k) { return (key_expert(k) & 1) == 0; };
    const int calls = 20000;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < calls; ++i) {
      ExpertKey v = 0;
      if (!pol->victim(evictable, &v)) break;
      pol->on_evict(v);
      pol->on_insert(v, clock++);  // the victim comes back (a later access)
    }
    const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
    printf(" %.0f |\n", ns / calls);
  }
  printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
  std::string models = "tests/data/trained";
  std::string experts, probs, starts, json;
  uint64_t seed = 1;
  bool timing = true;
  bool feature_bound = true;
  double recall = 0.80;
  int n_experts = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) { fprintf(stderr, "%s needs a value\n", a.c_str()); std::exit(2); }
      return argv[++i];
    };
    if (a == "--models") models = next();
    else if (a == "--experts") experts = next();
    else if (a == "--probs") probs = next();
    else if (a == "--starts") starts = next();
    else if (a == "--json") json = next();
    else if (a == "--recall") recall = std::strtod(next().c_str(), nullptr);
    else if (a == "--n-experts") n_experts = std::atoi(next().c_str());
    else if (a == "--seed") seed = std::strtoull(next().c_str(), nullptr, 10);
    else if (a == "--no-timing") timing = false;
    else if (a == "--no-feature-bound") feature_bound = false;
    else {
      fprintf(stderr, "usage: %s [--models DIR] [--experts FILE [--probs FILE] [--starts FILE] [--n-experts E]] "
                      "[--recall R] [--json OUT] [--seed N] [--no-timing] [--no-feature-bound]\n", argv[0]);
      return 2;
    }
  }
  const bool trained = experts.empty();
  if (trained) {
    experts = models + "/tiny-moe-q3m.routing-experts.npy";
    if (probs.empty()) probs = models + "/tiny-moe-q3m.routing-probs.npy";
  }
  try {
    const RoutingTrace tr = load_routing_trace(experts, probs, starts, n_experts);
    const std::vector<size_t> caps = capacities(tr);
    printf("Routing trace: %d tokens x %d layers x top-%d of %d experts (%zu accesses, %d keys, %zu sequences)\n\n",
           tr.n_tokens, tr.n_layers, tr.top_k, tr.n_experts, tr.n_accesses(), tr.n_layers * tr.n_experts,
           std::max<size_t>(1, tr.starts.size()));
    if (trained) {
      printf("Validation against the model README (LRU 0.167 / 0.456 / 0.743, Belady 0.494 / 0.727 / 0.901):");
      for (size_t c : caps) {
        printf(" %zu slots: LRU %.4f, Belady %.4f;", c, run(tr, "lru", c).hit_rate(), replay_belady(tr, c).hit_rate());
      }
      printf("\n\n");
    }
    if (!json.empty()) {
      const std::string js = comparison_json(compare_policies(tr, {kFractions[0], kFractions[1], kFractions[2]}));
      les::write_file_atomic(json, js.data(), js.size());
    }
    print_demand_table(tr, caps, feature_bound);
    print_engine_semantics(tr, caps);

    Predictions pred;
    if (tr.has_probs()) {
      PredictorModel model;
      model.seed = seed;
      model = calibrate_predictor(tr, model, 0.696);
      pred = emulate_predictions(tr, model, 8);
      printf("Emulated predictor (EMULATION from the true router probabilities of the same token: ln p + noise,\n");
      printf("std-dev %.3f, or %.1f on a random %.0f%% of (token, layer) pairs; seed %llu): recall@4 %.3f, "
             "recall@6 %.3f,\n",
             model.sigma, model.hard_sigma, 100 * model.hard_fraction, static_cast<unsigned long long>(model.seed),
             prediction_recall(tr, pred, 4), prediction_recall(tr, pred, 6));
      printf("recall@8 %.3f (README predictor A: 0.696 / 0.805 / 0.855). Layer 0 is never predicted.\n\n",
             prediction_recall(tr, pred, 8));
    } else {
      const int depth = std::min(tr.n_experts, 2 * tr.top_k + 4);
      pred = emulate_predictions_at_recall(tr, recall, depth, seed);
      printf("Emulated predictor (EMULATION from the ids alone, no router probabilities: each selected expert in the\n"
             "top-%d with probability %.2f, else in the next %d with that probability; seed %llu): recall@%d %.3f, "
             "recall@%d %.3f. Layer 0 is never predicted.\n\n",
             tr.top_k, recall, tr.top_k, static_cast<unsigned long long>(seed), tr.top_k,
             prediction_recall(tr, pred, tr.top_k), 2 * tr.top_k, prediction_recall(tr, pred, 2 * tr.top_k));
    }
    print_history_table(tr, caps, pred);
    print_verification_table(tr);
    print_hint_table(tr, caps, pred);
    print_prefetch_table(tr, caps, pred);
    if (timing) print_timing(seed);
  } catch (const les::Error& e) {
    fprintf(stderr, "bench_cache_policy: %s\n", e.what());
    return 1;
  }
  return 0;
}
