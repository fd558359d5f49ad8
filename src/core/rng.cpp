#include "bitrank/rng.hpp"

namespace bitrank {

std::vector<float> rnd(std::size_t n, std::uint64_t seed, float scale) {
  XorShift g(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(g.next_signed()) * scale;
  return v;
}

}  // namespace bitrank
