#!/usr/bin/env python3
"""Prints a GGUF file's tensors as JSON: general.file_type, the file size and, in file order,
each tensor's name, shape (ne[0] first) and ggml type name. Standard library only.

usage: gguf_types.py FILE.gguf
"""
import json
import os
import struct
import sys

# ggml type ids -> names as llama.cpp spells them (ggml_type_name)
TYPE_NAMES = {
    0: "f32", 1: "f16", 2: "q4_0", 3: "q4_1", 6: "q5_0", 7: "q5_1", 8: "q8_0", 9: "q8_1",
    10: "q2_K", 11: "q3_K", 12: "q4_K", 13: "q5_K", 14: "q6_K", 15: "q8_K", 16: "iq2_xxs",
    17: "iq2_xs", 18: "iq3_xxs", 19: "iq1_s", 20: "iq4_nl", 21: "iq3_s", 22: "iq2_s",
    23: "iq4_xs", 24: "i8", 25: "i16", 26: "i32", 27: "i64", 28: "f64", 29: "iq1_m",
    30: "bf16", 34: "tq1_0", 35: "tq2_0", 39: "mxfp4", 40: "nvfp4",
}
# GGUF value types with a fixed size: id -> struct format
SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}


class Reader:
    def __init__(self, data):
        self.data, self.pos = data, 0

    def take(self, fmt):
        v = struct.unpack_from("<" + fmt, self.data, self.pos)
        self.pos += struct.calcsize("<" + fmt)
        return v[0]

    def string(self):
        n = self.take("Q")
        s = self.data[self.pos:self.pos + n].decode("utf-8")
        self.pos += n
        return s

    def value(self, vtype):
        if vtype in SCALARS:
            return self.take(SCALARS[vtype])
        if vtype == 8:
            return self.string()
        if vtype == 9:
            elem, n = self.take("I"), self.take("Q")
            return [self.value(elem) for _ in range(n)]
        raise ValueError("unknown GGUF value type %d" % vtype)


def read(path):
    with open(path, "rb") as f:
        data = f.read(64 << 20)  # the header of a small model
    r = Reader(data)
    if data[:4] != b"GGUF":
        raise ValueError("%s: not a GGUF file" % path)
    r.pos = 4
    r.take("I")  # version
    n_tensors, n_kv = r.take("Q"), r.take("Q")
    kv = {}
    for _ in range(n_kv):
        key = r.string()
        kv[key] = r.value(r.take("I"))
    tensors = []
    for _ in range(n_tensors):
        name = r.string()
        ne = [r.take("Q") for _ in range(r.take("I"))]
        t = r.take("I")
        r.take("Q")  # offset
        tensors.append({"name": name, "ne": ne, "type": TYPE_NAMES[t]})
    return {"file_type": kv.get("general.file_type"), "bytes": os.path.getsize(path), "tensors": tensors}


if __name__ == "__main__":
    json.dump(read(sys.argv[1]), sys.stdout)
    print()
