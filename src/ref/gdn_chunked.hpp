// Chunkwise-parallel form of the Gated DeltaNet core (contract:
// include/bitrank/ops/gdn.hpp), forward and backward, and its f64 host
// implementation. The derivation below is what the CUDA chunked design
// (gdn_chunk.cu) implements; the host code here proves it on the CPU: the
// ref backend built with a chunk size (ref::make_gdn_ops(chunk)) runs this
// core instead of the token-by-token recurrence, and the tests require the
// two to agree to ~1e-10 (tests/gdn_chunked_test.cpp). It lives in the
// library next to the ref backend (not in tests/support) because the ref op's
// outer chain (conv, l2 norms, gates, gated RMSNorm, their backward) is the
// same code for both cores — one piece of code per idea.
//
// ── The recurrence, per (window, v-head h; k-head h / (Hv/Hk)) ──
// S is d×d, [k-dim][v-dim], S = 0 at the window start; for each token t:
//   S ← γ_t S;  kv = Sᵀk_t;  u_t = β_t(v_t − kv);  S += k_t u_tᵀ;  o_t = Sᵀq_t
// (k = k̂, q = q̂ with its 1/√d; v a row of the conv output).
//
// ── One chunk: rows r = 0..L−1 (L ≤ C; the last chunk of a window may be
// short, a window shorter than C is one chunk), entering with state S₀ ──
// Log decays ℓ_r = log γ_r = −e^{a_log}·softplus(a + dt_bias) (taken in log
// space, never as log of an underflowed γ), cumulative within the chunk:
//   c_r = Σ_{s≤r} ℓ_s,   M_rs = e^{c_r − c_s} ≤ 1 for s ≤ r.
// Unrolling, with every u_s entering at step s and decaying after:
//   S_r = e^{c_r} S₀ + Σ_{s≤r} M_rs k_s u_sᵀ,                               (1)
// and γ_r S_{r−1} = e^{c_r} S₀ + Σ_{s<r} M_rs k_s u_sᵀ, so
//   u_r = β_r v_r − β_r e^{c_r} S₀ᵀk_r − Σ_{s<r} β_r M_rs (k_r·k_s) u_s.
// With A (L×L, strictly lower) A_rs = β_r M_rs (k_r·k_s), and rows stacked
// (U, V, K, Q are L×d):
//   (I + A) U = diag(β) V − diag(β e^{c}) K S₀.
// UT transform: T = (I + A)⁻¹ is unit lower triangular, built row by row by
// forward substitution, T_r = e_r − Σ_{s<r} A_rs T_s (each row needs only
// the rows above it), and
//   Ũ = T diag(β) V          ("u", L×d_v, independent of S₀)
//   W = T diag(β e^{c}) K    ("w", L×d_k, independent of S₀)
//   U = Ũ − W S₀.
// Output (from (1)), with the intra-chunk attention P_rs = M_rs (q_r·k_s)
// for s ≤ r (diagonal included), 0 above:
//   O = diag(e^{c}) Q S₀ + P U.
// State passing to the next chunk (c_last = c_{L−1}):
//   S_L = e^{c_last} S₀ + Kᵀ diag(e^{c_last − c}) U.
// Everything but the last line and the S₀ terms is independent per chunk:
// the chunks of a window are parallel except for the state chain S₀ → S_L,
// an L×d by d×d product per chunk (FLA's chunk_gated_delta_rule computes the
// same quantities: w, u, the chunk states h, then o).
//
// ── Backward of one chunk, given dO (L×d) and dS_L (carried from the next
// chunk; zero after the last), S₀ and the recomputed c, A, T, Ũ, W, U, P ──
// (a) state out:  dS₀ += e^{c_last} dS_L;  dc_last += e^{c_last}⟨S₀, dS_L⟩;
//     dU_r += e^{c_last−c_r} dS_Lᵀk_r;  dK_r += e^{c_last−c_r} dS_L u_r;
//     τ_r = e^{c_last−c_r} k_rᵀ dS_L u_r:  dc_last += τ_r, dc_r −= τ_r.
// (b) output:  dS₀ += Qᵀ diag(e^{c}) dO;  dQ_r += e^{c_r} S₀ dO_r;
//     dc_r += e^{c_r} q_rᵀ S₀ dO_r;  dU += Pᵀ dO;
//     dP_rs = dO_r·u_s (s ≤ r):  dQ_r += Σ_s dP_rs M_rs k_s,
//     dK_s += Σ_r dP_rs M_rs q_r,  dc_r += dP_rs P_rs,  dc_s −= dP_rs P_rs.
// (c) U = Ũ − W S₀:  dŨ = dU;  dW = −dU S₀ᵀ;  dS₀ −= Wᵀ dU.
// (d) Ũ = T diag(β)V, W = T diag(βe^{c})K:  dT = dŨ (diag(β)V)ᵀ + dW (diag(βe^{c})K)ᵀ;
//     dV_s += β_s (TᵀdŨ)_s;  dβ_s += v_s·(TᵀdŨ)_s;
//     dK_s += β_s e^{c_s} (TᵀdW)_s;  dβ_s += e^{c_s} k_s·(TᵀdW)_s;  dc_s += β_s e^{c_s} k_s·(TᵀdW)_s.
// (e) T = (I+A)⁻¹:  dA = −Tᵀ dT Tᵀ, used on the strictly lower part only
//     (T's upper part and diagonal do not depend on A). For s < r, with
//     G_rs = M_rs (k_r·k_s):  dβ_r += dA_rs G_rs;  dK_r += dA_rs β_r M_rs k_s;
//     dK_s += dA_rs β_r M_rs k_r;  dc_r += dA_rs A_rs;  dc_s −= dA_rs A_rs.
// (f) dℓ_s = Σ_{r≥s} dc_r (reverse cumulative sum);  dS₀ is the next dS_L.
// The op's d_a is dℓ·(−e^{a_log})·σ(a + dt_bias) and d_b = dβ·β(1−β); dq̂, dk̂
// are summed over the v-heads of a group before the l2-norm backward.
//
// ── What the backward keeps: chunk-start states ──
// The backward walks the chunks of a window last to first and needs each
// chunk's S₀. They are either saved by the forward (nb·Hv·(⌈T/C⌉−1)·d²
// values; at C = 64 that is 8× fewer than today's checkpoints at
// ckpt_every = 8, and the per-token kv record n·Hv·d and the replay slots
// nb·Hv·min(8,T)·d² are not needed) or recomputed by one forward state pass
// (the chain S₀ → S_L per chunk: ~4·d²·T flops per (window, head), about a
// sixth of the backward's work). The host code below recomputes them into a
// per-(window, head) buffer (⌈T/C⌉·d² doubles); the CUDA design saves them
// in the tape's ckpt section when it is large enough (ckpt_every ≤ C) and
// otherwise refuses, so the tape layout of the contract is unchanged. All
// other per-chunk quantities (c, A, T, Ũ, W, U, P) are recomputed from q̂,
// k̂, v, ℓ, β and S₀ — O(L²·d + L·d²) each, the same order as the forward.
//
// Numerics (host): f64 throughout; e^{c_r − c_s} is formed from the
// difference of log sums, so strongly decaying gates never divide by an
// underflowed cumulative product.
#pragma once

