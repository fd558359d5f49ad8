#include "bitrank/rng.hpp"

#include <cmath>
#include <numbers>

namespace bitrank {

std::vector<float> rnd(std::size_t n, std::uint64_t seed, float scale) {
  XorShift g(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(g.next_signed()) * scale;
  return v;
}

std::vector<float> gaussian(std::size_t n, std::uint64_t seed) {
  XorShift g(seed);
  std::vector<float> out(n);
  for (std::size_t i = 0; i < n; i += 2) {
    const double u1 = (static_cast<double>(g.next_u64() >> 11) + 0.5) / 9007199254740992.0;
    const double u2 = static_cast<double>(g.next_u64() >> 11) / 9007199254740992.0;
    const double rad = std::sqrt(-2.0 * std::log(u1)), t = 2.0 * std::numbers::pi * u2;
    out[i] = static_cast<float>(rad * std::cos(t));
    if (i + 1 < n) out[i + 1] = static_cast<float>(rad * std::sin(t));
  }
  return out;
}

}  // namespace bitrank
