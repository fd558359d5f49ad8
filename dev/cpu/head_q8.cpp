// Development versions of the decode head on the CPU (the tied embedding
// head of a loaded model, dense_forward_f16 at one token: src/cpu/dense.cpp),
// in the style of dev/cuda: versions of one op in one standalone file, each
// validated against an f64 reference, then timed against version 1.
//
// Build and run (dev/cpu/README.md):
//   g++ -O3 -std=c++20 -march=native -pthread dev/cpu/head_q8.cpp -o head_q8 && ./head_q8
//
// The op: logits z[o] = Σ_c x[c]·w[o][c] for one token, o < V = 49,152,
// c < k = 576 (SmolLM2-135M's tied head), f32 x, f32 accumulation.
//   v1  w in f16, as a loaded `.bitrank` keeps it (56.6 MB): per row, 16
//       values widened (vcvtph2ps) and FMA'd into one accumulator, the
//       library's dot_tokens_avx512<16, 1> at one token.
//   v2  w in Q8_0 blocks of 32 (int8 q, one scale d a block; the layout of
//       the teacher GGUF's token_embd), scales kept as f32 (28.3 + 3.5 MB):
//       per block, 2 × 16 int8 sign-extended and converted (vpmovsxbd,
//       vcvtdq2ps), FMA'd into a block sum, then d·(block sum) FMA'd into
//       the row's accumulator.
// ---------------------------------------------------------------------------
// Counts (written before the run). Bytes: v1 56.6 MB, v2 31.9 MB a token.
// Ops a row: v1 36 widen + 36 FMA; v2 36 sign-extend + 36 convert + 36 FMA
// + 18 FMA + 18 broadcasts ≈ 1.9× v1's. The 2-core VM reads ~30 GB/s (the
// library's head: ~1.9 ms a token), so v1 is bandwidth-bound at ~1.9 ms
// on two threads; v2's 31.9 MB would take ~1.1 ms at that rate, and its ops
// (~5.2 M zmm ops, ~2 a cycle on two cores at ~2.6 GHz) ~0.5 ms: still
// bandwidth-bound. Prediction: v2 ≈ 1.7× v1 on two threads, ~1.2× on one
// (one thread is closer to compute-bound).
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace {

using index_t = std::int64_t;
constexpr index_t kV = 49152, kK = 576, kBlock = 32;

struct Head {
  std::vector<std::uint16_t> w16;  // [V][k] f16
  std::vector<std::int8_t> q;      // [V][k]
  std::vector<float> d;            // [V][k/32]
  std::vector<double> w;           // [V][k] the exact values d·q (both forms hold them; f16 rounds them)
};

std::uint16_t to_f16(float v) { return _cvtss_sh(v, _MM_FROUND_TO_NEAREST_INT); }
float from_f16(std::uint16_t h) { return _cvtsh_ss(h); }

// A Q8_0 head with scales of f16 values, as a GGUF's; w16 holds f16(d·q).
Head make_head(std::uint64_t seed) {
  Head h;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  h.q.resize(kV * kK);
  h.d.resize(kV * kK / kBlock);
  h.w16.resize(kV * kK);
  h.w.resize(kV * kK);
  std::vector<float> block(kBlock);
  for (index_t b = 0; b < kV * kK / kBlock; ++b) {
    float amax = 0;
    for (auto& v : block) amax = std::max(amax, std::fabs(v = normal(rng)));
    const float d = from_f16(to_f16(amax / 127.0f));
    h.d[b] = d;
    for (index_t i = 0; i < kBlock; ++i) {
      const index_t at = b * kBlock + i;
      h.q[at] = static_cast<std::int8_t>(std::clamp(std::lround(block[i] / d), -127L, 127L));
      h.w[at] = static_cast<double>(d) * h.q[at];
      h.w16[at] = to_f16(static_cast<float>(h.w[at]));
    }
  }
  return h;
}

float hsum(__m512 v) { return _mm512_reduce_add_ps(v); }

void v1_rows(const Head& h, const float* x, float* z, index_t o0, index_t o1) {
  for (index_t o = o0; o < o1; ++o) {
    const std::uint16_t* row = h.w16.data() + o * kK;
    __m512 acc = _mm512_setzero_ps();
    for (index_t c = 0; c < kK; c += 16)
      acc = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + c))),
                            _mm512_loadu_ps(x + c), acc);
    z[o] = hsum(acc);
  }
}

