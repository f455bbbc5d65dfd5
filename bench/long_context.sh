#!/usr/bin/env bash
# Long-context decode (issue 40's target): les and llama.cpp decoding the 30B-A3B shape (16 layers,
# resident) with D positions already in the KV cache, for each KV type, same threads, flash attention
# on in llama.cpp. Both engines fill the cache synthetically (a real prefill of a few hundred
# positions, their K/V rows repeated up to D: a decode step's cost depends on D, not on what the cache
# holds), then time N decode steps at positions D, D+1, ...
#
#   bench/long_context.sh [MODEL=/work/bench/q3-30b-16l-q4k.gguf]
#     TYPES="f16 q8_0"      KV types (-ctk = -ctv)
#     DEPTHS="4096 32768"   depths D
#     N=16                  decode steps per run (after as many untimed warm-up steps)
#     ROUNDS=3              rounds; each round runs each engine once, the order alternating between
#                           rounds, so that both sample a shared machine's load alike; medians over rounds
#     REPS=1                timed repeats inside one run (the run reports their median)
#     THREADS=2  PREFILL=256 (llama.cpp's real positions before the synthetic fill)
#     ENGINES="llamacpp les"  which engines to run (one alone gives a one-sided table)
#     LES_BENCH=build-lead/bench_resident   les's bench (--depth/--ctk/--ctv/--no-llamacpp/--json)
#     DEPTH_BENCH=build-depth/depth_bench   llama.cpp's (tools/llamacpp-depth/build.sh builds it)
#     WARMUP=2      llama.cpp's untimed decode steps before the timed ones (les's bench warms up itself)
#     BUSY_MAX=0.3  LOAD_WAIT=600   before each run, wait up to LOAD_WAIT s until the CPUs busy over
#                                   3 s (other processes) drop under BUSY_MAX; that figure and the
#                                   1-minute load average are recorded either way, and the CPUs other
#                                   processes used during the run (all busy CPU time minus the run's)
#     QUIET_MAX=0.2 the "quiet repeats" column: the median of llama.cpp's timed repeats during which
#                   other processes used under QUIET_MAX CPUs (depth_bench measures it per repeat)
#     JSONL=FILE    also append every run's JSON line there
# Output: progress on stderr; a Markdown table on stdout (KV type, depth, llama.cpp tok/s, les tok/s,
# ratio les/llama.cpp, the per-round values, the other processes' CPU use and the load average seen).
# One engine process at a time: the model (6 GB) is never loaded twice.
set -euo pipefail
cd "$(dirname "$0")/.."

MODEL=${1:-/work/bench/q3-30b-16l-q4k.gguf}
TYPES=${TYPES:-"f16 q8_0"}
DEPTHS=${DEPTHS:-"4096 32768"}
N=${N:-16}
ROUNDS=${ROUNDS:-3}
REPS=${REPS:-1}
THREADS=${THREADS:-2}
PREFILL=${PREFILL:-256}
ENGINES=${ENGINES:-"llamacpp les"}
LES_BENCH=${LES_BENCH:-build-lead/bench_resident}
DEPTH_BENCH=${DEPTH_BENCH:-build-depth/depth_bench}
BUSY_MAX=${BUSY_MAX:-0.3}
WARMUP=${WARMUP:-2}
LOAD_WAIT=${LOAD_WAIT:-600}
JSONL=${JSONL:-}
QUIET_MAX=${QUIET_MAX:-0.2}

die() { echo "long_context: $*" >&2; exit 1; }
say() { echo "long_context: $*" >&2; }

[ -f "$MODEL" ] || die "no such model file: $MODEL"
run_llama=0 run_les=0
for e in $ENGINES; do
  case $e in
    llamacpp) run_llama=1 ;;
    les) run_les=1 ;;
    *) die "ENGINES: unknown engine '$e' (llamacpp, les)" ;;
  esac
done
[ $((run_llama + run_les)) -gt 0 ] || die "ENGINES is empty"
if [ $run_llama = 1 ]; then
  [ -x "$DEPTH_BENCH" ] || die "llama.cpp's depth bench not found at $DEPTH_BENCH: build it with tools/llamacpp-depth/build.sh (or set DEPTH_BENCH), or run ENGINES=les"
