// Block-cooperative f32 matrix products on the tensor cores, for kernels
// that keep their small operands (tens of KiB) in shared memory — the
// chunkwise Gated DeltaNet (gdn_chunk.cu) is built from them.
//
//   C (M×N, row-major, ldc) = [C +] alpha · A (M×K) · B (K×N)
//
// A and B are read through a layout tag: Row (A(m,k) at A[m·lda + k]) or
// Col (A(m,k) at A[k·lda + m]), so a transposed operand costs nothing.
// Operands and C may be in shared or global memory. Requirements: M a
// multiple of 16, N of 8, K of 16; every leading dimension a multiple of 4
// floats and every pointer 16-byte aligned (pad shared rows to 132 / 68 /
// 36 floats; a padded row also spreads the banks).
//
// Numerics: 3xBF16. Each operand x splits into hi = bf16(x) and
// lo = bf16(x − hi) (x − hi − lo ≤ 2⁻¹⁸|x|); the product accumulates
// lo·hi + hi·lo, then hi·hi, in f32 (the dropped lo·lo term is ≤ 2⁻¹⁸ of
// the product): about 1e-5 relative on the sums here, against the GDN ops'
// 2e-4 tolerance. It replaced 3xTF32 (wmma 16×16×8, 2⁻²¹) because the
// bf16 mma does twice the work per instruction (m16n8k16) and two values
// split with one conversion — the tiles were issue-bound, not
// tensor-bound. One pass of TF32 or bf16 alone would put the GDN outputs
// near 1e-3.
//
// The mma.sync fragments are loaded straight from f32 memory and split in
// registers. Within a 16-wide k step the hardware gives thread t of a quad
// the k pairs {2t, 2t+1} and {2t+8, 2t+9}; a dot product does not care
// which k a slot holds as long as A and B agree, so when either operand is
// contiguous in k (Row A, Col B) thread t takes 4t..4t+3 instead and that
// operand loads with one 16-byte access. With neither contiguous the
// hardware's pairs stay: their scalar loads are free of bank conflicts at
// the padded strides above (≡ 4 mod 32), the quads' would not be.
//
// Operands used more than once, or formed in a kernel anyway, can instead be
// kept split in shared memory (Split: hi and lo bf16 planes); their
// fragments then load with ldmatrix, with no conversion per use.
//
// Work split: each warp owns an RM×RN block of 16×8 output tiles (WarpTile,
// chosen to load the fewest operand values per mma); callers
// __syncthreads() between a product and any use of its C.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>
#include <type_traits>

namespace bitrank::cuda::tile {

struct Row {};
struct Col {};

// x0, x1 → (hi, lo) as packed bf16 pairs (x0 in the low half, as mma reads).
__device__ __forceinline__ void split_bf16x2(float x0, float x1, uint32_t& hi, uint32_t& lo) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(x0, x1);
  const float2 hf = __bfloat1622float2(h);
  const __nv_bfloat162 l = __floats2bfloat162_rn(x0 - hf.x, x1 - hf.y);
  hi = *reinterpret_cast<const uint32_t*>(&h);
  lo = *reinterpret_cast<const uint32_t*>(&l);
}

// A packed bf16 pair back to two floats (exact).
__device__ __forceinline__ float2 bf16x2_to_float2(uint32_t x) {
  return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&x));
}

// Sum over the four consecutive lanes of a quad (every lane gets it): the
// lanes that hold one row of an mma accumulator tile.
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// d += a · b, one m16n8k16 bf16 tile with f32 accumulation.
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// An operand kept in shared memory already split: its hi and lo halves as
// two row-major bf16 planes with row stride ld (elements, a multiple of 8).
// The eight 16-byte rows one ldmatrix reads must fall in distinct banks,
// which either layout gives:
// - padded (sw = 0): ld ≡ 8 mod 64 (72 for 64 columns, 136 for 128);
// - swizzled (sw = 8): ld a multiple of 64, the 16-byte chunk index of
//   element (r, c) XORed with r mod 8 (at()). Its rows start on 128-byte
//   lines, so a 16-byte copy into it fills whole 32-byte sectors, where a
//   padded row 16 bytes off a sector boundary costs each sector twice
//   (docs/perf.md at 3b6e4be, "Thirteenth round").
// Every access stays within one 16-byte chunk (8 columns from a multiple
// of 8, or fewer), so both layouts serve all of them through at().
// Split once where the operand is produced, its fragments load with
// ldmatrix — one instruction per 16×16 half — instead of f32 loads and a
// split per use.
struct Split {
  __nv_bfloat16* hi;
  __nv_bfloat16* lo;
  int ld;
  int sw = 0;  // 0: padded rows; 8: swizzled 16-byte chunks
  // The offset of element (r, c) in either plane.
  __device__ __forceinline__ int at(int r, int c) const { return r * ld + (c ^ ((r & 7) * sw)); }
};

