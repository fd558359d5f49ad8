// safetensors reader: values against numpy's
// (tools/fixtures/make_safetensors_fixtures.py wrote the fixtures and
// expected.json), sharded checkpoints, and corrupted or lying files — each
// must be a bitrank::Error naming the file, never a crash.
#include "bitrank/io/safetensors.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "bitrank/error.hpp"
#include "support/expect.hpp"

namespace bitrank::io {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

const fs::path kDir = fs::path(BITRANK_TEST_DATA_DIR) / "safetensors";

std::vector<std::byte> slurp(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::vector<char> c((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  std::vector<std::byte> b(c.size());
  std::memcpy(b.data(), c.data(), c.size());
  return b;
}

void write_file(const fs::path& p, std::span<const std::byte> b) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

void write_text(const fs::path& p, const std::string& s) {
  std::ofstream f(p, std::ios::trunc);
  f << s;
}

// A file image: 8-byte length, the header text as given, `data_bytes` bytes of data.
std::vector<std::byte> image(const std::string& header, std::size_t data_bytes) {
  std::vector<std::byte> b(8 + header.size() + data_bytes, std::byte{0x5a});
  std::uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) b[static_cast<std::size_t>(i)] = static_cast<std::byte>((n >> (8 * i)) & 0xff);
  std::memcpy(b.data() + 8, header.data(), header.size());
  return b;
}

void expect_bad_image(const std::vector<std::byte>& b, std::initializer_list<std::string> pieces) {
  std::vector<std::string> all{"bad.safetensors"};
  all.insert(all.end(), pieces.begin(), pieces.end());
  try {
    (void)Safetensors::from_memory(b, "bad.safetensors");
    ADD_FAILURE() << "no error; expected one mentioning " << *pieces.begin();
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const auto& p : all) EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
  }
}

// Every tensor of `st` listed in expected.json[file] has its shape, dtype and
// exact f32 bit patterns (NaN payloads included).
void expect_values(const Safetensors& st, const json& expected, int& checked) {
  for (const auto& [name, want] : expected.items()) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(st.contains(name));
    const TensorInfo& t = st.info(name);
    EXPECT_EQ(st_dtype_name(t.dtype), want["dtype"].get<std::string>());
    EXPECT_EQ(t.shape, want["shape"].get<std::vector<std::int64_t>>());
    if (want["f32_bits"].is_null()) continue;
    const auto bits = want["f32_bits"].get<std::vector<std::uint32_t>>();
    EXPECT_EQ(t.numel, bits.size());
    const auto got = st.read_f32(name);
    ASSERT_EQ(got.size(), bits.size());
    int bad = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
      std::uint32_t g;
      std::memcpy(&g, &got[i], 4);
      bad += g != bits[i];
    }
    EXPECT_EQ(bad, 0);
    ++checked;
  }
}

json expected_json() {
  std::ifstream f(kDir / "expected.json");
  return json::parse(f);
}

TEST(Safetensors, ReadsF32F16Bf16ExactlyAsNumpy) {
  const auto st = Safetensors::open(kDir / "mixed.safetensors");
  ASSERT_EQ(st.tensors().size(), 6u);
  for (std::size_t i = 1; i < st.tensors().size(); ++i) EXPECT_LT(st.tensors()[i - 1].name, st.tensors()[i].name);
  int checked = 0;
  expect_values(st, expected_json()["mixed.safetensors"], checked);
  EXPECT_EQ(checked, 5);  // F32, F16, BF16, the scalar and the empty tensor
  EXPECT_EQ(st.info("model.scale").numel, 1u);
  EXPECT_TRUE(st.info("model.scale").shape.empty());
  EXPECT_TRUE(st.read_f32("model.empty").empty());
  EXPECT_EQ(st.metadata().at("format"), "pt");
  EXPECT_EQ(st.metadata().at("note"), "bitrank test fixture");

  // Listed-only dtypes: raw bytes yes, f32 no (the error names tensor and dtype).
  const auto raw = st.bytes("model.ids");
  ASSERT_EQ(raw.size(), 16u);
  std::int32_t ids[4];
  std::memcpy(ids, raw.data(), 16);
  EXPECT_EQ(ids[0], 7);
  EXPECT_EQ(ids[1], -1);
  EXPECT_EQ(ids[2], 123456);
  test::expect_error_with([&] { (void)st.read_f32("model.ids"); }, {"mixed.safetensors", "model.ids", "I32"});
  test::expect_error_with([&] { (void)st.read_f32("model.missing"); }, {"mixed.safetensors", "model.missing"});
  EXPECT_FALSE(st.contains("model"));

  // The same image from memory reads the same.
  const auto img = slurp(kDir / "mixed.safetensors");
  const auto mem = Safetensors::from_memory(img, "mem");
  int checked_mem = 0;
  expect_values(mem, expected_json()["mixed.safetensors"], checked_mem);
  EXPECT_EQ(checked_mem, 5);
}

