#!/usr/bin/env node
// Compare two raw logits dumps (float32 LE, row-major [position][n_vocab]).
import fs from "node:fs";
import { parseArgs, die, writeJson } from "./common.mjs";

const USAGE = `
usage: node compare.mjs A.f32 B.f32 --n-vocab N [--tol X]

Prints JSON: positions, max_abs_diff (overall and per position), mean_abs_diff,
argmax agreement (first max id), bitwise_equal. Exit status 1 when --tol is given
and max_abs_diff > X (or any argmax differs), else 0.

  --n-vocab N   row length (required)
  --tol X       fail threshold for the max abs difference
  -h, --help    this text
`;

const argv = process.argv.slice(2);
const files = [];
const rest = [];
for (let i = 0; i < argv.length; i++) {
    if (argv[i].startsWith("-")) {
        rest.push(argv[i]);
        if (!argv[i].includes("=") && argv[i] !== "-h" && argv[i] !== "--help") rest.push(argv[++i]);
    } else files.push(argv[i]);
}
const args = parseArgs(rest, { "n-vocab": { type: "int" }, tol: { type: "string" } }, USAGE);
if (files.length !== 2) die("give two .f32 files (see --help)");
const nv = args["n-vocab"];
if (!(nv > 0)) die("--n-vocab N is required");

const read = (f) => {
    const b = fs.readFileSync(f);
    return new Float32Array(b.buffer, b.byteOffset, b.byteLength >> 2);
};
const a = read(files[0]);
const b = read(files[1]);
if (a.length !== b.length) die(`sizes differ: ${a.length} vs ${b.length} floats`, 1);
if (a.length % nv !== 0) die(`${a.length} floats is not a multiple of n_vocab ${nv}`, 1);
const np = a.length / nv;
let maxd = 0, sum = 0, agree = 0, bitwise = true;
const per = [];
const argmax = (x, o) => {
    let best = o;
    for (let i = o + 1; i < o + nv; i++) if (x[i] > x[best]) best = i;
    return best - o;
};
for (let p = 0; p < np; p++) {
    let m = 0;
    for (let i = p * nv; i < (p + 1) * nv; i++) {
        const d = Math.abs(a[i] - b[i]);
        if (!(a[i] === b[i] || (Number.isNaN(a[i]) && Number.isNaN(b[i])))) bitwise = false;
        if (d > m || Number.isNaN(d)) m = Number.isNaN(d) ? Infinity : d;
        sum += Number.isNaN(d) ? 0 : d;
    }
    per.push(m);
    if (m > maxd) maxd = m;
    if (argmax(a, p * nv) === argmax(b, p * nv)) agree++;
}
const res = {
    positions: np, n_vocab: nv, bitwise_equal: bitwise,
    max_abs_diff: maxd, mean_abs_diff: sum / a.length,
    argmax_agree: agree, argmax_agreement: agree / np,
    max_abs_diff_per_position: per,
};
writeJson("-", res);
if (args.tol != null && (maxd > Number(args.tol) || agree !== np)) process.exit(1);
