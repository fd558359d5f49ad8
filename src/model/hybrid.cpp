// Qwen3.5 / Qwen3-Next hybrid forward over a backend, built from the op
// catalogue only (contract and formulas: include/bitrank/model/hybrid.hpp).
#include <string>

#include "bitrank/error.hpp"
#include "bitrank/model/hybrid.hpp"

namespace bitrank::model {
namespace {

// The weights, checked first (the base class reads them).
const HostWeights& checked(const HostWeights& w) {
  check_hybrid_weights(w);
  return w;
}

// transformers' l2norm of q and k in the GDN (modeling_qwen3_5.py l2norm,
// called with its default eps whatever the config says).
constexpr float kGdnL2Eps = 1e-6f;

}  // namespace

template <class T>
HybridModel<T>::HybridModel(Backend<T>& be, const HostWeights& w)
    : DecoderModel<T>(be, checked(w), GainStyle::zero_centred) {
  for (index_t b = 0; b < this->config_.num_layers; ++b) {
    const std::string p = "blk." + std::to_string(b) + ".";
    auto up = [&](const char* name) { return this->upload(w.at(p + name)); };
    Block k;
    k.full = is_full_attention(b);
    k.attn_norm = up("attn_norm.weight");
    k.post_norm = up("post_attention_norm.weight");
    if (k.full) {
      k.wq = up("attn_q.weight");
      k.wk = up("attn_k.weight");
      k.wv = up("attn_v.weight");
      k.wo = up("attn_output.weight");
      k.q_norm = up("attn_q_norm.weight");
      k.k_norm = up("attn_k_norm.weight");
    } else {
      k.w_qkv = up("attn_qkv.weight");
      k.w_z = up("attn_gate.weight");
      k.w_b = up("ssm_beta.weight");
      k.w_a = up("ssm_alpha.weight");
      k.conv = up("ssm_conv1d.weight");
      k.a_log = up("ssm_a_log");
      k.dt_bias = up("ssm_dt.bias");
      k.gdn_norm = up("ssm_norm.weight");
      k.w_out = up("ssm_out.weight");
    }
    k.w_gate = up("ffn_gate.weight");
    k.w_up = up("ffn_up.weight");
    k.w_down = up("ffn_down.weight");
    blocks_.push_back(std::move(k));
  }
}

template <class T>
bool HybridModel<T>::is_full_attention(index_t b) const {
  if (b < 0 || b >= this->config_.num_layers) fail("hybrid model: block {} of {}", b, this->config_.num_layers);
  return this->config_.layer_types[static_cast<std::size_t>(b)] == io::LayerType::full_attention;
}

template <class T>
GdnConfig HybridModel<T>::gdn_config(index_t window) const {
  const io::LinearAttentionConfig& l = *this->config_.linear;
  return GdnConfig{.k_heads = l.num_key_heads,
                   .v_heads = l.num_value_heads,
                   .head_dim = l.key_head_dim,
                   .conv_kernel = l.conv_kernel_dim,
                   .window = window,
                   .ckpt_every = gdn_ckpt_every,
                   .l2_eps = kGdnL2Eps,
                   .norm_eps = static_cast<float>(this->config_.rms_norm_eps)};
}

template <class T>
const Buffer<T>& HybridModel<T>::rope_table_for(index_t window) const {
  auto it = rope_tables_.find(window);
  if (it == rope_tables_.end()) {
    const auto table = rope_table<T>(window, this->config_.rotary_dim() / 2, this->config_.rope_theta);
    Buffer<T> b(*this->be_.memory, table.size());
    b.upload(table);
    it = rope_tables_.emplace(window, std::move(b)).first;
  }
  return it->second;
}

template <class T>
void HybridModel<T>::block_forward(index_t b, CView<T> x, index_t window, HybridBlockActivations<T>& a, View<T> y,
                                   bool record_tape) const {
  const bool full = is_full_attention(b);
  const ModelConfig& c = this->config_;
  Backend<T>& be = this->be_;
  const index_t n = x.dim(0), d = c.hidden_size, f = c.intermediate_size;
  if (!(x.shape == Shape{n, d}) || !x.contiguous())
    fail("block_forward: x has shape {}, expected a contiguous [n, {}]", x.shape.str(), d);
  if (!(y.shape == x.shape) || !y.contiguous())
    fail("block_forward: y has shape {}, expected a contiguous {}", y.shape.str(), x.shape.str());
  if (window <= 0 || n % window != 0) fail("block_forward: {} rows are not whole windows of {}", n, window);
  Memory& mem = *be.memory;
  for (Buffer<T>* buf : {&a.xn1, &a.proj, &a.h, &a.xn2}) ensure_size(*buf, mem, n * d);
  for (Buffer<T>* buf : {&a.inv1, &a.inv2}) ensure_size(*buf, mem, n);
  for (Buffer<T>* buf : {&a.ffn_gate, &a.ffn_up, &a.act}) ensure_size(*buf, mem, n * f);

  const Block& w = blocks_[static_cast<std::size_t>(b)];
  const float eps = static_cast<float>(c.rms_norm_eps);
  auto W = [](const Buffer<T>& buf, index_t rows, index_t cols) { return CView<T>(buf.view({rows, cols})); };

  be.norm().rmsnorm_forward(x, w.attn_norm.view({d}), GainStyle::zero_centred, eps, a.xn1.view({n, d}),
                            a.inv1.view({n}));
  const CView<T> xn1 = a.xn1.view({n, d});
  if (full) {
    const index_t H = c.num_heads, Hkv = c.num_kv_heads, hd = c.head_dim, qw = H * hd, kw = Hkv * hd;
    ensure_size(a.qg, mem, 2 * n * qw);
    for (Buffer<T>* buf : {&a.q, &a.gate, &a.qr, &a.att, &a.gated}) ensure_size(*buf, mem, n * qw);
    for (Buffer<T>* buf : {&a.k, &a.v, &a.kr}) ensure_size(*buf, mem, n * kw);
    for (Buffer<T>* buf : {&a.q_inv, &a.lse}) ensure_size(*buf, mem, n * H);
    ensure_size(a.k_inv, mem, n * Hkv);
    const CView<T> table = rope_table_for(window).view({window, c.rotary_dim() / 2, 2});

    be.dense().dense_forward(xn1, W(w.wq, 2 * qw, d), a.qg.view({n, 2 * qw}), false);
    be.dense().split_q_gate(a.qg.view({n, 2 * qw}), H, a.q.view({n, qw}), a.gate.view({n, qw}));
    be.dense().dense_forward(xn1, W(w.wk, kw, d), a.k.view({n, kw}), false);
    be.dense().dense_forward(xn1, W(w.wv, kw, d), a.v.view({n, kw}), false);
    const QkNormRopeOptions q_opt{.heads = H, .eps = eps, .gain = GainStyle::zero_centred};
    const QkNormRopeOptions k_opt{.heads = Hkv, .eps = eps, .gain = GainStyle::zero_centred};
    be.rope().qk_norm_rope_forward(a.q.view({n, qw}), w.q_norm.view({hd}), table, q_opt, a.qr.view({n, qw}),
                                   a.q_inv.view({n, H}));
    be.rope().qk_norm_rope_forward(a.k.view({n, kw}), w.k_norm.view({hd}), table, k_opt, a.kr.view({n, kw}),
                                   a.k_inv.view({n, Hkv}));
    const AttentionGeometry geo{.window = window, .heads = H, .kv_heads = Hkv, .head_dim = hd};
    be.attention().attention_forward(a.qr.view({n, qw}), a.kr.view({n, kw}), a.v.view({n, kw}), geo,
                                     a.att.view({n, qw}), a.lse.view({n, H}));
    be.act().sigmoid_gate_forward(a.att.view({n * qw}), a.gate.view({n * qw}), a.gated.view({n * qw}));
    be.dense().dense_forward(a.gated.view({n, qw}), W(w.wo, d, qw), a.proj.view({n, d}), false);
  } else {
    const GdnConfig g = gdn_config(window);
    const index_t C = g.channels(), vw = g.value_width(), hv = g.v_heads;
    ensure_size(a.qkv, mem, n * C);
    for (Buffer<T>* buf : {&a.z, &a.o}) ensure_size(*buf, mem, n * vw);
    for (Buffer<T>* buf : {&a.a, &a.b}) ensure_size(*buf, mem, n * hv);
    ensure_size(a.tape, mem, gdn_tape_size(g, n, record_tape));

    be.dense().dense_forward(xn1, W(w.w_qkv, C, d), a.qkv.view({n, C}), false);
    be.dense().dense_forward(xn1, W(w.w_z, vw, d), a.z.view({n, vw}), false);
    be.dense().dense_forward(xn1, W(w.w_b, hv, d), a.b.view({n, hv}), false);
    be.dense().dense_forward(xn1, W(w.w_a, hv, d), a.a.view({n, hv}), false);
    const GdnParams<T> prm{.conv_weight = w.conv.view({C, g.conv_kernel}),
                           .a_log = w.a_log.view({hv}),
                           .dt_bias = w.dt_bias.view({hv}),
                           .norm_gain = w.gdn_norm.view({g.head_dim})};
    be.gdn().gdn_forward(g, prm, a.qkv.view({n, C}), a.z.view({n, vw}), a.a.view({n, hv}), a.b.view({n, hv}),
                         a.o.view({n, vw}), a.tape.view({gdn_tape_size(g, n, record_tape)}), record_tape);
    a.tape_recorded = record_tape;
    be.dense().dense_forward(a.o.view({n, vw}), W(w.w_out, d, vw), a.proj.view({n, d}), false);
  }
  // h = x + mix (the projection landed in proj first: outputs never alias inputs).
  be.act().add(x.flat(), a.proj.view({n * d}), a.h.view({n * d}));

  // MLP half.
  be.norm().rmsnorm_forward(a.h.view({n, d}), w.post_norm.view({d}), GainStyle::zero_centred, eps, a.xn2.view({n, d}),
                            a.inv2.view({n}));
  be.dense().dense_forward(a.xn2.view({n, d}), W(w.w_gate, f, d), a.ffn_gate.view({n, f}), false);
  be.dense().dense_forward(a.xn2.view({n, d}), W(w.w_up, f, d), a.ffn_up.view({n, f}), false);
  be.act().swiglu_forward(a.ffn_gate.view({n * f}), a.ffn_up.view({n * f}), a.act.view({n * f}));
  be.dense().dense_forward(a.act.view({n, f}), W(w.w_down, d, f), a.proj.view({n, d}), false);
  be.act().add(a.h.view({n * d}), a.proj.view({n * d}), y.flat());
}

template <class T>
Buffer<T> HybridModel<T>::hidden(std::span<const std::int32_t> tokens, index_t window) const {
  check_tokens(tokens, window, this->config_.vocab_size, "hidden");
  const index_t n = static_cast<index_t>(tokens.size()), d = this->config_.hidden_size;
  Memory& mem = *this->be_.memory;
  Buffer<T> x(mem, static_cast<std::size_t>(n * d)), y(mem, static_cast<std::size_t>(n * d));
  this->embed(tokens, x.view({n, d}));
  HybridBlockActivations<T> acts;
  for (index_t b = 0; b < this->config_.num_layers; ++b) {
    block_forward(b, x.view({n, d}), window, acts, y.view({n, d}), /*record_tape=*/false);
    std::swap(x, y);
  }
  return x;
}

template class HybridModel<float>;
template class HybridModel<double>;

}  // namespace bitrank::model
