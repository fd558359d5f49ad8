// CPU backend of the small dense layers (contract: include/bitrank/ops/dense.hpp).
//
// Both products are OpenBLAS sgemm calls (beta 0 or 1 gives overwrite or
// accumulate); split and merge copy hd-long runs per head, rows in parallel.
//
// The forward with an f16 w (a loaded model's head, 49,152 × 576 for
// SmolLM2) never holds w in f32. Above kDenseF16DotRows rows of x, blocks of
// kWidenRows rows of w are widened (F16C) and multiplied by sgemm, so a
// prefill or an eval window runs at sgemm's rate for a scratch of
// kWidenRows·k floats. For the few rows of x of decoding (dense_f16_dot)
// the time is reading w (56.6 MB a token for the head, past the L3), so w is
// read once and widened in registers: each 16 values of a row of w are
// widened (vcvtph2ps) and FMA'd into one accumulator per row of x, x's rows
// coming from cache. Below kDotBlockTokens rows of x, one row of w at a time
// (one stream, which the prefetchers follow); from there, blocks of rows of
// w share each load of x, the next block prefetched by hand. Rows are split
// over the pool; every output is one thread's, in one order fixed by k:
//
//   lane l (0–15) is one FMA chain over c ≡ l (mod 16), in order of c, the
//   last 16 zero-padded; then lanes l + l+8, + l+4, + l+2, + l+1; then the
//   add into out with accumulate.
//
// AVX-512 holds the 16 lanes in one register, AVX2 in two halves: the same
// bits at either level, any thread count and any split of the rows. CPUs
// without AVX2, FMA and F16C run the older two passes (widen a row, then
// dot_lanes: 8 lanes, no FMA), a different but equally fixed order.
//
// The forward with w in Q8_0 blocks (a loaded model's head when its file
// holds it so) takes the same two ways: dense_q8_dot (cpu/dense_q8.cpp) up
// to kDenseF16DotRows rows of x, blocks of rows widened exactly and sgemm
// above.
#include <immintrin.h>

#include <algorithm>
#include <iterator>
#include <vector>

#include "bitrank/error.hpp"
#include "cpu/dense_f16.hpp"
#include "cpu/dense_q8.hpp"
#include "cpu/simd_sum.hpp"
#include "cpu/kernels.hpp"
#include "cpu/ops.hpp"

