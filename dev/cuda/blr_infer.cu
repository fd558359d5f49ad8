// Development versions of the CUDA decode kernel blr_infer (bit-reading BLR
// inference for a few tokens), in the style of llm.c's dev/cuda: several
// versions of one op in one standalone file, each validated against an f64
// CPU reference and then timed against cuBLAS's dense f16 product.
//
// Build and run (see dev/cuda/README.md):
//   nvcc -O3 -std=c++20 -arch=sm_90a -lineinfo dev/cuda/blr_infer.cu -lcublasLt -lcublas -o blr_infer_dev
//   ./blr_infer_dev          every version, every shape, T = 1 and 8
//   ./blr_infer_dev 3        version 3 only
//
// The op (contract and numerics: include/bitrank/ops/blr.hpp, "Numerics of
// blr_infer"), P ≤ 4 paths, T ≤ 16 tokens:
//   y[t][j] = Σ_p h_p[j] · Σ_k S_U,p[j][k] · ℓ_p[k] · Σ_i S_V,p[i][k] · g_p[i] · x[t][i]
// S_U [m][words], S_V [n][words], words = ceil(r/32), uint32; bit k%32 of
// word k/32 set = +1, clear = −1; bits past r are arbitrary. h [m], ℓ [r],
// g [n], x [T][n], y [T][m]: f32. Every version: f32 arithmetic, no fused
// multiply-add (__fadd_rn/__fmul_rn), every sum in an order fixed by the
// shape (bitwise identical run to run, no float atomics), no f16 rounding.
//
// ---------------------------------------------------------------------------
// Floor (written before any measurement; H100 SXM, 132 SMs)
//   bytes  P·((m+n)·r/8 + 4·(m+n+r)): 4096×4096 r=992 P=2 → 2.11 MB
//          → 0.70 µs at ~3 TB/s (11008×4096 r=1472: 5.69 MB → 1.9 µs).
//   issue  132 SMs × 4 schedulers × 1 warp-instr/cycle × ~1.75 GHz
//          = 0.92e12 warp-instr/s = 29.6e12 thread-instr/s.
//          signs per token: P·(m+n)·r = 16.25 M at 4096² r=992, so each
//          instruction per sign and token costs 0.55 µs at T=1, 4.4 µs at T=8.
//   launch a kernel launch ~2–3 µs back to back without a graph; a grid-wide
//          barrier ~1 µs; each dependent DRAM/L2 round trip ~0.5–1 µs.
//
// Instructions per sign (thread-level SASS, counted per sign and token t):
//   v1  rank: broadcast LDG per (i, lane) + bit extract (2) + LDS x + select
//       + FADD ≈ 6–7; row: bit index (b+li)&31, shift, and, LDS, select,
//       FADD ≈ 6–7. One dependent FADD chain per thread (latency-bound:
//       4 cycles per add), a serial chunk reduction by the last block, and
//       two launches. Measured 26.8 µs (T=1), 67.4 µs (T=8).
//   v2  XOR of the sign bit: per sign SHF + LOP3 (xor with the shifted,
//       masked bit) + FADD = 3 at T=1; at T=T the mask is built once
//       (SHF + LOP) and each token costs LOP3 + FADD: 2 + 2T.
//       rank phase: + the transpose reduction (31 SHFL + 31 FADD + 62 SEL
//       per 32 values, amortised over R rows: ~4/R per sign) + x⊙g per row
//       (≈ (2T+2)/KB per sign). row phase: + LDS.128 of c (0.25 per token).
//       ≈ 3.5 per sign at T=1 → 1.9 µs issue; ≈ 2.9 per sign-token at T=8
//       → 12.7 µs issue.
//   v3  subset sums: y = 2·Σ_{bit set} c − Σ c (and the same for a): per
//       sign one LOP3 that sets a predicate from the bit + one predicated
//       FADD per token: 1 + T. ≈ 2.6 per sign at T=1 → 1.4 µs issue;
//       ≈ 1.9 per sign-token at T=8 → 8.3 µs issue.
//
// Predictions at 4096×4096 r=992 P=2 (cuBLAS f16 dense: 11.8 µs T=1,
// 10.6 µs T=8):
//   v1  26.8 µs / 67.4 µs (measured before; 0.44× / 0.16×)
//   v2  ~6 µs (1.9 issue + launch + barrier + 2 dependent memory round trips)
//       → ~2× cuBLAS at T=1; ~16 µs at T=8 → ~0.65×.
//   v3  ~5.5 µs → ~2.1× at T=1; ~12 µs at T=8 → ~0.9×.
//
// SASS of the inner loops (cuobjdump -sass, nvcc 13.0, sm_90a), instructions
// per sign (T=1) or per sign and token (T=8):
//                 rank loop                     row loop
//   v1  T=1       118 / 16 signs   = 7.4        77 / 8 signs (L=32) = 9.6
//   v1  T=8       337 / 64         = 5.3        302 / 64            = 4.7
//   v2  T=1       942 / 256        = 3.7        109 / 32            = 3.4
//   v2  T=8       1656 / 512       = 3.2        650 / 256           = 2.5
//   v3  T=1       505 / 256        = 2.0        205 / 128           = 1.6
//   v3  T=8       1082 / 512       = 2.1        373 / 256           = 1.5
// (v2: the compiler emits one shift per sign, IMAD.SHL or SHF, as predicted;
// v3: ptxas turns the bit tests into R2P, 7 predicates an instruction, so the
// step is ~1 FADD per sign and token plus ~0.25.) Outside the loops, per
// rank unit: the transpose-reduction (T=1: 31 SHFL + 31 FADD + 62 SEL over
// R·32 signs, R = 4 at 4096² → ~1 per sign), the stores and the counter.
// With these counts: v2 ≈ 4.2 (T=1) and 3.2 (T=8) per sign(-token) → 2.3 µs
// and 14 µs of issue at 4096²; v3 ≈ 2.5 and 2.2 → 1.4 µs and 9.6 µs.

