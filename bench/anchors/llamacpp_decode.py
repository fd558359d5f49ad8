#!/usr/bin/env python3
"""Anchor: llama.cpp's CPU decode of a GGUF model, through llama-cpp-python
(PyPI), timed the way `bitrank generate` times its own (src/model/generate.cpp,
src/cli/generate.cpp).

What is measured. The model loads once (not timed; bitrank prints its load
time apart). Each repeat clears the KV cache, then:
  prefill  = wall time from the start until the first new token is chosen:
             the prompt through the model in one batch, then the argmax of
             the last position's logits;
  decode   = wall time of the later steps: each feeds the token just chosen
             (one position into the KV cache), then takes the argmax of the
             logits; N new tokens make N - 1 such steps.
  prefill tokens/s = prompt tokens / prefill seconds;
  decode tokens/s  = (N - 1) / decode seconds.
This is bitrank's GenerateResult::prefill_tokens_per_s and decode_tokens_per_s:
the first generated token belongs to the prefill, the last drawn token is
never run through the model, and the time to turn each token into text is
inside the loop, as bitrank's streaming callback is. Greedy (argmax in
NumPy over the vocabulary), no stop at EOS (bitrank's --no-stop-at-eos), so
every run makes exactly N tokens. The prompt is tokenized with the model's
own BOS setting and control tokens matched, as bitrank's encode_prompt does.

Timer: wall clock (time.perf_counter) around the library calls. llama.cpp's
own counters (llama_perf_context: prompt-eval and eval milliseconds, which
cover the graph compute only, not the argmax) are printed beside, as a
cross-check, not used for the figures.

Threads. The PyPI build uses OpenMP, whose threads spin while they wait by
default: on a machine whose cores are busy with other work, a spinning
thread can hold the core that another of its threads needs, and 2 threads
on 2 busy cores then decode ~100x slower than 1 thread. OMP_WAIT_POLICY
(printed in the JSON) set to PASSIVE makes them sleep instead.

Prints one JSON line: the medians over --repeat runs, each run's figures,
the prompt and generated token counts, the library version and the text of
the last run.
  PYTHONPATH=<llama-cpp-python target> python3 llamacpp_decode.py --model M.gguf
"""
import argparse
import json
import os
import statistics
import sys
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", required=True, help="a .gguf file")
    p.add_argument("--prompt", default="Once upon a time, in a small village by the sea,")
    p.add_argument("--tokens", type=int, default=128, help="new tokens per run (default 128)")
    p.add_argument("--threads", type=int, default=2, help="threads, prompt and decode (default 2)")
    p.add_argument("--repeat", type=int, default=1, help="runs; the figures are their medians (default 1)")
    p.add_argument("--ctx", type=int, default=512, help="context size (default 512)")
    a = p.parse_args()
    if a.tokens < 2:
        p.error("--tokens must be at least 2 (decode needs a step after the first token)")
    if a.repeat < 1:
        p.error("--repeat must be at least 1")
    return a


def main():
    a = parse_args()
    import numpy as np
    import llama_cpp

    llm = llama_cpp.Llama(
        model_path=a.model,
        n_ctx=a.ctx,
        n_batch=a.ctx,
        n_threads=a.threads,
        n_threads_batch=a.threads,
        n_gpu_layers=0,
        verbose=False,
    )
    prompt = llm.tokenize(a.prompt.encode("utf-8"), add_bos=True, special=True)
    if len(prompt) + a.tokens > a.ctx:
        sys.exit(f"llamacpp_decode: {len(prompt)} prompt tokens + {a.tokens} new exceed the context of {a.ctx}")
    n_vocab = llm.n_vocab()

    def argmax_last():
        logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm.ctx, -1), shape=(n_vocab,))
        return int(np.argmax(logits))

    runs = []
    text = b""
    for _ in range(a.repeat):
        llm.reset()
        llama_cpp.llama_perf_context_reset(llm.ctx)
        out = []
        pieces = []
        t0 = time.perf_counter()
        llm.eval(prompt)
        tok = argmax_last()
        t_prefill = time.perf_counter() - t0
        out.append(tok)
        pieces.append(llm.detokenize([tok]))
        for _ in range(a.tokens - 1):
            llm.eval([tok])
            tok = argmax_last()
            out.append(tok)
            pieces.append(llm.detokenize([tok]))
        total = time.perf_counter() - t0
        perf = llama_cpp.llama_perf_context(llm.ctx)
        text = b"".join(pieces)
        decode_s = total - t_prefill
        runs.append({
            "prefill_tokens_per_s": len(prompt) / t_prefill,
            "decode_tokens_per_s": (len(out) - 1) / decode_s,
            "seconds": total,
            "llama_perf": {
                "prompt_eval_ms": perf.t_p_eval_ms, "prompt_eval_tokens": perf.n_p_eval,
                "eval_ms": perf.t_eval_ms, "eval_tokens": perf.n_eval,
            },
        })

    result = {
        "anchor": "llama.cpp (llama-cpp-python)",
        "version": llama_cpp.__version__,
        "model": a.model,
        "threads": a.threads,
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "default"),
        "timer": "wall clock around eval + argmax",
        "prompt_tokens": len(prompt),
        "generated_tokens": a.tokens,
        "repeat": a.repeat,
        "prefill_tokens_per_s": statistics.median(r["prefill_tokens_per_s"] for r in runs),
        "decode_tokens_per_s": statistics.median(r["decode_tokens_per_s"] for r in runs),
        "runs": runs,
        "text": text.decode("utf-8", errors="replace"),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
