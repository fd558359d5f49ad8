// Running the built `bitrank` from a test: a shell command line, its exit
// status (−1 when it did not exit normally) and everything it wrote to stdout.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <string>
#include <utility>

namespace bitrank::test {

inline std::pair<int, std::string> run_command(const std::string& cmd) {
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return {-1, ""};
  std::string out;
  char buf[4096];
  while (std::size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  const int status = ::pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

}  // namespace bitrank::test
