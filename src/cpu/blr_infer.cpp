// Bit-reading BLR inference on the CPU (blr_infer for few tokens; contract
// and numerics in include/bitrank/ops/blr.hpp). Per path, two passes over
// the bitmaps, no sign plane formed:
//
//   rank pass  a = S_Vᵀ(g⊙x): for each input i in order, ±x'_i (x'_i =
//              f32(x_i·g_i)) is added to every a_k, the sign taken from the
//              bitmap word itself — AVX-512: a blend of ±x' under the 16-bit
//              mask; AVX2: the sign bits xored in from a table of byte →
//              8 lane sign masks; scalar: the same xor per rank. The sums of
//              a block of tokens × ranks stay in registers over all i; then
//              c = ℓ⊙a is stored [P][ntok][r].
//   row pass   per output row j and token: s_j = Σ_k ±c_k over 32 lanes
//              (k mod 32, each in order of k: two 16-lane or four 8-lane
//              registers, so each chain is half or a quarter of r/16 adds),
//              then a fixed tree; y_j = h_j·s_j, paths added in order. A few
//              rows at once share each loaded chunk of c.
//
// Every a_k is one sequential f32 sum over i, and every s_j the same 32 lane
// sums and tree, at every SIMD level and thread count: the levels agree to
// the bit (the file is built with -ffp-contract=off: no level fuses h·s + y).
//
// The work of a pass is counted in 16-lane add steps (one per input or row,
// token and 16 ranks); a chunk below kMinParallelWork runs on the caller,
// else the rank pass splits over (path, block of ranks) and the row pass
// over blocks of rows. The level is chosen at run time; the AVX kernels
// carry target attributes, so the library builds for any x86-64.
//
// Measured (EPYC, AVX-512, 4096×4096 r 992 P 2, one thread): ~1.6 cycles
// per 16-lane step at 1 token, ~1.3 at 8. GCC turns the rank pass's blend
// of ±x' into a masked broadcast plus a copy. Tried and dropped: blending c
// and −c (a stored −c) in the row pass — GCC turned the blend into a masked
// load, two loads per step, 1.6× slower at 8 tokens.
#include "cpu/blr_infer.hpp"

#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>

#include "bitrank/error.hpp"
#include "cpu/simd_sum.hpp"

