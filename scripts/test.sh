#!/usr/bin/env bash
# Sets up, builds and runs the whole test suite. The llama.cpp reference (node-llama-cpp, npm)
# is installed when Node.js >= 20 is available; without it the live llama.cpp comparisons skip
# and the stored llama.cpp references are still checked.
# Then the hardening runs (docs/hardening.md): the suite under ASan+UBSan, each fuzz target for
# FUZZ_SECONDS (20 here; scripts/fuzz.sh alone: 60), the suite under TSan. LES_SKIP_SANITIZERS=1 runs the Release suite only.
# Then the aarch64 build under qemu-user (scripts/test-arm.sh, docs/arm.md); LES_SKIP_ARM=1 skips it.
# After each suite, and again at the end: how many tests skipped and why, grouped
# (scripts/skip_report.sh); a skip for anything but a CPU feature, the platform or an optional
# tool fails the command.
set -euo pipefail
cd "$(dirname "$0")/.."
T0=$(date +%s)
SKIPS=$(mktemp -d)
trap 'rm -rf "$SKIPS"' EXIT
# Each suite's skips go to its own log (tests/test_main.cpp, tests/server/common.sh append to it).
# suite NAME CMD...: runs CMD with the suite's skip log, then reports its skips (even when CMD
# failed); fails when either did.
suite() {
  local name=$1 rc=0
  shift
  export LES_SKIP_LOG=$SKIPS/$name.log
  : >"$LES_SKIP_LOG"
  "$@" || rc=$?
  bash scripts/skip_report.sh "$LES_SKIP_LOG" "$name" | tee -a "$SKIPS/report.txt" || rc=1
  return $rc
}
TIMES=""
mark() {  # phase name: appends the seconds since the previous mark
  local now
  now=$(date +%s)
  TIMES="$TIMES$(printf '  %-28s %5d s' "$1" $((now - ${LAST:-$T0})))"$'\n'
  LAST=$now
}
bash scripts/setup.sh
mark "setup + Release build"

if command -v node >/dev/null 2>&1 && [ "$(node -p 'process.versions.node.split(".")[0]')" -ge 20 ]; then
  if [ ! -d tools/llamacpp-ref/node_modules/node-llama-cpp ]; then
    echo "test: installing the llama.cpp reference (node-llama-cpp) from npm"
    (cd tools/llamacpp-ref && NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm ci --omit=optional --no-audit --no-fund --ignore-scripts >/dev/null) \
      || echo "test: node-llama-cpp could not be installed; live llama.cpp comparisons will skip"
  fi
  if [ ! -d tools/js-harness/node_modules/openai ]; then
    echo "test: installing the server and chat-template test harness (openai, @huggingface/jinja) from npm"
    (cd tools/js-harness && npm ci --no-audit --no-fund --ignore-scripts >/dev/null) \
      || echo "test: the js harness could not be installed; the openai-client and load tests will skip"
  fi
else
  echo "test: Node.js >= 20 not found; live llama.cpp comparisons and the node-driven server tests will skip"
fi

mark "npm (llama.cpp reference, js harness)"

suite release ctest --test-dir build --output-on-failure -j"$(nproc)" --timeout 900
mark "Release tests"

if [ -z "${LES_SKIP_SANITIZERS:-}" ]; then
  suite asan bash scripts/test-sanitizers.sh asan
  mark "ASan+UBSan build + tests"
  FUZZ_SECONDS=${FUZZ_SECONDS:-20} bash scripts/fuzz.sh
  mark "fuzzing (7 targets)"
  suite tsan bash scripts/test-sanitizers.sh tsan
  mark "TSan build + tests"
fi
if [ -z "${LES_SKIP_ARM:-}" ]; then
  suite aarch64 bash scripts/test-arm.sh
  mark "aarch64 cross build + qemu tests"
fi
echo "test: skipped tests (allowed reasons only: cpu feature, platform, optional tool)"
cat "$SKIPS/report.txt"
echo "test: phase times"
printf '%s' "$TIMES"
echo "test: total $(( $(date +%s) - T0 )) s"
