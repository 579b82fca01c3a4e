#!/usr/bin/env python3
"""An independent implementation of the Vela 2.0 word units and span decoder, from the
documented rules (reference-profiles-spans.md section 3.3), and the corpus the C decision
layer is compared with (tests/test_vela2_words.c).

It uses nothing beyond the standard library: Python's `re` (the engine the reference runs
the documented patterns with) against PCRE2 in the C code, and float32 rounding through
`struct`, so the expected values do not come from the C code.

  tests/data/vela2_words.json   {"cases": [...], "windows": [...], "pii": [...]}

Each case: text, token offsets (code points, as a tokenizer reports them; empty tokens
included), the words (start, end, first token), the unit of each word, word x label
probabilities (float64 inputs), labels, threshold, and the decoded spans with their text
(Python string slicing) and float32 mean probability.

Usage: python3 tools/vela2_words_oracle.py [--check]
"""
import json
import math
import os
import random
import re
import struct
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(REPO, "tests", "data", "vela2_words.json")

# ---- the documented character classes ----
CJK = ("\u2e80-\u2fff\u3000-\u303f\u3040-\u30ff\u3100-\u31ff\u3400-\u4dbf\u4e00-\u9fff"
       "\ua000-\ua4cf\uac00-\ud7af\u8c48-\ufaff\ufe30-\ufe4f\uff00-\uffef")
TRAIL = ".,;:!?)\\]}>\"'\u201d\u2019\u00bb"
WORD = re.compile(
    "(?:https?://|www\\.)[^\\s" + CJK + "]+?(?=[" + TRAIL + "]*(?![^\\s" + CJK + "]))"
    "|[a-z0-9._%+-]+@[a-z0-9.-]+\\.[a-z]{2,}"
    "|@[a-z0-9_]+"
    "|[" + CJK + "]"
    "|[^\\W" + CJK + "]+(?:[-_][^\\W" + CJK + "]+)*"
    "|\\S",
    re.IGNORECASE)
UNIT_BODY = "[^\\s\\]\\)\\}>\u300c\u300d\u300e\u300f\"'\u201c\u201d" + CJK + "]"
UNIT = re.compile(
    "(?:https?://|www\\.)" + UNIT_BODY + "+?(?=[.,;:!?]*(?!" + UNIT_BODY + "))"
    "|(?:(?![" + CJK + "])[^\\W_]|[@._\\-+])+"
    "|\\S")
URL_START = re.compile("(?:https?://|www\\.)", re.IGNORECASE)
CJK_CHAR = re.compile("[" + CJK + "]")
EDGE = set("[](){}<>\u300c\u300d\u300e\u300f\u3010\u3011\u300a\u300b\u3008\u3009"
           "\"'\u201c\u201d\u2018\u2019\u00ab\u00bb\u2039\u203a")
URL_TRAIL = set(".,;:!?)")


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def f32_add(a, b):
    return f32(a + b)  # both float32 values: the double sum rounds once to float32


def pairwise_sum_f32(a):
    """numpy's pairwise summation of a float32 array (blocks of 128, 8 accumulators)."""
    n = len(a)
    if n < 8:
        r = 0.0
        for x in a:
            r = f32_add(r, x)
        return r
    if n <= 128:
        r = list(a[:8])
        i = 8
        while i < n - (n % 8):
            for j in range(8):
                r[j] = f32_add(r[j], a[i + j])
            i += 8
        res = f32_add(f32_add(f32_add(r[0], r[1]), f32_add(r[2], r[3])),
                      f32_add(f32_add(r[4], r[5]), f32_add(r[6], r[7])))
        while i < n:
            res = f32_add(res, a[i])
            i += 1
        return res
    n2 = n // 2
    n2 -= n2 % 8
    return f32_add(pairwise_sum_f32(a[:n2]), pairwise_sum_f32(a[n2:]))


def mean_f32(values):
    return f32(f32_add(0.0, pairwise_sum_f32(values)) / len(values))


# ---- words ----
def split_words(text):
    out = []
    for m in WORD.finditer(text):
        out.append((m.start(), m.end()))
    return out


def words_of(text, offsets):
    """Each word with the first non-empty token whose running end passes the word start;
    words no token covers are dropped."""
    units = split_words(text)
    if not units or not offsets:
        return []
    reach, best = [], -1
    for s, e in offsets:
        if e > s and e > best:
            best = e
        reach.append(best)
    words = []
    for ws, we in units:
        t = 0
        while t < len(offsets) and reach[t] <= ws:
            t += 1
        while t < len(offsets) and not offsets[t][1] > offsets[t][0]:
            t += 1
        if t < len(offsets) and offsets[t][0] < we:
            words.append((ws, we, t))
    return words


def unit_ids(text):
    ids = [-1] * (len(text) + 1)
    for k, m in enumerate(UNIT.finditer(text)):
        for i in range(m.start(), m.end()):
            ids[i] = k
    return ids


def word_unit(text, units, start, end):
    i = start
    while i < end and text[i].isspace():
        i += 1
    return units[i] if i < end and i < len(text) else -1


