// CPU backend of causal GQA attention (contract: include/bitrank/ops/attention.hpp).
//
// FlashAttention-2 on the CPU, f32. A window is cut into blocks of kBlock
// queries (or keys); a task is one (window, head, block). Every product is
// c (+)= a·b computed by block_matmul: its left operand is read in place
// through strides (a block of q, k, v or dout, or a score tile read
// transposed), its right operand is a small copy with contiguous rows — the
// task's own block transposed (made once, reused over the whole loop), or a
// block cut into column strips (contiguous for the kernel, whatever the
// row stride of the tensor).
//
//   forward   task (window, head, query block): for each key block up to
//             the diagonal, Sᵀ = K·Qᵀ, online softmax per query (running max
//             m and sum l; the partial output is rescaled by e^{m_old − m_new}),
//             O += P·V; then out = O/l, lse = m + log l.
//   backward  delta = rowsum(dout ⊙ out); then
//             task (window, kv head, key block): for every query head of the
//             group and every query block at or after the diagonal,
//             S = Q·Kᵀ, dP = dout·Vᵀ, P = e^{scale·S − lse},
//             dS = P⊙(dP − delta)·scale, dV += Pᵀ·dout, dK += dSᵀ·Q;
//             task (window, head, query block): Sᵀ, dPᵀ over the key blocks
//             up to the diagonal, dQ += dS·K.
// Every output element has one writer and a fixed order of summation, so
// results do not depend on the number of threads.
//   decode    (attention_decode) task (query row, head): the row's scores
//             over the keys it sees (dot_lanes), softmax, out = Σ P·v in
//             key order — no blocks: one row of queries reads the cache once
//             (decode_row, vector clones: 3–5 % more decode tokens/s at 512
//             tokens of context on the 2-core EPYC; the dots inlined into
//             the clones, not called at the baseline width per key: +6.5 %
//             more at 512). Heads per task by the context's work
//             (kDecodeTaskWork): a short context runs on the caller.

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <vector>

#include "cpu/kernels.hpp"
#include "cpu/ops.hpp"

// The hot loops (block_matmul and the softmax tiles) are compiled for
// AVX-512 and AVX2 besides the baseline and picked at load time, so a
// portable build still runs them at the machine's vector width.
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define BR_VECTOR_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define BR_VECTOR_CLONES
#endif

