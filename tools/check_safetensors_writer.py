#!/usr/bin/env python3
"""Checks the C safetensors writer (src/package/safetensors.c) against the reference Python
`safetensors` library (Rust serializer underneath):

  1. byte identity: for each case, the same tensors are written by Python's save_file
     (safetensors.numpy.save_file, and safetensors.torch.save_file for dtypes numpy lacks:
     BF16, F8_*, F4) and by the C writer (a small helper that reads the Python file with
     vsr_st_open and re-adds its tensors in reverse order); the two files must be identical.
  2. loadability: files the C writer produced load in Python with the same values and metadata.

Python's writer keeps __metadata__ in a Rust HashMap, so its key order is random when there is
more than one key; byte identity is checked with zero or one metadata key, and multi-key files
are checked for loadability only (the C writer sorts the keys).

Run from the repository root:  python3 tools/check_safetensors_writer.py [--trials N]
Exit status 0 when every case matches.
"""
import argparse
import glob
import os
import random
import subprocess
import sys
import tempfile

import numpy as np
import torch
from safetensors import safe_open
from safetensors.numpy import save_file as np_save_file
from safetensors.torch import save_file as torch_save_file

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

HELPER_C = r"""
#include <stdio.h>
#include <string.h>
#include "vsr/safetensors.h"
/* usage: helper IN OUT [KEY VALUE]... : rewrites IN's tensors (added in reverse order) to OUT */
int main(int argc, char **argv) {
    vsr_err err = {0};
    vsr_st_file *f = NULL;
    if (vsr_st_open(argv[1], NULL, &f, &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
    vsr_st_writer *w = vsr_st_writer_new();
    for (size_t i = vsr_st_count(f); i-- > 0;) {
        const vsr_tensor *t = vsr_st_at(f, i);
        if (vsr_st_writer_add(w, t->name, t->dtype, t->ndim, t->shape, t->data, t->nbytes, &err)) {
            fprintf(stderr, "%s\n", err.msg); return 1;
        }
    }
    for (int a = 3; a + 1 < argc; a += 2)
        if (vsr_st_writer_set_metadata(w, argv[a], argv[a + 1], &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
    if (vsr_st_writer_save(w, argv[2], &err)) { fprintf(stderr, "%s\n", err.msg); return 1; }
    vsr_st_writer_free(w);
    vsr_st_close(f);
    return 0;
}
"""

NP_DTYPES = [np.bool_, np.uint8, np.int8, np.int16, np.uint16, np.float16, np.int32, np.uint32,
             np.float32, np.float64, np.int64, np.uint64, np.complex64]
TORCH_DTYPES = [torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz,
                torch.float8_e5m2fnuz, torch.float16, torch.float32, torch.int32, torch.uint8, torch.bool]
for _n in ("float8_e8m0fnu", "float4_e2m1fn_x2"):
    if hasattr(torch, _n):
        TORCH_DTYPES.append(getattr(torch, _n))

NAME_CHARS = list("abcxyz019._-") + ['"', "\\", "\n", "\x01", "\x7f", "é", "中", "\U0001F600", " "]


def build_helper(tmp):
    src = os.path.join(tmp, "helper.c")
    exe = os.path.join(tmp, "helper")
    with open(src, "w") as fh:
        fh.write(HELPER_C)
    sources = sorted(glob.glob(os.path.join(REPO, "src/core/*.c"))) + [
        os.path.join(REPO, "src/format/dtype.c"), os.path.join(REPO, "src/package/safetensors.c")]
    cmd = ["cc", "-std=c17", "-O2", "-D_GNU_SOURCE", "-I" + os.path.join(REPO, "include"),
           "-I" + os.path.join(REPO, "src"), "-o", exe, src] + sources + ["-ljansson", "-lcrypto", "-lm", "-pthread"]
    subprocess.run(cmd, check=True)
    return exe


def rand_name(rng, used):
    while True:
        n = "".join(rng.choice(NAME_CHARS) for _ in range(rng.randint(1, 8)))
        if n not in used and n != "__metadata__":
            used.add(n)
            return n


def rand_shape(rng):
    r = rng.random()
    if r < 0.1:
        return ()  # scalar
    if r < 0.2:
        return (rng.randint(0, 3), 0)  # empty
    return tuple(rng.randint(1, 5) for _ in range(rng.randint(1, 3)))


