// `les plan`'s two forms: a table for people and JSON for programs.
#include <cmath>

#include <nlohmann/json.hpp>

#include "les/model/kv_cache.h"
#include "les/plan/plan.h"
#include "les/util/error.h"

namespace les::plan {

namespace {

double gib(uint64_t b) { return static_cast<double>(b) / static_cast<double>(uint64_t{1} << 30); }
double mib(uint64_t b) { return static_cast<double>(b) / static_cast<double>(uint64_t{1} << 20); }

std::string size_str(uint64_t b) { return b >= (uint64_t{1} << 30) ? strfmt("%.2f GiB", gib(b)) : strfmt("%.1f MiB", mib(b)); }

std::string tps(double v) { return v >= 100 ? strfmt("%.0f", v) : v >= 10 ? strfmt("%.1f", v) : strfmt("%.2f", v); }

nlohmann::ordered_json speed_json(const SpeedAt& s) {
  return {{"decode_tok_s", s.tok_s}, {"steady_tok_s", s.steady_tok_s}, {"gen_tokens", s.gen_tokens}, {"cache_slots", s.slots}, {"misses_per_token", s.misses_per_token},
          {"mb_read_per_token", s.mb_per_token}, {"io_ms_per_token", 1e3 * s.t_io}, {"stall_ms_per_token", 1e3 * s.stall},
          {"ceiling_tok_s", s.ceiling_tok_s},
          {"bound", s.disk_bound ? "disk" : "compute"}};
}

}  // namespace

std::string plan_text(const PlanReport& r) {
  std::string s;
  s += strfmt("les plan: %s\n", r.model.c_str());
  s += strfmt("  %s, %d layers", r.arch.c_str(), r.n_layer);
  if (r.moe) s += strfmt(", %d experts (top %d)", r.n_expert, r.n_expert_used);
  s += strfmt("; %s: dense %s", size_str(r.file_bytes).c_str(), size_str(r.dense_bytes).c_str());
  if (r.moe) s += strfmt(", experts %s (%.2f bits per weight)", size_str(r.expert_bytes).c_str(), r.expert_bpw);
  s += "\n\nMemory\n";
  s += strfmt("  %s\n", r.choice.why.c_str());
  const MemoryChoice& ch = r.choice;
  if (ch.mode == MemoryMode::stream) {
    const BudgetPlan& b = r.budget;
    s += strfmt("  %-22s %s\n", "budget", size_str(b.total).c_str());
    s += strfmt("  %-22s %s\n", "dense weights", size_str(b.dense).c_str());
    s += strfmt("  %-22s %s (context %d)\n", "KV cache", size_str(b.kv).c_str(), ch.n_ctx);
    if (b.recurrent) s += strfmt("  %-22s %s\n", "recurrent state", size_str(b.recurrent).c_str());
    s += strfmt("  %-22s %s\n", "work buffers", size_str(b.work).c_str());
    s += strfmt("  %-22s %s\n", "overhead", size_str(b.overhead).c_str());
    if (b.drafter) s += strfmt("  %-22s %s\n", "drafter", size_str(b.drafter).c_str());
    s += strfmt("  %-22s %s: %llu slots, %.0f%% of the expert bytes\n", "expert cache", size_str(b.cache).c_str(),
                static_cast<unsigned long long>(b.n_slots), 100.0 * r.cache_share);
  } else {
    s += strfmt("  %-22s %s\n", "weights", size_str(r.dense_bytes + r.expert_bytes).c_str());
    s += strfmt("  %-22s %s (context %d)\n", "KV cache", size_str(ch.kv_bytes).c_str(), ch.n_ctx);
    if (r.drafter_bytes) s += strfmt("  %-22s %s\n", "drafter", size_str(r.drafter_bytes).c_str());
  }
  if (!r.kv_types.empty() && !r.choice.why.empty()) {
    s += strfmt("\nKV cache types at context %d (-ctk / -ctv; f16 is les run's default)\n", ch.n_ctx);
    for (const KvTypeRow& k : r.kv_types) {
      s += strfmt("  %-7s %10s", kv_type_name(k.type).c_str(), size_str(k.kv_bytes).c_str());
      if (ch.mode == MemoryMode::stream) {
        s += k.fits ? strfmt("   expert cache %s, %.0f%% of the expert bytes", size_str(k.cache_bytes).c_str(), 100.0 * k.cache_share)
                    : std::string("   does not fit this budget");
      }
      s += "\n";
    }
  }
  if (!r.calibrated) {
    for (const std::string& n : r.notes) s += "\n" + n + "\n";
    return s;
  }
  s += strfmt("\nSpeed (calibration: a %d-token prompt and %d decoded tokens as les run would run them, %.1f s",
              r.calib_prompt, r.calib_tokens, r.calib_seconds);
  if (ch.mode == MemoryMode::stream) {
    s += strfmt("; device probe %s, %.0f MB/s while computing, %.0f idle", r.probe_cached ? "cached" : strfmt("measured in %.1f s", r.probe_seconds).c_str(),
                r.disk.loaded_mbs, r.disk.idle_mbs);
  }
  s += ")\n";
  if (ch.mode == MemoryMode::stream) {
    s += strfmt("  decode   %8s tok/s   over %d tokens (steady state %s); bound: %s\n", tps(r.decode_tps).c_str(),
                r.gen_tokens, tps(r.steady_tps).c_str(), r.decode_bound.c_str());
    s += strfmt("                         %.1f MB of expert reads per token, %.1f ms of them not hidden; the disk's "
                "ceiling at the probe's rates %s tok/s, compute alone %s tok/s (the calibration's time not waiting)\n",
                r.decode.mb_per_token, 1e3 * r.decode.stall, tps(r.decode.ceiling_tok_s).c_str(),
                tps(r.compute_only_tps).c_str());
    s += strfmt("  prefill  %8s tok/s   bound: %s (%d-token prompt, cold expert cache: %.0f MB of expert reads)\n",
                tps(r.prefill_tps).c_str(), r.prefill_bound.c_str(), r.calib_prompt, r.prefill_mb);
    s += strfmt("  hit rate %8.2f         (%s)\n", r.hit_rate, r.routing_source.c_str());
    s += "\nWhat would raise it\n";
    if (r.compute_bound_mem > 0) {
      s += strfmt("  compute becomes the bound at --mem %s (the cache holding %.0f%% of the expert bytes)\n",
                  size_str(r.compute_bound_mem).c_str(), 100.0 * r.compute_bound_share);
    } else {
      s += "  the disk stays the bound up to a cache of every expert (this routing's first uses alone)\n";
    }
    s += strfmt("  %-12s %-12s %-12s %s\n", "--mem", "cache share", "decode tok/s", "bound");
    for (const BudgetRow& row : r.table) {
      if (!row.note.empty()) {
        s += strfmt("  %-12s %-12s %s\n", size_str(row.mem).c_str(), strfmt("%.0f%%", 100 * row.share).c_str(), row.note.c_str());
      } else {
        s += strfmt("  %-12s %-12s %-12s %s\n", size_str(row.mem).c_str(), strfmt("%.0f%%", 100 * row.share).c_str(),
                    tps(row.at.tok_s).c_str(), row.at.disk_bound ? "disk" : "compute");
      }
    }
    s += "\nFile type\n";
    if (r.mixed_bpw > 0) {
      s += strfmt("  a mixed-precision file with experts at %.2f bits per weight (this file: %.2f), same budget: %s tok/s "
                  "(%.2fx)\n  made by: les quantize %s OUT.gguf --target-bpw %.2f --calib TEXT\n",
                  r.mixed_bpw, r.expert_bpw, tps(r.mixed.tok_s).c_str(), r.mixed.tok_s / std::max(1e-9, r.decode_tps),
                  r.model.c_str(), r.mixed_bpw);
    } else {
      s += strfmt("  the experts are at %.2f bits per weight already\n", r.expert_bpw);
    }
  } else {
    s += strfmt("  decode   %8s tok/s   bound: compute (the whole model resident; measured)\n", tps(r.decode_tps).c_str());
    s += strfmt("  prefill  %8s tok/s   (%d-token prompt)\n", tps(r.prefill_tps).c_str(), r.calib_prompt);
  }
  for (const std::string& n : r.notes) s += "\nnote: " + n + "\n";
  return s;
}

namespace plan_report_detail {
nlohmann::json kv_types_json(const PlanReport& r) {
  nlohmann::json a = nlohmann::json::array();
  for (const KvTypeRow& k : r.kv_types) {
    a.push_back({{"type", kv_type_name(k.type)}, {"kv_bytes", k.kv_bytes}, {"fits", k.fits},
                 {"expert_cache_bytes", k.cache_bytes}, {"expert_cache_share", k.cache_share}});
  }
  return a;
}
}  // namespace plan_report_detail

std::string plan_json(const PlanReport& r) {
  using plan_report_detail::kv_types_json;
  using nlohmann::ordered_json;
  ordered_json j;
  j["model"] = r.model;
  j["decode_tok_s"] = r.calibrated ? ordered_json(r.decode_tps) : ordered_json(nullptr);
  j["decode_steady_tok_s"] = r.calibrated ? ordered_json(r.steady_tps) : ordered_json(nullptr);
  j["gen_tokens"] = r.gen_tokens;
  j["prefill_tok_s"] = r.calibrated ? ordered_json(r.prefill_tps) : ordered_json(nullptr);
  j["decode_bound"] = r.decode_bound;
  j["prefill_bound"] = r.prefill_bound;
  j["mode"] = memory_mode_name(r.choice.mode);
  j["why"] = r.choice.why;
  j["file"] = {{"arch", r.arch}, {"layers", r.n_layer}, {"experts", r.n_expert}, {"experts_used", r.n_expert_used},
               {"bytes", r.file_bytes}, {"dense_bytes", r.dense_bytes}, {"expert_bytes", r.expert_bytes},
               {"expert_bits_per_weight", r.expert_bpw}};
  const BudgetPlan& b = r.budget;
  j["memory"] = {{"budget", b.total},     {"automatic", r.choice.budget_automatic}, {"dense", b.dense},
                 {"kv_cache", r.choice.mode == MemoryMode::stream ? b.kv : r.choice.kv_bytes},
                 {"context", r.choice.n_ctx}, {"kv_types", kv_types_json(r)}, {"recurrent", b.recurrent}, {"work", b.work}, {"overhead", b.overhead},
                 {"drafter", r.drafter_bytes}, {"expert_cache", b.cache}, {"expert_slots", b.n_slots},
                 {"cache_share", r.cache_share}, {"available", r.choice.available == UINT64_MAX ? ordered_json(nullptr) : ordered_json(r.choice.available)}};
  if (r.calibrated) {
    j["calibration"] = {{"seconds", r.calib_seconds}, {"prompt_tokens", r.calib_prompt}, {"decoded_tokens", r.calib_tokens},
                        {"measured_decode_tok_s", r.measured_decode_tps}, {"measured_prefill_tok_s", r.measured_prefill_tps},
                        {"prefill_mb_read", r.prefill_mb},
                        {"probe_cached", r.probe_cached}, {"probe_seconds", r.probe_seconds},
                        {"disk_mb_s_loaded", r.disk.loaded_mbs}, {"disk_mb_s_idle", r.disk.idle_mbs}};
    if (r.choice.mode == MemoryMode::stream) {
      j["at_budget"] = speed_json(r.decode);
      j["compute_only_tok_s"] = r.compute_only_tps;
      j["hit_rate"] = r.hit_rate;
      j["routing"] = r.routing_source;
      j["compute_bound_mem"] = r.compute_bound_mem ? ordered_json(r.compute_bound_mem) : ordered_json(nullptr);
      j["compute_bound_cache_share"] = r.compute_bound_share;
      ordered_json rows = ordered_json::array();
      for (const BudgetRow& row : r.table) {
        ordered_json x = {{"cache_share", row.share}, {"mem", row.mem}};
        if (row.note.empty()) x["prediction"] = speed_json(row.at);
        else x["error"] = row.note;
        rows.push_back(x);
      }
      j["budgets"] = rows;
      if (r.mixed_bpw > 0) j["mixed_precision"] = {{"expert_bits_per_weight", r.mixed_bpw}, {"prediction", speed_json(r.mixed)}};
    }
  }
  j["notes"] = r.notes;
  return j.dump(1) + "\n";
}

}  // namespace les::plan
