#!/usr/bin/env bash
# Regenerates the committed seed corpora of fuzz/corpus/ (developer tool; CI uses the committed
# files): small synthetic models for fuzz_gguf, the headers (bytes before the data section) of
# small packed models for fuzz_pack, short texts for fuzz_tokenizer (first byte: vocabulary
# and flags, see fuzz_tokenizer.cpp), and small importance matrices for fuzz_imatrix. Needs a built ./build/les and python3.
set -euo pipefail
cd "$(dirname "$0")/.."
LES=${LES:-./build/les}
C=fuzz/corpus
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p $C/gguf $C/pack $C/tokenizer

synth() {  # name arch type [extra args]
  local name=$1 arch=$2 type=$3
  shift 3
  "$LES" synth -o "$tmp/$name.gguf" --arch "$arch" --type "$type" --layers 1 --embd 32 --heads 2 \
    --kv-heads 1 --head-dim 16 --experts 4 --used 2 --ff-exp 32 --vocab 259 --ctx 64 --no-measure \
    --force "$@" >/dev/null
}
synth qwen3moe-q8_0 qwen3moe q8_0
synth mixtral-q4_0 llama q4_0
synth qwen3-f16 qwen3 f16
synth olmoe-q5_1 olmoe q5_1 --kv-heads 2
# Low-bit types: an i-quant (256-element blocks need rows of 256: kept small with 2 experts) and MXFP4.
synth qwen3moe-iq2_xxs qwen3moe iq2_xxs --embd 256 --head-dim 128 --experts 2 --used 1 --ff-exp 256
synth qwen3moe-mxfp4 qwen3moe mxfp4
for f in qwen3moe-q8_0 mixtral-q4_0 qwen3-f16 olmoe-q5_1 qwen3moe-iq2_xxs qwen3moe-mxfp4; do
  cp "$tmp/$f.gguf" "$C/gguf/$f.gguf"
done

# The header of a GGUF file: everything before the (aligned) data section.
header() {
  python3 - "$1" "$2" <<'PY'
import struct, sys
b = open(sys.argv[1], 'rb').read()
pos = 4 + 4
n_t, n_kv = struct.unpack_from('<QQ', b, pos); pos += 16
def string(pos):
    n, = struct.unpack_from('<Q', b, pos); return pos + 8 + n, b[pos + 8:pos + 8 + n]
SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
def value(pos, t):
    if t == 8: return string(pos)[0]
    if t == 9:
        et, n = struct.unpack_from('<IQ', b, pos); pos += 12
        for _ in range(n): pos = value(pos, et)
        return pos
    return pos + SIZES[t]
align = 32
for _ in range(n_kv):
    pos, key = string(pos)
    t, = struct.unpack_from('<I', b, pos); pos += 4
    if key == b'general.alignment': align, = struct.unpack_from('<I', b, pos)
    pos = value(pos, t)
for _ in range(n_t):
    pos, _ = string(pos)
    nd, = struct.unpack_from('<I', b, pos); pos += 4 + 8 * nd + 4 + 8
pos = (pos + align - 1) // align * align
open(sys.argv[2], 'wb').write(b[:pos])
PY
}
for f in qwen3moe-q8_0 mixtral-q4_0; do
  "$LES" pack "$tmp/$f.gguf" "$tmp/$f.packed.gguf" --force >/dev/null
  header "$tmp/$f.packed.gguf" "$C/pack/$f.packed-header.gguf"
done

text() { printf "$2" > "$C/tokenizer/$1"; }
text ascii-qwen2 '\x00Hello, world! The quick brown fox jumps over 13 lazy dogs.'
text code-llama3 '\x01def f(x):\n\treturn x  *  2  # comment\n'
text spm-special '\x02 <s>Hello</s> world\n\n  spaces'
text chatml-parse '\x08<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n'
text cjk-emoji '\x00\xe4\xbd\xa0\xe5\xa5\xbd\xe4\xb8\x96\xe7\x95\x8c \xf0\x9f\x98\x80\xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd caf\xc3\xa9'
text invalid-utf8 '\x05abc\xff\xfe\xc3(\xe2\x82 \xf0\x9f\x98 \xed\xa0\x80 end'
text digits-spm '\x0e12345678901234567890 3.14159 1,000,000'
text whitespace '\x10 \t\n\r\n  \xc2\xa0\xe3\x80\x80x  \n\n\n'
# Importance matrices: a small one collected by les (GGUF form) and a hand-made legacy .dat file.
mkdir -p $C/imatrix
printf 'The quick brown fox jumps over the lazy dog. %.0s' $(seq 8) > "$tmp/text.txt"
"$LES" imatrix -m "$tmp/qwen3moe-q8_0.gguf" -f "$tmp/text.txt" -c 32 --chunks 2 --process-output \
  -o "$C/imatrix/qwen3moe.imatrix.gguf" 2>/dev/null
python3 - "$C/imatrix/legacy.dat" <<'PY'
import struct, sys
out = struct.pack('<i', 2)
for name, ncall, vals in [(b'blk.0.attn_q.weight', 3, [1.5, 3.0, 4.5, 6.0]),
                          (b'blk.0.ffn_up_exps.weight', 5, [5.0 * (i + 1) for i in range(8)])]:
    out += struct.pack('<i', len(name)) + name + struct.pack('<ii', ncall, len(vals))
    out += struct.pack('<%df' % len(vals), *vals)
out += struct.pack('<i', 12) + struct.pack('<i', 8) + b'data.txt'
open(sys.argv[1], 'wb').write(out)
PY
ls -la $C/*
