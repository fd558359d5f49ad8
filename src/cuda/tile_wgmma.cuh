// Warpgroup matrix products (wgmma, sm_90a) on operands kept split in
// shared memory — the 3xBF16 products of tile_mma.cuh (same numerics: lo·hi,
// hi·lo, then hi·hi, f32 accumulation) issued as asynchronous warpgroup
// instructions instead of per-warp mma.sync.
//
// One warpgroup (4 consecutive warps, 128 threads) owns a 64×N product
// (N = 32, 64 or 128): C += A (64×K) · B (K×N). Each operand is stored either
// K-contiguous ("K-major", wgmma's untransposed form) or M/N-contiguous
// ("MN-major", read transposed by the instruction: what a tile written
// from accumulators or fetched in its memory order is), named as
// tile_mma.cuh names them: A Row = K-major, A Col = MN-major; B Col =
// K-major (stored N×K), B Row = MN-major (stored K×N). Each 16-wide k step
// is three instructions, each reading its two operands straight from
// shared memory through a 64-bit descriptor; the warps issue them and go
// on until wait().
//
// Shared-memory layout (CoreSplit): wgmma reads 8×8 "core matrices" of
// 16-byte rows stored as 128 contiguous bytes. A plane of R rows × KC
// columns (bf16) is stored as R/8 × KC/8 core matrices, the K neighbours
// adjacent (the descriptor's leading-dimension byte offset, LBO = 128) and
// consecutive groups of 8 rows KC·16 bytes apart (its stride-dimension byte
// offset, SBO), no swizzle: element (r, k) at
//   ((r/8)·(KC/8) + k/8)·64 + (r%8)·8 + k%8.
// A k step of 16 then starts 256 bytes further on, and rows r0.. of the
// plane (r0 a multiple of 8) (r0/8)·KC·16 bytes further on. An MN-major
// plane is the same grid of core matrices with each one transposed (its
// 16-byte rows run along M/N, one a k): element (mn, k) at
//   ((mn/8)·(KC/8) + k/8)·64 + (k%8)·8 + mn%8,
// so the same descriptor and the same offsets of a block (mn0, k0) serve
// both, and only the instruction's transpose bit tells them apart.
//
// Memory model: shared memory written by the threads (the generic proxy)
// must be fenced to the async proxy (fence_operands(), then a barrier)
// before a wgmma reads it; the accumulators may be read only after wait().
// Checked against the host in tests/tile_cuda_test.cpp (tests/support/tile_check.cu).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>
#include <type_traits>

#include "cuda/tile_mma.cuh"

