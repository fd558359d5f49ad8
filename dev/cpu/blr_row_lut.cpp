// Development versions of the CPU decode kernel's row pass (blr_infer,
// src/cpu/blr_infer.cpp), in the style of dev/cuda: several versions of one
// op in one standalone file, each validated against an f64 reference and
// then timed against version 1, the library's kernel.
//
// Build and run (dev/cpu/README.md):
//   g++ -O3 -std=c++20 -march=native dev/cpu/blr_row_lut.cpp -o blr_row_lut && ./blr_row_lut
//
// The op, one path, one token, one thread: y[j] = h[j] · Σ_k s_jk · c[k] for
// j < m, k < r, with s_jk = +1 where bit k%32 of word k/32 of row j of the
// bitmap S_U [m][words] is set, else −1 (c = ℓ ⊙ S_Vᵀ(g ⊙ x), the rank
// pass's output). Every version: f32, each sum in an order fixed by the shape.
//
// ---------------------------------------------------------------------------
// Counts (written before any measurement; Zen 4, AVX-512 on 256-bit units,
// so a 512-bit op takes both halves of a pipe pair: ~2 zmm ops a cycle)
//   v1  the library's row_block_avx512<1, 4>: per 4 rows × 16 ranks, one load
//       of c, four mask loads (kmov from the bitmap), four masked xors and
//       four subs: 9 zmm ops per 64 sign-adds = 0.14 an add. Measured in the
//       library at ~1.6 cycles per 16-lane step.
//   v2  table lookup over groups of 4 ranks: T_g[i] = Σ_{b<4} ±c[4g+b] (bit b
//       of i set: +), one zmm of 16 entries per group, built once per token
//       (r/4 groups × 7 ops). Then per 16 rows × 32 ranks: the 16 rows' word
//       w gathered (one vpgatherdd), and per nibble q < 8 a shift, an and, a
//       vpermps from T_{8w+q} and an add: 33 ops per 512 sign-adds = 0.065 an
//       add, 2.2× fewer than v1 (the gather's cost is the unknown: ~8–16
//       cycles on Zen 4).
//   v3  v2 with the bitmap repacked once (at load) as [m/16][words][16]
//       words, so the 16 rows' word w is one plain load: no gather.
// Prediction at 576 × 576 r 192 (the SmolLM2 q projection at 1 bpw): v1
// ~1.6 cycles × 576·192/16 steps = 11k cycles ≈ 4.3 µs at 2.6 GHz; v3 at
// 0.065 ops an add / 2 a cycle ≈ 3.6k cycles ≈ 1.4 µs plus the tables (~350
// ops) → ~3× v1; v2 between them.
// Numerics: v1's order is the library's (32 lanes k mod 32, then a fixed
// tree); v2 and v3 sum ((±c0 ± c1) ± c2) ± c3 per group, then the groups in
// order into 4 accumulators (group g into g mod 4), then (a0 + a1) + (a2 + a3).
#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

// GCC 12's avx512fintrin.h casts through _mm512_undefined_*, which
// -Wmaybe-uninitialized reports at every inlined use.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

