// The HTTP side of `bitrank serve` (contract: serve/server.hpp).
//
// A non-streamed completion is generated inside its handler, under the
// generation mutex. A streamed one is generated when httplib pulls its
// chunked body: the provider writes every event itself (chat's role chunk,
// one chunk per piece of text, the finish chunk, "data: [DONE]"), then
// ends the body. A failed write (the client gone) throws out of the token
// callback, which ends model::generate; the provider then drops the
// connection. Errors after the first chunk (the status already sent) go
// out as an error event before [DONE]. No exception leaves a handler or
// the provider: httplib would end the process.
#include "serve/server.hpp"

#include <fmt/format.h>
#include <httplib.h>

#include <chrono>
#include <cstdio>
#include <mutex>
#include <thread>

#include "bitrank/error.hpp"
#include "serve/api.hpp"

namespace bitrank::serve {
namespace {

std::int64_t unix_seconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void send_json(httplib::Response& res, int status, const nlohmann::json& body) {
  res.status = status;
  res.set_content(dump_json(body), "application/json");
}

void send_error(httplib::Response& res, const ApiError& e) { send_json(res, e.status(), error_body(e)); }

// The error of a status httplib set by itself (no handler ran or wrote a body).
ApiError status_error(const httplib::Request& req, int status, std::size_t max_body_bytes) {
  if (status == 404)
    return {404, fmt::format("no route {} {}: the routes are POST /v1/completions, POST /v1/chat/completions, "
                             "GET /v1/models, GET /health", req.method, req.path), "not_found"};
  if (status == 413)
    return {413, fmt::format("the request body is larger than {} bytes", max_body_bytes), "payload_too_large"};
  return {status, fmt::format("HTTP status {} for {} {}", status, req.method, req.path), "http_error"};
}

struct ClientGone {};

}  // namespace

struct Server::Impl {
  ServedModel served;
  ServeOptions options;
  ServeLimits limits;
  std::int64_t created = unix_seconds();
  std::mutex generating;  // one generation at a time
  httplib::Server http;

  Impl(ServedModel s, ServeOptions o)
      : served(std::move(s)),
        options(std::move(o)),
        limits{.max_tokens_limit = options.max_tokens_limit, .context = served.model.config().max_position_embeddings} {
    routes();
  }

  void routes();
  void completion(const httplib::Request& req, httplib::Response& res, Endpoint endpoint);
  bool stream(const GenerationPlan& plan, const ResponseMeta& meta, Endpoint endpoint, httplib::DataSink& sink);
};

void Server::Impl::routes() {
  const int threads = options.threads;
  http.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<std::size_t>(threads)); };
  http.set_payload_max_length(options.max_body_bytes);
  http.Get("/health", [](const httplib::Request&, httplib::Response& res) { send_json(res, 200, {{"status", "ok"}}); });
  http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    send_json(res, 200, models_response(served.name, created));
  });
  http.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    completion(req, res, Endpoint::completions);
  });
  http.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    completion(req, res, Endpoint::chat);
  });
  http.set_error_handler(httplib::Server::HandlerWithResponse([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;  // a handler's own error
    send_error(res, status_error(req, res.status, options.max_body_bytes));
    return httplib::Server::HandlerResponse::Handled;
  }));
  http.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
    send_error(res, ApiError(500, "unexpected error in the server", "internal_error"));
  });
  if (options.log_requests)
    http.set_logger([](const httplib::Request& req, const httplib::Response& res) {
      std::fprintf(stderr, "serve: %s %s %d\n", req.method.c_str(), req.path.c_str(), res.status);
    });
}

void Server::Impl::completion(const httplib::Request& req, httplib::Response& res, Endpoint endpoint) {
  try {
    const CompletionRequest request = parse_completion_request(req.body, endpoint);
    auto plan = std::make_shared<const GenerationPlan>(plan_generation(request, served.tokenizer, limits));
    ResponseMeta meta{response_id(endpoint), unix_seconds(), served.name};
    if (request.stream) {
      res.set_header("Cache-Control", "no-cache");
      res.set_chunked_content_provider("text/event-stream", [this, plan, meta, endpoint](std::size_t, httplib::DataSink& sink) {
        return stream(*plan, meta, endpoint, sink);
      });
      return;
    }
    Completion c;
    {
      const std::lock_guard<std::mutex> lock(generating);
      c = run_completion(served.model, served.tokenizer, *plan);
    }
    send_json(res, 200, completion_response(endpoint, meta, c));
  } catch (const ApiError& e) {
    send_error(res, e);
  } catch (const Error& e) {
    send_error(res, ApiError(500, e.what(), "internal_error"));
  } catch (const std::exception& e) {
    send_error(res, ApiError(500, fmt::format("unexpected error: {}", e.what()), "internal_error"));
  }
}

bool Server::Impl::stream(const GenerationPlan& plan, const ResponseMeta& meta, Endpoint endpoint,
                          httplib::DataSink& sink) {
  const auto send = [&sink](const std::string& event) {
    if (!sink.write(event.data(), event.size())) throw ClientGone{};
  };
  const auto chunk = [&](const std::string& text, std::string_view finish_reason) {
    send(sse_event(completion_chunk(endpoint, meta, text, finish_reason, false)));
  };
  try {
    try {
      if (endpoint == Endpoint::chat) send(sse_event(completion_chunk(endpoint, meta, "", "", true)));
      const std::lock_guard<std::mutex> lock(generating);
      const Completion c = run_completion(served.model, served.tokenizer, plan, [&](const std::string& piece) { chunk(piece, ""); });
      chunk("", c.finish_reason);
    } catch (const Error& e) {
      send(sse_event(error_body(ApiError(500, e.what(), "internal_error"))));
    } catch (const std::exception& e) {
      send(sse_event(error_body(ApiError(500, fmt::format("unexpected error: {}", e.what()), "internal_error"))));
    }
    send(std::string(kSseDone));
    sink.done();
    return true;
  } catch (const ClientGone&) {
    return false;  // httplib closes the connection
  }
}

Server::Server(ServedModel served, ServeOptions options)
    : impl_(std::make_unique<Impl>(std::move(served), std::move(options))) {}

Server::~Server() = default;

int Server::bind() {
  const ServeOptions& o = impl_->options;
  const int port = o.port == 0 ? impl_->http.bind_to_any_port(o.host) : (impl_->http.bind_to_port(o.host, o.port) ? o.port : -1);
  if (port < 0) fail("serve: cannot listen on {}:{} (the port in use, or no address of this machine?)", o.host, o.port);
  return port;
}

void Server::listen() {
  if (!impl_->http.listen_after_bind()) fail("serve: the server stopped with an error (accept failed)");
}

void Server::stop() {
  // httplib's stop() does nothing before its listen loop runs: wait for it, bounded.
  for (int i = 0; i < 500 && !impl_->http.is_running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  impl_->http.stop();
}

}  // namespace bitrank::serve
