// KL(teacher ‖ student) of next-token distributions over vocabulary slices
// (DESIGN §7, the end-to-end objective), without a [n][V] tensor anywhere.
//
// Rows r < n are token positions. A slice holds the logits of vocabulary
// entries [v0, v0 + vs) of every row: z [n][vs], row-major, contiguous. The
// objective is computed in two passes over the slices:
//
//   pass 1  kl_lse_merge per slice, once for the student's logits and once
//           for the teacher's, builds each row's log-sum-exp online;
//   pass 2  kl_slice_backward per slice (the logits recomputed) writes the
//           student's logit gradient of that slice and returns its part of
//           the KL sum.
//
//   kl_lse_merge       run [n][2] holds, per row, (m, s): the largest logit
//                      seen so far and s = Σ exp(z − m) over those logits.
//                      Merging slice z: m' = max(m, max_j z[r][j]),
//                      s' = s·exp(m − m') + Σ_j exp(z[r][j] − m').
//                      With `first` the slice is the first one: run is
//                      OVERWRITTEN and its old contents are never read.
//                      After the last slice, lse[r] = m + log s.
//   kl_slice_backward  with ls, lt the rows' lse from run_s, run_t:
//                        a = zt − lt   (teacher log-probabilities)
//                        b = zs − ls   (student log-probabilities)
//                        dz = grad_mul·(exp(b) − exp(a))      OVERWRITTEN
//                        returns Σ_r Σ_j exp(a)·(a − b)       (host f64)
//                      dz may be zs itself (in place: each element is read
//                      before it is written); otherwise no overlap. Summed
//                      over all slices the return is Σ_r KL_r, and with
//                      grad_mul = 1/n, dz is ∂(mean_r KL_r)/∂zs.
//
// Non-finite input: a NaN or ±inf logit anywhere in a row makes the
// returned sum NaN or inf (never a finite number), like sum_squares: the
// trainer's skip-the-step check relies on it.
//
// Numerics. The reference works in f64 throughout. The f32 backends take the
// row max in f32 (exact), each exp(z − m') as expf of the f32 difference, the
// row sums in f64, and round s' = f32(s·exp(m − m') + Σ) once (so each lse
// carries ~3e-8 of absolute error). The backward works in f64 from the f32
// logits: lse = m + log s, a, b, exp(a), exp(b), dz rounded once to f32 as
// f32(grad_mul)·f32(exp(b) − exp(a)); the KL terms exp(a)·(a − b) are summed
// in f64 in a fixed order (the result does not depend on threads or
// scheduling). Identical student and teacher logits give a = b exactly: KL 0
// and dz 0, bit for bit. Tolerance 1e-6 against the reference; near-equal
// distributions (KL per row ≪ 1e-2) see the lse error relative to the small
// KL (parity case kl_64x700_near).
#pragma once

#include <string_view>

#include "bitrank/ops/check.hpp"

namespace bitrank {

template <class T>
class KlOps {
 public:
  virtual ~KlOps() = default;

  // Merges slice z [n][vs] into run [n][2] (see above).
  void kl_lse_merge(CView<T> z, View<T> run, bool first) {
    constexpr std::string_view op = "kl_lse_merge";
    check::rank(op, "z", z, 2);
    check::contiguous(op, "z", z);
    check::dense(op, "run", run, Shape{z.dim(0), 2});
    kl_lse_merge_impl(z, run, first);
  }

  // dz [n][vs] (overwritten; may be zs) and the slice's KL sum, from the
  // student's and teacher's logits of the slice and their final run stats.
  double kl_slice_backward(CView<T> zs, CView<T> zt, CView<T> run_s, CView<T> run_t, double grad_mul, View<T> dz) {
    constexpr std::string_view op = "kl_slice_backward";
    check::rank(op, "zs", zs, 2);
    check::contiguous(op, "zs", zs);
    check::dense(op, "zt", zt, zs.shape);
    check::dense(op, "run_s", run_s, Shape{zs.dim(0), 2});
    check::dense(op, "run_t", run_t, Shape{zs.dim(0), 2});
    check::finite(op, "grad_mul", grad_mul);
    check::dense(op, "dz", dz, zs.shape);
    return kl_slice_backward_impl(zs, zt, run_s, run_t, grad_mul, dz);
  }

 protected:
  virtual void kl_lse_merge_impl(CView<T> z, View<T> run, bool first) = 0;
  virtual double kl_slice_backward_impl(CView<T> zs, CView<T> zt, CView<T> run_s, CView<T> run_t, double grad_mul,
                                        View<T> dz) = 0;
};

}  // namespace bitrank
