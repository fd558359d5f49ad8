// The decoder projections of a model, dense or compressed, for every family
// (DESIGN §1, §2, §7): which projections a compressor turns into BLR
// matrices, the weight check of a model some of whose projections are BLR,
// and one projection on a backend.
//
// Compressible projections (compressible_projections, in load order: block
// by block, each block's in forward order):
//   dense Llama   blk.N.{attn_q, attn_k, attn_v, attn_output, ffn_gate, ffn_up, ffn_down}
//                 (is_llama_projection)
//   hybrid        gated attention blocks: blk.N.{attn_q, attn_k, attn_v, attn_output};
//                 GDN blocks: blk.N.{attn_qkv, attn_gate, ssm_out} (in_proj_qkv, in_proj_z,
//                 out_proj); every block: blk.N.{ffn_gate, ffn_up, ffn_down}.
//                 The GDN's b and a projections (ssm_beta, ssm_alpha: Hv outputs each)
//                 stay dense, as do embeddings, head, norms and the GDN core.
// Names are the tensor names without ".weight" — the keys of BlrProjections
// and of the bitrank format's BLR matrices.
//
// Projection<T> on a backend: out [n][m] = in [n][n_in]·Wᵀ (overwritten),
// W [m][n_in] either a dense weight (dense_forward; rows = outputs) or a BLR
// matrix (blr_infer: signs as bitmaps, the f32 scales rounded to T; no
// tape). A BLR projection's tensors are one bitmap per factor, [P][m][r/32]
// and [P][n_in][r/32], and one scale vector [P][m + r + n_in] (h, ℓ, g of
// each path in turn), carved from the block's allocation. A loaded bitrank
// model (WeightForm, decoder.hpp) keeps that scale vector in f16
// (BlrPath::scales16) and a dense weight in f16 (dense_forward_f16):
// the host's f32 values rounded to f16, exact for values read from an F16 file.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "bitrank/backend.hpp"
#include "bitrank/blr/accounting.hpp"
#include "bitrank/blr/blr_matrix.hpp"
#include "bitrank/model/decoder.hpp"

namespace bitrank::model {

// A compressed model's projections: BLR matrices by projection name, the
// tensor name without ".weight" (blk.3.attn_q), as the bitrank format keeps them.
using BlrProjections = std::map<std::string, blr::HostBlrMatrix>;

// The names and shapes of every tensor a model of config's family needs:
// expected_tensors (dense Llama, model.hpp) or hybrid_expected_tensors (hybrid.hpp).
TensorList model_tensors(const ModelConfig& config);

// Every projection of config's model that may be a BLR matrix (see above),
// as rank-plan entries {name without ".weight", m (rows), n (columns), rank 0}:
// what blr::plan_ranks takes. Error for a config its family's model would
// refuse.
std::vector<blr::RankPlan> compressible_projections(const ModelConfig& config);

// Whether a tensor name is a decoder projection of a dense Llama-style
// model: blk.N.{attn_q,attn_k,attn_v,attn_output,ffn_gate,ffn_up,ffn_down}.weight.
bool is_llama_projection(const std::string& name);

// The bit accounting (blr/accounting.hpp) of a dense Llama-style model
// (expected_tensors) with every decoder projection compressed at the ranks
// blr::plan_ranks gives for `bpw`, and every other tensor (token
// embeddings, untied head, norms) dense at `dense_bits`. A tied head is the
// embedding table and counts once.
blr::ModelBits llama_model_bits(const ModelConfig& config, double bpw, int paths, int scale_bits, int dense_bits);

// Checks a model of any family whose projections named in `blr` are BLR
// matrices: the family's config checks; every matrix names a compressible
// projection (above), has its shape and passes blr::check_blr; every other
// tensor of model_tensors is present with its shape and finite values (the
// dense tensors of the BLR projections may be absent and are not read).
// Error naming w.source and the tensor.
void check_weights(const HostWeights& w, const BlrProjections& blr);

// Values uploaded to `mem`, rounded to T (float, double or f16).
template <class T>
Buffer<T> upload_values(Memory& mem, std::span<const float> values);
// The next values.size() elements of T carved from `at`, and, unless `at`
// is measuring, the values written there through `mem` (rounded to T).
template <class T>
CView<T> place_values(Memory& mem, Carver& at, std::span<const float> values);

// A projection's weights are views into its block's one allocation (the
// models carve each block from one: a device buffer, or a block image in
// host memory that streaming copies into a device slot, model/streamed_weights.hpp).
template <class T>
class Projection {
 public:
  Projection() = default;  // empty: a projection the block does not have
  // A dense weight [m][n_in] carved from `at` (Error unless `w` is a
  // matrix), its values written through `mem` unless `at` is measuring;
  // as f16 with `half`, else as T.
  static Projection dense(Memory& mem, Carver& at, const HostTensor& w, const std::string& name, bool half = false);
  // A BLR matrix (checked by blr::check_blr, naming `name`), likewise:
  // bitmaps [P][m][r/32], [P][n_in][r/32], then the scales [P][m + r + n_in]
  // (as f16 with form.f16_scales, else as T); with form.sign_blocks, the
  // sign blocks of each path (u, then vt; ops/bitmap.hpp) in place of the
  // bitmaps, after the scales.
  static Projection blr(Memory& mem, Carver& at, const blr::HostBlrMatrix& w, const std::string& name,
                        WeightForm form = {});

  // The same projection over a copy of its block's bytes: every view moved
  // from the allocation at `from` to the same offset at `to`.
  Projection rebased(const std::byte* from, std::byte* to) const;

  bool empty() const { return rows_ == 0; }
  bool is_blr() const { return !paths_.empty(); }
  index_t rows() const { return rows_; }  // m, outputs
  index_t cols() const { return cols_; }  // n_in, inputs
  index_t rank() const { return rank_; }  // 0 when dense
  index_t paths() const { return static_cast<index_t>(paths_.size()); }

  // out [n][rows] = in [n][cols]·Wᵀ (the op checks the shapes).
  void forward(Backend<T>& be, CView<T> in, View<T> out) const;

 private:
  index_t rows_ = 0, cols_ = 0, rank_ = 0;
  const T* dense_ = nullptr;
  const f16* dense16_ = nullptr;   // the dense weight when kept in f16
  std::vector<BlrPath<T>> paths_;  // views into the block's allocation

  // Each path's sign blocks from `h`, carved after the scales (WeightForm::sign_blocks).
  void place_sign_blocks(Memory& mem, Carver& at, const blr::HostBlrMatrix& h);
};

extern template class Projection<float>;
extern template class Projection<double>;

}  // namespace bitrank::model
