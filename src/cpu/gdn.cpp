// CPU backend of the Gated DeltaNet core (contract: include/bitrank/ops/gdn.hpp).
//
// f32 throughout. Forward in four passes: conv + SiLU (parallel over rows),
// q/k l2 norms (rows × k-heads), gates (rows × v-heads), then the recurrence
// with the gated RMSNorm, parallel over (window, v-head), the d×d state in a
// per-task buffer stored [k-dim][v-dim] so every inner loop runs along
// contiguous v-columns.
//
// Decoding (gdn_decode): the conv over conv_state ++ qkv (parallel over
// tokens), then one task per v-head that runs its tokens in order from the
// carried state with the forward's loops (l2 norms of its k-head, gates,
// the delta rule, the gated RMSNorm).
//
// Backward, per (window, v-head): the segments are walked last to first;
// each is rebuilt from its checkpoint into the tape's replay slots using the
// recorded kv (u = β(v − kv) is then the forward's u bit for bit, and the
// decay and the rank-1 update are the forward's two separate roundings),
// then swept in reverse carrying dS. Each v-head writes its own dq̂, dk̂
// rows; a second pass sums them over the heads of a group and applies the
// l2-norm backward, and a last pass runs SiLU and the conv backward in place
// over d_qkv (ascending tokens: token t's gradient needs the conv-output
// gradients of tokens t..t+K−1, which are still unmodified).
#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu/ops.hpp"

namespace bitrank::cpu {
namespace {

inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }
inline float silu(float x) { return x / (1.0f + std::exp(-x)); }
inline float silu_grad(float x) {
  const float s = sigmoid(x);
  return s * (1.0f + x * (1.0f - s));
}
inline float softplus(float x) { return std::max(x, 0.0f) + std::log1p(std::exp(-std::fabs(x))); }

// Σ a[i]·b[i] with eight partial sums (vectorisable without reassociation flags).
inline float dot(const float* a, const float* b, index_t n) {
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  index_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) acc[l] += a[i + l] * b[i + l];
  float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

struct Geometry {
  index_t n, nb, T, hk, hv, group, d, K, C, cs, nseg, slots;
  Geometry(const GdnConfig& cfg, index_t rows)
      : n(rows), nb(rows / cfg.window), T(cfg.window), hk(cfg.k_heads), hv(cfg.v_heads),
        group(cfg.v_heads / cfg.k_heads), d(cfg.head_dim), K(cfg.conv_kernel), C(cfg.channels()),
        cs(cfg.ckpt_every), nseg(cfg.segments()), slots(cfg.replay_steps()) {}
  index_t v_off() const { return 2 * hk * d; }
};

// Typed pointers into the tape sections.
struct Tape {
  float *conv_out, *q_hat, *k_hat, *q_sumsq, *k_sumsq, *decay, *beta, *gate_in, *o_pre, *inv_rms, *kv, *ckpt,
      *replay, *dq_hat, *dk_hat;
  Tape(float* base, const GdnConfig& cfg, const Geometry& g) {
    const GdnTapeLayout L = gdn_tape_layout(cfg, g.n);
    conv_out = base + L.conv_out;
    q_hat = base + L.qk_hat;
    k_hat = q_hat + g.n * g.hk * g.d;
    q_sumsq = base + L.qk_sumsq;
    k_sumsq = q_sumsq + g.n * g.hk;
    decay = base + L.gates;
    beta = decay + g.n * g.hv;
    gate_in = beta + g.n * g.hv;
    o_pre = base + L.o_pre;
    inv_rms = base + L.inv_rms;
    kv = base + L.kv;
    ckpt = base + L.ckpt;
    replay = base + L.replay;
    dq_hat = base + L.dqk;
    dk_hat = dq_hat + g.n * g.hv * g.d;
  }
};

// Conv pre-activations of row t (position p in its window), channels
// [c0, c1), from the tap-major weights w_t[K][C]; taps in ascending order
// so the forward and the backward's recomputation agree bit for bit.
void conv_pre_row(const float* qkv, const float* w_t, const Geometry& g, index_t t, index_t p, index_t c0, index_t c1,
                  float* pre) {
  for (index_t c = c0; c < c1; ++c) pre[c - c0] = 0.0f;
  for (index_t j = 0; j < g.K; ++j) {
    const index_t back = g.K - 1 - j;
    if (p < back) continue;
    const float* x = qkv + (t - back) * g.C;
    const float* w = w_t + j * g.C;
    for (index_t c = c0; c < c1; ++c) pre[c - c0] += x[c] * w[c];
  }
}

std::vector<float> tap_major(const float* w, const Geometry& g) {
  std::vector<float> w_t(static_cast<std::size_t>(g.K * g.C));
  for (index_t c = 0; c < g.C; ++c)
    for (index_t j = 0; j < g.K; ++j) w_t[static_cast<std::size_t>(j * g.C + c)] = w[c * g.K + j];
  return w_t;
}

class CpuGdnOps final : public GdnOps<float> {
 public:
  explicit CpuGdnOps(ThreadPool& pool) : pool_(pool) {}

