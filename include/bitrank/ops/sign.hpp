// Sign training (DESIGN §5): the optimizer of a BLR layer's sign matrices.
//
// A sign matrix S [rows][r] is stored as a bitmap (bitmap.hpp layout; the
// bitmap is the truth the forward reads) next to a real latent z [rows][r]
// and the optimizer state. The gradient G [rows][r] is the BLR sign
// gradient (straight-through: ∂L/∂z := ∂L/∂s, blr.hpp). One step, with t
// the 1-based step number:
//
//   factored_adam (default)
//     m  ← β1·m + (1−β1)·G                        first moment per entry
//     R_i ← β2·R_i + (1−β2)·mean_k G_ik²           second moment, rows
//     C_k ← β2·C_k + (1−β2)·mean_i G_ik²           second moment, columns
//     v̂_ik = R_i·C_k / mean_i(R_i) / (1−β2^t)     (0 where mean(R) = 0)
//     z  ← clamp(z − η·m̂/(√v̂ + ε), −c, c),   m̂ = m/(1−β1^t)
//   adam   the same with a full second moment v ← β2·v + (1−β2)·G²,
//          v̂ = v/(1−β2^t)
//   sgd    z ← clamp(z − η·G, −c, c)   (no state)
//
// Memory per sign: z and m (8 bytes in f32) plus R, C for factored_adam.
//
// Flips, after the latent update, with s the current sign and δ ≥ 0 the
// hysteresis: a sign flips when s·z < −δ; the bit is rewritten in place and
// z is kept (so flipping back needs z to travel past the other band edge).
// With `stochastic` (and δ > 0) a sign inside the band, −δ ≤ s·z < 0,
// also flips with probability −s·z/δ: it flips when
//     u < −s·z/δ,  u = hash_uniform(hash_counter(seed, t·2^24 + id), i·r + k)
// (rng.hpp; id = the matrix id < 2^24): the same bits for a given seed on
// every backend and in any evaluation order. Each step returns the number
// of flips (a host value).
//
// Deferred mode: sign_defer adds each micro-batch's G into a kept G;
// sign_apply_deferred steps with the kept G and then zeroes it.
//
// Overwrite/accumulate: sign_init overwrites z and zeroes the state;
// sign_step updates z, the state and the bits in place; sign_defer
// accumulates. Every option is validated (bitrank::Error).
#pragma once

#include <cstdint>
#include <string_view>

#include "bitrank/ops/bitmap.hpp"
#include "bitrank/ops/check.hpp"
#include "bitrank/tensor.hpp"

namespace bitrank {

enum class SignOptimizer : std::uint8_t { factored_adam, adam, sgd };

struct SignOptions {
  SignOptimizer optimizer = SignOptimizer::factored_adam;
  float lr = 1e-3f;          // η
  float beta1 = 0.9f;        // first moment decay
  float beta2 = 0.999f;      // second moment decay
  float eps = 1e-8f;         // ε of √v̂ + ε
  float clamp = 4.0f;        // c: z stays in [−c, c]
  float hysteresis = 0.0f;   // δ: a sign flips when s·z < −δ
  bool stochastic = false;   // flips inside the band with probability −s·z/δ
  std::uint64_t seed = 0;    // seed of the stochastic flips
};

inline constexpr std::uint32_t kSignMatrixIds = 1u << 24;  // ids are < 2^24

// One sign matrix and its optimizer state. State an optimizer does not use
// may be left default-constructed.
template <class T>
struct SignMatrix {
  View<std::uint32_t> bits;  // [rows][ceil(r/32)], rewritten on flips
  View<T> latent;            // z [rows][r]
  View<T> moment;            // m [rows][r]         (factored_adam, adam)
  View<T> second;            // v [rows][r]         (adam)
  View<T> second_row;        // R [rows]            (factored_adam)
  View<T> second_col;        // C [r]               (factored_adam)
  std::uint32_t id = 0;      // names the matrix in the stochastic flips' counters
};

template <class T>
class SignOps {
 public:
  virtual ~SignOps() = default;

  // z = τ·s from the bitmap; the optimizer's state is zeroed.
  void sign_init(const SignMatrix<T>& mat, const SignOptions& opt, float tau) {
    constexpr std::string_view op = "sign_init";
    check_options(op, opt);
    check_matrix(op, mat, opt);
    check::finite(op, "tau", tau);
    check::require(tau >= 0, op, "tau must be ≥ 0, got {}", tau);
    sign_init_impl(mat, opt, tau);
  }

