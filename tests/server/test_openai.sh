#!/usr/bin/env bash
# The official openai npm client against `les serve` on the trained model; replies must equal
# `les run`'s greedy text for the same prompts.   test_openai.sh LES MODEL
LES=$1 MODEL=$2
source "$(dirname "$0")/common.sh"
need_node
need_model
N=24
CHAT_PROMPT="Tell me about the king of the land."
COMP_PROMPT="In the beginning God created the heaven and the earth. And the earth was"
# les run prints the text and one newline (stdout only: the prompt is not echoed).
"$LES" run -m "$MODEL" -p "$CHAT_PROMPT" --chat -n $N --temp 0 --no-display-prompt >"$WORK/chat.txt" 2>/dev/null
"$LES" run -m "$MODEL" -p "$COMP_PROMPT" -n $N --temp 0 --no-display-prompt >"$WORK/comp.txt" 2>/dev/null
NAME=$(basename "$MODEL")
CHAT_PROMPT="$CHAT_PROMPT" COMP_PROMPT="$COMP_PROMPT" W="$WORK" NAME="$NAME" N=$N node -e '
  const fs = require("fs"), e = process.env;
  const text = (f) => { const t = fs.readFileSync(e.W + "/" + f, "utf8"); if (!t.endsWith("\n")) throw new Error(f); return t.slice(0, -1); };
  const comp = text("comp.txt");
  if (!comp.length) throw new Error("les run produced no text");
  console.log(JSON.stringify({model: e.NAME, max_tokens: +e.N, chat: {prompt: e.CHAT_PROMPT, text: text("chat.txt")},
                              completion: {prompt: e.COMP_PROMPT, text: comp}}));' >"$WORK/expected.json"
start_server URL --api-key test-key -c 512
node "$ROOT/tests/server/openai_client.mjs" "$URL" test-key "$WORK/expected.json" || fail "openai client checks"
stop_server
echo "PASS"
