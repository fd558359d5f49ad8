// Bit-reading BLR inference on the CPU (blr_infer for few tokens; contract
// and numerics in include/bitrank/ops/blr.hpp) by table lookup. Per path:
//
//   x tables   per token, per group of 4 inputs, the 16 signed sums
//              ((±x'_0 ± x'_1) ± x'_2) ± x'_3 (x'_i = f32(x_i·g_i), 0 past n;
//              entry e takes + where bit b of e is set).
//   rank pass  a = S_Vᵀx': per block of 16 ranks, read the vt sign blocks
//              (ops/bitmap.hpp): one load gives a word of 16 ranks, and each
//              of its nibbles indexes its group's table in all 16 lanes at
//              once (AVX-512: a vpermps of the table's one register). Group
//              g is added to accumulator g mod 4, in order of g; a = (acc0 +
//              acc1) + (acc2 + acc3). Then c = f32(ℓ⊙a), and the c tables of
//              the block's 4 groups of ranks, built the same way.
//   row pass   s = S_U c: the same lookup over the u sign blocks, 16 output
//              rows at once, against the c tables; y_j = h_j·s_j, paths
//              added in order.
//
// A lookup is 64 sign-adds (16 lanes × 4 ranks) in a shift, a permute and
// an add, where the kernel before it spent a masked xor and an
// add on 16 (docs/perf.md times both). Every table entry and sum
// is formed in the same order at every SIMD level and thread count, so the
// levels agree to the bit (the file is built with -ffp-contract=off).
//
// Tokens share each loaded word and index (up to 4 at a time on AVX-512).
// Tried and dropped: cache blocking of the tables (8 blocks sharing each run
// of words whose tables fit in 16 KB, the accumulators carried in memory):
// no gain measured at 8 tokens, where the x tables of a long n leave L1
// (576×1536 r192: 0.195 and 0.218 ms against 0.155 and 0.217 without).
// The work of a pass is counted in lookups; a chunk below kMinParallelWork
// runs on the caller, else the rank pass splits over (path, block of ranks)
// and the row pass over blocks of rows. The level is chosen at run time; the
// AVX kernels carry target attributes, so the library builds for any x86-64.
#include "cpu/blr_infer.hpp"

#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cstdint>

#include "bitrank/error.hpp"

