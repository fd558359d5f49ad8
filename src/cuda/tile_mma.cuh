// Block-cooperative f32 matrix products on the tensor cores, for kernels
// that keep their small operands (tens of KiB) in shared memory — the
// chunkwise Gated DeltaNet (gdn_chunk.cu) is built from them.
//
//   C (M×N, row-major, ldc) = [C +] alpha · A (M×K) · B (K×N)
//
// A and B are read through a layout tag: Row (A(m,k) at A[m·lda + k]) or
// Col (A(m,k) at A[k·lda + m]), so a transposed operand costs nothing.
// Operands and C may be in shared or global memory. Requirements (those of
// wmma): M, N multiples of 16, K of 8; every leading dimension a multiple
// of 4 floats and every pointer 32-byte aligned (pad shared rows to
// 132 / 68 / 36 floats; a padded row also spreads the banks).
//
// Numerics: 3xTF32. Each operand x splits into hi = tf32(x) and
// lo = tf32(x − hi); the product accumulates lo·hi + hi·lo + hi·hi in f32
// (the lo·lo term, ~2⁻²² relative, is dropped). The result carries f32
// accuracy (about 1e-6 relative on the sums here) at a third of the TF32
// tensor-core rate — one pass of TF32 alone (10-bit mantissa) would put
// the GDN outputs near 1e-3 relative, above the ops' 2e-4 tolerance.
//
// Work split: each warp owns an RM×RN block of 16×16 output fragments
// (WarpTile); callers __syncthreads() between a product and any use of its C.
#pragma once

#include <mma.h>

#include <type_traits>

namespace bitrank::cuda::tile {

namespace wmma = nvcuda::wmma;
using Row = wmma::row_major;
using Col = wmma::col_major;

template <class Frag>
__device__ __forceinline__ void split_tf32(Frag& hi, Frag& lo) {
#pragma unroll
  for (int i = 0; i < hi.num_elements; ++i) {
    const float x = hi.x[i];
    const float h = wmma::__float_to_tf32(x);
    hi.x[i] = h;
    lo.x[i] = wmma::__float_to_tf32(x - h);
  }
}

// The warp tile, in 16×16 fragments: RM×RN per warp, as square as the
// shape allows (each A fragment then feeds RN products, each B fragment RM).
template <int TM, int TN, int kWarps>
struct WarpTile {
  static constexpr int per_warp = TM * TN / kWarps;
  static constexpr int half = per_warp >= 2 ? per_warp / 2 : 1;
  static constexpr int RM = (per_warp >= 4 && per_warp % 2 == 0 && TM % 2 == 0 && TN % half == 0) ? 2 : 1;
  static constexpr int RN = per_warp / RM;
  static_assert(per_warp >= 1 && TM * TN == per_warp * kWarps, "the tiles must split evenly over the warps");
  static_assert(TM % RM == 0 && TN % RN == 0, "warp tiles must cover C");
};

// An M×N product being accumulated in the registers of the block's warps:
// any number of mma() calls (with any K and layouts, operands reloaded in
// between), then one store(). Each warp owns the fragments of its WarpTile;
// hi·hi and the two corrections go to separate accumulators (two
// independent chains per fragment instead of one three times as long).
template <int M, int N, int kWarps = 8>
class Acc {
  static_assert(M % 16 == 0 && N % 16 == 0, "wmma tf32 tiles are 16×16×8");
  using WT = WarpTile<M / 16, N / 16, kWarps>;
  static constexpr int RM = WT::RM, RN = WT::RN, warps_n = (N / 16) / RN;
  using Frag = wmma::fragment<wmma::accumulator, 16, 16, 8, float>;
  Frag hi_[RM][RN], lo_[RM][RN];
  int m0_, n0_;

 public:
  __device__ Acc() {
    const int warp = static_cast<int>(threadIdx.x) / 32;
    m0_ = (warp / warps_n) * RM * 16;
    n0_ = (warp % warps_n) * RN * 16;
#pragma unroll
    for (int i = 0; i < RM; ++i)
#pragma unroll
      for (int j = 0; j < RN; ++j) {
        wmma::fill_fragment(hi_[i][j], 0.0f);
        wmma::fill_fragment(lo_[i][j], 0.0f);
      }
  }

  // += A (M×K) · B (K×N).
  template <int K, class LA, class LB>
  __device__ __forceinline__ void mma(const float* A, int lda, const float* B, int ldb) {
    static_assert(K % 8 == 0, "wmma tf32 tiles are 16×16×8");
    constexpr bool a_row = std::is_same_v<LA, Row>, b_row = std::is_same_v<LB, Row>;
#pragma unroll 2
    for (int k = 0; k < K; k += 8) {
      wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, LA> a_hi[RM], a_lo[RM];
      wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, LB> b_hi[RN], b_lo[RN];
#pragma unroll
      for (int i = 0; i < RM; ++i) {
        const int m = m0_ + 16 * i;
        wmma::load_matrix_sync(a_hi[i], a_row ? A + m * lda + k : A + k * lda + m, lda);
        split_tf32(a_hi[i], a_lo[i]);
      }
#pragma unroll
      for (int j = 0; j < RN; ++j) {
        const int n = n0_ + 16 * j;
        wmma::load_matrix_sync(b_hi[j], b_row ? B + k * ldb + n : B + n * ldb + k, ldb);
        split_tf32(b_hi[j], b_lo[j]);
      }
#pragma unroll
      for (int i = 0; i < RM; ++i)
#pragma unroll
        for (int j = 0; j < RN; ++j) {
          wmma::mma_sync(lo_[i][j], a_lo[i], b_hi[j], lo_[i][j]);
          wmma::mma_sync(lo_[i][j], a_hi[i], b_lo[j], lo_[i][j]);
          wmma::mma_sync(hi_[i][j], a_hi[i], b_hi[j], hi_[i][j]);
        }
    }
  }

  // C (row-major, ldc) = [C +] alpha · the sum.
  __device__ __forceinline__ void store(float* C, int ldc, float alpha, bool accumulate) const {
#pragma unroll
    for (int i = 0; i < RM; ++i)
#pragma unroll
      for (int j = 0; j < RN; ++j) {
        float* cp = C + (m0_ + 16 * i) * ldc + n0_ + 16 * j;
        Frag c;
        if (accumulate) {
          wmma::load_matrix_sync(c, cp, ldc, wmma::mem_row_major);
#pragma unroll
          for (int e = 0; e < c.num_elements; ++e) c.x[e] = fmaf(alpha, hi_[i][j].x[e] + lo_[i][j].x[e], c.x[e]);
        } else {
#pragma unroll
          for (int e = 0; e < c.num_elements; ++e) c.x[e] = alpha * (hi_[i][j].x[e] + lo_[i][j].x[e]);
        }
        wmma::store_matrix_sync(cp, c, ldc, wmma::mem_row_major);
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

}  // namespace bitrank::cuda::tile
