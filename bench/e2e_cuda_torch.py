#!/usr/bin/env python3
"""The transformers peer of tools/gpu/bench_cuda.c's whole-forward timing, on the GPU.

    python3 bench/e2e_cuda_torch.py PKG [--runs 7] [--shapes 3x128,8x512]

Loads a BF16 decision3 package (HF layout; e.g. `vllm-srun fixture DIR --size 27b-shape`) into
transformers' Qwen3_5TextModel in bfloat16 on cuda:0 straight from the safetensors shards (no
FP32 copy: 51 GB at 27B shape), with the default attention implementation (sdpa), and times
forward passes on the same token ids bench_cuda uses ((r * 7919 + i * 104729) % 150000, rows of
equal length, positions 0..L-1), in the package's attention mode (the 4D all-keys mask for
noncausal_full_attention). Timing: one warm-up, then N forwards, each closed by
sync(); best and median printed. The readout (255 x hidden) is included as
bench_cuda includes it. Whether flash-linear-attention's kernels were found (transformers uses
them for the DeltaNet layers when importable, else its PyTorch loops) is printed.
"""
import argparse
import glob
import json
import os
import statistics
import sys
import time

import torch

DEV = os.environ.get("VSR_TORCH_DEVICE", "cuda")  # "cpu" only for a smoke test of this script


def sync():
    if DEV == "cuda":
        torch.cuda.synchronize()


def load(pkg):
    from safetensors.torch import load_file
    from transformers import Qwen3_5TextConfig, Qwen3_5TextModel

    with open(os.path.join(pkg, "config.json")) as f:
        cfg = json.load(f)
    with open(os.path.join(pkg, "decision_config.json")) as f:
        dcfg = json.load(f)
    if cfg.get("quantization_config"):
        sys.exit("e2e_cuda_torch: give a BF16 package (this one is quantized)")
    tcfg = Qwen3_5TextConfig.from_dict(dict(cfg["text_config"]))
    with torch.device("meta"):
        model = Qwen3_5TextModel(tcfg)
    sd = {}
    for f in sorted(glob.glob(os.path.join(pkg, "model*.safetensors"))):
        for k, v in load_file(f, device=DEV).items():
            for p in ("model.language_model.", "language_model."):
                if k.startswith(p):
                    sd[k[len(p):]] = v
    missing, unexpected = model.load_state_dict(sd, strict=False, assign=True)
    assert not unexpected, unexpected
    assert all("rotary" in k for k in missing), missing
    model = model.to(torch.bfloat16)
    # the rotary buffers were on meta: rebuild them on the GPU
    with torch.device(DEV):
        model.rotary_emb = type(model.rotary_emb)(config=tcfg)
    model.eval()
    R = load_file(os.path.join(pkg, "readout.safetensors"), device=DEV)["weight"]
    noncausal = dcfg.get("attention_mode") == "noncausal_full_attention"
    return model, R, noncausal, sum(v.numel() * v.element_size() for v in sd.values())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("pkg")
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--shapes", default="3x128,8x512")
    a = ap.parse_args()
    try:
        import fla  # noqa: F401
        fla_state = "flash-linear-attention %s importable" % getattr(fla, "__version__", "?")
    except Exception as e:  # noqa: BLE001
        fla_state = "flash-linear-attention not importable (%s): PyTorch fallbacks" % type(e).__name__
    t0 = time.time()
    model, R, noncausal, nbytes = load(a.pkg)
    print("transformers %s, torch %s, %s; load %.1f s, %.3f GB of weights, attention %s, %s" % (
        __import__("transformers").__version__, torch.__version__, torch.cuda.get_device_name(0) if DEV == "cuda" else DEV, time.time() - t0,
        nbytes / 1e9, model.config._attn_implementation, "noncausal" if noncausal else "causal"))
    print(fla_state)
    for shape in a.shapes.split(","):
        B, L = (int(x) for x in shape.split("x"))
        ids = torch.tensor([[(r * 7919 + i * 104729) % 150000 for i in range(L)] for r in range(B)], device=DEV)
        pos = torch.arange(L, device=DEV).unsqueeze(0).expand(B, L)
        if noncausal:
            am = {"full_attention": torch.zeros(B, 1, L, L, device=DEV, dtype=torch.bfloat16),
                  "linear_attention": None}
        else:
            am = None
        times = []
        with torch.no_grad():
            for k in range(a.runs + 1):
                sync()
                t = time.perf_counter()
                h = model(input_ids=ids, attention_mask=am, position_ids=pos).last_hidden_state[:, -1, :]
                logits = (h.to(R.dtype) @ R.T).float()
                sync()
                if k:
                    times.append(time.perf_counter() - t)
        assert torch.isfinite(logits).all()
        times.sort()
        print("transformers forward %d x %d: best of %d %.2f ms, median %.2f ms" % (
            B, L, a.runs, times[0] * 1e3, statistics.median(times) * 1e3), flush=True)


if __name__ == "__main__":
    main()
