// Design 3 of the CUDA Gated DeltaNet core: the chunkwise form, forward and
// backward, on the tensor cores (3xBF16, f32-accurate to ~1e-5: tile_mma.cuh). The
// derivation, the names (c, M, A, T, Ũ, W, U, P, S₀, dS_L) and the
// backward's steps (a)–(f) are those of src/ref/gdn_chunked.hpp, whose f64
// host code this file follows kernel by kernel.
//
// Chunks of kC = 64 tokens; head_dim is padded to kD = 128 with zeros (so
// every product has fixed tile shapes), a short last chunk to 64 rows with
// zero keys, queries, values and β (their rows then contribute nothing).
// Two kinds of kernels:
//   · chunk-parallel, one block per (chunk, v-head), everything in shared
//     memory: prep (c, A, T = (I+A)⁻¹ — its 16×16 diagonal blocks by
//     forward substitution, the blocks below on the tensor cores —, W, Ũ), out
//     (O = e^c Q S₀ + P U), and the backward's dU_local = Pᵀ dO (these two
//     one block per (chunk, k-head) instead, for the k-head's v-heads: one
//     QKᵀ), state and attention grads in one (dW, dQ, dK, dc from S₀, dS_L
//     and dP), WY grads (through T and A), then finish (dℓ, d_a, d_b). Their
//     product operands sit in shared memory already split (tile::Split:
//     bf16 hi/lo planes, split once where loaded or formed; q̂ and k̂ once
//     a k-head, by prep, and fetched so), diagonal factors moved onto the
//     accumulators' rows or columns so that q̂, k̂, v are split raw; row
//     dots and sums of a product are taken from its
//     accumulators (Acc::row_sums, in a fixed order);
//   · state passes, one block per (64 state columns, v-head, window)
//     walking its window's chunks in order (forward: S₀ of each chunk, U =
//     Ũ − W S₀, S ← e^{c_last} S + K̃ᵀU) or in reverse (backward: dS_L of
//     each chunk, dU += K̃ dS_L, dS₀ = e^{c_last} dS_L + (e^cQ)ᵀdO − WᵀdU).
// The intermediate per-chunk matrices live in a workspace (ChunkWs) laid out
// [chunk][v-head][64][128] (states [128][128], T [64][64]). Its forward part
// (W, U, S₀, T, and prep's c and β and q̂, k̂ split once a k-head —
// [chunk][k-head] — which the other kernels fetch instead of recomputing
// or splitting) sits in the tape's record part when that is large enough
// (gdn.cu's chunk_record_area: the default ckpt_every = 8 at windows of 64
// and more), so the backward reads what the forward wrote; otherwise it is
// pool memory and the backward recomputes it with the forward's kernels.
// The backward part (dU, dW, dK, dS_L, dc, dβ) is pool memory; dQ never
// leaves the registers of the kernel that forms it.
//
// Numerics: the products in 3xBF16 with f32 accumulation; decays e^{c_r−c_s}
// from differences of log sums, never a quotient of underflowed products.
// Measured against the f64 reference (tools/gpu/gpu_gdn.sh, the gdn parity
// cases; unchanged when T's blocks below the diagonal moved onto the tensor
// cores): ≤ 1.9e-5 relative (tolerance 2e-4), but d_b of the one-token case,
// a two-value sum that nearly cancels: 1.6e-4 (2.3e-4 before the WY grads
// took v and k from their split planes), held to 1e-3 there
// (tests/parity/gdn_cases.cpp). Speed: docs/perf.md.
#include "cuda/gdn.cuh"
#include "cuda/ops.hpp"
#include "cuda/tile_mma.cuh"

namespace bitrank::cuda::gdn {
namespace {

using tile::Col;
using tile::Row;
using tile::Split;
using tile::gemm;

constexpr int kC = 64;        // chunk
constexpr int kD = 128;       // padded head_dim
constexpr int kTV = 64;       // state columns per state-pass block
constexpr int kThreads = 256;
constexpr int kLdC = kC + 4;  // padded shared row strides
constexpr int kLdS = kD + 8;  // bf16 rows of split planes (tile::Split: ≡ 8 mod 64)
constexpr int kLdSC = kC + 8;
constexpr int kLdP = kC + 8;  // f32 rows of a 64-wide tile whose region later holds a [64][72] Split
constexpr index_t kRowTile = static_cast<index_t>(kC) * kD;  // a 64×128 workspace tile
constexpr index_t kStateTile = static_cast<index_t>(kD) * kD;
constexpr index_t kSqTile = static_cast<index_t>(kC) * kC;
constexpr index_t kScalars = 2 * kC;  // c then β of a chunk (ws.cb)

__device__ __forceinline__ float softplusf_(float x) { return fmaxf(x, 0.0f) + log1pf(expf(-fabsf(x))); }

// Where a (chunk, v-head) block works.
struct Pos {
  int h, kh, L;  // v-head, k-head, valid rows
  index_t t0;    // first token
  index_t idx;   // (chunk, v-head) index into the workspace
  index_t kidx;  // (chunk, k-head) index (ws.Ks, ws.Qs)
};

__device__ __forceinline__ Pos pos_of(const Dims& g, index_t chunk, int h) {
  const int nch = (g.T + kC - 1) / kC;
  const index_t w = chunk / nch;
  const int p0 = static_cast<int>(chunk % nch) * kC;
  Pos p;
  p.h = h;
  p.kh = h / g.group;
  p.L = min(kC, g.T - p0);
  p.t0 = w * g.T + p0;
  p.idx = chunk * g.hv + h;
  p.kidx = chunk * g.hk + p.kh;
  return p;
}

// The (chunk, head) item of a chunk-parallel block: the grid is one
// dimension, heads fastest (chunk_grid), so that the blocks of one chunk's
// heads run together and the tiles a k-head's v-heads share (q̂, k̂ and
// their planes, G) are read from DRAM once and from L2 by the others; with
// chunks fastest, a long window put a head's hundreds of chunks between
// them and L2 had evicted the tiles by the next v-head. One 32-bit division
// a block.
struct Item {
  index_t chunk;
  int head;
};
__device__ __forceinline__ Item item_of(int heads) {
  const unsigned x = blockIdx.x, chunk = x / static_cast<unsigned>(heads);
  return Item{static_cast<index_t>(chunk), static_cast<int>(x - chunk * static_cast<unsigned>(heads))};
}
__device__ __forceinline__ Pos pos_of_block(const Dims& g) {  // a block of a grid over the v-heads
  const Item it = item_of(g.hv);
  return pos_of(g, it.chunk, it.head);
}
// The same for chunk ci (of nch) of window w, the k-head kh given: the state
// passes know the window (blockIdx.z) and take the k-head once a block, so
// they place each chunk with a few multiply-adds instead of pos_of's
// 64-bit division and modulo and h / group.
__device__ __forceinline__ Pos window_pos(const Dims& g, index_t w, int ci, int nch, int h, int kh) {
  Pos p;
  p.h = h;
  p.kh = kh;
  p.L = min(kC, g.T - ci * kC);
  p.t0 = w * g.T + ci * kC;
  p.idx = (w * nch + ci) * g.hv + h;
  p.kidx = (w * nch + ci) * g.hk + kh;
  return p;
}

// c = cumulative log decay within the chunk (rows ≥ L repeat c[L−1]) and β
// (0 for rows ≥ L), into shared memory; ends with a barrier.
__device__ void chunk_scalars(const Dims& g, const Tape& tp, float ea, const Pos& p, float* c, float* b) {
  const int tid = threadIdx.x;
  if (tid < 32) {
    float v[2];
#pragma unroll
    for (int m = 0; m < 2; ++m) {
      const int r = 2 * tid + m;
      const index_t th = (p.t0 + r) * g.hv + p.h;
      v[m] = r < p.L ? -ea * softplusf_(tp.gate_in[th]) : 0.0f;
      b[r] = r < p.L ? tp.beta[th] : 0.0f;
    }
    v[1] += v[0];
    float run = v[1];  // inclusive scan of the pair sums over the lanes
    for (int o = 1; o < 32; o <<= 1) {
      const float y = __shfl_up_sync(0xffffffffu, run, o);
      if (tid >= o) run += y;
    }
    const float before = run - v[1];
    c[2 * tid] = before + v[0];
    c[2 * tid + 1] = before + v[1];
  }
  __syncthreads();
}

// ---- global → shared copies, asynchronous (cp.async) -----------------------
// A thread issues all its copies of a tile back to back and they land
// together (landed()): one memory latency per load phase, where copies
// through registers paid one per batch of loads (four per 64×128 tile).
// A thread that then scales and splits a tile (the backward state pass's
// dO) does so to the elements it fetched itself, so no barrier is needed
// between landing and splitting; the caller's __syncthreads() publishes
// the result.

__device__ __forceinline__ void cp_async(float* dst, const float* src, int bytes, int src_bytes) {
  const auto d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  if (bytes == 16)
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(src_bytes));
  else
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(d), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void landed() { asm volatile("cp.async.wait_all;\n" ::: "memory"); }
// Groups, for a pass that keeps copies in flight across a phase: commit()
// closes the copies issued since the last one; landed_but<N>() waits for
// all groups except the newest N.
__device__ __forceinline__ void commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void landed_but() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Issues the copy of a chunk's c and β (prep's, in ws.cb) into cb[0..63]
// and cb[64..127] (16-byte aligned).
__device__ __forceinline__ void fetch_scalars(const float* ws_cb, index_t idx, float* cb) {
  if (threadIdx.x < kScalars / 4)
    cp_async(cb + 4 * threadIdx.x, ws_cb + idx * kScalars + 4 * threadIdx.x, 16, 16);
}
// fetch_scalars, landed, and a barrier: c and β visible to the block.
__device__ __forceinline__ void load_scalars(const float* ws_cb, index_t idx, float* cb) {
  fetch_scalars(ws_cb, idx, cb);
  landed();
  __syncthreads();
}

// The slots of a ROWS × COLS tile, W consecutive elements each, over the
// block: slot e = threadIdx.x + n·kThreads is row e / (COLS/W), column
// W·(e % (COLS/W)). kThreads being a multiple of COLS/W, a thread's column
// is the same in every pass and its row steps by kThreads/(COLS/W), so both
// come from threadIdx.x once (unsigned: shifts, no sign fix-ups) and
// f(n, r, i) runs unrolled for n = 0 .. slots per thread − 1. Two loops
// over tiles of one shape give a thread the same slots in the same order:
// what lets it read back, with no barrier between, what it stored itself
// (the backward state pass's dO split after fetch_rows, replace_state_dot).
template <int ROWS, int COLS, int W = 4, class F>
__device__ __forceinline__ void for_slots(F f) {
  constexpr int kPerRow = COLS / W, kStep = kThreads / kPerRow;
  static_assert(COLS % W == 0 && kThreads % kPerRow == 0 && ROWS % kStep == 0, "whole passes of the block");
  const int r0 = static_cast<int>(threadIdx.x / kPerRow), i = W * static_cast<int>(threadIdx.x % kPerRow);
#pragma unroll
  for (int n = 0; n < ROWS / kStep; ++n) f(n, r0 + n * kStep, i);
}

// Element (r, i) of an f32 tile of shared memory with rows of ld floats:
// plain (padded) rows, or (kSwizzled; ld a multiple of 32) its 16-byte
// chunks swizzled as a swizzled Split's, so that the copies into it fill
// whole sectors. Accesses stay within one chunk (4 floats from a multiple of 4, or fewer).
template <bool kSwizzled>
__device__ __forceinline__ int f32_at(int r, int i, int ld) {
  return r * ld + (kSwizzled ? (i ^ ((r & 7) << 2)) : i);
}

// Issues dst[r][i] (r < 64, i < COLS, stride ld; f32_at) = src[r·stride + i] for
// r < L, i < d; zero elsewhere (stored at once).
template <int COLS = kD, bool kSwizzled = false>
__device__ __forceinline__ void fetch_rows(float* dst, int ld, const float* src, index_t stride, int L, int d) {
  const bool vec = stride % 4 == 0 && reinterpret_cast<uintptr_t>(src) % 16 == 0;
  for_slots<kC, COLS>([&](int, int r, int i) {
    float* to = dst + f32_at<kSwizzled>(r, i, ld);
    const float* from = src + r * stride + i;
    if (r >= L || i >= d) {
      *reinterpret_cast<float4*>(to) = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    } else if (vec && i + 4 <= d) {
      cp_async(to, from, 16, 16);
    } else {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        if (i + j < d) cp_async(to + j, from + j, 4, 4);
        else to[j] = 0.0f;
      }
    }
  });
}

