// Random BLR matrices and student blocks (contract: include/bitrank/train/random_weights.hpp).
#include "bitrank/train/random_weights.hpp"

#include <cmath>

#include "bitrank/ops/bitmap.hpp"
#include "bitrank/rng.hpp"

namespace bitrank::train {

blr::HostBlrMatrix random_blr(index_t m, index_t n, index_t r, index_t paths, std::uint64_t seed, double out_scale) {
  XorShift g(seed);
  const auto uniform = [&](double lo, double hi) { return lo + (hi - lo) * (g.next_signed() + 1.0) / 2.0; };
  blr::HostBlrMatrix w{m, n, r, {}};
  const double l_scale = out_scale / std::sqrt(static_cast<double>(n * r * paths));
  for (index_t p = 0; p < paths; ++p) {
    blr::HostBlrPath path;
    const index_t words = sign_words(r);
    for (index_t i = 0; i < m * words; ++i) path.sign_u.push_back(static_cast<std::uint32_t>(g.next_u64() >> 32));
    for (index_t i = 0; i < n * words; ++i) path.sign_v.push_back(static_cast<std::uint32_t>(g.next_u64() >> 32));
    for (index_t i = 0; i < m; ++i) path.h.push_back(static_cast<float>(uniform(0.5, 1.5)));
    for (index_t k = 0; k < r; ++k) path.l.push_back(static_cast<float>(uniform(0.5, 1.5) * l_scale));
    for (index_t j = 0; j < n; ++j) path.g.push_back(static_cast<float>(uniform(0.5, 1.5)));
    w.paths.push_back(std::move(path));
  }
  return w;
}

StudentBlockWeights random_student(const model::LlamaBlockDims& dims, const std::array<index_t, model::kLlamaProjs>& ranks,
                                   index_t paths, std::uint64_t seed) {
  StudentBlockWeights w;
  for (model::LlamaProj p : model::kAllLlamaProjs) {
    // q, k, v, gate, up read the normalised input (unit scale); o and down
    // feed the residual stream: half its size.
    const bool residual = p == model::LlamaProj::o || p == model::LlamaProj::down;
    const auto i = static_cast<std::size_t>(p);
    w.proj[i] = random_blr(dims.out_features(p), dims.in_features(p), ranks[i], paths,
                           seed * 16 + static_cast<std::uint64_t>(p), residual ? 0.5 : 1.0);
  }
  XorShift g(seed * 16 + 15);
  for (index_t j = 0; j < dims.hidden; ++j) {
    w.attn_norm.push_back(static_cast<float>(1.0 + 0.2 * g.next_signed()));
    w.ffn_norm.push_back(static_cast<float>(1.0 + 0.2 * g.next_signed()));
  }
  return w;
}

StudentBlockWeights random_student(const model::LlamaBlockDims& dims, index_t r, index_t paths, std::uint64_t seed) {
  std::array<index_t, model::kLlamaProjs> ranks{};
  ranks.fill(r);
  return random_student(dims, ranks, paths, seed);
}

}  // namespace bitrank::train
