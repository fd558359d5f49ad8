// Dense Llama-style decoder (SmolLM2, Llama, Qwen2/3 dense without q/k norm)
// over a backend (DESIGN §2, §3).
//
// Weights: HostWeights holds every tensor as f32 on the host, under GGUF
// names (token_embd.weight, blk.N.attn_q.weight, …, output_norm.weight,
// output.weight), each a row-major [rows][cols] matrix with rows = outputs
// (dense_forward's w[r][k]). The q and k rows of each head are in the
// half-split order our RoPE rotates, pairs (i, i + hd/2), as Hugging Face
// stores them. llama.cpp's converter permutes them for its adjacent-pair
// RoPE: within each head, GGUF row 2i + j holds HF row j·hd/2 + i
// (convert_hf_to_gguf.py, LlamaModel.permute: reshape(heads, 2, hd/2, …)
// .swapaxes(1, 2)); the GGUF loader undoes that (for k with the kv heads).
//
// Forward of one block over n = windows·T rows: llama_block.hpp's op
// sequence with dense projections P(in) = in·Wᵀ (dense_forward);
// BlockActivations keeps every intermediate, so a backward can read them as
// its tape.
// The head: logits = rmsnorm(h_L, output_norm)·Wheadᵀ, Whead = output.weight
// or token_embd.weight when the head is tied; computed over vocabulary
// slices of at most `vocab_slice` rows so the [n][V] matrix need not exist.
// Per-token NLL: log-softmax accumulated in f64 over the vocabulary.
//
// Token embedding rows are gathered on the host (the table stays there; it
// is frozen) and uploaded, so the model reads no backend memory on the host.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "bitrank/backend.hpp"
#include "bitrank/io/hf_config.hpp"
#include "bitrank/model/llama_block.hpp"

namespace bitrank::io {
class GgufFile;
class Safetensors;
}

namespace bitrank::model {

using io::ModelConfig;

// ModelConfig from a GGUF's metadata: general.architecture must be "llama";
// llama.{embedding_length, block_count, attention.head_count,
// attention.head_count_kv (default head_count), feed_forward_length,
// rope.freq_base (default 10000), attention.layer_norm_rms_epsilon,
// context_length, vocab_size (else the length of tokenizer.ggml.tokens, else
// token_embd's rows), rope.dimension_count (must equal head_dim)};
// tie_word_embeddings when output.weight is absent. Error names the file and key.
ModelConfig config_from_gguf(const io::GgufFile& gguf);

struct HostTensor {
  std::vector<index_t> shape;  // [rows, cols] or [d]
  std::vector<float> values;   // row-major
};

struct HostWeights {
  ModelConfig config;
  std::string source;  // file name, for messages
  std::map<std::string, HostTensor> tensors;

  const HostTensor& at(const std::string& name) const;  // Error naming the tensor when missing
};

// The names and shapes a dense model of `config` needs (head only when untied).
std::vector<std::pair<std::string, std::vector<index_t>>> expected_tensors(const ModelConfig& config);
// Checks `w` has every expected tensor with its shape and finite values;
// Error naming the source and the tensor otherwise.
void check_weights(const HostWeights& w);

// Reads a dense Llama-style GGUF: config, all tensors dequantized to f32,
// q/k rows un-permuted (see above), checked.
HostWeights load_gguf_weights(const io::GgufFile& gguf);
HostWeights load_gguf_weights(const std::filesystem::path& path);

// Reads a Hugging Face dense llama checkpoint (model_type "llama" without
// attention biases; qwen2's biases and qwen3's q/k norms are not in this
// model): model.embed_tokens → token_embd, model.layers.N.{input_layernorm,
// self_attn.{q,k,v,o}_proj, post_attention_layernorm, mlp.{gate,up,down}_proj}
// → blk.N.{attn_norm, attn_q/k/v, attn_output, ffn_norm, ffn_gate/up/down},
// model.norm → output_norm, lm_head → output (untied only). HF rows are
// already in half-split RoPE order. `dir` holds config.json and the
// safetensors (one file or an index).
HostWeights load_hf_weights(const io::Safetensors& st, const ModelConfig& config, const std::string& source);
HostWeights load_hf_weights(const std::filesystem::path& dir);

template <class T>
class LlamaModel {
 public:
  // Uploads the weights to `be` (rounded to T). The backend must outlive the model.
  LlamaModel(Backend<T>& be, const HostWeights& weights);

  const ModelConfig& config() const { return config_; }
  Backend<T>& backend() const { return be_; }
  index_t vocab_slice = 8192;  // rows of the head per logits slice

  // h [n][d] = embedding rows of tokens (ids checked against the vocabulary).
  void embed(std::span<const std::int32_t> tokens, View<T> h) const;
  // y [n][d] = block b applied to x [n][d], rows being windows of `window`
  // tokens; every intermediate lands in `acts` (resized as needed).
  void block_forward(index_t b, CView<T> x, index_t window, BlockActivations<T>& acts, View<T> y) const;
  // The final hidden states [n][d] of tokens (n a multiple of window).
  Buffer<T> hidden(std::span<const std::int32_t> tokens, index_t window) const;

  // Logits [n][V] on the host, for tokens cut into windows of `window`.
  std::vector<double> logits(std::span<const std::int32_t> tokens, index_t window) const;

  struct Nll {
    double sum = 0;      // Σ −log p(next token), in nats
    std::int64_t count = 0;  // predictions: window − 1 per window
  };
  // Next-token NLL within each window (the last token of a window predicts nothing).
  Nll nll(std::span<const std::int32_t> tokens, index_t window) const;

 private:
  struct Block {
    Buffer<T> attn_norm, wq, wk, wv, wo, ffn_norm, w_gate, w_up, w_down;
  };
  Buffer<T> upload(const HostTensor& t) const;
  // Calls fn(v0, slice [n][vs] of logits on the host as T) for each vocabulary slice.
  template <class Fn>
  void for_each_logit_slice(std::span<const std::int32_t> tokens, index_t window, Fn&& fn) const;

  Backend<T>& be_;
  ModelConfig config_;
  std::vector<float> embed_host_;  // [V][d]
  std::vector<Block> blocks_;
  Buffer<T> final_norm_, head_;
  mutable RopeTables<T> rope_tables_;
};

extern template class LlamaModel<float>;
extern template class LlamaModel<double>;

}  // namespace bitrank::model
