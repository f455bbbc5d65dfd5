#!/usr/bin/env bash
# The load-optimization step in one run: lookahead with the naive loader on the original GGUF,
# with direct I/O on the original GGUF and with direct I/O on the packed file (same budget, same
# prompt, repeats interleaved), then fio on the same files with the same access pattern (random
# reads of one expert's bytes at the engine's queue depth) for the bandwidth comparison.
#
#   bench/load_optimization.sh ORIGINAL.gguf PACKED.gguf MEM THREADS [extra bench_streaming args...]
#
# Needs build/bench_streaming (cmake -DLES_BUILD_BENCH=ON) and fio.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 4 ]; then
  sed -n 2,9p "$0"
  exit 2
fi
orig=$1 packed=$2 mem=$3 threads=$4
shift 4
[ -x "${LES_BUILD_DIR:-build}/bench_streaming" ] || { echo "bench_streaming missing (configure with -DLES_BUILD_BENCH=ON)"; exit 1; }
command -v fio >/dev/null || { echo "fio not installed (apt-get install fio)"; exit 1; }

qd=8
out=$(mktemp)
"${LES_BUILD_DIR:-build}"/bench_streaming -m "$orig" --packed "$packed" --mem "$mem" -t "$threads" --queue-depth "$qd" \
  --configs ondemand,lookahead/io=naive,lookahead,lookahead/file=packed,ondemand/file=packed "$@" | tee "$out"

# One expert's read as the engine issues it: the packed file's stride (one read per expert), the
# original file's three widened extents (gate, up, down slices), from the bench's I/O table.
per_read() {  # label -> bytes per read call
  awk -v l="$1" '$1 == l { for (i = 1; i <= NF; ++i) { if ($i == "calls/token") c = $(i + 1); if ($i == "MB/token") m = $(i + 1) } }
                 END { if (c > 0) printf "%d", m * 1e6 / c }' "$out"
}
for cfg in lookahead lookahead/file=packed; do
  file=$orig
  [ "$cfg" = lookahead/file=packed ] && file=$packed
  bs=$(per_read "$cfg")
  bs=$(( (bs + 4095) / 4096 * 4096 ))
  for depth in 1 "$qd"; do
    mbs=$(fio --name=expert --filename="$file" --readonly --rw=randread --bs="$bs" --blockalign=4k --direct=1 \
            --ioengine=io_uring --iodepth="$depth" --runtime=4 --time_based --output-format=terse --terse-version=3 \
            2>/dev/null | awk -F';' '{ printf "%.0f", $7 / 1000 * 1.024 }')
    echo "fio: $cfg pattern: random ${bs}-byte reads (4 KiB aligned), O_DIRECT io_uring, iodepth $depth: $mbs MB/s"
  done
done
rm -f "$out"
