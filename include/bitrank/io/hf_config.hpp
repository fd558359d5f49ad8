// Hugging Face `config.json` → ModelConfig, for the families bitrank loads:
//
//   model_type   family       notes
//   llama        dense        head_dim optional (default hidden / heads)
//   qwen2        dense        head_dim fixed at hidden / heads
//   qwen3        dense        head_dim given (Qwen3 sets it independently)
//   qwen3_next   hybrid       GDN + gated full attention, MoE MLPs
//   qwen3_5      hybrid       text part either at the top level or under
//                             "text_config" (model_type "qwen3_5_text")
//
// Keys read (text part):
//   required  hidden_size, num_hidden_layers, num_attention_heads,
//             intermediate_size, vocab_size, rms_norm_eps,
//             max_position_embeddings, rope θ as rope_theta or
//             rope_parameters.rope_theta (or rope_scaling.rope_theta)
//   optional  num_key_value_heads (= heads), head_dim (= hidden / heads),
//             tie_word_embeddings (false), hidden_act ("silu"),
//             attention_bias (false), partial_rotary_factor (1 dense,
//             0.25 hybrid; also read from rope_parameters)
//   hybrid    linear_num_key_heads, linear_num_value_heads,
//             linear_key_head_dim, linear_value_head_dim,
//             linear_conv_kernel_dim (all required); layer_types, else
//             full_attention_interval (default 4): block i is full attention
//             when (i + 1) % interval == 0; attn_output_gate (true)
//   MoE       num_experts (0 allowed: no experts), num_experts_per_tok,
//             moe_intermediate_size, shared_expert_intermediate_size,
//             norm_topk_prob, decoder_sparse_step, mlp_only_layers —
//             recorded when num_experts is present
//
// Checks: every key of the right JSON type (integers are integers, not
// floats or bools), sizes positive, eps and θ finite and positive,
// heads % kv_heads == 0, qwen2 (and llama without head_dim): hidden ==
// heads · head_dim, rotary_dim = head_dim · partial_rotary_factor an even
// integer in [2, head_dim], linear value heads a multiple of key heads,
// layer_types of length num_hidden_layers. Failures are bitrank::Error
// naming the file and the key (text_config.* when nested).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace bitrank::io {

enum class ModelFamily : std::uint8_t { llama, qwen2, qwen3, qwen3_next, qwen3_5 };
enum class LayerType : std::uint8_t { full_attention, linear_attention };

std::string_view model_family_name(ModelFamily f);
std::string_view layer_type_name(LayerType t);

// Gated DeltaNet mixer sizes (hybrid families).
struct LinearAttentionConfig {
  std::int64_t num_key_heads = 0;
  std::int64_t num_value_heads = 0;
  std::int64_t key_head_dim = 0;
  std::int64_t value_head_dim = 0;
  std::int64_t conv_kernel_dim = 0;
  bool operator==(const LinearAttentionConfig&) const = default;
};

// Mixture-of-experts MLP settings, as the config gives them (0 / empty when a key is absent).
struct MoeConfig {
  std::int64_t num_experts = 0;
  std::int64_t num_experts_per_tok = 0;
  std::int64_t moe_intermediate_size = 0;
  std::int64_t shared_expert_intermediate_size = 0;
  bool norm_topk_prob = false;
  std::int64_t decoder_sparse_step = 1;
  std::vector<std::int64_t> mlp_only_layers;
  bool operator==(const MoeConfig&) const = default;
};

struct ModelConfig {
  ModelFamily family = ModelFamily::llama;
  std::string model_type;  // as written (e.g. "qwen3_5" or "qwen3_5_text")

  std::int64_t hidden_size = 0;
  std::int64_t num_layers = 0;
  std::int64_t num_heads = 0;
  std::int64_t num_kv_heads = 0;
  std::int64_t head_dim = 0;
  std::int64_t intermediate_size = 0;
  std::int64_t vocab_size = 0;
  std::int64_t max_position_embeddings = 0;
  double rms_norm_eps = 0;
  double rope_theta = 0;
  double partial_rotary_factor = 1;
  bool tie_word_embeddings = false;
  bool attention_bias = false;
  std::string hidden_act = "silu";

  // Hybrid families only: one entry per block, and the GDN sizes.
  std::vector<LayerType> layer_types;
  std::optional<LinearAttentionConfig> linear;
  bool attn_output_gate = false;  // full attention output ⊙ σ(gate)

  std::optional<MoeConfig> moe;

  bool is_hybrid() const { return family == ModelFamily::qwen3_next || family == ModelFamily::qwen3_5; }
  // RoPE dims per head: head_dim · partial_rotary_factor.
  std::int64_t rotary_dim() const;
  bool operator==(const ModelConfig&) const = default;
};

// Reads `path` (a config.json, or a directory holding one).
ModelConfig read_hf_config(const std::filesystem::path& path);
// Parses config text; `file` names it in errors.
ModelConfig parse_hf_config(std::string_view json_text, const std::string& file);

// The config as Hugging Face-style config.json text (every key above at the
// top level, indented), which parse_hf_config reads back to an equal
// ModelConfig; a config that would not (it fails a check above, or holds a
// field its family does not read) is a bitrank::Error naming `where`.
std::string hf_config_to_json(const ModelConfig& config, const std::string& where);

}  // namespace bitrank::io
