// f64 reference of the Gated DeltaNet core (contract: include/bitrank/ops/gdn.hpp).
//
// Plain loops in the order of the formulas. The forward fills the whole tape
// layout (checkpoints and kv included when recording) like every backend;
// the backward reads the forward part of the tape and rebuilds the full
// state history S_0..S_T of each (window, v-head) from zero, so its results
// cannot depend on ckpt_every.
//
// gdn_decode runs the same formulas token by token on the rows
// conv_state ++ qkv, from the given state.
//
// Built with a chunk size (make_gdn_ops(chunk), tests only) the op runs the
// chunkwise form of the core instead (gdn_chunked.hpp): the same conv, l2
// norms, gates and gated RMSNorm around it; its forward leaves the tape's
// record part (kv, checkpoints) unwritten, which no ref backward reads.
#include <algorithm>
#include <cmath>
#include <vector>

#include "ref/gdn_chunked.hpp"
#include "ref/ops.hpp"

namespace bitrank::ref {
namespace {

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double silu(double x) { return x * sigmoid(x); }
double silu_grad(double x) {
  const double s = sigmoid(x);
  return s * (1.0 + x * (1.0 - s));
}
double softplus(double x) { return std::max(x, 0.0) + std::log1p(std::exp(-std::fabs(x))); }

// Index helpers over the tape sections and the row-major tensors.
struct Geometry {
  index_t n, nb, T, hk, hv, group, d, K, C, cs, nseg;
  explicit Geometry(const GdnConfig& cfg, index_t rows)
      : n(rows), nb(rows / cfg.window), T(cfg.window), hk(cfg.k_heads), hv(cfg.v_heads),
        group(cfg.v_heads / cfg.k_heads), d(cfg.head_dim), K(cfg.conv_kernel), C(cfg.channels()),
        cs(cfg.ckpt_every), nseg(cfg.segments()) {}
  index_t q_col(index_t kh, index_t i) const { return kh * d + i; }
  index_t k_col(index_t kh, index_t i) const { return hk * d + kh * d + i; }
  index_t v_col(index_t h, index_t j) const { return 2 * hk * d + h * d + j; }
};

// Pre-activation of the causal depthwise conv at row t (position p in its window).
double conv_pre(const Geometry& g, CView<double> qkv, CView<double> w, index_t t, index_t p, index_t c) {
  double acc = 0;
  for (index_t j = 0; j < g.K; ++j) {
    const index_t back = g.K - 1 - j;
    if (p - back >= 0) acc += qkv[(t - back) * g.C + c] * w[c * g.K + j];
  }
  return acc;
}

class RefGdnOps final : public GdnOps<double> {
 public:
  explicit RefGdnOps(index_t chunk) : chunk_(chunk) {}