// Design of v2/v3 (one cooperative persistent kernel a call, no serial tail):
//   rank phase  units of (path, KB ranks of one word, chunk of 32·R inputs),
//               one warp a unit. Lane l owns inputs i = i0 + l + 32q
//               (q < R): it loads their S_V words (all R loads issued at
//               once), computes x'_i = g_i·x_i itself and walks the KB bits
//               with constant shifts into KB·T independent accumulators.
//               A butterfly transpose-reduction leaves lane l the chunk sums
//               of KB·T/32 (rank, token) pairs; they go to scratch. The last
//               warp of a (path, KB ranks) column to finish (a counter, reset
//               by that warp) adds the chunk sums in chunk order and stores
//               c = ℓ⊙a, zero past r. Many columns finish in parallel.
//   barrier     a grid-wide barrier (cooperative launch: every block is
//               resident). Each block loads the S_U words of its first row
//               group BEFORE the barrier, so their DRAM latency overlaps the
//               rank phase.
//   row phase   blocks of 8 warps take groups of 32 rows; lane l owns row
//               32g + l, warp q the words q, q+8, … of every path. c of all
//               paths and tokens sits in shared memory; all lanes of a warp
//               read the same c (one broadcast LDS.128 for 4 ranks).
//               NACC independent partial sums per (token) break the FADD
//               chain (T=1: 4, combined ((0+1)+(2+3))); the 8 warps' sums
//               are added in warp order through shared memory, paths in
//               order: y = Σ_p f32(h·s_p).
// Sum orders (fixed by the shape): a_k = Σ_chunks (tree over lanes of
// (Σ_q in order)); s_j = Σ_warps in order of ((Σ over the warp's words and
// bits, NACC-interleaved) tree over NACC).
//
// Design of v4/v5 (two plain kernels chained by programmatic dependent launch;
// no cooperative launch, no grid barrier, no counters, no partial sums in
// global memory). Written before any GPU run of them.
//   rank kernel  a thread-block cluster of 8 blocks per (path p, word group g
//                of 4 words = 128 ranks): block cr takes the inputs
//                [cr·nib, (cr+1)·nib), nib = ⌈n/8⌉ rounded up to 32; its 8
//                warps take nib/8 consecutive inputs each; lane l owns the 4
//                ranks 128g + 4l … 128g + 4l + 3 (bits 4·(l%8) … of word
//                4g + l/8). Before griddepcontrol.wait the block only stages
//                weights: its S_V words (cp.async into shared memory) and ℓ.
//                After it: x' = g⊙x into shared memory (read back as broadcast
//                LDS.128), the loop (4·T accumulators a lane, no cross-lane
//                reduction: a lane's ranks are its own), the 8 warps added in
//                order in shared memory, then cluster.sync and each block of
//                the cluster adds the 8 blocks' sums of 1/8 of the group's
//                (rank, token) values in block order through distributed
//                shared memory and stores c = ℓ⊙a (zero past r). Blocks:
//                8·P·⌈words/4⌉ = 16 (576², r 128), 128 (4096², r 992),
//                192 (11008×4096, r 1472; 2 a SM fit, so all resident).
//   row kernel   launched with programmatic stream serialization; the rank
//                kernel triggers at its start, so the row kernel's blocks
//                stage their S_U rows (32 consecutive rows = one contiguous
//                run of 32·words words, cp.async into rows of odd stride: no
//                bank conflicts) and h while the rank kernel runs; then
//                griddepcontrol.wait, c of every path and token into shared
//                memory (__ldcg: L2, never a stale L1 line), the v2/v3 row
//                loop (lane = row, warp q the words q, q+8, …, c by broadcast
//                LDS.128), the 8 warps added in order, paths in order.
//                It triggers at its start as well, so the next call's rank
//                kernel stages its weights while this one runs (what a chain
//                of layers would do: nothing before the wait depends on x).
//   v4           subset sums in both kernels: Σ± = 2·Σ_set − Σ_all, Σ_all of
//                x' per block (per-thread sums in order of input, a butterfly
//                over the warp, warps in order, blocks in cluster order) and
//                of c per (path, token) (per-lane sums in order, butterfly).
//                Accuracy caveat (as v3): when the summands share a sign
//                (x' with a large mean), 2·Σ_set and Σ_all are both large and
//                cancel, so the error grows by up to ~√n against a ± sum;
//                the harness's zero-mean x does not show it.
//   v5           the same kernels with the sign applied by XOR (as v2): no
//                cancellation, one more instruction per sign and token.
// Sum orders (fixed by the shape): a_k = Σ_blocks of cluster in order (Σ_warps
// in order (Σ_inputs of the warp in order)); s_j = Σ_warps in order of (the
// warp's words in order, bits in order, NACC-interleaved, tree over NACC).
//
// Budget (thread instructions per sign and token, the loops' SASS to be
// counted below):
//   rank, per input and lane: LDS word + SHF (the lane's 4 bits) + ~1 R2P/
//   LOP3 for the predicates + T/4·... LDS.128 of x' (T=1: 0.25, T=8: 2) +
//   4·T predicated FADD → T=1 ≈ 7.3/4 = 1.8; T=8 ≈ 37/32 = 1.16.
//   v5: + 4·T LOP3 (XOR) and 4 masks → T=1 ≈ 3.0, T=8 ≈ 2.2.
//   row, per word and lane (v3's loop): LDS word + ~5 R2P + 8·T LDS.128 +
//   32·T predicated FADD → T=1 ≈ 1.45, T=8 ≈ 1.3 (v5: ≈ 2.5 and 2.3).
// Issue at 4096² r 992 P 2 (8.1 M signs a phase and token; 528 warp-instr
// a cycle over 132 SMs at ~1.75 GHz; both kernels have 128 blocks of 8 warps):
//   T=1  rank 8.1 M × 1.8 / 32 / (128·4) / 1.75 GHz ≈ 0.5 µs; row 0.45 µs.
//   T=8  rank ≈ 2.6 µs, row ≈ 3.3 µs, c staged per row block
//        63.5 KB × 128 = 8.1 MB from L2 ≈ 1.2 µs.
// Latency chain per call (graph, back to back; prologues hidden by PDL):
//   wait release after the previous grid (~0.7 µs) + x from L2 (~0.6) +
//   loop + __syncthreads + cluster.sync + DSMEM loads (~0.4) + c store,
//   grid completion and release of the row kernel's wait (~1.0) + c from L2
//   (~0.6) + loop + reduction + y store (~0.3) ≈ 3.6 µs + the loops.
// Direct (no graph) calls need two cudaLaunchKernelEx a call on the host,
// ~2 µs each: ≈ 4–5 µs a call is a host floor there.
// Predictions (graph / direct):
//   576² r 128          T=1  3.6 / ~4.5 µs      T=8  ~4 / ~4.5 µs
//   4096² r 992         T=1  ~4.5 µs (≥ 2.5× cuBLAS's 11.9 direct)
//                       T=8  ~11 µs (3.6 chain + 2.6 rank + 3.3 row + 1.2 c)
//   11008×4096 r 1472   T=1  ~6.5 µs; T=8 ~27 µs (rank: 192 blocks, 2 on 60
//                       SMs ≈ 5.4 µs; row loop ≈ 14 µs of issue in 2.6 waves
//                       of 132; c staged 344 × 94 KB = 32 MB from L2 ≈ 4 µs)
//   v5: +0.5 µs at T=1, +4–6 µs at T=8 at 4096².
// SASS of the inner loops (cuobjdump -sass, nvcc 13, sm_90a; compiled, not
// yet run), instructions per sign (T=1) or per sign and token (T=8):
//                 rank loop                     row loop
//   v4  T=1       125 / 64 signs   = 1.95       203 / 128           = 1.59
//   v4  T=8       323 / 256        = 1.26       369 / 256           = 1.44
//   v5  T=1       62 / 16          = 3.9        109 / 32            = 3.4
//   v5  T=8       309 / 128        = 2.4        650 / 256           = 2.5
// (v4 rank: per input LDS word + SHF + R2P + 4·T predicated FADD + T/4
// LDS.128; v4 row: as v3.) ptxas: rank 32 registers (T=1), 63–64 (T=8);
// row 58–64; no spills. With these counts the issue terms above become
// 0.55 / 0.5 µs (T=1) and 2.8 / 3.6 µs (T=8) at 4096².
// Next steps if the measurement agrees: c multicast to a cluster of row blocks (TMA
// .multicast::cluster) to cut the 8–32 MB of c staging at T=8.
#include <cooperative_groups.h>
#include <cublas_v2.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#define CK(call)                                                                                             \
  do {                                                                                                       \
    const cudaError_t e_ = (call);                                                                           \
    if (e_ != cudaSuccess) {                                                                                 \
      std::fprintf(stderr, "CUDA error at %s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      std::exit(1);                                                                                          \
    }                                                                                                        \
  } while (0)

#define CKB(call)                                                                                  \
  do {                                                                                             \
    const cublasStatus_t s_ = (call);                                                              \
    if (s_ != CUBLAS_STATUS_SUCCESS) {                                                             \
      std::fprintf(stderr, "cuBLAS error at %s:%d: %s: %d\n", __FILE__, __LINE__, #call, int(s_)); \
      std::exit(1);                                                                                \
    }                                                                                              \
  } while (0)

[[noreturn]] static void fail(const std::string& msg) {
  std::fprintf(stderr, "FAIL: %s\n", msg.c_str());
  std::exit(1);
}

constexpr int kMaxPaths = 4;

struct PathPtrs {
  const std::uint32_t* su;  // S_U [m][words]
  const std::uint32_t* sv;  // S_V [n][words]
  const float *h, *l, *g;
};

// One problem on the device, and scratch that any version may use.
struct Problem {
  PathPtrs path[kMaxPaths];
  const float* x;  // [T][n]
  float* y;        // [T][m]
  int m, n, r, words, r32, paths, ntok;
  float* scratch;          // large enough for every version's partial sums and c
  std::size_t scratch_floats;
  std::uint32_t* counters;  // zero before the first call; every version leaves it zero
  std::size_t counter_words;
  int sms;
};

// ===========================================================================
// Version 1: the current library kernel (src/cuda/blr_infer.cu), made
// standalone. Two kernels: a rank pass (a warp a word of ranks, a broadcast
// load per input, per-chunk sums, the last block of a word group adds the
// chunks serially), then a row pass (L lanes a row, staggered bits).
// ===========================================================================
namespace v1 {

constexpr int kWordsPerBlock = 8;
constexpr int kRowThreads = 256;
constexpr int kMaxTokenGroup = 8;
constexpr std::size_t kRowSmemLimit = 96 << 10;

struct InferArgs {
  PathPtrs path[kMaxPaths];
  const float* x;
  float* y;
  float* partial;  // [P][chunks][ntok][r32]
  float* c;        // [P][ntok][r32]
  std::uint32_t* done;
  int m, n, r, words, r32, paths, ntok, chunk, chunks;
};

template <int NT>
__global__ void __launch_bounds__(32 * kWordsPerBlock) rank_pass_kernel(InferArgs a) {
  extern __shared__ float xg[];
  __shared__ bool last;
  const int p = blockIdx.z, ch = blockIdx.y;
  const PathPtrs pp = a.path[p];
  const int i0 = ch * a.chunk, ni = min(a.chunk, a.n - i0);
  for (int e = threadIdx.x; e < NT * a.chunk; e += blockDim.x) {
    const int t = e / a.chunk, i = e - t * a.chunk;
    xg[e] = t < a.ntok && i < ni ? __fmul_rn(a.x[static_cast<std::size_t>(t) * a.n + i0 + i], pp.g[i0 + i]) : 0.0f;
  }
  __syncthreads();
  const int lane = threadIdx.x & 31, w = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
  if (w < a.words) {
    float acc[NT];
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[t] = 0.0f;
    const std::uint32_t* col = pp.sv + static_cast<std::size_t>(i0) * a.words + w;
    for (int i = 0; i < ni; ++i) {
      const bool plus = (__ldg(col + static_cast<std::size_t>(i) * a.words) >> lane) & 1u;
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        const float v = xg[t * a.chunk + i];
        acc[t] = __fadd_rn(acc[t], plus ? v : -v);
      }
    }
    float* out = a.partial + static_cast<std::size_t>(p * a.chunks + ch) * a.ntok * a.r32 + w * 32 + lane;
#pragma unroll
    for (int t = 0; t < NT; ++t)
      if (t < a.ntok) out[static_cast<std::size_t>(t) * a.r32] = acc[t];
  }
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    std::uint32_t* done = a.done + p * gridDim.x + blockIdx.x;
    last = atomicAdd(done, 1u) == static_cast<unsigned>(a.chunks - 1);
    if (last) *done = 0;
  }
  __syncthreads();
  if (!last || w >= a.words) return;
  __threadfence();
  const int k = w * 32 + lane;
  const float l = k < a.r ? pp.l[k] : 0.0f;
  for (int t = 0; t < a.ntok; ++t) {
    float s = 0.0f;
    for (int c = 0; c < a.chunks; ++c)
      s = __fadd_rn(s, __ldcg(a.partial + (static_cast<std::size_t>(p * a.chunks + c) * a.ntok + t) * a.r32 + k));
    a.c[(static_cast<std::size_t>(p) * a.ntok + t) * a.r32 + k] = k < a.r ? __fmul_rn(l, s) : 0.0f;
  }
}

template <int TG, int L>
__global__ void __launch_bounds__(kRowThreads) row_pass_kernel(InferArgs a) {
  extern __shared__ float cs[];
  const int t0 = blockIdx.y * TG, nt = min(TG, a.ntok - t0);
  const int per_path = TG * a.r32;
  for (int e = threadIdx.x; e < a.paths * per_path; e += blockDim.x) {
    const int p = e / per_path, rest = e - p * per_path, t = rest / a.r32, k = rest - t * a.r32;
    cs[e] = t < nt ? a.c[(static_cast<std::size_t>(p) * a.ntok + t0 + t) * a.r32 + k] : 0.0f;
  }
  __syncthreads();
  constexpr int kRowsPerWarp = 32 / L;
  const int lane = threadIdx.x & 31, li = lane % L;
  const int warps = gridDim.x * (blockDim.x >> 5), warp = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
  for (int base = warp * kRowsPerWarp; base < a.m; base += warps * kRowsPerWarp) {
    const int j = base + lane / L;
    const bool valid = j < a.m;
    float y[TG];
#pragma unroll
    for (int t = 0; t < TG; ++t) y[t] = 0.0f;
    for (int p = 0; p < a.paths; ++p) {
      float s[TG];
#pragma unroll
      for (int t = 0; t < TG; ++t) s[t] = 0.0f;
      const std::uint32_t* row = a.path[p].su + static_cast<std::size_t>(valid ? j : 0) * a.words;
      const float* cp = cs + p * per_path;
      for (int w = li; w < a.words; w += L) {
        const std::uint32_t word = valid ? __ldg(row + w) : 0u;
        const float* cw = cp + w * 32;
#pragma unroll 8
        for (int b = 0; b < 32; ++b) {
          const int bit = (b + li) & 31;
          const bool plus = (word >> bit) & 1u;
#pragma unroll
          for (int t = 0; t < TG; ++t) {
            const float v = cw[t * a.r32 + bit];
            s[t] = __fadd_rn(s[t], plus ? v : -v);
          }
        }
      }
#pragma unroll
      for (int off = L / 2; off > 0; off >>= 1)
#pragma unroll
        for (int t = 0; t < TG; ++t) s[t] = __fadd_rn(s[t], __shfl_xor_sync(0xffffffffu, s[t], off));
      const float h = valid ? a.path[p].h[j] : 0.0f;
#pragma unroll
      for (int t = 0; t < TG; ++t) y[t] = __fadd_rn(y[t], __fmul_rn(h, s[t]));
    }
    if (valid && li == 0)
#pragma unroll
      for (int t = 0; t < TG; ++t)
        if (t < nt) a.y[static_cast<std::size_t>(t0 + t) * a.m + j] = y[t];
  }
}

int pow2_at_least(int v, int lo) {
  int p = lo;
  while (p < v) p <<= 1;
  return p;
}

std::size_t row_smem(int paths, int r32, int tg) {
  return static_cast<std::size_t>(paths) * tg * r32 * sizeof(float);
}

template <auto Kernel>
cudaError_t launch(dim3 grid, unsigned threads, std::size_t smem, cudaStream_t s, const InferArgs& a) {
  Kernel<<<grid, threads, smem, s>>>(a);
  return cudaGetLastError();
}

template <int TG>
cudaError_t launch_rows(int lanes, dim3 grid, std::size_t smem, cudaStream_t s, const InferArgs& a) {
  switch (lanes) {
    case 4: return launch<row_pass_kernel<TG, 4>>(grid, kRowThreads, smem, s, a);
    case 8: return launch<row_pass_kernel<TG, 8>>(grid, kRowThreads, smem, s, a);
    case 16: return launch<row_pass_kernel<TG, 16>>(grid, kRowThreads, smem, s, a);
    default: return launch<row_pass_kernel<TG, 32>>(grid, kRowThreads, smem, s, a);
  }
}

template <int TG>
void opt_in_rows() {
  for (auto k : {row_pass_kernel<TG, 4>, row_pass_kernel<TG, 8>, row_pass_kernel<TG, 16>, row_pass_kernel<TG, 32>})
    CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kRowSmemLimit)));
}

