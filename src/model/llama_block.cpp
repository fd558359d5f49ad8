// Dimensions, activation buffers and rotary tables of the Llama block
// (contract: include/bitrank/model/llama_block.hpp).
#include "bitrank/model/llama_block.hpp"

#include "bitrank/error.hpp"

namespace bitrank::model {

const char* llama_proj_name(LlamaProj p) {
  switch (p) {
    case LlamaProj::q:
      return "attn_q";
    case LlamaProj::k:
      return "attn_k";
    case LlamaProj::v:
      return "attn_v";
    case LlamaProj::o:
      return "attn_output";
    case LlamaProj::gate:
      return "ffn_gate";
    case LlamaProj::up:
      return "ffn_up";
    case LlamaProj::down:
      return "ffn_down";
  }
  fail("unknown Llama projection {}", static_cast<int>(p));
}

LlamaBlockDims LlamaBlockDims::of(const io::ModelConfig& c) {
  return LlamaBlockDims{.hidden = c.hidden_size,
                        .heads = c.num_heads,
                        .kv_heads = c.num_kv_heads,
                        .head_dim = c.head_dim,
                        .ffn = c.intermediate_size,
                        .eps = static_cast<float>(c.rms_norm_eps),
                        .rope_theta = c.rope_theta};
}

index_t LlamaBlockDims::in_features(LlamaProj p) const {
  switch (p) {
    case LlamaProj::q:
    case LlamaProj::k:
    case LlamaProj::v:
    case LlamaProj::gate:
    case LlamaProj::up:
      return hidden;
    case LlamaProj::o:
      return q_width();
    case LlamaProj::down:
      return ffn;
  }
  fail("unknown Llama projection {}", static_cast<int>(p));
}

index_t LlamaBlockDims::out_features(LlamaProj p) const {
  switch (p) {
    case LlamaProj::q:
      return q_width();
    case LlamaProj::k:
    case LlamaProj::v:
      return kv_width();
    case LlamaProj::o:
    case LlamaProj::down:
      return hidden;
    case LlamaProj::gate:
    case LlamaProj::up:
      return ffn;
  }
  fail("unknown Llama projection {}", static_cast<int>(p));
}

template <class T>
void BlockActivations<T>::reserve(Memory& mem, const LlamaBlockDims& dims, index_t n) {
  const index_t d = dims.hidden, qw = dims.q_width(), kw = dims.kv_width(), f = dims.ffn;
  for (Buffer<T>* buf : {&xn1, &proj, &h, &xn2}) ensure_size(*buf, mem, n * d);
  for (Buffer<T>* buf : {&inv1, &inv2}) ensure_size(*buf, mem, n);
  for (Buffer<T>* buf : {&q, &qr, &att}) ensure_size(*buf, mem, n * qw);
  for (Buffer<T>* buf : {&k, &v, &kr}) ensure_size(*buf, mem, n * kw);
  ensure_size(lse, mem, n * dims.heads);
  for (Buffer<T>* buf : {&gate, &up, &act}) ensure_size(*buf, mem, n * f);
}

template <class T>
CView<T> RopeTables<T>::get(Memory& mem, index_t half, double theta, index_t window) {
  if (tables_.empty()) {
    half_ = half;
    theta_ = theta;
  } else if (half != half_ || theta != theta_) {
    fail("RopeTables: asked for half {} θ {}, this object holds tables of half {} θ {}", half, theta, half_, theta_);
  }
  auto it = tables_.find(window);
  if (it == tables_.end()) {
    const auto table = rope_table<T>(window, half, theta);
    Buffer<T> b(mem, table.size());
    b.upload(table);
    it = tables_.emplace(window, std::move(b)).first;
  }
  return it->second.view({window, half, 2});
}

template struct BlockActivations<float>;
template struct BlockActivations<double>;
template class RopeTables<float>;
template class RopeTables<double>;

}  // namespace bitrank::model
