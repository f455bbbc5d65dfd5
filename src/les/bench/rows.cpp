#include "les/bench/rows.h"

#include <algorithm>
#include <sstream>

#include "les/util/error.h"

namespace les::bench {

namespace {

struct RowInfo {
  RowKind kind;
  const char* name;
  const char* label;
  double published_tps;
  double published_ratio;  // as published (rounded there)
};

// The published staging: on-demand SSD baseline 3.38 -> +lookahead 6.57 -> +load optimization
// 11.34 -> +mixed precision 17.16 -> +speculation 20.51 tok/s (1.94x, 3.36x, 5.08x, 6.07x).
constexpr RowInfo kRows[kRowKinds] = {
    {RowKind::resident, "resident", "resident", 0.0, 0.0},
    {RowKind::baseline, "baseline", "baseline", 3.38, 1.00},
    {RowKind::lookahead, "lookahead", "+lookahead", 6.57, 1.94},
    {RowKind::loadopt, "loadopt", "+load optimization", 11.34, 3.36},
    {RowKind::mixed, "mixed", "+mixed precision", 17.16, 5.08},
    {RowKind::spec, "spec", "+speculation", 20.51, 6.07},
};

const RowInfo& info(RowKind k) { return kRows[static_cast<int>(k)]; }

}  // namespace

const std::vector<RowKind>& all_rows() {
  static const std::vector<RowKind> rows = {RowKind::resident, RowKind::baseline, RowKind::lookahead,
                                            RowKind::loadopt,  RowKind::mixed,    RowKind::spec};
  return rows;
}

const char* row_name(RowKind k) { return info(k).name; }
const char* row_label(RowKind k) { return info(k).label; }
double published_tps(RowKind k) { return info(k).published_tps; }
double published_ratio(RowKind k) { return info(k).published_ratio; }

std::vector<RowKind> parse_rows(const std::string& list) {
  if (list == "all") return all_rows();
  std::vector<bool> want(kRowKinds, false);
  std::stringstream ss(list);
  bool any = false;
  for (std::string item; std::getline(ss, item, ',');) {
    item.erase(0, item.find_first_not_of(' '));
    item.erase(item.find_last_not_of(' ') + 1);
    if (item.empty()) continue;
    bool found = false;
    for (const RowInfo& r : kRows) {
      if (item == r.name) {
        want[static_cast<size_t>(r.kind)] = true;
        found = any = true;
      }
    }
    if (!found) {
      throw Error(strfmt("unknown row '%s' (rows: resident, baseline, lookahead, loadopt, mixed, spec, or all)",
                         item.c_str()));
    }
  }
  if (!any) throw Error("--rows: no rows given (rows: resident, baseline, lookahead, loadopt, mixed, spec, or all)");
  std::vector<RowKind> out;
  for (RowKind k : all_rows()) {
    if (want[static_cast<size_t>(k)]) out.push_back(k);
  }
  return out;
}

}  // namespace les::bench
