// CUDA RoPE: plain and fused with the q/k norm (contract:
// include/bitrank/ops/rope.hpp).
//
// plain (rope_forward / rope_backward): one thread per (row, head, slot),
// slot s < hd − half: s < half rotates the pair (s, s + half), s ≥ half
// copies column s + half (the dims past 2·half). Adjacent threads take
// adjacent columns of a head, so loads and stores are coalesced. The
// backward is the same kernel with sin negated (Rᵀ). The products are the
// CPU's f32 expressions with explicitly rounded operations (no FMA
// contraction), so the result equals the CPU's bit for bit.
// q/k norm forward: one warp per (row, head). Lane l owns the columns l,
// l + 32, …; the sum of squares is taken in f64 (lane partials, then an
// xor-shuffle tree) and inv = 1/√(Σ/hd + eps) is formed in f64 and rounded
// once. A rotated column reads its partner's x directly (the same row, so
// the second read hits L1). The elementwise products are the CPU's f32
// expressions: z = (x·inv)·w, y = z_i·cos − z_{i+half}·sin, ….
// q/k norm backward: the same warp layout, in a grid of kGainBlocks fixed row blocks
// (fewer when there are fewer rows), 8 warps per block taking the block's
// (row, head) units in turn. For hd ≤ 256 a lane holds its columns of x,
// g = Rᵀ·dy and the gain in registers (all loads of a unit in flight at
// once); larger hd loops over the columns twice. Σ g·w·x is an f64 warp
// sum; dx is written. Each warp adds g·x·inv to its own f64 column partial
// in shared memory (its lane's columns only); the block adds its 8 warp
// partials in warp order into partial[block][hd], and a second kernel adds
// the blocks — 32 lanes per column, each over every 32nd block in order,
// then the 32 lane sums in order — and accumulates dgain[c] = f32(dgain[c]
// + Σ). The blocking depends only on the shape, so dgain does not depend on
// scheduling (the same inputs give the same bits on every run).
#include <algorithm>

#include "cuda/ops.hpp"