namespace bitrank::cpu {
namespace {

constexpr std::uint32_t kSignBit = 0x80000000u;
constexpr index_t kLanes = 16;  // rows (or ranks) per block; entries per table
// Lookups (~0.5 ns each) a chunk must hold to be worth a thread (a wake-up
// costs ~10–20 µs on the 2-core EPYC).
constexpr index_t kMinParallelWork = 1 << 16;

// The sums of one block: rows [16b, 16b + 16) of a blocked bitmap (`words`
// words of 16 lanes) against `words`·8 tables of `ntok` tokens (token t's at
// tables + t·stride), into out[t][16].
struct Lookup {
  const std::uint32_t* blocks;
  index_t words;
  const float* tables;
  index_t stride;
};

// ---- scalar -----------------------------------------------------------------

float signed_value(float v, unsigned entry, int b) {
  return (entry >> b & 1u) ? v : std::bit_cast<float>(std::bit_cast<std::uint32_t>(v) ^ kSignBit);
}

void table_scalar(const float* v, float* out) {
  for (unsigned e = 0; e < 16; ++e) {
    float t = signed_value(v[0], e, 0) + signed_value(v[1], e, 1);
    t += signed_value(v[2], e, 2);
    out[e] = t + signed_value(v[3], e, 3);
  }
}

void lookup_scalar(const Lookup& a, index_t ntok, float* out) {
  for (index_t t = 0; t < ntok; ++t)
    for (index_t l = 0; l < kLanes; ++l) {
      float acc[4] = {};
      for (index_t w = 0; w < a.words; ++w) {
        const std::uint32_t word = a.blocks[w * kLanes + l];
        for (int q = 0; q < 8; ++q) acc[q % 4] += a.tables[t * a.stride + (8 * w + q) * kLanes + (word >> 4 * q & 15u)];
      }
      out[t * kLanes + l] = (acc[0] + acc[1]) + (acc[2] + acc[3]);
    }
}

// ---- AVX2 -------------------------------------------------------------------

// Lane e of half hf (entries 8hf … 8hf + 7) of bit b: the sign bit where bit b of the entry is clear.
struct EntrySigns {
  alignas(32) std::uint32_t lane[4][2][8];
};
constexpr EntrySigns make_entry_signs() {
  EntrySigns s{};
  for (unsigned b = 0; b < 4; ++b)
    for (unsigned hf = 0; hf < 2; ++hf)
      for (unsigned e = 0; e < 8; ++e) s.lane[b][hf][e] = ((8 * hf + e) >> b & 1u) ? 0u : kSignBit;
  return s;
}
constexpr EntrySigns kEntrySigns = make_entry_signs();

__attribute__((target("avx2"))) __m256 entry_term_avx2(float v, int b, int hf) {
  return _mm256_xor_ps(_mm256_set1_ps(v), _mm256_load_ps(reinterpret_cast<const float*>(kEntrySigns.lane[b][hf])));
}

__attribute__((target("avx2"))) void table_avx2(const float* v, float* out) {
  for (int hf = 0; hf < 2; ++hf) {
    __m256 t = _mm256_add_ps(entry_term_avx2(v[0], 0, hf), entry_term_avx2(v[1], 1, hf));
    t = _mm256_add_ps(t, entry_term_avx2(v[2], 2, hf));
    _mm256_storeu_ps(out + 8 * hf, _mm256_add_ps(t, entry_term_avx2(v[3], 3, hf)));
  }
}

// One token, 16 lanes as two halves of 8; a 16-entry table as two registers,
// the entry's bit 3 choosing between them.
__attribute__((target("avx2"))) void lookup_avx2(const Lookup& a, index_t ntok, float* out) {
  for (index_t t = 0; t < ntok; ++t)
    for (int hf = 0; hf < 2; ++hf) {
      __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
      for (index_t w = 0; w < a.words; ++w) {
        const __m256i word = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a.blocks + w * kLanes + 8 * hf));
        const float* table = a.tables + t * a.stride + 8 * w * kLanes;
        for (int q = 0; q < 8; ++q) {
          // vpermps reads bits 0–2 of each index; the blend, bit 3 moved to the sign: no mask needed.
          const __m256i idx = _mm256_srli_epi32(word, 4 * q);
          const __m256 lo = _mm256_permutevar8x32_ps(_mm256_loadu_ps(table + q * kLanes), idx);
          const __m256 hi = _mm256_permutevar8x32_ps(_mm256_loadu_ps(table + q * kLanes + 8), idx);
          const __m256 v = _mm256_blendv_ps(lo, hi, _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28)));
          acc[q % 4] = _mm256_add_ps(acc[q % 4], v);
        }
      }
      _mm256_storeu_ps(out + t * kLanes + 8 * hf,
                       _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
    }
}

// ---- AVX-512 ----------------------------------------------------------------

// GCC 12's avx512fintrin.h casts and shuffles through _mm512_undefined_*,
// which -Wmaybe-uninitialized reports at every inlined use.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

// ±v in the 16 entries: v where bit b of the entry is set (the mask), else −v.
__attribute__((target("avx512f"))) __m512 entry_term_avx512(float v, int b) {
  constexpr __mmask16 kSet[4] = {0xAAAA, 0xCCCC, 0xF0F0, 0xFF00};
  const __m512i x = _mm512_castps_si512(_mm512_set1_ps(v));
  const __m512i negated = _mm512_xor_si512(x, _mm512_set1_epi32(static_cast<int>(kSignBit)));
  return _mm512_castsi512_ps(_mm512_mask_mov_epi32(negated, kSet[b], x));
}

__attribute__((target("avx512f"))) void table_avx512(const float* v, float* out) {
  __m512 t = _mm512_add_ps(entry_term_avx512(v[0], 0), entry_term_avx512(v[1], 1));
  t = _mm512_add_ps(t, entry_term_avx512(v[2], 2));
  _mm512_storeu_ps(out, _mm512_add_ps(t, entry_term_avx512(v[3], 3)));
}

