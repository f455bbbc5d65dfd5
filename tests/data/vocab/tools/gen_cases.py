#!/usr/bin/env python3
"""Writes the tokenizer test inputs (llama.cpp .inp format: inputs separated by
"\\n__ggml_vocab_test__\\n").

  gen_cases.py mixed VAL_TXT > les-mixed.inp      # text: val-text excerpts, hand-written edge
                                                  # cases, random Unicode soup (seed 1)
  gen_cases.py invalid > les-invalid-utf8.raw     # bytes: invalid / truncated UTF-8 (seed 3)
  gen_cases.py moe > les-moe-pre.inp              # text: edge cases of the gpt-4o, deepseek-*
                                                  # and kimi-k2 pre-tokenizers, random mixes (seed 5)
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


MOE_FIXED = [
    # English, contractions in both cases, case changes inside words (gpt-4o's U*W+ / U+W*)
    "The quick brown fox jumps over the lazy dog.", "Don't stop: I'm sure we've seen they're here, you'll see, he'd go.",
    "DON'T STOP: I'M SURE WE'VE SEEN THEY'RE HERE, YOU'LL SEE, HE'D GO.", "it's IT'S It'S iT's we'Re x'LL y'Ve",
    "McDonald's iPhone HelloWorld camelCaseName snake_case_name SCREAMING_CASE XMLHttpRequest",
    "'s 't 're 've 'm 'll 'd 'S 'T 'RE 'VE 'M 'LL 'D", "rock 'n' roll", "x'", "'", "''s",
    # accented and non-Latin letters next to ASCII case (a non-ASCII letter is upper and lower case)
    "ÀBC ÀBCdef ÉCOLE École naïve Straße ǅungla ǈ ΣΊΣΥΦΟΣ σίσυφος Ωmega ωMEGA", "aÀb AàB àB Àb",
    "Русский ТЕКСТ Текст", "e\u0301 E\u0301 e\u0301\u0301x \u0301 a\u0308B",
    # code
    "def f(x):\n    return x**2  # square\n", "#include <stdio.h>\nint main() { printf(\"%d\\n\", 42); }\n",
    "if (a && b || !c) { x += 1; } // done", "const s = 'it\\'s'; let t = \"DON'T\";", "a/\n/b ;\n//c x;\r\n/*y*/ \n/",
    "foo.bar(baz)[0]->qux", ".hello .h\u00e9llo (\u00e9 $x @user #tag", "<html><body class=\"x\">Text</body></html>",
    "http://example.com/a/b?c=d&e=f", "C:\\Windows\\System32\\",
    # numbers
    "1", "12", "123", "1234", "12345", "123456", "1234567", "12345678901234567890", "3.14159", "1,000,000",
    "v1.2.3-rc4", "0x1F2e", "3abc abc3 a1b2c3", "\u0661\u0662\u0663\u0664\u0665 \u0966\u0967\u0968\u0969",
    "\u00b2\u00b3 \u00bd \u2162\u216b \u2460\u2461\u2462", "\uff10\uff11\uff12\uff13",
    # CJK, Han edges, kana, Korean
    "\u6211\u60f3\u5728apple\u5de5\u4f5c1314151\u5929\uff5e", "\u4e2d\u6587English\u6df7\u5408 A\u4e2dB don't\u4e2d \u4e2d'S '\u4e2d",
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3001\u6f22\u5b57\u3068\u30ab\u30bf\u30ab\u30ca\u3002",
    "\u3005\u3007\u3006 \u3400\u4dbf \U00020000\U0002a6df \uf900\ufaff \u9fa5\u9fa6\u9fff \u2e80\u2f00",
    "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8\uc785\ub2c8\ub2e4 \u1100\u1161\u11a8 \u3131\u314f",
    "\u0800\u0900\u0915\u094d\u0937 \u0e01\u0e32 \u1000\u4dff\u4e00 \ud7a3\ud7b0\ud7ff",
    # scripts with marks, RTL
    "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e", "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645",
    "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35\u0e04\u0e23\u0e31\u0e1a", "Ti\u1ebfng Vi\u1ec7t c\u00f3 d\u1ea5u",
    # DeepSeek LLM's letter and punctuation lists
    "\u00b5 \u017f \u01c5 \u0250 \u0294 \u02b0 \u13a0 \uab70 \u2c00 \u2c7e \ua640 \U00010400 \U0001e900 \u2126 \u212a",
    "\uff01\uff1f\uff08\uff09 \u201cquoted\u201d \u2018x\u2019 \u3001\u3002 \u3000\u3000x \uff21\uff22\uff41\uff42",
    # emoji, ZWJ, format and private-use characters
    "Hello \U0001f44b\U0001f3fd world \U0001f9d1\u200d\U0001f91d\u200d\U0001f9d1 \U0001f1fa\U0001f1f8", "\U0001f999.cpp \u2705 \u2764\ufe0f",
    "x\u200dy \u200d\u200d \u200bzero\u200b \ufeffBOM \u180e \ue000\uf8ff \u0378 \ufffd \U000e0001",
    # whitespace runs and newlines
    "   ", "\t\t", "\n", "\n\n\n", "\r\n", "\r\n\r\n  \r\n", " \n \n ", "a  b   c    d", "x \t y", "end   ",
    "  Hello", "   Hello", "\tHello", "\u3000Hello", "\u00a0Hello", "Hello\n\nWorld", "Hello\r\nWorld", "word  \n  word",
    "\x0b\x0c\x1c\x1d\x1e\x1f x", "\x85\u2028\u2029\u1680\u2000\u202f\u205f x", " .", " .\n\n", "!!\r\n", "?\n\n\nx",
]

MOE_POOLS = [
    ("abcdefghijklmnopqrstuvwxyz", 6), ("ABCDEFGHIJKLMNOPQRSTUVWXYZ", 4), ("0123456789", 3),
    ("!\"#$%&()*+,-./:;<=>?@[\\]^_`{|}~", 3), ("'", 3), ("sStTmMdDrReEvVlL", 2), (" ", 8), ("\t\r\n\x0b\x0c", 3),
    ("\x1c\x1f\x7f", 1), ("\x85\xa0\u3000\u2009\u1680\u2028", 1), ("\u00e9\u00c9\u00df\u00f8\u00d8\u00e6\u00f1\u00c0\u00e7", 3),
    ("\u03b1\u03b2\u0394\u03a3\u03a9\u0436\u0416\u044f", 2), ("\u0301\u0300\u0308\u20dd", 2),
    ("\u4e2d\u6587\u5b57\u56fd\u6211\u60f3\u5728\u5de5\u4f5c", 3), ("\u3400\U00020000\uf900\u9fa6\u9fff", 1),
    ("\u3005\u3007", 1), ("\u3072\u3089\u304c\u30ab\u30bf\u30fc", 2), ("\ud55c\uad6d\uc5b4\uac00\ud7a3", 2),
    ("\u0939\u093f\u0928\u094d\u0926", 1), ("\u0639\u0631\u0628", 1), ("\u0e20\u0e32\u0e29", 1),
    ("\U0001f600\U0001f44d\U0001f3fd\U0001f999", 2), ("\u200d\u200b\ufeff", 1), ("\uff21\uff41\uff10\uff01\uff08", 1),
    ("\u216b\u00b2\u00bd\u2460\u0661", 1), ("\ue000\u0378\ufffd", 1), ("\u0800\u0915\u0e01\u1000\u2e80", 1),
    ("\u2018\u2019\u201c\u201d\u2014\u2026\u3001\u3002\uff1a", 2), ("\u00b5\u017f\u01c5", 1),
]
MOE_WORDS = ["don't", "DON'T", "I'm", "I'M", "we've", "They're", "You'll", "he'd", "IT'S", "HelloWorld", "iPhone",
             "ÀBC", "ÀBCdef", "123456789", "3.14", "a/\n/b", "  indented", "\n\n", "\r\n", "end  ", "$var", "#x"]


def moe():
    random.seed(5)
    cases = list(MOE_FIXED)
    for _ in range(250):
        s = []
        for _ in range(random.choice([1, 2, 3, 5, 8, 13, 21, 34])):
            if random.random() < 0.15:
                s.append(random.choice(MOE_WORDS))
                continue
            chars = random.choices([p for p, _ in MOE_POOLS], weights=[w for _, w in MOE_POOLS])[0]
            s.append("".join(random.choice(chars) for _ in range(random.choice([1, 1, 2, 3, 4]))))
        cases.append("".join(s))
    sys.stdout.buffer.write(SEP.join(cases).encode())


if __name__ == "__main__":
    if sys.argv[1] == "mixed":
        mixed(sys.argv[2])
    elif sys.argv[1] == "moe":
        moe()
    else:
        invalid()
