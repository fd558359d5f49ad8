// Training text from its sources (train/data.hpp): files, directories
// (recursive, sorted, by extension), JSONL; the exclusion of evaluation
// files; every error naming its file (and line). The mixing of two id
// streams: counts, even placement, no repetition unless asked, seeded
// choice, bad options. And the evaluation text is never trained on: on the
// real corpus (when installed) no 64-token run of the evaluation ids occurs
// anywhere in the training ids.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "bitrank/io/corpus.hpp"
#include "bitrank/io/tokenizer.hpp"
#include "bitrank/train/data.hpp"
#include "support/expect.hpp"
#include "support/temp_dir.hpp"

namespace bitrank::train {
namespace {

namespace fs = std::filesystem;
using test::expect_error;
using test::expect_error_with;

void write(const fs::path& p, std::string_view bytes) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << bytes;
}

// Sources that read no corpus (so these tests do not depend on it).
TextSources sources(std::vector<fs::path> paths) {
  TextSources s;
  s.paths = std::move(paths);
  s.exclude_corpus_eval = false;
  return s;
}

TEST(TrainSources, DirectoryIsRecursiveSortedAndFilteredByExtension) {
  const test::TempDir tmp;
  const fs::path d = tmp.path() / "docs";
  write(d / "b.md", "B-md");
  write(d / "a.txt", "A-txt");
  write(d / "E.TXT", "E-upper");  // extensions in any case; 'E' sorts before 'a' (byte order)
  write(d / "sub" / "c.rst", "C-rst");
  write(d / "sub" / "d.jsonl", R"({"text": "D-json", "id": 1})" "\n");
  write(d / "sub" / "deeper" / "f.txt", "F-deep");
  write(d / "image.png", "not text");
  write(d / "notes", "no extension");
  write(d / "z.txt.bak", "a backup");
  write(d / "empty.txt", "");  // skipped (with a warning) under a directory
  const TrainingText t = load_training_text(sources({d}));
  EXPECT_EQ(t.text, "E-upper\n\nA-txt\n\nB-md\n\nC-rst\n\nD-json\n\nF-deep");
  const std::vector<fs::path> want = {d / "E.TXT", d / "a.txt", d / "b.md", d / "sub" / "c.rst",
                                      d / "sub" / "d.jsonl", d / "sub" / "deeper" / "f.txt"};
  EXPECT_EQ(t.files, want);
  EXPECT_EQ(t.documents, 1);
  EXPECT_EQ(t.name, d.string() + " (6 files, 1 JSONL document, 43 B)");
  // Deterministic: the same text however often it is read.
  EXPECT_EQ(load_training_text(sources({d})).text, t.text);
}

TEST(TrainSources, SeveralSourcesInOrderEachFileOnce) {
  const test::TempDir tmp;
  const fs::path d = tmp.path() / "d", a = tmp.path() / "a.txt", j = tmp.path() / "j.jsonl";
  write(d / "x.txt", "X");
  write(d / "y.md", "Y");
  write(a, "first\n");
  write(j, R"({"text": "doc one"})" "\n" R"({"text": "doc two", "meta": {"k": [1, 2]}})" "\n");
  const TrainingText t = load_training_text(sources({a, d, j, d / "y.md"}));  // y.md is named again: read once
  EXPECT_EQ(t.text, "first\n\n\nX\n\nY\n\ndoc one\n\ndoc two");
  EXPECT_EQ(t.files, (std::vector<fs::path>{a, d / "x.txt", d / "y.md", j}));
  EXPECT_EQ(t.documents, 2);
  EXPECT_EQ(t.name, fmt::format("{}, {}, {} and 1 more (4 files, 2 JSONL documents, 30 B)", a.string(), d.string(),
                                j.string()));
  // One plain file keeps its path as the name (what `compress --text FILE` logged before).
  EXPECT_EQ(load_training_text(sources({a})).name, a.string());
  EXPECT_EQ(load_training_text(a).text, "first\n");
}

TEST(TrainSources, JsonlDocuments) {
  const test::TempDir tmp;
  const fs::path j = tmp.path() / "data.JSONL";
  // CRLF line ends, blank and whitespace-only lines, escapes, an empty document, other fields of any type.
  write(j, "{\"text\": \"caf\\u00e9 \\\"quoted\\\"\\nline two\", \"score\": 0.5}\r\n"
           "\n"
           "   \t\n"
           "{\"title\": null, \"text\": \"\"}\n"
           "{\"text\": \"\xce\xbb last\", \"tags\": [\"a\"]}");  // UTF-8 kept; no final newline
  const TrainingText t = load_training_text(sources({j}));
  EXPECT_EQ(t.text, "caf\xc3\xa9 \"quoted\"\nline two\n\n\xce\xbb last");
  EXPECT_EQ(t.documents, 2);
  EXPECT_EQ(t.name, j.string() + " (1 file, 2 JSONL documents, 32 B)");
}

TEST(TrainSources, PlainTextBytesPassThrough) {
  const test::TempDir tmp;
  const fs::path f = tmp.path() / "bytes.txt";
  const std::string bytes = std::string("ok \xff\xfe invalid \xc3 UTF-8 and a NUL: ") + '\0' + "end\r\n";
  write(f, bytes);
  EXPECT_EQ(load_training_text(sources({f})).text, bytes);
}

TEST(TrainSources, ErrorsNameTheFile) {
  const test::TempDir tmp;
  const fs::path missing = tmp.path() / "nope.txt";
  expect_error([&] { load_training_text(sources({missing})); }, missing.string() + " does not exist");

  const fs::path empty = tmp.path() / "empty.txt";
  write(empty, "");
  expect_error([&] { load_training_text(sources({empty})); }, empty.string() + " is empty");

  expect_error([&] { load_training_text(sources({"/dev/null"})); }, "/dev/null is neither a regular file nor a directory");

  // Unreadable: a file without read permission (not for root, which reads it
  // anyway; then a file whose read fails: /proc/self/mem at offset 0).
  fs::path unreadable = tmp.path() / "secret.txt";
  write(unreadable, "secret");
  fs::permissions(unreadable, fs::perms::none);
  if (::geteuid() == 0) unreadable = "/proc/self/mem";
  if (fs::exists(unreadable)) expect_error([&] { load_training_text(sources({unreadable})); }, "cannot read " + unreadable.string() + ": ");

  const fs::path no_text = tmp.path() / "pictures";
  write(no_text / "a.png", "png");
  write(no_text / "sub" / "b.json", "{}");
  expect_error([&] { load_training_text(sources({no_text})); },
               "directory " + no_text.string() + " holds no .txt, .md, .rst or .jsonl file");
  const fs::path only_empty = tmp.path() / "hollow";
  write(only_empty / "a.txt", "");
  write(only_empty / "b.jsonl", "\n{\"text\": \"\"}\n");
  expect_error([&] { load_training_text(sources({only_empty})); },
               "directory " + only_empty.string() + " holds no text (2 .txt/.md/.rst/.jsonl files, all empty");

  const fs::path j = tmp.path() / "bad.jsonl";
  const auto jsonl_error = [&](std::string_view content, const std::string& message) {
    write(j, content);
    expect_error([&] { load_training_text(sources({j})); }, j.string() + message);
  };
  jsonl_error("{\"text\": \"fine\"}\n{\"text\": \"unterminated}\n", ":2: not JSON (");
  jsonl_error("{\"text\": \"a\"}\n\n[\"text\", \"b\"]\n", ":3: not a JSON object");
  jsonl_error("{\"body\": \"a\"}\n", ":1: no string field \"text\"");
  jsonl_error("{\"text\": \"a\"}\n{\"text\": 42}\n", ":2: no string field \"text\"");
  jsonl_error("{\"text\": [\"a\"]}\n", ":1: no string field \"text\"");
  jsonl_error("{\"text\": \"a\"} trailing\n", ":1: not JSON (");
  jsonl_error("{\"text\": \"\xff\"}\n", ":1: not JSON (");  // JSON strings must be UTF-8
  jsonl_error("\n  \n", " holds no text");
  jsonl_error("{\"text\": \"\"}\n", " holds no text");
  // The same bad file under a directory is still an error naming it and its line.
  const fs::path dir = tmp.path() / "withbad";
  write(dir / "a.txt", "fine");
  write(dir / "z" / "b.jsonl", "{\"text\": \"ok\"}\n{oops}\n");
  expect_error([&] { load_training_text(sources({dir})); }, (dir / "z" / "b.jsonl").string() + ":2: not JSON");
}

// A fake corpus: its evaluation files are excluded from any source, by
// default; naming one is an error.
TEST(TrainSources, EvaluationFilesAreNeverRead) {
  const test::TempDir tmp;
  io::CorpusRoots roots{.python_doc_sources = tmp.path() / "doc", .fortunes = tmp.path() / "fortunes"};
  for (int i = 0; i < 25; ++i) write(roots.python_doc_sources / fmt::format("d{:02}.txt", i), fmt::format("<<d{:02}>>", i));
  const io::CorpusSplit split = io::split_corpus(io::corpus_files(roots));
  ASSERT_EQ(split.eval.size(), 2u);  // d09, d19

  TextSources s;
  s.paths = {roots.python_doc_sources};
  s.corpus = roots;
  const TrainingText t = load_training_text(s);
  EXPECT_EQ(t.files, split.train);
  EXPECT_EQ(t.text, io::read_corpus_text(split.train));
  for (const auto& e : split.eval) EXPECT_EQ(t.text.find("<<" + e.stem().string() + ">>"), std::string::npos);

  s.paths = {split.eval[0]};
  expect_error([&] { load_training_text(s); }, split.eval[0].string() + " is an evaluation file");
  // Through another spelling of the same path too.
  s.paths = {roots.python_doc_sources / ".." / "doc" / split.eval[1].filename()};
  expect_error([&] { load_training_text(s); }, " is an evaluation file");
  // A user's own evaluation text, excluded by name.
  const fs::path mine = tmp.path() / "mine";
  write(mine / "train.txt", "train me");
  write(mine / "heldout.txt", "evaluate me");
  s.paths = {mine};
  s.exclude = {mine / "heldout.txt"};
  EXPECT_EQ(load_training_text(s).text, "train me");
  // Without the exclusion the corpus directory gives every file.
  s.paths = {roots.python_doc_sources};
  s.exclude = {};
  s.exclude_corpus_eval = false;
  EXPECT_EQ(load_training_text(s).files.size(), 25u);
}

// ---- mixing -----------------------------------------------------------------------

// n windows of T whose ids are base + window number (each window identifiable).
std::vector<std::int32_t> stream(std::int64_t n, std::int64_t T, std::int32_t base, std::int64_t tail = 0) {
  std::vector<std::int32_t> ids;
  for (std::int64_t w = 0; w < n; ++w) ids.insert(ids.end(), static_cast<std::size_t>(T), base + static_cast<std::int32_t>(w));
  ids.insert(ids.end(), static_cast<std::size_t>(tail), -1);
  return ids;
}

// The windows of a mixed stream, as the ids they are made of.
std::vector<std::int32_t> window_ids(const MixedIds& m, std::int64_t T) {
  std::vector<std::int32_t> w;
  EXPECT_EQ(m.ids.size() % static_cast<std::size_t>(T), 0u);
  for (std::size_t i = 0; i < m.ids.size(); i += static_cast<std::size_t>(T)) {
    for (std::int64_t k = 1; k < T; ++k) EXPECT_EQ(m.ids[i + k], m.ids[i]) << "a window is cut whole from one stream";
    w.push_back(m.ids[i]);
  }
  return w;
}

TEST(TrainMix, SharesCountsAndEvenPlacement) {
  const std::int64_t T = 8;
  const auto a = stream(100, T, 0, 5), b = stream(50, T, 1000, 7);  // tails shorter than T are dropped
  for (const double share : {0.25, 0.5, 0.1, 0.9, 1.0 / 3}) {
    SCOPED_TRACE(share);
    const MixedIds m = mix_token_streams(a, b, {.share = share, .seq_len = T, .seed = 3});
    const std::int64_t n = m.from_a + m.from_b;
    EXPECT_EQ(m.from_b, std::llround(share * static_cast<double>(n)));
    EXPECT_LE(m.from_a, 100);
    EXPECT_LE(m.from_b, 50);
    // The largest n without a repeated window: one more would need a window twice.
    const std::int64_t kb1 = std::llround(share * static_cast<double>(n + 1));
    EXPECT_TRUE(kb1 > 50 || n + 1 - kb1 > 100) << n;
    const auto w = window_ids(m, T);
    ASSERT_EQ(static_cast<std::int64_t>(w.size()), n);
    std::set<std::int32_t> seen;
    std::int64_t b_so_far = 0;
    for (std::int64_t j = 0; j < n; ++j) {
      EXPECT_TRUE(seen.insert(w[j]).second) << "window " << w[j] << " twice";
      EXPECT_NE(w[j], -1) << "a tail id";
      b_so_far += w[j] >= 1000;
      EXPECT_EQ(b_so_far, (j + 1) * m.from_b / n) << "b's windows spread evenly, slot " << j;
    }
  }
  const MixedIds q = mix_token_streams(a, b, {.share = 0.25, .seq_len = T, .seed = 3});
  EXPECT_EQ(q.from_a, 100);  // a runs out first: 100 of a, 34 of b (round(0.25·134) = 34)
  EXPECT_EQ(q.from_b, 34);
}

TEST(TrainMix, AllOfOneStreamAndRepetition) {
  const std::int64_t T = 4;
  const auto a = stream(10, T, 0), b = stream(3, T, 100);
  const MixedIds only_a = mix_token_streams(a, {}, {.share = 0, .seq_len = T, .seed = 1});
  EXPECT_EQ(only_a.from_a, 10);
  EXPECT_EQ(only_a.from_b, 0);
  auto w = window_ids(only_a, T);
  std::sort(w.begin(), w.end());
  EXPECT_EQ(w, (std::vector<std::int32_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));  // each window once, shuffled
  const MixedIds only_b = mix_token_streams({}, b, {.share = 1, .seq_len = T, .seed = 1});
  EXPECT_EQ(only_b.from_b, 3);
  EXPECT_EQ(only_b.ids.size(), 12u);
  // More windows than b has: b's windows repeat, in their seeded order.
  const MixedIds rep = mix_token_streams(a, b, {.share = 0.5, .seq_len = T, .seed = 1, .windows = 14});
  EXPECT_EQ(rep.from_b, 7);
  EXPECT_EQ(rep.from_a, 7);
  std::vector<std::int32_t> bs;
  for (const std::int32_t id : window_ids(rep, T))
    if (id >= 100) bs.push_back(id);
  ASSERT_EQ(bs.size(), 7u);
  for (std::size_t i = 3; i < 7; ++i) EXPECT_EQ(bs[i], bs[i - 3]) << "cycles through b's order";
  std::set<std::int32_t> distinct(bs.begin(), bs.begin() + 3);
  EXPECT_EQ(distinct.size(), 3u);
}

TEST(TrainMix, SeededAndDeterministic) {
  const std::int64_t T = 16;
  const auto a = stream(200, T, 0), b = stream(200, T, 10000);
  const MixOptions o{.share = 0.3, .seq_len = T, .seed = 7, .windows = 50};
  const MixedIds x = mix_token_streams(a, b, o), y = mix_token_streams(a, b, o);
  EXPECT_EQ(x.ids, y.ids);
  MixOptions other = o;
  other.seed = 8;
  const MixedIds z = mix_token_streams(a, b, other);
  EXPECT_EQ(z.from_b, x.from_b);
  EXPECT_NE(z.ids, x.ids) << "another seed picks other windows";
}

TEST(TrainMix, RejectsBadOptions) {
  const auto a = stream(4, 8, 0), b = stream(4, 8, 100);
  expect_error([&] { mix_token_streams(a, b, {.share = -0.1, .seq_len = 8}); }, "share of b must be in [0, 1], got -0.1");
  expect_error([&] { mix_token_streams(a, b, {.share = 1.5, .seq_len = 8}); }, "got 1.5");
  expect_error([&] { mix_token_streams(a, b, {.share = NAN, .seq_len = 8}); }, "got nan");
  expect_error([&] { mix_token_streams(a, b, {.share = 0.5, .seq_len = 0}); }, "seq_len must be ≥ 1, got 0");
  expect_error([&] { mix_token_streams(a, b, {.share = 0.5, .seq_len = 8, .windows = -1}); }, "windows must be ≥ 0");
  expect_error([&] { mix_token_streams(std::vector<std::int32_t>(7, 1), b, {.share = 0.5, .seq_len = 8}); },
               "stream a has 7 tokens, not one window of 8");
  expect_error([&] { mix_token_streams(a, {}, {.share = 0.01, .seq_len = 8}); }, "stream b has 0 tokens");
}

// ---- the evaluation text is never trained on ---------------------------------------

TEST(TrainSources, RemoveHeldOutRuns) {
  // held-out: 10 11 12 13 14 15; runs of 3 of it inside the training ids are cut out.
  const std::vector<std::int32_t> held = {10, 11, 12, 13, 14, 15};
  const std::vector<std::int32_t> train = {1, 2, 11, 12, 13, 3, 12, 13, 14, 15, 4, 10, 11, 5, 13, 14};
  const HeldOutOverlap r = remove_held_out_runs(train, held, 3);
  EXPECT_EQ(r.ids, (std::vector<std::int32_t>{1, 2, 3, 4, 10, 11, 5, 13, 14}));  // runs shorter than 3 stay
  EXPECT_EQ(r.runs, 3);  // 11 12 13; 12 13 14; 13 14 15
  EXPECT_EQ(r.removed, 7);
  // A join that forms a new run is cut in the next pass.
  const std::vector<std::int32_t> held2 = {7, 8, 9, 1, 2, 3};
  const std::vector<std::int32_t> train2 = {5, 7, 1, 2, 3, 8, 9, 6};  // 1 2 3 goes, then 7 8 9 is joined
  const HeldOutOverlap r2 = remove_held_out_runs(train2, held2, 3);
  EXPECT_EQ(r2.ids, (std::vector<std::int32_t>{5, 6}));
  EXPECT_EQ(r2.runs, 2);
  EXPECT_EQ(r2.removed, 6);
  // Nothing shared, or streams shorter than k: unchanged.
  EXPECT_EQ(remove_held_out_runs(train, std::vector<std::int32_t>{20, 21, 22, 23}, 3).ids, train);
  EXPECT_EQ(remove_held_out_runs(train, held, 7).ids, train);
  EXPECT_EQ(remove_held_out_runs(std::vector<std::int32_t>{11, 12}, held, 3).ids, (std::vector<std::int32_t>{11, 12}));
  expect_error([&] { remove_held_out_runs(train, held, 0); }, "run length must be ≥ 1, got 0");
}

// The runs of K evaluation ids (at every offset) that occur in `train`,
// found independently of the library (a rolling hash over every run,
// confirmed id by id): calls fn(offset in eval) for each.
template <class Fn>
std::size_t shared_runs(const std::vector<std::int32_t>& train, const std::vector<std::int32_t>& eval, std::size_t K,
                        Fn&& fn) {
  const std::uint64_t P = 1000003;
  std::uint64_t pk = 1;
  for (std::size_t i = 1; i < K; ++i) pk *= P;
  const auto runs = [&](const std::vector<std::int32_t>& ids, auto&& on_run) {
    std::uint64_t h = 0;
    for (std::size_t i = 0; i < ids.size(); ++i) {
      if (i >= K) h -= pk * static_cast<std::uint64_t>(ids[i - K] + 1);
      h = h * P + static_cast<std::uint64_t>(ids[i] + 1);
      if (i + 1 >= K) on_run(h, i + 1 - K);
    }
  };
  std::vector<std::pair<std::uint64_t, std::size_t>> train_runs;  // (hash, offset), sorted
  train_runs.reserve(train.size());
  runs(train, [&](std::uint64_t h, std::size_t at) { train_runs.emplace_back(h, at); });
  std::sort(train_runs.begin(), train_runs.end());
  std::size_t found = 0;
  runs(eval, [&](std::uint64_t h, std::size_t at) {
    for (auto it = std::lower_bound(train_runs.begin(), train_runs.end(), std::pair<std::uint64_t, std::size_t>{h, 0});
         it != train_runs.end() && it->first == h; ++it)
      if (std::equal(eval.begin() + at, eval.begin() + at + K, train.begin() + it->second)) {
        ++found;
        fn(at);
        break;
      }
  });
  return found;
}

// On the real corpus (python3.11-doc + fortunes; skipped when absent): no
// file is in both parts, and the default training text is the training
// files' text. The texts themselves repeat across files (reST tables,
// boilerplate), so some runs of 64 evaluation ids do occur in the raw
// training ids (counted and shown); after remove_held_out_runs none does —
// at any offset (the model's tokenizer: SmolLM2's GGUF when installed, else
// the test copy of its tokenizer.json).
TEST(TrainSources, RealCorpusEvalWindowsNeverInTraining) {
  std::vector<fs::path> files;
  try {
    files = io::corpus_files();
  } catch (const Error& e) {
    GTEST_SKIP() << "corpus not installed: " << e.what();
  }
  const io::CorpusSplit split = io::split_corpus(files);
  std::set<fs::path> train_set;
  for (const auto& f : split.train) train_set.insert(fs::weakly_canonical(f));
  for (const auto& e : split.eval) EXPECT_FALSE(train_set.contains(fs::weakly_canonical(e))) << e;
  EXPECT_EQ(train_set.size(), split.train.size());
  ASSERT_GT(split.eval.size(), 0u);

  const TrainingText train = load_training_text();
  ASSERT_EQ(train.files, split.train);
  const std::string gguf = BITRANK_SMOLLM2_GGUF;
  const io::Tokenizer tok = gguf.empty()
                                ? io::Tokenizer(io::load_tokenizer_json(fs::path(BITRANK_TEST_DATA_DIR) / "tokenizer" / "smollm.json"))
                                : io::load_model_tokenizer(gguf);
  const std::vector<std::int32_t> train_ids = tok.encode(train.text);
  const std::vector<std::int32_t> eval_ids = tok.encode(io::read_corpus_text(split.eval));
  constexpr std::size_t K = 64;
  ASSERT_GT(eval_ids.size(), K);

  // The raw overlap: eval positions covered by a shared run, in spans.
  std::vector<bool> covered(eval_ids.size(), false);
  const std::size_t raw = shared_runs(train_ids, eval_ids, K, [&](std::size_t at) {
    std::fill(covered.begin() + static_cast<std::ptrdiff_t>(at), covered.begin() + static_cast<std::ptrdiff_t>(at + K), true);
  });
  std::size_t spans = 0, covered_ids = 0;
  std::string longest;
  for (std::size_t i = 0, start = 0; i <= covered.size(); ++i) {
    const bool c = i < covered.size() && covered[i];
    if (c && (i == 0 || !covered[i - 1])) start = i;
    if (!c && i > 0 && covered[i - 1]) {
      ++spans;
      covered_ids += i - start;
      std::string text = tok.decode(std::span(eval_ids).subspan(start, std::min<std::size_t>(i - start, 40)));
      std::replace(text.begin(), text.end(), '\n', ' ');
      if (i - start > longest.size()) longest = fmt::format("{} ids from \"{}\"", i - start, text);
    }
  }
  std::printf("  [train data] real corpus: %zu training files (%zu ids), %zu evaluation files (%zu ids); raw: %zu of "
              "%zu evaluation runs of %zu ids occur in training (%zu spans, %zu ids, %.3f%% of the evaluation ids; "
              "e.g. %s)\n",
              split.train.size(), train_ids.size(), split.eval.size(), eval_ids.size(), raw, eval_ids.size() - K + 1,
              K, spans, covered_ids, 100.0 * static_cast<double>(covered_ids) / static_cast<double>(eval_ids.size()),
              longest.substr(0, 160).c_str());

  const HeldOutOverlap clean = remove_held_out_runs(train_ids, eval_ids, static_cast<std::int64_t>(K));
  EXPECT_GE(clean.runs, 1);
  EXPECT_EQ(static_cast<std::size_t>(clean.removed), train_ids.size() - clean.ids.size());
  std::size_t left = 0;
  std::string first;
  shared_runs(clean.ids, eval_ids, K, [&](std::size_t at) {
    if (left++ == 0) first = tok.decode(std::span(eval_ids).subspan(at, K));
  });
  EXPECT_EQ(left, 0u) << "evaluation runs of " << K << " ids still in the training ids; the first: " << first;
  std::printf("  [train data] after remove_held_out_runs: %lld training ids removed (%.3f%%), %zu evaluation runs "
              "of %zu ids in training\n",
              static_cast<long long>(clean.removed),
              100.0 * static_cast<double>(clean.removed) / static_cast<double>(train_ids.size()), left, K);
}

}  // namespace
}  // namespace bitrank::train
