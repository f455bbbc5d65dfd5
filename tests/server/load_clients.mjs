// The load test's clients (test_load.sh): N distinct deterministic requests against `les serve`,
// first one after another (the reference), then all at once, each from its own openai client; every
// concurrent reply must equal its reference exactly (text, finish_reason, usage counts), so nothing
// is lost, cut or handed to the wrong client. Prints one summary line:
//   load: 100 clients, 100/100 ok, X req/s, Y tok/s, latency p50 A ms p99 B ms
//   node load_clients.mjs BASE_URL API_KEY MODEL_NAME [N] [REF_FILE]
// REF_FILE: where the reference is kept: written by the run that makes it, read (instead of a
// reference pass) by the next, so that a batched server (--parallel) answers concurrent clients
// exactly as a one-at-a-time server answered them alone. A batched server must also show in
// /metrics that its steps evaluated several requests' tokens and joined prompts to decodes.
// The mix (request i): groups of 10 share an endpoint and a long prefix (chat: the system message;
// text: the prompt's first sentences), so the server's KV-cache prefix reuse is exercised; within
// a group every other request streams (half of those with stream_options.include_usage), max_tokens
// varies in 8..16, a few requests carry stop strings (most of which end the reply) or an earlier chat
// turn. Greedy (temperature
// 0), no retries.
import fs from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, "../../tools/js-harness/package.json"));
const OpenAI = require("openai").default ?? require("openai");

const [baseURL, apiKey, model, nArg, refFile] = process.argv.slice(2);
const N = Number(nArg ?? 100);

const SYSTEMS = [
  "You are a helpful assistant who answers questions about the Bible and its people.",
  "You are a terse Unix expert. You explain commands, options and manual pages briefly.",
  "You are a dictionary. Define the word the user gives you, in the style of Webster's 1913 edition.",
  "You are a hacker from the Jargon File era, and you answer in the slang of that time.",
  "You are a cynic who writes definitions for the Devil's Dictionary.",
];
const PREFIXES = [
  "In the beginning God created the heaven and the earth. And the earth was without form, and void; and darkness was upon the face of the deep.",
  "NAME\n  ls - list directory contents\nSYNOPSIS\n  ls [OPTION]... [FILE]...\nDESCRIPTION\n  List information about the FILEs (the current directory by default).",
  "The quick brown fox jumps over the lazy dog. A computer program is a list of instructions that",
  "Abandon, v. t. To give up wholly; to surrender, relinquish, or yield. Abase, v. t. To lower or depress; to throw or cast down.",
  "hacker: n. [originally, someone who makes furniture with an axe] 1. A person who enjoys exploring the details of programmable systems",
];
const QUESTIONS = [
  "Who was the king of the land?", "What does the word grace mean?", "Tell me about the flood.",
  "How do I list all files in a directory?", "What is a man page?", "Define the word abbey.",
  "Why is the sky dark at night?", "What is the meaning of the word kludge?", "Who wrote the psalms?",
  "What is a daemon?",
];
const TAILS = [
  "And God said,", "Then the man", "It came to pass that", "The option -l", "In the morning", "The word",
  "Every file", "And the people", "When the user", "So the program",
];

// Request i, deterministic.
function request(i) {
  const g = Math.floor(i / 10), j = i % 10;
  const chat = g % 2 === 0;
  const stream = j % 2 === 1;
  const body = { model, temperature: 0, max_tokens: 8 + ((i * 7) % 9) };
  if (stream) body.stream = true;
  if (stream && j % 4 === 1) body.stream_options = { include_usage: true };
  if (j === 3) body.stop = [" the"];          // streamed: the server holds back a partial match
  if (j === 6) body.stop = ["\n", "LORD"];
  if (chat) {
    const messages = [{ role: "system", content: SYSTEMS[(g / 2) % SYSTEMS.length] }];
    if (j >= 8) {  // an earlier turn: the prefix reuse covers a longer history
      messages.push({ role: "user", content: QUESTIONS[(j + 3) % 10] }, { role: "assistant", content: "I do not know." });
    }
    messages.push({ role: "user", content: `${QUESTIONS[j]} (client ${i})` });
    body.messages = messages;
  } else {
    body.prompt = `${PREFIXES[((g - 1) / 2) % PREFIXES.length]} ${TAILS[j]} client ${i} said`;
  }
  return { chat, body };
}

class Mismatch extends Error {}
function must(ok, what) { if (!ok) throw new Mismatch(what); }

function checkUsage(u, what) {
  must(u && Number.isInteger(u.prompt_tokens) && u.prompt_tokens > 0 && Number.isInteger(u.completion_tokens) &&
         u.total_tokens === u.prompt_tokens + u.completion_tokens, `${what}: usage ${JSON.stringify(u)}`);
}

