#!/usr/bin/env bash
# Builds dspark_dump (llama.cpp's dflash / DSpark drafter reference, tests/data/dspark_*.bin)
# against a llama.cpp source tree whose libllama is already built (cmake -B build; only libllama
# and ggml are needed: `cmake --build build --target llama -j2`). Never run in CI.
#   LLAMA_CPP=/path/to/llama.cpp tools/llamacpp-ref/build_dspark_dump.sh [OUT]
# Then regenerate the references (from the repository root):
#   V=tests/data/trained/tiny-moe-val.txt
#   OUT/dspark_dump models/tiny-moe-q4_k_m.gguf models/tiny-moe-dspark-q8_0.gguf $V tests/data/dspark_trained.bin
#   build/les synth --arch dflash --target models/tiny-moe-q4_k_m.gguf --seed 7 -o /tmp/dspark-synth.gguf
#   OUT/dspark_dump models/tiny-moe-q4_k_m.gguf /tmp/dspark-synth.gguf $V tests/data/dspark_synth.bin \
#       --full 2 --features 0
set -euo pipefail
LLAMA_CPP=${LLAMA_CPP:-/work/llama.cpp}
OUT=${1:-$LLAMA_CPP/build/bin}
HERE=$(cd "$(dirname "$0")" && pwd)
LIB=$LLAMA_CPP/build/bin
${CXX:-c++} -std=c++17 -O2 -Wall -Wextra -o "$OUT/dspark_dump" "$HERE/dspark_dump.cpp" \
  -I"$LLAMA_CPP/include" -I"$LLAMA_CPP/ggml/include" -I"$LLAMA_CPP/src" \
  -L"$LIB" -lllama -lggml -lggml-base -Wl,-rpath,"$LIB"
echo "built $OUT/dspark_dump"
