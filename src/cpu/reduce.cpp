// CPU backend of the column reductions (contract: include/bitrank/ops/reduce.hpp).
//
// col_sum_prod splits the columns into blocks; each task walks every row of
// its block (contiguous, vectorisable) into f64 sums and adds them to out
// once. sum_squares sums fixed blocks of kSquareBlock elements in f64 and
// adds the block sums in order, so the result is the same for any number of
// threads. squared_error walks the same blocks, writing dy and summing d² the
// same way (dy may be y: each element is read before it is written).
#include <algorithm>
#include <vector>

#include "cpu/ops.hpp"

namespace bitrank::cpu {
namespace {

constexpr index_t kColBlock = 256;
constexpr index_t kSquareBlock = 1 << 14;

// Σ value(i)² for i < n in f64: fixed blocks of kSquareBlock summed in block
// order, each over kLanes independent sums (vectorisable without
// reassociating one long chain), so the result does not depend on the
// threads. value(i) is called once per i and may write element i elsewhere.
template <class Value>
double blocked_sum_squares(ThreadPool& pool, index_t n, const Value& value) {
  const index_t blocks = (n + kSquareBlock - 1) / kSquareBlock;
  std::vector<double> partial(static_cast<std::size_t>(blocks));
  pool.parallel_for(blocks, [&](index_t b0, index_t b1) {
    for (index_t blk = b0; blk < b1; ++blk) {
      const index_t i0 = blk * kSquareBlock, i1 = std::min(n, i0 + kSquareBlock);
      constexpr index_t kLanes = 8;
      double lane[kLanes] = {};
      index_t i = i0;
      for (; i + kLanes <= i1; i += kLanes)
        for (index_t l = 0; l < kLanes; ++l) {
          const double v = value(i + l);
          lane[l] += v * v;
        }
      for (; i < i1; ++i) {
        const double v = value(i);
        lane[0] += v * v;
      }
      double sum = 0;
      for (double v : lane) sum += v;
      partial[static_cast<std::size_t>(blk)] = sum;
    }
  });
  double total = 0;
  for (double s : partial) total += s;
  return total;
}

class CpuReduceOps final : public ReduceOps<float> {
 public:
  explicit CpuReduceOps(ThreadPool& pool) : pool_(pool) {}

 protected:
  void col_sum_prod_impl(CView<float> a, CView<float> b, View<float> out) override {
    const index_t rows = a.dim(0), cols = a.dim(1);
    pool_.parallel_for((cols + kColBlock - 1) / kColBlock, [&](index_t b0, index_t b1) {
      double sum[kColBlock];
      for (index_t blk = b0; blk < b1; ++blk) {
        const index_t j0 = blk * kColBlock, width = std::min(kColBlock, cols - j0);
        std::fill(sum, sum + width, 0.0);
        for (index_t t = 0; t < rows; ++t) {
          const float* x = a.data + t * cols + j0;
          const float* y = b.data + t * cols + j0;
          for (index_t j = 0; j < width; ++j) sum[j] += static_cast<double>(x[j]) * y[j];
        }
        for (index_t j = 0; j < width; ++j) out[j0 + j] = static_cast<float>(out[j0 + j] + sum[j]);
      }
    });
  }

  void scale_cols_impl(CView<float> a, CView<float> col, View<float> out, bool accumulate) override {
    const index_t rows = a.dim(0), cols = a.dim(1);
    pool_.parallel_for(
        rows,
        [&](index_t t0, index_t t1) {
          for (index_t t = t0; t < t1; ++t) {
            const float* x = a.data + t * cols;
            float* o = out.data + t * cols;
            if (accumulate) {
              for (index_t j = 0; j < cols; ++j) o[j] += x[j] * col[j];
            } else {
              for (index_t j = 0; j < cols; ++j) o[j] = x[j] * col[j];
            }
          }
        },
        std::max<index_t>(1, 16384 / cols));
  }

  double sum_squares_impl(CView<float> a) override {
    const float* x = a.data;
    return blocked_sum_squares(pool_, a.numel(), [x](index_t i) { return x[i]; });
  }

  double squared_error_impl(CView<float> y, CView<float> target, double grad_mul, View<float> dy) override {
    const float *a = y.data, *t = target.data, mul = static_cast<float>(grad_mul);
    float* g = dy.data;
    return blocked_sum_squares(pool_, y.numel(), [=](index_t i) {
      const float d = a[i] - t[i];
      g[i] = mul * d;
      return d;
    });
  }

 private:
  ThreadPool& pool_;
};

}  // namespace

std::unique_ptr<ReduceOps<float>> make_reduce_ops(ThreadPool& pool) { return std::make_unique<CpuReduceOps>(pool); }

}  // namespace bitrank::cpu
