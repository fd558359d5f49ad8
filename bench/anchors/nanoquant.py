#!/usr/bin/env python3
"""Anchor: NanoQuant (SamsungLabs/NanoQuant, Apache-2.0), the post-training
method whose output has bitrank's form (sign factors between per-row and
per-column scales), run with its own code on SmolLM2-135M-Instruct, bitrank's
calibration text and bitrank's evaluation windows, for the side-by-side of
DESIGN §11.

Their code is imported from a checkout given on the command line (the
folder holding src/nanoquant), never copied here. The pipeline is theirs, as
modules/hub.py NanoQuantModel.quantize_model runs it, with their defaults
(the NanoQuantConfigDataclass of modules/hub.py, the same as main.py's):
  utils/load_utils.py  load_model, twice: the model to compress and the teacher
                       (fp_model), bf16, sdpa, on the CPU, seqlen set on both
  core/importance.py   collect_stats (strategy "online": per-linear input and
                       output-gradient second moments, clipped; the loss is
                       cut_cross_entropy's linear_cross_entropy, the real package),
                       get_shrunk_stats (0.4), register_stats
  core/compress_model.py compress_block_recon: per block, per projection:
                       tune_nonfact, ADMM factorisation (core/admm_nq.py) into
                       NanoQuantLinear, tune_fact; then compress_model_recon
                       (model-level KD of the scales against the teacher's logits)
Ranks come from their utils.calculate_ranks (bits → rank, multiple of 32).

What is ours:
  - the model: read from the GGUF with transformers (f32), its tokenizer and
    generation config beside it, written as a Hugging Face folder (f32
    safetensors) in a scratch directory that their load_model then reads (so
    their loader, dtype and settings apply unchanged);
  - the calibration set: the first num_calib_samples × seqlen tokens of the
    training token file (default 128 × 2048 = 262,144, the set `bitrank
    compress --method ptq` calibrates on on CUDA), as the [N, seqlen] int64
    tensor that their get_calib_loader returns. Their get_calib_loader draws N
    indices WITH replacement from N prepared samples (about 63% distinct);
    --calib-resample passes our windows through it to do the same;
  - perplexity as `bitrank eval`: windows of --eval-seq-len (512) tokens in
    order, each predicting tokens 1..T−1, exp(Σ NLL / predictions), the first
    --eval-windows; of the f32 GGUF model, of their bf16 teacher (fp_model as
    their load_model makes it) and of the compressed model;
  - bpw, counted from the NanoQuantLinear modules' own tensors: one bit per
    element of U and V (checked to be exactly ±1), every other tensor of the
    module (scale_pre, scale_post, scale_mid, bias where present) at its stored
    width (bf16: 16 bits). Set beside their `bits` target and their rank
    formula, Paths·[rank·(a+b) + 16·(a+b)] bits. "As saved": the bytes of the
    module entries of their get_compressed_state_dict (signs packed into
    int32 words, rows padded to 32, plus int64 shape tensors). Whole model:
    the embedding (tied to the head, counted once) and norms at 16 bits.

Stubbed or replaced, and why it is safe (nothing on the compression path):
  - lm_eval (imported at module level by utils/eval_utils.py): only
    evaluate_model uses it (zero-shot harness), never called here. Stubbed
    only when the package is absent.
  - datasets (imported at module level by utils/data_utils.py): used by
    prepare_dataset, get_test_loaders, get_trainenc (downloads of wikitext /
    C4) and a dead branch of get_calib_loader; none is called here. Stubbed
    only when absent.
  - loguru (imported at module level by modules/hub.py, which modules/__init__
    imports): hub.py logs with it only in paths not taken here. Stubbed only
    when absent.
  - core.compress_model.evaluate_ppl_after_block: called after every block of
    compress_block_recon to print a wikitext-2 perplexity (a download through
    datasets). Replaced by a function with the same side effects on the model
    (model.eval(); model.to(dev)) that returns the perplexity over the first
    --block-ppl-windows of our evaluation windows (0: none, NaN), and records
    the time each block ended.
Not imported: main.py, kernel/ sources (CUDA inference kernels, unused in
compression); gemlite, zeus, optimum are never imported on this path.

Resume (ours, for a run longer than one sitting): with --stop-after-s, the
state after each block goes to --workdir/resume (the compressed block as
their module, pickled; the teacher's and the student's inputs to the next
block; the RNG states; the log so far), and the run stops after the first
block that ends past that many seconds, exit code 3. The same command again
resumes there: their compress_block_recon runs unchanged, its `trange` is
replaced by a range that starts at the saved block and, before that block,
copies the saved inputs into the loop's own input tensors (in place) and
restores the RNG states; the blocks before it are the saved modules. The
calibration statistics are collected again (deterministic, the same). A
resumed run equals an uninterrupted one up to the order of floating-point
work on the GPU.

Peak GPU memory: their cleanup_memory resets the peak counters after every
step, so torch.cuda.reset_peak_memory_stats is wrapped to fold each peak into
a running maximum before the reset (measurement only).

--device cpu is a smoke test of this script, never a measurement: their code
says "cuda" in many places (compress_block_recon, tune_nonfact, tune_fact,
factorize_and_replace, compress_model_recon's model.cuda()), so under it
alone a TorchFunctionMode maps every "cuda" device to the CPU, and
cut_cross_entropy's Triton kernel ("cce", CUDA only) is swapped for its own
"torch_compile" implementation run eagerly. Run on the GPU machine with
tools/gpu/gpu_nanoquant.sh."""
import argparse
import copy
import functools
import importlib.util
import json
import math
import os
import random
import subprocess
import sys
import tempfile
import shutil
import time
import types

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from anchor_eval import perplexity, read_ids, sync  # noqa: E402  (beside this file)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nanoquant-src", required=True, help="a checkout of SamsungLabs/NanoQuant (holding src/nanoquant)")
    p.add_argument("--gguf", required=True, help="SmolLM2-135M-Instruct.Q4_1.gguf (needs the gguf package)")
    p.add_argument("--train-ids", required=True, help="`bitrank tokenize --split train` output (calibration)")
    p.add_argument("--eval-ids", required=True, help="`bitrank tokenize --split eval` output")
    p.add_argument("--out", required=True, help="JSON summary")
    # Their knobs; None keeps their default (NanoQuantConfigDataclass).
    p.add_argument("--bits", type=float, default=None, help="their bits target (default 1.0)")
    p.add_argument("--seed", type=int, default=None, help="(default 0)")
    p.add_argument("--num-calib-samples", type=int, default=None, help="calibration windows (default 128)")
    p.add_argument("--seqlen", type=int, default=None, help="calibration window length (default 2048)")
    p.add_argument("--calib-shrinkage", type=float, default=None, help="(default 0.4)")
    p.add_argument("--calib-strategy", default=None, choices=("online", "two_phase", "dbf"), help="(default online)")
    p.add_argument("--admm-outer-iters", type=int, default=None, help="(default 400)")
    p.add_argument("--admm-inner-iters", type=int, default=None, help="(default 5)")
    p.add_argument("--nonfact-epochs", type=int, default=None, help="per projection (default 8)")
    p.add_argument("--fact-epochs", type=int, default=None, help="per projection (default 8)")
    p.add_argument("--model-kd-epochs", type=int, default=None, help="(default 8)")
    p.add_argument("--no-model-kd", action="store_true", help="skip compress_model_recon (their tune_model False)")
    p.add_argument("--no-tune-nonfact", action="store_true", help="their tune_nonfact False")
    p.add_argument("--no-tune-fact", action="store_true", help="their tune_fact False")
    p.add_argument("--calib-resample", action="store_true",
                   help="pass the windows through their get_calib_loader (draws with replacement)")
    # Ours.
    p.add_argument("--eval-windows", type=int, default=64, help="first N evaluation windows (0: all)")
    p.add_argument("--eval-seq-len", type=int, default=512, help="tokens per evaluation window (bitrank's 512)")
    p.add_argument("--eval-batch", type=int, default=8)
    p.add_argument("--block-ppl-windows", type=int, default=0,
                   help="evaluation windows for the perplexity printed after each block (0: none)")
    p.add_argument("--no-f32-teacher", action="store_true", help="skip the f32 GGUF model's perplexity")
    p.add_argument("--smoke-blocks", type=int, default=0,
                   help="smoke test only: keep the first N decoder blocks of the exported model (0: all)")
    p.add_argument("--workdir", default=None, help="scratch folder for the exported model (default: a temp dir)")
    p.add_argument("--device", default="cuda", choices=("cuda", "cpu"), help="cpu only to smoke-test the script")
    p.add_argument("--stop-after-s", type=float, default=0,
                   help="stop (exit 3) after the first block that ends past this many seconds, its state saved in "
                        "--workdir for the same command to resume (0: run to the end)")
    return p.parse_args()


