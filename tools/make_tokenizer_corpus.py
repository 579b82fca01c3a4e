#!/usr/bin/env python3
"""Builds the tokenizer test corpus and its expected ids.

  tests/data/tokenizer/corpus.jsonl    {"i": n, "text": "..."}   one string a line
  tests/data/tokenizer/expected.jsonl  {"i": n, "ids": [...]}    ids from Hugging Face `tokenizers`

The corpus is deterministic (fixed seed, fixed lists). The ids come from the tokenizer
exactly as transformers 5 builds Qwen2Tokenizer (AutoTokenizer on data/tokenizers/qwen3);
every string is also encoded with raw `tokenizers.Tokenizer.from_file(tokenizer.json)` and
the script fails if the two ever disagree.

Usage: python3 tools/make_tokenizer_corpus.py [--check]   (--check: rebuild in memory and
compare against the committed files instead of writing them)
"""
import json
import os
import random
import sys
import unicodedata

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOK_DIR = os.path.join(REPO, "data", "tokenizers", "qwen3")
OUT_DIR = os.path.join(REPO, "tests", "data", "tokenizer")

SPECIALS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<|vision_start|>",
            "<|image_pad|>", "<|vision_end|>", "<tool_call>", "</tool_call>", "<|fim_prefix|>",
            "<|video_pad|>", "<|box_start|>", "<|file_sep|>"]

SCRIPTS = {
    "latin": "Crème brûlée, façade, naïve coöperation — Ångström, Øresund, Łódź, Dvořák, Ærø, "
             "straße, São Paulo, Muñoz, Ðakovo, İstanbul, ǅemal, ĳssel, œuvre, Şişli, Ţară",
    "cyrillic": "Съешь же ещё этих мягких французских булок, да выпей чаю. Ґанок, їжак, Ђорђе, Љубљана",
    "greek": "Ξεσκεπάζω την ψυχοφθόρα βδελυγμία. Άλφα, ΐ, ΰ, ς σ Σ, ᾼ ᾳ ῷ",
    "arabic": "نص حكيم له سر قاطع وذو شأن عظيم مكتوب على ثوب أخضر ومغلف بجلد أزرق ١٢٣٤٥٦٧٨٩٠",
    "hebrew": "דג סקרן שט בים מאוכזב ולפתע מצא חברה שָׁלוֹם עֲלֵיכֶם",
    "devanagari": "ऋषियों को सताने वाले दुष्ट राक्षसों के राजा रावण का सर्वनाश करने वाले विष्णुवतार भगवान श्रीराम ०१२३४५६७८९",
    "thai": "เป็นมนุษย์สุดประเสริฐเลิศคุณค่า กว่าบรรดาฝูงสัตว์เดรัจฉาน ๑๒๓",
    "cjk": "天地玄黄，宇宙洪荒。日月盈昃，辰宿列张。我能吞下玻璃而不伤身体。這是繁體字。𠀀𠀁𪚥",
    "hangul": "키스의 고유조건은 입술끼리 만나야 하고 특별한 기술은 필요치 않다. ᄀᄁᄂ ㄱㄲ",
    "japanese": "いろはにほへと ちりぬるを わかよたれそ つねならむ カタカナ ﾊﾝｶｸ ー 東京タワー、「引用」。",
    "others": "Ethiopic ሰላም, Georgian ქართული, Armenian Հայերեն, Tamil தமிழ், Bengali বাংলা ৩৪, "
              "Khmer ខ្មែរ, Lao ລາວ, Tibetan བོད་ཡིག, Sinhala සිංහල, Mongolian ᠮᠣᠩᠭᠣᠯ, Cherokee ᏣᎳᎩ",
}

EMOJI = ["😀", "👍", "👍🏽", "👩‍💻", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇯🇵", "🇺🇸", "🇪🇺", "❤️", "✊🏿", "🧑🏻‍🚀",
         "🫠", "🤦‍♀️", "1️⃣", "#️⃣", "©️", "🏴󠁧󠁢󠁳󠁣󠁴󠁿", "😂😂😂", "🔥"]

WHITESPACE = [" ", "  ", "   ", "\t", "\t\t", "\n", "\n\n", "\r\n", "\r\n\r\n", "\r", " \n", "\n ",
              " \t \n", "\u00a0", "\u3000", "\u2003", "\u0085", "\u2028", "\u2029", "\u000b", "\u000c",
              "\u200b", "\ufeff", "\u180e", "\u001c", "\u202f", "\u205f", "\u1680"]

