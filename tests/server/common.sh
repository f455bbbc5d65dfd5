# Shared by the server and chat tests (sourced). Needs LES (the les program) and MODEL.
#   start_server OUTVAR [les serve flags...]: starts `les serve --port 0 ...` in the background,
#     waits for its "listening on http://HOST:PORT" line (60 s at most) and sets OUTVAR to the base
#     URL; SERVER_PID and SERVER_LOG are set. stop_server: SIGTERM, wait, and fail unless it exits 0.
#   skip MSG: an optional tool is missing: exit 77 (CTest's skip code, see SKIP_RETURN_CODE in
#     CMakeLists.txt), recorded in $LES_SKIP_LOG as tests/test_main.cpp records skipped tests.
#   need_model: fails unless the model file exists (a fixture of the repository, never skipped for).
#   need_node: skips unless node >= 20 and tools/js-harness/node_modules exist.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/les-server-test-XXXXXX")
trap 'cleanup' EXIT
SERVER_PID=""

cleanup() {
  if [ -n "$SERVER_PID" ] && kill -0 "$SERVER_PID" 2>/dev/null; then kill -9 "$SERVER_PID" 2>/dev/null || true; fi
  rm -rf "$WORK"
}

skip() {
  echo "SKIP: $*"
  if [ -n "${LES_SKIP_LOG:-}" ]; then
    printf 'optional\t%s\t%s\n' "$*" "ServerCli.$(basename "$0" .sh)" >>"$LES_SKIP_LOG"
  fi
  exit 77
}
need_model() { [ -f "$MODEL" ] || { echo "FAIL: missing test fixture $MODEL" >&2; exit 1; }; }
# A sanitizer report in the server log is shown from its start (its first lines name the race
# or the bad access); otherwise the log's last 50 lines.
fail() {
  echo "FAIL: $*" >&2
  if [ -n "${SERVER_LOG:-}" ] && [ -f "$SERVER_LOG" ]; then
    echo "--- server log ---" >&2
    if grep -q 'Sanitizer' "$SERVER_LOG"; then sed -n '/Sanitizer/,$p' "$SERVER_LOG" | head -120 >&2; else tail -50 "$SERVER_LOG" >&2; fi
  fi
  exit 1
}

need_node() {
  command -v node >/dev/null 2>&1 || skip "node not found"
  [ "$(node -p 'process.versions.node.split(".")[0]')" -ge 20 ] || skip "node < 20"
  [ -d "$ROOT/tools/js-harness/node_modules/openai" ] || skip "tools/js-harness/node_modules missing (npm ci there)"
}

start_server() {
  local var=$1
  shift
  SERVER_LOG=$WORK/server-$RANDOM.log
  "$LES" serve -m "$MODEL" --port 0 "$@" 2>"$SERVER_LOG" &
  SERVER_PID=$!
  local url=""
  for _ in $(seq 1 600); do
    url=$(sed -n 's/.*listening on \(http:[^ ]*\).*/\1/p' "$SERVER_LOG" | head -1)
    [ -n "$url" ] && break
    kill -0 "$SERVER_PID" 2>/dev/null || fail "les serve exited before listening"
    sleep 0.1
  done
  [ -n "$url" ] || fail "les serve did not start listening within 60 s"
  printf -v "$var" '%s' "$url"
}

stop_server() {
  kill -TERM "$SERVER_PID"
  local rc=0
  wait "$SERVER_PID" || rc=$?
  SERVER_PID=""
  [ "$rc" = 0 ] || fail "les serve exited with $rc on SIGTERM"
  grep -q "les serve: stopped" "$SERVER_LOG" || fail "les serve did not report a clean stop"
}
