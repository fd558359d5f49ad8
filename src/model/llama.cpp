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
const HostWeights& checked(const HostWeights& w) {
  check_weights(w);
  return w;
}

}  // namespace

template <class T>
LlamaModel<T>::LlamaModel(Backend<T>& be, const HostWeights& w) : DecoderModel<T>(be, checked(w), GainStyle::plain) {
  for (index_t b = 0; b < this->config_.num_layers; ++b) {
    const std::string p = "blk." + std::to_string(b) + ".";
    blocks_.push_back(Block{this->upload(w.at(p + "attn_norm.weight")), this->upload(w.at(p + "attn_q.weight")),
                            this->upload(w.at(p + "attn_k.weight")), this->upload(w.at(p + "attn_v.weight")),
                            this->upload(w.at(p + "attn_output.weight")), this->upload(w.at(p + "ffn_norm.weight")),
                            this->upload(w.at(p + "ffn_gate.weight")), this->upload(w.at(p + "ffn_up.weight")),
                            this->upload(w.at(p + "ffn_down.weight"))});
  }
}

template <class T>
const Buffer<T>& LlamaModel<T>::rope_table_for(index_t window) const {
  auto it = rope_tables_.find(window);
  if (it == rope_tables_.end()) {
    const auto table = rope_table<T>(window, this->config_.head_dim / 2, this->config_.rope_theta);
    Buffer<T> b(*this->be_.memory, table.size());
    b.upload(table);
    it = rope_tables_.emplace(window, std::move(b)).first;
  }
  return it->second;
}

template <class T>
void LlamaModel<T>::block_forward(index_t b, CView<T> x, index_t window, BlockActivations<T>& a, View<T> y) const {
  if (b < 0 || b >= this->config_.num_layers) fail("block_forward: block {} of {}", b, this->config_.num_layers);
  const ModelConfig& c = this->config_;
  Backend<T>& be = this->be_;
  const index_t n = x.dim(0), d = c.hidden_size, H = c.num_heads, Hkv = c.num_kv_heads, hd = c.head_dim,
                f = c.intermediate_size, qw = H * hd, kw = Hkv * hd;
  if (!(x.shape == Shape{n, d}) || !x.contiguous())
    fail("block_forward: x has shape {}, expected a contiguous [n, {}]", x.shape.str(), d);
  if (!(y.shape == x.shape) || !y.contiguous())
    fail("block_forward: y has shape {}, expected a contiguous {}", y.shape.str(), x.shape.str());
  Memory& mem = *be.memory;
  for (Buffer<T>* buf : {&a.xn1, &a.proj, &a.h, &a.xn2}) ensure_size(*buf, mem, n * d);
  for (Buffer<T>* buf : {&a.inv1, &a.inv2}) ensure_size(*buf, mem, n);
  for (Buffer<T>* buf : {&a.q, &a.qr, &a.att}) ensure_size(*buf, mem, n * qw);
  for (Buffer<T>* buf : {&a.k, &a.v, &a.kr}) ensure_size(*buf, mem, n * kw);
  ensure_size(a.lse, mem, n * H);
  for (Buffer<T>* buf : {&a.gate, &a.up, &a.act}) ensure_size(*buf, mem, n * f);

  const Block& w = blocks_[static_cast<std::size_t>(b)];
  const float eps = static_cast<float>(c.rms_norm_eps);
  const CView<T> table = rope_table_for(window).view({window, hd / 2, 2});
  auto W = [](const Buffer<T>& buf, index_t rows, index_t cols) { return CView<T>(buf.view({rows, cols})); };

  // Attention half.
  be.norm().rmsnorm_forward(x, w.attn_norm.view({d}), GainStyle::plain, eps, a.xn1.view({n, d}), a.inv1.view({n}));
  be.dense().dense_forward(a.xn1.view({n, d}), W(w.wq, qw, d), a.q.view({n, qw}), false);
  be.dense().dense_forward(a.xn1.view({n, d}), W(w.wk, kw, d), a.k.view({n, kw}), false);
  be.dense().dense_forward(a.xn1.view({n, d}), W(w.wv, kw, d), a.v.view({n, kw}), false);
  be.rope().rope_forward(a.q.view({n, qw}), table, H, a.qr.view({n, qw}));
  be.rope().rope_forward(a.k.view({n, kw}), table, Hkv, a.kr.view({n, kw}));
  const AttentionGeometry geo{.window = window, .heads = H, .kv_heads = Hkv, .head_dim = hd};
  be.attention().attention_forward(a.qr.view({n, qw}), a.kr.view({n, kw}), a.v.view({n, kw}), geo,
                                    a.att.view({n, qw}), a.lse.view({n, H}));
  // h = x + att·Woᵀ (the projection lands in proj first: outputs never alias inputs).
  be.dense().dense_forward(a.att.view({n, qw}), W(w.wo, d, qw), a.proj.view({n, d}), false);
  be.act().add(x.flat(), a.proj.view({n * d}), a.h.view({n * d}));

  // MLP half.
  be.norm().rmsnorm_forward(a.h.view({n, d}), w.ffn_norm.view({d}), GainStyle::plain, eps, a.xn2.view({n, d}),
                             a.inv2.view({n}));
  be.dense().dense_forward(a.xn2.view({n, d}), W(w.w_gate, f, d), a.gate.view({n, f}), false);
  be.dense().dense_forward(a.xn2.view({n, d}), W(w.w_up, f, d), a.up.view({n, f}), false);
  be.act().swiglu_forward(a.gate.view({n * f}), a.up.view({n * f}), a.act.view({n * f}));
  // y = h + act·Wdᵀ.
  be.dense().dense_forward(a.act.view({n, f}), W(w.w_down, d, f), a.proj.view({n, d}), false);
  be.act().add(a.h.view({n * d}), a.proj.view({n * d}), y.flat());
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
