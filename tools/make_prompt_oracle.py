#!/usr/bin/env python3
"""Oracle for the Decision 3.0 prompt (published-d3.md "Prompt (exact)"), independent of the C
renderer: the user text follows the published rules as tools/d3_render_oracle.py writes them
(Python's own json.dumps(ensure_ascii=False) for object/array values), the chat wrapper is
applied by jinja2 from the package's chat_template.jinja (and must equal the published
wrapper d3_render_oracle.render_prompt writes: the fixture's template renders the published
format), and the ids come from Hugging Face `tokenizers` built as published-d3.md "Tokenizer
rules" says. Writes tests/data/decision/prompts.json: [{request, question, prompt, ids}].

usage: python3 tools/make_prompt_oracle.py PACKAGE_DIR   (e.g. a `vllm-srun fixture` tiny package)
"""
import json
import os
import sys

import jinja2

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import d3_render_oracle as d3  # noqa: E402

SYSTEM = d3.SYSTEM


def user_text(state, q, codes):
    lines = ["State:", d3.state_text(state), "", "Question:", d3.instructions_text(q["instructions"]), "",
             "Options:"] + [f"{codes[i]}: {o}" for i, o in enumerate(d3.option_texts(q))] + \
        ["", "Reply with only the code of the best option."]
    return "\n".join(lines)

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
    {"state": [], "questions": {"q": {"type": "noul", "instructions": "x",
                                      "criteria": {"false": {}, "true": []}}}},
]

def main():
    pkg = sys.argv[1]
    tok, codes, _, _ = d3.load_package(pkg)
    tmpl = jinja2.Environment().from_string(open(f"{pkg}/chat_template.jinja").read())
    out = []
    for r in REQUESTS:
        for qid, q in r["questions"].items():
            prompt = tmpl.render(messages=[{"role": "system", "content": SYSTEM},
                                           {"role": "user", "content": user_text(r["state"], q, codes)}],
                                 add_generation_prompt=True)
            assert prompt == d3.render_prompt(r["state"], q, codes), "the template renders another format"
            out.append({"request": r, "question": qid, "prompt": prompt, "ids": d3.encode(tok, prompt)})
    json.dump(out, open("tests/data/decision/prompts.json", "w"), ensure_ascii=False, indent=0)
    print(f"{len(out)} prompts")


if __name__ == "__main__":
    main()