void setup() {
  opt_in_rows<1>();
  opt_in_rows<2>();
  opt_in_rows<4>();
  opt_in_rows<8>();
}

bool takes(const Problem& pr) { return row_smem(pr.paths, pr.r32, 1) <= kRowSmemLimit; }

cudaError_t run(const Problem& pr, cudaStream_t s) {
  InferArgs a{};
  for (int p = 0; p < kMaxPaths; ++p) a.path[p] = pr.path[p];
  a.x = pr.x;
  a.y = pr.y;
  a.m = pr.m, a.n = pr.n, a.r = pr.r, a.words = pr.words, a.r32 = pr.r32, a.paths = pr.paths, a.ntok = pr.ntok;
  a.chunk = std::clamp((a.n / 32 + 31) / 32 * 32, 32, 256);
  a.chunks = (a.n + a.chunk - 1) / a.chunk;
  const int warps = std::min(kWordsPerBlock, a.words);
  const dim3 rank_grid(static_cast<unsigned>((a.words + warps - 1) / warps), static_cast<unsigned>(a.chunks),
                       static_cast<unsigned>(a.paths));
  const std::size_t partial = static_cast<std::size_t>(a.paths) * a.chunks * a.ntok * a.r32;
  const std::size_t cn = static_cast<std::size_t>(a.paths) * a.ntok * a.r32;
  if (partial + cn > pr.scratch_floats || static_cast<std::size_t>(a.paths) * rank_grid.x + 2 > pr.counter_words)
    return cudaErrorInvalidValue;
  a.partial = pr.scratch;
  a.c = pr.scratch + partial;
  a.done = pr.counters + 2;  // words 0, 1: the grid barrier of versions 2+ (its generation is not reset)

  const int nt = pow2_at_least(a.ntok, 1);
  const std::size_t rank_smem = static_cast<std::size_t>(nt) * a.chunk * sizeof(float);
  const unsigned rank_threads = 32u * static_cast<unsigned>(warps);
  cudaError_t e;
  switch (nt) {
    case 1: e = launch<rank_pass_kernel<1>>(rank_grid, rank_threads, rank_smem, s, a); break;
    case 2: e = launch<rank_pass_kernel<2>>(rank_grid, rank_threads, rank_smem, s, a); break;
    case 4: e = launch<rank_pass_kernel<4>>(rank_grid, rank_threads, rank_smem, s, a); break;
    case 8: e = launch<rank_pass_kernel<8>>(rank_grid, rank_threads, rank_smem, s, a); break;
    default: e = launch<rank_pass_kernel<16>>(rank_grid, rank_threads, rank_smem, s, a); break;
  }
  if (e != cudaSuccess) return e;
  int tg = std::min(kMaxTokenGroup, pow2_at_least(a.ntok, 1));
  while (tg > 1 && row_smem(a.paths, a.r32, tg) > kRowSmemLimit) tg >>= 1;
  const int lanes = std::min(32, pow2_at_least(a.words, 4));
  const int rows_per_block = kRowThreads / lanes;
  const dim3 row_grid(static_cast<unsigned>(std::min((a.m + rows_per_block - 1) / rows_per_block, 2 * pr.sms)),
                      static_cast<unsigned>((a.ntok + tg - 1) / tg));
  const std::size_t smem = row_smem(a.paths, a.r32, tg);
  switch (tg) {
    case 1: return launch_rows<1>(lanes, row_grid, smem, s, a);
    case 2: return launch_rows<2>(lanes, row_grid, smem, s, a);
    case 4: return launch_rows<4>(lanes, row_grid, smem, s, a);
    default: return launch_rows<8>(lanes, row_grid, smem, s, a);
  }
}

}  // namespace v1

// ===========================================================================
// Versions 2 and 3: one cooperative persistent kernel a call (design in the
// header comment). kSubset = false is version 2 (sign applied by XOR of the
// float's sign bit), true is version 3 (subset sums and 2·S − total).
//
// v2 inner step per sign, bit b constant after unrolling:
//   m = (~word << (31 − b)) & 0x80000000   SHF + LOP3 (once per sign)
//   acc += as_float(as_uint(v) ^ m)         LOP3 + FADD (per token)
// v3 inner step per sign:
//   p = word & (1 << b)                     LOP3 → predicate (once per sign)
//   @p acc += v                             FADD (per token)
// ===========================================================================
namespace fused {

constexpr int kThreads = 256;  // 8 warps a block
constexpr int kWarps = kThreads / 32;
constexpr int kRmax = 16;  // inputs a lane takes in one rank unit (R ≤ kRmax, a multiple of kRows)
constexpr int kRows = 4;   // inputs a lane loads at once (the rank phase loads one group of kRows ahead)
constexpr int kWpw = 8;    // words of one row a warp takes per path in the row phase (r ≤ 32·8·kWpw = 2048)

struct Args {
  PathPtrs path[kMaxPaths];
  const float* x;
  float* y;
  float* partial;          // [P][chunks][T][r32]
  float* c;                // [P][T][r32], zero past r
  std::uint32_t* done;     // [P][slices]: chunks finished; back to 0 after each call
  std::uint32_t* barrier;  // [2]: arrivals, generation
  int m, n, r, words, r32, paths;
  int R, chunks, slices, units, row_groups;
};

// Ranks of one rank unit: KB·T accumulators a lane, a multiple of 32.
template <int T>
__host__ __device__ constexpr int ranks_per_unit() {
  return T >= 4 ? 8 : 32 / T;
}

// Accumulators of one row-phase sum: independent partial sums that break the FADD chain.
template <int T>
__host__ __device__ constexpr int row_accs() {
  return T >= 4 ? 1 : 4 / T;
}

__device__ __forceinline__ float flip(float v, std::uint32_t mask) {
  return __uint_as_float(__float_as_uint(v) ^ mask);
}

// acc += v if bit b of word is set: a predicate from one LOP3 and a predicated FADD.
__device__ __forceinline__ void add_if(float& acc, std::uint32_t word, std::uint32_t bit, float v) {
  asm("{\n\t.reg .pred p;\n\t.reg .b32 t;\n\tand.b32 t, %1, %2;\n\tsetp.ne.u32 p, t, 0;\n\t@p add.rn.f32 %0, %0, %3;\n\t}"
      : "+f"(acc)
      : "r"(word), "r"(bit), "f"(v));
}

// One stage of the butterfly transpose-reduction over 2·HALF values a lane:
// 1 SHFL + 1 FADD + 2 SEL per value kept.
template <int HALF>
__device__ __forceinline__ void transpose_stage(float* acc, int lane, int o) {
  const bool up = (lane & o) != 0;
#pragma unroll
  for (int e = 0; e < HALF; ++e) {
    const float send = up ? acc[e] : acc[e + HALF];
    const float keep = up ? acc[e + HALF] : acc[e];
    acc[e] = __fadd_rn(keep, __shfl_xor_sync(0xffffffffu, send, o));
  }
}

// Every block of the grid (all resident: cooperative launch) waits here.
__device__ __forceinline__ void grid_barrier(std::uint32_t* bar) {
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    volatile std::uint32_t* gen = bar + 1;
    const std::uint32_t g = *gen;
    __threadfence();
    if (atomicAdd(bar, 1u) == gridDim.x - 1) {
      bar[0] = 0;
      __threadfence();
      atomicAdd(bar + 1, 1u);
    } else {
      while (*gen == g) __nanosleep(32);
    }
    __threadfence();
  }
  __syncthreads();
}