# --------------------------------------------------------------------------- imports of their code
def _stub(name, attrs):
    if name in sys.modules or importlib.util.find_spec(name.split(".")[0]) is not None:
        return False
    mod = types.ModuleType(name)
    mod.__doc__ = "stub inserted by bench/anchors/nanoquant.py: never called on the compression path"
    for k, v in attrs.items():
        setattr(mod, k, v)
    sys.modules[name] = mod
    return True


def _unavailable(what):
    def f(*a, **k):
        raise RuntimeError(f"nanoquant.py: {what} is a stub here (not on the compression path)")
    return f


class _Logger:
    """loguru's logger, as far as hub.py uses it, printing to stderr."""
    def _log(self, level, msg, *a, **k):
        print(f"[{level}] {msg}", file=sys.stderr)

    def __getattr__(self, level):
        if level in ("remove", "add"):
            return lambda *a, **k: 0
        return functools.partial(self._log, level.upper())


def install_stubs():
    stubbed = []
    if _stub("lm_eval", {}):
        stubbed.append("lm_eval")
        evaluator = types.ModuleType("lm_eval.evaluator")
        evaluator.simple_evaluate = _unavailable("lm_eval.evaluator.simple_evaluate")
        sys.modules["lm_eval.evaluator"] = evaluator
        sys.modules["lm_eval"].evaluator = evaluator
    if _stub("datasets", {"Dataset": type("Dataset", (), {"from_list": staticmethod(_unavailable("Dataset"))}),
                          "load_dataset": _unavailable("datasets.load_dataset"),
                          "load_from_disk": _unavailable("datasets.load_from_disk")}):
        stubbed.append("datasets")
    if _stub("loguru", {"logger": _Logger()}):
        stubbed.append("loguru")
    return stubbed