template <int NT>
__attribute__((target("avx512f"))) void lookup_block_avx512(const Lookup& a, const float* tables, float* out) {
  __m512 acc[NT][4];
  for (auto& tok : acc)
    for (auto& v : tok) v = _mm512_setzero_ps();
  for (index_t w = 0; w < a.words; ++w) {
    const __m512i word = _mm512_loadu_si512(a.blocks + w * kLanes);
    const float* table = tables + 8 * w * kLanes;
    for (int q = 0; q < 8; ++q) {
      const __m512i idx = _mm512_srli_epi32(word, 4 * q);  // vpermps reads bits 0–3 of each index: no mask
      for (int t = 0; t < NT; ++t)
        acc[t][q % 4] =
            _mm512_add_ps(acc[t][q % 4], _mm512_permutexvar_ps(idx, _mm512_loadu_ps(table + t * a.stride + q * kLanes)));
    }
  }
  for (int t = 0; t < NT; ++t)
    _mm512_storeu_ps(out + t * kLanes,
                     _mm512_add_ps(_mm512_add_ps(acc[t][0], acc[t][1]), _mm512_add_ps(acc[t][2], acc[t][3])));
}

__attribute__((target("avx512f"))) void lookup_avx512(const Lookup& a, index_t ntok, float* out) {
  index_t t = 0;
  for (; t + 4 <= ntok; t += 4) lookup_block_avx512<4>(a, a.tables + t * a.stride, out + t * kLanes);
  if (ntok - t >= 2) lookup_block_avx512<2>(a, a.tables + t * a.stride, out + t * kLanes), t += 2;
  if (t < ntok) lookup_block_avx512<1>(a, a.tables + t * a.stride, out + t * kLanes);
}

#pragma GCC diagnostic pop

// ---- dispatch ---------------------------------------------------------------

// The 16 signed sums of v[0..3] into out[16].
void table(SimdLevel level, const float* v, float* out) {
  switch (level) {
    case SimdLevel::avx512: return table_avx512(v, out);
    case SimdLevel::avx2: return table_avx2(v, out);
    case SimdLevel::scalar: return table_scalar(v, out);
  }
}

void lookup(SimdLevel level, const Lookup& a, index_t ntok, float* out) {
  switch (level) {
    case SimdLevel::avx512: return lookup_avx512(a, ntok, out);
    case SimdLevel::avx2: return lookup_avx2(a, ntok, out);
    case SimdLevel::scalar: return lookup_scalar(a, ntok, out);
  }
}

// Units per parallel chunk so that a chunk holds ≥ kMinParallelWork (all
// units in one chunk, run on the caller, when the whole pass holds less).
index_t grain(index_t work_per_unit) {
  const index_t unit = std::max<index_t>(work_per_unit, 1);
  return std::max<index_t>(1, (kMinParallelWork + unit - 1) / unit);
}

// The shapes of one call and where its tables lie in the scratch:
// x tables [P][ntok][8·wn][16], then c tables [P][ntok][r/4][16].
struct Call {
  const BlrLayer<float>& layer;
  const float* x;
  index_t ntok, paths, wn, wr;
  float *y, *scratch;
  SimdLevel level;

  index_t x_stride() const { return 8 * wn * kLanes; }  // floats of one token's x tables
  index_t c_stride() const { return layer.r / 4 * kLanes; }
  float* x_tables(index_t p) const { return scratch + p * ntok * x_stride(); }
  float* c_tables(index_t p) const { return scratch + paths * ntok * x_stride() + p * ntok * c_stride(); }
  const BlrPath<float>& path(index_t p) const { return layer.paths[static_cast<std::size_t>(p)]; }
};

