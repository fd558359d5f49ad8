// The scale balance of a BLR path, shared by Dual-SVID (init.cpp) and its
// refinement (refine.cpp): (h, ℓ, g) → (α·h, ℓ/(α·β), β·g) leaves Ŵ
// unchanged, and α, β are chosen so that rms(h) = rms(ℓ) = rms(g) (their
// geometric mean), which keeps the three trained vectors on one scale for
// the optimizer. A path with an all-zero vector is left as it is.
#pragma once

#include <cmath>
#include <span>

namespace bitrank::blr {

inline double rms(std::span<const double> x) {
  double s = 0;
  for (double v : x) s += v * v;
  return std::sqrt(s / double(x.size()));
}

inline void balance(std::span<double> h, std::span<double> l, std::span<double> g) {
  const double rh = rms(h), rl = rms(l), rg = rms(g);
  if (!(rh > 0 && rl > 0 && rg > 0)) return;
  const double target = std::cbrt(rh) * std::cbrt(rl) * std::cbrt(rg);
  for (double& x : h) x *= target / rh;
  for (double& x : l) x *= target / rl;
  for (double& x : g) x *= target / rg;
}

}  // namespace bitrank::blr
