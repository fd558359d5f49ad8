// Training data (DESIGN §7): the training text from the sources a user has,
// as one token stream, cut into non-overlapping windows of T tokens, nb
// windows per step, in a seeded order; and the mixing of two token streams
// (user or corpus text with teacher-generated text, train/teacher_text.hpp).
//
// Text sources (TextSources → load_training_text):
//   none given       the TRAINING split of the default corpus (io/corpus.hpp);
//                    the evaluation split's files are never opened here.
//   a file           its bytes as they are (any extension, any bytes:
//                    invalid UTF-8 passes through) — except `*.jsonl`:
//   a `.jsonl` file  one JSON object per line with a string field "text"
//                    (other fields ignored); whitespace-only lines are
//                    skipped, documents with an empty "text" add nothing; the
//                    documents are joined by a blank line ("\n\n"). JSON
//                    must be UTF-8 (nlohmann-json refuses ill-formed bytes in
//                    a string: that line is "not JSON").
//   a directory      every regular file under it, recursively (directory
//                    links not followed), named *.txt, *.md, *.rst or *.jsonl
//                    (extension in any case), in sorted path order (byte
//                    order of the path strings), so the text does not depend
//                    on the order the file system lists them. Empty files
//                    (and JSONL files without text) found there are skipped
//                    with a warning naming them.
// The sources' texts are joined, in the order given, by a blank line. A
// file reached twice (named twice, or named and under a named directory;
// compared as canonical paths) is read once, at its first place. Excluded
// files (TextSources::exclude, and by default the corpus evaluation files,
// so a user who points at the corpus directories still never trains on
// the evaluation text) are skipped under a directory and an Error when named.
// Errors (bitrank::Error), each naming the file: a path that does not exist;
// one that is neither a regular file nor a directory; a file that cannot
// be read (with the system's reason); a named file that is empty or (JSONL)
// holds no text; a directory with no such file, or only empty ones; a JSONL
// line that is not JSON, not an object, or has no string "text" (file:line).
//
// The trainer turns the text into ids once, with the model's own tokenizer as
// `bitrank eval` does (io::load_model_tokenizer(model).encode(text): plain
// text, no special tokens), and keeps them in memory (4 bytes per token).
//
// Windows: window w holds tokens [w·T, (w+1)·T); the tail shorter than T is
// dropped, as in eval. Each window is a whole training sequence (the
// objectives compare teacher and student at every position, so no extra
// target token is needed).
//
// Order: epoch e visits every window once, in the permutation made by a
// Fisher–Yates shuffle (i from n−1 down to 1, j = next_u64() mod (i+1))
// driven by XorShift(hash_counter(seed, e)) (rng.hpp), so any epoch's order
// is computed from (seed, e) alone. A step takes the next nb windows of that
// sequence, running on into the next epoch when one ends. The position
// (seed, epoch, index of the next window within the epoch) is all a resume
// needs; it also records T, nb, the window count and a fingerprint
// (FNV-1a-64) of the ids so resuming on other data or with other batches is
// an Error, never a silent change.
//
// Mixing (mix_token_streams): both streams are cut into windows of T (tails
// dropped); the result is n windows, k_b = round(share·n) of them from b and
// n − k_b from a. Slot j (0-based) holds a window of b exactly when
// ⌊(j+1)·k_b/n⌋ > ⌊j·k_b/n⌋ (b's windows spread evenly); the i-th window
// taken from a stream is window order[i mod count] of it, `order` being the
// Fisher–Yates shuffle above driven by XorShift(hash_counter(seed, 0)) for a
// and hash_counter(seed, 1) for b — so which windows are used, when not all
// are, is a seeded draw, and a stream asked for more windows than it has
// repeats its windows in that order. n is MixOptions::windows, or (0) the
// largest n that repeats no window of either stream. With the teacher's
// samples as b, generate them with seq_len = T: each window is then one
// whole sample.
//
// Held-out overlap (remove_held_out_runs): the evaluation files are never
// read for training, but texts repeat (the corpus's reST sources share
// tables, boilerplate and examples across files: on the real corpus 880 of
// the evaluation split's 349,702 runs of 64 SmolLM2 ids also occur in the
// training split, in 19 spans; removing them costs 2,931 of its 3,242,258
// ids). Every token of the training ids inside a run of k ids
// that also occurs anywhere in the held-out ids is removed and the
// remaining pieces joined; joins can form a new such run, so this repeats
// until none is left. Runs are found by a rolling polynomial hash
// (Σ id·P^(k−1−j) mod 2⁶⁴, P the FNV-64 prime) and confirmed id by id.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>
#include <string>
#include <vector>

#include "bitrank/io/corpus.hpp"