CODE = [
    "def fib(n):\n    if n < 2:\n        return n\n    return fib(n - 1) + fib(n - 2)\n",
    "#include <stdio.h>\nint main(void) {\n\tprintf(\"%d\\n\", 42);\n\treturn 0;\n}\n",
    "fn main() {\n    let v: Vec<u32> = (0..10).map(|x| x * x).collect();\n    println!(\"{:?}\", v);\n}\n",
    "const f = async (x) => { await fetch(`/api/${x}`); return x ?? null; };\n",
    "SELECT id, name FROM users WHERE age >= 18 AND name LIKE '%son' ORDER BY id DESC;",
    "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tfmt.Println(\"hi\")\n}\n",
    "<div class=\"x\">&nbsp;<a href='#'>link</a></div>\n",
    "{\"key\": [1, 2.5, -3e10, true, null], \"nested\": {\"a\": \"b\"}}",
    "public static void main(String[] args) { System.out.println(args.length); }",
    "x = [i**2 for i in range(100) if i % 3 == 0]  # comment\n\n\n",
    "    \n    indented\n        more\n\t\tmixed\t \n",
    "#!/bin/bash\nset -euo pipefail\nfor f in *.txt; do echo \"$f\" | wc -c; done\n",
    "\\begin{equation} E = mc^2 \\quad \\int_0^\\infty e^{-x^2} dx = \\frac{\\sqrt{\\pi}}{2} \\end{equation}",
]

URLS = ["https://huggingface.co/Qwen/Qwen3-8B/blob/main/tokenizer.json?download=true#L10",
        "http://example.com:8080/a/b/c.html", "ftp://user:pass@host.org/file.tar.gz",
        "mailto:someone@example.org", "https://例子.测试/路径?查询=值",
        "www.wikipedia.org/wiki/Unicode_equivalence#Normal_forms"]

CONTRACTIONS = ["it's", "IT'S", "we'll", "WE'LL", "they're", "THEY'RE", "I've", "I'VE", "I'm", "I'M",
                "you'd", "YOU'D", "don't", "DON'T", "'s", "'S", "'ll", "'LL", "'Re", "'vE", "'ſ",
                "rock'n'roll", "''s", "' s", "'sa", "'tis", "O'Neil", "l'été", "’s", "it’s"]

WORDS = ("the quick brown fox jumps over lazy dog tokenizer byte pair encoding merges vocabulary "
         "hello world model quantized weights serving runtime kernel tensor matrix").split()


def nfd_pairs():
    base = ["é", "ñ", "ü", "Å", "ç", "ǖ", "ệ", "가", "한국어", "ガ", "パ", "ﬁ", "Ω", "Å", "é", "ḳ́"]
    out = []
    for s in base:
        out.append(s)
        out.append(unicodedata.normalize("NFD", s))
        out.append("word" + unicodedata.normalize("NFD", s) + "word")
    out.append("e\u0301\u0301\u0327 a\u030a\u0323 o\u0308\u0304 q\u0307\u0323")
    out.append(unicodedata.normalize("NFD", SCRIPTS["latin"]))
    out.append(unicodedata.normalize("NFD", SCRIPTS["hangul"]))
    out.append(unicodedata.normalize("NFD", SCRIPTS["japanese"]))
    out.append("\u0301 leading combining mark")
    out.append("Dec\u0327omposed ﬀ ﬃ ℌ ① ｶ")  # compatibility forms stay (NFC only)
    return out


