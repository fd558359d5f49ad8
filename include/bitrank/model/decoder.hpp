// What every decoder-only language model of bitrank shares (DESIGN §2):
// host weights, the token embedding, the head over vocabulary slices, and
// the next-token NLL. The block stacks differ — model.hpp (dense Llama) and
// hybrid.hpp (Qwen3.5 / Qwen3-Next) — and implement hidden().
//
// Weights: HostWeights holds every tensor as f32 on the host under GGUF-style
// names, each a row-major [rows][cols] matrix with rows = outputs
// (dense_forward's w[r][k]) or a vector. The shared names:
//     token_embd.weight [V][d]     output_norm.weight [d]
//     output.weight [V][d]         (absent when the head is tied to token_embd)
//
// The head: logits = rmsnorm(h_L, output_norm)·Wheadᵀ with the family's
// gain style (w for Llama, 1 + w for the hybrid), computed over vocabulary
// slices of at most `vocab_slice` rows so the [n][V] matrix need not exist
// on the backend. Per-token NLL: an online log-sum-exp in f64 over the
// slices. Token embedding rows are gathered on the host and uploaded: from
// the head's own buffer when the head is tied and the backend's memory is
// host memory (cpu, ref: one copy of the table), else from a host copy of
// the table (it is frozen; cuda keeps it off the device).
//
// Weight form (WeightForm): by default every weight is T on the backend. A
// loaded bitrank model keeps the 16-bit form its file stores — BLR scales
// and weight matrices (head, token embedding, projections left dense) in
// f16, read by blr_infer (f16 scales) and dense_forward_f16 and widened row by
// row by the embedding lookup — or, where the file holds them as Q8_0 blocks,
// the head and the token embedding as those blocks, read by dense_forward_q8
// and the lookup — so that its resident weights (weight_bytes) are about its
// file size. Vectors (norm gains, the GDN's small tensors)
// stay T: a few KB a block. On the CPU the signs are kept as the sign
// blocks its decode kernel reads (the same bits regrouped).
//
// Tokens come as windows of T: n = windows·T rows; position p of a window is
// row mod T, and no window sees another (attention and the GDN recurrence
// both restart at each window).
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <memory>

#include "bitrank/backend.hpp"
#include "bitrank/io/hf_config.hpp"
#include "bitrank/model/kv_cache.hpp"
#include "bitrank/q8_0.hpp"

namespace bitrank::model {

using io::ModelConfig;

using bitrank::HostTensor;  // (tensor.hpp: the core type, which io/ uses too)

struct HostWeights {
  ModelConfig config;
  std::string source;  // file or directory name, for messages
  std::map<std::string, HostTensor> tensors;
  // Matrices of `tensors` also held as the Q8_0 blocks they came from (a
  // .bitrank file's; their values there are exactly d·q), by name.
  std::map<std::string, std::vector<q8_0>> q8_0_blocks;

  const HostTensor& at(const std::string& name) const;  // Error naming the tensor when missing
  const std::vector<q8_0>* q8_0_of(const std::string& name) const;  // its q8_0_blocks, or nullptr
};

// (name, shape) of each tensor a model needs, in load order.
using TensorList = std::vector<std::pair<std::string, std::vector<index_t>>>;

// Checks that `w` holds every listed tensor with its shape and finite
// values; Error naming w.source and the tensor otherwise.
void check_tensors(const HostWeights& w, const TensorList& expected);

// "[5120, 17408]"
std::string shape_str(const std::vector<index_t>& shape);

// Tokens of whole windows inside the vocabulary; Error naming `op` otherwise.
void check_tokens(std::span<const std::int32_t> tokens, index_t window, index_t vocab, const char* op);

// How a model keeps its weights (above): false = as T.
struct WeightForm {
  bool f16_scales = false;    // BLR scales h, ℓ, g in f16 (BlrPath::scales16)
  bool f16_matrices = false;  // head, token embedding and dense projections in f16
  // The head and the token embedding as their Q8_0 blocks (bitrank/q8_0.hpp)
  // where HostWeights::q8_0_blocks holds them (a file that stores them so), read
  // by dense_forward_q8 and the embedding lookup; before f16_matrices.
  bool q8_0_matrices = false;
  // BLR signs as sign blocks (BlrPath::sign_u_blocks, sign_vt_blocks)
  // instead of bitmaps, for a backend whose blr_infer reads them
  // (BlrOps::reads_sign_blocks: the CPU); make_model sets it from the backend.
  bool sign_blocks = false;
};

struct Nll {
  double sum = 0;          // Σ −log p(next token), in nats
  std::int64_t count = 0;  // predictions: window − 1 per window
};

template <class T>
class DecoderModel {
 public:
  using Nll = model::Nll;

  virtual ~DecoderModel() = default;
  DecoderModel(const DecoderModel&) = delete;
  DecoderModel& operator=(const DecoderModel&) = delete;

