// Internal interface of the CUDA Gated DeltaNet core (contract:
// include/bitrank/ops/gdn.hpp): the geometry and tape pointers every kernel
// takes by value, the small math helpers, and the launchers of the two
// recurrence designs (gdn_rec1.cu, gdn_rec2.cu) and the chunkwise form
// (gdn_chunk.cu).
#pragma once

#include <cuda_runtime.h>

#include "bitrank/ops/gdn.hpp"

namespace bitrank::cuda::gdn {

// Largest head_dim the CUDA kernels take (every real model has 128).
constexpr int kMaxHeadDim = 128;
// Threads per block of the recurrence kernels, and steps of per-step inputs
// staged in shared memory at a time.
constexpr int kRecThreads = 256;
constexpr int kStage = 16;

// Sizes of one call; t = w·T + p (window w, position p).
struct Dims {
  index_t n;       // rows
  index_t nb;      // windows
  int T;           // window
  int hk, hv, group, d, K, C;
  int cs, nseg, slots;  // ckpt_every capped at the window (the same segments), segments, replay slots
  float l2_eps, norm_eps;
  __host__ __device__ int v_off() const { return 2 * hk * d; }
  __host__ __device__ index_t dd() const { return static_cast<index_t>(d) * d; }
};

// The tape's sections (gdn_tape_layout), split into their parts.
struct Tape {
  float *conv_out, *q_hat, *k_hat, *q_sumsq, *k_sumsq, *decay, *beta, *gate_in, *o_pre, *inv_rms;  // forward
  float *kv, *ckpt;                                                                                 // record
  float *replay, *dq_hat, *dk_hat;                                                                  // scratch
};

// Everything the recurrence kernels read and write.
struct RecArgs {
  Dims g;
  Tape tp;
  const float* a_log;  // [Hv]
  float* d_qkv;        // backward: dO in the v columns on entry, dv on exit
  float* d_a;
  float* d_b;
  bool record;         // forward: write kv and the checkpoints
};

__device__ __forceinline__ float sigmoidf_(float x) { return 1.0f / (1.0f + expf(-x)); }
__device__ __forceinline__ float siluf_(float x) { return x / (1.0f + expf(-x)); }
__device__ __forceinline__ float silu_gradf_(float x) {
  const float s = sigmoidf_(x);
  return s * (1.0f + x * (1.0f - s));
}

// Recurrence launchers (all on `stream`; they check their launches).
// Design 1: one block per (window, v-head), the state in shared memory.
void rec1_forward(const RecArgs& a, cudaStream_t stream);
void rec1_backward(const RecArgs& a, cudaStream_t stream);
// Design 2: the state's columns split over warps, the state in registers;
// a cluster of ceil(d/32) blocks per (window, v-head).
void rec2_forward(const RecArgs& a, cudaStream_t stream);
void rec2_backward(const RecArgs& a, cudaStream_t stream);

// Design 3: the chunkwise form (chunks of 64 tokens) on the tensor cores.
// Its per-chunk matrices: a forward part (W, U, S₀, T, and q̂, k̂ split
// once a k-head: what the backward reads) and a backward part. The forward
// part lives in the tape's record part when that is large enough
// (chunk_record_area in gdn.cu) — then a recording forward leaves it there
// and the backward reads it — and otherwise in the device pool, the
// backward recomputing it. The forward writes o_pre; the backward writes
// what rec2_backward writes.
struct ChunkWs {
  float *W, *U, *S, *T;                    // forward part: [chunk][Hv][64][128] (S [128][128], T [64][64];
                                           //   W and S stored split: the bf16 hi plane, then the lo plane)
  float* cb;                               //   and [chunk][Hv][2][64]: c, then β (prep's, for the later kernels)
  float *Ks, *Qs;                          //   and [chunk][Hk][64][128]: k̂, q̂ split as W is (prep's, zero padded)
  float *dU, *dW, *dK, *dh, *dc, *db;       // backward part
};
std::size_t chunk_forward_floats(const Dims& g);
std::size_t chunk_backward_floats(const Dims& g);
ChunkWs chunk_workspace(float* fwd, float* bwd, const Dims& g);  // bwd may be null (forward only)
void chunk_forward(const RecArgs& a, const ChunkWs& ws, cudaStream_t stream);
void chunk_backward(const RecArgs& a, const ChunkWs& ws, bool recompute, cudaStream_t stream);

}  // namespace bitrank::cuda::gdn