// Stores x0..x3 split at element `at` of a hi and a lo plane (4 consecutive
// bf16, 8-byte aligned): the one store of every split layout.
__device__ __forceinline__ void split_store4_at(__nv_bfloat16* hi_plane, __nv_bfloat16* lo_plane, int at, float4 x) {
  uint2 hi, lo;
  split_bf16x2(x.x, x.y, hi.x, lo.x);
  split_bf16x2(x.z, x.w, hi.y, lo.y);
  *reinterpret_cast<uint2*>(hi_plane + at) = hi;
  *reinterpret_cast<uint2*>(lo_plane + at) = lo;
}
// Stores x0..x3 (columns c..c+3 of row r, c a multiple of 4) into a Split.
__device__ __forceinline__ void split_store4(const Split& s, int r, int c, float4 x) {
  split_store4_at(s.hi, s.lo, s.at(r, c), x);
}

// Four 8×8 bf16 matrices from shared memory (lane l gives the address of
// row l % 8 of matrix l / 8); .trans hands out their transposes.
template <bool kTrans>
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const __nv_bfloat16* p) {
  const auto a = static_cast<uint32_t>(__cvta_generic_to_shared(p));
  if constexpr (kTrans)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a)
                 : "memory");
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a)
                 : "memory");
}

// The warp grid (WM × WN warps) and each warp's tile (RM × RN tiles of
// 16×8) for an M×N product: of the grids that cover C evenly, the one that
// loads the fewest operand values per mma (an A fragment holds 8 values per
// thread, a B fragment 4: cost (8·RM + 4·RN) / (RM·RN)).
template <int TM, int TN, int kWarps>
struct WarpTile {
  static constexpr int pick() {
    int best = 0, best_cost = 1 << 30;
    for (int wm = 1; wm <= kWarps; ++wm) {
      if (kWarps % wm != 0 || TM % wm != 0 || TN % (kWarps / wm) != 0) continue;
      const int rm = TM / wm, rn = TN / (kWarps / wm);
      const int cost = (8 * rm + 4 * rn) * 1024 / (rm * rn);
      if (cost < best_cost) best = wm, best_cost = cost;
    }
    return best;
  }
  static constexpr int WM = pick();
  static_assert(WM > 0, "the 16×8 tiles of C must split evenly over the warps");
  static constexpr int WN = kWarps / WM, RM = TM / WM, RN = TN / WN;
};

// An M×N product being accumulated in the registers of the block's warps:
// any number of mma() calls (with any K and layouts, operands reloaded in
// between), then one store().
template <int M, int N, int kWarps = 8>
class Acc {
  static_assert(M % 16 == 0 && N % 8 == 0, "bf16 mma tiles are 16×8×16");
  using WT = WarpTile<M / 16, N / 8, kWarps>;
  static constexpr int RM = WT::RM, RN = WT::RN;
  float acc_[RM][RN][4];
  int m0_, n0_, g_, t_;  // warp tile origin; the lane's group (row) and thread-in-group

  // acc += a·b from split operands: the three products that matter (lo·lo
  // is below f32's rounding), the small ones first.
  static __device__ __forceinline__ void split_mma(float (&acc)[4], const uint32_t (&a_hi)[4], const uint32_t (&a_lo)[4],
                                                   const uint32_t (&b_hi)[2], const uint32_t (&b_lo)[2]) {
    mma_bf16(acc, a_lo, b_hi);
    mma_bf16(acc, a_hi, b_lo);
    mma_bf16(acc, a_hi, b_hi);
  }

