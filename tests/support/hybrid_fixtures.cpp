// The tiny hybrid (contract: tests/support/hybrid_fixtures.hpp).
#include "support/hybrid_fixtures.hpp"

#include <cmath>
#include <random>
#include <utility>

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

HostWeights tiny_weights(bool tied, std::uint64_t seed, json edits) {
  HostWeights w;
  w.config = tiny_config(tied, false, std::move(edits));
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

// The internal tensors under Hugging Face names: Qwen3.5's separate GDN
// projections, or Qwen3-Next's in_proj_qkvz [Hk][q | k | v | z] and
// in_proj_ba [Hk][b | a] (modeling_qwen3_next.py, fix_query_key_value_ordering).
std::vector<NamedTensor> hf_tensors(const HostWeights& w, bool next, const std::string& prefix) {
  std::vector<NamedTensor> out;
  auto add = [&](const std::string& hf, const std::string& name) {
    const HostTensor& t = w.at(name);
    out.push_back({hf, t.shape, t.values});
  };
  auto rows = [](const HostTensor& t, index_t from, index_t count) {
    const index_t cols = t.shape[1];
    return std::vector<float>(t.values.begin() + from * cols, t.values.begin() + (from + count) * cols);
  };
  add(prefix + "embed_tokens.weight", "token_embd.weight");
  add(prefix + "norm.weight", "output_norm.weight");
  if (!w.config.tie_word_embeddings) add("lm_head.weight", "output.weight");
  for (index_t b = 0; b < kLayers; ++b) {
    const std::string p = "blk." + std::to_string(b) + ".", h = prefix + "layers." + std::to_string(b) + ".";
    add(h + "input_layernorm.weight", p + "attn_norm.weight");
    add(h + "post_attention_layernorm.weight", p + "post_attention_norm.weight");
    add(h + "mlp.gate_proj.weight", p + "ffn_gate.weight");
    add(h + "mlp.up_proj.weight", p + "ffn_up.weight");
    add(h + "mlp.down_proj.weight", p + "ffn_down.weight");
    if (b == 3) {
      add(h + "self_attn.q_proj.weight", p + "attn_q.weight");
      add(h + "self_attn.k_proj.weight", p + "attn_k.weight");
      add(h + "self_attn.v_proj.weight", p + "attn_v.weight");
      add(h + "self_attn.o_proj.weight", p + "attn_output.weight");
      add(h + "self_attn.q_norm.weight", p + "attn_q_norm.weight");
      add(h + "self_attn.k_norm.weight", p + "attn_k_norm.weight");
      continue;
    }
    const std::string l = h + "linear_attn.";
    const HostTensor &qkv = w.at(p + "attn_qkv.weight"), &z = w.at(p + "attn_gate.weight"),
                     &bt = w.at(p + "ssm_beta.weight"), &at = w.at(p + "ssm_alpha.weight");
    if (next) {
      std::vector<float> qkvz, ba;
      for (index_t g = 0; g < kHk; ++g) {
        for (const auto& part : {rows(qkv, g * kDk, kDk), rows(qkv, kHk * kDk + g * kDk, kDk),
                                 rows(qkv, 2 * kHk * kDk + g * kR * kDk, kR * kDk), rows(z, g * kR * kDk, kR * kDk)})
          qkvz.insert(qkvz.end(), part.begin(), part.end());
        for (const auto& part : {rows(bt, g * kR, kR), rows(at, g * kR, kR)}) ba.insert(ba.end(), part.begin(), part.end());
      }
      out.push_back({l + "in_proj_qkvz.weight", {2 * kHk * kDk + 2 * kHv * kDk, kD}, qkvz});
      out.push_back({l + "in_proj_ba.weight", {2 * kHv, kD}, ba});
    } else {
      add(l + "in_proj_qkv.weight", p + "attn_qkv.weight");
      add(l + "in_proj_z.weight", p + "attn_gate.weight");
      add(l + "in_proj_b.weight", p + "ssm_beta.weight");
      add(l + "in_proj_a.weight", p + "ssm_alpha.weight");
    }
    out.push_back({l + "conv1d.weight", {kC, 1, kK}, w.at(p + "ssm_conv1d.weight").values});  // nn.Conv1d [C][1][K]
    add(l + "A_log", p + "ssm_a_log");
    add(l + "dt_bias", p + "ssm_dt.bias");
    add(l + "norm.weight", p + "ssm_norm.weight");
    add(l + "out_proj.weight", p + "ssm_out.weight");
  }
  return out;
}

}  // namespace bitrank::test::tiny_hybrid
