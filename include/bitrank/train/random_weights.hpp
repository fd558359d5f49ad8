// Random BLR matrices and student blocks: the inputs of tests and of the
// benchmarks that time training without a model file (bitrank bench's
// "layer-wise step"). Deterministic per seed (XorShift); the scales are
// sized so that a block's activations keep their size.
#pragma once

#include <array>
#include <cstdint>

#include "bitrank/blr/blr_matrix.hpp"
#include "bitrank/train/student_block.hpp"

namespace bitrank::train {

// Random signs; scales sized so that Ŵx has entries of about out_scale·|x|
// for unit-variance x: h, g ∈ (0.5, 1.5), ℓ ∈ (0.5, 1.5)·out_scale/√(n·r·P).
blr::HostBlrMatrix random_blr(index_t m, index_t n, index_t r, index_t paths, std::uint64_t seed,
                              double out_scale = 1.0);

// A student block of random BLR projections (rank ranks[p] for projection p
// in LlamaProj order, `paths` paths; the residual branches o and down of
// about half the input's size) and gains in (0.8, 1.2).
StudentBlockWeights random_student(const model::LlamaBlockDims& dims, const std::array<index_t, model::kLlamaProjs>& ranks,
                                   index_t paths, std::uint64_t seed);
// The same with one rank r for every projection.
StudentBlockWeights random_student(const model::LlamaBlockDims& dims, index_t r, index_t paths, std::uint64_t seed);

}  // namespace bitrank::train
