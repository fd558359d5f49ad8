// Projection names, dimensions and activation buffers of the hybrid block
// (contract: include/bitrank/model/hybrid_block.hpp).
#include "bitrank/model/hybrid_block.hpp"

#include "bitrank/error.hpp"

namespace bitrank::model {

const char* hybrid_proj_name(HybridProj p) {
  switch (p) {
    case HybridProj::q:
      return "attn_q";
    case HybridProj::k:
      return "attn_k";
    case HybridProj::v:
      return "attn_v";
    case HybridProj::o:
      return "attn_output";
    case HybridProj::qkv:
      return "attn_qkv";
    case HybridProj::z:
      return "attn_gate";
    case HybridProj::b:
      return "ssm_beta";
    case HybridProj::a:
      return "ssm_alpha";
    case HybridProj::out:
      return "ssm_out";
    case HybridProj::gate:
      return "ffn_gate";
    case HybridProj::up:
      return "ffn_up";
    case HybridProj::down:
      return "ffn_down";
  }
  fail("unknown hybrid projection {}", static_cast<int>(p));
}

std::span<const HybridProj> hybrid_block_projs(bool full_attention) {
  using P = HybridProj;
  static constexpr HybridProj attention[] = {P::q, P::k, P::v, P::o, P::gate, P::up, P::down};
  static constexpr HybridProj gdn[] = {P::qkv, P::z, P::b, P::a, P::out, P::gate, P::up, P::down};
  if (full_attention) return attention;
  return gdn;
}

HybridBlockDims HybridBlockDims::of(const io::ModelConfig& c) {
  HybridBlockDims d{.hidden = c.hidden_size,
                    .ffn = c.intermediate_size,
                    .eps = static_cast<float>(c.rms_norm_eps),
                    .heads = c.num_heads,
                    .kv_heads = c.num_kv_heads,
                    .head_dim = c.head_dim,
                    .rotary_dim = c.rotary_dim(),
                    .rope_theta = c.rope_theta};
  if (c.linear) {
    d.k_heads = c.linear->num_key_heads;
    d.v_heads = c.linear->num_value_heads;
    d.gdn_head_dim = c.linear->key_head_dim;
    d.conv_kernel = c.linear->conv_kernel_dim;
  }
  return d;
}

index_t HybridBlockDims::in_features(HybridProj p) const {
  switch (p) {
    case HybridProj::q:
    case HybridProj::k:
    case HybridProj::v:
    case HybridProj::qkv:
    case HybridProj::z:
    case HybridProj::b:
    case HybridProj::a:
    case HybridProj::gate:
    case HybridProj::up:
      return hidden;
    case HybridProj::o:
      return q_width();
    case HybridProj::out:
      return v_heads * gdn_head_dim;
    case HybridProj::down:
      return ffn;
  }
  fail("unknown hybrid projection {}", static_cast<int>(p));
}

index_t HybridBlockDims::out_features(HybridProj p) const {
  switch (p) {
    case HybridProj::q:
      return 2 * q_width();  // per head [q_h | gate_h]
    case HybridProj::k:
    case HybridProj::v:
      return kv_width();
    case HybridProj::qkv:
      return 2 * k_heads * gdn_head_dim + v_heads * gdn_head_dim;
    case HybridProj::z:
      return v_heads * gdn_head_dim;
    case HybridProj::b:
    case HybridProj::a:
      return v_heads;
    case HybridProj::o:
    case HybridProj::out:
    case HybridProj::down:
      return hidden;
    case HybridProj::gate:
    case HybridProj::up:
      return ffn;
  }
  fail("unknown hybrid projection {}", static_cast<int>(p));
}

GdnConfig HybridBlockDims::gdn_config(index_t window) const {
  return GdnConfig{.k_heads = k_heads,
                   .v_heads = v_heads,
                   .head_dim = gdn_head_dim,
                   .conv_kernel = conv_kernel,
                   .window = window,
                   .ckpt_every = ckpt_every,
                   .l2_eps = kGdnL2Eps,
                   .norm_eps = eps};
}

template <class T>
void HybridBlockActivations<T>::reserve(Memory& mem, const HybridBlockDims& dims, bool full_attention, index_t n,
                                        index_t window, bool record_tape) {
  const index_t d = dims.hidden, f = dims.ffn;
  for (Buffer<T>* buf : {&xn1, &proj, &h, &xn2}) ensure_size(*buf, mem, n * d);
  for (Buffer<T>* buf : {&inv1, &inv2}) ensure_size(*buf, mem, n);
  for (Buffer<T>* buf : {&ffn_gate, &ffn_up, &act}) ensure_size(*buf, mem, n * f);
  if (full_attention) {
    const index_t qw = dims.q_width(), kw = dims.kv_width();
    ensure_size(qg, mem, 2 * n * qw);
    for (Buffer<T>* buf : {&q, &gate, &qr, &att, &gated}) ensure_size(*buf, mem, n * qw);
    for (Buffer<T>* buf : {&k, &v, &kr}) ensure_size(*buf, mem, n * kw);
    for (Buffer<T>* buf : {&q_inv, &lse}) ensure_size(*buf, mem, n * dims.heads);
    ensure_size(k_inv, mem, n * dims.kv_heads);
  } else {
    const GdnConfig g = dims.gdn_config(window);
    ensure_size(qkv, mem, n * g.channels());
    for (Buffer<T>* buf : {&z, &o}) ensure_size(*buf, mem, n * g.value_width());
    for (Buffer<T>* buf : {&a, &b}) ensure_size(*buf, mem, n * g.v_heads);
    ensure_size(tape, mem, gdn_tape_size(g, n, record_tape));
  }
}

template struct HybridBlockActivations<float>;
template struct HybridBlockActivations<double>;

}  // namespace bitrank::model
