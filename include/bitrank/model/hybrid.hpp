// The Qwen3.5 / Qwen3-Next hybrid decoder over a backend (DESIGN §2):
// Gated DeltaNet (GDN) blocks with a gated full-attention block every
// `full_attention_interval` (config layer_types), dense SwiGLU MLPs.
// Semantics follow transformers' modeling_qwen3_5.py / modeling_qwen3_next.py
// (which agree on everything below; only the checkpoint layout differs).
//
// Weights (HostWeights, decoder.hpp), row-major, rows = outputs, under these
// names (GGUF's where GGUF has the tensor), values in transformers' meaning:
//   token_embd.weight [V][d]   output_norm.weight [d]   output.weight [V][d] (untied)
//   blk.N.attn_norm.weight [d], blk.N.post_attention_norm.weight [d]
//   full attention:  attn_q.weight [2·H·hd][d] (per head [q_h | gate_h], hd rows each),
//                    attn_k.weight, attn_v.weight [Hkv·hd][d], attn_output.weight [d][H·hd],
//                    attn_q_norm.weight, attn_k_norm.weight [hd]
//   GDN:             attn_qkv.weight [C][d] (rows [q (Hk·dk) | k (Hk·dk) | v (Hv·dv)]),
//                    attn_gate.weight [Hv·dv][d] (z), ssm_beta.weight [Hv][d] (b),
//                    ssm_alpha.weight [Hv][d] (a), ssm_conv1d.weight [C][K],
//                    ssm_a_log [Hv] (A_log), ssm_dt.bias [Hv], ssm_norm.weight [dv],
//                    ssm_out.weight [d][Hv·dv]
//   MLP:             ffn_gate.weight, ffn_up.weight [f][d], ffn_down.weight [d][f]
// with C = 2·Hk·dk + Hv·dv and v-heads in transformers' grouped order: v-head
// h belongs to k-head h / (Hv/Hk). Every norm gain except ssm_norm is
// zero-centred (the norm multiplies by 1 + w, as transformers stores it).
//
// Projections P(in) = in·Wᵀ below are dense or BLR matrices (projection.hpp:
// the compressible ones of a compressed model). Each block's tensors are
// carved from one allocation: a device buffer, or, streamed, a block image
// in host memory copied into one of two device slots (streamed_weights.hpp).
//
// Forward of block b over n = windows·T rows (hybrid_block.hpp runs it;
// HybridBlockActivations keeps every intermediate — the GDN's tape
// included — for a backward):
//   xn1 = rmsnorm(x, attn_norm; 1 + w)
//   full attention:  [q | gate] = xn1·Wqᵀ split per head;  k, v = xn1·Wkᵀ, xn1·Wvᵀ
//                    qr = qk_norm_rope(q; 1 + q_norm), kr = qk_norm_rope(k; 1 + k_norm):
//                    RMSNorm over hd (eps = rms_norm_eps), then RoPE on the first
//                    rotary_dim = hd·partial_rotary_factor dims, pairs (i, i + rotary_dim/2),
//                    θ = rope_theta, position = row mod T
//                    att = causal GQA(qr, kr, v), scale 1/√hd;  mix = (att ⊙ σ(gate))·Woᵀ
//   GDN:             qkv, z, b, a = xn1·{Wqkv, Wz, Wb, Wa}ᵀ
//                    o = gdn_forward(qkv, z, a, b) (ops/gdn.hpp: conv + SiLU, l2 norms with
//                    eps 1e-6 (transformers hard-codes it), q/√dk, decay
//                    exp(−e^{A_log}·softplus(a + dt_bias)), β = σ(b), delta rule,
//                    gated RMSNorm with plain gain ssm_norm and eps = rms_norm_eps, ⊙ silu(z))
//                    mix = o·Woutᵀ
//   h = x + mix;  xn2 = rmsnorm(h, post_attention_norm; 1 + w)
//   y = h + (silu(xn2·Wgᵀ) ⊙ xn2·Wuᵀ)·Wdᵀ
// The head (final norm with gain 1 + w), embedding and NLL are DecoderModel's.
// Qwen3.5's interleaved multimodal RoPE (mrope_section) gives every section
// the same position for text, so it is the plain RoPE above.
//
// Checkpoints:
//  * Hugging Face (config.json + safetensors): tensor names under "model." or
//    "model.language_model." (Qwen3.5's multimodal checkpoints; model.visual.*
//    and mtp.* are ignored). GDN projections in Qwen3.5's layout
//    (linear_attn.in_proj_qkv / in_proj_z / in_proj_b / in_proj_a) or
//    Qwen3-Next's group-interleaved one, de-interleaved as transformers'
//    fix_query_key_value_ordering reads it: in_proj_qkvz rows are
//    [Hk][q (dk) | k (dk) | v (r·dv) | z (r·dv)] and in_proj_ba rows
//    [Hk][b (r) | a (r)], r = Hv/Hk. conv1d.weight is [C][1][K].
//  * GGUF (llama.cpp's "qwen35"): convert_hf_to_gguf.py stores the norms
//    other than ssm_norm with 1 baked in (w + 1), A_log as ssm_a = −exp(A_log),
//    dt_bias as ssm_dt.bias, conv1d squeezed to [C][K], and, when Hk ≠ Hv,
//    the v-heads of attn_qkv, attn_gate, ssm_beta, ssm_alpha, ssm_a, ssm_dt,
//    ssm_conv1d and the columns of ssm_out reordered from grouped to tiled
//    (GGUF head j·Hk + g is transformers' head g·r + j). The loader undoes
//    each. block_count includes the multi-token-prediction blocks
//    (nextn_predict_layers), which are not part of this forward and are
//    not read. Qwen3-Next GGUFs ("qwen3next") only exist with MoE MLPs and
//    are refused.
// Mixture-of-experts MLPs are not supported: a block whose MLP transformers
// would build as a sparse MoE (Qwen3-Next without the block in
// mlp_only_layers) is an Error naming the block.
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "bitrank/model/decoder.hpp"
#include "bitrank/model/hybrid_block.hpp"
#include "bitrank/model/llama_block.hpp"
#include "bitrank/model/projection.hpp"
#include "bitrank/model/streamed_weights.hpp"

