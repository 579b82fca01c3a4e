#!/usr/bin/env python3
"""End-to-end CPU numerics with the published prompt: transformers against `vllm-srun decide`.

record: writes a fixture package (`vllm-srun fixture --size SIZE --scheme SCHEME --seed 1`,
        or --package), renders and tokenizes the requests below with the independent
        renderer (tools/d3_render_oracle.py: published-d3.md + Hugging Face tokenizers),
        runs transformers' Qwen3_5TextModel in FP32 on them the way
        tools/make_transformers_reference.py does (weights widened from BF16 / int4
        dequantized by compressed-tensors; noncausal_full_attention through the mask
        mapping; rows left-padded with the pad id, 8 per forward and each `states` entry on
        its own, positions 0..L-1 over the padded length), applies
        the readout and softmax(logits[:n] / temperature), and writes the answer
        probabilities to tests/data/reference/d3-SIZE-SCHEME-answers.json.
compare: runs `vllm-srun decide` on the same package for each request and compares every
        probability with the recorded one (tolerance 1e-5 on the CPU); writes the log to
        tests/data/reference/d3-SIZE-SCHEME-compare.log and exits 1 on any difference.
        --device cuda:0 --tol 0.02 --log FILE runs the same comparison on a GPU (the GPU
        tolerance of the golden self-check), e.g. on the H200.

The requests: the golden request and three lines of tests/data/decision/render_corpus.jsonl
(unicode, a JSON state with floats, several named states).

usage: tools/d3_transformers_answers.py record|compare --scheme bf16|w4a16-gptq [--size lite]
           [--vsr-bin build/vllm-srun] [--package DIR] [--device cpu|cuda:0] [--tol T] [--log FILE]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tools"))
import d3_render_oracle as d3  # noqa: E402

CORPUS = os.path.join(REPO, "tests", "data", "decision", "render_corpus.jsonl")
CORPUS_LINES = (1, 2, 3, 10)  # 1-based: golden, unicode, JSON state, several states
TOL = 1e-5
ROWS_PER_FORWARD = 8


def requests():
    lines = [l for l in open(CORPUS, encoding="utf-8") if l.strip()]
    return [(n, lines[n - 1].rstrip("\n")) for n in CORPUS_LINES]


def fixture(vsr_bin, out, size, scheme):
    cmd = [vsr_bin, "fixture", out, "--family", "decision3", "--size", size, "--scheme", scheme, "--seed", "1"]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env={**os.environ, "VSR_NO_PROGRESS": "1"})
    return " ".join(["vllm-srun"] + cmd[1:2] + ["OUT"] + cmd[3:])


def compressed_tensors_version():
    """The library's version where it is installed (a BF16 package needs none of it)."""
    try:
        return __import__("compressed_tensors").__version__
    except ImportError:
        return None


