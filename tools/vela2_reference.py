#!/usr/bin/env python3
"""Reference logits for the C Vela 2.0 decoder model (src/vela2/model.c), from transformers.

Writes a vela2 fixture package with our own writer (`vllm-srun fixture --family vela2`), loads
its backbone.* weights into transformers' Qwen3_5TextModel (a Qwen3_5TextConfig built from
config.json's backbone_config; every parameter widened to FP32 from the stored BF16, eager
attention), and builds the heads in torch FP32 from the formulas of
reference-profiles-spans.md 3.3 and reference-runtime.md 2.5 (the reference runtime's
heads/span.py SpanHead and heads/candidate.py CandidateHead, written out here with torch ops):

  span:      score[w, l] = <K w, Q l>/sqrt(d) + v . GELU(M w + N l)
             w = LayerNorm_wn(word) - mean over the block's words
             l = LayerNorm_ln(label block mean) + slot[min(i, slots - 1)], mean-centred when >= 2 labels
  candidate: logit = <key LN_c(c), query LN_q(q)>/sqrt(head_dim) + scalar . GELU(candidate_mlp LN_c(c)
             + query_mlp LN_q(q)), plus set_bias for set blocks.

A tree is a shared context followed by blocks; a block attends to the context and to itself
only, with positions continuing after the context, so each block is run here as the single
causal sequence [context ++ block] (batch of one, no padding, positions 0..L-1) and its
final-norm hidden states (last_hidden_state) are read at the block's positions.

The trees (token ids, word positions, label blocks, option ends) are written into the output
file itself, so tests/test_vela2_model.c runs exactly these.

Usage:
    tools/vela2_reference.py --vsr-bin build/vllm-srun [--size tiny] [--seed 7]
"""
import argparse
import json
import math
import os
import shlex
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

import transformers
from transformers import Qwen3_5TextConfig, Qwen3_5TextModel

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def ids_of(seed, n, vocab):
    return [(seed * 1000003 + i * 7919 + (i * i) % 104729) % vocab for i in range(n)]


def load_tensors(pkg):
    from safetensors.torch import load_file

    with open(os.path.join(pkg, "model.safetensors.index.json")) as f:
        shards = sorted(set(json.load(f)["weight_map"].values()))
    sd = {}
    for s in shards:
        sd.update(load_file(os.path.join(pkg, s)))
    broad = os.path.join(pkg, "broad_head.safetensors")
    if os.path.exists(broad):
        sd.update(load_file(broad))
    return {k: v.float() for k, v in sd.items()}


def layer_norm(x, t, prefix):
    return F.layer_norm(x, (x.shape[-1],), t[prefix + ".weight"], t[prefix + ".bias"], eps=1e-5)


def span_scores(t, prefix, words, labels):
    d = t[prefix + "K.weight"].shape[0]
    slots = t[prefix + "slot.weight"].shape[0]
    w = layer_norm(words, t, prefix + "wn")
    w = w - w.mean(0, keepdim=True)
    idx = torch.arange(labels.shape[0]).clamp(max=slots - 1)
    l = layer_norm(labels, t, prefix + "ln") + t[prefix + "slot.weight"][idx]
    if labels.shape[0] > 1:
        l = l - l.mean(0, keepdim=True)
    bil = (w @ t[prefix + "K.weight"].T) @ (l @ t[prefix + "Q.weight"].T).T / math.sqrt(d)
    mw = w @ t[prefix + "M.weight"].T + t[prefix + "M.bias"]
    nl = l @ t[prefix + "N.weight"].T
    mlp = (F.gelu(mw[:, None, :] + nl[None, :, :]) @ t[prefix + "v.weight"].T).squeeze(-1)
    return bil + mlp


