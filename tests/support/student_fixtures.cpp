// Test fixtures of the student block (contract: tests/support/student_fixtures.hpp).
#include "support/student_fixtures.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "bitrank/error.hpp"
#include "bitrank/ops/bitmap.hpp"
#include "bitrank/rng.hpp"
#include "support/host_values.hpp"

namespace bitrank::test {

double sign_grad_identity_error(const train::BlrLinear<double>& proj) {
  const index_t m = proj.dims().m, nn = proj.dims().n, r = proj.dims().r, s = proj.dims().scales_per_path();
  const index_t words = r / 32;
  const auto sign = [&](const std::uint32_t* bits, index_t row, index_t k) {
    return (bits[row * words + k / 32] >> (k % 32)) & 1u ? 1.0 : -1.0;
  };
  double worst = 0;
  for (index_t path = 0; path < proj.dims().paths; ++path) {
    const double* sc = proj.scales().data + path * s;
    const double* gr = proj.scale_grads().data + path * s;
    const std::uint32_t* su = proj.sign_bits_u().data + path * m * words;
    const std::uint32_t* sv = proj.sign_bits_v().data + path * nn * words;
    const double* gu = proj.sign_grad_u().data + path * m * r;
    const double* gv = proj.sign_grad_v().data + path * nn * r;
    std::vector<double> lhs, rhs;
    for (index_t i = 0; i < m; ++i) {
      double acc = 0;
      for (index_t k = 0; k < r; ++k) acc += sign(su, i, k) * gu[i * r + k];
      lhs.push_back(acc);
      rhs.push_back(sc[i] * gr[i]);
    }
    for (index_t k = 0; k < r; ++k) {
      double acc = 0;
      for (index_t i = 0; i < m; ++i) acc += sign(su, i, k) * gu[i * r + k];
      lhs.push_back(acc);
      rhs.push_back(sc[m + k] * gr[m + k]);
    }
    for (index_t j = 0; j < nn; ++j) {
      double acc = 0;
      for (index_t k = 0; k < r; ++k) acc += sign(sv, j, k) * gv[j * r + k];
      lhs.push_back(acc);
      rhs.push_back(sc[m + r + j] * gr[m + r + j]);
    }
    worst = std::max(worst, rel_l2(lhs, rhs));
  }
  return worst;
}

model::LlamaBlockDims tiny_block_dims() {
  return model::LlamaBlockDims{
      .hidden = 64, .heads = 2, .kv_heads = 1, .head_dim = 32, .ffn = 96, .eps = 1e-5f, .rope_theta = 1e4};
}

model::HostWeights teacher_of(const model::LlamaBlockDims& dims, const train::StudentBlockWeights& w) {
  auto t = teacher_of(dims, std::vector<train::StudentBlockWeights>{w}, 16, true, 99);
  t.source = "teacher of a student block";
  return t;
}

model::HostWeights teacher_of(const model::LlamaBlockDims& dims, const std::vector<train::StudentBlockWeights>& blocks,
                              index_t vocab, bool tied, std::uint64_t seed) {
  model::HostWeights t;
  io::ModelConfig& c = t.config;
  c.model_type = "llama";
  c.hidden_size = dims.hidden;
  c.num_layers = static_cast<index_t>(blocks.size());
  c.num_heads = dims.heads;
  c.num_kv_heads = dims.kv_heads;
  c.head_dim = dims.head_dim;
  c.intermediate_size = dims.ffn;
  c.vocab_size = vocab;
  c.max_position_embeddings = 1024;
  c.rms_norm_eps = dims.eps;
  c.rope_theta = dims.rope_theta;
  c.tie_word_embeddings = tied;
  t.source = "teacher of " + std::to_string(blocks.size()) + " student blocks";
  XorShift g(seed);
  for (const auto& [name, shape] : model::expected_tensors(c)) {
    model::HostTensor ten{shape, {}};
    index_t numel = 1;
    for (index_t s : shape) numel *= s;
    for (index_t i = 0; i < numel; ++i) ten.values.push_back(static_cast<float>(g.next_signed()));
    t.tensors.emplace(name, std::move(ten));
  }
  for (auto& v : t.tensors.at("output_norm.weight").values) v = static_cast<float>(1.0 + 0.2 * v);
  for (std::size_t b = 0; b < blocks.size(); ++b) {
    const std::string prefix = "blk." + std::to_string(b) + ".";
    for (model::LlamaProj p : model::kAllLlamaProjs) {
      const auto dense = blr::reconstruct(blocks[b].proj[static_cast<std::size_t>(p)]);
      auto& dst = t.tensors.at(prefix + model::llama_proj_name(p) + ".weight").values;
      dst.assign(dense.begin(), dense.end());
    }
    t.tensors.at(prefix + "attn_norm.weight").values = blocks[b].attn_norm;
    t.tensors.at(prefix + "ffn_norm.weight").values = blocks[b].ffn_norm;
  }
  return t;
}

model::HostWeights hybrid_teacher_of(const model::HostWeights& base, index_t b, const train::StudentHybridWeights& w) {
  model::HostWeights t = base;
  const std::string p = "blk." + std::to_string(b) + ".";
  const auto set = [&](const std::string& name, const std::vector<float>& values) {
    auto& dst = t.tensors.at(p + name).values;
    if (dst.size() != values.size())
      fail("hybrid_teacher_of: {} has {} values, the student {}", name, dst.size(), values.size());
    dst = values;
  };
  for (model::HybridProj q : model::hybrid_block_projs(w.full_attention)) {
    if (!train::hybrid_proj_is_blr(q)) continue;
    const auto dense = blr::reconstruct(w.proj[static_cast<std::size_t>(q)]);
    set(std::string(model::hybrid_proj_name(q)) + ".weight", std::vector<float>(dense.begin(), dense.end()));
  }
  set("attn_norm.weight", w.attn_norm);
  set("post_attention_norm.weight", w.post_norm);
  if (w.full_attention) {
    set("attn_q_norm.weight", w.q_norm);
    set("attn_k_norm.weight", w.k_norm);
  } else {
    set("ssm_beta.weight", w.ssm_beta);
    set("ssm_alpha.weight", w.ssm_alpha);
    set("ssm_conv1d.weight", w.conv);
    set("ssm_a_log", w.a_log);
    set("ssm_dt.bias", w.dt_bias);
    set("ssm_norm.weight", w.gdn_norm);
  }
  return t;
}

model::BlrProjections compress_randomly(model::HostWeights& w, const std::vector<std::string>& names,
                                        std::uint64_t seed) {
  model::BlrProjections blr;
  for (const std::string& name : names) {
    const model::HostTensor& t = w.at(name + ".weight");
    blr.emplace(name, random_blr(t.shape[0], t.shape[1], 32, 2, seed++));
    w.tensors.erase(name + ".weight");
  }
  return blr;
}

}  // namespace bitrank::test
