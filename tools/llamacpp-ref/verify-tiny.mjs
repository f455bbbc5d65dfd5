#!/usr/bin/env node
// Re-check this harness against the stored llama.cpp reference of the bundled trained model:
// logits of the 2 reference sequences, the 3 greedy continuations, tokenization.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { spawnSync } from "node:child_process";
import { HERE, parseArgs } from "./common.mjs";

const USAGE = `
usage: node verify-tiny.mjs [--model FILE] [--ref REF.json] [--tol 5e-3]

Runs logits.mjs, greedy.mjs and tokenize.mjs on FILE (default: the repository's
models/tiny-moe-q4_k_m.gguf) and compares with its stored reference REF.json and
the logits file it names beside it (default:
tests/data/trained/tiny-moe-q4_k_m.ref.json). Prints a JSON summary; exit status 1
when the max abs logit diff > --tol, an argmax differs, or a greedy/tokenize
result differs. A non-zero diff is expected when the CPU backend variant
differs from the one that made the reference (see README.md).
`;
const args = parseArgs(process.argv.slice(2), {
    model: { type: "string", default: path.join(HERE, "../../models/tiny-moe-q4_k_m.gguf") },
    ref: { type: "string", default: path.join(HERE, "../../tests/data/trained/tiny-moe-q4_k_m.ref.json") },
    tol: { type: "string", default: "5e-3" },
}, USAGE);

const model = args.model;
const ref = JSON.parse(fs.readFileSync(args.ref, "utf8"));
const refLogits = path.join(path.dirname(args.ref), ref.logits_file);
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "llref-"));
const run = (script, argv, input) => {
    const r = spawnSync(process.execPath, [path.join(HERE, script), ...argv], { input, encoding: "utf8", maxBuffer: 1 << 28 });
    if (r.status !== 0) throw new Error(`${script} failed (${r.status}): ${r.stderr}`);
    return r.stdout;
};

const out = {};
let ok = true;

// 1. logits
const f32 = path.join(tmp, "l.f32");
const lj = JSON.parse(run("logits.mjs", ["--model", model, ...ref.sequences.flatMap((s) => ["--tokens", s.tokens.join(",")]), "--out", f32, "--json", "-"]));
const cmp = JSON.parse(run("compare.mjs", [f32, refLogits, "--n-vocab", String(ref.n_vocab)]));
const top10Same = lj.sequences.every((s, i) => s.positions.every((p, j) =>
    JSON.stringify(p.top10.map((x) => x[0])) === JSON.stringify(ref.sequences[i].positions[j].top10.map((x) => x[0]))));
out.logits = {
    cpu_backend: lj.settings.cpu_backend, bitwise_equal: cmp.bitwise_equal,
    max_abs_diff: cmp.max_abs_diff, mean_abs_diff: cmp.mean_abs_diff,
    max_abs_diff_per_sequence: ref.sequences.map((s, i) => {
        const off = ref.sequences.slice(0, i).reduce((a, x) => a + x.tokens.length, 0);
        return Math.max(...cmp.max_abs_diff_per_position.slice(off, off + s.tokens.length));
    }),
    argmax_agreement: cmp.argmax_agreement, top10_ids_identical: top10Same,
};
if (cmp.max_abs_diff > Number(args.tol) || cmp.argmax_agreement !== 1) ok = false;

// 2. greedy
out.greedy = ref.greedy.map((g) => {
    const r = JSON.parse(run("greedy.mjs", ["--model", model, "--tokens", g.prompt_tokens.join(","), "-n", String(g.gen_tokens.length)]));
    const same = JSON.stringify(r.gen_tokens) === JSON.stringify(g.gen_tokens) && r.text === g.text;
    if (!same) ok = false;
    return { prompt: g.prompt, identical: same };
});

// 3. tokenization of the README prompts and reference texts
const texts = [...ref.greedy.map((g) => g.prompt), ...ref.sequences.map((s) => s.text)];
const toks = JSON.parse(run("tokenize.mjs", ["--model", model], JSON.stringify(texts)));
out.tokenize = texts.map((t, i) => {
    const want = i < ref.greedy.length ? ref.greedy[i].prompt_tokens : ref.sequences[i - ref.greedy.length].tokens;
    const got = i < ref.greedy.length ? toks[i] : toks[i].slice(0, want.length);
    const same = JSON.stringify(got) === JSON.stringify(want);
    if (!same) ok = false;
    return { text: t, identical: same };
});

fs.rmSync(tmp, { recursive: true, force: true });
out.ok = ok;
process.stdout.write(JSON.stringify(out, null, 1) + "\n");
process.exit(ok ? 0 : 1);
