#!/usr/bin/env python3
"""Writes tiny compressed-tensors packages with the compressed-tensors library itself,
so our parser, dequantizers and RTN quantizers can be checked against what the real
library writes and decompresses (tests/test_quant.c, tools/check_compressed_tensors.py).

For each scheme it builds a small model (two targeted Linear layers and an ignored
lm_head), fills the BF16 weights from a fixed seed, computes the RTN quantization
parameters the way llm-compressor's min-max observer does (min/max of the BF16 weight
per channel/group/block handed to the library's calculate_qparams / generate_gparam),
compresses with ModelCompressor.compress_model, saves config.json (update_config) and
model.safetensors, then decompresses with ModelCompressor.decompress_model and saves

  ct_expected.safetensors   original.<module>.weight      the BF16 weights before quantization
                            decompressed.<module>.weight  the library's decompressed BF16

Schemes (directory names under OUT):
  fp8_dynamic     float-quantized, FP8 per-channel weights, dynamic per-token inputs
  w4a16_asym_g128 pack-quantized int4, asymmetric (zero points), group 128
  nvfp4           nvfp4-pack-quantized, W4A4 (input_activations dynamic "local")
  w4a16_gidx_g128 pack-quantized int4, symmetric, group 128, actorder "group" (weight_g_idx)

compressed-tensors 0.20 refuses actorder "group" (removed upstream) and older releases
cannot decompress packed zero points, so the g_idx sample needs an older release
(0.12.2 made the committed one):  python -m venv --system-site-packages V &&
V/bin/pip install --no-deps compressed-tensors==0.12.2 && V/bin/python THIS --only w4a16_gidx_g128

Usage: python3 tools/make_ct_samples.py [--out DIR] [--only NAME[,NAME]]
"""
import argparse
import json
import os

import compressed_tensors
import torch
from compressed_tensors.compressors.model_compressors.model_compressor import ModelCompressor
from compressed_tensors.quantization import (
    QuantizationArgs,
    QuantizationConfig,
    QuantizationScheme,
    apply_quantization_config,
)
from compressed_tensors.quantization.utils import calculate_qparams
from safetensors.torch import save_file

QUANTIZED = [  # (module name, out_features N, in_features K)
    ("model.layers.0.self_attn.q_proj", 16, 256),
    ("model.layers.0.mlp.up_proj", 24, 128),
]
IGNORED = [("lm_head", 8, 32)]


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.model = torch.nn.Module()
        self.model.layers = torch.nn.ModuleList([torch.nn.Module()])
        layer = self.model.layers[0]
        layer.self_attn = torch.nn.Module()
        layer.mlp = torch.nn.Module()
        layer.self_attn.q_proj = torch.nn.Linear(256, 16, bias=False)
        layer.mlp.up_proj = torch.nn.Linear(128, 24, bias=False)
        self.lm_head = torch.nn.Linear(32, 8, bias=False)


def make_weights(seed):
    """BF16 weights with the cases that matter: normal values, one all-zero row (a zero
    scale becomes eps), one all-negative row (asymmetric zero point at the top), one
    row with a large outlier, and exact ties for the rounding rules."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for name, n, k in QUANTIZED + IGNORED:
        w = torch.randn(n, k, generator=g) * 0.05
        if n >= 16:
            w[1] = 0.0
            w[2] = -w[2].abs() - 0.01
            w[3, 5] = 3.0
            w[4, :8] = torch.tensor([0.5, 1.5, 2.5, -0.5, -1.5, 7.5, -6.9, 0.25])
        out[name] = w.to(torch.bfloat16)
    return out


def schemes():
    legacy = compressed_tensors.__version__.startswith("0.1") and int(
        compressed_tensors.__version__.split(".")[1]) < 13
    fp8 = QuantizationScheme(
        targets=["Linear"],
        weights=QuantizationArgs(num_bits=8, type="float", strategy="channel", symmetric=True,
                                 dynamic=False),
        input_activations=QuantizationArgs(num_bits=8, type="float", strategy="token",
                                           symmetric=True, dynamic=True),
    )
    asym = QuantizationScheme(
        targets=["Linear"],
        weights=QuantizationArgs(num_bits=4, type="int", strategy="group", group_size=128,
                                 symmetric=False, dynamic=False),
    )
    nv_kw = {} if legacy else {"scale_dtype": torch.float8_e4m3fn}
    nvfp4 = QuantizationScheme(
        targets=["Linear"],
        weights=QuantizationArgs(num_bits=4, type="float", strategy="tensor_group", group_size=16,
                                 symmetric=True, dynamic=False, **nv_kw),
        input_activations=QuantizationArgs(num_bits=4, type="float", strategy="tensor_group",
                                           group_size=16, symmetric=True, dynamic="local", **nv_kw),
    )
    out = {
        "fp8_dynamic": (fp8, "float-quantized"),
        "w4a16_asym_g128": (asym, "pack-quantized"),
        "nvfp4": (nvfp4, "nvfp4-pack-quantized"),
    }
    if legacy:
        gidx = QuantizationScheme(
            targets=["Linear"],
            weights=QuantizationArgs(num_bits=4, type="int", strategy="group", group_size=128,
                                     symmetric=True, dynamic=False, actorder="group"),
        )
        out["w4a16_gidx_g128"] = (gidx, "pack-quantized")
    return out


def g_idx_for(k, group, seed):
    """GPTQ's act-order g_idx: columns visited in a permuted order, group = position // g."""
    perm = torch.randperm(k, generator=torch.Generator().manual_seed(seed))
    g_idx = torch.empty(k, dtype=torch.int32)
    g_idx[perm] = torch.arange(k, dtype=torch.int32) // group
    return g_idx


