// Staging and the f16 tensor-core GEMM of the trainer (seed 000).
//
// The GEMM reads f16 operands and accumulates in f32:
//     out[m][n] = (act[m][k] · plane[n][k]ᵀ) · oscale
// act is an activation staged by `stage`: rows padded to kGemmRowTile (the
// padded rows are zero and never read into out), each column multiplied by
// an optional factor and everything by a power-of-two `scale` that keeps
// gradients out of the f16 subnormals; the GEMM's `oscale` = 1/scale takes
// it back out. `plane` is a ±1 sign plane or a frozen dense weight in f16.
//
// Staging value of element (t, j): f16( f32( f32(src·col) · scale ) ) — the
// products are formed in f32 in that order, from src and col as f32 (the f64
// reference rounds its operands to f32 and does the same f32 arithmetic, so
// staging is bit-exact across backends; round to nearest even, overflow to
// ±inf, NaN stays NaN). Without a column factor the value is f16(f32(src·scale)),
// which is the same number. Transposed staging writes the same f16 values
// transposed, tokens padded to 32.
//
// GEMM numerics: f16 × f16 products are exact in f32, so backends differ only
// in how they sum: f32 accumulation (cpu, cuda), f64 (ref); oscale is applied
// once to the sum.
//
// Overwrite/accumulate: every op overwrites its output (stage: all
// pad_rows(m)·k elements including the zero rows; gemm: the m×n block of
// out, leaving other columns of a wider out untouched).
#pragma once

#include "bitrank/dtype.hpp"
#include "bitrank/ops/check.hpp"
#include "bitrank/tensor.hpp"

namespace bitrank {

inline constexpr index_t kGemmRowTile = 128;   // activation rows are padded to this
inline constexpr index_t kTokenTile = 32;      // transposed staging pads tokens to this
inline index_t pad_rows(index_t m) { return (m + kGemmRowTile - 1) / kGemmRowTile * kGemmRowTile; }
inline index_t pad_tokens(index_t t) { return (t + kTokenTile - 1) / kTokenTile * kTokenTile; }

template <class T>
class GemmOps {
 public:
  virtual ~GemmOps() = default;

  // dst[pad_rows(m)][k] = f16(src[m][k] · col[k] · scale); rows ≥ m are 0.
  // `col` may be absent: a view without data (a default-constructed CView).
  void stage(CView<T> src, CView<T> col, float scale, View<f16> dst) {
    constexpr std::string_view op = "stage";
    check::rank(op, "src", src, 2);
    check::contiguous(op, "src", src);
    const index_t m = src.dim(0), k = src.dim(1);
    if (has_col(col)) check::dense(op, "col", col, Shape{k});
    check::dense(op, "dst", dst, Shape{pad_rows(m), k});
    check::finite(op, "scale", scale);
    stage_impl(src, col, scale, dst);
  }

  // dst[pad_rows(m)][k] = f16(src[:, col0 : col0+k] · scale), src [m][width]
  // (a column block of a wider matrix, e.g. one vocabulary slice).
  void stage_cols(CView<T> src, index_t col0, float scale, View<f16> dst) {
    constexpr std::string_view op = "stage_cols";
    check::rank(op, "src", src, 2);
    check::contiguous(op, "src", src);
    check::rank(op, "dst", dst, 2);
    check::contiguous(op, "dst", dst);
    const index_t m = src.dim(0), k = dst.dim(1);
    check::require(dst.dim(0) == pad_rows(m), op, "dst has {} rows, expected pad_rows({}) = {}", dst.dim(0), m, pad_rows(m));
    check::require(col0 >= 0 && col0 + k <= src.dim(1), op, "columns [{}, {}) outside src {}", col0, col0 + k, src.shape.str());
    check::finite(op, "scale", scale);
    stage_cols_impl(src, col0, scale, dst);
  }

  // dst[pad_rows(k)][pad_tokens(ntok)] = the transpose of stage(src, col, scale)
  // for src [ntok][k]; padded tokens and rows are 0. `col` as in stage.
  void stage_transposed(CView<T> src, CView<T> col, float scale, View<f16> dst) {
    constexpr std::string_view op = "stage_transposed";
    check::rank(op, "src", src, 2);
    check::contiguous(op, "src", src);
    const index_t ntok = src.dim(0), k = src.dim(1);
    if (has_col(col)) check::dense(op, "col", col, Shape{k});
    check::dense(op, "dst", dst, Shape{pad_rows(k), pad_tokens(ntok)});
    check::finite(op, "scale", scale);
    stage_transposed_impl(src, col, scale, dst);
  }

  // out[m][n] = act[0:m][k] · plane[n][k]ᵀ · oscale. act has ≥ m rows (the
  // staged, padded operand); out may be a column slice of a wider matrix
  // (2-D view with row stride ≥ n).
  void gemm(CView<f16> act, CView<f16> plane, float oscale, View<T> out) {
    constexpr std::string_view op = "gemm";
    check::rank(op, "act", act, 2);
    check::contiguous(op, "act", act);
    check::rank(op, "plane", plane, 2);
    check::contiguous(op, "plane", plane);
    check::rank(op, "out", out, 2);
    const index_t m = out.dim(0), n = out.dim(1), k = act.dim(1);
    check::require(out.strides[1] == 1 && out.ld() >= n, op, "out {} must have unit column stride and row stride ≥ {}", out.shape.str(), n);
    check::require(act.dim(0) >= m, op, "act {} has fewer rows than out {}", act.shape.str(), out.shape.str());
    check::shape(op, "plane", plane, Shape{n, k});
    check::finite(op, "oscale", oscale);
    gemm_impl(act, plane, oscale, out);
  }

 protected:
  // Whether a column factor was given (an absent one has no data).
  static bool has_col(CView<T> col) { return col.data != nullptr; }

  virtual void stage_impl(CView<T> src, CView<T> col, float scale, View<f16> dst) = 0;
  virtual void stage_cols_impl(CView<T> src, index_t col0, float scale, View<f16> dst) = 0;
  virtual void stage_transposed_impl(CView<T> src, CView<T> col, float scale, View<f16> dst) = 0;
  virtual void gemm_impl(CView<f16> act, CView<f16> plane, float oscale, View<T> out) = 0;
};

}  // namespace bitrank
