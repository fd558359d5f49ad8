// Test fixtures of the trainable BLR layer and the student blocks: random
// BLR matrices and student blocks (from the library), a one-block dense teacher built
// from them (Ŵ by blr::reconstruct); a hybrid teacher holding a student
// hybrid block's expansion.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bitrank/blr/blr_matrix.hpp"
#include "bitrank/model/model.hpp"
#include "bitrank/train/blr_linear.hpp"
#include "bitrank/train/random_weights.hpp"
#include "bitrank/train/student_block.hpp"
#include "bitrank/train/student_hybrid_block.hpp"

namespace bitrank::test {

// The worst relative L2 error, over the paths of `proj` (host-visible
// memory: the ref backend), of the exact identities between its sign and
// scale gradients: Σ_k s_ik·G_U[i][k] = h_i·dh_i, Σ_i s_ik·G_U[i][k] = ℓ_k·dℓ_k,
// Σ_k s_jk·G_V[j][k] = g_j·dg_j (the sign gradients are then as right as the
// scale gradients a gradient check verified).
double sign_grad_identity_error(const train::BlrLinear<double>& proj);

// hidden 64, 2 heads / 1 kv head of 32, MLP 96, eps 1e-5, θ 10⁴.
model::LlamaBlockDims tiny_block_dims();

// Random BLR matrices and student blocks (the library's: benchmarks use them too).
using train::random_blr;
using train::random_student;

// `w` with the projections named in `names` replaced by random 2-path BLR
// matrices of rank 32 (seeds seed, seed + 1, …; the dense tensors
// removed), as a bitrank file would hold them.
model::BlrProjections compress_randomly(model::HostWeights& w, const std::vector<std::string>& names,
                                        std::uint64_t seed);

// A one-block dense model whose block has the student's expanded weights
// and gains (embeddings and head random: the block is all a test uses).
model::HostWeights teacher_of(const model::LlamaBlockDims& dims, const train::StudentBlockWeights& w);
// A dense model of one block per entry of `blocks` (each the expanded
// weights and gains of that student block), vocabulary `vocab`, the head
// tied to the embedding or not; embedding, head and final norm drawn from
// `seed` (entries in (−1, 1); the final norm's in (0.8, 1.2)).
model::HostWeights teacher_of(const model::LlamaBlockDims& dims, const std::vector<train::StudentBlockWeights>& blocks,
                              index_t vocab, bool tied, std::uint64_t seed);

// `base` (hybrid weights) with block b replaced by the student's: each BLR
// projection by its expansion Ŵ (rounded to f32), the gains and the frozen
// tensors by w's.
model::HostWeights hybrid_teacher_of(const model::HostWeights& base, index_t b, const train::StudentHybridWeights& w);

}  // namespace bitrank::test