namespace bitrank::io {
class GgufFile;
class Safetensors;
}  // namespace bitrank::io

namespace bitrank::model {

// Whether transformers builds block b's MLP as a sparse MoE block
// (qwen3_next: num_experts > 0 — 512 when the config omits it —, b not in
// mlp_only_layers and (b + 1) % decoder_sparse_step == 0; qwen3_5: never).
bool hybrid_block_is_moe(const ModelConfig& config, index_t b);
// Checks that the config is a hybrid this forward runs (sizes, silu, no
// attention bias, dk = dv, no MoE block); Error naming `source`.
void check_hybrid_config(const ModelConfig& config, const std::string& source);
// The names and shapes of every tensor of a hybrid model (head only when untied).
TensorList hybrid_expected_tensors(const ModelConfig& config);
// check_hybrid_config, then every expected tensor present, of its shape, finite.
void check_hybrid_weights(const HostWeights& w);

// Reads a Hugging Face hybrid checkpoint (see above); `source` names it in errors.
HostWeights load_hybrid_hf_weights(const io::Safetensors& st, const ModelConfig& config, const std::string& source);
// `dir` holds config.json and the safetensors (one file or an index).
HostWeights load_hybrid_hf_weights(const std::filesystem::path& dir);

// ModelConfig from a "qwen35" GGUF's metadata (qwen35.*): embedding_length,
// block_count − nextn_predict_layers (default 0) blocks, attention.head_count,
// attention.head_count_kv, attention.key_length (= value_length; default
// embedding_length / head_count), feed_forward_length,
// attention.layer_norm_rms_epsilon, rope.freq_base (default 10000),
// rope.dimension_count (the rotary dims),
// context_length (optional), ssm.conv_kernel, ssm.state_size (dk),
// ssm.group_count (Hk), ssm.time_step_rank (Hv), ssm.inner_size (Hv·dv),
// the layer types from attention.recurrent_layers (an array, when present)
// or full_attention_interval (default 4), vocab_size (else token_embd's
// rows); tied when output.weight is absent. Error names the file and key.
ModelConfig hybrid_config_from_gguf(const io::GgufFile& gguf);
// Checks, from the header alone (no tensor data is read), that the GGUF has
// every tensor of `config` with its shape and a dequantizable type.
void check_hybrid_gguf_tensors(const io::GgufFile& gguf, const ModelConfig& config);
// Config, header check, then every tensor dequantized and put back into
// transformers' meaning and order (see above), checked.
HostWeights load_hybrid_gguf_weights(const io::GgufFile& gguf);
HostWeights load_hybrid_gguf_weights(const std::filesystem::path& path);

template <class T>
class HybridModel final : public DecoderModel<T> {
 public:
  // Uploads the weights to `be` (rounded to T), after check_hybrid_config
  // and check_weights(w, blr) (projection.hpp). The backend must outlive the
  // model. Projections named in `blr` (compressible ones only: the GDN's b
  // and a stay dense) run as BLR layers, the others as dense weights: the
  // compressed model of the bitrank format, or the student at initialisation.
  // stream: the blocks stay in host memory and move to the device one at a
  // time; the embedding, final norm and head stay on the device.
  // form: how the weights are kept (decoder.hpp's WeightForm; default T).
  HybridModel(Backend<T>& be, const HostWeights& weights, const BlrProjections& blr = {}, bool stream = false,
              WeightForm form = {});

