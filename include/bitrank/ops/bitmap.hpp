// Sign bitmaps (DESIGN §1): row-major [rows][words], words = ceil(r/32);
// bit j of word w is rank 32w+j; 1 means +1, 0 means −1. Bits past r in the
// last word are 0 after pack and ignored by expand.
//
// expand writes the ±1 plane [rows][r] and its transpose [r][rows] (both
// overwritten, exact in f16); pack writes bits from real values with
// sign(0) = +1 (overwritten).
#pragma once

#include <cstdint>

#include "bitrank/dtype.hpp"
#include "bitrank/ops/check.hpp"
#include "bitrank/tensor.hpp"

namespace bitrank {

inline index_t sign_words(index_t r) { return (r + 31) / 32; }

// Whether rank k of one bitmap row is +1 (its bit is set).
inline bool sign_bit(const std::uint32_t* row, index_t k) { return (row[k / 32] >> (k % 32)) & 1u; }

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
