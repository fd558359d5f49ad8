#!/usr/bin/env python3
"""The CUDA backend's ratios against its anchors, with the targets of the
CUDA-backend issue, from the outputs of one GPU run:

  tools/analysis/bench_ratios.py BENCH [ANCHORS ...]

BENCH: the output of `bitrank bench --device cuda` (its table: op, shape,
ms, ...). ANCHORS: files of `name<TAB>shape<TAB>ms` lines, as printed by
bench/anchors/sdpa.py and fla_gdn.py ('#' lines and refused cases are
skipped). Cases join on the shape string, which both sides print alike.
Prints one line per case (ours, the anchor, ours / anchor, the target and
whether it is met), the ones without a figure on either side left out.
"""
import re
import sys

# op prefix in the bench table → (anchor name, anchor label, target kind, target value)
#   "ratio": ours / anchor ≤ value;  "ms": ours ≤ value ms
CASES = [
    ("blr fwd+bwd+sign", "cuBLAS f16: six BLR GEMMs", "six cuBLAS f16 GEMMs", "ratio", 1.3),
    ("attention fwd+bwd", "sdpa_fp32", "PyTorch SDPA fp32", "ratio", 1.0),
    ("gdn fwd+bwd", "fla_fwd_bwd", "FLA chunk, bf16", "gdn", None),
    # Like for like: our op is the layer's whole core (conv, norms, gates, delta rule, gated
    # RMSNorm), FLA's chunk_gated_delta_rule only its middle; no target of its own.
    ("gdn fwd+bwd", "fla_layer_fwd_bwd", "FLA layer, bf16", "info", None),
]
GDN_MS_TARGET = {"8x512": 2.0}  # the seed's shape: an absolute target; other shapes: no slower than FLA


def bench_rows(path):
    """{(op, shape): ms} from a bitrank bench table."""
    rows = {}
    for line in open(path, encoding="utf-8"):
        m = re.match(r"^(\S.*?)\s{2,}(\S.*?)\s{2,}([0-9.]+)\s", line)
        if m and not line.startswith("op "):
            rows[(m.group(1).strip(), m.group(2).strip())] = float(m.group(3))
    return rows


def anchor_rows(paths):
    """{(name, shape): ms}; a name like 'fla_fwd_bwd (guard bypassed)' keys as 'fla_fwd_bwd'."""
    rows = {}
    for path in paths:
        for line in open(path, encoding="utf-8"):
            parts = line.rstrip("\n").split("\t")
            if line.startswith("#") or len(parts) != 3:
                continue
            try:
                ms = float(parts[2])
            except ValueError:
                continue  # refused, or an error message
            rows[(parts[0].split(" (")[0].strip(), parts[1].strip())] = ms
    return rows


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    ours = bench_rows(sys.argv[1])
    anchors = anchor_rows(sys.argv[2:])
    anchors.update({k: v for k, v in ours.items() if k[0].startswith("cuBLAS")})
    print("== ratios against the anchors (ours / anchor; targets of the CUDA backend issue) ==")
    for prefix, anchor, label, kind, value in CASES:
        for (op, shape), ms in ours.items():
            if op != prefix:
                continue
            a = anchors.get((anchor, shape))
            if kind == "gdn":
                window = shape.split()[0]
                if window in GDN_MS_TARGET:
                    target, met = f"≤ {GDN_MS_TARGET[window]:.1f} ms", ms <= GDN_MS_TARGET[window]
                else:
                    target, met = "≤ 1× FLA", a is not None and ms <= a
            elif kind == "info":
                target, met = "(none)", None
            else:
                target, met = f"≤ {value:g}×", a is not None and ms / a <= value
            ratio = f"{ms / a:5.2f}×" if a else "    –"
            other = f"{label:21} {a:8.3f} ms" if a else f"{label:21} (no figure)"
            print(f"{op:18} {shape:33} {ms:8.3f} ms   {other}   {ratio}   target {target:10} "
                  f"{'' if met is None else 'met' if met else 'not met'}")


if __name__ == "__main__":
    main()