def trim(text, start, end):
    while start < end and (text[start].isspace() or text[start] in EDGE):
        start += 1
    while end > start and (text[end - 1].isspace() or text[end - 1] in EDGE):
        end -= 1
    if URL_START.match(text, start) is None:
        return start, end
    m = CJK_CHAR.search(text, start, end)
    if m:
        end = m.start()
    while end > start and (text[end - 1] in URL_TRAIL or text[end - 1] in EDGE or text[end - 1].isspace()):
        end -= 1
    return start, end


def decode(text, words, probs, labels, threshold):
    """Spans from word x label probabilities (float64 in, compared and averaged in float32)."""
    n = len(words)
    if n == 0:
        return []
    p32 = [[f32(x) for x in row] for row in probs]
    thr = f32(threshold)
    label, bestp = [], []
    for row in p32:
        b = 0
        for j in range(1, len(row)):
            if row[j] > row[b]:
                b = j
        bestp.append(row[b])
        label.append(b if row[b] > thr else -1)
    units = unit_ids(text)
    wunit = [word_unit(text, units, s, e) for s, e, _ in words]
    i = 0
    while i < n:
        j = i
        while j + 1 < n and wunit[j + 1] == wunit[i]:
            j += 1
        if wunit[i] >= 0:
            members = [k for k in range(i, j + 1) if label[k] >= 0]
            if members:
                if len(set(label[k] for k in members)) > 1:
                    votes = {}
                    for k in members:  # dict order: first appearance wins ties
                        votes[label[k]] = votes.get(label[k], 0.0) + bestp[k]
                    top = max(votes.values())
                    winner = next(v for v, s in votes.items() if s == top)
                    for k in members:
                        label[k] = winner
                for k in range(members[0] + 1, members[-1]):
                    if label[k] < 0:
                        label[k] = label[members[0]]
        i = j + 1
    spans = []
    i = 0
    while i < n:
        if label[i] < 0:
            i += 1
            continue
        j = i
        while j + 1 < n and label[j + 1] == label[i]:
            j += 1
        s, e = trim(text, words[i][0], words[j][1])
        if e > s:
            spans.append({"label": labels[label[i]], "start": s, "end": e, "text": text[s:e],
                          "probability": mean_f32([p32[k][label[i]] for k in range(i, j + 1)])})
        i = j + 1
    return spans


# ---- windows, thresholds ----
def word_windows(first, length, window, stride):
    starts = sorted(set(first))
    if not starts:
        return [(0, length)]
    out, start = [], starts[0]
    while True:
        limit = start + window
        if limit >= length:
            end = length
        else:
            inside = [s for s in starts if start < s < limit]
            end = inside[-1] if inside else min(length, limit)
        out.append((start, end))
        if end >= length:
            return out
        later = [s for s in starts if start + stride <= s < end]
        start = later[0] if later else end


def pii_length_threshold(tokens, anchors):
    x = math.log(max(tokens, 1))
    xs = [math.log(a[0]) for a in anchors]
    ys = [math.log(a[1]) for a in anchors]
    if x <= xs[0]:
        y = ys[0]
    elif x >= xs[-1]:
        y = ys[-1]
    else:
        k = 0
        while xs[k + 1] < x:
            k += 1
        y = ys[k] + (x - xs[k]) * (ys[k + 1] - ys[k]) / (xs[k + 1] - xs[k])
    return math.exp(y)


# ---- the corpus ----
TEXTS = [
    "Hi, I'm Tom Baker (tom.baker@example.com). What is the maximum daily dose of paracetamol for an adult?",
    "Adults can take up to 6 grams of paracetamol in 24 hours.",
    "See https://example.org/dose?x=1&y=2). Or www.example.com/path, then stop.",
    "Visit https://例え.jp/パス today or http://a.b/c」です。",
    "HTTPS://EXAMPLE.COM/UPPER and Www.Mixed.Org/x; done",
    "Mail ALICE.SMITH+tag@Example.CO.uk or bob@x.io, ping @john_doe and @Jane99!",
    "东京是日本的首都。李明住在北京市朝阳区。",
    "한국어 문장과 日本語のテキスト、そしてＦＵＬＬＷＩＤＴＨ文字。",
    "Quotes «bonjour» ‹x› 「引用」『二重』【括弧】《书名》〈角〉 \"dq\" 'sq' “curly” ‘single’",
    "Emoji 😀👍🏽 family 👨‍👩‍👧 flags 🇯🇵 and ♥ hearts.",
    "Combining: e\u0301cole cafe\u0301 n\u0303 A\u030a and precomposed é ñ Å.",
    "state-of-the-art snake_case x-ray _lead trail_ a--b c__d -neg",
    "Case folding: ſ K ɦ Ꭰ ꙁ Ｋ straße",
    "Brackets [Tom] (Baker) {x} <y> ((nested)) and 'quoted'.",
    "Call +1 (555) 123-4567 or 555.123.4567; SSN 123-45-6789; card 4111 1111 1111 1111.",
    "  leading and trailing spaces\tand\ttabs\nnewlines\r\n and\u3000ideographic\u00a0nbsp  ",
    "ZIP 94105, IP 192.168.0.1, IBAN DE89 3704 0044 0532 0130 00, date 2024-05-01T10:00Z",
    "Mixed 北京Beijing市 and English東京 text; 3個 items",
    "A URL at the end http://x.org/a.b.c.",
    "Tabs\x1c and odd spaces\x1f here\u2028line\u2029para\u0085nel",
]
LABEL_SETS = [
    ["PERSON", "EMAIL_ADDRESS", "GPE"],
    ["unsupported"],
    ["city", "url", "handle", "number"],
]