  // The RM A fragments (hi and lo) of k step k from a Split in shared
  // memory, by ldmatrix (lane row a_r, column a_c of each 16×16 tile; .trans
  // for a column-major A).
  template <bool kARow>
  __device__ __forceinline__ void load_split_a(const Split& A, int k, int a_r, int a_c, uint32_t (&a_hi)[RM][4],
                                               uint32_t (&a_lo)[RM][4]) const {
#pragma unroll
    for (int i = 0; i < RM; ++i) {
      const int m = m0_ + 16 * i;
      const int off = kARow ? A.at(m + a_r, k + a_c) : A.at(k + a_r, m + a_c);
      ldmatrix_x4<!kARow>(a_hi[i], A.hi + off);
      ldmatrix_x4<!kARow>(a_lo[i], A.lo + off);
    }
  }

  // Row m's part over this warp's columns: Σ_j term(m, n_j, pair(j)) over the
  // RN pairs this thread holds, summed over the quad's four threads, then
  // done(m, w, sum) on the quad's first lane (w: row_sums_pairs). Every lane
  // must call it (quad shuffles).
  template <class Term2, class Pair, class Done>
  __device__ __forceinline__ void quad_row_sum(int m, Term2 term, Pair pair, Done done) const {
    float s = 0.0f;
#pragma unroll
    for (int j = 0; j < RN; ++j) {
      const float2 t = term(m, n0_ + 8 * j + 2 * t_, pair(j));
      s += t.x;
      s += t.y;
    }
    s = quad_sum(s);
    if (t_ == 0) done(m, n0_ / (RN * 8), s);
  }

  // update_pairs (and, with kSums, its row sums of term over the old pairs).
  template <bool kSums, class Load, class Store, class Term2, class Done>
  __device__ __forceinline__ void update_pairs_impl(Load load, Store store, Term2 term, Done done) const {
#pragma unroll
    for (int i = 0; i < RM; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const int m = m0_ + 16 * i + g_ + 8 * h;
        float2 old[RN];
#pragma unroll
        for (int j = 0; j < RN; ++j) old[j] = load(m, n0_ + 8 * j + 2 * t_);
        if constexpr (kSums)  // the terms before the stores (a store may be a compiler barrier)
          quad_row_sum(m, term, [&](int j) { return old[j]; }, done);
#pragma unroll
        for (int j = 0; j < RN; ++j)
          store(m, n0_ + 8 * j + 2 * t_, make_float2(acc_[i][j][2 * h], acc_[i][j][2 * h + 1]), old[j]);
      }
  }

 public:
  // kWarps = 1 is a one-warp product: every warp holds the whole M×N of its
  // own operands (warps of a block working on different small blocks).
  __device__ Acc() {
    const int warp = kWarps == 1 ? 0 : static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
    m0_ = (warp / WT::WN) * RM * 16;
    n0_ = (warp % WT::WN) * RN * 8;
    g_ = lane / 4;
    t_ = lane % 4;
#pragma unroll
    for (int i = 0; i < RM; ++i)
#pragma unroll
      for (int j = 0; j < RN; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc_[i][j][e] = 0.0f;
  }

  // += A (M×K) · B (K×N).
  template <int K, class LA, class LB>
  __device__ __forceinline__ void mma(const float* A, int lda, const float* B, int ldb) {
    static_assert(K % 16 == 0, "bf16 mma tiles are 16×8×16");
    constexpr bool a_row = std::is_same_v<LA, Row>, b_col = std::is_same_v<LB, Col>, quad = a_row || b_col;
    // This thread's k within a step: pair p holds k0(p) and k0(p) + 1.
    const int k0[2] = {quad ? 4 * t_ : 2 * t_, quad ? 4 * t_ + 2 : 2 * t_ + 8};
#pragma unroll 2
    for (int k = 0; k < K; k += 16) {
      uint32_t a_hi[RM][4], a_lo[RM][4];
#pragma unroll
      for (int i = 0; i < RM; ++i) {
        float x[2][4];  // rows g and g+8; pair 0 then pair 1
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int m = m0_ + 16 * i + g_ + 8 * h;
          if constexpr (a_row) {
            const float4 v = *reinterpret_cast<const float4*>(A + m * lda + k + k0[0]);
            x[h][0] = v.x, x[h][1] = v.y, x[h][2] = v.z, x[h][3] = v.w;
          } else {
#pragma unroll
            for (int q = 0; q < 4; ++q) x[h][q] = A[(k + k0[q / 2] + q % 2) * lda + m];
          }
        }
        // Registers 0/1: rows g / g+8 at pair 0; 2/3: the same at pair 1.
        split_bf16x2(x[0][0], x[0][1], a_hi[i][0], a_lo[i][0]);
        split_bf16x2(x[1][0], x[1][1], a_hi[i][1], a_lo[i][1]);
        split_bf16x2(x[0][2], x[0][3], a_hi[i][2], a_lo[i][2]);
        split_bf16x2(x[1][2], x[1][3], a_hi[i][3], a_lo[i][3]);
      }
#pragma unroll
      for (int j = 0; j < RN; ++j) {
        const int n = n0_ + 8 * j + g_;
        float y[4];  // column n; pair 0 then pair 1
        if constexpr (b_col) {
          const float4 v = *reinterpret_cast<const float4*>(B + n * ldb + k + k0[0]);
          y[0] = v.x, y[1] = v.y, y[2] = v.z, y[3] = v.w;
        } else {
#pragma unroll
          for (int q = 0; q < 4; ++q) y[q] = B[(k + k0[q / 2] + q % 2) * ldb + n];
        }
        uint32_t b_hi[2], b_lo[2];
        split_bf16x2(y[0], y[1], b_hi[0], b_lo[0]);
        split_bf16x2(y[2], y[3], b_hi[1], b_lo[1]);
#pragma unroll
        for (int i = 0; i < RM; ++i) split_mma(acc_[i][j], a_hi[i], a_lo[i], b_hi, b_lo);
      }
    }
  }

