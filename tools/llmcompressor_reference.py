#!/usr/bin/env python3
"""llm-compressor on a BF16 decision3 fixture: the oracle that tests/test_calibrate.c holds OUR
quantizers to. Needs llmcompressor (0.14), compressed-tensors, transformers, torch, safetensors,
tokenizers, datasets (a CPU-only venv outside the repo is enough; docs/quantize.md says how).

    python tools/llmcompressor_reference.py --vsr-bin build/vllm-srun --size tiny --group 32
    python tools/llmcompressor_reference.py --vsr-bin build/vllm-srun --size small --group 128

Writes tests/data/reference/llmcompressor_{gptq,awq,rtn}_<size>.json.

What it does, step by step (nothing here is tuned to make our numbers look good):
  1. `vllm-srun fixture` writes the BF16 package (decision3, --size, --seed, attention mode
     causal, so that transformers' Qwen3_5TextModel computes what our runtime computes).
  2. The package's text weights go into transformers' Qwen3_5TextModel. The first --samples
     lines of the calibration file ({"text": ...} JSONL) are tokenized with the package's
     tokenizer.json, no special tokens, no template, one sample per batch (exactly what
     `vllm-srun quantize --calibration` runs through our forward: vsr_calib_collect).
  3. llm-compressor's `oneshot` on the BF16 model (as a user quantizes it). GPTQ runs with
     pipeline "basic": Hessians of the whole unquantized model in one pass, which is how our
     calibration gathers them (include/vsr/calibrate.h; the "sequential" pipeline would feed
     each layer the outputs of already-GPTQ-quantized predecessors instead). AWQ runs with
     pipeline "sequential" (what llm-compressor picks for it by default): AWQ changes no
     function before quantization, so each layer still sees the unquantized model's inputs, the
     same statistics as one pass. "basic" cannot be used for AWQ in llm-compressor 0.14.0.1: it
     calls the AWQ smoothing after leaving DisableQuantization, so AWQ's replays of the parent
     modules run their Linears fake-quantized with weight scales not yet computed
     (uninitialized memory: NaN or ~1e38), and it skips or mis-scores mappings (seen here:
     "Skipping smooth_layer layers.3.input_layernorm, NaN or inf outputs"). Recipes, with the
     published recipe's ignore list (the Gated DeltaNet in_proj_qkv|z|a|b stay BF16):
       gptq: GPTQModifier(config_groups = 4-bit int, symmetric, group --group, min-max observer
             = preset W4A16 with the group size), actorder = its default ("static"),
             dampening_frac 0.01, block_size 128;
       awq:  AWQModifier(mappings = llm-compressor's own Qwen3.5 mappings,
             build_hybrid_attention_mappings: full-attention input_layernorm -> q,k,v;
             post_attention_layernorm -> gate,up; up -> down; linear-attention input_layernorm
             -> in_proj_* is skipped by llm-compressor because none of them is quantized;
             duo_scaling True, n_grid 20 = its defaults) + QuantizationModifier(4-bit int,
             asymmetric, group --group = preset W4A16_ASYM with the group size);
       rtn:  QuantizationModifier alone, for W4A16 and W4A16_ASYM with the same groups (the
             baseline both algorithms start from) and for the presets FP8_DYNAMIC and NVFP4A16.
     Each result is saved compressed (save_pretrained(save_compressed=True)) and read back from
     its safetensors file: the numbers below are of what llm-compressor writes, not of its
     in-memory model. The offset norms of Qwen3.5 ((1 + w)) are handled by llm-compressor
     itself (norm_calibration_context).
     AWQ's chosen per-channel scales s are recorded by wrapping
     AWQModifier._compute_best_scale (the value it returns is the s it applies).
  4. The per-layer output error, for every quantized Linear:
         error = sqrt( (1/T) sum_t || W x_t - diag(r) Wq diag(1/c) x_t ||^2 )
     over the T calibration tokens, in FP64, where W is the BF16 weight of the ORIGINAL package,
     x_t the Linear's input in the ORIGINAL model run in FP32 by transformers on the same tokens,
     Wq the dequantized stored weight (compressed-tensors-format.md 2.2: (q - z) * s rounded to
     BF16), and c, r the AWQ scales applied to its input columns (when it is a balance layer: x
     reaches it divided by c) and to its output rows (when it is a smooth layer, up_proj: its
     output is divided by r and down_proj's columns are multiplied by r). c = r = 1 otherwise
     (GPTQ, RTN, Linears AWQ does not touch). This is the error each Linear adds in the units of
     the original model, with AWQ's folds taken as exact ("ideal fold"): it measures the
     quantization algorithm, not the BF16 rounding of the folded norm/up_proj weights (which both
     implementations do alike). Equivalently sqrt(tr(E H E^T) / T) with H = sum_t x_t x_t^T and
     E = W - diag(r) Wq diag(1/c): what tests/test_calibrate.c computes from OUR calibration H.
  5. rtn: the sha256 of every tensor llm-compressor stores for FP8_DYNAMIC and NVFP4A16 (names
     with our package's "model.language_model." prefix), and, with --vsr-bin, whether
     `vllm-srun quantize --scheme fp8-dynamic|nvfp4` stores the same bytes under the same names
     (tests/test_calibrate.c re-checks the sha256 against our library without Python).
Without a GPU (CPU torch), IntermediatesCache.pin_memory is made a no-op: pinning host memory
needs a CUDA driver and only speeds host-to-GPU copies; no value changes.
"""
import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile

