#!/usr/bin/env bash
# Every error status of `les serve`, with curl: 400 (malformed JSON, wrong types, a prompt past
# the context, a template error), 401 (wrong or missing key), 404 (unknown model, unknown route),
# 413 (body too large), 503 with Retry-After (queue full); a client that disconnects cancels its
# generation; bad input never crashes the server and each error is OpenAI-style JSON.
#   test_errors.sh LES MODEL
LES=$1 MODEL=$2
source "$(dirname "$0")/common.sh"
command -v curl >/dev/null || skip "curl not found"
need_model

KEY=err-key
start_server URL --api-key $KEY -c 64 --queue 1

# [AUTH="Bearer X"] expect STATUS METHOD PATH [BODY] [extra curl args...]: checks the status and that an error body
# is {"error": {"message": ..., "code": STATUS}}.
expect() {
  local want=$1 method=$2 path=$3 body=${4:-}
  shift 4 || shift $#
  local out=$WORK/body.json
  local got
  got=$(curl -s -o "$out" -w '%{http_code}' -X "$method" -H "Authorization: ${AUTH:-Bearer $KEY}" \
        -H 'Content-Type: application/json' ${body:+--data-binary "$body"} "$@" "$URL$path") || true
  [ "$got" = "$want" ] || fail "$method $path ${body:0:80}: status $got, want $want: $(head -c 300 "$out")"
  if [ "$want" -ge 400 ]; then
    node -e 'const b=JSON.parse(require("fs").readFileSync(process.argv[1],"utf8"));
             if(!b.error||typeof b.error.message!=="string"||b.error.code!==+process.argv[2]) process.exit(1)' \
      "$out" "$want" 2>/dev/null || grep -q '"error"' "$out" || fail "$method $path: no JSON error body: $(head -c 300 "$out")"
  fi
  echo "ok: $want $method $path ${body:0:60}"
}

CHAT=/v1/chat/completions
expect 200 GET /health
expect 200 GET /v1/models
expect 400 POST $CHAT '{"messages": [{"role": "user", "content": "hi"}'
expect 400 POST $CHAT 'not json at all'
expect 400 POST $CHAT '[]'
expect 400 POST $CHAT '{"messages": "hi"}'
expect 400 POST $CHAT '{"messages": [{"role": "user", "content": "hi"}], "temperature": "hot"}'
expect 400 POST $CHAT '{"messages": [{"role": "user", "content": "hi"}], "max_tokens": -5}'
expect 400 POST $CHAT '{"messages": [{"role": "user", "content": "hi"}], "n": 3}'
expect 400 POST /v1/completions '{"prompt": [1, 99999999]}'
long=$(printf 'word %.0s' $(seq 1 200))
expect 400 POST /v1/completions "{\"prompt\": \"$long\"}"
grep -q 'context holds 64' "$WORK/body.json" || fail "prompt past the context: message does not say so"
AUTH="Bearer wrong" expect 401 POST $CHAT '{"messages": [{"role": "user", "content": "hi"}]}'
code=$(curl -s -o "$WORK/body.json" -w '%{http_code}' -X POST -H 'Content-Type: application/json' \
       --data '{"prompt":"x"}' "$URL/v1/completions")
[ "$code" = 401 ] || fail "missing key: status $code"
AUTH="Bearer wrong" expect 401 GET /v1/models ''
AUTH="Bearer wrong" expect 401 GET /metrics ''
AUTH="Bearer wrong" expect 200 GET /health ''
expect 404 POST $CHAT '{"model": "gpt-17", "messages": [{"role": "user", "content": "hi"}]}'
expect 404 GET /v1/nothing-here
head -c $((9 << 20)) /dev/zero | tr '\0' 'a' >"$WORK/big.txt"
code=$(curl -s -o "$WORK/body.json" -w '%{http_code}' -X POST -H "Authorization: Bearer $KEY" \
       -H 'Content-Type: application/json' --data-binary @"$WORK/big.txt" "$URL/v1/completions")
[ "$code" = 413 ] || fail "9 MiB body: status $code, want 413"
echo "ok: 413 for a 9 MiB body"
# Random bytes and a truncated HTTP request: answered or dropped, never a crash.
head -c 4096 /dev/urandom | curl -s -o /dev/null -X POST -H "Authorization: Bearer $KEY" --data-binary @- "$URL$CHAT" || true
printf 'POST /v1/completions HTTP/1.1\r\nContent-Length: 100\r\n\r\n{"pro' | timeout 5 bash -c "cat > /dev/tcp/${URL#http://}" 2>/dev/null || true
kill -0 "$SERVER_PID" || fail "the server died on malformed input"

# (Read whole first: grep -q quitting early would fail curl's write, and pipefail the check.)
metrics_text=$(curl -s -H "Authorization: Bearer $KEY" "$URL/metrics")
grep -q '^les_requests_total{endpoint="/v1/completions",status="400"}' <<<"$metrics_text" \
  || fail "/metrics does not count the 400s"
stop_server

