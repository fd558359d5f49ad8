// The pieces of the truncated SVD (include/bitrank/blr/svd.hpp) that its
// engines share, so that the CPU (src/blr/svd.cpp) and the GPU
// (src/cuda/svd.cu) apply one set of input checks, one sketch width and
// one sign convention. Plain C++: no LAPACK or CUDA types.
#pragma once

#include <algorithm>
#include <span>
#include <string_view>

#include "bitrank/blr/svd.hpp"

namespace bitrank::blr::detail {

// The Error of truncated_svd's contract for a bad shape, size, rank,
// option or a non-finite entry of a.
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

// f.u, f.s, f.v hold an engine's k triplets (u [m][k], v [n][k] row-major,
// any signs): flips each pair (u_c, v_c) so that u_c's largest-magnitude
// entry is positive — the first of those within 1e-9 (relative) of the
// largest, so rounding differences between engines do not flip a pair.
void normalize_signs(SvdF64& f);

}  // namespace bitrank::blr::detail
