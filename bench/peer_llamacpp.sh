#!/usr/bin/env bash
# The peer at equal memory: llama.cpp (the reference version inside the node-llama-cpp package)
# decoding the same original GGUF with only the budget's memory to live in.
#
#   bench/peer_llamacpp.sh MODEL.gguf BUDGET [N_GEN=32] [THREADS=2] [PROMPT_TOKENS=32]
#     BUDGET: 3G, 4096M, ... (what les gets as --mem)
#     LES_PEER_DIR: where llama.cpp is cloned and built (default ~/.cache/les-peer)
#     LES_PEER_TIMEOUT: seconds per llama.cpp run before it is stopped (default 900)
#
# What it does:
#  1. Builds llama-completion (CPU, native) from llama/gitRelease.bundle of node-llama-cpp
#     (tools/llamacpp-ref/node_modules; `npm ci` there installs it). Never committed, never in CI.
#  2. Holds the rest of RAM: a helper process allocates and touches MemAvailable - BUDGET bytes of
#     anonymous memory. Without swap, touched anonymous memory stays resident, so llama.cpp (its
#     mapped file pages, repacked weights, KV cache and buffers) has about BUDGET left. The helper
#     is protected from the OOM killer (oom_score_adj -1000) and llama.cpp is its first choice
#     (+1000): if memory runs out, llama.cpp is the one killed, as it would be on a device.
#  3. Runs llama.cpp with mmap (its default) twice: weight repacking on (its default) and off
#     (--no-repack), from a dropped page cache when root, and reports prompt and decode tok/s from
#     its own timing lines, or that it could not run at that memory (killed, or out of time).
# Output: a Markdown table on stdout and one JSON object per run on stderr lines starting "json:".
set -euo pipefail
cd "$(dirname "$0")/.."

MODEL=${1:?usage: bench/peer_llamacpp.sh MODEL.gguf BUDGET [N_GEN] [THREADS] [PROMPT_TOKENS]}
BUDGET=${2:?budget, e.g. 3G}
N_GEN=${3:-32}
THREADS=${4:-2}
PROMPT_TOKENS=${5:-32}
PEER_DIR=${LES_PEER_DIR:-$HOME/.cache/les-peer}
TIMEOUT=${LES_PEER_TIMEOUT:-900}

die() { echo "peer_llamacpp: $*" >&2; exit 1; }
[ -f "$MODEL" ] || die "no such model file: $MODEL"
command -v /usr/bin/python3 >/dev/null || die "/usr/bin/python3 is needed for the memory holder"

to_bytes() {
  local v=$1 n u
  n=${v%[KkMmGg]}
  u=${v#"$n"}
  case "$u" in
    K|k) echo $((n * 1024)) ;; M|m) echo $((n * 1024 * 1024)) ;; G|g) echo $((n * 1024 * 1024 * 1024)) ;;
    "") echo "$n" ;; *) die "bad budget '$v' (use e.g. 3G or 4096M)" ;;
  esac
}
BUDGET_BYTES=$(to_bytes "$BUDGET")

# --- 1. llama.cpp from the bundle -------------------------------------------------------------
BUNDLE=tools/llamacpp-ref/node_modules/node-llama-cpp/llama/gitRelease.bundle
BIN=$PEER_DIR/llama.cpp/build/bin/llama-completion
if [ ! -x "$BIN" ]; then
  [ -f "$BUNDLE" ] || die "$BUNDLE not found: run (cd tools/llamacpp-ref && npm ci --ignore-scripts) first"
  mkdir -p "$PEER_DIR"
  [ -d "$PEER_DIR/llama.cpp" ] || git clone -q "$BUNDLE" "$PEER_DIR/llama.cpp"
  echo "peer_llamacpp: building llama-completion in $PEER_DIR/llama.cpp (minutes)" >&2
  cmake -S "$PEER_DIR/llama.cpp" -B "$PEER_DIR/llama.cpp/build" -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
    -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF >/dev/null
  cmake --build "$PEER_DIR/llama.cpp/build" --target llama-completion -j"$(nproc)" >/dev/null
fi
[ -x "$BIN" ] || die "llama-completion was not built ($BIN)"

