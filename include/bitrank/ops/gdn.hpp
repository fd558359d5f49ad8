// Gated DeltaNet core (DESIGN §2, seed 003): the mixer between the input
// projections and out_proj, forward and full backward (BPTT) by segment
// replay from state checkpoints.
//
// Shapes (n = rows = nb·T tokens: nb windows of T = `window` tokens, the
// recurrence restarts from S = 0 at each window; Hk k-heads, Hv v-heads with
// Hv % Hk == 0, v-head h reads k-head h / (Hv/Hk); d = head_dim = dk = dv;
// K = conv_kernel; C = 2·Hk·d + Hv·d):
//   qkv [n][C]      raw projection, channels [q (Hk·d) | k (Hk·d) | v (Hv·d)]
//   z   [n][Hv·d]   output-gate projection
//   a   [n][Hv]     decay input;  b [n][Hv] β logit
//   out [n][Hv·d]   mixer output (before out_proj)
// Frozen parameters (GdnParams): conv_weight [C][K] (tap j multiplies the
// token K−1−j steps back), a_log [Hv], dt_bias [Hv], norm_gain [d] (plain
// gain w, shared by every head).
//
// Forward, per window and channel / head, for token t:
//   cq      = silu(Σ_j conv_weight[c][j]·qkv[t−K+1+j][c])   (zero before the window)
//   q̂       = q / (‖q‖_ε·√d),  k̂ = k / ‖k‖_ε,  ‖x‖_ε = √(Σx² + l2_eps)
//   γ       = exp(−e^{a_log}·softplus(a + dt_bias)),  β = σ(b)
//   S       ← γ·S;  kv = Sᵀk̂;  S += k̂·(β(v − kv))ᵀ;  o = Sᵀq̂        (S is d×d, [k-dim][v-dim])
//   out     = o·w·silu(z) / √(mean(o²) + norm_eps)
// Backward: the gradients of Σ d_out⊙out into the raw qkv (through the
// l2 norms, SiLU and the conv), z, a and b. Every output of both ops is
// OVERWRITTEN (activations and input gradients); the core's parameters are
// frozen and get no gradient.
//
// The tape: one caller-provided 1-D buffer of T (the backend's real type),
// laid out by gdn_tape_layout(), in three parts:
//   forward   conv_out [n][C] (cq), qk_hat [2][n][Hk][d] (q̂ with 1/√d, k̂),
//             qk_sumsq [2][n][Hk] (Σq² + ε, Σk² + ε), gates [3][n][Hv]
//             (γ, β, a + dt_bias), o_pre [n][Hv][d] (o before the norm),
//             inv_rms [n][Hv]
//   record    kv [n][Hv][d] (Sᵀk̂ of every step, so a replay forms the
//             same u = β(v − kv) bit for bit), ckpt [nb][Hv][nseg−1][d][d]
//             (the state after c·ckpt_every steps, c = 1..nseg−1,
//             nseg = ceil(T/ckpt_every); segment 0 starts from zero)
//   scratch   replay [nb][Hv][min(ckpt_every, T)][d][d] (the states of one
//             segment, rebuilt by the backward), dqk [2][n][Hv][d] (each
//             v-head's dq̂, dk̂ before the sum over the heads of a group)
// gdn_forward writes the forward part always and the record part when
// `record_tape` (a forward whose backward never runs — inference, the first
// pass of a streamed step — skips it and needs only the forward part).
// gdn_backward needs the tape of a recording forward on the same inputs;
// it reads the forward and record parts and writes only the scratch part,
// so it can be run again on the same tape.
//
//   gdn_tape_size(cfg, n, true) = n·C + 2n·Hk·d + 2n·Hk + 3n·Hv + n·Hv·d + n·Hv
//                               + n·Hv·d + nb·Hv·(nseg−1)·d²
//                               + nb·Hv·min(ckpt_every, T)·d² + 2n·Hv·d
//   gdn_tape_size(cfg, n, false) = the first line.
//
// Backward by segment replay: per (window, v-head) the segments are walked
// last to first; each is rebuilt from its checkpoint into `replay` with the
// recorded kv, then swept in reverse with dS (the gradient of the state)
// carried from one segment into the previous one. A replayed state equals
// the forward's state exactly, so the results do not depend on ckpt_every.
//
// Decoding (gdn_decode, generation with a cache): one sequence, n ≥ 1 new
// tokens that continue from a carried state instead of restarting at zero:
//   qkv, z, a, b, out  as gdn_forward's, for the n new tokens
//   conv_state [K−1][C] the raw qkv rows of the K−1 tokens before them,
//                       oldest first (zeros before the sequence's start);
//                       empty when K = 1
//   state [Hv][d][d]    S after the tokens before them, [k-dim][v-dim]
//                       (zeros at the sequence's start)
// The conv reads conv_state where a tap reaches before the first new token;
// the recurrence starts from state. out is overwritten; conv_state and state
// are updated in place to follow the n tokens (the last K−1 raw rows, the
// state after the last token). No tape, no backward; cfg.window and
// cfg.ckpt_every are not read. From zero states, n tokens give gdn_forward's
// out for one window of n; prefill then single steps give the same outputs
// as that one window.
//
// Numerics: softplus is evaluated in its overflow-free form
// max(x, 0) + log1p(e^{−|x|}); all sums in the backend's real type.
#pragma once

