// Shared helpers for the llama.cpp reference scripts (node-llama-cpp 3.22.1,
// prebuilt CPU binary of llama.cpp v0.5.0). Plain ES module, no other deps.
//
// Settings used everywhere (see README.md):
//   getLlama({gpu: false, build: "never", maxThreads: N})   prebuilt CPU binary, never compile/download
//   loadModel({gpuLayers: 0})
//   createContext({flashAttention: false,
//                  experimentalKvCacheKeyType: "F32", experimentalKvCacheValueType: "F32",
//                  threads: {ideal: N, min: N}, batchSize: B, contextSize: C})
//   sequence.controlledEvaluate([...]) with generateNext.logits / generateNext.token
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

export const HERE = path.dirname(fileURLToPath(import.meta.url));

export function die(msg, code = 2) {
    process.stderr.write(`error: ${msg}\n`);
    process.exit(code);
}

// Minimal argv parser. spec: {name: {type: "string"|"int"|"bool"|"list", alias?: "-n"}}.
// Accepts "--name value", "--name=value" and the alias form "-n value".
export function parseArgs(argv, spec, usage) {
    const out = {};
    const byFlag = new Map();
    for (const [name, s] of Object.entries(spec)) {
        byFlag.set("--" + name, name);
        if (s.alias) byFlag.set(s.alias, name);
        if (s.type === "list") out[name] = [];
        else if ("default" in s) out[name] = s.default;
    }
    for (let i = 0; i < argv.length; i++) {
        let a = argv[i];
        if (a === "-h" || a === "--help") {
            process.stdout.write(usage.trimStart());
            process.exit(0);
        }
        let inline;
        const eq = a.indexOf("=");
        if (a.startsWith("--") && eq > 0) {
            inline = a.slice(eq + 1);
            a = a.slice(0, eq);
        }
        const name = byFlag.get(a);
        if (name == null) die(`unknown argument ${JSON.stringify(argv[i])} (see --help)`);
        const s = spec[name];
        if (s.type === "bool") {
            if (inline != null) die(`${a} takes no value`);
            out[name] = true;
            continue;
        }
        let v = inline;
        if (v == null) {
            if (i + 1 >= argv.length) die(`${a} needs a value`);
            v = argv[++i];
        }
        if (s.type === "int") {
            if (!/^-?\d+$/.test(v)) die(`${a} needs an integer, got ${JSON.stringify(v)}`);
            out[name] = parseInt(v, 10);
        } else if (s.type === "list") out[name].push(v);
        else out[name] = v;
    }
    return out;
}

export function parseTokenList(s) {
    const t = s.trim();
    if (t === "") return [];
    if (t.startsWith("[")) {
        const a = JSON.parse(t);
        if (!Array.isArray(a) || !a.every(Number.isInteger)) die(`bad token list ${JSON.stringify(s)}`);
        return a;
    }
    return t.split(/[\s,]+/).filter((x) => x !== "").map((x) => {
        if (!/^\d+$/.test(x)) die(`bad token id ${JSON.stringify(x)} in ${JSON.stringify(s)}`);
        return parseInt(x, 10);
    });
}

export function readStdin() {
    return fs.readFileSync(0, "utf8");
}

function resolveThreads(threads) {
    const n = threads ?? 1;
    if (!Number.isInteger(n) || n < 1) die(`--threads must be >= 1, got ${threads}`);
    return n;
}

