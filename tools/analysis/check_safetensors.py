#!/usr/bin/env python3
"""Reads a safetensors file that bitrank wrote with python's `safetensors`
(an implementation independent of ours) and checks it.

    pip install safetensors numpy
    python3 tools/analysis/check_safetensors.py FILE [FILE ...]

For every file: python's safetensors loads every tensor (its parser checks
the header, the offsets and that the tensors tile the data); the header
length makes the data start at a multiple of 8 and every tensor starts at a
multiple of its element size. For a bitrank model file (metadata
bitrank.format == "bitrank"), also: version 1, every BLR path tensor of
bitrank.blr present with its dtype and shape, scales finite, dense tensors
of the storage dtype and finite, the config and tokenizer metadata valid
JSON, and bitrank.accounting equal to the honest bit count recomputed here:
    bits = P * (r*(m + n) + scale_bits*(m + r + n))   per BLR matrix
    dense bits = params * value bits.
Prints one line per file; exits 1 on the first problem.
"""
import json
import struct
import sys

import numpy as np
from safetensors import safe_open
from safetensors.numpy import load_file

SIZES = {"BOOL": 1, "U8": 1, "I8": 1, "I16": 2, "U16": 2, "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4,
         "I64": 8, "U64": 8, "F64": 8}
NUMPY = {"F16": np.float16, "F32": np.float32, "U32": np.uint32}


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def check_bitrank(path, header, meta, tensors):
    if meta.get("bitrank.version") != "1":
        fail(f"{path}: bitrank.version {meta.get('bitrank.version')!r}")
    json.loads(meta["bitrank.config"])
    if "bitrank.tokenizer" in meta:
        tok = json.loads(meta["bitrank.tokenizer"])
        if len(tok["types"]) != len(tok["tokens"]):
            fail(f"{path}: tokenizer has {len(tok['types'])} types for {len(tok['tokens'])} tokens")
    storage = json.loads(meta["bitrank.storage"])
    blr = json.loads(meta["bitrank.blr"])
    scale_bits = 16 if storage["scales"] == "F16" else 32
    dense_bits = 16 if storage["dense"] == "F16" else 32
    seen = set()
    matrices = {}
    for name, e in blr.items():
        m, n, r, paths = e["m"], e["n"], e["rank"], e["paths"]
        if r % 32:
            fail(f"{path}: {name}: rank {r}")
        for p in range(paths):
            want = {"su": ("U32", [m, r // 32]), "sv": ("U32", [n, r // 32]), "h": (storage["scales"], [m]),
                    "l": (storage["scales"], [r]), "g": (storage["scales"], [n])}
            for part, (dtype, shape) in want.items():
                t = f"{name}.p{p}.{part}"
                if t not in tensors:
                    fail(f"{path}: missing {t}")
                if header[t]["dtype"] != dtype or list(tensors[t].shape) != shape:
                    fail(f"{path}: {t} is {header[t]['dtype']} {list(tensors[t].shape)}, expected {dtype} {shape}")
                if tensors[t].dtype != NUMPY[dtype]:
                    fail(f"{path}: {t} loads as {tensors[t].dtype}")
                if part in "hlg" and not np.all(np.isfinite(tensors[t])):
                    fail(f"{path}: {t} has a non-finite scale")
                seen.add(t)
        bits = paths * (r * (m + n) + scale_bits * (m + r + n))
        matrices[name] = {"m": m, "n": n, "rank": r, "paths": paths, "bits": bits, "bpw": bits / (m * n)}
    params = 0
    for t, a in tensors.items():
        if t in seen:
            continue
        if header[t]["dtype"] != storage["dense"] or not np.all(np.isfinite(a)):
            fail(f"{path}: dense tensor {t} is {header[t]['dtype']} or not finite")
        params += a.size
    acc = json.loads(meta["bitrank.accounting"])
    weights = sum(v["m"] * v["n"] for v in matrices.values())
    blr_bits = sum(v["bits"] for v in matrices.values())
    if acc["matrices"] != matrices:
        fail(f"{path}: accounting matrices {acc['matrices']} != recomputed {matrices}")
    if (acc["blr"]["weights"], acc["blr"]["bits"]) != (weights, blr_bits):
        fail(f"{path}: accounting blr {acc['blr']}, recomputed weights {weights} bits {blr_bits}")
    if (acc["dense"]["params"], acc["dense"]["bits"]) != (params, params * dense_bits):
        fail(f"{path}: accounting dense {acc['dense']}, recomputed params {params}")
    if acc["model"]["bits"] != blr_bits + params * dense_bits:
        fail(f"{path}: accounting model bits {acc['model']['bits']}")
    return (f"bitrank v1: {len(blr)} BLR matrices, {weights} weights at {blr_bits / max(weights, 1):.4f} bpw, "
            f"{params} dense params, model {acc['model']['bpw']:.4f} bpw")


def check(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    if (8 + n) % 8:
        fail(f"{path}: data starts at byte {8 + n}, not a multiple of 8")
    meta = header.pop("__metadata__", {})
    for name, e in header.items():
        if e["data_offsets"][0] % SIZES[e["dtype"]]:
            fail(f"{path}: {name} ({e['dtype']}) starts at data byte {e['data_offsets'][0]}")
    with safe_open(path, framework="numpy") as f:
        if (f.metadata() or {}) != meta:
            fail(f"{path}: metadata differs between safe_open and the raw header")
    tensors = load_file(path)
    if set(tensors) != set(header):
        fail(f"{path}: python sees tensors {sorted(tensors)}")
    what = f"{len(tensors)} tensors, {len(meta)} metadata keys"
    if meta.get("bitrank.format") == "bitrank":
        what += "; " + check_bitrank(path, header, meta, tensors)
    print(f"ok {path}: {what}")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for p in sys.argv[1:]:
        check(p)
