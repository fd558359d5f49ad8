// `bitrank serve` (serve/api.hpp, serve/server.hpp).
//
// - The API without sockets: request fields and their errors (400 naming
//   the field; the range errors are check_generate_options'), the ChatML
//   prompt, max_tokens against the limit and the context, the stop ids;
//   the streamed text's stop strings (cut, held back, never taken back);
//   the response, chunk, error and model JSON shapes; invalid UTF-8 out.
// - An in-process server on 127.0.0.1 (a free port) over the tiny random
//   hybrid with a tokenizer of printable tokens and the ChatML tokens: a
//   completion's text is model::generate's greedy output for the same
//   prompt, decoded up to the first stop token (computed here, apart from
//   the server); streamed chunks concatenate to the same text and end with
//   [DONE]; chat; stop strings; models and health; bad requests, unknown
//   paths and a body over the limit get 4xx JSON errors; a model's Error a
//   500 (or, streamed, an error event before [DONE]).
// - Load: 8 client threads × 4 requests at once, each answered 200 with its
//   prompt's text within a bounded time (client timeouts and a deadline);
//   the server then stops. (With the generation mutex taken out, this test
//   crashed: the model's buffers serve one generation at a time.)
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "bitrank/io/tokenizer.hpp"
#include "bitrank/model/generate.hpp"
#include "bitrank/model/make.hpp"
#include "serve/api.hpp"
#include "serve/server.hpp"
#include "support/backends.hpp"
#include "support/hybrid_fixtures.hpp"
#include "support/model_files.hpp"

namespace bitrank {
namespace {

using nlohmann::json;
using serve::ApiError;
using serve::Endpoint;

constexpr std::int32_t kEos = 0, kImStart = 1, kImEnd = 2;

// 300 tokens, all printable when decoded: <|endoftext|> (the EOS),
// <|im_start|>, <|im_end|> (control), "\n" and the bytes 0x20..0x7E, then
// two-letter tokens ("aa", "ab", …) to fill the tiny model's vocabulary.
// No merges: text encodes one character a token.
io::TokenizerSpec printable_tokenizer() {
  io::TokenizerSpec s;
  for (const char* special : {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}) {
    s.tokens.push_back(special);
    s.types.push_back(io::TokenType::control);
  }
  s.tokens.push_back(io::byte_to_unicode('\n'));
  for (int b = 0x20; b < 0x7f; ++b) s.tokens.push_back(io::byte_to_unicode(static_cast<std::uint8_t>(b)));
  for (char a = 'a'; static_cast<index_t>(s.tokens.size()) < test::tiny_hybrid::kV; ++a)
    for (char b = 'a'; b <= 'z' && static_cast<index_t>(s.tokens.size()) < test::tiny_hybrid::kV; ++b)
      s.tokens.push_back(std::string{a, b});
  s.types.resize(s.tokens.size(), io::TokenType::normal);
  s.eos_id = kEos;
  return s;
}

ApiError api_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const ApiError& e) {
    return e;
  }
  ADD_FAILURE() << "no ApiError";
  return ApiError(0, "", "");
}

// ---- requests ----------------------------------------------------------------------

