#include "les/sched/stream_report.h"

#include <algorithm>

#include "les/util/error.h"

namespace les {

namespace {

double ratio(uint64_t a, uint64_t b) { return b ? static_cast<double>(a) / static_cast<double>(b) : 0.0; }

struct Derived {
  double hit, prepared, recall, recall_k, recall_km, recall_refined, recall_ahead2, precision;
  double mb_demand, mb_prefetch, mb_wasted;  // per token
};

Derived derive(const LayerStreamStats& l, uint64_t tokens) {
  Derived d{};
  d.hit = ratio(l.hits, l.selected);
  d.prepared = ratio(l.hits + l.in_flight, l.selected);
  d.recall = ratio(l.predicted, l.selected);
  d.recall_k = ratio(l.raw_pred_hits_k, l.selected);
  d.recall_km = ratio(l.raw_pred_hits_km, l.selected);
  d.recall_refined = ratio(l.raw_refined_hits_k, l.selected);
  d.recall_ahead2 = ratio(l.raw_ahead2_hits_k, l.ahead2_selected);
  d.precision = ratio(l.prefetch_used, l.prefetch_issued - std::min(l.prefetch_issued, l.prefetch_cancelled));
  const double t = tokens ? static_cast<double>(tokens) : 1.0;
  d.mb_demand = static_cast<double>(l.bytes_demand) / 1e6 / t;
  d.mb_prefetch = static_cast<double>(l.bytes_prefetch) / 1e6 / t;
  d.mb_wasted = static_cast<double>(l.bytes_wasted) / 1e6 / t;
  return d;
}

}  // namespace

std::string format_stream_table(const StreamStats& st, const RunSummary& run) {
  std::string s;
  if (st.slot_classes.size() > 1) {
    std::string pools;
    for (const auto& [bytes, n] : st.slot_classes) pools += strfmt("%s%d of %.2f MiB", pools.empty() ? "" : ", ", n, bytes / 1048576.0);
    s += strfmt("expert cache: %d slots (%s) | tokens %llu\n", st.n_slots, pools.c_str(),
                static_cast<unsigned long long>(st.tokens));
  } else {
    s += strfmt("expert cache: %d slots of %.2f MiB | tokens %llu\n", st.n_slots, st.slot_bytes / 1048576.0,
                static_cast<unsigned long long>(st.tokens));
  }
  s += "layer  hit%  prep%  pred-recall  raw@k  raw@k+m  refined@k  pf-prec  MB/tok dem  pf  wasted  stall-ms  compute-ms\n";
  auto row = [&](const std::string& name, const LayerStreamStats& l) {
    const Derived d = derive(l, st.tokens);
    s += strfmt("%-5s %5.1f  %5.1f  %11.3f  %5.3f  %7.3f  %9.3f  %7.3f  %10.2f %5.2f %7.2f  %8.1f  %10.1f\n", name.c_str(),
                100 * d.hit, 100 * d.prepared, d.recall, d.recall_k, d.recall_km, d.recall_refined, d.precision, d.mb_demand,
                d.mb_prefetch, d.mb_wasted, 1e3 * l.stall_s, 1e3 * l.compute_s);
  };
  for (size_t i = 0; i < st.layers.size(); ++i) row(std::to_string(i), st.layers[i]);
  row("all", st.total());
  const LayerStreamStats t = st.total();
  std::string guesses;
  for (int g = 0; g < kGuessSources; ++g) {
    if (!st.guess_issued[g]) continue;
    const std::string name = g == kGuessRefined ? std::string("refined") : g == kGuessAhead2 ? std::string("ahead2") : strfmt("#%d", g + 1);
    guesses += strfmt(" %s %.2f (%llu)", name.c_str(), ratio(st.guess_used[g], st.guess_issued[g]),
                      static_cast<unsigned long long>(st.guess_issued[g]));
  }
  if (!guesses.empty()) s += "prefetch precision by guess (position in the early guess, refined, ahead2):" + guesses + "\n";
  if (t.prefetch_throttled) {
    s += strfmt("prefetches skipped by the throttle: %llu\n", static_cast<unsigned long long>(t.prefetch_throttled));
  }
  if (t.ahead2_selected) {
    s += strfmt("two layers ahead: raw recall@k %.3f\n", ratio(t.raw_ahead2_hits_k, t.ahead2_selected));
  }
  const double io_mbs = st.io.busy_us ? static_cast<double>(st.io.bytes) / static_cast<double>(st.io.busy_us) : 0.0;
  s += strfmt("I/O: %llu reads, %.1f MB, %.0f MB/s while busy, max %u in flight, %llu retries, %llu errors",
              static_cast<unsigned long long>(st.io.syscalls), static_cast<double>(st.io.bytes) / 1e6, io_mbs,
              st.io.max_in_flight, static_cast<unsigned long long>(st.io.retries),
              static_cast<unsigned long long>(st.io.errors));
  if (!st.completions_by.empty()) s += ", completions collected by " + st.completions_by;
  s += "\n";
  if (st.registered_bytes) {
    s += strfmt("registered buffers: %.1f MiB of expert slots, %llu of the reads READ_FIXED\n", st.registered_bytes / 1048576.0,
                static_cast<unsigned long long>(st.io.fixed_reads));
  } else if (!st.register_note.empty()) {
    s += "registered buffers: none (" + st.register_note + ")\n";
  }
  s += strfmt("decode %.2f tok/s | prompt %.2f tok/s | peak RSS %.1f MiB", run.decode_tps, run.prompt_tps,
              run.peak_rss / 1048576.0);
  if (run.budget) s += strfmt(" (budget %.1f MiB)", run.budget / 1048576.0);
  s += "\n";
  return s;
}

std::string stream_stats_json(const StreamStats& st, const RunSummary& run) {
  auto obj = [&](const LayerStreamStats& l) {
    const Derived d = derive(l, st.tokens);
    return strfmt("{\"selected\": %llu, \"hits\": %llu, \"in_flight\": %llu, \"misses\": %llu, \"hit_rate\": %.4f, "
                  "\"prepared\": %.4f, \"predictor_recall\": %.4f, \"raw_recall_k\": %.4f, \"raw_recall_km\": %.4f, "
                  "\"raw_recall_refined_k\": %.4f, \"raw_recall_ahead2_k\": %.4f, "
                  "\"prefetch_issued\": %llu, \"prefetch_used\": %llu, \"prefetch_cancelled\": %llu, \"prefetch_throttled\": %llu, "
                  "\"prefetch_precision\": %.4f, \"bytes_demand\": %llu, \"bytes_prefetch\": %llu, "
                  "\"bytes_wasted\": %llu, \"mb_per_token_demand\": %.4f, \"mb_per_token_prefetch\": %.4f, "
                  "\"mb_per_token_wasted\": %.4f, \"stall_s\": %.6f, \"compute_s\": %.6f}",
                  (unsigned long long)l.selected, (unsigned long long)l.hits, (unsigned long long)l.in_flight,
                  (unsigned long long)l.misses, d.hit, d.prepared, d.recall, d.recall_k, d.recall_km, d.recall_refined,
                  d.recall_ahead2,
                  (unsigned long long)l.prefetch_issued, (unsigned long long)l.prefetch_used,
                  (unsigned long long)l.prefetch_cancelled, (unsigned long long)l.prefetch_throttled, d.precision, (unsigned long long)l.bytes_demand,
                  (unsigned long long)l.bytes_prefetch, (unsigned long long)l.bytes_wasted, d.mb_demand,
                  d.mb_prefetch, d.mb_wasted, l.stall_s, l.compute_s);
  };
  std::string s = "{\n  \"layers\": [\n";
  for (size_t i = 0; i < st.layers.size(); ++i) s += "    " + obj(st.layers[i]) + (i + 1 < st.layers.size() ? ",\n" : "\n");
  s += "  ],\n  \"total\": " + obj(st.total()) + ",\n";
  const double io_mbs = st.io.busy_us ? static_cast<double>(st.io.bytes) / static_cast<double>(st.io.busy_us) : 0.0;
  s += strfmt("  \"io\": {\"reads\": %llu, \"requests\": %llu, \"bytes\": %llu, \"busy_s\": %.6f, \"mb_per_s\": %.1f, "
              "\"max_in_flight\": %u, \"retries\": %llu, \"errors\": %llu, \"fixed_reads\": %llu, "
              "\"registered_bytes\": %llu, \"completions_by\": \"%s\"},\n",
              (unsigned long long)st.io.syscalls, (unsigned long long)st.io.requests, (unsigned long long)st.io.bytes,
              st.io.busy_us / 1e6, io_mbs, st.io.max_in_flight, (unsigned long long)st.io.retries,
              (unsigned long long)st.io.errors, (unsigned long long)st.io.fixed_reads,
              (unsigned long long)st.registered_bytes, st.completions_by.c_str());
  s += "  \"slot_classes\": [";
  for (size_t i = 0; i < st.slot_classes.size(); ++i) {
    s += strfmt("%s{\"slot_bytes\": %llu, \"slots\": %d}", i ? ", " : "",
                (unsigned long long)st.slot_classes[i].first, st.slot_classes[i].second);
  }
  s += "],\n";
  s += strfmt("  \"slots\": %d, \"slot_bytes\": %llu, \"tokens\": %llu, \"decode_tok_s\": %.3f, \"prompt_tok_s\": %.3f, "
              "\"wall_s\": %.3f, \"peak_rss_bytes\": %llu, \"budget_bytes\": %llu\n}\n",
              st.n_slots, (unsigned long long)st.slot_bytes, (unsigned long long)st.tokens, run.decode_tps,
              run.prompt_tps, run.wall_s, (unsigned long long)run.peak_rss, (unsigned long long)run.budget);
  return s;
}

}  // namespace les
