#!/usr/bin/env bash
# A bounded load test of `les serve` on the trained model (node, the official openai client):
# 100 distinct greedy requests (chat and text completions, streamed and not, shared prefixes for
# the KV-cache reuse) are answered one at a time for a reference, then sent by 100 clients at once;
# each client's reply must equal its reference exactly (text, finish_reason, usage), /metrics must
# count every request and show the server idle, and the server must stop cleanly on SIGTERM.
# Then the same 100 clients at once through `les serve --parallel 4`: every reply equal to the
# one-at-a-time server's reference, /metrics showing batched steps.
# Prints one line with the concurrent pass's throughput and latency, e.g.
#   load: 100 clients, 100/100 ok, 12.3 req/s, 180 tok/s, latency p50 4100 ms p99 8000 ms
# The work is small (about 2 x 100 x 12 generated tokens) so that it also passes under ASan on two
# cores within a few minutes.   test_load.sh LES MODEL [CLIENTS]   (default $LES_LOAD_CLIENTS or 100;
# scripts/test-sanitizers.sh sets 40)
LES=$1 MODEL=$2 CLIENTS=${3:-${LES_LOAD_CLIENTS:-100}}
source "$(dirname "$0")/common.sh"
need_node
need_model
KEY=load-key
REF=$WORK/reference.json
start_server URL --api-key $KEY -c 1024 --queue 128
node "$ROOT/tests/server/load_clients.mjs" "$URL" $KEY "$(basename "$MODEL")" "$CLIENTS" "$REF" || fail "load clients"
kill -0 "$SERVER_PID" 2>/dev/null || fail "les serve died under load"
stop_server
# Batched serving: the same clients at once through 4 slots, each reply equal to the reference
# the one-at-a-time server gave (no reference pass of its own: it is the one above).
start_server URL --api-key $KEY -c 1024 --queue 128 --parallel 4
node "$ROOT/tests/server/load_clients.mjs" "$URL" $KEY "$(basename "$MODEL")" "$CLIENTS" "$REF" || fail "load clients (--parallel 4)"
kill -0 "$SERVER_PID" 2>/dev/null || fail "les serve --parallel 4 died under load"
stop_server
echo "PASS"
