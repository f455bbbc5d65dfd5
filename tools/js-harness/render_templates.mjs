// Reference chat-template renderings for tests/test_chat_template.cpp: every template x
// conversation of a cases file rendered with @huggingface/jinja, after the same message
// normalisation that les::ChatTemplate applies (src/les/chat/chat_template.h):
//   - a missing or null content becomes "";
//   - a content list becomes its text parts joined with "\n", unless a probe render shows the
//     template renders content lists itself;
//   - a tool call's function.arguments string holding a JSON object becomes that object.
// Variables: messages, add_generation_prompt, bos_token, eos_token, then the case's "extra".
// The cases file's "now" ("YYYY-MM-DD HH:MM", local time) is the time strftime_now() formats
// (Date is replaced by one frozen there; les: ChatTemplateOptions::now).
// A template whose "file" is null is the ChatML fallback (chatml.jinja, ChatTemplate::kChatML).
//
//   node render_templates.mjs                 tests/data/templates/cases.json -> expected.json
//   node render_templates.mjs IN.json OUT.json  another cases file (same format; template
//                                               files are read from tests/data/templates)
//   node render_templates.mjs --raw IN.json OUT.json
//                                               IN: [{"source": "<template>", "vars": {...}}]; each
//                                               rendered as is: new Template(source).render(vars)
// Output: {"<template>": {"<case>": "<text>" | {"error": "<message>"}}}; with --raw
// [{"output": "<text>"} | {"error": "<message>"}].
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { Template } from "@huggingface/jinja";

const here = path.dirname(fileURLToPath(import.meta.url));
const dataDir = path.resolve(here, "../../tests/data/templates");
const PROBE = "\u0001les-content-probe";

class ChatTemplate {
  constructor(source, bos, eos) {
    this.template = new Template(source);
    this.bos = bos;
    this.eos = eos;
    try {
      const probe = [{ role: "user", content: [{ type: "text", text: PROBE }] }];
      this.contentLists = this.renderRaw(probe, false, {}).includes(PROBE);
    } catch {
      this.contentLists = false;
    }
  }

  renderRaw(messages, addGenerationPrompt, extra) {
    return this.template.render({
      messages,
      add_generation_prompt: addGenerationPrompt,
      bos_token: this.bos,
      eos_token: this.eos,
      ...extra,
    });
  }

  normalize(messages) {
    return messages.map((m) => {
      if (m === null || typeof m !== "object" || Array.isArray(m)) return m;
      const msg = structuredClone(m);
      if (msg.content === undefined || msg.content === null) {
        msg.content = "";
      } else if (Array.isArray(msg.content) && !this.contentLists) {
        msg.content = msg.content
          .filter((p) => p && typeof p === "object" && !Array.isArray(p) && p.type === "text" && typeof p.text === "string")
          .map((p) => p.text)
          .join("\n");
      }
      if (Array.isArray(msg.tool_calls)) {
        for (const call of msg.tool_calls) {
          const fn = call && typeof call === "object" ? call.function : undefined;
          if (!fn || typeof fn !== "object" || Array.isArray(fn) || typeof fn.arguments !== "string") continue;
          try {
            const parsed = JSON.parse(fn.arguments);
            if (parsed !== null && typeof parsed === "object" && !Array.isArray(parsed)) fn.arguments = parsed;
          } catch {
            // not JSON: left as the string
          }
        }
      }
      return msg;
    });
  }

  render(messages, addGenerationPrompt, extra) {
    return this.renderRaw(this.normalize(messages), addGenerationPrompt, extra ?? {});
  }
}

// Makes `new Date()` (and Date.now()) return the local time `now` ("YYYY-MM-DD HH:MM").
function freezeDate(now) {
  const m = /^(\d{4})-(\d{2})-(\d{2}) (\d{2}):(\d{2})$/.exec(now);
  if (!m) throw new Error(`"now" must be "YYYY-MM-DD HH:MM": ${now}`);
  const RealDate = Date;
  const frozen = new RealDate(+m[1], +m[2] - 1, +m[3], +m[4], +m[5]).getTime();
  globalThis.Date = class extends RealDate {
    constructor(...args) {
      if (args.length === 0) super(frozen);
      else super(...args);
    }
    static now() {
      return frozen;
    }
  };
}

if (process.argv[2] === "--raw") {
  const items = JSON.parse(fs.readFileSync(process.argv[3], "utf8"));
  const results = items.map(({ source, vars }) => {
    try {
      return { output: new Template(source).render(vars ?? {}) };
    } catch (e) {
      return { error: String(e.message) };
    }
  });
  fs.writeFileSync(process.argv[4], JSON.stringify(results) + "\n");
  process.exit(0);
}

const [inPath, outPath] =
  process.argv.length >= 4
    ? [process.argv[2], process.argv[3]]
    : [path.join(dataDir, "cases.json"), path.join(dataDir, "expected.json")];
const doc = JSON.parse(fs.readFileSync(inPath, "utf8"));
if (doc.now !== undefined) freezeDate(doc.now);
const chatml = fs.readFileSync(path.join(dataDir, "chatml.jinja"), "utf8");

const out = {};
for (const t of doc.templates) {
  const results = (out[t.name] = {});
  let chat = null;
  let parseError = null;
  try {
    const source = t.file === null ? chatml : fs.readFileSync(path.join(dataDir, t.file), "utf8");
    chat = new ChatTemplate(source, t.bos_token, t.eos_token);
  } catch (e) {
    parseError = String(e.message);
  }
  for (const c of doc.cases) {
    if (parseError !== null) {
      results[c.name] = { error: parseError };
      continue;
    }
    try {
      results[c.name] = chat.render(c.messages, c.add_generation_prompt, c.extra);
    } catch (e) {
      results[c.name] = { error: String(e.message) };
    }
  }
}
fs.writeFileSync(outPath, JSON.stringify(out, null, 1) + "\n");