  const ModelConfig& config() const { return config_; }
  Backend<T>& backend() const { return be_; }
  // Rows of the head per logits slice; 0: the whole vocabulary while the
  // slice holds at most 2^22 logits (decoding: one call over the head, not
  // six), else 8192 rows.
  index_t vocab_slice = 0;
  // The rows of the head per slice for n rows of hidden states, in [1, V].
  index_t head_slice_rows(index_t n) const;

  // h [n][d] = embedding rows of tokens (ids checked against the vocabulary).
  void embed(std::span<const std::int32_t> tokens, View<T> h) const;
  // The final hidden states [n][d] (before the final norm) of tokens, n a
  // multiple of window.
  virtual Buffer<T> hidden(std::span<const std::int32_t> tokens, index_t window) const = 0;
  // Whether the blocks are streamed from host memory (streamed_weights.hpp).
  virtual bool streamed() const = 0;

  // Generation with a cache (kv_cache.hpp): an empty cache of `capacity`
  // positions for one sequence of this model.
  virtual std::unique_ptr<KvCache<T>> make_cache(index_t capacity) const = 0;
  // The final hidden states [n][d] of `tokens` as the next positions of the
  // cached sequence; the cache (one this model made) grows by them.
  Buffer<T> hidden_cached(std::span<const std::int32_t> tokens, KvCache<T>& cache) const;
  // Logits [V] on the host after `tokens` (the next positions of the cached
  // sequence, which grows by them): hidden_cached, the head over the last row.
  std::vector<double> next_logits(std::span<const std::int32_t> tokens, KvCache<T>& cache) const;

  // The frozen head as the trainer reads it: the final norm's gain [d], its
  // style, and the head matrix [V][d] (token_embd when tied), on the backend.
  // head(): Error for a model whose head is f16 (WeightForm::f16_matrices).
  CView<T> final_norm() const { return final_norm_.view({config_.hidden_size}); }
  GainStyle final_gain() const { return final_gain_; }
  CView<T> head() const;

  // The bytes of every weight the model holds (backend allocations and the
  // host embedding table): its resident weights, before activations and caches.
  std::size_t weight_bytes() const;

  // Logits [n][V] on the host, for tokens cut into windows of `window`.
  std::vector<double> logits(std::span<const std::int32_t> tokens, index_t window) const;
  // Logits [V] on the host of the last token of `tokens`, all of them one
  // window: the next-token distribution after them (generation). The blocks
  // run over every row (no KV cache); the head only over the last.
  std::vector<double> last_logits(std::span<const std::int32_t> tokens) const;
  // Logits [windows][V] on the host of the last token of each window of
  // `window` tokens: the next-token distributions of several sequences of
  // equal length at once (batched generation, train/teacher_text.hpp). The
  // blocks run over every row; the last rows are gathered through the host
  // (windows·d values) and only they go through the head.
  std::vector<double> last_logits(std::span<const std::int32_t> tokens, index_t window) const;
  // Next-token NLL within each window (the last token of a window predicts nothing).
  Nll nll(std::span<const std::int32_t> tokens, index_t window) const;

 protected:
  // hidden_cached's family parts: an Error unless `cache` is one this model
  // made; y [n][d] = block b on x [n][d], the next n positions of the cached
  // sequence (the cache's length is the first of them).
  virtual void check_own_cache(const KvCache<T>& cache) const = 0;
  virtual void block_forward_cached(index_t b, CView<T> x, KvCache<T>& cache, View<T> y) const = 0;

  // Takes token_embd, output_norm and the head (output, or token_embd when
  // tied) from `w`, which the derived class has checked, in `form`.
  DecoderModel(Backend<T>& be, const HostWeights& w, GainStyle final_gain, WeightForm form);
  // The bytes of the blocks' weights (weight_bytes' share of the family).
  virtual std::size_t block_weight_bytes() const = 0;
  // A host tensor uploaded to the backend (rounded to T).
  Buffer<T> upload(const HostTensor& t) const;

  Backend<T>& be_;
  ModelConfig config_;

 private:
  // Calls fn(v0, vs, slice [n − first_row][vs] of logits on the host as T)
  // for each vocabulary slice: the head over rows first_row..n−1 only.
  template <class Fn>
  void for_each_logit_slice(std::span<const std::int32_t> tokens, index_t window, index_t first_row, Fn&& fn) const;
  // The same for the hidden rows h [n][d] (contiguous, on the backend).
  template <class Fn>
  void for_each_head_slice(CView<T> h, Fn&& fn) const;

  Buffer<T> final_norm_, head_;  // head_ empty when head16_ or head_q8_ holds the head
  Buffer<f16> head16_;
  Buffer<q8_0> head_q8_;  // [V][d/32] (WeightForm::q8_0_matrices)
  bool embed_from_head_ = false;     // tied, on host memory: embed() reads the head's buffer
  std::vector<float> embed_host_;    // else the table [V][d] on the host, f32 or
  std::vector<f16> embed_host16_;    // f16 (WeightForm::f16_matrices)
  std::vector<q8_0> embed_host_q8_;  // or Q8_0 blocks (WeightForm::q8_0_matrices)
  GainStyle final_gain_;
};

extern template class DecoderModel<float>;
extern template class DecoderModel<double>;

}  // namespace bitrank::model
