#!/usr/bin/env bash
# Regenerate tests/data/tokenizer_expected_tiny.json: llama.cpp's token ids for every
# string in tests/data/tokenizer_texts.json, with the vocabulary of the trained tiny
# model, both without and with special-token parsing.
#
#   scripts/gen_tokenizer_expected.sh [MODEL.gguf] [OUT.json]
#
# Needs the reference harness installed (once):
#   cd tools/llamacpp-ref && NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm ci --omit=optional
#
# The ids come from tools/llamacpp-ref/tokenize.mjs = node-llama-cpp 3.22.1
# (llama.cpp v0.5.0) model.tokenize(text, special) = common_tokenize(vocab, text,
# add_special=false, parse_special=special): no BOS/EOS added.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MODEL="${1:-$ROOT/models/tiny-moe-q4_k_m.gguf}"
OUT="${2:-$ROOT/tests/data/tokenizer_expected_tiny.json}"
TEXTS="$ROOT/tests/data/tokenizer_texts.json"
REF="$ROOT/tools/llamacpp-ref"

[ -f "$MODEL" ] || { echo "model not found: $MODEL" >&2; exit 1; }
[ -d "$REF/node_modules/node-llama-cpp" ] || { echo "run npm ci in $REF first (see its README.md)" >&2; exit 1; }

TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

node "$REF/tokenize.mjs" --model "$MODEL" --in "$TEXTS" --out "$TMP/plain.json"
node "$REF/tokenize.mjs" --model "$MODEL" --in "$TEXTS" --out "$TMP/special.json" --special
# round trip: detokenize the plain ids (no special rendering) -> must give the text back
node "$REF/tokenize.mjs" --model "$MODEL" --in "$TMP/plain.json" --out "$TMP/detok.json" --detokenize

node --input-type=module - "$TEXTS" "$TMP" "$MODEL" "$OUT" <<'EOF'
import fs from "node:fs";
import path from "node:path";
const [texts, tmp, model, out] = process.argv.slice(2);
const T = JSON.parse(fs.readFileSync(texts, "utf8"));
const plain = JSON.parse(fs.readFileSync(path.join(tmp, "plain.json"), "utf8"));
const special = JSON.parse(fs.readFileSync(path.join(tmp, "special.json"), "utf8"));
const detok = JSON.parse(fs.readFileSync(path.join(tmp, "detok.json"), "utf8"));
if (plain.length !== T.length || special.length !== T.length) throw new Error("length mismatch");
const bad = T.map((t, i) => (detok[i] === t ? null : i)).filter((i) => i != null);
if (bad.length) console.error(`note: detokenize(tokenize(text)) != text for cases ${bad.join(", ")}`);
const lines = [];
lines.push("{");
lines.push(` "model": ${JSON.stringify(path.basename(model))},`);
lines.push(` "generator": "scripts/gen_tokenizer_expected.sh (tools/llamacpp-ref/tokenize.mjs, node-llama-cpp 3.22.1 = llama.cpp v0.5.0)",`);
lines.push(` "texts_file": "tests/data/tokenizer_texts.json",`);
lines.push(` "semantics": "no_special = common_tokenize(vocab, text, add_special=false, parse_special=false); special = same with parse_special=true; no BOS/EOS is added; roundtrip = (llama_detokenize(no_special ids, remove_special=false, unparse_special=false) == text)",`);
lines.push(` "count": ${T.length},`);
lines.push(` "cases": [`);
T.forEach((t, i) => {
    lines.push(`  {"text": ${JSON.stringify(t)},`);
    lines.push(`   "no_special": ${JSON.stringify(plain[i])},`);
    lines.push(`   "special": ${JSON.stringify(special[i])},`);
    lines.push(`   "roundtrip": ${detok[i] === t}}${i + 1 < T.length ? "," : ""}`);
});
lines.push(" ]");
lines.push("}");
fs.writeFileSync(out, lines.join("\n") + "\n");
console.error(`wrote ${out}: ${T.length} texts`);
EOF
