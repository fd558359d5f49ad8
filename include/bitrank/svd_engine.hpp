// The truncated-SVD engine contract, below both of its engines: the CPU one
// (LAPACK / OpenBLAS, blr/svd.hpp, which the Dual-SVID initialisation calls)
// and the GPU one (cuSOLVER / cuBLAS, src/cuda/svd.cu). Both take a
// row-major f32 A [m][n] and return its first k = min(r, m, n) singular
// triplets in f64 (SvdF64); the input checks, the method choice, the sketch
// width and the sign convention below are the one set both apply, so that
// they answer the same inputs with the same errors and signs. Plain C++: no
// LAPACK or CUDA types, so blr never sees the GPU engine's headers and the
// GPU engine never reaches up into blr.
//
// Sign convention: each pair (u_c, v_c) is signed so that the entry of
// largest magnitude in u_c is positive — the first within 1e-9 (relative)
// of it, so engines that differ by rounding pick the same entry — and the
// output does not depend on a solver's arbitrary signs.
//
// Errors (bitrank::Error, naming the matrix): a.size() ≠ m·n, m or n < 1,
// r < 1, a non-finite entry (with its row and column), oversampling < 0,
// power iterations < 0, a solver failure.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

#include "bitrank/tensor.hpp"

namespace bitrank {

// exact: a full thin SVD; randomized: the range finder of Halko, Martinsson
// & Tropp (2011) then an exact SVD of the small projection (blr/svd.hpp).
enum class SvdMethod : std::uint8_t { automatic, exact, randomized };

inline constexpr index_t kExactSvdMaxDim = 1024;

struct SvdOptions {
  SvdMethod method = SvdMethod::automatic;
  index_t oversampling = 32;  // p: the sketch has r + p columns
  int power_iters = 2;        // q
  std::uint64_t seed = 0;     // of the Gaussian sketch
};

// The factors in f64: k = min(r, m, n) triplets, u [m][k], s [k] (non-
// increasing, ≥ 0), v [n][k] row-major, signs normalised; r is kept for the
// padding blr::to_svd adds.
struct SvdF64 {
  index_t m = 0, n = 0, r = 0, k = 0;
  std::vector<double> u, s, v;
  SvdMethod method = SvdMethod::exact;
  std::size_t device_bytes = 0;  // the GPU engine's peak device memory for the call; 0 on the CPU
};

// A truncated-SVD engine: the arguments, contract and errors above. `name`
// names A in errors.
using SvdEngine = std::function<SvdF64(std::span<const float> a, index_t m, index_t n, index_t r,
                                       const SvdOptions& opts, std::string_view name)>;

// The method `automatic` resolves to for this shape and rank: exact when
// min(m, n) ≤ kExactSvdMaxDim or the sketch would be as wide as min(m, n);
// randomized otherwise.
SvdMethod svd_method_for(index_t m, index_t n, index_t r, const SvdOptions& opts);

// The GPU engine on CUDA device `device` (defined only in builds with
// BITRANK_HAS_CUDA; Error when the device is not visible). It owns a
// stream and its cuBLAS / cuSOLVER handles; calls from several threads take
// turns (one SVD at a time on the device).
SvdEngine make_cuda_svd_engine(int device = 0);

// The pieces every engine applies (src/core/svd_engine.cpp), not for callers.
namespace detail {

// The Error of the contract for a bad shape, size, rank, option or a
// non-finite entry of a.
void check_svd_input(std::span<const float> a, index_t m, index_t n, index_t r, const SvdOptions& opts,
                     std::string_view name);

// k = min(r, m, n): the triplets an engine computes.
inline index_t svd_triplets(index_t m, index_t n, index_t r) { return std::min(r, std::min(m, n)); }

// l = min(k + oversampling, min(m, n)): the randomized sketch's columns.
inline index_t sketch_columns(index_t m, index_t n, index_t k, const SvdOptions& opts) {
  return std::min(k + opts.oversampling, std::min(m, n));
}

// The result's shape fields (m, n, r, k, the method svd_method_for picks),
// no factors yet.
inline SvdF64 svd_frame(index_t m, index_t n, index_t r, const SvdOptions& opts) {
  SvdF64 f;
  f.m = m;
  f.n = n;
  f.r = r;
  f.k = svd_triplets(m, n, r);
  f.method = svd_method_for(m, n, r, opts);
  return f;
}

// f.u, f.s, f.v hold an engine's k triplets (any signs): flips each pair
// into the sign convention above.
void normalize_signs(SvdF64& f);

}  // namespace detail
}  // namespace bitrank
