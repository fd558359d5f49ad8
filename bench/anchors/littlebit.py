#!/usr/bin/env python3
"""Anchor: LittleBit (SamsungLabs/LittleBit, CC BY-NC 4.0) compressing and
distilling SmolLM2-135M-Instruct with its own layer code and loss, on
bitrank's training text and token budget, for the side-by-side of DESIGN §11.

Their code is imported from a checkout given on the command line, never
copied here. Used from it:
  quantization/utils/quant_util.py  apply_littlebit_patch (every nn.Linear but
                                    lm_head → LittleBitLinear, k/v with kv_factor)
  quantization/modules/littlebit.py LittleBitLinear: rank from eff_bit
                                    (_estimate_split_dim, multiple of 8), Dual-SVID
                                    init (svd_lowrank + rank-one |U|, |V|), residual
                                    path, eff_bit_actual (_compute_eff_bits)
  quantization/functions/binary.py  SmoothSign (sign forward, α·sech² backward)
  utils/utils.py                    prepare_model_for_training (freeze embed/head,
                                    input grads, gradient checkpointing)
Those modules need only torch, transformers and safetensors (transformers
requires the latter), so nothing is stubbed. Their `utils/utils.py` imports
nothing and is loaded by file path, so their `utils` folder cannot clash with
another top-level `utils`. Not imported: main.py (deepspeed, GPUtil, datasets)
and utils/kd_utils.py (transformers.Trainer, which wants accelerate); what
they do is restated below, naming the lines it follows:
  - loss (kd_utils.py KDTrainer.compute_loss): KL(teacher ‖ student) on the
    logits with reduction "batchmean" (summed over positions and vocabulary,
    divided by the number of windows) + l2l_loss_scale · Σ_layers MSE of
    hidden_states[1:] (mean over elements);
  - training (main.py get_training_arguments, transformers' Trainer
    defaults): bf16 autocast, AdamW (β 0.9/0.999, ε 1e-8, no weight
    decay), gradient-norm clip 1.0, linear warmup over ceil(ratio·steps)
    steps then cosine to 0; student and teacher loaded in bf16 (the
    LittleBit factors come out of the SVD in f32 and stay f32).
Differences, all in LittleBit's favour or neutral: windows come in order
from the token file (theirs: 2048-token blocks, shuffled); no labels are
passed, so the model does not compute its own (discarded) CE loss; the
teacher is a plain module, not a DeepSpeed engine; the loss is taken in f32.

Perplexity is `bitrank eval`'s: windows of T tokens (--eval-seq-len; default
the training length) in order, each predicting
its tokens 1..T−1 from their prefixes, exp(Σ NLL / predictions).

bpw: their rank formula counts per path s·(m+n) sign bits + 16·s for the
merged rank scale + 16·(m+n) for the row/column scales (bf16), i.e. the same
count as bitrank's with f16 scales; printed per projection, over all the
projections, and over the whole model (embedding and norms at 16 bits). The
file their save would write (sign rows padded to 32 bits, u2 and v1 kept
apart) is a little larger: "as saved".

Run on the GPU machine (tools/gpu/gpu_littlebit.sh); --device cpu only as a
smoke test of the script (its timings mean nothing)."""
import argparse
import copy
import importlib.util
import json
import math
import os
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from anchor_eval import perplexity, read_ids, sync  # noqa: E402  (beside this file)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--littlebit-src", required=True, help="a checkout of SamsungLabs/LittleBit")
    p.add_argument("--gguf", required=True, help="SmolLM2-135M-Instruct.Q4_1.gguf (needs the gguf package)")
    p.add_argument("--train-ids", required=True, help="`bitrank tokenize --split train` output")
    p.add_argument("--eval-ids", required=True, help="`bitrank tokenize --split eval` output")
    p.add_argument("--eff-bit", type=float, default=1.0, help="LittleBit's bpw target (1.0, 0.55, ...)")
    p.add_argument("--residual", type=int, choices=(0, 1), default=1, help="1: two paths (their --residual True)")
    p.add_argument("--kv-factor", type=float, default=1.0)
    p.add_argument("--min-split-dim", type=int, default=8)
    p.add_argument("--seq-len", type=int, default=512)
    p.add_argument("--batch", type=int, default=4, help="windows per step")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--tokens", type=int, default=0, help="token budget; overrides --steps when > 0")
    p.add_argument("--lr", type=float, default=4e-5, help="their README's value (main.py default: 2e-5)")
    p.add_argument("--warmup-ratio", type=float, default=0.02, help="their README's value (main.py: 0.03)")
    p.add_argument("--max-grad-norm", type=float, default=1.0, help="transformers' Trainer default")
    p.add_argument("--l2l-loss-scale", type=float, default=10.0)
    p.add_argument("--base-dtype", choices=("bf16", "f32"), default="bf16",
                   help="dtype of teacher and student before patching (theirs: bf16)")
    p.add_argument("--eval-windows", type=int, default=0, help="first N evaluation windows (0: all)")
    p.add_argument("--eval-seq-len", type=int, default=0,
                   help="tokens per evaluation window (0: --seq-len); bitrank compress evaluates on 512")
    p.add_argument("--eval-batch", type=int, default=8)
    p.add_argument("--seed", type=int, default=42, help="their main.py default")
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--device", default="cuda", help="cuda; cpu only to smoke-test the script")
    p.add_argument("--out", required=True, help="JSON summary")
    return p.parse_args()