// dst (a Split, ROWS × COLS) = src[r·stride + i] for r < L, i < d, zero
// elsewhere: every load of the thread first, then the splits and stores.
struct NoVisit {
  __device__ void operator()(int, int, float4) const {}
};
// visit(r, i, v) sees each slot's new values before they are stored (the
// old ones still in dst).
template <int ROWS = kC, int COLS = kD, class Visit = NoVisit>
__device__ __forceinline__ void load_split_rows(const Split& dst, const float* src, index_t stride, int L = ROWS,
                                                int d = COLS, Visit visit = {}) {
  const bool vec = stride % 4 == 0 && reinterpret_cast<uintptr_t>(src) % 16 == 0;
  float4 v[ROWS * COLS / 4 / kThreads];
  for_slots<ROWS, COLS>([&](int n, int r, int i) {
    const float* from = src + r * stride + i;
    if (r >= L || i >= d) {
      v[n] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    } else if (vec && i + 4 <= d) {
      v[n] = *reinterpret_cast<const float4*>(from);
    } else {
      v[n].x = from[0];
      v[n].y = i + 1 < d ? from[1] : 0.0f;
      v[n].z = i + 2 < d ? from[2] : 0.0f;
      v[n].w = i + 3 < d ? from[3] : 0.0f;
    }
  });
  for_slots<ROWS, COLS>([&](int n, int r, int i) {
    visit(r, i, v[n]);
    tile::split_store4(dst, r, i, v[n]);
  });
}

// A rows × ld Split in shared memory from its first float: the hi plane,
// then the lo plane (rows·ld/2 floats each).
__device__ __forceinline__ Split split_planes(float* f, int rows, int ld) {
  auto* hi = reinterpret_cast<__nv_bfloat16*>(f);
  return Split{hi, hi + rows * ld, ld};
}
// Element (r, i) of a Split back in f32: hi + lo, within 2⁻¹⁸ of the value split.
__device__ __forceinline__ float split_value(const Split& s, int r, int i) {
  return __bfloat162float(s.hi[s.at(r, i)]) + __bfloat162float(s.lo[s.at(r, i)]);
}
// The same for elements (r, i), (r, i + 1) (i even): one 4-byte load from each plane.
__device__ __forceinline__ float2 split_pair(const Split& s, int r, int i) {
  const float2 h = tile::bf16x2_to_float2(*reinterpret_cast<const uint32_t*>(s.hi + s.at(r, i)));
  const float2 l = tile::bf16x2_to_float2(*reinterpret_cast<const uint32_t*>(s.lo + s.at(r, i)));
  return make_float2(h.x + l.x, h.y + l.y);
}
// A 64 × kD Split, swizzled (tile::Split, sw = 8): unpadded 256-byte rows, so that
// the 16-byte copies that fill it (fetch_split_tile) land in whole sectors.
constexpr int kSwizzledTile = kC * kD;
__device__ __forceinline__ Split swizzled_view(float* f) {
  auto* hi = reinterpret_cast<__nv_bfloat16*>(f);
  return Split{hi, hi + kC * kD, kD, 8};
}
// A swizzled 64 × kD Split on planes placed as a padded one's (a region of
// kC·kLdS elements each, their starts on 128-byte lines): for the chunk
// kernels, whose other regions keep their places.
__device__ __forceinline__ Split swizzled_planes(__nv_bfloat16* hi, __nv_bfloat16* lo) { return Split{hi, lo, kD, 8}; }

// A workspace tile stored split (ws.W, ws.Ks, ws.Qs: the hi plane [64][128]
// of bf16, then the lo plane; ws.S: [128][128] planes, rows = kD), as a Split.
__device__ __forceinline__ Split ws_split(float* tile, int rows = kC) {
  auto* hi = reinterpret_cast<__nv_bfloat16*>(tile);
  return Split{hi, hi + rows * kD, kD};
}
// Columns j0 .. j0 + 63 of a state stored split (ws.S).
__device__ __forceinline__ Split state_columns(float* state, int j0) {
  const Split s = ws_split(state, kD);
  return Split{s.hi + j0, s.lo + j0, kD};
}
// Issues the copy of a ROWS × COLS Split of global memory (a workspace tile
// stored split, or some of its columns) into a Split of shared memory, in
// 16-byte pieces of 8 bf16.
template <int ROWS = kC, int COLS = kD>
__device__ __forceinline__ void fetch_split_tile(const Split& dst, const Split& src) {
  const auto plane = [&](__nv_bfloat16* to, const __nv_bfloat16* from) {
    for_slots<ROWS, COLS, 8>([&](int, int r, int i) {
      cp_async(reinterpret_cast<float*>(to + dst.at(r, i)), reinterpret_cast<const float*>(from + src.at(r, i)), 16,
               16);
    });
  };
  plane(dst.hi, src.hi);
  plane(dst.lo, src.lo);
}
__device__ __forceinline__ void fetch_split_tile(const Split& dst, float* src) {
  fetch_split_tile(dst, ws_split(src));
}
// The reverse: a ROWS × COLS Split of shared memory (published) into one of
// global memory, in the same 16-byte pieces.
template <int ROWS = kC, int COLS = kD>
__device__ __forceinline__ void store_split_tile(const Split& to, const Split& src) {
  const auto plane = [&](__nv_bfloat16* into, const __nv_bfloat16* from) {
    for_slots<ROWS, COLS, 8>([&](int, int r, int i) {
      *reinterpret_cast<uint4*>(into + to.at(r, i)) = *reinterpret_cast<const uint4*>(from + src.at(r, i));
    });
  };
  plane(to.hi, src.hi);
  plane(to.lo, src.lo);
}

// A 64 × 64 f32 tile of shared memory (row stride kLdP) rewritten in place
// as its Split (row stride kLdSC): each thread holds its values across the
// barrier. Ends with a barrier.
__device__ __forceinline__ void split_in_place(float* P) {
  float4 v[kC * kC / 4 / kThreads];
  for_slots<kC, kC>([&](int n, int r, int i) { v[n] = *reinterpret_cast<const float4*>(P + r * kLdP + i); });
  __syncthreads();
  const Split dst = split_planes(P, kC, kLdSC);
  for_slots<kC, kC>([&](int n, int r, int i) { tile::split_store4(dst, r, i, v[n]); });
  __syncthreads();
}

