// Dense Llama-style decoder (SmolLM2, Llama, Qwen2/3 dense without q/k norm)
// over a backend (DESIGN §2, §3).
//
// Weights (HostWeights, decoder.hpp) under GGUF names: token_embd.weight,
// blk.N.attn_q.weight, …, output_norm.weight, output.weight. The q and k
// rows of each head are in the half-split order our RoPE rotates, pairs (i, i + hd/2), as Hugging Face
// stores them. llama.cpp's converter permutes them for its adjacent-pair
// RoPE: within each head, GGUF row 2i + j holds HF row j·hd/2 + i
// (convert_hf_to_gguf.py, LlamaModel.permute: reshape(heads, 2, hd/2, …)
// .swapaxes(1, 2)); the GGUF loader undoes that (for k with the kv heads).
//
// Forward of one block over n = windows·T rows: llama_block.hpp's op
// sequence with projections P(in) = in·Wᵀ, each dense or BLR (projection.hpp);
// BlockActivations keeps every intermediate, so a backward can read them as
// its tape.
// Weights: each block's tensors are carved from one allocation (norm gains,
// then the projections in LlamaProj order): a device buffer per block, or,
// streamed (`stream`), a block image in host memory that block_forward
// copies into one of two device slots (streamed_weights.hpp), block b + 1's
// upload overlapping block b's compute.
// The embedding, the head (final norm with plain gain w) and the NLL are
// DecoderModel's (decoder.hpp).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "bitrank/model/decoder.hpp"
#include "bitrank/model/llama_block.hpp"
#include "bitrank/model/projection.hpp"
#include "bitrank/model/streamed_weights.hpp"

namespace bitrank::io {
class GgufFile;
class Safetensors;
}

namespace bitrank::model {

// ModelConfig from a GGUF's metadata: general.architecture must be "llama";
// llama.{embedding_length, block_count, attention.head_count,
// attention.head_count_kv (default head_count), feed_forward_length,
// rope.freq_base (default 10000), attention.layer_norm_rms_epsilon,
// context_length, vocab_size (else the length of tokenizer.ggml.tokens, else
// token_embd's rows), rope.dimension_count (must equal head_dim)};
// tie_word_embeddings when output.weight is absent. Error names the file and key.
ModelConfig config_from_gguf(const io::GgufFile& gguf);

// The names and shapes a dense model of `config` needs (head only when untied).
TensorList expected_tensors(const ModelConfig& config);
// Checks that the config is a dense Llama-style model this forward runs
// (positive sizes, heads a multiple of kv heads, even head_dim; not a hybrid);
// Error naming `source`.
void check_llama_config(const ModelConfig& config, const std::string& source);
// check_weights(w, {}) (projection.hpp): every tensor of w's family present,
// of its shape, finite.
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
class LlamaModel final : public DecoderModel<T> {
 public:
  // Uploads the weights to `be` (rounded to T), after check_llama_config
  // and check_weights(w, blr). The backend must outlive the model.
  // Projections named in `blr` run as BLR layers (Projection, projection.hpp),
  // the others as dense weights: the compressed model of the bitrank format,
  // or the student at initialisation.
  // stream: the blocks stay in host memory and move to the device one at a
  // time (above); the embedding, final norm and head stay on the device.
  // form: how the weights are kept (decoder.hpp's WeightForm; default T).
  LlamaModel(Backend<T>& be, const HostWeights& weights, const BlrProjections& blr = {}, bool stream = false,
             WeightForm form = {});

  // y [n][d] = block b applied to x [n][d], rows being windows of `window`
  // tokens; every intermediate lands in `acts` (resized as needed).
  void block_forward(index_t b, CView<T> x, index_t window, BlockActivations<T>& acts, View<T> y) const;
  // The final hidden states [n][d] of tokens (n a multiple of window).
  Buffer<T> hidden(std::span<const std::int32_t> tokens, index_t window) const override;
  bool streamed() const override { return slots_ != nullptr; }

  // Generation with a cache (kv_cache.hpp): keys and values of every block.
  std::unique_ptr<KvCache<T>> make_cache(index_t capacity) const override;
 protected:
  void check_own_cache(const KvCache<T>& cache) const override;
  void block_forward_cached(index_t b, CView<T> x, KvCache<T>& cache, View<T> y) const override;
  std::size_t block_weight_bytes() const override { return carved_bytes(storage_, slots_.get()); }

 private:
  // Views into the block's allocation.
  struct Block {
    CView<T> attn_norm, ffn_norm;
    Projection<T> proj[kLlamaProjs];  // by LlamaProj, dense or BLR
    Block rebased(const std::byte* from, std::byte* to) const;
  };
  struct Cache;  // KvCache and the activations of its forwards

  // Block b's weights: resident, or (streamed) copied into a slot, its views
  // rebased into `moved`.
  const Block& block_weights(index_t b, Block& moved) const;

  std::vector<Block> blocks_;               // over storage_, or over the slots' images when streamed
  std::vector<Buffer<std::byte>> storage_;  // resident: one device allocation per block
  std::unique_ptr<BlockSlots> slots_;       // streamed
  mutable RopeTables<T> rope_tables_;
};

extern template class LlamaModel<float>;
extern template class LlamaModel<double>;

}  // namespace bitrank::model
