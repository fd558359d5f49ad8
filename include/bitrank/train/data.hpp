// Training data (DESIGN §7): the training text as one token stream, cut into
// non-overlapping windows of T tokens, nb windows per step, in a seeded order.
//
// Text: the TRAINING split of the default corpus (io/corpus.hpp) — the
// evaluation split's files are never opened here — or one user text file.
// The trainer turns it into ids once, with the model's own tokenizer as
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
  std::string name;  // for logs: the file, or "corpus training split (N files)"
};

// `user_text` empty: the training split of the corpus under `roots`, read as
// io::read_corpus_text reads it; otherwise that one file. Error when a file
// cannot be read or the text is empty.
TrainingText load_training_text(const std::filesystem::path& user_text = {}, const io::CorpusRoots& roots = {});

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