  // += A (M×K) · B (K×N), both already split in shared memory (Split):
  // per 16-wide k step, A's hi and lo fragments are one ldmatrix each and
  // B's hi and lo one between them. Row A and Col B read their planes as
  // stored, Col A and Row B transposed (ldmatrix .trans).
  template <int K, class LA, class LB>
  __device__ __forceinline__ void mma(const Split& A, const Split& B) {
    static_assert(K % 16 == 0, "bf16 mma tiles are 16×8×16");
    constexpr bool a_row = std::is_same_v<LA, Row>, b_col = std::is_same_v<LB, Col>;
    const int lane = static_cast<int>(threadIdx.x) % 32;
    // A: matrix q = lane / 8 is (rows 8(q % 2).., k 8(q / 2)..) of a 16×16 tile.
    const int a_r = a_row ? (lane & 15) : (lane & 7) + 8 * (lane >> 4);  // row of the stored plane
    const int a_c = a_row ? 8 * (lane >> 4) : 8 * ((lane >> 3) & 1);     // column of the stored plane
    // B: matrices 0, 1 = hi at k 0.., 8..; 2, 3 = lo.
    const __nv_bfloat16* b_plane = lane >= 16 ? B.lo : B.hi;
    const int b_r = (lane & 7) + (b_col ? 0 : 8 * ((lane >> 3) & 1));
    const int b_c = b_col ? 8 * ((lane >> 3) & 1) : 0;
#pragma unroll 2
    for (int k = 0; k < K; k += 16) {
      uint32_t a_hi[RM][4], a_lo[RM][4];
      load_split_a<a_row>(A, k, a_r, a_c, a_hi, a_lo);
#pragma unroll
      for (int j = 0; j < RN; ++j) {
        const int n = n0_ + 8 * j;
        uint32_t bf[4];
        ldmatrix_x4<!b_col>(bf, b_plane + (b_col ? B.at(n + b_r, k + b_c) : B.at(k + b_r, n + b_c)));
        const uint32_t b_hi[2] = {bf[0], bf[1]}, b_lo[2] = {bf[2], bf[3]};
#pragma unroll
        for (int i = 0; i < RM; ++i) split_mma(acc_[i][j], a_hi[i], a_lo[i], b_hi, b_lo);
      }
    }
  }

