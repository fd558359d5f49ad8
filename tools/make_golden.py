#!/usr/bin/env python3
"""Golden logits from Hugging Face transformers, for bitrank's model tests.

Runs on the GPU machine (it has PyTorch and transformers with the qwen3_5 and
qwen3_next modules; this machine has neither). Everything is computed in f32
on the CPU with eager attention, so the figures do not depend on the card.

  tools/make_golden.py hybrid OUT     tiny random-weight Qwen3.5 and Qwen3-Next
                                      checkpoints written by transformers' own
                                      classes + their logits:
                                        OUT/qwen3_5/{config.json,model.safetensors,golden.json}
                                        OUT/qwen3_next/{...}
  tools/make_golden.py smollm2 GGUF OUT
                                      SmolLM2-135M-Instruct loaded by transformers'
                                      GGUF reader (needs the `gguf` package) on
                                      fixed prompts: OUT/smollm2/golden.json

The hybrid models share one set of weights: the Qwen3-Next checkpoint is the
Qwen3.5 one with its GDN projections regrouped into in_proj_qkvz / in_proj_ba
by the same rule transformers' Qwen3-Next un-groups them with, so a loader of
either layout must give the same logits. Shapes respect bitrank's op limits
(GDN and attention head dim 128, rotary 25 %), weights are bf16-representable
(saved as bf16, evaluated in f32), every parameter is perturbed from its
default init so that norms, gates and decays are all exercised.

golden.json: {"model": ..., "windows": W, "window": T, "tokens": [[...]...],
"logits": [[[f32 × V] × T] × W]} for the hybrid models (small vocabulary);
for SmolLM2 (vocabulary 49152) the log-sum-exp of every position over the
whole vocabulary and the logits at a fixed sample of ids plus each position's
top 8, as {"ids": [...], "values": [...]} per position.
"""
import json
import os
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

SEED = 1234
WINDOWS, WINDOW = 2, 24


