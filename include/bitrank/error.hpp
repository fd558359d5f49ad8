// bitrank::Error — the one exception type for bad input (files, configs,
// shapes, options). Messages say what was wrong and where: the op or file,
// the tensor, expected vs got. Programmer errors use BR_ASSERT, which stays
// on in release builds.
#pragma once

#include <stdexcept>
#include <string>

#include <fmt/format.h>

namespace bitrank {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// Throws Error with a fmt-formatted message.
template <class... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

[[noreturn]] void assert_failed(const char* expr, const char* file, int line, const std::string& msg);

}  // namespace bitrank

// Internal invariant: on in every build type; aborts with file and line.
#define BR_ASSERT(cond, ...)                                                              \
  do {                                                                                    \
    if (!(cond)) ::bitrank::assert_failed(#cond, __FILE__, __LINE__, ::fmt::format("" __VA_ARGS__)); \
  } while (0)
