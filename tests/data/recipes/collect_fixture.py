#!/usr/bin/env python3
"""Collects make_fixtures.sh's results for one model into the fixture JSON (stdout).

usage: collect_fixture.py WORKDIR MODEL "RECIPE ..."
Types come from the dry run's per-tensor lines ("[ i/ n] name - [shape], type = src, size = a MiB
-> b MiB (new)" or "size = a MiB" for a tensor that keeps its type); the file type and size from the
real file (WORKDIR/MODEL-RECIPE.json, gguf_types.py's output), whose types must agree.
"""
import json
import os
import re
import sys

work, model, recipes = sys.argv[1], sys.argv[2], sys.argv[3].split()
LINE = re.compile(r"^\[\s*\d+/\s*\d+\]\s+(\S+)\s+- \[[^\]]*\], type =\s+(\S+), size =.*?(?:\((\S+)\))?\s*$")


def dry_run_types(path):
    types = {}
    for line in open(path, errors="replace"):
        m = LINE.match(line.rstrip("\n"))
        if m:
            types[m.group(1)] = m.group(3) or m.group(2)
    return types


src = json.load(open(f"{work}/{model}.source.json"))
names = [t["name"] for t in src["tensors"]]
out = {"model": model, "tensors": [[t["name"], t["ne"], t["type"]] for t in src["tensors"]], "recipes": {}}
for r in recipes:
    types = dry_run_types(f"{work}/{model}-{r}.dry.log")
    if sorted(types) != sorted(names):
        sys.exit(f"{model} {r}: the dry run lists other tensors than the model")
    entry = {"needs_imatrix": "will require an imatrix" in open(f"{work}/{model}-{r}.noimat.log").read(),
             "file_type": None, "bytes": None, "types": [types[n] for n in names]}
    real = f"{work}/{model}-{r}.json"
    if os.path.exists(real) and os.path.getsize(real) > 0:
        q = json.load(open(real))
        if {t["name"]: t["type"] for t in q["tensors"]} != types:
            sys.exit(f"{model} {r}: the real file's types differ from the dry run's")
        entry["file_type"], entry["bytes"] = q["file_type"], q["bytes"]
    out["recipes"][r] = entry
json.dump(out, sys.stdout, separators=(",", ":"))
print()
