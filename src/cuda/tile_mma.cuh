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
// Work split: the block's warps take the 16×16 output tiles round-robin;
// callers __syncthreads() between a product and any use of its C.
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

template <int M, int N, int K, class LA, class LB, int kWarps = 8>
__device__ __forceinline__ void gemm(float* C, int ldc, const float* A, int lda, const float* B, int ldb, float alpha,
                                     bool accumulate) {
  static_assert(M % 16 == 0 && N % 16 == 0 && K % 8 == 0, "wmma tf32 tiles are 16×16×8");
  constexpr int TM = M / 16, TN = N / 16;
  constexpr bool a_row = std::is_same_v<LA, Row>, b_row = std::is_same_v<LB, Row>;
  const int warp = static_cast<int>(threadIdx.x) / 32;
  for (int t = warp; t < TM * TN; t += kWarps) {
    const int tm = t / TN, tn = t % TN;
    wmma::fragment<wmma::accumulator, 16, 16, 8, float> p;
    wmma::fill_fragment(p, 0.0f);
#pragma unroll 2
    for (int k = 0; k < K; k += 8) {
      wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, LA> a_hi, a_lo;
      wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, LB> b_hi, b_lo;
      const float* ap = a_row ? A + tm * 16 * lda + k : A + k * lda + tm * 16;
      const float* bp = b_row ? B + k * ldb + tn * 16 : B + tn * 16 * ldb + k;
      wmma::load_matrix_sync(a_hi, ap, lda);
      wmma::load_matrix_sync(b_hi, bp, ldb);
      split_tf32(a_hi, a_lo);
      split_tf32(b_hi, b_lo);
      wmma::mma_sync(p, a_lo, b_hi, p);
      wmma::mma_sync(p, a_hi, b_lo, p);
      wmma::mma_sync(p, a_hi, b_hi, p);
    }
    float* cp = C + tm * 16 * ldc + tn * 16;
    wmma::fragment<wmma::accumulator, 16, 16, 8, float> c;
    if (accumulate) {
      wmma::load_matrix_sync(c, cp, ldc, wmma::mem_row_major);
#pragma unroll
      for (int i = 0; i < c.num_elements; ++i) c.x[i] = fmaf(alpha, p.x[i], c.x[i]);
    } else {
#pragma unroll
      for (int i = 0; i < p.num_elements; ++i) c.x[i] = alpha * p.x[i];
    }
    wmma::store_matrix_sync(cp, c, ldc, wmma::mem_row_major);
  }
}

}  // namespace bitrank::cuda::tile
