#!/usr/bin/env node
// Greedy (argmax) continuation with llama.cpp, KV-cached decode.
import path from "node:path";
import {
    parseArgs, parseTokenList, die, loadLlama, loadModel, createRefContext, settingsRecord, writeJson,
} from "./common.mjs";

const USAGE = `
usage: node greedy.mjs --model FILE (--tokens "1,2,3" | --text STR) -n N [options]

Evaluates the prompt from an empty context in one batch, then appends the argmax
token N times, decoding one token per step against the KV cache (llama.cpp's
greedy sampler: temperature 0, no penalties, no top-k/p; ties -> lowest id). It
does not stop at end-of-generation tokens. Settings as logits.mjs: CPU, F32 K/V
cache, flash attention off, no BOS added.

  --model FILE      GGUF model (required)
  --tokens LIST     prompt ids: "1,2,3", "1 2 3" or "[1,2,3]"
  --text STR        prompt text instead, tokenized without special-token parsing
  -n N              number of tokens to generate (default 32)
  --threads N       CPU threads (default 1)
  --ctx N           context size (default max(512, prompt + N + 1))
  --json FILE       output file (default stdout)
  -h, --help        this text

Output JSON: {"prompt_tokens", "gen_tokens", "text" (detokenized gen_tokens),
"settings", "timing_s"}.
`;

const args = parseArgs(process.argv.slice(2), {
    model: { type: "string" },
    tokens: { type: "string" },
    text: { type: "string" },
    n: { type: "int", alias: "-n", default: 32 },
    threads: { type: "int", default: 1 },
    ctx: { type: "int" },
    json: { type: "string" },
}, USAGE);
if (!args.model) die("--model FILE is required (see --help)");
if ((args.tokens == null) === (args.text == null)) die("give exactly one of --tokens or --text");
if (args.n < 0) die("-n must be >= 0");

const t0 = performance.now();
const { llama, info } = await loadLlama({ threads: args.threads });
const model = await loadModel(llama, args.model);
const prompt = args.tokens != null ? parseTokenList(args.tokens) : model.tokenize(args.text, false);
if (prompt.length === 0) die("empty prompt");
const need = prompt.length + args.n + 1;
const ctxSize = args.ctx ?? Math.max(512, need);
if (ctxSize < need) die(`--ctx ${ctxSize} too small (needs >= ${need})`);
const ctx = await createRefContext(model, { threads: args.threads, batchSize: prompt.length, contextSize: ctxSize });
const seq = ctx.getSequence();
const tLoaded = performance.now();

const next = { generateNext: { token: true, options: { temperature: 0 } } };
const gen = [];
let tPrompt = tLoaded;
if (args.n > 0) {
    let res = await seq.controlledEvaluate(prompt.map((t, i) => (i === prompt.length - 1 ? [t, next] : t)));
    tPrompt = performance.now();
    for (;;) {
        const tok = res[res.length - 1]?.next?.token;
        if (tok == null) die(`no token returned at step ${gen.length}`, 4);
        gen.push(tok);
        if (gen.length >= args.n) break;
        res = await seq.controlledEvaluate([[tok, next]]);
    }
}
const tDone = performance.now();

writeJson(args.json, {
    model: path.basename(args.model),
    prompt_tokens: prompt,
    gen_tokens: gen,
    text: model.detokenize(gen, false),
    settings: settingsRecord(info, ctx, args.threads),
    timing_s: { load: (tLoaded - t0) / 1000, prompt: (tPrompt - tLoaded) / 1000, decode: (tDone - tPrompt) / 1000 },
});

await ctx.dispose();
await model.dispose();
await llama.dispose();
