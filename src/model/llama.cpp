// Dense Llama-style forward over a backend (contract: include/bitrank/model/model.hpp).
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "bitrank/error.hpp"
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
LlamaModel<T>::LlamaModel(Backend<T>& be, const HostWeights& w, const BlrProjections& blr)
    : DecoderModel<T>(be, checked(w, blr), GainStyle::plain) {
  Memory& mem = *be.memory;
  for (index_t b = 0; b < this->config_.num_layers; ++b) {
    const std::string p = "blk." + std::to_string(b) + ".";
    Block block;
    block.attn_norm = this->upload(w.at(p + "attn_norm.weight"));
    block.ffn_norm = this->upload(w.at(p + "ffn_norm.weight"));
    for (LlamaProj proj : kAllLlamaProjs) {
      const std::string name = p + llama_proj_name(proj);
      const auto it = blr.find(name);
      block.proj[static_cast<int>(proj)] = it != blr.end() ? Projection<T>::blr(mem, it->second, name)
                                                           : Projection<T>::dense(mem, w.at(name + ".weight"), name);
    }
    blocks_.push_back(std::move(block));
  }
}

template <class T>
void LlamaModel<T>::block_forward(index_t b, CView<T> x, index_t window, BlockActivations<T>& a, View<T> y) const {
  if (b < 0 || b >= this->config_.num_layers) fail("block_forward: block {} of {}", b, this->config_.num_layers);
  if (window <= 0 || x.dim(0) % window != 0)
    fail("block_forward: {} rows are not a whole number of windows of {}", x.dim(0), window);
  const LlamaBlockDims dims = LlamaBlockDims::of(this->config_);
  const Block& w = blocks_[static_cast<std::size_t>(b)];
  const auto project = [&](LlamaProj p, CView<T> in, View<T> out) {
    w.proj[static_cast<int>(p)].forward(this->be_, in, out, scratch_);
  };
  llama_block_forward(this->be_, dims, x, window, rope_tables_.get(*this->be_.memory, dims, window),
                      w.attn_norm.view({dims.hidden}), w.ffn_norm.view({dims.hidden}), project, a, y);
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

template class LlamaModel<float>;
template class LlamaModel<double>;

}  // namespace bitrank::model