def tokenize_offsets(text, rng):
    """Token offsets the way a byte-level BPE reports them: pieces of 1 to 5 code points,
    a space usually attached to the next piece, some empty tokens (0, 0) and some tokens that
    overlap (two tokens sharing one code point, as byte pieces of one character do)."""
    out, i = [], 0
    while i < len(text):
        k = rng.choice([1, 1, 2, 3, 4, 5])
        j = min(len(text), i + k)
        out.append((i, j))
        if rng.random() < 0.06:
            out.append((0, 0))
        if rng.random() < 0.05 and j - i == 1:
            out.append((i, j))  # a second byte piece of the same character
        i = j
    return out


def probabilities(rng, n_words, n_labels, mode):
    rows = []
    for w in range(n_words):
        row = []
        for l in range(n_labels):
            if mode == "sparse":
                x = rng.random() * 0.6 if rng.random() < 0.7 else 0.4 + rng.random() * 0.6
            elif mode == "runs":
                # blocks of words share a label, so spans of many words appear (and long means)
                hot = (w // 9) % (n_labels + 1)
                x = 0.55 + 0.4 * rng.random() if hot == l + 1 else 0.3 * rng.random()
            else:
                x = rng.random()
            row.append(round(x, 6))
        rows.append(row)
    return rows


def build():
    rng = random.Random(20261202)
    cases = []
    for ti, text in enumerate(TEXTS):
        for variant in range(3):
            offsets = tokenize_offsets(text, rng)
            words = words_of(text, offsets)
            labels = LABEL_SETS[(ti + variant) % len(LABEL_SETS)]
            mode = ["sparse", "dense", "runs"][variant]
            probs = probabilities(rng, len(words), len(labels), mode)
            threshold = [0.5, 0.35, 0.6, 0.05][(ti + variant) % 4]
            units = unit_ids(text)
            cases.append({
                "text": text,
                "offsets": [list(o) for o in offsets],
                "split": [list(u) for u in split_words(text)],
                "words": [list(w) for w in words],
                "word_units": [word_unit(text, units, s, e) for s, e, _ in words],
                "labels": labels,
                "threshold": threshold,
                "probabilities": probs,
                "spans": decode(text, words, probs, labels, threshold),
            })
    # one long text: a span of many words (the pairwise mean past 8 and past 128 values)
    long_text = " ".join("word%d" % i for i in range(300))
    offsets = [(m.start(), m.end()) for m in re.finditer(r"\S+|\s", long_text)]
    words = words_of(long_text, offsets)
    probs = [[round(0.6 + 0.39 * rng.random(), 6)] for _ in words]
    cases.append({"text": long_text, "offsets": [list(o) for o in offsets],
                  "split": [list(u) for u in split_words(long_text)],
                  "words": [list(w) for w in words], "word_units": None, "labels": ["x"],
                  "threshold": 0.5, "probabilities": probs,
                  "spans": decode(long_text, words, probs, ["x"], 0.5)})
    windows = []
    for length, first in [(5000, list(range(0, 5000, 3))), (2100, [0, 1799, 1800, 1801, 2000]),
                          (4000, [0, 10, 3990]), (3000, []), (1800, list(range(0, 1800, 7))),
                          (6000, sorted(rng.sample(range(6000), 700)))]:
        windows.append({"length": length, "first": first, "window": 1800, "stride": 1536,
                        "windows": [list(w) for w in word_windows(first, length, 1800, 1536)]})
    anchors = [(21, 0.75), (126, 0.05), (1022, 0.005919)]
    pii = [{"tokens": t, "threshold": pii_length_threshold(t, anchors)}
           for t in [0, 1, 5, 20, 21, 22, 51, 100, 126, 127, 500, 1022, 1023, 10 ** 6]]
    return {"cases": cases, "windows": windows, "pii_anchors": [list(a) for a in anchors], "pii": pii}


def main():
    data = json.dumps(build(), ensure_ascii=False, indent=1) + "\n"
    if "--check" in sys.argv[1:]:
        with open(OUT, encoding="utf-8") as f:
            if f.read() != data:
                sys.exit("tests/data/vela2_words.json differs from the oracle's output")
        print("tests/data/vela2_words.json matches")
        return
    with open(OUT, "w", encoding="utf-8") as f:
        f.write(data)
    print("wrote", OUT)


if __name__ == "__main__":
    main()
