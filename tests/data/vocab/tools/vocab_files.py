#!/usr/bin/env python3
"""Small vocab-only GGUF files for the tokenizer tests (pure Python, no tensors).

  vocab_files.py trim IN.gguf OUT.gguf TEXTS.inp...   # IN's byte-level BPE vocabulary cut down to
        # what the texts can use: every normal token whose bytes occur inside one of the texts, the
        # 256 one-byte tokens, every non-normal token; every merge whose result occurs in a text,
        # ranks kept in order. BPE on those texts gives the same tokens (ids renumbered): a merge
        # can only apply to a pair of symbols that are adjacent in a text.
  vocab_files.py pairs OUT.gguf PRE TEXTS.inp...      # a synthetic vocabulary in which every two
        # code points adjacent in a text merge: the 256 byte tokens, then each multi-byte code point
        # built from its bytes, then one merge per adjacent pair, pairs of different character
        # classes first. A pre-tokenizer that splits where llama.cpp does not (or the other way
        # round) changes the ids.
  vocab_files.py setpre IN.gguf OUT.gguf PRE          # IN with tokenizer.ggml.pre replaced
  vocab_files.py remap OLD.gguf NEW.gguf IDS.out      # IDS.out's ids of OLD as ids of NEW (by text)

TEXTS.inp: llama.cpp's test-tokenizer-0 format (inputs separated by "\\n__ggml_vocab_test__\\n").
Invalid UTF-8 in the texts is read as llama.cpp reads it (each bad byte is U+FFFD).
"""
import struct
import sys

SEP = b"\n__ggml_vocab_test__\n"

# GGUF value types
U8, I8, U16, I16, U32, I32, F32, BOOL, STR, ARR, U64, I64, F64 = range(13)
SCALAR = {U8: "<B", I8: "<b", U16: "<H", I16: "<h", U32: "<I", I32: "<i", F32: "<f", BOOL: "<?",
          U64: "<Q", I64: "<q", F64: "<d"}


def read_gguf(path):
    data = open(path, "rb").read()
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from(fmt, data, pos)[0]
        pos += struct.calcsize(fmt)
        return v

    def string():
        nonlocal pos
        n = take("<Q")
        s = data[pos:pos + n]
        pos += n
        return s

    def value(t):
        if t == STR:
            return string()
        if t == ARR:
            et = take("<I")
            n = take("<Q")
            return (et, [value(et) for _ in range(n)])
        return take(SCALAR[t])

    assert data[:4] == b"GGUF", path
    pos = 4
    version = take("<I")
    assert version in (2, 3), version
    n_tensors = take("<Q")
    assert n_tensors == 0, "vocab-only files only"
    kv = []
    for _ in range(take("<Q")):
        key = string().decode()
        t = take("<I")
        kv.append([key, t, value(t)])
    return kv


def write_gguf(path, kv):
    out = bytearray(b"GGUF")
    out += struct.pack("<IQQ", 3, 0, len(kv))

    def value(t, v):
        if t == STR:
            out.extend(struct.pack("<Q", len(v)) + v)
        elif t == ARR:
            et, items = v
            out.extend(struct.pack("<IQ", et, len(items)))
            for x in items:
                value(et, x)
        else:
            out.extend(struct.pack(SCALAR[t], v))

    for key, t, v in kv:
        k = key.encode()
        out += struct.pack("<Q", len(k)) + k + struct.pack("<I", t)
        value(t, v)
    out += b"\0" * (-len(out) % 32)
    open(path, "wb").write(bytes(out))


def get(kv, key):
    for k, _, v in kv:
        if k == key:
            return v
    return None


def put(kv, key, t, v):
    for e in kv:
        if e[0] == key:
            e[1], e[2] = t, v
            return
    kv.append([key, t, v])


# GPT-2's byte <-> unicode map of byte-level BPE vocabularies
def _byte_map():
    direct = list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    m, n = {}, 0
    for b in range(256):
        if b in direct:
            m[b] = chr(b)
        else:
            m[b] = chr(256 + n)
            n += 1
    return m


BYTE_TO_CHAR = _byte_map()
CHAR_TO_BYTE = {c: b for b, c in BYTE_TO_CHAR.items()}


