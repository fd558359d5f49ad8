// Warp and block reductions shared by the CUDA kernels (fixed order, so a
// kernel's result does not depend on scheduling: resume stays bit-identical).
#pragma once

namespace bitrank::cuda {

// Sum over the warp; lane 0 holds the total.
__device__ inline double warp_sum(double v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  return v;
}

// Max over the warp; lane 0 holds it.
__device__ inline float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_down_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32) in a fixed order; every
// thread gets the total.
__device__ inline double block_sum(double v) {
  __shared__ double warp_totals[32];
  __shared__ double total;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_sum(v);
  if (lane == 0) warp_totals[warp] = v;
  __syncthreads();
  if (warp == 0) {
    double t = lane < warps ? warp_totals[lane] : 0.0;
    t = warp_sum(t);
    if (lane == 0) total = t;
  }
  __syncthreads();
  return total;
}

}  // namespace bitrank::cuda