# Queue full and disconnects, on a server with room for long generations: one generation runs,
# one waits (--queue 1), the next gets 503 + Retry-After. Then both clients disconnect: their
# generations are cancelled (the running one at its next token, the waiting one leaves the line).
start_server URL --api-key $KEY -c 4096 --queue 1
metric() { curl -s -H "Authorization: Bearer $KEY" "$URL/metrics" | sed -n "s/^$1 //p"; }
long='{"prompt": "Once", "max_tokens": 4000, "ignore_eos": true, "stream": true}'
curl -s -N -o /dev/null -X POST -H "Authorization: Bearer $KEY" -d "$long" "$URL/v1/completions" &
p1=$!
for _ in $(seq 1 100); do [ "$(metric les_requests_running)" = 1 ] && break; sleep 0.1; done
[ "$(metric les_requests_running)" = 1 ] || fail "the long generation did not start"
curl -s -N -o /dev/null -X POST -H "Authorization: Bearer $KEY" -d "$long" "$URL/v1/completions" &
p2=$!
for _ in $(seq 1 100); do [ "$(metric les_requests_waiting)" = 1 ] && break; sleep 0.1; done
[ "$(metric les_requests_waiting)" = 1 ] || fail "the second request is not waiting"
hdr=$WORK/headers.txt
code=$(curl -s -D "$hdr" -o "$WORK/body.json" -w '%{http_code}' -X POST -H "Authorization: Bearer $KEY" \
       -d '{"prompt": "Once", "max_tokens": 2}' "$URL/v1/completions")
[ "$code" = 503 ] || fail "a full queue answered $code, want 503: $(head -c 300 "$WORK/body.json")"
grep -qi '^Retry-After: [0-9]' "$hdr" || fail "503 without Retry-After"
echo "ok: 503 with Retry-After when the queue is full"
before=$(metric les_generations_cancelled_total)
kill $p1 $p2
wait $p1 $p2 2>/dev/null || true
for _ in $(seq 1 100); do
  [ "$(metric les_requests_running)" = 0 ] && [ "$(metric les_requests_waiting)" = 0 ] && break
  sleep 0.1
done
[ "$(metric les_requests_running)" = 0 ] || fail "a disconnected client's generation kept running"
[ "$(metric les_requests_waiting)" = 0 ] || fail "a disconnected client stayed in the queue"
[ "$(metric les_generations_cancelled_total)" -gt "$before" ] || fail "no generation counted as cancelled"
echo "ok: disconnected clients cancel their generation and leave the queue"
# ... and the server is free for the next request.
expect 200 POST /v1/completions '{"prompt": "Once", "max_tokens": 4, "temperature": 0}'
stop_server

# The same with batched serving: two generations run in the two slots, a third waits, a fourth
# gets 503; the three clients disconnect and every slot and place in line is freed.
start_server URL --api-key $KEY -c 4096 --queue 1 --parallel 2
pids=()
for n in 1 2; do
  curl -s -N -o /dev/null -X POST -H "Authorization: Bearer $KEY" -d "$long" "$URL/v1/completions" &
  pids+=($!)
  for _ in $(seq 1 100); do [ "$(metric les_requests_running)" = $n ] && break; sleep 0.1; done
  [ "$(metric les_requests_running)" = $n ] || fail "--parallel 2: generation $n did not start"
done
curl -s -N -o /dev/null -X POST -H "Authorization: Bearer $KEY" -d "$long" "$URL/v1/completions" &
pids+=($!)
for _ in $(seq 1 100); do [ "$(metric les_requests_waiting)" = 1 ] && break; sleep 0.1; done
[ "$(metric les_requests_waiting)" = 1 ] || fail "--parallel 2: the third request is not waiting"
[ "$(metric les_slots_busy)" = 2 ] || fail "--parallel 2: les_slots_busy $(metric les_slots_busy), want 2"
code=$(curl -s -o "$WORK/body.json" -w '%{http_code}' -X POST -H "Authorization: Bearer $KEY" \
       -d '{"prompt": "Once", "max_tokens": 2}' "$URL/v1/completions")
[ "$code" = 503 ] || fail "--parallel 2: a full queue answered $code, want 503"
before=$(metric les_generations_cancelled_total)
kill "${pids[@]}"
wait "${pids[@]}" 2>/dev/null || true
for _ in $(seq 1 100); do
  [ "$(metric les_requests_running)" = 0 ] && [ "$(metric les_slots_busy)" = 0 ] && [ "$(metric les_requests_waiting)" = 0 ] && break
  sleep 0.1
done
[ "$(metric les_requests_running)" = 0 ] && [ "$(metric les_slots_busy)" = 0 ] \
  || fail "--parallel 2: a disconnected client's generation kept its slot"
[ "$(metric les_requests_waiting)" = 0 ] || fail "--parallel 2: a disconnected client stayed in the queue"
[ "$(metric les_generations_cancelled_total)" -ge $((before + 2)) ] || fail "--parallel 2: the running generations were not cancelled"
echo "ok: --parallel 2: disconnected clients free their slots and leave the queue"
expect 200 POST /v1/completions '{"prompt": "Once", "max_tokens": 4, "temperature": 0}'
stop_server
echo "PASS"