namespace bitrank::cuda::tile::wg {

// An R × kc operand split into bf16 hi and lo planes, each in the core layout above.
struct CoreSplit {
  __nv_bfloat16* hi;
  __nv_bfloat16* lo;
  int kc;  // columns (K), a multiple of 16
};

__device__ __forceinline__ int core_index(int r, int k, int kc) {
  return ((r >> 3) * (kc >> 3) + (k >> 3)) * 64 + (r & 7) * 8 + (k & 7);
}
// The same element of an MN-major plane (mn: its M or N index).
__device__ __forceinline__ int core_index_mn(int mn, int k, int kc) {
  return ((mn >> 3) * (kc >> 3) + (k >> 3)) * 64 + (k & 7) * 8 + (mn & 7);
}

// Stores x0..x3 (columns k..k+3 of row r, k a multiple of 4) split.
__device__ __forceinline__ void split_store4(const CoreSplit& s, int r, int k, float4 x) {
  split_store4_at(s.hi, s.lo, core_index(r, k, s.kc), x);
}
// Stores x0..x3 (M/N indices mn..mn+3 at k, mn a multiple of 4) split into an MN-major plane.
__device__ __forceinline__ void split_store4_mn(const CoreSplit& s, int mn, int k, float4 x) {
  split_store4_at(s.hi, s.lo, core_index_mn(mn, k, s.kc), x);
}

// The descriptor of the 8·m × 16 block of a plane starting at p (no swizzle).
__device__ __forceinline__ uint64_t descriptor(const __nv_bfloat16* p, int kc) {
  const auto addr = static_cast<uint64_t>(static_cast<uint32_t>(__cvta_generic_to_shared(p)));
  const uint64_t lbo = 128, sbo = static_cast<uint64_t>(kc) * 16;
  return ((addr & 0x3FFFF) >> 4) | ((lbo >> 4) << 16) | ((sbo >> 4) << 32);
}

// The 128-byte-swizzle layout (descriptor layout type 1), Sw128Split: a
// plane of `rows` stored rows × C columns (bf16) kept as C/64 column
// blocks of rows × 64, one after the other; in a block, row r is 128
// contiguous bytes, its 16-byte chunk j stored at chunk j ^ (r mod 8):
//   element (r, c) at (c/64)·rows·64 + r·64 + ((c mod 64) ^ 8·(r mod 8)).
// Each plane starts on a 1024-byte boundary (the eight-row atom the
// hardware swizzles by address bits). The same stored tile serves both
// readings: K-major (stored rows are M or N, columns K) and MN-major
// (stored rows are K, columns M or N); a copy of a row-major tile into it
// keeps each 32-byte sector whole (its two chunks stay an aligned pair),
// which the core layout above does not (docs/perf.md at 3b6e4be, "Thirteenth round").
struct Sw128Split {
  __nv_bfloat16* hi;
  __nv_bfloat16* lo;
  int rows;  // stored rows, a multiple of 8
};
__device__ __forceinline__ int sw128_index(int r, int c, int rows) {
  return (c >> 6) * rows * 64 + r * 64 + ((c & 63) ^ ((r & 7) << 3));
}
// Stores x0..x3 (stored row r, columns c..c+3, c a multiple of 4) split.
__device__ __forceinline__ void split_store4(const Sw128Split& s, int r, int c, float4 x) {
  split_store4_at(s.hi, s.lo, sw128_index(r, c, s.rows), x);
}
// Descriptors of one k step (16) of a 64-row (A) or N-row (B) operand in a
// Sw128Split plane. K-major: stored rows m0.. (a multiple of 8), columns
// k..k+15 (k a multiple of 16): the step starts k mod 64 columns into its
// block, and the hardware's swizzle, applied to the addresses, finds each
// row's chunks; eight-row groups 1024 bytes apart (SBO), LBO unused.
// MN-major: stored rows k..k+15 (two eight-row groups, 1024 bytes apart:
// SBO), columns m0.. (a multiple of 64, or of 32 within a block); the next
// 64 columns one block further on (LBO = rows·128 bytes).
__device__ __forceinline__ uint64_t sw128_descriptor(const __nv_bfloat16* p, int lbo_bytes) {
  const auto addr = static_cast<uint64_t>(static_cast<uint32_t>(__cvta_generic_to_shared(p)));
  return ((addr & 0x3FFFF) >> 4) | (static_cast<uint64_t>(lbo_bytes >> 4) << 16) | (uint64_t{1024 >> 4} << 32) |
         (uint64_t{1} << 62);
}
__device__ __forceinline__ uint64_t sw128_k_major(const __nv_bfloat16* plane, int rows, int m0, int k) {
  return sw128_descriptor(plane + (k >> 6) * rows * 64 + m0 * 64 + (k & 63), 16);
}
__device__ __forceinline__ uint64_t sw128_mn_major(const __nv_bfloat16* plane, int rows, int m0, int k) {
  return sw128_descriptor(plane + (m0 >> 6) * rows * 64 + k * 64 + (m0 & 63), rows * 128);
}

// Threads' shared-memory writes made visible to wgmma (before the barrier).
__device__ __forceinline__ void fence_operands() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
__device__ __forceinline__ void fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}

// d += A·B for one k step of 16 (f32 accumulators): wgmma m64nNk16 with
// scale-d 1, no negation; kTA / kTB: A / B MN-major (transposed).
template <int kTA, int kTB>
__device__ __forceinline__ void wgmma_bf16_n32(float (&d)[16], uint64_t a, uint64_t b) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15},"
      " %16, %17, 1, 1, 1, %18, %19;\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
      : "l"(a), "l"(b), "n"(kTA), "n"(kTB));
}

template <int kTA, int kTB>
__device__ __forceinline__ void wgmma_bf16_n64(float (&d)[32], uint64_t a, uint64_t b) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
      " %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31},"
      " %32, %33, 1, 1, 1, %34, %35;\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "l"(a), "l"(b), "n"(kTA), "n"(kTB));
}

template <int kTA, int kTB>
__device__ __forceinline__ void wgmma_bf16_n128(float (&d)[64], uint64_t a, uint64_t b) {
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
      " %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
      " %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"
      " %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63},"
      " %64, %65, 1, 1, 1, %66, %67;\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(a), "l"(b), "n"(kTA), "n"(kTB));
}

// A warpgroup's 64×N product in its registers: thread t of the warpgroup
// (warp w = t/32, lane l) holds, for each 8-column block j, rows
// 16w + l/4 and 16w + l/4 + 8 at columns 8j + 2(l%4) and the next one.
template <int N>
class WgAcc {
  static_assert(N == 32 || N == 64 || N == 128, "m64n32, m64n64 or m64n128");
  float d_[N / 2];
  int row_, col_;