TEST(Safetensors, ShardedCheckpointThroughItsIndex) {
  const json exp = expected_json();
  for (const fs::path& p : {kDir / "sharded", kDir / "sharded" / "model.safetensors.index.json"}) {
    SCOPED_TRACE(p.string());
    const auto st = Safetensors::open(p);
    ASSERT_EQ(st.tensors().size(), 4u);
    int checked = 0;
    expect_values(st, exp["sharded/model-00001-of-00002.safetensors"], checked);
    expect_values(st, exp["sharded/model-00002-of-00002.safetensors"], checked);
    EXPECT_EQ(checked, 4);
    EXPECT_NE(st.info("lm_head.weight").file.find("model-00001-of-00002"), std::string::npos);
    EXPECT_NE(st.info("model.layers.1.mlp.down_proj.weight").file.find("model-00002-of-00002"), std::string::npos);
    EXPECT_EQ(st.metadata().at("format"), "pt");
  }
  // A single shard opens on its own too.
  EXPECT_EQ(Safetensors::open(kDir / "sharded" / "model-00002-of-00002.safetensors").tensors().size(), 2u);
}

TEST(Safetensors, MissingFilesAreErrors) {
  test::expect_error_with([] { (void)Safetensors::open(kDir / "nope.safetensors"); }, {"nope.safetensors"});
  test::expect_error_with([] { (void)Safetensors::open(kDir); }, {"model.safetensors.index.json"});  // a folder with neither
}

TEST(Safetensors, EveryTruncationIsAnError) {
  const auto img = slurp(kDir / "mixed.safetensors");
  for (std::size_t n = 0; n < img.size(); ++n) {
    SCOPED_TRACE(n);
    const std::vector<std::byte> cut(img.begin(), img.begin() + static_cast<std::ptrdiff_t>(n));
    expect_bad_image(cut, {"bad.safetensors"});
  }
  expect_bad_image({}, {"8-byte"});
  // A longer file (bytes after the last tensor) is an error as well.
  auto longer = img;
  longer.push_back(std::byte{0});
  expect_bad_image(longer, {"cover"});
}

TEST(Safetensors, HeaderLengthLiesAreErrors) {
  const auto img = slurp(kDir / "mixed.safetensors");
  std::uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<std::uint64_t>(img[static_cast<std::size_t>(i)]) << (8 * i);
  auto with_length = [&](std::uint64_t len) {
    auto b = img;
    for (int i = 0; i < 8; ++i) b[static_cast<std::size_t>(i)] = static_cast<std::byte>((len >> (8 * i)) & 0xff);
    return b;
  };
  for (std::uint64_t len : {n - 1, n + 1, n - 2, n + 4, n / 2, std::uint64_t{0}}) {
    SCOPED_TRACE(len);
    expect_bad_image(with_length(len), {"bad.safetensors"});
  }
  expect_bad_image(with_length(~std::uint64_t{0}), {"header length"});
  expect_bad_image(with_length(img.size()), {"header length"});
  // Past the 100 MB cap (with the bytes there, so only the cap can refuse it).
  std::vector<std::byte> big(8 + (100u << 20) + 16, std::byte{' '});
  const std::uint64_t len = (100u << 20) + 8;
  for (int i = 0; i < 8; ++i) big[static_cast<std::size_t>(i)] = static_cast<std::byte>((len >> (8 * i)) & 0xff);
  expect_bad_image(big, {"limit"});
}

