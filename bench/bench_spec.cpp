// Speculative decoding benchmark: plain decoding and each drafter side by side on the same model,
// prompts and budgets, in one run; the kinds take turns within each repeat (machine drift hits
// all alike); medians of repeats, ratios as the median of each repeat's ratio. Greedy, so every speculative run must produce plain decoding's
// tokens (checked, column "same").
//
//   bench_spec -m MODEL [--stream-file PACKED] [--draft FILE] [--dspark FILE] [--mem resident,58M,80M]
//              [--kinds none,draft,ngram,oracle@0.7,draft/fixed] [-n 96] [--prompts N]
//              [--prompt-file TEXT] [--prompt-tokens 48] [-t 2] [--reps 3] [--draft-max 6] [--json F]
//
// Kinds: none (plain), ngram, draft (--draft), dspark (--dspark), mtp (the model's own MTP head), oracle@A (the target's recorded greedy continuation
// corrupted to acceptance A), each optionally /fixed (always --draft-max; default load-aware
// depth) or /k=N. Budgets: "resident" (whole file mapped) or a --mem size (experts streamed with
// the lookahead schedule through a cache of what is left; a drafter's bytes count against it).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "les/model/context.h"
#include "les/sched/budget.h"
#include "les/sched/streaming_experts.h"
#include "les/session/generate.h"
#include "les/spec/draft_model_drafter.h"
#include "les/spec/make_drafter.h"
#include "les/spec/oracle_drafter.h"
#include "les/tokenizer/tokenizer.h"
#include "les/util/error.h"

using namespace les;

namespace {

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> v;
  std::stringstream ss(s);
  for (std::string x; std::getline(ss, x, sep);) {
    if (!x.empty()) v.push_back(x);
  }
  return v;
}

uint64_t parse_mem(const std::string& s) {
  char* end = nullptr;
  const double x = std::strtod(s.c_str(), &end);
  const std::string u = end;
  double m = 1;
  if (u == "K" || u == "k") m = 1024;
  else if (u == "M" || u == "m") m = 1048576;
  else if (u == "G" || u == "g") m = 1073741824.0;
  else if (!u.empty()) throw Error("bad --mem " + s);
  return static_cast<uint64_t>(x * m);
}

struct Args {
  std::string model, stream_file, draft, dspark, prompt_file, json;
  std::vector<std::string> mems{"resident"};
  std::vector<std::string> kinds{"none", "ngram"};
  int n_gen = 96, n_prompts = 4, prompt_tokens = 48, threads = 2, reps = 3, draft_max = 6;
  bool pass_costs = false;  // also measure t(n) / t(1), a target pass over n positions
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) throw Error("missing value for " + k);
      return argv[++i];
    };
    if (k == "-m") a.model = val();
    else if (k == "--stream-file") a.stream_file = val();
    else if (k == "--draft") a.draft = val();
    else if (k == "--dspark") a.dspark = val();
    else if (k == "--mem") a.mems = split(val(), ',');
    else if (k == "--kinds") a.kinds = split(val(), ',');
    else if (k == "-n") a.n_gen = std::stoi(val());
    else if (k == "--prompts") a.n_prompts = std::stoi(val());
    else if (k == "--prompt-file") a.prompt_file = val();
    else if (k == "--prompt-tokens") a.prompt_tokens = std::stoi(val());
    else if (k == "-t") a.threads = std::stoi(val());
    else if (k == "--reps") a.reps = std::stoi(val());
    else if (k == "--draft-max") a.draft_max = std::stoi(val());
    else if (k == "--json") a.json = val();
    else if (k == "--pass-costs") a.pass_costs = true;
    else throw Error("unknown option " + k + " (see the comment at the top of bench/bench_spec.cpp)");
  }
  if (a.model.empty()) throw Error("give -m MODEL");
  return a;
}

struct Kind {
  std::string label, base;  // base: none, ngram, draft, oracle
  double acceptance = 0;
  bool fixed = false;
  int k = 0;
};