#include <string_view>

#include "bitrank/ops/check.hpp"
#include "bitrank/tensor.hpp"

namespace bitrank {

struct GdnConfig {
  index_t k_heads = 0;      // Hk
  index_t v_heads = 0;      // Hv, a multiple of Hk
  index_t head_dim = 0;     // d = dk = dv (128 in every real model)
  index_t conv_kernel = 4;  // K
  index_t window = 0;       // T tokens per window (the state restarts at each)
  index_t ckpt_every = 8;   // state checkpoint interval = steps per replay segment
  float l2_eps = 1e-6f;     // added to Σq², Σk² of the l2 norms
  float norm_eps = 1e-6f;   // added to mean(o²) of the gated RMSNorm

  index_t qk_width() const { return k_heads * head_dim; }      // Hk·d (q, and again k)
  index_t value_width() const { return v_heads * head_dim; }   // Hv·d (v, z, out)
  index_t channels() const { return 2 * qk_width() + value_width(); }
  index_t segments() const { return (window + ckpt_every - 1) / ckpt_every; }
  index_t replay_steps() const { return ckpt_every < window ? ckpt_every : window; }
};

// Frozen parameters of one GDN layer.
template <class T>
struct GdnParams {
  CView<T> conv_weight;  // [C][K]
  CView<T> a_log;        // [Hv]
  CView<T> dt_bias;      // [Hv]
  CView<T> norm_gain;    // [d]
};

// Offsets (in elements) of the tape's sections for `rows` tokens; the
// sections follow one another in this order.
struct GdnTapeLayout {
  index_t conv_out = 0, qk_hat = 0, qk_sumsq = 0, gates = 0, o_pre = 0, inv_rms = 0;  // forward
  index_t kv = 0, ckpt = 0;                                                          // record
  index_t replay = 0, dqk = 0;                                                       // scratch
  index_t forward_size = 0;  // end of the forward part
  index_t total_size = 0;    // end of the scratch part
};

inline GdnTapeLayout gdn_tape_layout(const GdnConfig& cfg, index_t rows) {
  constexpr std::string_view op = "gdn_tape_size";
  check::positive(op, "window", cfg.window);
  check::positive(op, "ckpt_every", cfg.ckpt_every);
  check::require(rows >= 0 && cfg.k_heads >= 0 && cfg.v_heads >= 0 && cfg.head_dim >= 0, op,
                 "negative size (rows {}, k_heads {}, v_heads {}, head_dim {})", rows, cfg.k_heads, cfg.v_heads,
                 cfg.head_dim);
  const index_t n = rows, d = cfg.head_dim, hk = cfg.k_heads, hv = cfg.v_heads, nb = rows / cfg.window;
  GdnTapeLayout l;
  index_t at = 0;
  auto take = [&at](index_t& off, index_t size) {
    off = at;
    at += size;
  };
  take(l.conv_out, n * cfg.channels());
  take(l.qk_hat, 2 * n * hk * d);
  take(l.qk_sumsq, 2 * n * hk);
  take(l.gates, 3 * n * hv);
  take(l.o_pre, n * hv * d);
  take(l.inv_rms, n * hv);
  l.forward_size = at;
  take(l.kv, n * hv * d);
  take(l.ckpt, nb * hv * (cfg.segments() - 1) * d * d);
  take(l.replay, nb * hv * cfg.replay_steps() * d * d);
  take(l.dqk, 2 * n * hv * d);
  l.total_size = at;
  return l;
}

// Elements the tape needs: the forward part alone (record_tape = false), or
// everything a recording forward and its backward use.
inline index_t gdn_tape_size(const GdnConfig& cfg, index_t rows, bool record_tape = true) {
  const GdnTapeLayout l = gdn_tape_layout(cfg, rows);
  return record_tape ? l.total_size : l.forward_size;
}

template <class T>
class GdnOps {
 public:
  virtual ~GdnOps() = default;

