// Hybrid (Qwen3.5 / Qwen3-Next) weights: the config checks, the Hugging
// Face loader for both GDN layouts, the GGUF ("qwen35") loader with
// llama.cpp's conversions undone (contract and layouts:
// include/bitrank/model/hybrid.hpp).
#include <algorithm>
#include <cmath>
#include <set>
#include <string>

#include "bitrank/error.hpp"
#include "bitrank/io/gguf.hpp"
#include "bitrank/io/safetensors.hpp"
#include "bitrank/model/hybrid.hpp"
#include "model/gguf_util.hpp"

namespace bitrank::model {
namespace {

std::string blk(index_t b) { return "blk." + std::to_string(b) + "."; }

// transformers' Qwen3NextConfig default when config.json omits num_experts.
constexpr std::int64_t kQwen3NextDefaultExperts = 512;

// The GDN sizes, named as in the op.
struct GdnSizes {
  index_t hk, hv, dk, dv, K, r, C;
  explicit GdnSizes(const ModelConfig& c)
      : hk(c.linear->num_key_heads), hv(c.linear->num_value_heads), dk(c.linear->key_head_dim),
        dv(c.linear->value_head_dim), K(c.linear->conv_kernel_dim), r(hv / hk), C(2 * hk * dk + hv * dv) {}
};

bool full_attention(const ModelConfig& c, index_t b) {
  return c.layer_types[static_cast<std::size_t>(b)] == io::LayerType::full_attention;
}

}  // namespace

bool hybrid_block_is_moe(const ModelConfig& c, index_t b) {
  if (c.family != io::ModelFamily::qwen3_next) return false;  // Qwen3.5's MLP is always dense
  const std::int64_t experts = c.moe ? c.moe->num_experts : kQwen3NextDefaultExperts;
  const std::int64_t step = c.moe ? c.moe->decoder_sparse_step : 1;
  if (experts <= 0) return false;
  if (c.moe && std::ranges::find(c.moe->mlp_only_layers, b) != c.moe->mlp_only_layers.end()) return false;
  return (b + 1) % step == 0;
}

void check_hybrid_config(const ModelConfig& c, const std::string& source) {
  if (!c.is_hybrid()) fail("model '{}': model_type '{}' is not a Qwen3.5 / Qwen3-Next hybrid", source, c.model_type);
  if (!c.linear) fail("model '{}': the hybrid config has no linear-attention (GDN) sizes", source);
  if (c.hidden_size <= 0 || c.num_layers <= 0 || c.num_heads <= 0 || c.num_kv_heads <= 0 || c.head_dim <= 0 ||
      c.intermediate_size <= 0 || c.vocab_size <= 0)
    fail("model '{}': config sizes must be positive", source);
  if (c.num_heads % c.num_kv_heads != 0)
    fail("model '{}': {} attention heads are not a multiple of {} kv heads", source, c.num_heads, c.num_kv_heads);
  const index_t rot = c.rotary_dim();
  if (rot < 2 || rot % 2 != 0 || rot > c.head_dim)
    fail("model '{}': rotary dims {} (head_dim {} · partial_rotary_factor {}) must be even and within head_dim",
         source, rot, c.head_dim, c.partial_rotary_factor);
  if (!(std::isfinite(c.rms_norm_eps) && c.rms_norm_eps > 0) || !(std::isfinite(c.rope_theta) && c.rope_theta > 0))
    fail("model '{}': rms_norm_eps {} and rope_theta {} must be finite and positive", source, c.rms_norm_eps,
         c.rope_theta);
  if (c.hidden_act != "silu") fail("model '{}': hidden_act '{}' is not supported (silu)", source, c.hidden_act);
  if (c.attention_bias) fail("model '{}': attention_bias is not supported", source);
  const io::LinearAttentionConfig& l = *c.linear;
  if (l.num_key_heads <= 0 || l.num_value_heads <= 0 || l.key_head_dim <= 0 || l.value_head_dim <= 0 ||
      l.conv_kernel_dim <= 0)
    fail("model '{}': linear-attention sizes must be positive", source);
  if (l.num_value_heads % l.num_key_heads != 0)
    fail("model '{}': {} linear value heads are not a multiple of {} key heads", source, l.num_value_heads,
         l.num_key_heads);
  if (l.key_head_dim != l.value_head_dim)
    fail("model '{}': linear key head dim {} differs from value head dim {} (the GDN op takes dk = dv)", source,
         l.key_head_dim, l.value_head_dim);
  if (static_cast<index_t>(c.layer_types.size()) != c.num_layers)
    fail("model '{}': {} layer types for {} blocks", source, c.layer_types.size(), c.num_layers);
  for (index_t b = 0; b < c.num_layers; ++b)
    if (hybrid_block_is_moe(c, b))
      fail("model '{}': block {} has a mixture-of-experts MLP ({} experts, not in mlp_only_layers); MoE blocks are "
           "not supported",
           source, b, c.moe ? c.moe->num_experts : kQwen3NextDefaultExperts);
}

TensorList hybrid_expected_tensors(const ModelConfig& c) {
  const index_t d = c.hidden_size, H = c.num_heads, hd = c.head_dim, kv = c.num_kv_heads * hd,
                f = c.intermediate_size, V = c.vocab_size;
  TensorList out;
  out.push_back({"token_embd.weight", {V, d}});
  for (index_t b = 0; b < c.num_layers; ++b) {
    const std::string p = blk(b);
    out.push_back({p + "attn_norm.weight", {d}});
    out.push_back({p + "post_attention_norm.weight", {d}});
    if (full_attention(c, b)) {
      out.push_back({p + "attn_q.weight", {2 * H * hd, d}});
      out.push_back({p + "attn_k.weight", {kv, d}});
      out.push_back({p + "attn_v.weight", {kv, d}});
      out.push_back({p + "attn_output.weight", {d, H * hd}});
      out.push_back({p + "attn_q_norm.weight", {hd}});
      out.push_back({p + "attn_k_norm.weight", {hd}});
    } else {
      const GdnSizes g(c);
      out.push_back({p + "attn_qkv.weight", {g.C, d}});
      out.push_back({p + "attn_gate.weight", {g.hv * g.dv, d}});
      out.push_back({p + "ssm_beta.weight", {g.hv, d}});
      out.push_back({p + "ssm_alpha.weight", {g.hv, d}});
      out.push_back({p + "ssm_conv1d.weight", {g.C, g.K}});
      out.push_back({p + "ssm_a_log", {g.hv}});
      out.push_back({p + "ssm_dt.bias", {g.hv}});
      out.push_back({p + "ssm_norm.weight", {g.dv}});
      out.push_back({p + "ssm_out.weight", {d, g.hv * g.dv}});
    }
    out.push_back({p + "ffn_gate.weight", {f, d}});
    out.push_back({p + "ffn_up.weight", {f, d}});
    out.push_back({p + "ffn_down.weight", {d, f}});
  }
  out.push_back({"output_norm.weight", {d}});
  if (!c.tie_word_embeddings) out.push_back({"output.weight", {V, d}});
  return out;
}

void check_hybrid_weights(const HostWeights& w) {
  check_hybrid_config(w.config, w.source);
  check_tensors(w, hybrid_expected_tensors(w.config));
}

// ---------------------------------------------------------------------------
// Hugging Face checkpoints.

namespace {

class HfReader {
 public:
  HfReader(const io::Safetensors& st, std::string source) : st_(st), source_(std::move(source)) {}