// Issues a dense ROWS×COLS copy from a workspace tile (row stride lds,
// 16-byte aligned rows) into shared memory (row stride ldd; f32_at).
template <int ROWS, int COLS, bool kSwizzled = false>
__device__ __forceinline__ void fetch_tile(float* dst, int ldd, const float* src, int lds) {
  for_slots<ROWS, COLS>(
      [&](int, int r, int i) { cp_async(dst + f32_at<kSwizzled>(r, i, ldd), src + r * lds + i, 16, 16); });
}
// Shared-memory pointers of a k-head's rows of q̂ / k̂ and a v-head's rows of
// the conv output's v part / of dO (in d_qkv's v columns).
__device__ __forceinline__ const float* k_rows(const Dims& g, const Tape& tp, const Pos& p) {
  return tp.k_hat + (p.t0 * g.hk + p.kh) * g.d;
}
__device__ __forceinline__ const float* q_rows(const Dims& g, const Tape& tp, const Pos& p) {
  return tp.q_hat + (p.t0 * g.hk + p.kh) * g.d;
}
__device__ __forceinline__ index_t v_col(const Dims& g, const Pos& p) {
  return p.t0 * g.C + g.v_off() + static_cast<index_t>(p.h) * g.d;
}

// An 8-byte store of a pair to global memory (at 8-byte aligned), always one
// instruction: a plain float2 store of an accumulator pair formed from two
// computed values was split by the compiler into two 4-byte stores in the
// state passes and the grads (seen in the PTX), each writing half of every
// 32-byte sector it touches.
__device__ __forceinline__ void store_global2(float* at, float2 v) {
  asm volatile("st.global.v2.f32 [%0], {%1, %2};\n" ::"l"(at), "f"(v.x), "f"(v.y) : "memory");
}

// Columns n, n+1 of a row with d valid columns (zero past d): one 8-byte
// access where both are valid and the address allows it, else two guarded
// 4-byte ones. The accumulator pairs (tile::Acc) sit at even n: two 4-byte
// accesses there fetch each 32-byte sector twice, half of it each time.
__device__ __forceinline__ float2 load_pair(const float* at, int n, int d) {
  if (n + 1 < d && (reinterpret_cast<uintptr_t>(at) & 7) == 0) return *reinterpret_cast<const float2*>(at);
  return make_float2(n < d ? at[0] : 0.0f, n + 1 < d ? at[1] : 0.0f);
}
__device__ __forceinline__ void store_pair(float* at, int n, int d, float2 v) {
  if (n + 1 < d && (reinterpret_cast<uintptr_t>(at) & 7) == 0) {
    store_global2(at, v);
    return;
  }
  if (n < d) at[0] = v.x;
  if (n + 1 < d) at[1] = v.y;
}

// The last addition to a chunk's dK tile goes to the tape instead (dk̂ of
// this v-head, rows < L, columns < head_dim): dst = ws + v.
template <class AccT>
__device__ __forceinline__ void add_to_tape(const AccT& acc, const float* ws_tile, float* tape, const Dims& g,
                                            const Pos& p) {
  acc.update_pairs(
      [&](int m, int n) { return m < p.L ? load_pair(ws_tile + m * kD + n, n, g.d) : make_float2(0.0f, 0.0f); },
      [&](int m, int n, float2 v, float2 o) {
        if (m < p.L) store_pair(tape + ((p.t0 + m) * g.hv + p.h) * g.d + n, n, g.d, make_float2(o.x + v.x, o.y + v.y));
      });
}

// The per-row sums over 64 entries run four threads per row (kThreads =
// 4·kC), summed by tile::quad_sum.
static_assert(kThreads == 4 * kC, "four threads per row of a chunk");
using tile::quad_sum;

// x · M_rs, M the chunk's decay mask: e^{c_r − c_s} on s ≤ r < L, else 0 (so
// P = M ⊙ QKᵀ, and dP ⊙ M, are formed element by element with it).
__device__ __forceinline__ float decay_masked(const float* c, int L, int r, int s, float x) {
  return (s <= r && r < L) ? x * expf(c[r] - c[s]) : 0.0f;
}

// Block sum of one value per thread (every thread gets the total).
__device__ float block_sum(float x, float* red) {
  for (int m = 16; m >= 1; m >>= 1) x += __shfl_xor_sync(0xffffffffu, x, m);
  __syncthreads();
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = x;
  __syncthreads();
  float t = 0.0f;
  for (int w = 0; w < kThreads / 32; ++w) t += red[w];
  return t;
}

// ---- forward ----------------------------------------------------------------

// The blocks of T = (I + A)⁻¹ (16×16 block indices, T's diagonal blocks
// already in Ts) at distance kDist below the diagonal: T_ij = −T_ii X_ij with
// X_ij = Σ_{k=j}^{i−1} A_ik T_kj, i = j + kDist, each block by one warp (the
// 4 − kDist first warps) as two 3xBF16 products — X (16 × 16·kDist × 16) into
// T_ij's place, then T_ii X (T_ii with its unit diagonal) over it. They read
// only blocks of smaller distance and their own, so the warps of one distance
// need no barrier among them; callers __syncthreads() between distances.
// (The scalar dot products these replace were most of prep's issue slots.)
template <int kDist>
__device__ __forceinline__ void off_diagonal_blocks(const float* As, float* Ts) {
  const int jb = static_cast<int>(threadIdx.x) / 32, ib = jb + kDist;
  if (ib >= kC / 16) return;
  float* Tij = Ts + 16 * ib * kLdP + 16 * jb;
  {
    tile::Acc<16, 16, 1> x;
    x.mma<16 * kDist, Row, Row>(As + 16 * ib * kLdP + 16 * jb, kLdP, Ts + 16 * jb * kLdP + 16 * jb, kLdP);
    x.store(Tij, kLdP, 1.0f, false);
  }
  __syncwarp();  // X_ij visible to the warp
  tile::Acc<16, 16, 1> t;
  t.mma<16, Row, Row>(Ts + 16 * ib * kLdP + 16 * ib, kLdP, Tij, kLdP);
  __syncwarp();  // every lane's reads of X_ij done before it is overwritten
  t.store(Tij, kLdP, -1.0f, false);
}

// prep: A, T = (I+A)⁻¹, W = T diag(βe^c) K, Ũ = T diag(β) V (W, Ũ, T into the
// workspace). K and V are split once, raw (tile::Split); the diagonal
// factors go into T's columns instead (T' = T diag(βe^c), T'' = T diag(β),
// split where T's f32 tile was), so W = T' K and Ũ = T'' V. The block of a
// k-head's first v-head also writes K's planes and Q's (split from
// registers, straight to memory) to ws.Ks, ws.Qs, for the later kernels.
__global__ void __launch_bounds__(kThreads, 2) prep_kernel(RecArgs a, ChunkWs ws) {
  const Dims& g = a.g;
  const Pos p = pos_of_block(g);
  extern __shared__ __align__(128) float smem[];
  auto* planes = reinterpret_cast<__nv_bfloat16*>(smem);
  const Split K{planes, planes + kC * kLdS, kLdS};
  const Split V{K.lo + kC * kLdS, K.lo + 2 * kC * kLdS, kLdS};
  float* As = reinterpret_cast<float*>(V.lo + kC * kLdS);  // [64][72], then T' split
  float* Ts = As + kC * kLdP;                               // [64][72], then T'' split
  float* c = Ts + kC * kLdP;                                // [64]
  float* b = c + kC;                                        // [64]
  const auto split_at = [](float* f32) { return split_planes(f32, kC, kLdSC); };
  chunk_scalars(g, a.tp, expf(a.a_log[p.h]), p, c, b);
  if (threadIdx.x < kScalars) ws.cb[p.idx * kScalars + threadIdx.x] = c[threadIdx.x];  // c, then β (b = c + 64)
  const index_t kstride = static_cast<index_t>(g.hk) * g.d;
  load_split_rows(K, k_rows(g, a.tp, p), kstride, p.L, g.d);
  load_split_rows(V, a.tp.conv_out + v_col(g, p), g.C, p.L, g.d);
  __syncthreads();
  gemm<kC, kC, kD, Row, Col>(As, kLdP, K, K, 1.0f, false);
  __syncthreads();
  for_slots<kC, kC, 1>([&](int, int r, int s) {
    As[r * kLdP + s] = (s < r && r < p.L) ? b[r] * expf(c[r] - c[s]) * As[r * kLdP + s] : 0.0f;
    Ts[r * kLdP + s] = r == s ? 1.0f : 0.0f;
  });
  __syncthreads();
  // T = (I + A)⁻¹ by 16×16 blocks. First the four diagonal blocks by
  // forward substitution, T_rj = −A_rj − Σ_{j<s<r} A_rs T_sj within a
  // block: four threads per column j, each a quarter of the s range; a
  // column's threads sit in one warp (8 columns per warp, all in one
  // block), so the rows need warp barriers only — 15 dependent rows instead
  // of 63. Then the blocks below the diagonal, nearest first, a warp a
  // block on the tensor cores (off_diagonal_blocks).
  {
    const int j = threadIdx.x / 4, part = threadIdx.x % 4, end = (j & ~15) + 16;
    for (int r = (j & ~7) + 1; r < end; ++r) {
      float v = 0.0f;
      if (j < r)
        for (int s = j + 1 + part; s < r; s += 4) v = fmaf(As[r * kLdP + s], Ts[s * kLdP + j], v);
      v = quad_sum(v);
      if (j < r && part == 0) Ts[r * kLdP + j] = -As[r * kLdP + j] - v;
      __syncwarp();
    }
  }
  __syncthreads();
  off_diagonal_blocks<1>(As, Ts);
  __syncthreads();
  off_diagonal_blocks<2>(As, Ts);
  __syncthreads();
  off_diagonal_blocks<3>(As, Ts);
  __syncthreads();
  {  // T to the workspace; T' and T'' over A's and T's tiles, split
    float4 t[kC * kC / 4 / kThreads];
    for_slots<kC, kC>([&](int n, int r, int s0) {
      t[n] = *reinterpret_cast<const float4*>(Ts + r * kLdP + s0);
      *reinterpret_cast<float4*>(ws.T + p.idx * kSqTile + r * kC + s0) = t[n];
    });
    __syncthreads();
    const Split T1 = split_at(As), T2 = split_at(Ts);
    for_slots<kC, kC>([&](int n, int r, int s0) {
      float f[4], h[4];
#pragma unroll
      for (int q = 0; q < 4; ++q) h[q] = b[s0 + q], f[q] = h[q] * expf(c[s0 + q]);
      const float4 v = t[n];
      tile::split_store4(T1, r, s0, make_float4(v.x * f[0], v.y * f[1], v.z * f[2], v.w * f[3]));
      tile::split_store4(T2, r, s0, make_float4(v.x * h[0], v.y * h[1], v.z * h[2], v.w * h[3]));
    });
  }
  __syncthreads();
  {  // W, stored split: the state passes only ever use it as a product operand
    tile::Acc<kC, kD> w;
    w.mma<kC, Row, Row>(split_at(As), K);
    w.store_split(ws_split(ws.W + p.idx * kRowTile));
  }
  gemm<kC, kD, kC, Row, Row>(ws.U + p.idx * kRowTile, kD, split_at(Ts), V, 1.0f, false);
  if (p.h % g.group == 0) {  // once a k-head (uniform over the block)
    store_split_tile(ws_split(ws.Ks + p.kidx * kRowTile), K);
    load_split_rows(ws_split(ws.Qs + p.kidx * kRowTile), q_rows(g, a.tp, p), kstride, p.L, g.d);
  }
}