 protected:
  void gdn_forward_impl(const GdnConfig& cfg, const GdnParams<float>& prm, CView<float> qkv, CView<float> z,
                        CView<float> a, CView<float> b, View<float> out, View<float> tape,
                        bool record_tape) override {
    const Geometry g(cfg, qkv.dim(0));
    const Tape tp(tape.data, cfg, g);
    const std::vector<float> w_t = tap_major(prm.conv_weight.data, g);

    // Conv + SiLU.
    pool_.parallel_for(
        g.n,
        [&](index_t t0, index_t t1) {
          for (index_t t = t0; t < t1; ++t) {
            float* y = tp.conv_out + t * g.C;
            conv_pre_row(qkv.data, w_t.data(), g, t, t % g.T, 0, g.C, y);
            for (index_t c = 0; c < g.C; ++c) y[c] = silu(y[c]);
          }
        },
        std::max<index_t>(1, 8192 / g.C));

    // l2 norms of q and k.
    const float eps = cfg.l2_eps, q_scale = 1.0f / std::sqrt(static_cast<float>(g.d));
    pool_.parallel_for(
        g.n * g.hk,
        [&](index_t r0, index_t r1) {
          for (index_t r = r0; r < r1; ++r) {
            const index_t t = r / g.hk, kh = r % g.hk;
            const float* q = tp.conv_out + t * g.C + kh * g.d;
            const float* k = q + g.hk * g.d;
            const float sq = dot(q, q, g.d) + eps, sk = dot(k, k, g.d) + eps;
            tp.q_sumsq[r] = sq;
            tp.k_sumsq[r] = sk;
            const float iq = q_scale / std::sqrt(sq), ik = 1.0f / std::sqrt(sk);
            for (index_t i = 0; i < g.d; ++i) {
              tp.q_hat[r * g.d + i] = q[i] * iq;
              tp.k_hat[r * g.d + i] = k[i] * ik;
            }
          }
        },
        std::max<index_t>(1, 4096 / g.d));

    // Gates.
    pool_.parallel_for(
        g.n * g.hv,
        [&](index_t r0, index_t r1) {
          for (index_t r = r0; r < r1; ++r) {
            const index_t h = r % g.hv;
            const float x = a[r] + prm.dt_bias[h];
            tp.gate_in[r] = x;
            tp.decay[r] = std::exp(-std::exp(prm.a_log[h]) * softplus(x));
            tp.beta[r] = sigmoid(b[r]);
          }
        },
        1024);

    // Recurrence and gated RMSNorm per (window, v-head).
    const index_t d = g.d;
    pool_.parallel_for(g.nb * g.hv, [&](index_t j0, index_t j1) {
      std::vector<float> S(static_cast<std::size_t>(d * d)), kv(d), u(d), o(d);
      for (index_t job = j0; job < j1; ++job) {
        const index_t w = job / g.hv, h = job % g.hv, kh = h / g.group;
        std::fill(S.begin(), S.end(), 0.0f);
        for (index_t p = 0; p < g.T; ++p) {
          const index_t t = w * g.T + p, th = t * g.hv + h;
          const float* q = tp.q_hat + (t * g.hk + kh) * d;
          const float* k = tp.k_hat + (t * g.hk + kh) * d;
          const float* v = tp.conv_out + t * g.C + g.v_off() + h * d;
          const float gam = tp.decay[th], bet = tp.beta[th];
          // S ← γS; kv = Sᵀk̂.
          std::fill(kv.begin(), kv.end(), 0.0f);
          for (index_t i = 0; i < d; ++i) {
            float* s = S.data() + i * d;
            const float ki = k[i];
            for (index_t j = 0; j < d; ++j) {
              s[j] = s[j] * gam;
              kv[j] += s[j] * ki;
            }
          }
          for (index_t j = 0; j < d; ++j) u[j] = bet * (v[j] - kv[j]);
          // S += k̂uᵀ; o = Sᵀq̂.
          std::fill(o.begin(), o.end(), 0.0f);
          for (index_t i = 0; i < d; ++i) {
            float* s = S.data() + i * d;
            const float ki = k[i], qi = q[i];
            for (index_t j = 0; j < d; ++j) {
              s[j] += ki * u[j];
              o[j] += s[j] * qi;
            }
          }
          const float inv = 1.0f / std::sqrt(dot(o.data(), o.data(), d) / static_cast<float>(d) + cfg.norm_eps);
          tp.inv_rms[th] = inv;
          float* op = tp.o_pre + th * d;
          float* y = out.data + th * d;
          const float* zz = z.data + th * d;
          for (index_t j = 0; j < d; ++j) {
            op[j] = o[j];
            y[j] = o[j] * inv * prm.norm_gain[j] * silu(zz[j]);
          }
          if (record_tape) {
            std::copy(kv.begin(), kv.end(), tp.kv + th * d);
            const index_t steps = p + 1;
            if (steps % g.cs == 0 && steps < g.T)
              std::copy(S.begin(), S.end(), tp.ckpt + ((w * g.hv + h) * (g.nseg - 1) + steps / g.cs - 1) * d * d);
          }
        }
      }
    });
  }

