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
  check_weights(w, blr);
  return w;
}

}  // namespace

template <class T>
LlamaModel<T>::LlamaModel(Backend<T>& be, const HostWeights& w, const BlrProjections& blr)
    : DecoderModel<T>(be, checked(w, blr), GainStyle::plain) {
  for (index_t b = 0; b < this->config_.num_layers; ++b) {
    const std::string p = "blk." + std::to_string(b) + ".";
    Block block;
    block.attn_norm = this->upload(w.at(p + "attn_norm.weight"));
    block.ffn_norm = this->upload(w.at(p + "ffn_norm.weight"));
    for (LlamaProj proj : kAllLlamaProjs) {
      const std::string name = p + llama_proj_name(proj);
      const int i = static_cast<int>(proj);
      if (const auto it = blr.find(name); it != blr.end()) block.blr[i] = upload_blr(it->second);
      else block.dense[i] = this->upload(w.at(name + ".weight"));
    }
    blocks_.push_back(std::move(block));
  }
}

template <class T>
typename LlamaModel<T>::BlrWeights LlamaModel<T>::upload_blr(const blr::HostBlrMatrix& h) const {
  Memory& mem = *this->be_.memory;
  BlrWeights d;
  d.m = h.m, d.n = h.n, d.r = h.r;
  const index_t P = static_cast<index_t>(h.paths.size()), words = h.r / 32, per_path = h.m + h.r + h.n;
  std::vector<std::uint32_t> u, v;
  std::vector<T> scales;
  for (const blr::HostBlrPath& path : h.paths) {
    u.insert(u.end(), path.sign_u.begin(), path.sign_u.end());
    v.insert(v.end(), path.sign_v.begin(), path.sign_v.end());
    scales.insert(scales.end(), path.h.begin(), path.h.end());
    scales.insert(scales.end(), path.l.begin(), path.l.end());
    scales.insert(scales.end(), path.g.begin(), path.g.end());
  }
  d.bits_u = Buffer<std::uint32_t>(mem, u.size());
  d.bits_u.upload(u);
  d.bits_v = Buffer<std::uint32_t>(mem, v.size());
  d.bits_v.upload(v);
  d.scales = Buffer<T>(mem, scales.size());
  d.scales.upload(scales);
  for (index_t p = 0; p < P; ++p) {
    const T* s = d.scales.data() + p * per_path;
    d.paths.push_back(BlrPath<T>{.sign_u = CView<std::uint32_t>(d.bits_u.data() + p * h.m * words, Shape{h.m, words}),
                                 .sign_v = CView<std::uint32_t>(d.bits_v.data() + p * h.n * words, Shape{h.n, words}),
                                 .h = CView<T>(s, Shape{h.m}),
                                 .l = CView<T>(s + h.m, Shape{h.r}),
                                 .g = CView<T>(s + h.m + h.r, Shape{h.n}),
                                 .dh = {},
                                 .dl = {},
                                 .dg = {}});
  }
  return d;
}

template <class T>
void LlamaModel<T>::block_forward(index_t b, CView<T> x, index_t window, BlockActivations<T>& a, View<T> y) const {
  if (b < 0 || b >= this->config_.num_layers) fail("block_forward: block {} of {}", b, this->config_.num_layers);
  if (window <= 0 || x.dim(0) % window != 0)
    fail("block_forward: {} rows are not a whole number of windows of {}", x.dim(0), window);
  const LlamaBlockDims dims = LlamaBlockDims::of(this->config_);
  const Block& w = blocks_[static_cast<std::size_t>(b)];
  const auto dense = [&](LlamaProj p, CView<T> in, View<T> out) {
    const int i = static_cast<int>(p);
    if (const BlrWeights& bw = w.blr[i]; !bw.paths.empty()) {
      const index_t n = in.dim(0), P = static_cast<index_t>(bw.paths.size());
      Memory& mem = *this->be_.memory;
      ensure_size(blr_a_, mem, P * n * bw.r);
      ensure_size(blr_c_, mem, P * n * bw.m);
      const BlrLayer<T> layer{bw.m, bw.n, bw.r, bw.paths};
      this->be_.blr().blr_forward(layer, in, out, BlrSaved<T>{blr_a_.view({P, n, bw.r}), blr_c_.view({P, n, bw.m})});
      return;
    }
    const CView<T> wp = w.dense[i].view({dims.out_features(p), dims.in_features(p)});
    this->be_.dense().dense_forward(in, wp, out, false);
  };
  llama_block_forward(this->be_, dims, x, window, rope_tables_.get(*this->be_.memory, dims, window),
                      w.attn_norm.view({dims.hidden}), w.ffn_norm.view({dims.hidden}), dense, a, y);
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
