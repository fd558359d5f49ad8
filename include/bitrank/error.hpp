// bitrank::Error — the one exception type for bad input (files, configs,
// shapes, options). Messages say what was wrong and where: the op or file,
// the tensor, expected vs got. Programmer errors use BR_ASSERT, which stays
// on in release builds.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

#if defined(__CUDACC__)
#include <initializer_list>
#include <sstream>
#else
#include <fmt/format.h>
#endif

namespace bitrank {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// Format strings are checked at compile time by fmt. nvcc cannot compile
// fmt 9 in C++20 mode, so CUDA sources get a small run-time formatter that
// substitutes each {…} field with the next argument (format specs ignored).
#if defined(__CUDACC__)
namespace detail {
std::string format_fields(std::string_view f, std::initializer_list<std::string> args);
template <class T>
std::string to_text(const T& v) {
  std::ostringstream os;
  os << v;
  return os.str();
}
}  // namespace detail
template <class... Args>
using format_string = std::string_view;
template <class... Args>
std::string format(std::string_view f, Args&&... args) {
  return detail::format_fields(f, {detail::to_text(args)...});
}
#else
template <class... Args>
using format_string = fmt::format_string<Args...>;
template <class... Args>
std::string format(format_string<Args...> f, Args&&... args) {
  return fmt::format(f, std::forward<Args>(args)...);
}
#endif

// Throws Error with a formatted message.
template <class... Args>
[[noreturn]] void fail(format_string<Args...> f, Args&&... args) {
  throw Error(::bitrank::format(f, std::forward<Args>(args)...));
}

[[noreturn]] void assert_failed(const char* expr, const char* file, int line, const std::string& msg);

}  // namespace bitrank

// Internal invariant: on in every build type; aborts with file and line.
#define BR_ASSERT(cond, ...)                                                              \
  do {                                                                                    \
    if (!(cond)) ::bitrank::assert_failed(#cond, __FILE__, __LINE__, ::bitrank::format("" __VA_ARGS__)); \
  } while (0)
