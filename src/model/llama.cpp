// Dense Llama-style forward over a backend (contract: include/bitrank/model/model.hpp).
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "bitrank/error.hpp"
#include "bitrank/model/model.hpp"

namespace bitrank::model {
namespace {

void check_tokens(std::span<const std::int32_t> tokens, index_t window, index_t vocab, const char* op) {
  if (window <= 0) fail("{}: window must be positive, got {}", op, window);
  if (tokens.empty()) fail("{}: no tokens", op);
  if (static_cast<index_t>(tokens.size()) % window != 0)
    fail("{}: {} tokens are not a whole number of windows of {}", op, tokens.size(), window);
  for (std::size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] < 0 || tokens[i] >= vocab)
      fail("{}: token {} at position {} is outside the vocabulary of {}", op, tokens[i], i, vocab);
}

}  // namespace

template <class T>
LlamaModel<T>::LlamaModel(Backend<T>& be, const HostWeights& w) : be_(be), config_(w.config) {
  check_weights(w);
  embed_host_ = w.at("token_embd.weight").values;
  for (index_t b = 0; b < config_.num_layers; ++b) {
    const std::string p = "blk." + std::to_string(b) + ".";
    blocks_.push_back(Block{upload(w.at(p + "attn_norm.weight")), upload(w.at(p + "attn_q.weight")),
                            upload(w.at(p + "attn_k.weight")), upload(w.at(p + "attn_v.weight")),
                            upload(w.at(p + "attn_output.weight")), upload(w.at(p + "ffn_norm.weight")),
                            upload(w.at(p + "ffn_gate.weight")), upload(w.at(p + "ffn_up.weight")),
                            upload(w.at(p + "ffn_down.weight"))});
  }
  final_norm_ = upload(w.at("output_norm.weight"));
  head_ = upload(w.at(config_.tie_word_embeddings ? "token_embd.weight" : "output.weight"));
}

template <class T>
Buffer<T> LlamaModel<T>::upload(const HostTensor& t) const {
  Buffer<T> b(*be_.memory, t.values.size());
  if constexpr (std::is_same_v<T, float>) {
    b.upload(t.values);
  } else {
    const std::vector<T> converted(t.values.begin(), t.values.end());
    b.upload(converted);
  }
  return b;
}

template <class T>
void LlamaModel<T>::embed(std::span<const std::int32_t> tokens, View<T> h) const {
  const index_t n = static_cast<index_t>(tokens.size()), d = config_.hidden_size;
  if (!(h.shape == Shape{n, d}) || !h.contiguous())
    fail("embed: h has shape {}, expected [{}, {}]", h.shape.str(), n, d);
  std::vector<T> rows(static_cast<std::size_t>(n * d));
  for (index_t r = 0; r < n; ++r) {
    const std::int32_t id = tokens[static_cast<std::size_t>(r)];
    if (id < 0 || id >= config_.vocab_size)
      fail("embed: token {} at position {} is outside the vocabulary of {}", id, r, config_.vocab_size);
    const float* src = embed_host_.data() + static_cast<index_t>(id) * d;
    std::copy(src, src + d, rows.data() + r * d);
  }
  be_.memory->upload(h.data, rows.data(), rows.size() * sizeof(T));
}

template <class T>
void LlamaModel<T>::block_forward(index_t b, CView<T> x, index_t window, BlockActivations<T>& a, View<T> y) const {
  if (b < 0 || b >= config_.num_layers) fail("block_forward: block {} of {}", b, config_.num_layers);
  if (window <= 0 || x.dim(0) % window != 0)
    fail("block_forward: {} rows are not a whole number of windows of {}", x.dim(0), window);
  const LlamaBlockDims dims = LlamaBlockDims::of(config_);
  const Block& w = blocks_[static_cast<std::size_t>(b)];
  const auto dense = [&](LlamaProj p, CView<T> in, View<T> out) {
    const Buffer<T>* weight[kLlamaProjs] = {&w.wq, &w.wk, &w.wv, &w.wo, &w.w_gate, &w.w_up, &w.w_down};
    const CView<T> wp = weight[static_cast<int>(p)]->view({dims.out_features(p), dims.in_features(p)});
    be_.dense().dense_forward(in, wp, out, false);
  };
  llama_block_forward(be_, dims, x, window, rope_tables_.get(*be_.memory, dims, window),
                      w.attn_norm.view({dims.hidden}), w.ffn_norm.view({dims.hidden}), dense, a, y);
}