#include "bitrank/tensor.hpp"

namespace bitrank::ref {

// The core's inputs for nb windows of T tokens, Hk k-heads, Hv v-heads, head_dim d.
// Token t = w·T + p; v-head h reads k-head h / (Hv/Hk).
struct GdnCoreArgs {
  index_t nb = 0, T = 0, hk = 0, hv = 0, d = 0;
  const double* q = nullptr;          // q̂ [n][Hk][d]
  const double* k = nullptr;          // k̂ [n][Hk][d]
  const double* v = nullptr;          // v of (t, h, j) at v[t·v_stride + h·d + j]
  index_t v_stride = 0;
  const double* log_decay = nullptr;  // ℓ = log γ [n][Hv]
  const double* beta = nullptr;       // β [n][Hv]
};

// o [n][Hv][d] (o before the norm) of the chunkwise form with chunks of `chunk` tokens.
void gdn_chunked_forward(const GdnCoreArgs& a, index_t chunk, double* o);

// Gradients of Σ d_o ⊙ o: d_q, d_k [n][Hk][d] ACCUMULATED (summed over the
// v-heads of each group; the caller zeroes them), d_v at v's layout
// (d_v_stride) and d_log_decay, d_beta [n][Hv] overwritten.
void gdn_chunked_backward(const GdnCoreArgs& a, index_t chunk, const double* d_o, double* d_q, double* d_k,
                          double* d_v, index_t d_v_stride, double* d_log_decay, double* d_beta);

}  // namespace bitrank::ref
