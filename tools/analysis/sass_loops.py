#!/usr/bin/env python3
"""The loops of one kernel in a SASS listing, with their instruction mix.

  cuobjdump -sass gdn_chunk.cubin > F      (nvcc ... -cubin -arch=sm_90a)
  tools/analysis/sass_loops.py F state_fwd_kernel
  tools/analysis/sass_loops.py F --pairs            every kernel's global and shared accesses by
                                                    width, and the 4-byte ones that come in pairs
  tools/analysis/sass_loops.py F --wgmma            every kernel's HGMMA, WARPGROUP.ARRIVE and .DEPBAR,
                                                    and R2UR (a wgmma descriptor built in ordinary
                                                    registers, moved to a uniform one before each use)

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
hold the two binaries (unpack them, put nvdisasm's folder on PATH);
`nvdisasm -c F.cubin` lists the same instructions (its `.text.NAME:` lines
name the kernels) and is read as well.

With --wgmma, what ptxas did around the warpgroup products: an R2UR before
most HGMMA says a descriptor depends on a value the compiler does not know
to be warp-uniform (threadIdx.x / 128: taken through __shfl_sync it is, and
the descriptors stay in uniform registers); an ARRIVE per loop trip is the
warpgroup.arrive that ptxas reports injecting (its info C7519) where a k
loop is not unrolled whole.
"""
import collections
import re
import sys


def kernel_of(line):
    """The kernel a listing line opens (cuobjdump's `Function : NAME`,
    nvdisasm's `.text.NAME:`), its short name where it has one, else None."""
    m = re.search(r"Function : (\S+)", line) or re.match(r"\s*\.text\.(\S+):", line)
    if not m:
        return None
    short = re.search(r"([A-Za-z_]+_kernel)E", m.group(1))
    return short.group(1) if short else m.group(1)


def instructions(path, kernel):
    """[(address, opcode, text)] of one kernel; a branch to a label
    (nvdisasm's `.L_x_N`) gets the label's address written into its text."""
    out, current, labels, pending = [], None, {}, []
    for line in open(path, errors="replace"):
        name = kernel_of(line)
        if name:
            current = name
            continue
        if current != kernel:
            continue
        label = re.match(r"\s*(\.L_\w+):", line)
        if label:
            pending.append(label.group(1))
            continue
        m = re.match(r"\s+/\*([0-9a-f]{4,})\*/\s+(.*?);", line)
        if m:
            addr, text = int(m.group(1), 16), m.group(2).strip()
            for l in pending:
                labels[l] = addr
            pending = []
            toks = text.split()
            op = toks[1] if toks[0].startswith("@") else toks[0]
            out.append((addr, op.split(".")[0], text))
    return [(a, op, re.sub(r"`\((\.L_\w+)\)", lambda t: hex(labels.get(t.group(1), a + 1)), text))
            for a, op, text in out]


ACCESS = re.compile(r"^(@!?U?P\S+\s+)?(LDG|STG|LDS|STS)((?:\.[A-Z0-9_]+)*)\s+(.*)$")


def split_pairs(path):
    """{kernel: (Counter of op.width, Counter of op with split pairs)}."""
    kernels, current, recent = {}, None, []
    for line in open(path, errors="replace"):
        name = kernel_of(line)
        if name:
            current, recent = name, []
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


WGMMA_OPS = ("HGMMA", "WARPGROUP.ARRIVE", "WARPGROUP.DEPBAR", "R2UR")


def wgmma_counts(path):
    """{kernel: Counter of WGMMA_OPS}, for the kernels that hold an HGMMA."""
    kernels, current = {}, None
    for line in open(path, errors="replace"):
        name = kernel_of(line)
        if name:
            current = name
            kernels.setdefault(current, collections.Counter())
            continue
        m = re.match(r"\s+/\*[0-9a-f]{4,}\*/\s+(.*?);", line)
        if m and current is not None:
            text = m.group(1).strip()
            op = text.split()[1] if text.startswith("@") else text.split()[0]
            for w in WGMMA_OPS:
                if op == w or op.startswith(w + "."):
                    kernels[current][w] += 1
    return {k: c for k, c in kernels.items() if c["HGMMA"]}


def main():
    if len(sys.argv) == 3 and sys.argv[2] == "--wgmma":
        for kernel, c in wgmma_counts(sys.argv[1]).items():
            print(f"{kernel}: " + " ".join(f"{w}={c[w]}" for w in WGMMA_OPS))
        return
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
            mix = " ".join(f"{k}={body[k]}" for k in ("HMMA", "HGMMA", "LDSM", "LDGSTS", "STS", "IMAD", "R2UR"))
            print(f"  loop {lo:#x}..{addr:#x}: {n} instructions, {mix}")


if __name__ == "__main__":
    main()
