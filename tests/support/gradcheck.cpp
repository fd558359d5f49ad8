#include "support/gradcheck.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "bitrank/rng.hpp"

namespace bitrank::test {

GradCheckResult grad_check(std::string_view name, std::vector<double>& param, const std::vector<double>& analytic,
                           const std::function<double()>& loss, double tol, int samples, double h) {
  EXPECT_EQ(param.size(), analytic.size()) << name;
  GradCheckResult r;
  if (param.empty() || param.size() != analytic.size()) return r;
  double scale = 0;
  for (double a : analytic) scale = std::max(scale, std::fabs(a));
  const double floor = std::max(1e-3 * scale, 1e-300);
  const std::size_t n = param.size();
  const std::size_t count = std::min<std::size_t>(n, static_cast<std::size_t>(samples));
  XorShift g(n * 7919 + name.size());
  for (std::size_t s = 0; s < count; ++s) {
    // Spread: first and last entries, the rest random.
    const std::size_t i = count == n ? s : s == 0 ? 0 : s == 1 ? n - 1 : static_cast<std::size_t>(g.next_u64() % n);
    const double keep = param[i];
    param[i] = keep + h;
    const double lp = loss();
    param[i] = keep - h;
    const double lm = loss();
    param[i] = keep;
    const double num = (lp - lm) / (2 * h);
    const double e = std::fabs(num - analytic[i]) / std::max({std::fabs(num), std::fabs(analytic[i]), floor});
    r.worst = std::max(r.worst, std::isnan(e) ? INFINITY : e);
    ++r.checked;
  }
  std::printf("  [gradcheck] %-40s %3d entries  worst %.3e  tol %.1e  %s\n", std::string(name).c_str(), r.checked,
              r.worst, tol, r.worst <= tol ? "ok" : "FAIL");
  EXPECT_LE(r.worst, tol) << name << ": finite differences disagree with the analytic gradient";
  return r;
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) s += a[i] * b[i];
  return s;
}

std::vector<double> rnd64(std::size_t n, std::uint64_t seed, double scale, double offset) {
  auto f = rnd(n, seed, static_cast<float>(scale));
  std::vector<double> d(n);
  for (std::size_t i = 0; i < n; ++i) d[i] = static_cast<double>(f[i]) + offset;
  return d;
}

}  // namespace bitrank::test