// The raw inputs of kRows consecutive rows of a lane in a rank unit, loaded one group ahead.
template <int T>
struct RankRows {
  std::uint32_t word[kRows];
  float g[kRows], x[kRows][T];
};

template <int T>
__device__ __forceinline__ void load_rank_rows(RankRows<T>& d, const Args& a, const PathPtrs& pp, int i, int w, int b0) {
#pragma unroll
  for (int q = 0; q < kRows; ++q, i += 32) {
    const bool in = i < a.n;
    d.word[q] = in ? __ldg(pp.sv + static_cast<std::size_t>(i) * a.words + w) >> b0 : 0u;
    d.g[q] = in ? __ldg(pp.g + i) : 0.0f;
#pragma unroll
    for (int t = 0; t < T; ++t) d.x[q][t] = in ? __ldg(a.x + static_cast<std::size_t>(t) * a.n + i) : 0.0f;
  }
}

template <int T, bool kSubset>
__global__ void __launch_bounds__(kThreads) fused_kernel(Args a) {
  extern __shared__ float4 smem4[];
  float* smem = reinterpret_cast<float*>(smem4);
  constexpr int KB = ranks_per_unit<T>(), V = KB * T, VL = V / 32;
  static_assert(V % 32 == 0);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  float* cs = smem;                               // [P][T][r32]: c of every path and token
  float* red = cs + a.paths * T * a.r32;          // [warps][P][T][32]: each warp's row sums
  float* csum = red + kWarps * a.paths * T * 32;  // [warps][P][T]: Σ c over the warp's words (v3)
  std::uint32_t* wbuf = reinterpret_cast<std::uint32_t*>(csum + kWarps * a.paths * T);  // [warps][P·kWpw][32]

  // ---- rank phase: c = ℓ⊙a -------------------------------------------------
  for (int u = blockIdx.x * kWarps + warp; u < a.units; u += gridDim.x * kWarps) {
    const int slice = u % a.slices, rest = u / a.slices, ch = rest % a.chunks, p = rest / a.chunks;
    const PathPtrs pp = a.path[p];
    const int k0 = slice * KB, w = k0 >> 5, b0 = k0 & 31;
    const int i0 = ch * 32 * a.R + lane;
    float acc[V];
#pragma unroll
    for (int e = 0; e < V; ++e) acc[e] = 0.0f;
    float xs[T];
#pragma unroll
    for (int t = 0; t < T; ++t) xs[t] = 0.0f;
    // Rows in groups of kRows, the next group's loads in flight while one is
    // summed; two buffers used in turn (no register copies between groups).
    const auto sum_rows = [&](const RankRows<T>& d) {
#pragma unroll
      for (int q = 0; q < kRows; ++q) {
        float xv[T];
#pragma unroll
        for (int t = 0; t < T; ++t) xv[t] = __fmul_rn(d.x[q][t], d.g[q]);
        const std::uint32_t wd = d.word[q];
        if constexpr (kSubset) {
#pragma unroll
          for (int t = 0; t < T; ++t) xs[t] = __fadd_rn(xs[t], xv[t]);
#pragma unroll
          for (int b = 0; b < KB; ++b)
#pragma unroll
            for (int t = 0; t < T; ++t) add_if(acc[b * T + t], wd, 1u << b, xv[t]);
        } else {
          const std::uint32_t nwd = ~wd;
#pragma unroll
          for (int b = 0; b < KB; ++b) {
            const std::uint32_t mask = (nwd << (31 - b)) & 0x80000000u;
#pragma unroll
            for (int t = 0; t < T; ++t) acc[b * T + t] = __fadd_rn(acc[b * T + t], flip(xv[t], mask));
          }
        }
      }
    };
    RankRows<T> buf0, buf1;
    load_rank_rows<T>(buf0, a, pp, i0, w, b0);
    for (int q0 = 0; q0 < a.R; q0 += 2 * kRows) {  // R is a multiple of kRows
      const bool more = q0 + kRows < a.R;
      if (more) load_rank_rows<T>(buf1, a, pp, i0 + 32 * (q0 + kRows), w, b0);
      sum_rows(buf0);
      if (more) {
        if (q0 + 2 * kRows < a.R) load_rank_rows<T>(buf0, a, pp, i0 + 32 * (q0 + 2 * kRows), w, b0);
        sum_rows(buf1);
      }
    }
    // Transpose-reduction: after stage o, lane l keeps the half of the values
    // selected by bit o of l; at the end it holds values l·VL … l·VL + VL − 1.
    transpose_stage<V / 2>(acc, lane, 16);
    transpose_stage<V / 4>(acc, lane, 8);
    transpose_stage<V / 8>(acc, lane, 4);
    transpose_stage<V / 16>(acc, lane, 2);
    transpose_stage<V / 32>(acc, lane, 1);
    if constexpr (kSubset) {  // the chunk's Σ x', the same bits in every lane (symmetric butterfly)
#pragma unroll
      for (int o = 16; o > 0; o >>= 1)
#pragma unroll
        for (int t = 0; t < T; ++t) xs[t] = __fadd_rn(xs[t], __shfl_xor_sync(0xffffffffu, xs[t], o));
    }
#pragma unroll
    for (int j = 0; j < VL; ++j) {
      const int idx = lane * VL + j, b = idx / T, t = idx % T;
      float v = acc[j];
      if constexpr (kSubset) {
        float xt = 0.0f;
#pragma unroll
        for (int tt = 0; tt < T; ++tt)
          if (tt == t) xt = xs[tt];
        v = __fsub_rn(__fadd_rn(v, v), xt);  // Σ± = 2·Σ_set − Σ_all
      }
      a.partial[(static_cast<std::size_t>(p * a.chunks + ch) * T + t) * a.r32 + k0 + b] = v;
    }
    // The last warp of this (path, slice) adds the chunks in order.
    __threadfence();
    __syncwarp();
    std::uint32_t last = 0;
    if (lane == 0) last = atomicAdd(a.done + p * a.slices + slice, 1u) == static_cast<unsigned>(a.chunks - 1);
    last = __shfl_sync(0xffffffffu, last, 0);
    if (last) {
      if (lane == 0) a.done[p * a.slices + slice] = 0;
      __threadfence();
#pragma unroll
      for (int j = 0; j < VL; ++j) {
        const int idx = lane * VL + j, b = idx / T, t = idx % T, k = k0 + b;
        const float* src = a.partial + static_cast<std::size_t>(p * a.chunks) * T * a.r32 + t * a.r32 + k;
        float s = 0.0f;
        for (int c = 0; c < a.chunks; ++c) s = __fadd_rn(s, __ldcg(src + static_cast<std::size_t>(c) * T * a.r32));
        a.c[(static_cast<std::size_t>(p) * T + t) * a.r32 + k] = k < a.r ? __fmul_rn(__ldg(pp.l + k), s) : 0.0f;
      }
    }
  }

  // The S_U words a warp reads for row group g, staged in shared memory
  // (lane l: row 32g + l; entry p·kWpw + e: word warp + 8e of path p).
  std::uint32_t* wb = wbuf + warp * a.paths * kWpw * 32 + lane;
  const auto stage_words = [&](int g) {
    const int j = g * 32 + lane;
    const bool in = j < a.m;
    std::uint32_t v[kMaxPaths * kWpw];
#pragma unroll
    for (int it = 0; it < kMaxPaths * kWpw; ++it) {
      const int p = it / kWpw, w = warp + (it % kWpw) * kWarps;
      v[it] = p < a.paths && in && w < a.words ? __ldg(a.path[p].su + static_cast<std::size_t>(j) * a.words + w) : 0u;
    }
#pragma unroll
    for (int it = 0; it < kMaxPaths * kWpw; ++it)
      if (it / kWpw < a.paths) wb[it * 32] = v[it];
    __syncwarp();
  };
  // The first row group's words are loaded before the barrier: their latency overlaps the rank phase.
  if (blockIdx.x < a.row_groups) stage_words(blockIdx.x);

  grid_barrier(a.barrier);
  if (blockIdx.x >= a.row_groups) return;

  // ---- row phase: y = Σ_p h ⊙ (S_U c) ------------------------------------------
  for (int e = threadIdx.x; e < a.paths * T * a.r32; e += kThreads) cs[e] = __ldcg(a.c + e);
  __syncthreads();
  if constexpr (kSubset) {
    for (int pt = 0; pt < a.paths * T; ++pt) {
      float s = 0.0f;
      for (int w = warp; w < a.words; w += kWarps) s = __fadd_rn(s, cs[pt * a.r32 + w * 32 + lane]);
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) s = __fadd_rn(s, __shfl_xor_sync(0xffffffffu, s, o));
      if (lane == 0) csum[warp * a.paths * T + pt] = s;
    }
    __syncwarp();
  }
  constexpr int NACC = row_accs<T>();
  const int nw = (a.words - warp + kWarps - 1) / kWarps;  // words of a row this warp takes per path
  for (int g = blockIdx.x; g < a.row_groups; g += gridDim.x) {
    if (g != static_cast<int>(blockIdx.x)) stage_words(g);
    for (int p = 0; p < a.paths; ++p) {
      float acc[T][NACC];
#pragma unroll
      for (int t = 0; t < T; ++t)
#pragma unroll
        for (int e = 0; e < NACC; ++e) acc[t][e] = 0.0f;
      for (int e = 0; e < nw; ++e) {
        const int w = warp + e * kWarps;
        const std::uint32_t wd = wb[(p * kWpw + e) * 32], nwd = ~wd;
        const float4* cw = reinterpret_cast<const float4*>(cs + p * T * a.r32 + w * 32);
#pragma unroll
        for (int bq = 0; bq < 8; ++bq) {
#pragma unroll
          for (int t = 0; t < T; ++t) {
            const float4 v4 = cw[t * (a.r32 / 4) + bq];
            const float v[4] = {v4.x, v4.y, v4.z, v4.w};
#pragma unroll
            for (int e4 = 0; e4 < 4; ++e4) {
              const int b = bq * 4 + e4;
              if constexpr (kSubset)
                add_if(acc[t][b % NACC], wd, 1u << b, v[e4]);
              else
                acc[t][b % NACC] = __fadd_rn(acc[t][b % NACC], flip(v[e4], (nwd << (31 - b)) & 0x80000000u));
            }
          }
        }
      }
#pragma unroll
      for (int t = 0; t < T; ++t) {
        float s;
        if constexpr (NACC == 4)
          s = __fadd_rn(__fadd_rn(acc[t][0], acc[t][1]), __fadd_rn(acc[t][2], acc[t][3]));
        else if constexpr (NACC == 2)
          s = __fadd_rn(acc[t][0], acc[t][1]);
        else
          s = acc[t][0];
        if constexpr (kSubset) s = __fsub_rn(__fadd_rn(s, s), csum[(warp * a.paths + p) * T + t]);
        red[((warp * a.paths + p) * T + t) * 32 + lane] = s;
      }
    }
    __syncthreads();
    for (int e = threadIdx.x; e < T * 32; e += kThreads) {
      const int t = e >> 5, l = e & 31, j = g * 32 + l;
      if (j < a.m) {
        float y = 0.0f;
        for (int p = 0; p < a.paths; ++p) {
          float s = 0.0f;
#pragma unroll
          for (int q = 0; q < kWarps; ++q) s = __fadd_rn(s, red[((q * a.paths + p) * T + t) * 32 + l]);
          y = __fadd_rn(y, __fmul_rn(__ldg(a.path[p].h + j), s));
        }
        a.y[static_cast<std::size_t>(t) * a.m + j] = y;
      }
    }
    __syncthreads();
  }
}