  // State checkpoint interval of the GDN tape (ops/gdn.hpp).
  index_t gdn_ckpt_every = 8;

  // The blocks' dimensions (ckpt_every = gdn_ckpt_every).
  HybridBlockDims block_dims() const;
  bool is_full_attention(index_t b) const;
  // The GDN op's configuration for windows of `window` tokens.
  GdnConfig gdn_config(index_t window) const;

  // y [n][d] = block b applied to x [n][d] (rows: windows of `window`
  // tokens); every intermediate lands in `acts` (resized as needed). With
  // record_tape the GDN tape also holds what its backward needs; without,
  // only its forward part (inference).
  void block_forward(index_t b, CView<T> x, index_t window, HybridBlockActivations<T>& acts, View<T> y,
                     bool record_tape = true) const;
  // The final hidden states [n][d] of tokens (n a multiple of window); the
  // GDN tapes are not recorded.
  Buffer<T> hidden(std::span<const std::int32_t> tokens, index_t window) const override;
  bool streamed() const override { return slots_ != nullptr; }

  // Generation with a cache (kv_cache.hpp): keys and values of the
  // attention blocks, recurrent and conv states of the GDN blocks.
  std::unique_ptr<KvCache<T>> make_cache(index_t capacity) const override;
 protected:
  void check_own_cache(const KvCache<T>& cache) const override;
  void block_forward_cached(index_t b, CView<T> x, KvCache<T>& cache, View<T> y) const override;
  std::size_t block_weight_bytes() const override { return carved_bytes(storage_, slots_.get()); }

 private:
  // Views into the block's allocation.
  struct Block {
    bool full = false;
    std::array<Projection<T>, kHybridProjs> proj;  // by HybridProj, dense or BLR; the other mixer kind's empty
    CView<T> attn_norm, post_norm;
    CView<T> q_norm, k_norm;                  // full attention
    CView<T> conv, a_log, dt_bias, gdn_norm;  // GDN
    Block rebased(const std::byte* from, std::byte* to) const;
  };
  struct Cache;  // KvCache and the activations of its forwards

  // Block b's weights: resident, or (streamed) copied into a slot, its views
  // rebased into `moved`.
  const Block& block_weights(index_t b, Block& moved) const;
  // The norms' gains and the mixer's non-projection parameters of block w.
  HybridBlockParams<T> block_params(const Block& w) const;

  std::vector<Block> blocks_;               // over storage_, or over the slots' images when streamed
  std::vector<Buffer<std::byte>> storage_;  // resident: one device allocation per block
  std::unique_ptr<BlockSlots> slots_;       // streamed
  mutable RopeTables<T> ropes_;
};

extern template class HybridModel<float>;
extern template class HybridModel<double>;

}  // namespace bitrank::model