// Runs request i on a client of its own; returns what must be the same every time plus timing.
async function runOne(i) {
  const { chat, body } = request(i);
  const client = new OpenAI({ baseURL: baseURL + "/v1", apiKey, maxRetries: 0, timeout: 300000 });
  const t0 = performance.now();
  let text = "", finish = null, usage = null, ids = new Set();
  if (!body.stream) {
    const r = chat ? await client.chat.completions.create(body) : await client.completions.create(body);
    ids.add(r.id);
    must(r.object === (chat ? "chat.completion" : "text_completion"), `object ${r.object}`);
    must(r.model === model, `model ${r.model}`);
    must(r.choices.length === 1, `${r.choices.length} choices`);
    const c = r.choices[0];
    text = chat ? c.message.content : c.text;
    if (chat) must(c.message.role === "assistant", `role ${c.message.role}`);
    finish = c.finish_reason;
    usage = r.usage;
  } else {
    const s = chat ? await client.chat.completions.create(body) : await client.completions.create(body);
    let sawRole = !chat, usageChunk = null, after = false;
    for await (const c of s) {
      ids.add(c.id);
      must(!after, "a chunk after the usage chunk");
      if (c.choices.length === 0) { usageChunk = c.usage; after = true; continue; }
      must(finish === null, "a chunk after the finish_reason");
      const ch = c.choices[0];
      if (chat && ch.delta?.role === "assistant") sawRole = true;
      text += (chat ? ch.delta?.content : ch.text) ?? "";
      if (ch.finish_reason) { finish = ch.finish_reason; usage = c.usage; }
    }
    must(sawRole, "no role chunk");
    if (body.stream_options?.include_usage) {
      checkUsage(usageChunk, "include_usage chunk");
      must(JSON.stringify(usageChunk) === JSON.stringify(usage), "the usage chunk differs from the last chunk's usage");
    } else {
      must(usageChunk === null, "a usage chunk nobody asked for");
    }
  }
  const ms = performance.now() - t0;
  must(ids.size === 1, `${ids.size} response ids in one response`);
  must(finish === "stop" || finish === "length", `finish_reason ${finish}`);
  checkUsage(usage, "usage");
  return {
    id: [...ids][0], ms,
    same: { text, finish, prompt_tokens: usage.prompt_tokens, completion_tokens: usage.completion_tokens,
            total_tokens: usage.total_tokens },
    cached: usage.prompt_tokens_details?.cached_tokens ?? 0,
  };
}

const settle = (p) => p.then((v) => ({ ok: true, v }), (e) => ({ ok: false, e }));
let failures = 0;
const fail = (msg) => { failures++; console.error(`FAIL: ${msg}`); };

// The reference: one request at a time (or that of an earlier run).
const refLoaded = Boolean(refFile && fs.existsSync(refFile));
const ref = refLoaded ? JSON.parse(fs.readFileSync(refFile, "utf8")) : [];
if (refLoaded && ref.length !== N) { console.error(`FAIL: ${refFile} holds ${ref.length} references, want ${N}`); process.exit(1); }
const t0 = performance.now();
for (let i = 0; i < (refLoaded ? 0 : N); i++) {
  const r = await settle(runOne(i));
  if (!r.ok) {
    console.error(`FAIL: reference request ${i} (${JSON.stringify(request(i).body).slice(0, 200)}): ${r.e}`);
    process.exit(1);
  }
  ref.push(r.v);
}
const seqS = (performance.now() - t0) / 1000;
if (process.env.LOAD_VERBOSE) ref.forEach((r, i) => console.log(i, JSON.stringify(r.same)));
if (refFile && !refLoaded) fs.writeFileSync(refFile, JSON.stringify(ref));
if (refLoaded) {
  console.log(`reference: ${N} replies from ${refFile}`);
} else {
  const texts = new Set(ref.map((r) => JSON.stringify(r.same)));
  const cached = ref.reduce((a, r) => a + r.cached, 0), prompt = ref.reduce((a, r) => a + r.same.prompt_tokens, 0);
  const stops = ref.filter((r) => r.same.finish === "stop").length;
  console.log(`reference: ${N} requests one at a time in ${seqS.toFixed(2)} s; ${texts.size} distinct replies; ` +
              `${cached} of ${prompt} prompt tokens from the KV cache; finish_reason stop ${stops}, length ${N - stops}`);
  // (A reply may be empty when it starts with a stop string.)
  if (!ref.every((r) => r.same.completion_tokens > 0 && (r.same.text.length > 0 || r.same.finish === "stop"))) {
    fail("a reference reply is empty");
  }
  if (cached === 0) fail("the reference pass reused no prompt tokens: prefix reuse is not exercised");
  if (N >= 10 && stops === 0) fail("no reference reply ended at a stop string: stop strings are not exercised");
}

