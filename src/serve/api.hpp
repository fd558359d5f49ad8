// The OpenAI-compatible API of `bitrank serve` (DESIGN §9) without sockets:
// request bodies → what the model runs, generated ids → the text sent, and
// the response bodies. The HTTP side is serve/server.hpp.
//
// Requests (POST /v1/completions, /v1/chat/completions; a JSON object):
//   prompt       completions: one string (an array: 400 naming the field)
//   messages     chat: [{role: system|user|assistant, content: string}, …],
//                rendered as ChatML — "<|im_start|>{role}\n{content}<|im_end|>\n"
//                each, then "<|im_start|>assistant\n" — when the tokenizer has
//                the <|im_start|> token (SmolLM2 does); otherwise a 400
//   max_tokens   ≥ 1, ≤ the server's limit (--max-tokens-limit); absent: the
//                limit, or what the context leaves when that is less
//   temperature, top_p, top_k (an extension), seed: model::SamplingOptions,
//                absent ones at its defaults (greedy, as `bitrank generate`)
//   stop         a string or an array of non-empty strings
//   stream       true: server-sent events (chunks, then "data: [DONE]")
//   n            1 if given; other fields (model, user, …) are ignored
// A value of the wrong type or out of range (check_generate_options' own
// messages) is an ApiError 400 naming the field; so is a prompt whose tokens
// and max_tokens exceed the model's context.
//
// Generation ends at the tokenizer's EOS (and at <|im_end|> for chat): the
// stop token is counted, not shown; or at the first occurrence of a stop
// string: the text ends before it. Streamed text holds back a tail that may
// still become a stop string, so what was sent is never taken back; the
// pieces sent always concatenate to the whole (non-streamed) text.
//
// Responses are OpenAI's shapes: {id, object, created, model, choices:
// [{index, text | message{role, content}, finish_reason "stop"|"length"}],
// usage{prompt_tokens, completion_tokens, total_tokens}}; chunks are
// "text_completion" (choices[].text) or "chat.completion.chunk"
// (choices[].delta: the role first, then content); errors are
// {"error": {message, type, code}}. Text that is not valid UTF-8 (a model
// may emit any bytes) goes out with U+FFFD in place of the bad bytes.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "bitrank/io/tokenizer.hpp"
#include "bitrank/model/decoder.hpp"
#include "bitrank/model/generate.hpp"

namespace bitrank::serve {

// A request the client must fix (4xx) or a failure of the server (5xx).
class ApiError : public std::runtime_error {
 public:
  ApiError(int status, const std::string& message, std::string code);
  int status() const { return status_; }
  const std::string& code() const { return code_; }
  // "invalid_request_error" for 4xx, "server_error" for 5xx.
  std::string type() const;

 private:
  int status_;
  std::string code_;
};

enum class Endpoint { completions, chat };

struct ChatMessage {
  std::string role;  // system, user or assistant
  std::string content;
};

struct CompletionRequest {
  Endpoint endpoint = Endpoint::completions;
  std::string prompt;                 // completions
  std::vector<ChatMessage> messages;  // chat
  std::optional<index_t> max_tokens;  // absent: the limit or the context's room
  model::SamplingOptions sampling{};
  std::vector<std::string> stop;
  bool stream = false;
};

// The request body (see above); ApiError 400 naming the field.
CompletionRequest parse_completion_request(std::string_view body, Endpoint endpoint);

// The ChatML text of the messages, the assistant's turn opened.
std::string chatml_prompt(const std::vector<ChatMessage>& messages);

struct ServeLimits {
  index_t max_tokens_limit = 256;  // the most max_tokens a request may ask
  index_t context = 0;             // the model's positions (max_position_embeddings); 0: no limit known
};

// What the model runs for a request.
struct GenerationPlan {
  std::vector<std::int32_t> prompt;
  model::GenerateOptions options;      // max_tokens and sampling; stop_id unused (stop_ids)
  std::vector<std::int32_t> stop_ids;  // EOS, and <|im_end|> for chat
  std::vector<std::string> stop;       // stop strings
};

// The prompt encoded (model::encode_prompt), max_tokens resolved and every
// option checked; ApiError 400 on a chat request without ChatML tokens, an
// empty prompt, bad options or a context overflow.
GenerationPlan plan_generation(const CompletionRequest& request, const io::Tokenizer& tokenizer,
                               const ServeLimits& limits);

// Generated ids → the text to send (see above): push(id) returns the text
// now safe to send (often empty); stopped() says generation must end (a
// stop id or stop string was met); finish() returns the rest once
// generation ended without a stop string.
class CompletionText {
 public:
  CompletionText(const io::Tokenizer& tokenizer, std::vector<std::int32_t> stop_ids, std::vector<std::string> stop);
  std::string push(std::int32_t id);
  std::string finish();
  bool stopped() const { return stopped_; }
  index_t tokens() const { return tokens_; }  // ids pushed, a stop id included

 private:
  std::string release(std::string piece);  // pending text → what is safe to send

  model::TextStream stream_;
  std::vector<std::int32_t> stop_ids_;
  std::vector<std::string> stop_;
  std::string pending_;  // a tail that may still become a stop string
  bool stopped_ = false;
  index_t tokens_ = 0;
};

struct Completion {
  std::string text;
  std::string finish_reason;  // "stop" or "length"
  index_t prompt_tokens = 0;
  index_t completion_tokens = 0;
};

// Runs the plan (model::generate) and calls on_text with each piece of text
// as it becomes safe to send. An exception from on_text (a client gone)
// ends generation and propagates.
Completion run_completion(const model::DecoderModel<float>& model, const io::Tokenizer& tokenizer,
                          const GenerationPlan& plan, const std::function<void(const std::string&)>& on_text = {});

struct ResponseMeta {
  std::string id;            // "cmpl-…" or "chatcmpl-…"
  std::int64_t created = 0;  // Unix seconds
  std::string model;
};

// A new response id for the endpoint (a counter and the time: unique per server run).
std::string response_id(Endpoint endpoint);

nlohmann::json completion_response(Endpoint endpoint, const ResponseMeta& meta, const Completion& completion);
// One streamed chunk: `text` (chat: the first chunk carries the role and an
// empty content), finish_reason null while empty.
nlohmann::json completion_chunk(Endpoint endpoint, const ResponseMeta& meta, const std::string& text,
                                std::string_view finish_reason, bool first);
nlohmann::json models_response(const std::string& model, std::int64_t created);
nlohmann::json error_body(const ApiError& error);

// JSON text with invalid UTF-8 replaced by U+FFFD (never throws on text).
std::string dump_json(const nlohmann::json& value);
// One server-sent event: "data: <json>\n\n"; the stream's end.
std::string sse_event(const nlohmann::json& value);
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";

}  // namespace bitrank::serve