 protected:
  void gdn_forward_impl(const GdnConfig& cfg, const GdnParams<double>& prm, CView<double> qkv, CView<double> z,
                        CView<double> a, CView<double> b, View<double> out, View<double> tape,
                        bool record_tape) override {
    const Geometry g(cfg, qkv.dim(0));
    const GdnTapeLayout L = gdn_tape_layout(cfg, g.n);
    double* cq = tape.data + L.conv_out;
    double* qh = tape.data + L.qk_hat;                  // q̂ [n][Hk][d]
    double* kh_ = tape.data + L.qk_hat + g.n * g.hk * g.d;  // k̂
    double* sq = tape.data + L.qk_sumsq;                // Σq² + ε [n][Hk]
    double* sk = tape.data + L.qk_sumsq + g.n * g.hk;   // Σk² + ε
    double* decay = tape.data + L.gates;
    double* beta = tape.data + L.gates + g.n * g.hv;
    double* gate_in = tape.data + L.gates + 2 * g.n * g.hv;
    double* o_pre = tape.data + L.o_pre;
    double* inv_rms = tape.data + L.inv_rms;
    double* kv_rec = tape.data + L.kv;
    double* ckpt = tape.data + L.ckpt;

    // Conv + SiLU.
    for (index_t t = 0; t < g.n; ++t)
      for (index_t c = 0; c < g.C; ++c) cq[t * g.C + c] = silu(conv_pre(g, qkv, prm.conv_weight, t, t % g.T, c));

    // l2 norms of q and k per k-head; q also scaled by 1/√d.
    const double eps = cfg.l2_eps;
    for (index_t t = 0; t < g.n; ++t)
      for (index_t kh = 0; kh < g.hk; ++kh) {
        double ssq = eps, ssk = eps;
        for (index_t i = 0; i < g.d; ++i) {
          ssq += cq[t * g.C + g.q_col(kh, i)] * cq[t * g.C + g.q_col(kh, i)];
          ssk += cq[t * g.C + g.k_col(kh, i)] * cq[t * g.C + g.k_col(kh, i)];
        }
        sq[t * g.hk + kh] = ssq;
        sk[t * g.hk + kh] = ssk;
        for (index_t i = 0; i < g.d; ++i) {
          qh[(t * g.hk + kh) * g.d + i] = cq[t * g.C + g.q_col(kh, i)] / (std::sqrt(ssq) * std::sqrt(double(g.d)));
          kh_[(t * g.hk + kh) * g.d + i] = cq[t * g.C + g.k_col(kh, i)] / std::sqrt(ssk);
        }
      }

    // Gates.
    for (index_t t = 0; t < g.n; ++t)
      for (index_t h = 0; h < g.hv; ++h) {
        const double x = a[t * g.hv + h] + prm.dt_bias[h];
        gate_in[t * g.hv + h] = x;
        decay[t * g.hv + h] = std::exp(-std::exp(prm.a_log[h]) * softplus(x));
        beta[t * g.hv + h] = sigmoid(b[t * g.hv + h]);
      }

    // Gated RMSNorm of o at (t, h): inv_rms, o_pre and out.
    auto norm = [&](index_t t, index_t h, const double* o) {
      double ms = 0;
      for (index_t j = 0; j < g.d; ++j) ms += o[j] * o[j];
      const double inv = 1.0 / std::sqrt(ms / g.d + cfg.norm_eps);
      inv_rms[t * g.hv + h] = inv;
      for (index_t j = 0; j < g.d; ++j) {
        const index_t e = t * g.hv * g.d + h * g.d + j;
        o_pre[e] = o[j];
        out[e] = o[j] * inv * prm.norm_gain[j] * silu(z[e]);
      }
    };

    std::vector<double> S(static_cast<std::size_t>(g.d * g.d)), kv(g.d), u(g.d), o(g.d);
    if (chunk_ > 0) {
      const std::vector<double> ell = log_decay(g, prm, gate_in);
      gdn_chunked_forward(core_args(g, qh, kh_, cq, ell.data(), beta), chunk_, o_pre);
      for (index_t t = 0; t < g.n; ++t)
        for (index_t h = 0; h < g.hv; ++h) {
          std::copy(o_pre + (t * g.hv + h) * g.d, o_pre + (t * g.hv + h + 1) * g.d, o.begin());
          norm(t, h, o.data());
        }
      return;
    }
    // Delta-rule recurrence per (window, v-head), then the gated RMSNorm.
    for (index_t w = 0; w < g.nb; ++w)
      for (index_t h = 0; h < g.hv; ++h) {
        const index_t kh = h / g.group;
        std::fill(S.begin(), S.end(), 0.0);
        for (index_t p = 0; p < g.T; ++p) {
          const index_t t = w * g.T + p;
          const double* q = qh + (t * g.hk + kh) * g.d;
          const double* k = kh_ + (t * g.hk + kh) * g.d;
          const double gam = decay[t * g.hv + h], bet = beta[t * g.hv + h];
          for (auto& s : S) s *= gam;
          for (index_t j = 0; j < g.d; ++j) {
            kv[j] = 0;
            for (index_t i = 0; i < g.d; ++i) kv[j] += S[i * g.d + j] * k[i];
            u[j] = bet * (cq[t * g.C + g.v_col(h, j)] - kv[j]);
          }
          for (index_t i = 0; i < g.d; ++i)
            for (index_t j = 0; j < g.d; ++j) S[i * g.d + j] += k[i] * u[j];
          for (index_t j = 0; j < g.d; ++j) {
            o[j] = 0;
            for (index_t i = 0; i < g.d; ++i) o[j] += S[i * g.d + j] * q[i];
          }
          norm(t, h, o.data());
          if (record_tape) {
            for (index_t j = 0; j < g.d; ++j) kv_rec[(t * g.hv + h) * g.d + j] = kv[j];
            const index_t steps = p + 1;
            if (steps % g.cs == 0 && steps < g.T) {
              double* dst = ckpt + ((w * g.hv + h) * (g.nseg - 1) + (steps / g.cs - 1)) * g.d * g.d;
              std::copy(S.begin(), S.end(), dst);
            }
          }
        }
      }
  }

