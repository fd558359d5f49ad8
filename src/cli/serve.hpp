// `bitrank serve`: one model behind an OpenAI-compatible HTTP server.
#pragma once

#include <string>

#include "serve/server.hpp"

namespace bitrank::cli {

struct ServeCliOptions {
  std::string model;          // .gguf, Hugging Face directory or .bitrank; empty: the configured default
  std::string device = "cpu";
  serve::ServeOptions server;  // host, port, limits, threads
};

int run_serve(const ServeCliOptions& options);

}  // namespace bitrank::cli
