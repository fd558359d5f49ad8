// Rotary embedding (RoPE): plain (Llama-style q and k, no norm) and fused
// with a per-head q/k RMSNorm, as in gated full attention (DESIGN §2).
//
// Plain RoPE (rope_forward / rope_backward), per (row, head), same layout
// and table as below: y = R·x with the pair rotation below applied to x
// itself; the backward is the inverse rotation dx = Rᵀ·dy. Both overwrite
// their output; no parameters.
//
// Layout: x, y, dy, dx are [n][heads·hd] row-major, one row per token,
// n = windows·T; head u of a row is columns [u·hd, (u+1)·hd). The gain
// [hd] is shared by all heads. inv_rms is [n][heads]. The rotary table
// [T][half][2] holds (cos, sin) of the angle pos·θ^(−i/half) for the
// position pos = row mod T (each window of T tokens restarts at 0); build it
// with rope_table() so every backend rotates by the same numbers.
//
// Forward, per (row, head), with w_c = gain_c (GainStyle::plain) or
// 1 + gain_c (GainStyle::zero_centred, formed in the backend's precision):
//     inv = 1/√(Σ_c x_c²/hd + eps),   z_c = x_c·inv·w_c,
//     y_i      = z_i·cos_i − z_{i+half}·sin_i     (i < half)
//     y_{i+half} = z_i·sin_i + z_{i+half}·cos_i
//     y_c      = z_c                               (c ≥ 2·half)
// Backward, per (row, head): g = Rᵀ·dy (the inverse rotation), then
//     dx_c = inv·w_c·g_c − x_c·inv³/hd·Σ_j g_j·w_j·x_j
//     dgain_c += Σ_{rows, heads} g_c·x_c·inv   (∂w/∂gain = 1 in both styles)
//
// Overwrite/accumulate: y, inv_rms and dx are overwritten; dgain (a
// parameter gradient) accumulates. Outputs must not overlap inputs.
// Numerics: the CPU backend sums squares in f32 over 8 interleaved partial
// sums; the gain gradient is summed over fixed row blocks, so results do not
// depend on the number of threads.
#pragma once

#include <cmath>
#include <vector>

#include "bitrank/ops/check.hpp"
#include "bitrank/ops/norm.hpp"
#include "bitrank/tensor.hpp"

namespace bitrank {

struct QkNormRopeOptions {
  index_t heads = 0;                // heads per row; x has heads·hd columns
  float eps = 1e-6f;                // RMSNorm epsilon (the backward reads inv_rms instead)
  GainStyle gain = GainStyle::plain;  // zero_centred: the norm multiplies by 1 + gain
};

// The rotary table [window][half][2]: (cos, sin) of pos·θ^(−i/half),
// computed in f64 and rounded to T once.
template <class T>
std::vector<T> rope_table(index_t window, index_t half, double theta) {
  constexpr std::string_view op = "rope_table";
  check::positive(op, "window", window);
  check::positive(op, "half", half);
  check::finite(op, "theta", theta);
  check::require(theta > 0, op, "theta must be positive, got {}", theta);
  std::vector<T> table(static_cast<std::size_t>(window * half * 2));
  for (index_t pos = 0; pos < window; ++pos)
    for (index_t i = 0; i < half; ++i) {
      const double angle =
          static_cast<double>(pos) * std::pow(theta, -static_cast<double>(i) / static_cast<double>(half));
      table[static_cast<std::size_t>((pos * half + i) * 2)] = static_cast<T>(std::cos(angle));
      table[static_cast<std::size_t>((pos * half + i) * 2 + 1)] = static_cast<T>(std::sin(angle));
    }
  return table;
}

template <class T>
class RopeOps {
 public:
  virtual ~RopeOps() = default;

  // y [n][heads·hd] = R·x: pairs (i, i + half) of each head rotated by the
  // table's angle for the row's position; hd = x.dim(1) / heads.
  void rope_forward(CView<T> x, CView<T> table, index_t heads, View<T> y) {
    constexpr std::string_view op = "rope_forward";
    check_plain(op, x, table, heads);
    check::dense(op, "y", y, x.shape);
    rope_forward_impl(x, table, heads, y);
  }

  // dx [n][heads·hd] = Rᵀ·dy (overwritten): the backward of rope_forward.
  void rope_backward(CView<T> dy, CView<T> table, index_t heads, View<T> dx) {
    constexpr std::string_view op = "rope_backward";
    check_plain(op, dy, table, heads);
    check::dense(op, "dx", dx, dy.shape);
    rope_backward_impl(dy, table, heads, dx);
  }

