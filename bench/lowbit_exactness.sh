#!/usr/bin/env bash
# Decoding exactness of les on llama-quantize's low-bit files (issue 38): for each type, llama.cpp's
# own log-probabilities on its file (llama-perplexity --kl-divergence-base) against les's on the same
# file (les perplexity --kl-logits): mean KLD and same top-1 over the evaluation text.
#
#   bench/lowbit_exactness.sh MODEL_F16.gguf VAL_TEXT WORKDIR [TYPE...]
#
# MODEL_F16: the trained model (models/README.md: tiny-moe-q3m.gguf, F16 matrices). VAL_TEXT: its
# validation text; the first 100,000 bytes calibrate the importance matrix (llama-imatrix
# --process-output), the last 100,166 bytes are evaluated in windows of 512 tokens. Needs llama.cpp's
# llama-imatrix, llama-quantize and llama-perplexity in $LLAMA_BIN (default /work/llama.cpp/build/bin)
# and les in $LES (default ./build/les). Each type's file is llama-quantize --pure (every matrix the
# type; rows of 128 fall back as llama.cpp does, to IQ4_NL or Q5_0/Q8_0), token_embd Q8_0 for the
# IQ1/IQ2 types (no importance for a lookup table; IQ2_S through llama.cpp's IQ2_M ftype, whose default
# type it is); NVFP4, which llama-quantize has no ftype for, by
# --tensor-type on every matrix over Q8_0. Results: WORKDIR/exactness.md.
set -euo pipefail
model=$1 val=$2 work=$3
shift 3
types=("$@")
[ ${#types[@]} -gt 0 ] || types=(IQ1_S IQ1_M IQ2_XXS IQ2_XS IQ2_S IQ3_XXS IQ3_S TQ1_0 TQ2_0 MXFP4_MOE NVFP4)
B=${LLAMA_BIN:-/work/llama.cpp/build/bin}
LES=${LES:-./build/les}
mkdir -p "$work"
head -c 100000 "$val" > "$work/calib.txt"
tail -c 100166 "$val" > "$work/eval.txt"
[ -f "$work/imatrix.gguf" ] || "$B/llama-imatrix" -m "$model" -f "$work/calib.txt" -c 512 -b 512 -t 2 --process-output \
  -o "$work/imatrix.gguf" > "$work/imatrix.log" 2>&1
echo "| type | file MiB | mean KLD les vs llama.cpp | same top-1 | les PPL | llama.cpp PPL |" > "$work/exactness.md"
echo "|---|---|---|---|---|---|" >> "$work/exactness.md"
for t in "${types[@]}"; do
  f="$work/pure-$t.gguf"
  if [ ! -f "$f" ]; then
    if [ "$t" = NVFP4 ]; then
      args=()
      for n in attn_q attn_k attn_v attn_output ffn_gate_exps ffn_up_exps ffn_down_exps output; do args+=(--tensor-type "$n=nvfp4"); done
      "$B/llama-quantize" "${args[@]}" "$model" "$f" Q8_0 2 > "$work/q-$t.log" 2>&1
    else
      # The ftype whose default type is t: llama.cpp's IQ2_S ftype means IQ2_XS tensors, IQ2_M means IQ2_S.
      ftype=$t
      [ "$t" = IQ2_S ] && ftype=IQ2_M
      "$B/llama-quantize" --pure --imatrix "$work/imatrix.gguf" --token-embedding-type q8_0 "$model" "$f" "$ftype" 2 \
        > "$work/q-$t.log" 2>&1
    fi
  fi
  [ -f "$work/base-$t.kld" ] || "$B/llama-perplexity" -m "$f" -f "$work/eval.txt" -c 512 -b 512 -t 2 -fa off -ctk f32 -ctv f32 \
    --kl-divergence-base "$work/base-$t.kld" > "$work/ppl-llama-$t.log" 2>&1
  "$LES" perplexity -m "$f" -t 2 --kl-logits "$work/base-$t.kld" --json "$work/les-$t.json" > "$work/ppl-les-$t.log" 2>&1
  python3 - "$t" "$f" "$work/les-$t.json" "$work/ppl-llama-$t.log" >> "$work/exactness.md" <<'PY'
import json, os, re, sys
t, f, js, llog = sys.argv[1:]
j = json.load(open(js))
mean = j["kld"]["mean"]
top = j["same_top1"]
ppl = f'{j["test"]["ppl"]:.4f}'
m = re.findall(r"Final estimate: PPL = ([0-9.]+)", open(llog).read())
print(f"| {t} | {os.path.getsize(f)/2**20:.2f} | {mean:.3g} | {100*top:.2f}% | {ppl} | {m[-1] if m else '?'} |")
PY
done
cat "$work/exactness.md"