namespace {

using index_t = std::int64_t;

struct alignas(64) Table {  // the 16 signed sums of one group of 4 ranks
  float v[16];
};

struct Layer {
  index_t m, r, words;
  std::vector<std::uint32_t> bits;    // [m][words]
  std::vector<std::uint32_t> packed;  // [m/16][words][16] (v3)
  std::vector<float> h, c;            // [m], [r]
};

Layer make_layer(index_t m, index_t r, std::uint64_t seed) {
  Layer L{m, r, (r + 31) / 32, {}, {}, {}, {}};
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  L.bits.resize(static_cast<std::size_t>(m * L.words));
  for (auto& w : L.bits) w = static_cast<std::uint32_t>(rng());
  for (index_t j = 0; j < m; ++j)  // bits past r are arbitrary in the format: clear them here, v2/v3 read them
    if (r % 32) L.bits[j * L.words + L.words - 1] &= (1u << (r % 32)) - 1;
  L.packed.resize(L.bits.size());
  for (index_t jb = 0; jb < m / 16; ++jb)
    for (index_t w = 0; w < L.words; ++w)
      for (index_t l = 0; l < 16; ++l) L.packed[(jb * L.words + w) * 16 + l] = L.bits[(jb * 16 + l) * L.words + w];
  L.h.resize(m);
  L.c.resize(static_cast<std::size_t>(L.words * 32), 0.0f);  // zero past r
  for (auto& v : L.h) v = normal(rng);
  for (index_t k = 0; k < r; ++k) L.c[k] = normal(rng);
  return L;
}

double reference(const Layer& L, index_t j, double* scale) {
  double s = 0, a = 0;
  for (index_t k = 0; k < L.r; ++k) {
    const bool plus = L.bits[j * L.words + k / 32] >> (k % 32) & 1u;
    s += plus ? L.c[k] : -static_cast<double>(L.c[k]);
    a += std::fabs(L.c[k]);
  }
  *scale = a * std::fabs(L.h[j]);
  return L.h[j] * s;
}

// ---- v1: the library's row pass (row_block_avx512<1, 4>) ------------------------

__mmask16 half_word(const std::uint32_t* row, index_t w, int q) {
  std::uint16_t half;
  std::memcpy(&half, reinterpret_cast<const char*>(row + w) + 2 * q, sizeof half);
  return _cvtu32_mask16(half);
}

float tree_sum16(__m512 v) {
  const __m256 upper = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
  const __m256 e = _mm256_add_ps(_mm512_castps512_ps256(v), upper);
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(e), _mm256_extractf128_ps(e, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

template <int NR>
void v1_block(const Layer& L, index_t j0, float* y) {
  const __m512i sign = _mm512_set1_epi32(static_cast<int>(0x80000000u));
  __m512 acc[NR][2];
  for (auto& row : acc) row[0] = row[1] = _mm512_setzero_ps();
  for (index_t w = 0; w < L.words; ++w)
    for (int q = 0; q < 2; ++q) {
      __mmask16 plus[NR];
      for (int j = 0; j < NR; ++j) plus[j] = half_word(L.bits.data() + (j0 + j) * L.words, w, q);
      const __m512i c = _mm512_loadu_si512(L.c.data() + 32 * w + 16 * q);
      for (int j = 0; j < NR; ++j)
        acc[j][q] = _mm512_sub_ps(acc[j][q], _mm512_castsi512_ps(_mm512_mask_xor_epi32(c, plus[j], c, sign)));
    }
  for (int j = 0; j < NR; ++j) y[j0 + j] = L.h[j0 + j] * tree_sum16(_mm512_add_ps(acc[j][0], acc[j][1]));
}

void v1(const Layer& L, float* y) {
  index_t j = 0;
  for (; j + 4 <= L.m; j += 4) v1_block<4>(L, j, y);
  for (; j < L.m; ++j) v1_block<1>(L, j, y);
}

// ---- v2 / v3: tables of 16 signed sums per group of 4 ranks ------------------------

// tables[g] lane i = ((±c0 ± c1) ± c2) ± c3, c_b = c[4g + b], + where bit b of i is set.
void build_tables(const Layer& L, Table* tables) {
  const __mmask16 bit[4] = {0xAAAA, 0xCCCC, 0xF0F0, 0xFF00};
  for (index_t g = 0; g < L.words * 8; ++g) {
    __m512 t = _mm512_setzero_ps();
    for (int b = 0; b < 4; ++b) {
      const __m512 pos = _mm512_set1_ps(L.c[4 * g + b]), neg = _mm512_set1_ps(-L.c[4 * g + b]);
      const __m512 term = _mm512_mask_blend_ps(bit[b], neg, pos);
      t = b == 0 ? term : _mm512_add_ps(t, term);
    }
    _mm512_store_ps(tables[g].v, t);
  }
}

// Rows [j0, j0 + 16) from their words (w: the 16 rows' word w as 16 lanes).
template <class WordOf>
void lut_rows(const Layer& L, const Table* tables, index_t j0, float* y, WordOf word_of) {
  const __m512i nibble = _mm512_set1_epi32(0xF);
  __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
  for (index_t w = 0; w < L.words; ++w) {
    const __m512i bits = word_of(w);
    const Table* t = tables + 8 * w;
    for (int q = 0; q < 8; ++q) {
      const __m512i idx = _mm512_and_si512(_mm512_srli_epi32(bits, 4 * q), nibble);
      acc[q % 4] = _mm512_add_ps(acc[q % 4], _mm512_permutexvar_ps(idx, _mm512_load_ps(t[q].v)));
    }
  }
  const __m512 s = _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3]));
  _mm512_storeu_ps(y + j0, _mm512_mul_ps(s, _mm512_loadu_ps(L.h.data() + j0)));
}

