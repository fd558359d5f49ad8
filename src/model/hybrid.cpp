// Qwen3.5 / Qwen3-Next hybrid forward over a backend, built from the op
// catalogue only, and its cached form for generation (contracts and
// formulas: include/bitrank/model/hybrid.hpp, kv_cache.hpp).
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
HybridModel<T>::HybridModel(Backend<T>& be, const HostWeights& w, const BlrProjections& blr, bool stream,
                            WeightForm form)
    : DecoderModel<T>(be, checked(w, blr), GainStyle::zero_centred, form) {
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
      slot = it != blr.end() ? Projection<T>::blr(mem, at, it->second, name, form)
                             : Projection<T>::dense(mem, at, w.at(name + ".weight"), name, form.f16_matrices);
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
const typename HybridModel<T>::Block& HybridModel<T>::block_weights(index_t b, Block& moved) const {
  const Block& resident = blocks_[static_cast<std::size_t>(b)];
  if (!slots_) return resident;
  const index_t L = this->config_.num_layers;
  moved = resident.rebased(slots_->image(b), slots_->acquire(b, (b + 1) % L));
  return moved;
}

template <class T>
HybridBlockParams<T> HybridModel<T>::block_params(const Block& w) const {
  HybridBlockParams<T> prm;
  prm.attn_norm = w.attn_norm;
  prm.post_norm = w.post_norm;
  if (w.full) {
    prm.q_norm = w.q_norm;
    prm.k_norm = w.k_norm;
  } else {
    const GdnConfig g = block_dims().gdn_config(1);
    prm.gdn = GdnParams<T>{.conv_weight = CView<T>(w.conv.data, Shape{g.channels(), g.conv_kernel}),
                           .a_log = w.a_log,
                           .dt_bias = w.dt_bias,
                           .norm_gain = w.gdn_norm};
  }
  return prm;
}

template <class T>
void HybridModel<T>::block_forward(index_t b, CView<T> x, index_t window, HybridBlockActivations<T>& a, View<T> y,
                                   bool record_tape) const {
  const bool full = is_full_attention(b);
  const HybridBlockDims dims = block_dims();
  Backend<T>& be = this->be_;
  Block moved;
  const Block& w = block_weights(b, moved);
  const auto project = [&](HybridProj p, CView<T> in, View<T> out) {
    w.proj[static_cast<std::size_t>(p)].forward(be, in, out);
  };
  CView<T> table;
  if (full && window > 0) table = ropes_.get(*be.memory, dims.rotary_dim / 2, dims.rope_theta, window);
  hybrid_block_forward(be, dims, full, x, window, table, block_params(w), project, a, y, record_tape);
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

template <class T>
struct HybridModel<T>::Cache final : KvCache<T> {
  HybridBlockActivations<T> acts;
};

template <class T>
std::unique_ptr<KvCache<T>> HybridModel<T>::make_cache(index_t capacity) const {
  if (capacity < 1) fail("make_cache: capacity must be at least 1 position, got {}", capacity);
  const HybridBlockDims dims = block_dims();
  const GdnConfig g = dims.gdn_config(1);
  Memory& mem = *this->be_.memory;
  auto c = std::make_unique<Cache>();
  c->capacity = capacity;
  const auto zeros = [&](index_t size) {
    Buffer<T> buf(mem, static_cast<std::size_t>(size));
    if (size > 0) mem.zero(buf.data(), buf.size() * sizeof(T));
    return buf;
  };
  for (index_t b = 0; b < this->config_.num_layers; ++b) {
    const bool full = is_full_attention(b);
    c->keys.emplace_back(mem, static_cast<std::size_t>(full ? capacity * dims.kv_width() : 0));
    c->values.emplace_back(mem, static_cast<std::size_t>(full ? capacity * dims.kv_width() : 0));
    c->conv_state.push_back(zeros(full ? 0 : (g.conv_kernel - 1) * g.channels()));
    c->gdn_state.push_back(zeros(full ? 0 : g.v_heads * g.head_dim * g.head_dim));
  }
  const std::vector<T> table = rope_table<T>(capacity, dims.rotary_dim / 2, dims.rope_theta);
  c->rope = Buffer<T>(mem, table.size());
  c->rope.upload(table);
  return c;
}

template <class T>
void HybridModel<T>::block_forward_cached(index_t b, CView<T> x, KvCache<T>& cache, View<T> y) const {
  Cache& c = static_cast<Cache&>(cache);  // hidden_cached checked it (check_own_cache)
  const bool full = is_full_attention(b);
  const HybridBlockDims dims = block_dims();
  const index_t n = x.dim(0), first = c.length, kw = dims.kv_width(), half = dims.rotary_dim / 2;
  Backend<T>& be = this->be_;
  Block moved;
  const Block& w = block_weights(b, moved);
  const auto project = [&](HybridProj p, CView<T> in, View<T> out) {
    w.proj[static_cast<std::size_t>(p)].forward(be, in, out);
  };
  const HybridBlockParams<T> prm = block_params(w);
  const auto i = static_cast<std::size_t>(b);
  const AttentionGeometry geo{.heads = dims.heads, .kv_heads = dims.kv_heads, .head_dim = dims.head_dim};
  const auto attend = [&](CView<T> qr, View<T> att, View<T> lse) {
    cached_attention(be, geo, c.keys[i], c.values[i], first, qr, att, lse);
  };
  const GdnConfig g = dims.gdn_config(n);
  const auto gdn_core = [&](CView<T> qkv, CView<T> z, CView<T> ga, CView<T> gb, View<T> o) {
    const View<T> conv_state = c.conv_state[i].view({g.conv_kernel - 1, g.channels()});
    const View<T> state = c.gdn_state[i].view({g.v_heads, g.head_dim, g.head_dim});
    be.gdn().gdn_decode(g, prm.gdn, qkv, z, ga, gb, conv_state, state, o);
  };
  c.acts.reserve(*be.memory, dims, full, n, n, /*record_tape=*/false);
  const View<T> k_out = full ? KvCache<T>::rows(c.keys[i], first, n, kw) : View<T>{};
  const View<T> v_out = full ? KvCache<T>::rows(c.values[i], first, n, kw) : View<T>{};
  const CView<T> table = full ? c.rope_rows(first, n, half) : CView<T>{};
  hybrid_block_forward_with(be, dims, full, x, table, prm, project, k_out, v_out, attend, gdn_core, c.acts, y);
}

template <class T>
void HybridModel<T>::check_own_cache(const KvCache<T>& cache) const {
  const auto* c = dynamic_cast<const Cache*>(&cache);
  if (!c || static_cast<index_t>(c->gdn_state.size()) != this->config_.num_layers)
    fail("hidden_cached: the cache was not made by this hybrid model");
}

template class HybridModel<float>;
template class HybridModel<double>;

}  // namespace bitrank::model
