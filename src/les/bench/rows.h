// The rows of `les bench`: the published staging of an SSD-streaming MoE engine, one
// optimisation added per row, and the published speeds it is compared against.
//
//   resident     whole file mapped, experts in memory (compute reference; no streaming)
//   baseline     naive buffered loader, on-demand expert reads, the original GGUF
//   lookahead    + lookahead expert scheduling (same loader and file)
//   loadopt      + load optimization: the packed file (les pack), direct I/O (io_uring)
//   mixed        + mixed precision: a mixed-precision file (les quantize --target-size), packed
//   spec         + speculative decoding on top of mixed (or loadopt when mixed did not run)
#pragma once

#include <string>
#include <vector>

namespace les::bench {

enum class RowKind { resident, baseline, lookahead, loadopt, mixed, spec };
inline constexpr int kRowKinds = 6;

// All rows in staging order.
const std::vector<RowKind>& all_rows();
const char* row_name(RowKind k);   // "resident", "baseline", "lookahead", "loadopt", "mixed", "spec"
const char* row_label(RowKind k);  // "resident", "baseline", "+lookahead", "+load optimization", ...
// Published decode tok/s of the staging (0 for resident: not part of it).
double published_tps(RowKind k);
// Published ratio to the published baseline, as published (0 for resident).
double published_ratio(RowKind k);

// "baseline,lookahead,spec" -> rows in staging order (duplicates dropped); "all" -> all_rows().
// Throws les::Error naming an unknown row and listing the known ones; an empty list is an error.
std::vector<RowKind> parse_rows(const std::string& list);

}  // namespace les::bench