  // += A (M×K, split in shared memory: ldmatrix) · B (K×N, f32, split in
  // registers as in the f32 product). B's pairs follow the hardware's k
  // order, which ldmatrix gives A.
  template <int K, class LA, class LB>
  __device__ __forceinline__ void mma(const Split& A, const float* B, int ldb) {
    static_assert(K % 16 == 0, "bf16 mma tiles are 16×8×16");
    constexpr bool a_row = std::is_same_v<LA, Row>, b_col = std::is_same_v<LB, Col>;
    const int lane = static_cast<int>(threadIdx.x) % 32;
    const int a_r = a_row ? (lane & 15) : (lane & 7) + 8 * (lane >> 4);
    const int a_c = a_row ? 8 * (lane >> 4) : 8 * ((lane >> 3) & 1);
    const int k0[2] = {2 * t_, 2 * t_ + 8};
#pragma unroll 2
    for (int k = 0; k < K; k += 16) {
      uint32_t a_hi[RM][4], a_lo[RM][4];
      load_split_a<a_row>(A, k, a_r, a_c, a_hi, a_lo);
#pragma unroll
      for (int j = 0; j < RN; ++j) {
        const int n = n0_ + 8 * j + g_;
        float y[4];  // column n at pair 0, then pair 1
        if constexpr (b_col) {
          const float2 v0 = *reinterpret_cast<const float2*>(B + n * ldb + k + k0[0]);
          const float2 v1 = *reinterpret_cast<const float2*>(B + n * ldb + k + k0[1]);
          y[0] = v0.x, y[1] = v0.y, y[2] = v1.x, y[3] = v1.y;
        } else {
#pragma unroll
          for (int q = 0; q < 4; ++q) y[q] = B[(k + k0[q / 2] + q % 2) * ldb + n];
        }
        uint32_t b_hi[2], b_lo[2];
        split_bf16x2(y[0], y[1], b_hi[0], b_lo[0]);
        split_bf16x2(y[2], y[3], b_hi[1], b_lo[1]);
#pragma unroll
        for (int i = 0; i < RM; ++i) split_mma(acc_[i][j], a_hi[i], a_lo[i], b_hi, b_lo);
      }
    }
  }

  // C (row-major, any memory) = the sum, split (hi and lo planes).
  __device__ __forceinline__ void store_split(const Split& C) const {
#pragma unroll
    for (int i = 0; i < RM; ++i)
#pragma unroll
      for (int j = 0; j < RN; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int at = C.at(m0_ + 16 * i + g_ + 8 * h, n0_ + 8 * j + 2 * t_);
          uint32_t hi, lo;
          split_bf16x2(acc_[i][j][2 * h], acc_[i][j][2 * h + 1], hi, lo);
          *reinterpret_cast<uint32_t*>(C.hi + at) = hi;
          *reinterpret_cast<uint32_t*>(C.lo + at) = lo;
        }
  }