TEST(Safetensors, MalformedHeadersAreErrors) {
  const std::string ok = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  EXPECT_EQ(Safetensors::from_memory(image(ok, 8), "ok").tensors().size(), 1u);

  expect_bad_image(image("not json", 8), {"JSON"});
  expect_bad_image(image(ok.substr(0, ok.size() - 1), 8), {"JSON"});
  expect_bad_image(image("", 0), {"JSON"});
  expect_bad_image(image("[1,2]", 0), {"object"});
  expect_bad_image(image("{\"a\xff\":{}}", 0), {"JSON"});  // invalid UTF-8
  expect_bad_image(image(std::string(5000, '[') + std::string(5000, ']'), 0), {"nested"});
  expect_bad_image(image(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8),
                   {"duplicate", "\"a\""});
  expect_bad_image(image(R"({"__metadata__":{"k":1}})", 0), {"__metadata__", "'k'"});
  expect_bad_image(image(R"({"__metadata__":[]})", 0), {"__metadata__"});
  expect_bad_image(image(R"({"t":[]})", 0), {"'t'", "object"});
  expect_bad_image(image(R"({"t":{"shape":[2],"data_offsets":[0,8]}})", 8), {"'t'", "dtype"});
  expect_bad_image(image(R"({"t":{"dtype":"F33","shape":[2],"data_offsets":[0,8]}})", 8), {"'t'", "F33"});
  expect_bad_image(image(R"({"t":{"dtype":7,"shape":[2],"data_offsets":[0,8]}})", 8), {"'t'", "dtype"});
  expect_bad_image(image(R"({"t":{"dtype":"F32","data_offsets":[0,8]}})", 8), {"'t'", "shape"});
  expect_bad_image(image(R"({"t":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8), {"'t'", "non-negative"});
  expect_bad_image(image(R"({"t":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})", 8), {"'t'", "non-negative"});
  expect_bad_image(image(R"({"t":{"dtype":"F32","shape":2,"data_offsets":[0,8]}})", 8), {"'t'", "shape"});
  expect_bad_image(image(R"({"t":{"dtype":"F32","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,8]}})", 8),
                   {"'t'", "overflows"});
  expect_bad_image(image(R"({"t":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,8]}})", 8),
                   {"'t'", "overflows"});
  expect_bad_image(image(R"({"t":{"dtype":"F32","shape":[2]}})", 8), {"'t'", "data_offsets"});
  expect_bad_image(image(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", 8), {"'t'", "data_offsets"});
  expect_bad_image(image(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8,9]}})", 8), {"'t'", "data_offsets"});
  expect_bad_image(image(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8), {"'t'", "begin"});
  expect_bad_image(image(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,-8]}})", 8), {"'t'", "non-negative"});
}

TEST(Safetensors, LyingOffsetsAreErrors) {
  // Past the end of the data.
  expect_bad_image(image(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 7), {"'t'", "past"});
  expect_bad_image(image(R"({"t":{"dtype":"F32","shape":[0],"data_offsets":[18446744073709551615,18446744073709551615]}})", 8),
                   {"'t'", "past"});
  // Wrong size for the dtype and shape.
  expect_bad_image(image(R"({"t":{"dtype":"F16","shape":[2],"data_offsets":[0,8]}})", 8), {"'t'", "F16", "needs 4"});
  expect_bad_image(image(R"({"t":{"dtype":"BF16","shape":[3,2],"data_offsets":[0,8]}})", 8), {"'t'", "BF16"});
  // Overlapping tensors.
  expect_bad_image(image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12),
                   {"'b'", "overlaps", "'a'"});
  expect_bad_image(image(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 8),
                   {"overlaps"});
  expect_bad_image(image(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[0],"data_offsets":[8,8]}})", 16),
                   {"overlaps"});
  // A hole between tensors, and data before the first.
  expect_bad_image(image(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})", 12),
                   {"'b'", "gap"});
  expect_bad_image(image(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8), {"'a'", "gap"});
  // Empty tensors at a boundary own no bytes and are fine.
  const auto st = Safetensors::from_memory(
      image(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"e":{"dtype":"BF16","shape":[3,0],"data_offsets":[4,4]},"z":{"dtype":"F32","shape":[0],"data_offsets":[0,0]}})", 4),
      "ok");
  EXPECT_EQ(st.tensors().size(), 3u);
  EXPECT_TRUE(st.read_f32("e").empty());
}

// The sharded fixture copied into a scratch folder, for breaking.
class ShardedCorruption : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("bitrank_st_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    fs::copy(kDir / "sharded", dir_, fs::copy_options::recursive);
    std::ifstream f(dir_ / "model.safetensors.index.json");
    index_ = json::parse(f);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void write_index() { write_text(dir_ / "model.safetensors.index.json", index_.dump(2)); }
  fs::path dir_;
  json index_;
};