fi
if [ $run_les = 1 ]; then
  [ -x "$LES_BENCH" ] || die "les's bench not found at $LES_BENCH: build bench_resident (cmake --build BUILD --target bench_resident) and set LES_BENCH, or run ENGINES=llamacpp"
  for f in --depth --ctk --ctv; do
    grep -aq -- "$f" "$LES_BENCH" || die "$LES_BENCH has no $f option (an older bench_resident?)"
  done
fi
command -v python3 >/dev/null || die "python3 is needed to read the JSON results"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

load1() { cut -d' ' -f1 /proc/loadavg; }
# CPUs busy over the last 3 s (from /proc/stat): what the other users of the machine take now. The
# 1-minute load average lags (it still counts the previous run of this script for a minute).
busy_cpus() {
  local a b
  a=$(head -1 /proc/stat)
  sleep 3
  b=$(head -1 /proc/stat)
  python3 -c "
import sys
a=[int(x) for x in sys.argv[1].split()[1:]]; b=[int(x) for x in sys.argv[2].split()[1:]]
d=[y-x for x,y in zip(a,b)]; tot=sum(d); idle=d[3]+d[4]
import os; print('%.2f' % (os.cpu_count()*(tot-idle)/tot if tot else 0))" "$a" "$b"
}
wait_quiet() {
  local waited=0 busy
  while :; do
    busy=$(busy_cpus)
    python3 -c "import sys; sys.exit(0 if float('$busy') < float('$BUSY_MAX') else 1)" && break
    if [ "$waited" -ge "$LOAD_WAIT" ]; then
      say "$busy CPUs busy (>= $BUSY_MAX) after ${LOAD_WAIT}s of waiting: running anyway"
      break
    fi
    sleep 7
    waited=$((waited + 10))
  done
  last_busy=$busy
}

