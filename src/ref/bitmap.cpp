// f64 reference of the sign bitmaps (contract: include/bitrank/ops/bitmap.hpp).
#include "ref/ops.hpp"

namespace bitrank::ref {
namespace {

class RefBitmapOps final : public BitmapOps<double> {
 protected:
  void expand_signs_impl(CView<std::uint32_t> bits, index_t r, View<f16> plane, View<f16> plane_t) override {
    const index_t rows = bits.dim(0), words = bits.dim(1);
    const f16 plus{0x3c00}, minus{0xbc00};
    for (index_t i = 0; i < rows; ++i)
      for (index_t k = 0; k < r; ++k) {
        const bool bit = sign_bit(bits.data + i * words, k);
        plane[i * r + k] = bit ? plus : minus;
        plane_t[k * rows + i] = bit ? plus : minus;
      }
  }

  void pack_signs_impl(CView<double> signs, View<std::uint32_t> bits) override {
    const index_t rows = signs.dim(0), r = signs.dim(1), words = bits.dim(1);
    for (index_t i = 0; i < rows * words; ++i) bits[i] = 0;
    for (index_t i = 0; i < rows; ++i)
      for (index_t k = 0; k < r; ++k)
        if (signs[i * r + k] >= 0) bits[i * words + k / 32] |= 1u << (k % 32);
  }
};

}  // namespace

std::unique_ptr<BitmapOps<double>> make_bitmap_ops() { return std::make_unique<RefBitmapOps>(); }

}  // namespace bitrank::ref
