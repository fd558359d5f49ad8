#include "bitrank/error.hpp"

#include <initializer_list>

#include <cstdio>
#include <cstdlib>

namespace bitrank {

namespace detail {
std::string format_fields(std::string_view f, std::initializer_list<std::string> args) {
  std::string out;
  auto arg = args.begin();
  for (std::size_t i = 0; i < f.size(); ++i) {
    if (f[i] == '{' && i + 1 < f.size() && f[i + 1] == '{') {
      out += '{', ++i;
    } else if (f[i] == '}' && i + 1 < f.size() && f[i + 1] == '}') {
      out += '}', ++i;
    } else if (f[i] == '{') {
      const std::size_t close = f.find('}', i);
      if (close == std::string_view::npos) break;
      out += arg != args.end() ? *arg++ : std::string("{?}");
      i = close;
    } else {
      out += f[i];
    }
  }
  return out;
}
}  // namespace detail

void assert_failed(const char* expr, const char* file, int line, const std::string& msg) {
  std::fprintf(stderr, "bitrank: internal error: %s failed at %s:%d%s%s\n", expr, file, line, msg.empty() ? "" : ": ",
               msg.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace bitrank