def np_case(rng):
    used = set()
    out = {}
    for _ in range(rng.randint(0, 12)):
        dt = rng.choice(NP_DTYPES)
        shape = rand_shape(rng)
        a = np.frombuffer(rng.randbytes(int(np.prod(shape, dtype=np.int64)) * np.dtype(dt).itemsize), dtype=np.uint8)
        if dt is np.bool_:
            a = (a & 1).astype(np.bool_)
        else:
            a = a.view(dt)
        out[rand_name(rng, used)] = a.reshape(shape)
    return out


def torch_case(rng):
    used = set()
    out = {}
    for _ in range(rng.randint(1, 12)):
        dt = rng.choice(TORCH_DTYPES)
        shape = rand_shape(rng)
        if dt == getattr(torch, "float4_e2m1fn_x2", None):
            shape = shape or (1,)
        numel = int(np.prod(shape, dtype=np.int64))
        itemsize = torch.empty(0, dtype=dt).element_size()
        raw = torch.frombuffer(bytearray(rng.randbytes(numel * itemsize) or b"\0"), dtype=torch.uint8)[: numel * itemsize]
        if dt == torch.bool:
            t = (raw & 1).to(torch.bool).reshape(shape)
        else:
            t = raw.view(dt).reshape(shape)
        out[rand_name(rng, used)] = t
    return out


def rand_metadata(rng, max_keys):
    # An empty map is written by Python as "__metadata__":{}; the C writer emits __metadata__
    # only once a key is set, so "no keys" is always None here.
    k = rng.randint(0, max_keys)
    if k == 0:
        return None
    used = set()
    return {rand_name(rng, used): rand_name(rng, set()) for _ in range(k)}


def run_helper(helper, src, dst, metadata):
    args = [helper, src, dst]
    for k, v in sorted((metadata or {}).items()):
        args += [k, v]
    subprocess.run(args, check=True)


def same_values(path_c, tensors, metadata, framework):
    with safe_open(path_c, framework) as f:
        if sorted(f.keys()) != sorted(tensors):
            return "tensor names differ"
        if (f.metadata() or None) != (metadata or None):
            return f"metadata differs: {f.metadata()!r} vs {metadata!r}"
        for name, want in tensors.items():
            got = f.get_tensor(name)
            if framework == "numpy":
                if got.dtype != want.dtype or got.shape != want.shape or got.tobytes() != want.tobytes():
                    return f"tensor {name!r} differs"
            else:
                if got.dtype != want.dtype or tuple(got.shape) != tuple(want.shape) or \
                        not torch.equal(got.reshape(-1).view(torch.uint8), want.reshape(-1).view(torch.uint8)):
                    return f"tensor {name!r} differs"
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=300)
    ap.add_argument("--seed", type=int, default=20240611)
    args = ap.parse_args()
    rng = random.Random(args.seed)
    failures = 0
    counts = {"identical": 0, "loaded": 0}
    with tempfile.TemporaryDirectory() as tmp:
        helper = build_helper(tmp)
        for i in range(args.trials):
            framework = "numpy" if i % 2 == 0 else "pt"
            tensors = np_case(rng) if framework == "numpy" else torch_case(rng)
            # Byte identity with 0/1 metadata keys; loadability only with several.
            multi = i % 5 == 4
            metadata = rand_metadata(rng, 4 if multi else 1)
            py = os.path.join(tmp, f"py{i}.safetensors")
            c = os.path.join(tmp, f"c{i}.safetensors")
            (np_save_file if framework == "numpy" else torch_save_file)(tensors, py, metadata=metadata)
            run_helper(helper, py, c, metadata)
            if not multi or len(metadata or {}) <= 1:
                if open(py, "rb").read() != open(c, "rb").read():
                    failures += 1
                    print(f"case {i} ({framework}, {len(tensors)} tensors): C output differs from Python")
                    continue
                counts["identical"] += 1
            why = same_values(c, tensors, metadata, "numpy" if framework == "numpy" else "pt")
            if why:
                failures += 1
                print(f"case {i} ({framework}): C file does not load back: {why}")
                continue
            counts["loaded"] += 1
    print(f"{args.trials} cases: {counts['identical']} byte-identical to Python's save_file, "
          f"{counts['loaded']} loaded back by Python with equal values; {failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
