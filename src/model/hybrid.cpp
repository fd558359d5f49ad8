// Qwen3.5 / Qwen3-Next hybrid forward over a backend, built from the op
// catalogue only (contract and formulas: include/bitrank/model/hybrid.hpp).
#include "bitrank/model/hybrid.hpp"

#include <string>

#include "bitrank/error.hpp"

namespace bitrank::model {
namespace {

// The weights, checked first (the base class reads them).
const HostWeights& checked(const HostWeights& w, const BlrProjections& blr) {
  check_hybrid_config(w.config, w.source);
  check_weights(w, blr);
  return w;
}

}  // namespace

template <class T>
typename HybridModel<T>::Block HybridModel<T>::Block::rebased(const std::byte* from, std::byte* to) const {
  Block k;
  k.full = full;
  for (std::size_t p = 0; p < proj.size(); ++p) k.proj[p] = proj[p].rebased(from, to);
  const auto move = [&](CView<T> v) { return CView<T>(rebase(v.data, from, to), v.shape); };
  k.attn_norm = move(attn_norm);
  k.post_norm = move(post_norm);
  k.q_norm = move(q_norm);
  k.k_norm = move(k_norm);
  k.conv = move(conv);
  k.a_log = move(a_log);
  k.dt_bias = move(dt_bias);
  k.gdn_norm = move(gdn_norm);
  return k;
}

template <class T>
HybridModel<T>::HybridModel(Backend<T>& be, const HostWeights& w, const BlrProjections& blr, bool stream)
    : DecoderModel<T>(be, checked(w, blr), GainStyle::zero_centred) {
  const index_t L = this->config_.num_layers;
  // Block b's tensors carved from `at`, written through `mem` (nothing while measuring).
  const auto place = [&](index_t b, Memory& mem, Carver& at) {
    const std::string p = "blk." + std::to_string(b) + ".";
    auto up = [&](const std::string& name) { return place_values<T>(mem, at, w.at(p + name).values); };
    Block k;
    k.full = is_full_attention(b);
    k.attn_norm = up("attn_norm.weight");
    k.post_norm = up("post_attention_norm.weight");
    for (HybridProj proj : hybrid_block_projs(k.full)) {
      const std::string name = p + hybrid_proj_name(proj);
      const auto it = blr.find(name);
      Projection<T>& slot = k.proj[static_cast<std::size_t>(proj)];
      slot = it != blr.end() ? Projection<T>::blr(mem, at, it->second, name)
                             : Projection<T>::dense(mem, at, w.at(name + ".weight"), name);
    }
    if (k.full) {
      k.q_norm = up("attn_q_norm.weight");
      k.k_norm = up("attn_k_norm.weight");
    } else {
      k.conv = up("ssm_conv1d.weight");
      k.a_log = up("ssm_a_log");
      k.dt_bias = up("ssm_dt.bias");
      k.gdn_norm = up("ssm_norm.weight");
    }
    return k;
  };
  blocks_ = carve_blocks<Block>(*be.memory, L, stream, place, slots_, storage_);
}

template <class T>
HybridBlockDims HybridModel<T>::block_dims() const {
  HybridBlockDims d = HybridBlockDims::of(this->config_);
  d.ckpt_every = gdn_ckpt_every;
  return d;
}

template <class T>
bool HybridModel<T>::is_full_attention(index_t b) const {
  if (b < 0 || b >= this->config_.num_layers) fail("hybrid model: block {} of {}", b, this->config_.num_layers);
  return this->config_.layer_types[static_cast<std::size_t>(b)] == io::LayerType::full_attention;
}

template <class T>
GdnConfig HybridModel<T>::gdn_config(index_t window) const {
  return block_dims().gdn_config(window);
}

template <class T>
void HybridModel<T>::block_forward(index_t b, CView<T> x, index_t window, HybridBlockActivations<T>& a, View<T> y,
                                   bool record_tape) const {
  const bool full = is_full_attention(b);
  const HybridBlockDims dims = block_dims();
  Backend<T>& be = this->be_;
  const Block& resident = blocks_[static_cast<std::size_t>(b)];
  const index_t L = this->config_.num_layers;
  const Block moved = slots_ ? resident.rebased(slots_->image(b), slots_->acquire(b, (b + 1) % L)) : Block{};
  const Block& w = slots_ ? moved : resident;
  const auto project = [&](HybridProj p, CView<T> in, View<T> out) {
    w.proj[static_cast<std::size_t>(p)].forward(be, in, out);
  };
  HybridBlockParams<T> prm;
  prm.attn_norm = w.attn_norm;
  prm.post_norm = w.post_norm;
  CView<T> table;
  if (full) {
    prm.q_norm = w.q_norm;
    prm.k_norm = w.k_norm;
    if (window > 0) table = ropes_.get(*be.memory, dims.rotary_dim / 2, dims.rope_theta, window);
  } else {
    const GdnConfig g = dims.gdn_config(window);
    prm.gdn = GdnParams<T>{.conv_weight = CView<T>(w.conv.data, Shape{g.channels(), g.conv_kernel}),
                           .a_log = w.a_log,
                           .dt_bias = w.dt_bias,
                           .norm_gain = w.gdn_norm};
  }
  hybrid_block_forward(be, dims, full, x, window, table, prm, project, a, y, record_tape);
}

template <class T>
Buffer<T> HybridModel<T>::hidden(std::span<const std::int32_t> tokens, index_t window) const {
  check_tokens(tokens, window, this->config_.vocab_size, "hidden");
  const index_t n = static_cast<index_t>(tokens.size()), d = this->config_.hidden_size;
  Memory& mem = *this->be_.memory;
  Buffer<T> x(mem, static_cast<std::size_t>(n * d)), y(mem, static_cast<std::size_t>(n * d));
  this->embed(tokens, x.view({n, d}));
  HybridBlockActivations<T> acts;
  for (index_t b = 0; b < this->config_.num_layers; ++b) {
    block_forward(b, x.view({n, d}), window, acts, y.view({n, d}), /*record_tape=*/false);
    std::swap(x, y);
  }
  return x;
}

template class HybridModel<float>;
template class HybridModel<double>;

}  // namespace bitrank::model
