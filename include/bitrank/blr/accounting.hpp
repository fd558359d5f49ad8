// Honest bit accounting of BLR matrices and whole models (DESIGN §1).
//
// One path of an m×n BLR matrix at rank r stores
//     sign bits      (m + n)·r          S_U [m][r] and S_V [n][r], 1 bit each
//     scale values   m + r + n          h [m], ℓ [r], g [n], each at the scale
//                                       width b (16 for f16, 32 for f32)
// so P paths store
//     bits(m, n, r, P, b) = P·((m + n)·r + (m + n + r)·b)
// and the matrix costs bpw = bits / (m·n) bits per weight. Nothing is left
// out: the second path's scales count as much as the first's.
//
// rank_for_bpw(m, n, target, P, b) is the largest multiple of 32 whose
// bpw ≤ target, i.e. r ≤ (target·m·n/P − (m + n)·b) / (m + n + b) rounded
// down to 32 (then checked in exact integer bits, so a rank that lands
// exactly on the target is taken). It is the budget alone: the rank may
// exceed min(m, n), which plan_ranks never gives (below). Error when even
// r = 32 exceeds the target.
//
// A whole model's ranks (plan_ranks): each matrix's rank is at most its cap,
// max_useful_rank(m, n) = the largest multiple of 32 ≤ min(m, n) (32 when
// min(m, n) < 32): the Dual-SVID initialisation takes the rank's leading
// singular pairs, and past min(m, n) there are none (their scales start at
// 0), so those ranks cost bits and give the factorisation nothing. The
// reachable targets of a set of matrices therefore run from rank 32
// everywhere (the smallest rank the format has) to every rank at its cap: a
// target outside is an Error naming that end's bpw and why (for SmolLM2-135M
// with 2 paths and f16 scales, 0.2781 to 3.1007 bpw), rather than a model
// that silently misses it. Within, every projection first gets
// min(rank_for_bpw for its own shape, its cap), or 32 when even 32 exceeds
// the target (small matrices such as SmolLM2's 192×576 k/v at 0.55 bpw
// with 2 paths). When that leaves the projections' honest total above
// target·Σ m·n, ranks are lowered 32 at a time, always at the matrix with
// the highest bpw (ties: the larger matrix, then the earlier name), until
// the total fits; then the bits left over are handed back 32 ranks at a time
// to the lowest-bpw matrix whose next step still fits and stays within its
// cap, until none does. The result's bpw is what the report states, never
// the target.
//
// The whole-model figure (ModelBits) adds every tensor that is not
// compressed (embeddings, head, norms, …) at its stored width: bits = Σ BLR
// bits + Σ numel·width, over Σ m·n + Σ numel weights. Which tensors a model
// has is the model layer's to say (model::llama_model_bits): this file
// knows shapes and names only.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "bitrank/tensor.hpp"

namespace bitrank::blr {

// The formula alone, unchecked (header-only so that readers outside src/blr,
// such as the bitrank format, count with the same expression).
inline std::uint64_t honest_bits(std::int64_t m, std::int64_t n, std::int64_t r, std::int64_t paths,
                                 std::int64_t scale_bits) {
  const auto u = [](std::int64_t v) { return static_cast<std::uint64_t>(v); };
  return u(paths) * (u(r) * (u(m) + u(n)) + u(scale_bits) * (u(m) + u(r) + u(n)));
}

// Bits of one BLR matrix (all paths). Error for m, n < 1, r not a positive
// multiple of 32, paths not 1 or 2, scale_bits not 16 or 32.
std::int64_t blr_bits(index_t m, index_t n, index_t r, int paths, int scale_bits);
double blr_bpw(index_t m, index_t n, index_t r, int paths, int scale_bits);

// The largest multiple of 32 with blr_bpw ≤ bpw (see above); Error naming
// the shape, target and the bpw of rank 32 when none fits, or for a
// non-finite or non-positive target.
index_t rank_for_bpw(index_t m, index_t n, double bpw, int paths, int scale_bits);

// One matrix of a rank plan: the tensor's name and shape, and its rank.
struct RankPlan {
  std::string name;
  index_t m = 0, n = 0;
  index_t rank = 0;
};

// The largest rank plan_ranks gives an m×n matrix (see above).
index_t max_useful_rank(index_t m, index_t n);

// Ranks for every matrix of `matrices` (their rank fields are ignored) at a
// whole-projection target (see above). Error for an empty list, a bad
// target, paths or scale width, or a target outside the reachable range
// (naming the smallest reachable or the largest useful bpw).
std::vector<RankPlan> plan_ranks(std::vector<RankPlan> matrices, double bpw, int paths, int scale_bits);

// A per-projection target: the matrices whose name contains `pattern`
// ("attn_v", "ffn_down", "blk.3.", a full name) are planned at `bpw`
// instead of the global target.
struct BpwOverride {
  std::string pattern;
  double bpw = 0;
};

// plan_ranks with overrides: each matrix takes the first override whose
// pattern its name contains; the matrices of each override are planned
// together at its bpw (plan_ranks), then the others together at the bpw
// that brings all the matrices to `bpw` (the bits the overridden groups
// leave), so `bpw` stays the whole's target. The result keeps the input's
// order. Error (naming it) for an empty pattern, a pattern no matrix
// matches, overrides that take the whole budget, or a bad or unreachable
// target (naming the group: "the matrices matching 'attn_v'" or "the
// matrices no per-projection pattern matches").
std::vector<RankPlan> plan_ranks(std::vector<RankPlan> matrices, double bpw, std::span<const BpwOverride> overrides,
                                 int paths, int scale_bits);

// One tensor of a model's accounting: compressed (rank > 0) or dense.
struct TensorBits {
  std::string name;
  index_t weights = 0;    // m·n, or numel for a dense tensor
  std::int64_t bits = 0;  // as stored
  index_t m = 0, n = 0;   // compressed: the matrix shape
  index_t rank = 0;       // 0: dense
  int paths = 0;          // compressed: 1 or 2
  int width = 0;          // scale bits (compressed) or value bits (dense)
};

class ModelBits {
 public:
  void add_blr(std::string name, index_t m, index_t n, index_t rank, int paths, int scale_bits);
  // A tensor kept dense at `bits_per_value` bits (16 for f16/bf16, 32 for f32).
  void add_dense(std::string name, index_t numel, int bits_per_value);

  const std::vector<TensorBits>& tensors() const { return tensors_; }
  std::int64_t bits() const;         // everything
  index_t weights() const;           // everything
  double bpw() const;                // whole model
  std::int64_t blr_bits() const;     // compressed tensors only
  index_t blr_weights() const;
  double blr_bpw() const;            // compressed tensors only (0 when none)

 private:
  std::vector<TensorBits> tensors_;
};

}  // namespace bitrank::blr