  // One step with gradient `grad` [rows][r]; returns the number of flips.
  std::int64_t sign_step(const SignMatrix<T>& mat, CView<T> grad, const SignOptions& opt, std::int64_t step) {
    constexpr std::string_view op = "sign_step";
    check_step(op, mat, grad, opt, step);
    return sign_step_impl(mat, grad, opt, step);
  }

  // kept += grad (both [rows][r]).
  void sign_defer(CView<T> grad, View<T> kept) {
    constexpr std::string_view op = "sign_defer";
    check::rank(op, "grad", grad, 2);
    check::contiguous(op, "grad", grad);
    check::dense(op, "kept", kept, grad.shape);
    sign_defer_impl(grad, kept);
  }

  // sign_step with the kept gradient, which is then zeroed.
  std::int64_t sign_apply_deferred(const SignMatrix<T>& mat, View<T> kept, const SignOptions& opt, std::int64_t step) {
    constexpr std::string_view op = "sign_apply_deferred";
    check_step(op, mat, kept, opt, step);
    const std::int64_t flips = sign_step_impl(mat, kept, opt, step);
    sign_zero_impl(kept);
    return flips;
  }

 protected:
  virtual void sign_init_impl(const SignMatrix<T>& mat, const SignOptions& opt, float tau) = 0;
  virtual std::int64_t sign_step_impl(const SignMatrix<T>& mat, CView<T> grad, const SignOptions& opt,
                                      std::int64_t step) = 0;
  virtual void sign_defer_impl(CView<T> grad, View<T> kept) = 0;
  virtual void sign_zero_impl(View<T> v) = 0;

 private:
  static void check_options(std::string_view op, const SignOptions& opt) {
    check::require(opt.optimizer == SignOptimizer::factored_adam || opt.optimizer == SignOptimizer::adam ||
                       opt.optimizer == SignOptimizer::sgd,
                   op, "unknown optimizer {}", static_cast<int>(opt.optimizer));
    check::finite(op, "lr", opt.lr);
    check::require(opt.beta1 >= 0 && opt.beta1 < 1, op, "beta1 must be in [0, 1), got {}", opt.beta1);
    check::require(opt.beta2 >= 0 && opt.beta2 < 1, op, "beta2 must be in [0, 1), got {}", opt.beta2);
    check::finite(op, "eps", opt.eps);
    check::require(opt.eps > 0, op, "eps must be > 0, got {}", opt.eps);
    check::finite(op, "clamp", opt.clamp);
    check::require(opt.clamp > 0, op, "clamp must be > 0, got {}", opt.clamp);
    check::finite(op, "hysteresis", opt.hysteresis);
    check::require(opt.hysteresis >= 0, op, "hysteresis must be ≥ 0, got {}", opt.hysteresis);
  }

  static void check_matrix(std::string_view op, const SignMatrix<T>& mat, const SignOptions& opt) {
    check::rank(op, "latent", mat.latent, 2);
    check::contiguous(op, "latent", mat.latent);
    const index_t rows = mat.latent.dim(0), r = mat.latent.dim(1);
    check::dense(op, "bits", mat.bits, Shape{rows, sign_words(r)});
    if (opt.optimizer != SignOptimizer::sgd) check::dense(op, "moment", mat.moment, Shape{rows, r});
    if (opt.optimizer == SignOptimizer::adam) check::dense(op, "second", mat.second, Shape{rows, r});
    if (opt.optimizer == SignOptimizer::factored_adam) {
      check::dense(op, "second_row", mat.second_row, Shape{rows});
      check::dense(op, "second_col", mat.second_col, Shape{r});
    }
    check::require(mat.id < kSignMatrixIds, op, "matrix id {} must be < {}", mat.id, kSignMatrixIds);
  }

  static void check_step(std::string_view op, const SignMatrix<T>& mat, CView<T> grad, const SignOptions& opt,
                         std::int64_t step) {
    check_options(op, opt);
    check_matrix(op, mat, opt);
    check::dense(op, "grad", grad, mat.latent.shape);
    check::require(step >= 1 && step < (std::int64_t{1} << 40), op, "step must be in [1, 2^40), got {}", step);
  }
};

}  // namespace bitrank