Kind parse_kind(const std::string& s, int draft_max) {
  Kind k;
  k.label = s;
  const auto parts = split(s, '/');
  k.base = parts.at(0);
  k.k = draft_max;
  if (k.base.rfind("oracle@", 0) == 0) {
    k.acceptance = std::stod(k.base.substr(7));
    k.base = "oracle";
  }
  for (size_t i = 1; i < parts.size(); ++i) {
    if (parts[i] == "fixed") k.fixed = true;
    else if (parts[i].rfind("k=", 0) == 0) k.k = std::stoi(parts[i].substr(2));
    else throw Error("bad kind option '" + parts[i] + "' in " + s);
  }
  if (k.base != "none" && k.base != "ngram" && k.base != "draft" && k.base != "dspark" && k.base != "mtp" && k.base != "oracle") throw Error("unknown kind " + s);
  return k;
}

struct Result {
  std::vector<int32_t> tokens;
  double gen_s = 0;
  int n_after_first = 0;
  uint64_t bytes = 0;   // expert bytes read after the first token
  SpecStats spec;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args a = parse(argc, argv);
    // Mapped, not read into memory the process owns: the streamed runs beside it must find the
    // memory of their budget (a mapping's page cache is reclaimable).
    auto resident = Model::load(a.model, LoadOptions{.map_experts = true, .resident = ResidentMemory::map});
    const std::string sf = a.stream_file.empty() ? a.model : a.stream_file;
    auto streamed = Model::load(sf, LoadOptions{.map_experts = false});
    const ModelConfig& c = resident->config();
    Tokenizer tok(vocab_from_gguf(resident->gguf()));

    // Prompts: consecutive slices of a text file, or fixed pseudo-random token runs.
    std::vector<std::vector<int32_t>> prompts;
    if (!a.prompt_file.empty()) {
      std::ifstream f(a.prompt_file, std::ios::binary);
      if (!f) throw Error("cannot read " + a.prompt_file);
      std::stringstream ss;
      ss << f.rdbuf();
      const std::string text = ss.str();
      const auto all = tok.encode(text.substr(text.size() / 2), false, false);  // the second half
      for (int p = 0; p < a.n_prompts; ++p) {
        const size_t at = static_cast<size_t>(p) * all.size() / static_cast<size_t>(a.n_prompts);
        if (at + static_cast<size_t>(a.prompt_tokens) > all.size()) break;
        prompts.emplace_back(all.begin() + static_cast<std::ptrdiff_t>(at),
                             all.begin() + static_cast<std::ptrdiff_t>(at + static_cast<size_t>(a.prompt_tokens)));
      }
    } else {
      uint64_t x = 12345;
      for (int p = 0; p < a.n_prompts; ++p) {
        std::vector<int32_t> v;
        for (int i = 0; i < a.prompt_tokens; ++i) {
          x ^= x << 13; x ^= x >> 7; x ^= x << 17;
          v.push_back(static_cast<int32_t>(x % static_cast<uint64_t>(c.n_vocab)));
        }
        prompts.push_back(v);
      }
    }
    if (prompts.empty()) throw Error("no prompts");
    std::vector<Kind> kinds;
    for (const auto& s : a.kinds) kinds.push_back(parse_kind(s, a.draft_max));
    if (kinds.empty() || kinds[0].base != "none") kinds.insert(kinds.begin(), parse_kind("none", a.draft_max));
    const int n_ctx = a.prompt_tokens + a.n_gen + a.draft_max + 8;
    uint64_t all_experts = 0;
    // Expert layers: the trunk's, and the MTP block's (streamed through the same cache) if any.
    const int n_expert_layers = c.n_layer + (streamed->weights().mtp.runnable() ? 1 : 0);
    for (int l = 0; l < n_expert_layers; ++l) all_experts += streamed->expert_size(l) * static_cast<uint64_t>(c.n_expert);
    setvbuf(stdout, nullptr, _IOLBF, 0);
    std::printf("model %s (%d layers, %d experts, k=%d; experts %.1f MiB in all); %zu prompts x %d tokens, "
                "%d generated, %d threads, %d reps, draft-max %d\n",
                a.model.c_str(), c.n_layer, c.n_expert, c.n_expert_used, all_experts / 1048576.0, prompts.size(),
                a.prompt_tokens, a.n_gen, a.threads, a.reps, a.draft_max);