import torch

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
IGNORE = ["re:.*in_proj_qkv$", "re:.*in_proj_z$", "re:.*in_proj_a$", "re:.*in_proj_b$"]
PREFIX = "model.language_model."
AWQ_PIPELINE = "sequential"


def text_state_dict(pkg):
    from safetensors.torch import load_file
    idx = os.path.join(pkg, "model.safetensors.index.json")
    files = sorted(set(json.load(open(idx))["weight_map"].values())) if os.path.exists(idx) else ["model.safetensors"]
    sd = {}
    for f in files:
        for k, v in load_file(os.path.join(pkg, f)).items():
            if k.startswith(PREFIX):
                sd[k[len(PREFIX):]] = v
    return sd


def make_model(pkg, dtype):
    from transformers import Qwen3_5TextConfig, Qwen3_5TextModel
    cfg = json.load(open(os.path.join(pkg, "config.json")))
    tcfg = Qwen3_5TextConfig.from_dict(dict(cfg["text_config"]))
    tcfg._attn_implementation = "eager"
    torch.manual_seed(0)
    model = Qwen3_5TextModel(tcfg).to(dtype).eval()
    # oneshot re-reads the config from name_or_path: a folder with the text config alone
    cdir = os.path.join(pkg, "text-config")
    os.makedirs(cdir, exist_ok=True)
    tcfg.save_pretrained(cdir)
    model.config._name_or_path = cdir
    missing, unexpected = model.load_state_dict(text_state_dict(pkg), strict=False)
    assert not unexpected, unexpected
    assert all("rotary" in k for k in missing), missing
    return model


def capture_inputs(model, samples, names):
    """{module name: FP64 [tokens, K]} of each named Linear's input over all samples."""
    got = {n: [] for n in names}
    hooks = []
    mods = dict(model.named_modules())
    for n in names:
        hooks.append(mods[n].register_forward_hook(
            lambda m, a, o, n=n: got[n].append(a[0].detach().reshape(-1, a[0].shape[-1]).double())))
    with torch.no_grad():
        for ids in samples:
            model(input_ids=torch.tensor([ids]))
    for h in hooks:
        h.remove()
    return {n: torch.cat(v) for n, v in got.items()}


def unpack_int4(packed, rows, cols):
    p = packed.to(torch.int64) & 0xFFFFFFFF
    q = torch.stack([(p >> (4 * i)) & 15 for i in range(8)], dim=-1).reshape(rows, -1)[:, :cols]
    return q - 8


