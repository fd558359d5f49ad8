// ggml's Q8_0 quantisation (quantize_row_q8_0 as its C source states it: d =
// amax/127 stored as f16, q = round(v · 1/d) with the unrounded d), for tests
// that need a matrix a GGUF would hold as Q8_0: the values a teacher's Q8_0
// tensor dequantises to.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

#include "bitrank/q8_0.hpp"

namespace bitrank::test {

inline std::vector<q8_0> ggml_q8_0(const std::vector<float>& v) {
  std::vector<q8_0> out(v.size() / kQ8Block);
  for (std::size_t b = 0; b < out.size(); ++b) {
    float amax = 0;
    for (std::int64_t i = 0; i < kQ8Block; ++i) amax = std::max(amax, std::fabs(v[b * kQ8Block + i]));
    const float d = amax / 127.0f, id = d != 0 ? 1.0f / d : 0.0f;
    out[b].d = to_f16(d);
    for (std::int64_t i = 0; i < kQ8Block; ++i)
      out[b].q[i] = static_cast<std::int8_t>(std::lround(v[b * kQ8Block + i] * id));
  }
  return out;
}

// v replaced by the values of its ggml Q8_0 blocks.
inline std::vector<float> as_ggml_q8_0(const std::vector<float>& v) {
  std::vector<float> out(v.size());
  dequantize_q8_0(ggml_q8_0(v), out);
  return out;
}

}  // namespace bitrank::test
