// Bit-reading BLR inference on the GPU: blr_infer for decode-sized token
// counts, reading the sign bitmaps as they are stored (1 bit a sign, no f16
// planes). Two kernels per call, every path in each:
//
//   rank pass  a_p = S_V,pᵀ(g_p⊙x): a block takes up to 8 words of ranks (a
//              warp a word: lane l is rank 32w + l) and a chunk of inputs;
//              x⊙g of the chunk sits in shared memory, each bitmap word is
//              one broadcast load for the warp, and every lane adds ±x'_i
//              in order of i. Per-chunk sums go to scratch; the last block
//              of a (path, word group) to finish — a counter per group,
//              reset by that block — adds them in chunk order and stores
//              c = ℓ⊙a, zero past r.
//   row pass   y_j = Σ_p h_j · Σ_k ±c_p,k: L lanes a row (L = the rank's
//              words rounded up to 4, 8, 16 or 32; a warp takes 32/L rows);
//              c of every path and of a group of up to 8 tokens sits in
//              shared memory. Lane i of a row reads words i, i+L, … of
//              the row and walks their 32 bits starting at bit i, so that
//              the lanes of a row hit 32 different banks; then a shuffle
//              tree over the L lanes and the paths in order.
//
// Numerics (ops/blr.hpp): f32 throughout, no fused multiply-add
// (__fadd_rn, __fmul_rn), every sum in a fixed order that depends only on
// the shape: the same bits on every run, not the CPU's bits (its sums are
// grouped differently).
//
// Floor: the bitmaps, P·(m + n)·r/8 bytes (2.1 MB for 4096×4096 at 1 bpw, 2
// paths), read once; the scales and x are small. The work is one select
// and one add per sign and token, spread over all SMs.
#include "cuda/blr_infer.hpp"

#include <algorithm>
#include <mutex>

namespace bitrank::cuda {
namespace {

constexpr int kWordsPerBlock = 8;                // warps of a rank-pass block
constexpr int kRowThreads = 256;                 // threads of a row-pass block
constexpr int kMaxTokenGroup = 8;                // tokens of one row-pass block
constexpr std::size_t kRowSmemLimit = 96 << 10;  // row pass's shared memory (opted in above 48 KiB)

struct PathPtrs {
  const std::uint32_t* su;  // S_U [m][words]
  const std::uint32_t* sv;  // S_V [n][words]
  const float *h, *l, *g;
};

struct InferArgs {
  PathPtrs path[BlrBitInfer::kMaxPaths];
  const float* x;  // [ntok][n]
  float* y;        // [ntok][m]
  float* partial;  // [P][chunks][ntok][r32]
  float* c;        // [P][ntok][r32]
  std::uint32_t* done;
  int m, n, r, words, r32, paths, ntok, chunk, chunks;
};

// The rank pass for NT ≥ ntok tokens (grid: word groups × chunks × paths).
template <int NT>
__global__ void __launch_bounds__(32 * kWordsPerBlock) rank_pass_kernel(InferArgs a) {
  extern __shared__ float xg[];  // [NT][chunk], zero past the chunk's inputs and the tokens
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
  // The last block of this (path, word group) adds the chunks' sums in order.
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    std::uint32_t* done = a.done + p * gridDim.x + blockIdx.x;
    last = atomicAdd(done, 1u) == static_cast<unsigned>(a.chunks - 1);
    if (last) *done = 0;  // every other block of the group has counted: ready for the next call
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

// The row pass for a group of TG tokens (grid: row blocks × token groups),
// L lanes a row.
template <int TG, int L>
__global__ void __launch_bounds__(kRowThreads) row_pass_kernel(InferArgs a) {
  extern __shared__ float cs[];  // [P][TG][r32]
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
  // Uniform per warp: every lane takes part in the shuffles.
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

std::size_t row_smem(const BlrLayer<float>& layer, int tg) {
  return static_cast<std::size_t>(layer.paths.size()) * tg * sign_words(layer.r) * 32 * sizeof(float);
}

// The largest token group (8, 4, 2, 1, at most the tokens rounded up) whose c fits.
int token_group(const BlrLayer<float>& layer, index_t ntok) {
  int tg = std::min(kMaxTokenGroup, pow2_at_least(static_cast<int>(ntok), 1));
  while (tg > 1 && row_smem(layer, tg) > kRowSmemLimit) tg >>= 1;
  return tg;
}

// One launch of `Kernel`. A kernel that may take more than 48 KiB of
// shared memory opts in once, to the most any call asks (kRowSmemLimit),
// not on every call of a decode step.
template <auto Kernel>
void launch(dim3 grid, unsigned threads, std::size_t smem, cudaStream_t s, const InferArgs& a) {
  if (smem > (48u << 10)) {
    static std::once_flag opted;
    std::call_once(opted, [] {
      BR_CUDA_CHECK(
          cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kRowSmemLimit)));
    });
  }
  Kernel<<<grid, threads, smem, s>>>(a);
  BR_CUDA_LAUNCHED();
}

template <int TG>
void launch_rows(int lanes, dim3 grid, std::size_t smem, cudaStream_t s, const InferArgs& a) {
  switch (lanes) {
    case 4: return launch<row_pass_kernel<TG, 4>>(grid, kRowThreads, smem, s, a);
    case 8: return launch<row_pass_kernel<TG, 8>>(grid, kRowThreads, smem, s, a);
    case 16: return launch<row_pass_kernel<TG, 16>>(grid, kRowThreads, smem, s, a);
    default: return launch<row_pass_kernel<TG, 32>>(grid, kRowThreads, smem, s, a);
  }
}

int sm_count(int device) {
  int n = 0;
  BR_CUDA_CHECK(cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device));
  return n;
}

}  // namespace

