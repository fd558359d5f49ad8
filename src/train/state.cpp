// Trainer state ↔ JSON (contract and layout: include/bitrank/train/state.hpp).
#include "bitrank/train/state.hpp"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <cstdint>
#include <set>

#include "bitrank/error.hpp"
#include "io/json_checked.hpp"

namespace bitrank::train {

namespace {

using nlohmann::json;
using nlohmann::ordered_json;

constexpr std::string_view kFormat = "bitrank.trainer_state";
constexpr int kVersion = 1;
constexpr int kMaxDepth = 3;  // state → data/scaler/schedule → values

// Reads one object's keys, each exactly once; unknown keys are an error.
class Reader {
 public:
  Reader(const json& j, std::string source, std::string path) : j_(j), source_(std::move(source)), path_(std::move(path)) {
    if (!j_.is_object()) fail("{}: trainer state {} is {}, expected an object", source_, where(), io::json_excerpt(j_));
  }

  const json& value(const char* name) {
    const auto it = j_.find(name);
    if (it == j_.end()) fail("{}: trainer state has no \"{}{}\"", source_, prefix(), name);
    seen_.insert(name);
    return *it;
  }
  std::int64_t i64(const char* name) {
    const json& v = value(name);
    if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<std::uint64_t>() > INT64_MAX))
      bad(name, v, "an integer");
    return v.get<std::int64_t>();
  }
  std::uint64_t u64(const char* name) {
    const json& v = value(name);
    if (!v.is_number_unsigned()) bad(name, v, "an integer ≥ 0");
    return v.get<std::uint64_t>();
  }
  double real(const char* name) {
    const json& v = value(name);
    if (!v.is_number() || !std::isfinite(v.get<double>())) bad(name, v, "a finite number");
    return v.get<double>();
  }
  std::uint64_t hex64(const char* name) {
    const json& v = value(name);
    std::uint64_t x = 0;
    if (v.is_string()) {
      const std::string& s = v.get_ref<const std::string&>();
      const auto r = std::from_chars(s.data(), s.data() + s.size(), x, 16);
      if (s.size() == 16 && r.ec == std::errc() && r.ptr == s.data() + s.size()) return x;
    }
    bad(name, v, "16 hex digits");
  }
  Reader object(const char* name) { return Reader(value(name), source_, prefix() + name); }
  // Every key of the object was read.
  void done() const {
    for (const auto& [k, v] : j_.items())
      if (!seen_.contains(k)) fail("{}: trainer state has an unknown key \"{}{}\"", source_, prefix(), k);
  }
  [[noreturn]] void bad(const char* name, const json& v, std::string_view expected) const {
    fail("{}: trainer state \"{}{}\" is {}, expected {}", source_, prefix(), name, io::json_excerpt(v), expected);
  }
  [[noreturn]] void wrong(std::string_view what) const { fail("{}: trainer state: {}", source_, what); }

 private:
  std::string where() const { return path_.empty() ? "" : "\"" + path_ + "\""; }
  std::string prefix() const { return path_.empty() ? "" : path_ + "."; }

  const json& j_;
  std::string source_, path_;
  std::set<std::string> seen_;
};

}  // namespace

std::string trainer_state_to_json(const TrainerState& s) {
  ordered_json j;
  j["format"] = kFormat;
  j["version"] = kVersion;
  j["step"] = s.step;
  j["applied_steps"] = s.applied_steps;
  j["flip_seed"] = s.flip_seed;
  j["tokens"] = s.tokens;
  j["seconds"] = s.seconds;
  j["data"] = {{"seed", s.data.seed},
               {"epoch", s.data.epoch},
               {"index", s.data.index},
               {"seq_len", s.data.seq_len},
               {"windows_per_step", s.data.windows_per_step},
               {"windows", s.data.windows},
               {"fingerprint", fmt::format("{:016x}", s.data.fingerprint)}};
  j["scaler"] = {{"log2_scale", s.scaler.log2_scale},
                 {"clean_steps", s.scaler.clean_steps},
                 {"consecutive_skips", s.scaler.consecutive_skips},
                 {"skipped_total", s.scaler.skipped_total}};
  j["schedule"] = {{"peak", s.schedule.peak},
                   {"warmup_steps", s.schedule.warmup_steps},
                   {"total_steps", s.schedule.total_steps},
                   {"floor_fraction", s.schedule.floor_fraction}};
  return j.dump();
}

