// Renderings of a `les bench` report: a Markdown table shaped like the published staging, JSON,
// and a PNG chart of our ratios beside the published ones (drawn by gnuplot when installed).
#pragma once

#include <string>

#include "les/bench/staged.h"

namespace les::bench {

// The Markdown table with a header line (model, budget, cache share, tokens, repeats) and the
// notes. NaN cells print as "-"; skipped rows print their reason.
std::string format_markdown(const BenchReport& r);

// One JSON object: the run's settings, one object per row (every column; null where it does not
// apply; skipped rows with "ran": false and their note), the notes and hashes_ok.
std::string format_json(const BenchReport& r);

// A number in a table cell: "-" for NaN, else printf(fmt).
std::string cell(const char* fmt, double x);

// Draws the chart (decode tok/s ratio to the baseline, ours beside the published, per row) into
// png_path with gnuplot. False with *why set when gnuplot is not installed or fails (no chart is
// written then); the caller says the chart was skipped.
bool write_chart_png(const BenchReport& r, const std::string& png_path, std::string* why);

}  // namespace les::bench
