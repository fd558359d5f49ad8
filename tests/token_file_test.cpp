// Token id files (io/token_file.hpp) and `bitrank tokenize`, which writes
// them.
//
// Library: the exact bytes of a small file (little-endian int32, no header),
// the round trip, and the errors (size not a multiple of 4, negative ids).
// CLI: the built `bitrank tokenize` runs on a small text file with the real
// SmolLM2 GGUF; its file must hold exactly what the library tokenizer gives
// for that text and its JSON line must count them (skipped without the
// GGUF, as the other SmolLM2 tests are).
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>

#include "bitrank/io/gguf.hpp"
#include "bitrank/io/token_file.hpp"
#include "bitrank/io/tokenizer.hpp"
#include "support/command.hpp"
#include "support/corpus_digest.hpp"
#include "support/expect.hpp"

namespace bitrank::io {
namespace {

namespace fs = std::filesystem;

class TokenFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("bitrank_tok_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void write_bytes(const fs::path& p, const std::string& bytes) {
    std::ofstream(p, std::ios::binary) << bytes;
  }
  fs::path dir_;
};

TEST_F(TokenFile, BytesAreLittleEndianInt32) {
  const std::vector<std::int32_t> ids = {0, 1, 256, 0x01020304, INT32_MAX, 49151};
  write_token_file(dir_ / "a.i32", ids);
  const std::string bytes = test::read_file((dir_ / "a.i32").string());
  const std::string expected("\x00\x00\x00\x00"
                             "\x01\x00\x00\x00"
                             "\x00\x01\x00\x00"
                             "\x04\x03\x02\x01"
                             "\xff\xff\xff\x7f"
                             "\xff\xbf\x00\x00",
                             24);
  EXPECT_EQ(bytes, expected);
  EXPECT_EQ(read_token_file(dir_ / "a.i32"), ids);
  EXPECT_FALSE(fs::exists(dir_ / "a.i32.tmp"));
}

TEST_F(TokenFile, RoundTripOverwritesAndEmpty) {
  std::vector<std::int32_t> ids(1000);
  std::uint32_t s = 12345;
  for (auto& v : ids) v = static_cast<std::int32_t>((s = s * 1664525u + 1013904223u) >> 1);
  write_token_file(dir_ / "b.i32", std::vector<std::int32_t>(7, 3));
  write_token_file(dir_ / "b.i32", ids);  // replaces, never appends
  EXPECT_EQ(read_token_file(dir_ / "b.i32"), ids);
  write_token_file(dir_ / "c.i32", {});
  EXPECT_EQ(fs::file_size(dir_ / "c.i32"), 0u);
  EXPECT_TRUE(read_token_file(dir_ / "c.i32").empty());
}

TEST_F(TokenFile, Errors) {
  test::expect_error([&] { write_token_file(dir_ / "n.i32", std::vector<std::int32_t>{5, -1}); }, "index 1 is negative");
  EXPECT_FALSE(fs::exists(dir_ / "n.i32"));
  test::expect_error([&] { write_token_file(dir_ / "no" / "such.i32", std::vector<std::int32_t>{1}); },
                     "cannot create");
  write_bytes(dir_ / "odd.i32", std::string("\x01\x00\x00\x00\x02", 5));
  test::expect_error([&] { (void)read_token_file(dir_ / "odd.i32"); }, "5 bytes is not a whole number");
  write_bytes(dir_ / "neg.i32", std::string("\x01\x00\x00\x00\xff\xff\xff\xff", 8));
  test::expect_error([&] { (void)read_token_file(dir_ / "neg.i32"); }, "index 1 is negative (-1)");
  test::expect_error([&] { (void)read_token_file(dir_ / "missing.i32"); }, "cannot open");
}

TEST_F(TokenFile, CliTokenizeWritesTheTokenizersIds) {
  const std::string gguf = BITRANK_SMOLLM2_GGUF;
  if (gguf.empty()) GTEST_SKIP() << "SmolLM2-135M-Instruct.Q4_1.gguf not found at configure time";
  const std::string text =
      "Tokenizers split text into pieces.\n\n  Numbers 12345, \"quotes\" and\ttabs; "
      "a caf\xc3\xa9, <|im_start|> stays plain text.\n";
  write_bytes(dir_ / "in.txt", text);
  const auto out = dir_ / "out.i32";
  const auto [status, stdout_text] =
      test::run_command("'" BITRANK_CLI "' tokenize --model '" + gguf + "' --text '" + (dir_ / "in.txt").string() +
                        "' -o '" + out.string() + "' 2>&1");
  ASSERT_EQ(status, 0) << stdout_text;

  const Tokenizer tok(tokenizer_spec_from_gguf(GgufFile::open(gguf, {.verify_data = false})));
  const auto expected = tok.encode(text);
  ASSERT_GT(expected.size(), 20u);
  EXPECT_EQ(read_token_file(out), expected);
  const auto j = nlohmann::json::parse(stdout_text);
  EXPECT_EQ(j.at("tokens").get<std::size_t>(), expected.size());
  EXPECT_EQ(j.at("text_bytes").get<std::size_t>(), text.size());
  EXPECT_EQ(j.at("out").get<std::string>(), out.string());

  // --text and --split exclude each other; a bad split is refused; both
  // without writing anything.
  const auto both = test::run_command("'" BITRANK_CLI "' tokenize --model '" + gguf + "' --split eval --text '" +
                                      (dir_ / "in.txt").string() + "' -o '" + (dir_ / "x.i32").string() + "' 2>&1");
  EXPECT_NE(both.first, 0);
  const auto bad =
      test::run_command("'" BITRANK_CLI "' tokenize --split dev -o '" + (dir_ / "x.i32").string() + "' 2>&1");
  EXPECT_NE(bad.first, 0);
  EXPECT_NE(bad.second.find("dev"), std::string::npos) << bad.second;
  EXPECT_FALSE(fs::exists(dir_ / "x.i32"));
}

}  // namespace
}  // namespace bitrank::io
