// One allocation per trainable layer (DESIGN §3), carved into its tensors.
//
// A layer's tensors fall into three regions, each contiguous:
//
//   state       parameters and optimizer state (sign bitmaps, scales, norm
//               gains, Adam moments, sign latents and their optimizer
//               state): what a checkpoint saves and streaming moves, so
//               either is one copy
//   grads       gradients of the Adam-trained parameters (BLR scales, norm
//               gains): zero_grad is one memset, their sum of squares one
//               reduction
//   sign_grads  the sign gradients G_U, G_V (overwritten by the backward)
//
// Sizing is two passes over the same carving code: first with Carvers
// without a base (they only measure), then over the allocation. Every
// tensor starts on a kAlign boundary (vector loads on any backend); the
// allocation is zeroed once, so the padding between tensors is zero and a
// whole region can be reduced as one vector of T. Carver itself is
// memory.hpp's (the models carve their blocks with it too).
#pragma once

#include <cstddef>
#include <cstdint>

#include "bitrank/memory.hpp"

namespace bitrank::train {

using bitrank::Carver;  // memory.hpp

struct ArenaRegions {
  Carver state, grads, sign_grads;
};

// The allocation: regions of the measured sizes, back to back, zeroed — or,
// placed (streaming), the same bytes at a caller's address: a zeroed device
// slot at first, wherever the block's slot is later (rebind).
class Arena {
 public:
  Arena() = default;
  Arena(Memory& mem, const ArenaRegions& measured)
      : state_bytes_(measured.state.size()),
        grads_bytes_(measured.grads.size()),
        sign_bytes_(measured.sign_grads.size()),
        storage_(mem, state_bytes_ + grads_bytes_ + sign_bytes_) {
    storage_.zero();
    base_ = storage_.data();
  }
  // Placed at `base` (bytes() bytes, zeroed by the caller); owns nothing.
  Arena(const ArenaRegions& measured, std::byte* base)
      : state_bytes_(measured.state.size()),
        grads_bytes_(measured.grads.size()),
        sign_bytes_(measured.sign_grads.size()),
        base_(base) {}

  // From now on the arena's bytes are at `base` (the caller copied them
  // there); an allocation of its own is freed.
  void rebind(std::byte* base) {
    storage_.reset();
    base_ = base;
  }

  // Carvers at the start of each region, for the second pass.
  ArenaRegions carvers() const { return {Carver(state()), Carver(grads()), Carver(sign_grads())}; }

  std::byte* state() const { return base_; }
  std::byte* grads() const { return base_ + state_bytes_; }
  std::byte* sign_grads() const { return grads() + grads_bytes_; }
  std::size_t state_bytes() const { return state_bytes_; }
  std::size_t grads_bytes() const { return grads_bytes_; }
  std::size_t sign_grads_bytes() const { return sign_bytes_; }
  std::size_t bytes() const { return state_bytes_ + grads_bytes_ + sign_bytes_; }

 private:
  std::size_t state_bytes_ = 0, grads_bytes_ = 0, sign_bytes_ = 0;
  Buffer<std::byte> storage_;
  std::byte* base_ = nullptr;
};

// A region as a flat vector of T (its size is a multiple of kAlign).
template <class T>
View<T> region_as(std::byte* p, std::size_t bytes) {
  return View<T>(reinterpret_cast<T*>(p), Shape{static_cast<index_t>(bytes / sizeof(T))});
}

}  // namespace bitrank::train