void v2(const Layer& L, Table* tables, float* y) {
  build_tables(L, tables);
  const __m512i stride = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                            _mm512_set1_epi32(static_cast<int>(L.words)));
  for (index_t j0 = 0; j0 < L.m; j0 += 16) {
    const std::uint32_t* base = L.bits.data() + j0 * L.words;
    lut_rows(L, tables, j0, y, [&](index_t w) { return _mm512_i32gather_epi32(stride, base + w, 4); });
  }
}

void v3(const Layer& L, Table* tables, float* y) {
  build_tables(L, tables);
  for (index_t j0 = 0; j0 < L.m; j0 += 16) {
    const std::uint32_t* base = L.packed.data() + j0 * L.words;
    lut_rows(L, tables, j0, y, [&](index_t w) { return _mm512_loadu_si512(base + 16 * w); });
  }
}

// ---- validation and timing -------------------------------------------------------

template <class Fn>
double time_us(Fn fn) {
  for (int i = 0; i < 20; ++i) fn();
  double best = 1e30;
  for (int rep = 0; rep < 7; ++rep) {
    const int iters = 200;
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) fn();
    const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / iters;
    best = std::min(best, us);
  }
  return best;
}

bool check(const Layer& L, const std::vector<float>& y, const char* name) {
  double worst = 0;
  for (index_t j = 0; j < L.m; ++j) {
    double scale;
    const double want = reference(L, j, &scale);
    worst = std::max(worst, std::fabs(y[j] - want) / std::max(scale, 1e-30));
  }
  const bool ok = worst <= 1e-5;
  if (!ok) std::printf("  %s: FAILED, worst error %.3e of Σ|c|·|h| (tolerance 1e-5)\n", name, worst);
  return ok;
}

}  // namespace

int main() {
  struct Shape {
    index_t m, r;
    const char* what;
  } shapes[] = {{576, 128, "SmolLM2 q/o at 1 bpw (r 128)"},
                {576, 192, "SmolLM2 down, m 576 (r 192)"},
                {1536, 192, "SmolLM2 gate/up (r 192)"},
                {4096, 992, "4096² at 1 bpw (r 992)"},
                {11008, 1472, "11008×4096 (r 1472)"}};
  std::printf("row pass, one path, one token, one thread; best of 7 × 200 calls\n");
  std::printf("%-30s %10s %10s %10s %8s %8s\n", "shape", "v1 µs", "v2 µs", "v3 µs", "v1/v2", "v1/v3");
  bool all = true;
  for (const Shape& s : shapes) {
    const Layer L = make_layer(s.m, s.r, static_cast<std::uint64_t>(s.m * 7919 + s.r));
    std::vector<float> y1(s.m), y2(s.m), y3(s.m);
    std::vector<Table> tables(static_cast<std::size_t>(L.words * 8));
    v1(L, y1.data());
    v2(L, tables.data(), y2.data());
    v3(L, tables.data(), y3.data());
    all &= check(L, y1, "v1") & check(L, y2, "v2") & check(L, y3, "v3");
    if (!std::equal(y2.begin(), y2.end(), y3.begin())) {
      std::printf("  v2 and v3 differ (the same order: they must not)\n");
      all = false;
    }
    const double t1 = time_us([&] { v1(L, y1.data()); });
    const double t2 = time_us([&] { v2(L, tables.data(), y2.data()); });
    const double t3 = time_us([&] { v3(L, tables.data(), y3.data()); });
    std::printf("%-30s %10.2f %10.2f %10.2f %7.2fx %7.2fx\n", s.what, t1, t2, t3, t1 / t2, t1 / t3);
  }
  std::printf(all ? "every version within 1e-5 of the f64 reference\n" : "VALIDATION FAILED\n");
  return all ? 0 : 1;
}
