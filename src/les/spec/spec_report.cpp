#include "les/spec/spec_report.h"

#include <algorithm>

#include "les/util/error.h"

namespace les {

std::string format_spec_stats(const GenerateStats& st, uint64_t bytes_read) {
  const SpecStats& s = st.spec;
  std::string o = strfmt("speculation: %d rounds, %d drafted, %d accepted (%.1f%%), %.2f accepted per round, "
                         "%.2f tokens per target pass\n",
                         s.rounds, s.drafted, s.accepted, s.drafted ? 100.0 * s.accepted / s.drafted : 0.0,
                         s.mean_accepted(), s.rounds ? static_cast<double>(st.n_generated - 1) / s.rounds : 0.0);
  o += "  acceptance by position:";
  for (size_t i = 0; i < s.drafted_at.size(); ++i) {
    if (!s.drafted_at[i]) continue;
    o += strfmt(" %zu:%.2f(%d)", i + 1, static_cast<double>(s.accepted_at[i]) / s.drafted_at[i], s.drafted_at[i]);
  }
  o += "\n  depth chosen (k:rounds):";
  for (size_t k = 0; k < s.chosen_k.size(); ++k) {
    if (s.chosen_k[k]) o += strfmt(" %zu:%d", k, s.chosen_k[k]);
  }
  o += strfmt("\n  time: drafting %.3f s, verification %.3f s", s.draft_seconds, s.verify_seconds);
  if (s.released_at >= 0) {
    o += strfmt("\n  speculation given up after %d tokens (plain steps kept winning): drafter released, %.1f MiB "
                "freed", s.released_at, s.released_bytes / 1048576.0);
  }
  if (bytes_read) {
    auto per = [](uint64_t b, int t) { return t > 0 ? static_cast<double>(b) / 1048576.0 / t : 0.0; };
    o += strfmt("\n  expert bytes read per generated token: %.2f MiB (plain steps %.2f MiB over %d tokens, "
                "speculative rounds %.2f MiB over %d tokens)",
                per(bytes_read, std::max(1, st.n_generated - 1)), per(s.plain_bytes, s.plain_tokens), s.plain_tokens,
                per(s.spec_bytes, s.spec_tokens), s.spec_tokens);
  }
  o += "\n";
  return o;
}

}  // namespace les