  void gdn_forward(const GdnConfig& cfg, const GdnParams<T>& prm, CView<T> qkv, CView<T> z, CView<T> a, CView<T> b,
                   View<T> out, View<T> tape, bool record_tape = true) {
    constexpr std::string_view op = "gdn_forward";
    const index_t n = check_common(op, cfg, prm, qkv, z);
    check::dense(op, "a", a, Shape{n, cfg.v_heads});
    check::dense(op, "b", b, Shape{n, cfg.v_heads});
    check::dense(op, "out", out, Shape{n, cfg.value_width()});
    check_tape(op, cfg, n, tape, record_tape);
    gdn_forward_impl(cfg, prm, qkv, z, a, b, out, tape, record_tape);
  }

  // out [n][Hv·d] of n tokens continuing from conv_state [K−1][C] and state
  // [Hv][d][d], both updated in place (decoding, above).
  void gdn_decode(const GdnConfig& cfg, const GdnParams<T>& prm, CView<T> qkv, CView<T> z, CView<T> a, CView<T> b,
                  View<T> conv_state, View<T> state, View<T> out) {
    constexpr std::string_view op = "gdn_decode";
    GdnConfig one = cfg;  // the n tokens as one window: the checks below need no window of their own
    one.window = qkv.rank() == 2 && qkv.dim(0) > 0 ? qkv.dim(0) : 1;
    const index_t n = check_common(op, one, prm, qkv, z);
    check::positive(op, "tokens", n);
    check::dense(op, "a", a, Shape{n, cfg.v_heads});
    check::dense(op, "b", b, Shape{n, cfg.v_heads});
    if (cfg.conv_kernel > 1)
      check::dense(op, "conv_state", conv_state, Shape{cfg.conv_kernel - 1, cfg.channels()});
    else  // a one-tap conv keeps no rows
      check::require(conv_state.numel() == 0, op, "conv_state has shape {}, expected none (conv_kernel 1)",
                     conv_state.shape.str());
    check::dense(op, "state", state, Shape{cfg.v_heads, cfg.head_dim, cfg.head_dim});
    check::dense(op, "out", out, Shape{n, cfg.value_width()});
    gdn_decode_impl(cfg, prm, qkv, z, a, b, conv_state, state, out);
  }

  // The tape is that of a recording gdn_forward on the same qkv, z, a, b.
  void gdn_backward(const GdnConfig& cfg, const GdnParams<T>& prm, CView<T> qkv, CView<T> z, View<T> tape,
                    CView<T> d_out, View<T> d_qkv, View<T> d_z, View<T> d_a, View<T> d_b) {
    constexpr std::string_view op = "gdn_backward";
    const index_t n = check_common(op, cfg, prm, qkv, z);
    check_tape(op, cfg, n, tape, true);
    check::dense(op, "d_out", d_out, Shape{n, cfg.value_width()});
    check::dense(op, "d_qkv", d_qkv, Shape{n, cfg.channels()});
    check::dense(op, "d_z", d_z, Shape{n, cfg.value_width()});
    check::dense(op, "d_a", d_a, Shape{n, cfg.v_heads});
    check::dense(op, "d_b", d_b, Shape{n, cfg.v_heads});
    gdn_backward_impl(cfg, prm, qkv, z, tape, d_out, d_qkv, d_z, d_a, d_b);
  }