namespace bitrank::train {

struct WindowOptions {
  std::int64_t seq_len = 512;         // T ≥ 1: tokens per window
  std::int64_t windows_per_step = 8;  // nb ≥ 1: windows per step (8×512, DESIGN §11)
  std::uint64_t seed = 0;             // order of the windows
};

// Where the window sequence stands, and which stream it belongs to.
struct DataPosition {
  std::uint64_t seed = 0;
  std::int64_t epoch = 0;  // 0-based
  std::int64_t index = 0;  // the next window is the index-th of epoch `epoch`'s order, 0 ≤ index < windows
  // Identity of the stream and its batching, checked by TrainWindows::seek
  // (another nb would regroup the same windows into other steps):
  std::int64_t seq_len = 0;
  std::int64_t windows_per_step = 0;
  std::int64_t windows = 0;
  std::uint64_t fingerprint = 0;  // FNV-1a-64 of the ids' little-endian bytes
  bool operator==(const DataPosition&) const = default;
};

struct TrainingText {
  std::string text;
  // For logs: the one plain file's path; "corpus training split (N files)";
  // else the sources and what they held: "docs/, a.jsonl (12 files, 340
  // JSONL documents, 1.2 MB)".
  std::string name;
  std::vector<std::filesystem::path> files;  // the files read, in order
  std::int64_t documents = 0;                // JSONL documents read
};

// Where the training text comes from (see above).
struct TextSources {
  std::vector<std::filesystem::path> paths;  // files and directories, in order; empty: the corpus training split
  io::CorpusRoots corpus{};                  // the default corpus (its training split, and its evaluation files to exclude)
  std::vector<std::filesystem::path> exclude;  // files never read (e.g. a user's evaluation text)
  bool exclude_corpus_eval = true;             // also exclude the corpus evaluation split (when the corpus is installed)
};

// The text of `sources` (see above). Error naming the file on every failure listed there.
TrainingText load_training_text(const TextSources& sources);
// One source: `user_text` empty: the corpus training split under `roots`,
// read as io::read_corpus_text reads it; otherwise that file or directory.
TrainingText load_training_text(const std::filesystem::path& user_text = {}, const io::CorpusRoots& roots = {});

struct MixOptions {
  double share = 0.5;        // of the windows, the share taken from b, in [0, 1]
  std::int64_t seq_len = 512;  // T ≥ 1: the window both streams are cut into (the training windows' T)
  std::uint64_t seed = 0;      // which windows, when not all are used
  std::int64_t windows = 0;    // n ≥ 0: windows wanted; 0: the most that repeat no window
};

struct MixedIds {
  std::vector<std::int32_t> ids;  // n·T ids
  std::int64_t from_a = 0, from_b = 0;  // windows taken from each stream
};

struct HeldOutOverlap {
  std::vector<std::int32_t> ids;  // the training ids without the overlapping runs
  std::int64_t runs = 0;          // k-runs found in the held-out ids (over all passes)
  std::int64_t removed = 0;       // training ids removed
};

// `ids` without any run of k ids that occurs in `held_out` (see above).
// Error when k < 1. Streams shorter than k: `ids` unchanged.
HeldOutOverlap remove_held_out_runs(std::span<const std::int32_t> ids, std::span<const std::int32_t> held_out,
                                    std::int64_t k = 64);

// a and b (e.g. the training text's ids and the teacher's) mixed window by
// window at the stated share (see above); deterministic for (a, b, options).
// Error when share is outside [0, 1], T < 1 or windows < 0, or when a
// stream that must give windows has none (fewer than T ids), naming it.
MixedIds mix_token_streams(std::span<const std::int32_t> a, std::span<const std::int32_t> b, const MixOptions& options);

// FNV-1a-64 of `bytes`, continuing from `h` (kFnv1a64Basis starts a hash).
inline constexpr std::uint64_t kFnv1a64Basis = 0xCBF29CE484222325ull;
std::uint64_t fnv1a64(std::span<const std::byte> bytes, std::uint64_t h = kFnv1a64Basis);

// FNV-1a-64 over the ids' little-endian bytes (the stream fingerprint).
std::uint64_t ids_fingerprint(std::span<const std::int32_t> ids);

struct Batch {
  std::vector<std::int32_t> ids;     // nb×T, row b is window windows[b]
  std::vector<std::int64_t> windows;  // the window numbers, in order
};

class TrainWindows {
 public:
  // Error when an option is out of range or the ids hold fewer than nb
  // windows of T (naming the counts).
  TrainWindows(std::vector<std::int32_t> ids, const WindowOptions& options);

  std::int64_t seq_len() const { return o_.seq_len; }
  std::int64_t windows_per_step() const { return o_.windows_per_step; }
  std::int64_t windows() const { return windows_; }  // n = ⌊tokens / T⌋
  std::int64_t tokens() const { return static_cast<std::int64_t>(ids_.size()); }
  std::span<const std::int32_t> window(std::int64_t w) const;  // Error when w ∉ [0, n)
  // The window visited at place `index` of epoch `epoch`.
  std::int64_t window_at(std::int64_t epoch, std::int64_t index) const;

  Batch next();  // the next nb windows; advances the position
  DataPosition position() const;
  // Continue from a saved position: Error unless seed, T, nb, the window
  // count and the fingerprint match this stream and epoch/index are in range.
  void seek(const DataPosition& position);

 private:
  const std::vector<std::int64_t>& order(std::int64_t epoch) const;

  std::vector<std::int32_t> ids_;
  WindowOptions o_;
  std::int64_t windows_ = 0;
  std::uint64_t fingerprint_ = 0;
  std::int64_t epoch_ = 0, index_ = 0;
  mutable std::int64_t order_epoch_ = -1;  // which epoch order_ holds
  mutable std::vector<std::int64_t> order_;
};

}  // namespace bitrank::train