  void gdn_decode_impl(const GdnConfig& cfg, const GdnParams<float>& prm, CView<float> qkv, CView<float> z,
                       CView<float> a, CView<float> b, View<float> conv_state, View<float> state,
                       View<float> out) override {
    const index_t n = qkv.dim(0);
    GdnConfig one = cfg;
    one.window = n;
    const Geometry g(one, n);
    const index_t K1 = g.K - 1;
    // ext = conv_state ++ qkv: token t's raw row is ext row t + K − 1.
    std::vector<float> ext(static_cast<std::size_t>((K1 + n) * g.C)), cq(static_cast<std::size_t>(n * g.C));
    std::copy(conv_state.data, conv_state.data + K1 * g.C, ext.begin());
    std::copy(qkv.data, qkv.data + n * g.C, ext.begin() + K1 * g.C);
    const std::vector<float> w_t = tap_major(prm.conv_weight.data, g);
    pool_.parallel_for(n, [&](index_t t0, index_t t1) {
      for (index_t t = t0; t < t1; ++t) {
        float* y = cq.data() + t * g.C;
        conv_pre_row(ext.data(), w_t.data(), g, t + K1, t + K1, 0, g.C, y);
        for (index_t c = 0; c < g.C; ++c) y[c] = silu(y[c]);
      }
    });
    pool_.parallel_for(g.hv, [&](index_t h0, index_t h1) {
      for (index_t h = h0; h < h1; ++h)
        decode_head(g, cfg, prm, cq.data(), z, a, b, h, state.data + h * g.d * g.d, out);
    });
    std::copy(ext.begin() + n * g.C, ext.begin() + (n + K1) * g.C, conv_state.data);
  }

