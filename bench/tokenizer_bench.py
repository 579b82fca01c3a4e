#!/usr/bin/env python3
"""Encode speed of Hugging Face `tokenizers` over tests/data/tokenizer/corpus.jsonl, the
tokenizer built as transformers 5 builds Qwen2Tokenizer (its backend_tokenizer), one
thread: `encode` string by string and `encode_batch` (TOKENIZERS_PARALLELISM=false, set
before the import, keeps the batch on one thread). Each repeated until >= 1 s after a
warm-up pass. Usage: python3 bench/tokenizer_bench.py [TOKENIZER_DIR [CORPUS_JSONL]]"""
import json
import os
import sys
import time

os.environ["TOKENIZERS_PARALLELISM"] = "false"
os.environ["RAYON_NUM_THREADS"] = "1"

from transformers import AutoTokenizer  # noqa: E402

tok_dir = sys.argv[1] if len(sys.argv) > 1 else "data/tokenizers/qwen3"
corpus_path = sys.argv[2] if len(sys.argv) > 2 else "tests/data/tokenizer/corpus.jsonl"
texts = [json.loads(line)["text"] for line in open(corpus_path, encoding="utf-8")]
nbytes = sum(len(t.encode("utf-8")) for t in texts)
tok = AutoTokenizer.from_pretrained(tok_dir).backend_tokenizer
print(f"corpus: {len(texts)} strings, {nbytes} bytes")


def run(name, fn):
    fn()  # warm-up (fills the BPE cache)
    reps, start = 0, time.perf_counter()
    while True:
        fn()
        reps += 1
        el = time.perf_counter() - start
        if el >= 1.0:
            break
    print(f"{name:28s} {nbytes * reps / el / 1e6:8.2f} MB/s  ({reps} passes in {el:.2f} s)")


run("tokenizers encode", lambda: [tok.encode(t) for t in texts])
run("tokenizers encode_batch", lambda: tok.encode_batch(texts))