// Load the prebuilt CPU llama.cpp. Records which ggml CPU backend variant was
// picked (the logits depend on it in the last bits: haswell / zen4 / ...).
// logSink: optional function(level, message) that also receives every llama.cpp log line.
export async function loadLlama({ threads, logSink } = {}) {
    let nlc;
    try {
        nlc = await import("node-llama-cpp");
    } catch (e) {
        die(`cannot import node-llama-cpp (run "npm ci" in ${HERE}, see README.md): ${e.message}`, 3);
    }
    const info = { cpu_backend: null };
    const llama = await nlc.getLlama({
        gpu: false,           // CPU only: no CUDA/Vulkan/Metal probing
        build: "never",       // only a prebuilt (or existing local) binary; never compile
        skipDownload: true,   // never fetch llama.cpp sources
        usePrebuiltBinaries: true,
        progressLogs: false,
        maxThreads: resolveThreads(threads),
        logLevel: "log",
        logger: (level, message) => {
            const m = /load_backend: loaded CPU backend from (\S+)/.exec(message);
            if (logSink) logSink(level, message);
            if (m) info.cpu_backend = path.basename(m[1]).replace(/^libggml-cpu-/, "").replace(/\.so$/, "");
            if (level === "error" || level === "fatal" || level === "warn")
                process.stderr.write(`[llama.cpp ${level}] ${message}${message.endsWith("\n") ? "" : "\n"}`);
        },
    });
    if (llama.gpu !== false) die(`expected a CPU-only llama, got gpu=${llama.gpu}`, 3);
    const pkg = JSON.parse(fs.readFileSync(path.join(HERE, "node_modules/node-llama-cpp/package.json"), "utf8"));
    info.node_llama_cpp = pkg.version;
    info.llama_cpp_release = llama.llamaCppRelease?.release ?? null;
    info.build_type = llama.buildType;
    info.system_info = llama.systemInfo;
    return { nlc, llama, info };
}

export async function loadModel(llama, modelPath, { vocabOnly = false } = {}) {
    if (!modelPath) die("--model FILE is required");
    if (!fs.existsSync(modelPath)) die(`model not found: ${modelPath}`);
    return await llama.loadModel({ modelPath, gpuLayers: 0, vocabOnly });
}

// Context with the reference settings: F32 K and V cache, flash attention off,
// a fixed thread count, and a batch size large enough for a whole sequence.
// kvTypeK / kvTypeV ("F16", "Q8_0", ...): that cache type with flash attention on (llama.cpp
// needs it for a quantized V); left out: the F32 cache without flash attention.
export async function createRefContext(model, { threads, batchSize, contextSize, performanceTracking = false, kvTypeK, kvTypeV }) {
    const n = resolveThreads(threads);
    // node-llama-cpp keeps one slot free: a sequence of L tokens needs contextSize >= L + 1.
    const ctxSize = Math.max(contextSize ?? 0, 1);
    const bs = Math.max(1, Math.min(batchSize ?? ctxSize, ctxSize));
    const ctx = await model.createContext({
        contextSize: ctxSize,
        batchSize: bs,             // n_batch = n_ubatch = bs (whole sequence in one ubatch)
        sequences: 1,
        flashAttention: Boolean(kvTypeK || kvTypeV),
        threads: { ideal: n, min: n },
        experimentalKvCacheKeyType: kvTypeK ?? "F32",
        experimentalKvCacheValueType: kvTypeV ?? "F32",
        performanceTracking,
    });
    return ctx;
}

export function settingsRecord(info, ctx, threads) {
    return {
        node_llama_cpp: info.node_llama_cpp,
        llama_cpp_release: info.llama_cpp_release,
        build_type: info.build_type,
        cpu_backend: info.cpu_backend,
        gpu: false,
        threads,
        flash_attention: false,
        kv_cache_type_k: "F32",
        kv_cache_type_v: "F32",
        context_size: ctx?.contextSize,
        batch_size: ctx?.batchSize,
    };
}

// Full logits map (token -> logit) to a dense Float32Array indexed by token id.
export function denseLogits(map, nVocab) {
    const row = new Float32Array(nVocab);
    row.fill(NaN);
    for (const [id, v] of map) row[id] = v;
    return row;
}

// argmax (first index on ties, like llama.cpp's greedy sampler over the id-ordered
// candidate list) and top-k sorted by (logit desc, id asc).
export function argmaxTopK(row, k) {
    let best = 0;
    const top = []; // [id, logit], sorted by logit desc then id asc
    for (let i = 0; i < row.length; i++) {
        const v = row[i];
        if (v > row[best]) best = i;
        if (top.length === k && !(v > top[k - 1][1])) continue; // ties keep the lower id
        let j = top.length;
        while (j > 0 && v > top[j - 1][1]) j--;
        top.splice(j, 0, [i, v]);
        if (top.length > k) top.pop();
    }
    return { argmax: best, top };
}

export function median(xs) {
    const s = [...xs].sort((a, b) => a - b);
    const m = s.length >> 1;
    return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

export function writeJson(file, obj) {
    const text = JSON.stringify(obj, null, 1) + "\n";
    if (file == null || file === "-") process.stdout.write(text);
    else fs.writeFileSync(file, text);
}