  void gdn_backward_impl(const GdnConfig& cfg, const GdnParams<float>& prm, CView<float> qkv, CView<float> z,
                         View<float> tape, CView<float> d_out, View<float> d_qkv, View<float> d_z, View<float> d_a,
                         View<float> d_b) override {
    const Geometry g(cfg, qkv.dim(0));
    const Tape tp(tape.data, cfg, g);
    const index_t d = g.d, dd = d * d;

    // Segment replay and reverse sweep per (window, v-head).
    pool_.parallel_for(g.nb * g.hv, [&](index_t j0, index_t j1) {
      std::vector<float> dS(static_cast<std::size_t>(dd)), zero(static_cast<std::size_t>(dd), 0.0f);
      std::vector<float> u(d), dO(d), du(d), dkv(d), diff(d);
      for (index_t job = j0; job < j1; ++job) {
        const index_t w = job / g.hv, h = job % g.hv, kh = h / g.group;
        const float ea = std::exp(prm.a_log[h]);
        float* slots = tp.replay + job * g.slots * dd;
        const float* ckpts = tp.ckpt + job * (g.nseg - 1) * dd;
        std::fill(dS.begin(), dS.end(), 0.0f);
        for (index_t seg = g.nseg - 1; seg >= 0; --seg) {
          const index_t p0 = seg * g.cs, p1 = std::min(p0 + g.cs, g.T);
          const float* start = seg == 0 ? zero.data() : ckpts + (seg - 1) * dd;
          // Rebuild S after each step of the segment into slot p − p0.
          for (index_t p = p0; p < p1; ++p) {
            const index_t t = w * g.T + p, th = t * g.hv + h;
            const float* k = tp.k_hat + (t * g.hk + kh) * d;
            const float* v = tp.conv_out + t * g.C + g.v_off() + h * d;
            const float* kv = tp.kv + th * d;
            const float gam = tp.decay[th], bet = tp.beta[th];
            for (index_t j = 0; j < d; ++j) u[j] = bet * (v[j] - kv[j]);
            const float* sp = p == p0 ? start : slots + (p - p0 - 1) * dd;
            float* st = slots + (p - p0) * dd;
            for (index_t e = 0; e < dd; ++e) st[e] = sp[e] * gam;
            for (index_t i = 0; i < d; ++i) {
              float* s = st + i * d;
              const float ki = k[i];
              for (index_t j = 0; j < d; ++j) s[j] += ki * u[j];
            }
          }
          // Reverse sweep.
          for (index_t p = p1 - 1; p >= p0; --p) {
            const index_t t = w * g.T + p, th = t * g.hv + h;
            const float* q = tp.q_hat + (t * g.hk + kh) * d;
            const float* k = tp.k_hat + (t * g.hk + kh) * d;
            const float* v = tp.conv_out + t * g.C + g.v_off() + h * d;
            const float* kv = tp.kv + th * d;
            const float* st = slots + (p - p0) * dd;
            const float* sp = p == p0 ? start : slots + (p - p0 - 1) * dd;
            const float gam = tp.decay[th], bet = tp.beta[th], inv = tp.inv_rms[th];

            // Gated RMSNorm backward → dz and dO.
            const float* o = tp.o_pre + th * d;
            const float* zz = z.data + th * d;
            const float* dy = d_out.data + th * d;
            float* dz = d_z.data + th * d;
            for (index_t j = 0; j < d; ++j) dO[j] = prm.norm_gain[j] * silu(zz[j]) * dy[j];  // w·silu(z)·dy
            const float coef = dot(dO.data(), o, d) / static_cast<float>(d) * inv * inv * inv;
            for (index_t j = 0; j < d; ++j) {
              dz[j] = dy[j] * o[j] * inv * prm.norm_gain[j] * silu_grad(zz[j]);
              dO[j] = inv * dO[j] - o[j] * coef;
            }

            // o = S_tᵀq̂: dS += q̂ dOᵀ, dq̂ = S_t dO.
            float* dq = tp.dq_hat + th * d;
            for (index_t i = 0; i < d; ++i) {
              float* ds = dS.data() + i * d;
              const float qi = q[i];
              for (index_t j = 0; j < d; ++j) ds[j] += qi * dO[j];
              dq[i] = dot(st + i * d, dO.data(), d);
            }

            // S_t = γS_{t−1} + k̂uᵀ: du = dSᵀk̂, dk̂ = dS·u.
            for (index_t j = 0; j < d; ++j) {
              diff[j] = v[j] - kv[j];
              u[j] = bet * diff[j];
              du[j] = 0.0f;
            }
            float* dk = tp.dk_hat + th * d;
            for (index_t i = 0; i < d; ++i) {
              const float* ds = dS.data() + i * d;
              const float ki = k[i];
              for (index_t j = 0; j < d; ++j) du[j] += ds[j] * ki;
              dk[i] = dot(ds, u.data(), d);
            }
            // u = β(v − kv): dβ, dv, dkv.
            const float dbeta = dot(du.data(), diff.data(), d);
            float* dv = d_qkv.data + t * g.C + g.v_off() + h * d;
            for (index_t j = 0; j < d; ++j) {
              dv[j] = bet * du[j];
              dkv[j] = -bet * du[j];
            }
            // kv = (γS_{t−1})ᵀk̂ and S' = γS_{t−1}: dk̂ += γS_{t−1}·dkv,
            // dγ = ⟨dS + k̂dkvᵀ, S_{t−1}⟩, dS_{t−1} = γ(dS + k̂dkvᵀ).
            float dg[8] = {0, 0, 0, 0, 0, 0, 0, 0};
            for (index_t i = 0; i < d; ++i) {
              float* ds = dS.data() + i * d;
              const float* s = sp + i * d;
              const float ki = k[i];
              dk[i] += gam * dot(s, dkv.data(), d);
              index_t j = 0;
              for (; j + 8 <= d; j += 8)
                for (int l = 0; l < 8; ++l) {
                  const float e = ds[j + l] + ki * dkv[j + l];
                  dg[l] += e * s[j + l];
                  ds[j + l] = gam * e;
                }
              for (; j < d; ++j) {
                const float e = ds[j] + ki * dkv[j];
                dg[0] += e * s[j];
                ds[j] = gam * e;
              }
            }
            const float dgam = ((dg[0] + dg[4]) + (dg[1] + dg[5])) + ((dg[2] + dg[6]) + (dg[3] + dg[7]));
            d_a[th] = dgam * gam * (-ea) * sigmoid(tp.gate_in[th]);
            d_b[th] = dbeta * bet * (1.0f - bet);
          }
        }
      }
    });

    // Sum dq̂, dk̂ over the v-heads of each group; l2-norm backward into the
    // q/k columns of d_qkv (the conv-output gradient there, for now).
    const float q_scale = 1.0f / std::sqrt(static_cast<float>(d));
    pool_.parallel_for(
        g.n * g.hk,
        [&](index_t r0, index_t r1) {
          std::vector<float> dq(d), dk(d);
          for (index_t r = r0; r < r1; ++r) {
            const index_t t = r / g.hk, kh = r % g.hk;
            std::fill(dq.begin(), dq.end(), 0.0f);
            std::fill(dk.begin(), dk.end(), 0.0f);
            for (index_t h = kh * g.group; h < (kh + 1) * g.group; ++h) {
              const float* pq = tp.dq_hat + (t * g.hv + h) * d;
              const float* pk = tp.dk_hat + (t * g.hv + h) * d;
              for (index_t i = 0; i < d; ++i) {
                dq[i] += pq[i];
                dk[i] += pk[i];
              }
            }
            const float* q = tp.conv_out + t * g.C + kh * d;
            const float* k = q + g.hk * d;
            const float sq = tp.q_sumsq[r], sk = tp.k_sumsq[r];
            const float iq = q_scale / std::sqrt(sq), ik = 1.0f / std::sqrt(sk);
            const float cq = dot(dq.data(), q, d) * iq / sq, ck = dot(dk.data(), k, d) * ik / sk;
            float* gq = d_qkv.data + t * g.C + kh * d;
            float* gk = gq + g.hk * d;
            for (index_t i = 0; i < d; ++i) {
              gq[i] = iq * dq[i] - q[i] * cq;
              gk[i] = ik * dk[i] - k[i] * ck;
            }
          }
        },
        std::max<index_t>(1, 4096 / d));

    // SiLU and conv backward in place, per (window, block of channels).
    const std::vector<float> w_t = tap_major(prm.conv_weight.data, g);
    constexpr index_t kBlock = 256;
    const index_t blocks = (g.C + kBlock - 1) / kBlock;
    pool_.parallel_for(g.nb * blocks, [&](index_t j0, index_t j1) {
      std::vector<float> ring(static_cast<std::size_t>(g.K * kBlock)), pre(kBlock);
      for (index_t job = j0; job < j1; ++job) {
        const index_t w = job / blocks, c0 = (job % blocks) * kBlock, c1 = std::min(c0 + kBlock, g.C), nc = c1 - c0;
        // ring slot p % K: ∂L/∂pre of position p (conv output gradient × silu').
        auto load = [&](index_t p) {
          const index_t t = w * g.T + p;
          conv_pre_row(qkv.data, w_t.data(), g, t, p, c0, c1, pre.data());
          float* r = ring.data() + (p % g.K) * kBlock;
          const float* gc = d_qkv.data + t * g.C + c0;
          for (index_t c = 0; c < nc; ++c) r[c] = gc[c] * silu_grad(pre[c]);
        };
        for (index_t p = 0; p < std::min(g.K - 1, g.T); ++p) load(p);
        for (index_t p = 0; p < g.T; ++p) {
          if (p + g.K - 1 < g.T) load(p + g.K - 1);
          float* gx = d_qkv.data + (w * g.T + p) * g.C + c0;
          for (index_t c = 0; c < nc; ++c) gx[c] = 0.0f;
          for (index_t j = 0; j < g.K; ++j) {
            const index_t back = g.K - 1 - j;
            if (p + back >= g.T) continue;
            const float* r = ring.data() + ((p + back) % g.K) * kBlock;
            const float* wj = w_t.data() + j * g.C + c0;
            for (index_t c = 0; c < nc; ++c) gx[c] += r[c] * wj[c];
          }
        }
      }
    });
  }

