// The HTTP side of `bitrank serve` (DESIGN §9): one loaded model behind
// cpp-httplib, the OpenAI-compatible routes of serve/api.hpp.
//
//   POST /v1/completions, /v1/chat/completions   JSON, or server-sent events with "stream": true
//   GET  /v1/models                               the one model
//   GET  /health                                  {"status": "ok"}
//
// HTTP worker threads (`threads`) read and parse requests at once; the
// model runs one generation at a time (a mutex: the others wait their
// turn). Nothing a client sends brings the server down: every failure is a
// JSON error body — 400 bad fields or JSON, 404 unknown paths, 413 a body
// over max_body_bytes, 500 a bitrank::Error of the model — and a streamed
// response whose client went away ends its generation at the next token.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "bitrank/io/tokenizer.hpp"
#include "bitrank/model/decoder.hpp"

namespace bitrank::serve {

struct ServeOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                         // 0: any free port (bind() says which)
  index_t max_tokens_limit = 256;          // the most max_tokens a request may ask
  int threads = 8;                         // HTTP worker threads
  std::size_t max_body_bytes = 1u << 20;   // larger request bodies: 413
  bool log_requests = true;                // one stderr line per request
};

struct ServedModel {
  std::string name;  // the id /v1/models lists and responses carry
  const model::DecoderModel<float>& model;
  const io::Tokenizer& tokenizer;
};

class Server {
 public:
  Server(ServedModel served, ServeOptions options);  // the model and tokenizer must outlive it
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds host:port and returns the port; Error when it cannot.
  int bind();
  // Serves until stop() (call bind() first).
  void listen();
  // Ends listen() from any thread, once it has begun (waits up to 5 s for
  // that); requests in progress finish first.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace bitrank::serve
