// The CUDA backend's bit-reading BLR inference for few tokens (blr_infer up
// to kBlrInferBitTokens; contract and numerics in include/bitrank/ops/blr.hpp,
// design in blr_infer.cu). Owned by the backend's BLR ops (blr.cu), which run
// blr_forward's GEMMs for the layers this kernel does not take.
#pragma once

#include <cstdint>

#include "bitrank/ops/blr.hpp"
#include "cuda/runtime.hpp"

namespace bitrank::cuda {

class BlrBitInfer {
 public:
  explicit BlrBitInfer(Context& ctx) : ctx_(ctx) {}

  // Whether run takes this layer at ntok tokens: at most kBlrInferBitTokens
  // tokens, at most kMaxPaths paths, and one token's ℓ⊙a of every path fits
  // the row pass's shared memory (r up to ~12k at two paths).
  static bool takes(const BlrLayer<float>& layer, index_t ntok);

  // y[ntok][m] (overwritten) = the layer applied to x[ntok][n], reading the
  // sign bitmaps; queued on the context's stream. Requires takes().
  void run(const BlrLayer<float>& layer, CView<float> x, View<float> y);

  static constexpr int kMaxPaths = 4;

 private:
  Context& ctx_;
  Buffer<float> partial_;       // the rank pass's per-chunk sums [P][chunks][ntok][32·words]
  Buffer<float> c_;             // ℓ⊙a [P][ntok][32·words], zero past r
  Buffer<std::uint32_t> done_;  // per (path, word group): chunks finished; back to 0 after each call
  int sms_ = 0;                 // the device's multiprocessors, read on the first call
};

}  // namespace bitrank::cuda
