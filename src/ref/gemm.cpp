// f64 reference of staging and the f16 GEMM (contract: include/bitrank/ops/gemm.hpp).
//
// Staging is the one place the reference computes in f32: the staged f16
// values are part of the contract (bit-exact on every backend), so the
// reference forms f32(f32(src·col)·scale) from f32 operands exactly as the
// f32 backends do. The GEMM sums the exact f16 products in f64.
#include "ref/ops.hpp"

namespace bitrank::ref {
namespace {

// The staged f16 of one element; col = 1 stands for "no column factor"
// (src·1 is src exactly).
f16 staged(double src, double col, float scale) {
  const float product = static_cast<float>(src) * static_cast<float>(col);
  return to_f16(product * scale);
}

class RefGemmOps final : public GemmOps<double> {
 protected:
  void stage_impl(CView<double> src, CView<double> col, float scale, View<f16> dst) override {
    const index_t m = src.dim(0), k = src.dim(1), rows = dst.dim(0);
    for (index_t t = 0; t < rows; ++t)
      for (index_t j = 0; j < k; ++j)
        dst[t * k + j] = t < m ? staged(src[t * k + j], has_col(col) ? col[j] : 1.0, scale) : f16{};
  }

  void stage_cols_impl(CView<double> src, index_t col0, float scale, View<f16> dst) override {
    const index_t m = src.dim(0), width = src.dim(1), rows = dst.dim(0), k = dst.dim(1);
    for (index_t t = 0; t < rows; ++t)
      for (index_t j = 0; j < k; ++j) dst[t * k + j] = t < m ? staged(src[t * width + col0 + j], 1.0, scale) : f16{};
  }

  void stage_transposed_impl(CView<double> src, CView<double> col, float scale, View<f16> dst) override {
    const index_t ntok = src.dim(0), k = src.dim(1), rows = dst.dim(0), tokens = dst.dim(1);
    for (index_t j = 0; j < rows; ++j)
      for (index_t t = 0; t < tokens; ++t)
        dst[j * tokens + t] = (j < k && t < ntok) ? staged(src[t * k + j], has_col(col) ? col[j] : 1.0, scale) : f16{};
  }

  void gemm_impl(CView<f16> act, CView<f16> plane, float oscale, View<double> out) override {
    const index_t m = out.dim(0), n = out.dim(1), k = act.dim(1), ldo = out.ld();
    for (index_t i = 0; i < m; ++i)
      for (index_t j = 0; j < n; ++j) {
        double sum = 0;
        for (index_t l = 0; l < k; ++l) sum += static_cast<double>(to_f32(act[i * k + l])) * to_f32(plane[j * k + l]);
        out[i * ldo + j] = sum * oscale;
      }
  }
};

}  // namespace

std::unique_ptr<GemmOps<double>> make_gemm_ops() { return std::make_unique<RefGemmOps>(); }

}  // namespace bitrank::ref
