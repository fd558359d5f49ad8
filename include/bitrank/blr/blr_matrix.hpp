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

}  // namespace bitrank::blr
