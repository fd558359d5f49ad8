// CPU backend of the sliced KL objective (contract: include/bitrank/ops/kl.hpp).
//
// Rows run in parallel, each row by one task: the max in f32, the sums in
// f64 over eight partial sums (sum_f64), exactly the expressions the
// contract states. The backward keeps
// one f64 KL partial per row and adds them in row order afterwards, so the
// result does not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu/kernels.hpp"
#include "cpu/ops.hpp"

namespace bitrank::cpu {
namespace {

// Rows per task so that each task touches at least ~16k elements.
index_t row_grain(index_t d) { return std::max<index_t>(1, 16384 / std::max<index_t>(d, 1)); }

// lse = f64(m) + log(f64(s)) of a row's run stats.
double lse_of(const float* run) { return static_cast<double>(run[0]) + std::log(static_cast<double>(run[1])); }

class CpuKlOps final : public KlOps<float> {
 public:
  explicit CpuKlOps(ThreadPool& pool) : pool_(pool) {}

 protected:
  void kl_lse_merge_impl(CView<float> z, View<float> run, bool first) override {
    const index_t n = z.dim(0), vs = z.dim(1);
    pool_.parallel_for(
        n,
        [&](index_t r0, index_t r1) {
          for (index_t r = r0; r < r1; ++r) {
            const float* zr = z.data + r * vs;
            float m = first ? zr[0] : run[2 * r];
            for (index_t j = 0; j < vs; ++j) m = std::max(m, zr[j]);  // a NaN is not a max; the sum carries it
            const double sum = sum_f64(vs, [&](index_t j) { return static_cast<double>(std::exp(zr[j] - m)); });
            const double old = first ? 0.0
                                     : static_cast<double>(run[2 * r + 1]) *
                                           std::exp(static_cast<double>(run[2 * r]) - static_cast<double>(m));
            run[2 * r] = m;
            run[2 * r + 1] = static_cast<float>(old + sum);
          }
        },
        row_grain(vs));
  }

  double kl_slice_backward_impl(CView<float> zs, CView<float> zt, CView<float> run_s, CView<float> run_t,
                                double grad_mul, View<float> dz) override {
    const index_t n = zs.dim(0), vs = zs.dim(1);
    const float mul = static_cast<float>(grad_mul);
    std::vector<double> row_kl(static_cast<std::size_t>(n));
    pool_.parallel_for(
        n,
        [&](index_t r0, index_t r1) {
          for (index_t r = r0; r < r1; ++r) {
            const double ls = lse_of(run_s.data + 2 * r), lt = lse_of(run_t.data + 2 * r);
            const float* s = zs.data + r * vs;
            const float* t = zt.data + r * vs;
            float* g = dz.data + r * vs;  // may be s: element j is read before it is written
            row_kl[static_cast<std::size_t>(r)] = sum_f64(vs, [&](index_t j) {
              const double a = static_cast<double>(t[j]) - lt, b = static_cast<double>(s[j]) - ls;
              const double pa = std::exp(a);
              g[j] = mul * static_cast<float>(std::exp(b) - pa);
              return pa * (a - b);
            });
          }
        },
        row_grain(vs));
    double total = 0;
    for (double v : row_kl) total += v;
    return total;
  }

 private:
  ThreadPool& pool_;
};

}  // namespace

std::unique_ptr<KlOps<float>> make_kl_ops(ThreadPool& pool) { return std::make_unique<CpuKlOps>(pool); }

}  // namespace bitrank::cpu