// The x tables of path p, token t.
void build_x_tables(const Call& k, index_t p, index_t t) {
  const index_t n = k.layer.n;
  const float *x = k.x + t * n, *g = k.path(p).g.data;
  float* out = k.x_tables(p) + t * k.x_stride();
  for (index_t i0 = 0; i0 < 32 * k.wn; i0 += 4) {
    float v[4];
    for (index_t b = 0; b < 4; ++b) v[b] = i0 + b < n ? x[i0 + b] * g[i0 + b] : 0.0f;
    table(k.level, v, out + i0 / 4 * kLanes);
  }
}

// Ranks [16b, 16b + 16) of path p for every token: c = ℓ⊙a, then their 4 c tables.
void rank_block(const Call& k, index_t p, index_t b) {
  const BlrPath<float>& path = k.path(p);
  float sums[kBlrInferBitTokens * kLanes];
  lookup(k.level, Lookup{path.sign_vt_blocks.data + b * k.wn * kLanes, k.wn, k.x_tables(p), k.x_stride()}, k.ntok,
         sums);
  for (index_t t = 0; t < k.ntok; ++t) {
    float c[kLanes];
    for (index_t l = 0; l < kLanes; ++l) c[l] = path.l.data[kLanes * b + l] * sums[t * kLanes + l];
    float* out = k.c_tables(p) + t * k.c_stride() + b * 4 * kLanes;
    for (index_t grp = 0; grp < 4; ++grp) table(k.level, c + 4 * grp, out + grp * kLanes);
  }
}

// Rows [16b, 16b + 16) ∩ [0, m) of y for every token, the paths added in order.
void row_block(const Call& k, index_t b) {
  const index_t m = k.layer.m, rows = std::min(kLanes, m - kLanes * b);
  float sums[kBlrInferBitTokens * kLanes];
  for (index_t p = 0; p < k.paths; ++p) {
    const BlrPath<float>& path = k.path(p);
    lookup(k.level, Lookup{path.sign_u_blocks.data + b * k.wr * kLanes, k.wr, k.c_tables(p), k.c_stride()}, k.ntok,
           sums);
    for (index_t t = 0; t < k.ntok; ++t)
      for (index_t l = 0; l < rows; ++l) {
        const index_t j = kLanes * b + l;
        float& out = k.y[t * m + j];
        const float v = path.h.data[j] * sums[t * kLanes + l];
        out = p > 0 ? out + v : v;
      }
  }
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

index_t blr_infer_scratch(index_t paths, index_t ntok, index_t n, index_t r) {
  return paths * ntok * (8 * sign_words(n) + r / 4) * kLanes;
}

void blr_infer_bits(const BlrLayer<float>& layer, const float* x, index_t ntok, float* y, float* scratch,
                    SimdLevel level, ThreadPool& pool) {
  BR_ASSERT(simd_level_supported(level), "blr_infer: this CPU lacks {}", simd_level_name(level));
  BR_ASSERT(ntok >= 1 && ntok <= kBlrInferBitTokens, "blr_infer: {} tokens for the bit-reading kernel", ntok);
  for (const BlrPath<float>& path : layer.paths)
    BR_ASSERT(path.sign_blocks() && path.sign_vt_blocks.data, "blr_infer: a path without sign blocks");
  const index_t paths = static_cast<index_t>(layer.paths.size());
  const Call k{layer, x, ntok, paths, sign_words(layer.n), layer.r / 32, y, scratch, level};
  const index_t rank_blocks = layer.r / kLanes, row_blocks = (layer.m + kLanes - 1) / kLanes;
  pool.parallel_for(
      paths * ntok, [&k](index_t u0, index_t u1) {
        for (index_t u = u0; u < u1; ++u) build_x_tables(k, u / k.ntok, u % k.ntok);
      },
      grain(k.wn * 8));
  pool.parallel_for(
      paths * rank_blocks,
      [&k, rank_blocks](index_t u0, index_t u1) {
        for (index_t u = u0; u < u1; ++u) rank_block(k, u / rank_blocks, u % rank_blocks);
      },
      grain(ntok * k.wn * 8));
  pool.parallel_for(
      row_blocks, [&k](index_t b0, index_t b1) {
        for (index_t b = b0; b < b1; ++b) row_block(k, b);
      },
      grain(paths * ntok * k.wr * 8));
}

}  // namespace bitrank::cpu
