#!/usr/bin/env python3
"""Writes the GGUF test fixtures under tests/data/gguf/.

Needs the PyPI packages `gguf` and `numpy` (pip install gguf numpy). CI does
not run this script: it only reads the committed files.

For each tensor type the reader dequantizes (F32, F16, BF16, Q8_0, Q4_0, Q4_1,
Q4_K, Q6_K) it writes `<type>.gguf` holding one tensor `weight` of numpy
shape (2, 512) (GGUF dims [512, 2]: two rows, several blocks per row, two
super-blocks per row for the k-quants) and `<type>.f32.bin`, the values
gguf's own Python dequantization (gguf.quants.dequantize) gives for it, as
raw little-endian f32 in row-major order.

The weights are fixed pseudo-random draws (seeded). Types the Python package
can quantize are quantized from normal draws; for Q4_K and Q6_K (no Python
quantizer) the blocks are random bytes with their f16 scales set to small
finite values, which exercises every bit of the quant fields.

`metadata.gguf` holds one key of every GGUF value type, an array of every
element type, alignment 64 and three tensors (F32 of two odd shapes and a
Q5_0 one, a type the reader knows but does not dequantize). The C++ test
repeats the same values. (The Python writer drops empty strings and empty
arrays; the C++ test writes those itself.)

Made with gguf 0.19.0 and numpy 2.4; the output is deterministic.
"""

import os
import sys

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf import GGUFValueType as V

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "data", "gguf")
ROWS, COLS = 2, 512


def raw_kquant_blocks(rng, qtype, n_blocks):
    """Random k-quant blocks with finite, modest f16 scales."""
    block_elems, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(n_blocks, block_bytes), dtype=np.uint8)
    if qtype == T.Q4_K:  # d, dmin at bytes 0..3
        raw[:, 0:2] = np.frombuffer(rng.uniform(1e-3, 2e-2, n_blocks).astype(np.float16).tobytes(), np.uint8).reshape(-1, 2)
        raw[:, 2:4] = np.frombuffer(rng.uniform(1e-3, 2e-2, n_blocks).astype(np.float16).tobytes(), np.uint8).reshape(-1, 2)
    elif qtype == T.Q6_K:  # d is the last two bytes
        raw[:, -2:] = np.frombuffer(rng.uniform(1e-4, 1e-3, n_blocks).astype(np.float16).tobytes(), np.uint8).reshape(-1, 2)
    else:
        raise ValueError(qtype)
    return raw


def tensor_bytes(rng, qtype):
    """(bytes as uint8 array shaped for the writer, expected f32 values (ROWS, COLS))."""
    w = rng.standard_normal((ROWS, COLS)).astype(np.float32)
    if qtype == T.F32:
        return w, w.copy()
    if qtype == T.F16:
        h = w.astype(np.float16)
        return h, h.astype(np.float32)
    if qtype in (T.Q4_K, T.Q6_K):
        block_elems, _ = gguf.GGML_QUANT_SIZES[qtype]
        raw = raw_kquant_blocks(rng, qtype, ROWS * COLS // block_elems).reshape(ROWS, -1)
    else:
        raw = gguf.quants.quantize(w, qtype)
    return raw, gguf.quants.dequantize(raw, qtype).astype(np.float32).reshape(ROWS, COLS)


def write_quant_fixture(rng, qtype):
    name = qtype.name.lower()
    path = os.path.join(OUT, f"{name}.gguf")
    data, expected = tensor_bytes(rng, qtype)
    w = gguf.GGUFWriter(path, "bitrank-test")
    w.add_string("general.name", f"{name} fixture")
    if data.dtype == np.uint8:
        w.add_tensor("weight", data, raw_dtype=qtype)  # shape from the byte shape
    else:
        w.add_tensor("weight", data)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    expected.astype("<f4").tofile(os.path.join(OUT, f"{name}.f32.bin"))
    # The reader must agree with the Python reader on what it wrote.
    r = gguf.GGUFReader(path)
    assert r.tensors[0].tensor_type == qtype and [int(x) for x in r.tensors[0].shape] == [COLS, ROWS]


def write_metadata_fixture(rng):
    path = os.path.join(OUT, "metadata.gguf")
    w = gguf.GGUFWriter(path, "bitrank-test")
    w.add_custom_alignment(64)
    w.add_uint8("test.u8", 200)
    w.add_int8("test.i8", -100)
    w.add_uint16("test.u16", 60000)
    w.add_int16("test.i16", -30000)
    w.add_uint32("test.u32", 4000000000)
    w.add_int32("test.i32", -2000000000)
    w.add_float32("test.f32", 0.15625)
    w.add_bool("test.bool_true", True)
    w.add_bool("test.bool_false", False)
    w.add_string("test.string", "héllo, GGUF ✓")
    w.add_uint64("test.u64", 18000000000000000000)
    w.add_int64("test.i64", -9000000000000000000)
    w.add_float64("test.f64", -2.5e-300)
    w.add_key_value("test.arr_u8", [0, 1, 255], V.ARRAY, sub_type=V.UINT8)
    w.add_key_value("test.arr_i8", [-128, 0, 127], V.ARRAY, sub_type=V.INT8)
    w.add_key_value("test.arr_u16", [0, 65535], V.ARRAY, sub_type=V.UINT16)
    w.add_key_value("test.arr_i16", [-32768, 32767], V.ARRAY, sub_type=V.INT16)
    w.add_key_value("test.arr_u32", [1, 4294967295], V.ARRAY, sub_type=V.UINT32)
    w.add_key_value("test.arr_i32", [-1, 2, -3, 4], V.ARRAY, sub_type=V.INT32)
    w.add_key_value("test.arr_f32", [1.5, -0.25, 1e-3], V.ARRAY, sub_type=V.FLOAT32)
    w.add_key_value("test.arr_bool", [True, False, True], V.ARRAY, sub_type=V.BOOL)
    w.add_key_value("test.arr_string", ["a", "", "Ġthe", "<|im_end|>"], V.ARRAY, sub_type=V.STRING)
    w.add_key_value("test.arr_u64", [0, 18446744073709551615], V.ARRAY, sub_type=V.UINT64)
    w.add_key_value("test.arr_i64", [-9223372036854775808, 9223372036854775807], V.ARRAY, sub_type=V.INT64)
    w.add_key_value("test.arr_f64", [3.25, -1e100], V.ARRAY, sub_type=V.FLOAT64)
    a = (np.arange(15, dtype=np.float32).reshape(3, 5) - 7) / 4  # GGUF dims [5, 3]
    b = np.array([1, -2, 3, -4, 5, -6, 7], dtype=np.float32) / 8  # GGUF dims [7]
    c = gguf.quants.quantize(rng.standard_normal((1, 32)).astype(np.float32), T.Q5_0)
    w.add_tensor("odd.a", a)
    w.add_tensor("odd.b", b)
    w.add_tensor("q5", c, raw_dtype=T.Q5_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    os.makedirs(OUT, exist_ok=True)
    rng = np.random.default_rng(20240611)
    for qtype in (T.F32, T.F16, T.BF16, T.Q8_0, T.Q4_0, T.Q4_1, T.Q4_K, T.Q6_K):
        write_quant_fixture(rng, qtype)
    write_metadata_fixture(rng)
    total = sum(os.path.getsize(os.path.join(OUT, f)) for f in os.listdir(OUT))
    print(f"wrote {OUT} ({total} bytes)", file=sys.stderr)


if __name__ == "__main__":
    main()