def build():
    rng = random.Random(20240601)
    c = []
    add = c.append
    # fixed edge cases first
    for s in ["", " ", "  ", "a", "\n", "\r\n", "\t", "    ", " a", "a ", "a  ", "  a", "a\n", "\n\n\n",
              "hello", " hello", "hello world", "Hello, World!", "\u0000", "a\u0000b", "\x7f", "\x01\x02",
              "'", "''", "'''", "!!!", "...", " ...", "?!\n", "1", "12", "123", "1234", "a1b2", " 1",
              "\u00a0a", "\u3000a", "\ta", "\t!", " !", "  !", "\n!", " \n!", "a\r\nb", "x\u0085y"]:
        add(s)
    for w in WHITESPACE:
        for tail in ["", "a", "1", "!", "é", "中"]:
            add(w + tail)
            add("x" + w + tail)
            add("x" + w + w + tail)
    for name, text in SCRIPTS.items():
        add(text)
        words = text.split()
        for _ in range(40):
            k = rng.randint(1, min(8, len(words)))
            add(" ".join(rng.sample(words, k)))
        add(text.upper())
        add(text.lower())
    for e in EMOJI:
        add(e)
        add("I " + e + " it" + e + e)
        add(e + "\n")
    for _ in range(80):
        add(" ".join(rng.choice(EMOJI) for _ in range(rng.randint(1, 6))))
    # numbers of every length
    for n in range(1, 41):
        digits = "".join(rng.choice("0123456789") for _ in range(n))
        add(digits)
        add("x" + digits + "y")
        add(" " + digits)
    for s in ["3.14159", "-42", "1,000,000", "1e-9", "0x1F", "v1.2.3", "2024-06-01T12:00:00Z", "₁₂³",
              "½ ¾ ⅓", "Ⅻ ⅻ", "١٢٣", "१२३", "١٢٣abc"]:
        add(s)
    for s in CONTRACTIONS:
        add(s)
        add("Well " + s + " fine")
        add(s.upper())
    for s in CODE:
        add(s)
        add(s.replace("    ", "\t"))
    for s in URLS:
        add(s)
        add("See " + s + " for details.")
    # special tokens embedded
    for sp in SPECIALS:
        add(sp)
        add("a" + sp + "b")
        add(" " + sp + " ")
        add(sp + sp)
        add(sp[:-1])  # truncated: must not match
        add(sp.upper())
    add("<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n"
        "<|im_start|>assistant\n<think>\n\n</think>\n\nHello!<|im_end|>")
    add("<|im_start|><|im_end|><|im_start|>")
    add("<|<|im_start|>|>")
    add("<|im_start|>é\u0301<|im_end|>")
    for s in nfd_pairs():
        add(s)
    # random mixtures over character pools
    pools = [SCRIPTS[k] for k in SCRIPTS] + ["".join(EMOJI), "".join(WHITESPACE), "0123456789",
                                             "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~", "sStTrReEvVmMlLdD'"]
    while len(c) < 2900:
        n = rng.randint(1, 60)
        s = "".join(rng.choice(rng.choice(pools)) for _ in range(n))
        add(s)
    # word salads with varied whitespace and specials
    for _ in range(150):
        parts = []
        for _ in range(rng.randint(3, 30)):
            r = rng.random()
            if r < 0.6:
                parts.append(rng.choice(WORDS))
            elif r < 0.7:
                parts.append(rng.choice(CONTRACTIONS))
            elif r < 0.8:
                parts.append(rng.choice(WHITESPACE))
            elif r < 0.9:
                parts.append(str(rng.randint(0, 10 ** rng.randint(1, 12))))
            elif r < 0.95:
                parts.append(rng.choice(SPECIALS))
            else:
                parts.append(rng.choice(EMOJI))
        add(rng.choice(["", " ", "  "]).join(parts) + rng.choice(["", " ", "\n", "   ", "\t"]))
    # long strings
    add(" ".join(SCRIPTS.values()) * 20)
    add("".join(CODE) * 10)
    add("a" * 5000)
    add(" " * 3000)
    add("\n" * 1000)
    add("1234567890" * 500)
    add("😀" * 1000)
    add(" ".join(rng.choice(WORDS) for _ in range(5000)))
    return c


def encode_all(corpus):
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    hf = AutoTokenizer.from_pretrained(TOK_DIR)
    raw = Tokenizer.from_file(os.path.join(TOK_DIR, "tokenizer.json"))
    info = {"transformers_class": type(hf).__name__,
            "backend_vocab_size": hf.backend_tokenizer.get_vocab_size(True)}
    out, diffs = [], []
    for i, s in enumerate(corpus):
        a = hf.encode(s, add_special_tokens=True)
        b = raw.encode(s).ids
        if a != b:
            diffs.append(i)
        out.append(a)
    return out, diffs, info


QWEN2_PATTERN = ("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
                 "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")


