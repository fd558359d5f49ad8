// CUDA sign bitmaps (contract: include/bitrank/ops/bitmap.hpp).
//
// expand: one block per tile of one bitmap word × 256 rows, staged in shared
// memory; the plane and its transpose are both written 16 bytes per store,
// coalesced (the BLR layer expands its GEMM planes on every call, so this
// pass is on its critical path). With row scales
// (the BLR layer's GEMM planes, cuda/gemm_kernels.hpp) row i holds
// ±f16(v_i·inv) instead of ±1.
// pack: one warp per (row, word) — a ballot of 32 sign tests is the word.
#include <cuda_fp16.h>

#include "cuda/gemm_kernels.hpp"
#include "cuda/ops.hpp"

namespace bitrank::cuda {
namespace {

constexpr unsigned short kPlus = 0x3c00;  // f16 +1 (−1: the sign bit flipped)

// Block of kExpandRows threads, grid (words, row tiles of kExpandRows): the
// block stages its tile's words (one bitmap word, 32 ranks, of kExpandRows
// rows) and each row's +value (f16 bits; the negation flips the sign bit)
// in shared memory, then writes 8 halves (16 bytes) per store: plane rows
// as 4 stores of 8 ranks each, plane_t rows (one per rank) as 8 consecutive
// rows per store, 32 stores of one rank side by side per warp. `vec` says
// whether that plane's 16-byte stores are aligned (else element stores).
// Row i of the tile sits at slot i + i/8 of the shared arrays, so the
// transposed tasks — lane g reading row 8g + e — hit 32 distinct banks
// (9g mod 32), where slot i put eight lanes on each of four banks.
constexpr int kExpandRows = 256;
__device__ __forceinline__ int expand_slot(int row) { return row + row / 8; }

__device__ __forceinline__ void store_halves8(unsigned short* dst, const unsigned short (&h)[8], bool vec, int count) {
  if (vec && count == 8) {
    uint4 u;
    u.x = h[0] | (static_cast<unsigned>(h[1]) << 16);
    u.y = h[2] | (static_cast<unsigned>(h[3]) << 16);
    u.z = h[4] | (static_cast<unsigned>(h[5]) << 16);
    u.w = h[6] | (static_cast<unsigned>(h[7]) << 16);
    *reinterpret_cast<uint4*>(dst) = u;
  } else {
    for (int e = 0; e < count; ++e) dst[e] = h[e];
  }
}

__global__ void expand_kernel(const std::uint32_t* __restrict__ bits, index_t rows, index_t r, index_t words,
                              const float* __restrict__ rowscale, const float* __restrict__ inv,
                              unsigned short* __restrict__ plane, bool plane_vec, unsigned short* __restrict__ plane_t,
                              bool plane_t_vec) {
  __shared__ std::uint32_t word_s[kExpandRows + kExpandRows / 8];
  __shared__ std::uint32_t plus_s[kExpandRows + kExpandRows / 8];  // f16 bits, one per 32-bit slot
  const int tid = threadIdx.x;
  const index_t w = blockIdx.x, k0 = w * 32;
  const index_t i0 = static_cast<index_t>(blockIdx.y) * kExpandRows;
  const index_t i = i0 + tid;
  const bool mine = i < rows;
  word_s[expand_slot(tid)] = mine ? bits[i * words + w] : 0u;
  plus_s[expand_slot(tid)] =
      !mine ? 0u : rowscale ? __half_as_ushort(__float2half_rn(__fmul_rn(rowscale[i], *inv))) : kPlus;
  __syncthreads();
  const int tile_rows = static_cast<int>(rows - i0 < kExpandRows ? rows - i0 : kExpandRows);
  const int ranks = static_cast<int>(r - k0 < 32 ? r - k0 : 32);
  unsigned short h[8];
  if (plane) {  // task = (row, quarter of the word): ranks k0 + 8q … + 7 of that row
    for (int task = tid; task < tile_rows * 4; task += kExpandRows) {
      const int row = task / 4, q = task % 4;
      if (8 * q >= ranks) continue;
      const std::uint32_t word = word_s[expand_slot(row)];
      const auto plus = static_cast<unsigned short>(plus_s[expand_slot(row)]);
      for (int e = 0; e < 8; ++e) h[e] = (word >> (8 * q + e)) & 1u ? plus : static_cast<unsigned short>(plus ^ 0x8000u);
      store_halves8(plane + (i0 + row) * r + k0 + 8 * q, h, plane_vec, min(8, ranks - 8 * q));
    }
  }
  if (plane_t) {  // task = (rank, group of 8 rows): plane_t[k0 + k][i0 + 8g … + 7]
    constexpr int kGroups = kExpandRows / 8;
    for (int task = tid; task < ranks * kGroups; task += kExpandRows) {
      const int k = task / kGroups, g = task % kGroups;
      if (8 * g >= tile_rows) continue;
      for (int e = 0; e < 8; ++e) {
        const int slot = expand_slot(8 * g + e);
        const auto plus = static_cast<unsigned short>(plus_s[slot]);
        h[e] = (word_s[slot] >> k) & 1u ? plus : static_cast<unsigned short>(plus ^ 0x8000u);
      }
      store_halves8(plane_t + (k0 + k) * rows + i0 + 8 * g, h, plane_t_vec, min(8, tile_rows - 8 * g));
    }
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
  const auto aligned16 = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; };
  // 16-byte stores where every row of that plane starts 16-byte aligned.
  const bool plane_vec = plane && aligned16(plane) && r % 8 == 0;
  const bool plane_t_vec = plane_t && aligned16(plane_t) && rows % 8 == 0;
  const dim3 grid(static_cast<unsigned>((r + 31) / 32), static_cast<unsigned>((rows + kExpandRows - 1) / kExpandRows));
  expand_kernel<<<grid, kExpandRows, 0, stream>>>(bits, rows, r, words, rowscale, inv,
                                                  reinterpret_cast<unsigned short*>(plane), plane_vec,
                                                  reinterpret_cast<unsigned short*>(plane_t), plane_t_vec);
  BR_CUDA_LAUNCHED();
}

std::unique_ptr<BitmapOps<float>> make_bitmap_ops(Context& ctx) { return std::make_unique<CudaBitmapOps>(ctx); }

}  // namespace bitrank::cuda
