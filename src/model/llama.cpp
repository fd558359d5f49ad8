// Dense Llama-style forward over a backend, and its cached form for generation
// (contracts: include/bitrank/model/model.hpp, kv_cache.hpp).
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "bitrank/error.hpp"
#include "bitrank/model/kv_cache.hpp"
#include "bitrank/model/model.hpp"

namespace bitrank::model {
namespace {

// The weights, checked first (the base class reads them).
const HostWeights& checked(const HostWeights& w, const BlrProjections& blr) {
  check_llama_config(w.config, w.source);
  check_weights(w, blr);
  return w;
}

}  // namespace

template <class T>
typename LlamaModel<T>::Block LlamaModel<T>::Block::rebased(const std::byte* from, std::byte* to) const {
  Block k;
  k.attn_norm = CView<T>(rebase(attn_norm.data, from, to), attn_norm.shape);
  k.ffn_norm = CView<T>(rebase(ffn_norm.data, from, to), ffn_norm.shape);
  for (int p = 0; p < kLlamaProjs; ++p) k.proj[p] = proj[p].rebased(from, to);
  return k;
}

template <class T>
LlamaModel<T>::LlamaModel(Backend<T>& be, const HostWeights& w, const BlrProjections& blr, bool stream,
                          WeightForm form)
    : DecoderModel<T>(be, checked(w, blr), GainStyle::plain, form) {
  const index_t L = this->config_.num_layers;
  // Block b's tensors carved from `at`, written through `mem` (nothing while measuring).
  const auto place = [&](index_t b, Memory& mem, Carver& at) {
    const std::string p = "blk." + std::to_string(b) + ".";
    Block block;
    block.attn_norm = place_values<T>(mem, at, w.at(p + "attn_norm.weight").values);
    block.ffn_norm = place_values<T>(mem, at, w.at(p + "ffn_norm.weight").values);
    for (LlamaProj proj : kAllLlamaProjs) {
      const std::string name = p + llama_proj_name(proj);
      const auto it = blr.find(name);
      block.proj[static_cast<int>(proj)] = it != blr.end()
                                               ? Projection<T>::blr(mem, at, it->second, name, form)
                                               : Projection<T>::dense(mem, at, w.at(name + ".weight"), name,
                                                                      form.f16_matrices);
    }
    return block;
  };
  blocks_ = carve_blocks<Block>(*be.memory, L, stream, place, slots_, storage_);
}

template <class T>
const typename LlamaModel<T>::Block& LlamaModel<T>::block_weights(index_t b, Block& moved) const {
  const Block& resident = blocks_[static_cast<std::size_t>(b)];
  if (!slots_) return resident;
  const index_t L = this->config_.num_layers;
  moved = resident.rebased(slots_->image(b), slots_->acquire(b, (b + 1) % L));
  return moved;
}

template <class T>
void LlamaModel<T>::block_forward(index_t b, CView<T> x, index_t window, BlockActivations<T>& a, View<T> y) const {
  if (b < 0 || b >= this->config_.num_layers) fail("block_forward: block {} of {}", b, this->config_.num_layers);
  if (window <= 0 || x.dim(0) % window != 0)
    fail("block_forward: {} rows are not a whole number of windows of {}", x.dim(0), window);
  const LlamaBlockDims dims = LlamaBlockDims::of(this->config_);
  Block moved;
  const Block& use = block_weights(b, moved);
  const auto project = [&](LlamaProj p, CView<T> in, View<T> out) {
    use.proj[static_cast<int>(p)].forward(this->be_, in, out);
  };
  llama_block_forward(this->be_, dims, x, window, rope_tables_.get(*this->be_.memory, dims, window), use.attn_norm,
                      use.ffn_norm, project, a, y);
}

template <class T>
Buffer<T> LlamaModel<T>::hidden(std::span<const std::int32_t> tokens, index_t window) const {
  check_tokens(tokens, window, this->config_.vocab_size, "hidden");
  const index_t n = static_cast<index_t>(tokens.size()), d = this->config_.hidden_size;
  Memory& mem = *this->be_.memory;
  Buffer<T> x(mem, static_cast<std::size_t>(n * d)), y(mem, static_cast<std::size_t>(n * d));
  this->embed(tokens, x.view({n, d}));
  BlockActivations<T> acts;
  for (index_t b = 0; b < this->config_.num_layers; ++b) {
    block_forward(b, x.view({n, d}), window, acts, y.view({n, d}));
    std::swap(x, y);
  }
  return x;
}

template <class T>
struct LlamaModel<T>::Cache final : KvCache<T> {
  BlockActivations<T> acts;
};

template <class T>
std::unique_ptr<KvCache<T>> LlamaModel<T>::make_cache(index_t capacity) const {
  if (capacity < 1) fail("make_cache: capacity must be at least 1 position, got {}", capacity);
  const LlamaBlockDims dims = LlamaBlockDims::of(this->config_);
  Memory& mem = *this->be_.memory;
  auto c = std::make_unique<Cache>();
  c->capacity = capacity;
  for (index_t b = 0; b < this->config_.num_layers; ++b) {
    c->keys.emplace_back(mem, static_cast<std::size_t>(capacity * dims.kv_width()));
    c->values.emplace_back(mem, static_cast<std::size_t>(capacity * dims.kv_width()));
  }
  const std::vector<T> table = rope_table<T>(capacity, dims.head_dim / 2, dims.rope_theta);
  c->rope = Buffer<T>(mem, table.size());
  c->rope.upload(table);
  return c;
}

template <class T>
void LlamaModel<T>::block_forward_cached(index_t b, CView<T> x, KvCache<T>& cache, View<T> y) const {
  Cache& c = static_cast<Cache&>(cache);  // hidden_cached checked it (check_own_cache)
  const LlamaBlockDims dims = LlamaBlockDims::of(this->config_);
  const index_t n = x.dim(0), first = c.length, kw = dims.kv_width();
  Block moved;
  const Block& use = block_weights(b, moved);
  const auto project = [&](LlamaProj p, CView<T> in, View<T> out) {
    use.proj[static_cast<int>(p)].forward(this->be_, in, out);
  };
  const Buffer<T>& keys = c.keys[static_cast<std::size_t>(b)];
  const Buffer<T>& values = c.values[static_cast<std::size_t>(b)];
  const AttentionGeometry geo{.heads = dims.heads, .kv_heads = dims.kv_heads, .head_dim = dims.head_dim};
  const auto attend = [&](CView<T> qr, View<T> att, View<T> lse) {
    cached_attention(this->be_, geo, keys, values, first, qr, att, lse);
  };
  c.acts.reserve(*this->be_.memory, dims, n);
  llama_block_forward_with(this->be_, dims, x, c.rope_rows(first, n, dims.head_dim / 2), use.attn_norm, use.ffn_norm,
                           project, KvCache<T>::rows(keys, first, n, kw), KvCache<T>::rows(values, first, n, kw),
                           attend, c.acts, y);
}

template <class T>
void LlamaModel<T>::check_own_cache(const KvCache<T>& cache) const {
  const auto* c = dynamic_cast<const Cache*>(&cache);
  if (!c || static_cast<index_t>(c->keys.size()) != this->config_.num_layers)
    fail("hidden_cached: the cache was not made by this Llama model");
}

template class LlamaModel<float>;
template class LlamaModel<double>;

}  // namespace bitrank::model
