#!/usr/bin/env python3
"""The loops of one kernel in a SASS listing, with their instruction mix.

  cuobjdump -sass gdn_chunk.cubin > F      (nvcc ... -cubin -arch=sm_90a)
  tools/sass_loops.py F state_fwd_kernel
  tools/sass_loops.py F --pairs            every kernel's global and shared accesses by
                                           width, and the 4-byte ones that come in pairs

Prints the kernel's static instruction count and, for every backward branch
(a loop), its address range, its length and how many HMMA, LDSM, LDGSTS,
STS and IMAD it holds — enough to count a chunk loop's instructions per warp
(the body once, plus each inner loop's length per extra trip) and to see
what else than the tensor-core instructions it issues. With --pairs it
counts, per kernel, the loads and stores by width and the unpredicated
4-byte ones at offsets o and o + 4 (o a multiple of 8) from one base
register: an 8-byte access the compiler split, which writes or reads half
of every 32-byte sector twice (NVVM split accumulator pairs' float2
stores so in the GDN state passes; an explicit st.global.v2 keeps them
whole). A fallback for tails that the compiler put behind a branch
rather than predicates shows as pairs too (load_split_rows' scalar path in
the grads kernels): read the listing before acting on a count. cuobjdump and its
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


ACCESS = re.compile(r"^(@!?U?P\S+\s+)?(LDG|STG|LDS|STS)((?:\.[A-Z0-9_]+)*)\s+(.*)$")


def split_pairs(path):
    """{kernel: (Counter of op.width, Counter of op with split pairs)}."""
    kernels, current, recent = {}, None, []
    for line in open(path, errors="replace"):
        m = re.search(r"Function : \S*?([A-Za-z_]+_kernel)E", line) or re.search(r"Function : (\S+)", line)
        if m:
            current, recent = m.group(1), []
            kernels.setdefault(current, (collections.Counter(), collections.Counter()))
            continue
        m = re.match(r"\s+/\*[0-9a-f]{4,}\*/\s+(.*?);", line)
        if not m or current is None:
            continue
        a = ACCESS.match(m.group(1).strip())
        if not a:
            continue
        pred, op, mods, operands = a.groups()
        width = next((w for w in (".128", ".64") if w in mods), ".32")
        kernels[current][0][op + width] += 1
        addr = re.search(r"\[(R\w+)(?:\.64)?(?:\+(0x[0-9a-f]+))?\]", operands)
        if width != ".32" or pred or not addr:
            continue
        base, off = addr.group(1), int(addr.group(2) or "0", 16)
        if off % 8 == 4 and (op, base, off - 4) in recent:
            kernels[current][1][op] += 1
        recent = (recent + [(op, base, off)])[-16:]
    return kernels


def main():
    if len(sys.argv) == 3 and sys.argv[2] == "--pairs":
        for kernel, (widths, pairs) in split_pairs(sys.argv[1]).items():
            if not widths:
                continue
            w = " ".join(f"{k}={widths[k]}" for k in sorted(widths))
            p = " ".join(f"{k}={pairs[k]}" for k in sorted(pairs)) or "none"
            print(f"{kernel}: {w}; split 8-byte pairs: {p}")
        return
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