// Forward state pass: per chunk, S₀ → ws.S (split, from its shared Split, so that
// out copies it whole-sector into its own and the state grads read its planes), U = Ũ − W S₀ → ws.U, S ←
// e^{c_last} S + Kᵀ (f ⊙ U) with f_r = e^{c_last − c_r} (0 past L). The
// state's 64 columns stay in registers (an Acc); both products read split
// operands by ldmatrix (tile::Split), so no operand is split per use: S₀ is
// split once from the registers, W and K come split from prep (K once a
// k-head), and f ⊙ U is split from the W S₀ accumulators, to which Ũ is
// added there (U goes to ws.U from the registers too). The pass is a chain
// over the window's chunks: W, K, Ũ, c are double-buffered and fetched at
// a chunk's first barrier — each has most of a chunk to land. W, K and Ũ
// sit in swizzled tiles (swizzled_view, f32_at), so that each copy
// fills whole sectors. One block per
// SM (225 KB of shared memory); two barriers per chunk.
__global__ void __launch_bounds__(kThreads, 1) state_fwd_kernel(RecArgs a, ChunkWs ws) {
  const Dims& g = a.g;
  const int j0 = blockIdx.x * kTV, h = blockIdx.y, kh = h / g.group, nch = (g.T + kC - 1) / kC;
  extern __shared__ __align__(128) float smem[];
  float* Sf = smem;                    // Split [128][72]: S₀
  float* Xw = Sf + kD * kLdSC;         // 2 × swizzled Split [64][128]: W
  float* Xk = Xw + 2 * kSwizzledTile;  // 2 × swizzled Split [64][128]: K
  float* Uf = Xk + 2 * kSwizzledTile;  // Split [64][72]: f ⊙ U
  float* Ub = Uf + kC * kLdSC;         // 2 × swizzled [64][64]: this block's columns of Ũ
  float* cb = Ub + 2 * kC * kTV;       // 2 × [128]: c and β
  const Split S0 = split_planes(Sf, kD, kLdSC), fU = split_planes(Uf, kC, kLdSC);
  const auto chunk = [&](int ci) { return window_pos(g, blockIdx.z, ci, nch, h, kh); };  // window blockIdx.z
  const auto fetch_w_k_u_c = [&](int ci, int buf) {
    const Pos q = chunk(ci);
    fetch_split_tile(swizzled_view(Xw + buf * kSwizzledTile), ws.W + q.idx * kRowTile);
    fetch_split_tile(swizzled_view(Xk + buf * kSwizzledTile), ws.Ks + q.kidx * kRowTile);
    fetch_tile<kC, kTV, true>(Ub + buf * kC * kTV, kTV, ws.U + q.idx * kRowTile + j0, kD);
    fetch_scalars(ws.cb, q.idx, cb + buf * kScalars);
  };
  fetch_w_k_u_c(0, 0);
  tile::Acc<kD, kTV> S;  // zero
  for (int ci = 0; ci < nch; ++ci) {
    const int buf = ci & 1;
    const Pos p = chunk(ci);
    const float* Ut = Ub + buf * kC * kTV;
    const float* c = cb + buf * kScalars;
    S.store_split(S0);  // S₀'s readers (the last chunk's W S₀) are behind barrier [2]
    landed();         // this chunk's operands (the only copies in flight)
    __syncthreads();  // [1] S₀, W, K, Ũ, c visible; the last chunk's readers of f ⊙ U and the other buffers done
    if (ci + 1 < nch) fetch_w_k_u_c(ci + 1, buf ^ 1);
    store_split_tile<kD, kTV>(state_columns(ws.S + p.idx * kStateTile, j0), S0);  // S₀ → ws.S, split
    tile::Acc<kC, kTV> ws0;  // W S₀
    ws0.mma<kD, Row, Row>(swizzled_view(Xw + buf * kSwizzledTile), S0);
    const float cl = c[p.L - 1];
    ws0.update_pairs([&](int r, int i) { return *reinterpret_cast<const float2*>(Ut + f32_at<true>(r, i, kTV)); },
                     [&](int r, int i, float2 w, float2 ut) {  // U = Ũ − W S₀ out; f ⊙ U split
                       const float2 u = make_float2(ut.x - w.x, ut.y - w.y);
                       store_global2(ws.U + p.idx * kRowTile + r * kD + j0 + i, u);
                       const float f = r < p.L ? expf(cl - c[r]) : 0.0f;
                       uint32_t hi, lo;
                       tile::split_bf16x2(u.x * f, u.y * f, hi, lo);
                       *reinterpret_cast<uint32_t*>(fU.hi + fU.at(r, i)) = hi;
                       *reinterpret_cast<uint32_t*>(fU.lo + fU.at(r, i)) = lo;
                     });
    S.scale(expf(cl));
    __syncthreads();  // [2] f ⊙ U visible; S₀ and W read
    S.mma<kC, Col, Row>(swizzled_view(Xk + buf * kSwizzledTile), fU);
  }
}

// out: O = diag(e^c) Q S₀ + P U, one block per (chunk, k-head) for the
// k-head's v-heads in turn: Q, K are split and QKᵀ taken once (it stays in
// the registers), then per v-head its P = M ⊙ QKᵀ (its own decays) is split
// straight from those accumulators, and O is formed 64 of the v columns at
// a time; both products accumulate in registers (the row factors e^c
// applied between them) and O goes to the tape from there. Operands split
// once (tile::Split): Q, K (prep's planes, fetched), then each half's
// columns of S₀ and U. The same values and sums as one block per v-head,
// so the same O bit for bit, with a third of the Q, K traffic and score
// products at three v-heads a k-head.
__global__ void __launch_bounds__(kThreads, 2) out_kernel(RecArgs a, ChunkWs ws) {
  const Dims& g = a.g;
  extern __shared__ __align__(128) float smem[];
  auto* planes = reinterpret_cast<__nv_bfloat16*>(smem);
  const Split Q = swizzled_planes(planes, planes + kC * kLdS);  // swizzled: fetched by cp.async
  const Split KS = swizzled_planes(Q.lo + kC * kLdS, Q.lo + kC * kLdS + kD * kLdSC);  // K [64][128], then S₀'s columns
  const Split S0{KS.hi, KS.lo, kTV, 8};                                   // swizzled [128][64]
  const Split Pm{KS.lo + kD * kLdSC, KS.lo + kD * kLdSC + kC * kLdSC, kLdSC};  // [64][72]
  const Split U{Pm.lo + kC * kLdSC, Pm.lo + 2 * kC * kLdSC, kLdSC};          // [64][72]
  float* c = reinterpret_cast<float*>(U.lo + kC * kLdSC);
  const Item it = item_of(g.hk);  // (chunk, k-head)
  const Pos p0 = pos_of(g, it.chunk, it.head * g.group);
  fetch_split_tile(Q, ws.Qs + p0.kidx * kRowTile);
  fetch_split_tile(KS, ws.Ks + p0.kidx * kRowTile);
  landed();
  __syncthreads();
  tile::Acc<kC, kC> qk;
  qk.mma<kD, Row, Col>(Q, KS);
  for (int j = 0; j < g.group; ++j) {
    const Pos p = pos_of(g, it.chunk, p0.h + j);
    __syncthreads();  // the last v-head's readers of c, P, S₀'s and U's columns done (the first time: of K)
    load_scalars(ws.cb, p.idx, c);
    qk.visit_pairs([&](int r, int s, float2 v) {  // P = M ⊙ QKᵀ on s ≤ r < L, split
      uint32_t hi, lo;
      tile::split_bf16x2(decay_masked(c, p.L, r, s, v.x), decay_masked(c, p.L, r, s + 1, v.y), hi, lo);
      *reinterpret_cast<uint32_t*>(Pm.hi + Pm.at(r, s)) = hi;
      *reinterpret_cast<uint32_t*>(Pm.lo + Pm.at(r, s)) = lo;
    });
    for (int j0 = 0; j0 < g.d; j0 += 64) {
      if (j0 > 0) __syncthreads();  // the last half's readers of S₀'s and U's columns done
      fetch_split_tile<kD, kTV>(S0, state_columns(ws.S + p.idx * kStateTile, j0));
      load_split_rows<kC, 64>(U, ws.U + p.idx * kRowTile + j0, kD);
      landed();
      __syncthreads();  // (the first half: P too)
      tile::Acc<kC, 64> o;
      o.mma<kD, Row, Row>(Q, S0);
      o.scale_rows([&](int r) { return expf(c[r]); });
      o.mma<kC, Row, Row>(Pm, U);
      o.visit_pairs([&](int r, int jj, float2 v) {
        if (r < p.L) store_pair(a.tp.o_pre + ((p.t0 + r) * g.hv + p.h) * g.d + j0 + jj, j0 + jj, g.d, v);
      });
    }
  }
}

