// CUDA sign bitmaps (contract: include/bitrank/ops/bitmap.hpp).
//
// expand: one thread per (row, rank) element writes the plane coalesced;
// the transpose goes through a 32×32 shared tile so both writes coalesce.
// A tile covers one bitmap word of 32 rows, so with a cached copy of the
// bits (cuda/gemm_kernels.hpp) each tile alone decides whether its words
// changed, and only changed tiles are rewritten. A block takes 8 tiles of
// one word column and checks all their words with one load per thread.
// pack: one warp per (row, word) — a ballot of 32 sign tests is the word.
#include <cuda_fp16.h>

#include "cuda/gemm_kernels.hpp"
#include "cuda/ops.hpp"

namespace bitrank::cuda {
namespace {

constexpr unsigned short kPlus = 0x3c00, kMinus = 0xbc00;
constexpr int kTilesPerBlock = 8;  // row tiles of one word column per expand block

// Block (32, 8), grid (words, row groups): the block expands word blockIdx.x
// of the kTilesPerBlock row tiles (32 rows each) of row group blockIdx.y.
// With `cached`, warp ty first compares the words of tile ty (one load per
// thread, all in flight at once) and only changed tiles are expanded.
__global__ void expand_kernel(const std::uint32_t* __restrict__ bits, index_t rows, index_t r, index_t words,
                              unsigned short* __restrict__ plane, unsigned short* __restrict__ plane_t,
                              std::uint32_t* __restrict__ cached, bool force) {
  __shared__ unsigned short tile[32][33];
  __shared__ bool changed_tile[kTilesPerBlock];
  const index_t k0 = static_cast<index_t>(blockIdx.x) * 32;
  const index_t first = static_cast<index_t>(blockIdx.y) * kTilesPerBlock, row_tiles = (rows + 31) / 32;
  const int tx = threadIdx.x, ty = threadIdx.y;  // 32 × 8
  if (cached) {
    const index_t i = (first + ty) * 32 + tx, w = blockIdx.x;
    const bool mine = i < rows;
    const std::uint32_t word = mine ? bits[i * words + w] : 0u;
    const bool changed = mine && word != cached[i * words + w];
    const bool any = __any_sync(0xffffffffu, changed || force);
    if (tx == 0) changed_tile[ty] = any;
    if (changed) cached[i * words + w] = word;
    __syncthreads();
  }
  for (int q = 0; q < kTilesPerBlock && first + q < row_tiles; ++q) {
    if (cached && !changed_tile[q]) continue;  // uniform over the block
    const index_t i0 = (first + q) * 32;
    for (int j = ty; j < 32; j += 8) {
      const index_t i = i0 + j, k = k0 + tx;
      if (i < rows && k < r) {
        const bool bit = (bits[i * words + k / 32] >> (k % 32)) & 1u;
        const unsigned short v = bit ? kPlus : kMinus;
        plane[i * r + k] = v;
        tile[j][tx] = v;
      }
    }
    __syncthreads();
    for (int j = ty; j < 32; j += 8) {
      const index_t k = k0 + j, i = i0 + tx;
      if (i < rows && k < r) plane_t[k * rows + i] = tile[tx][j];
    }
    __syncthreads();  // the next tile reuses `tile`
  }
}

template <class T>
__global__ void pack_kernel(const T* __restrict__ signs, index_t rows, index_t r, index_t words,
                            std::uint32_t* __restrict__ bits) {
  const index_t warp = (static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (warp >= rows * words) return;
  const index_t i = warp / words, w = warp % words, k = w * 32 + lane;
  const bool plus = k < r && signs[i * r + k] >= 0;
  const unsigned word = __ballot_sync(0xffffffffu, plus);
  if (lane == 0) bits[warp] = word;
}

class CudaBitmapOps final : public BitmapOps<float> {
 public:
  explicit CudaBitmapOps(Context& ctx) : ctx_(ctx) {}

 protected:
  void expand_signs_impl(CView<std::uint32_t> bits, index_t r, View<f16> plane, View<f16> plane_t) override {
    launch_expand_signs(bits.data, bits.dim(0), r, bits.dim(1), reinterpret_cast<__half*>(plane.data),
                        reinterpret_cast<__half*>(plane_t.data), nullptr, true, ctx_.stream.get());
  }

  void pack_signs_impl(CView<float> signs, View<std::uint32_t> bits) override {
    const index_t rows = signs.dim(0), r = signs.dim(1), words = bits.dim(1);
    const std::size_t threads = static_cast<std::size_t>(rows * words) * 32;
    pack_kernel<<<blocks_for(threads, 256), 256, 0, ctx_.stream.get()>>>(signs.data, rows, r, words, bits.data);
    BR_CUDA_LAUNCHED();
  }

 private:
  Context& ctx_;
};

}  // namespace

void launch_expand_signs(const std::uint32_t* bits, index_t rows, index_t r, index_t words, __half* plane,
                         __half* plane_t, std::uint32_t* cached, bool force, cudaStream_t stream) {
  if (rows == 0 || r == 0) return;
  const index_t row_tiles = (rows + 31) / 32;
  const dim3 grid(static_cast<unsigned>((r + 31) / 32),
                  static_cast<unsigned>((row_tiles + kTilesPerBlock - 1) / kTilesPerBlock));
  expand_kernel<<<grid, dim3(32, 8), 0, stream>>>(bits, rows, r, words, reinterpret_cast<unsigned short*>(plane),
                                                  reinterpret_cast<unsigned short*>(plane_t), cached, force);
  BR_CUDA_LAUNCHED();
}

std::unique_ptr<BitmapOps<float>> make_bitmap_ops(Context& ctx) { return std::make_unique<CudaBitmapOps>(ctx); }

}  // namespace bitrank::cuda
