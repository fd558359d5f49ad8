// Training text from its sources, token windows and their seeded order, the
// mixing of two token streams (contract: include/bitrank/train/data.hpp).
#include "bitrank/train/data.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>

#include "bitrank/error.hpp"
#include "bitrank/log.hpp"
#include "bitrank/rng.hpp"

namespace bitrank::train {

namespace fs = std::filesystem;

namespace {

// The whole file, or an Error naming it with the system's reason.
std::string read_file(const fs::path& path) {
  errno = 0;
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> f(std::fopen(path.c_str(), "rb"), std::fclose);
  if (!f) fail("training text: cannot read {}: {}", path.string(), std::strerror(errno));
  std::string out;
  char buf[1 << 16];
  for (;;) {
    const std::size_t got = std::fread(buf, 1, sizeof buf, f.get());
    out.append(buf, got);
    if (got < sizeof buf) break;
  }
  if (std::ferror(f.get())) fail("training text: cannot read {}: {}", path.string(), std::strerror(errno ? errno : EIO));
  return out;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool is_jsonl(const fs::path& p) { return lower(p.extension().string()) == ".jsonl"; }

bool is_text_file_name(const fs::path& p) {
  const std::string e = lower(p.extension().string());
  return e == ".txt" || e == ".md" || e == ".rst" || e == ".jsonl";
}

// The documents of a JSONL text joined by a blank line; `documents` counts them.
std::string read_jsonl(const fs::path& path, const std::string& bytes, std::int64_t& documents) {
  std::string out;
  std::size_t at = 0;
  for (std::int64_t line = 1; at < bytes.size(); ++line) {
    std::size_t end = bytes.find('\n', at);
    if (end == std::string::npos) end = bytes.size();
    const std::string_view l(bytes.data() + at, end - at);
    at = end + 1;
    if (std::all_of(l.begin(), l.end(), [](char c) { return c == ' ' || c == '\t' || c == '\r'; })) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(l);
    } catch (const nlohmann::json::exception& e) {
      fail("training text: {}:{}: not JSON ({})", path.string(), line, e.what());
    }
    if (!j.is_object()) fail("training text: {}:{}: not a JSON object", path.string(), line);
    const auto text = j.find("text");
    if (text == j.end() || !text->is_string())
      fail("training text: {}:{}: no string field \"text\"", path.string(), line);
    const auto& doc = text->get_ref<const std::string&>();
    if (doc.empty()) continue;
    if (!out.empty()) out += "\n\n";
    out += doc;
    ++documents;
  }
  return out;
}

std::string size_str(std::size_t bytes) {
  if (bytes < 1000) return fmt::format("{} B", bytes);
  if (bytes < 1000 * 1000) return fmt::format("{:.1f} kB", static_cast<double>(bytes) / 1e3);
  if (bytes < 1000ull * 1000 * 1000) return fmt::format("{:.1f} MB", static_cast<double>(bytes) / 1e6);
  return fmt::format("{:.2f} GB", static_cast<double>(bytes) / 1e9);
}

fs::path canonical_or_self(const fs::path& p) {
  std::error_code ec;
  fs::path c = fs::weakly_canonical(p, ec);
  return ec ? p : c;
}

}  // namespace

TrainingText load_training_text(const TextSources& sources) {
  TrainingText t;
  if (sources.paths.empty()) {
    // Only the training part of the split is read; the evaluation files stay unopened.
    const io::CorpusSplit split = io::split_corpus(io::corpus_files(sources.corpus));
    if (split.train.empty()) fail("training text: the corpus has no training files");
    t.text = io::read_corpus_text(split.train);
    t.files = split.train;
    t.name = fmt::format("corpus training split ({} files)", split.train.size());
    if (t.text.empty()) fail("training text: {} is empty", t.name);
    return t;
  }

  std::set<fs::path> excluded;
  for (const fs::path& p : sources.exclude) excluded.insert(canonical_or_self(p));
  if (sources.exclude_corpus_eval) {
    std::vector<fs::path> corpus;
    try {
      corpus = io::corpus_files(sources.corpus);
    } catch (const Error&) {
      // No corpus installed: nothing of it to exclude.
    }
    for (const fs::path& p : io::split_corpus(corpus).eval) excluded.insert(canonical_or_self(p));
  }

  std::set<fs::path> seen;
  bool plain_file_only = sources.paths.size() == 1;
  // Appends one file's text; `named`: the user named it (an empty one is an
  // Error), else it was found under a directory (an empty one is skipped).
  const auto add_file = [&](const fs::path& file, bool named) -> bool {
    const fs::path key = canonical_or_self(file);
    if (excluded.contains(key)) {
      if (named) fail("training text: {} is an evaluation file: training on it would bias the evaluation", file.string());
      BR_LOG_WARN("training text: skipping {}: an evaluation file", file.string());
      return false;
    }
    if (!seen.insert(key).second) {
      BR_LOG_WARN("training text: {} is named twice; read once", file.string());
      return false;
    }
    const std::string bytes = read_file(file);
    std::string text;
    if (is_jsonl(file)) {
      std::int64_t docs = 0;
      text = read_jsonl(file, bytes, docs);
      t.documents += docs;
      if (text.empty()) {
        if (named) fail("training text: {} holds no text (no JSONL document with a non-empty \"text\")", file.string());
        BR_LOG_WARN("training text: skipping {}: no JSONL document with text", file.string());
        return false;
      }
    } else {
      text = bytes;
      if (text.empty()) {
        if (named) fail("training text: {} is empty", file.string());
        BR_LOG_WARN("training text: skipping {}: empty", file.string());
        return false;
      }
    }
    if (!t.text.empty()) t.text += "\n\n";
    t.text += text;
    t.files.push_back(file);
    return true;
  };

  for (const fs::path& p : sources.paths) {
    std::error_code ec;
    const fs::file_status st = fs::status(p, ec);
    if (ec || !fs::exists(st)) fail("training text: {} does not exist", p.string());
    if (fs::is_directory(st)) {
      plain_file_only = false;
      std::vector<fs::path> files;
      for (auto it = fs::recursive_directory_iterator(p, ec); !ec && it != fs::recursive_directory_iterator();
           it.increment(ec))
        if (it->is_regular_file(ec) && is_text_file_name(it->path())) files.push_back(it->path());
      if (ec) fail("training text: cannot list {}: {}", p.string(), ec.message());
      std::sort(files.begin(), files.end(), [](const fs::path& a, const fs::path& b) { return a.string() < b.string(); });
      if (files.empty()) fail("training text: directory {} holds no .txt, .md, .rst or .jsonl file", p.string());
      std::size_t added = 0;
      for (const fs::path& f : files) added += add_file(f, false) ? 1 : 0;
      if (added == 0)
        fail("training text: directory {} holds no text ({} .txt/.md/.rst/.jsonl files, all empty, excluded or read already)",
             p.string(), files.size());
    } else if (fs::is_regular_file(st)) {
      plain_file_only = plain_file_only && !is_jsonl(p);
      add_file(p, true);
    } else {
      fail("training text: {} is neither a regular file nor a directory", p.string());
    }
  }
  if (plain_file_only) {
    t.name = sources.paths[0].string();
  } else {
    std::string list;
    const std::size_t shown = std::min<std::size_t>(sources.paths.size(), 3);
    for (std::size_t i = 0; i < shown; ++i) list += (i ? ", " : "") + sources.paths[i].string();
    if (shown < sources.paths.size()) list += fmt::format(" and {} more", sources.paths.size() - shown);
    t.name = fmt::format("{} ({} file{}{}, {})", list, t.files.size(), t.files.size() == 1 ? "" : "s",
                         t.documents ? fmt::format(", {} JSONL document{}", t.documents, t.documents == 1 ? "" : "s") : std::string(),
                         size_str(t.text.size()));
  }
  return t;
}

TrainingText load_training_text(const fs::path& user_text, const io::CorpusRoots& roots) {
  TextSources s;
  s.corpus = roots;
  if (!user_text.empty()) s.paths.push_back(user_text);
  return load_training_text(s);
}

namespace {
constexpr std::uint64_t kFnv1a64Prime = 0x100000001B3ull;

// The Fisher–Yates permutation of [0, n) driven by XorShift(state) (data.hpp).
std::vector<std::int64_t> seeded_order(std::int64_t n, std::uint64_t state) {
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) order[static_cast<std::size_t>(i)] = i;
  XorShift g(state);
  for (std::int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<std::int64_t>(g.next_u64() % static_cast<std::uint64_t>(i + 1));
    std::swap(order[static_cast<std::size_t>(i)], order[static_cast<std::size_t>(j)]);
  }
  return order;
}
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
    order_ = seeded_order(windows_, hash_counter(o_.seed, static_cast<std::uint64_t>(epoch)));
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

MixedIds mix_token_streams(std::span<const std::int32_t> a, std::span<const std::int32_t> b, const MixOptions& o) {
  if (!(o.share >= 0 && o.share <= 1)) fail("mixing token streams: the share of b must be in [0, 1], got {}", o.share);
  if (o.seq_len < 1) fail("mixing token streams: seq_len must be ≥ 1, got {}", o.seq_len);
  if (o.windows < 0) fail("mixing token streams: windows must be ≥ 0 (0: all), got {}", o.windows);
  const std::int64_t T = o.seq_len;
  const std::int64_t na = static_cast<std::int64_t>(a.size()) / T, nb = static_cast<std::int64_t>(b.size()) / T;
  const auto b_count = [&](std::int64_t n) { return static_cast<std::int64_t>(std::llround(o.share * static_cast<double>(n))); };
  if (o.share < 1 && na == 0)
    fail("mixing token streams: stream a has {} tokens, not one window of {} (share of b {})", a.size(), T, o.share);
  if (o.share > 0 && nb == 0)
    fail("mixing token streams: stream b has {} tokens, not one window of {} (share of b {})", b.size(), T, o.share);
  std::int64_t n = o.windows;
  if (n == 0) {
    // The largest n whose k_b ≤ nb and n − k_b ≤ na (both grow with n, by at most 1 a step).
    const double bound = std::min(o.share < 1 ? static_cast<double>(na) / (1 - o.share) : INFINITY,
                                  o.share > 0 ? static_cast<double>(nb) / o.share : INFINITY);
    const auto fits = [&](std::int64_t m) { return b_count(m) <= nb && m - b_count(m) <= na; };
    n = static_cast<std::int64_t>(std::floor(bound));
    while (fits(n + 1)) ++n;
    while (n > 0 && !fits(n)) --n;
  }
  MixedIds out;
  out.from_b = b_count(n);
  out.from_a = n - out.from_b;
  const std::vector<std::int64_t> order_a = seeded_order(na, hash_counter(o.seed, 0));
  const std::vector<std::int64_t> order_b = seeded_order(nb, hash_counter(o.seed, 1));
  out.ids.reserve(static_cast<std::size_t>(n * T));
  std::int64_t ia = 0, ib = 0;
  for (std::int64_t j = 0; j < n; ++j) {
    const bool from_b = (j + 1) * out.from_b / n > j * out.from_b / n;
    const std::int32_t* w = from_b ? b.data() + order_b[static_cast<std::size_t>(ib++ % nb)] * T
                                   : a.data() + order_a[static_cast<std::size_t>(ia++ % na)] * T;
    out.ids.insert(out.ids.end(), w, w + T);
  }
  return out;
}

namespace {

// Calls fn(hash, start) for every run of k ids (rolling hash, see data.hpp).
template <class Fn>
void for_each_run(std::span<const std::int32_t> ids, std::size_t k, Fn&& fn) {
  std::uint64_t pk = 1;  // P^(k−1)
  for (std::size_t i = 1; i < k; ++i) pk *= kFnv1a64Prime;
  std::uint64_t h = 0;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (i >= k) h -= pk * static_cast<std::uint32_t>(ids[i - k]);
    h = h * kFnv1a64Prime + static_cast<std::uint32_t>(ids[i]);
    if (i + 1 >= k) fn(h, i + 1 - k);
  }
}

}  // namespace

