"""What the anchor scripts (littlebit.py, nanoquant.py) share: bitrank's
token files and its perplexity, so that an anchor's figure and bitrank's
are measured alike.

read_ids    a `bitrank tokenize` file (little-endian int32), checked
            against the vocabulary
perplexity  exp(mean NLL) over the first windows of T tokens in order,
            each predicting its tokens 1..T-1 from their prefixes, as
            `bitrank eval`
sync        wait for the device (for timings)"""
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F


def read_ids(path, vocab):
    ids = np.fromfile(path, dtype="<i4")
    if ids.size == 0 or ids.min() < 0 or ids.max() >= vocab:
        sys.exit(f"{os.path.basename(sys.argv[0])}: {path}: {ids.size} ids, range [{ids.min(initial=0)}, "
                 f"{ids.max(initial=0)}] outside the vocabulary of {vocab}")
    return torch.from_numpy(ids.astype(np.int64))


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@torch.no_grad()
def perplexity(model, ids, T, windows, batch, device, autocast=False):
    """exp(mean NLL) over the first `windows` windows of T tokens (0: all); the
    forward under bf16 autocast when `autocast`."""
    was_training = model.training
    model.eval()
    n = len(ids) // T if windows == 0 else min(windows, len(ids) // T)
    nll = 0.0
    for w in range(0, n, batch):
        x = ids[w * T:min(n, w + batch) * T].view(-1, T).to(device)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
            logits = model(input_ids=x, use_cache=False).logits
        nll += F.cross_entropy(logits[:, :-1].flatten(0, 1).float(), x[:, 1:].flatten(), reduction="sum").item()
    model.train(was_training)
    return {"ppl": math.exp(nll / (n * (T - 1))), "nll": nll / (n * (T - 1)), "windows": n,
            "predictions": n * (T - 1)}
