#!/usr/bin/env python3
"""The SASS instructions that hold a kernel's stall samples, from ncu's
source page exported as CSV (`ncu -i REP --page source --print-source sass
--csv`; tools/gpu_source_profile.sh writes it).

Prints the column names found, the samples by opcode, and the instructions
holding the most samples with every per-reason stall column that is not
zero on that row (all samples; the not-issued columns are left out).
Written to tolerate the page's layout: the header is the first row that
names an address or source column; the sample column is the one named
"... (All Samples)", or else the first that mentions sampling.
  tools/ncu_source_table.py PAGE.csv [--top N]
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
    print("columns:", " | ".join(header))
    src = next(i for i, c in enumerate(header) if c == "Source" or c.endswith("Source"))
    addr = next((i for i, c in enumerate(header) if "Address" in c), None)
    all_col = next((i for i, c in enumerate(header) if "All Samples" in c), None)
    if all_col is None:
        all_col = next((i for i, c in enumerate(header) if re.search("sampl", c, re.I)), None)
    if all_col is None:
        sys.exit("no sampling column")
    # per-reason columns: names with 'stall' or a pcsamp metric, other than the totals
    reasons = [i for i, c in enumerate(header)
               if i != all_col and re.search(r"stall|pcsamp", c, re.I) and "Samples)" not in c
               and "Not Issued" not in c]
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


if __name__ == "__main__":
    main()
