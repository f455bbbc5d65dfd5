// Drives `les serve` with the official openai client: chat and text completions, streamed and
// not, must equal `les run`'s greedy text for the same prompt; usage in every response; the
// client's typed errors for a wrong model and a wrong key.
//   node openai_client.mjs BASE_URL API_KEY EXPECTED_JSON
// EXPECTED_JSON: {model, max_tokens, chat: {prompt, text}, completion: {prompt, text}}
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, "../../tools/js-harness/package.json"));
const OpenAI = require("openai").default ?? require("openai");

const [baseURL, apiKey, expectedPath] = process.argv.slice(2);
const exp = JSON.parse(readFileSync(expectedPath, "utf8"));
const client = new OpenAI({ baseURL: baseURL + "/v1", apiKey, maxRetries: 0, timeout: 120000 });
let failures = 0;
function check(ok, what, detail = "") {
  if (!ok) {
    failures++;
    console.error(`FAIL: ${what}${detail ? ": " + detail : ""}`);
  } else {
    console.log(`ok: ${what}`);
  }
}
function checkUsage(u, what) {
  check(u && u.prompt_tokens > 0 && u.completion_tokens > 0 && u.total_tokens === u.prompt_tokens + u.completion_tokens,
        `${what}: usage counts`, JSON.stringify(u));
}

const models = await client.models.list();
check(models.data.some((m) => m.id === exp.model), "models.list names the model", JSON.stringify(models.data));

const chatMessages = [{ role: "user", content: exp.chat.prompt }];
const common = { model: exp.model, temperature: 0, max_tokens: exp.max_tokens };

const chat = await client.chat.completions.create({ ...common, messages: chatMessages });
check(chat.object === "chat.completion", "chat: object");
check(chat.choices[0].message.role === "assistant", "chat: role");
check(chat.choices[0].message.content === exp.chat.text, "chat: text equals les run --chat",
      JSON.stringify([chat.choices[0].message.content, exp.chat.text]));
check(["stop", "length"].includes(chat.choices[0].finish_reason), "chat: finish_reason");
checkUsage(chat.usage, "chat");

let streamed = "", last = null, sawRole = false, chunks = 0;
const stream = await client.chat.completions.create({ ...common, messages: chatMessages, stream: true,
                                                       stream_options: { include_usage: true } });
let usageChunk = null;
for await (const c of stream) {
  chunks++;
  if (c.choices.length === 0) { usageChunk = c; continue; }
  if (c.choices[0].delta.role === "assistant") sawRole = true;
  streamed += c.choices[0].delta.content ?? "";
  if (c.choices[0].finish_reason) last = c;
}
check(sawRole, "chat stream: first chunk carries the role");
check(chunks > 2, "chat stream: several chunks", String(chunks));
check(streamed === exp.chat.text, "chat stream: text equals les run --chat", JSON.stringify([streamed, exp.chat.text]));
check(last && last.choices[0].finish_reason === chat.choices[0].finish_reason, "chat stream: finish_reason");
checkUsage(last && last.usage, "chat stream (last chunk)");
checkUsage(usageChunk && usageChunk.usage, "chat stream (include_usage chunk)");

const comp = await client.completions.create({ ...common, prompt: exp.completion.prompt });
check(comp.object === "text_completion", "completion: object");
check(comp.choices[0].text === exp.completion.text, "completion: text equals les run",
      JSON.stringify([comp.choices[0].text, exp.completion.text]));
checkUsage(comp.usage, "completion");

streamed = ""; last = null;
for await (const c of await client.completions.create({ ...common, prompt: exp.completion.prompt, stream: true })) {
  streamed += c.choices[0]?.text ?? "";
  if (c.choices[0]?.finish_reason) last = c;
}
check(streamed === exp.completion.text, "completion stream: text equals les run", JSON.stringify([streamed, exp.completion.text]));
checkUsage(last && last.usage, "completion stream (last chunk)");

// The same prompt again reuses the KV cache and answers the same.
const again = await client.completions.create({ ...common, prompt: exp.completion.prompt });
check(again.choices[0].text === exp.completion.text, "completion again (cached prefix): same text");
check(again.usage.prompt_tokens_details?.cached_tokens > 0, "completion again: cached tokens reported",
      JSON.stringify(again.usage));

// Stop strings end the text before them.
const cut = exp.completion.text.indexOf(" ", 3);
if (cut > 0) {
  const stopAt = exp.completion.text.slice(cut, cut + 3);
  const stopped = await client.completions.create({ ...common, prompt: exp.completion.prompt, stop: [stopAt] });
  check(stopped.choices[0].text === exp.completion.text.slice(0, exp.completion.text.indexOf(stopAt)),
        "stop string: text ends before it", JSON.stringify([stopped.choices[0].text, stopAt]));
  check(stopped.choices[0].finish_reason === "stop", "stop string: finish_reason stop");
}

try {
  await client.chat.completions.create({ ...common, model: "no-such-model", messages: chatMessages });
  check(false, "unknown model is refused");
} catch (e) {
  check(e instanceof OpenAI.NotFoundError && e.status === 404, "unknown model: NotFoundError 404", String(e));
}
try {
  const bad = new OpenAI({ baseURL: baseURL + "/v1", apiKey: "wrong-key", maxRetries: 0 });
  await bad.chat.completions.create({ ...common, messages: chatMessages });
  check(false, "wrong key is refused");
} catch (e) {
  check(e instanceof OpenAI.AuthenticationError && e.status === 401, "wrong key: AuthenticationError 401", String(e));
}
try {
  await client.chat.completions.create({ ...common, messages: chatMessages, temperature: "hot" });
  check(false, "a wrong type is refused");
} catch (e) {
  check(e instanceof OpenAI.BadRequestError && /temperature/.test(e.message), "wrong type: BadRequestError naming the field",
        String(e));
}

if (failures) {
  console.error(`${failures} check(s) failed`);
  process.exit(1);
}
console.log("all openai client checks passed");