template <class T>
Buffer<T> LlamaModel<T>::hidden(std::span<const std::int32_t> tokens, index_t window) const {
  check_tokens(tokens, window, config_.vocab_size, "hidden");
  const index_t n = static_cast<index_t>(tokens.size()), d = config_.hidden_size;
  Buffer<T> x(*be_.memory, static_cast<std::size_t>(n * d)), y(*be_.memory, static_cast<std::size_t>(n * d));
  embed(tokens, x.view({n, d}));
  BlockActivations<T> acts;
  for (index_t b = 0; b < config_.num_layers; ++b) {
    block_forward(b, x.view({n, d}), window, acts, y.view({n, d}));
    std::swap(x, y);
  }
  return x;
}

template <class T>
template <class Fn>
void LlamaModel<T>::for_each_logit_slice(std::span<const std::int32_t> tokens, index_t window, Fn&& fn) const {
  const index_t n = static_cast<index_t>(tokens.size()), d = config_.hidden_size, V = config_.vocab_size;
  const Buffer<T> h = hidden(tokens, window);
  Buffer<T> xn(*be_.memory, static_cast<std::size_t>(n * d)), inv(*be_.memory, static_cast<std::size_t>(n));
  be_.norm().rmsnorm_forward(h.view({n, d}), final_norm_.view({d}), GainStyle::plain,
                             static_cast<float>(config_.rms_norm_eps), xn.view({n, d}), inv.view({n}));
  const index_t slice = std::clamp<index_t>(vocab_slice, 1, V);
  Buffer<T> out(*be_.memory, static_cast<std::size_t>(n * slice));
  std::vector<T> host(static_cast<std::size_t>(n * slice));
  for (index_t v0 = 0; v0 < V; v0 += slice) {
    const index_t vs = std::min(slice, V - v0);
    const CView<T> rows(head_.data() + v0 * d, Shape{vs, d});
    be_.dense().dense_forward(xn.view({n, d}), rows, out.view({n, vs}), false);
    be_.memory->download(host.data(), out.data(), static_cast<std::size_t>(n * vs) * sizeof(T));
    fn(v0, vs, static_cast<const T*>(host.data()));
  }
}

template <class T>
std::vector<double> LlamaModel<T>::logits(std::span<const std::int32_t> tokens, index_t window) const {
  const index_t n = static_cast<index_t>(tokens.size()), V = config_.vocab_size;
  std::vector<double> all(static_cast<std::size_t>(n * V));
  for_each_logit_slice(tokens, window, [&](index_t v0, index_t vs, const T* z) {
    for (index_t r = 0; r < n; ++r)
      for (index_t j = 0; j < vs; ++j) all[static_cast<std::size_t>(r * V + v0 + j)] = static_cast<double>(z[r * vs + j]);
  });
  return all;
}

template <class T>
typename LlamaModel<T>::Nll LlamaModel<T>::nll(std::span<const std::int32_t> tokens, index_t window) const {
  const index_t n = static_cast<index_t>(tokens.size());
  // Per row: an online log-sum-exp in f64 (running max and scaled sum) and the target's logit.
  std::vector<double> run_max(static_cast<std::size_t>(n), -std::numeric_limits<double>::infinity());
  std::vector<double> run_sum(static_cast<std::size_t>(n), 0.0), target(static_cast<std::size_t>(n), 0.0);
  for_each_logit_slice(tokens, window, [&](index_t v0, index_t vs, const T* z) {
    for (index_t r = 0; r < n; ++r) {
      const T* zr = z + r * vs;
      double m = run_max[r];
      for (index_t j = 0; j < vs; ++j) m = std::max(m, static_cast<double>(zr[j]));
      double sum = run_sum[r] * std::exp(run_max[r] - m);
      for (index_t j = 0; j < vs; ++j) sum += std::exp(static_cast<double>(zr[j]) - m);
      run_max[r] = m;
      run_sum[r] = sum;
      if (r % window != window - 1) {
        const index_t next = tokens[static_cast<std::size_t>(r + 1)];
        if (next >= v0 && next < v0 + vs) target[r] = static_cast<double>(zr[next - v0]);
      }
    }
  });
  Nll out;
  for (index_t r = 0; r < n; ++r) {
    if (r % window == window - 1) continue;
    out.sum += run_max[r] + std::log(run_sum[r]) - target[r];
    ++out.count;
  }
  return out;
}

template class LlamaModel<float>;
template class LlamaModel<double>;

}  // namespace bitrank::model
