// Truncated SVD of a row-major f32 matrix A [m][n] ≈ U·diag(S)·Vᵀ at rank r,
// for the Dual-SVID initialisation (DESIGN §6): the CPU engine and the f32
// result. The engine contract (SvdOptions, SvdF64, SvdEngine, the checks and
// the sign convention) lives below blr in bitrank/svd_engine.hpp, shared with
// the GPU engine (src/cuda/svd.cu, make_cuda_svd_engine there).
//
// Outputs: U [m][r], S [r] (non-increasing, ≥ 0), V [n][r], all row-major
// f32. When r > min(m, n) the ranks past min(m, n) are padded: S = 0 and
// zero columns in U and V. Signs as svd_engine.hpp fixes them. SvdF64 is the
// same factorisation before the rounding to f32 and the padding (the signs
// are chosen on it), for callers and tests that compare engines in f64.
//
// Methods of the CPU engine:
//   exact       LAPACKE dgesdd (divide and conquer, thin 'S' vectors) on an
//               f64 copy of A. f64 rather than sgesdd: the factors then
//               carry no solver error above the f32 rounding of the input
//               (U and V orthonormal to ~1e-15 before the final rounding),
//               so the tests can hold init to f32 tolerances; gesdd rather
//               than gesvd because it is several times faster for thin
//               vectors. Costs O(m·n·min(m, n)): used up to kExactSvdMaxDim.
//   randomized  Halko, Martinsson & Tropp (2011), Alg. 4.4 + 5.1, in f32:
//               Ω [n][l] Gaussian (l = min(k + oversampling, min(m, n)),
//               k = min(r, min(m, n))); Y = A·Ω; Q = qr(Y); q times:
//               Q = qr(A·qr(Aᵀ·Q)) (re-orthonormalised at every product,
//               sgeqrf + sorgqr); B = Qᵀ·A [l][n]; B = Ũ·S·Vᵀ by the exact
//               method (f64, small); U = Q·Ũ (dgemm). The passes over A are
//               OpenBLAS sgemm.
//               Costs O((2q + 2)·m·n·l).
//   automatic   svd_method_for: exact when min(m, n) ≤ kExactSvdMaxDim or
//               the sketch would be as wide as min(m, n); randomized otherwise.
//
// Engines: truncated_svd_f64 is the CPU engine above; make_cuda_svd_engine
// (CUDA builds only) gives a GPU engine with the same contract — cuSOLVER
// gesvd for exact, the same range finder on cuBLAS f64 GEMMs from the same
// Ω for randomized — so the caller picks one at run time by device (an
// empty SvdEngine means the CPU one). No CUDA type appears here: the CPU
// build and its callers do not change.
//
// Deterministic: Ω comes from XorShift(seed) (rng.hpp) by Box–Muller, so
// the same A, r and options give the same bits on a given machine, OpenBLAS
// build and thread count (GPU: on a given GPU model and CUDA version).
//
// Errors: svd_engine.hpp's, and a LAPACK failure.
#pragma once

#include <span>
#include <string_view>
#include <vector>

#include "bitrank/svd_engine.hpp"
#include "bitrank/tensor.hpp"

namespace bitrank::blr {

struct Svd {
  index_t m = 0, n = 0, r = 0;
  std::vector<float> u;  // [m][r]
  std::vector<float> s;  // [r]
  std::vector<float> v;  // [n][r]
  SvdMethod method = SvdMethod::exact;  // the one that ran
};

// The CPU engine (LAPACK / OpenBLAS).
SvdF64 truncated_svd_f64(std::span<const float> a, index_t m, index_t n, index_t r, const SvdOptions& opts = {},
                         std::string_view name = "matrix");

// f64 factors → the f32 Svd, padded to rank f.r.
Svd to_svd(const SvdF64& f);

// to_svd(engine(...)), the CPU engine when `engine` is empty.
Svd truncated_svd(std::span<const float> a, index_t m, index_t n, index_t r, const SvdOptions& opts = {},
                  std::string_view name = "matrix", const SvdEngine& engine = {});

// `large` for matrices with min(m, n) ≥ min_dim, the CPU engine below. A GPU
// engine runs one SVD at a time while the CPU runs one per pool thread, so
// many small matrices finish sooner on the CPU (SmolLM2-135M's 210, at most
// 1536 × 576: 29.9 s on the H200's engine, 5.3 s on its 16 cores) and large
// ones on the GPU (5120², r = 1024, randomized: 0.85 s vs 3.9 s).
SvdEngine route_by_size(SvdEngine large, index_t min_dim);

}  // namespace bitrank::blr
