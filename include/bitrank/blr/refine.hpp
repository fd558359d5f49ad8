// Refinement of a BLR matrix towards W by exact alternating minimisation of
// ‖W − Ŵ‖_F (run after Dual-SVID, blr/init.hpp; on W·diag(c) there for the
// activation-weighted form, so it then lowers the output error).
//
// Ŵ = Σ_k ℓ_k·a_k·b_kᵀ over the K = P·r components k = (p, j), with
// a_k = h_p ⊙ S_U,p[:, j] and b_k = g_p ⊙ S_V,p[:, j]. Each sweep:
//   1. ℓ (all paths at once): the least-squares fit, normal matrix
//      (AᵀA) ⊙ (BᵀB), right side diag(Aᵀ·W·B), solved by Cholesky in f64;
//   2. h: row by row, the P×P least-squares fit of W_i by the rows of the
//      paths' matrices S_U,p·diag(ℓ_p)·S_V,pᵀ·diag(g_p);
//   3. g: column by column, the same with columns;
//   4. S_U, one column (component) at a time, the others fixed: the best ±1
//      column is the sign of the residual's projection, because a ±1 entry's
//      square is 1 (the quadratic term does not depend on the signs), so the
//      step is exact and the error never rises;
//   5. S_V likewise.
// The sign steps are blocked (32 components share two GEMMs; the updates
// inside a block are folded in through their Gram matrix), so a sweep costs
// about 8·m·n·K flops, GEMM-bound. After the last sweep the scales are
// solved once more. A negative scale is made positive by flipping the signs
// it multiplies (Ŵ unchanged), so h, ℓ, g stay ≥ 0 as Dual-SVID leaves them;
// then each path's scales are rebalanced (rms(h) = rms(ℓ) = rms(g)). A scale
// solve whose system is singular keeps the values it had.
//
// Under an input Gram C = XᵀX/N (the inputs' second moments; `input_gram`)
// the objective is the output error tr((W − Ŵ)·C·(W − Ŵ)ᵀ) = ‖X(W − Ŵ)ᵀ‖²/N
// instead, with the same steps generalised: ℓ and h as above with C inside
// the products; g jointly over all columns (C couples them; a P·n system);
// S_U's columns exactly as above (C only changes the projection); S_V's by
// exact single flips, each taken only when it lowers the error (C couples
// a column's signs, so no closed form). The error never rises either way.
// C = I gives the unweighted result (up to rounding); C = diag(c²) the
// objective of the activation-weighted init's W·diag(c).
#pragma once

#include <span>
#include <vector>

#include "bitrank/blr/blr_matrix.hpp"

namespace bitrank::blr {

// Refines `blr` in place towards W [m][n] row-major (blr.m × blr.n) by
// `sweeps` sweeps (≥ 0; 0 leaves it as it is). Returns the relative error
// ‖W − Ŵ‖/‖W‖ (under `input_gram`, [n][n] or empty: relative_output_error)
// after each sweep, for reports and tests (none when W = 0, which leaves
// `blr` as it is). Error when the shapes disagree or the Gram is bad
// (check_gram).
std::vector<double> refine(HostBlrMatrix& blr, std::span<const float> w, int sweeps, std::span<const float> input_gram = {});

}  // namespace bitrank::blr
