#!/usr/bin/env bash
# How close `les plan`'s predicted decode speed is to what `les run` then measures, at several
# budgets: for each repeat and budget (alternating), les plan --mem B (its calibration included)
# and les run --mem B -n N; prints each pair and the medians' ratio per budget.
#
#   bench/plan_accuracy.sh MODEL "MEM1 MEM2 ..." [REPS] [N] [EXTRA les run FLAGS...]
#
# Both get the same prompt (routing, and so the speed, depends on the text) and the same N: the
# prediction is for an N-token generation from a cold expert cache, as les run measures it.
set -euo pipefail
cd "$(dirname "$0")/.."
LES=${LES:-./build/les}
model=${1:?usage: bench/plan_accuracy.sh MODEL "MEM..." [REPS] [N]}
mems=${2:?give the budgets}
reps=${3:-3}
n=${4:-256}
shift $(( $# < 4 ? $# : 4 ))
prompt="The history of the city begins with a small settlement on the river, where traders met."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
echo "# $(date -u) $(uname -r) $(nproc) cpus; model $model; les run -n $n; $reps repeats"
for r in $(seq 1 "$reps"); do
  for mem in $mems; do
    "$LES" plan -m "$model" --mem "$mem" -n "$n" -p "$prompt" --json "$tmp/p.json" >/dev/null 2>&1
    pred=$(/usr/bin/python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['decode_tok_s'])" "$tmp/p.json")
    meas=$("$LES" run -m "$model" --mem "$mem" -p "$prompt" -n "$n" --temp 0 --ignore-eos "$@" 2>&1 >/dev/null |
           sed -n 's/.*decode: [0-9]* tokens, \([0-9.]*\) tok\/s.*/\1/p')
    echo "rep $r  --mem $mem  predicted $pred  measured $meas"
    echo "$pred" >>"$tmp/pred-$mem"
    echo "$meas" >>"$tmp/meas-$mem"
  done
done
echo "| --mem | predicted tok/s (median) | measured tok/s (median) | predicted / measured |"
echo "|---|---|---|---|"
for mem in $mems; do
  p=$(median <"$tmp/pred-$mem")
  m=$(median <"$tmp/meas-$mem")
  echo "| $mem | $p | $m | $(awk -v p="$p" -v m="$m" 'BEGIN { printf "%.3f", p / m }') |"
done