  bool has(const std::string& name) const { return st_.contains(name); }

  // The tensor's values; it must exist with one of `shapes`.
  std::vector<float> read(const std::string& name, std::initializer_list<std::vector<index_t>> shapes) const {
    if (!st_.contains(name)) fail("model '{}': tensor {} is missing", source_, name);
    const io::TensorInfo& info = st_.info(name);
    if (std::find(shapes.begin(), shapes.end(), info.shape) == shapes.end())
      fail("model '{}': tensor {} in {} has shape {}, expected {}", source_, name, info.file, shape_str(info.shape),
           shape_str(*shapes.begin()));
    return st_.read_f32(name);
  }

 private:
  const io::Safetensors& st_;
  std::string source_;
};

// Rows [from, from + count) of a row-major matrix with `cols` columns, appended to out.
void append_rows(std::vector<float>& out, const std::vector<float>& m, index_t cols, index_t from, index_t count) {
  out.insert(out.end(), m.begin() + from * cols, m.begin() + (from + count) * cols);
}

// Qwen3-Next's in_proj_qkvz [Hk][q | k | v | z] and in_proj_ba [Hk][b | a]
// (row blocks per k-head group) → the separate qkv, z, b, a of Qwen3.5.
void deinterleave_qwen3_next(const GdnSizes& g, index_t d, const std::vector<float>& qkvz,
                             const std::vector<float>& ba, HostWeights& w, const std::string& p) {
  const index_t group_rows = 2 * g.dk + 2 * g.r * g.dv;
  std::vector<float> qkv, z, b, a;
  for (index_t part = 0; part < 3; ++part)  // q of every group, then k, then v
    for (index_t grp = 0; grp < g.hk; ++grp) {
      const index_t at = grp * group_rows + (part == 0 ? 0 : part == 1 ? g.dk : 2 * g.dk);
      append_rows(qkv, qkvz, d, at, part == 2 ? g.r * g.dv : g.dk);
    }
  for (index_t grp = 0; grp < g.hk; ++grp) {
    append_rows(z, qkvz, d, grp * group_rows + 2 * g.dk + g.r * g.dv, g.r * g.dv);
    append_rows(b, ba, d, grp * 2 * g.r, g.r);
    append_rows(a, ba, d, grp * 2 * g.r + g.r, g.r);
  }
  w.tensors[p + "attn_qkv.weight"] = HostTensor{{g.C, d}, std::move(qkv)};
  w.tensors[p + "attn_gate.weight"] = HostTensor{{g.hv * g.dv, d}, std::move(z)};
  w.tensors[p + "ssm_beta.weight"] = HostTensor{{g.hv, d}, std::move(b)};
  w.tensors[p + "ssm_alpha.weight"] = HostTensor{{g.hv, d}, std::move(a)};
}

// The block indices whose MLP has MoE tensors (mlp.experts.*, the router
// mlp.gate.weight, mlp.shared_expert*), with one such name each.
std::map<index_t, std::string> moe_tensors(const io::Safetensors& st, const std::string& prefix) {
  std::map<index_t, std::string> out;
  const std::string layers = prefix + "layers.";
  for (const io::TensorInfo& t : st.tensors()) {
    if (!t.name.starts_with(layers)) continue;
    const std::size_t dot = t.name.find('.', layers.size());
    if (dot == std::string::npos) continue;
    const std::string rest = t.name.substr(dot + 1);
    if (rest.starts_with("mlp.experts.") || rest == "mlp.gate.weight" || rest.starts_with("mlp.shared_expert")) {
      const std::string num = t.name.substr(layers.size(), dot - layers.size());
      if (!num.empty() && std::all_of(num.begin(), num.end(), [](char ch) { return ch >= '0' && ch <= '9'; }))
        out.emplace(std::stoll(num), t.name);
    }
  }
  return out;
}

}  // namespace

HostWeights load_hybrid_hf_weights(const io::Safetensors& st, const ModelConfig& config, const std::string& source) {
  check_hybrid_config(config, source);
  const ModelConfig& c = config;
  const index_t d = c.hidden_size, H = c.num_heads, hd = c.head_dim, kv = c.num_kv_heads * hd,
                f = c.intermediate_size, V = c.vocab_size;
  const GdnSizes g(c);
  const HfReader hf(st, source);

  // Qwen3.5's multimodal checkpoints keep the language model one level down.
  std::string prefix;
  for (const char* candidate : {"model.language_model.", "model."})
    if (hf.has(std::string(candidate) + "embed_tokens.weight")) {
      prefix = candidate;
      break;
    }
  if (prefix.empty())
    fail("model '{}': tensor model.embed_tokens.weight (or model.language_model.embed_tokens.weight) is missing",
         source);
  if (const auto moe = moe_tensors(st, prefix); !moe.empty())
    fail("model '{}': block {} has mixture-of-experts MLP tensors ({}); MoE blocks are not supported", source,
         moe.begin()->first, moe.begin()->second);

  HostWeights w;
  w.source = source;
  w.config = config;
  auto put = [&](const std::string& name, const std::string& hf_name, std::vector<index_t> shape) {
    w.tensors[name] = HostTensor{shape, hf.read(hf_name, {shape})};
  };
  put("token_embd.weight", prefix + "embed_tokens.weight", {V, d});
  for (index_t b = 0; b < c.num_layers; ++b) {
    const std::string p = blk(b), h = prefix + "layers." + std::to_string(b) + ".";
    put(p + "attn_norm.weight", h + "input_layernorm.weight", {d});
    put(p + "post_attention_norm.weight", h + "post_attention_layernorm.weight", {d});
    if (full_attention(c, b)) {
      put(p + "attn_q.weight", h + "self_attn.q_proj.weight", {2 * H * hd, d});
      put(p + "attn_k.weight", h + "self_attn.k_proj.weight", {kv, d});
      put(p + "attn_v.weight", h + "self_attn.v_proj.weight", {kv, d});
      put(p + "attn_output.weight", h + "self_attn.o_proj.weight", {d, H * hd});
      put(p + "attn_q_norm.weight", h + "self_attn.q_norm.weight", {hd});
      put(p + "attn_k_norm.weight", h + "self_attn.k_norm.weight", {hd});
    } else {
      const std::string l = h + "linear_attn.";
      if (hf.has(l + "in_proj_qkvz.weight")) {  // Qwen3-Next
        const auto qkvz = hf.read(l + "in_proj_qkvz.weight", {{2 * g.hk * g.dk + 2 * g.hv * g.dv, d}});
        const auto ba = hf.read(l + "in_proj_ba.weight", {{2 * g.hv, d}});
        deinterleave_qwen3_next(g, d, qkvz, ba, w, p);
      } else if (hf.has(l + "in_proj_qkv.weight")) {  // Qwen3.5
        put(p + "attn_qkv.weight", l + "in_proj_qkv.weight", {g.C, d});
        put(p + "attn_gate.weight", l + "in_proj_z.weight", {g.hv * g.dv, d});
        put(p + "ssm_beta.weight", l + "in_proj_b.weight", {g.hv, d});
        put(p + "ssm_alpha.weight", l + "in_proj_a.weight", {g.hv, d});
      } else {
        fail("model '{}': tensor {}in_proj_qkv.weight (Qwen3.5) or {}in_proj_qkvz.weight (Qwen3-Next) is missing",
             source, l, l);
      }
      // nn.Conv1d's depthwise weight is [C][1][K].
      w.tensors[p + "ssm_conv1d.weight"] =
          HostTensor{{g.C, g.K}, hf.read(l + "conv1d.weight", {{g.C, 1, g.K}, {g.C, g.K}})};
      put(p + "ssm_a_log", l + "A_log", {g.hv});
      put(p + "ssm_dt.bias", l + "dt_bias", {g.hv});
      put(p + "ssm_norm.weight", l + "norm.weight", {g.dv});
      put(p + "ssm_out.weight", l + "out_proj.weight", {d, g.hv * g.dv});
    }
    put(p + "ffn_gate.weight", h + "mlp.gate_proj.weight", {f, d});
    put(p + "ffn_up.weight", h + "mlp.up_proj.weight", {f, d});
    put(p + "ffn_down.weight", h + "mlp.down_proj.weight", {d, f});
  }
  put("output_norm.weight", prefix + "norm.weight", {d});
  if (!c.tie_word_embeddings) put("output.weight", "lm_head.weight", {V, d});
  check_hybrid_weights(w);
  return w;
}

HostWeights load_hybrid_hf_weights(const std::filesystem::path& dir) {
  const ModelConfig config = io::read_hf_config(dir);
  const io::Safetensors st = io::Safetensors::open(dir);
  return load_hybrid_hf_weights(st, config, dir.string());
}

// ---------------------------------------------------------------------------
// GGUF ("qwen35", llama.cpp's converter).

namespace {

// The GGUF name of an internal tensor (the same but for A_log, which GGUF
// stores as ssm_a = −exp(A_log)).
std::string gguf_name(const std::string& name) {
  if (name.ends_with(".ssm_a_log")) return name.substr(0, name.size() - 5) + "a";  // "….ssm_a"
  return name;
}

// Norms that the converter stores as w + 1.
bool baked_plus_one(const std::string& name) {
  for (const char* s : {".attn_norm.weight", ".post_attention_norm.weight", ".attn_q_norm.weight",
                        ".attn_k_norm.weight"})
    if (name.ends_with(s)) return true;
  return name == "output_norm.weight";
}

// GGUF's tiled v-head order back to transformers' grouped order, over the
// `heads` = hk·r blocks of `block` consecutive elements that start at
// element `from` of each of `outer` slices of `stride` elements: grouped
// head g·r + j is tiled head j·hk + g.
void untile_heads(std::vector<float>& v, index_t outer, index_t stride, index_t from, index_t hk, index_t r,
                  index_t block) {
  std::vector<float> tmp(static_cast<std::size_t>(hk * r * block));
  for (index_t o = 0; o < outer; ++o) {
    float* base = v.data() + o * stride + from;
    for (index_t g = 0; g < hk; ++g)
      for (index_t j = 0; j < r; ++j)
        std::copy_n(base + (j * hk + g) * block, block, tmp.data() + (g * r + j) * block);
    std::copy(tmp.begin(), tmp.end(), base);
  }
}

}  // namespace

ModelConfig hybrid_config_from_gguf(const io::GgufFile& g) {
  const std::string arch = g.has("general.architecture") ? g.get_string("general.architecture") : std::string("(none)");
  if (arch == "qwen3next")
    fail("gguf '{}': architecture 'qwen3next' stores every block's MLP as a mixture of experts, which bitrank does "
         "not support (qwen35 GGUFs and Hugging Face checkpoints with dense MLPs load)",
         g.name());
  if (arch != "qwen35")
    fail("gguf '{}': unknown architecture '{}' (general.architecture) for the hybrid model; supported: qwen35",
         g.name(), arch);
  const std::string p = "qwen35.";
  ModelConfig c;
  c.family = io::ModelFamily::qwen3_5;
  c.model_type = "qwen35";
  c.hidden_size = gguf_positive(g, p + "embedding_length");
  const std::int64_t all_blocks = gguf_positive(g, p + "block_count");
  const std::int64_t nextn = g.has(p + "nextn_predict_layers") ? g.get_int(p + "nextn_predict_layers") : 0;
  if (nextn < 0 || nextn >= all_blocks)
    fail("gguf '{}': nextn_predict_layers {} must be in [0, block_count {})", g.name(), nextn, all_blocks);
  c.num_layers = all_blocks - nextn;
  c.num_heads = gguf_positive(g, p + "attention.head_count");
  c.num_kv_heads = gguf_positive(g, p + "attention.head_count_kv");
  if (c.num_heads % c.num_kv_heads != 0)
    fail("gguf '{}': attention.head_count {} is not a multiple of head_count_kv {}", g.name(), c.num_heads,
         c.num_kv_heads);
  c.head_dim = g.has(p + "attention.key_length") ? gguf_positive(g, p + "attention.key_length")
                                                  : c.hidden_size / c.num_heads;
  if (g.has(p + "attention.value_length") && gguf_positive(g, p + "attention.value_length") != c.head_dim)
    fail("gguf '{}': attention.value_length {} differs from key_length {}", g.name(),
         g.get_int(p + "attention.value_length"), c.head_dim);
  c.intermediate_size = gguf_positive(g, p + "feed_forward_length");
  c.max_position_embeddings = g.has(p + "context_length") ? gguf_positive(g, p + "context_length") : 0;
  c.rms_norm_eps = gguf_real(g, p + "attention.layer_norm_rms_epsilon");
  if (!(std::isfinite(c.rms_norm_eps) && c.rms_norm_eps > 0))
    fail("gguf '{}': attention.layer_norm_rms_epsilon is {}, expected finite and positive", g.name(), c.rms_norm_eps);
  c.rope_theta = g.has(p + "rope.freq_base") ? gguf_real(g, p + "rope.freq_base") : 10000.0;
  if (!(std::isfinite(c.rope_theta) && c.rope_theta > 0))
    fail("gguf '{}': rope.freq_base is {}, expected finite and positive", g.name(), c.rope_theta);
  const std::int64_t rot = gguf_positive(g, p + "rope.dimension_count");
  if (rot % 2 != 0 || rot > c.head_dim)
    fail("gguf '{}': rope.dimension_count {} must be even and at most head_dim {}", g.name(), rot, c.head_dim);
  c.partial_rotary_factor = static_cast<double>(rot) / static_cast<double>(c.head_dim);

  io::LinearAttentionConfig lin;
  lin.conv_kernel_dim = gguf_positive(g, p + "ssm.conv_kernel");
  lin.key_head_dim = gguf_positive(g, p + "ssm.state_size");
  lin.num_key_heads = gguf_positive(g, p + "ssm.group_count");
  lin.num_value_heads = gguf_positive(g, p + "ssm.time_step_rank");
  const std::int64_t inner = gguf_positive(g, p + "ssm.inner_size");
  if (inner % lin.num_value_heads != 0)
    fail("gguf '{}': ssm.inner_size {} is not a multiple of ssm.time_step_rank {}", g.name(), inner,
         lin.num_value_heads);
  lin.value_head_dim = inner / lin.num_value_heads;
  if (lin.num_value_heads % lin.num_key_heads != 0)
    fail("gguf '{}': ssm.time_step_rank {} is not a multiple of ssm.group_count {}", g.name(), lin.num_value_heads,
         lin.num_key_heads);
  c.linear = lin;
  c.attn_output_gate = true;

  // Block types: an explicit per-block array, else every interval-th block is full attention.
  if (const io::GgufValue* rec = g.find(p + "attention.recurrent_layers")) {
    std::vector<bool> flags;
    if (const auto* bools = rec->get_if<std::vector<bool>>()) flags = *bools;
    else if (const auto* i32 = rec->get_if<std::vector<std::int32_t>>()) flags.assign(i32->begin(), i32->end());
    else if (const auto* u8 = rec->get_if<std::vector<std::uint8_t>>()) flags.assign(u8->begin(), u8->end());
    else
      fail("gguf '{}': key {}attention.recurrent_layers holds {}, expected an array of bool", g.name(), p,
           rec->type_name());
    if (static_cast<std::int64_t>(flags.size()) < c.num_layers)
      fail("gguf '{}': {}attention.recurrent_layers has {} entries for {} blocks", g.name(), p, flags.size(),
           c.num_layers);
    for (std::int64_t b = 0; b < c.num_layers; ++b)
      c.layer_types.push_back(flags[static_cast<std::size_t>(b)] ? io::LayerType::linear_attention
                                                                 : io::LayerType::full_attention);
  } else {
    const std::string key = p + "full_attention_interval";
    const std::int64_t every = g.has(key) ? gguf_positive(g, key) : 4;
    for (std::int64_t b = 0; b < c.num_layers; ++b)
      c.layer_types.push_back((b + 1) % every == 0 ? io::LayerType::full_attention : io::LayerType::linear_attention);
  }

  c.vocab_size = g.has(p + "vocab_size") ? gguf_positive(g, p + "vocab_size")
                                          : static_cast<std::int64_t>(g.tensor_info("token_embd.weight").dims[1]);
  c.tie_word_embeddings = g.find_tensor("output.weight") == nullptr;
  check_hybrid_config(c, g.name());
  return c;
}

void check_hybrid_gguf_tensors(const io::GgufFile& g, const ModelConfig& c) {
  check_hybrid_config(c, g.name());
  for (const auto& [name, shape] : hybrid_expected_tensors(c)) gguf_tensor(g, gguf_name(name), shape);
}

HostWeights load_hybrid_gguf_weights(const io::GgufFile& g) {
  HostWeights w;
  w.source = g.name();
  w.config = hybrid_config_from_gguf(g);
  const ModelConfig& c = w.config;
  check_hybrid_gguf_tensors(g, c);
  const GdnSizes s(c);
  const bool tiled = s.hk != s.hv;  // the converter reorders v-heads only then
  for (const auto& [name, shape] : hybrid_expected_tensors(c)) {
    HostTensor t{shape, g.dequantize(gguf_name(name))};
    if (baked_plus_one(name))
      for (float& v : t.values) v -= 1.0f;
    if (name.ends_with(".ssm_a_log"))
      for (float& v : t.values) {
        if (!(v < 0.0f) || !std::isfinite(v))
          fail("gguf '{}': tensor {} holds {}, expected ssm_a = -exp(A_log) < 0", g.name(), gguf_name(name), v);
        v = std::log(-v);
      }
    if (tiled) {
      const index_t d = c.hidden_size, qk_rows = 2 * s.hk * s.dk;
      if (name.ends_with(".attn_qkv.weight")) untile_heads(t.values, 1, 0, qk_rows * d, s.hk, s.r, s.dv * d);
      if (name.ends_with(".attn_gate.weight")) untile_heads(t.values, 1, 0, 0, s.hk, s.r, s.dv * d);
      if (name.ends_with(".ssm_beta.weight") || name.ends_with(".ssm_alpha.weight"))
        untile_heads(t.values, 1, 0, 0, s.hk, s.r, d);
      if (name.ends_with(".ssm_a_log") || name.ends_with(".ssm_dt.bias")) untile_heads(t.values, 1, 0, 0, s.hk, s.r, 1);
      if (name.ends_with(".ssm_conv1d.weight")) untile_heads(t.values, 1, 0, qk_rows * s.K, s.hk, s.r, s.dv * s.K);
      if (name.ends_with(".ssm_out.weight")) untile_heads(t.values, d, s.hv * s.dv, 0, s.hk, s.r, s.dv);
    }
    w.tensors.emplace(name, std::move(t));
  }
  check_hybrid_weights(w);
  return w;
}

HostWeights load_hybrid_gguf_weights(const std::filesystem::path& path) {
  // Data is dequantized (and checked finite) as it is loaded: the header check suffices here.
  const io::GgufFile g = io::GgufFile::open(path, io::GgufOptions{.verify_data = false});
  return load_hybrid_gguf_weights(g);
}

}  // namespace bitrank::model
