#!/usr/bin/env python3
"""Oracle for the Decision 3.0 prompt (reference-runtime.md 2.4), written independently of the C
renderer: the user text is built with Python's own json.dumps (ensure_ascii=False, default
separators) for object/array values, the chat wrapper is applied by jinja2 from the fixture's
chat_template.jinja, and the ids come from Hugging Face `tokenizers` via transformers' Qwen2
tokenizer. Writes tests/data/decision/prompts.json: [{request, question, prompt, ids}].

usage: python3 tools/make_prompt_oracle.py PACKAGE_DIR   (e.g. a `vllm-srun fixture` tiny package)
"""
import json
import sys

import jinja2
from transformers import AutoTokenizer

SYSTEM = ("You are a routing decision model. Read the state and the question, then reply with only "
          "the code of the best option.")

def text(v):
    return v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)

def options(q):
    t = q["type"]
    if t == "choice":
        if "criteria" in q:
            items = list(q["criteria"].items())
        else:
            items = [(c["key"], c.get("description")) for c in q["choices"]]
        return [k if d is None else f"{k}: {text(d)}" for k, d in items]
    if t == "noul":
        crit = q.get("criteria") or {c["key"]: c.get("description") for c in q.get("choices", [])}
        return [text(crit["false"]) if crit.get("false") is not None else "No / false",
                text(crit["true"]) if crit.get("true") is not None else "Yes / true"]
    levels = q.get("criteria", q.get("levels"))
    return [text(v) for v in levels]

def user_text(state, q, codes):
    # the reference writes `state or "(empty)"` and `instructions or "Choose the best matching option."`
    s = text(state) if state else "(empty)"
    instr = text(q["instructions"]) if q["instructions"] else "Choose the best matching option."
    lines = "\n".join(f"{codes[i]}: {o}" for i, o in enumerate(options(q)))
    return (f"State:\n{s}\n\nQuestion:\n{instr}\n\n"
            f"Options:\n{lines}\n\nReply with only the code of the best option.")

REQUESTS = [
    {"state": "Write a Python function that merges two sorted lists and explain its running time.",
     "questions": {
        "domain": {"type": "choice", "instructions": "Which domain does this request belong to?",
                   "criteria": {"code": "Programming", "math": "Mathematics", "other": "Anything else"}},
        "reasoning": {"type": "noul", "instructions": "Does answering this request need multi-step reasoning?"},
        "difficulty": {"type": "score", "instructions": "How difficult is this request?",
                       "criteria": ["Trivial", "Moderate", "Hard"]}}},
    {"state": {"user": "Résumé — 東京 🚀", "n": 3, "ratio": 0.75, "big": 1e20, "tiny": 1e-7, "ok": True,
               "none": None, "nested": {"b": [1, 2.5, "x\"y\\z\n"], "a": {}}},
     "questions": {
        "pick": {"type": "choice", "instructions": {"ask": "which?", "lang": "fr"},
                 "choices": [{"key": "a", "description": None}, {"key": "b", "description": {"why": ["x", 1]}},
                             {"key": "c", "description": "plain"}]},
        "yes": {"type": "noul", "instructions": ["step", "by", "step"],
                "criteria": {"true": "Clearly yes", "false": {"reason": "no"}}},
        "lvl": {"type": "score", "instructions": "rate", "levels": ["low", {"mid": 1}, ["high"]]}}},
    {"state": ["a", "b", 3], "questions": {"q": {"type": "noul", "instructions": "  spaced  "}}},
    {"state": {}, "questions": {"q": {"type": "noul", "instructions": {}}}},
    {"state": "", "questions": {"q": {"type": "noul", "instructions": []}}},
    {"state": "   ", "questions": {"q": {"type": "choice", "instructions": "x",
                                         "criteria": {f"k{i}": None for i in range(40)}}}},
    {"state": "tabs\tand\r\nnewlines\u2028 and <|im_start|> inline", "questions": {
        "q": {"type": "noul", "instructions": "Is it?", "choices": [{"key": "true", "description": "oui"}]}}},
]

def main():
    pkg = sys.argv[1]
    dc = json.load(open(f"{pkg}/decision_config.json"))
    codes = dc["codes"]
    tmpl = jinja2.Environment().from_string(open(f"{pkg}/chat_template.jinja").read())
    tok = AutoTokenizer.from_pretrained(pkg)
    out = []
    for r in REQUESTS:
        for qid, q in r["questions"].items():
            prompt = tmpl.render(messages=[{"role": "system", "content": SYSTEM},
                                           {"role": "user", "content": user_text(r["state"], q, codes)}],
                                 add_generation_prompt=True)
            ids = tok(prompt, add_special_tokens=False)["input_ids"]
            out.append({"request": r, "question": qid, "prompt": prompt, "ids": ids})
    json.dump(out, open("tests/data/decision/prompts.json", "w"), ensure_ascii=False, indent=0)
    print(f"{len(out)} prompts")

if __name__ == "__main__":
    main()