bool BlrBitInfer::takes(const BlrLayer<float>& layer, index_t ntok) {
  return ntok >= 1 && ntok <= kBlrInferBitTokens && !layer.paths.empty() &&
         layer.paths.size() <= static_cast<std::size_t>(kMaxPaths) && row_smem(layer, 1) <= kRowSmemLimit;
}

void BlrBitInfer::run(const BlrLayer<float>& layer, CView<float> x, View<float> y) {
  const cudaStream_t s = ctx_.stream.get();
  InferArgs a{};
  a.paths = static_cast<int>(layer.paths.size());
  for (int p = 0; p < a.paths; ++p) {
    const BlrPath<float>& path = layer.paths[static_cast<std::size_t>(p)];
    a.path[p] = {path.sign_u.data, path.sign_v.data, path.h.data, path.l.data, path.g.data};
  }
  a.m = static_cast<int>(layer.m);
  a.n = static_cast<int>(layer.n);
  a.r = static_cast<int>(layer.r);
  a.words = static_cast<int>(sign_words(layer.r));
  a.r32 = a.words * 32;
  a.ntok = static_cast<int>(x.dim(0));
  a.x = x.data;
  a.y = y.data;
  // Chunks of inputs: about 32 of them (each a multiple of 32 inputs, 32 to 256), so a
  // small layer still spreads over the SMs and a large one keeps its chunk sums short.
  a.chunk = std::clamp((a.n / 32 + 31) / 32 * 32, 32, 256);
  a.chunks = (a.n + a.chunk - 1) / a.chunk;

  const int warps = std::min(kWordsPerBlock, a.words);
  const dim3 rank_grid(static_cast<unsigned>((a.words + warps - 1) / warps), static_cast<unsigned>(a.chunks),
                       static_cast<unsigned>(a.paths));
  const auto need = [](Buffer<float>& b, std::size_t n, Memory& mem) {
    if (b.size() < n) b = Buffer<float>(mem, n);
  };
  need(partial_, static_cast<std::size_t>(a.paths) * a.chunks * a.ntok * a.r32, ctx_.memory);
  need(c_, static_cast<std::size_t>(a.paths) * a.ntok * a.r32, ctx_.memory);
  const std::size_t groups = static_cast<std::size_t>(a.paths) * rank_grid.x;
  if (done_.size() < groups) {
    done_ = Buffer<std::uint32_t>(ctx_.memory, groups);
    done_.zero();  // the kernels leave it at zero after each call
  }
  a.partial = partial_.data();
  a.c = c_.data();
  a.done = done_.data();

  const int nt = pow2_at_least(a.ntok, 1);
  const std::size_t rank_smem = static_cast<std::size_t>(nt) * a.chunk * sizeof(float);
  const unsigned rank_threads = 32u * static_cast<unsigned>(warps);
  switch (nt) {
    case 1: launch<rank_pass_kernel<1>>(rank_grid, rank_threads, rank_smem, s, a); break;
    case 2: launch<rank_pass_kernel<2>>(rank_grid, rank_threads, rank_smem, s, a); break;
    case 4: launch<rank_pass_kernel<4>>(rank_grid, rank_threads, rank_smem, s, a); break;
    case 8: launch<rank_pass_kernel<8>>(rank_grid, rank_threads, rank_smem, s, a); break;
    default: launch<rank_pass_kernel<16>>(rank_grid, rank_threads, rank_smem, s, a); break;
  }

  if (sms_ == 0) sms_ = sm_count(ctx_.device);
  const int tg = token_group(layer, a.ntok);
  const int lanes = std::min(32, pow2_at_least(a.words, 4));
  const int rows_per_block = kRowThreads / lanes;
  const dim3 row_grid(static_cast<unsigned>(std::min((a.m + rows_per_block - 1) / rows_per_block, 2 * sms_)),
                      static_cast<unsigned>((a.ntok + tg - 1) / tg));
  const std::size_t smem = row_smem(layer, tg);
  switch (tg) {
    case 1: launch_rows<1>(lanes, row_grid, smem, s, a); break;
    case 2: launch_rows<2>(lanes, row_grid, smem, s, a); break;
    case 4: launch_rows<4>(lanes, row_grid, smem, s, a); break;
    default: launch_rows<8>(lanes, row_grid, smem, s, a); break;
  }
}

}  // namespace bitrank::cuda