// ---- backward ---------------------------------------------------------------

// dU_local = Pᵀ dO (into ws.dU) for the v-heads of one k-head, one block
// per (chunk, k-head): q̂, k̂ are the k-head's, so Q and K (prep's planes)
// are fetched once and QKᵀ taken once for all of them (f32 in shared memory: in
// the registers across the v-heads it spilled). Per v-head h = kh·group + j:
// P = M ⊙ QKᵀ with its own c, split straight from QKᵀ into K's planes, its dO loaded
// split over Q's, then Pᵀ dO. c is double-buffered, the next v-head's
// fetched while this one's P is formed: two barriers per v-head.
__global__ void __launch_bounds__(kThreads, 2) du_local_kernel(RecArgs a, ChunkWs ws) {
  const Dims& g = a.g;
  const Item it = item_of(g.hk);  // (chunk, k-head)
  const auto vhead = [&](int j) { return pos_of(g, it.chunk, it.head * g.group + j); };
  const Pos p0 = vhead(0);
  extern __shared__ __align__(128) float smem[];
  auto* planes = reinterpret_cast<__nv_bfloat16*>(smem);
  const Split X1 = swizzled_planes(planes, planes + kC * kLdS);                // Q, then each v-head's dO
  const Split X2 = swizzled_planes(X1.hi + 2 * kC * kLdS, X1.hi + 3 * kC * kLdS);  // K, then each v-head's P
  const Split Pm = split_planes(reinterpret_cast<float*>(X2.hi), kC, kLdSC);  // [64][72]
  float* QK = reinterpret_cast<float*>(X2.lo + kC * kLdS);                        // [64][68]
  float* cb = QK + kC * kLdC;                                                  // 2 × [128]: c and β
  fetch_scalars(ws.cb, p0.idx, cb);
  fetch_split_tile(X1, ws.Qs + p0.kidx * kRowTile);
  fetch_split_tile(X2, ws.Ks + p0.kidx * kRowTile);
  landed();  // Q, K and the first v-head's c
  __syncthreads();
  gemm<kC, kC, kD, Row, Col>(QK, kLdC, X1, X2, 1.0f, false);
  for (int j = 0; j < g.group; ++j) {
    const Pos p = vhead(j);
    const float* c = cb + (j & 1) * kScalars;
    // [1] QKᵀ visible and Q, K read (j = 0), else the last P and dO read;
    // this c visible (landed before the last barrier).
    __syncthreads();
    // (the other buffer was last read forming the last P, before [2])
    if (j + 1 < g.group) fetch_scalars(ws.cb, vhead(j + 1).idx, cb + ((j + 1) & 1) * kScalars);
    for_slots<kC, kC>([&](int, int r, int s) {  // P = M ⊙ QKᵀ, split
      const float4 x = *reinterpret_cast<const float4*>(QK + r * kLdC + s);
      const auto m = [&](int col, float v) { return decay_masked(c, p.L, r, col, v); };
      tile::split_store4(Pm, r, s, make_float4(m(s, x.x), m(s + 1, x.y), m(s + 2, x.z), m(s + 3, x.w)));
    });
    load_split_rows(X1, a.d_qkv + v_col(g, p), g.C, p.L, g.d);  // dO
    landed();  // the next v-head's c
    __syncthreads();  // [2] P and dO visible
    gemm<kC, kD, kC, Col, Row>(ws.dU + p.idx * kRowTile, kD, Pm, X1, 1.0f, false);
  }
}

// Backward state pass, chunks last to first: dS_L → ws.dh, dU += K̃ dS_L
// (K̃ = e^{c_last−c} ⊙ K rows, 0 past L), dS₀ = e^{c_last} dS_L + (e^cQ)ᵀ dO
// − Wᵀ dU. dS stays in registers as in the forward pass and is split once
// from there; K and Q come split from prep (once a k-head), raw: K̃'s row
// factors go onto the K dS_L accumulators, where dU is added and goes to
// ws.dU, and −dU is split for Wᵀ dU; (e^cQ)ᵀ dO is taken as Qᵀ (e^c ⊙ dO),
// dO scaled and split by the threads that fetched it (their own slots: no
// barrier between landing and splitting). So all three products read split
// operands by ldmatrix. A chunk's operands arrive in two groups issued
// during the chunk after it (in pass order, the one before): K, Q, dO, dU
// and the c of the chunk after next at its second barrier, waited for at
// the top of the chunk they belong to; W at its last, waited for before
// the second barrier. K, Q, W, dO and dU sit in swizzled tiles
// (swizzled_view, f32_at), so that each copy fills whole sectors. One
// buffer each (a second K would not fit beside dO's planes): one block per
// SM (201 KB); three barriers per chunk.
__global__ void __launch_bounds__(kThreads, 1) state_bwd_kernel(RecArgs a, ChunkWs ws) {
  const Dims& g = a.g;
  const int j0 = blockIdx.x * kTV, h = blockIdx.y, kh = h / g.group, nch = (g.T + kC - 1) / kC;
  extern __shared__ __align__(128) float smem[];
  float* Df = smem;                 // Split [128][72]: dS_L
  float* Xk = Df + kD * kLdSC;      // swizzled Split [64][128]: K
  float* Xq = Xk + kSwizzledTile;   // swizzled Split [64][128]: Q
  float* Xw = Xq + kSwizzledTile;   // swizzled Split [64][128]: W
  float* Ub = Xw + kSwizzledTile;   // swizzled [64][64]: this block's columns of dU as fetched
  float* Do = Ub + kC * kTV;        // swizzled [64][64]: dO as fetched
  float* Ef = Do + kC * kTV;        // Split [64][72]: e^c ⊙ dO
  float* Uf = Ef + kC * kLdSC;   // Split [64][72]: −dU
  float* cb = Uf + kC * kLdSC;   // 2 × [128]: c and β
  const Split dSL = split_planes(Df, kD, kLdSC), eDo = split_planes(Ef, kC, kLdSC);
  const Split mdU = split_planes(Uf, kC, kLdSC);
  const auto chunk = [&](int ci) { return window_pos(g, blockIdx.z, ci, nch, h, kh); };  // window blockIdx.z
  const int dcols = max(0, min(kTV, g.d - j0));
  // The groups of chunk ci, each committed even when empty (ci < 0), so
  // that the waits below count the same in every iteration.
  const auto fetch_k_q_do_du_c = [&](int ci) {  // and the c of chunk ci − 1
    if (ci >= 0) {
      const Pos q = chunk(ci);
      fetch_split_tile(swizzled_view(Xk), ws.Ks + q.kidx * kRowTile);
      fetch_split_tile(swizzled_view(Xq), ws.Qs + q.kidx * kRowTile);
      fetch_rows<kTV, true>(Do, kTV, a.d_qkv + v_col(g, q) + j0, g.C, q.L, dcols);
      fetch_tile<kC, kTV, true>(Ub, kTV, ws.dU + q.idx * kRowTile + j0, kD);
    }
    if (ci >= 1) fetch_scalars(ws.cb, chunk(ci - 1).idx, cb + ((ci - 1) & 1) * kScalars);
    commit();
  };
  const auto fetch_w = [&](int ci) {
    if (ci >= 0) fetch_split_tile(swizzled_view(Xw), ws.W + chunk(ci).idx * kRowTile);
    commit();
  };
  fetch_scalars(ws.cb, chunk(nch - 1).idx, cb + ((nch - 1) & 1) * kScalars);
  landed();
  __syncthreads();  // the first chunk's c visible
  fetch_k_q_do_du_c(nch - 1);
  fetch_w(nch - 1);
  tile::Acc<kD, kTV> D;  // dS, zero
  for (int ci = nch - 1; ci >= 0; --ci) {
    const Pos p = chunk(ci);
    const float* c = cb + (ci & 1) * kScalars;
    D.store_split(dSL);  // its readers (the chunk after's K dS_L) are behind that chunk's barrier [2]
    D.store(ws.dh + p.idx * kStateTile + j0, kD, 1.0f, false);
    landed_but<1>();  // K, Q, dO, dU of this chunk (W may still be in flight)
    // This thread's dO slots, scaled and split (e^c ⊙ dO's last readers are behind the chunk after's [2]).
    for_slots<kC, kTV>([&](int, int r, int i) {
      const float4 v = *reinterpret_cast<const float4*>(Do + f32_at<true>(r, i, kTV));
      const float e = expf(c[r]);
      tile::split_store4(eDo, r, i, make_float4(e * v.x, e * v.y, e * v.z, e * v.w));
    });
    __syncthreads();  // [1] dS_L, K, Q, e^c ⊙ dO, dU visible
    tile::Acc<kD, kTV> qdo;
    qdo.mma<kC, Col, Row>(swizzled_view(Xq), eDo);  // Qᵀ (e^c ⊙ dO)
    tile::Acc<kC, kTV> kd;
    kd.mma<kD, Row, Row>(swizzled_view(Xk), dSL);  // K dS_L
    const float cl = c[p.L - 1];
    kd.update_pairs([&](int r, int i) { return *reinterpret_cast<const float2*>(Ub + f32_at<true>(r, i, kTV)); },
                    [&](int r, int i, float2 k, float2 old) {  // dU = dU + K̃ dS_L out; −dU split
                      const float f = r < p.L ? expf(cl - c[r]) : 0.0f;
                      const float2 du = make_float2(fmaf(f, k.x, old.x), fmaf(f, k.y, old.y));
                      store_global2(ws.dU + p.idx * kRowTile + r * kD + j0 + i, du);
                      uint32_t hi, lo;
                      tile::split_bf16x2(-du.x, -du.y, hi, lo);
                      *reinterpret_cast<uint32_t*>(mdU.hi + mdU.at(r, i)) = hi;
                      *reinterpret_cast<uint32_t*>(mdU.lo + mdU.at(r, i)) = lo;
                    });
    D.scale(expf(cl));
    D.add(qdo);
    landed();         // W of this chunk (the only group in flight)
    __syncthreads();  // [2] W, −dU visible; K, Q, dO, dU and this chunk's c read
    fetch_k_q_do_du_c(ci - 1);
    D.mma<kC, Col, Row>(swizzled_view(Xw), mdU);  // − Wᵀ dU
    __syncthreads();  // [3] Xw free
    fetch_w(ci - 1);
  }
}

