#include "bitrank/error.hpp"

#include <cstdio>
#include <cstdlib>

namespace bitrank {

void assert_failed(const char* expr, const char* file, int line, const std::string& msg) {
  std::fprintf(stderr, "bitrank: internal error: %s failed at %s:%d%s%s\n", expr, file, line, msg.empty() ? "" : ": ",
               msg.c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace bitrank
