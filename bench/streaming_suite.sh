#!/usr/bin/env bash
# The expert-streaming measurements of docs/benchmarks.md in one go (issue 3 and 4 tables):
#   (a) the trained model at ~25% of its experts cached, real text;
#   (b) the Qwen3-30B-A3B-shaped Q4_K model at --mem 4G, original and packed layouts;
#   a balanced configuration (packed 30B, --mem 8G, one compute thread);
#   the load-optimization comparison (naive / direct original / direct packed, with fio).
#
#   bench/streaming_suite.sh BENCH_DIR [OUT_FILE]
#
# BENCH_DIR holds q3-30b-q4k.gguf, q3-30b-q4k-packed.gguf and tiny-packed.gguf, made by:
#   les synth --shape qwen3-30b-a3b --type q4_K -o BENCH_DIR/q3-30b-q4k.gguf
#   les pack BENCH_DIR/q3-30b-q4k.gguf BENCH_DIR/q3-30b-q4k-packed.gguf
#   les pack ${TINY:-models/tiny-moe-q4_k_m.gguf} BENCH_DIR/tiny-packed.gguf
# TINY picks the trained model (default the bundled one) and TINY_MEM its budget (default 41M, a
# quarter of the bundled file's experts). The recorded tables used its F16 original
# (tiny-moe-q3m.gguf, models/README.md) at 58M, a quarter of that file's experts.
# LES_BUILD_DIR picks the build directory (default build). Takes ~20 minutes. Run it on an otherwise idle machine: the configurations overlap I/O with
# compute, and anything else on the cores shows up as compute time.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:?usage: bench/streaming_suite.sh BENCH_DIR [OUT_FILE]}
out=${2:-/dev/stdout}
tiny=${TINY:-models/tiny-moe-q4_k_m.gguf}
tiny_mem=${TINY_MEM:-41M}
val=tests/data/trained/tiny-moe-val.txt
B=${LES_BUILD_DIR:-./build}/bench_streaming
old=lookahead/refine=off/inflight=1000G  # the schedule before refine, cancel and the in-flight bound
{
  echo "# $(date -u) $(uname -r) load: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "## (a) trained model, --mem $tiny_mem, -t 1"
  $B -m $tiny --packed "$dir/tiny-packed.gguf" --mem $tiny_mem -n 128 -p 64 --reps 5 -t 1 --prompt-file $val \
    --configs resident,ondemand,lookahead,$old,lookahead/prefetch2=on,lookahead/throttle=on,ondemand/file=packed,lookahead/file=packed
  echo "## (b) 30B shape Q4_K, --mem 4G, -t 2, original layout"
  $B -m "$dir/q3-30b-q4k.gguf" --mem 4G -n 16 -p 8 --reps 2 -t 2 \
    --configs ondemand,lookahead,$old,lookahead/prefetch2=on,lookahead/throttle=on
  echo "## (b) 30B shape Q4_K, --mem 4G, -t 2, packed"
  $B -m "$dir/q3-30b-q4k-packed.gguf" --mem 4G -n 16 -p 8 --reps 2 -t 2 \
    --configs ondemand,lookahead,$old,lookahead/prefetch2=on,lookahead/throttle=on
  echo "## balanced: 30B packed, --mem 8G, -t 1"
  $B -m "$dir/q3-30b-q4k-packed.gguf" --mem 8G -n 16 -p 8 --reps 2 -t 1 --queue-depth 16 \
    --configs ondemand,lookahead,$old,lookahead/prefetch2=on
  echo "## load optimization: trained model"
  bench/load_optimization.sh $tiny "$dir/tiny-packed.gguf" $tiny_mem 1 -n 128 -p 64 --reps 5 --prompt-file $val
  echo "## load optimization: 30B shape, --mem 4G, -t 2"
  bench/load_optimization.sh "$dir/q3-30b-q4k.gguf" "$dir/q3-30b-q4k-packed.gguf" 4G 2 -n 16 -p 8 --reps 2
} 2>&1 | tee "$out"