template <int T, bool kSubset>
struct Launcher {
  static std::size_t smem(int paths, int r32) {
    return (static_cast<std::size_t>(paths) * T * r32 + static_cast<std::size_t>(kWarps) * paths * T * 32 +
            static_cast<std::size_t>(kWarps) * paths * T + static_cast<std::size_t>(kWarps) * paths * kWpw * 32) *
           sizeof(float);
  }
  static constexpr std::size_t kSmemMax = 200 << 10;
  static int blocks_per_sm(std::size_t bytes) {
    static int cached_bytes = -1, cached = 0;
    if (static_cast<int>(bytes) != cached_bytes) {
      CK(cudaFuncSetAttribute(fused_kernel<T, kSubset>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                              static_cast<int>(kSmemMax)));
      CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&cached, fused_kernel<T, kSubset>, kThreads, bytes));
      cached_bytes = static_cast<int>(bytes);
    }
    return cached;
  }
  static cudaError_t run(const Problem& pr, cudaStream_t s) {
    if (pr.r32 > 32 * kWarps * kWpw) return cudaErrorInvalidValue;
    const std::size_t bytes = smem(pr.paths, pr.r32);
    if (bytes > kSmemMax) return cudaErrorInvalidValue;
    const int nb = blocks_per_sm(bytes);
    if (nb < 1) return cudaErrorInvalidConfiguration;
    Args a{};
    for (int p = 0; p < kMaxPaths; ++p) a.path[p] = pr.path[p];
    a.x = pr.x;
    a.y = pr.y;
    a.m = pr.m, a.n = pr.n, a.r = pr.r, a.words = pr.words, a.r32 = pr.r32, a.paths = pr.paths;
    constexpr int KB = ranks_per_unit<T>();
    a.slices = pr.r32 / KB;
    const int max_blocks = nb * pr.sms, target_warps = max_blocks * kWarps;
    const long column_blocks = static_cast<long>(pr.paths) * a.slices * ((pr.n + 31) / 32);
    const long rows = (column_blocks + target_warps - 1) / target_warps;
    a.R = static_cast<int>(std::clamp<long>((rows + kRows - 1) / kRows * kRows, kRows, kRmax));
    a.chunks = (pr.n + 32 * a.R - 1) / (32 * a.R);
    a.units = pr.paths * a.slices * a.chunks;
    a.row_groups = (pr.m + 31) / 32;
    const int grid = std::max(1, std::min(max_blocks, std::max((a.units + kWarps - 1) / kWarps, a.row_groups)));
    const std::size_t partial = static_cast<std::size_t>(pr.paths) * a.chunks * T * pr.r32;
    const std::size_t cn = static_cast<std::size_t>(pr.paths) * T * pr.r32;
    if (partial + cn > pr.scratch_floats || static_cast<std::size_t>(pr.paths * a.slices) + 2 > pr.counter_words)
      return cudaErrorInvalidValue;
    a.partial = pr.scratch;
    a.c = pr.scratch + partial;
    a.barrier = pr.counters;
    a.done = pr.counters + 2;

    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(static_cast<unsigned>(grid));
    cfg.blockDim = dim3(kThreads);
    cfg.dynamicSmemBytes = bytes;
    cfg.stream = s;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeCooperative;
    attr[0].val.cooperative = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    return cudaLaunchKernelEx(&cfg, fused_kernel<T, kSubset>, a);
  }
};

template <bool kSubset>
cudaError_t run(const Problem& pr, cudaStream_t s) {
  switch (pr.ntok) {
    case 1: return Launcher<1, kSubset>::run(pr, s);
    case 8: return Launcher<8, kSubset>::run(pr, s);
    default: return cudaErrorInvalidValue;  // only T ∈ {1, 8} instantiated in this file
  }
}

}  // namespace fused

// ===========================================================================
// Versions 4 and 5: two plain kernels chained by programmatic dependent
// launch (design, budget and predictions in the header comment). kSubset =
// true is version 4 (predicated subset sums, Σ± = 2·Σ_set − Σ_all), false is
// version 5 (the same kernels with the sign applied by XOR, no Σ_all).
// ===========================================================================
namespace split {

namespace cg = cooperative_groups;

constexpr int kThreads = 256;  // 8 warps a block, both kernels
constexpr int kWarps = kThreads / 32;
constexpr int kCluster = 8;                // rank blocks of one cluster: they split the inputs of one word group
constexpr int kBits = 4;                   // ranks a lane owns in the rank kernel (4 bits of one word)
constexpr int kGroupWords = 32 * kBits / 32;  // words of one rank cluster (4: 128 ranks)
constexpr int kGroupRanks = 32 * kBits;
constexpr int kRows = 32;  // rows of one row block (lane l: row 32·block + l)
constexpr std::size_t kSmemMax = 200 << 10;

struct Args {
  PathPtrs path[kMaxPaths];
  const float* x;
  float* y;
  float* c;  // [P][T][r32], zero past r
  int m, n, r, words, r32, paths;
  int groups;  // word groups of kGroupWords words
  int nib;     // inputs of one rank block (a multiple of 4·kWarps)
  int stride;  // words of a row of staged S_U in shared memory (odd: no bank conflicts)
};

// Programmatic dependent launch (PTX griddepcontrol, sm_90): launch_dependents lets
// the next kernel of the stream start its prologue now; wait blocks until every
// prerequisite grid has completed and its memory is visible.
__device__ __forceinline__ void pdl_trigger() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }
__device__ __forceinline__ void pdl_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

__device__ __forceinline__ void cp_async4(void* dst, const void* src) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(d), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }

__device__ __forceinline__ float flip(float v, std::uint32_t mask) {
  return __uint_as_float(__float_as_uint(v) ^ mask);
}

// acc += v if bit b of word is set: a predicate from one LOP3 and a predicated FADD.
__device__ __forceinline__ void add_if(float& acc, std::uint32_t word, std::uint32_t bit, float v) {
  asm("{\n\t.reg .pred p;\n\t.reg .b32 t;\n\tand.b32 t, %1, %2;\n\tsetp.ne.u32 p, t, 0;\n\t@p add.rn.f32 %0, %0, %3;\n\t}"
      : "+f"(acc)
      : "r"(word), "r"(bit), "f"(v));
}

// acc ±= v by bit b of word (the word already shifted so that the lane's bits start at 0).
template <bool kSubset>
__device__ __forceinline__ void step(float& acc, std::uint32_t word, int b, float v) {
  if constexpr (kSubset)
    add_if(acc, word, 1u << b, v);
  else
    acc = __fadd_rn(acc, flip(v, (~word << (31 - b)) & 0x80000000u));
}

// Shared memory of a rank block, in floats (every block of a launch has the same layout,
// so that cluster peers find bsum and btot at the same offsets).
template <int T>
struct RankSmem {
  int sw, xs, red, bsum, btot, wtot, total;
  __host__ __device__ explicit RankSmem(int nib) {
    sw = 0;                                  // uint32 [nib][kGroupWords]: S_V words of the block's inputs
    xs = sw + nib * kGroupWords;             // [nib][T]: x' = x·g
    red = xs + nib * T;                      // [kWarps][T][kGroupRanks]: each warp's sums
    bsum = red + kWarps * T * kGroupRanks;   // [T][kGroupRanks]: the block's sums (read by the cluster)
    btot = bsum + T * kGroupRanks;           // [T] (v4): Σ x' over the block's inputs
    wtot = btot + 4 * ((T + 3) / 4);         // [kWarps][T] (v4): Σ x' per warp
    total = wtot + kWarps * T;
  }
};

