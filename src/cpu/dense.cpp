// CPU backend of the small dense layers (contract: include/bitrank/ops/dense.hpp).
//
// Both products are OpenBLAS sgemm calls (beta 0 or 1 gives overwrite or
// accumulate); split and merge copy hd-long runs per head, rows in parallel.
#include <algorithm>

#include "cpu/kernels.hpp"
#include "cpu/ops.hpp"

namespace bitrank::cpu {
namespace {

class CpuDenseOps final : public DenseOps<float> {
 public:
  explicit CpuDenseOps(ThreadPool& pool) : pool_(pool) {}

 protected:
  void dense_forward_impl(CView<float> x, CView<float> w, View<float> out, bool accumulate) override {
    const index_t m = x.dim(0), k = x.dim(1), r = w.dim(0);
    sgemm(false, true, m, r, k, 1.0f, x.data, k, w.data, k, accumulate ? 1.0f : 0.0f, out.data, r);
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
};

}  // namespace

std::unique_ptr<DenseOps<float>> make_dense_ops(ThreadPool& pool) { return std::make_unique<CpuDenseOps>(pool); }

}  // namespace bitrank::cpu
