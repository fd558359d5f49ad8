#!/usr/bin/env python3
"""Writes the safetensors test fixtures under tests/data/safetensors.

    pip install safetensors numpy
    python3 tools/make_safetensors_fixtures.py

Files (all small):
  mixed.safetensors          F32, F16, BF16, I32, a scalar and an empty tensor, with __metadata__
  sharded/model-0000{1,2}-of-00002.safetensors + model.safetensors.index.json
  expected.json              per file and tensor: shape and the f32 bit pattern of every
                             value as numpy converts it (F16 by numpy's astype, BF16 by
                             widening the bits), the oracle for the C++ reader

The values are fixed (seeded) and include the awkward ones: ±0, ±inf, NaN,
subnormals, the largest finite values.
"""
import json
import pathlib

import numpy as np
import safetensors
from safetensors.numpy import save

OUT = pathlib.Path(__file__).resolve().parent.parent / "tests" / "data" / "safetensors"
rng = np.random.default_rng(20240611)


def specials_f32():
    return np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -3e-45, 3.4028235e38, 1.0, -2.5], dtype=np.float32)


def make_f32(shape):
    a = (rng.standard_normal(int(np.prod(shape))) * 3).astype(np.float32)
    s = specials_f32()
    a[: min(len(s), a.size)] = s[: a.size]
    return a.reshape(shape)


def make_f16(shape):
    a = (rng.standard_normal(int(np.prod(shape))) * 2).astype(np.float16)
    s = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 6e-8, -3e-5, 65504.0, 6.1e-5], dtype=np.float16)
    a[: min(len(s), a.size)] = s[: a.size]
    return a.reshape(shape)


def make_bf16_bits(shape):
    """bf16 as uint16 bit patterns: the top halves of f32 values, plus specials."""
    f = (rng.standard_normal(int(np.prod(shape))) * 10).astype(np.float32)
    bits = (f.view(np.uint32) >> 16).astype(np.uint16)
    s = np.array([0x0000, 0x8000, 0x7F80, 0xFF80, 0x7FC1, 0x0001, 0x807F, 0x7F7F, 0x3F80], dtype=np.uint16)
    bits[: min(len(s), bits.size)] = s[: bits.size]
    return bits.reshape(shape)


def bf16_to_f32(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def f32_bits(a):
    return [int(x) for x in np.ascontiguousarray(a, dtype=np.float32).reshape(-1).view(np.uint32)]


def serialize(tensors, metadata=None):
    """tensors: name -> (dtype string, shape, numpy array holding the bytes)."""
    specs, keep = {}, []
    for name, (dtype, shape, arr) in tensors.items():
        arr = np.ascontiguousarray(arr)
        keep.append(arr)
        specs[name] = safetensors.TensorSpec(dtype=dtype, shape=list(shape), data_ptr=arr.ctypes.data,
                                             data_len=arr.nbytes)
    return safetensors.serialize(specs, metadata=metadata)


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "sharded").mkdir(exist_ok=True)
    expected = {}

    # One file of every readable dtype and a few that are listed only.
    w32 = make_f32((3, 5))
    w16 = make_f16((4, 6))
    wbf = make_bf16_bits((2, 3, 4))
    scalar = np.array(1.25, dtype=np.float32)
    empty = np.zeros((0, 3), dtype=np.float32)
    ids = np.array([7, -1, 123456, 0], dtype=np.int32)
    blob = serialize(
        {
            "model.embed.weight": ("float32", w32.shape, w32),
            "model.layers.0.mlp.weight": ("float16", w16.shape, w16),
            "model.layers.0.attn.weight": ("bfloat16", wbf.shape, wbf),
            "model.scale": ("float32", (), scalar),
            "model.empty": ("float32", empty.shape, empty),
            "model.ids": ("int32", ids.shape, ids),
        },
        metadata={"format": "pt", "note": "bitrank test fixture"},
    )
    (OUT / "mixed.safetensors").write_bytes(blob)
    expected["mixed.safetensors"] = {
        "model.embed.weight": {"shape": list(w32.shape), "dtype": "F32", "f32_bits": f32_bits(w32)},
        "model.layers.0.mlp.weight": {"shape": list(w16.shape), "dtype": "F16", "f32_bits": f32_bits(w16.astype(np.float32))},
        "model.layers.0.attn.weight": {"shape": list(wbf.shape), "dtype": "BF16", "f32_bits": f32_bits(bf16_to_f32(wbf))},
        "model.scale": {"shape": [], "dtype": "F32", "f32_bits": f32_bits(scalar)},
        "model.empty": {"shape": [0, 3], "dtype": "F32", "f32_bits": []},
        "model.ids": {"shape": [4], "dtype": "I32", "f32_bits": None},
    }

    # A sharded pair with its index, as transformers writes them.
    shard_tensors = [
        {"lm_head.weight": make_f32((4, 3)), "model.norm.weight": make_f16((6,))},
        {"model.layers.1.mlp.down_proj.weight": make_f16((2, 5)), "model.layers.1.input_layernorm.weight": make_f32((5,))},
    ]
    weight_map, total = {}, 0
    names = [f"model-0000{i + 1}-of-00002.safetensors" for i in range(2)]
    for fname, tensors in zip(names, shard_tensors):
        (OUT / "sharded" / fname).write_bytes(save(tensors, metadata={"format": "pt"}))
        exp = {}
        for k, v in tensors.items():
            weight_map[k] = fname
            total += v.nbytes
            exp[k] = {"shape": list(v.shape), "dtype": "F32" if v.dtype == np.float32 else "F16",
                      "f32_bits": f32_bits(v.astype(np.float32))}
        expected["sharded/" + fname] = exp
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    (OUT / "sharded" / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")

    (OUT / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")


if __name__ == "__main__":
    main()