def token_bytes(tok):
    """bytes of a byte-level token's text, None if it is not made of byte characters"""
    try:
        return bytes(CHAR_TO_BYTE[c] for c in tok.decode("utf-8"))
    except (KeyError, UnicodeDecodeError):
        return None


def encode_bytes(b):
    return "".join(BYTE_TO_CHAR[x] for x in b).encode("utf-8")


def llama_cpts(raw):
    """code points as llama.cpp's unicode_cpts_from_utf8 reads them (bad bytes -> U+FFFD)"""
    cps, i = [], 0
    while i < len(raw):
        b = raw[i]
        n = 1 if b < 0x80 else 2 if 0xC0 <= b < 0xE0 else 3 if 0xE0 <= b < 0xF0 else 4 if 0xF0 <= b < 0xF8 else 0
        if n == 1:
            cps.append(b)
            i += 1
            continue
        if n == 0 or i + n > len(raw) or any((raw[i + k] & 0xC0) != 0x80 for k in range(1, n)):
            cps.append(0xFFFD)
            i += 1
            continue
        cp = b & (0x7F >> n)
        for k in range(1, n):
            cp = (cp << 6) | (raw[i + k] & 0x3F)
        cps.append(cp if cp <= 0x10FFFF else 0xFFFD)
        i += n
    return cps


def utf8(cp):
    if cp < 0x80:
        return bytes([cp])
    if cp < 0x800:
        return bytes([0xC0 | cp >> 6, 0x80 | cp & 0x3F])
    if cp < 0x10000:
        return bytes([0xE0 | cp >> 12, 0x80 | cp >> 6 & 0x3F, 0x80 | cp & 0x3F])
    return bytes([0xF0 | cp >> 18, 0x80 | cp >> 12 & 0x3F, 0x80 | cp >> 6 & 0x3F, 0x80 | cp & 0x3F])


def read_texts(paths):
    texts = []
    for p in paths:
        texts += [llama_cpts(t) for t in open(p, "rb").read().split(SEP)]
    return texts


def trim(src, dst, paths):
    kv = read_gguf(src)
    hay = b"\x00\xff".join(b"".join(utf8(c) for c in t) for t in read_texts(paths))
    tokens = get(kv, "tokenizer.ggml.tokens")[1]
    types = get(kv, "tokenizer.ggml.token_type")[1]
    merges = get(kv, "tokenizer.ggml.merges")[1]
    keep = []
    for i, tok in enumerate(tokens):
        b = token_bytes(tok)
        if types[i] != 1 or (b is not None and (len(b) == 1 or b in hay)):
            keep.append(i)
    new_id = {old: new for new, old in enumerate(keep)}
    kept_merges = []
    for m in merges:
        a, _, c = m.partition(b" ")
        ab, cb = token_bytes(a), token_bytes(c)
        if ab is not None and cb is not None and ab + cb in hay:
            kept_merges.append(m)
    put(kv, "tokenizer.ggml.tokens", ARR, (STR, [tokens[i] for i in keep]))
    put(kv, "tokenizer.ggml.token_type", ARR, (I32, [types[i] for i in keep]))
    put(kv, "tokenizer.ggml.merges", ARR, (STR, kept_merges))
    if get(kv, "tokenizer.ggml.scores") is not None:
        scores = get(kv, "tokenizer.ggml.scores")[1]
        put(kv, "tokenizer.ggml.scores", ARR, (F32, [scores[i] for i in keep]))
    for e in kv:
        if e[0].startswith("tokenizer.ggml.") and e[0].endswith("_token_id"):
            assert e[2] in new_id, e[0]
            e[2] = new_id[e[2]]
        if e[0].endswith(".vocab_size"):
            e[2] = len(keep)
    put(kv, "general.name", STR, get(kv, "general.name") + b" (trimmed by les vocab_files.py)")
    write_gguf(dst, kv)
    print(f"{dst}: {len(keep)} of {len(tokens)} tokens, {len(kept_merges)} of {len(merges)} merges")


def is_han(c):
    return (0x4E00 <= c <= 0x9FFF or 0x3400 <= c <= 0x4DBF or 0x20000 <= c <= 0x2EBEF or
            0xF900 <= c <= 0xFAFF or 0x2F800 <= c <= 0x2FA1F)