// ---- rank kernel: c = ℓ⊙(S_V^T (g⊙x)) -------------------------------------------
// Cluster u = (path p, word group g) of kCluster blocks; block cr of it takes the
// inputs [cr·nib, (cr+1)·nib), warp q of the block nib/kWarps of those, lane
// (wl = l/8, sub = l%8) the 4 ranks 32·(4g + wl) + 4·sub + b, b < 4.
template <int T, bool kSubset>
__global__ void __launch_bounds__(kThreads) rank_kernel(Args a) {
  extern __shared__ float4 smem4[];
  float* smem = reinterpret_cast<float*>(smem4);
  pdl_trigger();  // the row kernel may start staging its S_U rows now
  cg::cluster_group cluster = cg::this_cluster();
  const int cr = static_cast<int>(cluster.block_rank());
  const int unit = static_cast<int>(blockIdx.x) / kCluster, g = unit % a.groups, p = unit / a.groups;
  const PathPtrs pp = a.path[p];
  const RankSmem<T> L(a.nib);
  std::uint32_t* sw = reinterpret_cast<std::uint32_t*>(smem + L.sw);
  float* xs = smem + L.xs;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int ib = cr * a.nib;

  // Before the wait: the weights only (S_V words into shared memory, ℓ of this block's outputs).
  for (int e = tid; e < a.nib * kGroupWords; e += kThreads) {
    const int i = ib + e / kGroupWords, w = g * kGroupWords + e % kGroupWords;
    if (i < a.n && w < a.words)
      cp_async4(sw + e, pp.sv + static_cast<std::size_t>(i) * a.words + w);
    else
      sw[e] = 0u;
  }
  constexpr int kPer = T * kGroupRanks / kCluster;  // outputs (rank, token) this block finishes
  static_assert(kPer <= kThreads);
  const int v_out = cr * kPer + tid, k_out = g * kGroupRanks + v_out % kGroupRanks;
  const float l_out = tid < kPer && k_out < a.r ? __ldg(pp.l + k_out) : 0.0f;

  pdl_wait();  // x may be the previous kernel's output
  float tot[T];
#pragma unroll
  for (int t = 0; t < T; ++t) tot[t] = 0.0f;
  for (int il = tid; il < a.nib; il += kThreads) {
    const int i = ib + il;
    const float gi = i < a.n ? __ldg(pp.g + i) : 0.0f;
#pragma unroll
    for (int t = 0; t < T; ++t) {
      const float xp = i < a.n ? __fmul_rn(__ldcg(a.x + static_cast<std::size_t>(t) * a.n + i), gi) : 0.0f;
      xs[il * T + t] = xp;
      tot[t] = __fadd_rn(tot[t], xp);
    }
  }
  if constexpr (kSubset) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
#pragma unroll
      for (int t = 0; t < T; ++t) tot[t] = __fadd_rn(tot[t], __shfl_xor_sync(0xffffffffu, tot[t], o));
    if (lane < T) {
      float v = 0.0f;
#pragma unroll
      for (int t = 0; t < T; ++t)
        if (t == lane) v = tot[t];
      smem[L.wtot + warp * T + lane] = v;
    }
  }
  cp_async_wait_all();
  __syncthreads();

  // Main loop: warp `warp` takes inputs [warp·ipw, (warp+1)·ipw) of the block, 4 at a time.
  const int ipw = a.nib / kWarps, wl = lane >> 3, sub = lane & 7;
  const std::uint32_t* myw = sw + warp * ipw * kGroupWords + wl;
  const float* myx = xs + warp * ipw * T;
  float acc[kBits][T];
#pragma unroll
  for (int b = 0; b < kBits; ++b)
#pragma unroll
    for (int t = 0; t < T; ++t) acc[b][t] = 0.0f;
  for (int il = 0; il < ipw; il += 4) {
    float xv[4 * T];  // inputs il..il+3, tokens in order: one LDS.128 (broadcast) per 4 values
    const float4* x4 = reinterpret_cast<const float4*>(myx + il * T);
#pragma unroll
    for (int e = 0; e < T; ++e) {
      const float4 v = x4[e];
      xv[4 * e] = v.x, xv[4 * e + 1] = v.y, xv[4 * e + 2] = v.z, xv[4 * e + 3] = v.w;
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const std::uint32_t wd = myw[(il + u) * kGroupWords] >> (4 * sub);
#pragma unroll
      for (int b = 0; b < kBits; ++b)
#pragma unroll
        for (int t = 0; t < T; ++t) step<kSubset>(acc[b][t], wd, b, xv[u * T + t]);
    }
  }
  float* red = smem + L.red;
#pragma unroll
  for (int b = 0; b < kBits; ++b)
#pragma unroll
    for (int t = 0; t < T; ++t) red[(warp * T + t) * kGroupRanks + lane * kBits + b] = acc[b][t];
  __syncthreads();
  // The block's sums: warps added in order.
  for (int v = tid; v < T * kGroupRanks; v += kThreads) {
    float s = red[v];
#pragma unroll
    for (int q = 1; q < kWarps; ++q) s = __fadd_rn(s, red[q * T * kGroupRanks + v]);
    smem[L.bsum + v] = s;
  }
  if constexpr (kSubset) {
    if (tid < T) {
      float s = smem[L.wtot + tid];
#pragma unroll
      for (int q = 1; q < kWarps; ++q) s = __fadd_rn(s, smem[L.wtot + q * T + tid]);
      smem[L.btot + tid] = s;
    }
  }
  cluster.sync();
  // The cluster's sums: blocks added in order (distributed shared memory); this block
  // finishes kPer of the group's T·128 (rank, token) values.
  if (tid < kPer) {
    const int t = v_out / kGroupRanks;
    float part[kCluster], ptot[kCluster];
#pragma unroll
    for (int b = 0; b < kCluster; ++b) {
      const float* peer = cluster.map_shared_rank(smem, b);
      part[b] = peer[L.bsum + v_out];
      ptot[b] = kSubset ? peer[L.btot + t] : 0.0f;
    }
    float s = part[0], st = ptot[0];
#pragma unroll
    for (int b = 1; b < kCluster; ++b) {
      s = __fadd_rn(s, part[b]);
      if constexpr (kSubset) st = __fadd_rn(st, ptot[b]);
    }
    if constexpr (kSubset) s = __fsub_rn(__fadd_rn(s, s), st);  // Σ± = 2·Σ_set − Σ_all
    if (k_out < a.r32) a.c[(static_cast<std::size_t>(p) * T + t) * a.r32 + k_out] = k_out < a.r ? __fmul_rn(l_out, s) : 0.0f;
  }
  cluster.sync();  // peers read this block's shared memory until here
}

// Shared memory of a row block, in floats.
template <int T>
struct RowSmem {
  int cs, su, red, csum, total;
  __host__ __device__ RowSmem(int paths, int r32, int stride) {
    cs = 0;                                  // [P][T][r32]: c
    su = cs + paths * T * r32;               // uint32 [P][kRows][stride]: the block's S_U rows
    red = su + paths * kRows * stride;       // [kWarps][P][T][32]: each warp's row sums
    csum = red + kWarps * paths * T * 32;    // [P][T] (v4): Σ_k c
    total = csum + paths * T;
  }
};

// Accumulators of one row sum: independent partial sums that break the FADD chain.
template <int T>
__host__ __device__ constexpr int row_accs() {
  return T >= 4 ? 1 : 4 / T;
}