TEST_F(ShardedCorruption, FolderWithASingleFile) {
  fs::remove(dir_ / "model.safetensors.index.json");
  test::expect_error_with([&] { (void)Safetensors::open(dir_); }, {dir_.string(), "model.safetensors"});
  fs::copy_file(kDir / "mixed.safetensors", dir_ / "model.safetensors");
  const auto st = Safetensors::open(dir_);
  EXPECT_EQ(st.tensors().size(), 6u);
  EXPECT_EQ(st.info("model.scale").file, (dir_ / "model.safetensors").string());
  EXPECT_EQ(st.read_f32("model.scale"), std::vector<float>{1.25f});
}

TEST_F(ShardedCorruption, IndexNamesAMissingFile) {
  index_["weight_map"]["lm_head.weight"] = "model-00003-of-00002.safetensors";
  write_index();
  test::expect_error_with([&] { (void)Safetensors::open(dir_); }, {"model.safetensors.index.json", "model-00003-of-00002", "lm_head.weight"});
}

TEST_F(ShardedCorruption, IndexNamesATensorTheShardLacks) {
  index_["weight_map"]["model.layers.9.extra"] = "model-00002-of-00002.safetensors";
  write_index();
  test::expect_error_with([&] { (void)Safetensors::open(dir_); }, {"model.layers.9.extra", "model-00002-of-00002", "does not hold"});
}

TEST_F(ShardedCorruption, ShardHoldsATensorTheIndexOmits) {
  index_["weight_map"].erase("model.norm.weight");
  write_index();
  test::expect_error_with([&] { (void)Safetensors::open(dir_); }, {"model.norm.weight", "model-00001-of-00002", "does not list"});
}

TEST_F(ShardedCorruption, IndexPlacesATensorInTheWrongShard) {
  index_["weight_map"]["model.norm.weight"] = "model-00002-of-00002.safetensors";
  write_index();
  test::expect_error_with([&] { (void)Safetensors::open(dir_); }, {"model.norm.weight", "model-00001-of-00002"});
}

TEST_F(ShardedCorruption, DuplicateTensorAcrossShards) {
  // A second shard that also holds lm_head.weight.
  write_file(dir_ / "model-00002-of-00002.safetensors",
             image(R"({"lm_head.weight":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 4));
  index_["weight_map"] = {{"lm_head.weight", "model-00001-of-00002.safetensors"},
                          {"model.norm.weight", "model-00001-of-00002.safetensors"},
                          {"model.x", "model-00002-of-00002.safetensors"}};
  write_index();
  test::expect_error_with([&] { (void)Safetensors::open(dir_); }, {"lm_head.weight", "two shards"});
}

TEST_F(ShardedCorruption, BrokenShardOrIndex) {
  // A truncated shard: the error names the shard.
  auto img = slurp(dir_ / "model-00002-of-00002.safetensors");
  img.resize(img.size() - 3);
  write_file(dir_ / "model-00002-of-00002.safetensors", img);
  test::expect_error_with([&] { (void)Safetensors::open(dir_); }, {"model-00002-of-00002.safetensors"});

  write_text(dir_ / "model.safetensors.index.json", "{\"weight_map\": ");
  test::expect_error_with([&] { (void)Safetensors::open(dir_); }, {"model.safetensors.index.json", "JSON"});
  write_text(dir_ / "model.safetensors.index.json", "{\"metadata\": {}}");
  test::expect_error_with([&] { (void)Safetensors::open(dir_); }, {"model.safetensors.index.json", "weight_map"});
  write_text(dir_ / "model.safetensors.index.json", R"({"weight_map": {"a": 3}})");
  test::expect_error_with([&] { (void)Safetensors::open(dir_); }, {"model.safetensors.index.json", "'a'"});
  write_text(dir_ / "model.safetensors.index.json", R"({"weight_map": {"a": "../mixed.safetensors"}})");
  test::expect_error_with([&] { (void)Safetensors::open(dir_); }, {"model.safetensors.index.json", "'a'", "relative"});
  write_text(dir_ / "model.safetensors.index.json", R"({"weight_map": {"a": "/etc/passwd"}})");
  test::expect_error_with([&] { (void)Safetensors::open(dir_); }, {"model.safetensors.index.json", "'a'", "relative"});
}

}  // namespace
}  // namespace bitrank::io
