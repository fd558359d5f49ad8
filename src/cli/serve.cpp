// `bitrank serve`: loads a model and its tokenizer once, as `bitrank
// generate` does (io::load_model_tokenizer, store::load_any,
// model::make_model on the --device backend; the default model is eval's,
// cli/inputs.hpp), then serves the OpenAI-compatible routes of
// serve/server.hpp until the process is stopped. stdout gets one line once
// the port is bound (the address and the model); stderr one line per
// request. The model's name in the API is its file or directory name.
// A build without cpp-httplib (CMakeLists.txt) has the command, which says so.
#include "cli/serve.hpp"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "bitrank/error.hpp"
#include "bitrank/io/tokenizer.hpp"
#include "bitrank/store/load.hpp"
#include "cli/device.hpp"
#include "cli/inputs.hpp"

namespace bitrank::cli {

#ifndef BITRANK_HAS_SERVE
int run_serve(const ServeCliOptions&) {
  fail("serve: this bitrank was built without cpp-httplib: apt-get install libcpp-httplib-dev, then rebuild");
}
#else
namespace {

std::string model_name(const std::string& path) {
  const std::filesystem::path p = std::filesystem::path(path).lexically_normal();
  const std::string name = (p.has_filename() ? p : p.parent_path()).filename().string();
  return name.empty() ? path : name;
}

}  // namespace

int run_serve(const ServeCliOptions& o) {
  const std::string model_path = model_or_default(o.model, "serve");
  const std::unique_ptr<Backend<float>> be = make_device_backend("serve", o.device);

  const auto t_load = std::chrono::steady_clock::now();
  const io::Tokenizer tokenizer = io::load_model_tokenizer(model_path);
  const auto net = store::load_model(*be, model_path);
  const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_load).count();

  const std::string name = model_name(model_path);
  serve::Server server({.name = name, .model = *net, .tokenizer = tokenizer}, o.server);
  const int port = server.bind();
  fmt::print("serve: listening on http://{}:{} (model {}, {}; loaded in {:.1f} s)\n", o.server.host, port, name,
             o.device, load_s);
  std::fflush(stdout);
  server.listen();
  return 0;
}
#endif  // BITRANK_HAS_SERVE

}  // namespace bitrank::cli