def load_nanoquant(src):
    src = os.path.abspath(src)
    pkg_root = os.path.join(src, "src")
    if not os.path.isfile(os.path.join(pkg_root, "nanoquant", "core", "compress_model.py")):
        sys.exit(f"nanoquant.py: {src} is not a NanoQuant checkout (no src/nanoquant/core/compress_model.py)")
    sys.path.insert(0, pkg_root)
    # This order, as their main.py: importing nanoquant.core first runs into a circular import.
    import nanoquant.modules.hub as hub
    import nanoquant.core.compress_model as cm
    import nanoquant.core.importance as imp
    import nanoquant.utils.data_utils as du
    import nanoquant.utils.load_utils as lu
    from nanoquant.modules.linear import NanoQuantLinear
    commit = None
    try:
        commit = subprocess.run(["git", "-C", src, "rev-parse", "HEAD"], capture_output=True, text=True,
                                check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        if os.path.isfile(os.path.join(src, "COMMIT")):  # written next to a `git archive` export
            commit = open(os.path.join(src, "COMMIT")).read().strip()
    return types.SimpleNamespace(cm=cm, imp=imp, hub=hub, du=du, lu=lu, NanoQuantLinear=NanoQuantLinear,
                                 commit=commit)


# --------------------------------------------------------------------------- smoke-test device shim
def _to_cpu(x):
    if isinstance(x, str) and x.startswith("cuda"):
        return "cpu"
    if isinstance(x, torch.device) and x.type == "cuda":
        return torch.device("cpu")
    return x


def cuda_to_cpu_mode():
    """--device cpu only: every "cuda" device their code names becomes the CPU."""
    from torch.overrides import TorchFunctionMode

    class CudaToCpu(TorchFunctionMode):
        def __torch_function__(self, func, types_, args=(), kwargs=None):
            kwargs = kwargs or {}
            if func is torch.Tensor.cuda:
                return args[0]
            args = tuple(_to_cpu(a) for a in args)
            if "device" in kwargs:
                kwargs = dict(kwargs, device=_to_cpu(kwargs["device"]))
            return func(*args, **kwargs)

    return CudaToCpu()


# --------------------------------------------------------------------------- measurement helpers
class PeakMemory:
    """Running max of torch.cuda.max_memory_allocated / reserved across their resets."""
    def __init__(self, device):
        self.on = device.type == "cuda"
        self.alloc = self.reserved = 0
        if self.on:
            self._reset = torch.cuda.reset_peak_memory_stats

            def reset(device=None):
                self.fold()
                self._reset(device)

            torch.cuda.reset_peak_memory_stats = reset

    def fold(self):
        if self.on:
            self.alloc = max(self.alloc, torch.cuda.max_memory_allocated())
            self.reserved = max(self.reserved, torch.cuda.max_memory_reserved())

    def take(self):
        """Peak since the last take (GiB), and the running max stays."""
        if not self.on:
            return None
        self.fold()
        out = self.alloc / 2**30
        self.alloc = 0
        self._reset()
        return out





# --------------------------------------------------------------------------- resume between sittings
class StopForResume(Exception):
    pass


def _rng_states():
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}


