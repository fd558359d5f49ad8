// `bitrank compress`: the command line of train::compress (include/bitrank/train/compress.hpp).
#pragma once

#include <string>
#include <vector>

#include "bitrank/train/compress.hpp"

namespace bitrank::cli {

struct CompressCliOptions {
  train::CompressOptions job;
  std::string model;         // empty: the configured default (SmolLM2-135M GGUF)
  std::string out;           // empty: <model stem>.<bpw>bpw.bitrank (--init: <init stem>.<objective>.bitrank) here
  long long tokens = 0;      // training tokens per block (when tokens_given)
  long long steps = 0;       // instead of --tokens: steps per block (when steps_given)
  bool tokens_given = false, steps_given = false;  // on the command line (neither: the device's default)
  bool eval_seq_len_given = false;  // else 512, or the model's context when shorter (--seq-len: given.seq_len)
  std::string device_memory_cap;  // --device-memory-cap: bytes, or <n>GiB / <n>MiB; empty: none
  bool stream = false, no_stream = false;  // --stream / --no-stream (neither: automatic)
  std::vector<std::string> bpw_for;         // --bpw-for PATTERN=BPW, in the order given
  bool bpw_given = false;                   // --bpw was on the command line (it excludes --init)
  std::string method = "train";             // --method: train or ptq (train::apply_recipe_defaults)
  train::GivenOptions given;                // the options on the command line (the recipe leaves them)
};

int run_compress(CompressCliOptions options);

}  // namespace bitrank::cli