  // Row m of the sum ×= f(m) (per thread, no barrier).
  template <class F>
  __device__ __forceinline__ void scale_rows(F f) {
#pragma unroll
    for (int i = 0; i < RM; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float s = f(m0_ + 16 * i + g_ + 8 * h);
#pragma unroll
        for (int j = 0; j < RN; ++j) acc_[i][j][2 * h] *= s, acc_[i][j][2 * h + 1] *= s;
      }
  }
  // Column n of the sum ×= f(n) (per thread, no barrier).
  template <class F>
  __device__ __forceinline__ void scale_cols(F f) {
#pragma unroll
    for (int j = 0; j < RN; ++j) {
      const float s0 = f(n0_ + 8 * j + 2 * t_), s1 = f(n0_ + 8 * j + 2 * t_ + 1);
#pragma unroll
      for (int i = 0; i < RM; ++i)
#pragma unroll
        for (int h = 0; h < 2; ++h) acc_[i][j][2 * h] *= s0, acc_[i][j][2 * h + 1] *= s1;
    }
  }
  // f(m, n, {value at (m, n), value at (m, n + 1)}) for each pair of
  // neighbours this thread holds (n even).
  template <class F>
  __device__ __forceinline__ void visit_pairs(F f) const {
#pragma unroll
    for (int i = 0; i < RM; ++i)
#pragma unroll
      for (int j = 0; j < RN; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          f(m0_ + 16 * i + g_ + 8 * h, n0_ + 8 * j + 2 * t_, make_float2(acc_[i][j][2 * h], acc_[i][j][2 * h + 1]));
  }

  // A read-modify-write of memory at every pair this thread holds:
  // store(m, n, value pair, load(m, n)), row by row, each row's RN loads
  // issued before its stores. (visit_pairs with a lambda that loads and
  // stores waits for each load in turn: the compiler cannot move a load
  // above a store that may alias it.)
  template <class Load, class Store>
  __device__ __forceinline__ void update_pairs(Load load, Store store) const {
    update_pairs_impl<false>(load, store, 0, 0);
  }
  // The same, and with it the row sums of term(m, n, the old pair) → a pair
  // of terms, over the same pairs, summed and handed to done as row_sums_pairs
  // does (every lane must call it).
  template <class Load, class Store, class Term2, class Done>
  __device__ __forceinline__ void update_pairs_row_sums(Load load, Store store, Term2 term, Done done) const {
    update_pairs_impl<true>(load, store, term, done);
  }

  // Row sums over the columns of one warp tile: for each row m this warp
  // holds, done(m, w, Σ_n term(m, n, value)) with w the warp's column of the
  // warp grid (0 .. kWarpCols − 1), called once per (m, w) — a caller adds
  // the kWarpCols parts in a fixed order for the whole row. Every lane must
  // call it (quad shuffles).
  static constexpr int kWarpCols = WT::WN;
  template <class Term, class Done>
  __device__ __forceinline__ void row_sums(Term term, Done done) const {
    row_sums_pairs([&](int m, int n, float2 v) { return make_float2(term(m, n, v.x), term(m, n + 1, v.y)); }, done);
  }
  // The same with term(m, n, (value n, value n+1)) → the pair of terms, for a
  // term that reads memory a pair at a time (the sum in the same order).
  template <class Term2, class Done>
  __device__ __forceinline__ void row_sums_pairs(Term2 term, Done done) const {
#pragma unroll
    for (int i = 0; i < RM; ++i)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        quad_row_sum(
            m0_ + 16 * i + g_ + 8 * h, term,
            [&](int j) { return make_float2(acc_[i][j][2 * h], acc_[i][j][2 * h + 1]); }, done);
  }

  // The sum ×= s; += another sum of the same shape (both per thread, no barrier).
  __device__ __forceinline__ void scale(float s) {
#pragma unroll
    for (int i = 0; i < RM; ++i)
#pragma unroll
      for (int j = 0; j < RN; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc_[i][j][e] *= s;
  }
  __device__ __forceinline__ void add(const Acc& o) {
#pragma unroll
    for (int i = 0; i < RM; ++i)
#pragma unroll
      for (int j = 0; j < RN; ++j)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc_[i][j][e] += o.acc_[i][j][e];
  }

  // C (row-major, ldc) = [C +] alpha · the sum.
  __device__ __forceinline__ void store(float* C, int ldc, float alpha, bool accumulate) const {
#pragma unroll
    for (int i = 0; i < RM; ++i)
#pragma unroll
      for (int j = 0; j < RN; ++j)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          float2* cp = reinterpret_cast<float2*>(C + (m0_ + 16 * i + g_ + 8 * h) * ldc + n0_ + 8 * j + 2 * t_);
          float2 v = make_float2(alpha * acc_[i][j][2 * h], alpha * acc_[i][j][2 * h + 1]);
          if (accumulate) {
            const float2 c = *cp;
            v.x += c.x;
            v.y += c.y;
          }
          *cp = v;
        }
  }
};

// One product: C = [C +] alpha · A B.
template <int M, int N, int K, class LA, class LB, int kWarps = 8>
__device__ __forceinline__ void gemm(float* C, int ldc, const float* A, int lda, const float* B, int ldb, float alpha,
                                     bool accumulate) {
  Acc<M, N, kWarps> acc;
  acc.template mma<K, LA, LB>(A, lda, B, ldb);
  acc.store(C, ldc, alpha, accumulate);
}

// The same with A split and B in f32.
template <int M, int N, int K, class LA, class LB, int kWarps = 8>
__device__ __forceinline__ void gemm(float* C, int ldc, const Split& A, const float* B, int ldb, float alpha,
                                     bool accumulate) {
  Acc<M, N, kWarps> acc;
  acc.template mma<K, LA, LB>(A, B, ldb);
  acc.store(C, ldc, alpha, accumulate);
}

// The same from split operands.
template <int M, int N, int K, class LA, class LB, int kWarps = 8>
__device__ __forceinline__ void gemm(float* C, int ldc, const Split& A, const Split& B, float alpha,
                                     bool accumulate) {
  Acc<M, N, kWarps> acc;
  acc.template mma<K, LA, LB>(A, B);
  acc.store(C, ldc, alpha, accumulate);
}

}  // namespace bitrank::cuda::tile
