#!/usr/bin/env node
// Prefill and decode throughput of llama.cpp (node-llama-cpp, CPU) on a GGUF.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import {
    parseArgs, die, loadLlama, loadModel, createRefContext, settingsRecord, median, writeJson,
} from "./common.mjs";

const USAGE = `
usage: node bench.mjs --model FILE [--threads N] [-n 64] [--prompt-tokens 128] [options]

One repeat = clear the context; prefill: evaluate the P prompt tokens in ONE
batch (output only for the last position, greedy token); decode: N single-token
steps continuing after the prompt, each feeding the previous greedy token and
computing its logits + argmax (KV-cached). Wall-clock time around each call
(includes the small node-llama-cpp JS/N-API overhead per call). Reports the
median over the repeats (after the warm-up repeats), as JSON.

  --model FILE          GGUF model (required)
  --threads N           CPU threads (default 1)
  -n N                  decode steps (default 64)
  --prompt-tokens P     prompt length (default 128)
  --prompt-file FILE    take the prompt from the first P tokens of this text
                        file (default: deterministic pseudo-random non-control ids)
  --repeats R           measured repeats (default 5)
  --warmup W            unmeasured warm-up repeats (default 1)
  --json FILE           output file (default stdout)
  -h, --help            this text

Settings as logits.mjs: CPU prebuilt llama.cpp, F32 K/V cache, flash attention
off, n_batch = n_ubatch = P. --cache-type-k/--cache-type-v T (f16, q8_0, ...):
that K/V cache type with flash attention on.
`;

const args = parseArgs(process.argv.slice(2), {
    model: { type: "string" },
    threads: { type: "int", default: 1 },
    n: { type: "int", alias: "-n", default: 64 },
    "prompt-tokens": { type: "int", default: 128 },
    "prompt-file": { type: "string" },
    repeats: { type: "int", default: 5 },
    warmup: { type: "int", default: 1 },
    json: { type: "string" },
    "cache-type-k": { type: "string" },
    "cache-type-v": { type: "string" },
}, USAGE);
if (!args.model) die("--model FILE is required (see --help)");
const P = args["prompt-tokens"];
const N = args.n;
if (P < 1) die("--prompt-tokens must be >= 1");
if (N < 1) die("-n must be >= 1");
if (args.repeats < 1) die("--repeats must be >= 1");

const t0 = performance.now();
let perfLines = [];
const { llama, info } = await loadLlama({
    threads: args.threads,
    logSink: (level, message) => { if (message.includes("llama_perf_context_print")) perfLines.push(message); },
});
const model = await loadModel(llama, args.model);
const tLoaded = performance.now();

let prompt;
if (args["prompt-file"] != null) {
    prompt = model.tokenize(fs.readFileSync(args["prompt-file"], "utf8"), false).slice(0, P);
    if (prompt.length < P) die(`--prompt-file gives only ${prompt.length} tokens`);
} else {
    const nTok = model.fileInfo?.metadata?.tokenizer?.ggml?.tokens?.length;
    const types = model.fileInfo?.metadata?.tokenizer?.ggml?.token_type;
    if (!(nTok > 0)) die("cannot read the vocabulary size from the GGUF");
    let x = 12345;
    prompt = [];
    while (prompt.length < P) {
        x = (Math.imul(x, 1103515245) + 12345) >>> 0;
        const t = (x >>> 8) % nTok;
        if (types == null || types[t] === 1) prompt.push(t); // 1 = normal token
    }
}

const kvTypes = args["cache-type-k"] || args["cache-type-v"]
    ? { kvTypeK: (args["cache-type-k"] ?? "f16").toUpperCase(), kvTypeV: (args["cache-type-v"] ?? "f16").toUpperCase() }
    : {};
const ctx = await createRefContext(model, { threads: args.threads, batchSize: P, contextSize: Math.max(512, P + N + 1), performanceTracking: true, ...kvTypes });

// llama.cpp's own timers (llama_perf_context_print; printTimings() also resets them):
// "prompt eval" = multi-token batches, "eval" = single-token batches. Excludes the JS overhead.
async function internalTimes() {
    perfLines = [];
    await ctx.printTimings();
    const text = perfLines.join("\n");
    const pe = /prompt eval time =\s*([\d.]+) ms \/\s*(\d+) tokens/.exec(text);
    const ev = /[^t] eval time =\s*([\d.]+) ms \/\s*(\d+) runs/.exec(text);
    return {
        prompt_s: pe ? parseFloat(pe[1]) / 1000 : null, prompt_tokens: pe ? parseInt(pe[2], 10) : null,
        eval_s: ev ? parseFloat(ev[1]) / 1000 : null, eval_runs: ev ? parseInt(ev[2], 10) : null,
    };
}
const seq = ctx.getSequence();
const next = { generateNext: { token: true, options: { temperature: 0 } } };

const prefillS = [];
const decodeS = [];
const prefillInternalS = [];
const decodeInternalS = [];
let genTokens = null;
for (let r = 0; r < args.warmup + args.repeats; r++) {
    await seq.clearHistory();
    await internalTimes(); // reset
    const input = prompt.map((t, i) => (i === P - 1 ? [t, next] : t));
    const a = performance.now();
    let res = await seq.controlledEvaluate(input);
    const b = performance.now();
    const ip = await internalTimes();
    const b2 = performance.now();
    let tok = res[P - 1].next.token;
    const gen = [];
    for (let i = 0; i < N; i++) {
        res = await seq.controlledEvaluate([[tok, next]]);
        gen.push(tok);
        tok = res[0].next.token;
    }
    const c = performance.now();
    const id = await internalTimes();
    if (r >= args.warmup) {
        prefillS.push((b - a) / 1000);
        decodeS.push((c - b2) / 1000);
        if (ip.prompt_tokens === P) prefillInternalS.push(ip.prompt_s);
        if (id.eval_runs === N) decodeInternalS.push(id.eval_s);
    }
    genTokens = gen;
}

const pre = median(prefillS);
const dec = median(decodeS);
writeJson(args.json, {
    engine: "llama.cpp (node-llama-cpp)",
    model: path.basename(args.model),
    threads: args.threads,
    prompt_tokens: P,
    decode_tokens: N,
    repeats: args.repeats,
    warmup: args.warmup,
    prefill_tok_s: P / pre,
    decode_tok_s: N / dec,
    prefill_s_median: pre,
    decode_s_median: dec,
    decode_ms_per_token: (dec / N) * 1000,
    prefill_s: prefillS,
    decode_s: decodeS,
    llama_internal: prefillInternalS.length && decodeInternalS.length ? {
        note: "llama.cpp's own perf counters (llama_perf_context): decode compute without node-llama-cpp's JS/N-API overhead",
        prefill_tok_s: P / median(prefillInternalS),
        decode_tok_s: N / median(decodeInternalS),
        prefill_s: prefillInternalS,
        decode_s: decodeInternalS,
    } : null,
    load_s: (tLoaded - t0) / 1000,
    decoded_token_ids: genTokens,
    settings: settingsRecord(info, ctx, args.threads),
    host: { cpus: os.cpus().length, cpu_model: os.cpus()[0]?.model ?? null, node: process.version },
});

await ctx.dispose();
await model.dispose();
await llama.dispose();