def perturb(model, seed):
    """Moves every parameter away from its default init, reproducibly."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in sorted(model.named_parameters()):
            noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
            if p.ndim >= 2 and "conv" not in name:
                fan_in = p.shape[-1]
                p.copy_(noise / fan_in**0.5)
            elif "conv" in name:
                p.copy_(0.4 * noise)
            elif "A_log" in name:
                p.copy_(torch.log(torch.rand(p.shape, generator=gen) * 4 + 0.5))
            else:  # norm gains (1 + w or w), dt_bias
                p.add_(0.2 * noise)
            p.copy_(p.to(torch.bfloat16).to(torch.float32))


def hybrid_config(kind):
    common = dict(
        vocab_size=256,
        hidden_size=128,
        intermediate_size=192,
        num_hidden_layers=4,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=128,
        rms_norm_eps=1e-6,
        max_position_embeddings=256,
        tie_word_embeddings=False,
        linear_conv_kernel_dim=4,
        linear_key_head_dim=128,
        linear_value_head_dim=128,
        linear_num_key_heads=1,
        linear_num_value_heads=2,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
        partial_rotary_factor=0.25,
    )
    if kind == "qwen3_5":
        from transformers import Qwen3_5TextConfig

        return Qwen3_5TextConfig(**common)
    from transformers import Qwen3NextConfig

    return Qwen3NextConfig(**common, mlp_only_layers=list(range(4)))


def qwen3_next_state(state35, cfg):
    """Qwen3.5 GDN projections regrouped as Qwen3-Next stores them.

    Qwen3-Next's fix_query_key_value_ordering views in_proj_qkvz's output as
    [Hk][q(dk) k(dk) v(Hv/Hk·dv) z(Hv/Hk·dv)] and in_proj_ba's as
    [Hk][b(Hv/Hk) a(Hv/Hk)]; build those rows from the separate matrices.
    """
    hk, hv = cfg.linear_num_key_heads, cfg.linear_num_value_heads
    dk, dv, g = cfg.linear_key_head_dim, cfg.linear_value_head_dim, hv // hk
    out = {}
    for name, t in state35.items():
        if ".linear_attn.in_proj_qkv." in name:
            base = name.replace("in_proj_qkv.weight", "")
            qkv = t
            z = state35[base + "in_proj_z.weight"]
            b = state35[base + "in_proj_b.weight"]
            a = state35[base + "in_proj_a.weight"]
            q, k, v = qkv[: hk * dk], qkv[hk * dk : 2 * hk * dk], qkv[2 * hk * dk :]
            rows, ba = [], []
            for i in range(hk):
                rows += [q[i * dk : (i + 1) * dk], k[i * dk : (i + 1) * dk],
                         v[i * g * dv : (i + 1) * g * dv], z[i * g * dv : (i + 1) * g * dv]]
                ba += [b[i * g : (i + 1) * g], a[i * g : (i + 1) * g]]
            out[base + "in_proj_qkvz.weight"] = torch.cat(rows)
            out[base + "in_proj_ba.weight"] = torch.cat(ba)
        elif any(s in name for s in (".in_proj_z.", ".in_proj_b.", ".in_proj_a.")):
            continue
        else:
            out[name] = t
    return out


def tokens_for(vocab, seed):
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (WINDOWS, WINDOW), generator=gen)


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, separators=(",", ":"))


def hybrid(out):
    from transformers import Qwen3_5ForCausalLM, Qwen3NextForCausalLM

    torch.manual_seed(SEED)
    cfg35 = hybrid_config("qwen3_5")
    m35 = Qwen3_5ForCausalLM(cfg35).float().eval()
    perturb(m35, SEED)
    ids = tokens_for(cfg35.vocab_size, SEED + 1)
    with torch.no_grad():
        logits35 = m35(input_ids=ids).logits.float()

    cfgn = hybrid_config("qwen3_next")
    mn = Qwen3NextForCausalLM(cfgn).float().eval()
    mn.load_state_dict(qwen3_next_state(m35.state_dict(), cfgn), strict=True)
    with torch.no_grad():
        logitsn = mn(input_ids=ids).logits.float()
    diff = (logitsn - logits35).norm() / logits35.norm()
    print(f"qwen3_next vs qwen3_5 logits, same weights: rel {diff:.3e}")

    for name, model, logits in (("qwen3_5", m35, logits35), ("qwen3_next", mn, logitsn)):
        d = os.path.join(out, name)
        os.makedirs(d, exist_ok=True)
        model.to(torch.bfloat16).save_pretrained(d, safe_serialization=True)
        model.float()
        write_json(os.path.join(d, "golden.json"), {
            "model": name, "transformers": __import__("transformers").__version__,
            "torch": torch.__version__, "windows": WINDOWS, "window": WINDOW,
            "tokens": ids.tolist(), "logits": logits.tolist()})
        print(f"{name}: logits {tuple(logits.shape)} rms {logits.pow(2).mean().sqrt():.4f} -> {d}")


PROMPTS = [
    "The quick brown fox jumps over the lazy dog.",
    "def fibonacci(n):\n    return n if n < 2 else fibonacci(n - 1) + fibonacci(n - 2)",
    "Binary low-rank layers store two sign matrices and three scale vectors per path.",
]


def smollm2(gguf_path, out):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    d, f = os.path.split(os.path.abspath(gguf_path))
    tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, torch_dtype=torch.float32).eval()
    gen = torch.Generator().manual_seed(SEED)
    vocab = model.config.vocab_size
    sample = sorted(set(torch.randperm(vocab, generator=gen)[:256].tolist()))
    prompts = []
    for text in PROMPTS:
        ids = tok(text, add_special_tokens=False)["input_ids"]
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([ids])).logits[0].double()
        lse = torch.logsumexp(logits, dim=-1)
        rows = []
        for t in range(len(ids)):
            top = torch.topk(logits[t], 8).indices.tolist()
            keep = sorted(set(sample) | set(top))
            rows.append({"ids": keep, "values": [float(logits[t, i]) for i in keep]})
        prompts.append({"text": text, "tokens": ids, "lse": lse.tolist(), "logits": rows})
        print(f"smollm2: {len(ids)} tokens, lse[0] {lse[0]:.4f}, argmax[0] {int(logits[0].argmax())}")
    os.makedirs(os.path.join(out, "smollm2"), exist_ok=True)
    write_json(os.path.join(out, "smollm2", "golden.json"), {
        "model": "SmolLM2-135M-Instruct.Q4_1.gguf (dequantised by transformers)",
        "transformers": __import__("transformers").__version__, "torch": torch.__version__,
        "prompts": prompts})


if __name__ == "__main__":
    torch.set_num_threads(8)
    if len(sys.argv) == 3 and sys.argv[1] == "hybrid":
        hybrid(sys.argv[2])
    elif len(sys.argv) == 4 and sys.argv[1] == "smollm2":
        smollm2(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
