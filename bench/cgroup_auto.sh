#!/usr/bin/env bash
# `les run` without --mem inside a memory cgroup (a container's limit) against hand-picked
# budgets in the same cgroup: for each repeat, the automatic run and then each --mem, each in a
# fresh process; prints decode tok/s and the cgroup's peak usage of each run, then medians.
# Needs root and a cgroup file system (v1 memory controller or v2).
#
#   bench/cgroup_auto.sh MODEL LIMIT "MEM1 MEM2 ..." [REPS] [N]     e.g. 2560M "1.6G 1.8G 2G 2.2G"
set -euo pipefail
cd "$(dirname "$0")/.."
LES=$(readlink -f "${LES:-./build/les}")
model=${1:?usage: bench/cgroup_auto.sh MODEL LIMIT "MEMS" [REPS] [N]}
limit=${2:?give the cgroup limit}
mems=${3:?give the hand-picked budgets}
reps=${4:-3}
n=${5:-128}
bytes=$(numfmt --from=iec "${limit%B}")
name=les-bench-$$
if [ -d /sys/fs/cgroup/memory ]; then
  cg=/sys/fs/cgroup/memory/$name; limit_f=memory.limit_in_bytes; peak_f=memory.max_usage_in_bytes
else
  cg=/sys/fs/cgroup/$name; limit_f=memory.max; peak_f=memory.peak
fi
mkdir "$cg"
trap 'rmdir "$cg" 2>/dev/null || true' EXIT
echo "$bytes" >"$cg/$limit_f"
prompt="The history of the city begins with a small settlement on the river, where traders met."
tmp=$(mktemp -d)
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
run_in_cgroup() {  # label, les run flags...: prints "label decode_tok_s peak_bytes"
  local label=$1
  shift
  rmdir "$cg" && mkdir "$cg" && echo "$bytes" >"$cg/$limit_f"  # a fresh cgroup: its peak is this run's
  sh -c "echo \$\$ > '$cg/cgroup.procs' && exec '$LES' run -m '$model' -p '$prompt' -n $n --temp 0 --ignore-eos $*" \
    2>"$tmp/err" >/dev/null || { echo "$label: les run failed:"; tail -3 "$tmp/err"; return; }
  local tps peak
  tps=$(sed -n 's/.*decode: [0-9]* tokens, \([0-9.]*\) tok\/s.*/\1/p' "$tmp/err")
  peak=$(cat "$cg/$peak_f" 2>/dev/null || echo 0)
  [ "$label" = auto ] && grep -m1 'les: memory:' "$tmp/err" | cut -c1-400 >"$tmp/why"
  echo "$label $tps $peak"
}
echo "# $(date -u) $(uname -r); model $model; memory cgroup limit $limit ($bytes bytes); les run -n $n; $reps repeats"
for r in $(seq 1 "$reps"); do
  for m in auto $mems; do
    if [ "$m" = auto ]; then line=$(run_in_cgroup auto); else line=$(run_in_cgroup "$m" --mem "$m"); fi
    echo "rep $r: $line"
    set -- $line
    echo "$2" >>"$tmp/tps-$1"
    echo "$3" >>"$tmp/peak-$1"
  done
done
cat "$tmp/why" 2>/dev/null || true
echo "| run | decode tok/s (median) | peak cgroup usage (max) | of the limit |"
echo "|---|---|---|---|"
for m in auto $mems; do
  t=$(median <"$tmp/tps-$m")
  p=$(sort -g "$tmp/peak-$m" | tail -1)
  echo "| $( [ "$m" = auto ] && echo "no --mem" || echo "--mem $m") | $t | $(numfmt --to=iec "$p") | $(awk -v p="$p" -v b="$bytes" 'BEGIN { printf "%.0f%%", 100 * p / b }') |"
done
rm -rf "$tmp"
