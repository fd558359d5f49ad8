// The `bitrank` command as a new user meets it: wrong, empty, huge, negative
// and missing values give an exit status other than 0 and one line that says
// what was wrong and what would do, before anything slow runs; help texts
// read cleanly. Each test runs the built binary (BITRANK_CLI) on a tiny random
// Llama directory (support/model_files: hidden 64, context 256) or, where the
// numbers are SmolLM2-135M's, on its GGUF (skipped without it).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "support/command.hpp"
#include "support/model_files.hpp"
#include "support/temp_dir.hpp"

namespace bitrank {
namespace {

namespace fs = std::filesystem;

// 2 blocks, hidden 64, 4 heads / 2 kv of 16, MLP 96, the test tokenizer's 3001 ids, context 256.
constexpr const char* kConfig = R"({"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 96, "vocab_size": 3001,
    "rms_norm_eps": 1e-5, "max_position_embeddings": 256, "rope_theta": 10000.0, "tie_word_embeddings": true})";

std::string quote(const std::string& a) {
  std::string q = "'";
  for (const char ch : a) q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
  return q + "'";
}

struct Result {
  int status = 0;
  std::string out;  // stdout and stderr
};

// `bitrank args...`, stdout and stderr together; at most `seconds` (timeout(1)).
Result cli(const std::vector<std::string>& args, int seconds = 120) {
  std::string cmd = fmt::format("timeout {} {}", seconds, quote(BITRANK_CLI));
  for (const std::string& a : args) {
    cmd += ' ';
    cmd += quote(a);  // not " " + quote(a): GCC 12 warns falsely (-Wrestrict) on that operator+
  }
  const auto [status, out] = test::run_command(cmd + " 2>&1 </dev/null");
  return {status, out};
}

void write_file(const fs::path& p, const std::string& text) { std::ofstream(p, std::ios::binary) << text; }

#define EXPECT_REFUSED(r, fragment)                                                          \
  do {                                                                                       \
    const Result& r_ = (r);                                                                  \
    EXPECT_NE(r_.status, 0) << r_.out;                                                       \
    EXPECT_NE(r_.status, 124) << "timed out: " << r_.out;                                    \
    EXPECT_NE(r_.out.find(fragment), std::string::npos) << "'" << (fragment) << "' not in: " << r_.out; \
  } while (0)

// No message carries a number of 25 digits or more (CLI11's DBL_MAX bound
// printed in full was 309 digits; a value the user typed may be 23).
void expect_no_absurd_number(const Result& r) {
  EXPECT_FALSE(std::regex_search(r.out, std::regex("[0-9]{25,}"))) << r.out;
  EXPECT_LT(r.out.size(), 400u) << r.out;
}

class Cli : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directories(tmp_.path() / "tiny");
    model_ = test::random_llama_dir(tmp_.path() / "tiny", kConfig, 3).string();
    text_ = (tmp_.path() / "words.txt").string();
    write_file(text_, test::word_text(1, 40));
  }
  fs::path path(const std::string& name) const { return tmp_.path() / name; }

  test::TempDir tmp_;
  std::string model_, text_;
};

const std::string kSmolLM2 = BITRANK_SMOLLM2_GGUF;
#define REQUIRE_SMOLLM2() \
  if (kSmolLM2.empty()) GTEST_SKIP() << "SmolLM2-135M-Instruct.Q4_1.gguf not found at configure time"

// ---- 1. --steps 0 / --tokens 0 ----------------------------------------------------

// 0 used to mean "not given" and ran the full default training.
TEST_F(Cli, CompressStepsAndTokensMustBeAtLeastOne) {
  const std::vector<std::string> base{"compress", "--model", model_, "--text", text_, "--eval-text", text_,
                                      "--eval-windows", "1", "--eval-seq-len", "64", "--seq-len", "32",
                                      "--windows", "1", "--bpw", "4", "-o", path("m.bitrank").string()};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = base;
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  EXPECT_REFUSED(cli(with({"--steps", "0"})), "compress: --steps must be at least 1, got 0");
  EXPECT_REFUSED(cli(with({"--tokens", "0"})), "compress: --tokens must be at least 1, got 0");
  EXPECT_REFUSED(cli(with({"--steps", "-2"})), "compress: --steps must be at least 1, got -2");
  EXPECT_REFUSED(cli(with({"--steps", "1", "--tokens", "64"})), "give --tokens or --steps, not both");
  EXPECT_FALSE(fs::exists(path("m.bitrank")));
}

// ---- 2. unreachable --bpw -----------------------------------------------------------