// ---- row kernel: y = Σ_p h ⊙ (S_U c) -----------------------------------------------
// Block b takes rows 32b … 32b + 31; lane l row 32b + l; warp q the words q, q + 8, …
// of every path; c of every path and token in shared memory, read by broadcast LDS.128.
template <int T, bool kSubset>
__global__ void __launch_bounds__(kThreads) row_kernel(Args a) {
  extern __shared__ float4 smem4[];
  float* smem = reinterpret_cast<float*>(smem4);
  pdl_trigger();  // the next call's rank kernel may stage its weights now
  const RowSmem<T> L(a.paths, a.r32, a.stride);
  float* cs = smem + L.cs;
  std::uint32_t* su = reinterpret_cast<std::uint32_t*>(smem + L.su);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int j0 = static_cast<int>(blockIdx.x) * kRows;
  const int rows = min(kRows, a.m - j0);

  // Before the wait: the weights only (the block's S_U rows, contiguous in memory; h).
  for (int p = 0; p < a.paths; ++p) {
    const std::uint32_t* src = a.path[p].su + static_cast<std::size_t>(j0) * a.words;
    std::uint32_t* dst = su + p * kRows * a.stride;
    for (int e = tid; e < kRows * a.words; e += kThreads) {
      const int row = e / a.words, w = e - row * a.words;
      if (row < rows)
        cp_async4(dst + row * a.stride + w, src + e);
      else
        dst[row * a.stride + w] = 0u;
    }
  }
  const int jo = j0 + (tid & 31);
  float hv[kMaxPaths];
#pragma unroll
  for (int p = 0; p < kMaxPaths; ++p) hv[p] = p < a.paths && tid < T * 32 && jo < a.m ? __ldg(a.path[p].h + jo) : 0.0f;

  pdl_wait();  // c is the rank kernel's output
  {
    const float4* src = reinterpret_cast<const float4*>(a.c);
    for (int e = tid; e < a.paths * T * a.r32 / 4; e += kThreads) smem4[L.cs / 4 + e] = __ldcg(src + e);
  }
  cp_async_wait_all();
  __syncthreads();
  if constexpr (kSubset) {
    for (int pt = warp; pt < a.paths * T; pt += kWarps) {
      float s = 0.0f;
      for (int e = lane; e < a.r32; e += 32) s = __fadd_rn(s, cs[pt * a.r32 + e]);
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) s = __fadd_rn(s, __shfl_xor_sync(0xffffffffu, s, o));
      if (lane == 0) smem[L.csum + pt] = s;
    }
  }

  constexpr int NACC = row_accs<T>();
  float* red = smem + L.red;
  for (int p = 0; p < a.paths; ++p) {
    float acc[T][NACC];
#pragma unroll
    for (int t = 0; t < T; ++t)
#pragma unroll
      for (int e = 0; e < NACC; ++e) acc[t][e] = 0.0f;
    const std::uint32_t* myrow = su + (p * kRows + lane) * a.stride;
    for (int w = warp; w < a.words; w += kWarps) {
      const std::uint32_t wd = myrow[w];
      const float4* cw = reinterpret_cast<const float4*>(cs + p * T * a.r32 + w * 32);
#pragma unroll
      for (int bq = 0; bq < 8; ++bq) {
#pragma unroll
        for (int t = 0; t < T; ++t) {
          const float4 v4 = cw[t * (a.r32 / 4) + bq];
          const float v[4] = {v4.x, v4.y, v4.z, v4.w};
#pragma unroll
          for (int e4 = 0; e4 < 4; ++e4) {
            const int b = bq * 4 + e4;
            step<kSubset>(acc[t][b % NACC], wd, b, v[e4]);
          }
        }
      }
    }
#pragma unroll
    for (int t = 0; t < T; ++t) {
      float s;
      if constexpr (NACC == 4)
        s = __fadd_rn(__fadd_rn(acc[t][0], acc[t][1]), __fadd_rn(acc[t][2], acc[t][3]));
      else if constexpr (NACC == 2)
        s = __fadd_rn(acc[t][0], acc[t][1]);
      else
        s = acc[t][0];
      red[((warp * a.paths + p) * T + t) * 32 + lane] = s;
    }
  }
  __syncthreads();
  if (tid < T * 32) {
    const int t = tid >> 5, l = tid & 31, j = j0 + l;
    if (j < a.m) {
      float y = 0.0f;
      for (int p = 0; p < a.paths; ++p) {
        float s = red[(p * T + t) * 32 + l];
#pragma unroll
        for (int q = 1; q < kWarps; ++q) s = __fadd_rn(s, red[((q * a.paths + p) * T + t) * 32 + l]);
        if constexpr (kSubset) s = __fsub_rn(__fadd_rn(s, s), smem[L.csum + p * T + t]);
        float h = hv[0];
#pragma unroll
        for (int pp = 1; pp < kMaxPaths; ++pp)
          if (pp == p) h = hv[pp];
        y = __fadd_rn(y, __fmul_rn(h, s));
      }
      a.y[static_cast<std::size_t>(t) * a.m + j] = y;
    }
  }
}

template <int T, bool kSubset>
cudaError_t run_t(const Problem& pr, cudaStream_t s) {
  static bool opted = false;
  if (!opted) {
    CK(cudaFuncSetAttribute(rank_kernel<T, kSubset>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            static_cast<int>(kSmemMax)));
    CK(cudaFuncSetAttribute(row_kernel<T, kSubset>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            static_cast<int>(kSmemMax)));
    opted = true;
  }
  Args a{};
  for (int p = 0; p < kMaxPaths; ++p) a.path[p] = pr.path[p];
  a.x = pr.x;
  a.y = pr.y;
  a.c = pr.scratch;
  a.m = pr.m, a.n = pr.n, a.r = pr.r, a.words = pr.words, a.r32 = pr.r32, a.paths = pr.paths;
  a.groups = (pr.words + kGroupWords - 1) / kGroupWords;
  const int per_block = (pr.n + kCluster - 1) / kCluster;
  a.nib = (per_block + 4 * kWarps - 1) / (4 * kWarps) * (4 * kWarps);
  a.stride = pr.words | 1;
  const std::size_t rank_bytes = static_cast<std::size_t>(RankSmem<T>(a.nib).total) * sizeof(float);
  const std::size_t row_bytes = static_cast<std::size_t>(RowSmem<T>(a.paths, a.r32, a.stride).total) * sizeof(float);
  if (rank_bytes > kSmemMax || row_bytes > kSmemMax || static_cast<std::size_t>(pr.paths) * T * pr.r32 > pr.scratch_floats)
    return cudaErrorInvalidValue;

  cudaLaunchAttribute attr[2];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  attr[1].id = cudaLaunchAttributeClusterDimension;
  attr[1].val.clusterDim.x = kCluster;
  attr[1].val.clusterDim.y = 1;
  attr[1].val.clusterDim.z = 1;
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(static_cast<unsigned>(kCluster * a.groups * a.paths));
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = rank_bytes;
  cfg.stream = s;
  cfg.attrs = attr;
  cfg.numAttrs = 2;
  cudaError_t e = cudaLaunchKernelEx(&cfg, rank_kernel<T, kSubset>, a);
  if (e != cudaSuccess) return e;
  cfg.gridDim = dim3(static_cast<unsigned>((pr.m + kRows - 1) / kRows));
  cfg.dynamicSmemBytes = row_bytes;
  cfg.numAttrs = 1;
  return cudaLaunchKernelEx(&cfg, row_kernel<T, kSubset>, a);
}

template <bool kSubset>
cudaError_t run(const Problem& pr, cudaStream_t s) {
  switch (pr.ntok) {
    case 1: return run_t<1, kSubset>(pr, s);
    case 8: return run_t<8, kSubset>(pr, s);
    default: return cudaErrorInvalidValue;  // only T ∈ {1, 8} instantiated in this file
  }
}

}  // namespace split

// ===========================================================================
// Harness
// ===========================================================================
struct Version {
  const char* name;
  const char* idea;
  cudaError_t (*run)(const Problem&, cudaStream_t);
};

static const Version kVersions[] = {
    {"v1", "library kernel: rank pass + row pass, serial chunk tail", v1::run},
    {"v2", "one cooperative kernel, XOR sign, transpose-reduce, broadcast c", fused::run<false>},
    {"v3", "one cooperative kernel, predicated subset sums (2S - total)", fused::run<true>},
    {"v4", "rank kernel (8-block clusters) + row kernel, PDL, subset sums", split::run<true>},
    {"v5", "as v4 with the XOR sign (no 2S - total)", split::run<false>},
};
constexpr int kNumVersions = sizeof(kVersions) / sizeof(kVersions[0]);