// The concurrent pass: N clients at once.
const tc = performance.now();
const results = await Promise.all(Array.from({ length: N }, (_, i) => settle(runOne(i))));
const wallS = (performance.now() - tc) / 1000;
let ok = 0, tokens = 0, cached = 0;
const lat = [], ids = new Set();
results.forEach((r, i) => {
  if (!r.ok) return fail(`client ${i}: ${r.e instanceof Mismatch ? "" : "request failed: "}${r.e}`);
  const got = JSON.stringify(r.v.same), want = JSON.stringify(ref[i].same);
  if (got !== want) return fail(`client ${i}: reply differs from its reference\n  got  ${got}\n  want ${want}`);
  if (ids.has(r.v.id)) return fail(`client ${i}: response id ${r.v.id} seen twice`);
  ids.add(r.v.id);
  ok++;
  tokens += r.v.same.completion_tokens;
  cached += r.v.cached;
  lat.push(r.v.ms);
});
lat.sort((a, b) => a - b);
const pct = (p) => (lat.length ? lat[Math.min(lat.length - 1, Math.ceil((p / 100) * lat.length) - 1)] : NaN);
console.log(`concurrent pass: ${cached} prompt tokens from the KV cache`);
console.log(`load: ${N} clients, ${ok}/${N} ok, ${(ok / wallS).toFixed(1)} req/s, ${(tokens / wallS).toFixed(0)} tok/s, ` +
            `latency p50 ${pct(50).toFixed(0)} ms p99 ${pct(99).toFixed(0)} ms (wall ${wallS.toFixed(2)} s)`);

// The server is idle again and counted every request (its request log runs after the last byte is
// sent, so it may lag the clients by a moment).
let metricProblems = [];
for (const deadline = performance.now() + 10000; ;) {
  const metrics = await (await fetch(baseURL + "/metrics", { headers: { Authorization: `Bearer ${apiKey}` } })).text();
  const metric = (re) => { const m = metrics.match(re); return m ? Number(m[1]) : NaN; };
  const answered = ["/v1/chat/completions", "/v1/completions"]
    .map((e) => metric(new RegExp(`^les_requests_total\\{endpoint="${e}",status="200"\\} (\\S+)$`, "m")))
    .reduce((a, b) => a + b, 0);
  metricProblems = [];
  const runs = refLoaded ? N : 2 * N;
  if (answered !== runs) metricProblems.push(`/metrics counts ${answered} answered completions, want ${runs}`);
  const gens = metric(/^les_generations_total (\S+)$/m);
  if (gens !== runs) metricProblems.push(`/metrics: les_generations_total ${gens}, want ${runs}`);
  const slots = metric(/^les_slots_total (\S+)$/m);
  if (slots > 1) {
    const steps = metric(/^les_batch_steps_total (\S+)$/m), tokens = metric(/^les_batch_step_tokens_sum (\S+)$/m);
    const decodes = metric(/^les_batch_decode_tokens_total (\S+)$/m);
    const joined = metric(/^les_batch_prompt_tokens_joined_total (\S+)$/m);
    if (!(decodes > steps)) metricProblems.push(`/metrics: ${decodes} decode tokens in ${steps} steps: requests were not decoded together`);
    if (!(joined > 0)) metricProblems.push("/metrics: no prompt tokens joined a decoding step");
    if (metric(/^les_slots_busy (\S+)$/m) !== 0) metricProblems.push("/metrics: slots busy after the load");
    if (!metricProblems.length) console.log(`batched: ${slots} slots, ${steps} steps, ${(tokens / steps).toFixed(2)} tokens per step, ${joined} prompt tokens joined decoding steps`);
  }
  const cancelled = metric(/^les_generations_cancelled_total (\S+)$/m);
  if (cancelled !== 0) metricProblems.push(`/metrics: ${cancelled} generations cancelled`);
  if (metric(/^les_requests_running (\S+)$/m) !== 0 || metric(/^les_requests_waiting (\S+)$/m) !== 0) {
    metricProblems.push("/metrics: the server is not idle after the load");
  }
  if (!metricProblems.length || performance.now() > deadline) break;
  await new Promise((r) => setTimeout(r, 100));
}
metricProblems.forEach(fail);

if (failures) {
  console.error(`${failures} failure(s)`);
  process.exit(1);
}
console.log("all load checks passed");