// State and attention grads (steps (a), (b), (c)) of one (chunk, v-head),
// in one block so that dO is read once and dQ never goes through the
// workspace: dK = diag(e^{c_last−c}) U dS_Lᵀ, τ_r = k_r·dK_r (dc_last += Στ,
// dc_r −= τ_r); dc_last += e^{c_last}⟨S₀, dS_L⟩; dW = −dU S₀ᵀ; dQ =
// diag(e^c) dO S₀ᵀ, dc_r += q_r·dQ_r; then dP = dO Uᵀ on s ≤ r, dc_r += Σ_s
// dP⊙P − Σ_q dP_qr P_qr, dQ += (dP⊙M) K and dK += (dP⊙M)ᵀ Q. One 64×128
// accumulator fits beside a product's operands under 2 blocks' 128
// registers: dQ's, kept from its state part to the tape's dq̂; so dK's
// first part is stored and its attention part added onto it (an L2 hit),
// and U is loaded twice. Phases, in S's region (a swizzled [128][128]
// Split) and X (a swizzled [64][128] Split): dS_L, U → dK; S₀ over dS_L
// (the inner product taken from the old planes as the new arrive), dU →
// dW; dO → dQ; then S's region's first half holds U, then Q, its second
// half dP and P (f32 [64][68]), then dP⊙M split, and X, after dO, K.
// Writes ws.dK, ws.dW, ws.dc (the first of each) and the tape's dq̂ of
// this v-head.
__global__ void __launch_bounds__(kThreads, 2) grads_sa_kernel(RecArgs a, ChunkWs ws) {
  using Acc = tile::Acc<kC, kD>;
  using Square = tile::Acc<kC, kC>;
  constexpr int kParts = Acc::kWarpCols;
  const Dims& g = a.g;
  const Pos p = pos_of_block(g);
  extern __shared__ __align__(128) float smem[];
  auto* planes = reinterpret_cast<__nv_bfloat16*>(smem);
  const Split S{planes, planes + kD * kLdS, kD, 8};  // swizzled [128][128]: dS_L, then S₀
  const Split H = swizzled_planes(planes, planes + kC * kD);  // S's first half: U, then Q
  float* dPs = reinterpret_cast<float*>(S.lo);  // S's second half: dP [64][68], P [64][68], then dP⊙M split
  float* Ps = dPs + kC * kLdC;
  const Split Dm = split_planes(dPs, kC, kLdSC);
  __nv_bfloat16* xb = S.lo + kD * kLdS;
  const Split X = swizzled_planes(xb, xb + kC * kLdS);  // U, dU, dO, then K
  float* part = reinterpret_cast<float*>(xb + 2 * kC * kLdS);  // [64][kParts]
  float* c = part + kC * kParts;
  float* b = c + kC;
  float* dc = b + kC;    // [64]
  float* red = dc + kC;  // [8]
  load_scalars(ws.cb, p.idx, c);
  const float cl = c[p.L - 1];
  float* dK = ws.dK + p.idx * kRowTile;
  const auto part_sum = [&](int r) {
    float t = 0.0f;
    for (int w = 0; w < kParts; ++w) t += part[r * kParts + w];
    return t;
  };
  // (a) dS_L and U: dK's first part (its row dots with k̂ taken in (d), from K's planes).
  const float* dh = ws.dh + p.idx * kStateTile;
  for (int h = 0; h < 2; ++h)
    load_split_rows(Split{S.hi + h * kC * kD, S.lo + h * kC * kD, kD, 8}, dh + h * kC * kD, kD);
  load_split_rows(X, ws.U + p.idx * kRowTile, kD);
  __syncthreads();
  {
    Acc acc;
    acc.mma<kD, Row, Col>(X, S);  // U dS_Lᵀ
    acc.scale_rows([&](int r) { return r < p.L ? expf(cl - c[r]) : 0.0f; });
    __syncthreads();  // S and X read
    acc.store(dK, kD, 1.0f, false);
  }
  // (b) S₀ over dS_L: this thread's part of ⟨dS_L, S₀⟩ from the old planes
  // (hi + lo: within 2⁻¹⁸ of the f32 values) at the slots it rewrites, the
  // new values from the forward state pass's split planes; then dU.
  float s0dh = 0.0f;
  {
    const Split src = ws_split(ws.S + p.idx * kStateTile, kD);
    const auto dot8 = [](uint4 hi, uint4 lo, uint4 hi2, uint4 lo2) {
      const uint32_t h1[4] = {hi.x, hi.y, hi.z, hi.w}, l1[4] = {lo.x, lo.y, lo.z, lo.w};
      const uint32_t h2[4] = {hi2.x, hi2.y, hi2.z, hi2.w}, l2[4] = {lo2.x, lo2.y, lo2.z, lo2.w};
      float d = 0.0f;
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const float2 a1 = tile::bf16x2_to_float2(h1[q]), b1 = tile::bf16x2_to_float2(l1[q]);
        const float2 a2 = tile::bf16x2_to_float2(h2[q]), b2 = tile::bf16x2_to_float2(l2[q]);
        d = fmaf(a1.x + b1.x, a2.x + b2.x, d);
        d = fmaf(a1.y + b1.y, a2.y + b2.y, d);
      }
      return d;
    };
    for (int h = 0; h < 2; ++h) {
      uint4 nh[kC * kD / 8 / kThreads], nl[kC * kD / 8 / kThreads];
      for_slots<kC, kD, 8>([&](int n, int r, int i) {
        nh[n] = *reinterpret_cast<const uint4*>(src.hi + src.at(h * kC + r, i));
        nl[n] = *reinterpret_cast<const uint4*>(src.lo + src.at(h * kC + r, i));
      });
      for_slots<kC, kD, 8>([&](int n, int r, int i) {
        const int at = S.at(h * kC + r, i);
        s0dh += dot8(*reinterpret_cast<const uint4*>(S.hi + at), *reinterpret_cast<const uint4*>(S.lo + at), nh[n],
                     nl[n]);
        *reinterpret_cast<uint4*>(S.hi + at) = nh[n];
        *reinterpret_cast<uint4*>(S.lo + at) = nl[n];
      });
    }
  }
  load_split_rows(X, ws.dU + p.idx * kRowTile, kD);
  __syncthreads();  // S₀ and dU visible
  {
    Acc acc;
    acc.mma<kD, Row, Col>(X, S);  // dU S₀ᵀ
    __syncthreads();  // X read
    acc.store(ws.dW + p.idx * kRowTile, kD, -1.0f, false);
  }
  // (c) dO: dQ's state part, kept in the registers to the end (its row dots
  // with q̂ taken once Q's planes are in (d)).
  load_split_rows(X, a.d_qkv + v_col(g, p), g.C, p.L, g.d);
  __syncthreads();
  Acc dq;
  dq.mma<kD, Row, Col>(X, S);  // dO S₀ᵀ
  dq.scale_rows([&](int r) { return expf(c[r]); });
  __syncthreads();  // S₀ read for the last time
  // (d) the attention grads: U into S's first half, dP = dO Uᵀ into its second.
  load_split_rows(H, ws.U + p.idx * kRowTile, kD);
  __syncthreads();  // U visible
  {
    Square dp;
    dp.mma<kD, Row, Col>(X, H);  // dO Uᵀ
    dp.store(dPs, kLdC, 1.0f, false);
  }
  __syncthreads();  // dP visible; dO and U read
  fetch_split_tile(H, ws.Qs + p.kidx * kRowTile);
  fetch_split_tile(X, ws.Ks + p.kidx * kRowTile);
  landed();
  __syncthreads();
  dq.row_sums_pairs(  // q_r·dQ_r of the state part, q from Q's planes (zero past L and head_dim)
      [&](int m, int n, float2 v) {
        const float2 q = split_pair(H, m, n);
        return make_float2(q.x * v.x, q.y * v.y);
      },
      [&](int m, int w, float sum) { part[m * kParts + w] = sum; });
  {
    Square qk;
    qk.mma<kD, Row, Col>(H, X);  // Q Kᵀ, then P = M ⊙ QKᵀ on s ≤ r < L
    qk.visit_pairs([&](int r, int s, float2 v) {
      *reinterpret_cast<float2*>(Ps + r * kLdC + s) =
          make_float2(decay_masked(c, p.L, r, s, v.x), decay_masked(c, p.L, r, s + 1, v.y));
    });
  }
  __syncthreads();  // P and the q̂ row parts visible
  const float qy = threadIdx.x < kC ? part_sum(threadIdx.x) : 0.0f;  // q_r·dQ_r
  {  // four threads per r, each a quarter of row r and of column r
    const int r = threadIdx.x / 4, q4 = threadIdx.x % 4;
    float acc = 0.0f;
    // (the diagonal's two terms cancel: left out, so a lone token's dc is exactly 0)
    for (int s = q4; s < r; s += 4) acc = fmaf(dPs[r * kLdC + s], Ps[r * kLdC + s], acc);            // row r
    for (int q = r + 1 + q4; q < kC; q += 4) acc = fmaf(-dPs[q * kLdC + r], Ps[q * kLdC + r], acc);  // column r
    acc = quad_sum(acc);
    if (q4 == 0) dc[r] = acc;
  }
  {  // dP ⊙ M, split over dP and P (every thread's reads of them done first)
    float4 v[kC * kC / 4 / kThreads];
    for_slots<kC, kC>([&](int n, int r, int s0) {
      float x[4];
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const int s = s0 + q;
        x[q] = decay_masked(c, p.L, r, s, dPs[r * kLdC + s]);
      }
      v[n] = make_float4(x[0], x[1], x[2], x[3]);
    });
    __syncthreads();
    for_slots<kC, kC>([&](int n, int r, int s0) { tile::split_store4(Dm, r, s0, v[n]); });
  }
  __syncthreads();  // dP ⊙ M visible; dc's attention part too
  dq.mma<kC, Row, Row>(Dm, X);  // += (dP⊙M) K: dQ complete, to the tape
  dq.visit_pairs([&](int m, int n, float2 v) {
    if (m < p.L) store_pair(a.tp.dq_hat + ((p.t0 + m) * g.hv + p.h) * g.d + n, n, g.d, v);
  });
  {
    Acc dk;
    dk.mma<kC, Col, Row>(Dm, H);  // (dP⊙M)ᵀ Q, onto dK's first part, whose row dots
    dk.update_pairs_row_sums(     // with k (from K's planes: zero past L and head_dim) are τ
        [&](int m, int n) { return *reinterpret_cast<const float2*>(dK + m * kD + n); },
        [&](int m, int n, float2 v, float2 o) { store_global2(dK + m * kD + n, make_float2(o.x + v.x, o.y + v.y)); },
        [&](int m, int n, float2 o) {
          const float2 k = split_pair(X, m, n);
          return make_float2(k.x * o.x, k.y * o.y);
        },
        [&](int m, int w, float sum) { part[m * kParts + w] = sum; });
  }
  __syncthreads();  // the τ parts visible
  const float tau = threadIdx.x < kC ? part_sum(threadIdx.x) : 0.0f;  // τ_r
  const float tau_total = block_sum(tau, red);
  const float s0dh_total = block_sum(s0dh, red);
  if (threadIdx.x < kC) {
    float v = dc[threadIdx.x] + qy - tau;
    if (static_cast<int>(threadIdx.x) == p.L - 1) v += tau_total + expf(cl) * s0dh_total;
    ws.dc[p.idx * kC + threadIdx.x] = v;
  }
}

