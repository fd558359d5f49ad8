// safetensors writer: files read back by our reader with the exact values
// (F32 bit patterns, F16/BF16 as dtype.hpp rounds them, U32 words, raw
// bytes), the header padded so data starts at a multiple of 8 and every
// tensor aligned to its element size, bad input refused before anything is
// created, and the atomic write: a failing write leaves neither a partial
// file nor a temporary one, and an existing target unchanged.
// (tools/analysis/check_safetensors.py reads such a file with python's
// safetensors.)
#include "bitrank/io/safetensors_writer.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "bitrank/dtype.hpp"
#include "bitrank/error.hpp"
#include "bitrank/io/safetensors.hpp"
#include "bitrank/rng.hpp"
#include "support/expect.hpp"
#include "support/temp_dir.hpp"

namespace bitrank::io {
namespace {

namespace fs = std::filesystem;

using test::expect_error_with;
using test::TempDir;

std::vector<float> random_values(std::size_t n, std::uint64_t seed) { return rnd(n, seed, 3.0f); }

std::string slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

TEST(SafetensorsWriter, RoundTripEveryKindExactly) {
  const TempDir dir;
  const auto a = random_values(6 * 5, 1), b = random_values(7, 2), c = random_values(3 * 3, 3);
  std::vector<std::uint32_t> words(4 * 3);
  XorShift rng(4);
  for (auto& w : words) w = static_cast<std::uint32_t>(rng.next_u64());
  const std::vector<std::byte> i8{std::byte{0x80}, std::byte{0x7f}, std::byte{0x01}};
  const std::vector<float> empty;
  const std::vector<StTensorOut> tensors{
      StTensorOut::f32("a.f32", StDType::F32, {6, 5}, a),   StTensorOut::f32("b.f16", StDType::F16, {7}, b),
      StTensorOut::f32("c.bf16", StDType::BF16, {3, 3}, c), StTensorOut::u32("d.bits", {4, 3}, words),
      StTensorOut::raw("e.i8", StDType::I8, {3}, i8),       StTensorOut::f32("f.empty", StDType::F32, {0, 4}, empty),
  };
  const std::map<std::string, std::string> meta{{"k", "v"}, {"json", R"({"x": [1, "é"]})"}};
  const fs::path file = dir.path() / "t.safetensors";
  write_safetensors(file, tensors, meta);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"t.safetensors"});  // no temporary left

  const Safetensors st = Safetensors::open(file);
  EXPECT_EQ(st.metadata(), meta);
  ASSERT_EQ(st.tensors().size(), 6u);
  const auto ra = st.read_f32("a.f32");
  ASSERT_EQ(ra.size(), a.size());
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_EQ(f32_bits(ra[i]), f32_bits(a[i])) << i;
  const auto rb = st.read_f32("b.f16");
  for (std::size_t i = 0; i < b.size(); ++i) EXPECT_EQ(f32_bits(rb[i]), f32_bits(round_f16(b[i]))) << i;
  const auto rc = st.read_f32("c.bf16");
  for (std::size_t i = 0; i < c.size(); ++i) EXPECT_EQ(f32_bits(rc[i]), f32_bits(to_f32(to_bf16(c[i])))) << i;
  EXPECT_EQ(st.read_u32("d.bits"), words);
  const auto re = st.bytes("e.i8");
  EXPECT_TRUE(std::equal(re.begin(), re.end(), i8.begin(), i8.end()));
  EXPECT_EQ(st.info("a.f32").shape, (std::vector<std::int64_t>{6, 5}));
  EXPECT_EQ(st.info("b.f16").dtype, StDType::F16);
  EXPECT_EQ(st.info("c.bf16").dtype, StDType::BF16);
  EXPECT_EQ(st.info("f.empty").numel, 0u);
  expect_error_with([&] { (void)st.read_u32("a.f32"); }, {"a.f32", "F32", "U32"});

  // Layout: data at a multiple of 8, each tensor at a multiple of its element size.
  const std::string bytes = slurp(file);
  std::uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);
  EXPECT_EQ((8 + header_len) % 8, 0u);
  for (const TensorInfo& t : st.tensors()) EXPECT_EQ(t.data_begin % st_dtype_size(t.dtype), 0u) << t.name;

  // The in-memory image is the same file.
  const auto image = safetensors_image(tensors, meta);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(image.data()), image.size()), bytes);
}

