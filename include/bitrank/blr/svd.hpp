// Truncated SVD of a row-major f32 matrix A [m][n] ≈ U·diag(S)·Vᵀ at rank r,
// for the Dual-SVID initialisation (DESIGN §6).
//
// Outputs: U [m][r], S [r] (non-increasing, ≥ 0), V [n][r], all row-major
// f32. When r > min(m, n) the ranks past min(m, n) are padded: S = 0 and
// zero columns in U and V. Each pair (u_k, v_k) is signed so that the entry
// of largest magnitude in u_k is positive (the first within 1e-9 of it:
// engines that differ by rounding pick the same entry), so
// the output does not depend on LAPACK's arbitrary signs. SvdF64 is the
// same factorisation before the rounding to f32 and the padding (the signs
// are chosen on it), for callers and tests that compare engines in f64.
//
// Methods:
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
//   automatic   exact when min(m, n) ≤ kExactSvdMaxDim or the sketch would
//               be as wide as min(m, n); randomized otherwise.
//
// Engines: truncated_svd_f64 is the CPU engine above; make_cuda_svd_engine
// (CUDA builds only, src/cuda/svd.cu) gives a GPU engine with the same
// contract — cuSOLVER gesvd for exact, the same range finder on cuBLAS f64
// GEMMs from the same Ω for randomized — so the caller picks one at run
// time by device (an empty SvdEngine means the CPU one). No CUDA type
// appears here: the CPU build and its callers do not change.
//
// Deterministic: Ω comes from XorShift(seed) (rng.hpp) by Box–Muller, so
// the same A, r and options give the same bits on a given machine, OpenBLAS
// build and thread count (GPU: on a given GPU model and CUDA version).
//
// Errors (bitrank::Error, naming the matrix): a.size() ≠ m·n, m or n < 1,
// r < 1, a non-finite entry (with its row and column), oversampling < 0,
// power iterations < 0, a LAPACK (cuSOLVER, CUDA) failure.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "bitrank/tensor.hpp"

namespace bitrank::blr {

enum class SvdMethod : std::uint8_t { automatic, exact, randomized };

inline constexpr index_t kExactSvdMaxDim = 1024;

struct SvdOptions {
  SvdMethod method = SvdMethod::automatic;
  index_t oversampling = 32;  // p: the sketch has r + p columns
  int power_iters = 2;        // q
  std::uint64_t seed = 0;     // of the Gaussian sketch
};

struct Svd {
  index_t m = 0, n = 0, r = 0;
  std::vector<float> u;  // [m][r]
  std::vector<float> s;  // [r]
  std::vector<float> v;  // [n][r]
  SvdMethod method = SvdMethod::exact;  // the one that ran
};

// The factors in f64 before rounding: k = min(r, m, n) triplets, u [m][k],
// s [k], v [n][k] row-major, signs already normalised; r is kept for the
// padding to_svd adds.
struct SvdF64 {
  index_t m = 0, n = 0, r = 0, k = 0;
  std::vector<double> u, s, v;
  SvdMethod method = SvdMethod::exact;
  std::size_t device_bytes = 0;  // the GPU engine's peak device memory for the call; 0 on the CPU
};

// A truncated-SVD engine: truncated_svd_f64's arguments, contract and
// errors. `name` names A in errors.
using SvdEngine = std::function<SvdF64(std::span<const float> a, index_t m, index_t n, index_t r,
                                       const SvdOptions& opts, std::string_view name)>;

// The method `automatic` resolves to for this shape and rank.
SvdMethod svd_method_for(index_t m, index_t n, index_t r, const SvdOptions& opts);

// The CPU engine (LAPACK / OpenBLAS).
SvdF64 truncated_svd_f64(std::span<const float> a, index_t m, index_t n, index_t r, const SvdOptions& opts = {},
                         std::string_view name = "matrix");

// f64 factors → the f32 Svd, padded to rank f.r.
Svd to_svd(const SvdF64& f);

// to_svd(engine(...)), the CPU engine when `engine` is empty.
Svd truncated_svd(std::span<const float> a, index_t m, index_t n, index_t r, const SvdOptions& opts = {},
                  std::string_view name = "matrix", const SvdEngine& engine = {});

// The GPU engine on CUDA device `device` (defined only in builds with
// BITRANK_HAS_CUDA; Error when the device is not visible). It owns a
// stream and its cuBLAS / cuSOLVER handles; calls from several threads take
// turns (one SVD at a time on the device).
SvdEngine make_cuda_svd_engine(int device = 0);

// `large` for matrices with min(m, n) ≥ min_dim, the CPU engine below. A GPU
// engine runs one SVD at a time while the CPU runs one per pool thread, so
// many small matrices finish sooner on the CPU (SmolLM2-135M's 210, at most
// 1536 × 576: 29.9 s on the H200's engine, 5.3 s on its 16 cores) and large
// ones on the GPU (5120², r = 1024, randomized: 0.85 s vs 3.9 s).
SvdEngine route_by_size(SvdEngine large, index_t min_dim);

}  // namespace bitrank::blr
