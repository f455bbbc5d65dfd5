#!/usr/bin/env bash
# Prints the skipped tests of one run, grouped by reason, from the log that tests/test_main.cpp and
# tests/server/common.sh append to ($LES_SKIP_LOG: "<category>\t<reason>\t<test>" per skip), and
# fails (exit 1) when a skip carries no allowed category: a test may skip only for a CPU feature
# (cpu), the platform or build it runs on (platform) or an optional external tool (optional);
# a missing file is a failure in the test itself.
#   scripts/skip_report.sh LOG SUITE_NAME
set -euo pipefail
log=$1
name=$2
if [ ! -s "$log" ]; then
  echo "skips ($name): none"
  exit 0
fi
total=$(wc -l <"$log")
echo "skips ($name): $total tests skipped, by reason:"
# One line per (category, reason): count, then up to three of the tests.
sort -t$'\t' -k1,1 -k2,2 -k3,3 "$log" | awk -F'\t' '
  { key = $1 "\t" $2
    if (key != prev) { if (prev != "") flush(); prev = key; cat = $1; why = $2; n = 0; names = "" }
    n++
    if (n <= 3) names = names (n > 1 ? ", " : "") $3 }
  function flush() { more = (n > 3) ? ", ..." : ""; printf("  %4d  [%s] %s  (%s%s)\n", n, cat, why, names, more) }
  END { if (prev != "") flush() }'
bad=$(awk -F'\t' '$1 != "cpu" && $1 != "platform" && $1 != "optional"' "$log" | wc -l)
if [ "$bad" -gt 0 ]; then
  echo "skips ($name): $bad tests skipped without an allowed reason (a missing file must fail, not skip):"
  awk -F'\t' '$1 != "cpu" && $1 != "platform" && $1 != "optional" { print "    " $3 ": " $2 }' "$log"
  exit 1
fi
