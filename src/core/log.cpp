#include "bitrank/log.hpp"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace bitrank {
namespace {
LogLevel level_from_env() {
  const char* e = std::getenv("BITRANK_LOG");
  if (!e) return LogLevel::info;
  if (!std::strcmp(e, "debug")) return LogLevel::debug;
  if (!std::strcmp(e, "warn")) return LogLevel::warn;
  if (!std::strcmp(e, "error")) return LogLevel::error;
  return LogLevel::info;
}
std::atomic<LogLevel>& level() {
  static std::atomic<LogLevel> l{level_from_env()};
  return l;
}
}  // namespace

LogLevel log_level() { return level().load(std::memory_order_relaxed); }
void set_log_level(LogLevel l) { level().store(l); }

void log_line(LogLevel l, std::string_view msg) {
  static const char* tags[] = {"debug", "info", "warn", "error"};
  std::fprintf(stderr, "[bitrank %s] %.*s\n", tags[static_cast<int>(l)], static_cast<int>(msg.size()), msg.data());
}

}  // namespace bitrank