namespace bitrank::cuda {
namespace {

constexpr int kWarps = 8;                // warps per block: one (row, head) unit each at a time
constexpr unsigned kThreads = kWarps * 32;
constexpr index_t kGainBlocks = 512;     // row blocks of the gain-gradient partials
constexpr index_t kMaxSharedBytes = 48 * 1024;

__device__ double warp_sum(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ float gain_at(const float* gain, index_t c, GainStyle style) {
  const float g = gain[c];
  return style == GainStyle::zero_centred ? __fadd_rn(1.0f, g) : g;
}

// z_c = (x_c·inv)·w_c, the normalised, scaled input.
__device__ float normed(const float* xr, const float* gain, index_t c, float inv, GainStyle style) {
  return __fmul_rn(__fmul_rn(xr[c], inv), gain_at(gain, c, style));
}

__global__ void qk_norm_rope_forward_kernel(const float* __restrict__ x, const float* __restrict__ gain,
                                            const float* __restrict__ table, index_t units, index_t heads,
                                            index_t hd, index_t window, index_t half, float eps, GainStyle style,
                                            float* __restrict__ y, float* __restrict__ inv_rms) {
  const index_t unit = static_cast<index_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (unit >= units) return;  // whole warps leave together
  const index_t row = unit / heads;
  const float* xr = x + unit * hd;
  float* yr = y + unit * hd;
  const float* rot = table + (row % window) * half * 2;
  double ss = 0.0;
  for (index_t c = lane; c < hd; c += 32) ss += static_cast<double>(xr[c]) * xr[c];
  ss = warp_sum(ss);
  const float inv = static_cast<float>(1.0 / sqrt(ss / static_cast<double>(hd) + static_cast<double>(eps)));
  for (index_t c = lane; c < hd; c += 32) {
    float out;
    if (c < half) {
      const float cs = rot[2 * c], sn = rot[2 * c + 1];
      out = __fsub_rn(__fmul_rn(normed(xr, gain, c, inv, style), cs),
                      __fmul_rn(normed(xr, gain, c + half, inv, style), sn));
    } else if (c < 2 * half) {
      const index_t i = c - half;
      const float cs = rot[2 * i], sn = rot[2 * i + 1];
      out = __fadd_rn(__fmul_rn(normed(xr, gain, i, inv, style), sn),
                      __fmul_rn(normed(xr, gain, c, inv, style), cs));
    } else {
      out = normed(xr, gain, c, inv, style);
    }
    yr[c] = out;
  }
  if (lane == 0) inv_rms[unit] = inv;
}

// g_c of Rᵀ·dy (the inverse rotation of the row's dy).
__device__ float unrotated(const float* dyr, const float* rot, index_t c, index_t half) {
  if (c < half) {
    const float cs = rot[2 * c], sn = rot[2 * c + 1];
    return __fadd_rn(__fmul_rn(dyr[c], cs), __fmul_rn(dyr[c + half], sn));
  }
  if (c < 2 * half) {
    const index_t i = c - half;
    const float cs = rot[2 * i], sn = rot[2 * i + 1];
    return __fadd_rn(__fmul_rn(-dyr[i], sn), __fmul_rn(dyr[c], cs));
  }
  return dyr[c];
}

// Block `blk` takes rows [blk·n/blocks, (blk+1)·n/blocks); writes dx of
// those rows and partial[blk][c] = Σ g_c·x_c·inv over them (f64).
// kPer > 0 (hd ≤ 32·kPer): a lane loads its kPer columns of x and g into
// registers at once (the loads of a unit all in flight together) and the
// gain once per block; kPer = 0: any hd, the columns in a loop, twice.
template <int kPer>
__global__ void qk_norm_rope_backward_kernel(const float* __restrict__ x, const float* __restrict__ gain,
                                             const float* __restrict__ table, const float* __restrict__ inv_rms,
                                             const float* __restrict__ dy, index_t n, index_t blocks, index_t heads,
                                             index_t hd, index_t window, index_t half, GainStyle style,
                                             float* __restrict__ dx, double* __restrict__ partial) {
  extern __shared__ double warp_partial[];  // [kWarps][hd]
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const index_t blk = blockIdx.x;
  const index_t r0 = blk * n / blocks, r1 = (blk + 1) * n / blocks;
  double* mine = warp_partial + warp * hd;
  for (index_t c = lane; c < hd; c += 32) mine[c] = 0.0;
  if constexpr (kPer > 0) {
    float wv[kPer];
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const index_t c = lane + 32 * i;
      wv[i] = c < hd ? gain_at(gain, c, style) : 0.0f;
    }
    for (index_t unit = r0 * heads + warp; unit < r1 * heads; unit += kWarps) {
      const index_t row = unit / heads;
      const float* xr = x + unit * hd;
      const float* dyr = dy + unit * hd;
      float* dxr = dx + unit * hd;
      const float* rot = table + (row % window) * half * 2;
      const float inv = inv_rms[unit];
      float xv[kPer], gv[kPer];
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
        const index_t c = lane + 32 * i;
        xv[i] = c < hd ? xr[c] : 0.0f;
        gv[i] = c < hd ? unrotated(dyr, rot, c, half) : 0.0f;
      }
      double gwx = 0.0;
#pragma unroll
      for (int i = 0; i < kPer; ++i)
        gwx += static_cast<double>(gv[i]) * static_cast<double>(wv[i]) * static_cast<double>(xv[i]);
      gwx = warp_sum(gwx);
      const double iv = inv;
      const float coef = static_cast<float>(gwx / static_cast<double>(hd) * iv * iv * iv);
#pragma unroll
      for (int i = 0; i < kPer; ++i) {
        const index_t c = lane + 32 * i;
        if (c < hd) {
          const float gw = __fmul_rn(gv[i], wv[i]);
          dxr[c] = __fsub_rn(__fmul_rn(inv, gw), __fmul_rn(xv[i], coef));
          mine[c] += static_cast<double>(gv[i]) * static_cast<double>(xv[i]) * iv;
        }
      }
    }
  } else {
  for (index_t unit = r0 * heads + warp; unit < r1 * heads; unit += kWarps) {
    const index_t row = unit / heads;
    const float* xr = x + unit * hd;
    const float* dyr = dy + unit * hd;
    float* dxr = dx + unit * hd;
    const float* rot = table + (row % window) * half * 2;
    const float inv = inv_rms[unit];
    double gwx = 0.0;
    for (index_t c = lane; c < hd; c += 32)
      gwx += static_cast<double>(unrotated(dyr, rot, c, half)) * static_cast<double>(gain_at(gain, c, style)) *
             static_cast<double>(xr[c]);
    gwx = warp_sum(gwx);
    const double iv = inv;
    const float coef = static_cast<float>(gwx / static_cast<double>(hd) * iv * iv * iv);
    for (index_t c = lane; c < hd; c += 32) {
      const float g = unrotated(dyr, rot, c, half);
      const float gw = __fmul_rn(g, gain_at(gain, c, style));
      dxr[c] = __fsub_rn(__fmul_rn(inv, gw), __fmul_rn(xr[c], coef));
      mine[c] += static_cast<double>(g) * static_cast<double>(xr[c]) * iv;
    }
  }
  }
  __syncthreads();
  for (index_t c = threadIdx.x; c < hd; c += blockDim.x) {
    double s = 0.0;
    for (int w = 0; w < kWarps; ++w) s += warp_partial[w * hd + c];
    partial[blk * hd + c] = s;
  }
}

constexpr unsigned kPlainThreads = 256;

// y = R(direction·angle)·x over units = n·heads heads of hd columns.
__global__ void rope_kernel(const float* __restrict__ x, const float* __restrict__ table, index_t units,
                            index_t heads, index_t hd, index_t window, index_t half, float direction,
                            float* __restrict__ y) {
  const index_t slots = hd - half;
  const index_t e = static_cast<index_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= units * slots) return;
  const index_t unit = e / slots, s = e - unit * slots;
  const float* xr = x + unit * hd;
  float* yr = y + unit * hd;
  if (s < half) {
    const float* rot = table + (((unit / heads) % window) * half + s) * 2;
    const float cs = rot[0], sn = direction * rot[1];  // ±1 · sin: exact
    const float a = xr[s], b = xr[s + half];
    yr[s] = __fsub_rn(__fmul_rn(a, cs), __fmul_rn(b, sn));
    yr[s + half] = __fadd_rn(__fmul_rn(a, sn), __fmul_rn(b, cs));
  } else {
    yr[s + half] = xr[s + half];
  }
}