 protected:
  virtual void gdn_forward_impl(const GdnConfig& cfg, const GdnParams<T>& prm, CView<T> qkv, CView<T> z, CView<T> a,
                                CView<T> b, View<T> out, View<T> tape, bool record_tape) = 0;
  virtual void gdn_backward_impl(const GdnConfig& cfg, const GdnParams<T>& prm, CView<T> qkv, CView<T> z, View<T> tape,
                                 CView<T> d_out, View<T> d_qkv, View<T> d_z, View<T> d_a, View<T> d_b) = 0;
  virtual void gdn_decode_impl(const GdnConfig& cfg, const GdnParams<T>& prm, CView<T> qkv, CView<T> z, CView<T> a,
                               CView<T> b, View<T> conv_state, View<T> state, View<T> out) = 0;

 private:
  // Checks the configuration, the parameters, qkv and z; returns the rows.
  static index_t check_common(std::string_view op, const GdnConfig& cfg, const GdnParams<T>& prm, CView<T> qkv,
                              CView<T> z) {
    check::positive(op, "k_heads", cfg.k_heads);
    check::positive(op, "v_heads", cfg.v_heads);
    check::require(cfg.v_heads % cfg.k_heads == 0, op, "v_heads {} is not a multiple of k_heads {}", cfg.v_heads,
                   cfg.k_heads);
    check::positive(op, "head_dim", cfg.head_dim);
    check::positive(op, "conv_kernel", cfg.conv_kernel);
    check::positive(op, "window", cfg.window);
    check::positive(op, "ckpt_every", cfg.ckpt_every);
    check::finite(op, "l2_eps", cfg.l2_eps);
    check::finite(op, "norm_eps", cfg.norm_eps);
    check::require(cfg.l2_eps > 0, op, "l2_eps must be positive, got {}", cfg.l2_eps);
    check::require(cfg.norm_eps > 0, op, "norm_eps must be positive, got {}", cfg.norm_eps);
    check::rank(op, "qkv", qkv, 2);
    check::contiguous(op, "qkv", qkv);
    const index_t n = qkv.dim(0);
    check::require(qkv.dim(1) == cfg.channels(), op,
                   "qkv {} has {} channels, expected 2·{}·{} + {}·{} = {}", qkv.shape.str(), qkv.dim(1),
                   cfg.k_heads, cfg.head_dim, cfg.v_heads, cfg.head_dim, cfg.channels());
    check::require(n % cfg.window == 0, op, "qkv {} has {} rows, not a multiple of the window {}", qkv.shape.str(), n,
                   cfg.window);
    check::dense(op, "z", z, Shape{n, cfg.value_width()});
    check::dense(op, "conv_weight", prm.conv_weight, Shape{cfg.channels(), cfg.conv_kernel});
    check::dense(op, "a_log", prm.a_log, Shape{cfg.v_heads});
    check::dense(op, "dt_bias", prm.dt_bias, Shape{cfg.v_heads});
    check::dense(op, "norm_gain", prm.norm_gain, Shape{cfg.head_dim});
    return n;
  }

  static void check_tape(std::string_view op, const GdnConfig& cfg, index_t n, View<T> tape, bool record_tape) {
    check::rank(op, "tape", tape, 1);
    check::contiguous(op, "tape", tape);
    const index_t need = gdn_tape_size(cfg, n, record_tape);
    check::require(tape.numel() >= need, op, "tape {} is too small: {} rows need {} elements{}", tape.shape.str(), n,
                   need, record_tape ? " (recording)" : " (forward only)");
  }
};

}  // namespace bitrank