namespace bitrank::cpu {
namespace {

// Rows of w widened per sgemm above kDenseF16DotRows rows of x.
constexpr index_t kWidenRows = 512;

// ---- dense_f16_dot ----------------------------------------------------------

struct DotArgs {
  const float* x;  // [m][k]
  const f16* w;    // [r][k]
  float* out;      // [m][r]
  index_t m, k, r;
  bool accumulate;
  SimdLevel level;
};

void store_dot(const DotArgs& a, index_t t, index_t o, float v) {
  float& dst = a.out[t * a.r + o];
  dst = a.accumulate ? dst + v : v;
}


// Rows [o0, o0 + NR) of w, the last k mod 16 values of each and of x's rows
// [t0, t0 + NT) copied zero-padded to 16: a padded lane adds 0·0.
template <int NT, int NR>
struct DotTail {
  alignas(64) f16 w[NR][16];
  alignas(64) float x[NT][16];
  DotTail(const DotArgs& a, index_t t0, index_t o0, index_t c0) {
    for (int j = 0; j < NR; ++j) {
      std::fill(std::begin(w[j]), std::end(w[j]), f16{});
      std::copy(a.w + (o0 + j) * a.k + c0, a.w + (o0 + j + 1) * a.k, w[j]);
    }
    for (int t = 0; t < NT; ++t) {
      std::fill(std::begin(x[t]), std::end(x[t]), 0.0f);
      std::copy(a.x + (t0 + t) * a.k + c0, a.x + (t0 + t + 1) * a.k, x[t]);
    }
  }
};

// ---- scalar (no AVX2, FMA, F16C): widen a row, then dot_lanes per row of x --

void dot_rows_scalar(const DotArgs& a, index_t o0, index_t o1) {
  std::vector<float> row(static_cast<std::size_t>(a.k));
  for (index_t o = o0; o < o1; ++o) {
    f32_from_f16(a.w + o * a.k, a.k, row.data());
    for (index_t t = 0; t < a.m; ++t) store_dot(a, t, o, dot_lanes(a.x + t * a.k, row.data(), a.k));
  }
}

// Rows of x from which the AVX kernels take rows of w in blocks. One row of
// w at a time reads w as one stream; a block of 4 rows reads 4 interleaved
// streams, which the hardware prefetchers here do not follow (8 GB/s against
// 27 on one thread, 49,152 × 576 at one row of x; 21 with the next block
// prefetched by hand). That is the whole cost at 1–3 rows of x. From 4 the
// multiply-adds dominate, and a block of rows shares each load of x: at 16
// rows of x one row at a time loaded all of x (36 KB, more than L1) for
// every row of w and ran 2× slower than blocks of 4 with the prefetch.
constexpr index_t kDotBlockTokens = 4;

// Bytes [c·NR·2, +NR·32) of the next block of NR rows (one run of NR·k f16):
// over the k/16 steps of this block, the whole next block.
template <int NR>
void prefetch_next_block(const f16* block, index_t k, index_t c) {
  const char* next = reinterpret_cast<const char*>(block + NR * k) + c * NR * 2;
  for (int b = 0; b < NR * 32; b += 64) _mm_prefetch(next + b, _MM_HINT_T0);
}

// Whether block (t0, o0) of NR rows prefetches the next: the first group of
// rows of x takes the block from memory, the others from L1.
template <int NR>
bool prefetches(const DotArgs& a, index_t t0, index_t o0) {
  return NR > 1 && t0 == 0 && o0 + 2 * NR <= a.r;
}

// ---- AVX2 ---------------------------------------------------------------------

// 16 columns: NR rows of w (row stride lw) widened once, FMA'd with NT rows of x (stride lx).
template <int NT, int NR>
__attribute__((target("avx2,f16c,fma"), always_inline)) inline void dot_step_avx2(__m256 (&acc)[NT][NR][2],
                                                                                   const f16* w, index_t lw,
                                                                                   const float* x, index_t lx) {
  for (int h = 0; h < 2; ++h) {
    __m256 wv[NR];
    for (int j = 0; j < NR; ++j)
      wv[j] = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w + j * lw + 8 * h)));
    for (int t = 0; t < NT; ++t) {
      const __m256 xv = _mm256_loadu_ps(x + t * lx + 8 * h);
      for (int j = 0; j < NR; ++j) acc[t][j][h] = _mm256_fmadd_ps(wv[j], xv, acc[t][j][h]);
    }
  }
}

// Rows of x [t0, t0 + NT) × rows of w [o0, o0 + NR).
template <int NT, int NR>
__attribute__((target("avx2,f16c,fma"))) void dot_block_avx2(const DotArgs& a, index_t t0, index_t o0) {
  __m256 acc[NT][NR][2];
  for (auto& tok : acc)
    for (auto& row : tok)
      for (auto& v : row) v = _mm256_setzero_ps();
  const f16* w = a.w + o0 * a.k;
  const float* x = a.x + t0 * a.k;
  const index_t full = a.k / 16 * 16;
  const bool prefetch = prefetches<NR>(a, t0, o0);
  for (index_t c = 0; c < full; c += 16) {
    if (prefetch) prefetch_next_block<NR>(w, a.k, c);
    dot_step_avx2<NT, NR>(acc, w + c, a.k, x + c, a.k);
  }
  if (full < a.k) {
    const DotTail<NT, NR> tail(a, t0, o0, full);
    dot_step_avx2<NT, NR>(acc, tail.w[0], 16, tail.x[0], 16);
  }
  for (int t = 0; t < NT; ++t)
    for (int j = 0; j < NR; ++j) store_dot(a, t0 + t, o0 + j, tree_sum8(_mm256_add_ps(acc[t][j][0], acc[t][j][1])));
}

