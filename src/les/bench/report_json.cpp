#include <cmath>

#include "les/bench/report.h"
#include "les/util/error.h"
#include "les/util/hash.h"

namespace les::bench {

namespace {

std::string num(double x) {
  if (!std::isfinite(x)) return "null";
  return strfmt("%.10g", x);
}

std::string str(const std::string& v) {
  std::string s = "\"";
  for (const char ch : v) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      s += '\\';
      s += ch;
    } else if (c < 0x20) {
      s += strfmt("\\u%04x", c);
    } else {
      s += ch;
    }
  }
  return s + "\"";
}

}  // namespace

std::string format_json(const BenchReport& r) {
  std::string s = "{\n";
  s += "  \"model\": " + str(r.model) + ",\n";
  s += "  \"command\": " + str(r.command) + ",\n";
  s += strfmt("  \"mem_bytes\": %llu,\n", static_cast<unsigned long long>(r.mem));
  s += "  \"cache_share\": " + num(r.cache_share) + ",\n";
  s += strfmt("  \"threads\": %d,\n  \"prompt_tokens\": %d,\n  \"generated_tokens\": %d,\n  \"reps\": %d,\n", r.threads,
              r.n_prompt, r.n_gen, r.reps);
  // {"original": .., "packed": .., "mixed": .., "original_naive": ..} of one of the two rates.
  auto files = [&](double storage::DiskRates::*rate) {
    auto v = [&](const storage::DiskRates& d) { return num(d.*rate > 0 ? d.*rate : NAN); };
    return "{\"original\": " + v(r.disk_original) + ", \"packed\": " + v(r.disk_packed) + ", \"mixed\": " +
           v(r.disk_mixed) + ", \"original_naive\": " + v(r.disk_original_naive) + "}";
  };
  s += "  \"disk_mb_s\": " + files(&storage::DiskRates::loaded_mbs) + ",\n";
  s += "  \"idle_disk_mb_s\": " + files(&storage::DiskRates::idle_mbs) + ",\n";
  s += "  \"compute_ms_per_token\": " + num(r.compute_ms_per_token) + ",\n";
  s += "  \"compute_ms_per_token_mixed\": " + num(r.compute_ms_per_token_mixed) + ",\n";
  s += "  \"compute_source\": " + str(r.compute_source) + ",\n";
  s += "  \"rows\": [\n";
  for (size_t i = 0; i < r.rows.size(); ++i) {
    const RowResult& x = r.rows[i];
    s += "    {\"name\": " + str(row_name(x.kind)) + ", \"label\": " + str(row_label(x.kind)) +
         ", \"ran\": " + (x.ran ? "true" : "false") + ", \"note\": " + str(x.note) + ", \"how\": " + str(x.how) +
         ", \"file\": " + str(x.file);
    s += ", \"published_tps\": " + num(published_tps(x.kind) > 0 ? published_tps(x.kind) : NAN) +
         ", \"published_ratio\": " + num(published_ratio(x.kind) > 0 ? published_ratio(x.kind) : NAN);
    if (x.ran) {
      s += ", \"decode_tps\": " + num(x.decode_tps) + ", \"prefill_tps\": " + num(x.prefill_tps) +
           ", \"vs_baseline\": " + num(x.vs_baseline) + ", \"vs_prev\": " + num(x.vs_prev) +
           ", \"prev\": " + str(x.prev) + ", \"hit\": " + num(x.hit) + ", \"prepared\": " + num(x.prepared) +
           ", \"mib_per_token\": " + num(x.mib_per_token) + ", \"used_mb_per_token\": " + num(x.used_mb_per_token) +
           ", \"disk_busy_mb_s\": " + num(x.disk_busy_mbs) + ", \"stall_pct\": " + num(x.stall_pct) +
           ", \"peak_rss_mib\": " + num(x.peak_rss_mib) + ", \"load_s\": " + num(x.load_s) +
           ", \"ttft_s\": " + num(x.ttft_s) + ", \"ceiling_tps\": " + num(x.ceiling_tps) +
           ", \"of_ceiling\": " + num(x.of_ceiling) + ", \"oracle_tps\": " + num(x.oracle_tps) +
           ", \"of_oracle\": " + num(x.of_oracle) + ", \"cache_share\": " + num(x.cache_share) +
           ", \"drafted_per_round\": " + num(x.drafted_per_round) +
           ", \"accepted_per_round\": " + num(x.accepted_per_round) + ", \"acceptance\": " + num(x.acceptance) +
           ", \"gave_up_runs\": " + strfmt("%d", x.gave_up) + ", \"gave_up_at\": " + num(x.gave_up_at) + ", \"logits_hash\": " + str(hex64(x.hash)) +
           ", \"hash_group\": " + strfmt("%d", x.hash_group) + ", \"decode_tps_per_rep\": [";
      for (size_t k = 0; k < x.decode_per_rep.size(); ++k) s += (k ? ", " : "") + num(x.decode_per_rep[k]);
      s += "]";
    }
    s += i + 1 < r.rows.size() ? "},\n" : "}\n";
  }
  s += "  ],\n  \"notes\": [";
  for (size_t i = 0; i < r.notes.size(); ++i) s += (i ? ", " : "") + str(r.notes[i]);
  s += "],\n";
  s += std::string("  \"hashes_ok\": ") + (r.hashes_ok ? "true" : "false") + ",\n";
  s += "  \"hash_problem\": " + str(r.hash_problem) + ",\n";
  s += "  \"wall_s\": " + num(r.wall_s) + "\n}\n";
  return s;
}

}  // namespace les::bench