void v2_rows(const Head& h, const float* x, float* z, index_t o0, index_t o1) {
  for (index_t o = o0; o < o1; ++o) {
    const std::int8_t* row = h.q.data() + o * kK;
    const float* d = h.d.data() + o * (kK / kBlock);
    __m512 acc = _mm512_setzero_ps();
    for (index_t b = 0; b < kK / kBlock; ++b) {
      const __m128i* p = reinterpret_cast<const __m128i*>(row + b * kBlock);
      const __m512 lo = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(p)));
      const __m512 hi = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(p + 1)));
      const __m512 s = _mm512_fmadd_ps(hi, _mm512_loadu_ps(x + b * kBlock + 16), _mm512_mul_ps(lo, _mm512_loadu_ps(x + b * kBlock)));
      acc = _mm512_fmadd_ps(_mm512_set1_ps(d[b]), s, acc);
    }
    z[o] = hsum(acc);
  }
}

template <class Rows>
void run(Rows rows, const Head& h, const float* x, float* z, int threads) {
  if (threads == 1) return rows(h, x, z, 0, kV);
  std::thread t([&] { rows(h, x, z, kV / 2, kV); });
  rows(h, x, z, 0, kV / 2);
  t.join();
}

template <class Fn>
double time_ms(Fn fn) {
  for (int i = 0; i < 5; ++i) fn();
  double best = 1e30;
  for (int rep = 0; rep < 7; ++rep) {
    const int iters = 20;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) fn();
    best = std::min(best, std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / iters);
  }
  return best;
}

// Relative L2 error of z against the f64 product with the exact weights d·q.
double check(const Head& h, const std::vector<float>& x, const std::vector<float>& z) {
  double num = 0, den = 0;
  for (index_t o = 0; o < kV; ++o) {
    double want = 0;
    for (index_t c = 0; c < kK; ++c) want += h.w[o * kK + c] * x[c];
    num += (z[o] - want) * (z[o] - want);
    den += want * want;
  }
  return std::sqrt(num / den);
}

}  // namespace

int main() {
  const Head h = make_head(7);
  std::vector<float> x(kK), z1(kV), z2(kV);
  std::mt19937_64 rng(11);
  std::normal_distribution<float> normal;
  for (auto& v : x) v = normal(rng);
  run(v1_rows, h, x.data(), z1.data(), 2);
  run(v2_rows, h, x.data(), z2.data(), 2);
  const double e1 = check(h, x, z1), e2 = check(h, x, z2);
  // v1 reads f16(d·q): f16 rounding of each weight (~2^-12 relative); v2 the exact weights in f32 sums.
  const bool ok = e1 <= 1e-3 && e2 <= 1e-5;
  std::printf("head %ld x %ld, one token; relative error against f64 of the exact weights: v1 (f16) %.2e, v2 (Q8_0) %.2e%s\n",
              static_cast<long>(kV), static_cast<long>(kK), e1, e2, ok ? "" : "  FAILED (tolerance v1 1e-3, v2 1e-5)");
  std::printf("%-8s %12s %12s %8s\n", "threads", "v1 f16 ms", "v2 q8 ms", "v1/v2");
  for (int threads : {1, 2}) {
    const double t1 = time_ms([&] { run(v1_rows, h, x.data(), z1.data(), threads); });
    const double t2 = time_ms([&] { run(v2_rows, h, x.data(), z2.data(), threads); });
    std::printf("%-8d %12.3f %12.3f %7.2fx   (v1 %.1f GB/s, v2 %.1f GB/s)\n", threads, t1, t2, t1 / t2,
                kV * kK * 2 / t1 / 1e6, (kV * kK + kV * kK / kBlock * 4.0) / t2 / 1e6);
  }
  return ok ? 0 : 1;
}
