#!/usr/bin/env python3
"""Oracle for identity.model_sha256 (reference-runtime.md 4.1 step 6), computed with
Python's own json module exactly as the reference runtime does:

    sha256(json.dumps({"files": F, "decision": D}, sort_keys=True, separators=(",", ":")))

with the default ensure_ascii=True. D is the decision config restricted to the identity
keys. Writes tests/data/identity/<case>.json = {"files", "decision" (the whole config,
extra keys included, so the C side must do the restriction), "model_sha256", "dump"}.
Run from the repository root: python3 tools/identity_oracle.py
"""
import hashlib
import json
import os

KEYS = ["format_version", "format_id", "prompt", "base_model", "revision", "codes", "token_ids",
        "temperature", "attention_mode", "pooling", "max_length", "readout_dtype"]


def codes(style):
    if style == "ascii":
        return ["C%03d" % i for i in range(255)]
    if style == "unicode":
        # Latin-1, CJK, astral plane (surrogate pairs under ensure_ascii), combining marks
        base = ["é", "中", "😀", "ß", "Ω", "e\u0301", "𝔸", "\u00a0", "ㄱ", "ü"]
        return ["%s%d" % (base[i % len(base)], i) for i in range(255)]
    if style == "escapes":
        base = ['"', "\\", "\n", "\t", "/", "\u0001", "\u007f", "\u2028", "<", "'"]
        return ["%s%d" % (base[i % len(base)], i) for i in range(255)]
    raise ValueError(style)


def decision(style, temperature, max_length, extra=None, drop=()):
    d = {
        "format_version": 1,
        "format_id": "d3-code-readout-v1",
        "prompt": "d3",
        "base_model": "Qwen/Qwen3.5-0.8B",
        "revision": "0123456789abcdef0123456789abcdef01234567",
        "codes": codes(style),
        "token_ids": [1000 + 3 * i for i in range(255)],
        "temperature": temperature,
        "attention_mode": "noncausal_full_attention",
        "pooling": "last",
        "max_length": max_length,
        "readout_dtype": "float32",
    }
    for k in drop:
        d.pop(k)
    if extra:
        d.update(extra)
    return d


FILES = {
    "model.safetensors": hashlib.sha256(b"weights").hexdigest(),
    "readout.safetensors": hashlib.sha256(b"readout").hexdigest(),
    "tokenizer.json": hashlib.sha256(b"tokenizer").hexdigest(),
    "tokenizer_config.json": hashlib.sha256(b"tokenizer_config").hexdigest(),
    "chat_template.jinja": hashlib.sha256(b"template").hexdigest(),
}
SHARDED = {k: v for k, v in FILES.items() if k != "model.safetensors"}
SHARDED.update({"model-00001-of-00002.safetensors": "1" * 64, "model-00002-of-00002.safetensors": "2" * 64,
                "sub/dir/ünïcode.safetensors": "3" * 64})

CASES = {
    "ascii_t075": (FILES, decision("ascii", 0.75, 4096)),
    "ascii_t1_float": (FILES, decision("ascii", 1.0, None)),
    "ascii_t1_int": (FILES, decision("ascii", 1, None)),
    "unicode_codes": (FILES, decision("unicode", 0.1, 16)),
    "escaped_codes": (FILES, decision("escapes", 1e-05, 131072)),
    "odd_floats": (SHARDED, decision("ascii", 1e16, 32768, extra={"note": "ignored", "licence": "é"})),
    "small_float": (FILES, decision("ascii", 123456789.125, 17, drop=("base_model", "revision"))),
    "minimal_keys": (FILES, decision("ascii", 2.5, None, drop=("base_model", "revision", "max_length", "temperature"))),
}


def main():
    out_dir = os.path.join("tests", "data", "identity")
    os.makedirs(out_dir, exist_ok=True)
    for name, (files, dec) in CASES.items():
        d = {k: dec[k] for k in KEYS if k in dec}
        dump = json.dumps({"files": files, "decision": d}, sort_keys=True, separators=(",", ":"))
        sha = hashlib.sha256(dump.encode("utf-8")).hexdigest()
        doc = {"files": files, "decision": dec, "model_sha256": sha, "dump": dump}
        with open(os.path.join(out_dir, name + ".json"), "w", encoding="utf-8") as f:
            json.dump(doc, f, ensure_ascii=False, indent=1, sort_keys=True)
            f.write("\n")
        print(name, sha)


if __name__ == "__main__":
    main()
