#!/usr/bin/env bash
# Where the decoding thread's kernel time goes, with and without registered buffers (issue 17,
# docs/io.md "Registered buffers"): les run under perf (cpu-clock samples, which work in VMs without
# hardware counters), registered and not alternating, then each run's kernel samples of the
# decoding thread grouped by bench/kernel_time_groups.py.
# usage: bench/regbuf_profile.sh MODEL MEM N_TOKENS REPS DELAY_MS OUTDIR
#   DELAY_MS: perf starts sampling this long after les starts (past the load and prompt).
set -euo pipefail
[ $# -eq 6 ] || { sed -n 2,8p "$0"; exit 2; }
M=$1 MEM=$2 N=$3 REPS=$4 DELAY=$5 OUT=$6
HERE=$(cd "$(dirname "$0")" && pwd)
LES=${LES:-$HERE/../build/les}
command -v perf >/dev/null || { echo "regbuf_profile: perf not found (apt install linux-perf)"; exit 1; }
mkdir -p "$OUT"
for r in $(seq 1 "$REPS"); do
  for mode in reg noreg; do
    extra=()
    [ "$mode" = noreg ] && extra=(--no-register-buffers)
    perf record -q -e cpu-clock -F 1999 -g -D "$DELAY" -o "$OUT/$mode.$r.data" -- \
      "$LES" run -m "$M" --mem "$MEM" -n "$N" -t 2 --temp 0 --ignore-eos --no-display-prompt \
      -p "The history of the city begins with" --stats "${extra[@]}" >/dev/null 2>"$OUT/$mode.$r.stats"
    # The decoding thread is the process's main thread: the first (busiest) pid of the report.
    main=$(perf report -i "$OUT/$mode.$r.data" --stdio --no-children --sort pid -g none 2>/dev/null |
           grep -E '^ +[0-9.]+%' | head -1 | awk '{print $2}' | cut -d: -f1)
    echo "== $mode $r: $(grep -E 'decode:' "$OUT/$mode.$r.stats" | sed 's/.*decode: //')"
    grep -E 'CPU per decoded' "$OUT/$mode.$r.stats" || true
    perf report -i "$OUT/$mode.$r.data" --stdio -n --no-children --tid "$main" --dsos '[kernel.kallsyms]' \
      --sort sym -g none 2>/dev/null | /usr/bin/python3 "$HERE/kernel_time_groups.py"
  done
done
