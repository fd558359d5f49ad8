// Sign bitmaps (DESIGN §1): row-major [rows][words], words = ceil(r/32);
// bit j of word w is rank 32w+j; 1 means +1, 0 means −1. Bits past r in the
// last word are 0 after pack and ignored by expand.
//
// expand writes the ±1 plane [rows][r] and its transpose [r][rows] (both
// overwritten, exact in f16); pack writes bits from real values with
// sign(0) = +1 (overwritten).
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>

#include "bitrank/dtype.hpp"
#include "bitrank/ops/check.hpp"
#include "bitrank/tensor.hpp"

namespace bitrank {

inline index_t sign_words(index_t r) { return (r + 31) / 32; }

// Whether rank k of one bitmap row is +1 (its bit is set).
inline bool sign_bit(const std::uint32_t* row, index_t k) { return (row[k / 32] >> (k % 32)) & 1u; }

// Sign blocks: a path's bitmaps regrouped so that one word of 16 rows is 16
// consecutive words, the layout of blr_infer's lookup kernel on the CPU
// (BlrPath::sign_u_blocks, sign_vt_blocks; cpu/blr_infer.cpp):
//   u blocks  [⌈m/16⌉][r/32][16]: [b][w][l] = word w of S_U's row 16b + l
//             (0 past row m);
//   vt blocks [r/16][⌈n/32⌉][16]: [b][w][l] = word w of S_Vᵀ's row 16b + l,
//             i.e. bit i of it is set where S_V[32w + i][16b + l] is +1 (0
//             past input n).
// r is a multiple of 32 (BLR layers).
inline index_t sign_blocks_u_words(index_t m, index_t r) { return (m + 15) / 16 * sign_words(r) * 16; }
inline index_t sign_blocks_vt_words(index_t n, index_t r) { return r * sign_words(n); }
inline Shape sign_blocks_u_shape(index_t m, index_t r) { return Shape{(m + 15) / 16, sign_words(r), 16}; }
inline Shape sign_blocks_vt_shape(index_t n, index_t r) { return Shape{r / 16, sign_words(n), 16}; }
// Both of one path, u then vt, as make_sign_blocks writes them.
inline index_t sign_blocks_words(index_t m, index_t n, index_t r) {
  return sign_blocks_u_words(m, r) + sign_blocks_vt_words(n, r);
}

// u blocks of S_U [m][r/32] into out (sign_blocks_u_words(m, r), overwritten).
inline void make_sign_blocks_u(const std::uint32_t* bits, index_t m, index_t r, std::uint32_t* out) {
  const index_t words = sign_words(r), blocks = (m + 15) / 16;
  for (index_t b = 0; b < blocks; ++b)
    for (index_t w = 0; w < words; ++w)
      for (index_t l = 0; l < 16; ++l) {
        const index_t j = 16 * b + l;
        out[(b * words + w) * 16 + l] = j < m ? bits[j * words + w] : 0u;
      }
}

// vt blocks of S_V [n][r/32] into out (sign_blocks_vt_words(n, r), overwritten).
inline void make_sign_blocks_vt(const std::uint32_t* bits, index_t n, index_t r, std::uint32_t* out) {
  const index_t words = sign_words(r), wn = sign_words(n);
  std::fill(out, out + sign_blocks_vt_words(n, r), 0u);
  for (index_t i = 0; i < n; ++i)
    for (index_t w = 0; w < words; ++w)
      for (std::uint32_t word = bits[i * words + w]; word != 0; word &= word - 1) {
        const index_t k = 32 * w + std::countr_zero(word);
        out[(k / 16 * wn + i / 32) * 16 + k % 16] |= 1u << (i % 32);
      }
}

// The u blocks of S_U [m][r/32], then the vt blocks of S_V [n][r/32], into
// out (sign_blocks_words(m, n, r), overwritten).
inline void make_sign_blocks(const std::uint32_t* bits_u, const std::uint32_t* bits_v, index_t m, index_t n, index_t r,
                             std::uint32_t* out) {
  make_sign_blocks_u(bits_u, m, r, out);
  make_sign_blocks_vt(bits_v, n, r, out + sign_blocks_u_words(m, r));
}

// The inverses: S_U [m][r/32] from u blocks, S_V [n][r/32] from vt blocks (overwritten).
inline void sign_bitmap_from_blocks_u(const std::uint32_t* blocks, index_t m, index_t r, std::uint32_t* bits) {
  const index_t words = sign_words(r);
  for (index_t j = 0; j < m; ++j)
    for (index_t w = 0; w < words; ++w) bits[j * words + w] = blocks[(j / 16 * words + w) * 16 + j % 16];
}
inline void sign_bitmap_from_blocks_vt(const std::uint32_t* blocks, index_t n, index_t r, std::uint32_t* bits) {
  const index_t words = sign_words(r), wn = sign_words(n);
  std::fill(bits, bits + n * words, 0u);
  for (index_t k = 0; k < r; ++k)
    for (index_t w = 0; w < wn; ++w)
      for (std::uint32_t word = blocks[(k / 16 * wn + w) * 16 + k % 16]; word != 0; word &= word - 1) {
        const index_t i = 32 * w + std::countr_zero(word);
        bits[i * words + k / 32] |= 1u << (k % 32);
      }
}

template <class T>
class BitmapOps {
 public:
  virtual ~BitmapOps() = default;

  void expand_signs(CView<std::uint32_t> bits, index_t r, View<f16> plane, View<f16> plane_t) {
    constexpr std::string_view op = "expand_signs";
    check::rank(op, "bits", bits, 2);
    check::contiguous(op, "bits", bits);
    const index_t rows = bits.dim(0);
    check::positive(op, "r", r);
    check::require(bits.dim(1) == sign_words(r), op, "bits {} has {} words per row, rank {} needs {}", bits.shape.str(), bits.dim(1), r, sign_words(r));
    check::dense(op, "plane", plane, Shape{rows, r});
    check::dense(op, "plane_t", plane_t, Shape{r, rows});
    expand_signs_impl(bits, r, plane, plane_t);
  }

  // bits[rows][words] from signs[rows][r]: bit = (s >= 0).
  void pack_signs(CView<T> signs, View<std::uint32_t> bits) {
    constexpr std::string_view op = "pack_signs";
    check::rank(op, "signs", signs, 2);
    check::contiguous(op, "signs", signs);
    const index_t rows = signs.dim(0), r = signs.dim(1);
    check::dense(op, "bits", bits, Shape{rows, sign_words(r)});
    pack_signs_impl(signs, bits);
  }

 protected:
  virtual void expand_signs_impl(CView<std::uint32_t> bits, index_t r, View<f16> plane, View<f16> plane_t) = 0;
  virtual void pack_signs_impl(CView<T> signs, View<std::uint32_t> bits) = 0;
};

}  // namespace bitrank
