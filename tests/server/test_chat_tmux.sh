#!/usr/bin/env bash
# `les chat` driven as a user drives it, in a terminal: tmux (a private server, a fixed wide
# window) types with send-keys and reads the screen with capture-pane, polling with deadlines.
#   (a) the first reply equals `les run --chat` for the same message (greedy, -n N);
#   (b) a second turn gets a reply built on the history (it differs from the fresh one-turn reply
#       to the same message), and after /reset the first message gets exactly the first reply again;
#   (c) Ctrl-C during a long reply stops it (" [stopped]"), the program keeps running and the next
#       message gets a reply (itself stopped with Ctrl-C again);
#   (d) Ctrl-C at the empty prompt does not exit (it says how to quit); /exit and Ctrl-D exit with
#       status 0.
#   test_chat_tmux.sh LES MODEL
LES=$1 MODEL=$2
source "$(dirname "$0")/common.sh"
unset TMUX  # a test run from inside tmux: this test drives its own private tmux server
command -v tmux >/dev/null 2>&1 || skip "tmux not found"
need_model
LES=$(cd "$(dirname "$LES")" && pwd)/$(basename "$LES")

SOCK=les-chat-test-$$
T() { tmux -L "$SOCK" -f /dev/null "$@"; }
trap 'T kill-server 2>/dev/null || true; cleanup' EXIT
WIDTH=240 HEIGHT=60
TIMEOUT=${LES_CHAT_TEST_TIMEOUT:-120}  # seconds per wait (the ASan build is slower)

# start NAME ARGS...: `les chat ARGS` in its own tmux session, under a bash that writes its exit
# status to WORK/NAME.status (the bash traps SIGINT, so Ctrl-C reaches les chat alone; tmux 3.3
# reports no pane_dead_status for a status of 0). The pane stays after the program ends, so its last
# screen can be read.
start() {
  local name=$1
  shift
  local cmd
  printf -v cmd '%q ' "$LES" chat -m "$MODEL" "$@"
  cmd="trap : INT; $cmd; echo \$? > $(printf '%q' "$WORK/$name.status")"
  rm -f "$WORK/$name.status"
  if T has-session 2>/dev/null; then
    T new-session -d -s "$name" -x $WIDTH -y $HEIGHT bash -c "$cmd"
  else
    T start-server \; set-option -g remain-on-exit on \; set-option -g history-limit 20000 \; \
      new-session -d -s "$name" -x $WIDTH -y $HEIGHT bash -c "$cmd"
  fi
}

# The pane's whole history, wrapped lines joined, trailing blanks cut.
screen() { T capture-pane -p -J -S - -t "$1" | sed 's/[[:space:]]*$//'; }
dead() { [ -s "$WORK/$1.status" ]; }
status_of() { cat "$WORK/$1.status" 2>/dev/null; }
die() {
  echo "--- screen of $1 ---" >&2
  screen "$1" | grep -v '^$' | tail -40 >&2 || true
  fail "$2"
}

# wait_until NAME WHAT COMMAND...: polls COMMAND every 0.1 s until it succeeds; fails after TIMEOUT.
wait_until() {
  local name=$1 what=$2
  shift 2
  local deadline=$((SECONDS + TIMEOUT))
  until "$@"; do
    [ $SECONDS -lt $deadline ] || die "$name" "timed out ($TIMEOUT s) waiting for $what"
    dead "$name" && ! "$@" && die "$name" "les chat exited (status $(status_of "$name")) while waiting for $what"
    sleep 0.1
  done
}
# Idle at the Kth prompt: K prompt lines ("> " then what was typed; "> " alone is ">" once trailing
# blanks are cut) and the last line is the empty prompt.
idle_at() {
  local s
  s=$(screen "$1" | grep -v '^$')
  [ "$(grep -cE '^>( |$)' <<<"$s")" -ge "$2" ] && [ "$(tail -1 <<<"$s")" = ">" ]
}

# reply NAME MSG: sets REPLY to the lines after the last "> MSG" line up to the next prompt line and
# DONE to 1 when that prompt has appeared (the reply is complete), 0 otherwise.
reply() {
  local out
  out=$(screen "$1" | awk -v m="> $2" '
    $0 == m { inb = 1; out = ""; first = 1; done = 0; next }
    inb && /^>( |$)/ { inb = 0; done = 1; next }
    inb { out = first ? $0 : out "\n" $0; first = 0 }
    END { printf "%d\n%s", done, out }')
  DONE=${out%%$'\n'*}
  REPLY=${out#*$'\n'}
  [ "$REPLY" != "$out" ] || REPLY=""
}
reply_done() { reply "$1" "$2"; [ "$DONE" = 1 ]; }
reply_started() { reply "$1" "$2"; [[ "$REPLY" == *[![:space:]]* ]]; }

# say NAME MSG K: types MSG at the (K-1)th prompt and waits until the reply is complete (the Kth prompt).
say() {
  T send-keys -t "$1" -l -- "$2"
  T send-keys -t "$1" Enter
  wait_until "$1" "the reply to '$2'" idle_at "$1" "$3"
  reply "$1" "$2"
}

# run_reply MSG N: `les run --chat`'s greedy reply to MSG as les chat -n N must show it: RUN_TEXT
# (without les run's final newline) and RUN_SHOWN, as the pane shows it (tabs expanded, trailing
# blanks cut, trailing empty lines gone, as in REPLY), with " [length limit]" appended when les run
# stopped at -n or the context's end (les chat marks such a reply so).
run_reply() {
  local t why
  t=$("$LES" run -m "$MODEL" -p "$1" --chat -n "$2" --temp 0 --no-display-prompt 2>"$WORK/run.err" && echo x) \
    || fail "les run -p '$1' failed: $(cat "$WORK/run.err")"
  t=${t%x}
  RUN_TEXT=${t%$'\n'}
  why=$(sed -n 's/.*| stop: \([a-z]*\)$/\1/p' "$WORK/run.err")
  case "$why" in
    eog) t=$RUN_TEXT ;;
    length | context) t="$RUN_TEXT [length limit]" ;;
    *) fail "les run: no stop reason in its report: $(cat "$WORK/run.err")" ;;
  esac
  RUN_SHOWN=$(printf '%s' "$t" | expand | sed 's/[[:space:]]*$//')
}

