// What every student block holds besides its op sequence (DESIGN §7): its
// BLR projections (BlrLinear) and its trained norm gains in one arena
// (arena.hpp), with the gradient bookkeeping and the optimizer step that do
// not depend on the block's ops. StudentLlamaBlock and StudentHybridBlock
// are each an op sequence over one of these.
//
// Arena layout, in carving order:
//   state       each projection's state (in the order given), the gains
//               [G] and their Adam moments [G] ×2, then whatever the block's
//               `extra` callback takes (frozen tensors: they travel with the
//               state, so a checkpoint or a streamed block is one copy)
//   grads       each projection's scale gradients, then the gains' [G]
//   sign_grads  each projection's G_U, G_V
//
// zero_grad is one memset of the grads region; grad_squares one reduction
// of it (every Adam-trained gradient and zero padding) and one of the
// sign_grads region when every projection's sign gradients were written
// since zero_grad (else the written ones are summed one by one).
// step: each projection's Adam on its scales and sign step, then Adam on
// the gains (absolute steps), all at one t.
//
// Streaming (model/streamed_weights.hpp, e2e.hpp): the arena may be placed
// in a caller's bytes (a zeroed device slot) instead of an allocation of
// its own, and moved: rebind(base) carves every view again over the same
// layout at `base`, where the caller copied the arena's bytes (one copy:
// state, grads and sign grads together).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "bitrank/backend.hpp"
#include "bitrank/train/arena.hpp"
#include "bitrank/train/blr_linear.hpp"

namespace bitrank::train {

struct StudentGradSquares {
  double adam = 0;   // Σ of squared gradients of every BLR scale and gain
  double signs = 0;  // Σ of squared sign gradients G_U, G_V of every projection
};

template <class T>
class StudentArena {
 public:
  // Places the projections of `projs` (sign ids from sign_id, two per path
  // of each), `gains` gains, then calls extra(state carver) — once while
  // measuring (null pointers) and once over the allocation. Everything is
  // zero until the block uploads it. `who` names the block in errors.
  // place: the arena at `place` (bytes(…) bytes of the backend's memory,
  // zeroed; a streamed block's slot) instead of an allocation of its own.
  StudentArena(Backend<T>& be, std::span<const BlrDims> projs, index_t gains, SignOptimizer sign_optimizer,
               std::uint32_t sign_id, std::string who, const std::function<void(Carver& state)>& extra = {},
               std::byte* place = nullptr);
  // The bytes such an arena takes.
  static std::size_t bytes(std::span<const BlrDims> projs, index_t gains, SignOptimizer sign_optimizer,
                           const std::function<void(Carver& state)>& extra = {});
  StudentArena(const StudentArena&) = delete;
  StudentArena& operator=(const StudentArena&) = delete;

  Backend<T>& backend() const { return *be_; }
  std::size_t projs() const { return proj_.size(); }
  BlrLinear<T>& proj(std::size_t i) { return proj_[i]; }
  const BlrLinear<T>& proj(std::size_t i) const { return proj_[i]; }
  View<T> gains() const { return gains_; }            // [G]
  View<T> gain_grads() const { return gain_grads_; }  // [G]

  // The gains from the host (rounded to T); their Adam moments zeroed.
  void upload_gains(const std::vector<float>& values);
  std::vector<float> download_gains() const;

  void zero_grad();
  StudentGradSquares grad_squares() const;
  // gains.step must equal scales.step. Returns the sign flips.
  std::int64_t step(const AdamOptions& scales, const AdamOptions& gains, const SignOptions& signs);

  std::vector<std::byte> download_state() const;
  void upload_state(std::span<const std::byte> bytes);
  std::size_t state_bytes() const { return arena_.state_bytes(); }  // what download_state returns

  // Moving the whole arena (state, grads, sign grads): after rebind(base)
  // every view reads the arena's bytes at `base`, where the caller copied
  // them (streaming; an allocation of its own is freed).
  void rebind(std::byte* base);

 private:
  struct GainViews {
    View<T> gains, m, v, grads;
  };
  // The carving after the projections': gains, their moments and gradients, the extra tensors.
  static GainViews carve_gains(ArenaRegions& at, index_t gains, const std::function<void(Carver& state)>& extra);
  // Pass 1: the regions' sizes.
  static ArenaRegions measure(std::span<const BlrDims> projs, index_t gains, SignOptimizer sign_optimizer,
                              const std::function<void(Carver& state)>& extra);
  void carve_rest(ArenaRegions& at);  // carve_gains into the members

  Backend<T>* be_;
  std::string who_;
  index_t gain_count_;
  std::function<void(Carver& state)> extra_;
  Arena arena_;
  std::vector<BlrLinear<T>> proj_;
  View<T> gains_, gains_m_, gains_v_, gain_grads_;
};

extern template class StudentArena<float>;
extern template class StudentArena<double>;

}  // namespace bitrank::train
