#include <cmath>

#include "les/bench/report.h"
#include "les/util/error.h"
#include "les/util/hash.h"

namespace les::bench {

std::string cell(const char* fmt, double x) {
  if (std::isnan(x)) return "-";
  return strfmt(fmt, x);
}

std::string format_markdown(const BenchReport& r) {
  std::string s;
  s += strfmt("les bench: %s, --mem %.1f MiB (the baseline's expert cache holds %.0f%% of the experts), -t %d, "
              "%d prompt + %d generated tokens, %d repeats after a warm-up, medians\n\n",
              r.model.c_str(), static_cast<double>(r.mem) / 1048576.0, 100 * r.cache_share, r.threads, r.n_prompt,
              r.n_gen, r.reps);
  if (!r.command.empty()) s += "`" + r.command + "`\n\n";
  s += "| row | decode tok/s | vs baseline | published | vs row before | prefill tok/s | hit | prepared | MiB/token "
       "| disk MB/s busy | stall | peak RSS MiB | load s | TTFT s | ceiling tok/s | of ceiling | routing oracle tok/s "
       "| of oracle | cache | logits hash |\n";
  s += "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (const RowResult& x : r.rows) {
    const double pub = published_tps(x.kind);
    const std::string published =
        pub > 0 ? strfmt("%.2f (%.2fx)", pub, published_ratio(x.kind)) : std::string("-");
    if (!x.ran) {
      s += strfmt("| %s | %s | | %s | | | | | | | | | | | | | | | | |\n", row_label(x.kind), x.note.c_str(),
                  published.c_str());
      continue;
    }
    s += strfmt("| %s | **%s** | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s "
                "| %s |\n",
                row_label(x.kind), cell("%.2f", x.decode_tps).c_str(), cell("%.2fx", x.vs_baseline).c_str(),
                published.c_str(), cell("%.2fx", x.vs_prev).c_str(), cell("%.1f", x.prefill_tps).c_str(),
                cell("%.1f%%", 100 * x.hit).c_str(), cell("%.1f%%", 100 * x.prepared).c_str(),
                cell("%.2f", x.mib_per_token).c_str(), cell("%.0f", x.disk_busy_mbs).c_str(),
                cell("%.1f%%", x.stall_pct).c_str(), cell("%.0f", x.peak_rss_mib).c_str(),
                cell("%.2f", x.load_s).c_str(), cell("%.2f", x.ttft_s).c_str(), cell("%.1f", x.ceiling_tps).c_str(),
                cell("%.0f%%", 100 * x.of_ceiling).c_str(), cell("%.2f", x.oracle_tps).c_str(),
                cell("%.0f%%", 100 * x.of_oracle).c_str(), cell("%.0f%%", 100 * x.cache_share).c_str(),
                hex64(x.hash).c_str());
  }
  s += "\n";
  for (const RowResult& x : r.rows) {
    if (!x.ran) continue;
    const std::string spec =
        std::isnan(x.accepted_per_round)
            ? std::string()
            : strfmt("; per verification %.2f draft tokens proposed, %.2f kept (acceptance %s)%s", x.drafted_per_round,
                     x.accepted_per_round, cell("%.0f%%", 100 * x.acceptance).c_str(),
                     x.gave_up ? strfmt("; speculation given up (drafter freed) in %d of %zu runs, at token %.0f",
                                        x.gave_up, x.decode_per_rep.size(), x.gave_up_at)
                                     .c_str()
                               : "");
    s += strfmt("- %s: %s%s%s%s\n", row_label(x.kind), x.how.c_str(), x.note.empty() ? "" : "; ", x.note.c_str(),
                spec.c_str());
  }
  // "N MB/s" while the cores compute, and the idle figure beside it where the probe has one.
  auto mbs = [](const storage::DiskRates& d) {
    return d.idle_mbs > d.loaded_mbs ? strfmt("%.0f (idle cores %.0f) MB/s", d.loaded_mbs, d.idle_mbs)
                                     : strfmt("%.0f MB/s", d.loaded_mbs);
  };
  s += strfmt("- disk (expert reads, direct I/O, while every core computes): %s original",
              r.disk_original.loaded_mbs > 0 ? mbs(r.disk_original).c_str() : "- MB/s");
  if (r.disk_packed.loaded_mbs > 0) s += strfmt(", %s packed", mbs(r.disk_packed).c_str());
  if (r.disk_mixed.loaded_mbs > 0) s += strfmt(", %s mixed", mbs(r.disk_mixed).c_str());
  if (r.disk_original_naive.loaded_mbs > 0) {
    s += strfmt("; through the naive buffered loader %s original (the baseline and +lookahead rows' ceiling)",
                mbs(r.disk_original_naive).c_str());
  }
  s += "\n";
  for (const std::string& n : r.notes) s += "- " + n + "\n";
  s += r.hashes_ok ? "- logits hashes: equal wherever outputs must be equal\n"
                   : "- **LOGITS HASH MISMATCH**: " + r.hash_problem + "\n";
  s += strfmt("- wall time %.1f s\n", r.wall_s);
  return s;
}

}  // namespace les::bench