  template <int kTA, int kTB>
  __device__ __forceinline__ void issue(uint64_t a, uint64_t b) {
    if constexpr (N == 32)
      wgmma_bf16_n32<kTA, kTB>(d_, a, b);
    else if constexpr (N == 64)
      wgmma_bf16_n64<kTA, kTB>(d_, a, b);
    else
      wgmma_bf16_n128<kTA, kTB>(d_, a, b);
  }

  // The three products of each k step of 16 (lo·hi, hi·lo, hi·hi), one
  // fence before and one commit after: descs(k) gives the step's four
  // descriptors, in whichever layout the operands are stored.
  struct StepDescriptors {
    uint64_t a_hi, a_lo, b_hi, b_lo;
  };
  template <int K, int kTA, int kTB, class Descs>
  __device__ __forceinline__ void split_steps(Descs descs) {
    static_assert(K % 16 == 0, "k steps of 16");
    fence();
#pragma unroll
    for (int k = 0; k < K; k += 16) {
      const StepDescriptors d = descs(k);
      issue<kTA, kTB>(d.a_lo, d.b_hi);
      issue<kTA, kTB>(d.a_hi, d.b_lo);
      issue<kTA, kTB>(d.a_hi, d.b_hi);
    }
    commit();
  }

 public:
  __device__ WgAcc() {
    const int t = static_cast<int>(threadIdx.x) % 128;
    row_ = 16 * (t / 32) + (t % 32) / 4;
    col_ = 2 * (t % 4);
#pragma unroll
    for (int i = 0; i < N / 2; ++i) d_[i] = 0.0f;
  }

  // += A (M indices a0..a0+63, K of them) · B (N indices b0..b0+N−1), each
  // in its layout (LA: Row K-major, Col MN-major; LB: Col K-major, Row
  // MN-major; a0, b0 multiples of 8): issued, not waited for (wait() before
  // reading the sum).
  template <int K, class LA = Row, class LB = Col>
  __device__ __forceinline__ void mma_async(const CoreSplit& A, int a0, const CoreSplit& B, int b0) {
    split_steps<K, std::is_same_v<LA, Col>, std::is_same_v<LB, Row>>([&](int k) {
      const int ao = core_index(a0, k, A.kc), bo = core_index(b0, k, B.kc);
      return StepDescriptors{descriptor(A.hi + ao, A.kc), descriptor(A.lo + ao, A.kc), descriptor(B.hi + bo, B.kc),
                             descriptor(B.lo + bo, B.kc)};
    });
  }
  // The same from Sw128Split operands (a0, b0 multiples of 8 for a K-major
  // operand, of 64 — or 32 for B at N = 32 — for an MN-major one).
  template <int K, class LA = Row, class LB = Col>
  __device__ __forceinline__ void mma_async(const Sw128Split& A, int a0, const Sw128Split& B, int b0) {
    constexpr bool a_mn = std::is_same_v<LA, Col>, b_mn = std::is_same_v<LB, Row>;
    const auto desc = [](const __nv_bfloat16* plane, int rows, int m0, int k, bool mn) {
      return mn ? sw128_mn_major(plane, rows, m0, k) : sw128_k_major(plane, rows, m0, k);
    };
    split_steps<K, a_mn, b_mn>([&](int k) {
      return StepDescriptors{desc(A.hi, A.rows, a0, k, a_mn), desc(A.lo, A.rows, a0, k, a_mn),
                             desc(B.hi, B.rows, b0, k, b_mn), desc(B.lo, B.rows, b0, k, b_mn)};
    });
  }
  // The same, waited for (either operand layout).
  template <int K, class LA = Row, class LB = Col, class Operand>
  __device__ __forceinline__ void mma(const Operand& A, int a0, const Operand& B, int b0) {
    mma_async<K, LA, LB>(A, a0, B, b0);
    wait<0>();
  }

  // f(m, n, {value at (m, n), value at (m, n + 1)}) for each pair this thread holds.
  template <class F>
  __device__ __forceinline__ void visit_pairs(F f) const {
#pragma unroll
    for (int j = 0; j < N / 8; ++j)
#pragma unroll
      for (int h = 0; h < 2; ++h) f(row_ + 8 * h, 8 * j + col_, make_float2(d_[4 * j + 2 * h], d_[4 * j + 2 * h + 1]));
  }
  // C (row-major, ldc, 8-byte aligned rows) = the sum.
  __device__ __forceinline__ void store(float* C, int ldc) const {
    visit_pairs([&](int m, int n, float2 v) { *reinterpret_cast<float2*>(C + m * ldc + n) = v; });
  }
};

}  // namespace bitrank::cuda::tile::wg