def _set_rng_states(st):
    random.setstate(st["python"])
    np.random.set_state(st["numpy"])
    torch.set_rng_state(st["torch"])
    if st["cuda"] is not None:
        torch.cuda.set_rng_state_all(st["cuda"])


def _loop_locals():
    """The locals of their compress_block_recon, the nearest caller of that name."""
    f = sys._getframe(1)
    while f is not None and f.f_code.co_name != "compress_block_recon":
        f = f.f_back
    if f is None:
        raise RuntimeError("nanoquant.py: not called from their compress_block_recon")
    return f.f_locals


class Resume:
    """The state of the block loop after each block, in DIR (see the module note)."""
    def __init__(self, folder):
        self.dir = folder
        self.path = os.path.join(folder, "state.json")
        self.state = json.load(open(self.path)) if os.path.isfile(self.path) else None

    def block_file(self, i):
        return os.path.join(self.dir, f"block_{i}.pt")

    def save(self, i, layer, loop_locals, record):
        """After block i: its module, the loop's inputs to block i+1, the RNG states, `record` (JSON)."""
        os.makedirs(self.dir, exist_ok=True)
        torch.save(layer, self.block_file(i))
        tmp = os.path.join(self.dir, "inputs.pt.tmp")
        torch.save({"original_inputs": loop_locals["original_inputs"],
                    "compressed_inputs": loop_locals["compressed_inputs"], "rng": _rng_states()}, tmp)
        os.replace(tmp, os.path.join(self.dir, "inputs.pt"))
        with open(self.path + ".tmp", "w") as fh:
            json.dump(dict(record, next_block=i + 1), fh)
        os.replace(self.path + ".tmp", self.path)

    def restore_blocks(self, layers):
        """The saved blocks in place of the model's first ones; returns the block to go on from."""
        k = self.state["next_block"]
        for i in range(k):
            layers[i] = torch.load(self.block_file(i), map_location="cpu", weights_only=False)
        return k

    def range_from(self, k):
        """Stands in for their `trange`: blocks k.. , the saved inputs put in the loop's tensors first."""
        def blocks(n, **_):
            for i in range(k, n):
                if i == k and k > 0:
                    loop = _loop_locals()
                    saved = torch.load(os.path.join(self.dir, "inputs.pt"), map_location="cpu", weights_only=False)
                    loop["original_inputs"].copy_(saved["original_inputs"])
                    loop["compressed_inputs"].copy_(saved["compressed_inputs"])
                    _set_rng_states(saved["rng"])
                yield i
        return blocks


