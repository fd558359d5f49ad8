// f64 host implementation of the chunkwise Gated DeltaNet core; the
// derivation, the formulas' names (c, M, A, T, Ũ, W, U, P) and the steps
// (a)–(f) of the backward are in gdn_chunked.hpp. Plain loops over dense
// row-major L×L and L×d matrices, one chunk at a time per (window, v-head).
#include "ref/gdn_chunked.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

namespace bitrank::ref {
namespace {

using Mat = std::vector<double>;

// One chunk of one (window, v-head): its inputs and the quantities that
// depend only on them (c, M, A, T, Ũ, W, P), then U for a given S₀.
struct Chunk {
  index_t L = 0, d = 0;
  Mat q, k, v, beta, c, M, A, T, Ut, W, P, U;  // q,k,v,Ut,W,U: L×d; M,A,T,P: L×L

  double& at(Mat& m, index_t r, index_t s, index_t cols) { return m[static_cast<std::size_t>(r * cols + s)]; }

  Chunk(const GdnCoreArgs& a, index_t w, index_t h, index_t p0, index_t len) : L(len), d(a.d) {
    const index_t kh = h / (a.hv / a.hk);
    const auto sz = static_cast<std::size_t>(L * d), sq = static_cast<std::size_t>(L * L);
    q.assign(sz, 0), k.assign(sz, 0), v.assign(sz, 0), Ut.assign(sz, 0), W.assign(sz, 0), U.assign(sz, 0);
    beta.assign(static_cast<std::size_t>(L), 0), c.assign(static_cast<std::size_t>(L), 0);
    M.assign(sq, 0), A.assign(sq, 0), T.assign(sq, 0), P.assign(sq, 0);
    double run = 0;
    for (index_t r = 0; r < L; ++r) {
      const index_t t = w * a.T + p0 + r;
      for (index_t i = 0; i < d; ++i) {
        at(q, r, i, d) = a.q[(t * a.hk + kh) * d + i];
        at(k, r, i, d) = a.k[(t * a.hk + kh) * d + i];
        at(v, r, i, d) = a.v[t * a.v_stride + h * d + i];
      }
      run += a.log_decay[t * a.hv + h];
      c[r] = run;
      beta[r] = a.beta[t * a.hv + h];
    }
    for (index_t r = 0; r < L; ++r)
      for (index_t s = 0; s <= r; ++s) {
        double kk = 0, qk = 0;
        for (index_t i = 0; i < d; ++i) {
          kk += at(k, r, i, d) * at(k, s, i, d);
          qk += at(q, r, i, d) * at(k, s, i, d);
        }
        const double m = std::exp(c[r] - c[s]);
        at(M, r, s, L) = m;
        at(P, r, s, L) = m * qk;
        if (s < r) at(A, r, s, L) = beta[r] * m * kk;
      }
    // UT transform by forward substitution: T_r = e_r − Σ_{s<r} A_rs T_s.
    for (index_t r = 0; r < L; ++r) {
      at(T, r, r, L) = 1;
      for (index_t s = 0; s < r; ++s) {
        const double ars = at(A, r, s, L);
        for (index_t j = 0; j <= s; ++j) at(T, r, j, L) -= ars * at(T, s, j, L);
      }
    }
    // Ũ = T diag(β) V, W = T diag(βe^c) K.
    for (index_t r = 0; r < L; ++r)
      for (index_t s = 0; s <= r; ++s) {
        const double trs = at(T, r, s, L), bv = trs * beta[s], bk = bv * std::exp(c[s]);
        for (index_t i = 0; i < d; ++i) {
          at(Ut, r, i, d) += bv * at(v, s, i, d);
          at(W, r, i, d) += bk * at(k, s, i, d);
        }
      }
  }

  // U = Ũ − W S₀.
  void set_state(const double* S0) {
    for (index_t r = 0; r < L; ++r)
      for (index_t j = 0; j < d; ++j) {
        double acc = at(Ut, r, j, d);
        for (index_t i = 0; i < d; ++i) acc -= at(W, r, i, d) * S0[i * d + j];
        at(U, r, j, d) = acc;
      }
  }

