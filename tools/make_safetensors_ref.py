#!/usr/bin/env python3
"""Writes tests/data/safetensors/ref_small.safetensors with the reference Python `safetensors`
library, and ref_small.json with what a reader must find in it: per tensor the dtype string,
shape, data_offsets, raw little-endian bytes (hex) and the decoded values (as Python/torch sees
them). tests/test_safetensors.c reads both and compares.

Run from the repository root:  python3 tools/make_safetensors_ref.py
"""
import json
import os
import sys

import torch
from safetensors.torch import save_file, safe_open

OUT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "safetensors")


def tensors():
    g = torch.Generator().manual_seed(1234)
    return {
        # BF16 with exact and rounded values, negatives and a subnormal-ish small number.
        "model.layers.0.weight": torch.tensor([[1.0, -2.5, 3.140625], [0.0, -0.0, 1e-30]], dtype=torch.bfloat16),
        # F8_E4M3 (torch.float8_e4m3fn): 448 is the largest finite value.
        "model.layers.0.weight_fp8": torch.tensor([1.0, -0.5, 448.0, 0.015625, -3.0, 0.0], dtype=torch.float8_e4m3fn),
        "model.layers.0.scale": torch.tensor([0.5, 2.0], dtype=torch.float32),
        "ids_i32": torch.tensor([[-1, 2147483647, -2147483648]], dtype=torch.int32),
        "bytes_u8": torch.tensor([0, 1, 127, 128, 255], dtype=torch.uint8),
        "big_i64": torch.tensor([-(2**63), 2**63 - 1, 42], dtype=torch.int64),
        "half_f16": (torch.randn(3, generator=g) * 4).to(torch.float16),
        "scalar_f32": torch.tensor(1.5, dtype=torch.float32),  # rank-0
        "empty_bf16": torch.zeros((0, 4), dtype=torch.bfloat16),  # 0 elements
    }


def main():
    os.makedirs(OUT_DIR, exist_ok=True)
    st_path = os.path.join(OUT_DIR, "ref_small.safetensors")
    save_file(tensors(), st_path, metadata={"format": "pt"})

    raw = open(st_path, "rb").read()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + n])
    base = 8 + n
    out = {"file_bytes": len(raw), "header_bytes": n, "metadata": header.get("__metadata__"), "tensors": {}}
    with safe_open(st_path, "pt") as f:
        for name in f.keys():
            t = f.get_tensor(name)
            e = header[name]
            b, en = e["data_offsets"]
            out["tensors"][name] = {
                "dtype": e["dtype"],
                "shape": e["shape"],
                "data_offsets": [b, en],
                "hex": raw[base + b : base + en].hex(),
                # Integers stay exact; floats are written as float64 (exact for these dtypes).
                "values": t.reshape(-1).tolist() if not t.is_floating_point() else t.reshape(-1).double().tolist(),
            }
    with open(os.path.join(OUT_DIR, "ref_small.json"), "w") as fh:
        json.dump(out, fh, indent=1, sort_keys=True)
        fh.write("\n")
    print(f"wrote {st_path} ({len(raw)} bytes, {len(out['tensors'])} tensors)")


if __name__ == "__main__":
    sys.exit(main())
