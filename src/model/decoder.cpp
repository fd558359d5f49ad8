// Shared parts of the decoder models: weight checks, embedding, sliced
// logits, NLL (contract: include/bitrank/model/decoder.hpp).
#include "bitrank/model/decoder.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <utility>

#include "bitrank/error.hpp"
#include "bitrank/model/projection.hpp"

namespace bitrank::model {

const HostTensor& HostWeights::at(const std::string& name) const {
  auto it = tensors.find(name);
  if (it == tensors.end()) fail("model '{}': tensor {} is missing", source, name);
  return it->second;
}

const std::vector<q8_0>* HostWeights::q8_0_of(const std::string& name) const {
  const auto it = q8_0_blocks.find(name);
  return it == q8_0_blocks.end() ? nullptr : &it->second;
}

std::string shape_str(const std::vector<index_t>& s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

void check_tensors(const HostWeights& w, const TensorList& expected) {
  for (const auto& [name, shape] : expected) {
    const HostTensor& t = w.at(name);
    if (t.shape != shape)
      fail("model '{}': tensor {} has shape {}, expected {}", w.source, name, shape_str(t.shape), shape_str(shape));
    index_t numel = 1;
    for (index_t s : shape) numel *= s;
    if (static_cast<index_t>(t.values.size()) != numel)
      fail("model '{}': tensor {} holds {} values, expected {}", w.source, name, t.values.size(), numel);
    for (std::size_t i = 0; i < t.values.size(); ++i)
      if (!std::isfinite(t.values[i])) fail("model '{}': tensor {} has a non-finite value at {}", w.source, name, i);
  }
}

void check_tokens(std::span<const std::int32_t> tokens, index_t window, index_t vocab, const char* op) {
  if (window <= 0) fail("{}: window must be positive, got {}", op, window);
  if (tokens.empty()) fail("{}: no tokens", op);
  if (static_cast<index_t>(tokens.size()) % window != 0)
    fail("{}: {} tokens are not a whole number of windows of {}", op, tokens.size(), window);
  for (std::size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] < 0 || tokens[i] >= vocab)
      fail("{}: token {} at position {} is outside the vocabulary of {}", op, tokens[i], i, vocab);
}

namespace {

// dst[i] = src[i] as T for i < d (an f16 read exactly).
template <class T, class U>
void copy_row(const U* src, index_t d, T* dst) {
  for (index_t i = 0; i < d; ++i) {
    if constexpr (std::is_same_v<U, f16>)
      dst[i] = static_cast<T>(to_f32(src[i]));
    else
      dst[i] = static_cast<T>(src[i]);
  }
}

// dst[i] = d·q of the row's blocks, as T (exact), for i < d: dequantize_q8_0,
// through an f32 row where T is wider.
template <class T>
void copy_q8_row(const q8_0* blocks, index_t d, T* dst) {
  const std::span<const q8_0> row(blocks, static_cast<std::size_t>(d / kQ8Block));
  if constexpr (std::is_same_v<T, float>) {
    dequantize_q8_0(row, std::span<float>(dst, static_cast<std::size_t>(d)));
  } else {
    std::vector<float> values(static_cast<std::size_t>(d));
    dequantize_q8_0(row, values);
    copy_row(values.data(), d, dst);
  }
}

}  // namespace

template <class T>
DecoderModel<T>::DecoderModel(Backend<T>& be, const HostWeights& w, GainStyle final_gain, WeightForm form)
    : be_(be), config_(w.config), final_gain_(final_gain) {
  const HostTensor& table = w.at("token_embd.weight");
  const HostTensor& head = config_.tie_word_embeddings ? table : w.at("output.weight");
  final_norm_ = upload(w.at("output_norm.weight"));
  const std::string head_name = config_.tie_word_embeddings ? "token_embd.weight" : "output.weight";
  const std::vector<q8_0>* head_q8 = form.q8_0_matrices ? w.q8_0_of(head_name) : nullptr;
  if (head_q8) {
    head_q8_ = Buffer<q8_0>(*be_.memory, head_q8->size());
    head_q8_.upload(std::span<const q8_0>(*head_q8));
  } else if (form.f16_matrices) {
    head16_ = upload_values<f16>(*be_.memory, head.values);
  } else {
    head_ = upload(head);
  }
  embed_from_head_ = config_.tie_word_embeddings && be_.memory->host_accessible();
  if (embed_from_head_) return;
  const std::vector<q8_0>* table_q8 = form.q8_0_matrices ? w.q8_0_of("token_embd.weight") : nullptr;
  if (table_q8) {
    embed_host_q8_ = *table_q8;
  } else if (form.f16_matrices) {
    embed_host16_.resize(table.values.size());
    for (std::size_t i = 0; i < table.values.size(); ++i) embed_host16_[i] = to_f16(table.values[i]);
  } else {
    embed_host_ = table.values;
  }
}

template <class T>
CView<T> DecoderModel<T>::head() const {
  if (head16_.data() || head_q8_.data())
    fail("head: this model keeps its head in {} (a loaded bitrank model's weight form); the trainer reads a head of "
         "its own type", head16_.data() ? "f16" : "Q8_0 blocks");
  return head_.view({config_.vocab_size, config_.hidden_size});
}

template <class T>
std::size_t DecoderModel<T>::weight_bytes() const {
  return (final_norm_.size() + head_.size()) * sizeof(T) + head16_.size() * sizeof(f16) +
         head_q8_.size() * sizeof(q8_0) + embed_host_.size() * sizeof(float) + embed_host16_.size() * sizeof(f16) +
         embed_host_q8_.size() * sizeof(q8_0) + block_weight_bytes();
}

template <class T>
Buffer<T> DecoderModel<T>::upload(const HostTensor& t) const {
  return upload_values<T>(*be_.memory, t.values);
}

template <class T>
void DecoderModel<T>::embed(std::span<const std::int32_t> tokens, View<T> h) const {
  const index_t n = static_cast<index_t>(tokens.size()), d = config_.hidden_size;
  if (!(h.shape == Shape{n, d}) || !h.contiguous())
    fail("embed: h has shape {}, expected [{}, {}]", h.shape.str(), n, d);
  std::vector<T> rows(static_cast<std::size_t>(n * d));
  for (index_t r = 0; r < n; ++r) {
    const std::int32_t id = tokens[static_cast<std::size_t>(r)];
    if (id < 0 || id >= config_.vocab_size)
      fail("embed: token {} at position {} is outside the vocabulary of {}", id, r, config_.vocab_size);
    const index_t at = static_cast<index_t>(id) * d;
    T* dst = rows.data() + r * d;
    if (!embed_from_head_ && !embed_host_q8_.empty())
      copy_q8_row(embed_host_q8_.data() + at / kQ8Block, d, dst);
    else if (!embed_from_head_)
      embed_host16_.empty() ? copy_row(embed_host_.data() + at, d, dst) : copy_row(embed_host16_.data() + at, d, dst);
    else if (head_q8_.data())
      copy_q8_row(head_q8_.data() + at / kQ8Block, d, dst);
    else if (head16_.data())
      copy_row(head16_.data() + at, d, dst);
    else
      copy_row(head_.data() + at, d, dst);
  }
  be_.memory->upload(h.data, rows.data(), rows.size() * sizeof(T));
}

template <class T>
template <class Fn>
void DecoderModel<T>::for_each_logit_slice(std::span<const std::int32_t> tokens, index_t window, index_t first_row,
                                           Fn&& fn) const {
  const index_t d = config_.hidden_size;
  const Buffer<T> h = hidden(tokens, window);
  const index_t n = static_cast<index_t>(tokens.size()) - first_row;  // rows through the head
  for_each_head_slice(CView<T>(h.data() + first_row * d, Shape{n, d}), fn);
}

template <class T>
template <class Fn>
void DecoderModel<T>::for_each_head_slice(CView<T> rows_h, Fn&& fn) const {
  const index_t d = config_.hidden_size, V = config_.vocab_size, n = rows_h.dim(0);
  Buffer<T> xn(*be_.memory, static_cast<std::size_t>(n * d)), inv(*be_.memory, static_cast<std::size_t>(n));
  be_.norm().rmsnorm_forward(rows_h, final_norm_.view({d}), final_gain_, static_cast<float>(config_.rms_norm_eps),
                             xn.view({n, d}), inv.view({n}));
  const index_t slice = head_slice_rows(n);
  Buffer<T> out(*be_.memory, static_cast<std::size_t>(n * slice));
  std::vector<T> host(static_cast<std::size_t>(n * slice));
  for (index_t v0 = 0; v0 < V; v0 += slice) {
    const index_t vs = std::min(slice, V - v0);
    if (head_q8_.data())
      be_.dense().dense_forward_q8(xn.view({n, d}), CView<q8_0>(head_q8_.data() + v0 * (d / kQ8Block),
                                                                Shape{vs, d / kQ8Block}),
                                   out.view({n, vs}), false);
    else if (head16_.data())
      be_.dense().dense_forward_f16(xn.view({n, d}), CView<f16>(head16_.data() + v0 * d, Shape{vs, d}), out.view({n, vs}),
                                false);
    else
      be_.dense().dense_forward(xn.view({n, d}), CView<T>(head_.data() + v0 * d, Shape{vs, d}), out.view({n, vs}),
                                false);
    be_.memory->download(host.data(), out.data(), static_cast<std::size_t>(n * vs) * sizeof(T));
    fn(v0, vs, static_cast<const T*>(host.data()));
  }
}

template <class T>
index_t DecoderModel<T>::head_slice_rows(index_t n) const {
  const index_t V = config_.vocab_size;
  const index_t rows = vocab_slice > 0 ? vocab_slice : n * V <= (index_t{1} << 22) ? V : 8192;
  return std::clamp<index_t>(rows, 1, V);
}

template <class T>
std::vector<double> DecoderModel<T>::logits(std::span<const std::int32_t> tokens, index_t window) const {
  const index_t n = static_cast<index_t>(tokens.size()), V = config_.vocab_size;
  std::vector<double> all(static_cast<std::size_t>(n * V));
  for_each_logit_slice(tokens, window, 0, [&](index_t v0, index_t vs, const T* z) {
    for (index_t r = 0; r < n; ++r)
      for (index_t j = 0; j < vs; ++j)
        all[static_cast<std::size_t>(r * V + v0 + j)] = static_cast<double>(z[r * vs + j]);
  });
  return all;
}

template <class T>
std::vector<double> DecoderModel<T>::last_logits(std::span<const std::int32_t> tokens) const {
  const index_t n = static_cast<index_t>(tokens.size());
  if (n == 0) fail("last_logits: no tokens");
  std::vector<double> last(static_cast<std::size_t>(config_.vocab_size));
  for_each_logit_slice(tokens, n, n - 1, [&](index_t v0, index_t vs, const T* z) {
    for (index_t j = 0; j < vs; ++j) last[static_cast<std::size_t>(v0 + j)] = static_cast<double>(z[j]);
  });
  return last;
}

template <class T>
Buffer<T> DecoderModel<T>::hidden_cached(std::span<const std::int32_t> tokens, KvCache<T>& cache) const {
  check_own_cache(cache);
  const index_t n = static_cast<index_t>(tokens.size()), d = config_.hidden_size;
  check_cache_room(cache.length, cache.capacity, n);
  Buffer<T> x(*be_.memory, static_cast<std::size_t>(n * d)), y(*be_.memory, static_cast<std::size_t>(n * d));
  embed(tokens, x.view({n, d}));
  for (index_t b = 0; b < config_.num_layers; ++b) {
    block_forward_cached(b, x.view({n, d}), cache, y.view({n, d}));
    std::swap(x, y);
  }
  cache.length += n;
  return x;
}

template <class T>
std::vector<double> DecoderModel<T>::next_logits(std::span<const std::int32_t> tokens, KvCache<T>& cache) const {
  const index_t n = static_cast<index_t>(tokens.size()), d = config_.hidden_size;
  const Buffer<T> h = hidden_cached(tokens, cache);
  std::vector<double> last(static_cast<std::size_t>(config_.vocab_size));
  for_each_head_slice(CView<T>(h.data() + (n - 1) * d, Shape{1, d}), [&](index_t v0, index_t vs, const T* z) {
    for (index_t j = 0; j < vs; ++j) last[static_cast<std::size_t>(v0 + j)] = static_cast<double>(z[j]);
  });
  return last;
}

template <class T>
std::vector<double> DecoderModel<T>::last_logits(std::span<const std::int32_t> tokens, index_t window) const {
  check_tokens(tokens, window, config_.vocab_size, "last_logits");
  const index_t n = static_cast<index_t>(tokens.size()), d = config_.hidden_size, V = config_.vocab_size;
  const index_t w = n / window;
  const Buffer<T> h = hidden(tokens, window);
  // The last row of each window, gathered through the host into one contiguous block.
  std::vector<T> rows(static_cast<std::size_t>(w * d));
  for (index_t k = 0; k < w; ++k)
    be_.memory->download(rows.data() + k * d, h.data() + ((k + 1) * window - 1) * d, static_cast<std::size_t>(d) * sizeof(T));
  Buffer<T> last_h(*be_.memory, rows.size());
  be_.memory->upload(last_h.data(), rows.data(), rows.size() * sizeof(T));
  std::vector<double> out(static_cast<std::size_t>(w * V));
  for_each_head_slice(last_h.view({w, d}), [&](index_t v0, index_t vs, const T* z) {
    for (index_t r = 0; r < w; ++r)
      for (index_t j = 0; j < vs; ++j) out[static_cast<std::size_t>(r * V + v0 + j)] = static_cast<double>(z[r * vs + j]);
  });
  return out;
}

template <class T>
Nll DecoderModel<T>::nll(std::span<const std::int32_t> tokens, index_t window) const {
  const index_t n = static_cast<index_t>(tokens.size());
  // Per row: an online log-sum-exp in f64 (running max and scaled sum) and the target's logit.
  std::vector<double> run_max(static_cast<std::size_t>(n), -std::numeric_limits<double>::infinity());
  std::vector<double> run_sum(static_cast<std::size_t>(n), 0.0), target(static_cast<std::size_t>(n), 0.0);
  for_each_logit_slice(tokens, window, 0, [&](index_t v0, index_t vs, const T* z) {
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

template class DecoderModel<float>;
template class DecoderModel<double>;

}  // namespace bitrank::model
