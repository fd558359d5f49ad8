// The CPU kernels the BLR layer's passes are built from (cpu/kernels.hpp):
// the bulk f16 conversions equal to_f16 / to_f32 to the bit, and the rows
// written and summed from a sign bitmap equal the ±1 plane's products.
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <limits>
#include <vector>

#include "bitrank/rng.hpp"
#include "cpu/kernels.hpp"

namespace bitrank {
namespace {

// Every f32 bit pattern class: f16 values, rounding ties, subnormals, the
// overflow edge, infinities, quiet and signalling NaNs of both signs, and
// random patterns; an odd count so that the scalar tail runs too.
std::vector<float> f32_cases() {
  std::vector<std::uint32_t> bits = {0x00000000u, 0x80000000u, 0x3f800000u, 0x477fe000u, 0x477fefffu, 0x477ff000u,
                                     0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00001u, 0x7f800001u, 0xff812345u,
                                     0x33000000u, 0x33000001u, 0x337fffffu, 0x38800000u, 0x387fe000u, 0x00000001u};
  for (std::uint32_t h = 0; h < 65536; ++h) bits.push_back(std::bit_cast<std::uint32_t>(to_f32(f16{static_cast<std::uint16_t>(h)})));
  for (std::uint32_t h = 0; h < 65536; ++h)  // halfway between neighbouring f16 values and next to it
    bits.push_back(std::bit_cast<std::uint32_t>(to_f32(f16{static_cast<std::uint16_t>(h)})) + 0x1000u + (h % 3) - 1);
  XorShift rng(7);
  for (int i = 0; i < 200001; ++i) bits.push_back(static_cast<std::uint32_t>(rng.next_u64()));
  std::vector<float> v;
  for (std::uint32_t b : bits) v.push_back(std::bit_cast<float>(b));
  return v;
}

TEST(CpuKernels, F16FromF32IsToF16ToTheBit) {
  const std::vector<float> src = f32_cases();
  std::vector<f16> got(src.size());
  cpu::f16_from_f32(src.data(), static_cast<index_t>(src.size()), got.data());
  int bad = 0;
  for (std::size_t i = 0; i < src.size(); ++i) bad += got[i].bits != to_f16(src[i]).bits;
  EXPECT_EQ(bad, 0);
}

TEST(CpuKernels, F32FromF16IsToF32ToTheBit) {
  std::vector<f16> src;
  for (std::uint32_t h = 0; h < 65536; ++h) {
    const bool signalling = (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0 && (h & 0x200u) == 0;
    if (!signalling) src.push_back(f16{static_cast<std::uint16_t>(h)});  // to_f16 never writes one
  }
  src.push_back(f16{0x3c00u});  // an odd count: the scalar tail
  std::vector<float> got(src.size());
  cpu::f32_from_f16(src.data(), static_cast<index_t>(src.size()), got.data());
  int bad = 0;
  for (std::size_t i = 0; i < src.size(); ++i)
    bad += std::bit_cast<std::uint32_t>(got[i]) != std::bit_cast<std::uint32_t>(to_f32(src[i]));
  EXPECT_EQ(bad, 0);
}

// signed_row is v times the ±1 plane, signed_dot_lanes the ±1 plane's
// dot_lanes, to the bit, at widths that end inside a word and on one.
TEST(CpuKernels, BitmapRowsAreThePlanesProducts) {
  XorShift rng(11);
  for (index_t r : {1, 7, 31, 32, 33, 64, 100, 256, 257}) {
    const index_t words = (r + 31) / 32;
    std::vector<std::uint32_t> bits(static_cast<std::size_t>(words));
    for (auto& w : bits) w = static_cast<std::uint32_t>(rng.next_u64());
    std::vector<float> plane(static_cast<std::size_t>(r)), b(static_cast<std::size_t>(r)), row(static_cast<std::size_t>(r));
    for (index_t c = 0; c < r; ++c) {
      plane[static_cast<std::size_t>(c)] = (bits[static_cast<std::size_t>(c / 32)] >> (c % 32) & 1u) ? 1.0f : -1.0f;
      b[static_cast<std::size_t>(c)] = static_cast<float>(rng.next_u64() % 2001) / 1000.0f - 1.0f;
    }
    const float v = -0.375f;
    cpu::signed_row(bits.data(), std::bit_cast<std::uint32_t>(v), r, row.data());
    for (index_t c = 0; c < r; ++c)
      EXPECT_EQ(std::bit_cast<std::uint32_t>(row[static_cast<std::size_t>(c)]),
                std::bit_cast<std::uint32_t>(plane[static_cast<std::size_t>(c)] * v))
          << "r=" << r << " c=" << c;
    EXPECT_EQ(std::bit_cast<std::uint32_t>(cpu::signed_dot_lanes(bits.data(), b.data(), r)),
              std::bit_cast<std::uint32_t>(cpu::dot_lanes(plane.data(), b.data(), r)))
        << "r=" << r;
  }
}

}  // namespace
}  // namespace bitrank