def load_littlebit(src):
    src = os.path.abspath(src)
    if not os.path.isfile(os.path.join(src, "quantization", "modules", "littlebit.py")):
        sys.exit(f"littlebit.py: {src} is not a LittleBit checkout (no quantization/modules/littlebit.py)")
    sys.path.insert(0, src)
    # This order, as their main.py: importing quantization.modules first runs into a circular import.
    from quantization.utils import apply_littlebit_patch
    from quantization.modules import LittleBitLinear

    spec = importlib.util.spec_from_file_location("littlebit_train_utils", os.path.join(src, "utils", "utils.py"))
    train_utils = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(train_utils)
    try:
        commit = subprocess.run(["git", "-C", src, "rev-parse", "HEAD"], capture_output=True, text=True,
                                check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = None
    return apply_littlebit_patch, LittleBitLinear, train_utils.prepare_model_for_training, commit



def kd_loss(student_out, teacher_out, l2l_scale):
    """utils/kd_utils.py KDTrainer.compute_loss, in f32."""
    kd = F.kl_div(F.log_softmax(student_out.logits.float(), dim=-1), F.softmax(teacher_out.logits.float(), dim=-1),
                  reduction="batchmean")
    l2l = sum(F.mse_loss(s.float(), t.float())
              for s, t in zip(student_out.hidden_states[1:], teacher_out.hidden_states[1:]))
    return kd + l2l_scale * l2l, kd, l2l


def cosine_with_warmup(warmup, total):
    """transformers.get_cosine_schedule_with_warmup (num_cycles 0.5) as a LambdaLR factor."""
    def factor(step):
        if step < warmup:
            return step / max(1, warmup)
        progress = (step - warmup) / max(1, total - warmup)
        return max(0.0, 0.5 * (1.0 + math.cos(math.pi * progress)))
    return factor




def bpw_report(student, teacher, LittleBitLinear):
    """Bits per weight of the patched projections, by their formula and as their save would store them."""
    kinds, bits, saved, weights = {}, 0.0, 0, 0
    for name, m in student.named_modules():
        if not isinstance(m, LittleBitLinear):
            continue
        a, b, s = m.in_features, m.out_features, m.split_dim
        paths = 2 if m.residual else 1
        layer_bits = m.eff_bit_actual * a * b  # _compute_eff_bits
        # pack_weights: U [b, s] and V [s, a] as rows of 32-bit words; u1, u2, v1, v2 in bf16.
        layer_saved = paths * (b * 32 * math.ceil(s / 32) + s * 32 * math.ceil(a / 32) + 16 * (b + 2 * s + a))
        k = kinds.setdefault(name.rsplit(".", 1)[-1], {"in": a, "out": b, "rank": s, "paths": paths, "count": 0,
                                                       "bpw": layer_bits / (a * b),
                                                       "bpw_as_saved": layer_saved / (a * b)})
        k["count"] += 1
        bits, saved, weights = bits + layer_bits, saved + layer_saved, weights + a * b
    # named_parameters lists the tied embedding / head once.
    total = sum(p.numel() for _, p in teacher.named_parameters())
    dense = total - weights
    return {"per_projection": kinds, "projection_weights": weights, "projections_bpw": bits / weights,
            "projections_bpw_as_saved": saved / weights, "dense_params_16bit": dense,
            "whole_model_bpw": (bits + 16 * dense) / total, "whole_model_bpw_as_saved": (saved + 16 * dense) / total}


def main():
    args = parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import transformers
    from transformers import AutoModelForCausalLM

    transformers.utils.logging.disable_progress_bar()  # the GGUF loader's bars would flood the log

    apply_littlebit_patch, LittleBitLinear, prepare_model_for_training, commit = load_littlebit(args.littlebit_src)
    device = torch.device(args.device)
    torch.manual_seed(args.seed)  # svd_lowrank draws its test matrices from it
    T, B = args.seq_len, args.batch
    TE = args.eval_seq_len if args.eval_seq_len > 0 else T
    steps = math.ceil(args.tokens / (B * T)) if args.tokens > 0 else args.steps
    base_dtype = torch.bfloat16 if args.base_dtype == "bf16" else torch.float32

    t0 = time.perf_counter()
    d, f = os.path.split(os.path.abspath(args.gguf))
    teacher = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32)
    teacher.config.use_cache = False
    vocab = teacher.config.vocab_size
    train_ids, eval_ids = read_ids(args.train_ids, vocab), read_ids(args.eval_ids, vocab)
    n_train = len(train_ids) // T
    if n_train < B:
        sys.exit(f"littlebit.py: {args.train_ids} holds {n_train} windows of {T}, fewer than one step's {B}")

    ppl = {}
    teacher.to(device).eval()
    ppl["teacher_f32"] = perplexity(teacher, eval_ids, TE, args.eval_windows, args.eval_batch, device, False)
    print(f"teacher f32 ppl {ppl['teacher_f32']['ppl']:.4f}", file=sys.stderr)
    teacher.to("cpu")

    # Student as main.py's load_student_model: base weights in bf16 on the CPU, their training
    # preparation, then the patch (its SVDs run on the GPU when there is one), then to the device.
    student = copy.deepcopy(teacher).to(base_dtype)
    student.config.use_cache = False
    prepare_model_for_training(student)
    quant_args = argparse.Namespace(quant_func="SmoothSign", quant_mod="LittleBitLinear",
                                    residual=bool(args.residual), split_dim=1024, eff_bit=args.eff_bit,
                                    kv_factor=args.kv_factor, min_split_dim=args.min_split_dim, model_id="")
    t_patch = time.perf_counter()
    student = apply_littlebit_patch(student, quant_args, do_train=True)
    patch_s = time.perf_counter() - t_patch
    student.to(device).train()
    teacher.to(base_dtype).to(device).eval()
    for p in teacher.parameters():
        p.requires_grad = False
    bpw = bpw_report(student, teacher, LittleBitLinear)
    print(f"LittleBit patch {patch_s:.1f} s; projections {bpw['projections_bpw']:.4f} bpw "
          f"(as saved {bpw['projections_bpw_as_saved']:.4f}), whole model {bpw['whole_model_bpw']:.4f}",
          file=sys.stderr)

    ppl["teacher"] = perplexity(teacher, eval_ids, TE, args.eval_windows, args.eval_batch, device, True)
    ppl["student_init"] = perplexity(student, eval_ids, TE, args.eval_windows, args.eval_batch, device, True)
    load_s = time.perf_counter() - t0

    params = [p for p in student.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=args.lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
    warmup = math.ceil(steps * args.warmup_ratio)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, cosine_with_warmup(warmup, steps))
    windows = train_ids[:n_train * T].view(n_train, T).to(device)

    sync(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    step_s, losses = [], []
    for step in range(steps):
        t_step = time.perf_counter()
        x = windows[torch.arange(step * B, step * B + B) % n_train]  # in order, wrapping around
        with torch.autocast(device.type, dtype=torch.bfloat16):
            with torch.no_grad():
                t_out = teacher(input_ids=x, output_hidden_states=True, use_cache=False)
            s_out = student(input_ids=x, output_hidden_states=True, use_cache=False)
        loss, kd, l2l = kd_loss(s_out, t_out, args.l2l_loss_scale)
        del t_out, s_out
        loss.backward()
        if args.max_grad_norm > 0:
            torch.nn.utils.clip_grad_norm_(params, args.max_grad_norm)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        sync(device)
        step_s.append(time.perf_counter() - t_step)
        losses.append([round(v, 5) for v in torch.stack([loss, kd, l2l]).tolist()])
        if (step + 1) % args.log_every == 0 or step + 1 == steps:
            print(f"step {step + 1}/{steps}  loss {losses[-1][0]:.4f} (kd {losses[-1][1]:.4f}, l2l {losses[-1][2]:.4f})"
                  f"  {B * T / step_s[-1]:.0f} tokens/s", file=sys.stderr)
    peak = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None
    train_s = sum(step_s)
    skip = min(5, steps - 1)  # the first steps include cuBLAS set-up and allocator growth
    steady = B * T * (steps - skip) / sum(step_s[skip:])

    ppl["student_trained"] = perplexity(student, eval_ids, TE, args.eval_windows, args.eval_batch, device, True)

    result = {
        "anchor": "LittleBit", "littlebit_commit": commit, "model": os.path.basename(args.gguf),
        "torch": torch.__version__, "transformers": transformers.__version__,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "args": vars(args), "steps": steps, "warmup_steps": warmup, "train_windows_available": n_train,
        "bpw": bpw, "ppl": ppl,
        "train": {"tokens": steps * B * T, "seconds": train_s, "tokens_per_s": steps * B * T / train_s,
                  "tokens_per_s_after_first_steps": steady, "first_steps_left_out": skip, "peak_gib": peak,
                  "load_and_init_seconds": load_s, "patch_seconds": patch_s,
                  "loss_kd_l2l_per_step": losses},
    }
    with open(args.out, "w") as fh:
        json.dump(result, fh, indent=1)

    bits_label = f"eff_bit {args.eff_bit}, {'2 paths' if args.residual else '1 path'}"
    print(f"\n== LittleBit anchor: {result['model']}, {bits_label}, {steps} steps x {B}x{T} tokens ==")
    print(f"{'projection':<12}{'in':>6}{'out':>6}{'rank':>6}{'count':>7}{'bpw':>9}{'as saved':>10}")
    for name, k in bpw["per_projection"].items():
        print(f"{name:<12}{k['in']:>6}{k['out']:>6}{k['rank']:>6}{k['count']:>7}{k['bpw']:>9.4f}"
              f"{k['bpw_as_saved']:>10.4f}")
    print(f"all projections {bpw['projections_bpw']:.4f} bpw (as saved {bpw['projections_bpw_as_saved']:.4f});"
          f" whole model {bpw['whole_model_bpw']:.4f} (as saved {bpw['whole_model_bpw_as_saved']:.4f})")
    n_eval = ppl["teacher"]["windows"]
    print(f"ppl over {n_eval} eval windows of {TE}: teacher f32 {ppl['teacher_f32']['ppl']:.5g}, teacher "
          f"{args.base_dtype} {ppl['teacher']['ppl']:.5g}, student init {ppl['student_init']['ppl']:.5g}, "
          f"trained {ppl['student_trained']['ppl']:.5g}")
    print(f"train: {steps * B * T} tokens in {train_s:.1f} s = {steps * B * T / train_s:.0f} tokens/s "
          f"({steady:.0f} after the first {skip}); loss {losses[0][0]:.3f} -> {losses[-1][0]:.3f}; "
          + (f"peak {peak:.2f} GiB" if peak is not None else "peak n/a (cpu)"))


if __name__ == "__main__":
    main()
