#!/usr/bin/env python3
"""The compressed-tensors proof: for each package folder, decompress its quantized weights
with the compressed-tensors library itself, run `vllm-srun dequant` on the same folder,
and check that every tensor is bit-identical. Prints one row per package.

Usage: python3 tools/check_compressed_tensors.py [--bin build/vllm-srun] PKG_DIR...

The library decompresses module by module with the compressor its format names
(BaseCompressor registry: compress/decompress of a per-module state dict in 0.14+,
decompress_weight in older releases). Releases differ in what they can still read:
0.20 refuses actorder "group" (weight_g_idx) and <= 0.12 cannot unpack zero points, so
run this under the release that wrote the package when one is refused (the row says so).
Exit status: 0 all identical, 1 a difference or our command failed, 3 a package the
installed library could not decompress.
"""
import argparse
import inspect
import json
import os
import subprocess
import sys
import tempfile

import compressed_tensors
import torch
from safetensors.torch import load_file

from compressed_tensors.compressors.base import BaseCompressor
from compressed_tensors.quantization import QuantizationConfig


def load_weights(pkg):
    index = os.path.join(pkg, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    out = {}
    for name in files:
        out.update(load_file(os.path.join(pkg, name)))
    return out


def quantized_modules(state, fmt):
    mods = set()
    for name, t in state.items():
        if name.endswith(".weight_packed"):
            mods.add(name[: -len(".weight_packed")])
        elif fmt == "float-quantized" and name.endswith(".weight") and t.dtype == torch.float8_e4m3fn:
            mods.add(name[: -len(".weight")])
    return sorted(mods)


def library_decompress(qc, state):
    """{module: BF16 weight} decompressed by compressed-tensors."""
    fields = QuantizationConfig.model_fields
    qc = {k: v for k, v in qc.items() if k in fields}
    # Releases before 0.13 do not know scale_dtype/zp_dtype; a null there means "the
    # default", so dropping the null key is the same config for them.
    from compressed_tensors.quantization import QuantizationArgs
    arg_fields = QuantizationArgs.model_fields
    for g in qc.get("config_groups", {}).values():
        for role in ("weights", "input_activations", "output_activations"):
            if isinstance(g.get(role), dict):
                g[role] = {k: v for k, v in g[role].items() if k in arg_fields or v is not None}
    config = QuantizationConfig.model_validate(qc)
    if len(config.config_groups) != 1:
        raise ValueError("more than one config group")
    scheme = next(iter(config.config_groups.values()))
    fmt = getattr(scheme, "format", None) or config.format
    compressor_cls = BaseCompressor.get_value_from_registry(fmt)
    out = {}
    for mod in quantized_modules(state, fmt):
        local = {k[len(mod) + 1:]: v for k, v in state.items() if k.startswith(mod + ".")
                 and "." not in k[len(mod) + 1:]}
        if isinstance(inspect.getattr_static(compressor_cls, "decompress", None), classmethod):
            w = compressor_cls.decompress(local, scheme)["weight"]
        else:  # older releases: an instance with decompress_weight(compressed_data, args)
            compressor = BaseCompressor.load_from_registry(fmt, config=config)
            w = compressor.decompress_weight(compressed_data=local, quantization_args=scheme.weights)
        out[mod] = w.to(torch.bfloat16)
    return fmt, out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", default=os.environ.get("VSR_BIN") or os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "build", "vllm-srun"))
    ap.add_argument("packages", nargs="+")
    a = ap.parse_args()

    rows, status = [], 0
    for pkg in a.packages:
        with open(os.path.join(pkg, "config.json")) as f:
            qc = json.load(f).get("quantization_config")
        state = load_weights(pkg)
        try:
            fmt, lib = library_decompress(qc, state)
        except Exception as e:  # the installed release cannot read this package
            rows.append((pkg, "?", 0, "-", f"n/a: compressed-tensors {compressed_tensors.__version__} "
                         f"cannot decompress it ({type(e).__name__}: {str(e).splitlines()[0][:80]})"))
            status = max(status, 3)
            continue
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "dequant.safetensors")
            r = subprocess.run([a.bin, "dequant", pkg, "--out", out], capture_output=True, text=True)
            if r.returncode != 0:
                rows.append((pkg, fmt, len(lib), "-", f"no: vllm-srun dequant failed: {r.stderr.strip()}"))
                status = 1
                continue
            ours = load_file(out)
        max_diff, identical, problems = 0.0, True, []
        if sorted(ours) != sorted(f"{m}.weight" for m in lib):
            identical = False
            problems.append(f"tensor names differ: ours {sorted(ours)} library {sorted(lib)}")
        for mod, w in lib.items():
            o = ours.get(f"{mod}.weight")
            if o is None or o.shape != w.shape:
                identical = False
                continue
            max_diff = max(max_diff, (o.float() - w.float()).abs().max().item())
            if not torch.equal(o.view(torch.int16), w.contiguous().view(torch.int16)):
                identical = False
                n = (o.view(torch.int16) != w.contiguous().view(torch.int16)).sum().item()
                problems.append(f"{mod}: {n} values differ")
        rows.append((pkg, fmt, len(lib), f"{max_diff:g}", "yes" if identical else "no: " + "; ".join(problems)))
        if not identical:
            status = max(status, 1) if status != 3 else 1
    print(f"compressed-tensors {compressed_tensors.__version__}, torch {torch.__version__}, ours {a.bin}")
    header = ("package", "format", "tensors", "max abs diff", "identical")
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(4)]
    print("  ".join(h.ljust(w) for h, w in zip(header[:4], widths)) + "  " + header[4])
    for r in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(r[:4], widths)) + "  " + r[4])
    return status


if __name__ == "__main__":
    sys.exit(main())
