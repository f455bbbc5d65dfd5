#!/usr/bin/env bash
# Runs each libFuzzer target (fuzz/*.cpp, built by scripts/test-sanitizers.sh into build-asan with
# ASan + UBSan) for a bounded time from its committed seed corpus (fuzz/corpus/<target>; new
# inputs go to build-asan/fuzz-out/<target>/corpus, the committed corpus is not modified).
# Fails on a crash, a sanitizer report, a leak, a hang (one input running over 10 s) or an input
# using over 2 GiB. Prints each target's executions per second and the coverage reached.
#   FUZZ_SECONDS   seconds per target (default 60); FUZZ_JOBS targets run at once (default 7: all,
#                  so that the run takes about FUZZ_SECONDS)
#   scripts/fuzz.sh [TARGET...]     (default: gguf pack tokenizer imatrix jinja request image)
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${LES_ASAN_BUILD:-build-asan}
SECS=${FUZZ_SECONDS:-60}
JOBS=${FUZZ_JOBS:-7}
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=(gguf pack tokenizer imatrix jinja request image)
OUT=$BUILD/fuzz-out

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

run_one() {  # target
  local t=$1 dir=$OUT/$1
  rm -rf "$dir" && mkdir -p "$dir/corpus"
  # The outer timeout catches a hang outside an input (start-up, shutdown).
  timeout $((SECS + 120)) "$BUILD/fuzz_$t" -max_total_time="$SECS" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$dir/" "$dir/corpus" "fuzz/corpus/$t" >"$dir/log" 2>&1
  echo $? >"$dir/rc"
}

for t in "${TARGETS[@]}"; do
  [ -x "$BUILD/fuzz_$t" ] || { echo "fuzz: $BUILD/fuzz_$t not built (scripts/test-sanitizers.sh asan)"; exit 1; }
done
running=0
for t in "${TARGETS[@]}"; do
  run_one "$t" &
  running=$((running + 1))
  if [ "$running" -ge "$JOBS" ]; then wait -n; running=$((running - 1)); fi
done
wait

failed=0
printf "%-10s %8s %10s %8s %14s %7s  %s\n" target seconds execs exec/s "cov/edges" ft result
for t in "${TARGETS[@]}"; do
  dir=$OUT/$t
  rc=$(cat "$dir/rc")
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$dir/log" | tail -1)
  eps=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$dir/log" | tail -1)
  last=$(grep -E '^#[0-9]+' "$dir/log" | tail -1)
  cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
  ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
  edges=$(sed -n 's/^INFO: Loaded 1 modules *(\([0-9]*\) inline.*/\1/p' "$dir/log" | head -1)
  result=ok
  if [ "$rc" != 0 ]; then result="FAILED (exit $rc)"; failed=1; fi
  printf "%-10s %8s %10s %8s %14s %7s  %s\n" "$t" "$SECS" "${execs:-?}" "${eps:-?}" "${cov:-?}/${edges:-?}" "${ft:-?}" "$result"
done
for t in "${TARGETS[@]}"; do
  dir=$OUT/$t
  if [ "$(cat "$dir/rc")" != 0 ]; then
    echo "---- fuzz_$t log (tail) ----"
    tail -60 "$dir/log"
    ls "$dir"/crash-* "$dir"/leak-* "$dir"/timeout-* "$dir"/oom-* 2>/dev/null | sed 's/^/reproducer: /'
  fi
done
exit $failed