def byte_level_alphabet():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def flags_tokenizer():
    """A small byte-level BPE tokenizer.json whose added tokens use every flag
    (lstrip, rstrip, single_word, normalized), with no tokenizer_config.json."""
    alpha = byte_level_alphabet()
    vocab = {alpha[b]: b for b in range(256)}
    merges = []
    for a, b in [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("w", "o"), ("r", "d"), ("Ġ", "wo"),
                 ("Ġwo", "rd"), ("Ã", "©")]:
        vocab[a + b] = len(vocab)
        merges.append([a, b])
    added = []
    for content, flags in [("<L>", dict(lstrip=True)), ("<R>", dict(rstrip=True)),
                           ("<LR>", dict(lstrip=True, rstrip=True)), ("word", dict(single_word=True, special=False)),
                           ("éx", dict(normalized=True, special=False)), ("<a>", {}), ("<a>b", {}),
                           ("ñw", dict(normalized=True, single_word=True, special=False))]:
        tok = dict(id=len(vocab) + len(added), content=content, single_word=False, lstrip=False, rstrip=False,
                   normalized=False, special=True)
        tok.update(flags)
        added.append(tok)
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN2_PATTERN}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}]},
        "post_processor": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": merges},
    }


FLAG_CASES = ["", "the", " the word", "word", "words", "a word b", "_word", "word_", "1word", "wordéx", "éxword",
              "éx", "e\u0301x", "xe\u0301xy", "é", "e\u0301", "x <L>y", "x  \t<L>y", "<L>", "  <L>", "<R>  y", "<R>\n\nz",
              "<L><L>  <R> z", "  <LR>  ", "a<LR>b", "a \u3000<LR>\u3000 b", "<a>", "<a>b", "<a>bc", "<a><a>b",
              "x<a", "ñw", " ñw ", "añw", "n\u0303w", " n\u0303w!", "word word,word", "<R> <L>", "<L> <R>",
              " <R> <L> ", "the<L>the", "wo rd"]


def write_flags(check):
    from tokenizers import Tokenizer
    d = os.path.join(OUT_DIR, "flags")
    tj = json.dumps(flags_tokenizer(), ensure_ascii=False, indent=1) + "\n"
    tok = Tokenizer.from_str(tj)
    lines = [json.dumps({"i": i, "text": s, "ids": tok.encode(s).ids}, ensure_ascii=False) + "\n"
             for i, s in enumerate(FLAG_CASES)]
    if check:
        return (open(os.path.join(d, "tokenizer.json"), encoding="utf-8").read() == tj and
                open(os.path.join(d, "cases.jsonl"), encoding="utf-8").read() == "".join(lines))
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8", newline="\n") as f:
        f.write(tj)
    with open(os.path.join(d, "cases.jsonl"), "w", encoding="utf-8", newline="\n") as f:
        f.writelines(lines)
    return True


def main():
    check = "--check" in sys.argv
    corpus = build()
    ids, diffs, info = encode_all(corpus)
    print(f"{len(corpus)} strings, {info}; transformers vs raw tokenizers.from_file differ on "
          f"{len(diffs)} strings {diffs[:10]}", file=sys.stderr)
    if diffs:
        sys.exit(1)
    lines_c = [json.dumps({"i": i, "text": s}, ensure_ascii=False) + "\n" for i, s in enumerate(corpus)]
    lines_e = [json.dumps({"i": i, "ids": v}, separators=(",", ":")) + "\n" for i, v in enumerate(ids)]
    pc, pe = os.path.join(OUT_DIR, "corpus.jsonl"), os.path.join(OUT_DIR, "expected.jsonl")
    if check:
        ok = (open(pc, encoding="utf-8").read() == "".join(lines_c) and open(pe).read() == "".join(lines_e)
              and write_flags(True))
        print("check:", "same" if ok else "DIFFERENT", file=sys.stderr)
        sys.exit(0 if ok else 1)
    os.makedirs(OUT_DIR, exist_ok=True)
    with open(pc, "w", encoding="utf-8", newline="\n") as f:
        f.writelines(lines_c)
    with open(pe, "w", newline="\n") as f:
        f.writelines(lines_e)
    write_flags(False)
    print(f"wrote {pc}, {pe} and {OUT_DIR}/flags", file=sys.stderr)


if __name__ == "__main__":
    main()