HeldOutOverlap remove_held_out_runs(std::span<const std::int32_t> ids, std::span<const std::int32_t> held_out,
                                    std::int64_t k) {
  if (k < 1) fail("held-out overlap: the run length must be ≥ 1, got {}", k);
  HeldOutOverlap out;
  out.ids.assign(ids.begin(), ids.end());
  const auto K = static_cast<std::size_t>(k);
  if (held_out.size() < K) return out;
  std::vector<std::pair<std::uint64_t, std::size_t>> runs;  // (hash, start) of the held-out runs, sorted
  runs.reserve(held_out.size() - K + 1);
  for_each_run(held_out, K, [&](std::uint64_t h, std::size_t at) { runs.emplace_back(h, at); });
  std::sort(runs.begin(), runs.end());
  for (;;) {
    std::vector<std::int32_t> cover(out.ids.size() + 1, 0);  // +1 at a run's start, −1 past its end
    std::int64_t found = 0;
    for_each_run(out.ids, K, [&](std::uint64_t h, std::size_t at) {
      for (auto it = std::lower_bound(runs.begin(), runs.end(), std::pair<std::uint64_t, std::size_t>{h, 0});
           it != runs.end() && it->first == h; ++it)
        if (std::equal(out.ids.begin() + static_cast<std::ptrdiff_t>(at), out.ids.begin() + static_cast<std::ptrdiff_t>(at + K),
                       held_out.begin() + static_cast<std::ptrdiff_t>(it->second))) {
          ++cover[at];
          --cover[at + K];
          ++found;
          break;
        }
    });
    if (found == 0) return out;
    out.runs += found;
    std::vector<std::int32_t> kept;
    kept.reserve(out.ids.size());
    std::int32_t depth = 0;
    for (std::size_t i = 0; i < out.ids.size(); ++i) {
      depth += cover[i];
      if (depth == 0) kept.push_back(out.ids[i]);
    }
    out.removed += static_cast<std::int64_t>(out.ids.size() - kept.size());
    out.ids = std::move(kept);
  }
}

}  // namespace bitrank::train