namespace bitrank::cpu {
namespace {

constexpr index_t kBlock = 64;     // queries or keys per block
constexpr index_t kTileRows = 4;   // register tile of block_matmul: rows ...
constexpr index_t kTileCols = 32;  // ... × columns (contiguous, vectorised)
constexpr index_t kDecodeTaskWork = 1 << 18;  // multiply-adds a decode task holds at least (attention_decode)

// c[m][n] = (accumulate ? c : 0) + a·b with a[i][p] at a[i·a_row + p·a_col],
// c[i][j] at c[i·ldc + j], and b[p][j] in strips of kTileCols columns:
// at b[(j / kTileCols)·b_strip + p·ldb + j % kTileCols] (b_strip =
// kTileCols for plain rows). Register tiles of kTileRows × kTileCols; the
// edges run the same sums in plain loops.
BR_VECTOR_CLONES [[gnu::noinline]] void block_matmul(bool accumulate, index_t m, index_t n, index_t k, const float* a,
                                                     index_t a_row, index_t a_col, const float* b, index_t ldb,
                                                     index_t b_strip, float* c, index_t ldc) {
  const index_t m_tiles = m / kTileRows * kTileRows, n_tiles = n / kTileCols * kTileCols;
  for (index_t i = 0; i < m_tiles; i += kTileRows)
    for (index_t j = 0; j < n_tiles; j += kTileCols) {
      float acc[kTileRows][kTileCols];
      for (index_t r = 0; r < kTileRows; ++r)
        for (index_t x = 0; x < kTileCols; ++x) acc[r][x] = accumulate ? c[(i + r) * ldc + j + x] : 0.0f;
      for (index_t p = 0; p < k; ++p) {
        const float* bp = b + j / kTileCols * b_strip + p * ldb;
        for (index_t r = 0; r < kTileRows; ++r) {
          const float ar = a[(i + r) * a_row + p * a_col];
          for (index_t x = 0; x < kTileCols; ++x) acc[r][x] += ar * bp[x];
        }
      }
      for (index_t r = 0; r < kTileRows; ++r)
        for (index_t x = 0; x < kTileCols; ++x) c[(i + r) * ldc + j + x] = acc[r][x];
    }
  // Right edge (columns past the last whole tile) of the tiled rows, then the bottom rows.
  auto edge = [&](index_t i0, index_t i1, index_t j0) {
    for (index_t i = i0; i < i1; ++i) {
      float* ci = c + i * ldc;
      if (!accumulate) std::fill(ci + j0, ci + n, 0.0f);
      for (index_t p = 0; p < k; ++p) {
        const float ai = a[i * a_row + p * a_col];
        for (index_t j = j0; j < n; ++j) ci[j] += ai * b[j / kTileCols * b_strip + p * ldb + j % kTileCols];
      }
    }
  };
  if (n_tiles < n) edge(0, m_tiles, n_tiles);
  if (m_tiles < m) edge(m_tiles, m, 0);
}

// e^x in f32, branch-free so loops over it vectorise: x = k·ln2 + r with
// |r| ≤ ln2/2 (ln2 in two parts, so k·ln2 is exact), e^r by its degree-7
// Taylor polynomial (truncation < 1e-8 relative), 2^k from the exponent
// bits. A few ulp from std::exp; 0 below −87.5 (and for −inf), NaN stays
// NaN. For x ≤ 88.
inline float exp_f32(float x) {
  const float xc = x > -87.5f ? x : -87.5f;
  const float k = (xc * 1.44269504f + 12582912.0f) - 12582912.0f;  // round(x/ln2) by the 1.5·2^23 shift
  const float r = (xc - k * 0.693145752f) - k * 1.42860677e-6f;
  float p = 1.0f / 5040;
  p = p * r + 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const float two_k = std::bit_cast<float>((static_cast<std::int32_t>(k) + 127) << 23);
  return x > -87.5f ? p * two_k : (x != x ? x : 0.0f);
}

// dst[c][r] = src[r·lds + c] for r < rows, c < cols (dst row stride kBlock).
void load_transposed(float* dst, const float* src, index_t lds, index_t rows, index_t cols) {
  for (index_t r = 0; r < rows; ++r) {
    const float* s = src + r * lds;
    for (index_t c = 0; c < cols; ++c) dst[c * kBlock + r] = s[c];
  }
}

// dst[s][r][x] = src[r·lds + s·kTileCols + x]: rows cut into strips of
// kTileCols columns (the last one narrower), each strip contiguous.
void load_strips(float* dst, const float* src, index_t lds, index_t rows, index_t cols) {
  for (index_t s0 = 0; s0 < cols; s0 += kTileCols) {
    const index_t w = std::min(kTileCols, cols - s0);
    float* strip = dst + s0 * rows;
    for (index_t r = 0; r < rows; ++r) std::copy(src + r * lds + s0, src + r * lds + s0 + w, strip + r * kTileCols);
  }
}

// One online-softmax step of the forward on a tile st[key j][query i] of
// raw scores q·k: scales them, hides keys after the query in the diagonal
// tile, moves each query's running max and sum, turns the tile into
// P = e^{s − max} and rescales the partial output rows [qrows][hd] by
// e^{max_old − max_new}.
BR_VECTOR_CLONES void softmax_tile(float* st, index_t krows, index_t qrows, bool diagonal, float scale, float* run_max,
                                   float* run_sum, float* new_max, float* obuf, index_t hd) {
  for (index_t j = 0; j < krows; ++j) {
    float* sj = st + j * kBlock;
    for (index_t i = 0; i < qrows; ++i) sj[i] *= scale;
    if (diagonal) std::fill(sj, sj + std::min(j, qrows), -INFINITY);
  }
  std::copy(run_max, run_max + qrows, new_max);
  for (index_t j = 0; j < krows; ++j)
    for (index_t i = 0; i < qrows; ++i) new_max[i] = std::max(new_max[i], st[j * kBlock + i]);
  for (index_t j = 0; j < krows; ++j)
    for (index_t i = 0; i < qrows; ++i) st[j * kBlock + i] = exp_f32(st[j * kBlock + i] - new_max[i]);
  for (index_t i = 0; i < qrows; ++i) {
    const float corr = exp_f32(run_max[i] - new_max[i]);  // 0 on the first tile (max_old = −inf)
    run_max[i] = new_max[i];
    run_sum[i] *= corr;
    for (index_t c = 0; c < hd; ++c) obuf[i * hd + c] *= corr;
  }
  for (index_t j = 0; j < krows; ++j)
    for (index_t i = 0; i < qrows; ++i) run_sum[i] += st[j * kBlock + i];
}

// Backward on a tile [query i][key j], in place: s (raw q·k) becomes
// P = e^{scale·s − lse_i} and dp becomes dS = P⊙(dp − delta_i)·scale; both
// 0 where the key is hidden (after the query, in the diagonal tile).
BR_VECTOR_CLONES void grad_tile_rows(float* s, float* dp, index_t qrows, index_t krows, bool diagonal, const float* lse,
                                     const float* delta, float scale) {
  for (index_t i = 0; i < qrows; ++i) {
    float* si = s + i * kBlock;
    float* dsi = dp + i * kBlock;
    const index_t visible = diagonal ? std::min(i + 1, krows) : krows;
    for (index_t j = 0; j < visible; ++j) {
      si[j] = exp_f32(si[j] * scale - lse[i]);
      dsi[j] = si[j] * (dsi[j] - delta[i]) * scale;
    }
    std::fill(si + visible, si + krows, 0.0f);
    std::fill(dsi + visible, dsi + krows, 0.0f);
  }
}

// The same on a transposed tile [key j][query i]; st becomes dS.
BR_VECTOR_CLONES void grad_tile_cols(float* st, const float* dpt, index_t krows, index_t qrows, bool diagonal,
                                     const float* lse, const float* delta, float scale) {
  for (index_t j = 0; j < krows; ++j) {
    float* sj = st + j * kBlock;
    const float* dpj = dpt + j * kBlock;
    const index_t first = diagonal ? std::min(j, qrows) : 0;  // key j is seen from query j on
    std::fill(sj, sj + first, 0.0f);
    for (index_t i = first; i < qrows; ++i) {
      const float p = exp_f32(sj[i] * scale - lse[i]);
      sj[i] = p * (dpj[i] - delta[i]) * scale;
    }
  }
}

// Sizes of one call, and where a head's vector of a row starts.
struct Dims {
  index_t window, windows, heads, kv_heads, group, hd, blocks, q_stride, kv_stride;
  float scale;
  Dims(index_t n, const AttentionGeometry& g)
      : window(g.window),
        windows(n / g.window),
        heads(g.heads),
        kv_heads(g.kv_heads),
        group(g.heads / g.kv_heads),
        hd(g.head_dim),
        blocks((g.window + kBlock - 1) / kBlock),
        q_stride(g.heads * g.head_dim),
        kv_stride(g.kv_heads * g.head_dim),
        scale(static_cast<float>(1.0 / std::sqrt(static_cast<double>(g.head_dim)))) {}
  index_t q_at(index_t b, index_t i, index_t h) const { return (b * window + i) * q_stride + h * hd; }
  index_t kv_at(index_t b, index_t j, index_t g) const { return (b * window + j) * kv_stride + g * hd; }
  index_t stat_at(index_t b, index_t i, index_t h) const { return (b * window + i) * heads + h; }
  index_t block_rows(index_t blk) const { return std::min(kBlock, window - blk * kBlock); }
  // Task t of the loops over (window, head, query block): the block qb, head
  // h, window b, kv head g, the block's first row q0 and its rows.
  struct QueryBlock {
    index_t qb, h, b, g, q0, rows;
  };
  QueryBlock query_block(index_t t) const {
    const index_t qb = t % blocks, h = t / blocks % heads;
    return {qb, h, t / (blocks * heads), h / group, qb * kBlock, block_rows(qb)};
  }
};

// Scratch of one thread: two transposed blocks [hd][kBlock], two
// accumulators [kBlock][hd], two blocks in column strips, two score tiles
// [kBlock][kBlock], per-query statistics.
struct Scratch {
  std::vector<float> t1, t2, acc1, acc2, p1, p2, s1, s2, stat1, stat2, stat3;
  explicit Scratch(const Dims& d) {
    const auto blk = static_cast<std::size_t>(kBlock * d.hd);
    for (auto* v : {&t1, &t2, &acc1, &acc2}) v->resize(blk);
    const auto strips = static_cast<std::size_t>(kBlock * ((d.hd + kTileCols - 1) / kTileCols * kTileCols));
    for (auto* v : {&p1, &p2}) v->resize(strips);
    for (auto* v : {&s1, &s2}) v->resize(static_cast<std::size_t>(kBlock * kBlock));
    for (auto* v : {&stat1, &stat2, &stat3}) v->resize(static_cast<std::size_t>(kBlock));
  }
};

// One row of the decode for one head: scores s[j] = (q·k_j)·scale over the
// keys it sees, softmax, out = Σ_j P_j·v_j in key order; returns the lse.
// Vector clones: the dots and the P·v rows run at the machine's width.
BR_VECTOR_CLONES [[gnu::noinline]] float decode_row(const float* qi, const float* k, const float* v, index_t kv_stride,
                                                   index_t keys, index_t hd, float scale, float* s, float* oi) {
  float mx = -INFINITY;
  for (index_t j = 0; j < keys; ++j) {
    s[j] = dot_lanes(qi, k + j * kv_stride, hd) * scale;
    mx = std::max(mx, s[j]);
  }
  float sum = 0.0f;
  for (index_t j = 0; j < keys; ++j) sum += s[j] = std::exp(s[j] - mx);
  std::fill(oi, oi + hd, 0.0f);
  for (index_t j = 0; j < keys; ++j) {
    const float* vj = v + j * kv_stride;
    for (index_t c = 0; c < hd; ++c) oi[c] += s[j] * vj[c];
  }
  const float inv = 1.0f / sum;
  for (index_t c = 0; c < hd; ++c) oi[c] *= inv;
  return mx + std::log(sum);
}

class CpuAttentionOps final : public AttentionOps<float> {
 public:
  explicit CpuAttentionOps(ThreadPool& pool) : pool_(pool) {}

