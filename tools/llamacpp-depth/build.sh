#!/usr/bin/env bash
# Builds depth_bench against the llama.cpp build in LLAMA_DIR (default /work/llama.cpp): headers from
# include/ and ggml/include, shared libraries from build/bin (CMake, BUILD_SHARED_LIBS=ON), linked with
# an rpath so that the binary runs without LD_LIBRARY_PATH. A comparison tool: not part of les's CMake
# or CI, never committed as a binary.
#
#   tools/llamacpp-depth/build.sh [OUT=build-depth/depth_bench]
#     LLAMA_DIR: llama.cpp source tree with a CMake build in build/ (default /work/llama.cpp)
#     CXX: the compiler (default g++)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
LLAMA_DIR=${LLAMA_DIR:-/work/llama.cpp}
OUT=${1:-$root/build-depth/depth_bench}
CXX=${CXX:-g++}

die() { echo "llamacpp-depth/build.sh: $*" >&2; exit 1; }
[ -f "$LLAMA_DIR/include/llama.h" ] || die "no llama.h in $LLAMA_DIR/include (set LLAMA_DIR)"
[ -f "$LLAMA_DIR/ggml/include/ggml.h" ] || die "no ggml.h in $LLAMA_DIR/ggml/include"
libdir=""
for d in "$LLAMA_DIR/build/bin" "$LLAMA_DIR/build/src"; do
  if [ -e "$d/libllama.so" ]; then libdir=$d; break; fi
done
[ -n "$libdir" ] || die "no libllama.so in $LLAMA_DIR/build/bin or build/src (build llama.cpp with -DBUILD_SHARED_LIBS=ON)"
ggmldir=$libdir
[ -e "$ggmldir/libggml.so" ] || ggmldir=$LLAMA_DIR/build/ggml/src
[ -e "$ggmldir/libggml.so" ] || die "no libggml.so next to libllama.so or in build/ggml/src"

mkdir -p "$(dirname "$OUT")"
set -x
"$CXX" -std=c++20 -O2 -Wall -Wextra \
  -I"$LLAMA_DIR/include" -I"$LLAMA_DIR/ggml/include" \
  "$here/depth_bench.cpp" -o "$OUT" \
  -L"$libdir" -L"$ggmldir" -lllama -lggml -lggml-base \
  -Wl,-rpath,"$libdir" -Wl,-rpath,"$ggmldir"