// Rows of x [t, m), fewer than 2·NT of them: NT, then halves.
template <int NT, int NR>
__attribute__((target("avx2,f16c,fma"))) void dot_rest_avx2(const DotArgs& a, index_t t, index_t o) {
  if (a.m - t >= NT) dot_block_avx2<NT, NR>(a, t, o), t += NT;
  if constexpr (NT > 1) dot_rest_avx2<NT / 2, NR>(a, t, o);
}

// Rows of w [o, o + NR) for every row of x: NT at a time, then halves.
template <int NT, int NR>
__attribute__((target("avx2,f16c,fma"))) void dot_tokens_avx2(const DotArgs& a, index_t o) {
  index_t t = 0;
  for (; t + NT <= a.m; t += NT) dot_block_avx2<NT, NR>(a, t, o);
  if constexpr (NT > 1) dot_rest_avx2<NT / 2, NR>(a, t, o);
}

// Of 16 ymm registers: one row of w with 4 rows of x (8 accumulators), or
// blocks of 2 rows of w with 2 rows of x (8).
__attribute__((target("avx2,f16c,fma"))) void dot_rows_avx2(const DotArgs& a, index_t o0, index_t o1) {
  index_t o = o0;
  if (a.m >= kDotBlockTokens)
    for (; o + 2 <= o1; o += 2) dot_tokens_avx2<2, 2>(a, o);
  for (; o < o1; ++o) dot_tokens_avx2<4, 1>(a, o);
}

// ---- AVX-512 --------------------------------------------------------------------

// GCC 12's avx512fintrin.h casts and shuffles through _mm512_undefined_*,
// which -Wmaybe-uninitialized reports at every inlined use.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"

template <int NT, int NR>
__attribute__((target("avx512f,f16c,fma"), always_inline)) inline void dot_step_avx512(__m512 (&acc)[NT][NR],
                                                                                        const f16* w, index_t lw,
                                                                                        const float* x, index_t lx) {
  __m512 wv[NR];
  for (int j = 0; j < NR; ++j)
    wv[j] = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + j * lw)));
  for (int t = 0; t < NT; ++t) {
    const __m512 xv = _mm512_loadu_ps(x + t * lx);
    for (int j = 0; j < NR; ++j) acc[t][j] = _mm512_fmadd_ps(wv[j], xv, acc[t][j]);
  }
}

template <int NT, int NR>
__attribute__((target("avx512f,f16c,fma"))) void dot_block_avx512(const DotArgs& a, index_t t0, index_t o0) {
  __m512 acc[NT][NR];
  for (auto& tok : acc)
    for (auto& v : tok) v = _mm512_setzero_ps();
  const f16* w = a.w + o0 * a.k;
  const float* x = a.x + t0 * a.k;
  const index_t full = a.k / 16 * 16;
  const bool prefetch = prefetches<NR>(a, t0, o0);
  for (index_t c = 0; c < full; c += 16) {
    if (prefetch) prefetch_next_block<NR>(w, a.k, c);
    dot_step_avx512<NT, NR>(acc, w + c, a.k, x + c, a.k);
  }
  if (full < a.k) {
    const DotTail<NT, NR> tail(a, t0, o0, full);
    dot_step_avx512<NT, NR>(acc, tail.w[0], 16, tail.x[0], 16);
  }
  for (int t = 0; t < NT; ++t)
    for (int j = 0; j < NR; ++j) store_dot(a, t0 + t, o0 + j, tree_sum16(acc[t][j]));
}