def dequant_int4(T, name):
    """Dequantized weight [N, K] (FP64 of the BF16 values) of a pack-quantized module."""
    N, K = [int(v) for v in T[name + ".weight_shape"]]
    q = unpack_int4(T[name + ".weight_packed"], N, K).double()
    s = T[name + ".weight_scale"].double()
    G = s.shape[1]
    grp = torch.arange(K) // (K // G)
    assert name + ".weight_g_idx" not in T, "act-order groups are not part of this comparison"
    z = torch.zeros(N, G, dtype=torch.float64)
    if name + ".weight_zero_point" in T:
        # zero points: [ceil(N/8), G] int32, 8 rows per word (packed along the output dimension)
        zp = T[name + ".weight_zero_point"]
        z = unpack_int4(zp.t().contiguous(), G, N).t().double()
    return ((q - z[:, grp]) * s[:, grp]).to(torch.bfloat16).double()


def out_error(W, X, Wq, c=None, r=None):
    Weff = Wq
    if c is not None:
        Weff = Weff / c.view(1, -1)
    if r is not None:
        Weff = Weff * r.view(-1, 1)
    D = X @ (W - Weff).t()
    return float(torch.sqrt((D * D).sum() / X.shape[0]))


def load_saved(out):
    from safetensors.torch import load_file
    T = {}
    for f in sorted(os.listdir(out)):
        if f.endswith(".safetensors"):
            T.update(load_file(os.path.join(out, f)))
    return T


def int4_args(group, symmetric):
    from compressed_tensors.quantization import QuantizationArgs, QuantizationScheme
    return {"group_0": QuantizationScheme(targets=["Linear"], weights=QuantizationArgs(
        num_bits=4, type="int", strategy="group", group_size=group, symmetric=symmetric, dynamic=False))}