    // One generation. recording: the plain run's prompt + tokens (for the oracle).
    // One depth controller per (budget, kind), kept across prompts and repeats, as a session keeps it.
    std::vector<std::unique_ptr<DepthController>> controllers;
    // Expert caches are made once per (budget, cache size) and cleared before each run: a new one
    // would allocate and touch its arena again (seconds for GiBs).
    std::vector<std::pair<std::string, std::unique_ptr<StreamingExperts>>> caches;
    auto expert_cache = [&](const std::string& mem, const StreamingOptions& so) {
      const std::string key = mem + "/" + std::to_string(so.cache_bytes) + "/" + std::to_string(so.withheld_bytes);
      for (auto& [k, c] : caches) {
        if (k == key) return c.get();
      }
      caches.emplace_back(key, std::make_unique<StreamingExperts>(*streamed, so));
      return caches.back().second.get();
    };
    // Drafters with weights are made once per (budget, kind) and kept across prompts and repeats,
    // as a session keeps them (their first touches of the weights are page faults).
    std::vector<std::unique_ptr<Drafter>> kept_drafters;
    auto run = [&](const std::string& mem, const Kind& kind, const std::vector<int32_t>& prompt,
                   const std::vector<int32_t>& recording, double* cache_share, DepthController* dc, size_t slot) {
      std::unique_ptr<Drafter> oracle;
      Drafter* drafter = nullptr;
      SamplerParams sp;
      sp.temp = 0;
      if (kind.base == "oracle") {
        oracle = std::make_unique<OracleDrafter>(recording, kind.acceptance, c.n_vocab, 17);
        drafter = oracle.get();
      } else if (kind.base != "none") {
        if (kept_drafters.size() <= slot) kept_drafters.resize(slot + 1);
        if (!kept_drafters[slot]) {
          DrafterOptions o;
          o.kind = kind.base;
          o.draft_path = kind.base == "draft" ? a.draft : kind.base == "dspark" ? a.dspark : "";
          o.n_threads = a.threads;
          o.n_ctx = n_ctx;
          o.sampling = sp;
          kept_drafters[slot] = make_drafter(o, *resident);
        }
        drafter = kept_drafters[slot].get();
      }
      StreamingExperts* ex = nullptr;
      const bool is_resident = mem == "resident";
      if (!is_resident) {
        StreamingOptions so;
        const std::vector<uint64_t> slot = StreamingExperts::layer_slot_bytes_for(*streamed, so.io_mode);
        const uint64_t drafter_bytes = drafter ? drafter->resident_bytes() : 0;
        const BudgetPlan plan = plan_budget(*streamed, parse_mem(mem), n_ctx, 256, slot, drafter_bytes);
        so.cache_bytes = plan.cache;
        // As les run: with load-aware depth the drafter's share is withheld, and goes in use once
        // the controller gives speculation up and the drafter is released (kept released after).
        if (drafter_bytes > 0 && !kind.fixed) {
          so.cache_bytes = plan_budget(*streamed, parse_mem(mem), n_ctx, 256, slot, 0).cache;
          so.withheld_bytes = so.cache_bytes - plan.cache;
        }
        ex = expert_cache(mem, so);
        ex->clear();  // every run starts from a cold cache
        if (cache_share) {
          const uint64_t in_use = so.cache_bytes - ex->withheld_bytes();
          *cache_share = static_cast<double>(in_use) / static_cast<double>(all_experts);
        }
      }
      Context ctx(is_resident ? *resident : *streamed, ContextParams{.n_ctx = n_ctx, .n_threads = a.threads}, ex);
      GenerateParams gp;
      gp.n_predict = a.n_gen;
      gp.sampling = sp;
      gp.stop_at_eog = false;
      gp.drafter = drafter;
      gp.depth.k_max = kind.k;
      gp.depth.adaptive = !kind.fixed;
      gp.depth_state = dc;
      if (ex && ex->withheld_bytes() > 0) {
        gp.on_drafter_released = [ex](uint64_t) { ex->release_withheld(); };
        gp.drafter_cache_share = ex->withheld_share();
      }
      Result r;
      auto bytes = [&] {
        if (!ex) return uint64_t{0};
        const auto t = ex->stats().total();
        return t.bytes_demand + t.bytes_prefetch;
      };
      uint64_t b0 = 0;
      const GenerateStats st = generate(ctx, tok, prompt, gp, [&](int32_t id, const std::string&) {
        if (r.tokens.empty()) b0 = bytes();
        r.tokens.push_back(id);
        return true;
      });
      r.gen_s = st.gen_seconds;
      r.n_after_first = st.n_generated - 1;
      r.bytes = bytes() - b0;
      r.spec = st.spec;
      if (st.spec.released_at >= 0) {
        std::printf("  %s %s: speculation given up after %d tokens of this run, drafter released (%.1f MiB)%s\n",
                    mem.c_str(), kind.label.c_str(), st.spec.released_at, st.spec.released_bytes / 1048576.0,
                    ex && st.spec.released_bytes > 0 && ex->withheld_bytes() == 0 ? ", its slots now in the expert cache" : "");
      }
      return r;
    };

