#!/usr/bin/env python3
"""The compressed-tensors proof for `vllm-srun quantize` (issue 22).

For each package that `vllm-srun quantize` wrote (and the BF16 package it came from) this
writes one JSON file with what the compressed-tensors library itself says about it:

  config      the package's quantization_config parsed by the library's QuantizationConfig
              (it refuses unknown keys and bad values), and the config the library writes for
              the same recipe: the scheme's preset (FP8_DYNAMIC, W4A16 + GPTQ actorder,
              W4A16_ASYM, NVFP4A16) with ignore = the package's unquantized Linear modules,
              serialized as ModelCompressor.update_config does. `config_equal` says whether our
              quantization_config is that dict exactly.
  decompressed  sha256 of every quantized module's weight decompressed by the library's own
              compressor for the package's format (BaseCompressor registry, classmethod
              decompress of the module's tensors): tests/sh/quantize_ct.sh requires
              `vllm-srun dequant` to give the same bytes.
  ignore      the ignore list is exactly the package's BF16 Linear weights, in the order of
              transformers' named_modules() for its config (the order compressed-tensors writes).
  rtn         (fp8-dynamic, nvfp4) whether the package's stored tensors equal the library's own
              round-to-nearest of the BF16 weights: min-max qparams by calculate_qparams /
              generate_gparam as llm-compressor's min-max observer hands them, NVFP4 global
              scales replaced by their minimum over q/k/v and over gate/up as llm-compressor's
              update_fused_layer_weight_global_scales does, then the library's compress.
              llm-compressor itself is not installed here; this is the library's arithmetic
              driven the way its QuantizationModifier drives it.

Usage: python3 tools/ct_load_check.py --bf16 BF16_PKG --out FILE.json QUANT_PKG
(tests/data/reference/ct_quantize_*.json were made by tools/ct_quantize_refs.sh.)
"""
import argparse
import hashlib
import json
import os
import sys

import compressed_tensors
import torch
from compressed_tensors.compressors.base import BaseCompressor
from compressed_tensors.quantization import QuantizationConfig, preset_name_to_scheme
from compressed_tensors.quantization.utils import calculate_qparams, generate_gparam

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_compressed_tensors import load_weights, quantized_modules  # noqa: E402

PRESETS = {  # scheme -> (preset, format)
    "fp8-dynamic": ("FP8_DYNAMIC", "float-quantized"),
    "w4a16-gptq": ("W4A16", "pack-quantized"),
    "w4a16-awq": ("W4A16_ASYM", "pack-quantized"),
    "nvfp4": ("NVFP4A16", "nvfp4-pack-quantized"),
}
FUSED = (("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"), ("mlp.gate_proj", "mlp.up_proj"))


def sha(t):
    return hashlib.sha256(t.contiguous().view(torch.uint8).numpy().tobytes()).hexdigest()


def library_config(scheme_name, record, ignore):
    preset, fmt = PRESETS[scheme_name]
    s = preset_name_to_scheme(preset, ["Linear"])
    if scheme_name.startswith("w4a16"):
        s.weights = s.weights.model_copy(update={"group_size": record["recipe"]["group_size"]})
    if scheme_name == "w4a16-gptq":  # GPTQModifier's actorder
        s.weights = s.weights.model_copy(update={"actorder": "group" if record["recipe"]["actorder"] else "static"})
    s.format = fmt
    qc = QuantizationConfig(config_groups={"group_0": s}, format=fmt, ignore=ignore, quantization_status="compressed")
    d = {"version": compressed_tensors.__version__, "quant_method": "compressed-tensors", "sparsity_config": {},
         "transform_config": {}, **qc.model_dump(exclude=["quant_method"])}
    return json.loads(json.dumps(d))


