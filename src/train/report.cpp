// Step records, the JSON-lines step log and the trainer's progress line
// (contract: include/bitrank/train/report.hpp).
#include "bitrank/train/report.hpp"

#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "bitrank/error.hpp"
#include "io/json_checked.hpp"

namespace bitrank::train {

namespace {

using nlohmann::json;

constexpr int kMaxDepth = 3;  // object → block_loss array → numbers

const json& key(const json& j, const char* name, std::string_view source) {
  const auto it = j.find(name);
  if (it == j.end()) fail("{}: step record has no \"{}\"", source, name);
  return *it;
}

std::int64_t get_int(const json& j, const char* name, std::string_view source) {
  const json& v = key(j, name, source);
  if (!v.is_number_integer()) fail("{}: step record \"{}\" is {}, expected an integer", source, name, io::json_excerpt(v));
  return v.get<std::int64_t>();
}

// A number, or null for a value that was not finite.
double get_real(const json& v, std::string_view what, std::string_view source) {
  if (v.is_null()) return std::numeric_limits<double>::quiet_NaN();
  if (!v.is_number()) fail("{}: step record {} is {}, expected a number or null", source, what, io::json_excerpt(v));
  return v.get<double>();
}

double get_real(const json& j, const char* name, std::string_view source) {
  return get_real(key(j, name, source), fmt::format("\"{}\"", name), source);
}

// Human-sized rate: 950, 31.2k, 1.25M.
std::string si(double v) {
  if (!std::isfinite(v)) return "?";
  if (v >= 1e6) return fmt::format("{:.3g}M", v / 1e6);
  if (v >= 1e3) return fmt::format("{:.3g}k", v / 1e3);
  return fmt::format("{:.0f}", v);
}

}  // namespace

std::string step_record_json(const StepRecord& r) {
  nlohmann::ordered_json j;
  j["step"] = r.step;
  j["loss"] = r.loss;  // NaN/Inf are dumped as null
  j["lr"] = r.lr;
  j["scale"] = r.scale;
  j["flips"] = r.flips;
  j["skipped"] = r.skipped;
  j["tokens"] = r.tokens;
  j["seconds"] = r.seconds;
  if (!r.block_loss.empty()) j["block_loss"] = r.block_loss;
  return j.dump();
}

StepRecord parse_step_record(std::string_view line, std::string_view source) {
  const json j = io::parse_json_checked(line, std::string(source), "step record", kMaxDepth);
  if (!j.is_object()) fail("{}: step record is {}, expected an object", source, io::json_excerpt(j));
  StepRecord r;
  r.step = get_int(j, "step", source);
  r.loss = get_real(j, "loss", source);
  r.lr = get_real(j, "lr", source);
  r.scale = get_real(j, "scale", source);
  r.flips = get_int(j, "flips", source);
  const json& skipped = key(j, "skipped", source);
  if (!skipped.is_boolean()) fail("{}: step record \"skipped\" is {}, expected true or false", source, io::json_excerpt(skipped));
  r.skipped = skipped.get<bool>();
  r.tokens = get_int(j, "tokens", source);
  r.seconds = get_real(j, "seconds", source);
  if (const auto it = j.find("block_loss"); it != j.end()) {
    if (!it->is_array()) fail("{}: step record \"block_loss\" is {}, expected an array", source, io::json_excerpt(*it));
    for (std::size_t b = 0; b < it->size(); ++b)
      r.block_loss.push_back(get_real((*it)[b], fmt::format("\"block_loss\"[{}]", b), source));
  }
  return r;
}

std::vector<StepRecord> read_step_log(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("step log: cannot read {}", path.string());
  std::vector<StepRecord> records;
  std::string line;
  for (std::int64_t n = 1; std::getline(in, line); ++n)
    records.push_back(parse_step_record(line, fmt::format("{}:{}", path.string(), n)));
  return records;
}

StepLog::StepLog(const std::filesystem::path& path, std::int64_t resume_step) : path_(path) {
  std::ios::openmode mode = std::ios::binary | std::ios::trunc;
  if (resume_step >= 0 && std::filesystem::exists(path)) {
    // Find the byte offset of the first line to drop and cut the file there.
    std::ifstream in(path, std::ios::binary);
    if (!in) fail("step log: cannot read {}", path.string());
    std::string line;
    std::uintmax_t keep = 0;
    for (std::int64_t n = 1; std::getline(in, line); ++n) {
      if (in.eof()) break;  // no newline: a line cut short by the interrupted run
      const StepRecord r = parse_step_record(line, fmt::format("{}:{}", path.string(), n));
      if (r.step >= resume_step) break;
      keep += line.size() + 1;
    }
    in.close();
    std::filesystem::resize_file(path, keep);
    mode = std::ios::binary | std::ios::app;
  }
  out_.open(path, mode);
  if (!out_) fail("step log: cannot write {}", path.string());
}

void StepLog::write(const StepRecord& record) {
  out_ << step_record_json(record) << '\n';
  out_.flush();
  if (!out_) fail("step log: writing {} failed", path_.string());
}

std::string train_progress_text(const ProgressFigures& f) {
  std::string s =
      f.steps_per_block > 0
          ? fmt::format("block {}/{} step {}/{}", (f.step - 1) / f.steps_per_block + 1,
                        (f.total_steps + f.steps_per_block - 1) / f.steps_per_block,
                        (f.step - 1) % f.steps_per_block + 1, f.steps_per_block)
          : fmt::format("step {}/{}", f.step, f.total_steps);
  s += fmt::format("  {} tok/s  {} {:.4g}  flips {:.0f}/step", si(f.tokens_per_s), f.loss_name, f.loss,
                   f.flips_per_step);
  if (f.skipped > 0) s += fmt::format("  skipped {} (non-finite gradients)", f.skipped);
  s += fmt::format("  ETA {}", format_duration(f.eta_s));
  return s;
}

TrainProgress::TrainProgress(std::int64_t total_steps, const StepRecord* start, ProgressLine::Options line)
    : line_(std::move(line)), total_(total_steps) {
  if (start) {
    start_step_ = start->step + 1;
    start_tokens_ = start->tokens;
    start_seconds_ = start->seconds;
  }
}

void TrainProgress::describe(std::int64_t steps_per_block, const char* loss_name) {
  steps_per_block_ = steps_per_block;
  loss_name_ = loss_name;
}

ProgressFigures TrainProgress::figures(const StepRecord& r) const {
  ProgressFigures f;
  f.steps_per_block = steps_per_block_;
  f.loss_name = loss_name_;
  f.step = r.step + 1;
  f.total_steps = total_;
  const double run_s = r.seconds - start_seconds_;
  const auto run_steps = static_cast<double>(f.step - start_step_);
  f.tokens_per_s = run_s > 0 ? static_cast<double>(r.tokens - start_tokens_) / run_s
                                 : std::numeric_limits<double>::quiet_NaN();
  f.loss = loss_count_ > 0 ? loss_sum_ / static_cast<double>(loss_count_) : std::numeric_limits<double>::quiet_NaN();
  f.flips_per_step = steps_ > 0 ? static_cast<double>(flips_sum_) / static_cast<double>(steps_) : 0.0;
  f.skipped = skipped_;
  f.eta_s = run_s > 0 && run_steps > 0
                ? run_s / run_steps * static_cast<double>(total_ - f.step)
                : std::numeric_limits<double>::quiet_NaN();
  return f;
}

void TrainProgress::step(const StepRecord& r) {
  if (std::isfinite(r.loss)) {
    loss_sum_ += r.loss;
    ++loss_count_;
  }
  flips_sum_ += r.flips;
  ++steps_;
  skipped_ += r.skipped;
  last_ = r;
  if (line_.due()) {
    last_text_ = train_progress_text(figures(r));
    line_.update(last_text_, /*force=*/true);
    loss_sum_ = 0;
    loss_count_ = flips_sum_ = steps_ = 0;
  }
}

void TrainProgress::finish() {
  if (last_text_.empty()) return;  // no step yet
  // The steps since the last line shown, or that line when there are none.
  line_.finish(steps_ > 0 ? train_progress_text(figures(last_)) : last_text_);
}

}  // namespace bitrank::train
