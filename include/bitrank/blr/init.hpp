// Dual-SVID initialisation of a BLR matrix (DESIGN §6).
//
// For W [m][n] (row-major f32) and rank r (a multiple of 32), one path is:
//   1. W ≈ U·Σ·Vᵀ, truncated SVD at rank r (svd.hpp; padded with σ = 0
//      past min(m, n)) by opts.engine (the CPU one when empty, e.g. the
//      CUDA one for compress --device cuda); steps 2–5 run on the host;
//   2. U' = U·√Σ [m][r], V' = V·√Σ [n][r], so that U'·V'ᵀ is the rank-r SVD
//      approximation;
//   3. S_U = sign(U'), S_V = sign(V') with sign(0) = +1, packed into the
//      bitmaps of ops/bitmap.hpp by the CPU backend's pack_signs;
//   4. |U'| ≈ h·u2ᵀ and |V'| ≈ g·v2ᵀ: the top singular pair of each
//      non-negative matrix, by power iteration in f64 from the all-ones
//      vector (every iterate stays ≥ 0, so h, u2, g, v2 ≥ 0: the
//      Perron–Frobenius pair; stops when the right vector moves < 1e-10, at
//      most 1000 steps; the left vector is then M·v, the least-squares fit);
//   5. ℓ = u2 ⊙ v2, so Ŵ = diag(h)·S_U·diag(ℓ)·S_Vᵀ·diag(g) approximates
//      (S_U⊙|U'|)·(S_V⊙|V'|)ᵀ = U'·V'ᵀ.
// Scale ambiguity: (h, ℓ, g) → (α·h, ℓ/(α·β), β·g) leaves Ŵ unchanged; we
// fix α, β so that rms(h) = rms(ℓ) = rms(g) (their geometric mean), which
// keeps the three trained vectors on one scale for the optimizer. If any is
// all zero (W = 0) the path is left as computed (Ŵ = 0).
// Padded ranks (σ = 0) get ℓ = 0 and signs +1.
//
// With paths = 2 (residual compensation) the second path is the same
// procedure on the f32 residual W − Ŵ₁, Ŵ₁ reconstructed in f64 from the
// first path's stored f32 scales; its sketch seed is svd.seed + 1.
//
// The magnitudes |U'| [m][r] and |V'| [n][r] of each path can be returned
// for a magnitude-aware sign-latent init (DESIGN §5).
//
// Activation-weighted (data-aware) form: with column_scale c [n] (c_j > 0,
// the rms of input column j on calibration data), the procedure above runs
// on W·diag(c) and each path's g is divided by c afterwards (then h, ℓ, g
// rebalanced), so Ŵ minimises the weighted error ‖(W − Ŵ)·diag(c)‖ — the
// output error on such inputs — instead of the weight error. It stays in
// the BLR form exactly (diag(c) folds into g). Why it matters: the sign
// split spreads its error evenly over the input columns, and a few columns
// of a transformer's activations are tens of times larger than the rest;
// weighting puts the error where the inputs are small. The magnitudes
// returned are the weighted ones.
//
// Latent rotation (rotation_iterations > 0, ITQ): since U'·R·(V'·R)ᵀ =
// U'·V'ᵀ for any orthogonal R [r][r], each path rotates its latent factors
// before step 3 (U' ← U'·R, V' ← V'·R), R chosen so that both are close to
// scaled sign matrices: the joint iterative quantization of itq_rotation
// below, from R = I. The low-rank product is unchanged; the sign split then
// loses less. Padded ranks are rotated with the rest (their ℓ need not stay
// 0). 0 (the default) is the plain Dual-SVID, bit for bit.
//
// With refine_sweeps > 0 the result is then refined towards W (or W·diag(c))
// by blr/refine.hpp's exact alternating sign and scale steps; the magnitudes
// stay the SVD's. With an input Gram C of the calibration inputs the sweeps
// run on W itself under C (after the SVD stage, weighted by column_scale if
// given), so they minimise the whole output error ‖X(W − Ŵ)ᵀ‖ — the
// inputs' correlations included, which diag(c) leaves out.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "bitrank/blr/blr_matrix.hpp"
#include "bitrank/blr/svd.hpp"

namespace bitrank::blr {

struct InitOptions {
  index_t rank = 0;          // r, a positive multiple of 32
  int paths = 1;             // 1, or 2 with residual compensation
  SvdOptions svd{};          // method (automatic/exact/randomized), oversampling, power iterations, seed
  SvdEngine engine{};        // where the SVD runs (svd.hpp); empty: the CPU
  std::string name = "W";    // names the matrix in errors
  std::vector<float> column_scale{};  // empty: plain Dual-SVID; else [n], each > 0 and finite (see above)
  int refine_sweeps = 0;              // then this many sweeps of blr/refine.hpp (on W·diag(c) when weighted)
  std::span<const float> input_gram{};  // [n][n] or empty: the sweeps minimise the output error under it (below)
  int rotation_iterations = 0;          // ITQ rounds of the latent rotation per path (above); 0: none
};

// |U'| [m][r] and |V'| [n][r] of one path, row-major.
struct SignMagnitudes {
  std::vector<float> u, v;
};

// The joint ITQ rotation of latent factors u [m][r] and v [n][r] (row-major
// f32): R [r][r] (row-major f64, orthogonal) maximising
//   J(R) = ‖u·R‖₁² / (m·‖u‖²) + ‖v·R‖₁² / (n·‖v‖²),
// equivalently minimising the joint error
//   E(R) = 1 − J(R) / (2r) = ½ Σ_{x = u, v} min_α ‖α·sign(x·R) − x·R‖² / ‖x‖²,
// the mean relative error of the two factors as one scaled sign matrix each.
// Each round takes B_u = sign(u·R), B_v = sign(v·R) (sign(0) = +1) and then
// R = P·Qᵀ from the SVD P·Σ·Qᵀ of M = a·uᵀ·B_u + b·vᵀ·B_v (orthogonal
// Procrustes, LAPACKE dgesdd), a = ‖u·R‖₁ / (m·‖u‖²), b likewise: J's
// linearisation at the current R (each term is convex in R), so J never
// falls in exact arithmetic (a minorise–maximise step). The weights put
// both factors on their relative error — an unweighted M would favour the
// longer factor, whose rows outnumber the other's. Starts from R = I and
// returns the best R seen; `error` holds E before the first round and after
// each (iterations + 1 values). u = 0 or v = 0: R = I and no errors.
// Error for mismatched sizes or iterations < 0.
struct LatentRotation {
  std::vector<double> r;      // [r][r]
  std::vector<double> error;  // E(R) by round
};
LatentRotation itq_rotation(std::span<const float> u, index_t m, std::span<const float> v, index_t n, index_t r,
                            int iterations);

// Dual-SVID of W (see above). Error naming opts.name for a bad shape, rank,
// path count or rotation_iterations (< 0) and for non-finite W. When `magnitudes` is given it receives
// one entry per path.
HostBlrMatrix dual_svid(std::span<const float> w, index_t m, index_t n, const InitOptions& opts,
                        std::vector<SignMagnitudes>* magnitudes = nullptr);

}  // namespace bitrank::blr