def tensor_sha(t):
    b = t.contiguous().view(torch.uint8).numpy().tobytes() if t.dtype != torch.uint8 else t.contiguous().numpy().tobytes()
    return hashlib.sha256(b).hexdigest()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vsr-bin", default=os.path.join(REPO, "build", "vllm-srun"))
    ap.add_argument("--size", default="tiny")
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--calibration", default=os.path.join(REPO, "tests", "data", "calibration", "router_prompts.jsonl"))
    ap.add_argument("--samples", type=int, default=64)
    ap.add_argument("--group", type=int, default=32)
    ap.add_argument("--out-dir", default=os.path.join(REPO, "tests", "data", "reference"))
    ap.add_argument("--only", choices=["gptq", "awq", "rtn"], action="append")
    a = ap.parse_args()
    todo = a.only or ["rtn", "gptq", "awq"]

    import compressed_tensors
    import llmcompressor
    import transformers
    from datasets import Dataset
    from llmcompressor import oneshot
    from llmcompressor.modifiers.gptq import GPTQModifier
    from llmcompressor.modifiers.quantization import QuantizationModifier
    from llmcompressor.modifiers.transform.awq import AWQModifier
    from llmcompressor.modifiers.transform.awq import base as awq_base
    from llmcompressor.modifiers.transform.awq.dynamic_mappings import build_hybrid_attention_mappings
    from llmcompressor.pipelines.cache import IntermediatesCache
    from tokenizers import Tokenizer

    if not torch.cuda.is_available():
        # AWQ pins its cached parent inputs in page-locked memory (for faster copies to a GPU);
        # without a CUDA driver pin_memory() raises. Pinning changes no value: skip it.
        IntermediatesCache.pin_memory = lambda self, batch_index, input_names=None: None

    raw = open(a.calibration, "rb").read()
    texts = [json.loads(l)["text"] for l in raw.decode().splitlines() if l.strip()][: a.samples]
    with tempfile.TemporaryDirectory() as tmp:
        pkg = os.path.join(tmp, "pkg")
        subprocess.run([a.vsr_bin, "fixture", pkg, "--family", "decision3", "--size", a.size, "--scheme", "bf16",
                        "--seed", str(a.seed), "--attention-mode", "causal"], check=True, stdout=subprocess.DEVNULL)
        model_sha = json.load(open(os.path.join(pkg, "MODEL_MANIFEST.json")))["identity"]["model_sha256"]
        tok = Tokenizer.from_file(os.path.join(pkg, "tokenizer.json"))
        processor = transformers.AutoTokenizer.from_pretrained(pkg)  # oneshot wants one; the data is tokenized
        samples = [tok.encode(t, add_special_tokens=False).ids for t in texts]
        n_tokens = sum(len(s) for s in samples)
        ids_sha = hashlib.sha256(json.dumps(samples).encode()).hexdigest()

        ref32 = make_model(pkg, torch.float32)
        mods32 = dict(ref32.named_modules())
        linears = [n for n, m in mods32.items() if isinstance(m, torch.nn.Linear)
                   and not any(n.endswith(x) for x in ("in_proj_qkv", "in_proj_z", "in_proj_a", "in_proj_b"))]
        X = capture_inputs(ref32, samples, linears)
        W0 = {n: mods32[n].weight.detach().double() for n in linears}
        for n in linears:
            assert X[n].shape[0] == n_tokens, (n, X[n].shape, n_tokens)

        common = {
            "fixture": {"family": "decision3", "size": a.size, "seed": a.seed, "scheme": "bf16",
                        "attention_mode": "causal", "model_sha256": model_sha},
            "calibration": {"file": os.path.relpath(a.calibration, REPO), "sha256": hashlib.sha256(raw).hexdigest(),
                            "samples": len(samples), "tokens": n_tokens, "token_ids_sha256": ids_sha,
                            "format": "text, tokenizer.json, no special tokens, no template, one sample per batch"},
            "versions": {"llmcompressor": llmcompressor.__version__, "compressed_tensors": compressed_tensors.__version__,
                         "transformers": transformers.__version__, "torch": torch.__version__},
            "metric": "sqrt((1/T) sum_t ||W x_t - diag(r) Wq diag(1/c) x_t||^2), FP64; W the original BF16 weight, "
                      "x_t its input in the original model run in FP32 by transformers, Wq the stored weight "
                      "dequantized, c/r AWQ's input/output channel scales of this Linear (1 otherwise)",
            "script": "tools/llmcompressor_reference.py",
        }
        ds = Dataset.from_dict({"input_ids": samples, "attention_mask": [[1] * len(s) for s in samples]})

        def run(recipe, data, name, pipeline="basic"):
            model = make_model(pkg, torch.bfloat16)
            if callable(recipe):
                recipe = recipe(model)
            kw = dict(dataset=ds, num_calibration_samples=len(samples), shuffle_calibration_samples=False,
                      max_seq_length=4096, pipeline=pipeline) if data else {}
            oneshot(model=model, processor=processor, recipe=recipe, **kw)
            out = os.path.join(tmp, "q-" + name)
            model.save_pretrained(out, save_compressed=True)
            cfgq = json.load(open(os.path.join(out, "config.json"))).get("quantization_config")
            return load_saved(out), cfgq, recipe

        def int4_errors(T, scales_in=None, scales_out=None):
            res = {}
            for n in linears:
                if n + ".weight_packed" not in T:
                    continue
                c = scales_in.get(n) if scales_in else None
                r = scales_out.get(n) if scales_out else None
                res[n] = out_error(W0[n], X[n], dequant_int4(T, n), c, r)
            return res

        rtn_err = {}
        for sym in (True, False):
            if ("gptq" in todo and sym) or ("awq" in todo and not sym):
                T, _, _ = run(QuantizationModifier(config_groups=int4_args(a.group, sym), ignore=IGNORE), False,
                              "rtn-int4-" + ("sym" if sym else "asym"))
                rtn_err[sym] = int4_errors(T)

        if "rtn" in todo:
            res = dict(common, algorithm="rtn", schemes={})
            res.pop("metric")
            for preset, ours in (("FP8_DYNAMIC", "fp8-dynamic"), ("NVFP4A16", "nvfp4")):
                T, cfgq, recipe = run(QuantizationModifier(targets="Linear", scheme=preset, ignore=IGNORE), False, preset)
                tensors = {}
                for k in sorted(T):
                    mod = k.rsplit(".", 1)[0]
                    if mod in linears or mod.endswith(("in_proj_qkv", "in_proj_z", "in_proj_a", "in_proj_b")):
                        if k.endswith(".weight") and T[k].dtype == torch.bfloat16:
                            continue  # BF16 (ignored) Linears
                        tensors[PREFIX + k] = {"dtype": str(T[k].dtype).replace("torch.", ""),
                                               "shape": list(T[k].shape), "sha256": tensor_sha(T[k])}
                entry = {"recipe": repr(recipe), "quantization_config": cfgq, "tensors": tensors}
                if a.vsr_bin:
                    from safetensors.torch import load_file
                    qo = os.path.join(tmp, "ours-" + ours)
                    subprocess.run([a.vsr_bin, "quantize", pkg, qo, "--scheme", ours], check=True,
                                   stdout=subprocess.DEVNULL)
                    O = {}
                    for f in sorted(os.listdir(qo)):
                        if f.endswith(".safetensors") and f != "readout.safetensors":
                            O.update(load_file(os.path.join(qo, f)))
                    diff = [k for k, v in tensors.items() if k not in O or tensor_sha(O[k]) != v["sha256"]]
                    extra = [k for k in O if k.startswith(PREFIX) and k[len(PREFIX):].rsplit(".", 1)[0] in linears
                             and k not in tensors]
                    entry["vllm_srun_identical"] = not diff and not extra
                    entry["vllm_srun_differs"] = diff
                    entry["vllm_srun_extra"] = extra
                    print(f"{preset}: {len(tensors)} tensors, vllm-srun identical: {entry['vllm_srun_identical']}"
                          f" (differ {len(diff)}, extra {len(extra)})", file=sys.stderr)
                res["schemes"][ours] = entry
            path = os.path.join(a.out_dir, f"llmcompressor_rtn_{a.size}.json")
            with open(path, "w") as f:
                json.dump(res, f, indent=1, sort_keys=True)
            print(f"rtn -> {path}", file=sys.stderr)

        for algo in ("gptq", "awq"):
            if algo not in todo:
                continue
            scales_in, scales_out, captured = {}, {}, []
            if algo == "gptq":
                recipe = GPTQModifier(config_groups=int4_args(a.group, True), ignore=IGNORE, dampening_frac=0.01,
                                      block_size=128)
                T, cfgq, recipe = run(recipe, True, algo)
            else:
                orig = awq_base.AWQModifier._compute_best_scale

                def wrapped(self, mapping, fp16_outputs, orig_layer_weights):
                    s = orig(self, mapping, fp16_outputs, orig_layer_weights)
                    captured.append((mapping.smooth_name, list(mapping.balance_names), s.double().clone()))
                    return s

                awq_base.AWQModifier._compute_best_scale = wrapped
                try:
                    T, cfgq, recipe = run(lambda m: [AWQModifier(mappings=build_hybrid_attention_mappings(m),
                                                                 duo_scaling=True, n_grid=20),
                                                     QuantizationModifier(config_groups=int4_args(a.group, False),
                                                                          ignore=IGNORE)], True, algo,
                                          pipeline=AWQ_PIPELINE)
                finally:
                    awq_base.AWQModifier._compute_best_scale = orig
                for smooth, balance, s in captured:
                    for b in balance:
                        assert b not in scales_in, b
                        scales_in[b] = s
                    if smooth in mods32 and isinstance(mods32[smooth], torch.nn.Linear):
                        scales_out[smooth] = s
            errs = int4_errors(T, scales_in, scales_out)
            layers = []
            for n, e in errs.items():
                rec = {"module": PREFIX + n, "N": W0[n].shape[0], "K": W0[n].shape[1], "error": e,
                       "rtn_error": rtn_err[algo == "gptq"][n]}
                if algo == "awq":
                    rec["input_scaled"] = n in scales_in
                    rec["output_scaled"] = n in scales_out
                layers.append(rec)
                print(f"{algo} {n}: error {e:.6g} (rtn {rec['rtn_error']:.6g})", file=sys.stderr)
            res = dict(common, algorithm=algo, group_size=a.group, recipe=repr(recipe),
                       pipeline="basic" if algo == "gptq" else AWQ_PIPELINE,
                       quantization_config=cfgq, layers=layers)
            if algo == "awq":
                res["scales"] = [{"smooth": PREFIX + sm, "balance": [PREFIX + b for b in bl],
                                  "s": [float(v) for v in s]} for sm, bl, s in captured]
            path = os.path.join(a.out_dir, f"llmcompressor_{algo}_{a.size}.json")
            with open(path, "w") as f:
                json.dump(res, f, indent=1, sort_keys=True)
            print(f"{algo}: {len(layers)} layers -> {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
