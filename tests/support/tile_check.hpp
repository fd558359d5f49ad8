// Host entry points that run the tensor-core tile primitives on their own
// (tile_mma.cuh's mma.sync products, tile_wgmma.cuh's warpgroup products), so
// that tests can hold each against the host and against each other, and
// time them side by side. Nothing in the trainer calls these: test code,
// built into bitrank_tests in CUDA builds only (not into bitrank_cuda).
#pragma once

#include <vector>

namespace bitrank::cuda {

// wgmma_mn_a / _b / _ab: wgmma with A, B or both stored MN-major in shared
// memory (M- or N-contiguous, read transposed by the instruction), in the
// core-matrix layout; sw128*: the same in the 128-byte-swizzle layout
// (tile_wgmma.cuh's Sw128Split), both K-major, B MN-major, or both MN-major.
enum class TilePath { mma_sync, wgmma, wgmma_mn_a, wgmma_mn_b, wgmma_mn_ab, sw128, sw128_mn_b, sw128_mn_ab };

// C (64×n, row-major) = A (64×k, row-major) · Bᵀ (B n×k, row-major), all f32
// on the host, computed on the GPU as one 3xBF16 tile product of `path`
// (operands split once into shared memory). n ∈ {32, 64, 128}, k ∈ {64, 128};
// the rate below is for mma_sync, wgmma, wgmma_mn_ab, sw128 and sw128_mn_ab.
std::vector<float> tile_split_product(TilePath path, int n, int k, const std::vector<float>& a,
                                      const std::vector<float>& b);

// `iters` products C += A·Bᵀ of 64×128×64 per block, each waited for before
// the next (as a kernel uses a product), on `blocks` blocks of 256 threads
// with the same operands (made in the kernel from the block index): the
// kernel's time (CUDA events) and each block's sum of its C, which the two
// paths must agree on.
struct TileRate {
  double seconds = 0;
  std::vector<float> sums;
};
// wg_n: the wgmma paths' product width, 64 (a warpgroup's 64×64 half at
// once) or 32 (as two 64×32 products, each waited for); −64: 64, K-major,
// with the cross terms in a second accumulator (two chains a product).
TileRate tile_split_product_rate(TilePath path, int blocks, int iters, int wg_n = 64);

// The device's multiprocessor count (for a grid of whole waves).
int tile_device_sms();

}  // namespace bitrank::cuda
