// Honest bit count of a BLR matrix (DESIGN §1): every sign bit and every
// stored scale of every path.
//
//   bits = P · ( r·(m + n)  +  scale_bits · (m + r + n) )
//              S_U and S_V     h, ℓ and g
//
// bits per weight = bits / (m·n). A rank padded by a backend is not counted:
// the stored rank r is what the format holds. (A placeholder until the
// initialisation's accounting lands; that one may replace this header as
// long as honest_bits keeps its meaning.)
#pragma once

#include <cstdint>

namespace bitrank::blr {

inline std::uint64_t honest_bits(std::int64_t m, std::int64_t n, std::int64_t r, std::int64_t paths,
                                 std::int64_t scale_bits) {
  const auto u = [](std::int64_t v) { return static_cast<std::uint64_t>(v); };
  return u(paths) * (u(r) * (u(m) + u(n)) + u(scale_bits) * (u(m) + u(r) + u(n)));
}

}  // namespace bitrank::blr
