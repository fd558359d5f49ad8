// Dense Llama-style weights from GGUF: the config from its metadata, every
// tensor dequantized to f32 and checked, q/k rows put back in half-split
// RoPE order (contract: include/bitrank/model/model.hpp).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "bitrank/error.hpp"
#include "bitrank/io/gguf.hpp"
#include "bitrank/io/safetensors.hpp"
#include "bitrank/model/hf_names.hpp"
#include "bitrank/model/model.hpp"
#include "model/gguf_util.hpp"

namespace bitrank::model {
namespace {

// llama.cpp stores q (and k) rows of each head interleaved for adjacent-pair
// RoPE: GGUF row 2i + j of a head is HF row j·half + i. This puts them back.
void unpermute_rows(HostTensor& t, index_t heads) {
  const index_t rows = t.shape[0], cols = t.shape[1], hd = rows / heads, half = hd / 2;
  std::vector<float> out(t.values.size());
  for (index_t h = 0; h < heads; ++h)
    for (index_t i = 0; i < half; ++i)
      for (index_t j = 0; j < 2; ++j) {
        const float* src = t.values.data() + (h * hd + 2 * i + j) * cols;
        std::copy(src, src + cols, out.data() + (h * hd + j * half + i) * cols);
      }
  t.values = std::move(out);
}

}  // namespace

ModelConfig config_from_gguf(const io::GgufFile& g) {
  const std::string arch = g.has("general.architecture") ? g.get_string("general.architecture") : std::string("(none)");
  if (arch != "llama")
    fail("gguf '{}': unknown architecture '{}' (general.architecture); supported: llama", g.name(), arch);
  const std::string p = "llama.";
  ModelConfig c;
  c.family = io::ModelFamily::llama;
  c.model_type = "llama";
  c.hidden_size = gguf_positive(g, p + "embedding_length");
  c.num_layers = gguf_positive(g, p + "block_count");
  c.num_heads = gguf_positive(g, p + "attention.head_count");
  c.num_kv_heads = g.has(p + "attention.head_count_kv") ? gguf_positive(g, p + "attention.head_count_kv") : c.num_heads;
  c.intermediate_size = gguf_positive(g, p + "feed_forward_length");
  c.max_position_embeddings = g.has(p + "context_length") ? gguf_positive(g, p + "context_length") : 0;
  c.rms_norm_eps = gguf_real(g, p + "attention.layer_norm_rms_epsilon");
  c.rope_theta = g.has(p + "rope.freq_base") ? gguf_real(g, p + "rope.freq_base") : 10000.0;
  if (c.num_heads % c.num_kv_heads != 0)
    fail("gguf '{}': attention.head_count {} is not a multiple of head_count_kv {}", g.name(), c.num_heads,
         c.num_kv_heads);
  c.head_dim = g.has(p + "attention.key_length") ? gguf_positive(g, p + "attention.key_length")
                                                  : c.hidden_size / c.num_heads;
  if (c.head_dim * c.num_heads != c.hidden_size && !g.has(p + "attention.key_length"))
    fail("gguf '{}': embedding_length {} is not a multiple of head_count {}", g.name(), c.hidden_size, c.num_heads);
  if (c.head_dim % 2 != 0) fail("gguf '{}': head_dim {} is odd; RoPE needs pairs", g.name(), c.head_dim);
  if (g.has(p + "rope.dimension_count") && g.get_int(p + "rope.dimension_count") != c.head_dim)
    fail("gguf '{}': rope.dimension_count {} differs from head_dim {} (partial rotary is not a llama model)",
         g.name(), g.get_int(p + "rope.dimension_count"), c.head_dim);
  if (!(std::isfinite(c.rms_norm_eps) && c.rms_norm_eps > 0))
    fail("gguf '{}': attention.layer_norm_rms_epsilon is {}, expected finite and positive", g.name(), c.rms_norm_eps);
  if (!(std::isfinite(c.rope_theta) && c.rope_theta > 0))
    fail("gguf '{}': rope.freq_base is {}, expected finite and positive", g.name(), c.rope_theta);
  if (g.has(p + "vocab_size"))
    c.vocab_size = gguf_positive(g, p + "vocab_size");
  else if (g.has("tokenizer.ggml.tokens"))
    c.vocab_size = static_cast<std::int64_t>(g.value("tokenizer.ggml.tokens").array_size());
  else
    c.vocab_size = static_cast<std::int64_t>(g.tensor_info("token_embd.weight").dims[1]);
  c.tie_word_embeddings = g.find_tensor("output.weight") == nullptr;
  return c;
}

TensorList expected_tensors(const ModelConfig& c) {
  const index_t d = c.hidden_size, q = c.num_heads * c.head_dim, kv = c.num_kv_heads * c.head_dim,
                f = c.intermediate_size, V = c.vocab_size;
  TensorList out;
  out.push_back({"token_embd.weight", {V, d}});
  for (index_t b = 0; b < c.num_layers; ++b) {
    const std::string p = "blk." + std::to_string(b) + ".";
    out.push_back({p + "attn_norm.weight", {d}});
    out.push_back({p + "attn_q.weight", {q, d}});
    out.push_back({p + "attn_k.weight", {kv, d}});
    out.push_back({p + "attn_v.weight", {kv, d}});
    out.push_back({p + "attn_output.weight", {d, q}});
    out.push_back({p + "ffn_norm.weight", {d}});
    out.push_back({p + "ffn_gate.weight", {f, d}});
    out.push_back({p + "ffn_up.weight", {f, d}});
    out.push_back({p + "ffn_down.weight", {d, f}});
  }
  out.push_back({"output_norm.weight", {d}});
  if (!c.tie_word_embeddings) out.push_back({"output.weight", {V, d}});
  return out;
}

void check_llama_config(const ModelConfig& c, const std::string& source) {
  if (c.is_hybrid())
    fail("model '{}': model_type '{}' is a hybrid, not a dense Llama-style model (HybridModel runs it)", source,
         c.model_type);
  if (c.hidden_size <= 0 || c.num_layers <= 0 || c.num_heads <= 0 || c.num_kv_heads <= 0 || c.head_dim <= 0 ||
      c.intermediate_size <= 0 || c.vocab_size <= 0)
    fail("model '{}': config sizes must be positive", source);
  if (c.num_heads % c.num_kv_heads != 0 || c.head_dim % 2 != 0)
    fail("model '{}': {} heads / {} kv heads of {} do not make a RoPE GQA layer", source, c.num_heads,
         c.num_kv_heads, c.head_dim);
}

void check_weights(const HostWeights& w) { check_weights(w, {}); }

HostWeights load_gguf_weights(const io::GgufFile& g) {
  HostWeights w;
  w.source = g.name();
  w.config = config_from_gguf(g);
  for (const auto& [name, shape] : expected_tensors(w.config)) {
    gguf_tensor(g, name, shape);
    HostTensor t{shape, g.dequantize(name)};
    const bool is_q = name.ends_with(".attn_q.weight"), is_k = name.ends_with(".attn_k.weight");
    if (is_q) unpermute_rows(t, w.config.num_heads);
    if (is_k) unpermute_rows(t, w.config.num_kv_heads);
    w.tensors.emplace(name, std::move(t));
  }
  check_weights(w);
  return w;
}

HostWeights load_gguf_weights(const std::filesystem::path& path) {
  // The data is dequantized (and checked finite) as it is loaded, so the
  // header check alone is enough here.
  const io::GgufFile g = io::GgufFile::open(path, io::GgufOptions{.verify_data = false});
  return load_gguf_weights(g);
}

HostWeights load_hf_weights(const io::Safetensors& st, const ModelConfig& config, const std::string& source) {
  if (config.family != io::ModelFamily::llama || config.attention_bias)
    fail("model '{}': model_type '{}'{} is not a dense llama model without biases", source, config.model_type,
         config.attention_bias ? " with attention_bias" : "");
  if (config.rotary_dim() != config.head_dim)
    fail("model '{}': partial rotary ({} of {} dims) is not supported", source, config.rotary_dim(), config.head_dim);
  HostWeights w;
  w.source = source;
  w.config = config;
  for (const auto& [name, shape] : expected_tensors(config)) {
    const std::string hf = hf_tensor_name(config, name);
    if (!st.contains(hf)) fail("model '{}': tensor {} is missing", source, hf);
    const io::TensorInfo& info = st.info(hf);
    if (info.shape != shape)
      fail("model '{}': tensor {} has shape {}, expected {}", source, hf, shape_str(info.shape), shape_str(shape));
    w.tensors.emplace(name, HostTensor{shape, st.read_f32(hf)});
  }
  check_weights(w);
  return w;
}

HostWeights load_hf_weights(const std::filesystem::path& dir) {
  const ModelConfig config = io::read_hf_config(dir);
  const io::Safetensors st = io::Safetensors::open(dir);
  return load_hf_weights(st, config, dir.string());
}

}  // namespace bitrank::model