// The tiny model (64- and 96-wide matrices, 2 paths): a target past either
// end of its reachable range is refused before anything is loaded.
TEST_F(Cli, CompressRefusesUnreachableBpw) {
  const std::vector<std::string> base{"compress", "--model", model_, "--text", text_, "--eval-text", text_,
                                      "--eval-windows", "1", "--eval-seq-len", "64", "--seq-len", "32",
                                      "--windows", "1", "--steps", "1", "-o", path("m.bitrank").string()};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = base;
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  EXPECT_REFUSED(cli(with({"--bpw", "0.01"})), "target 0.01 bpw is below the smallest reachable");
  EXPECT_REFUSED(cli(with({"--bpw", "16"})), "target 16 bpw is above the largest useful");
  EXPECT_REFUSED(cli(with({"--bpw", "4", "--bpw-for", "attn_v=9"})),
                 "the matrices matching 'attn_v': target 9 bpw is above the largest useful");
  EXPECT_REFUSED(cli(with({"--bpw", "0"})), "--bpw: must be a positive number, got 0");
  EXPECT_FALSE(fs::exists(path("m.bitrank")));
}

// ---- the main job's output -----------------------------------------------------------

// A CPU run says nothing about devices, names what each progress figure is
// (the block, the block MSE), and ends with one line comparing the student
// with the teacher in words.
TEST_F(Cli, CompressOutputSaysWhatItMeans) {
  const std::string eval = path("eval.txt").string();
  write_file(eval, test::word_text(2, 10));
  const Result r = cli({"compress", "--model", model_, "--text", text_, "--eval-text", eval, "--eval-windows", "1",
                        "--eval-seq-len", "64", "--seq-len", "32", "--windows", "1", "--steps", "2", "--bpw", "4",
                        "-o", path("m.bitrank").string()});
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out.find("resident on the device"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("block 2/2 step 2/2"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("block MSE"), std::string::npos) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex("teacher [0-9.]+, compressed [0-9.]+ — [0-9.]+× the teacher's")))
      << r.out;
}

// The issue's numbers: SmolLM2-135M reaches 0.2781 to 3.1007 bpw with 2 paths.
TEST(CliSmolLM2, CompressRefusesUnreachableBpw) {
  REQUIRE_SMOLLM2();
  const test::TempDir tmp;
  const std::string out = (tmp.path() / "m.bitrank").string();
  EXPECT_REFUSED(cli({"compress", "--bpw", "0.01", "--steps", "1", "--eval-windows", "1", "-o", out}),
                 "target 0.01 bpw is below the smallest reachable 0.2781 bpw of these 210 matrices");
  EXPECT_REFUSED(cli({"compress", "--bpw", "16", "--steps", "1", "--eval-windows", "1", "-o", out}),
                 "target 16 bpw is above the largest useful 3.1007 bpw of these 210 matrices");
  EXPECT_FALSE(fs::exists(out));
}

// ---- 3. what a file is ----------------------------------------------------------------

TEST_F(Cli, InfoAndLoadersTellWhatAFileIs) {
  write_file(path("notes.txt"), "These are notes, not a model.\n");
  write_file(path("x.gguf"), "These are notes, not a model.\n");
  write_file(path("x.bitrank"), "These are notes, not a model.\n");
  write_file(path("empty.gguf"), "");
  const std::string txt = path("notes.txt").string(), gguf = path("x.gguf").string();
  EXPECT_REFUSED(cli({"info", txt}), txt + ": not a model file (not a GGUF file, a bitrank / safetensors file or a "
                                           "Hugging Face directory; it starts with 54 68 65 73 65 20 61 72 \"These ar\")");
  EXPECT_REFUSED(cli({"info", gguf}), gguf + ": not a GGUF file (bad magic 54 68 65 73 \"Thes\", expected 47 47 55 46 \"GGUF\")");
  EXPECT_REFUSED(cli({"info", path("x.bitrank").string()}), "not a bitrank model file (no safetensors header: its first 8 bytes");
  EXPECT_REFUSED(cli({"info", path("empty.gguf").string()}), "the file is empty, not a model file");
  EXPECT_REFUSED(cli({"info", path("missing.gguf").string()}), "missing.gguf: no such file or directory");
  for (const Result& r : {cli({"info", txt}), cli({"info", gguf})}) EXPECT_EQ(r.out.find("header length"), std::string::npos) << r.out;
  // The commands that load a model say the same.
  EXPECT_REFUSED(cli({"eval", "--model", gguf, "--text", text_}), "not a GGUF file (bad magic");
  EXPECT_REFUSED(cli({"generate", "--model", gguf, "--prompt", "hi"}), "not a GGUF file (bad magic");
  EXPECT_REFUSED(cli({"tokenize", "--model", gguf, "--text", text_, "-o", path("ids.i32").string()}),
                 "not a GGUF file (bad magic");
  EXPECT_REFUSED(cli({"compress", "--model", gguf, "--steps", "1", "-o", path("m.bitrank").string()}),
                 "not a GGUF file (bad magic");
  EXPECT_REFUSED(cli({"eval", "--model", txt, "--text", text_}), "not a model file");
}

