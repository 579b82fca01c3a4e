#!/usr/bin/env python3
"""Independent checks of a fixture package written by `vllm-srun fixture`, with libraries
nobody here wrote (Python json/hashlib, Hugging Face safetensors + transformers,
compressed-tensors, tokenizers). Prints one JSON line per package:

  {"package": DIR, "model_sha256": ..., "manifest_sha256": ..., "checks": [...]}

Checks: files_sha256/files_bytes match the files; identity.model_sha256 recomputed as
reference-runtime.md 4.1 step 6 (json.dumps(sort_keys, (",",":")), ensure_ascii) matches;
every code encodes to its token id; each safetensors file re-serialized by the Python
`safetensors` writer is byte-identical; quantization_config validates with compressed-tensors
(extra="forbid"); with --forward, transformers' Qwen3_5 text model loads the BF16 weights
(strict: no missing or unexpected keys) and gives finite hidden states and non-uniform readout
probabilities. Exit status 1 on any failure.

usage: tools/fixture_identity_oracle.py PACKAGE_DIR... [--forward]
"""
import hashlib
import json
import os
import sys

IDENTITY_FILES = ["readout.safetensors", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja"]
DECISION_KEYS = ["format_version", "format_id", "prompt", "base_model", "revision", "codes", "token_ids",
                 "temperature", "attention_mode", "pooling", "max_length", "readout_dtype"]


def sha256_file(p):
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def weight_files(d):
    idx = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(idx):
        return sorted(set(json.load(open(idx))["weight_map"].values()))
    return ["model.safetensors"]


def check(d, forward):
    fails, checks = [], []
    man = json.load(open(os.path.join(d, "MODEL_MANIFEST.json")))
    for name, sha in man["files_sha256"].items():
        p = os.path.join(d, name)
        if sha256_file(p) != sha:
            fails.append("sha256 of " + name)
        if man["files_bytes"][name] != os.path.getsize(p):
            fails.append("bytes of " + name)
    listed = set(man["files_sha256"]) | {"MODEL_MANIFEST.json"}
    if set(os.listdir(d)) != listed:
        fails.append("file set %s != manifest %s" % (sorted(os.listdir(d)), sorted(listed)))
    checks.append("files")

    dec = json.load(open(os.path.join(d, "decision_config.json")))
    files = {n: sha256_file(os.path.join(d, n)) for n in weight_files(d)}
    for n in IDENTITY_FILES:
        if os.path.exists(os.path.join(d, n)):
            files[n] = sha256_file(os.path.join(d, n))
    D = {k: dec[k] for k in DECISION_KEYS if k in dec}
    ident = hashlib.sha256(json.dumps({"files": files, "decision": D}, sort_keys=True,
                                      separators=(",", ":")).encode()).hexdigest()
    if ident != man["identity"]["model_sha256"]:
        fails.append("identity %s != manifest %s" % (ident, man["identity"]["model_sha256"]))
    if man["identity"]["files_sha256"] != files or man["identity"]["decision"] != D:
        fails.append("identity files/decision differ from the package")
    checks.append("identity")

    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
    for c, i in zip(dec["codes"], dec["token_ids"]):
        if tok.encode(c, add_special_tokens=False).ids != [i]:
            fails.append("code %r does not encode to [%d]" % (c, i))
    if len(set(dec["codes"])) != 255 or len(set(dec["token_ids"])) != 255:
        fails.append("codes/token_ids are not 255 distinct entries")
    checks.append("codes")

    import torch
    from safetensors.torch import load_file, save_file
    import tempfile
    for n in weight_files(d) + ["readout.safetensors"]:
        t = load_file(os.path.join(d, n))
        with tempfile.TemporaryDirectory() as tmp:
            save_file(t, os.path.join(tmp, "x.safetensors"), metadata={"format": "pt"})
            if sha256_file(os.path.join(tmp, "x.safetensors")) != sha256_file(os.path.join(d, n)):
                fails.append(n + " differs from the Python safetensors writer's bytes")
    checks.append("safetensors-bytes")

    cfg = json.load(open(os.path.join(d, "config.json")))
    q = cfg.get("quantization_config")
    if q is not None:
        from compressed_tensors.quantization import QuantizationConfig
        qq = {k: v for k, v in q.items() if k not in ("version", "quant_method", "sparsity_config",
                                                    "transform_config")}
        # compressed-tensors 0.20 (installed) removed actorder "group", which the 0.13 files we
        # mimic carry with weight_g_idx; validate the rest of the config with "weight".
        import copy
        qq = copy.deepcopy(qq)
        for g in qq["config_groups"].values():
            if g["weights"].get("actorder") == "group":
                g["weights"]["actorder"] = "weight"
        QuantizationConfig.model_validate(qq)
        checks.append("quantization_config")

    if forward and q is None:
        from transformers import Qwen3_5TextConfig, Qwen3_5TextModel
        tc = Qwen3_5TextConfig(**cfg["text_config"])
        model = Qwen3_5TextModel(tc).to(torch.bfloat16).eval()
        sd = {}
        for n in weight_files(d):
            for k, v in load_file(os.path.join(d, n)).items():
                sd[k[len("model.language_model."):]] = v
        missing, unexpected = model.load_state_dict(sd, strict=False)
        if missing or unexpected:
            fails.append("state dict: missing %s unexpected %s" % (missing[:4], unexpected[:4]))
        ids = tok.encode("<|im_start|>user\nIs this a test?<|im_end|>\n", add_special_tokens=False).ids
        with torch.no_grad():
            h = model(input_ids=torch.tensor([ids])).last_hidden_state[0, -1].float()
        r = load_file(os.path.join(d, "readout.safetensors"))["weight"]
        p = torch.softmax((h @ r.T) / dec["temperature"], -1)
        if not torch.isfinite(h).all() or not torch.isfinite(p).all():
            fails.append("non-finite forward")
        if float(p.max()) < 2.0 / 255:
            fails.append("readout probabilities are nearly uniform (max %.4f)" % float(p.max()))
        checks.append("forward(max_p=%.4f, |h|=%.3f)" % (float(p.max()), float(h.norm())))

    out = {"package": os.path.basename(os.path.normpath(d)), "model_sha256": ident,
           "manifest_sha256": sha256_file(os.path.join(d, "MODEL_MANIFEST.json")), "checks": checks}
    if fails:
        out["failures"] = fails
    print(json.dumps(out, sort_keys=True))
    return not fails


def main():
    forward = "--forward" in sys.argv
    dirs = [a for a in sys.argv[1:] if not a.startswith("--")]
    ok = all([check(d, forward) for d in dirs])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
