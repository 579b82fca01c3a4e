#!/usr/bin/env python3
"""Writes the float-format oracle tables under tests/data/fp/ from torch itself.

  e4m3.tsv             every one of the 256 E4M3 codes: code, the FP32 bits of
                       torch.float8_e4m3fn's value and of torch.float8_e4m3fnuz's value
  bf16_to_e4m3fn.bin   65536 bytes: for each BF16 bit pattern x, the code torch gives for
                       clamp(x, -448, 448).to(float8_e4m3fn) (RNE, saturating as
                       compressed-tensors clamps before casting; NaN stays NaN)
  bf16_to_e2m1.bin     65536 bytes: for each BF16 bit pattern x, the E2M1 nibble that
                       compressed-tensors' CPU cast_to_fp4 + pack_fp4_to_uint8 give for
                       clamp(x, -6, 6) (NaN patterns are written as 0xFF: not compared)

Usage: python3 tools/make_fp8_tables.py [OUT_DIR]   (default tests/data/fp)
"""
import os
import sys

import torch


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(__file__), "..", "tests", "data", "fp")
    os.makedirs(out, exist_ok=True)

    codes = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    fn = codes.view(torch.float8_e4m3fn).to(torch.float32).view(torch.int32)
    fnuz = codes.view(torch.float8_e4m3fnuz).to(torch.float32).view(torch.int32)
    with open(os.path.join(out, "e4m3.tsv"), "w") as f:
        f.write(f"# code\tfloat8_e4m3fn as f32 bits\tfloat8_e4m3fnuz as f32 bits (torch {torch.__version__})\n")
        for c in range(256):
            f.write(f"{c:02x}\t{fn[c].item() & 0xffffffff:08x}\t{fnuz[c].item() & 0xffffffff:08x}\n")

    bits = torch.arange(65536, dtype=torch.int32).to(torch.int16)
    x = bits.view(torch.bfloat16)
    enc = torch.clamp(x, -448.0, 448.0).to(torch.float8_e4m3fn).view(torch.uint8)
    with open(os.path.join(out, "bf16_to_e4m3fn.bin"), "wb") as f:
        f.write(enc.numpy().tobytes())

    from compressed_tensors.compressors.nvfp4.helpers import pack_fp4_to_uint8
    from compressed_tensors.quantization.utils.fp4_utils import cast_to_fp4

    xc = torch.clamp(x.clone(), -6.0, 6.0)
    nan = torch.isnan(xc)
    xc[nan] = 0.0
    fp4 = cast_to_fp4(xc)
    # pack pairs (v, 0): the low nibble is v's code
    pairs = torch.stack((fp4, torch.zeros_like(fp4)), dim=1).reshape(1, -1)
    nib = (pack_fp4_to_uint8(pairs).reshape(-1) & 0xF).to(torch.uint8)
    nib[nan] = 0xFF
    with open(os.path.join(out, "bf16_to_e2m1.bin"), "wb") as f:
        f.write(nib.numpy().tobytes())
    print(f"wrote {out}/e4m3.tsv, bf16_to_e4m3fn.bin, bf16_to_e2m1.bin")


if __name__ == "__main__":
    main()
