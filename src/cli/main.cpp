// The `bitrank` command.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cstdio>

#include "bitrank/error.hpp"

int main(int argc, char** argv) {
  CLI::App app{"bitrank: compress LLMs to about one bit per weight with binary low-rank layers"};
  app.set_version_flag("--version", "bitrank 0.1.0");
  app.require_subcommand(1);
  CLI11_PARSE(app, argc, argv);
  return 0;
}
