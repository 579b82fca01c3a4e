"""Writes router_prompts.jsonl: calibration samples ({"text": ...}, one per line) shaped like the
requests a semantic router classifies (questions, tasks, chit-chat, code, maths, several languages).
Deterministic: the same file on every run. Composed here from templates (no external data)."""
import json
import os

TASKS = [
    "Write a Python function that {v} and explain its running time.",
    "Explain in simple terms how {t} works.",
    "What is the difference between {t} and {u}?",
    "Summarise the main risks of {t} for a small company.",
    "Can you help me debug this: my {t} job fails with a timeout after 30 seconds.",
    "Give me three arguments for and against {t}.",
    "Translate into French: 'The meeting about {t} is moved to Thursday.'",
    "Solve: if {n} workers finish a task in {m} days, how long do {k} workers need?",
    "Is it safe to use {t} in production? Answer yes or no and explain briefly.",
    "Draft a polite email asking for an update on the {t} project.",
    "东京で{t}について教えてください。",
    "请用三句话解释{t}。",
    "¿Cuál es la mejor manera de aprender {t}?",
    "Rate the difficulty of this request from 1 to 5: implement {v}.",
    "hey, quick one: {t} or {u} for a weekend project?",
    "Write a SQL query that {v}.",
]
TOPICS = ["Kubernetes autoscaling", "gradient descent", "JSON schema validation", "TLS certificates",
          "vector databases", "quantized neural networks", "rate limiting", "unit testing", "OAuth 2.0",
          "GPU memory bandwidth", "the CAP theorem", "prompt injection", "binary search", "Rust lifetimes",
          "load balancing", "tax deductions for freelancers"]
VERBS = ["merges two sorted lists", "counts words in a file", "finds the median of a stream",
         "returns the top 5 customers by revenue", "removes duplicate rows", "parses ISO 8601 dates",
         "computes a moving average", "checks whether a string is a palindrome"]


def main():
    out = []
    i = 0
    for a, tpl in enumerate(TASKS):
        for b in range(8):
            t, u = TOPICS[(a * 3 + b) % len(TOPICS)], TOPICS[(a * 5 + b * 7 + 1) % len(TOPICS)]
            v = VERBS[(a + b) % len(VERBS)]
            out.append({"text": tpl.format(t=t, u=u, v=v, n=3 + b, m=4 + a % 5, k=2 + (a + b) % 6)})
            i += 1
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "router_prompts.jsonl")
    with open(path, "w", encoding="utf-8") as f:
        for o in out:
            f.write(json.dumps(o, ensure_ascii=False) + "\n")
    print(f"{len(out)} samples -> {path}")


if __name__ == "__main__":
    main()
