// Logging to stderr with a level set once (BITRANK_LOG=debug|info|warn|error).
#pragma once

#include "bitrank/error.hpp"

#include <string_view>

namespace bitrank {

enum class LogLevel { debug = 0, info = 1, warn = 2, error = 3 };

LogLevel log_level();
void set_log_level(LogLevel l);
void log_line(LogLevel l, std::string_view msg);

template <class... Args>
void log(LogLevel l, format_string<Args...> f, Args&&... args) {
  if (l >= log_level()) log_line(l, ::bitrank::format(f, std::forward<Args>(args)...));
}
#define BR_LOG_DEBUG(...) ::bitrank::log(::bitrank::LogLevel::debug, __VA_ARGS__)
#define BR_LOG_INFO(...) ::bitrank::log(::bitrank::LogLevel::info, __VA_ARGS__)
#define BR_LOG_WARN(...) ::bitrank::log(::bitrank::LogLevel::warn, __VA_ARGS__)
#define BR_LOG_ERROR(...) ::bitrank::log(::bitrank::LogLevel::error, __VA_ARGS__)

}  // namespace bitrank