  // y [n][heads·hd] and inv_rms [n][heads] from x; hd = gain's length,
  // T and half from the table [T][half][2].
  void qk_norm_rope_forward(CView<T> x, CView<T> gain, CView<T> table, const QkNormRopeOptions& opt, View<T> y,
                            View<T> inv_rms) {
    constexpr std::string_view op = "qk_norm_rope_forward";
    check_common(op, x, gain, table, opt);
    check::finite(op, "eps", opt.eps);
    check::require(opt.eps >= 0, op, "eps must be non-negative, got {}", opt.eps);
    check::dense(op, "y", y, x.shape);
    check::dense(op, "inv_rms", inv_rms, Shape{x.dim(0), opt.heads});
    qk_norm_rope_forward_impl(x, gain, table, opt, y, inv_rms);
  }

  // dx [n][heads·hd] (overwritten) and dgain [hd] (accumulated) from dy,
  // with inv_rms from the forward.
  void qk_norm_rope_backward(CView<T> x, CView<T> gain, CView<T> table, CView<T> inv_rms, CView<T> dy,
                             const QkNormRopeOptions& opt, View<T> dx, View<T> dgain) {
    constexpr std::string_view op = "qk_norm_rope_backward";
    check_common(op, x, gain, table, opt);
    check::dense(op, "inv_rms", inv_rms, Shape{x.dim(0), opt.heads});
    check::dense(op, "dy", dy, x.shape);
    check::dense(op, "dx", dx, x.shape);
    check::dense(op, "dgain", dgain, gain.shape);
    qk_norm_rope_backward_impl(x, gain, table, inv_rms, dy, opt, dx, dgain);
  }

 protected:
  virtual void rope_forward_impl(CView<T> x, CView<T> table, index_t heads, View<T> y) = 0;
  virtual void rope_backward_impl(CView<T> dy, CView<T> table, index_t heads, View<T> dx) = 0;
  virtual void qk_norm_rope_forward_impl(CView<T> x, CView<T> gain, CView<T> table, const QkNormRopeOptions& opt,
                                         View<T> y, View<T> inv_rms) = 0;
  virtual void qk_norm_rope_backward_impl(CView<T> x, CView<T> gain, CView<T> table, CView<T> inv_rms, CView<T> dy,
                                          const QkNormRopeOptions& opt, View<T> dx, View<T> dgain) = 0;

 private:
  static void check_plain(std::string_view op, CView<T> x, CView<T> table, index_t heads) {
    check::positive(op, "heads", heads);
    check::rank(op, "table", table, 3);
    check::contiguous(op, "table", table);
    check::require(table.dim(2) == 2, op, "table has shape {}, expected [T, half, 2]", table.shape.str());
    check::rank(op, "x", x, 2);
    check::contiguous(op, "x", x);
    check::require(x.dim(1) % heads == 0, op, "x has shape {}, not {} heads of equal width", x.shape.str(), heads);
    const index_t hd = x.dim(1) / heads, window = table.dim(0), half = table.dim(1);
    check::require(2 * half <= hd, op, "rotary dims 2·half = {} exceed head_dim {} (table {}, x {}, {} heads)",
                   2 * half, hd, table.shape.str(), x.shape.str(), heads);
    check::require(x.dim(0) % window == 0, op, "x has {} rows, not a whole number of windows of T = {}", x.dim(0),
                   window);
  }
  static void check_common(std::string_view op, CView<T> x, CView<T> gain, CView<T> table,
                           const QkNormRopeOptions& opt) {
    check::positive(op, "heads", opt.heads);
    check_gain_style(op, opt.gain);
    check::rank(op, "gain", gain, 1);
    check::contiguous(op, "gain", gain);
    const index_t hd = gain.dim(0);
    check::rank(op, "table", table, 3);
    check::contiguous(op, "table", table);
    check::require(table.dim(2) == 2, op, "table has shape {}, expected [T, half, 2]", table.shape.str());
    const index_t window = table.dim(0), half = table.dim(1);
    check::require(2 * half <= hd, op, "rotary dims 2·half = {} exceed head_dim {} (table {}, gain {})", 2 * half, hd,
                   table.shape.str(), gain.shape.str());
    check::rank(op, "x", x, 2);
    check::contiguous(op, "x", x);
    check::require(x.dim(1) == opt.heads * hd, op, "x has shape {}, expected [n, heads·hd] = [n, {}] ({} heads of {})",
                   x.shape.str(), opt.heads * hd, opt.heads, hd);
    check::require(x.dim(0) % window == 0, op, "x has {} rows, not a whole number of windows of T = {}", x.dim(0),
                   window);
  }
};

}  // namespace bitrank