 private:
  // v-head h over every token of a decoding call: cq [n][C] the conv
  // outputs, S [d][d] its state (updated), out [n][Hv·d].
  static void decode_head(const Geometry& g, const GdnConfig& cfg, const GdnParams<float>& prm, const float* cq,
                          CView<float> z, CView<float> a, CView<float> b, index_t h, float* S, View<float> out) {
    const index_t d = g.d, kh = h / g.group;
    const float q_scale = 1.0f / std::sqrt(static_cast<float>(d)), decay_rate = std::exp(prm.a_log[h]);
    std::vector<float> qh(d), kh_(d), kv(d), u(d), o(d);
    for (index_t t = 0; t < g.n; ++t) {
      const float* q = cq + t * g.C + kh * d;
      const float* k = q + g.hk * d;
      const float* v = cq + t * g.C + g.v_off() + h * d;
      const float iq = q_scale / std::sqrt(dot(q, q, d) + cfg.l2_eps), ik = 1.0f / std::sqrt(dot(k, k, d) + cfg.l2_eps);
      for (index_t i = 0; i < d; ++i) {
        qh[i] = q[i] * iq;
        kh_[i] = k[i] * ik;
      }
      const index_t th = t * g.hv + h;
      const float gam = std::exp(-decay_rate * softplus(a[th] + prm.dt_bias[h])), bet = sigmoid(b[th]);
      std::fill(kv.begin(), kv.end(), 0.0f);
      for (index_t i = 0; i < d; ++i) {
        float* s = S + i * d;
        for (index_t j = 0; j < d; ++j) {
          s[j] = s[j] * gam;
          kv[j] += s[j] * kh_[i];
        }
      }
      for (index_t j = 0; j < d; ++j) u[j] = bet * (v[j] - kv[j]);
      std::fill(o.begin(), o.end(), 0.0f);
      for (index_t i = 0; i < d; ++i) {
        float* s = S + i * d;
        for (index_t j = 0; j < d; ++j) {
          s[j] += kh_[i] * u[j];
          o[j] += s[j] * qh[i];
        }
      }
      const float inv = 1.0f / std::sqrt(dot(o.data(), o.data(), d) / static_cast<float>(d) + cfg.norm_eps);
      const float* zz = z.data + th * d;
      float* y = out.data + th * d;
      for (index_t j = 0; j < d; ++j) y[j] = o[j] * inv * prm.norm_gain[j] * silu(zz[j]);
    }
  }

  ThreadPool& pool_;
};

}  // namespace

std::unique_ptr<GdnOps<float>> make_gdn_ops(ThreadPool& pool) { return std::make_unique<CpuGdnOps>(pool); }

}  // namespace bitrank::cpu