// A Hugging Face directory is described from config.json, the safetensors
// headers and tokenizer.json.
TEST_F(Cli, InfoDescribesAHuggingFaceDirectory) {
  const Result r = cli({"info", model_});
  ASSERT_EQ(r.status, 0) << r.out;
  for (const std::string piece :
       {"format        Hugging Face directory", "llama: 2 layers, hidden 64, 4 heads / 2 kv heads × 16, ffn 96, "
                                                "vocab 3001, tied head, context 256",
        "tokenizer     smollm, 3001 tokens", "tensors       "})
    EXPECT_NE(r.out.find(piece), std::string::npos) << "'" << piece << "' not in:\n" << r.out;
  const Result j = cli({"info", "--json", model_});
  ASSERT_EQ(j.status, 0) << j.out;
  EXPECT_NE(j.out.find("\"max_position_embeddings\": 256"), std::string::npos) << j.out;
}

TEST(CliSmolLM2, InfoDescribesAGguf) {
  REQUIRE_SMOLLM2();
  const Result r = cli({"info", kSmolLM2});
  ASSERT_EQ(r.status, 0) << r.out;
  for (const std::string piece :
       {"format        GGUF v3", "llama: 30 layers, hidden 576, 9 heads / 3 kv heads × 64, ffn 1536, vocab 49152, "
                                 "tied head, context 8192",
        "tokenizer     smollm, 49152 tokens", "tensors       272 (61 F32, 210 Q4_1, 1 Q8_0), 134515008 params"})
    EXPECT_NE(r.out.find(piece), std::string::npos) << "'" << piece << "' not in:\n" << r.out;
}

// ---- 4. --seq-len past the context; progress before the first window ends ------------

TEST_F(Cli, EvalSeqLenPastTheContextIsAnError) {
  EXPECT_REFUSED(cli({"eval", "--model", model_, "--text", text_, "--seq-len", "300"}, 30),
                 "eval: --seq-len 300 exceeds the model's context of 256 positions (max_position_embeddings): use "
                 "--seq-len 256 or less");
  EXPECT_REFUSED(cli({"eval", "--model", model_, "--text", text_, "--seq-len", "100000"}, 30),
                 "exceeds the model's context of 256");
  EXPECT_REFUSED(cli({"compress", "--model", model_, "--text", text_, "--eval-text", text_, "--seq-len", "512",
                      "--steps", "1", "-o", path("m.bitrank").string()}, 30),
                 "compress: --seq-len 512 exceeds the model's context of 256");
  EXPECT_REFUSED(cli({"compress", "--model", model_, "--text", text_, "--eval-text", text_, "--eval-seq-len",
                      "1024", "--steps", "1", "-o", path("m.bitrank").string()}, 30),
                 "compress: --eval-seq-len 1024 exceeds the model's context of 256");
  // Not given, the window is 512 shortened to the context.
  const Result dflt = cli({"eval", "--model", model_, "--text", text_, "--max-windows", "1"});
  ASSERT_EQ(dflt.status, 0) << dflt.out;
  EXPECT_NE(dflt.out.find("\"seq_len\": 256"), std::string::npos) << dflt.out;
  // At the context: runs, and says so before the first window ends.
  const Result ok = cli({"eval", "--model", model_, "--text", text_, "--seq-len", "256", "--max-windows", "1"});
  ASSERT_EQ(ok.status, 0) << ok.out;
  const auto running = ok.out.find("eval: 1 window of 256 tokens; window 1 running");
  EXPECT_NE(running, std::string::npos) << ok.out;
  EXPECT_LT(running, ok.out.find("eval: window 1/1")) << ok.out;
}

TEST(CliSmolLM2, EvalSeqLenPastTheContextIsAnError) {
  REQUIRE_SMOLLM2();
  const test::TempDir tmp;
  const std::string text = (tmp.path() / "t.txt").string();
  write_file(text, "A short text.\n");
  for (const char* t : {"9000", "100000"})
    EXPECT_REFUSED(cli({"eval", "--seq-len", t, "--text", text}, 30),
                   fmt::format("eval: --seq-len {} exceeds the model's context of 8192 positions", t));
}

