#!/usr/bin/env node
// Full llama.cpp logits for token sequences (node-llama-cpp 3.22.1, CPU).
import fs from "node:fs";
import path from "node:path";
import {
    parseArgs, parseTokenList, readStdin, die, loadLlama, loadModel, createRefContext,
    settingsRecord, denseLogits, argmaxTopK, writeJson,
} from "./common.mjs";

const USAGE = `
usage: node logits.mjs --model FILE --tokens "1,2,3" [--tokens "..."]... [options]

For each token sequence: clear the context (empty KV cache, position 0), evaluate
the whole sequence in one llama_decode batch with output for every position, and
record the full logits. Settings: CPU prebuilt llama.cpp, F32 K/V cache, flash
attention off, no BOS added (the ids are used exactly as given).

  --model FILE         GGUF model (required)
  --tokens LIST        a sequence: "1,2,3", "1 2 3" or "[1,2,3]"; repeat for more
  --tokens-json FILE   JSON array of sequences ([[1,2],[3,4,5]]); "-" = stdin
  --out FILE.f32       raw logits: float32 little-endian, row-major
                       [position][n_vocab], sequence after sequence
  --json FILE          per-position argmax and top-K (id, logit) + metadata;
                       "-" = stdout (the default when neither --out nor --json)
  --top K              size of the top list in the JSON (default 10)
  --threads N          CPU threads (default 1)
  --batch N            llama.cpp batch size n_batch = n_ubatch (default: the
                       longest sequence, i.e. each sequence in ONE batch);
                       --batch 1 evaluates token by token (decode path)
  --ctx N              context size (default max(512, longest + 1))
  -h, --help           this text

JSON: {"n_vocab", "settings", "sequences": [{"tokens", "positions": [{"argmax",
"top10": [[id, logit], ...]}]}], "timing_s"}. argmax = first max id; the top list
is sorted by logit descending, ties by lower id.
`;

const args = parseArgs(process.argv.slice(2), {
    model: { type: "string" },
    tokens: { type: "list" },
    "tokens-json": { type: "string" },
    out: { type: "string" },
    json: { type: "string" },
    top: { type: "int", default: 10 },
    threads: { type: "int", default: 1 },
    batch: { type: "int" },
    ctx: { type: "int" },
}, USAGE);

const seqs = args.tokens.map(parseTokenList);
if (args["tokens-json"] != null) {
    const src = args["tokens-json"] === "-" ? readStdin() : fs.readFileSync(args["tokens-json"], "utf8");
    const a = JSON.parse(src);
    if (!Array.isArray(a) || !a.every((s) => Array.isArray(s) && s.every(Number.isInteger)))
        die("--tokens-json must hold a JSON array of arrays of token ids");
    seqs.push(...a);
}
if (!args.model) die("--model FILE is required (see --help)");
if (seqs.length === 0) die("give at least one --tokens sequence (see --help)");
if (seqs.some((s) => s.length === 0)) die("empty token sequence");
if (args.top < 0) die("--top must be >= 0");

const t0 = performance.now();
const { llama, info } = await loadLlama({ threads: args.threads });
const model = await loadModel(llama, args.model);
const maxLen = Math.max(...seqs.map((s) => s.length));
const ctxSize = args.ctx ?? Math.max(512, maxLen + 1);
if (ctxSize < maxLen + 1) die(`--ctx ${ctxSize} too small for a ${maxLen}-token sequence (needs >= ${maxLen + 1})`);
const ctx = await createRefContext(model, { threads: args.threads, batchSize: args.batch ?? maxLen, contextSize: ctxSize });
const seq = ctx.getSequence();
const tLoaded = performance.now();

const nTokensModel = model.fileInfo?.metadata?.tokenizer?.ggml?.tokens?.length;
let nVocab = null;
const fd = args.out != null ? fs.openSync(args.out, "w") : null;
const outSeqs = [];
const topKey = `top${args.top}`;
for (const tokens of seqs) {
    const bad = tokens.find((t) => t < 0 || (nTokensModel != null && t >= nTokensModel));
    if (bad != null) die(`token id ${bad} out of range [0, ${nTokensModel})`);
    await seq.clearHistory();
    const res = await seq.controlledEvaluate(tokens.map((t) => [t, { generateNext: { logits: true } }]));
    const positions = [];
    for (let j = 0; j < tokens.length; j++) {
        const map = res[j]?.next?.logits;
        if (map == null) die(`no logits returned for position ${j}`, 4);
        if (nVocab == null) nVocab = map.size;
        if (map.size !== nVocab) die(`position ${j}: ${map.size} logits, expected ${nVocab}`, 4);
        const row = denseLogits(map, nVocab);
        if (fd != null) fs.writeSync(fd, new Uint8Array(row.buffer, row.byteOffset, row.byteLength));
        const { argmax, top } = argmaxTopK(row, args.top);
        positions.push({ argmax, [topKey]: top });
    }
    outSeqs.push({ tokens, positions });
}
if (fd != null) fs.closeSync(fd);
const tDone = performance.now();

const result = {
    model: path.basename(args.model),
    n_vocab: nVocab,
    n_positions: seqs.reduce((a, s) => a + s.length, 0),
    settings: settingsRecord(info, ctx, args.threads),
    logits_file: args.out != null ? path.basename(args.out) : null,
    logits_layout: "float32 little-endian, row-major [position][n_vocab], sequences concatenated in order",
    sequences: outSeqs,
    timing_s: { load: (tLoaded - t0) / 1000, eval: (tDone - tLoaded) / 1000 },
};
if (args.json != null || args.out == null) writeJson(args.json, result);

await ctx.dispose();
await model.dispose();
await llama.dispose();
