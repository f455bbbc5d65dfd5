#!/usr/bin/env python3
"""Writes the tokenizer test inputs (llama.cpp .inp format: inputs separated by
"\\n__ggml_vocab_test__\\n").

  gen_cases.py mixed VAL_TXT > les-mixed.inp      # text: val-text excerpts, hand-written edge
                                                  # cases, random Unicode soup (seed 1)
  gen_cases.py invalid > les-invalid-utf8.raw     # bytes: invalid / truncated UTF-8 (seed 3)
"""
import random
import sys

SEP = "\n__ggml_vocab_test__\n"

FIXED = [
    "And God said,", "The meaning of the word", "To list all files in a directory, use the",
    "   ", "\t\t", "\n", "\n\n\n", "\r\n", "\r\n\r\n  \r\n", " \n \n ", "a  b   c    d", "x \t y", "end   ",
    "\u00a0\u00a0x", "\u3000\u3000日本", "a\u2028b\u2029c", "a\u0085b", "\u200b\u200bzero width", "\ufeffBOM",
    "Hello 👋🏽 world 🧑‍🤝‍🧑 family 👨‍👩‍👧‍👦 flags 🇺🇸🇩🇪", "😶‍🌫️ ✅ ❤️", "🦙.cpp",
    "我想在apple工作1314151天～", "日本語のテキスト、漢字とカタカナ。", "한국어 텍스트입니다", "مرحبا بالعالم",
    "नमस्ते दुनिया", "สวัสดีครับ", "Tiếng Việt có dấu", "Ελληνικά κείμενα", "Русский текст, ёЁ",
    "1", "12", "123", "1234", "12345", "1234567890", "3.14159", "1,000,000", "v1.2.3-rc4", "0x1F2e",
    "١٢٣٤٥ ٦٧", "²³¹ ½ ⅓ Ⅻ", "①②③",
    "def f(x):\n    return x**2  # square\n", "int main() { return 0; }\n", '{"key": [1, 2, {"a": null}]}',
    "if (a && b || !c) { x += 1; }", "    indented\n\tTabbed\n        more", "path/to/file.txt C:\\Windows\\System32",
    "I'm you're we've they'll he'd it's", "I'M YOU'RE WE'VE THEY'LL HE'D IT'S", "'s 't 're 'S", "rock 'n' roll",
    "' ' '", "don't", "''''",
    "Hello, world! How are you? Fine.", "...!!!???", "--- *** ___ ===", "a.b,c;d:e", "<html><body>Text</body></html>",
    "$100 + €50 = £?", "~`^|", "@user #tag",
    "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n", "<|im_start|><|im_end|>", "<|im_start", "|im_end|>",
    "<|endoftext|>text<|endoftext|>", "<s>hi</s>", "<|begin_of_text|>x<|eot_id|>", " <|im_start|> spaced <|im_end|> ",
    "ÀÉÎÕÜ àéîõü ßẞ", "e\u0301 a\u0300 combining", "\u0301\u0301 marks alone", "o\u0308\u0304",
    "\u0378\u0379 unassigned \U000E0001", "\ue000 private \U000F0000", "\x00\x01\x1f control \x7f",
    "Ünïcödé", "ŉ ǅ ǈ ǋ", "ﬁ ﬂ ligatures", "ｆｕｌｌｗｉｄｔｈ ＡＢＣ １２３", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝐛𝐨𝐥𝐝", "𠀀𠀁 ext B",
    "\U0002EBF0 ext I", "\u31ef\u2ffc 15.1",
    " ", "  Hello", "   Hello", " Hello World!", "Hello\n\nWorld", "Hello\r\nWorld", "\n =",
]

POOLS = [list(range(0x20, 0x7f)), [0x20] * 10 + [0x0a, 0x09, 0x0d], list(range(0xa0, 0x250)),
         list(range(0x300, 0x370)), list(range(0x370, 0x530)), list(range(0x600, 0x700)),
         list(range(0x900, 0x980)), list(range(0xe00, 0xe80)), list(range(0x2000, 0x2070)),
         list(range(0x3000, 0x3100)), list(range(0x4e00, 0x4f00)), list(range(0xac00, 0xac80)),
         list(range(0x1f300, 0x1f700)), list(range(0xff00, 0xfff0)), list(range(0x30, 0x3a)) * 3,
         [ord("'")] * 5 + [ord('s'), ord('t'), ord('l'), ord('L')]]


def mixed(val_path):
    random.seed(1)
    val = open(val_path, encoding="utf-8").read()
    cases = []
    for _ in range(60):
        a = random.randrange(len(val) - 400)
        cases.append(val[a:a + random.randrange(1, 400)])
    cases += FIXED
    for _ in range(150):
        s = []
        for _ in range(random.randrange(1, 60)):
            c = random.choice(random.choice(POOLS))
            if not 0xd800 <= c <= 0xdfff:
                s.append(chr(c))
        cases.append("".join(s))
    cases = [c for c in cases if c]
    sys.stdout.write(SEP.join(cases))


def invalid():
    random.seed(3)
    cases = [b"\xff", b"\xfe\xff", b"abc\x80def", b"\xc3", b"\xc3(", b"\xc3\xa9", b"\xe2\x82", b"\xe2\x82\xac",
             b"\xe2(\xa1", b"\xf0\x9f\x98", b"\xf0\x9f\x98\x80", b"\xc0\x80", b"\xc1\xbf", b"\xe0\x80\x80",
             b"\xed\xa0\x80", b"\xed\xbf\xbf x", b"\xf8\x88\x80\x80\x80", b"Hello \xff world", b" \xc3 \xa9 ",
             b"\x80\x80\x80", b"\xc3\xc3\xa9", b"caf\xe9", b"<|im_start|>\xff<|im_end|>", b"\xef\xbb\xbf\xef\xbf\xbd",
             b"\n\xa0\n", b"'\xff", b"1\xff2", b"\xe3\x81\xe3\x81\x82"]
    for _ in range(120):
        b = bytearray()
        for _ in range(random.randrange(1, 40)):
            r = random.random()
            if r < 0.3:
                b += bytes([random.randrange(0x80, 0x100)])
            elif r < 0.6:
                b += bytes([random.randrange(0x20, 0x7f)])
            elif r < 0.7:
                b += random.choice([b" ", b"  ", b"\n", b"\t"])
            else:
                cp = random.choice([random.randrange(0xa0, 0x800), random.randrange(0x800, 0xd800),
                                    random.randrange(0x10000, 0x20000)])
                b += chr(cp).encode()[:random.choice([1, 2, 3, 4, 4, 4, 4])]
        cases.append(bytes(b))
    sys.stdout.buffer.write(SEP.encode().join(cases))


if __name__ == "__main__":
    if sys.argv[1] == "mixed":
        mixed(sys.argv[2])
    else:
        invalid()
