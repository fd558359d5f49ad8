// f64 reference of the sign optimizer (contract: include/bitrank/ops/sign.hpp).
#include <algorithm>
#include <cmath>
#include <vector>

#include "bitrank/rng.hpp"
#include "ref/ops.hpp"

namespace bitrank::ref {
namespace {

class RefSignOps final : public SignOps<double> {
 protected:
  void sign_init_impl(const SignMatrix<double>& mat, const SignOptions& opt, float tau) override {
    const index_t rows = mat.latent.dim(0), r = mat.latent.dim(1), words = mat.bits.dim(1);
    for (index_t i = 0; i < rows; ++i)
      for (index_t k = 0; k < r; ++k) {
        const double s = (mat.bits[i * words + k / 32] >> (k % 32)) & 1u ? 1.0 : -1.0;
        mat.latent[i * r + k] = tau * s;
      }
    if (opt.optimizer != SignOptimizer::sgd) std::fill_n(mat.moment.data, rows * r, 0.0);
    if (opt.optimizer == SignOptimizer::adam) std::fill_n(mat.second.data, rows * r, 0.0);
    if (opt.optimizer == SignOptimizer::factored_adam) {
      std::fill_n(mat.second_row.data, rows, 0.0);
      std::fill_n(mat.second_col.data, r, 0.0);
    }
  }

  std::int64_t sign_step_impl(const SignMatrix<double>& mat, CView<double> grad, const SignOptions& opt,
                              std::int64_t step) override {
    const index_t rows = mat.latent.dim(0), r = mat.latent.dim(1), words = mat.bits.dim(1);
    const double b1 = opt.beta1, b2 = opt.beta2, lr = opt.lr, eps = opt.eps, c = opt.clamp, delta = opt.hysteresis;
    const double bc1 = 1 - std::pow(b1, static_cast<double>(step));
    const double bc2 = 1 - std::pow(b2, static_cast<double>(step));

    // Factored second moment: row and column means of G², then mean(R).
    double mean_row = 0;
    if (opt.optimizer == SignOptimizer::factored_adam) {
      std::vector<double> col(static_cast<std::size_t>(r), 0.0);
      for (index_t i = 0; i < rows; ++i) {
        double row = 0;
        for (index_t k = 0; k < r; ++k) {
          const double g2 = grad[i * r + k] * grad[i * r + k];
          row += g2;
          col[static_cast<std::size_t>(k)] += g2;
        }
        mat.second_row[i] = b2 * mat.second_row[i] + (1 - b2) * row / static_cast<double>(r);
        mean_row += mat.second_row[i];
      }
      mean_row /= static_cast<double>(rows);
      for (index_t k = 0; k < r; ++k)
        mat.second_col[k] = b2 * mat.second_col[k] + (1 - b2) * col[static_cast<std::size_t>(k)] / static_cast<double>(rows);
    }

    const std::uint64_t stream = hash_counter(opt.seed, static_cast<std::uint64_t>(step) * kSignMatrixIds + mat.id);
    std::int64_t flips = 0;
    for (index_t i = 0; i < rows; ++i)
      for (index_t k = 0; k < r; ++k) {
        const index_t e = i * r + k;
        const double g = grad[e];
        double z = mat.latent[e];
        if (opt.optimizer == SignOptimizer::sgd) {
          z -= lr * g;
        } else {
          mat.moment[e] = b1 * mat.moment[e] + (1 - b1) * g;
          double v_hat;
          if (opt.optimizer == SignOptimizer::adam) {
            mat.second[e] = b2 * mat.second[e] + (1 - b2) * g * g;
            v_hat = mat.second[e] / bc2;
          } else {
            v_hat = mean_row > 0 ? mat.second_row[i] * mat.second_col[k] / mean_row / bc2 : 0.0;
          }
          z -= lr * (mat.moment[e] / bc1) / (std::sqrt(v_hat) + eps);
        }
        z = std::clamp(z, -c, c);
        mat.latent[e] = z;

        std::uint32_t& word = mat.bits[i * words + k / 32];
        const std::uint32_t bit = 1u << (k % 32);
        const double sz = (word & bit ? 1.0 : -1.0) * z;
        bool flip = sz < -delta;
        if (!flip && opt.stochastic && delta > 0 && sz < 0)
          flip = hash_uniform(stream, static_cast<std::uint64_t>(e)) < -sz / delta;
        if (flip) {
          word ^= bit;
          ++flips;
        }
      }
    return flips;
  }

  void sign_defer_impl(CView<double> grad, View<double> kept) override {
    for (index_t i = 0; i < grad.numel(); ++i) kept[i] += grad[i];
  }

  void sign_zero_impl(View<double> v) override { std::fill_n(v.data, v.numel(), 0.0); }
};

}  // namespace

std::unique_ptr<SignOps<double>> make_sign_ops() { return std::make_unique<RefSignOps>(); }

}  // namespace bitrank::ref
