#!/usr/bin/env python3
"""The loops of one kernel in a SASS listing, with their instruction mix.

  cuobjdump -sass gdn_chunk.cubin > F      (nvcc ... -cubin -arch=sm_90a)
  tools/sass_loops.py F state_fwd_kernel

Prints the kernel's static instruction count and, for every backward branch
(a loop), its address range, its length and how many HMMA, LDSM, LDGSTS,
STS and IMAD it holds — enough to count a chunk loop's instructions per warp
(the body once, plus each inner loop's length per extra trip) and to see
what else than the tensor-core instructions it issues. cuobjdump and its
nvdisasm come with the CUDA toolkit (on the GPU machine); on a machine
without one, the PyPI wheels nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm
hold the two binaries (unpack them, put nvdisasm's folder on PATH).
"""
import collections
import re
import sys


def instructions(path, kernel):
    out, current = [], None
    for line in open(path, errors="replace"):
        m = re.search(r"Function : \S*?([A-Za-z_]+_kernel)E", line)
        if m:
            current = m.group(1)
            continue
        if current != kernel:
            continue
        m = re.match(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?);", line)
        if m:
            text = m.group(2).strip()
            toks = text.split()
            op = toks[1] if toks[0].startswith("@") else toks[0]
            out.append((int(m.group(1), 16), op.split(".")[0], text))
    return out


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    ins = instructions(sys.argv[1], sys.argv[2])
    if not ins:
        sys.exit(f"no kernel named {sys.argv[2]} in {sys.argv[1]}")
    print(f"{sys.argv[2]}: {len(ins)} instructions")
    for addr, op, text in ins:
        target = re.search(r"0x([0-9a-f]+)", text) if op == "BRA" else None
        if target and int(target.group(1), 16) < addr:
            lo = int(target.group(1), 16)
            body = collections.Counter(o for a, o, _ in ins if lo <= a <= addr)
            n = sum(body.values())
            mix = " ".join(f"{k}={body[k]}" for k in ("HMMA", "LDSM", "LDGSTS", "STS", "IMAD"))
            print(f"  loop {lo:#x}..{addr:#x}: {n} instructions, {mix}")


if __name__ == "__main__":
    main()