// WY grads (steps (d), (e)): dBv = TᵀdU → dV = β dBv, dβ += v·dBv;
// dT = dU (βV)ᵀ + dW (βe^cK)ᵀ; dBk = TᵀdW → dK += βe^c dBk, dβ += e^c k·dBk,
// dc += βe^c k·dBk; dA = −Tᵀ (dT Tᵀ) on s < r: with G = KKᵀ, dβ_r += dA M G,
// dc_r += dA A, dc_s −= dA A, dK += E K + EᵀK for E = dA β_r M.
// Writes dV (into d_qkv's v columns), ws.db and, with its last part of dK,
// the tape's dk̂ of this v-head; accumulates ws.dc. Operands split once
// (tile::Split): T, dU, V and dW as loaded, K raw as prep split it
// (fetched; the factors β and βe^c of dT's columns applied to the
// accumulators); dBv and dBk never leave the registers (dV, dK and the row
// dots taken there); dT, dT Tᵀ and E split in place.
__global__ void __launch_bounds__(kThreads, 2) grads_wy_kernel(RecArgs a, ChunkWs ws) {
  using Wide = tile::Acc<kC, kD>;
  using Square = tile::Acc<kC, kC>;
  constexpr int kParts = Wide::kWarpCols;
  const Dims& g = a.g;
  const Pos p = pos_of_block(g);
  extern __shared__ __align__(128) float smem[];
  auto* planes = reinterpret_cast<__nv_bfloat16*>(smem);
  const Split T{planes, planes + kC * kLdSC, kLdSC};                     // [64][72]
  const Split X1{T.lo + kC * kLdSC, T.lo + kC * kLdSC + kC * kLdS, kLdS};  // dU, then dW; then G f32 [64][72]
  const Split X2{X1.lo + kC * kLdS, X1.lo + 2 * kC * kLdS, kLdS};          // V, then K
  float* Y1 = reinterpret_cast<float*>(X2.lo + kC * kLdS);  // [64][72]: dT, dT Tᵀ, dA, E (each split in place)
  float* Y2 = reinterpret_cast<float*>(X1.hi);              // G
  float* part = Y1 + kC * kLdP;                             // [64][kParts]
  float* c = part + kC * kParts;
  float* b = c + kC;
  float* dc = b + kC;  // [64]
  float* db = dc + kC;  // [64]
  const Split Y1s = split_planes(Y1, kC, kLdSC);
  const float* vsrc = a.tp.conv_out + v_col(g, p);
  float* dK = ws.dK + p.idx * kRowTile;
  const auto part_sum = [&](int r) {
    float t = 0.0f;
    for (int w = 0; w < kParts; ++w) t += part[r * kParts + w];
    return t;
  };
  fetch_scalars(ws.cb, p.idx, c);
  load_split_rows<kC, kC>(T, ws.T + p.idx * kSqTile, kC);
  load_split_rows(X1, ws.dU + p.idx * kRowTile, kD);
  load_split_rows(X2, vsrc, g.C, p.L, g.d);
  landed();
  __syncthreads();
  {  // dBv = Tᵀ dU: dV = β dBv, dβ = v·dBv
    Wide acc;
    acc.mma<kC, Col, Row>(T, X1);
    acc.visit_pairs([&](int r, int i, float2 v) {
      if (r < p.L) store_pair(a.d_qkv + v_col(g, p) + r * g.C + i, i, g.d, make_float2(b[r] * v.x, b[r] * v.y));
    });
    acc.row_sums([&](int r, int i, float v) { return (r < p.L && i < g.d) ? split_value(X2, r, i) * v : 0.0f; },
                 [&](int r, int w, float s) { part[r * kParts + w] = s; });  // v from X2's planes, not memory
  }
  Square dt;
  dt.mma<kD, Row, Col>(X1, X2);  // dU Vᵀ
  dt.scale_cols([&](int s) { return b[s]; });
  __syncthreads();  // [the parts visible; X1, X2 free]
  fetch_split_tile(X2, ws.Ks + p.kidx * kRowTile);
  if (threadIdx.x < kC) db[threadIdx.x] = part_sum(threadIdx.x);
  load_split_rows(X1, ws.dW + p.idx * kRowTile, kD);
  landed();  // K
  __syncthreads();
  {
    Square dw;
    dw.mma<kD, Row, Col>(X1, X2);  // dW Kᵀ
    dw.scale_cols([&](int s) { return b[s] * expf(c[s]); });
    dt.add(dw);
    dt.store(Y1, kLdP, 1.0f, false);
  }
  {  // dBk = Tᵀ dW: dK += βe^c dBk; kb = k·dBk
    Wide acc;
    acc.mma<kC, Col, Row>(T, X1);
    acc.update_pairs([&](int r, int i) { return *reinterpret_cast<const float2*>(dK + r * kD + i); },
                     [&](int r, int i, float2 v, float2 o) {
                       const float f = b[r] * expf(c[r]);
                       store_global2(dK + r * kD + i, make_float2(fmaf(f, v.x, o.x), fmaf(f, v.y, o.y)));
                     });
    acc.row_sums([&](int r, int i, float v) { return (r < p.L && i < g.d) ? split_value(X2, r, i) * v : 0.0f; },
                 [&](int r, int w, float s) { part[r * kParts + w] = s; });  // k from X2's planes
  }
  __syncthreads();  // parts and dT visible; X1 free
  if (threadIdx.x < kC) {
    const int r = threadIdx.x;
    const float kb = part_sum(r);
    db[r] += expf(c[r]) * kb;
    dc[r] = b[r] * expf(c[r]) * kb;
  }
  for_slots<kC, kC, 1>([&](int, int r, int s) {
    if (s > r) Y1[r * kLdP + s] = 0.0f;
  });
  __syncthreads();
  split_in_place(Y1);
  {  // X = dT Tᵀ, then dA = −Tᵀ X, each over its input in Y1
    Square x;
    x.mma<kC, Row, Col>(Y1s, T);
    __syncthreads();
    x.store(Y1, kLdP, 1.0f, false);
  }
  __syncthreads();
  split_in_place(Y1);
  {
    Square da;
    da.mma<kC, Col, Row>(T, Y1s);
    Square gk;
    gk.mma<kD, Row, Col>(X2, X2);  // G = KKᵀ
    gk.store(Y2, kLdP, 1.0f, false);
    __syncthreads();
    da.store(Y1, kLdP, -1.0f, false);
  }
  __syncthreads();
  {  // row sums dβ_r, dc_r; four threads per row, each a quarter of it
    const int r = threadIdx.x / 4, part4 = threadIdx.x % 4;
    float dbr = 0.0f, dcr = 0.0f;
    for (int s = part4; s < r && r < p.L; s += 4) {
      const float m = expf(c[r] - c[s]), da = Y1[r * kLdP + s], gg = Y2[r * kLdP + s];
      dbr = fmaf(da, m * gg, dbr);
      dcr = fmaf(da, b[r] * m * gg, dcr);
    }
    dbr = quad_sum(dbr);
    dcr = quad_sum(dcr);
    if (part4 == 0) {
      db[r] += dbr;
      dc[r] += dcr;
    }
  }
  __syncthreads();
  {  // column sums dc_s, the same way
    const int s = threadIdx.x / 4, part4 = threadIdx.x % 4;
    float dcs = 0.0f;
    for (int r = s + 1 + part4; r < p.L; r += 4) {
      const float m = expf(c[r] - c[s]);
      dcs = fmaf(Y1[r * kLdP + s], b[r] * m * Y2[r * kLdP + s], dcs);
    }
    dcs = quad_sum(dcs);
    if (part4 == 0) dc[s] -= dcs;
  }
  __syncthreads();
  for_slots<kC, kC, 1>([&](int, int r, int s) {
    Y1[r * kLdP + s] = (s < r && r < p.L) ? Y1[r * kLdP + s] * b[r] * expf(c[r] - c[s]) : 0.0f;
  });
  __syncthreads();
  split_in_place(Y1);
  {  // dK + E K + Eᵀ K, the last part of dK: into the tape
    Wide acc;
    acc.mma<kC, Row, Row>(Y1s, X2);
    acc.mma<kC, Col, Row>(Y1s, X2);
    add_to_tape(acc, dK, a.tp.dk_hat, g, p);
  }
  if (threadIdx.x < kC) {
    ws.dc[p.idx * kC + threadIdx.x] += dc[threadIdx.x];
    ws.db[p.idx * kC + threadIdx.x] = db[threadIdx.x];
  }
}

