// Sign bitmaps: pack → expand round trip on every backend, and bad input.
#include <gtest/gtest.h>

#include "bitrank/rng.hpp"
#include "support/backends.hpp"

namespace bitrank {
namespace {

TEST(Bitmap, PackExpandRoundTrip) {
  for (const auto& name : test::available_backends()) {
    auto& be = test::backend(name);
    const index_t rows = 19, r = 96;
    auto v = rnd(static_cast<std::size_t>(rows * r), 5, 1.0f);
    Buffer<float> signs(*be.memory, v.size());
    signs.upload(v);
    Buffer<std::uint32_t> bits(*be.memory, static_cast<std::size_t>(rows * sign_words(r)));
    Buffer<f16> plane(*be.memory, static_cast<std::size_t>(rows * r)), plane_t(*be.memory, static_cast<std::size_t>(rows * r));
    be.bitmap().pack_signs(signs.view({rows, r}), bits.view({rows, sign_words(r)}));
    be.bitmap().expand_signs(bits.view({rows, sign_words(r)}), r, plane.view({rows, r}), plane_t.view({r, rows}));
    const auto pl = plane.download(), pt = plane_t.download();
    int bad = 0;
    for (index_t i = 0; i < rows; ++i)
      for (index_t k = 0; k < r; ++k) {
        const float want = v[static_cast<std::size_t>(i * r + k)] >= 0 ? 1.0f : -1.0f;
        bad += to_f32(pl[static_cast<std::size_t>(i * r + k)]) != want;
        bad += to_f32(pt[static_cast<std::size_t>(k * rows + i)]) != want;
      }
    EXPECT_EQ(bad, 0) << name;
  }
}

TEST(Bitmap, BadInputIsAnError) {
  auto& be = test::cpu_backend();
  Buffer<std::uint32_t> bits(host_memory(), 64);
  Buffer<f16> plane(host_memory(), 4096), plane_t(host_memory(), 4096);
  // Words per row do not match the rank.
  EXPECT_THROW(be.bitmap().expand_signs(bits.view({4, 2}), 96, plane.view({4, 96}), plane_t.view({96, 4})), Error);
  // Plane of the wrong shape.
  EXPECT_THROW(be.bitmap().expand_signs(bits.view({4, 3}), 96, plane.view({4, 95}), plane_t.view({96, 4})), Error);
  // Empty.
  EXPECT_THROW(be.bitmap().expand_signs(bits.view({0, 3}), 96, plane.view({0, 96}), plane_t.view({96, 0})), Error);
  try {
    be.bitmap().expand_signs(bits.view({4, 3}), 96, plane.view({4, 96}), plane_t.view({95, 4}));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expand_signs: plane_t has shape [95, 4], expected [96, 4]"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace bitrank