def bpw_report(model, nq, bits_target, admm_type):
    """Bits per weight of the NanoQuantLinear modules, from their tensors."""
    NanoQuantLinear = nq.NanoQuantLinear
    kinds, bits, formula_bits, weights, saved_bytes = {}, 0, 0, 0, 0
    for name, m in model.named_modules():
        if not isinstance(m, NanoQuantLinear):
            continue
        a, b = m.in_features, m.out_features
        layer_bits, parts = 0, {}
        for pname, p in m.named_parameters(recurse=False):
            if pname in ("U", "V"):
                t = p.detach()
                if not bool(((t == 1) | (t == -1)).all()):
                    sys.exit(f"nanoquant.py: {name}.{pname} is not ±1 after compression")
                pb = t.numel()
            else:
                pb = p.numel() * p.element_size() * 8
            parts[pname] = [list(p.shape), str(p.dtype).replace("torch.", ""), pb]
            layer_bits += pb
        extra = [n for n, _ in m.named_parameters(recurse=False) if n not in ("U", "V", "scale_pre", "scale_post",
                                                                             "scale_mid", "bias")]
        if extra:
            sys.exit(f"nanoquant.py: {name} holds unexpected parameters {extra}")
        rank = m.U.shape[1]
        f_bits = rank * (a + b) + 16 * (a + b) + (16 * rank if admm_type == "dbf" else 0)
        sd = m.state_dict(prefix=name + ".")  # their packed form, as get_compressed_state_dict calls it
        layer_saved = sum(v.numel() * v.element_size() for v in sd.values() if isinstance(v, torch.Tensor))
        k = kinds.setdefault(name.rsplit(".", 1)[-1], {"in": a, "out": b, "rank": rank, "count": 0,
                                                       "bpw": layer_bits / (a * b),
                                                       "bpw_their_formula": f_bits / (a * b),
                                                       "bpw_as_saved": layer_saved * 8 / (a * b),
                                                       "tensors": parts})
        k["count"] += 1
        bits += layer_bits
        formula_bits += f_bits
        weights += a * b
        saved_bytes += layer_saved
    # named_parameters lists the tied embedding / head once; U, V and the scales are the projections'.
    nq_params = sum(p.numel() for m in model.modules() if isinstance(m, NanoQuantLinear)
                    for p in m.parameters(recurse=False))
    dense = sum(p.numel() for p in model.parameters()) - nq_params
    total = weights + dense
    return {"per_projection": kinds, "projection_weights": weights, "projections_bpw": bits / weights,
            "projections_bpw_their_formula": formula_bits / weights,
            "projections_bpw_as_saved": saved_bytes * 8 / weights, "their_bits_target": bits_target,
            "dense_params_16bit": dense, "whole_model_bpw": (bits + 16 * dense) / total,
            "whole_model_bpw_as_saved": (saved_bytes * 8 + 16 * dense) / total}


