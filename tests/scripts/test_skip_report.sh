#!/usr/bin/env bash
# The skip accounting end to end: a tagged GTEST_SKIP lands in $LES_SKIP_LOG with its category
# (tests/test_main.cpp), scripts/skip_report.sh groups the lines, passes on allowed categories and
# fails on an untagged skip (a missing file must fail its test, not skip).
#   test_skip_report.sh LES_TESTS ROOT
set -euo pipefail
TESTS=$1 ROOT=$2
WORK=$(mktemp -d "${TMPDIR:-/tmp}/les-skip-test-XXXXXX")
trap 'rm -rf "$WORK"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

log=$WORK/skips.log
# An optional-tool skip (no LES_LLAMA_CPP_MODELS) and a test that runs: one line, tagged "optional".
env -u LES_LLAMA_CPP_MODELS LES_SKIP_LOG="$log" "$TESTS" \
  --gtest_filter='TokenizerVocabFiles.LlamaCppCheckout:TokenizerVocabFiles.Qwen2' >/dev/null
[ "$(wc -l <"$log")" = 1 ] || fail "expected one skip line, got: $(cat "$log")"
IFS=$'\t' read -r cat why name <"$log"
[ "$cat" = optional ] || fail "category '$cat'"
[ "$name" = TokenizerVocabFiles.LlamaCppCheckout ] || fail "test name '$name'"
case "$why" in *LES_LLAMA_CPP_MODELS*) ;; *) fail "reason '$why'" ;; esac

# Grouping: three skips for one reason are one line with their count.
printf 'cpu\tneon: not supported\tA.x\ncpu\tneon: not supported\tA.y\ncpu\tneon: not supported\tA.z\n' >>"$log"
out=$(bash "$ROOT/scripts/skip_report.sh" "$log" demo) || fail "allowed skips failed the report: $out"
echo "$out" | grep -q '4 tests skipped' || fail "no total: $out"
echo "$out" | grep -Eq '^ +3  \[cpu\] neon: not supported  \(A.x, A.y, A.z\)$' || fail "not grouped: $out"

# An untagged skip fails the report and is named.
printf 'untagged\tmissing /x/model.gguf\tB.w\n' >>"$log"
if out=$(bash "$ROOT/scripts/skip_report.sh" "$log" demo); then fail "an untagged skip passed: $out"; fi
echo "$out" | grep -q 'B.w: missing /x/model.gguf' || fail "the untagged skip is not named: $out"

# No log, or an empty one: nothing skipped.
bash "$ROOT/scripts/skip_report.sh" "$WORK/none.log" demo | grep -q 'none' || fail "missing log"
echo "ok"
