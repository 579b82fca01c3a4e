#!/usr/bin/env python3
"""Reference outputs for the C qwen3_5 forward, from Hugging Face transformers.

Writes a Decision 3.0 fixture package with our own writer (`vllm-srun fixture`), loads
its weights into transformers' Qwen3_5TextModel (a Qwen3_5TextConfig built from the
package's text_config; every parameter widened to FP32 from the stored BF16), runs a
set of prompts and records, per prompt row, the final-norm hidden state at the last
position and the Decision 3.0 readout (logits and softmax over the first n options at
the package temperature). tests/test_model.c regenerates the same package with
vsr_fixture_write and checks the C forward against this file.

int4 packages are dequantized with the compressed-tensors library (unpack_from_int32 +
dequantize, as PackedQuantizationCompressor.decompress does). compressed-tensors 0.20
no longer applies weight_g_idx in decompress, so for act-order packages the per-column
scales/zero points are gathered by g_idx (W[n,k] = (q[n,k] - zp[n,g_idx[k]]) *
s[n,g_idx[k]]) and handed to the same library dequantize with group_size 1: the
arithmetic (one rounding of the product to BF16) is still the library's.

attention_mode noncausal_full_attention: transformers has no switch for it, so it is
done the way the reference runtime does it, through Qwen3_5TextModel's documented
mask-mapping input: attention_mask={"full_attention": a 4D additive mask letting every
query see every non-padded key of its row (no causal triangle), "linear_attention":
the 2D padding mask (None when nothing is padded, as create_recurrent_attention_mask
returns)}. Gated DeltaNet layers stay causal (their recurrence is causal by
construction; the mask only zeroes padded inputs). Causal mode passes the plain 2D mask
and lets transformers build its causal mask. Positions are always 0..L-1 over the
padded length (reference-runtime.md 2.4: "plain positions even when left-padded").

Prompt token ids come from a formula the C test reproduces:
    ids[i] = (seed * 1000003 + i * 7919 + (i * i) % 104729) % vocab_size

Usage:
    tools/make_transformers_reference.py --vsr-bin build/vllm-srun --scheme bf16 \
        --attention-mode causal [--actorder] [--seed 20240611] [--size tiny]
"""
import argparse
import base64
import json
import os
import shlex
import subprocess
import sys
import tempfile

import numpy as np
import torch

import transformers
from transformers import Qwen3_5TextConfig, Qwen3_5TextModel

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
N_OPTIONS = (2, 3, 10, 255)

# Each case is one forward: a list of rows, each (seed, length). Multi-row cases are
# left-padded batches of different lengths.
CASES = [
    [(1, 1)],
    [(2, 5)],
    [(3, 37)],
    [(4, 3), (5, 17), (6, 9)],
    [(7, 1), (8, 64)],
    [(9, 2100)],
]


def prompt_ids(seed, n, vocab):
    return [(seed * 1000003 + i * 7919 + (i * i) % 104729) % vocab for i in range(n)]


def load_safetensors(pkg):
    from safetensors.torch import load_file

    idx = os.path.join(pkg, "model.safetensors.index.json")
    if os.path.exists(os.path.join(pkg, "model.safetensors")):
        return load_file(os.path.join(pkg, "model.safetensors"))
    with open(idx) as f:
        shards = sorted(set(json.load(f)["weight_map"].values()))
    sd = {}
    for s in shards:
        sd.update(load_file(os.path.join(pkg, s)))
    return sd