namespace bitrank::cpu {
namespace {

constexpr std::uint32_t kSignBit = 0x80000000u;
constexpr index_t kRankBlockWords = 4;          // words (128 ranks) of one unit of the rank pass
// 16-lane add steps (~80 µs) a chunk must hold to be worth a thread: on the
// 2-core EPYC, 576×576 r128 at 8 tokens (2 × 74k steps) ran in 88 µs on
// one thread and 159 µs split over two at 1/2^16 of this rule; 1536×576
// r192 at 8 tokens (224 µs on one) and 4096×4096 r992 at 1 token (620 µs)
// gain from two.
constexpr index_t kMinParallelWork = 1 << 17;

// The rank pass of one path: c [ntok][r] from x [ntok][n] and S_V [n][words].
struct RankArgs {
  const std::uint32_t* bits;
  const float *x, *g, *l;
  index_t n, r, words;
  float* c;
};

// The row pass of one path: y [ntok][m] (=, or += with accumulate) from c and S_U [m][words].
struct RowArgs {
  const std::uint32_t* bits;
  const float *c, *h;
  index_t m, r, words;
  float* y;
  bool accumulate;
};

void store_row(const RowArgs& a, index_t t, index_t j, float s) {
  float& out = a.y[t * a.m + j];
  const float v = a.h[j] * s;
  out = a.accumulate ? out + v : v;
}

// ---- scalar -----------------------------------------------------------------

float signed_value(float v, std::uint32_t word, index_t bit) {
  return std::bit_cast<float>(std::bit_cast<std::uint32_t>(v) ^ ((~word >> bit & 1u) << 31));
}

// The fixed tree over 32 lane sums: l + l+16, then + l+8, + l+4, + l+2, + l+1.
float tree_sum32(float* p) {
  for (int half = 16; half >= 1; half /= 2)
    for (int l = 0; l < half; ++l) p[l] += p[l + half];
  return p[0];
}

void rank_pass_scalar(const RankArgs& a, index_t ntok, index_t w0, index_t w1) {
  const index_t k0 = 32 * w0, k1 = 32 * w1;
  for (index_t t = 0; t < ntok; ++t) {
    float* out = a.c + t * a.r;
    std::fill(out + k0, out + k1, 0.0f);
    for (index_t i = 0; i < a.n; ++i) {
      const float xi = a.x[t * a.n + i] * a.g[i];
      const std::uint32_t* bits = a.bits + i * a.words;
      for (index_t k = k0; k < k1; ++k) out[k] += signed_value(xi, bits[k / 32], k % 32);
    }
    for (index_t k = k0; k < k1; ++k) out[k] *= a.l[k];
  }
}

void row_pass_scalar(const RowArgs& a, index_t ntok, index_t j0, index_t j1) {
  for (index_t j = j0; j < j1; ++j) {
    const std::uint32_t* bits = a.bits + j * a.words;
    for (index_t t = 0; t < ntok; ++t) {
      const float* c = a.c + t * a.r;
      float lane[32] = {};
      for (index_t k = 0; k < a.r; ++k) lane[k % 32] += signed_value(c[k], bits[k / 32], k % 32);
      store_row(a, t, j, tree_sum32(lane));
    }
  }
}

// ---- AVX2 -------------------------------------------------------------------

// Lane q of entry b: the sign bit where bit q of byte b is clear (a −1).
struct ByteSigns {
  alignas(32) std::uint32_t lane[256][8];
};
constexpr ByteSigns make_byte_signs() {
  ByteSigns s{};
  for (unsigned b = 0; b < 256; ++b)
    for (unsigned q = 0; q < 8; ++q) s.lane[b][q] = (b >> q & 1u) ? 0u : kSignBit;
  return s;
}
constexpr ByteSigns kByteSigns = make_byte_signs();

__attribute__((target("avx2"))) __m256 byte_signs(std::uint32_t word, int q) {
  return _mm256_load_ps(reinterpret_cast<const float*>(kByteSigns.lane[(word >> (8 * q)) & 0xffu]));
}

// Tokens [t0, t0 + NT) × words [w0, w0 + NW): 4·NW·NT sums of 8 ranks.
template <int NT, int NW>
__attribute__((target("avx2"))) void rank_block_avx2(const RankArgs& a, index_t t0, index_t w0) {
  __m256 acc[NT][4 * NW];
  for (auto& tok : acc)
    for (auto& v : tok) v = _mm256_setzero_ps();
  for (index_t i = 0; i < a.n; ++i) {
    const std::uint32_t* bits = a.bits + i * a.words + w0;
    __m256 xi[NT];
    for (int t = 0; t < NT; ++t) xi[t] = _mm256_set1_ps(a.x[(t0 + t) * a.n + i] * a.g[i]);
    for (int w = 0; w < NW; ++w)
      for (int q = 0; q < 4; ++q) {
        const __m256 sign = byte_signs(bits[w], q);
        for (int t = 0; t < NT; ++t) acc[t][4 * w + q] = _mm256_add_ps(acc[t][4 * w + q], _mm256_xor_ps(xi[t], sign));
      }
  }
  for (int t = 0; t < NT; ++t)
    for (int q = 0; q < 4 * NW; ++q) {
      const index_t k = 32 * w0 + 8 * q;
      _mm256_storeu_ps(a.c + (t0 + t) * a.r + k, _mm256_mul_ps(acc[t][q], _mm256_loadu_ps(a.l + k)));
    }
}

// Words [w0, w1) for tokens [t0, t0 + NT): blocks of NW words, then halves for the tail.
template <int NT, int NW>
__attribute__((target("avx2"))) void rank_words_avx2(const RankArgs& a, index_t t0, index_t w0, index_t w1) {
  index_t w = w0;
  for (; w + NW <= w1; w += NW) rank_block_avx2<NT, NW>(a, t0, w);
  if constexpr (NW > 1)
    if (w < w1) rank_words_avx2<NT, NW / 2>(a, t0, w, w1);
}

__attribute__((target("avx2"))) void rank_pass_avx2(const RankArgs& a, index_t ntok, index_t w0, index_t w1) {
  index_t t = 0;
  for (; t + 2 <= ntok; t += 2) rank_words_avx2<2, 1>(a, t, w0, w1);
  if (t < ntok) rank_words_avx2<1, 2>(a, t, w0, w1);
}

// Rows [j0, j0 + NR) for tokens [t0, t0 + NT): the 32 lanes k mod 32 as four 8-lane quarters.
template <int NT, int NR>
__attribute__((target("avx2"))) void row_block_avx2(const RowArgs& a, index_t t0, index_t j0) {
  __m256 acc[NR][NT][4];
  for (auto& row : acc)
    for (auto& tok : row)
      for (auto& v : tok) v = _mm256_setzero_ps();
  for (index_t w = 0; w < a.words; ++w)
    for (int q = 0; q < 4; ++q) {
      __m256 sign[NR];
      for (int j = 0; j < NR; ++j) sign[j] = byte_signs(a.bits[(j0 + j) * a.words + w], q);
      for (int t = 0; t < NT; ++t) {
        const __m256 c = _mm256_loadu_ps(a.c + (t0 + t) * a.r + 32 * w + 8 * q);
        for (int j = 0; j < NR; ++j) acc[j][t][q] = _mm256_add_ps(acc[j][t][q], _mm256_xor_ps(c, sign[j]));
      }
    }
  for (int j = 0; j < NR; ++j)
    for (int t = 0; t < NT; ++t) {
      const __m256* v = acc[j][t];  // l + l+16 in both halves, then l + l+8
      store_row(a, t0 + t, j0 + j, tree_sum8(_mm256_add_ps(_mm256_add_ps(v[0], v[2]), _mm256_add_ps(v[1], v[3]))));
    }
}

// Rows [j0, j1) for tokens [t0, t0 + NT): NR rows at a time (independent sums), then one by one.
template <int NT, int NR>
__attribute__((target("avx2"))) void row_rows_avx2(const RowArgs& a, index_t t0, index_t j0, index_t j1) {
  index_t j = j0;
  for (; j + NR <= j1; j += NR) row_block_avx2<NT, NR>(a, t0, j);
  for (; j < j1; ++j) row_block_avx2<NT, 1>(a, t0, j);
}

__attribute__((target("avx2"))) void row_pass_avx2(const RowArgs& a, index_t ntok, index_t j0, index_t j1) {
  index_t t = 0;
  for (; t + 2 <= ntok; t += 2) row_rows_avx2<2, 1>(a, t, j0, j1);
  if (t < ntok) row_rows_avx2<1, 2>(a, t, j0, j1);
}

// ---- AVX-512 ----------------------------------------------------------------

// GCC 12's avx512fintrin.h casts and shuffles through _mm512_undefined_*,
// which -Wmaybe-uninitialized reports at every inlined use.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

// tree_sum32 of lanes lo (0–15) and hi (16–31).
__attribute__((target("avx512f"))) float tree_sum32_avx512(__m512 lo, __m512 hi) {
  return tree_sum16(_mm512_add_ps(lo, hi));  // l + l+16, then l + l+8, …
}

// The 16-bit mask of ranks 32w + 16q … +15 of a bitmap row (bit set: +1).
__attribute__((target("avx512f"))) __mmask16 half_word(const std::uint32_t* row, index_t w, int q) {
  std::uint16_t half;
  std::memcpy(&half, reinterpret_cast<const char*>(row + w) + 2 * q, sizeof half);  // little-endian halves
  return _cvtu32_mask16(half);
}

// Tokens [t0, t0 + NT) × words [w0, w0 + NW): 2·NW·NT sums of 16 ranks.
template <int NT, int NW>
__attribute__((target("avx512f"))) void rank_block_avx512(const RankArgs& a, index_t t0, index_t w0) {
  __m512 acc[NT][2 * NW];
  for (auto& tok : acc)
    for (auto& v : tok) v = _mm512_setzero_ps();
  for (index_t i = 0; i < a.n; ++i) {
    const std::uint32_t* bits = a.bits + i * a.words + w0;
    __m512 pos[NT], neg[NT];
    for (int t = 0; t < NT; ++t) {
      const float xi = a.x[(t0 + t) * a.n + i] * a.g[i];
      pos[t] = _mm512_set1_ps(xi);
      neg[t] = _mm512_set1_ps(-xi);
    }
    for (int w = 0; w < NW; ++w)
      for (int q = 0; q < 2; ++q) {
        const __mmask16 plus = half_word(bits, w, q);
        for (int t = 0; t < NT; ++t)
          acc[t][2 * w + q] = _mm512_add_ps(acc[t][2 * w + q], _mm512_mask_blend_ps(plus, neg[t], pos[t]));
      }
  }
  for (int t = 0; t < NT; ++t)
    for (int q = 0; q < 2 * NW; ++q) {
      const index_t k = 32 * w0 + 16 * q;
      _mm512_storeu_ps(a.c + (t0 + t) * a.r + k, _mm512_mul_ps(acc[t][q], _mm512_loadu_ps(a.l + k)));
    }
}

template <int NT, int NW>
__attribute__((target("avx512f"))) void rank_words_avx512(const RankArgs& a, index_t t0, index_t w0, index_t w1) {
  index_t w = w0;
  for (; w + NW <= w1; w += NW) rank_block_avx512<NT, NW>(a, t0, w);
  if constexpr (NW > 1)
    if (w < w1) rank_words_avx512<NT, NW / 2>(a, t0, w, w1);
}

__attribute__((target("avx512f"))) void rank_pass_avx512(const RankArgs& a, index_t ntok, index_t w0, index_t w1) {
  index_t t = 0;
  for (; t + 8 <= ntok; t += 8) rank_words_avx512<8, 1>(a, t, w0, w1);
  if (ntok - t >= 4) rank_words_avx512<4, 2>(a, t, w0, w1), t += 4;
  if (ntok - t >= 2) rank_words_avx512<2, 4>(a, t, w0, w1), t += 2;
  if (t < ntok) rank_words_avx512<1, 4>(a, t, w0, w1);
}

// Rows [j0, j0 + NR) for tokens [t0, t0 + NT): the 32 lanes k mod 32 as two
// 16-lane halves. Where a bit is set, c is negated and subtracted: acc − (−c)
// is acc + c to the bit, and the mask needs no complement.
template <int NT, int NR>
__attribute__((target("avx512f"))) void row_block_avx512(const RowArgs& a, index_t t0, index_t j0) {
  const __m512i sign = _mm512_set1_epi32(static_cast<int>(kSignBit));
  __m512 acc[NR][NT][2];
  for (auto& row : acc)
    for (auto& tok : row)
      for (auto& v : tok) v = _mm512_setzero_ps();
  for (index_t w = 0; w < a.words; ++w)
    for (int q = 0; q < 2; ++q) {
      __mmask16 plus[NR];
      for (int j = 0; j < NR; ++j) plus[j] = half_word(a.bits + (j0 + j) * a.words, w, q);
      for (int t = 0; t < NT; ++t) {
        const __m512i c = _mm512_loadu_si512(a.c + (t0 + t) * a.r + 32 * w + 16 * q);
        for (int j = 0; j < NR; ++j)
          acc[j][t][q] = _mm512_sub_ps(acc[j][t][q], _mm512_castsi512_ps(_mm512_mask_xor_epi32(c, plus[j], c, sign)));
      }
    }
  for (int j = 0; j < NR; ++j)
    for (int t = 0; t < NT; ++t) store_row(a, t0 + t, j0 + j, tree_sum32_avx512(acc[j][t][0], acc[j][t][1]));
}

template <int NT, int NR>
__attribute__((target("avx512f"))) void row_rows_avx512(const RowArgs& a, index_t t0, index_t j0, index_t j1) {
  index_t j = j0;
  for (; j + NR <= j1; j += NR) row_block_avx512<NT, NR>(a, t0, j);
  for (; j < j1; ++j) row_block_avx512<NT, 1>(a, t0, j);
}

__attribute__((target("avx512f"))) void row_pass_avx512(const RowArgs& a, index_t ntok, index_t j0, index_t j1) {
  index_t t = 0;
  for (; t + 4 <= ntok; t += 4) row_rows_avx512<4, 2>(a, t, j0, j1);  // each c chunk loaded once for NR rows
  if (ntok - t >= 2) row_rows_avx512<2, 4>(a, t, j0, j1), t += 2;
  if (t < ntok) row_rows_avx512<1, 4>(a, t, j0, j1);
}

#pragma GCC diagnostic pop

// ---- dispatch ---------------------------------------------------------------

void rank_pass(SimdLevel level, const RankArgs& a, index_t ntok, index_t w0, index_t w1) {
  switch (level) {
    case SimdLevel::avx512: return rank_pass_avx512(a, ntok, w0, w1);
    case SimdLevel::avx2: return rank_pass_avx2(a, ntok, w0, w1);
    case SimdLevel::scalar: return rank_pass_scalar(a, ntok, w0, w1);
  }
}

void row_pass(SimdLevel level, const RowArgs& a, index_t ntok, index_t j0, index_t j1) {
  switch (level) {
    case SimdLevel::avx512: return row_pass_avx512(a, ntok, j0, j1);
    case SimdLevel::avx2: return row_pass_avx2(a, ntok, j0, j1);
    case SimdLevel::scalar: return row_pass_scalar(a, ntok, j0, j1);
  }
}

// Units per parallel chunk so that a chunk holds ≥ kMinParallelWork (all
// units in one chunk, run on the caller, when the whole pass holds less).
index_t grain(index_t work_per_unit) {
  const index_t unit = std::max<index_t>(work_per_unit, 1);
  return std::max<index_t>(1, (kMinParallelWork + unit - 1) / unit);
}

}  // namespace

SimdLevel best_simd_level() {
  static const SimdLevel best = __builtin_cpu_supports("avx512f")                                    ? SimdLevel::avx512
                                : __builtin_cpu_supports("avx2") && __builtin_cpu_supports("avx") ? SimdLevel::avx2
                                                                                                  : SimdLevel::scalar;
  return best;
}

bool simd_level_supported(SimdLevel level) { return static_cast<int>(level) <= static_cast<int>(best_simd_level()); }

const char* simd_level_name(SimdLevel level) {
  switch (level) {
    case SimdLevel::avx512: return "avx512";
    case SimdLevel::avx2: return "avx2";
    case SimdLevel::scalar: return "scalar";
  }
  return "?";
}

void blr_infer_bits(const BlrLayer<float>& layer, const float* x, index_t ntok, float* y, float* c, SimdLevel level,
                    ThreadPool& pool) {
  BR_ASSERT(simd_level_supported(level), "blr_infer: this CPU lacks {}", simd_level_name(level));
  const index_t m = layer.m, n = layer.n, r = layer.r, words = r / 32;
  const index_t paths = static_cast<index_t>(layer.paths.size());
  const index_t blocks = (words + kRankBlockWords - 1) / kRankBlockWords;
  struct Job {
    const BlrLayer<float>& layer;
    const float* x;
    index_t ntok, blocks;
    float *y, *c;
    SimdLevel level;
  } job{layer, x, ntok, blocks, y, c, level};
  pool.parallel_for(
      paths * blocks,
      [&job](index_t u0, index_t u1) {
        const BlrLayer<float>& l = job.layer;
        const index_t words = l.r / 32;
        for (index_t u = u0; u < u1; ++u) {
          const index_t p = u / job.blocks, w0 = u % job.blocks * kRankBlockWords;
          const BlrPath<float>& path = l.paths[static_cast<std::size_t>(p)];
          const RankArgs a{path.sign_v.data, job.x, path.g.data, path.l.data, l.n, l.r, words, job.c + p * job.ntok * l.r};
          rank_pass(job.level, a, job.ntok, w0, std::min(words, w0 + kRankBlockWords));
        }
      },
      grain(ntok * n * 2 * kRankBlockWords));
  pool.parallel_for(
      m,
      [&job](index_t j0, index_t j1) {
        const BlrLayer<float>& l = job.layer;
        for (std::size_t p = 0; p < l.paths.size(); ++p) {
          const BlrPath<float>& path = l.paths[p];
          const RowArgs a{path.sign_u.data, job.c + static_cast<index_t>(p) * job.ntok * l.r, path.h.data, l.m, l.r,
                          l.r / 32, job.y, p > 0};
          row_pass(job.level, a, job.ntok, j0, j1);
        }
      },
      grain(paths * ntok * 2 * words));
}

}  // namespace bitrank::cpu
