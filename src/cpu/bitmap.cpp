// CPU backend of the sign bitmaps (contract: include/bitrank/ops/bitmap.hpp).
#include "cpu/kernels.hpp"
#include "cpu/ops.hpp"

namespace bitrank::cpu {
namespace {

class CpuBitmapOps final : public BitmapOps<float> {
 public:
  explicit CpuBitmapOps(ThreadPool& pool) : pool_(pool) {}

 protected:
  void expand_signs_impl(CView<std::uint32_t> bits, index_t r, View<f16> plane, View<f16> plane_t) override {
    expand_sign_planes<f16>(bits.data, bits.dim(0), r, plane.data, plane_t.data, pool_);
  }

  void pack_signs_impl(CView<float> signs, View<std::uint32_t> bits) override {
    const index_t r = signs.dim(1), words = bits.dim(1);
    pool_.parallel_for(signs.dim(0), [&](index_t i0, index_t i1) {
      for (index_t i = i0; i < i1; ++i) {
        const float* s = signs.data + i * r;
        for (index_t w = 0; w < words; ++w) {
          std::uint32_t word = 0;
          const index_t k1 = std::min<index_t>(r, (w + 1) * 32);
          for (index_t k = w * 32; k < k1; ++k) word |= static_cast<std::uint32_t>(s[k] >= 0.0f) << (k - w * 32);
          bits[i * words + w] = word;
        }
      }
    });
  }

 private:
  ThreadPool& pool_;
};

}  // namespace

std::unique_ptr<BitmapOps<float>> make_bitmap_ops(ThreadPool& pool) { return std::make_unique<CpuBitmapOps>(pool); }

}  // namespace bitrank::cpu