  void gdn_decode_impl(const GdnConfig& cfg, const GdnParams<double>& prm, CView<double> qkv, CView<double> z,
                       CView<double> a, CView<double> b, View<double> conv_state, View<double> state,
                       View<double> out) override {
    const index_t n = qkv.dim(0);
    GdnConfig one = cfg;
    one.window = n;
    const Geometry g(one, n);
    const index_t K1 = g.K - 1;
    // ext = conv_state ++ qkv: token t's raw row is ext row t + K − 1.
    std::vector<double> ext(static_cast<std::size_t>((K1 + n) * g.C));
    std::copy(conv_state.data, conv_state.data + K1 * g.C, ext.begin());
    std::copy(qkv.data, qkv.data + n * g.C, ext.begin() + K1 * g.C);
    const CView<double> rows(ext.data(), Shape{K1 + n, g.C});
    std::vector<double> cq(static_cast<std::size_t>(g.C));
    for (index_t t = 0; t < n; ++t) {
      for (index_t c = 0; c < g.C; ++c) cq[c] = silu(conv_pre(g, rows, prm.conv_weight, t + K1, t + K1, c));
      for (index_t h = 0; h < g.hv; ++h)
        decode_head(g, cfg, prm, cq.data(), z.data + (t * g.hv + h) * g.d, a[t * g.hv + h], b[t * g.hv + h], h,
                    state.data + h * g.d * g.d, out.data + (t * g.hv + h) * g.d);
    }
    std::copy(ext.begin() + n * g.C, ext.begin() + (n + K1) * g.C, conv_state.data);
  }

  void gdn_backward_impl(const GdnConfig& cfg, const GdnParams<double>& prm, CView<double> qkv, CView<double> z,
                         View<double> tape, CView<double> d_out, View<double> d_qkv, View<double> d_z,
                         View<double> d_a, View<double> d_b) override {
    const Geometry g(cfg, qkv.dim(0));
    const GdnTapeLayout L = gdn_tape_layout(cfg, g.n);
    const double* cq = tape.data + L.conv_out;
    const double* qh = tape.data + L.qk_hat;
    const double* kh_ = tape.data + L.qk_hat + g.n * g.hk * g.d;
    const double* sq = tape.data + L.qk_sumsq;
    const double* sk = tape.data + L.qk_sumsq + g.n * g.hk;
    const double* decay = tape.data + L.gates;
    const double* beta = tape.data + L.gates + g.n * g.hv;
    const double* gate_in = tape.data + L.gates + 2 * g.n * g.hv;
    const double* o_pre = tape.data + L.o_pre;
    const double* inv_rms = tape.data + L.inv_rms;

    // Gradients of the normalised q̂, k̂ summed over the v-heads of a group,
    // and of the conv output cq.
    std::vector<double> dqh(static_cast<std::size_t>(g.n * g.hk * g.d), 0.0), dkh(dqh.size(), 0.0);
    std::vector<double> dcq(static_cast<std::size_t>(g.n * g.C), 0.0);

    // Gated RMSNorm backward at (t, h), out = o·inv·w·silu(z): d_z, and dO.
    auto norm_backward = [&](index_t t, index_t h, double* dO) {
      const double inv = inv_rms[t * g.hv + h];
      double aw = 0;  // Σ_j (w·silu(z)·dy)_j · o_j
      for (index_t j = 0; j < g.d; ++j) {
        const index_t e = t * g.hv * g.d + h * g.d + j;
        aw += prm.norm_gain[j] * silu(z[e]) * d_out[e] * o_pre[e];
      }
      for (index_t j = 0; j < g.d; ++j) {
        const index_t e = t * g.hv * g.d + h * g.d + j;
        const double wj = prm.norm_gain[j];
        d_z[e] = d_out[e] * o_pre[e] * inv * wj * silu_grad(z[e]);
        dO[j] = inv * wj * silu(z[e]) * d_out[e] - o_pre[e] * aw / g.d * inv * inv * inv;
      }
    };

    if (chunk_ > 0) {
      std::vector<double> dO_all(static_cast<std::size_t>(g.n * g.hv * g.d)), dell(static_cast<std::size_t>(g.n * g.hv)),
          dbeta(dell.size());
      for (index_t t = 0; t < g.n; ++t)
        for (index_t h = 0; h < g.hv; ++h) norm_backward(t, h, dO_all.data() + (t * g.hv + h) * g.d);
      const std::vector<double> ell = log_decay(g, prm, gate_in);
      gdn_chunked_backward(core_args(g, qh, kh_, cq, ell.data(), beta), chunk_, dO_all.data(), dqh.data(),
                           dkh.data(), dcq.data() + g.v_col(0, 0), g.C, dell.data(), dbeta.data());
      // ℓ = −e^{a_log}·softplus(x): ∂ℓ/∂x = −e^{a_log}·σ(x).
      for (index_t t = 0; t < g.n; ++t)
        for (index_t h = 0; h < g.hv; ++h) {
          const index_t th = t * g.hv + h;
          d_a[th] = dell[th] * (-std::exp(prm.a_log[h])) * sigmoid(gate_in[th]);
          d_b[th] = dbeta[th] * beta[th] * (1.0 - beta[th]);
        }
    } else {
      backward_sequential(g, prm, cq, qh, kh_, decay, beta, gate_in, norm_backward, dqh, dkh, dcq, d_a, d_b);
    }
    l2_conv_backward(g, prm, qkv, cq, sq, sk, dqh, dkh, dcq, d_qkv);
  }

