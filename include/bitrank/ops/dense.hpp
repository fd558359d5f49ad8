// Dense f32 layers of the trainer (seed 000) and the models: the frozen
// projections (GDN a/b; a teacher's dense projections), the logits head, and
// the per-head [q | gate] layout of gated attention.
//
//   dense_forward   out[m][r] = x[m][k] · w[r][k]ᵀ        overwrites, or adds
//                   into out with `accumulate`
//   dense_forward_f16  dense_forward with an f16 w: the same product with
//                   w's f16 values read exactly (a loaded model's 16-bit
//                   weights: the head, the projections left dense),
//                   overwrites or adds likewise
//   dense_forward_q8   dense_forward with w in Q8_0 blocks (bitrank/q8_0.hpp):
//                   w [r][k/32] blocks of 32 values d·q, read exactly (a
//                   loaded model's head and token embedding when its file
//                   holds them as Q8_0), overwrites or adds likewise
//   dense_backward  dx[m][k] += dy[m][r] · w[r][k]        input gradient of
//                   dense_forward; ACCUMULATES into dx (the frozen projection's
//                   contribution is added to the gradient of the shared input)
//   split_q_gate    qg[m][heads][2·hd] → q[m][heads·hd], gate[m][heads·hd]:
//                   per head the first hd values are q, the next hd the gate
//                   (overwrites q and gate)
//   merge_q_gate    the reverse (overwrites qg); split and merge are exact
//                   copies and each is the other's adjoint, so merge of the
//                   gradients is the backward of split
//
// qg is passed as [m][2·heads·hd]. Numerics: the reference sums in f64, the
// CPU backend in f32 (OpenBLAS), CUDA in f32 (cuBLASLt, no TF32); tolerance 1e-6. w is not trained here (no
// weight gradient). dense_forward_f16: the reference in f64 on the exact
// values; the CPU widens w's rows to f32 as it goes (F16C) and sums in f32
// (up to 16 rows of x: 16 interleaved FMA chains per output and a fixed
// tree, with AVX2 or AVX-512; 8 interleaved partial sums without; OpenBLAS
// sgemm on widened blocks of rows above); CUDA in f32 (a warp per output,
// its lanes added in a fixed tree); tolerance 1e-6 as the f32 form.
// dense_forward_q8: the reference in f64 on the exact values d·q; the CPU in
// f32, per output 16 lanes over the blocks in order (lane l of block b:
// x[32b+l]·q[l], then + x[32b+16+l]·q[16+l] by FMA, then d_b times that FMA'd
// into the lane's sum; the lanes added l + l+8, +4, +2, +1), the same bits at
// every SIMD level and thread count, above 16 rows of x blocks of rows widened
// to f32 and OpenBLAS sgemm; CUDA a warp per output, lane l summing x·(d·q)
// of column l of every block, the lanes in a fixed tree; tolerance 1e-6.
#pragma once

#include "bitrank/dtype.hpp"
#include "bitrank/ops/check.hpp"
#include "bitrank/q8_0.hpp"

namespace bitrank {

template <class T>
class DenseOps {
 public:
  virtual ~DenseOps() = default;

  void dense_forward(CView<T> x, CView<T> w, View<T> out, bool accumulate) {
    check_forward("dense_forward", x, w, out);
    dense_forward_impl(x, w, out, accumulate);
  }

  void dense_forward_f16(CView<T> x, CView<f16> w, View<T> out, bool accumulate) {
    check_forward("dense_forward_f16", x, w, out);
    dense_forward_f16_impl(x, w, out, accumulate);
  }

  // w [r][k/32]: the blocks of r rows of k values.
  void dense_forward_q8(CView<T> x, CView<q8_0> w, View<T> out, bool accumulate) {
    constexpr std::string_view op = "dense_forward_q8";
    check_matrices(op, "x", x, w);
    check::require(w.dim(1) * kQ8Block == x.dim(1), op, "w {} holds {} inputs a row (blocks of {}), x {} has {}",
                   w.shape.str(), w.dim(1) * kQ8Block, kQ8Block, x.shape.str(), x.dim(1));
    check::dense(op, "out", out, Shape{x.dim(0), w.dim(0)});
    dense_forward_q8_impl(x, w, out, accumulate);
  }

  void dense_backward(CView<T> dy, CView<T> w, View<T> dx) {
    constexpr std::string_view op = "dense_backward";
    check_matrices(op, "dy", dy, w);
    check::require(w.dim(0) == dy.dim(1), op, "w {} has {} outputs, dy {} has {}", w.shape.str(), w.dim(0), dy.shape.str(), dy.dim(1));
    check::dense(op, "dx", dx, Shape{dy.dim(0), w.dim(1)});
    dense_backward_impl(dy, w, dx);
  }

  void split_q_gate(CView<T> qg, index_t heads, View<T> q, View<T> gate) {
    constexpr std::string_view op = "split_q_gate";
    const index_t hd = head_dim(op, qg, heads);
    check::dense(op, "q", q, Shape{qg.dim(0), heads * hd});
    check::dense(op, "gate", gate, Shape{qg.dim(0), heads * hd});
    split_q_gate_impl(qg, heads, q, gate);
  }

  void merge_q_gate(CView<T> q, CView<T> gate, index_t heads, View<T> qg) {
    constexpr std::string_view op = "merge_q_gate";
    const index_t hd = head_dim(op, qg, heads);
    check::dense(op, "q", q, Shape{qg.dim(0), heads * hd});
    check::dense(op, "gate", gate, Shape{qg.dim(0), heads * hd});
    merge_q_gate_impl(q, gate, heads, qg);
  }

 protected:
  virtual void dense_forward_impl(CView<T> x, CView<T> w, View<T> out, bool accumulate) = 0;
  virtual void dense_forward_f16_impl(CView<T> x, CView<f16> w, View<T> out, bool accumulate) = 0;
  virtual void dense_forward_q8_impl(CView<T> x, CView<q8_0> w, View<T> out, bool accumulate) = 0;
  virtual void dense_backward_impl(CView<T> dy, CView<T> w, View<T> dx) = 0;
  virtual void split_q_gate_impl(CView<T> qg, index_t heads, View<T> q, View<T> gate) = 0;
  virtual void merge_q_gate_impl(CView<T> q, CView<T> gate, index_t heads, View<T> qg) = 0;

 private:
  // An activation and a weight, both contiguous matrices.
  template <class W>
  static void check_matrices(std::string_view op, std::string_view name, CView<T> a, CView<W> w) {
    check::rank(op, name, a, 2);
    check::contiguous(op, name, a);
    check::rank(op, "w", w, 2);
    check::contiguous(op, "w", w);
  }

  template <class W>
  static void check_forward(std::string_view op, CView<T> x, CView<W> w, View<T> out) {
    check_matrices(op, "x", x, w);
    check::require(w.dim(1) == x.dim(1), op, "w {} has {} inputs, x {} has {}", w.shape.str(), w.dim(1), x.shape.str(), x.dim(1));
    check::dense(op, "out", out, Shape{x.dim(0), w.dim(0)});
  }

  // hd of a [m][2·heads·hd] tensor, checking that it divides evenly.
  template <class U>
  static index_t head_dim(std::string_view op, const View<U>& qg, index_t heads) {
    check::rank(op, "qg", qg, 2);
    check::contiguous(op, "qg", qg);
    check::positive(op, "heads", heads);
    check::require(qg.dim(1) % (2 * heads) == 0, op, "qg {} does not split into {} heads of [q | gate]", qg.shape.str(), heads);
    return qg.dim(1) / (2 * heads);
  }
};

}  // namespace bitrank
