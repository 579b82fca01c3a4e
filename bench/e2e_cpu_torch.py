#!/usr/bin/env python3
"""The PyTorch side of bench/e2e_cpu.c: the same package, the same token ids, timed the same way.

    python3 bench/e2e_cpu_torch.py PKG OURS.json [--warmup W] [--runs N] [--threads 2] [--out OUT.json]

OURS.json is what `build/bench/e2e_cpu PKG --json OURS.json` wrote: per request, each row's
token ids (rendered and tokenized by our decision layer) and our answer probabilities.
The package is loaded into transformers' Qwen3_5TextModel exactly as
tools/make_transformers_reference.py does (every parameter widened to FP32 from the stored
BF16; int4 dequantized to BF16 by compressed-tensors, then FP32), with transformers' default
attention implementation (sdpa). Each request runs as our decision layer runs it: forwards of
up to 8 rows in request order, left-padded with the pad id, the mask passed, positions
0..L-1 over the padded length, noncausal_full_attention through the 4D full-attention mask;
then the readout and softmax over each question's options at the package temperature.
Timing: W warm-up runs, then N timed runs of the whole request (forwards + readout +
softmax), median reported. The probabilities must agree with ours within 1e-3 (else exit 1),
so both sides did the same work.
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "tools"))
from make_transformers_reference import noncausal_mask, text_state_dict  # noqa: E402

ROWS_PER_FORWARD = 8
TOL = 1e-3


def load(pkg):
    from safetensors.torch import load_file
    from transformers import Qwen3_5TextConfig, Qwen3_5TextModel

    with open(os.path.join(pkg, "config.json")) as f:
        cfg = json.load(f)
    with open(os.path.join(pkg, "decision_config.json")) as f:
        dcfg = json.load(f)
    tcfg = Qwen3_5TextConfig.from_dict(dict(cfg["text_config"]))
    model = Qwen3_5TextModel(tcfg).float().eval()
    sd = text_state_dict(pkg, cfg)
    missing, unexpected = model.load_state_dict(sd, strict=False)
    assert not unexpected, unexpected
    assert all("rotary" in k for k in missing), missing
    R = load_file(os.path.join(pkg, "readout.safetensors"))["weight"]
    pad = tcfg.pad_token_id if tcfg.pad_token_id is not None else 0
    return model, R, dcfg, pad, str(getattr(tcfg, "_attn_implementation", None))


def run_request(model, R, rows, temp, pad, noncausal):
    """Returns each row's probabilities over its options (list of lists)."""
    out = []
    for b0 in range(0, len(rows), ROWS_PER_FORWARD):
        batch = rows[b0:b0 + ROWS_PER_FORWARD]
        L = max(len(r["ids"]) for r in batch)
        ids = torch.full((len(batch), L), pad, dtype=torch.long)
        mask = torch.zeros((len(batch), L), dtype=torch.long)
        for i, r in enumerate(batch):
            n = len(r["ids"])
            ids[i, L - n:] = torch.tensor(r["ids"])
            mask[i, L - n:] = 1
        pos = torch.arange(L).unsqueeze(0).expand(len(batch), L)
        if noncausal:
            am = {"full_attention": noncausal_mask(mask), "linear_attention": None if bool(mask.all()) else mask}
        else:
            am = mask
        with torch.no_grad():
            h = model(input_ids=ids, attention_mask=am, position_ids=pos).last_hidden_state[:, -1, :]
            logits = (h.to(torch.bfloat16) @ R.T).float() if R.dtype == torch.bfloat16 else h @ R.float().T
        for i, r in enumerate(batch):
            out.append(torch.softmax(logits[i, : r["n_opt"]].double() / temp, 0).tolist())
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("pkg")
    ap.add_argument("ours")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    with open(a.ours) as f:
        ours = json.load(f)
    t0 = time.perf_counter()
    model, R, dcfg, pad, attn = load(a.pkg)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, attention {attn}; "
          f"loaded {a.pkg} in {time.perf_counter() - t0:.1f} s", flush=True)
    temp = float(dcfg.get("temperature", 1.0))
    noncausal = dcfg.get("attention_mode") == "noncausal_full_attention"
    result, ok = [], True
    for req in ours["requests"]:
        times, probs = [], None
        for r in range(a.warmup + a.runs):
            t = time.perf_counter()
            probs = run_request(model, R, req["rows"], temp, pad, noncausal)
            if r >= a.warmup:
                times.append((time.perf_counter() - t) * 1e3)
        diff = max(abs(p - q) for row, pr in zip(req["rows"], probs) for p, q in zip(row["probs"], pr))
        agree = diff <= TOL
        ok &= agree
        print(f"{req['name']:<8} rows {len(req['rows'])}  ms: min {min(times):.1f}  median {statistics.median(times):.1f}"
              f"  max {max(times):.1f}   max |p_ours - p_torch| = {diff:.2e} ({'agree' if agree else 'DISAGREE'})",
              flush=True)
        result.append({"name": req["name"], "times_ms": times, "min_ms": min(times),
                       "median_ms": statistics.median(times), "max_ms": max(times), "max_prob_diff": diff})
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"package": a.pkg, "torch": torch.__version__, "threads": torch.get_num_threads(),
                       "attention": attn, "requests": result}, f)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