 private:
  index_t chunk_;

  // One token of v-head h from its conv output cq [C]: l2 norms, gates, the
  // delta rule on S [d][d] (updated), then the gated RMSNorm into out [d].
  static void decode_head(const Geometry& g, const GdnConfig& cfg, const GdnParams<double>& prm, const double* cq,
                          const double* z, double a, double b, index_t h, double* S, double* out) {
    const index_t kh = h / g.group, d = g.d;
    double ssq = cfg.l2_eps, ssk = cfg.l2_eps;
    for (index_t i = 0; i < d; ++i) {
      ssq += cq[g.q_col(kh, i)] * cq[g.q_col(kh, i)];
      ssk += cq[g.k_col(kh, i)] * cq[g.k_col(kh, i)];
    }
    std::vector<double> q(d), k(d), u(d), o(d, 0.0);
    for (index_t i = 0; i < d; ++i) {
      q[i] = cq[g.q_col(kh, i)] / (std::sqrt(ssq) * std::sqrt(double(d)));
      k[i] = cq[g.k_col(kh, i)] / std::sqrt(ssk);
    }
    const double gam = std::exp(-std::exp(prm.a_log[h]) * softplus(a + prm.dt_bias[h])), bet = sigmoid(b);
    for (index_t e = 0; e < d * d; ++e) S[e] *= gam;
    for (index_t j = 0; j < d; ++j) {
      double kv = 0;
      for (index_t i = 0; i < d; ++i) kv += S[i * d + j] * k[i];
      u[j] = bet * (cq[g.v_col(h, j)] - kv);
    }
    for (index_t i = 0; i < d; ++i)
      for (index_t j = 0; j < d; ++j) {
        S[i * d + j] += k[i] * u[j];
        o[j] += S[i * d + j] * q[i];
      }
    double ms = 0;
    for (index_t j = 0; j < d; ++j) ms += o[j] * o[j];
    const double inv = 1.0 / std::sqrt(ms / d + cfg.norm_eps);
    for (index_t j = 0; j < d; ++j) out[j] = o[j] * inv * prm.norm_gain[j] * silu(z[j]);
  }

