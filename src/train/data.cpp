// Training text, token windows and their seeded order (contract:
// include/bitrank/train/data.hpp).
#include "bitrank/train/data.hpp"

#include <fmt/format.h>

#include "bitrank/error.hpp"
#include "bitrank/rng.hpp"

namespace bitrank::train {

TrainingText load_training_text(const std::filesystem::path& user_text, const io::CorpusRoots& roots) {
  TrainingText t;
  if (user_text.empty()) {
    // Only the training part of the split is read; the evaluation files stay unopened.
    const io::CorpusSplit split = io::split_corpus(io::corpus_files(roots));
    if (split.train.empty()) fail("training text: the corpus has no training files");
    t.text = io::read_corpus_text(split.train);
    t.name = fmt::format("corpus training split ({} files)", split.train.size());
  } else {
    t.text = io::read_corpus_text({user_text});
    t.name = user_text.string();
  }
  if (t.text.empty()) fail("training text: {} is empty", t.name);
  return t;
}

namespace {
constexpr std::uint64_t kFnv1a64Prime = 0x100000001B3ull;
}  // namespace

std::uint64_t fnv1a64(std::span<const std::byte> bytes, std::uint64_t h) {
  for (const std::byte b : bytes) h = (h ^ static_cast<std::uint64_t>(b)) * kFnv1a64Prime;
  return h;
}

std::uint64_t ids_fingerprint(std::span<const std::int32_t> ids) {
  std::uint64_t h = kFnv1a64Basis;
  for (const std::int32_t id : ids) {
    const auto u = static_cast<std::uint32_t>(id);
    for (int k = 0; k < 4; ++k) h = (h ^ ((u >> (8 * k)) & 0xFFu)) * kFnv1a64Prime;
  }
  return h;
}

TrainWindows::TrainWindows(std::vector<std::int32_t> ids, const WindowOptions& options)
    : ids_(std::move(ids)), o_(options) {
  if (o_.seq_len < 1) fail("training windows: seq_len must be ≥ 1, got {}", o_.seq_len);
  if (o_.windows_per_step < 1) fail("training windows: windows_per_step must be ≥ 1, got {}", o_.windows_per_step);
  windows_ = static_cast<std::int64_t>(ids_.size()) / o_.seq_len;
  if (windows_ < o_.windows_per_step)
    fail("training windows: {} tokens make {} windows of {}, fewer than the {} per step", ids_.size(), windows_,
         o_.seq_len, o_.windows_per_step);
  ids_.resize(static_cast<std::size_t>(windows_ * o_.seq_len));  // the tail is never read
  fingerprint_ = ids_fingerprint(ids_);
}

std::span<const std::int32_t> TrainWindows::window(std::int64_t w) const {
  if (w < 0 || w >= windows_) fail("training windows: window {} out of range [0, {})", w, windows_);
  return {ids_.data() + w * o_.seq_len, static_cast<std::size_t>(o_.seq_len)};
}

const std::vector<std::int64_t>& TrainWindows::order(std::int64_t epoch) const {
  if (order_epoch_ != epoch) {
    order_.resize(static_cast<std::size_t>(windows_));
    for (std::int64_t i = 0; i < windows_; ++i) order_[static_cast<std::size_t>(i)] = i;
    XorShift g(hash_counter(o_.seed, static_cast<std::uint64_t>(epoch)));
    for (std::int64_t i = windows_ - 1; i > 0; --i) {
      const auto j = static_cast<std::int64_t>(g.next_u64() % static_cast<std::uint64_t>(i + 1));
      std::swap(order_[static_cast<std::size_t>(i)], order_[static_cast<std::size_t>(j)]);
    }
    order_epoch_ = epoch;
  }
  return order_;
}

std::int64_t TrainWindows::window_at(std::int64_t epoch, std::int64_t index) const {
  if (epoch < 0 || index < 0 || index >= windows_)
    fail("training windows: place (epoch {}, index {}) out of range (index < {})", epoch, index, windows_);
  return order(epoch)[static_cast<std::size_t>(index)];
}

Batch TrainWindows::next() {
  Batch b;
  b.ids.reserve(static_cast<std::size_t>(o_.windows_per_step * o_.seq_len));
  for (std::int64_t k = 0; k < o_.windows_per_step; ++k) {
    const std::int64_t w = window_at(epoch_, index_);
    const auto tokens = window(w);
    b.ids.insert(b.ids.end(), tokens.begin(), tokens.end());
    b.windows.push_back(w);
    if (++index_ == windows_) {
      index_ = 0;
      ++epoch_;
    }
  }
  return b;
}

DataPosition TrainWindows::position() const {
  return {.seed = o_.seed, .epoch = epoch_, .index = index_, .seq_len = o_.seq_len,
          .windows_per_step = o_.windows_per_step, .windows = windows_, .fingerprint = fingerprint_};
}

void TrainWindows::seek(const DataPosition& p) {
  if (p.seed != o_.seed || p.seq_len != o_.seq_len || p.windows_per_step != o_.windows_per_step ||
      p.windows != windows_ || p.fingerprint != fingerprint_)
    fail("training windows: the saved position is for other data (seed {}, {} windows of {}, {} per step, "
         "fingerprint {:016x}); this stream has seed {}, {} windows of {}, {} per step, fingerprint {:016x}",
         p.seed, p.windows, p.seq_len, p.windows_per_step, p.fingerprint, o_.seed, windows_, o_.seq_len,
         o_.windows_per_step, fingerprint_);
  if (p.epoch < 0 || p.index < 0 || p.index >= windows_)
    fail("training windows: saved place (epoch {}, index {}) out of range (index < {})", p.epoch, p.index, windows_);
  epoch_ = p.epoch;
  index_ = p.index;
}

}  // namespace bitrank::train
