#!/usr/bin/env python3
"""Token ids of a fixed English passage under SmolLM2-135M-Instruct's tokenizer,
for the model test (tests/data/model/smollm2_passage_ids.txt), and optionally
of any text file (--text F --out F.ids) for `bitrank eval --ids`.

The tokenizer is rebuilt with the `tokenizers` library from the GGUF's own
metadata (tokenizer.ggml.tokens / merges; pre-tokenizer "smollm" =
individual digits, then GPT-2 byte-level with its regex), as SmolLM2's
tokenizer.json defines it. pip install tokenizers gguf.
"""
import argparse
import os
import sys

PASSAGE = (
    "The history of the city begins in the early Middle Ages, when a small settlement grew up "
    "around a river crossing. Merchants travelled along the old road to sell wool, salt and grain, "
    "and by the twelfth century the town had a market, a church and a stone bridge. In the years "
    "that followed, the population grew quickly. New streets were laid out beyond the walls, and "
    "the council built a hall where disputes could be settled and taxes collected. Today the old "
    "centre is a popular place for visitors, who come to see the narrow lanes, the timber houses "
    "and the cathedral, whose tower can be seen from every part of the valley. Python is a "
    "programming language that lets you work quickly and integrate systems more effectively. "
    "The standard library offers a wide range of modules for reading files, handling dates and "
    "times, and talking to other programs over the network."
)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--text", help="tokenize this file instead of the fixed passage")
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    import gguf
    from tokenizers import Tokenizer, models, pre_tokenizers, decoders

    r = gguf.GGUFReader(a.gguf)

    def strings(key):
        f = r.fields[key]
        return [bytes(f.parts[i]).decode("utf-8") for i in f.data]

    pre = bytes(r.fields["tokenizer.ggml.pre"].parts[-1]).decode()
    assert pre == "smollm", pre
    tokens = strings("tokenizer.ggml.tokens")
    merges = [tuple(m.split(" ", 1)) for m in strings("tokenizer.ggml.merges")]
    tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    text = open(a.text, encoding="utf-8", errors="replace").read() if a.text else PASSAGE
    ids = tok.encode(text, add_special_tokens=False).ids
    assert tok.decode(ids) == text
    with open(a.out, "w") as f:
        for i in range(0, len(ids), 16):
            f.write(" ".join(str(x) for x in ids[i:i + 16]) + "\n")
    print(f"{len(ids)} ids -> {a.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