// finish (f): dℓ = reverse cumulative sum of dc in the chunk; d_a, d_b (dq̂
// and dk̂ per v-head were written by the state and attention grads and the WY grads).
__global__ void __launch_bounds__(kThreads) finish_kernel(RecArgs a, ChunkWs ws) {
  const Dims& g = a.g;
  const Pos p = pos_of_block(g);
  __shared__ float dl[kC];
  if (threadIdx.x < kC) dl[threadIdx.x] = ws.dc[p.idx * kC + threadIdx.x];
  __syncthreads();
  if (threadIdx.x == 0) {
    float run = 0.0f;
    for (int r = kC - 1; r >= 0; --r) {
      run += dl[r];
      dl[r] = run;
    }
  }
  __syncthreads();
  if (threadIdx.x < p.L) {
    const int r = threadIdx.x;
    const index_t th = (p.t0 + r) * g.hv + p.h;
    const float bet = a.tp.beta[th];
    a.d_b[th] = ws.db[p.idx * kC + r] * bet * (1.0f - bet);
    a.d_a[th] = dl[r] * -expf(a.a_log[p.h]) * sigmoidf_(a.tp.gate_in[th]);
  }
}

// Shared-memory bytes of each kernel (floats × 4).
constexpr std::size_t kScal = 2 * kC;
constexpr std::size_t kPrepSmem = 2 * 4 * kC * kLdS + 4 * (2 * kC * kLdP + kScal);
constexpr std::size_t kStateFwdSmem =
    4 * (kD * kLdSC + 4 * kSwizzledTile + kC * kLdSC + 2 * kC * kTV + 2 * kScalars);
constexpr std::size_t kOutSmem = 2 * 2 * (kC * kLdS + kD * kLdSC + 2 * kC * kLdSC) + 4 * kScal;
static_assert(kD * kLdSC >= kC * kLdS, "out: S₀'s planes hold K's");
constexpr std::size_t kDuSmem = 2 * 4 * kC * kLdS + 4 * (kC * kLdC + 2 * kScalars);
static_assert(kLdSC <= kLdS, "dU_local: K's planes hold P's");
constexpr std::size_t kStateBwdSmem =
    4 * (kD * kLdSC + 3 * kSwizzledTile + 2 * kC * kTV + 2 * kC * kLdSC + 2 * kScalars);
static_assert(kStateFwdSmem <= 227 * 1024 && kStateBwdSmem <= 227 * 1024, "state passes: one block per SM");
constexpr std::size_t kGradSaSmem =
    2 * 2 * (kD * kLdS + kC * kLdS) + 4 * (kC * tile::Acc<kC, kD>::kWarpCols + kScal + kC + 8);
static_assert(2 * kC * kLdC * 4 <= kD * kLdS * 2 && 2 * kC * kLdSC * 2 <= 2 * kC * kLdC * 4 &&
                  2 * kC * kD * 2 <= kD * kLdS * 2,
              "grads_sa: S's halves hold U or Q, and dP and P (then dP ⊙ M split)");
constexpr std::size_t kGradWySmem =
    2 * 2 * (kC * kLdSC + 2 * kC * kLdS) + 4 * (kC * kLdP + kC * tile::Acc<kC, kD>::kWarpCols + kScal + 2 * kC);

template <class Kernel>
void launch(Kernel k, dim3 grid, std::size_t smem, cudaStream_t s, const RecArgs& a, const ChunkWs& ws) {
  BR_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  k<<<grid, kThreads, smem, s>>>(a, ws);
  BR_CUDA_LAUNCHED();
}

// One block per (chunk, head): heads = g.hv, or g.hk for a kernel that
// serves all the v-heads of a k-head.
dim3 chunk_grid(const Dims& g, int heads) {  // (chunk, head) items, heads fastest: item_of
  const auto items = static_cast<std::size_t>(g.nb) * static_cast<std::size_t>((g.T + kC - 1) / kC) *
                     static_cast<std::size_t>(heads);
  if (items > 0x7fffffffu)
    fail("gdn: {} (chunk, head) items exceed the {} blocks of one CUDA grid; run fewer tokens per call", items,
         0x7fffffffu);
  return dim3(static_cast<unsigned>(items));
}
// All kD columns, also past head_dim: the later kernels read whole 128×128
// states, so the padding must hold zeros, not stale pool memory.
dim3 state_grid(const Dims& g) {
  return dim3(static_cast<unsigned>(kD / kTV), static_cast<unsigned>(g.hv), static_cast<unsigned>(g.nb));
}

// prep + the forward state pass: W, U, S₀ and T in the workspace.
void forward_states(const RecArgs& a, const ChunkWs& ws, cudaStream_t s) {
  launch(prep_kernel, chunk_grid(a.g, a.g.hv), kPrepSmem, s, a, ws);
  launch(state_fwd_kernel, state_grid(a.g), kStateFwdSmem, s, a, ws);
}

index_t chunk_count(const Dims& g) { return g.nb * ((g.T + kC - 1) / kC) * g.hv; }
index_t k_chunk_count(const Dims& g) { return g.nb * ((g.T + kC - 1) / kC) * g.hk; }  // (chunk, k-head) items

}  // namespace

std::size_t chunk_forward_floats(const Dims& g) {
  return static_cast<std::size_t>(chunk_count(g)) * (2 * kRowTile + kStateTile + kSqTile + kScalars) +
         static_cast<std::size_t>(k_chunk_count(g)) * 2 * kRowTile;
}

std::size_t chunk_backward_floats(const Dims& g) {
  return static_cast<std::size_t>(chunk_count(g)) * (3 * kRowTile + kStateTile + 2 * kC);
}

ChunkWs chunk_workspace(float* fwd, float* bwd, const Dims& g) {
  const auto nc = static_cast<std::size_t>(chunk_count(g)), nk = static_cast<std::size_t>(k_chunk_count(g));
  ChunkWs ws{};
  auto take = [](float*& at, float*& p, std::size_t items, index_t per) {
    p = at;
    at += items * static_cast<std::size_t>(per);
  };
  take(fwd, ws.W, nc, kRowTile);
  take(fwd, ws.U, nc, kRowTile);
  take(fwd, ws.S, nc, kStateTile);
  take(fwd, ws.T, nc, kSqTile);
  take(fwd, ws.cb, nc, kScalars);
  take(fwd, ws.Ks, nk, kRowTile);
  take(fwd, ws.Qs, nk, kRowTile);
  if (bwd) {
    take(bwd, ws.dU, nc, kRowTile);
    take(bwd, ws.dW, nc, kRowTile);
    take(bwd, ws.dK, nc, kRowTile);
    take(bwd, ws.dh, nc, kStateTile);
    take(bwd, ws.dc, nc, kC);
    take(bwd, ws.db, nc, kC);
  }
  return ws;
}

void chunk_forward(const RecArgs& a, const ChunkWs& ws, cudaStream_t s) {
  forward_states(a, ws, s);
  launch(out_kernel, chunk_grid(a.g, a.g.hk), kOutSmem, s, a, ws);
}

void chunk_backward(const RecArgs& a, const ChunkWs& ws, bool recompute, cudaStream_t s) {
  if (recompute) forward_states(a, ws, s);
  const dim3 cg = chunk_grid(a.g, a.g.hv);
  launch(du_local_kernel, chunk_grid(a.g, a.g.hk), kDuSmem, s, a, ws);
  launch(state_bwd_kernel, state_grid(a.g), kStateBwdSmem, s, a, ws);
  launch(grads_sa_kernel, cg, kGradSaSmem, s, a, ws);
  launch(grads_wy_kernel, cg, kGradWySmem, s, a, ws);
  launch(finish_kernel, cg, 0, s, a, ws);
}

}  // namespace bitrank::cuda::gdn