  // S ← e^{c_last} S + Kᵀ diag(e^{c_last − c}) U, in place.
  void advance(double* S) {
    const double cl = c[L - 1], g = std::exp(cl);
    for (index_t e = 0; e < d * d; ++e) S[e] *= g;
    for (index_t r = 0; r < L; ++r) {
      const double f = std::exp(cl - c[r]);
      for (index_t i = 0; i < d; ++i) {
        const double kf = f * at(k, r, i, d);
        for (index_t j = 0; j < d; ++j) S[i * d + j] += kf * at(U, r, j, d);
      }
    }
  }
};

index_t chunks_of(const GdnCoreArgs& a, index_t chunk) { return (a.T + chunk - 1) / chunk; }

}  // namespace

void gdn_chunked_forward(const GdnCoreArgs& a, index_t chunk, double* o) {
  const index_t d = a.d, nc = chunks_of(a, chunk);
  Mat S(static_cast<std::size_t>(d * d));
  for (index_t w = 0; w < a.nb; ++w)
    for (index_t h = 0; h < a.hv; ++h) {
      std::fill(S.begin(), S.end(), 0.0);
      for (index_t ci = 0; ci < nc; ++ci) {
        const index_t p0 = ci * chunk;
        Chunk ch(a, w, h, p0, std::min(chunk, a.T - p0));
        ch.set_state(S.data());
        // O = diag(e^c) Q S₀ + P U.
        for (index_t r = 0; r < ch.L; ++r) {
          double* orow = o + ((w * a.T + p0 + r) * a.hv + h) * d;
          const double ec = std::exp(ch.c[r]);
          for (index_t j = 0; j < d; ++j) {
            double inter = 0, intra = 0;
            for (index_t i = 0; i < d; ++i) inter += ch.q[r * d + i] * S[i * d + j];
            for (index_t s = 0; s <= r; ++s) intra += ch.P[r * ch.L + s] * ch.U[s * d + j];
            orow[j] = ec * inter + intra;
          }
        }
        ch.advance(S.data());
      }
    }
}

void gdn_chunked_backward(const GdnCoreArgs& a, index_t chunk, const double* d_o, double* d_q, double* d_k,
                          double* d_v, index_t d_v_stride, double* d_log_decay, double* d_beta) {
  const index_t d = a.d, dd = d * d, nc = chunks_of(a, chunk), group = a.hv / a.hk;
  Mat starts(static_cast<std::size_t>(nc * dd)), dS(static_cast<std::size_t>(dd)), dS0(static_cast<std::size_t>(dd));
  for (index_t w = 0; w < a.nb; ++w)
    for (index_t h = 0; h < a.hv; ++h) {
      const index_t kh = h / group;
      // Chunk-start states, recomputed by a forward state pass.
      std::fill(starts.begin(), starts.begin() + dd, 0.0);
      for (index_t ci = 0; ci + 1 < nc; ++ci) {
        const index_t p0 = ci * chunk;
        Chunk ch(a, w, h, p0, std::min(chunk, a.T - p0));
        std::copy(starts.begin() + ci * dd, starts.begin() + (ci + 1) * dd, starts.begin() + (ci + 1) * dd);
        ch.set_state(starts.data() + ci * dd);
        ch.advance(starts.data() + (ci + 1) * dd);
      }
      std::fill(dS.begin(), dS.end(), 0.0);
      for (index_t ci = nc - 1; ci >= 0; --ci) {
        const index_t p0 = ci * chunk, L = std::min(chunk, a.T - p0);
        const double* S0 = starts.data() + ci * dd;
        Chunk ch(a, w, h, p0, L);
        ch.set_state(S0);
        const auto sz = static_cast<std::size_t>(L * d);
        Mat dO(sz), dQ(sz, 0), dK(sz, 0), dV(sz, 0), dU(sz, 0), dW(sz, 0), dBv(sz, 0), dBk(sz, 0);
        Mat dc(static_cast<std::size_t>(L), 0), db(static_cast<std::size_t>(L), 0);
        for (index_t r = 0; r < L; ++r)
          for (index_t j = 0; j < d; ++j) dO[r * d + j] = d_o[((w * a.T + p0 + r) * a.hv + h) * d + j];
        std::fill(dS0.begin(), dS0.end(), 0.0);
        const double cl = ch.c[L - 1];

        // (a) state out.
        {
          const double g = std::exp(cl);
          double acc = 0;
          for (index_t e = 0; e < dd; ++e) {
            dS0[e] += g * dS[e];
            acc += S0[e] * dS[e];
          }
          dc[L - 1] += g * acc;
          for (index_t r = 0; r < L; ++r) {
            const double f = std::exp(cl - ch.c[r]);
            double tau = 0;
            for (index_t i = 0; i < d; ++i) {
              double dsu = 0;
              for (index_t j = 0; j < d; ++j) {
                dU[r * d + j] += f * dS[i * d + j] * ch.k[r * d + i];
                dsu += dS[i * d + j] * ch.U[r * d + j];
              }
              dK[r * d + i] += f * dsu;
              tau += f * ch.k[r * d + i] * dsu;
            }
            dc[L - 1] += tau;
            dc[r] -= tau;
          }
        }
        // (b) output.
        for (index_t r = 0; r < L; ++r) {
          const double ec = std::exp(ch.c[r]);
          double qsd = 0;
          for (index_t i = 0; i < d; ++i) {
            double sd = 0;
            for (index_t j = 0; j < d; ++j) {
              dS0[i * d + j] += ec * ch.q[r * d + i] * dO[r * d + j];
              sd += S0[i * d + j] * dO[r * d + j];
            }
            dQ[r * d + i] += ec * sd;
            qsd += ch.q[r * d + i] * sd;
          }
          dc[r] += ec * qsd;
          for (index_t s = 0; s <= r; ++s) {
            const double prs = ch.P[r * L + s], mrs = ch.M[r * L + s];
            double dp = 0;
            for (index_t j = 0; j < d; ++j) {
              dp += dO[r * d + j] * ch.U[s * d + j];
              dU[s * d + j] += prs * dO[r * d + j];
            }
            for (index_t i = 0; i < d; ++i) {
              dQ[r * d + i] += dp * mrs * ch.k[s * d + i];
              dK[s * d + i] += dp * mrs * ch.q[r * d + i];
            }
            dc[r] += dp * prs;
            dc[s] -= dp * prs;
          }
        }
        // (c) U = Ũ − W S₀ (dŨ = dU).
        for (index_t r = 0; r < L; ++r)
          for (index_t i = 0; i < d; ++i) {
            double acc = 0;
            for (index_t j = 0; j < d; ++j) {
              acc += dU[r * d + j] * S0[i * d + j];
              dS0[i * d + j] -= ch.W[r * d + i] * dU[r * d + j];
            }
            dW[r * d + i] = -acc;
          }
        // (d) Ũ = T diag(β)V, W = T diag(βe^c)K.
        Mat dT(static_cast<std::size_t>(L * L), 0);
        for (index_t r = 0; r < L; ++r)
          for (index_t s = 0; s <= r; ++s) {
            const double bs = ch.beta[s], es = std::exp(ch.c[s]), trs = ch.T[r * L + s];
            double acc = 0;
            for (index_t i = 0; i < d; ++i) {
              acc += dU[r * d + i] * bs * ch.v[s * d + i] + dW[r * d + i] * bs * es * ch.k[s * d + i];
              dBv[s * d + i] += trs * dU[r * d + i];
              dBk[s * d + i] += trs * dW[r * d + i];
            }
            dT[r * L + s] = acc;
          }
        for (index_t s = 0; s < L; ++s) {
          const double bs = ch.beta[s], es = std::exp(ch.c[s]);
          double vb = 0, kb = 0;
          for (index_t i = 0; i < d; ++i) {
            dV[s * d + i] += bs * dBv[s * d + i];
            vb += ch.v[s * d + i] * dBv[s * d + i];
            dK[s * d + i] += bs * es * dBk[s * d + i];
            kb += ch.k[s * d + i] * dBk[s * d + i];
          }
          db[s] += vb + es * kb;
          dc[s] += bs * es * kb;
        }
        // (e) dA = −Tᵀ dT Tᵀ on the strictly lower part.
        Mat X(static_cast<std::size_t>(L * L), 0);  // X = dT Tᵀ
        for (index_t r = 0; r < L; ++r)
          for (index_t s = 0; s < L; ++s) {
            double acc = 0;
            for (index_t m = 0; m <= std::min(r, s); ++m) acc += dT[r * L + m] * ch.T[s * L + m];
            X[r * L + s] = acc;
          }
        for (index_t r = 0; r < L; ++r)
          for (index_t s = 0; s < r; ++s) {
            double da = 0;  // −(Tᵀ X)_rs = −Σ_m T_mr X_ms
            for (index_t m = r; m < L; ++m) da -= ch.T[m * L + r] * X[m * L + s];
            const double ars = ch.A[r * L + s], mrs = ch.M[r * L + s], br = ch.beta[r];
            double kk = 0;
            for (index_t i = 0; i < d; ++i) {
              kk += ch.k[r * d + i] * ch.k[s * d + i];
              dK[r * d + i] += da * br * mrs * ch.k[s * d + i];
              dK[s * d + i] += da * br * mrs * ch.k[r * d + i];
            }
            db[r] += da * mrs * kk;
            dc[r] += da * ars;
            dc[s] -= da * ars;
          }
        // (f) dℓ = reverse cumulative sum of dc; write the chunk's gradients.
        double run = 0;
        for (index_t r = L - 1; r >= 0; --r) {
          run += dc[r];
          const index_t t = w * a.T + p0 + r;
          d_log_decay[t * a.hv + h] = run;
          d_beta[t * a.hv + h] = db[r];
          for (index_t i = 0; i < d; ++i) {
            d_q[(t * a.hk + kh) * d + i] += dQ[r * d + i];
            d_k[(t * a.hk + kh) * d + i] += dK[r * d + i];
            d_v[t * d_v_stride + h * d + i] = dV[r * d + i];
          }
        }
        std::swap(dS, dS0);
      }
    }
}

}  // namespace bitrank::ref