TrainerState trainer_state_from_json(std::string_view text, std::string_view source) {
  const std::string src(source);
  const json j = io::parse_json_checked(text, src, "trainer state", kMaxDepth);
  Reader r(j, src, "");
  const json& format = r.value("format");
  if (!format.is_string() || format.get<std::string>() != kFormat) r.bad("format", format, fmt::format("\"{}\"", kFormat));
  if (const std::int64_t v = r.i64("version"); v != kVersion)
    r.wrong(fmt::format("version {} is not the supported version {}", v, kVersion));

  TrainerState s;
  s.step = r.i64("step");
  s.applied_steps = r.i64("applied_steps");
  s.flip_seed = r.u64("flip_seed");
  s.tokens = r.i64("tokens");
  s.seconds = r.real("seconds");

  Reader d = r.object("data");
  s.data.seed = d.u64("seed");
  s.data.epoch = d.i64("epoch");
  s.data.index = d.i64("index");
  s.data.seq_len = d.i64("seq_len");
  s.data.windows_per_step = d.i64("windows_per_step");
  s.data.windows = d.i64("windows");
  s.data.fingerprint = d.hex64("fingerprint");
  d.done();

  Reader c = r.object("scaler");
  const std::int64_t log2_scale = c.i64("log2_scale");
  if (log2_scale < -1000 || log2_scale > 1000) c.bad("log2_scale", c.value("log2_scale"), "an integer in [-1000, 1000]");
  s.scaler.log2_scale = static_cast<int>(log2_scale);
  s.scaler.clean_steps = c.i64("clean_steps");
  s.scaler.consecutive_skips = c.i64("consecutive_skips");
  s.scaler.skipped_total = c.i64("skipped_total");
  c.done();

  Reader h = r.object("schedule");
  s.schedule.peak = h.real("peak");
  s.schedule.warmup_steps = h.i64("warmup_steps");
  s.schedule.total_steps = h.i64("total_steps");
  s.schedule.floor_fraction = h.real("floor_fraction");
  h.done();
  r.done();

  // Invariants of a state the trainer wrote.
  if (s.applied_steps < 0 || s.scaler.skipped_total < 0 || s.step != s.applied_steps + s.scaler.skipped_total)
    r.wrong(fmt::format("step {} is not applied_steps {} + scaler.skipped_total {}", s.step, s.applied_steps,
                        s.scaler.skipped_total));
  if (s.tokens < 0 || s.seconds < 0) r.wrong(fmt::format("tokens {} and seconds {} must be ≥ 0", s.tokens, s.seconds));
  if (s.scaler.clean_steps < 0 || s.scaler.consecutive_skips < 0 || s.scaler.consecutive_skips > s.scaler.skipped_total)
    r.wrong(fmt::format("scaler counts clean_steps {}, consecutive_skips {}, skipped_total {} are inconsistent",
                        s.scaler.clean_steps, s.scaler.consecutive_skips, s.scaler.skipped_total));
  if (s.data.seq_len < 1 || s.data.windows_per_step < 1 || s.data.windows < s.data.windows_per_step ||
      s.data.epoch < 0 || s.data.index < 0 || s.data.index >= s.data.windows)
    r.wrong(fmt::format("data position (epoch {}, index {}) with {} windows of {}, {} per step is out of range",
                        s.data.epoch, s.data.index, s.data.windows, s.data.seq_len, s.data.windows_per_step));
  try {
    validate(s.schedule);
  } catch (const Error& e) {
    r.wrong(e.what());
  }
  return s;
}

}  // namespace bitrank::train
