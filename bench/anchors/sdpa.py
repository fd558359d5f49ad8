#!/usr/bin/env python3
"""Anchor: PyTorch scaled_dot_product_attention forward + backward (causal GQA)
at the shapes of `bitrank bench --device cuda`'s attention cases, in fp32 and
bf16. Prints one line per case: name, shape, median ms over CUDA-event-timed
repetitions. Run on the GPU machine (PyTorch is in its image)."""
import sys

import torch
import torch.nn.functional as F

from cuda_timing import time_ms  # this folder: the anchors' shared timer



def case(windows, T, heads, kv_heads, hd, dtype):
    g = torch.Generator(device="cuda").manual_seed(0)
    q = torch.randn(windows, heads, T, hd, device="cuda", dtype=dtype, generator=g, requires_grad=True)
    k = torch.randn(windows, kv_heads, T, hd, device="cuda", dtype=dtype, generator=g, requires_grad=True)
    v = torch.randn(windows, kv_heads, T, hd, device="cuda", dtype=dtype, generator=g, requires_grad=True)
    do = torch.randn(windows, heads, T, hd, device="cuda", dtype=dtype, generator=g)

    def step():
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        out.backward(do)

    return time_ms(step)


def main():
    print(f"# torch {torch.__version__}, {torch.cuda.get_device_name(0)}")
    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 means fp32
    for windows, T in ((8, 512), (1, 4096)):
        for dtype, name in ((torch.float32, "fp32"), (torch.bfloat16, "bf16")):
            ms = case(windows, T, 24, 4, 256, dtype)
            print(f"sdpa_{name}\t{windows}x{T} h=24/4 hd=256\t{ms:.3f}")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
