#!/usr/bin/env node
// llama.cpp tokenization / detokenization with a GGUF's vocabulary.
import fs from "node:fs";
import { parseArgs, readStdin, die, loadLlama, loadModel } from "./common.mjs";

const USAGE = `
usage: node tokenize.mjs --model FILE [--special] < texts.json
       node tokenize.mjs --model FILE --detokenize [--special] < ids.json

Tokenize: reads a JSON array of strings from stdin (or --in FILE) and prints a
JSON array with one array of token ids per string. This is llama.cpp's
common_tokenize(vocab, text, add_special=false, parse_special=--special) via
node-llama-cpp's model.tokenize(text, specialTokens): no BOS/EOS is added; with
--special, texts such as "<|im_start|>" become their control token, without it
they are tokenized as plain text. "" gives [].

Detokenize (--detokenize): reads a JSON array of token-id arrays and prints a
JSON array of strings: llama_detokenize(remove_special=false,
unparse_special=--special). Bytes that are not valid UTF-8 become U+FFFD.

  --model FILE     GGUF file (only the vocabulary is loaded)
  --special        parse (tokenize) / render (detokenize) special tokens
  --detokenize     ids -> text instead of text -> ids
  --in FILE        read the JSON input from FILE instead of stdin
  --out FILE       write the JSON output to FILE instead of stdout
  --pretty         one line per item instead of compact JSON
  -h, --help       this text
`;

const args = parseArgs(process.argv.slice(2), {
    model: { type: "string" },
    special: { type: "bool", default: false },
    detokenize: { type: "bool", default: false },
    in: { type: "string" },
    out: { type: "string" },
    pretty: { type: "bool", default: false },
}, USAGE);
if (!args.model) die("--model FILE is required (see --help)");

const src = args.in != null && args.in !== "-" ? fs.readFileSync(args.in, "utf8") : readStdin();
let input;
try {
    input = JSON.parse(src);
} catch (e) {
    die(`input is not JSON: ${e.message}`);
}
if (!Array.isArray(input)) die("input must be a JSON array");
if (args.detokenize) {
    if (!input.every((s) => Array.isArray(s) && s.every((t) => Number.isInteger(t) && t >= 0)))
        die("--detokenize input must be a JSON array of arrays of token ids");
} else if (!input.every((s) => typeof s === "string")) die("input must be a JSON array of strings");

const { llama } = await loadLlama({ threads: 1 });
const model = await loadModel(llama, args.model, { vocabOnly: true });
const nTokens = model.fileInfo?.metadata?.tokenizer?.ggml?.tokens?.length;

const out = input.map((item) => {
    if (args.detokenize) {
        const bad = item.find((t) => nTokens != null && t >= nTokens);
        if (bad != null) die(`token id ${bad} out of range [0, ${nTokens})`);
        return model.detokenize(item, args.special);
    }
    return model.tokenize(item, args.special);
});

const text = args.pretty
    ? "[\n" + out.map((x) => " " + JSON.stringify(x)).join(",\n") + "\n]\n"
    : JSON.stringify(out) + "\n";
if (args.out != null && args.out !== "-") fs.writeFileSync(args.out, text);
else process.stdout.write(text);

await model.dispose();
await llama.dispose();
