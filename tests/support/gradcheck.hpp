// Gradient checks of the f64 reference by central differences.
//
// Pattern: pick a random cotangent dy, let L(θ) = Σ dy ⊙ f(θ); the backward
// given dy must return ∂L/∂θ. For sampled entries θ_i,
//     num = (L(θ_i + h) − L(θ_i − h)) / 2h
// is compared with the analytic gradient; the error of one entry is
// |num − ana| / max(|num|, |ana|, floor) where floor = 1e-3 · the largest
// |ana| (so near-zero entries are judged on the gradient's scale). f64 with
// h = 1e-5 leaves ~1e-9 of truncation and rounding error for smooth ops.
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

namespace bitrank::test {

struct GradCheckResult {
  double worst = 0;  // worst error over the sampled entries
  int checked = 0;
};

// `param` is perturbed in place (and restored); `loss` recomputes L from the
// current values. Checks `samples` entries spread over the vector (all of
// them when it is shorter) and EXPECTs worst ≤ tol.
GradCheckResult grad_check(std::string_view name, std::vector<double>& param, const std::vector<double>& analytic,
                           const std::function<double()>& loss, double tol = 1e-6, int samples = 32,
                           double h = 1e-5);

// Σ a ⊙ b.
double dot(const std::vector<double>& a, const std::vector<double>& b);
// Values of the seeds' rnd as f64.
std::vector<double> rnd64(std::size_t n, std::uint64_t seed, double scale, double offset = 0.0);

}  // namespace bitrank::test