template <int NT, int NR>
__attribute__((target("avx512f,f16c,fma"))) void dot_rest_avx512(const DotArgs& a, index_t t, index_t o) {
  if (a.m - t >= NT) dot_block_avx512<NT, NR>(a, t, o), t += NT;
  if constexpr (NT > 1) dot_rest_avx512<NT / 2, NR>(a, t, o);
}

template <int NT, int NR>
__attribute__((target("avx512f,f16c,fma"))) void dot_tokens_avx512(const DotArgs& a, index_t o) {
  index_t t = 0;
  for (; t + NT <= a.m; t += NT) dot_block_avx512<NT, NR>(a, t, o);
  if constexpr (NT > 1) dot_rest_avx512<NT / 2, NR>(a, t, o);
}

// Of 32 zmm registers: one row of w with up to 16 rows of x (16
// accumulators), or blocks of 4 rows of w with 4 rows of x (16, and 4 widened).
__attribute__((target("avx512f,f16c,fma"))) void dot_rows_avx512(const DotArgs& a, index_t o0, index_t o1) {
  index_t o = o0;
  if (a.m >= kDotBlockTokens)
    for (; o + 4 <= o1; o += 4) dot_tokens_avx512<4, 4>(a, o);
  for (; o < o1; ++o) dot_tokens_avx512<16, 1>(a, o);
}

#pragma GCC diagnostic pop

void dot_rows(const DotArgs& a, index_t o0, index_t o1) {
  switch (a.level) {
    case SimdLevel::avx512: return dot_rows_avx512(a, o0, o1);
    case SimdLevel::avx2: return dot_rows_avx2(a, o0, o1);
    case SimdLevel::scalar: return dot_rows_scalar(a, o0, o1);
  }
}

}  // namespace

// The AVX kernels also need FMA and F16C, which every AVX2 CPU known has;
// checked all the same, as blr_infer's levels are not.
bool dot_level_runs(SimdLevel level) {
  static const bool fma_f16c = __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  return level == SimdLevel::scalar || (simd_level_supported(level) && fma_f16c);
}

SimdLevel best_dot_level() {
  static const SimdLevel best = dot_level_runs(best_simd_level()) ? best_simd_level() : SimdLevel::scalar;
  return best;
}

void dense_f16_dot(const float* x, const f16* w, float* out, index_t m, index_t k, index_t r, bool accumulate,
                   SimdLevel level, ThreadPool& pool) {
  BR_ASSERT(dot_level_runs(level), "dense_forward_f16: this CPU lacks {} (with FMA and F16C)", simd_level_name(level));
  const DotArgs a{x, w, out, m, k, r, accumulate, level};
  // Chunks of ≥ 64 Ki multiply-adds, counting the widening as one row of x.
  const index_t grain = std::max<index_t>(1, 65536 / (std::max<index_t>(k, 1) * (m + 1)));
  pool.parallel_for(r, [&a](index_t o0, index_t o1) { dot_rows(a, o0, o1); }, grain);
}

namespace {

class CpuDenseOps final : public DenseOps<float> {
 public:
  explicit CpuDenseOps(ThreadPool& pool) : pool_(pool) {}

 protected:
  void dense_forward_impl(CView<float> x, CView<float> w, View<float> out, bool accumulate) override {
    const index_t m = x.dim(0), k = x.dim(1), r = w.dim(0);
    sgemm(false, true, m, r, k, 1.0f, x.data, k, w.data, k, accumulate ? 1.0f : 0.0f, out.data, r);
  }

