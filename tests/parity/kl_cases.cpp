// Parity cases of the sliced KL objective: both passes over every slice of
// a [n][V] pair of logits, the run stats, each slice's dz and the KL sum.
#include <vector>

#include "support/parity.hpp"

namespace bitrank::test {
namespace {

// Logits of about `scale` around `offset` (the max subtraction must hold
// them); the student's either independent of the teacher's or, with
// near > 0, the teacher's plus noise of that size (a trained student: the
// KL is small and exp(b) − exp(a) cancels).
void kl_case(ParityRun& p, index_t n, const std::vector<index_t>& slices, float scale, float offset, float near,
             double tol) {
  std::vector<Real> zs, zt, dz;
  for (index_t vs : slices) {
    const auto t = p.random(static_cast<std::size_t>(n * vs), scale);
    std::vector<float> tv(t), sv(t.size());
    for (auto& v : tv) v += offset;
    if (near > 0) {
      const auto noise = p.random(t.size(), near);
      for (std::size_t i = 0; i < t.size(); ++i) sv[i] = tv[i] + noise[i];
    } else {
      const auto s = p.random(t.size(), scale);
      for (std::size_t i = 0; i < t.size(); ++i) sv[i] = s[i] + offset;
    }
    zt.push_back(p.input({n, vs}, tv));
    zs.push_back(p.input({n, vs}, sv));
    dz.push_back(p.output({n, vs}));
  }
  auto run_s = p.output({n, 2}), run_t = p.output({n, 2});
  for (std::size_t k = 0; k < slices.size(); ++k) {
    p.ref.kl().kl_lse_merge(zs[k].ref(), run_s.ref(), k == 0);
    p.ref.kl().kl_lse_merge(zt[k].ref(), run_t.ref(), k == 0);
    p.be.kl().kl_lse_merge(zs[k].be(), run_s.be(), k == 0);
    p.be.kl().kl_lse_merge(zt[k].be(), run_t.be(), k == 0);
  }
  // (m, s): m is an exact max, s a long f64 sum of f32 expf rounded once.
  p.expect_close("run_s", run_s, 1e-6);
  p.expect_close("run_t", run_t, 1e-6);
  const double grad_mul = 1.0 / static_cast<double>(n);
  double want = 0, got = 0;
  for (std::size_t k = 0; k < slices.size(); ++k) {
    want += p.ref.kl().kl_slice_backward(zs[k].ref(), zt[k].ref(), run_s.ref(), run_t.ref(), grad_mul, dz[k].ref());
    got += p.be.kl().kl_slice_backward(zs[k].be(), zt[k].be(), run_s.be(), run_t.be(), grad_mul, dz[k].be());
    p.expect_close("dz slice " + std::to_string(k), dz[k], tol);
  }
  p.expect_close("kl", got, want, tol);
}

}  // namespace

// 1e-6: a few f32 roundings per element (expf, s', dz) and f64 sums.
BR_PARITY_CASE(kl_37x300_slices_128) { kl_case(p, 37, {128, 128, 44}, 3.0f, 0.0f, 0.0f, 1e-6); }
BR_PARITY_CASE(kl_5x1000_one_slice_offset_30) { kl_case(p, 5, {1000}, 4.0f, 30.0f, 0.0f, 1e-6); }
BR_PARITY_CASE(kl_3x257_slices_1) { kl_case(p, 3, {1, 255, 1}, 2.0f, -5.0f, 0.0f, 1e-6); }
// SmolLM2's vocabulary 49152 in the default slices of 8192 (6 slices), a few rows.
BR_PARITY_CASE(kl_8x49152_slices_8192) { kl_case(p, 8, {8192, 8192, 8192, 8192, 8192, 8192}, 4.0f, 0.0f, 0.0f, 1e-6); }
// Student within 0.01 of the teacher: KL ≈ 2e-5 per row, dz = exp(b) − exp(a)
// of two values equal to 1%. The f32 backends keep s in f32, so each lse is
// off by ~3e-8 absolute: dz by ~3e-8/1e-2 ≈ 3e-6 relative, and the KL sum by
// (δs − δt) per row, ~4e-8 against 2e-5: ~1e-4 relative (measured 9e-5 on
// the CPU). A trained 1-bit student's KL (≥ 1e-2 per token) sees ~1e-6.
BR_PARITY_CASE(kl_64x700_near) { kl_case(p, 64, {512, 188}, 3.0f, 2.0f, 0.01f, 3e-4); }

}  // namespace bitrank::test