    // The cost of verification: a target pass over n positions after the prompt, against a
    // single-token step, per budget (medians over prompts and repeats; streamed: a fresh cache
    // warmed by the prompt, so the pass pays the misses of the union of its positions' experts).
    if (a.pass_costs) {
      std::printf("\n| budget | t(1) ms |");
      for (int n = 2; n <= a.draft_max + 1; ++n) std::printf(" t(%d)/t(1) |", n);
      std::printf("\n|---|---|");
      for (int n = 2; n <= a.draft_max + 1; ++n) std::printf("---|");
      std::printf("\n");
      for (const std::string& mem : a.mems) {
        std::vector<std::vector<double>> t(static_cast<size_t>(a.draft_max) + 2);
        for (int rep = 0; rep < a.reps; ++rep) {
          for (const auto& prompt : prompts) {
            for (int n = 1; n <= a.draft_max + 1; ++n) {
              StreamingExperts* ex = nullptr;
              if (mem != "resident") {
                StreamingOptions so;
                so.cache_bytes = plan_budget(*streamed, parse_mem(mem), n_ctx, 256,
                                             StreamingExperts::layer_slot_bytes_for(*streamed, so.io_mode)).cache;
                ex = expert_cache(mem, so);
                ex->clear();
              }
              Context ctx(mem == "resident" ? *resident : *streamed,
                          ContextParams{.n_ctx = n_ctx, .n_threads = a.threads}, ex);
              ctx.eval(prompt, false);
              // the pass: the prompt's continuation tokens (any valid ids), all logits kept
              std::vector<int32_t> batch(prompt.begin(), prompt.begin() + n);
              const double t0 = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
              ctx.eval(batch, true);
              const double t1 = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
              t[static_cast<size_t>(n)].push_back(t1 - t0);
            }
          }
        }
        const double t1 = median(t[1]);
        std::printf("| %s | %.2f |", mem.c_str(), t1 * 1e3);
        for (int n = 2; n <= a.draft_max + 1; ++n) std::printf(" %.2f |", median(t[static_cast<size_t>(n)]) / t1);
        std::printf("\n");
      }
    }