  void dense_forward_f16_impl(CView<float> x, CView<f16> w, View<float> out, bool accumulate) override {
    const index_t m = x.dim(0), k = x.dim(1), r = w.dim(0);
    if (m <= kDenseF16DotRows)
      return dense_f16_dot(x.data, w.data, out.data, m, k, r, accumulate, best_dot_level(), pool_);
    ensure_size(wide_, host_memory(), std::min(r, kWidenRows) * k);
    for (index_t o0 = 0; o0 < r; o0 += kWidenRows) {
      const index_t rows = std::min(kWidenRows, r - o0);
      const f16* src = w.data + o0 * k;
      float* dst = wide_.data();
      pool_.parallel_for(rows * k, [=](index_t i0, index_t i1) { f32_from_f16(src + i0, i1 - i0, dst + i0); }, 16384);
      sgemm(false, true, m, rows, k, 1.0f, x.data, k, dst, k, accumulate ? 1.0f : 0.0f, out.data + o0, r);
    }
  }

  void dense_forward_q8_impl(CView<float> x, CView<q8_0> w, View<float> out, bool accumulate) override {
    const index_t m = x.dim(0), k = x.dim(1), r = w.dim(0), kb = w.dim(1);
    if (m <= kDenseF16DotRows)
      return dense_q8_dot(x.data, w.data, out.data, m, kb, r, accumulate, best_dot_level(), pool_);
    ensure_size(wide_, host_memory(), std::min(r, kWidenRows) * k);
    for (index_t o0 = 0; o0 < r; o0 += kWidenRows) {  // blocks of rows widened exactly, then sgemm
      const index_t rows = std::min(kWidenRows, r - o0);
      const q8_0* src = w.data + o0 * kb;
      float* dst = wide_.data();
      pool_.parallel_for(rows * kb, [=](index_t b0, index_t b1) {
        dequantize_q8_0({src + b0, static_cast<std::size_t>(b1 - b0)},
                        {dst + b0 * kQ8Block, static_cast<std::size_t>((b1 - b0) * kQ8Block)});
      }, 512);
      sgemm(false, true, m, rows, k, 1.0f, x.data, k, dst, k, accumulate ? 1.0f : 0.0f, out.data + o0, r);
    }
  }

  void dense_backward_impl(CView<float> dy, CView<float> w, View<float> dx) override {
    const index_t m = dy.dim(0), r = dy.dim(1), k = w.dim(1);
    sgemm(false, false, m, k, r, 1.0f, dy.data, r, w.data, k, 1.0f, dx.data, k);
  }

  void split_q_gate_impl(CView<float> qg, index_t heads, View<float> q, View<float> gate) override {
    const index_t hd = q.dim(1) / heads;
    for_each_head(qg.dim(0), heads, hd, [&](index_t src, index_t dst) {
      std::copy_n(qg.data + src, hd, q.data + dst);
      std::copy_n(qg.data + src + hd, hd, gate.data + dst);
    });
  }

  void merge_q_gate_impl(CView<float> q, CView<float> gate, index_t heads, View<float> qg) override {
    const index_t hd = q.dim(1) / heads;
    for_each_head(qg.dim(0), heads, hd, [&](index_t dst, index_t src) {
      std::copy_n(q.data + src, hd, qg.data + dst);
      std::copy_n(gate.data + src, hd, qg.data + dst + hd);
    });
  }

 private:
  // fn(offset of the head's [q | gate] run in qg, offset of its q / gate run).
  template <class Fn>
  void for_each_head(index_t m, index_t heads, index_t hd, const Fn& fn) {
    pool_.parallel_for(
        m,
        [&](index_t t0, index_t t1) {
          for (index_t t = t0; t < t1; ++t)
            for (index_t h = 0; h < heads; ++h) fn((t * heads + h) * 2 * hd, (t * heads + h) * hd);
        },
        std::max<index_t>(1, 8192 / (2 * heads * hd)));
  }

  ThreadPool& pool_;
  Buffer<float> wide_;  // widened rows of an f16 or Q8_0 w [kWidenRows][k]
};

}  // namespace

std::unique_ptr<DenseOps<float>> make_dense_ops(ThreadPool& pool) { return std::make_unique<CpuDenseOps>(pool); }

}  // namespace bitrank::cpu