def export_gguf(gguf, folder, device, eval_ids_path, args):
    """The GGUF as a Hugging Face folder (f32) for their load_model; the f32 model's perplexity on the way."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    d, f = os.path.split(os.path.abspath(gguf))
    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=f, dtype=torch.float32)
    tok = AutoTokenizer.from_pretrained(d, gguf_file=f)
    gen = model.generation_config
    # their load_tokenizer reads bos/eos from generation_config.json
    if gen.bos_token_id is None:
        gen.bos_token_id = tok.bos_token_id if tok.bos_token_id is not None else model.config.bos_token_id
    if gen.eos_token_id is None:
        gen.eos_token_id = tok.eos_token_id if tok.eos_token_id is not None else model.config.eos_token_id
    # save_pretrained refuses a model loaded from a GGUF (it counts as quantized): the same files by hand
    from safetensors.torch import save_file
    config = copy.deepcopy(model.config)
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    os.makedirs(folder, exist_ok=True)
    config.save_pretrained(folder)
    gen.save_pretrained(folder)
    tok.save_pretrained(folder)
    sd = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    if args.smoke_blocks > 0:  # a shorter model for the smoke test: the first N blocks, the same head
        config.num_hidden_layers = args.smoke_blocks
        config.save_pretrained(folder)
        sd = {k: v for k, v in sd.items()
              if not k.startswith("model.layers.") or int(k.split(".")[2]) < args.smoke_blocks}
    if getattr(config, "tie_word_embeddings", False):
        sd.pop("lm_head.weight", None)
    save_file(sd, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
    ids = read_ids(eval_ids_path, model.config.vocab_size)
    ppl = None
    if not args.no_f32_teacher:
        model.to(device)
        ppl = perplexity(model, ids, args.eval_seq_len, args.eval_windows, args.eval_batch, device)
    del model
    return ids, ppl


def main():
    args = parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    if args.device == "cpu":
        torch._dynamo.config.disable = True  # cut_cross_entropy's torch_compile impl, run eagerly
    import transformers
    transformers.utils.logging.disable_progress_bar()

    stubbed = install_stubs()
    nq = load_nanoquant(args.nanoquant_src)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("nanoquant.py: no CUDA device (use --device cpu for a smoke test)")
    peak = PeakMemory(device)
    shim = None
    if device.type == "cpu":
        import cut_cross_entropy
        nq.imp.linear_cross_entropy = functools.partial(cut_cross_entropy.linear_cross_entropy,
                                                        impl="torch_compile")
        shim = cuda_to_cpu_mode()

    times, ppl, block_log = {}, {}, []
    t_all = time.perf_counter()
    workdir = args.workdir or tempfile.mkdtemp(prefix="nanoquant_model_")
    os.makedirs(workdir, exist_ok=True)
    model_dir = os.path.join(workdir, "hf")
    resume = Resume(os.path.join(workdir, "resume"))
    if resume.state is not None:  # a later sitting: the export, the teachers' figures and the log are saved
        times, ppl, block_log = resume.state["times"], resume.state["ppl"], resume.state["blocks"]
        times["sittings"] = times.get("sittings", 1) + 1
        eval_ids = read_ids(args.eval_ids, resume.state["vocab"])
        print(f"nanoquant.py: resuming at block {resume.state['next_block']} from {resume.dir}", file=sys.stderr)
    else:
        t0 = time.perf_counter()
        eval_ids, ppl_f32 = export_gguf(args.gguf, model_dir, device, args.eval_ids, args)
        if ppl_f32 is not None:
            ppl["teacher_f32"] = ppl_f32
            print(f"teacher f32 (GGUF) ppl {ppl_f32['ppl']:.4f}", file=sys.stderr)
        times["gguf_export_s"] = time.perf_counter() - t0

    # Their config: the dataclass defaults, overridden by the flags given.
    overrides = {"bits": args.bits, "seed": args.seed, "num_calib_samples": args.num_calib_samples,
                 "seqlen": args.seqlen, "calib_shrinkage": args.calib_shrinkage,
                 "calib_strategy": args.calib_strategy, "admm_outer_iters": args.admm_outer_iters,
                 "admm_inner_iters": args.admm_inner_iters, "nonfact_epochs": args.nonfact_epochs,
                 "fact_epochs": args.fact_epochs, "model_kd_epochs": args.model_kd_epochs}
    cfg = nq.hub.NanoQuantConfigDataclass(model_id=model_dir, device_map="cpu",
                                          **{k: v for k, v in overrides.items() if v is not None})
    if args.no_model_kd:
        cfg.tune_model = False
    if args.no_tune_nonfact:
        cfg.tune_nonfact = False
    if args.no_tune_fact:
        cfg.tune_fact = False
    qc = cfg.to_dict()
    N, S = qc["num_calib_samples"], qc["seqlen"]

    with shim if shim is not None else _null():
        # -------------------------------------------------------------- load (their load_model, twice)
        t0 = time.perf_counter()
        model = nq.lu.load_model(model_dir, S, device_map=qc["device_map"])
        fp_model = nq.lu.load_model(model_dir, S, device_map=qc["device_map"])
        times["load_model_x2_s"] = time.perf_counter() - t0
        vocab = model.config.vocab_size
        train_ids = read_ids(args.train_ids, vocab)
        if len(train_ids) < N * S:
            sys.exit(f"nanoquant.py: {args.train_ids} holds {len(train_ids)} tokens, fewer than {N}×{S}")
        windows = train_ids[:N * S].view(N, S)
        if args.calib_resample:
            tokenizer = nq.lu.load_tokenizer(model_dir)
            dataloader = nq.du.get_calib_loader([{"input_ids": w.tolist()} for w in windows], tokenizer, N,
                                                qc["seed"], S)
        else:
            dataloader = windows.clone().long()  # get_calib_loader's output format: [N, seqlen] int64
        distinct = len({tuple(r[:16].tolist()) for r in dataloader})

        # teacher as they load it (bf16); to the device and back leaves it as it was
        if resume.state is None:
            t0 = time.perf_counter()
            fp_model.to(device)
            ppl["teacher_bf16"] = perplexity(fp_model, eval_ids, args.eval_seq_len, args.eval_windows,
                                             args.eval_batch, device)
            fp_model.to("cpu")
            times["eval_teacher_s"] = time.perf_counter() - t0
            print(f"teacher bf16 ppl {ppl['teacher_bf16']['ppl']:.4f}", file=sys.stderr)
        peak.take()

        # their per-block wikitext perplexity → ours (same side effects: eval mode, model on dev)
        t_block = [None]

        @torch.no_grad()
        def after_block(model, model_name, dev, get_test_ppl=True):
            model.eval()
            model.to(dev)
            sync(device)
            now = time.perf_counter()
            value = float("nan")
            if args.block_ppl_windows > 0:
                value = perplexity(model, eval_ids, args.eval_seq_len, args.block_ppl_windows,
                                   args.eval_batch, device)["ppl"]
            sync(device)
            block_log.append({"block": len(block_log), "seconds": now - t_block[0], "ppl": value,
                              "peak_gib": peak.take()})
            i = len(block_log) - 1
            print(f"nanoquant.py: block {i} done in {now - t_block[0]:.1f} s", file=sys.stderr)
            if args.stop_after_s > 0:
                layers = model.model.layers  # a Llama (their get_decoder_layers says the same)
                resume.save(i, layers[i], _loop_locals(),
                            {"times": times, "ppl": ppl, "blocks": block_log, "vocab": vocab})
                if time.perf_counter() - t_all > args.stop_after_s and i + 1 < len(layers):
                    raise StopForResume(i + 1)
            t_block[0] = time.perf_counter()
            return value

        nq.cm.evaluate_ppl_after_block = after_block

        # -------------------------------------------------------------- calibration statistics
        sync(device)
        t0 = time.perf_counter()
        # "cuda" as hub.py passes it; on the CPU "cpu", as the backward hooks run outside the shim's thread
        raw_stats = nq.imp.collect_stats(model, dataloader, device.type, strategy=qc["calib_strategy"])
        shrunk = nq.imp.get_shrunk_stats(raw_stats, shrinkage=qc["calib_shrinkage"])
        model = nq.imp.register_stats(model, shrunk)
        sync(device)
        times["calibration_again_s" if resume.state is not None else "calibration_s"] = time.perf_counter() - t0
        peaks = {"calibration_gib": peak.take()}

        # -------------------------------------------------------------- block reconstruction
        if resume.state is not None:
            start = resume.restore_blocks(model.model.layers)
            nq.cm.trange = resume.range_from(start)
        t0 = time.perf_counter()
        t_block[0] = t0
        try:
            model = nq.cm.compress_block_recon(model, fp_model, dataloader, qc)
        except StopForResume as stop:
            print(f"nanoquant.py: stopped after {time.perf_counter() - t_all:.0f} s; block {stop.args[0]} is "
                  f"next: run the same command again to go on", file=sys.stderr)
            sys.exit(3)
        sync(device)
        times["block_recon_s"] = sum(b["seconds"] for b in block_log)
        block_peaks = [b["peak_gib"] for b in block_log if b["peak_gib"] is not None]
        peaks["block_recon_gib"] = max(block_peaks) if block_peaks else peak.take()
        ppl_blocks = perplexity(model.to(device), eval_ids, args.eval_seq_len, args.eval_windows,
                                args.eval_batch, device)
        ppl["compressed_before_model_kd"] = ppl_blocks
        print(f"after block reconstruction: ppl {ppl_blocks['ppl']:.4f}", file=sys.stderr)
        peak.take()

        # -------------------------------------------------------------- model-level KD (as hub.py)
        if qc["tune_model"]:
            t0 = time.perf_counter()
            model = nq.cm.compress_model_recon(model, fp_model, dataloader, qc)
            sync(device)
            times["model_kd_s"] = time.perf_counter() - t0
            peaks["model_kd_gib"] = peak.take()

        t0 = time.perf_counter()
        model.to(device)
        ppl["compressed"] = perplexity(model, eval_ids, args.eval_seq_len, args.eval_windows, args.eval_batch,
                                       device)
        times["eval_compressed_s"] = time.perf_counter() - t0
        bpw = bpw_report(model, nq, qc["bits"], qc["admm_type"])
    times["compression_s"] = times["calibration_s"] + times["block_recon_s"] + times.get("model_kd_s", 0.0)
    times["total_s"] = time.perf_counter() - t_all
    peak.fold()
    if args.workdir is None:
        shutil.rmtree(workdir, ignore_errors=True)

    result = {
        "anchor": "NanoQuant", "nanoquant_commit": nq.commit, "model": os.path.basename(args.gguf),
        "torch": torch.__version__, "transformers": transformers.__version__,
        "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu (smoke test)",
        "stubbed_modules": stubbed, "args": vars(args), "their_config": qc,
        "calibration": {"windows": N, "seqlen": S, "tokens": N * S, "distinct_windows": distinct,
                        "resampled_by_get_calib_loader": args.calib_resample},
        "bpw": bpw, "ppl": ppl, "seconds": times, "blocks": block_log,
        "peak_gib": {**peaks, "overall_allocated": peak.alloc / 2**30 if peak.on else None,
                     "overall_reserved": peak.reserved / 2**30 if peak.on else None},
    }
    with open(args.out, "w") as fh:
        json.dump(result, fh, indent=1)

    print(f"\n== NanoQuant anchor: {result['model']}, bits {qc['bits']}, calib {N}x{S}, ADMM {qc['admm_outer_iters']}"
          f"x{qc['admm_inner_iters']}, epochs nonfact {qc['nonfact_epochs'] if qc['tune_nonfact'] else 0} / fact "
          f"{qc['fact_epochs'] if qc['tune_fact'] else 0} / model KD "
          f"{qc['model_kd_epochs'] if qc['tune_model'] else 0} ==")
    print(f"{'projection':<12}{'in':>6}{'out':>6}{'rank':>6}{'count':>7}{'bpw':>9}{'formula':>9}{'as saved':>10}")
    for name, k in bpw["per_projection"].items():
        print(f"{name:<12}{k['in']:>6}{k['out']:>6}{k['rank']:>6}{k['count']:>7}{k['bpw']:>9.4f}"
              f"{k['bpw_their_formula']:>9.4f}{k['bpw_as_saved']:>10.4f}")
    print(f"all projections {bpw['projections_bpw']:.4f} bpw (their target {qc['bits']}; as saved "
          f"{bpw['projections_bpw_as_saved']:.4f}); whole model {bpw['whole_model_bpw']:.4f} "
          f"(as saved {bpw['whole_model_bpw_as_saved']:.4f})")
    n_eval = ppl["compressed"]["windows"]
    f32 = f"teacher f32 {ppl['teacher_f32']['ppl']:.5g}, " if "teacher_f32" in ppl else ""
    print(f"ppl over {n_eval} eval windows of {args.eval_seq_len}: {f32}teacher bf16 "
          f"{ppl['teacher_bf16']['ppl']:.5g}, after blocks {ppl['compressed_before_model_kd']['ppl']:.5g}, "
          f"compressed {ppl['compressed']['ppl']:.5g}")
    print("seconds: " + ", ".join(f"{k[:-2]} {v:.1f}" for k, v in times.items()))
    pk = result["peak_gib"]
    print("peak GPU memory: " + (f"{pk['overall_allocated']:.2f} GiB allocated, {pk['overall_reserved']:.2f} "
                                 f"reserved" if peak.on else "n/a (cpu)"))


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


if __name__ == "__main__":
    main()
