#!/usr/bin/env python3
"""The SASS instructions that hold a kernel's stall samples, from ncu's
source page exported as CSV (`ncu -i REP --page source --print-source sass
--csv`; tools/gpu/gpu_source_profile.sh writes it).

Prints the samples by opcode, and the instructions
holding the most samples with every per-reason stall column that is not
zero on that row (all samples; the not-issued columns are left out).
Written to tolerate the page's layout: the header is the first row that
names an address or source column; the sample column is the one named
"... (All Samples)", or else the first that mentions sampling.
With --memory, prints instead each memory instruction kind's L2 sectors
and shared wavefronts per execution against ncu's ideal (rows grouped by
opcode and by those ratios; e.g. a 16-byte copy at 24 sectors where 16
are ideal).
  tools/analysis/ncu_source_table.py PAGE.csv [--top N] [--memory]
"""
import csv
import re
import sys
from collections import defaultdict


def number(text):
    text = (text or "").replace(",", "").strip()
    try:
        return float(text)
    except ValueError:
        return None


def main():
    args = sys.argv[1:]
    if not args:
        sys.exit(__doc__)
    top = 30
    if "--top" in args:
        top = int(args[args.index("--top") + 1])
    rows = list(csv.reader(open(args[0], newline="", errors="replace")))
    header_at = next((i for i, r in enumerate(rows)
                      if any(c.strip() in ("Address", "Source", "# Address") for c in r)), None)
    if header_at is None:
        sys.exit(f"{args[0]}: no header row naming Address or Source (first rows: {rows[:3]})")
    header = [c.strip() for c in rows[header_at]]
    body = [r for r in rows[header_at + 1:] if len(r) == len(header)]
    src = next(i for i, c in enumerate(header) if c == "Source" or c.endswith("Source"))
    addr = next((i for i, c in enumerate(header) if "Address" in c), None)
    all_col = next((i for i, c in enumerate(header) if "All Samples" in c), None)
    if all_col is None:
        all_col = next((i for i, c in enumerate(header) if re.search("sampl", c, re.I)), None)
    if all_col is None:
        sys.exit("no sampling column among: " + " | ".join(header))
    # per-reason columns: names with 'stall' or a pcsamp metric, other than the totals
    reasons = [i for i, c in enumerate(header)
               if i != all_col and re.search(r"stall|pcsamp", c, re.I) and "Samples)" not in c
               and "Not Issued" not in c]
    if "--memory" in args:
        memory(header, body, src)
        return
    total = sum(number(r[all_col]) or 0 for r in body)
    if total <= 0:
        sys.exit(f"no samples in column '{header[all_col]}'")
    by_op = defaultdict(float)
    for r in body:
        op = r[src].split()[0] if r[src].split() else "?"
        if op.startswith("@"):
            op = r[src].split()[1] if len(r[src].split()) > 1 else op
        by_op[op.split(".")[0]] += number(r[all_col]) or 0
    print(f"samples ({header[all_col]}): {total:.0f} over {len(body)} instructions")
    print("by opcode: " + ", ".join(f"{k} {100 * v / total:.1f}%"
                                    for k, v in sorted(by_op.items(), key=lambda kv: -kv[1])[:14]))
    ranked = sorted(body, key=lambda r: -(number(r[all_col]) or 0))[:top]
    for r in ranked:
        s = number(r[all_col]) or 0
        detail = ", ".join(f"{header[i]} {number(r[i]):.0f}" for i in reasons
                           if number(r[i]))
        where = r[addr] if addr is not None else ""
        print(f"{100 * s / total:5.1f}%  {where:>6}  {r[src].strip()[:70]:<70}  {detail[:160]}")


def memory(header, body, src):
    col = {c: i for i, c in enumerate(header)}
    need = ["Instructions Executed", "L2 Theoretical Sectors Global", "L2 Theoretical Sectors Global Ideal",
            "L1 Wavefronts Shared", "L1 Wavefronts Shared Ideal"]
    missing = [c for c in need if c not in col]
    if missing:
        sys.exit(f"no memory columns {missing} on this page")
    groups = defaultdict(float)
    for r in body:
        ex = number(r[col[need[0]]]) or 0
        g, gi, w, wi = (number(r[col[c]]) or 0 for c in need[1:])
        if ex == 0 or not (g or w):
            continue
        words = r[src].split()
        op = words[1] if words[0].startswith("@") and len(words) > 1 else words[0]
        groups[(op, round(g / ex, 1), round(gi / ex, 1), round(w / ex, 1), round(wi / ex, 1))] += ex
    tot = defaultdict(float)
    for r in body:
        for c in need[1:]:
            tot[c] += number(r[col[c]]) or 0
    print(f"global sectors {tot[need[1]] / 1e6:.2f} M (ideal {tot[need[2]] / 1e6:.2f} M), "
          f"shared wavefronts {tot[need[3]] / 1e6:.2f} M (ideal {tot[need[4]] / 1e6:.2f} M)")
    print(f"  {'instruction':<26} {'sectors/ideal':>14} {'wavefronts/ideal':>17} {'executed':>10}")
    for (op, g, gi, w, wi), ex in sorted(groups.items(), key=lambda kv: -kv[1]):
        print(f"  {op:<26} {g:>6.1f} / {gi:<6.1f} {w:>7.1f} / {wi:<7.1f} {ex:>10.0f}")


if __name__ == "__main__":
    main()
