#!/bin/sh
# Regenerates the les-* tokenizer test vectors in tests/data/vocab with llama.cpp itself
# (libllama from node-llama-cpp 3.22.1 = llama.cpp v0.5.0, commit de3ff815, installed by
# tools/llamacpp-ref). Needs: python3, g++, llama.cpp's include/ and ggml/include/ headers of the
# same commit (LLAMA_CPP_SRC). The trained model and its validation text come from the repository.
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
DATA=$(dirname "$HERE")
ROOT=$(cd "$DATA/../../.." && pwd)
LLAMA_CPP_SRC=${LLAMA_CPP_SRC:-$ROOT/../llama.cpp}
BIN=$ROOT/tools/llamacpp-ref/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT

g++ -std=c++17 -O1 -I"$LLAMA_CPP_SRC/include" -I"$LLAMA_CPP_SRC/ggml/include" "$HERE/llref.cpp" \
    -L"$BIN" -l:libllama.v0.5.0.so -l:libggml.v0.5.0.so -l:libggml-base.so -Wl,-rpath,"$BIN" -o "$TMP/llref"

python3 "$HERE/gen_cases.py" mixed "$ROOT/tests/data/trained/tiny-moe-val.txt" > "$DATA/les-mixed.inp"
python3 "$HERE/gen_cases.py" invalid > "$TMP/invalid.raw"

# drop the inputs on which llama.cpp throws (code points above U+10FFFF)
"$TMP/llref" "$DATA/ggml-vocab-qwen2.gguf" "$TMP/invalid.raw" 0 0 > "$TMP/probe.txt"
python3 - "$TMP/invalid.raw" "$TMP/probe.txt" "$DATA/les-invalid-utf8.inp" <<'PY'
import sys
sep = b"\n__ggml_vocab_test__\n"
cases = open(sys.argv[1], "rb").read().split(sep)
res = open(sys.argv[2]).read().rstrip("\n").split("\n")
assert len(cases) == len(res)
open(sys.argv[3], "wb").write(sep.join(c for c, r in zip(cases, res) if r != "EXC"))
PY

for vocab in qwen2 llama-bpe llama-spm tiny-moe-q3m; do
    if [ "$vocab" = tiny-moe-q3m ]; then model=$ROOT/models/tiny-moe-q4_k_m.gguf; else model=$DATA/ggml-vocab-$vocab.gguf; fi
    for set in mixed invalid-utf8; do
        for ps in 0 1; do
            suffix=$( [ $ps = 1 ] && echo .special || true )
            "$TMP/llref" "$model" "$DATA/les-$set.inp" 0 $ps > "$TMP/out.txt"
            cut -f1 "$TMP/out.txt" > "$DATA/les-$set.$vocab$suffix.out"
            if [ $ps = 1 ]; then  # decoded text (unparse_special=true), raw, separated as in .inp
                python3 - "$TMP/out.txt" "$DATA/les-$set.$vocab.special.detok" <<'PY'
import sys
rows = open(sys.argv[1]).read().rstrip("\n").split("\n")
sep = b"\n__ggml_vocab_test__\n"
open(sys.argv[2], "wb").write(sep.join(bytes.fromhex(r.split("\t")[1]) for r in rows))
PY
            fi
        done
    done
done
echo "vectors written to $DATA"