def set_qparams(module, w, scheme):
    """What llm-compressor's min-max observer hands the library, for RTN."""
    args = scheme.weights
    n, k = w.shape
    if args.strategy == "channel":
        mn, mx = w.amin(dim=1, keepdim=True), w.amax(dim=1, keepdim=True)
        scale, zp = calculate_qparams(mn, mx, args)
    elif args.strategy == "group" and getattr(module, "weight_g_idx", None) is not None:
        g_idx = module.weight_g_idx
        groups = k // args.group_size
        mn = torch.stack([w[:, g_idx == gi].amin(dim=1) for gi in range(groups)], dim=1)
        mx = torch.stack([w[:, g_idx == gi].amax(dim=1) for gi in range(groups)], dim=1)
        scale, zp = calculate_qparams(mn, mx, args)
    elif args.strategy == "group":
        wg = w.view(n, k // args.group_size, args.group_size)
        scale, zp = calculate_qparams(wg.amin(dim=-1), wg.amax(dim=-1), args)
    elif args.strategy == "tensor_group":
        from compressed_tensors.quantization.utils import generate_gparam

        gs = generate_gparam(w.amin(), w.amax())
        module.weight_global_scale.data.copy_(gs)
        if hasattr(module, "input_global_scale"):  # W4A4: calibrated from activations;
            # here a fixed activation range of +-4
            module.input_global_scale.data.copy_(generate_gparam(torch.tensor(-4.0), torch.tensor(4.0)))
        wg = w.view(n, k // 16, 16)
        scale, zp = calculate_qparams(wg.amin(dim=-1), wg.amax(dim=-1), args, global_scale=gs)
    else:
        raise ValueError(args.strategy)
    module.weight_scale.data.copy_(scale.reshape(module.weight_scale.shape))
    if hasattr(module, "weight_zero_point"):
        module.weight_zero_point.data.copy_(zp.reshape(module.weight_zero_point.shape))


def make(name, scheme, fmt, out_dir, seed):
    torch.manual_seed(seed)
    model = Tiny()
    weights = make_weights(seed)
    for mod_name, _, _ in QUANTIZED + IGNORED:
        model.get_submodule(mod_name).weight.data = weights[mod_name].clone()
    model.to(torch.bfloat16)
    scheme.format = fmt
    config = QuantizationConfig(config_groups={"group_0": scheme}, ignore=["lm_head"], format=fmt)
    apply_quantization_config(model, config)
    for i, (mod_name, _, k) in enumerate(QUANTIZED):
        mod = model.get_submodule(mod_name)
        if getattr(mod, "weight_g_idx", None) is not None:
            mod.weight_g_idx.data.copy_(g_idx_for(k, scheme.weights.group_size, seed + i))
        set_qparams(mod, weights[mod_name], mod.quantization_scheme)

    compressor = ModelCompressor.from_pretrained_model(model, quantization_format=fmt)
    compressor.compress_model(model)
    d = os.path.join(out_dir, name)
    os.makedirs(d, exist_ok=True)
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    save_file(state, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump({"model_type": "vsr-ct-sample", "torch_dtype": "bfloat16"}, f)
    compressor.update_config(d)

    compressor.decompress_model(model)
    expected = {}
    for mod_name, _, _ in QUANTIZED:
        expected[f"original.{mod_name}.weight"] = weights[mod_name].contiguous()
        expected[f"decompressed.{mod_name}.weight"] = (
            model.get_submodule(mod_name).weight.data.to(torch.bfloat16).contiguous())
    save_file(expected, os.path.join(d, "ct_expected.safetensors"),
              metadata={"compressed_tensors": compressed_tensors.__version__,
                        "torch": torch.__version__})
    print(f"{d}: compressed-tensors {compressed_tensors.__version__}, "
          f"tensors {sorted(state)}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "data", "ct"))
    ap.add_argument("--only", default="")
    a = ap.parse_args()
    only = set(filter(None, a.only.split(",")))
    for i, (name, (scheme, fmt)) in enumerate(sorted(schemes().items())):
        if only and name not in only:
            continue
        make(name, scheme, fmt, a.out, 1234 + i)
    missing = only - set(schemes())
    if missing:
        raise SystemExit(f"not available with compressed-tensors {compressed_tensors.__version__}: "
                         f"{sorted(missing)}")


if __name__ == "__main__":
    main()
