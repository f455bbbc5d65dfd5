#!/bin/sh
# Regenerates tests/data/vocab/moe: the vocabularies and llama.cpp token ids for the gpt-4o,
# deepseek-v3, kimi-k2, deepseek-llm and deepseek-coder pre-tokenizers (README.md there). Uses the
# libllama that node-llama-cpp 3.22.1 ships (llama.cpp v0.5.0, commit de3ff815, installed by
# tools/llamacpp-ref) through llref.cpp, and llama.cpp's ggml-vocab-deepseek-{llm,coder}.gguf from
# a checkout of the same commit (LLAMA_CPP_SRC). Needs python3 and g++.
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
DATA=$(dirname "$HERE")
OUT=$DATA/moe
ROOT=$(cd "$DATA/../../.." && pwd)
LLAMA_CPP_SRC=${LLAMA_CPP_SRC:-$ROOT/../llama.cpp}
BIN=$ROOT/tools/llamacpp-ref/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
mkdir -p "$OUT"

g++ -std=c++17 -O1 -I"$LLAMA_CPP_SRC/include" -I"$LLAMA_CPP_SRC/ggml/include" "$HERE/llref.cpp" \
    -L"$BIN" -l:libllama.v0.5.0.so -l:libggml.v0.5.0.so -l:libggml-base.so -Wl,-rpath,"$BIN" -o "$TMP/llref"
VF="python3 $HERE/vocab_files.py"
# ids MODEL TEXTS OUT: llama.cpp's ids, one line per input (an .inp that ends with the separator
# has no empty last input, as tests/test_tokenizer.cpp reads it)
ids() {
    "$TMP/llref" "$1" "$2" 0 0 | cut -f1 > "$3"
    if python3 -c 'import sys; sys.exit(not open(sys.argv[1], "rb").read().endswith(b"\n__ggml_vocab_test__\n"))' "$2"; then
        sed -i '$d' "$3"
    fi
}

python3 "$HERE/gen_cases.py" moe > "$OUT/moe-pre.inp"
# the text sets: llama.cpp's own vocab test texts, les-mixed, les-invalid-utf8, moe-pre
set_path() {
    case $1 in
        llamacpp) echo "$DATA/ggml-vocab-qwen2.gguf.inp" ;;
        moe-pre) echo "$OUT/moe-pre.inp" ;;
        *) echo "$DATA/les-$1.inp" ;;
    esac
}
ALL="$(set_path llamacpp) $(set_path mixed) $(set_path invalid-utf8) $(set_path moe-pre)"

for v in deepseek-llm deepseek-coder; do
    orig=$LLAMA_CPP_SRC/models/ggml-vocab-$v.gguf
    $VF trim "$orig" "$OUT/$v.gguf" $ALL
    # the cut-down vocabulary must tokenize every text as the full one does
    for s in llamacpp mixed invalid-utf8 moe-pre; do
        ids "$orig" "$(set_path $s)" "$TMP/full.txt"
        $VF remap "$orig" "$OUT/$v.gguf" "$TMP/full.txt" > "$TMP/full-remapped.txt"
        ids "$OUT/$v.gguf" "$(set_path $s)" "$OUT/$v.$v.$s.out"
        cmp "$TMP/full-remapped.txt" "$OUT/$v.$v.$s.out"
    done
done
for pre in gpt-4o deepseek-v3 kimi-k2; do
    $VF setpre "$OUT/deepseek-llm.gguf" "$TMP/v.gguf" "$pre"
    for s in moe-pre invalid-utf8; do
        ids "$TMP/v.gguf" "$(set_path $s)" "$OUT/deepseek-llm.$pre.$s.out"
    done
done

$VF pairs "$OUT/pairs.gguf" gpt-4o "$OUT/moe-pre.inp"
for pre in gpt-4o deepseek-v3 kimi-k2 deepseek-llm deepseek-coder glm4; do
    $VF setpre "$OUT/pairs.gguf" "$TMP/v.gguf" "$pre"
    ids "$TMP/v.gguf" "$OUT/moe-pre.inp" "$OUT/pairs.$pre.moe-pre.out"
done
echo "vectors written to $OUT"