def char_class(c):
    """a coarse class: pairs of different classes are where pre-tokenizers split"""
    if c in (0x0A, 0x0D):
        return "nl"
    if c in (0x09, 0x0B, 0x0C, 0x20, 0x85, 0xA0, 0x1680, 0x2028, 0x2029, 0x202F, 0x205F, 0x3000) or 0x2000 <= c <= 0x200A:
        return "ws"
    if 0x61 <= c <= 0x7A:
        return "lower"
    if 0x41 <= c <= 0x5A:
        return "upper"
    if 0x30 <= c <= 0x39:
        return "digit"
    if c == 0x27:
        return "apos"
    if c < 0x80:
        return "ascii-other"
    if is_han(c):
        return "han"
    if 0x3040 <= c <= 0x30FF:
        return "kana"
    if 0xAC00 <= c <= 0xD7FF or 0x1100 <= c <= 0x11FF or 0x3130 <= c <= 0x318F:
        return "hangul"
    return "other"


def pairs(dst, pre, paths):
    texts = read_texts(paths)
    tokens = [encode_bytes(bytes([b])) for b in range(256)]
    merges, seen = [], set(tokens)

    def add(a, b):
        t = a + b
        merges.append(a + b" " + b)
        if t not in seen:
            seen.add(t)
            tokens.append(t)

    cps = sorted({c for t in texts for c in t})
    for c in cps:  # multi-byte code points from their bytes, left to right
        b = utf8(c)
        for k in range(1, len(b)):
            add(encode_bytes(b[:k]), encode_bytes(b[k:k + 1]))
    cross, same, done = [], [], set()
    for t in texts:
        for x, y in zip(t, t[1:]):
            if (x, y) in done:
                continue
            done.add((x, y))
            (cross if char_class(x) != char_class(y) else same).append((x, y))
    for x, y in cross + same:
        add(encode_bytes(utf8(x)), encode_bytes(utf8(y)))
    special = [b"<|endoftext|>", b"<|start|>", b"<|end|>"]
    eos = len(tokens)
    tokens += special
    kv = [
        ["general.architecture", STR, b"llama"],
        ["general.name", STR, b"les pair vocabulary"],
        ["llama.block_count", U32, 1], ["llama.context_length", U32, 4096],
        ["llama.embedding_length", U32, 64], ["llama.feed_forward_length", U32, 128],
        ["llama.attention.head_count", U32, 4], ["llama.attention.head_count_kv", U32, 4],
        ["llama.rope.freq_base", F32, 10000.0], ["llama.attention.layer_norm_rms_epsilon", F32, 1e-5],
        ["llama.vocab_size", U32, len(tokens)], ["llama.rope.dimension_count", U32, 16],
        ["tokenizer.ggml.model", STR, b"gpt2"],
        ["tokenizer.ggml.pre", STR, pre.encode()],
        ["tokenizer.ggml.tokens", ARR, (STR, tokens)],
        ["tokenizer.ggml.token_type", ARR, (I32, [1] * (len(tokens) - len(special)) + [3] * len(special))],
        ["tokenizer.ggml.merges", ARR, (STR, merges)],
        ["tokenizer.ggml.bos_token_id", U32, eos], ["tokenizer.ggml.eos_token_id", U32, eos],
        ["tokenizer.ggml.add_bos_token", BOOL, False],
    ]
    write_gguf(dst, kv)
    print(f"{dst}: {len(tokens)} tokens, {len(merges)} merges ({len(cross)} pairs across classes)")


def setpre(src, dst, pre):
    kv = read_gguf(src)
    put(kv, "tokenizer.ggml.pre", STR, pre.encode())
    write_gguf(dst, kv)


def remap(old, new, ids_path):
    old_tokens = get(read_gguf(old), "tokenizer.ggml.tokens")[1]
    new_id = {t: i for i, t in enumerate(get(read_gguf(new), "tokenizer.ggml.tokens")[1])}
    for line in open(ids_path):
        print(" ".join(str(new_id[old_tokens[int(x)]]) for x in line.split()))


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "trim":
        trim(sys.argv[2], sys.argv[3], sys.argv[4:])
    elif cmd == "pairs":
        pairs(sys.argv[2], sys.argv[3], sys.argv[4:])
    elif cmd == "setpre":
        setpre(sys.argv[2], sys.argv[3], sys.argv[4])
    elif cmd == "remap":
        remap(sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        sys.exit(__doc__)
