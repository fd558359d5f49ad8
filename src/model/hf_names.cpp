// Transformers' tensor names of the internal ones (contract:
// include/bitrank/model/hf_names.hpp).
#include "bitrank/model/hf_names.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "bitrank/error.hpp"
#include "bitrank/model/projection.hpp"

namespace bitrank::model {
namespace {

// Per-block tensors: internal name after "blk.N." → transformers' name after
// "model.layers.N.". Dense Llama uses ffn_norm, the hybrids post_attention_norm.
constexpr std::pair<std::string_view, std::string_view> kBlockNames[] = {
    {"attn_norm.weight", "input_layernorm.weight"},
    {"ffn_norm.weight", "post_attention_layernorm.weight"},
    {"post_attention_norm.weight", "post_attention_layernorm.weight"},
    {"attn_q.weight", "self_attn.q_proj.weight"},
    {"attn_k.weight", "self_attn.k_proj.weight"},
    {"attn_v.weight", "self_attn.v_proj.weight"},
    {"attn_output.weight", "self_attn.o_proj.weight"},
    {"attn_q_norm.weight", "self_attn.q_norm.weight"},
    {"attn_k_norm.weight", "self_attn.k_norm.weight"},
    {"attn_qkv.weight", "linear_attn.in_proj_qkv.weight"},
    {"attn_gate.weight", "linear_attn.in_proj_z.weight"},
    {"ssm_beta.weight", "linear_attn.in_proj_b.weight"},
    {"ssm_alpha.weight", "linear_attn.in_proj_a.weight"},
    {"ssm_conv1d.weight", "linear_attn.conv1d.weight"},
    {"ssm_a_log", "linear_attn.A_log"},
    {"ssm_dt.bias", "linear_attn.dt_bias"},
    {"ssm_norm.weight", "linear_attn.norm.weight"},
    {"ssm_out.weight", "linear_attn.out_proj.weight"},
    {"ffn_gate.weight", "mlp.gate_proj.weight"},
    {"ffn_up.weight", "mlp.up_proj.weight"},
    {"ffn_down.weight", "mlp.down_proj.weight"},
};

bool is_qwen3_next_fused(const ModelConfig& c, std::string_view rest) {
  return c.family == io::ModelFamily::qwen3_next &&
         std::ranges::find(kQwen3NextFused, rest) != std::end(kQwen3NextFused);
}

}  // namespace

std::pair<std::string, std::string> split_block(const std::string& name) {
  if (!name.starts_with("blk.")) return {};
  const std::size_t dot = name.find('.', 4);
  if (dot == std::string::npos || dot == 4) return {};
  return {name.substr(4, dot - 4), name.substr(dot + 1)};
}

std::string hf_tensor_name(const ModelConfig& c, const std::string& name) {
  if (name == "token_embd.weight") return "model.embed_tokens.weight";
  if (name == "output_norm.weight") return "model.norm.weight";
  if (name == "output.weight") return "lm_head.weight";
  const auto [block, rest] = split_block(name);
  const TensorList expected = model_tensors(c);
  const bool known = std::ranges::any_of(expected, [&](const auto& t) { return t.first == name; });
  if (known && !is_qwen3_next_fused(c, rest))
    for (const auto& [internal, hf] : kBlockNames)
      if (rest == internal) return fmt::format("model.layers.{}.{}", block, hf);
  fail("model: tensor {} has no Hugging Face name of its own in a {} checkpoint", name, c.model_type);
}

}  // namespace bitrank::model
