#!/usr/bin/env bash
# Regenerates the per-tensor type fixtures of tests/test_quant_recipes_lowbit.cpp with llama.cpp's
# own tools. Usage: make_fixtures.sh LES LLAMA_BIN TRAINED_F16 WORKDIR
#   LES          a built les binary (for `les synth`)
#   LLAMA_BIN    llama.cpp's build/bin (llama-quantize, llama-imatrix)
#   TRAINED_F16  the trained model's F16 original, tiny-moe-q3m.gguf (models/README.md)
#   WORKDIR      scratch directory (quantized files are deleted once read; a run's results there
#                are reused by the next run)
# Writes trained.json, synth-qwen3moe.json and synth-qwen35moe.json next to this script: the source
# tensors [name, ne, type] in file order and per recipe llama-quantize's type of each, its
# general.file_type, its file size, and whether it refuses to run without an importance matrix.
set -euo pipefail
LES=$1; BIN=$2; TRAINED=$3; WORK=$4
HERE=$(cd "$(dirname "$0")" && pwd)
RECIPES="IQ1_S IQ1_M IQ2_XXS IQ2_XS IQ2_S IQ2_M IQ3_XXS IQ3_XS IQ3_S IQ3_M TQ1_0 TQ2_0 MXFP4_MOE Q2_K_S"
MODELS="trained synth-qwen3moe synth-qwen35moe"
mkdir -p "$WORK"

# The synthetic models (the test makes the same ones).
[ -f "$WORK/synth-qwen3moe.gguf" ] || "$LES" synth --arch qwen3moe --layers 8 --embd 256 --heads 4 --kv-heads 1 \
  --head-dim 64 --experts 8 --used 2 --ff-exp 256 --vocab 512 --type f16 -o "$WORK/synth-qwen3moe.gguf"
[ -f "$WORK/synth-qwen35moe.gguf" ] || "$LES" synth --shape qwen35-tiny --layers 8 --embd 256 --heads 4 --kv-heads 2 \
  --head-dim 64 --experts 2 --used 1 --ff-exp 256 --ff-shared 256 --ssm-state 64 --ssm-k-heads 2 --ssm-v-heads 4 \
  --rope-dims 16 --vocab 512 --type f16 -o "$WORK/synth-qwen35moe.gguf"

source_of() { if [ "$1" = trained ]; then echo "$TRAINED"; else echo "$WORK/$1.gguf"; fi; }
imatrix_of() {
  if [ "$1" = trained ]; then echo "$HERE/../tiny-moe-q4_k_m.imatrix-4x512.gguf"; else echo "$WORK/$1.imatrix.gguf"; fi
}
for model in synth-qwen3moe synth-qwen35moe; do  # the types do not depend on the values: two short chunks
  [ -f "$WORK/$model.imatrix.gguf" ] || "$BIN/llama-imatrix" -m "$WORK/$model.gguf" \
    -f "$HERE/../trained/tiny-moe-val.txt" -o "$WORK/$model.imatrix.gguf" --chunks 2 -c 128 -t 2 \
    > "$WORK/$model.imatrix.log" 2>&1
done

# 1. Types: dry runs (llama-quantize decides every tensor's type before it quantizes anything),
#    with the importance matrix, and without it (then it reports whether the real run would refuse).
for model in $MODELS; do
  src=$(source_of "$model")
  python3 "$HERE/gguf_types.py" "$src" > "$WORK/$model.source.json"
  for r in $RECIPES; do
    "$BIN/llama-quantize" --dry-run --imatrix "$(imatrix_of "$model")" "$src" "$r" 2 > "$WORK/$model-$r.dry.log" 2>&1
    "$BIN/llama-quantize" --dry-run "$src" "$r" 2 > "$WORK/$model-$r.noimat.log" 2>&1
  done
done

# 2. Sizes: the real files (slow: the i-quant searches), read back with gguf_types.py. TYPES_ONLY=1
#    skips them (the fixtures then have no file types and sizes).
for model in $MODELS; do
  [ "${TYPES_ONLY:-0}" = 1 ] && break
  src=$(source_of "$model")
  for r in $RECIPES; do
    [ -s "$WORK/$model-$r.json" ] && continue
    out=$WORK/$model-$r.gguf
    "$BIN/llama-quantize" --imatrix "$(imatrix_of "$model")" "$src" "$out" "$r" 2 > "$WORK/$model-$r.log" 2>&1
    python3 "$HERE/gguf_types.py" "$out" > "$WORK/$model-$r.json"
    rm -f "$out"
  done
done

for model in $MODELS; do
  python3 "$HERE/collect_fixture.py" "$WORK" "$model" "$RECIPES" > "$HERE/$model.json"
done
