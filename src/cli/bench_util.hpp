// Pieces shared by the CPU and CUDA benchmark cases.
#pragma once

#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "bitrank/backend.hpp"
#include "bitrank/rng.hpp"
#include "cli/bench.hpp"

namespace bitrank::cli {

// A buffer of n random values (uniform in ±scale) in `mem`, alive as long as
// the case's lambda holds it.
template <class T>
std::shared_ptr<Buffer<T>> random_buffer(Memory& mem, std::size_t n, std::uint64_t seed, float scale) {
  auto b = std::make_shared<Buffer<T>>(mem, n);
  const auto v = rnd(n, seed, scale);
  std::vector<T> host(n);
  XorShift bits(seed);
  for (std::size_t i = 0; i < n; ++i) {
    if constexpr (std::is_same_v<T, f16>) {
      host[i] = to_f16(v[i]);
    } else if constexpr (std::is_same_v<T, std::uint32_t>) {
      host[i] = static_cast<std::uint32_t>(bits.next_u64() >> 17);
    } else {
      host[i] = static_cast<T>(v[i]);
    }
  }
  b->upload(host);
  return b;
}

// A buffer of n copies of `value` in `mem`.
template <class T>
std::shared_ptr<Buffer<T>> filled_buffer(Memory& mem, std::size_t n, T value) {
  auto b = std::make_shared<Buffer<T>>(mem, n);
  b->upload(std::vector<T>(n, value));
  return b;
}

// FLOPs of the BLR layer's GEMMs: forward + backward (4 per path) and the
// sign gradients (2 per path); each GEMM is 2·T·r·(m or n).
inline double blr_fwd_bwd_flops(index_t m, index_t n, index_t r, index_t T, index_t P) {
  return static_cast<double>(P) * 4.0 * T * r * (m + n);
}
inline double blr_sign_flops(index_t m, index_t n, index_t r, index_t T, index_t P) {
  return static_cast<double>(P) * 2.0 * T * r * (m + n);
}

// "blr fwd+bwd" and "blr sign grads" on `be` at the given shape, each naming
// the anchor case that does its GEMMs alone.
std::vector<BenchCase> blr_cases(Backend<float>& be, index_t m, index_t n, index_t r, index_t T, index_t P,
                                 const std::string& fwd_bwd_anchor, const std::string& sign_anchor);

}  // namespace bitrank::cli
