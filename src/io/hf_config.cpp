// Hugging Face config.json reader; the keys and checks are listed in
// bitrank/io/hf_config.hpp.
#include "bitrank/io/hf_config.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "bitrank/error.hpp"
#include "json_checked.hpp"

namespace bitrank::io {

namespace {

using nlohmann::json;

constexpr std::int64_t kMaxSize = INT32_MAX;  // no real size comes near; keeps products in range
constexpr std::uintmax_t kMaxConfigBytes = 16u << 20;

// Typed access to one JSON object of the config; `prefix` is how its keys
// are named in errors ("" or "text_config.").
class Keys {
 public:
  Keys(const json& obj, std::string file, std::string prefix)
      : obj_(obj), file_(std::move(file)), prefix_(std::move(prefix)) {}

  // The value, or nullptr when absent or null.
  const json* find(std::string_view key) const {
    const auto it = obj_.find(key);
    return it == obj_.end() || it->is_null() ? nullptr : &*it;
  }

  template <class... Args>
  [[noreturn]] void bad(std::string_view key, format_string<Args...> f, Args&&... args) const {
    fail("{}: key '{}{}': {}", file_, prefix_, key, ::bitrank::format(f, std::forward<Args>(args)...));
  }

  const json& required(std::string_view key) const {
    const json* v = find(key);
    if (!v) fail("{}: missing required key '{}{}'", file_, prefix_, key);
    return *v;
  }

  std::int64_t as_int(std::string_view key, const json& v) const {
    if (!v.is_number_integer()) bad(key, "must be an integer, got {}", json_excerpt(v));
    if (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(INT64_MAX))
      bad(key, "{} is out of range", json_excerpt(v));
    return v.get<std::int64_t>();
  }
  std::int64_t as_size(std::string_view key, const json& v) const {
    const std::int64_t n = as_int(key, v);
    if (n <= 0 || n > kMaxSize) bad(key, "must be a positive size up to {}, got {}", kMaxSize, n);
    return n;
  }
  std::int64_t size(std::string_view key) const { return as_size(key, required(key)); }
  std::int64_t size_or(std::string_view key, std::int64_t fallback) const {
    const json* v = find(key);
    return v ? as_size(key, *v) : fallback;
  }
  std::optional<std::int64_t> opt_size(std::string_view key) const {
    const json* v = find(key);
    return v ? std::optional<std::int64_t>(as_size(key, *v)) : std::nullopt;
  }

  double as_positive(std::string_view key, const json& v) const {
    if (!v.is_number()) bad(key, "must be a number, got {}", json_excerpt(v));
    const double x = v.get<double>();
    if (!std::isfinite(x) || x <= 0) bad(key, "must be finite and positive, got {}", json_excerpt(v));
    return x;
  }
  double positive(std::string_view key) const { return as_positive(key, required(key)); }
  std::optional<double> opt_positive(std::string_view key) const {
    const json* v = find(key);
    return v ? std::optional<double>(as_positive(key, *v)) : std::nullopt;
  }

  bool boolean_or(std::string_view key, bool fallback) const {
    const json* v = find(key);
    if (!v) return fallback;
    if (!v->is_boolean()) bad(key, "must be true or false, got {}", json_excerpt(*v));
    return v->get<bool>();
  }
  std::optional<bool> opt_boolean(std::string_view key) const {
    const json* v = find(key);
    if (!v) return std::nullopt;
    return boolean_or(key, false);
  }
  std::string string_or(std::string_view key, std::string fallback) const {
    const json* v = find(key);
    if (!v) return fallback;
    if (!v->is_string()) bad(key, "must be a string, got {}", json_excerpt(*v));
    return v->get<std::string>();
  }

  // A nested object (e.g. rope_parameters) as Keys, if present.
  std::optional<Keys> object(std::string_view key) const {
    const json* v = find(key);
    if (!v) return std::nullopt;
    if (!v->is_object()) bad(key, "must be an object, got {}", json_excerpt(*v));
    return Keys(*v, file_, prefix_ + std::string(key) + ".");
  }

  const std::string& file() const { return file_; }
  const std::string& prefix() const { return prefix_; }

