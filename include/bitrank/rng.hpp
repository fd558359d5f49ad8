// Deterministic test data: the xorshift64 generator of the seeds' `rnd`.
//
// rnd(n, seed, scale): state s = seed·0x9E3779B97F4A7C15 | 1; per value
// s ^= s<<13; s ^= s>>7; s ^= s<<17; value = ((s>>11)/2^53·2 − 1)·scale,
// rounded to f32 — uniform in (−scale, scale). Same seed, same numbers, on
// every machine.
#pragma once

#include <cstdint>
#include <vector>

namespace bitrank {

class XorShift {
 public:
  explicit XorShift(std::uint64_t seed) : s_(seed * 0x9E3779B97F4A7C15ull | 1ull) {}
  std::uint64_t next_u64() {
    s_ ^= s_ << 13;
    s_ ^= s_ >> 7;
    s_ ^= s_ << 17;
    return s_;
  }
  // Uniform in [−1, 1) as f64 (53 random bits).
  double next_signed() { return static_cast<double>(next_u64() >> 11) / 9007199254740992.0 * 2.0 - 1.0; }
  float next_f32(float scale) { return static_cast<float>(next_signed()) * scale; }

 private:
  std::uint64_t s_;
};

// The seeds' rnd(n, seed, scale).
std::vector<float> rnd(std::size_t n, std::uint64_t seed, float scale);

// Standard normal values by Box–Muller over XorShift(seed): per pair
// u1 = (53 bits + ½)/2^53 ∈ (0, 1), u2 = 53 bits/2^53, values
// √(−2 ln u1)·(cos 2πu2, sin 2πu2), rounded to f32 (the randomized SVD's
// sketch, test matrices).
std::vector<float> gaussian(std::size_t n, std::uint64_t seed);

// Counter-based hash for seeded stochastic decisions (splitmix64 finaliser
// of seed ⊕ counter): the same (seed, counter) gives the same bits on every
// backend, in any order of evaluation.
inline std::uint64_t hash_counter(std::uint64_t seed, std::uint64_t counter) {
  std::uint64_t z = seed + 0x9E3779B97F4A7C15ull * (counter + 1);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
// Uniform in [0, 1) from the top 24 bits (exact in f32 and f64 alike).
inline float hash_uniform(std::uint64_t seed, std::uint64_t counter) {
  return static_cast<float>(hash_counter(seed, counter) >> 40) * (1.0f / 16777216.0f);
}
// Uniform in [0, 1) from the top 53 bits, as f64: a draw fine enough for
// probabilities far below 2⁻²⁴ (sampling over a vocabulary of 10⁵ tokens).
inline double hash_uniform_f64(std::uint64_t seed, std::uint64_t counter) {
  return static_cast<double>(hash_counter(seed, counter) >> 11) * (1.0 / 9007199254740992.0);
}

}  // namespace bitrank
