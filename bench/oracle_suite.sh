#!/usr/bin/env bash
# How far lookahead is from what a perfect predictor allows, on this machine (docs/benchmarks.md,
# "The routing oracle"): ondemand, lookahead and the routing oracle (a recorded routing replayed
# as the guess, 1 to n_layer-1 layers ahead) side by side in each configuration, plus fio runs
# that show the disk's speed for short bursts after idle time against sustained reading.
#
#   bench/oracle_suite.sh BENCH_DIR [OUT_FILE]
#
# BENCH_DIR as for bench/streaming_suite.sh (tiny-packed.gguf, q3-30b-q4k-packed.gguf).
# LES_BUILD_DIR picks the build directory (default build). ~25 minutes; run it on an otherwise
# idle machine.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:?usage: bench/oracle_suite.sh BENCH_DIR [OUT_FILE]}
out=${2:-/dev/stdout}
val=tests/data/trained/tiny-moe-val.txt
tiny_mem=${TINY_MEM:-41M}  # as bench/streaming_suite.sh
B=${LES_BUILD_DIR:-./build}/bench_streaming
o=lookahead/oracle
fio_burst() {  # FILE BS BURST_READS IDLE_US: random O_DIRECT reads, qd 4, BURST_READS then IDLE_US idle
  fio --name=b --filename="$1" --readonly --direct=1 --ioengine=io_uring --rw=randread --bs="$2" --iodepth=4 \
    --thinktime="$4" --thinktime_blocks="$3" --runtime=6 --time_based --output-format=json 2>/dev/null |
    /usr/bin/python3 -c "import json,sys; r=json.load(sys.stdin)['jobs'][0]['read']; n=r['total_ios']; s=r['clat_ns']['mean']*n/4/1e9
print('fio %s bs $2, bursts of $3 reads, $4 us idle between: %.0f MB/s while reading (%d reads)' % ('$(basename "$1")', r['io_bytes']/s/1e6, n))"
}
{
  echo "# $(date -u) $(uname -r) load: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "## disk: bursts after idle time vs sustained reading"
  for f in "$dir/tiny-packed.gguf 196k" "$dir/q3-30b-q4k-packed.gguf 2560k"; do
    set -- $f
    fio_burst "$1" "$2" 4 50000; fio_burst "$1" "$2" 16 50000; fio_burst "$1" "$2" 64 100000; fio_burst "$1" "$2" 1000000 1
  done
  echo "## (a) trained model, packed, --mem $tiny_mem, -t 1"
  $B -m "$dir/tiny-packed.gguf" --mem $tiny_mem -n 128 -p 64 --reps 5 -t 1 --prompt-file $val \
    --configs ondemand,lookahead,$o=1,$o=2,$o=7,$o=7/inflight=1000G
  echo "## (b) 30B shape Q4_K, packed, --mem 4G, -t 2"
  $B -m "$dir/q3-30b-q4k-packed.gguf" --mem 4G -n 16 -p 8 --reps 2 -t 2 --queue-depth 16 \
    --configs ondemand,lookahead,$o=1,$o=4
  echo "## balanced: 30B packed, --mem 8G, -t 1"
  $B -m "$dir/q3-30b-q4k-packed.gguf" --mem 8G -n 16 -p 8 --reps 2 -t 1 --queue-depth 16 \
    --configs ondemand,lookahead,$o=1,$o=4
  echo "## between the two: 30B packed, --mem 6G, -t 1"
  $B -m "$dir/q3-30b-q4k-packed.gguf" --mem 6G -n 16 -p 8 --reps 2 -t 1 --queue-depth 16 \
    --configs ondemand,lookahead,$o=1,$o=4
} 2>&1 | tee "$out"