def dequant_int4(mod, t, qcfg):
    """compressed-tensors pack-quantized -> BF16 weight, with the library."""
    from compressed_tensors.compressors.pack_quantized.helpers import unpack_from_int32
    from compressed_tensors.quantization import QuantizationArgs
    from compressed_tensors.quantization.lifecycle.forward import dequantize

    (group,) = qcfg["config_groups"].values()
    # compressed-tensors 0.20 refuses actorder "group" in QuantizationArgs (it no longer applies
    # g_idx itself); the g_idx gather below does that part, the rest is the library's.
    wdict = {**group["weights"], "actorder": None}
    wargs = QuantizationArgs(**wdict)
    packed, scale = t[mod + ".weight_packed"], t[mod + ".weight_scale"]
    shape = torch.Size(t[mod + ".weight_shape"].tolist())
    zp = t.get(mod + ".weight_zero_point")
    q = unpack_from_int32(packed, 4, shape)
    if zp is not None:
        zp = unpack_from_int32(zp, 4, torch.Size((shape[0], scale.shape[-1])), packed_dim=0)
    g_idx = t.get(mod + ".weight_g_idx")
    if g_idx is not None and not bool((g_idx == -1).any()):
        g = g_idx.long()
        scale = scale[:, g].contiguous()
        zp = zp[:, g].contiguous() if zp is not None else None
        wargs = QuantizationArgs(**{**wdict, "group_size": 1})
    return dequantize(x_q=q, scale=scale, zero_point=zp, args=wargs)


def text_state_dict(pkg, cfg):
    raw = load_safetensors(pkg)
    prefix = next(p for p in ("model.language_model.", "language_model.") if any(k.startswith(p) for k in raw))
    t = {k[len(prefix):]: v for k, v in raw.items() if k.startswith(prefix)}
    qcfg = cfg.get("quantization_config")
    out = {}
    for k, v in t.items():
        if k.endswith(".weight_packed"):
            mod = k[: -len(".weight_packed")]
            out[mod + ".weight"] = dequant_int4(mod, t, qcfg).to(torch.bfloat16)
        elif k.rsplit(".", 1)[-1] in ("weight_scale", "weight_zero_point", "weight_shape", "weight_g_idx"):
            continue
        else:
            out[k] = v
    return {k: v.float() for k, v in out.items()}


def noncausal_mask(mask2d):
    """4D additive mask: every query sees every non-padded key of its row."""
    B, L = mask2d.shape
    allowed = mask2d[:, None, None, :].bool().expand(B, 1, L, L)
    m = torch.zeros(B, 1, L, L, dtype=torch.float32)
    return m.masked_fill(~allowed, torch.finfo(torch.float32).min)


