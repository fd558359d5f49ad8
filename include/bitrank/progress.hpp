// A progress line on stderr for long loops (`bitrank eval`, the trainer).
//
// On a terminal the line is redrawn in place — "\r", the text, then
// "\x1b[K" (erase to end of line, so a shorter text leaves no tail) — at
// most every `redraw_s` seconds. Anywhere else (a log file, a pipe, CI) a
// carriage return would pile every update into one unreadable line, so a
// plain line ending in "\n" is written at most every `plain_every_s`
// seconds instead. The first update is always shown; finish() shows the
// final text and ends the line in both modes (a plain line already showing
// that text is not repeated). Callers that build the text
// only when it will be shown ask due() first.
#pragma once

#include <cstdio>
#include <functional>
#include <string>
#include <string_view>

namespace bitrank {

class ProgressLine {
 public:
  struct Options {
    std::FILE* out = stderr;
    int tty = -1;                  // -1: isatty(out); 0 or 1: as given (tests)
    double redraw_s = 0.1;         // terminal: least time between redraws
    double plain_every_s = 30.0;   // elsewhere: least time between lines
    std::function<double()> clock;  // seconds; empty: std::chrono::steady_clock
  };

  ProgressLine();
  explicit ProgressLine(Options options);

  bool tty() const { return tty_; }
  bool due() const;  // would update() show a text now?
  // Shows `text` when due() or `force`.
  void update(std::string_view text, bool force = false);
  // Shows `text` and ends the line (terminal: redrawn, then "\n").
  void finish(std::string_view text);

 private:
  double now() const;
  void show(std::string_view text);

  Options o_;
  bool tty_ = false;
  bool shown_ = false;    // something has been written
  bool open_ = false;     // terminal: a redrawn line not ended yet
  double last_ = 0;       // clock of the last write
  std::string last_text_;  // the last text written
};

// A duration for progress lines: "42s", "3m05s", "1h02m", "2d03h"; "?" when
// negative, not finite (an ETA before any rate is known) or ≥ 1e9 s.
std::string format_duration(double seconds);

}  // namespace bitrank
