// Parity cases of the sign bitmaps: exact on every backend.
#include "support/parity.hpp"

namespace bitrank::test {
namespace {

void expand_case(ParityRun& p, index_t rows, index_t r) {
  auto bits = p.input_bits({rows, sign_words(r)});
  auto plane = p.output_f16({rows, r});
  auto plane_t = p.output_f16({r, rows});
  p.ref.bitmap().expand_signs(bits.ref(), r, plane.ref(), plane_t.ref());
  p.be.bitmap().expand_signs(bits.be(), r, plane.be(), plane_t.be());
  p.expect_equal("plane", plane);
  p.expect_equal("plane_t", plane_t);
}

void pack_case(ParityRun& p, index_t rows, index_t r) {
  // Values with exact zeros among them: sign(0) = +1.
  auto v = p.random(static_cast<std::size_t>(rows * r), 1.0f);
  for (std::size_t i = 0; i < v.size(); i += 7) v[i] = (i % 14) ? 0.0f : -0.0f;
  auto signs = p.input({rows, r}, v);
  auto bits = p.output_bits({rows, sign_words(r)});
  p.ref.bitmap().pack_signs(signs.ref(), bits.ref());
  p.be.bitmap().pack_signs(signs.be(), bits.be());
  p.expect_equal("bits", bits);
}

}  // namespace

BR_PARITY_CASE(expand_signs_256x128) { expand_case(p, 256, 128); }
BR_PARITY_CASE(expand_signs_37x96) { expand_case(p, 37, 96); }
BR_PARITY_CASE(expand_signs_5x40_tail) { expand_case(p, 5, 40); }  // rank not a multiple of 32: tail word
BR_PARITY_CASE(pack_signs_384x128) { pack_case(p, 384, 128); }
BR_PARITY_CASE(pack_signs_3x50_tail) { pack_case(p, 3, 50); }

}  // namespace bitrank::test
