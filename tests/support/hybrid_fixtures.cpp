// The tiny hybrid (contract: tests/support/hybrid_fixtures.hpp).
#include "support/hybrid_fixtures.hpp"

#include <cmath>
#include <random>

#include "bitrank/model/hybrid.hpp"

namespace bitrank::test::tiny_hybrid {

using model::HostTensor;
using model::HostWeights;
using nlohmann::json;

namespace {

json text_config(bool tied) {
  return json{
      {"hidden_size", kD},
      {"num_hidden_layers", kLayers},
      {"num_attention_heads", kH},
      {"num_key_value_heads", kHkv},
      {"head_dim", kHd},
      {"intermediate_size", kF},
      {"vocab_size", kV},
      {"rms_norm_eps", 1e-6},
      {"max_position_embeddings", 256},
      {"tie_word_embeddings", tied},
      {"hidden_act", "silu"},
      {"linear_num_key_heads", kHk},
      {"linear_num_value_heads", kHv},
      {"linear_key_head_dim", kDk},
      {"linear_value_head_dim", kDk},
      {"linear_conv_kernel_dim", kK},
      {"full_attention_interval", 4},
      {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 10000.0}, {"partial_rotary_factor", 0.25}}}};
}

}  // namespace

io::ModelConfig tiny_config(bool tied, bool next, json edits) {
  json j;
  if (next) {
    j = text_config(tied);
    j["model_type"] = "qwen3_next";
    j["num_experts"] = 8;
    j["mlp_only_layers"] = {0, 1, 2, 3};
  } else {
    json t = text_config(tied);
    t["model_type"] = "qwen3_5_text";
    j = json{{"model_type", "qwen3_5"}, {"tie_word_embeddings", tied}, {"text_config", t}};
  }
  j.merge_patch(edits);
  return io::parse_hf_config(j.dump(), "config.json");
}

HostWeights tiny_weights(bool tied, std::uint64_t seed) {
  HostWeights w;
  w.config = tiny_config(tied, false);
  w.source = "tiny";
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  for (const auto& [name, shape] : model::hybrid_expected_tensors(w.config)) {
    index_t numel = 1;
    for (index_t s : shape) numel *= s;
    HostTensor t{shape, {}};
    for (index_t i = 0; i < numel; ++i) {
      double v;
      if (name.ends_with("ssm_a_log"))
        v = std::log(2.5 + 2.0 * u(rng));
      else if (name.ends_with("ssm_dt.bias"))
        v = 0.5 * u(rng);
      else if (name.ends_with("ssm_norm.weight"))
        v = 1.0 + 0.2 * u(rng);
      else if (name.ends_with("ssm_conv1d.weight"))
        v = 0.7 * u(rng);
      else if (shape.size() == 1)
        v = std::round(0.2 * u(rng) * 4096) / 4096;  // 1 + v exact in f32 (GGUF stores it)
      else
        v = std::sqrt(3.0 / static_cast<double>(shape[1])) * u(rng);
      t.values.push_back(static_cast<float>(v));
    }
    w.tensors.emplace(name, std::move(t));
  }
  return w;
}

std::vector<std::int32_t> tiny_tokens(index_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::int32_t> t(static_cast<std::size_t>(n));
  for (auto& v : t) v = static_cast<std::int32_t>(rng() % kV);
  return t;
}

}  // namespace bitrank::test::tiny_hybrid
