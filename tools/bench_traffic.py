#!/usr/bin/env python3
"""Realistic /v1/decisions traffic for `vllm-srun bench --requests-file` (issue #25).

Users do not send one repeated shape. Each request here has a state whose length is drawn from a
wide log-normal distribution (median ~80 words, clipped to 8..1500), 1-8 questions of mixed types
(choice with 2-6 options, noul, score with 3-5 levels), and one request in five carries 1-3 extra
`states` entries. Deterministic for a seed.

  python3 tools/bench_traffic.py --requests 256 --seed 1 > traffic.jsonl
  python3 tools/bench_traffic.py --repeated --requests 256 --seed 1 > repeated.jsonl
     (one request of the varied set's mean work: its mean rows per request as questions, over a
      state of its mean words per row; the reference point of the c=1 target "p95 within 1.25x of
      the repeated request's p50 at the same mean length")
"""
import argparse
import json
import math
import random

WORDS = ("the of and to in is it that for on with as was at by this from or be are an have not but had "
         "function list sort merge python code error test value time data model query user request "
         "answer why how what where when which server latency memory token weight layer matrix cache "
         "write explain compute derive prove integral theorem network policy contract invoice refund "
         "account password travel hotel flight weather recipe dinner doctor dose symptom lawyer court").split()
DOMAINS = ["code", "math", "health", "legal", "finance", "travel", "other"]


def state_text(rng, n_words):
    return " ".join(rng.choice(WORDS) for _ in range(n_words)).capitalize() + "."


def question(rng, i):
    kind = rng.choice(["choice", "choice", "noul", "noul", "score"])
    if kind == "choice":
        k = rng.randint(2, 6)
        return {"type": "choice", "instructions": "Which domain does this request belong to?",
                "criteria": {d: f"requests about {d}" for d in rng.sample(DOMAINS, k)}}
    if kind == "noul":
        return {"type": "noul", "instructions": rng.choice([
            "Does answering this request need multi-step reasoning?", "Is the request safe to answer?",
            "Does the request ask for personal data?", "Is this a follow-up question?"])}
    k = rng.randint(3, 5)
    return {"type": "score", "instructions": "How difficult is this request?",
            "criteria": ["Trivial", "Easy", "Moderate", "Hard", "Expert"][:k]}


def words(rng):
    return max(8, min(1500, int(math.exp(rng.gauss(math.log(80), 1.0)))))


def request(rng):
    r = {"state": state_text(rng, words(rng)),
         "questions": {f"q{i}": question(rng, i) for i in range(rng.randint(1, 8))}}
    if rng.random() < 0.2:
        r["states"] = {f"s{k}": {"state": state_text(rng, words(rng)),
                                 "questions": {f"q{i}": question(rng, i) for i in range(rng.randint(1, 4))}}
                       for k in range(rng.randint(1, 3))}
    return r


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--requests", type=int, default=256)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--repeated", action="store_true")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    reqs = [request(rng) for _ in range(a.requests)]
    if a.repeated:
        # the same mean work as the varied set: its mean rows (questions over all states) per request,
        # each over a state of its mean words per row
        rows = [(len(st["state"].split()), len(st["questions"]))
                for r in reqs for st in [r] + list(r.get("states", {}).values())]
        n_rows = sum(q for _, q in rows)
        mean_words = round(sum(w * q for w, q in rows) / n_rows)
        mean_rows = max(1, round(n_rows / len(reqs)))
        rng2 = random.Random(a.seed + 1000)
        one = {"state": state_text(rng2, mean_words),
               "questions": {f"q{i}": question(rng2, i) for i in range(mean_rows)}}
        reqs = [one]
    for r in reqs:
        print(json.dumps(r, ensure_ascii=False))


if __name__ == "__main__":
    main()
