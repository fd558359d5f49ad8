// Calibration statistics of a teacher: the rms of every input column of
// every compressible projection, over calibration windows — what the
// activation-weighted initialisation (blr/init.hpp, column_scale) and the
// output-error diagnosis read.
//
// The teacher runs block by block over all calibration rows at once
// (embeddings → block 0 → … → block L−1, its own hidden states feeding the
// next block); after each block forward, the projection inputs still in
// its activations are reduced on the backend (col_sum_prod, accumulate):
//   Llama:  q, k, v ← norm1(x);  o ← attention output;  gate, up ← norm2(h);
//           down ← silu(gate)·up;
//   hybrid: q, k, v, GDN qkv and z ← norm1(x);  o ← attention ⊙ σ(gate);
//           GDN out ← the gated-normed core output;  gate, up, down as Llama.
// rms_j = √(Σ_t x_tj² / rows). Device memory: one block's activations over
// the calibration rows, and the rows' hidden states twice.
//
// With grams, also each distinct projection input's Gram C = XᵀX/N + λI
// over its first N ≤ kGramRows rows (the projections reading one input
// share one matrix): what the output-error refinement minimises under
// (blr/refine.hpp). λ = 1 % of C's mean diagonal (GPTQ's damping), so that
// directions the calibration rows never excite keep some weight. Formed on
// the host (OpenBLAS ssyrk on the rows read back); host memory: n² floats per
// distinct input and block (0.4 GB for SmolLM2-135M, 22 GB for a 7B Llama).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "bitrank/model/model.hpp"

namespace bitrank::train {

inline constexpr index_t kGramRows = 65536;  // calibration rows a Gram reads, at most
inline constexpr double kGramDamping = 0.01;  // λ as a fraction of the Gram's mean diagonal

// Per projection name (blk.N.<proj>, only the compressible ones): the rms
// of each input column, and with `grams` the input's Gram [n][n].
struct ProjectionInputs {
  std::map<std::string, std::vector<float>> rms;
  std::map<std::string, std::shared_ptr<const std::vector<float>>> gram;
};

// The statistics over `ids` cut into windows of `window` tokens (Error when
// ids is empty or not whole windows, or the model is of neither family).
ProjectionInputs projection_inputs(const model::DecoderModel<float>& teacher, std::span<const std::int32_t> ids,
                                   index_t window, bool grams);

// The column scale the activation-weighted initialisation uses for input
// rms values: rms floored at 1e-3 × their mean (a dead column keeps a weight).
std::vector<float> column_scale_from_rms(std::span<const float> rms);

}  // namespace bitrank::train
