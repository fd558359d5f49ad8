// A Gated DeltaNet layer's configuration in one call, for the GDN op tests
// (tests/gdn_test.cpp, gdn_cuda_test.cpp, parity/gdn_cases.cpp).
#pragma once

#include "bitrank/ops/gdn.hpp"

namespace bitrank::test {

// hk k-heads, hv v-heads of width d, a conv of K taps, windows of T tokens,
// a state checkpoint every ckpt_every tokens.
inline GdnConfig gdn_config(index_t hk, index_t hv, index_t d, index_t K, index_t T, index_t ckpt_every) {
  GdnConfig c;
  c.k_heads = hk;
  c.v_heads = hv;
  c.head_dim = d;
  c.conv_kernel = K;
  c.window = T;
  c.ckpt_every = ckpt_every;
  return c;
}

}  // namespace bitrank::test
