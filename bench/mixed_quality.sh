#!/usr/bin/env bash
# Size vs KL divergence on the trained model (issue 11): les's mixed-precision allocation at several
# sizes, each uniform type, and llama.cpp's recipes made by `les quantize` (Q2_K, Q3_K_M, Q4_K_M,
# Q5_K_M), all with the same importance matrix. KL divergence against the F16 model on the last
# 100,166 bytes of the validation text (512-token windows, llama-perplexity's scoring: second half
# of each window); calibration (imatrix, sensitivity) on the first 100,000 bytes.
#
#   LES_BUILD_DIR=build bench/mixed_quality.sh OUT_DIR
#
# Optional: LLAMA_BIN=DIR (llama.cpp's build/bin) measures every file with llama-perplexity too.
# Writes OUT_DIR/curve.tsv, curve.md and curve.png (gnuplot). Reuses files already in OUT_DIR.
set -euo pipefail
OUT=${1:?usage: bench/mixed_quality.sh OUT_DIR}
B=${LES_BUILD_DIR:-build}
LES=$(readlink -f "$B/les")
M=$(readlink -f "${LES_MODELS:-tests/data/trained}")
T=${THREADS:-2}
WINDOWS=${CALIB_WINDOWS:-4}
# The base model: the recorded curve used the F16 original (tiny-moe-q3m.gguf, models/README.md).
BASE=$(readlink -f "${BASE:-models/tiny-moe-q4_k_m.gguf}")
mkdir -p "$OUT"
cd "$OUT"
head -c 100000 "$M/tiny-moe-val.txt" > calib.txt
tail -c 100166 "$M/tiny-moe-val.txt" > test.txt
[ -f imatrix.gguf ] || "$LES" imatrix -m "$BASE" -f calib.txt -o imatrix.gguf -t "$T"
[ -f base.kld ] || "$LES" perplexity -m "$BASE" -f test.txt --save-logits base.kld -t "$T" >/dev/null
N_WEIGHTS=$("$LES" inspect "$BASE" --tensors | awk '/^  [a-z]/ { n = 1; for (i = 3; i <= NF; i++) if ($i ~ /^[0-9]+$/) n *= $i; else if ($i == "x") continue; else break; s += n } END { print s }')

printf 'kind\tname\tbytes\tbpw\tkld\tkld_se\tsame_top1\tllama_kld\n' > curve.tsv
measure() {  # kind name file
  local kind=$1 name=$2 file=$3
  [ -f "$name.json" ] || "$LES" perplexity -m "$file" --kl-logits base.kld -t "$T" --json "$name.json" >/dev/null 2>&1
  local bytes kld se top llama="-"
  bytes=$(stat -c %s "$file")
  read -r kld se top < <(python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print(j["kld"]["mean"], j["kld"]["mean_se"], j["same_top1"])' "$name.json")
  if [ -n "${LLAMA_BIN:-}" ]; then
    [ -s "$name.llama" ] || "$LLAMA_BIN/llama-perplexity" -m "$file" -f test.txt -c 512 -t "$T" \
      --kl-divergence-base base.kld --kl-divergence 2>&1 | awk '/^Mean    KLD:/ { print $3 }' > "$name.llama"
    llama=$(cat "$name.llama")
  fi
  printf '%s\t%s\t%s\t%.4f\t%.6f\t%.6f\t%.4f\t%s\n' "$kind" "$name" "$bytes" \
    "$(echo "$bytes * 8 / $N_WEIGHTS" | bc -l)" "$kld" "$se" "$top" "$llama" | tee -a curve.tsv
}

for t in q2_K q3_K iq4_xs iq4_nl q4_0 q4_K q5_K q6_K q8_0; do
  [ -f "uniform-$t.gguf" ] || "$LES" quantize "$BASE" "uniform-$t.gguf" "$t" --imatrix imatrix.gguf -t "$T" 2>/dev/null
  measure uniform "$t" "uniform-$t.gguf"
done
for r in Q2_K Q3_K_M Q4_K_M Q5_K_M; do
  [ -f "recipe-$r.gguf" ] || "$LES" quantize "$BASE" "recipe-$r.gguf" "$r" --imatrix imatrix.gguf -t "$T" 2>/dev/null
  measure recipe "$r" "recipe-$r.gguf"
done
# One sensitivity measurement serves every mixed size.
[ -f sensitivity.json ] || "$LES" quantize "$BASE" mixed-probe.gguf --target-bpw 4.5 --calib calib.txt \
  --imatrix imatrix.gguf --calib-windows "$WINDOWS" -t "$T" --save-sensitivity sensitivity.json --dry-run > /dev/null
for size in ${MIXED_SIZES:-24199104 27000000 30104640 34000000 38108864 43263680 48000000}; do
  [ -f "mixed-$size.gguf" ] || "$LES" quantize "$BASE" "mixed-$size.gguf" --target-size "$size" \
    --sensitivity sensitivity.json --imatrix imatrix.gguf -t "$T" > "mixed-$size.recipe.txt" 2>/dev/null
  measure mixed "mixed-$size" "mixed-$size.gguf"
done

{
  echo "| kind | file | bytes | bpw | mean KLD (les) | ± | same top-1 | mean KLD (llama.cpp) |"
  echo "|---|---|---|---|---|---|---|---|"
  tail -n +2 curve.tsv | awk -F'\t' '{ printf "| %s | %s | %s | %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5, $6, $7, $8 }'
} > curve.md
gnuplot <<'GP'
set terminal pngcairo size 900,600 noenhanced
set output 'curve.png'
set datafile separator "\t"
set logscale y
set xlabel 'bits per weight (file bytes * 8 / weights)'
set ylabel 'mean KL divergence vs F16 (nats/token)'
set title 'tiny-moe (trained qwen3moe): size vs KL divergence'
set grid
set key top right
set key autotitle columnhead
plot 'curve.tsv' using (strcol(1) eq "uniform" ? $4 : 1/0):5:2 with labels point pt 7 offset 0,1 title 'uniform type', \
     'curve.tsv' using (strcol(1) eq "recipe" ? $4 : 1/0):5:2 with labels point pt 5 lc rgb 'red' offset 0,-1 title "llama.cpp recipes (les quantize)", \
     'curve.tsv' using (strcol(1) eq "mixed" ? $4 : 1/0):5 with linespoints pt 9 lc rgb 'blue' lw 2 title 'les mixed (measured sensitivity)'
GP
echo "wrote $OUT/curve.tsv, curve.md, curve.png"