 protected:
  void attention_forward_impl(CView<float> q, CView<float> k, CView<float> v, const AttentionGeometry& geo,
                              View<float> out, View<float> lse) override {
    const Dims d(q.dim(0), geo);
    pool_.parallel_for(d.windows * d.heads * d.blocks, [&](index_t t0, index_t t1) {
      Scratch sc(d);
      float* qt = sc.t1.data();      // [hd][kBlock]       queries, transposed
      float* obuf = sc.acc1.data();  // [kBlock][hd]       unnormalised output
      float* st = sc.s1.data();      // [kBlock][kBlock]   Sᵀ (key, query), then Pᵀ
      float* run_max = sc.stat1.data();
      float* run_sum = sc.stat2.data();
      float* new_max = sc.stat3.data();
      for (index_t t = t0; t < t1; ++t) {
        const auto [qb, h, b, g, q0, qrows] = d.query_block(t);
        load_transposed(qt, q.data + d.q_at(b, q0, h), d.q_stride, qrows, d.hd);
        std::fill(obuf, obuf + qrows * d.hd, 0.0f);
        std::fill(run_max, run_max + qrows, -INFINITY);
        std::fill(run_sum, run_sum + qrows, 0.0f);
        for (index_t kb = 0; kb <= qb; ++kb) {
          const index_t k0 = kb * kBlock, krows = d.block_rows(kb);
          const float* kblk = k.data + d.kv_at(b, k0, g);
          block_matmul(false, krows, qrows, d.hd, kblk, d.kv_stride, 1, qt, kBlock, kTileCols, st, kBlock);
          softmax_tile(st, krows, qrows, kb == qb, d.scale, run_max, run_sum, new_max, obuf, d.hd);
          // O[i] += Σ_j P[i][j]·V[j], P read through the transposed tile.
          float* vstrips = sc.p1.data();
          load_strips(vstrips, v.data + d.kv_at(b, k0, g), d.kv_stride, krows, d.hd);
          block_matmul(true, qrows, d.hd, krows, st, 1, kBlock, vstrips, kTileCols, krows * kTileCols, obuf, d.hd);
        }
        for (index_t i = 0; i < qrows; ++i) {
          const float inv_sum = 1.0f / run_sum[i];
          float* o = out.data + d.q_at(b, q0 + i, h);
          for (index_t c = 0; c < d.hd; ++c) o[c] = obuf[i * d.hd + c] * inv_sum;
          lse[d.stat_at(b, q0 + i, h)] = run_max[i] + std::log(run_sum[i]);
        }
      }
    });
  }

