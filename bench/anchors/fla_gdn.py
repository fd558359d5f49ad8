#!/usr/bin/env python3
"""Anchor: FLA's chunk_gated_delta_rule (fla-org/flash-linear-attention, MIT,
run from source) forward + backward in bf16 at the shapes of
`bitrank bench --device cuda`'s GDN cases: q, k [B, T, 16, 128],
v [B, T, 48, 128], log-decay g and beta [B, T, 48], l2-norm in kernel.

Rows fla_fwd / fla_fwd_bwd: chunk_gated_delta_rule alone. Rows fla_layer_fwd /
fla_layer_fwd_bwd: the whole Gated DeltaNet core that `gdn fwd+bwd` times, as
FLA's own GatedDeltaNet layer runs it (its fused q|k|v conv path): FLA's
Triton causal_conv1d (width 4, SiLU) over x [B, T, 10240] = q|k|v channels,
split into heads, chunk_gated_delta_rule as above, then FLA's gated RMSNorm
rms_norm_gated(o, z) = rmsnorm(o) * weight * silu(z) over each (token, v-head)'s
128 values, z [B, T, 48, 128]. Gradients reach x, z, g and beta; the conv and
norm weights do not require grad (FLA's backward kernels still compute their
gradients, which autograd then drops).

FLA's gated backward refuses Triton >= 3.4 and < 3.7.1 on Hopper (a guard
for a known wrong-result bug, its issue #640). With --bypass-guard the
script disables that guard to time the kernels anyway (both fwd_bwd rows);
the times are then marked "guard bypassed" and say nothing about FLA's
correctness there.

Each fwd_bwd repetition clears the leaves' grads first, so that no
accumulating add is timed (the chunk row accumulated them before
2026-12-02's second session, and its figures until then include those adds).

Usage: FLA_SRC=<checkout of flash-linear-attention> python3 fla_gdn.py [--bypass-guard] [--shape BxT]
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



def report(name, shape, fwd, leaves, d_out, bypass):
    """Times fwd and fwd + backward (the leaves' grads cleared first each time,
    so that no accumulating add is timed) and prints the two rows."""

    def fwd_bwd():
        for t in leaves:
            t.grad = None
        fwd().backward(d_out)

    fwd_ms = time_ms(fwd)
    try:
        fb_ms = f"{time_ms(fwd_bwd):.3f}"
    except RuntimeError as err:  # the Triton guard
        fb_ms = f"refused: {str(err).splitlines()[0][:80]}"
    tag = " (guard bypassed)" if bypass else ""
    print(f"{name}_fwd\t{shape} hk=16 hv=48 d=128\t{fwd_ms:.3f}")
    print(f"{name}_fwd_bwd{tag}\t{shape} hk=16 hv=48 d=128\t{fb_ms}")


def main():
    bypass = "--bypass-guard" in sys.argv
    import fla.ops.common.chunk_o as chunk_o  # noqa: E402
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule  # noqa: E402
    # The layer's other two pieces (fla/modules/conv/causal_conv1d.py, fla/modules/fused_norm_gate.py).
    # They add no module or dependency: the line above already runs fla/modules/__init__.py (through
    # gated_delta_rule/chunk.py's fla.modules.l2norm), which imports both, einops included.
    from fla.modules.conv import causal_conv1d  # noqa: E402
    from fla.modules.fused_norm_gate import rms_norm_gated  # noqa: E402

    if bypass:
        chunk_o.TRITON_ABOVE_3_7_1 = True  # disables the version guard only
    import triton

    print(f"# torch {torch.__version__}, triton {triton.__version__}, {torch.cuda.get_device_name(0)}"
          + (", guard bypassed" if bypass else ""))
    shapes = ((8, 512), (1, 32768))
    if "--shape" in sys.argv:  # one of them, e.g. --shape 1x32768
        pick = sys.argv[sys.argv.index("--shape") + 1]
        shapes = tuple(s for s in shapes if f"{s[0]}x{s[1]}" == pick)
        if not shapes:
            sys.exit(f"--shape: 8x512 or 1x32768, got {pick}")
    for B, T in shapes:
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

        report("fla", f"{B}x{T}", fwd, (q, k, v, gate, beta), do, bypass)

        # fla_layer: conv + SiLU, split into heads, the delta rule, gated RMSNorm.
        x = torch.randn(B, T, 10240, device="cuda", dtype=dt, generator=g, requires_grad=True)
        # Conv weight [D, W]: column 3 weighs x[t], column 0 x[t-3]; norm weight: one [128] for all heads.
        conv_w = torch.randn(10240, 4, device="cuda", dtype=dt, generator=g) * 0.5
        z = torch.randn(B, T, 48, 128, device="cuda", dtype=dt, generator=g, requires_grad=True)
        norm_w = 1 + 0.1 * torch.randn(128, device="cuda", dtype=dt, generator=g)
        lgate = (-torch.rand(B, T, 48, device="cuda", generator=g) * 0.5).requires_grad_(True)
        lbeta = torch.rand(B, T, 48, device="cuda", generator=g).to(dt).requires_grad_(True)

        def layer_fwd():
            # backend='triton' goes straight to FLA's CausalConv1dFunction (Triton kernels); the
            # causal_conv1d CUDA package is only reached with backend='cuda' or 'mix'.
            y, _ = causal_conv1d(x, conv_w, activation="silu", backend="triton")
            q_, k_, v_ = (t.unflatten(-1, (-1, 128)) for t in y.split([2048, 2048, 6144], dim=-1))
            o = chunk_gated_delta_rule(q_, k_, v_, lgate, lbeta, use_qk_l2norm_in_kernel=True)[0]
            # Normalises over the last dim (it reshapes to [B*T*48, 128]): per (token, v-head).
            return rms_norm_gated(o, z, norm_w, None, activation="silu")

        report("fla_layer", f"{B}x{T}", layer_fwd, (x, z, lgate, lbeta), do, bypass)


if __name__ == "__main__":
    main()
