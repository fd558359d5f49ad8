// Progress line (contract: include/bitrank/progress.hpp).
#include "bitrank/progress.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cmath>

namespace bitrank {

ProgressLine::ProgressLine() : ProgressLine(Options{}) {}

ProgressLine::ProgressLine(Options options) : o_(std::move(options)) {
  tty_ = o_.tty < 0 ? ::isatty(::fileno(o_.out)) != 0 : o_.tty != 0;
}

double ProgressLine::now() const {
  if (o_.clock) return o_.clock();
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

bool ProgressLine::due() const {
  return !shown_ || now() - last_ >= (tty_ ? o_.redraw_s : o_.plain_every_s);
}

void ProgressLine::show(std::string_view text) {
  if (tty_) {
    fmt::print(o_.out, "\r{}\x1b[K", text);
    open_ = true;
  } else {
    fmt::print(o_.out, "{}\n", text);
  }
  std::fflush(o_.out);
  shown_ = true;
  last_ = now();
  last_text_ = text;
}

void ProgressLine::update(std::string_view text, bool force) {
  if (force || due()) show(text);
}

void ProgressLine::finish(std::string_view text) {
  if (tty_ || !shown_ || text != last_text_) show(text);  // a plain line already showing it stays single
  if (open_) {
    fmt::print(o_.out, "\n");
    std::fflush(o_.out);
    open_ = false;
  }
}

std::string format_duration(double s) {
  if (!std::isfinite(s) || s < 0 || s >= 1e9) return "?";  // 1e9 s: ~32 years, no ETA
  const auto t = static_cast<long long>(std::llround(s));
  if (t < 60) return fmt::format("{}s", t);
  if (t < 3600) return fmt::format("{}m{:02}s", t / 60, t % 60);
  if (t < 86400) return fmt::format("{}h{:02}m", t / 3600, t % 3600 / 60);
  return fmt::format("{}d{:02}h", t / 86400, t % 86400 / 3600);
}

}  // namespace bitrank
