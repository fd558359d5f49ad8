// CPU backend of the small dense layers (contract: include/bitrank/ops/dense.hpp).
//
// Both products are OpenBLAS sgemm calls (beta 0 or 1 gives overwrite or
// accumulate); split and merge copy hd-long runs per head, rows in parallel.
// The forward with an f16 w (a loaded model's head, 49,152 × 576 for
// SmolLM2) never holds w in f32: for the few rows of x of decoding, each
// thread widens one row of w at a time (F16C) and takes its dot products
// with x's rows (dot_lanes); above kDenseF16DotRows rows of x, blocks of
// kWidenRows rows of w are widened and multiplied by sgemm, so a prefill
// or an eval window runs at sgemm's rate for a scratch of kWidenRows·k floats.
#include <algorithm>
#include <vector>

#include "cpu/kernels.hpp"
#include "cpu/ops.hpp"

namespace bitrank::cpu {
namespace {

// Rows of x up to which the f16 forward takes dot products (decode, short prompts).
constexpr index_t kDenseF16DotRows = 16;
// Rows of w widened per sgemm above that.
constexpr index_t kWidenRows = 512;

class CpuDenseOps final : public DenseOps<float> {
 public:
  explicit CpuDenseOps(ThreadPool& pool) : pool_(pool) {}

 protected:
  void dense_forward_impl(CView<float> x, CView<float> w, View<float> out, bool accumulate) override {
    const index_t m = x.dim(0), k = x.dim(1), r = w.dim(0);
    sgemm(false, true, m, r, k, 1.0f, x.data, k, w.data, k, accumulate ? 1.0f : 0.0f, out.data, r);
  }

  void dense_forward_f16_impl(CView<float> x, CView<f16> w, View<float> out, bool accumulate) override {
    const index_t m = x.dim(0), k = x.dim(1), r = w.dim(0);
    if (m <= kDenseF16DotRows) {
      pool_.parallel_for(
          r,
          [&](index_t o0, index_t o1) {
            std::vector<float> row(static_cast<std::size_t>(k));
            for (index_t o = o0; o < o1; ++o) {
              f32_from_f16(w.data + o * k, k, row.data());
              for (index_t t = 0; t < m; ++t) {
                const float v = dot_lanes(x.data + t * k, row.data(), k);
                float& dst = out.data[t * r + o];
                dst = accumulate ? dst + v : v;
              }
            }
          },
          std::max<index_t>(1, 65536 / (k * (m + 1))));
      return;
    }
    ensure_size(wide_, host_memory(), std::min(r, kWidenRows) * k);
    for (index_t o0 = 0; o0 < r; o0 += kWidenRows) {
      const index_t rows = std::min(kWidenRows, r - o0);
      const f16* src = w.data + o0 * k;
      float* dst = wide_.data();
      pool_.parallel_for(rows * k, [=](index_t i0, index_t i1) { f32_from_f16(src + i0, i1 - i0, dst + i0); }, 16384);
      sgemm(false, true, m, rows, k, 1.0f, x.data, k, dst, k, accumulate ? 1.0f : 0.0f, out.data + o0, r);
    }
  }

  void dense_backward_impl(CView<float> dy, CView<float> w, View<float> dx) override {
    const index_t m = dy.dim(0), r = dy.dim(1), k = w.dim(1);
    sgemm(false, false, m, k, r, 1.0f, dy.data, r, w.data, k, 1.0f, dx.data, k);
  }

  void split_q_gate_impl(CView<float> qg, index_t heads, View<float> q, View<float> gate) override {
    const index_t hd = q.dim(1) / heads;
    for_each_head(qg.dim(0), heads, hd, [&](index_t src, index_t dst) {
      std::copy_n(qg.data + src, hd, q.data + dst);
      std::copy_n(qg.data + src + hd, hd, gate.data + dst);
    });
  }

  void merge_q_gate_impl(CView<float> q, CView<float> gate, index_t heads, View<float> qg) override {
    const index_t hd = q.dim(1) / heads;
    for_each_head(qg.dim(0), heads, hd, [&](index_t dst, index_t src) {
      std::copy_n(q.data + src, hd, qg.data + dst);
      std::copy_n(gate.data + src, hd, qg.data + dst + hd);
    });
  }

 private:
  // fn(offset of the head's [q | gate] run in qg, offset of its q / gate run).
  template <class Fn>
  void for_each_head(index_t m, index_t heads, index_t hd, const Fn& fn) {
    pool_.parallel_for(
        m,
        [&](index_t t0, index_t t1) {
          for (index_t t = t0; t < t1; ++t)
            for (index_t h = 0; h < heads; ++h) fn((t * heads + h) * 2 * hd, (t * heads + h) * hd);
        },
        std::max<index_t>(1, 8192 / (2 * heads * hd)));
  }

  ThreadPool& pool_;
  Buffer<float> wide_;  // widened rows of an f16 w [kWidenRows][k]
};

}  // namespace

std::unique_ptr<DenseOps<float>> make_dense_ops(ThreadPool& pool) { return std::make_unique<CpuDenseOps>(pool); }

}  // namespace bitrank::cpu
