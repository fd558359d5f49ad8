// The trainable student Llama block (contract: include/bitrank/train/student_block.hpp).
#include "bitrank/train/student_block.hpp"

#include <cmath>
#include <string>

#include "bitrank/error.hpp"

namespace bitrank::train {

using model::kAllLlamaProjs;
using model::kLlamaProjs;
using model::llama_proj_name;

template <class T>
BlrDims StudentLlamaBlock<T>::proj_dims(const LlamaBlockDims& dims, LlamaProj p, const blr::HostBlrMatrix& w) {
  blr::check_blr(w, std::string("StudentLlamaBlock ") + llama_proj_name(p));
  const index_t m = dims.out_features(p), n = dims.in_features(p);
  if (w.m != m || w.n != n)
    fail("StudentLlamaBlock: {} is {}x{}, the block needs {}x{}", llama_proj_name(p), w.m, w.n, m, n);
  return BlrDims{m, n, w.r, static_cast<index_t>(w.paths.size())};
}

template <class T>
std::vector<BlrDims> StudentLlamaBlock<T>::all_proj_dims(const LlamaBlockDims& dims, const StudentBlockWeights& w) {
  if (dims.hidden <= 0 || dims.heads <= 0 || dims.kv_heads <= 0 || dims.head_dim <= 0 || dims.ffn <= 0)
    fail("StudentLlamaBlock: dimensions hidden {} heads {} kv_heads {} head_dim {} ffn {} must be positive",
         dims.hidden, dims.heads, dims.kv_heads, dims.head_dim, dims.ffn);
  std::vector<BlrDims> out;
  for (LlamaProj p : kAllLlamaProjs) out.push_back(proj_dims(dims, p, w.proj[static_cast<std::size_t>(p)]));
  return out;
}

template <class T>
StudentLlamaBlock<T>::StudentLlamaBlock(Backend<T>& be, const LlamaBlockDims& dims, const StudentBlockWeights& init,
                                        SignOptimizer sign_optimizer, float tau, std::uint32_t sign_id,
                                        std::byte* place)
    : be_(&be),
      dims_(dims),
      arena_(be, all_proj_dims(dims, init), 2 * dims.hidden, sign_optimizer, sign_id, "StudentLlamaBlock", {},
             place) {
  upload(init, tau);
}

template <class T>
std::size_t StudentLlamaBlock<T>::arena_bytes(const LlamaBlockDims& dims, const StudentBlockWeights& init,
                                              SignOptimizer sign_optimizer) {
  return StudentArena<T>::bytes(all_proj_dims(dims, init), 2 * dims.hidden, sign_optimizer);
}

template <class T>
void StudentLlamaBlock<T>::upload(const StudentBlockWeights& w, float tau) {
  const index_t d = dims_.hidden;
  std::vector<float> gains;
  for (const auto* g : {&w.attn_norm, &w.ffn_norm}) {
    const char* name = g == &w.attn_norm ? "attn_norm" : "ffn_norm";
    if (static_cast<index_t>(g->size()) != d)
      fail("StudentLlamaBlock upload: {} has {} entries, expected {}", name, g->size(), d);
    for (float x : *g) {
      if (!std::isfinite(x)) fail("StudentLlamaBlock upload: {} has a non-finite entry {}", name, x);
      gains.push_back(x);
    }
  }
  for (LlamaProj p : kAllLlamaProjs) {
    proj_dims(dims_, p, w.proj[static_cast<std::size_t>(p)]);  // names the projection on a shape mismatch
    proj(p).upload(w.proj[static_cast<std::size_t>(p)], tau);
  }
  arena_.upload_gains(gains);
}

template <class T>
StudentBlockWeights StudentLlamaBlock<T>::download() const {
  StudentBlockWeights w;
  for (LlamaProj p : kAllLlamaProjs) w.proj[static_cast<std::size_t>(p)] = proj(p).download();
  const std::vector<float> gains = arena_.download_gains();
  const auto half = gains.begin() + dims_.hidden;
  w.attn_norm.assign(gains.begin(), half);
  w.ffn_norm.assign(half, gains.end());
  return w;
}

template <class T>
std::vector<std::byte> StudentLlamaBlock<T>::download_state() const {
  return arena_.download_state();
}

template <class T>
void StudentLlamaBlock<T>::upload_state(std::span<const std::byte> bytes) {
  arena_.upload_state(bytes);
}

template <class T>
void StudentLlamaBlock<T>::forward(CView<T> x, index_t window, StudentTape<T>& tape, View<T> y) {
  if (window <= 0 || x.dim(0) % window != 0)
    fail("StudentLlamaBlock forward: {} rows are not a whole number of windows of {}", x.dim(0), window);
  const auto project = [&](LlamaProj p, CView<T> in, View<T> out) {
    proj(p).forward(in, tape.proj[static_cast<std::size_t>(p)], out);
  };
  model::llama_block_forward(*be_, dims_, x, window, ropes_.get(*be_->memory, dims_, window), attn_norm(), ffn_norm(),
                             project, tape.acts, y);
  tape.rows = x.dim(0);
  tape.window = window;
}

template <class T>
void StudentLlamaBlock<T>::backward(CView<T> x, const StudentTape<T>& tape, CView<T> dy, float grad_scale, View<T> dx) {
  const index_t n = x.dim(0), d = dims_.hidden, H = dims_.heads, Hkv = dims_.kv_heads, f = dims_.ffn,
                qw = dims_.q_width(), kw = dims_.kv_width(), window = tape.window;
  if (tape.rows != n || window <= 0)
    fail("StudentLlamaBlock backward: x has {} rows, the tape holds a forward of {}", n, tape.rows);
  for (const auto& [name, v] : {std::pair{"dy", CView<T>(dy)}, std::pair{"dx", CView<T>(dx)}})
    if (!(v.shape == Shape{n, d}) || !v.contiguous())
      fail("StudentLlamaBlock backward: {} has shape {}, expected a contiguous [{}, {}]", name, v.shape.str(), n, d);

  Memory& mem = *be_->memory;
  Scratch& s = *scratch_;
  for (Buffer<T>* b : {&s.d_act, &s.d_gate, &s.d_up}) ensure_size(*b, mem, n * f);
  for (Buffer<T>* b : {&s.d_xn, &s.tmp, &s.d_h}) ensure_size(*b, mem, n * d);
  for (Buffer<T>* b : {&s.d_att, &s.dqr, &s.dq}) ensure_size(*b, mem, n * qw);
  for (Buffer<T>* b : {&s.dkr, &s.dk, &s.dv}) ensure_size(*b, mem, n * kw);
  ensure_size(s.delta, mem, n * H);

  const model::BlockActivations<T>& a = tape.acts;
  const auto tp = [&](LlamaProj p) -> const BlrTape<T>& { return tape.proj[static_cast<std::size_t>(p)]; };
  const auto proj_backward = [&](LlamaProj p, CView<T> in, CView<T> d_out, View<T> d_in) {
    proj(p).backward(in, d_out, tp(p), d_in, grad_scale, s.blr);
  };
  ActOps<T>& act = be_->act();
  NormOps<T>& norm = be_->norm();
  const CView<T> table = ropes_.get(mem, dims_, window);

  // MLP half: y = h + P_down(silu(P_gate(xn2))·P_up(xn2)), xn2 = rmsnorm(h).
  proj_backward(LlamaProj::down, a.act.view({n, f}), dy, s.d_act.view({n, f}));
  act.swiglu_backward(a.gate.view({n * f}), a.up.view({n * f}), s.d_act.view({n * f}), s.d_gate.view({n * f}),
                      s.d_up.view({n * f}));
  proj_backward(LlamaProj::gate, a.xn2.view({n, d}), s.d_gate.view({n, f}), s.d_xn.view({n, d}));
  proj_backward(LlamaProj::up, a.xn2.view({n, d}), s.d_up.view({n, f}), s.tmp.view({n, d}));
  act.add(s.d_xn.view({n * d}), s.tmp.view({n * d}), s.d_xn.view({n * d}));
  norm.rmsnorm_gain_grad(a.h.view({n, d}), a.inv2.view({n}), s.d_xn.view({n, d}), ffn_norm_grad());
  norm.rmsnorm_backward(a.h.view({n, d}), ffn_norm(), a.inv2.view({n}), s.d_xn.view({n, d}), GainStyle::plain,
                        s.tmp.view({n, d}));
  act.add(dy.flat(), s.tmp.view({n * d}), s.d_h.view({n * d}));

  // Attention half: h = x + P_o(attention(rope(P_q(xn1)), rope(P_k(xn1)), P_v(xn1))), xn1 = rmsnorm(x).
  proj_backward(LlamaProj::o, a.att.view({n, qw}), s.d_h.view({n, d}), s.d_att.view({n, qw}));
  const AttentionGeometry geo{.window = window, .heads = H, .kv_heads = Hkv, .head_dim = dims_.head_dim};
  be_->attention().attention_backward(a.qr.view({n, qw}), a.kr.view({n, kw}), a.v.view({n, kw}), a.att.view({n, qw}),
                                      a.lse.view({n, H}), s.d_att.view({n, qw}), geo, s.delta.view({n, H}),
                                      s.dqr.view({n, qw}), s.dkr.view({n, kw}), s.dv.view({n, kw}));
  be_->rope().rope_backward(s.dqr.view({n, qw}), table, H, s.dq.view({n, qw}));
  be_->rope().rope_backward(s.dkr.view({n, kw}), table, Hkv, s.dk.view({n, kw}));
  proj_backward(LlamaProj::q, a.xn1.view({n, d}), s.dq.view({n, qw}), s.d_xn.view({n, d}));
  proj_backward(LlamaProj::k, a.xn1.view({n, d}), s.dk.view({n, kw}), s.tmp.view({n, d}));
  act.add(s.d_xn.view({n * d}), s.tmp.view({n * d}), s.d_xn.view({n * d}));
  proj_backward(LlamaProj::v, a.xn1.view({n, d}), s.dv.view({n, kw}), s.tmp.view({n, d}));
  act.add(s.d_xn.view({n * d}), s.tmp.view({n * d}), s.d_xn.view({n * d}));
  norm.rmsnorm_gain_grad(x, a.inv1.view({n}), s.d_xn.view({n, d}), attn_norm_grad());
  norm.rmsnorm_backward(x, attn_norm(), a.inv1.view({n}), s.d_xn.view({n, d}), GainStyle::plain, s.tmp.view({n, d}));
  act.add(s.d_h.view({n * d}), s.tmp.view({n * d}), dx.flat());
}

template <class T>
void StudentLlamaBlock<T>::zero_grad() {
  arena_.zero_grad();
}

template <class T>
StudentGradSquares StudentLlamaBlock<T>::grad_squares() const {
  return arena_.grad_squares();
}

template <class T>
std::int64_t StudentLlamaBlock<T>::step(const AdamOptions& scales, const AdamOptions& gains, const SignOptions& signs) {
  return arena_.step(scales, gains, signs);
}

template class StudentLlamaBlock<float>;
template class StudentLlamaBlock<double>;

}  // namespace bitrank::train
