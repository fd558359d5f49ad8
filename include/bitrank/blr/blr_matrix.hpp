// A BLR matrix on the host (DESIGN §1): what initialisation produces, the
// trainer uploads and downloads, and the bitrank format saves.
//
//     Ŵ = Σ_p diag(h_p) · S_U,p · diag(ℓ_p) · S_V,pᵀ · diag(g_p)      (m×n)
//
// Signs are bitmaps in the layout of ops/bitmap.hpp: row-major
// [rows][r/32] u32 words, bit j of word w is rank 32w+j, 1 means +1.
// Scales are f32 here (the format may store them as f16).
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "bitrank/tensor.hpp"

namespace bitrank::blr {

struct HostBlrPath {
  std::vector<std::uint32_t> sign_u;  // S_U [m][r/32]
  std::vector<std::uint32_t> sign_v;  // S_V [n][r/32]
  std::vector<float> h;               // [m]
  std::vector<float> l;               // ℓ [r]
  std::vector<float> g;               // [n]
};

struct HostBlrMatrix {
  index_t m = 0, n = 0, r = 0;  // r a multiple of 32
  std::vector<HostBlrPath> paths;
};

// Checks the shape of `blr`: m, n ≥ 1, r a positive multiple of 32, one or
// two paths, every bitmap and scale vector of its stated size. Error names
// `what` and the field otherwise.
void check_blr(const HostBlrMatrix& blr, std::string_view what);

// Ŵ [m][n] row-major in f64: the sum over paths of
// diag(h)·S_U·diag(ℓ)·S_Vᵀ·diag(g), from the f32 scales as stored. Checks
// `blr` first.
std::vector<double> reconstruct(const HostBlrMatrix& blr);

// ‖W − Ŵ‖_F / ‖W‖_F in f64 for W [m][n] row-major (Error when w.size() ≠ m·n
// or W = 0). With column weights c [n]: ‖(W − Ŵ)·diag(c)‖_F / ‖W·diag(c)‖_F —
// with c the rms of each input column, the relative error of the outputs
// x·Ŵᵀ against x·Wᵀ on inputs whose columns are uncorrelated.
double relative_error(std::span<const float> w, const HostBlrMatrix& blr, std::span<const float> column_weight = {});

// An input Gram matrix C = XᵀX/N [n][n] (row-major, symmetric, finite, a
// non-negative diagonal) of a matrix's inputs X [N][n]; empty is allowed
// (no weighting). Error naming `what` otherwise.
void check_gram(std::span<const float> gram, index_t n, std::string_view what);

// The relative output error under C: √(tr((W−Ŵ)·C·(W−Ŵ)ᵀ) / tr(W·C·Wᵀ)) =
// ‖X·(W−Ŵ)ᵀ‖/‖X·Wᵀ‖ for the inputs X whose Gram C is (in f64). Error for a
// bad C or W·C·Wᵀ = 0.
double relative_output_error(std::span<const float> w, const HostBlrMatrix& blr, std::span<const float> gram);

}  // namespace bitrank::blr