// ---- 5. number checks name a human bound ----------------------------------------------

TEST_F(Cli, NumberChecksNameAHumanBound) {
  struct Case {
    std::vector<std::string> args;
    std::string fragment;
  };
  const std::string out = path("m.bitrank").string();
  const std::vector<Case> cases{
      {{"eval", "--max-windows", "-3"}, "--max-windows: must be 0 or more, got -3"},
      {{"eval", "--seq-len", "1"}, "--seq-len: must be in [2, 1048576], got 1"},
      {{"eval", "--seq-len", "abc"}, "--seq-len: 'abc' is not a whole number"},
      {{"eval", "--seq-len", "99999999999999999999999"}, "--seq-len: '99999999999999999999999' is out of range"},
      {{"compress", "--seed", "-1", "-o", out}, "--seed: must be >= 0, got -1"},
      {{"generate", "--prompt", "x", "--seed", "-5"}, "--seed: must be >= 0, got -5"},
      {{"bench", "--min-time", "-1"}, "--min-time: must be a positive number, got -1"},
      {{"bench", "--min-time", "nan"}, "--min-time: must be a positive number, got nan"},
      {{"bench", "--gdn-design", "2"}, "--gdn-design and --attention choose CUDA kernels: they apply with --device cuda only"},
      {{"compress", "--eval-windows", "-1", "-o", out}, "--eval-windows: must be 0 or more, got -1"},
      {{"compress", "--checkpoint-every", "-1", "-o", out}, "--checkpoint-every: must be 0 or more, got -1"},
      {{"compress", "--lr", "0", "-o", out}, "--lr: must be a positive number, got 0"},
      {{"compress", "--lr", "inf", "-o", out}, "--lr: must be a positive number, got inf"},
      {{"compress", "--sign-lr", "-1", "-o", out}, "--sign-lr: must be 0 or more, got -1"},
      {{"compress", "--mse-weight", "-1", "-o", out}, "--mse-weight: must be 0 or more, got -1"},
      {{"compress", "--bpw", "-1", "-o", out}, "--bpw: must be a positive number, got -1"},
      {{"compress", "--bpw", "1x", "-o", out}, "--bpw: '1x' is not a number"},
      {{"compress", "--seq-len", "1", "-o", out}, "--seq-len: must be in [2, 1048576], got 1"},
      {{"compress", "--windows", "0", "-o", out}, "--windows: must be in [1, 1048576], got 0"},
      {{"compress", "--eval-seq-len", "1", "-o", out}, "--eval-seq-len: must be in [2, 1048576], got 1"},
      {{"compress", "--paths", "3", "-o", out}, "--paths"},
      {{"compress", "--calib-windows", "-1", "-o", out}, "--calib-windows: must be 0 or more, got -1"},
      {{"compress", "--max-text-tokens", "-5", "-o", out}, "--max-text-tokens: must be 0 or more, got -5"},
      {{"compress", "--init-rotate", "-1", "-o", out}, "--init-rotate: must be 0 or more, got -1"},
      {{"serve", "--port", "70000"}, "--port: must be in [0, 65535], got 70000"},
      {{"serve", "--max-tokens-limit", "0"}, "--max-tokens-limit: must be in [1, 1048576], got 0"},
      {{"serve", "--threads", "0"}, "--threads: must be in [1, 1024], got 0"},
  };
  for (const Case& c : cases) {
    const Result r = cli(c.args, 30);
    EXPECT_REFUSED(r, c.fragment);
    expect_no_absurd_number(r);
  }
  EXPECT_FALSE(fs::exists(out));
}

// ---- 12. what else a new user tries -----------------------------------------------------

