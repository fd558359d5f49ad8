#!/usr/bin/env python3
"""Anchor: FLA's chunk_gated_delta_rule (fla-org/flash-linear-attention, MIT,
run from source) forward + backward in bf16 at the shapes of
`bitrank bench --device cuda`'s GDN cases: q, k [B, T, 16, 128],
v [B, T, 48, 128], log-decay g and beta [B, T, 48], l2-norm in kernel.

FLA's gated backward refuses Triton >= 3.4 and < 3.7.1 on Hopper (a guard
for a known wrong-result bug, its issue #640). With --bypass-guard the
script disables that guard to time the kernels anyway; the times are then
marked "guard bypassed" and say nothing about FLA's correctness there.

Usage: FLA_SRC=<checkout of flash-linear-attention> python3 fla_gdn.py [--bypass-guard]
Prints: name, shape, median ms (CUDA events, eager, after warm-up)."""
import os
import sys
import types

import torch

from cuda_timing import time_ms  # this folder: the anchors' shared timer

# Import FLA's kernels without its package __init__ (which pulls in its
# model zoo and their dependencies): a bare package object pointing at the
# source folder.
_src = os.path.abspath(os.environ.get("FLA_SRC", "."))
_pkg = types.ModuleType("fla")
_pkg.__path__ = [os.path.join(_src, "fla")]
with open(os.path.join(_src, "fla", "__init__.py")) as _f:  # its utils read fla.__version__
    _pkg.__version__ = next((ln.split("=")[1].strip().strip("\"'") for ln in _f if ln.startswith("__version__")), "0")
sys.modules["fla"] = _pkg



def main():
    bypass = "--bypass-guard" in sys.argv
    import fla.ops.common.chunk_o as chunk_o  # noqa: E402
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule  # noqa: E402

    if bypass:
        chunk_o.TRITON_ABOVE_3_7_1 = True  # disables the version guard only
    import triton

    print(f"# torch {torch.__version__}, triton {triton.__version__}, {torch.cuda.get_device_name(0)}"
          + (", guard bypassed" if bypass else ""))
    for B, T in ((8, 512), (1, 32768)):
        g = torch.Generator(device="cuda").manual_seed(0)
        dt = torch.bfloat16
        q = torch.randn(B, T, 16, 128, device="cuda", dtype=dt, generator=g, requires_grad=True)
        k = torch.randn(B, T, 16, 128, device="cuda", dtype=dt, generator=g, requires_grad=True)
        v = torch.randn(B, T, 48, 128, device="cuda", dtype=dt, generator=g, requires_grad=True)
        gate = (-torch.rand(B, T, 48, device="cuda", generator=g) * 0.5).requires_grad_(True)
        beta = torch.rand(B, T, 48, device="cuda", generator=g).to(dt).requires_grad_(True)
        do = torch.randn(B, T, 48, 128, device="cuda", dtype=dt, generator=g)

        def fwd():
            return chunk_gated_delta_rule(q, k, v, gate, beta, use_qk_l2norm_in_kernel=True)[0]

        def fwd_bwd():
            fwd().backward(do)

        fwd_ms = time_ms(lambda: fwd())
        try:
            fb_ms = f"{time_ms(fwd_bwd):.3f}"
        except RuntimeError as err:  # the Triton guard
            fb_ms = f"refused: {str(err).splitlines()[0][:80]}"
        tag = " (guard bypassed)" if bypass else ""
        print(f"fla_fwd\t{B}x{T} hk=16 hv=48 d=128\t{fwd_ms:.3f}")
        print(f"fla_fwd_bwd{tag}\t{B}x{T} hk=16 hv=48 d=128\t{fb_ms}")


if __name__ == "__main__":
    main()
