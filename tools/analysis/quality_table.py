#!/usr/bin/env python3
"""The quality-versus-budget table and plot of docs/results.md, from the
summaries the runs wrote: `bitrank compress` (its stdout JSON; for a run
with an end-to-end stage, the summary of that stage, which carries the
block-wise stage under "stages"), bench/anchors/nanoquant.py and
bench/anchors/littlebit.py (their --out JSON).

    python3 tools/analysis/quality_table.py [LABEL=]SUMMARY.json[+SUMMARY.json ...] ... [--svg F] [--title T]

A run that went on from another's output (`--init`, the e2e stage of an
older build) is one row: its summaries joined by "+", first to last; its
tokens and seconds are the sum, its perplexity and bpw the last one's.
LABEL names the row (default: the method).

Each row: the method, bpw of the projections and of the whole model, the
distinct text tokens the run trained or calibrated on, the training tokens
(model tokens through the student: bitrank's block-wise tokens, each of
which passes every block once, plus its end-to-end tokens; LittleBit's
steps × batch × length; NanoQuant's calibration tokens × its block epochs),
perplexity of the teacher and of the student on the same
windows, their ratio, and the seconds of training (bitrank: its stages'
training loops; NanoQuant: block reconstruction and model-level KD;
LittleBit: its training loop), evaluations and initialisation left out. The table is markdown on stdout; --svg also writes
the ratio against the training tokens, both axes log10, one series per
method and bpw (self-contained SVG, no fonts or scripts).
"""
import argparse
import json
import math
import sys


def bitrank_row(s, path):
    p, a = s["perplexity"], s["accounting"]
    parts = [st["training"] for st in s.get("stages", [])] + [s["training"]]
    # model tokens: every block-wise token passes each block once; an e2e token the whole model
    tokens = sum(t["model_tokens_per_s"] * t["seconds"] for t in parts)
    o = s.get("options", {})
    return dict(method="bitrank", bpw=a["blr"]["bpw"], model_bpw=a["model"]["bpw"],
                distinct=o.get("max_text_tokens") or None, tokens=round(tokens),
                seconds=sum(t["seconds"] for t in parts), teacher=p["teacher"]["ppl"], student=p["student"]["ppl"],
                windows=p["teacher"]["windows"], device=s.get("hardware", s.get("device", "?")), file=path)


def nanoquant_row(s, path):
    c, q = s["calibration"], s["their_config"]
    epochs = (q["nonfact_epochs"] if q.get("tune_nonfact") else 0) + (q["fact_epochs"] if q.get("tune_fact") else 0)
    return dict(method="NanoQuant", bpw=s["bpw"]["projections_bpw"], model_bpw=s["bpw"]["whole_model_bpw"],
                distinct=c["tokens"], tokens=c["tokens"] * max(epochs, 1),
                seconds=s["seconds"]["block_recon_s"] + s["seconds"].get("model_kd_s", 0.0),
                teacher=s["ppl"]["teacher_bf16"]["ppl"] if "teacher_bf16" in s["ppl"] else s["ppl"]["teacher"]["ppl"],
                student=s["ppl"]["compressed"]["ppl"], windows=s["ppl"]["compressed"]["windows"],
                device=s["device"], file=path)


def littlebit_row(s, path):
    b, ppl = s["bpw"], s["ppl"]
    return dict(method="LittleBit", bpw=b["projections_bpw"], model_bpw=b["whole_model_bpw"], distinct=None,
                tokens=s["train"]["tokens"], seconds=s["train"]["seconds"], teacher=ppl["teacher"]["ppl"],
                student=ppl["student_trained"]["ppl"], windows=ppl["student_trained"]["windows"],
                device=s["device"], file=path)


def one_row(path):
    try:
        with open(path) as fh:
            s = json.load(fh)
    except (OSError, ValueError) as e:
        sys.exit(f"quality_table: cannot read {path}: {e}")
    kind = s.get("anchor")
    if kind == "NanoQuant":
        return nanoquant_row(s, path)
    if kind == "LittleBit":
        return littlebit_row(s, path)
    if "accounting" in s and "perplexity" in s:
        return bitrank_row(s, path)
    sys.exit(f"quality_table: {path} is neither a bitrank compress summary nor an anchor's")


