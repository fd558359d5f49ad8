// In-memory model files for the loader tests: a safetensors image and a
// GGUF v3 image, both with F32 tensors, written the way the formats define
// (and independently of our readers).
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "bitrank/io/tokenizer.hpp"
#include "bitrank/model/decoder.hpp"

#include "bitrank/tensor.hpp"

namespace bitrank::test {

// A byte-level tokenizer of `vocab` ids: the 256 byte tokens (normal),
// "<|eos|>" (control, id 256, the EOS) and user-defined fillers "<xN>" up to
// vocab; BOS = the EOS token when add_bos.
io::TokenizerSpec byte_tokenizer(index_t vocab, bool add_bos = false);

struct NamedTensor {
  std::string name;
  std::vector<index_t> shape;  // numpy order (rows first)
  std::vector<float> values;   // row-major
};

// A safetensors file: 8-byte header length, JSON header, F32 data in order.
std::vector<std::byte> safetensors_image(const std::vector<NamedTensor>& tensors);

// A GGUF v3 file (alignment 32) with metadata and F32 tensors; each tensor's
// dims are written fastest first (a [rows][cols] matrix as {cols, rows}).
class GgufImage {
 public:
  GgufImage& string(const std::string& key, const std::string& value);
  GgufImage& u32(const std::string& key, std::uint32_t value);
  GgufImage& f32(const std::string& key, float value);
  GgufImage& bool_array(const std::string& key, const std::vector<bool>& value);
  GgufImage& tensor(NamedTensor t);
  std::vector<std::byte> bytes() const;

 private:
  std::vector<std::byte> kv_;  // key/value records
  std::uint64_t n_kv_ = 0;
  std::vector<NamedTensor> tensors_;
};

// A dense Llama model's tensors under Hugging Face names (GGUF name →
// model.layers.N.self_attn.q_proj.weight, …), as an F32 safetensors image;
// HF rows need no permutation.
std::string llama_hf_name(const std::string& gguf_name);
std::vector<std::byte> llama_hf_safetensors(const model::HostWeights& w);

// A Hugging Face directory of a dense Llama model of `config_json` with
// random weights (projections ~ U(±√(3/fan_in)), gains 1 + U(±0.1), drawn
// from `seed`) and the test BPE tokenizer (tests/data/tokenizer/smollm.json).
std::filesystem::path random_llama_dir(const std::filesystem::path& dir, const std::string& config_json,
                                       std::uint64_t seed);

// English-looking training text for such models: `paragraphs` paragraphs of
// 60 words from a small fixed list (the test tokenizer's vocabulary covers
// them), drawn from `seed`.
std::string word_text(int seed, int paragraphs);

}  // namespace bitrank::test