TEST(SafetensorsWriter, NoMetadataAndNoTensors) {
  const auto image = safetensors_image({}, {});
  const Safetensors st = Safetensors::from_memory(image, "empty");
  EXPECT_TRUE(st.tensors().empty());
  EXPECT_TRUE(st.metadata().empty());
  EXPECT_EQ(image.size() % 8, 0u);
}

TEST(SafetensorsWriter, BadInputIsRefusedBeforeAnythingIsCreated) {
  const TempDir dir;
  const fs::path file = dir.path() / "bad.safetensors";
  const std::vector<float> v(4, 1.0f);
  const std::vector<std::uint32_t> w(3);
  auto write = [&](std::vector<StTensorOut> t, std::map<std::string, std::string> m = {}) {
    return [&file, t = std::move(t), m = std::move(m)] { write_safetensors(file, t, m); };
  };
  expect_error_with(write({StTensorOut::f32("x", StDType::F32, {5}, v)}), {"bad.safetensors", "'x'", "4 values", "5"});
  expect_error_with(write({StTensorOut::u32("w", {2, 2}, w)}), {"'w'", "12 bytes", "16 bytes"});
  expect_error_with(write({StTensorOut::f32("x", StDType::F32, {4}, v), StTensorOut::f32("x", StDType::F16, {4}, v)}),
                    {"'x'", "twice"});
  expect_error_with(write({StTensorOut::f32("", StDType::F32, {4}, v)}), {"empty name"});
  expect_error_with(write({StTensorOut::f32("__metadata__", StDType::F32, {4}, v)}), {"__metadata__"});
  expect_error_with(write({StTensorOut::f32("x", StDType::I32, {4}, v)}), {"'x'", "I32"});
  expect_error_with(write({StTensorOut::f32("x", StDType::F32, {-4}, v)}), {"'x'", "negative"});
  expect_error_with(write({}, {{"key", std::string("\xff\xfe")}}), {"metadata 'key'", "UTF-8"});
  expect_error_with(write({StTensorOut::f32("bad\xc3", StDType::F32, {4}, v)}), {"UTF-8"});
  EXPECT_TRUE(dir.entries().empty());
}

TEST(SafetensorsWriter, FailedWriteLeavesNoFileAndKeepsTheOldOne) {
  const TempDir dir;
  const fs::path file = dir.path() / "model.safetensors";
  const auto big = random_values(64 * 1024, 5);  // 256 KiB of F32
  const std::vector<StTensorOut> tensors{StTensorOut::f32("w", StDType::F32, {64, 1024}, big)};

  // A missing directory.
  expect_error_with([&] { write_safetensors(dir.path() / "no" / "such.safetensors", tensors); },
                    {"such.safetensors", "temporary file"});

  // An older file at the target survives a write that fails half-way: the
  // process may not grow a file past 64 KiB (RLIMIT_FSIZE; SIGXFSZ ignored
  // so write() fails with EFBIG instead of killing the test).
  const std::vector<float> old_values(8, 0.5f);
  write_safetensors(file, std::vector{StTensorOut::f32("old", StDType::F32, {8}, old_values)});
  const std::string old_bytes = slurp(file);
  std::string message;
  {
    const test::ScopedFileSizeLimit limit(64 * 1024);
    ASSERT_TRUE(limit.ok());
    try {
      write_safetensors(file, tensors);
    } catch (const Error& e) {
      message = e.what();
    }
  }
  EXPECT_NE(message.find("model.safetensors"), std::string::npos) << message;
  EXPECT_NE(message.find("writing"), std::string::npos) << message;
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"model.safetensors"});
  EXPECT_EQ(slurp(file), old_bytes);

  // The target is a directory: everything is written, the rename fails, the
  // temporary file goes.
  fs::create_directories(dir.path() / "taken");
  fs::create_directories(dir.path() / "taken" / "inside");
  expect_error_with([&] { write_safetensors(dir.path() / "taken", tensors); }, {"taken", "rename"});
  EXPECT_EQ(dir.entries(), (std::vector<std::string>{"model.safetensors", "taken"}));

  // And the same write without a limit succeeds and replaces the old file.
  write_safetensors(file, tensors);
  EXPECT_EQ(Safetensors::open(file).read_f32("w"), big);
}

}  // namespace
}  // namespace bitrank::io