  // ℓ = log γ = −e^{a_log}·softplus(a + dt_bias) per (token, v-head).
  static std::vector<double> log_decay(const Geometry& g, const GdnParams<double>& prm, const double* gate_in) {
    std::vector<double> ell(static_cast<std::size_t>(g.n * g.hv));
    for (index_t t = 0; t < g.n; ++t)
      for (index_t h = 0; h < g.hv; ++h)
        ell[t * g.hv + h] = -std::exp(prm.a_log[h]) * softplus(gate_in[t * g.hv + h]);
    return ell;
  }

  static GdnCoreArgs core_args(const Geometry& g, const double* qh, const double* kh, const double* cq,
                               const double* ell, const double* beta) {
    GdnCoreArgs c;
    c.nb = g.nb, c.T = g.T, c.hk = g.hk, c.hv = g.hv, c.d = g.d;
    c.q = qh, c.k = kh, c.v = cq + g.v_col(0, 0), c.v_stride = g.C, c.log_decay = ell, c.beta = beta;
    return c;
  }

  // The token-by-token core backward: dq̂, dk̂ accumulated, dv into dcq, d_a, d_b.
  template <class NormBackward>
  static void backward_sequential(const Geometry& g, const GdnParams<double>& prm, const double* cq,
                                  const double* qh, const double* kh_, const double* decay, const double* beta,
                                  const double* gate_in, NormBackward& norm_backward, std::vector<double>& dqh,
                                  std::vector<double>& dkh, std::vector<double>& dcq, View<double> d_a,
                                  View<double> d_b) {
    const index_t dd = g.d * g.d;
    std::vector<double> hist(static_cast<std::size_t>((g.T + 1) * dd));  // S_0 .. S_T
    std::vector<double> dS(static_cast<std::size_t>(dd)), dO(g.d), du(g.d), kv(g.d), u(g.d);
    for (index_t w = 0; w < g.nb; ++w)
      for (index_t h = 0; h < g.hv; ++h) {
        const index_t kh = h / g.group;
        const double ea = std::exp(prm.a_log[h]);
        auto row = [&](index_t p) { return w * g.T + p; };
        // The state history from zero.
        std::fill(hist.begin(), hist.begin() + dd, 0.0);
        for (index_t p = 0; p < g.T; ++p) {
          const index_t t = row(p);
          const double* k = kh_ + (t * g.hk + kh) * g.d;
          const double* Sp = hist.data() + p * dd;
          double* St = hist.data() + (p + 1) * dd;
          const double gam = decay[t * g.hv + h], bet = beta[t * g.hv + h];
          for (index_t e = 0; e < dd; ++e) St[e] = gam * Sp[e];
          for (index_t j = 0; j < g.d; ++j) {
            kv[j] = 0;
            for (index_t i = 0; i < g.d; ++i) kv[j] += St[i * g.d + j] * k[i];
            u[j] = bet * (cq[t * g.C + g.v_col(h, j)] - kv[j]);
          }
          for (index_t i = 0; i < g.d; ++i)
            for (index_t j = 0; j < g.d; ++j) St[i * g.d + j] += k[i] * u[j];
        }
        // Reverse sweep with dS = ∂L/∂S_t carried backwards.
        std::fill(dS.begin(), dS.end(), 0.0);
        for (index_t p = g.T - 1; p >= 0; --p) {
          const index_t t = row(p);
          const double* q = qh + (t * g.hk + kh) * g.d;
          const double* k = kh_ + (t * g.hk + kh) * g.d;
          const double* Sp = hist.data() + p * dd;
          const double* St = hist.data() + (p + 1) * dd;
          const double gam = decay[t * g.hv + h], bet = beta[t * g.hv + h];

          norm_backward(t, h, dO.data());

          // o = S_tᵀ q̂.
          for (index_t i = 0; i < g.d; ++i) {
            double acc = 0;
            for (index_t j = 0; j < g.d; ++j) {
              dS[i * g.d + j] += q[i] * dO[j];
              acc += St[i * g.d + j] * dO[j];
            }
            dqh[(t * g.hk + kh) * g.d + i] += acc;
          }

          // S_t = γS_{t−1} + k̂uᵀ, u = β(v − kv), kv = (γS_{t−1})ᵀk̂.
          for (index_t j = 0; j < g.d; ++j) {
            kv[j] = 0;
            for (index_t i = 0; i < g.d; ++i) kv[j] += gam * Sp[i * g.d + j] * k[i];
            u[j] = bet * (cq[t * g.C + g.v_col(h, j)] - kv[j]);
            du[j] = 0;
            for (index_t i = 0; i < g.d; ++i) du[j] += dS[i * g.d + j] * k[i];
          }
          double dbeta = 0;
          for (index_t j = 0; j < g.d; ++j) {
            dbeta += du[j] * (cq[t * g.C + g.v_col(h, j)] - kv[j]);
            dcq[t * g.C + g.v_col(h, j)] = bet * du[j];
          }
          double dgam = 0;
          for (index_t i = 0; i < g.d; ++i) {
            double dk = 0;
            for (index_t j = 0; j < g.d; ++j) {
              const double dkv = -bet * du[j];
              dk += dS[i * g.d + j] * u[j] + gam * Sp[i * g.d + j] * dkv;
              const double dpre = dS[i * g.d + j] + k[i] * dkv;  // ∂L/∂(γS_{t−1})
              dgam += dpre * Sp[i * g.d + j];
              dS[i * g.d + j] = gam * dpre;
            }
            dkh[(t * g.hk + kh) * g.d + i] += dk;
          }
          d_a[t * g.hv + h] = dgam * gam * (-ea) * sigmoid(gate_in[t * g.hv + h]);
          d_b[t * g.hv + h] = dbeta * bet * (1.0 - bet);
        }
      }

  }

