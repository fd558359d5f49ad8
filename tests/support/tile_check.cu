// Standalone runs of the tile primitives (contract: tile_check.hpp). Each
// kernel splits f32 operands into shared memory in its path's layout
// (tile::Split row-major planes for mma.sync, tile::wg::CoreSplit core
// matrices for wgmma), runs the product and writes C; the rate kernels
// repeat one product with operands made from the block index.
#include "support/tile_check.hpp"

#include <span>
#include <type_traits>

#include "bitrank/error.hpp"
#include "cuda/check.hpp"
#include "cuda/runtime.hpp"
#include "cuda/tile_mma.cuh"
#include "cuda/tile_wgmma.cuh"

namespace bitrank::cuda {
namespace {

using tile::Col;
using tile::Row;
using tile::Split;
using tile::wg::CoreSplit;
using tile::wg::Sw128Split;

// x0..x3 (columns k..k+3 of row r) into either path's split layout.
__device__ __forceinline__ void store4(const Split& dst, int r, int k, float4 x) { tile::split_store4(dst, r, k, x); }
__device__ __forceinline__ void store4(const CoreSplit& dst, int r, int k, float4 x) {
  tile::wg::split_store4(dst, r, k, x);
}
__device__ __forceinline__ void store4(const Sw128Split& dst, int r, int k, float4 x) {
  tile::wg::split_store4(dst, r, k, x);
}
// x0..x3 at M or N indices mn..mn+3 of K index k, into an MN-major operand
// (stored rows k, columns mn in a Sw128Split).
__device__ __forceinline__ void store4_mn(const CoreSplit& dst, int mn, int k, float4 x) {
  tile::wg::split_store4_mn(dst, mn, k, x);
}
__device__ __forceinline__ void store4_mn(const Sw128Split& dst, int mn, int k, float4 x) {
  tile::wg::split_store4(dst, k, mn, x);
}
// A shared-memory pointer rounded up to the next 1024-byte boundary (the
// kernels given a Sw128Split ask for 1 KB more).
__device__ __forceinline__ __nv_bfloat16* align_1024(__nv_bfloat16* p) {
  return reinterpret_cast<__nv_bfloat16*>((reinterpret_cast<uintptr_t>(p) + 1023) & ~uintptr_t{1023});
}

// ROWS × K f32 rows (row-major, global) into a Split (row stride K + 8) or a CoreSplit.
template <int ROWS, int K, class Dst>
__device__ void split_rows(const Dst& dst, const float* src) {
  for (int e = threadIdx.x; e < ROWS * K / 4; e += blockDim.x) {
    const int r = e / (K / 4), k = 4 * (e % (K / 4));
    store4(dst, r, k, *reinterpret_cast<const float4*>(src + r * K + k));
  }
}
// The same rows into an MN-major operand (the row index its M or N):
// four consecutive rows of one column at a time.
template <int ROWS, int K, class Dst>
__device__ void split_rows_mn(const Dst& dst, const float* src) {
  for (int e = threadIdx.x; e < ROWS * K / 4; e += blockDim.x) {
    const int k = e / (ROWS / 4), r = 4 * (e % (ROWS / 4));
    const float* c = src + r * K + k;
    store4_mn(dst, r, k, make_float4(c[0], c[K], c[2 * K], c[3 * K]));
  }
}

// One warpgroup (128 threads): C = A·Bᵀ.
template <int N, int K>
__global__ void __launch_bounds__(128) product_mma_sync(const float* A, const float* B, float* C) {
  extern __shared__ __align__(128) __nv_bfloat16 sm[];
  constexpr int ld = K + 8;
  const Split As{sm, sm + 64 * ld, ld}, Bs{sm + 2 * 64 * ld, sm + 2 * 64 * ld + N * ld, ld};
  split_rows<64, K>(As, A);
  split_rows<N, K>(Bs, B);
  __syncthreads();
  tile::Acc<64, N, 4> acc;
  acc.template mma<K, Row, Col>(As, Bs);
  acc.store(C, N, 1.0f, false);
}
// kMnA / kMnB: A / B stored MN-major (read transposed by wgmma).
template <int N, int K, bool kMnA, bool kMnB>
__global__ void __launch_bounds__(128) product_wgmma(const float* A, const float* B, float* C) {
  extern __shared__ __align__(128) __nv_bfloat16 sm[];
  const CoreSplit As{sm, sm + 64 * K, K}, Bs{sm + 2 * 64 * K, sm + 2 * 64 * K + N * K, K};
  if constexpr (kMnA) split_rows_mn<64, K>(As, A);
  else split_rows<64, K>(As, A);
  if constexpr (kMnB) split_rows_mn<N, K>(Bs, B);
  else split_rows<N, K>(Bs, B);
  tile::wg::fence_operands();
  __syncthreads();
  tile::wg::WgAcc<N> acc;
  using LA = std::conditional_t<kMnA, Col, Row>;
  using LB = std::conditional_t<kMnB, Row, Col>;
  acc.template mma<K, LA, LB>(As, 0, Bs, 0);
  acc.store(C, N);
}
// The same on Sw128Split operands (stored rows: M or N when K-major, K when MN-major).
template <int N, int K, bool kMnA, bool kMnB>
__global__ void __launch_bounds__(128) product_sw128(const float* A, const float* B, float* C) {
  extern __shared__ __align__(128) __nv_bfloat16 sm[];
  auto* base = align_1024(sm);
  constexpr int kBPlane = kMnB && N < 64 ? 64 * K : N * K;  // an MN-major block is 64 columns wide
  const Sw128Split As{base, base + 64 * K, kMnA ? K : 64};
  const Sw128Split Bs{base + 2 * 64 * K, base + 2 * 64 * K + kBPlane, kMnB ? K : N};
  if constexpr (kMnA) split_rows_mn<64, K>(As, A);
  else split_rows<64, K>(As, A);
  if constexpr (kMnB) split_rows_mn<N, K>(Bs, B);
  else split_rows<N, K>(Bs, B);
  tile::wg::fence_operands();
  __syncthreads();
  tile::wg::WgAcc<N> acc;
  using LA = std::conditional_t<kMnA, Col, Row>;
  using LB = std::conditional_t<kMnB, Row, Col>;
  acc.template mma<K, LA, LB>(As, 0, Bs, 0);
  acc.store(C, N);
}

// Operand values of the rate kernels: in [−1, 1), from the block and the index.
__device__ float operand(int block, int which, int i) {
  unsigned x = static_cast<unsigned>(i) * 2654435761u ^ (static_cast<unsigned>(block) * 40503u + which * 977u);
  x ^= x >> 15;
  x *= 2246822519u;
  x ^= x >> 13;
  return static_cast<float>(x & 0xffffu) / 32768.0f - 1.0f;
}
// The same values into an MN-major operand: four consecutive rows of one column at a time.
template <class Dst>
__device__ void fill_mn(const Dst& dst, int rows, int which) {
  for (int e = threadIdx.x; e < rows * 16; e += blockDim.x) {
    const int k = e / (rows / 4), r = 4 * (e % (rows / 4));
    const int i = r * 64 + k;
    const float4 v = make_float4(operand(blockIdx.x, which, i), operand(blockIdx.x, which, i + 64),
                                 operand(blockIdx.x, which, i + 128), operand(blockIdx.x, which, i + 192));
    store4_mn(dst, r, k, v);
  }
}
template <class Dst>
__device__ void fill(const Dst& dst, int rows, int which) {
  for (int e = threadIdx.x; e < rows * 16; e += blockDim.x) {
    const int r = e / 16, k = 4 * (e % 16);
    const int i = r * 64 + k;
    const float4 v = make_float4(operand(blockIdx.x, which, i), operand(blockIdx.x, which, i + 1),
                                 operand(blockIdx.x, which, i + 2), operand(blockIdx.x, which, i + 3));
    store4(dst, r, k, v);
  }
}

// 256 threads: the block's 64×128 C over all 8 warps (mma.sync) or as two
// 64×64 halves, one per warpgroup (wgmma; kMn: A and B MN-major; kN = 32:
// each half as two 64×32 products waited for in turn, as a kernel with
// 32-column products runs them); K = 64.
__global__ void __launch_bounds__(256) rate_mma_sync(int iters, float* sums) {
  extern __shared__ __align__(128) __nv_bfloat16 sm[];
  constexpr int ld = 72;
  const Split As{sm, sm + 64 * ld, ld}, Bs{sm + 2 * 64 * ld, sm + 2 * 64 * ld + 128 * ld, ld};
  fill(As, 64, 0);
  fill(Bs, 128, 1);
  __syncthreads();
  tile::Acc<64, 128> acc;
  for (int it = 0; it < iters; ++it) acc.mma<64, Row, Col>(As, Bs);
  float s = 0.0f;
  acc.visit_pairs([&](int, int, float2 v) { s += v.x + v.y; });
  atomicAdd(sums + blockIdx.x, s);
}
// The rate kernels' two operands (A 64×64, B 128×64) in shared memory, in
// layout Operand (CoreSplit, or Sw128Split from the first 1024-byte
// boundary; kMn: both MN-major), filled and fenced for wgmma.
template <class Operand, bool kMn>
__device__ void rate_operands(__nv_bfloat16* sm, Operand& As, Operand& Bs) {
  if constexpr (std::is_same_v<Operand, Sw128Split>) {
    auto* base = align_1024(sm);
    As = Sw128Split{base, base + 64 * 64, 64};
    Bs = Sw128Split{base + 2 * 64 * 64, base + 2 * 64 * 64 + 128 * 64, kMn ? 64 : 128};
  } else {
    As = CoreSplit{sm, sm + 64 * 64, 64};
    Bs = CoreSplit{sm + 2 * 64 * 64, sm + 2 * 64 * 64 + 128 * 64, 64};
  }
  if constexpr (kMn) {
    fill_mn(As, 64, 0);
    fill_mn(Bs, 128, 1);
  } else {
    fill(As, 64, 0);
    fill(Bs, 128, 1);
  }
  tile::wg::fence_operands();
  __syncthreads();
}
template <class Operand, bool kMn, int kN>
__global__ void __launch_bounds__(256) rate_wgmma(int iters, float* sums) {
  extern __shared__ __align__(128) __nv_bfloat16 sm[];
  Operand As{}, Bs{};
  rate_operands<Operand, kMn>(sm, As, Bs);
  using LA = std::conditional_t<kMn, Col, Row>;
  using LB = std::conditional_t<kMn, Row, Col>;
  const int half = static_cast<int>(threadIdx.x) / 128;
  float s = 0.0f;
  if constexpr (kN == 64) {
    tile::wg::WgAcc<64> acc;
    for (int it = 0; it < iters; ++it) acc.mma<64, LA, LB>(As, 0, Bs, 64 * half);
    acc.visit_pairs([&](int, int, float2 v) { s += v.x + v.y; });
  } else {
    tile::wg::WgAcc<32> acc0, acc1;
    for (int it = 0; it < iters; ++it) {
      acc0.mma<64, LA, LB>(As, 0, Bs, 64 * half);
      acc1.mma<64, LA, LB>(As, 0, Bs, 64 * half + 32);
    }
    acc0.visit_pairs([&](int, int, float2 v) { s += v.x + v.y; });
    acc1.visit_pairs([&](int, int, float2 v) { s += v.x + v.y; });
  }
  atomicAdd(sums + blockIdx.x, s);
}

// rate_wgmma<CoreSplit, false, 64> with 3xBF16's two cross terms accumulated apart
// from hi·hi (two independent chains of dependent instructions, added at
// the end): what a product's chain length costs when each is waited for.
__global__ void __launch_bounds__(256) rate_wgmma_two_chains(int iters, float* sums) {
  extern __shared__ __align__(128) __nv_bfloat16 sm[];
  CoreSplit As{}, Bs{};
  rate_operands<CoreSplit, false>(sm, As, Bs);
  const int half = static_cast<int>(threadIdx.x) / 128;
  float hh[32] = {}, cross[32] = {};
  for (int it = 0; it < iters; ++it) {
    tile::wg::fence();
#pragma unroll
    for (int k = 0; k < 64; k += 16) {
      const int ao = tile::wg::core_index(0, k, 64), bo = tile::wg::core_index(64 * half, k, 64);
      const uint64_t a_hi = tile::wg::descriptor(As.hi + ao, 64), a_lo = tile::wg::descriptor(As.lo + ao, 64);
      const uint64_t b_hi = tile::wg::descriptor(Bs.hi + bo, 64), b_lo = tile::wg::descriptor(Bs.lo + bo, 64);
      tile::wg::wgmma_bf16_n64<0, 0>(cross, a_lo, b_hi);
      tile::wg::wgmma_bf16_n64<0, 0>(hh, a_hi, b_hi);
      tile::wg::wgmma_bf16_n64<0, 0>(cross, a_hi, b_lo);
    }
    tile::wg::commit();
    tile::wg::wait<0>();
  }
  float s = 0.0f;
  for (int i = 0; i < 32; ++i) s += hh[i] + cross[i];
  atomicAdd(sums + blockIdx.x, s);
}

template <class Kernel>
void allow_smem(Kernel k, int bytes) {
  BR_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
}

template <int N, int K>
void run_product(TilePath path, const float* A, const float* B, float* C, cudaStream_t s) {
  if (path == TilePath::mma_sync) {
    const int bytes = 2 * (64 + N) * (K + 8) * 2;
    allow_smem(product_mma_sync<N, K>, bytes);
    product_mma_sync<N, K><<<1, 128, bytes, s>>>(A, B, C);
  } else {
    const int bytes = 2 * (64 + N) * K * 2;
    const auto run = [&](auto kernel) {
      allow_smem(kernel, bytes);
      kernel<<<1, 128, bytes, s>>>(A, B, C);
    };
    if (path == TilePath::wgmma) run(product_wgmma<N, K, false, false>);
    if (path == TilePath::wgmma_mn_a) run(product_wgmma<N, K, true, false>);
    if (path == TilePath::wgmma_mn_b) run(product_wgmma<N, K, false, true>);
    if (path == TilePath::wgmma_mn_ab) run(product_wgmma<N, K, true, true>);
    const int sw_bytes = 2 * (64 + (N < 64 ? 64 : N)) * K * 2 + 1024;  // B's planes as product_sw128 lays them; 1 KB to align
    const auto run_sw128 = [&](auto kernel) {
      allow_smem(kernel, sw_bytes);
      kernel<<<1, 128, sw_bytes, s>>>(A, B, C);
    };
    if (path == TilePath::sw128) run_sw128(product_sw128<N, K, false, false>);
    if (path == TilePath::sw128_mn_b) run_sw128(product_sw128<N, K, false, true>);
    if (path == TilePath::sw128_mn_ab) run_sw128(product_sw128<N, K, true, true>);
  }
  BR_CUDA_LAUNCHED();
}

}  // namespace

std::vector<float> tile_split_product(TilePath path, int n, int k, const std::vector<float>& a,
                                      const std::vector<float>& b) {
  if ((n != 32 && n != 64 && n != 128) || (k != 64 && k != 128))
    fail("tile_split_product: n must be 32, 64 or 128 and k 64 or 128 (got n={} k={})", n, k);
  if (a.size() != static_cast<std::size_t>(64 * k) || b.size() != static_cast<std::size_t>(n * k))
    fail("tile_split_product: A must be 64×k and B n×k (got {} and {} values for n={} k={})", a.size(), b.size(), n, k);
  Stream stream;
  DeviceMemory mem(stream.get());
  Buffer<float> A(mem, a.size()), B(mem, b.size()), C(mem, static_cast<std::size_t>(64 * n));
  A.upload(std::span<const float>(a.data(), a.size()));
  B.upload(std::span<const float>(b.data(), b.size()));
  const auto s = stream.get();
  if (n == 32 && k == 64) run_product<32, 64>(path, A.data(), B.data(), C.data(), s);
  if (n == 32 && k == 128) run_product<32, 128>(path, A.data(), B.data(), C.data(), s);
  if (n == 64 && k == 64) run_product<64, 64>(path, A.data(), B.data(), C.data(), s);
  if (n == 64 && k == 128) run_product<64, 128>(path, A.data(), B.data(), C.data(), s);
  if (n == 128 && k == 64) run_product<128, 64>(path, A.data(), B.data(), C.data(), s);
  if (n == 128 && k == 128) run_product<128, 128>(path, A.data(), B.data(), C.data(), s);
  return C.download();
}

TileRate tile_split_product_rate(TilePath path, int blocks, int iters, int wg_n) {
  if (blocks < 1 || iters < 1) fail("tile_split_product_rate: blocks and iters must be positive (got {}, {})", blocks, iters);
  Stream stream;
  DeviceMemory mem(stream.get());
  Buffer<float> sums(mem, static_cast<std::size_t>(blocks));
  sums.zero();
  const int sync_bytes = 2 * (64 + 128) * 72 * 2, wg_bytes = 2 * (64 + 128) * 64 * 2;
  const bool sw128 = path == TilePath::sw128 || path == TilePath::sw128_mn_ab;
  if (path != TilePath::mma_sync && path != TilePath::wgmma && path != TilePath::wgmma_mn_ab && !sw128)
    fail("tile_split_product_rate: the rate is timed for mma_sync, wgmma, wgmma_mn_ab, sw128 and sw128_mn_ab only");
  if (sw128 && wg_n != 64) fail("tile_split_product_rate: the sw128 paths are timed at wg_n 64 only (got {})", wg_n);
  if (wg_n != 32 && wg_n != 64 && wg_n != -64)
    fail("tile_split_product_rate: wg_n must be 32, 64 or -64 (got {})", wg_n);
  if (wg_n == -64 && path != TilePath::wgmma) fail("tile_split_product_rate: two chains (wg_n -64) are K-major only");
  const auto wg_kernel = path == TilePath::sw128          ? rate_wgmma<Sw128Split, false, 64>
                         : path == TilePath::sw128_mn_ab ? rate_wgmma<Sw128Split, true, 64>
                         : wg_n == -64                   ? rate_wgmma_two_chains
                         : path == TilePath::wgmma_mn_ab
                             ? (wg_n == 64 ? rate_wgmma<CoreSplit, true, 64> : rate_wgmma<CoreSplit, true, 32>)
                             : (wg_n == 64 ? rate_wgmma<CoreSplit, false, 64> : rate_wgmma<CoreSplit, false, 32>);
  const int wg_smem = sw128 ? wg_bytes + 1024 : wg_bytes;
  allow_smem(rate_mma_sync, sync_bytes);
  allow_smem(wg_kernel, wg_smem);
  Event start, stop;
  start.record(stream.get());
  if (path == TilePath::mma_sync)
    rate_mma_sync<<<blocks, 256, sync_bytes, stream.get()>>>(iters, sums.data());
  else
    wg_kernel<<<blocks, 256, wg_smem, stream.get()>>>(iters, sums.data());
  BR_CUDA_LAUNCHED();
  stop.record(stream.get());
  TileRate out;
  out.seconds = stop.elapsed_ms_since(start) * 1e-3;
  out.sums = sums.download();
  return out;
}

int tile_device_sms() {
  int device = 0, sms = 0;
  BR_CUDA_CHECK(cudaGetDevice(&device));
  BR_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return sms;
}

}  // namespace bitrank::cuda