    struct Cell {
      std::vector<double> tps;
      double tokens = 0, bytes = 0, rounds = 0, accepted = 0, drafted = 0, cache_share = -1;
      bool same = true;
      std::vector<double> chosen;
    };
    std::vector<std::vector<Cell>> cells(a.mems.size(), std::vector<Cell>(kinds.size()));
    for (size_t i = 0; i < a.mems.size() * kinds.size(); ++i) {
      const Kind& kd = kinds[i % kinds.size()];
      controllers.push_back(std::make_unique<DepthController>(DepthParams{.k_max = kd.k, .adaptive = !kd.fixed}));
    }
    // Repeat 0 is a warm-up (page faults of weights and caches, first allocations): not counted.
    for (int rep = -1; rep < a.reps; ++rep) {
      for (size_t mi = 0; mi < a.mems.size(); ++mi) {
        std::vector<double> secs(kinds.size(), 0), toks(kinds.size(), 0);
        for (const auto& prompt : prompts) {
          std::vector<int32_t> plain_tokens, recording;
          for (size_t ki = 0; ki < kinds.size(); ++ki) {
            double share = -1;
            const Result r = run(a.mems[mi], kinds[ki], prompt, recording, &share,
                                 controllers[mi * kinds.size() + ki].get(), mi * kinds.size() + ki);
            if (ki == 0) {
              plain_tokens = r.tokens;
              recording = prompt;
              recording.insert(recording.end(), r.tokens.begin(), r.tokens.end());
            }
            if (rep < 0) continue;
            Cell& cl = cells[mi][ki];
            cl.same = cl.same && r.tokens == plain_tokens;
            secs[ki] += r.gen_s;
            toks[ki] += r.n_after_first;
            cl.tokens += r.n_after_first;
            cl.bytes += static_cast<double>(r.bytes);
            cl.rounds += r.spec.rounds;
            cl.accepted += r.spec.accepted;
            cl.drafted += r.spec.drafted;
            cl.cache_share = share;
            if (cl.chosen.size() < r.spec.chosen_k.size()) cl.chosen.resize(r.spec.chosen_k.size(), 0);
            for (size_t k = 0; k < r.spec.chosen_k.size(); ++k) cl.chosen[k] += r.spec.chosen_k[k];
          }
        }
        if (rep < 0) continue;
        for (size_t ki = 0; ki < kinds.size(); ++ki) cells[mi][ki].tps.push_back(toks[ki] / secs[ki]);
        std::fprintf(stderr, "rep %d/%d, budget %s done\n", rep + 1, a.reps, a.mems[mi].c_str());
      }
    }

    std::printf("\n| budget | cache share | kind | decode tok/s | vs plain | accepted/round | tokens/pass | depth chosen (k:rounds) | MiB read/token | same tokens |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
    std::string js = "[";
    for (size_t mi = 0; mi < a.mems.size(); ++mi) {
      for (size_t ki = 0; ki < kinds.size(); ++ki) {
        const Cell& cl = cells[mi][ki];
        const double tps = median(cl.tps);
        // The ratio is the median of each repeat's ratio (the kinds of a repeat ran back to back).
        std::vector<double> ratios;
        for (size_t r = 0; r < cl.tps.size(); ++r) ratios.push_back(cl.tps[r] / cells[mi][0].tps[r]);
        const double ratio = median(ratios);
        std::string chosen;
        for (size_t k = 0; k < cl.chosen.size(); ++k) {
          if (cl.chosen[k] > 0) chosen += strfmt("%s%zu:%.0f", chosen.empty() ? "" : " ", k, cl.chosen[k] / a.reps);
        }
        const std::string share = cl.cache_share < 0 ? "all" : strfmt("%.0f%%", 100 * cl.cache_share);
        std::printf("| %s | %s | %s | %.1f | %.2fx | %s | %s | %s | %.2f | %s |\n", a.mems[mi].c_str(), share.c_str(),
                    kinds[ki].label.c_str(), tps, ratio,
                    ki ? strfmt("%.2f", cl.accepted / std::max(1.0, cl.rounds)).c_str() : "-",
                    ki ? strfmt("%.2f", cl.tokens / std::max(1.0, cl.rounds)).c_str() : "1.00",
                    ki ? chosen.c_str() : "-", cl.bytes / 1048576.0 / std::max(1.0, cl.tokens), cl.same ? "yes" : "NO");
        js += strfmt("%s{\"budget\":\"%s\",\"kind\":\"%s\",\"tps\":%.3f,\"ratio\":%.4f,\"accepted_per_round\":%.4f,"
                     "\"bytes_per_token\":%.0f,\"same\":%s}",
                     js.size() > 1 ? "," : "", a.mems[mi].c_str(), kinds[ki].label.c_str(), tps, ratio,
                     cl.accepted / std::max(1.0, cl.rounds), cl.bytes / std::max(1.0, cl.tokens), cl.same ? "true" : "false");
      }
    }
    js += "]\n";
    if (!a.json.empty()) {
      std::ofstream(a.json) << js;
    }
    bool all_same = true;
    for (const auto& row : cells) {
      for (const auto& cl : row) all_same = all_same && cl.same;
    }
    return all_same ? 0 : 3;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_spec: %s\n", e.what());
    return 1;
  }
}
