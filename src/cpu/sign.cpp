// CPU backend of the sign optimizer (contract: include/bitrank/ops/sign.hpp).
//
// Rows are split over the pool. factored_adam first sums G² per row (R is
// updated right there) and per column (f64 partials per row block, added in
// block order: deterministic for a given pool size); the update pass then
// runs the vectorisable latent update over a row and rewrites that row's
// words, so no two threads touch one word. √v̂ uses the factored form
// √(R_i·C_k·(1/(mean(R)·(1−β2^t)))). Scratch only grows.
#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <vector>

#include "bitrank/rng.hpp"
#include "cpu/ops.hpp"

namespace bitrank::cpu {
namespace {

class CpuSignOps final : public SignOps<float> {
 public:
  explicit CpuSignOps(ThreadPool& pool) : pool_(pool) {}

 protected:
  void sign_init_impl(const SignMatrix<float>& mat, const SignOptions& opt, float tau) override {
    const index_t rows = mat.latent.dim(0), r = mat.latent.dim(1);
    struct Job {
      const SignMatrix<float>* mat;
      const SignOptions* opt;
      float tau;
    } job{&mat, &opt, tau};
    pool_.parallel_for(
        rows,
        [&job](index_t i0, index_t i1) {
          const SignMatrix<float>& m = *job.mat;
          const index_t r = m.latent.dim(1), words = m.bits.dim(1);
          for (index_t i = i0; i < i1; ++i) {
            float* z = m.latent.data + i * r;
            const std::uint32_t* w = m.bits.data + i * words;
            for (index_t k = 0; k < r; ++k) z[k] = (w[k / 32] >> (k % 32)) & 1u ? job.tau : -job.tau;
            if (job.opt->optimizer != SignOptimizer::sgd) std::fill_n(m.moment.data + i * r, r, 0.0f);
            if (job.opt->optimizer == SignOptimizer::adam) std::fill_n(m.second.data + i * r, r, 0.0f);
          }
        },
        row_grain(r));
    if (opt.optimizer == SignOptimizer::factored_adam) {
      std::fill_n(mat.second_row.data, rows, 0.0f);
      std::fill_n(mat.second_col.data, r, 0.0f);
    }
  }

