#!/usr/bin/env node
// The stored llama.cpp reference of a trained model file (tests/data/trained/*.ref.json and
// *.ref-logits.f32): full logits of fixed texts' first 16 tokens and greedy continuations of fixed
// prompts, with the settings of logits.mjs / greedy.mjs (CPU, 1 thread, F32 KV cache, flash
// attention off, one batch per sequence, no BOS).
import fs from "node:fs";
import path from "node:path";
import {
    parseArgs, die, loadLlama, loadModel, createRefContext, settingsRecord, denseLogits, argmaxTopK, writeJson,
} from "./common.mjs";

const USAGE = `
usage: node make-trained-ref.mjs --model FILE --json OUT.ref.json --out OUT.ref-logits.f32 [-n 32]

Sequences: the first 16 tokens of each reference text, every position's logits.
Greedy: each prompt's n-token argmax continuation (KV-cached decode, one token per step).
`;

const TEXTS = [
    "In the beginning God created the heaven and the earth. And the earth was without form, and void;",
    "The quick brown fox jumps over the lazy dog. A computer program is a list of instructions that",
];
const PROMPTS = ["And God said,", "The meaning of the word", "To list all files in a directory, use the"];

const args = parseArgs(process.argv.slice(2), {
    model: { type: "string" },
    json: { type: "string" },
    out: { type: "string" },
    n: { type: "int", alias: "-n", default: 32 },
}, USAGE);
if (!args.model || !args.json || !args.out) die("--model, --json and --out are required (see --help)");

const { llama, info } = await loadLlama({ threads: 1 });
const model = await loadModel(llama, args.model);
const ctx = await createRefContext(model, { threads: 1, batchSize: 512, contextSize: 512 });
const seq = ctx.getSequence();

const fd = fs.openSync(args.out, "w");
let nVocab = null;
const sequences = [];
for (const text of TEXTS) {
    const tokens = model.tokenize(text, false).slice(0, 16);
    if (tokens.length < 16) die(`"${text}" has fewer than 16 tokens`);
    await seq.clearHistory();
    const res = await seq.controlledEvaluate(tokens.map((t) => [t, { generateNext: { logits: true } }]));
    const positions = [];
    for (let j = 0; j < tokens.length; j++) {
        const map = res[j]?.next?.logits;
        if (map == null) die(`no logits at position ${j}`, 4);
        nVocab ??= map.size;
        const row = denseLogits(map, nVocab);
        fs.writeSync(fd, new Uint8Array(row.buffer, row.byteOffset, row.byteLength));
        const { argmax, top } = argmaxTopK(row, 10);
        positions.push({ argmax, top10: top });
    }
    sequences.push({ text, tokens, positions });
}
fs.closeSync(fd);

const next = { generateNext: { token: true, options: { temperature: 0 } } };
const greedy = [];
for (const prompt of PROMPTS) {
    const ptoks = model.tokenize(prompt, false);
    await seq.clearHistory();
    let res = await seq.controlledEvaluate(ptoks.map((t, i) => (i === ptoks.length - 1 ? [t, next] : t)));
    const gen = [];
    for (;;) {
        const tok = res[res.length - 1]?.next?.token;
        if (tok == null) die(`no token at step ${gen.length}`, 4);
        gen.push(tok);
        if (gen.length >= args.n) break;
        res = await seq.controlledEvaluate([[tok, next]]);
    }
    greedy.push({ prompt, prompt_tokens: ptoks, gen_tokens: gen, text: model.detokenize(gen, false) });
}

writeJson(args.json, {
    model: path.basename(args.model),
    n_vocab: nVocab,
    settings: settingsRecord(info, ctx, 1),
    logits_file: path.basename(args.out),
    logits_layout: "float32 little-endian, row-major [position][n_vocab], sequence 0 positions then sequence 1 positions",
    sequences,
    greedy,
});
await ctx.dispose();
await model.dispose();
await llama.dispose();