TEST(Serve, ParsesRequestFields) {
  const auto r = serve::parse_completion_request(
      R"({"model": "anything", "prompt": "Once", "max_tokens": 7, "temperature": 0.5, "top_p": 0.9, "top_k": 40,
          "seed": 18446744073709551615, "stop": ["\n", "end"], "stream": true, "n": 1, "user": "x"})",
      Endpoint::completions);
  EXPECT_EQ(r.prompt, "Once");
  EXPECT_EQ(r.max_tokens, 7);
  EXPECT_EQ(r.sampling.temperature, 0.5);
  EXPECT_EQ(r.sampling.top_p, 0.9);
  EXPECT_EQ(r.sampling.top_k, 40);
  EXPECT_EQ(r.sampling.seed, 18446744073709551615u);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"\n", "end"}));
  EXPECT_TRUE(r.stream);

  // Absent (or null) fields: model::SamplingOptions' defaults, no limit chosen yet.
  const auto d = serve::parse_completion_request(R"({"prompt": "x", "stop": "s", "temperature": null})", Endpoint::completions);
  EXPECT_FALSE(d.max_tokens.has_value());
  EXPECT_EQ(d.sampling.temperature, model::SamplingOptions{}.temperature);
  EXPECT_EQ(d.sampling.top_k, model::SamplingOptions{}.top_k);
  EXPECT_EQ(d.stop, std::vector<std::string>{"s"});
  EXPECT_FALSE(d.stream);

  const auto c = serve::parse_completion_request(
      R"({"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]})", Endpoint::chat);
  ASSERT_EQ(c.messages.size(), 2u);
  EXPECT_EQ(c.messages[1].role, "user");
  EXPECT_EQ(c.messages[1].content, "Hi");
  EXPECT_EQ(serve::chatml_prompt(c.messages),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

TEST(Serve, BadRequestsAre400NamingTheField) {
  struct Case {
    Endpoint endpoint;
    std::string body, needle, code;
  };
  const auto C = Endpoint::completions;
  const std::vector<Case> cases = {
      {C, R"({"prompt": "x",)", "not valid JSON", "invalid_json"},
      {C, "", "not valid JSON", "invalid_json"},
      {C, R"(["prompt"])", "must be a JSON object", "invalid_json"},
      {C, R"({"max_tokens": 3})", "prompt is required", "missing_field"},
      {C, R"({"prompt": ["a", "b"]})", "prompt: arrays", "invalid_type"},
      {C, R"({"prompt": 12})", "prompt must be a string", "invalid_type"},
      {C, R"({"prompt": "x", "max_tokens": "10"})", "max_tokens must be a whole number", "invalid_type"},
      {C, R"({"prompt": "x", "max_tokens": 1.5})", "max_tokens must be a whole number", "invalid_type"},
      {C, R"({"prompt": "x", "max_tokens": 18446744073709551615})", "max_tokens 18446744073709551615 is out of range", "invalid_value"},
      {C, R"({"prompt": "x", "max_tokens": 0})", "max-tokens must be at least 1, got 0", "invalid_value"},
      {C, R"({"prompt": "x", "temperature": -1})", "temperature must be a finite number ≥ 0", "invalid_value"},
      {C, R"({"prompt": "x", "temperature": "hot"})", "temperature must be a number", "invalid_type"},
      {C, R"({"prompt": "x", "top_p": 2})", "top-p must be in (0, 1]", "invalid_value"},
      {C, R"({"prompt": "x", "top_k": -3})", "top-k must be ≥ 0", "invalid_value"},
      {C, R"({"prompt": "x", "seed": -1})", "seed must be a whole number ≥ 0", "invalid_value"},
      {C, R"({"prompt": "x", "stop": 5})", "stop must be a string or an array", "invalid_type"},
      {C, R"({"prompt": "x", "stop": ["a", 3]})", "stop[1] must be a string", "invalid_type"},
      {C, R"({"prompt": "x", "stop": [""]})", "stop strings must not be empty", "invalid_value"},
      {C, R"({"prompt": "x", "stream": "yes"})", "stream must be true or false", "invalid_type"},
      {C, R"({"prompt": "x", "n": 2})", "n: only 1 choice", "invalid_value"},
      {Endpoint::chat, R"({"prompt": "x"})", "messages is required", "missing_field"},
      {Endpoint::chat, R"({"messages": []})", "messages must be a non-empty array", "invalid_type"},
      {Endpoint::chat, R"({"messages": ["hi"]})", "messages[0] must be an object", "invalid_type"},
      {Endpoint::chat, R"({"messages": [{"role": "user"}]})", "messages[0] needs a role and a content", "missing_field"},
      {Endpoint::chat, R"({"messages": [{"role": "robot", "content": "x"}]})", "messages[0].role must be system, user or assistant", "invalid_value"},
      {Endpoint::chat, R"({"messages": [{"role": "user", "content": [{"type": "text"}]}]})", "messages[0].content must be a string", "invalid_type"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.body);
    const ApiError e = api_error([&] { serve::parse_completion_request(c.body, c.endpoint); });
    EXPECT_EQ(e.status(), 400);
    EXPECT_NE(std::string(e.what()).find(c.needle), std::string::npos) << e.what();
    EXPECT_EQ(e.code(), c.code);
    EXPECT_EQ(e.type(), "invalid_request_error");
  }
}

TEST(Serve, PlansMaxTokensContextAndStops) {
  const io::Tokenizer tok(printable_tokenizer());
  const serve::ServeLimits limits{.max_tokens_limit = 20, .context = 32};
  serve::CompletionRequest r;
  r.prompt = "0123456789";  // 10 tokens
  serve::GenerationPlan p = serve::plan_generation(r, tok, limits);
  EXPECT_EQ(p.prompt, model::encode_prompt(tok, r.prompt));
  EXPECT_EQ(p.prompt.size(), 10u);
  EXPECT_EQ(p.options.max_tokens, 20);  // the limit: 22 positions are left
  EXPECT_EQ(p.stop_ids, std::vector<std::int32_t>{kEos});
  r.prompt = std::string(20, 'x');
  EXPECT_EQ(serve::plan_generation(r, tok, limits).options.max_tokens, 12);  // what the context leaves
  r.max_tokens = 12;
  EXPECT_EQ(serve::plan_generation(r, tok, limits).options.max_tokens, 12);  // 32 positions: fits exactly

  const auto expect_400 = [&](const serve::CompletionRequest& req, const serve::ServeLimits& l, const std::string& needle,
                              const std::string& code) {
    const ApiError e = api_error([&] { serve::plan_generation(req, tok, l); });
    EXPECT_EQ(e.status(), 400);
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    EXPECT_EQ(e.code(), code);
  };
  r.max_tokens = 13;
  expect_400(r, limits, "the prompt's 20 tokens and max_tokens 13 exceed the model's context of 32 positions",
             "context_length_exceeded");
  r.max_tokens = 21;
  expect_400(r, {.max_tokens_limit = 20, .context = 0}, "max_tokens 21 exceeds this server's limit of 20", "invalid_value");
  r.max_tokens.reset();
  r.prompt = std::string(32, 'x');
  expect_400(r, limits, "the prompt's 32 tokens leave no room in the model's context of 32", "context_length_exceeded");
  r.prompt = "";
  expect_400(r, limits, "prompt: the text has no tokens", "invalid_value");

  // Chat: the ChatML prompt, stopped by <|im_end|> too; a tokenizer without it refuses.
  serve::CompletionRequest chat;
  chat.endpoint = Endpoint::chat;
  chat.messages = {{"user", "hi"}};
  p = serve::plan_generation(chat, tok, limits);
  EXPECT_EQ(p.prompt, model::encode_prompt(tok, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"));
  EXPECT_EQ(p.prompt.front(), kImStart);
  EXPECT_EQ(p.stop_ids, (std::vector<std::int32_t>{kEos, kImEnd}));
  const io::Tokenizer plain(test::byte_tokenizer(300));
  const ApiError e = api_error([&] { serve::plan_generation(chat, plain, limits); });
  EXPECT_EQ(e.status(), 400);
  EXPECT_EQ(std::string(e.what()), "the model's tokenizer has no chat template bitrank knows; use /v1/completions");
}

// ---- streamed text and stop strings ------------------------------------------------

std::vector<std::int32_t> ids_of(const io::Tokenizer& tok, const std::string& text) { return tok.encode(text); }

struct Pushed {
  std::vector<std::string> pieces;  // one per id, then finish()'s
  bool stopped = false;
  std::string text() const {
    std::string t;
    for (const auto& p : pieces) t += p;
    return t;
  }
};

Pushed push_all(const io::Tokenizer& tok, const std::vector<std::int32_t>& ids, std::vector<std::string> stop,
                std::vector<std::int32_t> stop_ids = {kEos}) {
  serve::CompletionText text(tok, std::move(stop_ids), std::move(stop));
  Pushed out;
  for (const std::int32_t id : ids) {
    out.pieces.push_back(text.push(id));
    if (text.stopped()) break;
  }
  out.pieces.push_back(text.finish());
  out.stopped = text.stopped();
  return out;
}

TEST(Serve, CompletionTextCutsAtStopStringsAndStopIds) {
  const io::Tokenizer tok(printable_tokenizer());
  const std::vector<std::int32_t> ids = ids_of(tok, "one two. three");

  // No stops: every character as it comes.
  Pushed p = push_all(tok, ids, {});
  EXPECT_EQ(p.text(), "one two. three");
  EXPECT_EQ(p.pieces[0], "o");
  EXPECT_FALSE(p.stopped);

  // "two." stops at its first occurrence; its prefix "t" of "two" waits until
  // it is clearly not one ("th" of "three" never comes: the stop came first).
  p = push_all(tok, ids, {"two.", "xyz"});
  EXPECT_EQ(p.text(), "one ");
  EXPECT_TRUE(p.stopped);
  EXPECT_EQ(p.pieces[4], "");  // "t" held back
  // A prefix that never completes goes out at the end: "thr" of "three!" waits, then "three" ends.
  p = push_all(tok, ids, {"three!"});
  EXPECT_EQ(p.text(), "one two. three");
  EXPECT_FALSE(p.stopped);
  EXPECT_EQ(p.pieces.back(), "three");  // held back to the end: still a prefix of "three!"
  // A held-back "t" that turns out not to start the stop ("tw" ≠ "th") goes out with the next piece.
  p = push_all(tok, ids, {"th"});
  EXPECT_EQ(p.pieces[4], "");
  EXPECT_EQ(p.pieces[5], "tw");
  EXPECT_EQ(p.text(), "one two. ");
  // The earliest of several stops wins; a stop inside one multi-character token is found too.
  p = push_all(tok, ids, {"three", " two"});
  EXPECT_EQ(p.text(), "one");
  std::vector<std::int32_t> with_pair = ids_of(tok, "x");
  with_pair.push_back(*tok.token_id("ab"));
  with_pair.push_back(*tok.token_id("cd"));
  p = push_all(tok, with_pair, {"bc"});
  EXPECT_EQ(p.text(), "xa");
  EXPECT_TRUE(p.stopped);

  // A stop id ends the text without showing it; a held-back prefix goes out then.
  std::vector<std::int32_t> eos_ids = ids_of(tok, "ab t");
  eos_ids.push_back(kEos);
  eos_ids.push_back(ids[0]);
  p = push_all(tok, eos_ids, {"tx"});
  EXPECT_EQ(p.text(), "ab t");
  EXPECT_EQ(p.pieces[4], "t");  // at the EOS
  EXPECT_TRUE(p.stopped);
  serve::CompletionText counted(tok, {kEos, kImEnd}, {});
  counted.push(ids[0]);
  EXPECT_EQ(counted.push(kImEnd), "");
  EXPECT_TRUE(counted.stopped());
  EXPECT_EQ(counted.tokens(), 2);
}

// ---- responses ---------------------------------------------------------------------

TEST(Serve, ResponseShapes) {
  const serve::ResponseMeta meta{"cmpl-1", 1700000000, "tiny"};
  const serve::Completion c{.text = "hello", .finish_reason = "length", .prompt_tokens = 3, .completion_tokens = 5};
  const json done = serve::completion_response(Endpoint::completions, meta, c);
  EXPECT_EQ(done, json::parse(R"({"id": "cmpl-1", "object": "text_completion", "created": 1700000000, "model": "tiny",
      "choices": [{"index": 0, "text": "hello", "logprobs": null, "finish_reason": "length"}],
      "usage": {"prompt_tokens": 3, "completion_tokens": 5, "total_tokens": 8}})"));
  const json chat = serve::completion_response(Endpoint::chat, meta, c);
  EXPECT_EQ(chat.at("object"), "chat.completion");
  EXPECT_EQ(chat.at("choices")[0], json::parse(R"({"index": 0, "message": {"role": "assistant", "content": "hello"},
      "finish_reason": "length"})"));

  EXPECT_EQ(serve::completion_chunk(Endpoint::completions, meta, "he", "", false).at("choices")[0],
            json::parse(R"({"index": 0, "text": "he", "logprobs": null, "finish_reason": null})"));
  EXPECT_EQ(serve::completion_chunk(Endpoint::chat, meta, "", "", true).at("choices")[0],
            json::parse(R"({"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": null})"));
  EXPECT_EQ(serve::completion_chunk(Endpoint::chat, meta, "he", "", false).at("choices")[0].at("delta"),
            json::parse(R"({"content": "he"})"));
  const json last = serve::completion_chunk(Endpoint::chat, meta, "", "stop", false);
  EXPECT_EQ(last.at("object"), "chat.completion.chunk");
  EXPECT_EQ(last.at("choices")[0].at("delta"), json::object());
  EXPECT_EQ(last.at("choices")[0].at("finish_reason"), "stop");

  EXPECT_EQ(serve::error_body(ApiError(400, "bad top_p", "invalid_value")),
            json::parse(R"({"error": {"message": "bad top_p", "type": "invalid_request_error", "code": "invalid_value"}})"));
  EXPECT_EQ(ApiError(500, "x", "internal_error").type(), "server_error");
  EXPECT_EQ(serve::models_response("tiny", 5),
            json::parse(R"({"object": "list", "data": [{"id": "tiny", "object": "model", "created": 5, "owned_by": "bitrank"}]})"));
  EXPECT_NE(serve::response_id(Endpoint::chat), serve::response_id(Endpoint::chat));
  EXPECT_EQ(serve::response_id(Endpoint::chat).rfind("chatcmpl-", 0), 0u);

  // Bytes a model may emit that are no UTF-8: replaced, never an exception.
  EXPECT_EQ(serve::dump_json(json{{"t", std::string("a\xff" "b\xe2\x82")}}), "{\"t\":\"a\xef\xbf\xbd" "b\xef\xbf\xbd\"}");
  EXPECT_EQ(serve::sse_event(json{{"a", 1}}), "data: {\"a\":1}\n\n");
}

// ---- the server --------------------------------------------------------------------

// The tiny hybrid behind a Server on 127.0.0.1, a free port, listening on a
// thread until the fixture ends.
class ServeServer : public ::testing::Test {
 protected:
  static constexpr index_t kMaxTokens = 12;

  void SetUp() override { start({}); }
  void TearDown() override { stop(); }

  void start(serve::ServeOptions options) {
    options.host = "127.0.0.1";
    options.port = 0;
    options.log_requests = false;
    server_ = std::make_unique<serve::Server>(serve::ServedModel{"tiny", *model_, *served_tok_}, options);
    port_ = server_->bind();
    ASSERT_GT(port_, 0);
    thread_ = std::thread([this] { server_->listen(); });
  }
  void stop() {
    if (!server_) return;
    server_->stop();
    thread_.join();
    server_.reset();
  }

  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port_);
    c.set_connection_timeout(5);
    c.set_read_timeout(20);  // a hung server fails the test instead of blocking it
    c.set_write_timeout(5);
    return c;
  }

  struct Want {
    std::string text, finish_reason;
    index_t prompt_tokens = 0, completion_tokens = 0;
  };
  // model::generate's greedy tokens after `prompt_text`, decoded up to the
  // first stop id (which counts but is not shown).
  Want greedy(const std::string& prompt_text, const std::vector<std::int32_t>& stop_ids, index_t max_tokens = kMaxTokens) const {
    const std::vector<std::int32_t> prompt = model::encode_prompt(tok_, prompt_text);
    const auto r = model::generate(*model_, prompt, {.max_tokens = max_tokens});
    const auto end = std::find_first_of(r.tokens.begin(), r.tokens.end(), stop_ids.begin(), stop_ids.end());
    return {tok_.decode(std::vector<std::int32_t>(r.tokens.begin(), end)), end == r.tokens.end() ? "length" : "stop",
            static_cast<index_t>(prompt.size()), static_cast<index_t>(end - r.tokens.begin() + (end != r.tokens.end()))};
  }

  const io::Tokenizer tok_{printable_tokenizer()};
  const model::HostWeights weights_ = test::tiny_hybrid::tiny_weights(false, 61);
  const std::unique_ptr<model::DecoderModel<float>> model_ = model::make_model(test::cpu_backend(), weights_);
  const io::Tokenizer* served_tok_ = &tok_;  // the tokenizer the server uses
  std::unique_ptr<serve::Server> server_;
  int port_ = 0;
  std::thread thread_;
};

// The events of a server-sent-event body: each "data: …" payload in order.
std::vector<std::string> sse_payloads(const std::string& body) {
  std::vector<std::string> out;
  std::size_t at = 0;
  while (at < body.size()) {
    const std::size_t end = body.find("\n\n", at);
    if (end == std::string::npos) {
      ADD_FAILURE() << "unterminated event: " << body.substr(at);
      break;
    }
    const std::string event = body.substr(at, end - at);
    EXPECT_EQ(event.rfind("data: ", 0), 0u) << event;
    out.push_back(event.substr(6));
    at = end + 2;
  }
  return out;
}

// The text of a streamed response (chunks' text or delta.content), its finish_reason; checks [DONE] ends it.
std::pair<std::string, std::string> streamed_text(const std::string& body, Endpoint endpoint) {
  const std::vector<std::string> events = sse_payloads(body);
  EXPECT_GE(events.size(), 2u);
  if (events.empty()) return {};
  EXPECT_EQ(events.back(), "[DONE]");
  std::string text, finish;
  for (std::size_t i = 0; i + 1 < events.size(); ++i) {
    const json chunk = json::parse(events[i]);
    const json& choice = chunk.at("choices").at(0);
    EXPECT_EQ(chunk.at("object"), endpoint == Endpoint::chat ? "chat.completion.chunk" : "text_completion");
    EXPECT_EQ(chunk.at("model"), "tiny");
    if (endpoint == Endpoint::chat) {
      if (i == 0) {
        EXPECT_EQ(choice.at("delta").at("role"), "assistant");
      }
      text += choice.at("delta").value("content", "");
    } else {
      text += choice.at("text").get<std::string>();
    }
    if (!choice.at("finish_reason").is_null()) {
      EXPECT_TRUE(finish.empty()) << "two finish chunks";
      finish = choice.at("finish_reason").get<std::string>();
    }
  }
  return {text, finish};
}

json post_json(httplib::Client& c, const std::string& path, const json& body, int want_status = 200) {
  const auto r = c.Post(path.c_str(), body.dump(), "application/json");
  if (!r) {
    ADD_FAILURE() << "no response to " << path << ": " << httplib::to_string(r.error());
    return {};
  }
  EXPECT_EQ(r->status, want_status) << r->body;
  EXPECT_EQ(r->get_header_value("Content-Type"), "application/json");
  return json::parse(r->body);
}

TEST_F(ServeServer, CompletionIsGreedyGenerateStreamedOrNot) {
  auto c = client();
  const std::string prompt = "Once upon a time";
  const Want want = greedy(prompt, {kEos});
  ASSERT_GE(want.text.size(), 3u) << "the tiny model's text is too short to test with";
  std::printf("  [serve] tiny hybrid, greedy after \"%s\": \"%s\" (%s)\n", prompt.c_str(), want.text.c_str(),
              want.finish_reason.c_str());

  const json body = {{"prompt", prompt}, {"max_tokens", kMaxTokens}, {"temperature", 0}};
  const json got = post_json(c, "/v1/completions", body);
  EXPECT_EQ(got.at("object"), "text_completion");
  EXPECT_EQ(got.at("model"), "tiny");
  EXPECT_EQ(got.at("id").get<std::string>().rfind("cmpl-", 0), 0u);
  EXPECT_EQ(got.at("choices")[0].at("text"), want.text);
  EXPECT_EQ(got.at("choices")[0].at("finish_reason"), want.finish_reason);
  EXPECT_EQ(got.at("usage").at("prompt_tokens"), want.prompt_tokens);
  EXPECT_EQ(got.at("usage").at("completion_tokens"), want.completion_tokens);
  EXPECT_EQ(got.at("usage").at("total_tokens"), want.prompt_tokens + want.completion_tokens);

  json stream_body = body;
  stream_body["stream"] = true;
  const auto r = c.Post("/v1/completions", stream_body.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->get_header_value("Content-Type"), "text/event-stream");
  EXPECT_GE(sse_payloads(r->body).size(), 3u);  // the text came in pieces
  const auto [text, finish] = streamed_text(r->body, Endpoint::completions);
  EXPECT_EQ(text, want.text);
  EXPECT_EQ(finish, want.finish_reason);

  // A stop string from the middle of the text: cut before its first occurrence, streamed or not.
  const std::string stop = want.text.substr(want.text.size() / 2, 2);
  const std::string cut = want.text.substr(0, want.text.find(stop));
  json stop_body = body;
  stop_body["stop"] = json::array({stop, "never-there"});
  const json stopped = post_json(c, "/v1/completions", stop_body);
  EXPECT_EQ(stopped.at("choices")[0].at("text"), cut);
  EXPECT_EQ(stopped.at("choices")[0].at("finish_reason"), "stop");
  stop_body["stream"] = true;
  const auto rs = c.Post("/v1/completions", stop_body.dump(), "application/json");
  ASSERT_TRUE(rs);
  EXPECT_EQ(streamed_text(rs->body, Endpoint::completions), std::make_pair(cut, std::string("stop")));

  // Seeded sampling: the same seed, the same text.
  const json sampled = {{"prompt", prompt}, {"max_tokens", kMaxTokens}, {"temperature", 0.9}, {"seed", 3}};
  EXPECT_EQ(post_json(c, "/v1/completions", sampled).at("choices")[0].at("text"),
            post_json(c, "/v1/completions", sampled).at("choices")[0].at("text"));
}

TEST_F(ServeServer, ChatModelsAndHealth) {
  auto c = client();
  const json messages = json::array({{{"role", "system"}, {"content", "You are terse."}}, {{"role", "user"}, {"content", "Hi there"}}});
  const Want want = greedy("<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi there<|im_end|>\n<|im_start|>assistant\n",
                           {kEos, kImEnd});
  ASSERT_GE(want.text.size(), 3u);
  std::printf("  [serve] tiny hybrid, chat: \"%s\" (%s)\n", want.text.c_str(), want.finish_reason.c_str());
  const json got = post_json(c, "/v1/chat/completions", {{"messages", messages}, {"max_tokens", kMaxTokens}});
  EXPECT_EQ(got.at("object"), "chat.completion");
  EXPECT_EQ(got.at("choices")[0].at("message"), (json{{"role", "assistant"}, {"content", want.text}}));
  EXPECT_EQ(got.at("choices")[0].at("finish_reason"), want.finish_reason);
  EXPECT_EQ(got.at("usage").at("prompt_tokens"), want.prompt_tokens);

  const auto r = c.Post("/v1/chat/completions",
                        json{{"messages", messages}, {"max_tokens", kMaxTokens}, {"stream", true}}.dump(), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(streamed_text(r->body, Endpoint::chat), std::make_pair(want.text, want.finish_reason));

  const auto models = c.Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(models->status, 200);
  EXPECT_EQ(json::parse(models->body).at("data")[0].at("id"), "tiny");
  const auto health = c.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(json::parse(health->body), (json{{"status", "ok"}}));
}

TEST_F(ServeServer, BadRequestsGetJsonErrors) {
  stop();
  start({.max_body_bytes = 4096});
  auto c = client();
  const auto expect_error = [&](const httplib::Result& r, int status, const std::string& needle) {
    ASSERT_TRUE(r) << httplib::to_string(r.error());
    EXPECT_EQ(r->status, status) << r->body;
    EXPECT_EQ(r->get_header_value("Content-Type"), "application/json");
    const json e = json::parse(r->body, nullptr, false);
    ASSERT_TRUE(e.contains("error")) << r->body;
    EXPECT_NE(e["error"].value("message", "").find(needle), std::string::npos) << r->body;
    EXPECT_TRUE(e["error"].at("type").is_string());
    EXPECT_TRUE(e["error"].at("code").is_string());
  };
  expect_error(c.Post("/v1/completions", "{\"prompt\": ", "application/json"), 400, "not valid JSON");
  expect_error(c.Post("/v1/completions", R"({"prompt": ["a"]})", "application/json"), 400, "prompt: arrays");
  expect_error(c.Post("/v1/completions", R"({"prompt": "a", "top_p": 0})", "application/json"), 400, "top-p");
  expect_error(c.Post("/v1/completions", R"({"prompt": "a", "max_tokens": 300})", "application/json"), 400,
               "exceeds this server's limit of 256");
  expect_error(c.Post("/v1/completions", json{{"prompt", std::string(250, 'a')}, {"max_tokens", 10}}.dump(), "application/json"),
               400, "exceed the model's context of 256 positions");
  expect_error(c.Post("/v1/chat/completions", R"({"messages": [{"role": "user", "content": 1}]})", "application/json"),
               400, "messages[0].content must be a string");
  expect_error(c.Get("/v1/nowhere"), 404, "no route GET /v1/nowhere");
  expect_error(c.Get("/v1/completions"), 404, "no route GET /v1/completions");
  expect_error(c.Post("/v1/completions", json{{"prompt", std::string(5000, 'a')}}.dump(), "application/json"), 413,
               "larger than 4096 bytes");
  // The server still answers.
  const json ok = post_json(c, "/v1/completions", {{"prompt", "ab"}, {"max_tokens", 2}});
  EXPECT_EQ(ok.at("choices")[0].at("text"), greedy("ab", {kEos}, 2).text);
}

// A bitrank::Error of the model (here: a prompt token past the model's
// vocabulary, from a tokenizer one token larger) is a 500 with its message;
// streamed, an error event after the 200 headers, then [DONE].
TEST_F(ServeServer, ModelErrorsAre500) {
  stop();
  io::TokenizerSpec spec = printable_tokenizer();
  spec.tokens.push_back("<|past|>");
  spec.types.push_back(io::TokenType::control);
  const io::Tokenizer larger(spec);
  served_tok_ = &larger;
  start({});
  auto c = client();
  const std::string message = "token 300 at position 1";
  const json e = post_json(c, "/v1/completions", {{"prompt", "a<|past|>"}, {"max_tokens", 2}}, 500);
  EXPECT_NE(e.at("error").at("message").get<std::string>().find(message), std::string::npos) << e;
  EXPECT_EQ(e.at("error").at("type"), "server_error");
  const auto r = c.Post("/v1/completions", json{{"prompt", "a<|past|>"}, {"max_tokens", 2}, {"stream", true}}.dump(),
                        "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  const std::vector<std::string> events = sse_payloads(r->body);
  ASSERT_EQ(events.size(), 2u) << r->body;
  EXPECT_NE(json::parse(events[0]).at("error").at("message").get<std::string>().find(message), std::string::npos);
  EXPECT_EQ(events[1], "[DONE]");
  // The server goes on: a good prompt still generates.
  EXPECT_EQ(post_json(c, "/v1/completions", {{"prompt", "ab"}, {"max_tokens", 2}}).at("choices")[0].at("text"),
            greedy("ab", {kEos}, 2).text);
  stop();  // before `larger` goes
}

TEST_F(ServeServer, ConcurrentClientsAllAnswered) {
  constexpr int kClients = 8, kRequests = 4;
  const std::vector<std::string> prompts = {"The cat", "A bit is", "Hello, world", "0 1 2 3"};
  std::vector<std::string> want;
  for (const auto& p : prompts) want.push_back(greedy(p, {kEos}, 8).text);

  std::atomic<int> ok{0};
  std::vector<std::vector<std::string>> failures(kClients);
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.emplace_back([&, i] {
      auto c = client();
      for (int j = 0; j < kRequests; ++j) {
        const std::size_t k = static_cast<std::size_t>(i + j) % prompts.size();
        const bool stream = (i + j) % 2 == 1;
        const json body = {{"prompt", prompts[k]}, {"max_tokens", 8}, {"stream", stream}};
        const auto r = c.Post("/v1/completions", body.dump(), "application/json");
        if (!r || r->status != 200) {
          failures[i].push_back(r ? fmt::format("status {}: {}", r->status, r->body) : httplib::to_string(r.error()));
          continue;
        }
        const std::string text = stream ? streamed_text(r->body, Endpoint::completions).first
                                        : json::parse(r->body).at("choices")[0].at("text").get<std::string>();
        if (text == want[k]) ++ok;
        else failures[i].push_back(fmt::format("prompt {}: \"{}\" instead of \"{}\"", k, text, want[k]));
      }
    });
  }
  for (auto& t : clients) t.join();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (int i = 0; i < kClients; ++i)
    for (const auto& f : failures[i]) ADD_FAILURE() << "client " << i << ": " << f;
  EXPECT_EQ(ok.load(), kClients * kRequests);
  std::printf("  [serve] %d clients × %d requests: %d answered with the expected text in %.2f s\n", kClients, kRequests,
              ok.load(), seconds);
  EXPECT_LT(seconds, 60.0);  // one at a time, 8 tokens each on a tiny model: well under a second here
  const auto t_stop = std::chrono::steady_clock::now();
  stop();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t_stop).count(), 10.0);
}

}  // namespace
}  // namespace bitrank
