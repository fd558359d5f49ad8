#!/usr/bin/env python3
"""Where a dense Llama GGUF's residual stream takes its massive activations,
and which MLP neurons make them: the teacher-side facts behind the
block-wise losses of `bitrank compress` (docs/results.md, "Massive
activations").

    pip install --no-deps gguf numpy      (numpy is usually there already)
    bitrank tokenize --split train -o train.i32
    python3 tools/analysis/massive_activations.py MODEL.gguf train.i32 [--windows 4] [--seq-len 256]

A plain f64 numpy forward of the model (RMSNorm, rotary attention with
grouped KV heads, SwiGLU MLP; the GGUF's tensors dequantised by the gguf
package) over the first WINDOWS windows of SEQ_LEN ids, each window a new
sequence as in bitrank's training windows. Prints, per block: the mean
square of its output over all tokens, the median and the largest token
rms (and at which position), and the three largest |value| channels of the
first window. Then, for each block whose MLP writes more than 100 into one
channel of the first token: that MLP's largest contributions (neuron,
contribution, activation), and per neuron its gate on the first token
against the largest gate on any other token (the margin that keeps it off
there). A forward in numpy, not bitrank's: the check is independent of the
code it explains.
"""
import argparse

import numpy as np

try:
    import gguf
except ImportError:
    raise SystemExit("massive_activations.py: needs the gguf package (pip install --no-deps gguf)")


def field(reader, name):
    f = reader.fields.get(name)
    if f is None:
        raise SystemExit(f"massive_activations.py: the GGUF has no '{name}'")
    return f.parts[f.data[0]].tolist()[0]


def load(path):
    r = gguf.GGUFReader(path)
    arch = bytes(r.fields["general.architecture"].parts[-1]).decode()
    if arch != "llama":
        raise SystemExit(f"massive_activations.py: {path} is '{arch}', not a dense llama model")
    cfg = {k: field(r, f"llama.{k}") for k in ("block_count", "attention.head_count", "attention.head_count_kv",
                                                 "attention.layer_norm_rms_epsilon", "rope.freq_base")}
    weights = {}
    for t in r.tensors:
        a = gguf.quants.dequantize(t.data, t.tensor_type).astype(np.float64)
        weights[t.name] = a.reshape([int(x) for x in reversed(t.shape.tolist())])
    return cfg, weights


def forward(cfg, W, ids):
    """Yields (block, attention output, MLP output, MLP activations, gate, x after the block) per block."""
    L, H, KVH = cfg["block_count"], cfg["attention.head_count"], cfg["attention.head_count_kv"]
    eps, base = cfg["attention.layer_norm_rms_epsilon"], cfg["rope.freq_base"]
    T = len(ids)
    x = W["token_embd.weight"][ids]
    d = x.shape[1]
    hd = d // H
    ang = np.arange(T)[:, None] * (base ** (-np.arange(0, hd, 2) / hd))[None]
    cos, sin = np.cos(ang)[:, None], np.sin(ang)[:, None]
    mask = np.triu(np.full((T, T), -np.inf), 1)

    def rms(v, w):
        return v / np.sqrt((v * v).mean(-1, keepdims=True) + eps) * w

    def rope(v):  # the halves rotated together, as Hugging Face's llama does
        a, b = v[..., :hd // 2], v[..., hd // 2:]
        return np.concatenate([a * cos - b * sin, a * sin + b * cos], -1)

    for b in range(L):
        p = f"blk.{b}."
        h = rms(x, W[p + "attn_norm.weight"])
        q = rope((h @ W[p + "attn_q.weight"].T).reshape(T, H, hd))
        k = np.repeat(rope((h @ W[p + "attn_k.weight"].T).reshape(T, KVH, hd)), H // KVH, 1)
        v = np.repeat((h @ W[p + "attn_v.weight"].T).reshape(T, KVH, hd), H // KVH, 1)
        s = np.einsum("thd,shd->hts", q, k) / np.sqrt(hd) + mask
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        attn = np.einsum("hts,shd->thd", s, v).reshape(T, d) @ W[p + "attn_output.weight"].T
        x = x + attn
        h = rms(x, W[p + "ffn_norm.weight"])
        gate, up = h @ W[p + "ffn_gate.weight"].T, h @ W[p + "ffn_up.weight"].T
        act = gate / (1 + np.exp(-gate)) * up
        mlp = act @ W[p + "ffn_down.weight"].T
        x = x + mlp
        yield b, attn, mlp, act, gate, x


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("gguf")
    ap.add_argument("ids", help="int32 token ids (bitrank tokenize)")
    ap.add_argument("--windows", type=int, default=4)
    ap.add_argument("--seq-len", type=int, default=256)
    a = ap.parse_args()
    cfg, W = load(a.gguf)
    ids = np.fromfile(a.ids, dtype=np.int32)
    T = a.seq_len
    if len(ids) < a.windows * T:
        raise SystemExit(f"massive_activations.py: {a.ids} holds {len(ids)} ids, fewer than {a.windows}×{T}")
    per_block, first = {}, {}
    for w in range(a.windows):
        for b, attn, mlp, act, gate, x in forward(cfg, W, ids[w * T:(w + 1) * T]):
            tok = np.sqrt((x * x).mean(-1))
            per_block.setdefault(b, []).append(((x * x).mean(), np.median(tok), tok.max(), int(tok.argmax())))
            if w == 0:
                first[b] = (np.abs(x).max(0), attn, mlp, act, gate, W[f"blk.{b}.ffn_down.weight"])
    print(f"{a.gguf}: {a.windows} windows of {T} ids")
    print("block  mean square  median token rms  largest token rms (position per window)  largest |x| channels of window 0")
    for b, rows in sorted(per_block.items()):
        ch = first[b][0]
        top = np.argsort(ch)[-3:][::-1]
        print(f"{b:5d}  {np.mean([r[0] for r in rows]):11.2f}  {np.mean([r[1] for r in rows]):16.2f}  "
              f"{max(r[2] for r in rows):17.2f} ({', '.join(str(r[3]) for r in rows)})  "
              + ", ".join(f"{int(c)}: {ch[c]:.1f}" for c in top))
    for b in sorted(first):
        _, attn, mlp, act, gate, down = first[b]
        c = int(np.abs(mlp[0]).argmax())
        if abs(mlp[0, c]) <= 100:
            continue
        contrib = act[0] * down[c]
        top = np.argsort(-np.abs(contrib))[:3]
        print(f"\nblock {b}: channel {c} of the first token gets {mlp[0, c]:.1f} from the MLP, {attn[0, c]:.1f} from "
              f"attention; the MLP gives it at most {np.abs(mlp[1:, c]).max():.1f} on any other token")
        for i in top:
            print(f"  neuron {i}: contribution {contrib[i]:.1f} (activation {act[0, i]:.1f}); gate on the first token "
                  f"{gate[0, i]:.1f}, largest gate on any other token {gate[1:, i].max():.2f}")


if __name__ == "__main__":
    main()
