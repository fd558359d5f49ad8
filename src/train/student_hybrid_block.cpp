// The trainable student hybrid block (contract: include/bitrank/train/student_hybrid_block.hpp).
#include "bitrank/train/student_hybrid_block.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "bitrank/error.hpp"
#include "bitrank/model/hybrid.hpp"

namespace bitrank::train {

using model::hybrid_block_projs;
using model::hybrid_proj_name;
using model::kHybridProjs;

namespace {

const char* kind_name(bool full_attention) { return full_attention ? "attention block" : "GDN block"; }

// A host vector of `size` finite values (size 0: must be empty).
void check_vector(const std::vector<float>& v, index_t size, const char* name, bool full_attention) {
  if (static_cast<index_t>(v.size()) != size)
    fail("StudentHybridBlock ({}): {} has {} entries, expected {}", kind_name(full_attention), name, v.size(), size);
  for (float x : v)
    if (!std::isfinite(x))
      fail("StudentHybridBlock ({}): {} has a non-finite entry {}", kind_name(full_attention), name, x);
}

// A teacher tensor, checked against the shape the block needs.
const model::HostTensor& teacher_tensor(const model::HostWeights& t, const std::string& name,
                                        std::vector<index_t> shape) {
  const model::HostTensor& x = t.at(name);
  if (x.shape != shape)
    fail("hybrid_student_init: teacher '{}' tensor {} has shape {}, expected {}", t.source, name,
         model::shape_str(x.shape), model::shape_str(shape));
  return x;
}

// The index of p among the block's BLR projections (forward order), −1 when
// the block has no such BLR projection.
int blr_slot(bool full_attention, HybridProj p) {
  int slot = 0;
  for (HybridProj q : hybrid_block_projs(full_attention)) {
    if (!hybrid_proj_is_blr(q)) continue;
    if (q == p) return slot;
    ++slot;
  }
  return -1;
}

// w against a block of the kind `full` and `dims` (blr::check_blr for each projection).
void check_weights(const HybridBlockDims& dims, const StudentHybridWeights& w, bool full) {
  if (w.full_attention != full)
    fail("StudentHybridBlock ({}): the weights are those of a {}", kind_name(full), kind_name(w.full_attention));
  for (int i = 0; i < kHybridProjs; ++i) {
    const auto p = static_cast<HybridProj>(i);
    const blr::HostBlrMatrix& m = w.proj[static_cast<std::size_t>(i)];
    if (blr_slot(full, p) < 0) {
      if (!m.paths.empty() || m.m != 0 || m.n != 0)
        fail("StudentHybridBlock ({}): {} is given, the block has no such BLR projection", kind_name(full),
             hybrid_proj_name(p));
      continue;
    }
    blr::check_blr(m, std::string("StudentHybridBlock ") + hybrid_proj_name(p));
    const index_t rows = dims.out_features(p), cols = dims.in_features(p);
    if (m.m != rows || m.n != cols)
      fail("StudentHybridBlock ({}): {} is {}x{}, the block needs {}x{}", kind_name(full), hybrid_proj_name(p), m.m,
           m.n, rows, cols);
  }
  const index_t d = dims.hidden, hd = full ? dims.head_dim : 0;
  check_vector(w.attn_norm, d, "attn_norm", full);
  check_vector(w.post_norm, d, "post_norm", full);
  check_vector(w.q_norm, hd, "q_norm", full);
  check_vector(w.k_norm, hd, "k_norm", full);
  const GdnConfig g = dims.gdn_config(1);
  const index_t hv = full ? 0 : g.v_heads;
  check_vector(w.ssm_beta, hv * d, "ssm_beta", full);
  check_vector(w.ssm_alpha, hv * d, "ssm_alpha", full);
  check_vector(w.conv, full ? 0 : g.channels() * g.conv_kernel, "conv", full);
  check_vector(w.a_log, hv, "a_log", full);
  check_vector(w.dt_bias, hv, "dt_bias", full);
  check_vector(w.gdn_norm, full ? 0 : g.head_dim, "gdn_norm", full);
}

}  // namespace

namespace {

// The student of block b of `teacher`: gains and frozen tensors copied, each
// BLR projection from make_blr(base name blk.b.<proj>, m, n).
template <class MakeBlr>
StudentHybridWeights student_weights(const model::HostWeights& teacher, index_t b, const char* op, MakeBlr&& make_blr) {
  const io::ModelConfig& c = teacher.config;
  model::check_hybrid_config(c, teacher.source);
  if (b < 0 || b >= c.num_layers) fail("{}: block {} of {} in '{}'", op, b, c.num_layers, teacher.source);
  const HybridBlockDims dims = HybridBlockDims::of(c);
  const std::string p = "blk." + std::to_string(b) + ".";
  StudentHybridWeights w;
  w.full_attention = c.layer_types[static_cast<std::size_t>(b)] == io::LayerType::full_attention;
  const auto vec = [&](const std::string& name, index_t size) {
    return teacher_tensor(teacher, p + name, {size}).values;
  };
  for (HybridProj q : hybrid_block_projs(w.full_attention)) {
    const index_t m = dims.out_features(q), n = dims.in_features(q);
    const std::string name = p + hybrid_proj_name(q);
    if (hybrid_proj_is_blr(q))
      w.proj[static_cast<std::size_t>(q)] = make_blr(name, m, n);
    else
      (q == HybridProj::b ? w.ssm_beta : w.ssm_alpha) = teacher_tensor(teacher, name + ".weight", {m, n}).values;
  }
  w.attn_norm = vec("attn_norm.weight", dims.hidden);
  w.post_norm = vec("post_attention_norm.weight", dims.hidden);
  if (w.full_attention) {
    w.q_norm = vec("attn_q_norm.weight", dims.head_dim);
    w.k_norm = vec("attn_k_norm.weight", dims.head_dim);
  } else {
    const GdnConfig g = dims.gdn_config(1);
    w.conv = teacher_tensor(teacher, p + "ssm_conv1d.weight", {g.channels(), g.conv_kernel}).values;
    w.a_log = vec("ssm_a_log", g.v_heads);
    w.dt_bias = vec("ssm_dt.bias", g.v_heads);
    w.gdn_norm = vec("ssm_norm.weight", g.head_dim);
  }
  return w;
}

}  // namespace

StudentHybridWeights hybrid_student_init(const model::HostWeights& teacher, index_t b, const blr::InitOptions& init) {
  return student_weights(teacher, b, "hybrid_student_init", [&](const std::string& name, index_t m, index_t n) {
    blr::InitOptions o = init;
    o.name = name + ".weight";
    return blr::dual_svid(teacher_tensor(teacher, o.name, {m, n}).values, m, n, o);
  });
}

StudentHybridWeights hybrid_student_init(const model::HostWeights& teacher, index_t b, const blr::InitOptions& init,
                                         std::span<const blr::RankPlan> ranks) {
  return student_weights(teacher, b, "hybrid_student_init", [&](const std::string& name, index_t m, index_t n) {
    const auto it = std::ranges::find(ranks, name, &blr::RankPlan::name);
    if (it == ranks.end()) fail("hybrid_student_init: no rank is planned for {} of '{}'", name, teacher.source);
    if (it->m != m || it->n != n)
      fail("hybrid_student_init: the rank plan's {} is {}x{}, the block's projection is {}x{}", name, it->m, it->n, m,
           n);
    blr::InitOptions o = init;
    o.rank = it->rank;
    o.name = name + ".weight";
    o.svd.seed = init.svd.seed + static_cast<std::uint64_t>(it - ranks.begin());
    return blr::dual_svid(teacher_tensor(teacher, o.name, {m, n}).values, m, n, o);
  });
}

StudentHybridWeights hybrid_student_weights(const model::HostWeights& teacher, index_t b,
                                            const model::BlrProjections& blr) {
  return student_weights(teacher, b, "hybrid_student_weights", [&](const std::string& name, index_t m, index_t n) {
    const auto it = blr.find(name);
    if (it == blr.end()) fail("hybrid_student_weights: no BLR matrix {} for '{}'", name, teacher.source);
    if (it->second.m != m || it->second.n != n)
      fail("hybrid_student_weights: BLR matrix {} is {}x{}, the block's projection is {}x{}", name, it->second.m,
           it->second.n, m, n);
    blr::check_blr(it->second, "hybrid_student_weights: BLR matrix " + name);
    return it->second;
  });
}

template <class T>
std::vector<BlrDims> StudentHybridBlock<T>::checked_proj_dims(const HybridBlockDims& dims,
                                                              const StudentHybridWeights& init) {
  const bool full = init.full_attention;
  const bool positive = dims.hidden > 0 && dims.ffn > 0 &&
                        (full ? dims.heads > 0 && dims.kv_heads > 0 && dims.head_dim > 0 && dims.rotary_dim > 0
                              : dims.k_heads > 0 && dims.v_heads > 0 && dims.gdn_head_dim > 0 && dims.conv_kernel > 0 &&
                                    dims.ckpt_every > 0);
  if (!positive)
    fail(
        "StudentHybridBlock ({}): dimensions hidden {} ffn {} heads {} kv_heads {} head_dim {} rotary_dim {} "
        "k_heads {} v_heads {} gdn_head_dim {} conv_kernel {} ckpt_every {}: those of the block's kind must be "
        "positive",
        kind_name(full), dims.hidden, dims.ffn, dims.heads, dims.kv_heads, dims.head_dim, dims.rotary_dim, dims.k_heads,
        dims.v_heads, dims.gdn_head_dim, dims.conv_kernel, dims.ckpt_every);
  check_weights(dims, init, full);
  std::vector<BlrDims> out;
  for (HybridProj p : hybrid_block_projs(full)) {
    if (!hybrid_proj_is_blr(p)) continue;
    const blr::HostBlrMatrix& m = init.proj[static_cast<std::size_t>(p)];
    out.push_back(BlrDims{m.m, m.n, m.r, static_cast<index_t>(m.paths.size())});
  }
  return out;
}

template <class T>
index_t StudentHybridBlock<T>::gains_size(const HybridBlockDims& dims, bool full_attention) {
  return 2 * dims.hidden + (full_attention ? 2 * dims.head_dim : 0);
}

template <class T>
auto StudentHybridBlock<T>::frozen_views(const HybridBlockDims& dims, bool full, Carver& state) -> Frozen {
  Frozen f;
  if (full) return f;
  const GdnConfig g = dims.gdn_config(1);
  const auto take = [&](Shape s) { return View<T>(state.take<T>(s.numel()), s); };
  f.w_b = take({g.v_heads, dims.hidden});
  f.w_a = take({g.v_heads, dims.hidden});
  f.conv = take({g.channels(), g.conv_kernel});
  f.a_log = take({g.v_heads});
  f.dt_bias = take({g.v_heads});
  f.gdn_norm = take({g.head_dim});
  return f;
}

template <class T>
StudentHybridBlock<T>::StudentHybridBlock(Backend<T>& be, const HybridBlockDims& dims, const StudentHybridWeights& init,
                                          SignOptimizer sign_optimizer, float tau, std::uint32_t sign_id,
                                          std::byte* place)
    : be_(&be),
      dims_(dims),
      full_(init.full_attention),
      arena_(be, checked_proj_dims(dims, init), gains_size(dims, init.full_attention), sign_optimizer, sign_id,
             "StudentHybridBlock", [this](Carver& state) { carve_frozen(state); }, place) {
  upload(init, tau);
}

template <class T>
std::size_t StudentHybridBlock<T>::arena_bytes(const HybridBlockDims& dims, const StudentHybridWeights& init,
                                               SignOptimizer sign_optimizer) {
  return StudentArena<T>::bytes(checked_proj_dims(dims, init), gains_size(dims, init.full_attention), sign_optimizer,
                                [&](Carver& state) { frozen_views(dims, init.full_attention, state); });
}

template <class T>
View<T> StudentHybridBlock<T>::gain_at(View<T> all, int i) const {
  const index_t d = dims_.hidden, hd = dims_.head_dim;
  if (i < 2) return View<T>(all.data + i * d, Shape{d});
  if (!full_) return View<T>(nullptr, Shape{0});
  return View<T>(all.data + 2 * d + (i - 2) * hd, Shape{hd});
}

template <class T>
bool StudentHybridBlock<T>::is_blr(HybridProj p) const {
  return blr_slot(full_, p) >= 0;
}

template <class T>
BlrLinear<T>& StudentHybridBlock<T>::proj(HybridProj p) {
  const int slot = blr_slot(full_, p);
  if (slot < 0)
    fail("StudentHybridBlock ({}): {} is not a BLR projection of this block", kind_name(full_), hybrid_proj_name(p));
  return arena_.proj(static_cast<std::size_t>(slot));
}

template <class T>
const BlrLinear<T>& StudentHybridBlock<T>::proj(HybridProj p) const {
  return const_cast<StudentHybridBlock*>(this)->proj(p);
}

template <class T>
void StudentHybridBlock<T>::upload(const StudentHybridWeights& w, float tau) {
  check_weights(dims_, w, full_);
  for (HybridProj p : hybrid_block_projs(full_))
    if (is_blr(p)) proj(p).upload(w.proj[static_cast<std::size_t>(p)], tau);
  std::vector<float> gains;
  for (const auto* g : {&w.attn_norm, &w.post_norm, &w.q_norm, &w.k_norm})
    gains.insert(gains.end(), g->begin(), g->end());
  arena_.upload_gains(gains);
  if (!full_) {
    const auto put = [&](View<T> dst, const std::vector<float>& src) {
      const std::vector<T> v(src.begin(), src.end());
      be_->memory->upload(dst.data, v.data(), v.size() * sizeof(T));
    };
    put(frozen_.w_b, w.ssm_beta);
    put(frozen_.w_a, w.ssm_alpha);
    put(frozen_.conv, w.conv);
    put(frozen_.a_log, w.a_log);
    put(frozen_.dt_bias, w.dt_bias);
    put(frozen_.gdn_norm, w.gdn_norm);
  }
}

template <class T>
StudentHybridWeights StudentHybridBlock<T>::download() const {
  StudentHybridWeights w;
  w.full_attention = full_;
  for (HybridProj p : hybrid_block_projs(full_))
    if (is_blr(p)) w.proj[static_cast<std::size_t>(p)] = proj(p).download();
  const std::vector<float> gains = arena_.download_gains();
  const index_t d = dims_.hidden, hd = full_ ? dims_.head_dim : 0;
  const auto part = [&](index_t from, index_t len) {
    return std::vector<float>(gains.begin() + from, gains.begin() + from + len);
  };
  w.attn_norm = part(0, d);
  w.post_norm = part(d, d);
  w.q_norm = part(2 * d, hd);
  w.k_norm = part(2 * d + hd, hd);
  if (!full_) {
    const auto get = [&](View<T> src) {
      std::vector<T> v(static_cast<std::size_t>(src.numel()));
      be_->memory->download(v.data(), src.data, v.size() * sizeof(T));
      return std::vector<float>(v.begin(), v.end());
    };
    w.ssm_beta = get(frozen_.w_b);
    w.ssm_alpha = get(frozen_.w_a);
    w.conv = get(frozen_.conv);
    w.a_log = get(frozen_.a_log);
    w.dt_bias = get(frozen_.dt_bias);
    w.gdn_norm = get(frozen_.gdn_norm);
  }
  return w;
}

template <class T>
std::vector<std::byte> StudentHybridBlock<T>::download_state() const {
  return arena_.download_state();
}

template <class T>
void StudentHybridBlock<T>::upload_state(std::span<const std::byte> bytes) {
  arena_.upload_state(bytes);
}

template <class T>
model::HybridBlockParams<T> StudentHybridBlock<T>::params() const {
  model::HybridBlockParams<T> prm;
  prm.attn_norm = attn_norm();
  prm.post_norm = post_norm();
  if (full_) {
    prm.q_norm = q_norm();
    prm.k_norm = k_norm();
  } else {
    prm.gdn = GdnParams<T>{
        .conv_weight = frozen_.conv, .a_log = frozen_.a_log, .dt_bias = frozen_.dt_bias, .norm_gain = frozen_.gdn_norm};
  }
  return prm;
}

template <class T>
CView<T> StudentHybridBlock<T>::table(index_t window) {
  if (!full_) return CView<T>{};
  return ropes_.get(*be_->memory, dims_.rotary_dim / 2, dims_.rope_theta, window);
}

template <class T>
void StudentHybridBlock<T>::forward(CView<T> x, index_t window, Tape& tape, View<T> y) {
  if (window <= 0 || x.rank() != 2 || x.dim(0) % window != 0)
    fail("StudentHybridBlock forward: {} rows are not a whole number of windows of {}", x.rank() == 2 ? x.dim(0) : 0,
         window);
  const auto project = [&](HybridProj p, CView<T> in, View<T> out) {
    if (p == HybridProj::b || p == HybridProj::a) {
      be_->dense().dense_forward(in, p == HybridProj::b ? frozen_.w_b : frozen_.w_a, out, false);
      return;
    }
    proj(p).forward(in, tape.proj[static_cast<std::size_t>(p)], out);
  };
  model::hybrid_block_forward(*be_, dims_, full_, x, window, table(window), params(), project, tape.acts, y,
                              /*record_tape=*/true);
  tape.rows = x.dim(0);
  tape.window = window;
}

template <class T>
void StudentHybridBlock<T>::backward(CView<T> x, Tape& tape, CView<T> dy, float grad_scale, View<T> dx) {
  const index_t n = x.dim(0), d = dims_.hidden, f = dims_.ffn, window = tape.window;
  if (tape.rows != n || window <= 0)
    fail("StudentHybridBlock backward: x has {} rows, the tape holds a forward of {}", n, tape.rows);
  for (const auto& [name, v] : {std::pair{"dy", CView<T>(dy)}, std::pair{"dx", CView<T>(dx)}})
    if (!(v.shape == Shape{n, d}) || !v.contiguous())
      fail("StudentHybridBlock backward: {} has shape {}, expected a contiguous [{}, {}]", name, v.shape.str(), n, d);

  Memory& mem = *be_->memory;
  Scratch& s = *scratch_;
  for (Buffer<T>* b : {&s.d_act, &s.d_gate, &s.d_up}) ensure_size(*b, mem, n * f);
  for (Buffer<T>* b : {&s.d_xn, &s.tmp, &s.d_h}) ensure_size(*b, mem, n * d);

  model::HybridBlockActivations<T>& a = tape.acts;
  const auto proj_backward = [&](HybridProj p, CView<T> in, CView<T> d_out, View<T> d_in) {
    proj(p).backward(in, d_out, tape.proj[static_cast<std::size_t>(p)], d_in, grad_scale, s.blr);
  };
  ActOps<T>& act = be_->act();
  NormOps<T>& norm = be_->norm();
  const View<T> d_xn = s.d_xn.view({n, d}), tmp = s.tmp.view({n, d});
  // d_xn += tmp
  const auto add_tmp = [&] { act.add(d_xn.flat(), tmp.flat(), d_xn.flat()); };

  // MLP half: y = h + P_down(silu(P_gate(xn2))·P_up(xn2)), xn2 = rmsnorm(h; 1 + post_norm).
  proj_backward(HybridProj::down, a.act.view({n, f}), dy, s.d_act.view({n, f}));
  act.swiglu_backward(a.ffn_gate.view({n * f}), a.ffn_up.view({n * f}), s.d_act.view({n * f}), s.d_gate.view({n * f}),
                      s.d_up.view({n * f}));
  proj_backward(HybridProj::gate, a.xn2.view({n, d}), s.d_gate.view({n, f}), d_xn);
  proj_backward(HybridProj::up, a.xn2.view({n, d}), s.d_up.view({n, f}), tmp);
  add_tmp();
  norm.rmsnorm_gain_grad(a.h.view({n, d}), a.inv2.view({n}), d_xn, post_norm_grad());
  norm.rmsnorm_backward(a.h.view({n, d}), post_norm(), a.inv2.view({n}), d_xn, GainStyle::zero_centred, tmp);
  act.add(dy.flat(), tmp.flat(), s.d_h.view({n * d}));
  const View<T> d_h = s.d_h.view({n, d});

  // Mixer: h = x + mix(xn1), xn1 = rmsnorm(x; 1 + attn_norm); d_xn gathers ∂L/∂xn1.
  if (full_) {
    const index_t H = dims_.heads, Hkv = dims_.kv_heads, hd = dims_.head_dim, qw = dims_.q_width(),
                  kw = dims_.kv_width();
    for (Buffer<T>* b : {&s.d_gated, &s.d_att, &s.d_sig, &s.dqr, &s.dq}) ensure_size(*b, mem, n * qw);
    ensure_size(s.d_qg, mem, 2 * n * qw);
    for (Buffer<T>* b : {&s.dkr, &s.dk, &s.dv}) ensure_size(*b, mem, n * kw);
    ensure_size(s.delta, mem, n * H);
    const CView<T> rope = table(window);
    proj_backward(HybridProj::o, a.gated.view({n, qw}), d_h, s.d_gated.view({n, qw}));
    act.sigmoid_gate_backward(a.att.view({n * qw}), a.gate.view({n * qw}), s.d_gated.view({n * qw}),
                              s.d_att.view({n * qw}), s.d_sig.view({n * qw}));
    const AttentionGeometry geo{.window = window, .heads = H, .kv_heads = Hkv, .head_dim = hd};
    be_->attention().attention_backward(a.qr.view({n, qw}), a.kr.view({n, kw}), a.v.view({n, kw}), a.att.view({n, qw}),
                                        a.lse.view({n, H}), s.d_att.view({n, qw}), geo, s.delta.view({n, H}),
                                        s.dqr.view({n, qw}), s.dkr.view({n, kw}), s.dv.view({n, kw}));
    const QkNormRopeOptions q_opt{.heads = H, .eps = dims_.eps, .gain = GainStyle::zero_centred};
    const QkNormRopeOptions k_opt{.heads = Hkv, .eps = dims_.eps, .gain = GainStyle::zero_centred};
    be_->rope().qk_norm_rope_backward(a.q.view({n, qw}), q_norm(), rope, a.q_inv.view({n, H}), s.dqr.view({n, qw}),
                                      q_opt, s.dq.view({n, qw}), q_norm_grad());
    be_->rope().qk_norm_rope_backward(a.k.view({n, kw}), k_norm(), rope, a.k_inv.view({n, Hkv}), s.dkr.view({n, kw}),
                                      k_opt, s.dk.view({n, kw}), k_norm_grad());
    be_->dense().merge_q_gate(s.dq.view({n, qw}), s.d_sig.view({n, qw}), H, s.d_qg.view({n, 2 * qw}));
    proj_backward(HybridProj::q, a.xn1.view({n, d}), s.d_qg.view({n, 2 * qw}), d_xn);
    proj_backward(HybridProj::k, a.xn1.view({n, d}), s.dk.view({n, kw}), tmp);
    add_tmp();
    proj_backward(HybridProj::v, a.xn1.view({n, d}), s.dv.view({n, kw}), tmp);
    add_tmp();
  } else {
    const GdnConfig g = dims_.gdn_config(window);
    const index_t C = g.channels(), vw = g.value_width(), hv = g.v_heads;
    if (!a.tape_recorded) fail("StudentHybridBlock backward: the GDN tape was not recorded");
    ensure_size(s.d_qkv, mem, n * C);
    for (Buffer<T>* b : {&s.d_z, &s.d_o}) ensure_size(*b, mem, n * vw);
    for (Buffer<T>* b : {&s.d_a, &s.d_b}) ensure_size(*b, mem, n * hv);
    proj_backward(HybridProj::out, a.o.view({n, vw}), d_h, s.d_o.view({n, vw}));
    be_->gdn().gdn_backward(g, params().gdn, a.qkv.view({n, C}), a.z.view({n, vw}),
                            a.tape.view({gdn_tape_size(g, n, true)}), s.d_o.view({n, vw}), s.d_qkv.view({n, C}),
                            s.d_z.view({n, vw}), s.d_a.view({n, hv}), s.d_b.view({n, hv}));
    proj_backward(HybridProj::qkv, a.xn1.view({n, d}), s.d_qkv.view({n, C}), d_xn);
    proj_backward(HybridProj::z, a.xn1.view({n, d}), s.d_z.view({n, vw}), tmp);
    add_tmp();
    // The frozen dense b and a projections: their input gradients accumulate into d_xn.
    be_->dense().dense_backward(s.d_b.view({n, hv}), frozen_.w_b, d_xn);
    be_->dense().dense_backward(s.d_a.view({n, hv}), frozen_.w_a, d_xn);
  }

  norm.rmsnorm_gain_grad(x, a.inv1.view({n}), d_xn, attn_norm_grad());
  norm.rmsnorm_backward(x, attn_norm(), a.inv1.view({n}), d_xn, GainStyle::zero_centred, tmp);
  act.add(d_h.flat(), tmp.flat(), dx.flat());
}

template <class T>
void StudentHybridBlock<T>::zero_grad() {
  arena_.zero_grad();
}

template <class T>
StudentGradSquares StudentHybridBlock<T>::grad_squares() const {
  return arena_.grad_squares();
}

template <class T>
std::int64_t StudentHybridBlock<T>::step(const AdamOptions& scales, const AdamOptions& gains,
                                         const SignOptions& signs) {
  return arena_.step(scales, gains, signs);
}

template class StudentHybridBlock<float>;
template class StudentHybridBlock<double>;

}  // namespace bitrank::train