def candidate_scores(t, hd, cands, query):
    c = layer_norm(cands, t, "head.candidate_norm")
    q = layer_norm(query, t, "head.query_norm")
    bil = (c @ t["head.key.weight"].T * (q @ t["head.query.weight"].T)).sum(-1) / math.sqrt(hd)
    nl = (F.gelu(c @ t["head.candidate_mlp.weight"].T + t["head.candidate_mlp.bias"] + q @ t["head.query_mlp.weight"].T)
          @ t["head.scalar.weight"].T).squeeze(-1)
    return bil + nl


def span_block(seed, n_ids, words, labels, head, vocab):
    return {"kind": "span", "head": head, "ids": ids_of(seed, n_ids, vocab), "word_pos": words,
            "label_begin": [a for a, _ in labels], "label_end": [b for _, b in labels]}


def cand_block(seed, n_ids, ends, set_bias, vocab):
    return {"kind": "candidate", "ids": ids_of(seed, n_ids, vocab), "option_end": ends, "query_pos": n_ids - 1,
            "set_bias": set_bias}


def make_trees(vocab, broad):
    """Trees as the decision layer lays them out: span blocks (words in a repeated target, label
    blocks), candidate blocks (option endpoints, the query last), contexts of several lengths."""
    b2 = "broad" if broad else "router"
    return [
        {"ctx": ids_of(11, 40, vocab), "blocks": [
            span_block(12, 60, [30, 32, 33, 36, 40, 41, 45, 50], [(2, 7), (8, 15), (16, 16)], "router", vocab),
            cand_block(13, 25, [4, 9, 15, 20], False, vocab),
            span_block(14, 30, [20, 21, 25], [(3, 9)], b2, vocab),
        ]},
        {"ctx": [], "blocks": [cand_block(21, 12, [3, 7, 10], True, vocab)]},
        {"ctx": ids_of(31, 300, vocab), "blocks": [
            span_block(32, 150, list(range(60, 140, 3)), [(5 + 6 * i, 9 + 6 * i) for i in range(9)], "router", vocab),
            span_block(33, 80, list(range(40, 78)), [(1, 4), (5, 12)], b2, vocab),
            cand_block(34, 40, [5, 12, 20, 28, 35], True, vocab),
            cand_block(35, 9, [8], False, vocab),
        ]},
        {"ctx": ids_of(41, 7, vocab), "blocks": [
            span_block(42, 20, [18], [(0, 17)], "router", vocab),
            span_block(43, 24, [10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23],
                       [(i, i) for i in range(10)], "router", vocab),
        ]},
    ]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vsr-bin", default=os.path.join(REPO, "build", "vllm-srun"))
    ap.add_argument("--size", default="tiny")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--package", help="use this already-written package (same --size/--seed) instead of writing one")
    ap.add_argument("--device", default="cpu", help="torch device for the reference (cpu, cuda)")
    ap.add_argument("--out", default=None)
    ap.add_argument("--dtype", default="float32", choices=["float32", "float64", "bfloat16"],
                    help="the reference's arithmetic (float64: the same weights, computed in double; bfloat16: "
                         "the backbone as a BF16 model runs in transformers on a GPU, the heads in FP32)")
    a = ap.parse_args()

    cmd = [a.vsr_bin, "fixture", "OUT", "--family", "vela2", "--size", a.size, "--seed", str(a.seed)]
    with tempfile.TemporaryDirectory() as tmp:
        pkg = a.package or os.path.join(tmp, "pkg")
        if not a.package:
            run = list(cmd)
            run[2] = pkg
            subprocess.run(run, check=True, stdout=subprocess.DEVNULL, env={**os.environ, "VSR_NO_PROGRESS": "1"})
        with open(os.path.join(pkg, "config.json")) as f:
            cfg = json.load(f)
        t = load_tensors(pkg)
    tcfg = Qwen3_5TextConfig.from_dict(dict(cfg["backbone_config"]))
    tcfg._attn_implementation = "eager"
    dev = torch.device(a.device)
    model = Qwen3_5TextModel(tcfg).float().eval()
    dt = {"float64": torch.float64, "bfloat16": torch.bfloat16}.get(a.dtype, torch.float32)
    ht = torch.float32 if a.dtype == "bfloat16" else dt  # the heads' arithmetic
    sd = {k[len("backbone."):]: v for k, v in t.items() if k.startswith("backbone.")}
    missing, unexpected = model.load_state_dict(sd, strict=False)
    assert not unexpected, unexpected
    assert all("rotary" in k for k in missing), missing
    model.to(device=dev, dtype=dt)
    heads = {k: v.to(ht) for k, v in t.items() if not k.startswith("backbone.")}
    broad = any(k.startswith("span_broad.") for k in heads)
    vocab = tcfg.vocab_size
    hd = int(cfg["head_dim"])
    set_bias = float(heads["set_bias"].reshape(-1)[0])

    trees = make_trees(vocab, broad)
    with torch.no_grad():
        for tree in trees:
            for blk in tree["blocks"]:
                row = tree["ctx"] + blk["ids"]
                nc = len(tree["ctx"])
                ids = torch.tensor([row], dtype=torch.long, device=dev)
                pos = torch.arange(len(row), device=dev)[None, :]
                h = model(input_ids=ids, position_ids=pos).last_hidden_state[0].to(ht).cpu()
                if blk["kind"] == "span":
                    words = h[[nc + p for p in blk["word_pos"]]]
                    labels = torch.stack([h[nc + s: nc + e + 1].mean(0)
                                          for s, e in zip(blk["label_begin"], blk["label_end"])])
                    prefix = "span_broad." if blk["head"] == "broad" else "span2."
                    out = span_scores(heads, prefix, words, labels)
                else:
                    cands = h[[nc + p for p in blk["option_end"]]]
                    out = candidate_scores(heads, hd, cands, h[nc + blk["query_pos"]])
                    if blk["set_bias"]:
                        out = out + set_bias
                assert torch.isfinite(out).all()
                blk["expected"] = [float(np.float32(x)) for x in out.reshape(-1).tolist()]

    shown = [shlex.quote(x) for x in cmd]
    shown[0] = "vllm-srun"
    spans = [x for tr in trees for b in tr["blocks"] if b["kind"] == "span" for x in b["expected"]]
    doc = {
        "package": f"vela2-{a.size}-seed{a.seed}",
        "fixture_command": " ".join(shown),
        "fixture": {"family": "vela2", "size": a.size, "seed": a.seed},
        "made_by": "tools/vela2_reference.py",
        "versions": {"transformers": transformers.__version__, "torch": torch.__version__},
        "device": a.device,
        "numerics": ("Qwen3_5TextModel in BF16 (the stored weights), eager attention, final hidden widened to FP32"
                     if a.dtype == "bfloat16" else
                     f"Qwen3_5TextModel in {'FP64' if a.dtype == 'float64' else 'FP32'} (weights widened from the stored BF16), eager attention")
                    + f"; heads in torch {'FP64' if a.dtype == 'float64' else 'FP32'} (LayerNorm eps 1e-5, exact GELU)",
        "positions": "each block runs as the causal sequence context ++ block, positions 0..L-1, no padding",
        "ids_formula": "ids[i] = (seed * 1000003 + i * 7919 + (i * i) % 104729) % vocab_size (written out below)",
        "hidden_size": int(tcfg.hidden_size),
        "set_bias": set_bias,
        "span_logits_above_zero": sum(1 for x in spans if x > 0),
        "span_logits": len(spans),
        "trees": trees,
    }
    out = a.out or os.path.join(REPO, "tests", "data", "reference", f"vela2-{a.size}-seed{a.seed}.json")
    with open(out, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")
    print(out, f"span logits > 0: {doc['span_logits_above_zero']} of {doc['span_logits']}")


if __name__ == "__main__":
    sys.exit(main())