def library_rtn(scheme_name, bf16, mods, scheme):
    """{module: {param: tensor}} the library's compress gives for min-max RTN."""
    args = scheme.weights
    comp = BaseCompressor.get_value_from_registry(scheme.format)
    gs = {}
    if scheme_name == "nvfp4":
        for m in mods:
            w = bf16[m + ".weight"]
            gs[m] = generate_gparam(w.amin(), w.amax())
        for m in mods:  # fused groups share the minimum
            for group in FUSED:
                if any(m.endswith(g) for g in group):
                    stem = m[: m.rfind(".", 0, m.rfind("."))]  # ...layers.N
                    members = [stem + "." + g for g in group if stem + "." + g in gs]
                    gs[m] = torch.min(torch.cat([gs[x].reshape(1) for x in members])).reshape([1])
    out = {}
    for m in mods:
        w = bf16[m + ".weight"]
        n, k = w.shape
        if scheme_name == "fp8-dynamic":
            scale, zp = calculate_qparams(w.amin(dim=1, keepdim=True), w.amax(dim=1, keepdim=True), args)
            local = {"weight": w, "weight_scale": scale.reshape(n, 1), "weight_zero_point": zp.reshape(n, 1)}
        else:
            wg = w.view(n, k // 16, 16)
            scale, zp = calculate_qparams(wg.amin(dim=-1), wg.amax(dim=-1), args, global_scale=gs[m])
            local = {"weight": w, "weight_scale": scale.reshape(n, k // 16), "weight_global_scale": gs[m].reshape(1),
                     "weight_zero_point": zp.reshape(n, k // 16)}
        out[m] = comp.compress(local, scheme)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bf16", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("package")
    a = ap.parse_args()
    with open(os.path.join(a.package, "config.json")) as f:
        ours = json.load(f)["quantization_config"]
    with open(os.path.join(a.package, "quantization_record.json")) as f:
        record = json.load(f)
    scheme_name = record["scheme"]
    parsed = QuantizationConfig.model_validate({k: v for k, v in ours.items() if k in QuantizationConfig.model_fields})
    scheme = next(iter(parsed.config_groups.values()))
    state = load_weights(a.package)
    bf16 = load_weights(a.bf16)
    mods = quantized_modules(state, scheme.format)
    expect_cfg = library_config(scheme_name, record, ours["ignore"])
    # the ignore list itself: every BF16 Linear the package keeps, none it quantized
    kept = sorted(k[: -len(".weight")] for k, v in state.items() if k.endswith(".weight") and v.dtype == torch.bfloat16
                  and v.dim() == 2 and not any(s in k.rsplit(".", 2)[-2] for s in ("embed", "norm")))
    comp = BaseCompressor.get_value_from_registry(scheme.format)
    decompressed, rtn = {}, {}
    for m in mods:
        local = {k[len(m) + 1:]: v for k, v in state.items() if k.startswith(m + ".") and "." not in k[len(m) + 1:]}
        w = comp.decompress(local, scheme)["weight"].to(torch.bfloat16)
        decompressed[m + ".weight"] = sha(w)
    if scheme_name in ("fp8-dynamic", "nvfp4"):
        lib = library_rtn(scheme_name, bf16, mods, scheme)
        for m, params in lib.items():
            for p, t in params.items():
                if p == "weight_zero_point":
                    continue
                name = f"{m}.{p}"
                rtn[name] = name in state and state[name].dtype == t.dtype and torch.equal(
                    state[name].contiguous().view(torch.uint8), t.contiguous().view(torch.uint8))
    # the ignore list's order: transformers' named_modules() of the package's config (on the meta
    # device), Linear modules only, in checkpoint names ("model." + the module path)
    import transformers
    cfg = transformers.AutoConfig.from_pretrained(a.package)
    with torch.device("meta"):
        model = transformers.AutoModel.from_config(cfg)
    names = [n if n.startswith("model.") else "model." + n for n, mod in model.named_modules()
             if isinstance(mod, torch.nn.Linear)]
    ignore_set = set(ours["ignore"])
    result = {
        "ignore_order_is_named_modules": [n for n in names if n in ignore_set] == ours["ignore"],
        "transformers": transformers.__version__,
        "package_model_sha256": json.load(open(os.path.join(a.package, "MODEL_MANIFEST.json")))["identity"]["model_sha256"],
        "scheme": scheme_name,
        "compressed_tensors": compressed_tensors.__version__,
        "torch": torch.__version__,
        "config_equal": ours == expect_cfg,
        "config_library": expect_cfg,
        "ignore_is_kept_linears": sorted(ours["ignore"]) == kept,
        "decompressed_sha256": decompressed,
        "rtn_identical": rtn,
        "rtn_all_identical": bool(rtn) and all(rtn.values()),
    }
    with open(a.out, "w") as f:
        json.dump(result, f, indent=1, sort_keys=True)
        f.write("\n")
    print(f"{a.package}: config_equal={result['config_equal']} ignore_ok={result['ignore_is_kept_linears']} "
          f"ignore_order_ok={result['ignore_order_is_named_modules']} "
          f"decompressed={len(decompressed)} rtn_identical={sum(rtn.values())}/{len(rtn)}")
    return 0 if result["config_equal"] and result["ignore_is_kept_linears"] and result["ignore_order_is_named_modules"] and (not rtn or result["rtn_all_identical"]) else 1


if __name__ == "__main__":
    sys.exit(main())