struct Rng {  // splitmix64
  std::uint64_t s;
  std::uint64_t next() {
    std::uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  double normal() {
    const double u1 = 1.0 - uniform(), u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
  }
};

struct HostPath {
  std::vector<std::uint32_t> su, sv;
  std::vector<float> h, l, g;
};

struct Shape {
  int m, n, r;
  bool bench;  // false: a ragged validation-only shape
};

template <class T>
T* to_device(const std::vector<T>& v) {
  T* d = nullptr;
  CK(cudaMalloc(&d, v.size() * sizeof(T)));
  CK(cudaMemcpy(d, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

// The f64 reference: y[t][j] = Σ_p h_j Σ_k ±ℓ_k Σ_i ±g_i x_i.
static std::vector<double> reference(const std::vector<HostPath>& paths, const std::vector<float>& x, int m, int n,
                                     int r, int T) {
  const int words = (r + 31) / 32;
  std::vector<double> y(static_cast<std::size_t>(T) * m, 0.0), a(static_cast<std::size_t>(T) * r);
  for (const HostPath& hp : paths) {
    std::fill(a.begin(), a.end(), 0.0);
    for (int i = 0; i < n; ++i) {
      const std::uint32_t* row = hp.sv.data() + static_cast<std::size_t>(i) * words;
      for (int t = 0; t < T; ++t) {
        const double xg = static_cast<double>(hp.g[i]) * x[static_cast<std::size_t>(t) * n + i];
        double* at = a.data() + static_cast<std::size_t>(t) * r;
        for (int k = 0; k < r; ++k) at[k] += (row[k >> 5] >> (k & 31)) & 1u ? xg : -xg;
      }
    }
    for (int t = 0; t < T; ++t)
      for (int k = 0; k < r; ++k) a[static_cast<std::size_t>(t) * r + k] *= hp.l[k];
    for (int j = 0; j < m; ++j) {
      const std::uint32_t* row = hp.su.data() + static_cast<std::size_t>(j) * words;
      for (int t = 0; t < T; ++t) {
        const double* at = a.data() + static_cast<std::size_t>(t) * r;
        double s = 0.0;
        for (int k = 0; k < r; ++k) s += (row[k >> 5] >> (k & 31)) & 1u ? at[k] : -at[k];
        y[static_cast<std::size_t>(t) * m + j] += hp.h[j] * s;
      }
    }
  }
  return y;
}

// Median time per call in µs of `reps` timings of `calls` back-to-back calls.
template <class F>
static double time_direct(F&& f, cudaStream_t s, int calls = 200, int reps = 5) {
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  for (int i = 0; i < 10; ++i) CK(f());
  std::vector<float> ms;
  for (int rep = 0; rep < reps; ++rep) {
    CK(cudaEventRecord(e0, s));
    for (int i = 0; i < calls; ++i) CK(f());
    CK(cudaEventRecord(e1, s));
    CK(cudaEventSynchronize(e1));
    float t = 0;
    CK(cudaEventElapsedTime(&t, e0, e1));
    ms.push_back(t);
  }
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2] * 1000.0 / calls;
}

// The same calls captured in one CUDA graph; a negative value when capture is not supported.
template <class F>
static double time_graph(F&& f, cudaStream_t s, int calls = 200, int reps = 5) {
  cudaGraph_t graph = nullptr;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  cudaError_t err = cudaSuccess;
  for (int i = 0; i < calls && err == cudaSuccess; ++i) err = f();
  const cudaError_t end = cudaStreamEndCapture(s, &graph);
  if (err != cudaSuccess || end != cudaSuccess) {
    std::fprintf(stderr, "  (graph capture failed: %s)\n", cudaGetErrorString(err != cudaSuccess ? err : end));
    if (graph) cudaGraphDestroy(graph);
    cudaGetLastError();
    return -1.0;
  }
  cudaGraphExec_t exec = nullptr;
  err = cudaGraphInstantiate(&exec, graph, 0);
  if (err != cudaSuccess) {
    std::fprintf(stderr, "  (graph instantiate failed: %s)\n", cudaGetErrorString(err));
    cudaGraphDestroy(graph);
    cudaGetLastError();
    return -1.0;
  }
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  CK(cudaGraphLaunch(exec, s));
  CK(cudaStreamSynchronize(s));
  std::vector<float> ms;
  for (int rep = 0; rep < reps; ++rep) {
    CK(cudaEventRecord(e0, s));
    CK(cudaGraphLaunch(exec, s));
    CK(cudaEventRecord(e1, s));
    CK(cudaEventSynchronize(e1));
    float t = 0;
    CK(cudaEventElapsedTime(&t, e0, e1));
    ms.push_back(t);
  }
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  CK(cudaGraphExecDestroy(exec));
  CK(cudaGraphDestroy(graph));
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2] * 1000.0 / calls;
}

int main(int argc, char** argv) {
  int only = 0;
  if (argc > 2) fail(std::string("usage: ") + argv[0] + " [VERSION 1.." + std::to_string(kNumVersions) + "]");
  if (argc == 2) {
    char* end = nullptr;
    only = static_cast<int>(std::strtol(argv[1], &end, 10));
    if (*end != '\0' || only < 1 || only > kNumVersions)
      fail(std::string("unknown version '") + argv[1] + "' (1.." + std::to_string(kNumVersions) + ")");
  }
  int dev = 0;
  CK(cudaGetDevice(&dev));
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, dev));
  int coop = 0;
  CK(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev));
  if (!coop) fail("the device does not support cooperative launches (versions 2+)");
  std::printf("device: %s, %d SMs, cc %d.%d\n", prop.name, prop.multiProcessorCount, prop.major, prop.minor);
  v1::setup();

  cudaStream_t stream;
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cublasHandle_t blas;
  CKB(cublasCreate(&blas));
  CKB(cublasSetStream(blas, stream));

  constexpr int P = 2;
  const Shape shapes[] = {{1000, 700, 100, false}, {576, 576, 128, true},    {1536, 576, 192, true},
                          {576, 1536, 192, true},  {4096, 4096, 992, true}, {11008, 4096, 1472, true}};
  const int tokens[] = {1, 8};
  std::printf("%-3s %-28s %2s | %9s | %3s | %9s %9s | %7s | %9s %9s | %s\n", "ver", "shape (P=2)", "T", "rel err", "det",
              "us/call", "graph", "GB/s", "cublas", "graph", "cublas/ver");
  int failures = 0;
  for (const Shape& sh : shapes) {
    const int m = sh.m, n = sh.n, r = sh.r, words = (r + 31) / 32, r32 = words * 32;
    Rng rng{0x5eed0000ull + static_cast<std::uint64_t>(m) * 131 + static_cast<std::uint64_t>(n) * 7 + r};
    std::vector<HostPath> hp(P);
    for (HostPath& p : hp) {
      p.su.resize(static_cast<std::size_t>(m) * words);
      p.sv.resize(static_cast<std::size_t>(n) * words);
      for (auto& w : p.su) w = static_cast<std::uint32_t>(rng.next() >> 32);  // bits past r random too
      for (auto& w : p.sv) w = static_cast<std::uint32_t>(rng.next() >> 32);
      const auto scale = [&](bool sign) {
        const double v = 0.5 + rng.uniform();
        return static_cast<float>(sign && (rng.next() >> 63) ? -v : v);
      };
      for (int j = 0; j < m; ++j) p.h.push_back(scale(true));
      for (int k = 0; k < r; ++k) p.l.push_back(scale(false));
      for (int i = 0; i < n; ++i) p.g.push_back(scale(false));
    }
    Problem pr{};
    pr.m = m, pr.n = n, pr.r = r, pr.words = words, pr.r32 = r32, pr.paths = P, pr.sms = prop.multiProcessorCount;
    std::vector<void*> owned;
    for (int p = 0; p < P; ++p) {
      std::uint32_t* su = to_device(hp[p].su);
      std::uint32_t* sv = to_device(hp[p].sv);
      float *h = to_device(hp[p].h), *l = to_device(hp[p].l), *g = to_device(hp[p].g);
      pr.path[p] = {su, sv, h, l, g};
      owned.insert(owned.end(), {su, sv, h, l, g});
    }
    // Scratch: partial sums for up to n/64 chunks (v2/v3: R ≥ 4) or 32+ chunks (v1), 16 tokens.
    pr.scratch_floats = static_cast<std::size_t>(P) * (n / 32 + 64) * 16 * r32 + static_cast<std::size_t>(P) * 16 * r32;
    CK(cudaMalloc(&pr.scratch, pr.scratch_floats * sizeof(float)));
    pr.counter_words = static_cast<std::size_t>(P) * r32 + 64;
    CK(cudaMalloc(&pr.counters, pr.counter_words * sizeof(std::uint32_t)));
    CK(cudaMemset(pr.counters, 0, pr.counter_words * sizeof(std::uint32_t)));
    owned.push_back(pr.scratch);
    owned.push_back(pr.counters);
    // Dense f16 anchor: W [m][n] (column-major m×n for cuBLAS), random values.
    __half* w16 = nullptr;
    if (sh.bench) {
      std::vector<__half> w(static_cast<std::size_t>(m) * n);
      for (auto& v : w) v = __float2half(static_cast<float>(rng.uniform() * 2.0 - 1.0) * 0.02f);
      w16 = to_device(w);
      owned.push_back(w16);
    }
    const double bytes = static_cast<double>(P) * ((static_cast<double>(m) + n) * r / 8.0 + 4.0 * (m + n + r));

    for (int T : tokens) {
      std::vector<float> x(static_cast<std::size_t>(T) * n);
      for (auto& v : x) v = static_cast<float>(rng.normal());
      const std::vector<double> yref = reference(hp, x, m, n, r, T);
      float* dx = to_device(x);
      float* dy = nullptr;
      CK(cudaMalloc(&dy, static_cast<std::size_t>(T) * m * sizeof(float)));
      pr.x = dx;
      pr.y = dy;
      pr.ntok = T;

      double t_blas = -1, t_blas_graph = -1;
      if (sh.bench) {
        std::vector<__half> x16(x.size());
        for (std::size_t i = 0; i < x.size(); ++i) x16[i] = __float2half(x[i]);
        __half* dx16 = to_device(x16);
        float* dyb = nullptr;
        CK(cudaMalloc(&dyb, static_cast<std::size_t>(T) * m * sizeof(float)));
        const float one = 1.0f, zero = 0.0f;
        const auto gemm = [&]() -> cudaError_t {
          const cublasStatus_t st =
              cublasGemmEx(blas, CUBLAS_OP_N, CUBLAS_OP_N, m, T, n, &one, w16, CUDA_R_16F, m, dx16, CUDA_R_16F, n,
                           &zero, dyb, CUDA_R_32F, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
          return st == CUBLAS_STATUS_SUCCESS ? cudaSuccess : cudaErrorUnknown;
        };
        t_blas = time_direct(gemm, stream);
        t_blas_graph = time_graph(gemm, stream);
        CK(cudaFree(dx16));
        CK(cudaFree(dyb));
      }

      for (int vi = 0; vi < kNumVersions; ++vi) {
        if (only && only != vi + 1) continue;
        const Version& ver = kVersions[vi];
        if (vi == 0 && !v1::takes(pr)) continue;
        const auto call = [&]() { return ver.run(pr, stream); };
        // Validate and check determinism over three calls.
        std::vector<float> y0(static_cast<std::size_t>(T) * m), y1(y0.size());
        bool det = true;
        for (int rep = 0; rep < 3; ++rep) {
          CK(cudaMemsetAsync(dy, 0xff, y0.size() * sizeof(float), stream));  // NaN: catches rows left unwritten
          CK(call());
          CK(cudaStreamSynchronize(stream));
          CK(cudaMemcpy(rep == 0 ? y0.data() : y1.data(), dy, y0.size() * sizeof(float), cudaMemcpyDeviceToHost));
          if (rep > 0 && std::memcmp(y0.data(), y1.data(), y0.size() * sizeof(float)) != 0) det = false;
        }
        double num = 0, den = 0;
        for (std::size_t e = 0; e < y0.size(); ++e) {
          const double d = static_cast<double>(y0[e]) - yref[e];
          num += d * d;
          den += yref[e] * yref[e];
        }
        const double rel = std::sqrt(num / den);
        char shape_s[64];
        std::snprintf(shape_s, sizeof shape_s, "%dx%d r=%d", m, n, r);
        const bool ok = std::isfinite(rel) && rel <= 1e-5 && det;
        if (!ok) {
          std::printf("%-3s %-28s %2d | %9.2e | %3s | validation FAILED\n", ver.name, shape_s, T, rel, det ? "yes" : "NO");
          ++failures;
          continue;
        }
        if (!sh.bench) {
          std::printf("%-3s %-28s %2d | %9.2e | %3s | (validation only)\n", ver.name, shape_s, T, rel, "yes");
          continue;
        }
        const double t = time_direct(call, stream), tg = time_graph(call, stream);
        std::printf("%-3s %-28s %2d | %9.2e | %3s | %9.2f %9.2f | %7.1f | %9.2f %9.2f | %.2fx\n", ver.name, shape_s, T,
                    rel, "yes", t, tg, bytes / (t * 1e3), t_blas, t_blas_graph, t_blas / t);
      }
      CK(cudaFree(dx));
      CK(cudaFree(dy));
    }
    for (void* p : owned) CK(cudaFree(p));
  }
  CKB(cublasDestroy(blas));
  CK(cudaStreamDestroy(stream));
  if (failures) {
    std::fprintf(stderr, "FAIL: %d validation failure(s) (tolerance: relative error 1e-5, bitwise determinism)\n",
                 failures);
    return 1;
  }
  std::printf("all versions valid\n");
  return 0;
}