def record(a, pkg, fixture_cmd):
    import torch
    import transformers
    from safetensors.torch import load_file
    from transformers import Qwen3_5TextConfig, Qwen3_5TextModel

    import make_transformers_reference as ref

    torch.manual_seed(0)
    cfg = json.load(open(os.path.join(pkg, "config.json")))
    dcfg = json.load(open(os.path.join(pkg, "decision_config.json")))
    tcfg = Qwen3_5TextConfig.from_dict(dict(cfg["text_config"]))
    tcfg._attn_implementation = "eager"
    model = Qwen3_5TextModel(tcfg).float().eval()
    missing, unexpected = model.load_state_dict(ref.text_state_dict(pkg, cfg), strict=False)
    assert not unexpected, unexpected
    assert all("rotary" in k for k in missing), missing
    dev, dtype = torch.device(a.torch_device), getattr(torch, a.torch_dtype)
    model = model.to(dtype).to(dev)  # the stored BF16 (or BF16-rounded dequantized) values: exact in either
    R = load_file(os.path.join(pkg, "readout.safetensors"))["weight"].to(dev)
    temp = float(dcfg["temperature"])
    noncausal = dcfg["attention_mode"] == "noncausal_full_attention"
    tok, codes, max_len, _ = d3.load_package(pkg)
    pad_id = tok.token_to_id(json.load(open(os.path.join(pkg, "tokenizer_config.json")))["pad_token"])

    out = []
    t0 = time.time()
    for line_no, body in requests():
        req = json.loads(body)
        items = [o for o in d3.render_request(tok, codes, req, max_len) if "ids" in o]
        nopt = {}
        for name, r in [(None, req)] + list((req.get("states") or {}).items()):
            for qid, q in r["questions"].items():
                nopt[(name, qid)] = len(d3.option_texts(q))
        # each request part (the main request, then each `states` entry) forwards on its own
        parts = []
        for o in items:
            if not parts or parts[-1][0]["state"] != o["state"]:
                parts.append([])
            parts[-1].append(o)
        batches = [p[b0:b0 + ROWS_PER_FORWARD] for p in parts for b0 in range(0, len(p), ROWS_PER_FORWARD)]
        for batch in batches:
            h = ref.run_case(model, [o["ids"] for o in batch], pad_id, noncausal, dev)
            logits = (h.to(torch.bfloat16) @ R.T).float() if R.dtype == torch.bfloat16 else h.float() @ R.float().T
            for i, o in enumerate(batch):
                n = nopt[(o["state"], o["question"])]
                p = torch.softmax(logits[i, :n].double() / temp, 0)
                out.append({"line": line_no, "state": o["state"], "question": o["question"],
                            "tokens": len(o["ids"]), "probabilities": [float(x) for x in p]})
    doc = {
        "package": f"d3-{a.size}-{a.scheme}",
        "fixture_command": fixture_cmd,
        "made_by": "tools/d3_transformers_answers.py record",
        "versions": {"transformers": transformers.__version__, "torch": torch.__version__,
                     "tokenizers": __import__("tokenizers").__version__,
                     "compressed_tensors": compressed_tensors_version()},
        "numerics": f"Qwen3_5TextModel in {a.torch_dtype} on {a.torch_device}, eager attention; readout and "
                    "softmax in float64 after the float32 logits",
        "prompt": "tools/d3_render_oracle.py (published-d3.md), ids from Hugging Face tokenizers",
        "requests": f"tests/data/decision/render_corpus.jsonl lines {list(CORPUS_LINES)}",
        "temperature": temp,
        "seconds": round(time.time() - t0, 1),
        "answers": out,
    }
    path = a.answers or os.path.join(REPO, "tests", "data", "reference", f"d3-{a.size}-{a.scheme}-answers.json")
    with open(path, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    print(f"{path}: {len(out)} answers in {doc['seconds']} s")


def decide_probs(answer, n):
    if answer["type"] == "noul":
        return [1.0 - answer["noul"], answer["noul"]]
    return list(answer["probabilities"].values())


def compare(a, pkg):
    path = a.answers or os.path.join(REPO, "tests", "data", "reference", f"d3-{a.size}-{a.scheme}-answers.json")
    rec = json.load(open(path))
    want = {(r["line"], r["state"], r["question"]): r["probabilities"] for r in rec["answers"]}
    log = [f"# {a.vsr_bin} decide on {rec['fixture_command']}, against {os.path.relpath(path, REPO)} "
           f"(transformers {rec['versions']['transformers']}), device {a.device}, tolerance {a.tol}"]
    worst, bad, count = 0.0, 0, 0
    t0 = time.time()
    with tempfile.TemporaryDirectory() as tmp:
        for line_no, body in requests():
            rf = os.path.join(tmp, "req.json")
            open(rf, "w", encoding="utf-8").write(body)
            r = subprocess.run([a.vsr_bin, "decide", pkg, "--device", a.device, "--request", rf],
                               capture_output=True, text=True, env={**os.environ, "VSR_NO_PROGRESS": "1"})
            if r.returncode != 0:
                log.append(f"line {line_no}: decide failed: {r.stderr.strip()}")
                bad += 1
                continue
            resp = json.loads(r.stdout)
            for name, part in [(None, resp)] + list((resp.get("states") or {}).items()):
                for qid, ans in part["answers"].items():
                    if "error" in ans:
                        continue
                    w = want.get((line_no, name, qid))
                    if w is None:
                        log.append(f"line {line_no} {name}/{qid}: no recorded answer")
                        bad += 1
                        continue
                    got = decide_probs(ans, len(w))
                    if ans["type"] == "noul":  # decide reports P(true) only
                        d = abs(got[1] - w[1])
                    else:
                        d = max(abs(x - y) for x, y in zip(got, w)) if len(got) == len(w) else float("inf")
                    count += 1
                    worst = max(worst, d)
                    ok = d <= a.tol
                    bad += not ok
                    log.append(f"line {line_no} {name or '-'}/{qid} ({ans['type']}, {len(w)} options): "
                               f"max |ours - transformers| = {d:.3g} {'ok' if ok else 'FAIL'}")
    log.append(f"{count} answers compared in {time.time() - t0:.1f} s, worst difference {worst:.3g}, "
               f"{bad} failures")
    text = "\n".join(log) + "\n"
    out = a.log or os.path.join(REPO, "tests", "data", "reference", f"d3-{a.size}-{a.scheme}-compare.log")
    open(out, "w").write(text)
    sys.stdout.write(text)
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=["record", "compare"])
    ap.add_argument("--scheme", required=True, choices=["bf16", "w4a16-gptq"])
    ap.add_argument("--size", default="lite")
    ap.add_argument("--vsr-bin", default=os.path.join(REPO, "build", "vllm-srun"))
    ap.add_argument("--package", help="an already-written package (same fixture options)")
    ap.add_argument("--device", default="cpu", help="compare: the device decide runs on")
    ap.add_argument("--tol", type=float, default=TOL, help="compare: the tolerance (GPU: 0.02)")
    ap.add_argument("--log", help="compare: where to write the log (default tests/data/reference/)")
    ap.add_argument("--answers", help="the answers file to write (record) or read (compare); default "
                    "tests/data/reference/d3-SIZE-SCHEME-answers.json")
    ap.add_argument("--torch-device", default="cpu", help="record: where transformers runs (cpu, cuda)")
    ap.add_argument("--torch-dtype", default="float32", choices=["float32", "bfloat16"],
                    help="record: the model's dtype (the reference runtime's GPU numerics: bfloat16)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        pkg = a.package or os.path.join(tmp, "pkg")
        cmd = (f"vllm-srun fixture OUT --family decision3 --size {a.size} --scheme {a.scheme} --seed 1"
               if a.package else fixture(a.vsr_bin, pkg, a.size, a.scheme))
        if a.mode == "record":
            record(a, pkg, cmd)
            return 0
        return compare(a, pkg)


if __name__ == "__main__":
    sys.exit(main())