# --- 2. the memory holder ---------------------------------------------------------------------
avail=$(awk '/^MemAvailable:/ {printf "%.0f", $2 * 1024}' /proc/meminfo)
HOLD=$((avail - BUDGET_BYTES))
HOLDER_PID=""
cleanup() { [ -n "$HOLDER_PID" ] && kill "$HOLDER_PID" 2>/dev/null || true; }
trap cleanup EXIT INT TERM
if [ "$HOLD" -gt $((64 << 20)) ]; then
  READY=$(mktemp)
  /usr/bin/python3 - "$HOLD" "$READY" <<'PY' &
import os, sys, time
n, ready = int(sys.argv[1]), sys.argv[2]
try:
    with open("/proc/self/oom_score_adj", "w") as f:
        f.write("-1000")
except OSError:
    pass  # not root: the kernel may pick this process; the report says so
import mmap
b = mmap.mmap(-1, n, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)  # not resident yet
if hasattr(mmap, "MADV_HUGEPAGE"):
    b.madvise(mmap.MADV_HUGEPAGE)     # 2 MiB pages where granted: far fewer faults to take
step = 4096
chunk = 1 << 30
for off in range(0, n, chunk):        # touch every page: resident, and it stays (no swap)
    end = min(n, off + chunk)
    b[off:end:step] = b"\x01" * len(range(off, end, step))
with open(ready, "w") as f:
    f.write("ok")
while True:
    time.sleep(3600)
PY
  HOLDER_PID=$!
  for _ in $(seq 1 6000); do [ -s "$READY" ] && break; sleep 0.1; done  # up to 10 minutes
  rm -f "$READY"
  kill -0 "$HOLDER_PID" 2>/dev/null || die "the memory holder died (could not take $((HOLD >> 20)) MiB)"
fi
echo "peer_llamacpp: holding $((HOLD > 0 ? HOLD >> 20 : 0)) MiB; MemAvailable now $(awk '/^MemAvailable:/ {print int($2/1024)}' /proc/meminfo) MiB (budget $((BUDGET_BYTES >> 20)) MiB)" >&2

# --- 3. the runs -----------------------------------------------------------------------------
PROMPT=$(printf 'the %.0s' $(seq 1 "$PROMPT_TOKENS"))
echo "| llama.cpp setting | result | prompt tok/s | decode tok/s | wall s |"
echo "|---|---|---|---|---|"
run() {  # label extra-args...
  local label=$1
  shift
  local log
  log=$(mktemp)
  if [ "$(id -u)" = 0 ]; then sync; echo 3 > /proc/sys/vm/drop_caches || true; fi
  local t0 t1 rc=0
  t0=$(date +%s.%N)
  # The child raises its own OOM score before exec: if anything is killed, it is llama.cpp.
  timeout --signal=KILL "$TIMEOUT" bash -c 'echo 1000 > /proc/self/oom_score_adj 2>/dev/null; exec "$@"' _ \
    "$BIN" -m "$MODEL" -p "$PROMPT" -n "$N_GEN" -t "$THREADS" --temp 0 -no-cnv --no-warmup --simple-io "$@" \
    >"$log" 2>&1 || rc=$?
  t1=$(date +%s.%N)
  local wall pp tg result
  wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN {printf "%.1f", b - a}')
  pp=$(awk '/prompt eval time/ {for (i = 1; i <= NF; i++) if ($i == "tokens" && $(i+1) == "per") print $(i-1)}' "$log" | tail -1)
  tg=$(awk '/[^t] eval time/ && !/prompt/ {for (i = 1; i <= NF; i++) if ($i == "tokens" && $(i+1) == "per") print $(i-1)}' "$log" | tail -1)
  if [ "$rc" = 0 ] && [ -n "$tg" ]; then
    result=ran
  elif [ "$rc" = 137 ] || [ "$rc" = 9 ]; then
    result="could not run: killed (out of memory at this budget, or past ${TIMEOUT} s)"
  else
    result="could not run: exit $rc ($(grep -iE 'error|failed' "$log" | head -1 | cut -c1-120))"
  fi
  echo "| $label | $result | ${pp:--} | ${tg:--} | $wall |"
  echo "json: {\"setting\":\"$label\",\"ran\":$([ "$result" = ran ] && echo true || echo false),\"prompt_tps\":${pp:-null},\"decode_tps\":${tg:-null},\"wall_s\":$wall,\"exit\":$rc,\"budget_bytes\":$BUDGET_BYTES}" >&2
  rm -f "$log"
}
run "mmap, repacking on (default)"
run "mmap, repacking off" --no-repack