  // l2-norm backward of dq̂, dk̂ into dcq's q/k columns, then SiLU and the conv into d_qkv.
  static void l2_conv_backward(const Geometry& g, const GdnParams<double>& prm, CView<double> qkv, const double* cq,
                               const double* sq, const double* sk, const std::vector<double>& dqh,
                               const std::vector<double>& dkh, std::vector<double>& dcq, View<double> d_qkv) {
    // l2 norms: x̂ = x·c/√(Σx² + ε) → dx = c/√s·dx̂ − x·(dx̂·x)·c/s^{3/2}.
    for (index_t t = 0; t < g.n; ++t)
      for (index_t kh = 0; kh < g.hk; ++kh) {
        const double s_q = sq[t * g.hk + kh], s_k = sk[t * g.hk + kh];
        const double cq_ = 1.0 / (std::sqrt(s_q) * std::sqrt(double(g.d))), ck = 1.0 / std::sqrt(s_k);
        double dot_q = 0, dot_k = 0;
        for (index_t i = 0; i < g.d; ++i) {
          dot_q += dqh[(t * g.hk + kh) * g.d + i] * cq[t * g.C + g.q_col(kh, i)];
          dot_k += dkh[(t * g.hk + kh) * g.d + i] * cq[t * g.C + g.k_col(kh, i)];
        }
        for (index_t i = 0; i < g.d; ++i) {
          dcq[t * g.C + g.q_col(kh, i)] =
              cq_ * dqh[(t * g.hk + kh) * g.d + i] - cq[t * g.C + g.q_col(kh, i)] * dot_q * cq_ / s_q;
          dcq[t * g.C + g.k_col(kh, i)] =
              ck * dkh[(t * g.hk + kh) * g.d + i] - cq[t * g.C + g.k_col(kh, i)] * dot_k * ck / s_k;
        }
      }

    // SiLU and the causal conv: raw row t feeds conv rows t + back.
    for (index_t t = 0; t < g.n; ++t) {
      const index_t p = t % g.T;
      for (index_t c = 0; c < g.C; ++c) {
        double acc = 0;
        for (index_t j = 0; j < g.K; ++j) {
          const index_t back = g.K - 1 - j;
          if (p + back < g.T) {
            const double pre = conv_pre(g, qkv, prm.conv_weight, t + back, p + back, c);
            acc += dcq[(t + back) * g.C + c] * silu_grad(pre) * prm.conv_weight[c * g.K + j];
          }
        }
        d_qkv[t * g.C + c] = acc;
      }
    }
  }
};

}  // namespace

std::unique_ptr<GdnOps<double>> make_gdn_ops(index_t chunk) { return std::make_unique<RefGdnOps>(chunk); }

}  // namespace bitrank::ref
