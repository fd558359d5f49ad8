// CUDA sign bitmaps (contract: include/bitrank/ops/bitmap.hpp).
//
// expand: one warp per tile of one bitmap word × 32 rows; the tile's 32
// words sit one per lane and move between lanes by shuffles, so the plane
// and its transpose are both written with coalesced stores. With row scales
// (the BLR layer's GEMM planes, cuda/gemm_kernels.hpp) row i holds
// ±f16(v_i·inv) instead of ±1.
// pack: one warp per (row, word) — a ballot of 32 sign tests is the word.
#include <cuda_fp16.h>

#include "cuda/gemm_kernels.hpp"
#include "cuda/ops.hpp"

namespace bitrank::cuda {
namespace {

constexpr unsigned short kPlus = 0x3c00;  // f16 +1 (−1: the sign bit flipped)
constexpr int kTilesPerBlock = 8;  // row tiles (one per warp) of one word column per expand block

// Block (32, 8), grid (words, row groups of 8 tiles): warp ty owns the tile
// of word blockIdx.x in rows i0 = 32·(8·blockIdx.y + ty) … i0 + 31. Lane tx
// loads the word (and the scaled value) of row i0 + tx; plane row i0 + j
// takes lane j's by a shuffle (lane tx writes rank k0 + tx), plane_t row
// k0 + j is bit j of each lane's own word (lane tx writes row i0 + tx):
// 64-byte coalesced stores, no shared memory. Either plane may be null.
__global__ void expand_kernel(const std::uint32_t* __restrict__ bits, index_t rows, index_t r, index_t words,
                              const float* __restrict__ rowscale, const float* __restrict__ inv,
                              unsigned short* __restrict__ plane, unsigned short* __restrict__ plane_t) {
  const int tx = threadIdx.x, ty = threadIdx.y;
  const index_t w = blockIdx.x, k0 = w * 32;
  const index_t i0 = (static_cast<index_t>(blockIdx.y) * kTilesPerBlock + ty) * 32;
  if (i0 >= rows) return;  // uniform over the warp
  const index_t i = i0 + tx, k = k0 + tx;
  const bool mine = i < rows;
  const std::uint32_t word = mine ? bits[i * words + w] : 0u;
  // +value of row i as f16 bits (its negation flips the sign bit)
  const unsigned short plus =
      rowscale ? (mine ? __half_as_ushort(__float2half_rn(__fmul_rn(rowscale[i], *inv))) : 0) : kPlus;
  for (int j = 0; j < 32; ++j) {
    const std::uint32_t row_word = __shfl_sync(0xffffffffu, word, j);  // row i0 + j
    const unsigned short row_plus = __shfl_sync(0xffffffffu, plus, j);
    if (plane && i0 + j < rows && k < r)
      plane[(i0 + j) * r + k] = (row_word >> tx) & 1u ? row_plus : static_cast<unsigned short>(row_plus ^ 0x8000u);
    if (plane_t && mine && k0 + j < r)
      plane_t[(k0 + j) * rows + i] = (word >> j) & 1u ? plus : static_cast<unsigned short>(plus ^ 0x8000u);
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
    launch_expand_signs(bits.data, bits.dim(0), r, bits.dim(1), nullptr, nullptr, reinterpret_cast<__half*>(plane.data),
                        reinterpret_cast<__half*>(plane_t.data), ctx_.stream.get());
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

void launch_expand_signs(const std::uint32_t* bits, index_t rows, index_t r, index_t words, const float* rowscale,
                         const float* inv, __half* plane, __half* plane_t, cudaStream_t stream) {
  if (rows == 0 || r == 0) return;
  const index_t row_tiles = (rows + 31) / 32;
  const dim3 grid(static_cast<unsigned>((r + 31) / 32),
                  static_cast<unsigned>((row_tiles + kTilesPerBlock - 1) / kTilesPerBlock));
  expand_kernel<<<grid, dim3(32, kTilesPerBlock), 0, stream>>>(bits, rows, r, words, rowscale, inv,
                                                                reinterpret_cast<unsigned short*>(plane),
                                                                reinterpret_cast<unsigned short*>(plane_t));
  BR_CUDA_LAUNCHED();
}

std::unique_ptr<BitmapOps<float>> make_bitmap_ops(Context& ctx) { return std::make_unique<CudaBitmapOps>(ctx); }

}  // namespace bitrank::cuda