 private:
  const json& obj_;
  std::string file_;
  std::string prefix_;
};

std::optional<ModelFamily> family_of(std::string_view model_type) {
  if (model_type == "llama") return ModelFamily::llama;
  if (model_type == "qwen2") return ModelFamily::qwen2;
  if (model_type == "qwen3") return ModelFamily::qwen3;
  if (model_type == "qwen3_next") return ModelFamily::qwen3_next;
  if (model_type == "qwen3_5" || model_type == "qwen3_5_text") return ModelFamily::qwen3_5;
  return std::nullopt;
}

// A value that may sit at the top level or inside a nested object (rope
// parameters): both present and different is an error.
std::optional<double> positive_either(const Keys& top, const std::optional<Keys>& nested, std::string_view key) {
  const auto a = top.opt_positive(key);
  const auto b = nested ? nested->opt_positive(key) : std::nullopt;
  if (a && b && *a != *b)
    fail("{}: key '{}{}' = {} disagrees with '{}{}' = {}", top.file(), top.prefix(), key, *a, nested->prefix(), key, *b);
  return a ? a : b;
}

void read_hybrid(const Keys& k, ModelConfig& c) {
  LinearAttentionConfig lin;
  lin.num_key_heads = k.size("linear_num_key_heads");
  lin.num_value_heads = k.size("linear_num_value_heads");
  lin.key_head_dim = k.size("linear_key_head_dim");
  lin.value_head_dim = k.size("linear_value_head_dim");
  lin.conv_kernel_dim = k.size("linear_conv_kernel_dim");
  if (lin.num_value_heads % lin.num_key_heads != 0)
    k.bad("linear_num_value_heads", "{} is not a multiple of linear_num_key_heads {}", lin.num_value_heads,
          lin.num_key_heads);
  c.linear = lin;
  c.attn_output_gate = k.boolean_or("attn_output_gate", true);

  const auto interval = k.opt_size("full_attention_interval");
  auto by_interval = [&](std::int64_t every) {
    std::vector<LayerType> t(static_cast<std::size_t>(c.num_layers));
    for (std::int64_t i = 0; i < c.num_layers; ++i)
      t[static_cast<std::size_t>(i)] = (i + 1) % every == 0 ? LayerType::full_attention : LayerType::linear_attention;
    return t;
  };
  if (const json* lt = k.find("layer_types")) {
    if (!lt->is_array()) k.bad("layer_types", "must be an array, got {}", json_excerpt(*lt));
    if (static_cast<std::int64_t>(lt->size()) != c.num_layers)
      k.bad("layer_types", "has {} entries for {} layers (num_hidden_layers)", lt->size(), c.num_layers);
    for (std::size_t i = 0; i < lt->size(); ++i) {
      const json& v = (*lt)[i];
      if (v == "full_attention")
        c.layer_types.push_back(LayerType::full_attention);
      else if (v == "linear_attention")
        c.layer_types.push_back(LayerType::linear_attention);
      else
        k.bad("layer_types", "entry {} is {}, expected \"full_attention\" or \"linear_attention\"", i, json_excerpt(v));
    }
    if (interval && c.layer_types != by_interval(*interval))
      k.bad("layer_types", "disagrees with full_attention_interval {}", *interval);
  } else {
    c.layer_types = by_interval(interval.value_or(4));
  }
}

void read_moe(const Keys& k, ModelConfig& c) {
  const json* experts = k.find("num_experts");
  if (!experts) return;
  MoeConfig m;
  // 0 experts (a dense model written with the MoE keys) is allowed.
  m.num_experts = k.as_int("num_experts", *experts);
  if (m.num_experts < 0 || m.num_experts > kMaxSize)
    k.bad("num_experts", "must be a count from 0 to {}, got {}", kMaxSize, m.num_experts);
  m.num_experts_per_tok = k.size_or("num_experts_per_tok", 0);
  if (m.num_experts > 0 && m.num_experts_per_tok > m.num_experts)
    k.bad("num_experts_per_tok", "{} exceeds num_experts {}", m.num_experts_per_tok, m.num_experts);
  m.moe_intermediate_size = k.size_or("moe_intermediate_size", 0);
  m.shared_expert_intermediate_size = k.size_or("shared_expert_intermediate_size", 0);
  m.norm_topk_prob = k.boolean_or("norm_topk_prob", false);
  m.decoder_sparse_step = k.size_or("decoder_sparse_step", 1);
  if (const json* ml = k.find("mlp_only_layers")) {
    if (!ml->is_array()) k.bad("mlp_only_layers", "must be an array, got {}", json_excerpt(*ml));
    for (const json& v : *ml) {
      const std::int64_t i = k.as_int("mlp_only_layers", v);
      if (i < 0 || i >= c.num_layers) k.bad("mlp_only_layers", "layer {} is outside 0..{}", i, c.num_layers - 1);
      m.mlp_only_layers.push_back(i);
    }
  }
  c.moe = m;
}

}  // namespace

std::string_view model_family_name(ModelFamily f) {
  switch (f) {
    case ModelFamily::llama: return "llama";
    case ModelFamily::qwen2: return "qwen2";
    case ModelFamily::qwen3: return "qwen3";
    case ModelFamily::qwen3_next: return "qwen3_next";
    case ModelFamily::qwen3_5: return "qwen3_5";
  }
  return "?";
}

std::string_view layer_type_name(LayerType t) {
  return t == LayerType::full_attention ? "full_attention" : "linear_attention";
}

std::int64_t ModelConfig::rotary_dim() const {
  return static_cast<std::int64_t>(std::llround(static_cast<double>(head_dim) * partial_rotary_factor));
}

ModelConfig parse_hf_config(std::string_view json_text, const std::string& file) {
  const json root = parse_json_checked(json_text, file, "config", /*max_depth=*/16);
  if (!root.is_object()) fail("{}: config must be a JSON object, got {}", file, root.type_name());
  const Keys top(root, file, "");

  ModelConfig c;
  c.model_type = top.string_or("model_type", "");
  if (c.model_type.empty()) fail("{}: missing required key 'model_type'", file);
  const auto family = family_of(c.model_type);
  if (!family)
    top.bad("model_type", "unknown model type \"{}\" (known: llama, qwen2, qwen3, qwen3_next, qwen3_5)", c.model_type);
  c.family = *family;

  // Qwen3.5's multimodal config nests the language model under text_config.
  const std::optional<Keys> nested =
      c.family == ModelFamily::qwen3_5 ? top.object("text_config") : std::optional<Keys>();
  const Keys& k = nested ? *nested : top;
  if (nested) {
    const std::string inner = k.string_or("model_type", "qwen3_5_text");
    if (inner != "qwen3_5_text" && inner != "qwen3_5")
      k.bad("model_type", "is \"{}\", expected \"qwen3_5_text\"", inner);
  }

  c.hidden_size = k.size("hidden_size");
  c.num_layers = k.size("num_hidden_layers");
  c.num_heads = k.size("num_attention_heads");
  c.num_kv_heads = k.size_or("num_key_value_heads", c.num_heads);
  c.intermediate_size = k.size("intermediate_size");
  c.vocab_size = k.size("vocab_size");
  c.max_position_embeddings = k.size("max_position_embeddings");
  c.rms_norm_eps = k.positive("rms_norm_eps");
  c.hidden_act = k.string_or("hidden_act", "silu");
  c.attention_bias = k.boolean_or("attention_bias", false);

  if (c.num_heads % c.num_kv_heads != 0)
    k.bad("num_key_value_heads", "{} does not divide num_attention_heads {}", c.num_kv_heads, c.num_heads);

  const auto given_head_dim = k.opt_size("head_dim");
  if (!given_head_dim || c.family == ModelFamily::qwen2) {
    if (c.hidden_size % c.num_heads != 0)
      k.bad("num_attention_heads", "{} does not divide hidden_size {} (head_dim is derived from them)", c.num_heads,
            c.hidden_size);
  }
  c.head_dim = given_head_dim.value_or(c.hidden_size / c.num_heads);
  if (c.family == ModelFamily::qwen2 && c.head_dim * c.num_heads != c.hidden_size)
    k.bad("head_dim", "{} · {} heads != hidden_size {} (qwen2 fixes head_dim = hidden / heads)", c.head_dim,
          c.num_heads, c.hidden_size);

  // RoPE: θ and the rotary fraction, at the top level or in rope_parameters
  // (newer transformers) / rope_scaling.
  const auto rope_params = k.object("rope_parameters");
  const auto rope_scaling = k.object("rope_scaling");
  auto theta = positive_either(k, rope_params, "rope_theta");
  if (!theta && rope_scaling) theta = rope_scaling->opt_positive("rope_theta");
  if (!theta) fail("{}: missing required key '{}rope_theta' (or {}rope_parameters.rope_theta)", file, k.prefix(), k.prefix());
  c.rope_theta = *theta;
  const auto prf = positive_either(k, rope_params, "partial_rotary_factor");
  c.partial_rotary_factor = prf.value_or(c.is_hybrid() ? 0.25 : 1.0);
  {
    const double rd = static_cast<double>(c.head_dim) * std::min(c.partial_rotary_factor, 1.0);
    const auto r = static_cast<std::int64_t>(std::llround(rd));
    if (c.partial_rotary_factor > 1 || std::abs(rd - static_cast<double>(r)) > 1e-9 || r < 2 || r % 2 != 0)
      k.bad("partial_rotary_factor", "{} · head_dim {} must give an even rotary width in [2, head_dim]",
            c.partial_rotary_factor, c.head_dim);
  }

  // Tied embeddings: the text part's flag or the top level's; both must agree.
  const auto tie_top = top.opt_boolean("tie_word_embeddings");
  const auto tie_text = nested ? nested->opt_boolean("tie_word_embeddings") : std::nullopt;
  if (tie_top && tie_text && *tie_top != *tie_text)
    fail("{}: key 'tie_word_embeddings' = {} disagrees with 'text_config.tie_word_embeddings' = {}", file, *tie_top,
         *tie_text);
  c.tie_word_embeddings = tie_text.value_or(tie_top.value_or(false));

  if (c.is_hybrid()) read_hybrid(k, c);
  read_moe(k, c);
  return c;
}

std::string hf_config_to_json(const ModelConfig& c, const std::string& where) {
  nlohmann::ordered_json j;
  j["model_type"] = c.model_type;
  j["hidden_size"] = c.hidden_size;
  j["num_hidden_layers"] = c.num_layers;
  j["num_attention_heads"] = c.num_heads;
  j["num_key_value_heads"] = c.num_kv_heads;
  j["head_dim"] = c.head_dim;
  j["intermediate_size"] = c.intermediate_size;
  j["vocab_size"] = c.vocab_size;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["rms_norm_eps"] = c.rms_norm_eps;  // doubles are written to read back exactly
  j["rope_theta"] = c.rope_theta;
  j["partial_rotary_factor"] = c.partial_rotary_factor;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["attention_bias"] = c.attention_bias;
  j["hidden_act"] = c.hidden_act;
  if (c.is_hybrid()) {
    if (c.linear) {
      j["linear_num_key_heads"] = c.linear->num_key_heads;
      j["linear_num_value_heads"] = c.linear->num_value_heads;
      j["linear_key_head_dim"] = c.linear->key_head_dim;
      j["linear_value_head_dim"] = c.linear->value_head_dim;
      j["linear_conv_kernel_dim"] = c.linear->conv_kernel_dim;
    }
    j["attn_output_gate"] = c.attn_output_gate;
    auto& types = j["layer_types"] = nlohmann::ordered_json::array();
    for (const LayerType t : c.layer_types) types.push_back(std::string(layer_type_name(t)));
  }
  if (c.moe) {
    const MoeConfig& m = *c.moe;
    j["num_experts"] = m.num_experts;
    // Absent keys read back as 0; a 0 is written as absent.
    if (m.num_experts_per_tok) j["num_experts_per_tok"] = m.num_experts_per_tok;
    if (m.moe_intermediate_size) j["moe_intermediate_size"] = m.moe_intermediate_size;
    if (m.shared_expert_intermediate_size) j["shared_expert_intermediate_size"] = m.shared_expert_intermediate_size;
    j["norm_topk_prob"] = m.norm_topk_prob;
    j["decoder_sparse_step"] = m.decoder_sparse_step;
    j["mlp_only_layers"] = m.mlp_only_layers;
  }
  std::string text;
  try {
    text = j.dump(2);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: the config cannot be written as JSON: {}", where, e.what());
  }
  // One reader decides what a valid config is: the text must read back to c.
  if (parse_hf_config(text, where) != c)
    fail("{}: the config does not read back unchanged from its config.json form (a field its family "
         "'{}' does not use is set, or a derived field disagrees)", where, c.model_type);
  return text;
}

ModelConfig read_hf_config(const std::filesystem::path& path) {
  std::filesystem::path p = path;
  std::error_code ec;
  if (std::filesystem::is_directory(p, ec)) p /= "config.json";
  const std::string file = p.string();
  std::ifstream f(p, std::ios::binary);
  if (!f) fail("{}: cannot open", file);
  const auto size = std::filesystem::file_size(p, ec);
  if (ec) fail("{}: cannot stat: {}", file, ec.message());
  if (size > kMaxConfigBytes) fail("{}: {} bytes, more than the {}-byte limit for a config", file, size, kMaxConfigBytes);
  std::ostringstream text;
  text << f.rdbuf();
  return parse_hf_config(text.str(), file);
}

}  // namespace bitrank::io