N=12
MSG1="Tell me about the king of the land."
MSG2="And what did he do then?"
run_reply "$MSG2" $N
fresh2=$RUN_SHOWN
run_reply "$MSG1" $N
[ -n "$RUN_TEXT" ] || fail "les run gave an empty reply to '$MSG1'"

# --- (a), (b), (d): short replies ---
start a --temp 0 -c 2048 -n $N
wait_until a "the first prompt" idle_at a 1
say a "$MSG1" 2
first=$REPLY
[ "$first" = "$RUN_SHOWN" ] || die a "(a) the first reply differs from les run --chat -n $N:
  chat: $(printf '%q' "$first")
  run:  $(printf '%q' "$RUN_SHOWN")"
echo "ok: (a) the first reply equals les run --chat -n $N: $(printf '%q' "$first")"

say a "$MSG2" 3
[[ "$REPLY" == *[![:space:]]* ]] || die a "(b) the second turn got no reply"
second=$REPLY
if [ "$second" = "$fresh2" ]; then
  die a "(b) the second reply equals the one-turn reply to '$MSG2': the history was not in the prompt"
fi
echo "ok: (b) the second turn got a reply that depends on the history: $(printf '%q' "$second")"

say a "/reset" 4
screen a | grep -qx '(conversation forgotten)' || die a "/reset did not say '(conversation forgotten)'"
say a "$MSG1" 5
[ "$REPLY" = "$first" ] || die a "(b) after /reset the first message got $(printf '%q' "$REPLY"), want $(printf '%q' "$first")"
echo "ok: (b) after /reset the first message gets the first reply again"

T send-keys -t a C-c
wait_until a "a new prompt after Ctrl-C at the prompt" idle_at a 6
dead a && die a "(d) Ctrl-C at the empty prompt ended les chat"
screen a | grep -qxF '(Ctrl-D or /exit quits)' || die a "(d) Ctrl-C at the prompt did not say how to quit"
T send-keys -t a -l -- "/exit"
T send-keys -t a Enter
wait_until a "les chat to exit after /exit" dead a
[ "$(status_of a)" = 0 ] || die a "(d) /exit: les chat exited with status $(status_of a), want 0"
echo "ok: (d) Ctrl-C at the prompt keeps les chat running; /exit exits with status 0"

# --- (c): a long reply (up to 4000 tokens past end-of-generation) stopped with Ctrl-C ---
# stop_reply NAME MSG K: sends MSG, waits for its reply to start, sends Ctrl-C and waits for the
# Kth prompt; the reply must end with " [stopped]".
stop_reply() {
  T send-keys -t "$1" -l -- "$2"
  T send-keys -t "$1" Enter
  wait_until "$1" "the reply to '$2' to start" reply_started "$1" "$2"
  reply "$1" "$2"
  [ "$DONE" = 0 ] || die "$1" "(c) the long reply to '$2' ended before Ctrl-C could stop it"
  T send-keys -t "$1" C-c
  wait_until "$1" "the prompt after Ctrl-C stopped the reply" idle_at "$1" "$3"
  reply "$1" "$2"
  [[ "$REPLY" == *" [stopped]" ]] || die "$1" "(c) the reply stopped by Ctrl-C does not end with ' [stopped]'"
  dead "$1" && die "$1" "(c) Ctrl-C during a reply ended les chat"
  local words
  words=$(printf '%s' "$REPLY" | wc -w)
  echo "ok: (c) Ctrl-C stopped the reply to '$2' after about $words words"
}
start c --temp 0 -c 4096 -n 4000 --ignore-eos
wait_until c "the first prompt" idle_at c 1
stop_reply c "Write a very long story about the sea." 2
stop_reply c "Tell me more." 3
T send-keys -t c C-d
wait_until c "les chat to exit after Ctrl-D" dead c
[ "$(status_of c)" = 0 ] || die c "Ctrl-D: les chat exited with status $(status_of c), want 0"
echo "ok: (c) the program kept running after Ctrl-C; Ctrl-D exits with status 0"
echo "PASS"