constexpr int kFinishCols = 32, kFinishLanes = 32;

// dgain[c] = f32(dgain[c] + Σ_blk partial[blk][c]). Block (32 columns, 32
// lanes): lane l sums blocks l, l + 32, … in order, then lane 0 adds the 32
// lane sums in order.
__global__ void gain_grad_finish_kernel(const double* __restrict__ partial, index_t blocks, index_t hd,
                                        float* __restrict__ dgain) {
  __shared__ double lane_sum[kFinishLanes][kFinishCols];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const index_t c = static_cast<index_t>(blockIdx.x) * kFinishCols + tx;
  double s = 0.0;
  if (c < hd) {
#pragma unroll 8
    for (index_t b = ty; b < blocks; b += kFinishLanes) s += partial[b * hd + c];
  }
  lane_sum[ty][tx] = s;
  __syncthreads();
  if (ty == 0 && c < hd) {
    double total = 0.0;
    for (int l = 0; l < kFinishLanes; ++l) total += lane_sum[l][tx];
    dgain[c] = static_cast<float>(static_cast<double>(dgain[c]) + total);
  }
}

class CudaRopeOps final : public RopeOps<float> {
 public:
  explicit CudaRopeOps(Context& ctx) : ctx_(ctx) {}

 protected:
  void rope_forward_impl(CView<float> x, CView<float> table, index_t heads, View<float> y) override {
    rotate(x, table, heads, 1.0f, y);
  }
  void rope_backward_impl(CView<float> dy, CView<float> table, index_t heads, View<float> dx) override {
    rotate(dy, table, heads, -1.0f, dx);  // Rᵀ: the same angle, negated
  }

