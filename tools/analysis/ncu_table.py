#!/usr/bin/env python3
"""Summarise an ncu CSV log (ncu --csv --log-file F --metrics gpu__time_duration.sum[,
sm__warps_active.avg.pct_of_peak_sustained_active][,smsp__average_warps_issue_stalled_
<reason>_per_issue_active.ratio, ...][,dram__bytes.sum] ...) as a short table. With stall metrics, each
launch also lists its three largest stall reasons (warps stalled per issued instruction).

  tools/analysis/ncu_table.py F            one line per launch, in launch order, and the total
  tools/analysis/ncu_table.py F --group    one line per kernel name: launches, total, mean, share,
                                           largest total first
  tools/analysis/ncu_table.py F --line     one pass on one line (the launches up to the first kernel's next
                                           launch): name (without _kernel) and µs
  tools/analysis/ncu_table.py --stall-metrics   the stall metrics' names, comma-separated
"""
import csv
import re
import sys
from collections import OrderedDict


STALL = "smsp__average_warps_issue_stalled_"
# The stall reasons asked for by tools/gpu/gpu_gdn.sh --kernels.
STALL_METRICS = ",".join(STALL + r + "_per_issue_active.ratio" for r in (
    "barrier", "long_scoreboard", "short_scoreboard", "mio_throttle", "math_pipe_throttle", "wait",
    "not_selected", "lg_throttle", "dispatch_stall", "no_instruction", "branch_resolving", "membar"))


def launches(path):
    rows = list(csv.reader(line for line in open(path) if line.startswith('"')))
    if not rows:
        sys.exit(f"{path}: no ncu CSV rows (did ncu profile any kernel?)")
    h = rows[0]
    k, m, u, v, i = (h.index(x) for x in ("Kernel Name", "Metric Name", "Metric Unit", "Metric Value", "ID"))
    out = OrderedDict()
    for r in rows[1:]:
        name = re.sub(r"\(.*", "", r[k].replace("(anonymous namespace)", "")).split("::")[-1]
        name = name.split("<")[0].split()[-1] if name.strip() else r[k]
        rec = out.setdefault(r[i], {"name": name, "us": 0.0, "warps": None, "stalls": {}, "mb": None})
        value = float(r[v].replace(",", ""))
        if r[m] == "gpu__time_duration.sum":
            scale = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}
            if r[u] not in scale:
                sys.exit(f"{path}: unknown time unit '{r[u]}'")
            rec["us"] = value * scale[r[u]]
        elif r[m] == "dram__bytes.sum":
            scale = {"byte": 1e-6, "Kbyte": 1e-3, "Mbyte": 1.0, "Gbyte": 1e3}
            if r[u] not in scale:
                sys.exit(f"{path}: unknown byte unit '{r[u]}'")
            rec["mb"] = value * scale[r[u]]
        elif r[m].startswith("sm__warps_active"):
            rec["warps"] = value
        elif r[m].startswith(STALL):
            rec["stalls"][r[m][len(STALL):].replace("_per_issue_active.ratio", "")] = value
    return list(out.values())


def main():
    if sys.argv[1:] == ["--stall-metrics"]:  # the metric list, for ncu --metrics
        print(STALL_METRICS)
        return
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    recs = launches(sys.argv[1])
    total = sum(r["us"] for r in recs)
    if "--line" in sys.argv[2:]:
        # one pass: up to the first kernel's next launch (a variant with fewer launches
        # than ncu's -c count otherwise shows the next pass's first kernels too)
        again = next((i for i, r in enumerate(recs) if i > 0 and r["name"] == recs[0]["name"]), len(recs))
        recs = recs[:again]
        total = sum(r["us"] for r in recs)
        print(" ".join(f"{r['name'].removesuffix('_kernel')} {r['us']:.0f}" for r in recs) + f" = {total:.0f} us")
        return
    if "--group" in sys.argv[2:]:
        groups = OrderedDict()
        for r in recs:
            g = groups.setdefault(r["name"], [0, 0.0])
            g[0] += 1
            g[1] += r["us"]
        print(f"  {'kernel':34s} {'launches':>8s} {'total us':>10s} {'mean us':>9s} {'share':>6s}")
        for name, (n, us) in sorted(groups.items(), key=lambda kv: -kv[1][1]):
            print(f"  {name[:34]:34s} {n:8d} {us:10.1f} {us / n:9.1f} {100 * us / total:5.1f}%")
    else:
        for r in recs:
            warps = f"   active warps {r['warps']:5.1f}%" if r["warps"] is not None else ""
            if r["mb"] is not None:  # MB per µs = TB/s
                warps += f"   DRAM {r['mb']:7.1f} MB {r['mb'] / max(r['us'], 1e-9):5.2f} TB/s"
            top = sorted(r["stalls"].items(), key=lambda kv: -kv[1])
            top = [kv for kv in top if kv[1] >= 0.05] if "--all-stalls" in sys.argv[2:] else top[:3]
            stalls = "   " + ", ".join(f"{k} {v:.2f}" for k, v in top) if top else ""
            print(f"  {r['name'][:30]:30s} {r['us']:9.1f} us{warps}{stalls}")
    mb = sum(r["mb"] or 0.0 for r in recs)
    print(f"  {'total':30s} {total:9.1f} us over {len(recs)} launches" + (f", DRAM {mb:.1f} MB" if mb else ""))


if __name__ == "__main__":
    main()