  std::int64_t sign_step_impl(const SignMatrix<float>& mat, CView<float> grad, const SignOptions& opt,
                              std::int64_t step) override {
    const index_t rows = mat.latent.dim(0), r = mat.latent.dim(1);
    Step job;
    job.mat = &mat;
    job.grad = grad.data;
    job.opt = &opt;
    job.ibc1 = static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(opt.beta1), static_cast<double>(step))));
    job.stream = hash_counter(opt.seed, static_cast<std::uint64_t>(step) * kSignMatrixIds + mat.id);
    if (opt.optimizer == SignOptimizer::factored_adam) {
      const double bc2 = 1.0 - std::pow(static_cast<double>(opt.beta2), static_cast<double>(step));
      const double mean_row = factored_second_moment(mat, grad, opt.beta2);
      job.inv_norm = mean_row > 0 ? static_cast<float>(1.0 / (mean_row * bc2)) : 0.0f;
    } else if (opt.optimizer == SignOptimizer::adam) {
      job.ibc2 = static_cast<float>(1.0 / (1.0 - std::pow(static_cast<double>(opt.beta2), static_cast<double>(step))));
    }
    std::atomic<std::int64_t> flips{0};
    job.flips = &flips;
    pool_.parallel_for(
        rows, [&job](index_t i0, index_t i1) { update_rows(job, i0, i1); }, row_grain(r));
    return flips.load();
  }

  void sign_defer_impl(CView<float> grad, View<float> kept) override {
    struct Job {
      const float* g;
      float* k;
    } job{grad.data, kept.data};
    pool_.parallel_for(
        grad.numel(), [&job](index_t i0, index_t i1) {
          for (index_t i = i0; i < i1; ++i) job.k[i] += job.g[i];
        },
        16384);
  }

  void sign_zero_impl(View<float> v) override {
    float* d = v.data;
    pool_.parallel_for(
        v.numel(), [d](index_t i0, index_t i1) { std::fill(d + i0, d + i1, 0.0f); }, 16384);
  }

 private:
  struct Step {
    const SignMatrix<float>* mat = nullptr;
    const float* grad = nullptr;
    const SignOptions* opt = nullptr;
    float ibc1 = 1, ibc2 = 1;  // 1/(1 − β^t)
    float inv_norm = 0;        // factored: 1/(mean(R)·(1 − β2^t))
    std::uint64_t stream = 0;  // the stochastic flips' stream of this matrix and step
    std::atomic<std::int64_t>* flips = nullptr;
  };

  static index_t row_grain(index_t width) { return std::max<index_t>(1, 16384 / std::max<index_t>(width, 1)); }

  // Updates R and C from G²; returns mean(R) after the update.
  double factored_second_moment(const SignMatrix<float>& mat, CView<float> grad, float beta2) {
    const index_t rows = mat.latent.dim(0), r = mat.latent.dim(1);
    const index_t blocks = std::clamp<index_t>((rows * r + 16383) / 16384, 1, std::min<index_t>(rows, pool_.size()));
    if (col_partial_.size() < static_cast<std::size_t>(blocks * r)) col_partial_.resize(static_cast<std::size_t>(blocks * r));
    struct Job {
      const float* g;
      float* row;
      double* partial;
      index_t rows, r, blocks;
      float beta2;
    } job{grad.data, mat.second_row.data, col_partial_.data(), rows, r, blocks, beta2};
    pool_.parallel_for(blocks, [&job](index_t b0, index_t b1) {
      const index_t r = job.r;
      const double b2 = job.beta2;
      for (index_t blk = b0; blk < b1; ++blk) {
        double* col = job.partial + blk * r;
        std::fill(col, col + r, 0.0);
        for (index_t i = job.rows * blk / job.blocks; i < job.rows * (blk + 1) / job.blocks; ++i) {
          const float* g = job.g + i * r;
          double row = 0;
          for (index_t k = 0; k < r; ++k) {
            const double g2 = static_cast<double>(g[k]) * g[k];
            row += g2;
            col[k] += g2;
          }
          job.row[i] = static_cast<float>(b2 * job.row[i] + (1 - b2) * row / static_cast<double>(r));
        }
      }
    });
    const double b2 = beta2;
    for (index_t k = 0; k < r; ++k) {
      double s = 0;
      for (index_t blk = 0; blk < blocks; ++blk) s += col_partial_[static_cast<std::size_t>(blk * r + k)];
      mat.second_col[k] = static_cast<float>(b2 * mat.second_col[k] + (1 - b2) * s / static_cast<double>(rows));
    }
    double mean = 0;
    for (index_t i = 0; i < rows; ++i) mean += mat.second_row[i];
    return mean / static_cast<double>(rows);
  }

  static void update_rows(const Step& s, index_t i0, index_t i1) {
    const SignMatrix<float>& mat = *s.mat;
    const SignOptions& opt = *s.opt;
    const index_t r = mat.latent.dim(1), words = mat.bits.dim(1);
    const float b1 = opt.beta1, b2 = opt.beta2, lr = opt.lr, eps = opt.eps, c = opt.clamp, delta = opt.hysteresis;
    const bool stochastic = opt.stochastic && delta > 0;
    std::int64_t flips = 0;
    for (index_t i = i0; i < i1; ++i) {
      // Distinct rows of distinct arrays: __restrict lets the updates vectorise.
      const float* __restrict g = s.grad + i * r;
      float* __restrict z = mat.latent.data + i * r;
      switch (opt.optimizer) {
        case SignOptimizer::sgd:
          for (index_t k = 0; k < r; ++k) z[k] = std::clamp(z[k] - lr * g[k], -c, c);
          break;
        case SignOptimizer::adam: {
          float* __restrict m = mat.moment.data + i * r;
          float* __restrict v = mat.second.data + i * r;
          for (index_t k = 0; k < r; ++k) {
            m[k] = b1 * m[k] + (1 - b1) * g[k];
            v[k] = b2 * v[k] + (1 - b2) * g[k] * g[k];
            z[k] = std::clamp(z[k] - lr * (m[k] * s.ibc1) / (std::sqrt(v[k] * s.ibc2) + eps), -c, c);
          }
          break;
        }
        case SignOptimizer::factored_adam: {
          float* __restrict m = mat.moment.data + i * r;
          const float* __restrict col = mat.second_col.data;
          const float row = mat.second_row[i] * s.inv_norm;
          for (index_t k = 0; k < r; ++k) {
            m[k] = b1 * m[k] + (1 - b1) * g[k];
            z[k] = std::clamp(z[k] - lr * (m[k] * s.ibc1) / (std::sqrt(row * col[k]) + eps), -c, c);
          }
          break;
        }
      }
      // Flips: s·z < −δ, or inside the band by the seeded coin. s·z is z
      // with its sign bit flipped where the bit is clear (exactly −z), so
      // a word's flips come from one branch-free pass over its 32 latents.
      std::uint32_t* bits = mat.bits.data + i * words;
      for (index_t w = 0; w < words; ++w) {
        const std::uint32_t word = bits[w];
        const index_t k0 = w * 32, len = std::min<index_t>(32, r - k0);
        const auto sz = [&](index_t q) {
          return std::bit_cast<float>(std::bit_cast<std::uint32_t>(z[k0 + q]) ^ ((~word >> q & 1u) << 31));
        };
        std::uint32_t flip = 0;
        for (index_t q = 0; q < len; ++q) flip |= static_cast<std::uint32_t>(sz(q) < -delta) << q;
        if (stochastic)
          for (index_t q = 0; q < len; ++q) {
            const float v = sz(q);
            if (!(flip >> q & 1u) && v < 0 &&
                hash_uniform(s.stream, static_cast<std::uint64_t>(i * r + k0 + q)) < -v / delta)
              flip |= 1u << q;
          }
        bits[w] = word ^ flip;
        flips += std::popcount(flip);
      }
    }
    if (flips) s.flips->fetch_add(flips, std::memory_order_relaxed);
  }

  ThreadPool& pool_;
  std::vector<double> col_partial_;  // column sums of G² per row block [blocks][r]
};

}  // namespace

std::unique_ptr<SignOps<float>> make_sign_ops(ThreadPool& pool) { return std::make_unique<CpuSignOps>(pool); }

}  // namespace bitrank::cpu