# Other processes' CPUs during a run: all CPUs' busy seconds (/proc/stat) minus the run's own
# (bash's `times` for children), over the wall time.
busy_s() { python3 -c "
import os
v=[int(x) for x in open('/proc/stat').readline().split()[1:]]
print((sum(v)-v[3]-v[4])/os.sysconf('SC_CLK_TCK'))"; }
# (times runs in this shell, not in a pipeline's subshell, which would have no children yet)
children_s() { times >"$tmp/times"; tail -1 "$tmp/times" | python3 -c "
import sys,re
t=0
for m,s in re.findall(r'(\d+)m([\d.]+)s', sys.stdin.read()): t+=60*int(m)+float(s)
print(t)"; }
# timed_run VAR CMD...: runs CMD (its stdout into VAR), sets run_others to the other processes' CPUs.
timed_run() {
  local __var=$1 b0 c0 t0 b1 c1 t1 __out
  shift
  b0=$(busy_s); children_s >"$tmp/c0"; t0=$(date +%s.%N)
  __out=$("$@")
  t1=$(date +%s.%N); children_s >"$tmp/c1"; b1=$(busy_s)
  c0=$(cat "$tmp/c0"); c1=$(cat "$tmp/c1")
  run_others=$(python3 -c "print('%.2f' % max(0.0, (($b1 - $b0) - ($c1 - $c0)) / ($t1 - $t0)))")
  printf -v "$__var" '%s' "$__out"
}

# json_get FILE KEY: a number from a one-object JSON file.
json_get() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$1" "$2"; }
fmt() { python3 -c "import sys; print(' '.join('%.2f' % float(x) for x in sys.argv[1:]) or '-')" "$@"; }
median() { python3 -c "import statistics,sys; v=[float(x) for x in sys.argv[1:]]; print('%.3f' % statistics.median(v) if v else '-')" "$@"; }

# run_llama T D -> prints tok/s
run_llama_once() {
  local t=$1 d=$2 out=$tmp/llama.json
  rm -f "$out"
  "$DEPTH_BENCH" -m "$MODEL" -t "$THREADS" --depth "$d" -n "$N" --ctk "$t" --ctv "$t" --reps "$REPS" \
    --warmup "$WARMUP" --prefill "$PREFILL" --json "$out" >"$tmp/llama.log" 2>&1 || {
    cat "$tmp/llama.log" >&2
    die "depth_bench failed (KV $t, depth $d)"
  }
  [ -z "$JSONL" ] || cat "$out" >>"$JSONL"
  cat "$out" >>"$tmp/llama_${t}_${d}.jsonl"
  json_get "$out" decode_tok_s
}

run_les_once() {
  local t=$1 d=$2 out=$tmp/les.json
  rm -f "$out"
  "$LES_BENCH" -m "$MODEL" -t "$THREADS" --depth "$d" -n "$N" --ctk "$t" --ctv "$t" --reps "$REPS" \
    --no-llamacpp --json "$out" >"$tmp/les.log" 2>&1 || {
    cat "$tmp/les.log" >&2
    die "bench_resident failed (KV $t, depth $d)"
  }
  [ -f "$out" ] || die "bench_resident wrote no JSON (KV $t, depth $d)"
  [ -z "$JSONL" ] || { cat "$out" | python3 -c "import json,sys; print(json.dumps(json.load(sys.stdin)))" >>"$JSONL"; }
  json_get "$out" les_decode_tok_s
}

rows=()
for t in $TYPES; do
  for d in $DEPTHS; do
    ll=() ls=() loads=()
    for r in $(seq 1 "$ROUNDS"); do
      order="llamacpp les"
      [ $((r % 2)) = 0 ] && order="les llamacpp"
      for e in $order; do
        if [ $e = llamacpp ] && [ $run_llama = 1 ]; then
          wait_quiet
          loads+=("$last_busy/$(load1)")
          timed_run v run_llama_once "$t" "$d"
          ll+=("$v")
          loads[-1]+="/$run_others"
          say "KV $t depth $d round $r: llama.cpp $v tok/s (busy CPUs/load ${loads[-1]})"
        elif [ $e = les ] && [ $run_les = 1 ]; then
          wait_quiet
          loads+=("$last_busy/$(load1)")
          timed_run v run_les_once "$t" "$d"
          ls+=("$v")
          loads[-1]+="/$run_others"
          say "KV $t depth $d round $r: les $v tok/s (busy CPUs/load ${loads[-1]})"
        fi
      done
    done
    lm=$(median "${ll[@]}")
    # llama.cpp's repeats during which other processes kept under QUIET_MAX CPUs busy (depth_bench
    # measures that per repeat): its speed on a quiet machine, when the shared one allows it.
    lq=-
    if [ $run_llama = 1 ]; then
      lq=$(python3 -c "
import json,statistics,sys
v=[t for l in open(sys.argv[1]) for j in [json.loads(l)] for t,o in zip(j['decode_tok_s_reps'], j['others_cpus_reps']) if o < float(sys.argv[2])]
print('%.3f (%d)' % (statistics.median(v), len(v)) if v else '- (0)')" "$tmp/llama_${t}_${d}.jsonl" "$QUIET_MAX")
    fi
    lsm=$(median "${ls[@]}")
    ratio=-
    if [ "$lm" != - ] && [ "$lsm" != - ]; then ratio=$(python3 -c "print('%.2fx' % ($lsm / $lm))"); fi
    rows+=("| $t | $d | $lm | $lsm | $ratio | $lq | $(fmt "${ll[@]}") | $(fmt "${ls[@]}") | ${loads[*]} |")
  done
done

echo "Decode at depth: $MODEL, $THREADS threads, $N steps per run (llama.cpp: $WARMUP warm-up), $ROUNDS rounds, $REPS timed repeat(s) per run; $(date -u)"
echo
echo "| KV type | depth | llama.cpp tok/s | les tok/s | les/llama.cpp | llama.cpp quiet repeats: median (count) | llama.cpp per round | les per round | other processes' CPUs before / load (1 min) / other CPUs during, each run |"
echo "|---|---:|---:|---:|---:|---:|---|---|---|"
printf '%s\n' "${rows[@]}"