// Outputs that cannot be written, texts that are directories, empty
// prompts, conflicting inputs: refused at once, naming the problem, not after
// the work (compress used to train for minutes, then fail to save).
TEST_F(Cli, NewUserMistakesAreRefusedEarly) {
  fs::create_directories(path("adir"));
  const std::string adir = path("adir").string();
  EXPECT_REFUSED(cli({"compress", "--model", model_, "--text", text_, "--eval-text", text_, "--bpw", "4", "--steps",
                      "1", "-o", "/nonexistent/dir/m.bitrank"}, 30),
                 "compress: cannot write -o /nonexistent/dir/m.bitrank: the directory /nonexistent/dir does not exist");
  EXPECT_REFUSED(cli({"compress", "--model", model_, "--text", text_, "--eval-text", text_, "--bpw", "4", "--steps",
                      "1", "-o", adir}, 30),
                 "it is a directory");
  EXPECT_REFUSED(cli({"tokenize", "--model", model_, "--text", text_, "-o", "/nonexistent/dir/x"}, 30),
                 "tokenize: cannot write -o /nonexistent/dir/x: the directory /nonexistent/dir does not exist");
  EXPECT_REFUSED(cli({"tokenize", "--model", model_, "--text", adir, "-o", path("ids").string()}, 30),
                 "corpus: " + adir + " is a directory, not a text file");
  EXPECT_REFUSED(cli({"eval", "--model", model_, "--text", adir}, 30), "is a directory, not a text file");
  EXPECT_REFUSED(cli({"eval", "--model", model_, "--text", "/nonexistent/t.txt"}, 30),
                 "corpus: cannot read /nonexistent/t.txt: No such file or directory");
  EXPECT_REFUSED(cli({"eval", "--model", model_, "--text", text_, "--ids", text_}, 30), "give --text or --ids, not both");
  EXPECT_REFUSED(cli({"generate", "--model", model_, "--prompt", ""}, 30), "generate: --prompt is empty");
#ifdef BITRANK_HAS_SERVE
  EXPECT_REFUSED(cli({"serve", "--model", model_, "--host", "256.0.0.1", "--port", "0"}, 30),
                 "serve: cannot listen on 256.0.0.1:0");
#else
  EXPECT_REFUSED(cli({"serve", "--model", model_, "--host", "256.0.0.1", "--port", "0"}, 30),
                 "serve: this bitrank was built without cpp-httplib");
#endif
  EXPECT_REFUSED(cli({"info", adir}, 30), "a directory without config.json, not a Hugging Face model directory");
  write_file(path("empty.txt"), "");
  // (--seq-len not given: 512, shortened to this model's context of 256.)
  EXPECT_REFUSED(cli({"eval", "--model", model_, "--text", path("empty.txt").string()}, 30),
                 "eval: 0 tokens do not fill one window of 256 (--seq-len)");
  // A compressed model is no teacher.
  const std::vector<std::byte> st = test::safetensors_image({{"x", {1}, {0.0f}}});
  std::ofstream(path("m.bitrank"), std::ios::binary).write(reinterpret_cast<const char*>(st.data()), std::ssize(st));
  EXPECT_REFUSED(cli({"compress", "--model", path("m.bitrank").string(), "--steps", "1", "-o", path("n.bitrank").string()}, 30),
                 "is a compressed (bitrank) model, not a teacher");
  EXPECT_FALSE(fs::exists(path("ids")));
}

// ---- 6. unknown command ----------------------------------------------------------------

TEST(CliCommands, UnknownCommandIsNamed) {
  const Result r = cli({"frobnicate"});
  EXPECT_REFUSED(r, "bitrank: unknown command 'frobnicate'; the commands are bench, compress, eval, generate, serve, export, info, "
                    "tokenize (bitrank --help)");
  EXPECT_EQ(r.out.find("A subcommand is required"), std::string::npos) << r.out;
  EXPECT_REFUSED(cli({}), "bitrank: no command given; the commands are bench, compress");
  const Result version = cli({"--version"});
  EXPECT_EQ(version.status, 0) << version.out;
  const Result help = cli({"--help"});
  EXPECT_EQ(help.status, 0) << help.out;
}

// ---- 11. help texts --------------------------------------------------------------------

TEST(CliCommands, HelpTextsReadCleanly) {
  const Result gen = cli({"generate", "--help"});
  ASSERT_EQ(gen.status, 0) << gen.out;
  EXPECT_EQ(gen.out.find("{false}"), std::string::npos) << gen.out;
  EXPECT_EQ(gen.out.find("--stop-at-eos,--no-stop-at-eos"), std::string::npos) << gen.out;
  EXPECT_NE(gen.out.find("--no-stop-at-eos"), std::string::npos) << gen.out;
  for (const char* cmd : {"eval", "generate", "serve", "compress", "bench"}) {
    const Result h = cli({cmd, "--help"});
    ASSERT_EQ(h.status, 0) << h.out;
    EXPECT_NE(h.out.find("cpu or cuda (default cpu)"), std::string::npos) << cmd << ":\n" << h.out;
  }
  for (const char* cmd : {"eval", "generate", "serve"}) {
    const Result h = cli({cmd, "--help"});
    EXPECT_NE(h.out.find(".bitrank"), std::string::npos) << cmd << ":\n" << h.out;
  }
  EXPECT_REFUSED(cli({"generate", "--prompt", "x", "--stop-at-eos", "--no-stop-at-eos"}),
                 "generate: give --stop-at-eos or --no-stop-at-eos, not both");
}

}  // namespace
}  // namespace bitrank