  void attention_decode_impl(CView<float> q, CView<float> k, CView<float> v, const AttentionGeometry& geo,
                             View<float> out, View<float> lse) override {
    const index_t n = q.dim(0), past = geo.window - n, H = geo.heads, hd = geo.head_dim;
    const index_t group = H / geo.kv_heads, kv_stride = geo.kv_heads * hd;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    // A row is ~2·window·hd multiply-adds; rows per task so that a task holds
    // kDecodeTaskWork: a short context's heads run on the caller, not worth a
    // thread's wake-up.
    const index_t row_work = std::max<index_t>(1, 2 * geo.window * hd);
    pool_.parallel_for(
        n * H,
        [&](index_t t0, index_t t1) {
          std::vector<float> s(static_cast<std::size_t>(geo.window));
          for (index_t t = t0; t < t1; ++t) {
            const index_t i = t / H, h = t % H, kv_col = h / group * hd;
            lse[t] = decode_row(q.data + t * hd, k.data + kv_col, v.data + kv_col, kv_stride, past + i + 1, hd, scale,
                                s.data(), out.data + t * hd);
          }
        },
        (kDecodeTaskWork + row_work - 1) / row_work);
  }

  void attention_backward_impl(CView<float> q, CView<float> k, CView<float> v, CView<float> out, CView<float> lse,
                               CView<float> dout, const AttentionGeometry& geo, View<float> delta, View<float> dq,
                               View<float> dk, View<float> dv) override {
    const index_t n = q.dim(0);
    const Dims d(n, geo);

    pool_.parallel_for(
        n,
        [&](index_t r0, index_t r1) {
          for (index_t r = r0; r < r1; ++r)
            for (index_t h = 0; h < d.heads; ++h)
              delta[r * d.heads + h] =
                  dot_lanes(dout.data + r * d.q_stride + h * d.hd, out.data + r * d.q_stride + h * d.hd, d.hd);
        },
        std::max<index_t>(1, 4096 / d.q_stride));

    // dK, dV: one task per (window, kv head, key block).
    pool_.parallel_for(d.windows * d.kv_heads * d.blocks, [&](index_t t0, index_t t1) {
      Scratch sc(d);
      float* kt = sc.t1.data();       // [hd][kBlock]      keys, transposed
      float* vt = sc.t2.data();       // [hd][kBlock]      values, transposed
      float* dkacc = sc.acc1.data();  // [kBlock][hd]
      float* dvacc = sc.acc2.data();  // [kBlock][hd]
      float* s = sc.s1.data();        // [kBlock][kBlock]  S (query, key), then P
      float* dp = sc.s2.data();       // [kBlock][kBlock]  dP, then dS
      float* lse_q = sc.stat1.data();
      float* delta_q = sc.stat2.data();
      for (index_t t = t0; t < t1; ++t) {
        const index_t kb = t % d.blocks, g = t / d.blocks % d.kv_heads, b = t / (d.blocks * d.kv_heads);
        const index_t k0 = kb * kBlock, krows = d.block_rows(kb);
        load_transposed(kt, k.data + d.kv_at(b, k0, g), d.kv_stride, krows, d.hd);
        load_transposed(vt, v.data + d.kv_at(b, k0, g), d.kv_stride, krows, d.hd);
        std::fill(dkacc, dkacc + krows * d.hd, 0.0f);
        std::fill(dvacc, dvacc + krows * d.hd, 0.0f);
        for (index_t h = g * d.group; h < (g + 1) * d.group; ++h)
          for (index_t qb = kb; qb < d.blocks; ++qb) {
            const index_t q0 = qb * kBlock, qrows = d.block_rows(qb);
            const float* qblk = q.data + d.q_at(b, q0, h);
            const float* doblk = dout.data + d.q_at(b, q0, h);
            block_matmul(false, qrows, krows, d.hd, qblk, d.q_stride, 1, kt, kBlock, kTileCols, s, kBlock);
            block_matmul(false, qrows, krows, d.hd, doblk, d.q_stride, 1, vt, kBlock, kTileCols, dp, kBlock);
            for (index_t i = 0; i < qrows; ++i) {
              lse_q[i] = lse[d.stat_at(b, q0 + i, h)];
              delta_q[i] = delta[d.stat_at(b, q0 + i, h)];
            }
            grad_tile_rows(s, dp, qrows, krows, qb == kb, lse_q, delta_q, d.scale);
            // dV[j] += Σ_i P[i][j]·dout[i], dK[j] += Σ_i dS[i][j]·q[i] (the tiles read transposed).
            float* do_strips = sc.p1.data();
            float* q_strips = sc.p2.data();
            load_strips(do_strips, doblk, d.q_stride, qrows, d.hd);
            load_strips(q_strips, qblk, d.q_stride, qrows, d.hd);
            block_matmul(true, krows, d.hd, qrows, s, 1, kBlock, do_strips, kTileCols, qrows * kTileCols, dvacc, d.hd);
            block_matmul(true, krows, d.hd, qrows, dp, 1, kBlock, q_strips, kTileCols, qrows * kTileCols, dkacc, d.hd);
          }
        for (index_t j = 0; j < krows; ++j) {
          std::copy(dkacc + j * d.hd, dkacc + (j + 1) * d.hd, dk.data + d.kv_at(b, k0 + j, g));
          std::copy(dvacc + j * d.hd, dvacc + (j + 1) * d.hd, dv.data + d.kv_at(b, k0 + j, g));
        }
      }
    });

    // dQ: one task per (window, head, query block).
    pool_.parallel_for(d.windows * d.heads * d.blocks, [&](index_t t0, index_t t1) {
      Scratch sc(d);
      float* qt = sc.t1.data();       // [hd][kBlock]      queries, transposed
      float* dout_t = sc.t2.data();   // [hd][kBlock]      dout, transposed
      float* dqacc = sc.acc1.data();  // [kBlock][hd]
      float* st = sc.s1.data();       // [kBlock][kBlock]  Sᵀ (key, query), then dSᵀ
      float* dpt = sc.s2.data();      // [kBlock][kBlock]  dPᵀ
      float* lse_q = sc.stat1.data();
      float* delta_q = sc.stat2.data();
      for (index_t t = t0; t < t1; ++t) {
        const auto [qb, h, b, g, q0, qrows] = d.query_block(t);
        load_transposed(qt, q.data + d.q_at(b, q0, h), d.q_stride, qrows, d.hd);
        load_transposed(dout_t, dout.data + d.q_at(b, q0, h), d.q_stride, qrows, d.hd);
        for (index_t i = 0; i < qrows; ++i) {
          lse_q[i] = lse[d.stat_at(b, q0 + i, h)];
          delta_q[i] = delta[d.stat_at(b, q0 + i, h)];
        }
        std::fill(dqacc, dqacc + qrows * d.hd, 0.0f);
        for (index_t kb = 0; kb <= qb; ++kb) {
          const index_t k0 = kb * kBlock, krows = d.block_rows(kb);
          const float* kblk = k.data + d.kv_at(b, k0, g);
          const float* vblk = v.data + d.kv_at(b, k0, g);
          block_matmul(false, krows, qrows, d.hd, kblk, d.kv_stride, 1, qt, kBlock, kTileCols, st, kBlock);
          block_matmul(false, krows, qrows, d.hd, vblk, d.kv_stride, 1, dout_t, kBlock, kTileCols, dpt, kBlock);
          grad_tile_cols(st, dpt, krows, qrows, kb == qb, lse_q, delta_q, d.scale);
          // dQ[i] += Σ_j dS[i][j]·k[j] (the tile read transposed).
          float* kstrips = sc.p1.data();
          load_strips(kstrips, kblk, d.kv_stride, krows, d.hd);
          block_matmul(true, qrows, d.hd, krows, st, 1, kBlock, kstrips, kTileCols, krows * kTileCols, dqacc, d.hd);
        }
        for (index_t i = 0; i < qrows; ++i)
          std::copy(dqacc + i * d.hd, dqacc + (i + 1) * d.hd, dq.data + d.q_at(b, q0 + i, h));
      }
    });
  }

 private:
  ThreadPool& pool_;
};

}  // namespace

std::unique_ptr<AttentionOps<float>> make_attention_ops(ThreadPool& pool) {
  return std::make_unique<CpuAttentionOps>(pool);
}

}  // namespace bitrank::cpu