  void qk_norm_rope_forward_impl(CView<float> x, CView<float> gain, CView<float> table, const QkNormRopeOptions& opt,
                                 View<float> y, View<float> inv_rms) override {
    const index_t n = x.dim(0), hd = gain.dim(0), units = n * opt.heads;
    const index_t grid = (units + kWarps - 1) / kWarps;
    qk_norm_rope_forward_kernel<<<static_cast<unsigned>(grid), kThreads, 0, ctx_.stream.get()>>>(
        x.data, gain.data, table.data, units, opt.heads, hd, table.dim(0), table.dim(1), opt.eps, opt.gain,
        y.data, inv_rms.data);
    BR_CUDA_LAUNCHED();
  }

  void qk_norm_rope_backward_impl(CView<float> x, CView<float> gain, CView<float> table, CView<float> inv_rms,
                                  CView<float> dy, const QkNormRopeOptions& opt, View<float> dx,
                                  View<float> dgain) override {
    const index_t n = x.dim(0), hd = gain.dim(0);
    const index_t shared = kWarps * hd * static_cast<index_t>(sizeof(double));
    if (shared > kMaxSharedBytes)
      fail("qk_norm_rope_backward: head_dim {} exceeds the CUDA limit of {}", hd,
           kMaxSharedBytes / (kWarps * static_cast<index_t>(sizeof(double))));
    const index_t blocks = std::min(n, kGainBlocks);
    Buffer<double> partial(ctx_.memory, static_cast<std::size_t>(blocks * hd));
    const auto kernel = hd <= 64    ? qk_norm_rope_backward_kernel<2>
                        : hd <= 128 ? qk_norm_rope_backward_kernel<4>
                        : hd <= 256 ? qk_norm_rope_backward_kernel<8>
                                    : qk_norm_rope_backward_kernel<0>;
    kernel<<<static_cast<unsigned>(blocks), kThreads, static_cast<std::size_t>(shared), ctx_.stream.get()>>>(
        x.data, gain.data, table.data, inv_rms.data, dy.data, n, blocks, opt.heads, hd, table.dim(0), table.dim(1),
        opt.gain, dx.data, partial.data());
    BR_CUDA_LAUNCHED();
    gain_grad_finish_kernel<<<blocks_for(static_cast<std::size_t>(hd), kFinishCols), dim3(kFinishCols, kFinishLanes),
                              0, ctx_.stream.get()>>>(partial.data(), blocks, hd, dgain.data);
    BR_CUDA_LAUNCHED();
  }

 private:
  void rotate(CView<float> x, CView<float> table, index_t heads, float direction, View<float> y) {
    const index_t units = x.dim(0) * heads, hd = x.dim(1) / heads, half = table.dim(1);
    const std::size_t threads = static_cast<std::size_t>(units * (hd - half));
    rope_kernel<<<blocks_for(threads, kPlainThreads), kPlainThreads, 0, ctx_.stream.get()>>>(
        x.data, table.data, units, heads, hd, table.dim(0), half, direction, y.data);
    BR_CUDA_LAUNCHED();
  }

  Context& ctx_;
};

}  // namespace

std::unique_ptr<RopeOps<float>> make_rope_ops(Context& ctx) { return std::make_unique<CudaRopeOps>(ctx); }

}  // namespace bitrank::cuda
