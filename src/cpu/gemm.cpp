// CPU backend of staging and the f16 GEMM (contract: include/bitrank/ops/gemm.hpp).
//
// Staging computes each value with cpu::staged_value (the f32 arithmetic
// every backend shares) and stores its f16. The GEMM widens both f16
// operands to f32 — exact — and runs OpenBLAS sgemm with alpha = oscale and
// beta = 0, writing straight into the (possibly column-sliced) output: the
// products are the ones an f16 tensor-core GEMM forms, summed in f32.
#include <algorithm>
#include <vector>

#include "cpu/kernels.hpp"
#include "cpu/ops.hpp"

namespace bitrank::cpu {
namespace {

// Rows per chunk so that one chunk is roughly 16k elements of work.
index_t row_grain(index_t width) { return std::max<index_t>(1, 16384 / std::max<index_t>(width, 1)); }

f16 staged_half(float src, float col, float scale) { return to_f16(staged_value(src, col, scale)); }

class CpuGemmOps final : public GemmOps<float> {
 public:
  explicit CpuGemmOps(ThreadPool& pool) : pool_(pool) {}

 protected:
  void stage_impl(CView<float> src, CView<float> col, float scale, View<f16> dst) override {
    stage_rows(src.data, src.dim(1), src.dim(0), has_col(col) ? col.data : nullptr, scale, dst);
  }

  void stage_cols_impl(CView<float> src, index_t col0, float scale, View<f16> dst) override {
    stage_rows(src.data + col0, src.dim(1), src.dim(0), nullptr, scale, dst);
  }

  // Blocks of kBlock destination rows (source columns) per task: each task
  // reads a kBlock-wide strip of every source row and writes kBlock
  // destination rows, token by token.
  void stage_transposed_impl(CView<float> src, CView<float> col, float scale, View<f16> dst) override {
    constexpr index_t kBlock = 32;
    const index_t ntok = src.dim(0), k = src.dim(1), rows = dst.dim(0), tokens = dst.dim(1);
    const float* factor = has_col(col) ? col.data : nullptr;
    pool_.parallel_for((rows + kBlock - 1) / kBlock, [&](index_t b0, index_t b1) {
      for (index_t b = b0; b < b1; ++b) {
        const index_t j0 = b * kBlock, j1 = std::min(rows, j0 + kBlock), jk = std::min(k, j1);
        for (index_t t = 0; t < ntok; ++t) {
          const float* s = src.data + t * k;
          for (index_t j = j0; j < jk; ++j) dst[j * tokens + t] = staged_half(s[j], factor ? factor[j] : 1.0f, scale);
        }
        for (index_t j = j0; j < j1; ++j) {
          f16* d = dst.data + j * tokens;
          std::fill(d + (j < k ? ntok : 0), d + tokens, f16{});
        }
      }
    });
  }

  void gemm_impl(CView<f16> act, CView<f16> plane, float oscale, View<float> out) override {
    const index_t m = out.dim(0), n = out.dim(1), k = act.dim(1);
    std::vector<float> a(static_cast<std::size_t>(m * k)), b(static_cast<std::size_t>(n * k));
    widen(act.data, m, k, a.data());
    widen(plane.data, n, k, b.data());
    sgemm(false, true, m, n, k, oscale, a.data(), k, b.data(), k, 0.0f, out.data, out.ld());
  }

 private:
  // stage and stage_cols: dst row t < m is row t of src (row stride ld; its
  // first dst.dim(1) values, times factor where there is one) staged; rows
  // ≥ m are 0.
  void stage_rows(const float* src, index_t ld, index_t m, const float* factor, float scale, View<f16> dst) {
    const index_t k = dst.dim(1);
    pool_.parallel_for(
        dst.dim(0),
        [&](index_t t0, index_t t1) {
          for (index_t t = t0; t < t1; ++t) {
            f16* d = dst.data + t * k;
            if (t >= m) {
              std::fill(d, d + k, f16{});
              continue;
            }
            const float* s = src + t * ld;
            if (factor) {
              for (index_t j = 0; j < k; ++j) d[j] = staged_half(s[j], factor[j], scale);
            } else {
              for (index_t j = 0; j < k; ++j) d[j] = staged_half(s[j], 1.0f, scale);
            }
          }
        },
        row_grain(k));
  }

  // dst[rows][k] = the f32 values of src[rows][k] (exact).
  void widen(const f16* src, index_t rows, index_t k, float* dst) {
    pool_.parallel_for(
        rows,
        [&](index_t r0, index_t r1) {
          for (index_t i = r0 * k; i < r1 * k; ++i) dst[i] = to_f32(src[i]);
        },
        row_grain(k));
  }

  ThreadPool& pool_;
};

}  // namespace

std::unique_ptr<GemmOps<float>> make_gemm_ops(ThreadPool& pool) { return std::make_unique<CpuGemmOps>(pool); }

}  // namespace bitrank::cpu
