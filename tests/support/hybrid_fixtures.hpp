// The tiny Qwen3.5 hybrid of the model and student tests: its config (both
// checkpoint families) and random weights in transformers' meaning.
//
// 4 blocks (GDN, GDN, GDN, gated attention), hidden 64; attention 4 heads /
// 2 kv heads of 32 with 8 rotary dims (factor 0.25), θ 1e4; GDN 2 k-heads /
// 4 v-heads of 16 (two v-heads per k-head, so head order matters), conv 4;
// MLP 96; vocabulary 300; rms_norm_eps 1e-6.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <vector>

#include "bitrank/model/decoder.hpp"
#include "support/model_files.hpp"

namespace bitrank::test::tiny_hybrid {

constexpr index_t kD = 64, kLayers = 4, kH = 4, kHkv = 2, kHd = 32, kHk = 2, kHv = 4, kDk = 16, kK = 4, kF = 96,
                  kV = 300;
constexpr index_t kR = kHv / kHk, kC = 2 * kHk * kDk + kHv * kDk;

// Qwen3.5's multimodal config (text part nested) or Qwen3-Next's flat one
// with every block in mlp_only_layers; `edits` merge-patched in.
io::ModelConfig tiny_config(bool tied, bool next, nlohmann::json edits = nlohmann::json::object());

// Random weights in transformers' meaning: matrices ~ U(±√(3/fan_in)),
// zero-centred gains ~ U(±0.2) on a 2⁻¹² grid, the GDN norm gain around 1,
// A_log of a decay rate in [0.5, 4.5], conv taps ~ U(±0.7). `edits` as
// tiny_config's (Qwen3.5's config: the text part under "text_config").
model::HostWeights tiny_weights(bool tied, std::uint64_t seed, nlohmann::json edits = nlohmann::json::object());

std::vector<std::int32_t> tiny_tokens(index_t n, std::uint64_t seed);

// The internal tensors of tiny_weights under Hugging Face names, each name
// prefixed by `prefix` (the language model's, e.g. "model."): Qwen3.5's
// separate GDN projections, or (next) Qwen3-Next's fused in_proj_qkvz and
// in_proj_ba — what safetensors_image writes as a checkpoint.
std::vector<NamedTensor> hf_tensors(const model::HostWeights& w, bool next, const std::string& prefix);

}  // namespace bitrank::test::tiny_hybrid