def row_of(arg):
    label, _, paths = arg.rpartition("=")
    parts = [one_row(p) for p in paths.split("+")]
    row = dict(parts[-1])
    row["tokens"] = sum(p["tokens"] for p in parts)
    row["seconds"] = sum(p["seconds"] for p in parts)
    row["distinct"] = max((p["distinct"] for p in parts if p["distinct"]), default=None)
    if label:
        row["method"] = label
    return row


def fmt_tokens(n):
    return "–" if not n else f"{n / 1e6:.2f}M" if n >= 1e5 else f"{n:,}"


def table(rows):
    print("| method | bpw (projections / model) | distinct tokens | training tokens | training time | ppl teacher | ppl student |"
          " × teacher | windows | device |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        mb = f"{r['model_bpw']:.3f}" if r["model_bpw"] else "–"
        print(f"| {r['method']} | {r['bpw']:.3f} / {mb} | {fmt_tokens(r['distinct'])} | {fmt_tokens(r['tokens'])} |"
              f" {r['seconds']:.0f} s | {r['teacher']:.3f} | {r['student']:.4g} | {r['student'] / r['teacher']:.2f} |"
              f" {r['windows']} | {r['device']} |")


def svg(rows, path, title):
    W, H, L, R, T, B = 760, 440, 70, 190, 36, 50
    pts = [(math.log10(r["tokens"]), math.log10(r["student"] / r["teacher"]), r) for r in rows if r["tokens"]]
    if not pts:
        sys.exit("quality_table: no row has training tokens to plot")
    x0, x1 = math.floor(min(p[0] for p in pts)), math.ceil(max(p[0] for p in pts))
    y0, y1 = 0.0, max(math.log10(3), max(p[1] for p in pts) * 1.05)
    X = lambda v: L + (v - x0) / max(x1 - x0, 1e-9) * (W - L - R)
    Y = lambda v: H - B - (v - y0) / max(y1 - y0, 1e-9) * (H - T - B)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{L}" y="20" font-size="14">{title}</text>']
    for e in range(x0, x1 + 1):
        out.append(f'<line x1="{X(e):.1f}" y1="{T}" x2="{X(e):.1f}" y2="{H - B}" stroke="#ddd"/>'
                   f'<text x="{X(e):.1f}" y="{H - B + 16}" text-anchor="middle">1e{e}</text>')
    for v in (1, 1.5, 2, 3, 5, 10, 20, 50, 100):
        if math.log10(v) <= y1:
            out.append(f'<line x1="{L}" y1="{Y(math.log10(v)):.1f}" x2="{W - R}" y2="{Y(math.log10(v)):.1f}" '
                       f'stroke="#ddd"/><text x="{L - 6}" y="{Y(math.log10(v)) + 4:.1f}" text-anchor="end">{v}×</text>')
    out.append(f'<text x="{(L + W - R) / 2}" y="{H - 12}" text-anchor="middle">training tokens (log)</text>'
               f'<text x="16" y="{(T + H - B) / 2}" transform="rotate(-90 16 {(T + H - B) / 2})" '
               f'text-anchor="middle">perplexity ÷ teacher\'s (log)</text>')
    colours = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"]
    series = {}
    for x, y, r in pts:
        series.setdefault(f"{r['method']}, {r['bpw']:.2f} bpw", []).append((x, y))
    for i, (name, ps) in enumerate(sorted(series.items())):
        c = colours[i % len(colours)]
        ps.sort()
        if len(ps) > 1:
            out.append(f'<polyline fill="none" stroke="{c}" points="' +
                       " ".join(f"{X(x):.1f},{Y(y):.1f}" for x, y in ps) + '"/>')
        out += [f'<circle cx="{X(x):.1f}" cy="{Y(y):.1f}" r="4" fill="{c}"><title>{name}: {10 ** y:.2f}×</title></circle>'
                for x, y in ps]
        out.append(f'<circle cx="{W - R + 16}" cy="{T + 10 + 18 * i}" r="4" fill="{c}"/>'
                   f'<text x="{W - R + 26}" y="{T + 14 + 18 * i}">{name}</text>')
    out.append("</svg>")
    with open(path, "w") as fh:
        fh.write("\n".join(out) + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("summaries", nargs="+")
    ap.add_argument("--svg")
    ap.add_argument("--title", default="SmolLM2-135M-Instruct: perplexity against the training budget")
    a = ap.parse_args()
    rows = [row_of(p) for p in a.summaries]
    table(rows)
    if a.svg:
        svg(rows, a.svg, a.title)


if __name__ == "__main__":
    main()