def run_case(model, rows, pad_id, noncausal, dev="cpu"):
    """Rows left-padded with pad_id, positions 0..L-1 over the padded length; tensors on `dev`."""
    L = max(len(r) for r in rows)
    ids = torch.full((len(rows), L), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), L), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, L - len(r):] = torch.tensor(r)
        mask[i, L - len(r):] = 1
    pos = torch.arange(L).unsqueeze(0).expand(len(rows), L)
    if noncausal:
        am = {"full_attention": noncausal_mask(mask).to(dev),
              "linear_attention": None if bool(mask.all()) else mask.to(dev)}
    else:
        am = mask.to(dev)
    with torch.no_grad():
        out = model(input_ids=ids.to(dev), attention_mask=am, position_ids=pos.to(dev))
    return out.last_hidden_state[:, -1, :]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vsr-bin", default=os.path.join(REPO, "build", "vllm-srun"))
    ap.add_argument("--size", default="tiny")
    ap.add_argument("--scheme", required=True, choices=["bf16", "w4a16-gptq", "w4a16-awq"])
    ap.add_argument("--attention-mode", required=True, choices=["causal", "noncausal_full_attention"])
    ap.add_argument("--actorder", action="store_true")
    ap.add_argument("--seed", type=int, default=20240611)
    ap.add_argument("--cases", choices=["all", "short"], default="all",
                    help="short: leave out the 2,100-token case (for the larger sizes)")
    ap.add_argument("--package", help="use this already-written package (made with the same options through "
                    "vsr_fixture_write) instead of running the fixture command")
    ap.add_argument("--out-dir", default=os.path.join(REPO, "tests", "data", "reference"))
    a = ap.parse_args()

    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        pkg = os.path.join(tmp, "pkg")
        cmd = [a.vsr_bin, "fixture", pkg, "--family", "decision3", "--size", a.size, "--scheme", a.scheme,
               "--seed", str(a.seed), "--attention-mode", a.attention_mode] + (["--actorder"] if a.actorder else [])
        if a.package:
            pkg = a.package
        else:
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env={**os.environ, "VSR_NO_PROGRESS": "1"})
        with open(os.path.join(pkg, "config.json")) as f:
            cfg = json.load(f)
        with open(os.path.join(pkg, "decision_config.json")) as f:
            dcfg = json.load(f)
        tc = dict(cfg["text_config"])
        tcfg = Qwen3_5TextConfig.from_dict(tc)
        tcfg._attn_implementation = "eager"
        model = Qwen3_5TextModel(tcfg).float().eval()
        sd = text_state_dict(pkg, cfg)
        missing, unexpected = model.load_state_dict(sd, strict=False)
        assert not unexpected, unexpected
        assert all("rotary" in k for k in missing), missing  # inv_freq buffers are not stored

        from safetensors.torch import load_file

        R = load_file(os.path.join(pkg, "readout.safetensors"))["weight"]
    temp = float(dcfg.get("temperature", 1.0))
    noncausal = a.attention_mode == "noncausal_full_attention"
    assert dcfg["attention_mode"] == a.attention_mode
    vocab = tcfg.vocab_size
    pad_id = tcfg.pad_token_id if tcfg.pad_token_id is not None else 0

    cases = []
    for case in CASES if a.cases == "all" else [c for c in CASES if max(n for _, n in c) < 1000]:
        rows = [prompt_ids(s, n, vocab) for s, n in case]
        h = run_case(model, rows, pad_id, noncausal)
        assert torch.isfinite(h).all()
        if R.dtype == torch.bfloat16:  # computed in bf16, then widened
            logits = (h.to(torch.bfloat16) @ R.T).float()
        else:
            logits = h @ R.float().T
        out_rows = []
        for i, (s, n) in enumerate(case):
            lg = logits[i].double()
            probs = {str(k): [round(float(p), 7) for p in torch.softmax(lg[:k] / temp, 0)] for k in N_OPTIONS if k != 255}
            p255 = torch.softmax(lg / temp, 0)
            out_rows.append({
                "seed": s,
                "len": n,
                "hidden_f32_b64": base64.b64encode(h[i].numpy().astype("<f4").tobytes()).decode(),
                "logits_f32_b64": base64.b64encode(logits[i].numpy().astype("<f4").tobytes()).decode(),
                "probs": probs,
                "probs255_top": [[int(j), round(float(p255[j]), 7)] for j in torch.argsort(p255, descending=True)[:5]],
            })
        cases.append({"rows": out_rows})

    shown = [shlex.quote(x) for x in cmd]
    shown[0], shown[2] = "vllm-srun", "OUT"
    name = f"d3-{a.size}-{a.scheme}{'-actorder' if a.actorder else ''}-{'noncausal' if noncausal else 'causal'}"
    doc = {
        "package": name,
        "fixture_command": " ".join(shown),
        "fixture": {"family": "decision3", "size": a.size, "scheme": a.scheme, "seed": a.seed,
                    "attention_mode": a.attention_mode, "actorder": a.actorder},
        "made_by": "tools/make_transformers_reference.py",
        "versions": {"transformers": transformers.__version__, "torch": torch.__version__,
                     "compressed_tensors": __import__("compressed_tensors").__version__},
        "numerics": "Qwen3_5TextModel in FP32 (weights widened from the stored BF16 / dequantized int4), eager attention",
        "attention_mode": a.attention_mode,
        "temperature": temp,
        "readout_dtype": str(R.dtype).replace("torch.", ""),
        "hidden_size": int(tcfg.hidden_size),
        "vocab_size": int(vocab),
        "pad_token_id": int(pad_id),
        "ids_formula": "ids[i] = (seed * 1000003 + i * 7919 + (i * i) % 104729) % vocab_size",
        "positions": "0..L-1 over the padded length (rows left-padded with pad_token_id)",
        "cases": cases,
    }
    os.makedirs(a.out_dir, exist_ok=True)
    path = os.path.join(a.out_dir, name + ".json")
    with open(path, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")
    print(path)


if __name__ == "__main__":
    sys.exit(main())
