// The API of `bitrank serve` without sockets (contract: serve/api.hpp).
//
// Stop strings: CompletionText keeps the generated text not yet sent in
// pending_. After each piece it cuts at the first occurrence of any stop
// string in pending_; without one it sends all of pending_ but its longest
// tail that is a proper prefix of a stop string. A stop string can never
// start in text already sent: that text's tail would have been such a
// prefix, longer than the one held back.
#include "serve/api.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <limits>

#include "bitrank/error.hpp"

namespace bitrank::serve {
namespace {

using nlohmann::json;

[[noreturn]] void bad_request(const std::string& code, const std::string& message) {
  throw ApiError(400, message, code);
}

// The field's value, or nullptr when absent or null.
const json* find_field(const json& body, const char* name) {
  const auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

std::string string_value(const json& v, const std::string& name) {
  if (!v.is_string()) bad_request("invalid_type", fmt::format("{} must be a string, got {}", name, v.type_name()));
  return v.get<std::string>();
}

std::int64_t whole_number(const json& v, const std::string& name) {
  if (!v.is_number_integer())
    bad_request("invalid_type", fmt::format("{} must be a whole number, got {}", name, v.dump()));
  if (v.is_number_unsigned() && v.get<std::uint64_t>() > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
    bad_request("invalid_value", fmt::format("{} {} is out of range", name, v.dump()));
  return v.get<std::int64_t>();
}

double number(const json& v, const std::string& name) {
  if (!v.is_number()) bad_request("invalid_type", fmt::format("{} must be a number, got {}", name, v.type_name()));
  return v.get<double>();
}

json parse_body(std::string_view body) {
  json parsed;
  try {
    parsed = json::parse(body);
  } catch (const json::exception& e) {
    bad_request("invalid_json", fmt::format("the request body is not valid JSON: {}", e.what()));
  }
  if (!parsed.is_object()) bad_request("invalid_json", "the request body must be a JSON object");
  return parsed;
}

std::vector<ChatMessage> parse_messages(const json* v) {
  if (!v) bad_request("missing_field", "messages is required: [{\"role\": \"user\", \"content\": \"…\"}, …]");
  if (!v->is_array() || v->empty()) bad_request("invalid_type", "messages must be a non-empty array");
  std::vector<ChatMessage> messages;
  for (std::size_t i = 0; i < v->size(); ++i) {
    const json& m = (*v)[i];
    const std::string name = fmt::format("messages[{}]", i);
    if (!m.is_object()) bad_request("invalid_type", name + " must be an object with role and content");
    const json* role = find_field(m, "role");
    const json* content = find_field(m, "content");
    if (!role || !content) bad_request("missing_field", name + " needs a role and a content");
    ChatMessage msg{string_value(*role, name + ".role"), string_value(*content, name + ".content")};
    if (msg.role != "system" && msg.role != "user" && msg.role != "assistant")
      bad_request("invalid_value", fmt::format("{}.role must be system, user or assistant, got \"{}\"", name, msg.role));
    messages.push_back(std::move(msg));
  }
  return messages;
}

std::vector<std::string> parse_stop(const json* v) {
  if (!v) return {};
  std::vector<std::string> stop;
  if (v->is_string()) {
    stop.push_back(v->get<std::string>());
  } else if (v->is_array()) {
    for (std::size_t i = 0; i < v->size(); ++i) stop.push_back(string_value((*v)[i], fmt::format("stop[{}]", i)));
  } else {
    bad_request("invalid_type", fmt::format("stop must be a string or an array of strings, got {}", v->type_name()));
  }
  for (const std::string& s : stop)
    if (s.empty()) bad_request("invalid_value", "stop strings must not be empty");
  return stop;
}

model::SamplingOptions parse_sampling(const json& body) {
  model::SamplingOptions s;
  if (const json* v = find_field(body, "temperature")) s.temperature = number(*v, "temperature");
  if (const json* v = find_field(body, "top_p")) s.top_p = number(*v, "top_p");
  if (const json* v = find_field(body, "top_k")) s.top_k = whole_number(*v, "top_k");
  if (const json* v = find_field(body, "seed")) {
    if (!v->is_number_integer() || (!v->is_number_unsigned() && v->get<std::int64_t>() < 0))
      bad_request("invalid_value", fmt::format("seed must be a whole number ≥ 0, got {}", v->dump()));
    s.seed = v->get<std::uint64_t>();
  }
  return s;
}

// The first position of any stop string in `text`, or npos.
std::size_t first_stop(const std::string& text, const std::vector<std::string>& stop) {
  std::size_t at = std::string::npos;
  for (const std::string& s : stop) at = std::min(at, text.find(s));
  return at;
}

// The length of the longest tail of `text` that is a proper prefix of a stop string.
std::size_t stop_prefix_tail(const std::string& text, const std::vector<std::string>& stop) {
  std::size_t keep = 0;
  for (const std::string& s : stop) {
    for (std::size_t n = std::min(s.size() - 1, text.size()); n > keep; --n) {
      if (text.compare(text.size() - n, n, s, 0, n) == 0) {
        keep = n;
        break;
      }
    }
  }
  return keep;
}

// Thrown from the token callback to end model::generate early.
struct EndGeneration {};

}  // namespace

ApiError::ApiError(int status, const std::string& message, std::string code)
    : std::runtime_error(message), status_(status), code_(std::move(code)) {}

std::string ApiError::type() const { return status_ >= 500 ? "server_error" : "invalid_request_error"; }

CompletionRequest parse_completion_request(std::string_view body_text, Endpoint endpoint) {
  const json body = parse_body(body_text);
  CompletionRequest r;
  r.endpoint = endpoint;
  if (endpoint == Endpoint::chat) {
    r.messages = parse_messages(find_field(body, "messages"));
  } else {
    const json* prompt = find_field(body, "prompt");
    if (!prompt) bad_request("missing_field", "prompt is required");
    if (prompt->is_array()) bad_request("invalid_type", "prompt: arrays of prompts or of token ids are not supported; give one string");
    r.prompt = string_value(*prompt, "prompt");
  }
  if (const json* v = find_field(body, "max_tokens")) r.max_tokens = whole_number(*v, "max_tokens");
  r.sampling = parse_sampling(body);
  r.stop = parse_stop(find_field(body, "stop"));
  if (const json* v = find_field(body, "stream")) {
    if (!v->is_boolean()) bad_request("invalid_type", fmt::format("stream must be true or false, got {}", v->dump()));
    r.stream = v->get<bool>();
  }
  if (const json* v = find_field(body, "n"); v && whole_number(*v, "n") != 1)
    bad_request("invalid_value", fmt::format("n: only 1 choice per request is supported, got {}", v->dump()));
  try {
    model::check_generate_options({.max_tokens = r.max_tokens.value_or(1), .sampling = r.sampling});
  } catch (const Error& e) {
    bad_request("invalid_value", e.what());
  }
  return r;
}

std::string chatml_prompt(const std::vector<ChatMessage>& messages) {
  std::string text;
  for (const ChatMessage& m : messages) text += fmt::format("<|im_start|>{}\n{}<|im_end|>\n", m.role, m.content);
  return text + "<|im_start|>assistant\n";
}

GenerationPlan plan_generation(const CompletionRequest& request, const io::Tokenizer& tokenizer,
                               const ServeLimits& limits) {
  GenerationPlan plan;
  const bool chat = request.endpoint == Endpoint::chat;
  if (chat && !tokenizer.token_id("<|im_start|>"))
    bad_request("no_chat_template", "the model's tokenizer has no chat template bitrank knows; use /v1/completions");
  plan.prompt = model::encode_prompt(tokenizer, chat ? chatml_prompt(request.messages) : request.prompt);
  const index_t n = static_cast<index_t>(plan.prompt.size());
  if (n == 0) bad_request("invalid_value", "prompt: the text has no tokens");
  const index_t context = limits.context;
  if (context > 0 && n >= context)
    bad_request("context_length_exceeded",
                fmt::format("the prompt's {} tokens leave no room in the model's context of {} positions", n, context));
  const index_t max_tokens =
      request.max_tokens.value_or(context > 0 ? std::min(limits.max_tokens_limit, context - n) : limits.max_tokens_limit);
  if (max_tokens > limits.max_tokens_limit)
    bad_request("invalid_value", fmt::format("max_tokens {} exceeds this server's limit of {} (--max-tokens-limit)",
                                             max_tokens, limits.max_tokens_limit));
  if (context > 0 && n + max_tokens > context)
    bad_request("context_length_exceeded",
                fmt::format("the prompt's {} tokens and max_tokens {} exceed the model's context of {} positions", n,
                            max_tokens, context));
  plan.options = {.max_tokens = max_tokens, .sampling = request.sampling};
  try {
    model::check_generate_options(plan.options);
  } catch (const Error& e) {
    bad_request("invalid_value", e.what());
  }
  if (tokenizer.spec().eos_id >= 0) plan.stop_ids.push_back(tokenizer.spec().eos_id);
  if (const auto im_end = tokenizer.token_id("<|im_end|>"); chat && im_end && *im_end != tokenizer.spec().eos_id)
    plan.stop_ids.push_back(*im_end);
  plan.stop = request.stop;
  return plan;
}

CompletionText::CompletionText(const io::Tokenizer& tokenizer, std::vector<std::int32_t> stop_ids,
                               std::vector<std::string> stop)
    : stream_(tokenizer), stop_ids_(std::move(stop_ids)), stop_(std::move(stop)) {}

std::string CompletionText::release(std::string piece) {
  pending_ += piece;
  const std::size_t at = first_stop(pending_, stop_);
  if (at != std::string::npos) {
    stopped_ = true;
    std::string out = pending_.substr(0, at);
    pending_.clear();
    return out;
  }
  const std::size_t send = pending_.size() - stop_prefix_tail(pending_, stop_);
  std::string out = pending_.substr(0, send);
  pending_.erase(0, send);
  return out;
}

std::string CompletionText::push(std::int32_t id) {
  BR_ASSERT(!stopped_, "CompletionText::push after a stop");
  ++tokens_;
  if (std::find(stop_ids_.begin(), stop_ids_.end(), id) != stop_ids_.end()) {
    stopped_ = true;
    std::string rest = pending_ + stream_.finish();  // the EOS itself is not shown
    pending_.clear();
    return rest;
  }
  return release(stream_.push(id));
}

std::string CompletionText::finish() {
  if (stopped_) return {};
  std::string rest = release(stream_.finish());
  if (!stopped_) rest += std::exchange(pending_, {});  // generation ended: nothing more can complete a stop string
  return rest;
}

Completion run_completion(const model::DecoderModel<float>& model, const io::Tokenizer& tokenizer,
                          const GenerationPlan& plan, const std::function<void(const std::string&)>& on_text) {
  Completion c;
  c.prompt_tokens = static_cast<index_t>(plan.prompt.size());
  CompletionText text(tokenizer, plan.stop_ids, plan.stop);
  const auto emit = [&](const std::string& piece) {
    if (piece.empty()) return;
    c.text += piece;
    if (on_text) on_text(piece);
  };
  try {
    model::generate(model, plan.prompt, plan.options, [&](std::int32_t id) {
      emit(text.push(id));
      if (text.stopped()) throw EndGeneration{};
    });
  } catch (const EndGeneration&) {
  }
  emit(text.finish());
  c.finish_reason = text.stopped() ? "stop" : "length";
  c.completion_tokens = text.tokens();
  return c;
}

std::string response_id(Endpoint endpoint) {
  static std::atomic<std::uint64_t> counter{0};
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  return fmt::format("{}-{:x}{:06x}", endpoint == Endpoint::chat ? "chatcmpl" : "cmpl",
                     std::chrono::duration_cast<std::chrono::seconds>(now).count(), counter++);
}

json completion_response(Endpoint endpoint, const ResponseMeta& meta, const Completion& c) {
  json choice = {{"index", 0}, {"finish_reason", c.finish_reason}};
  if (endpoint == Endpoint::chat) {
    choice["message"] = {{"role", "assistant"}, {"content", c.text}};
  } else {
    choice["text"] = c.text;
    choice["logprobs"] = nullptr;
  }
  return {{"id", meta.id},
          {"object", endpoint == Endpoint::chat ? "chat.completion" : "text_completion"},
          {"created", meta.created},
          {"model", meta.model},
          {"choices", json::array({choice})},
          {"usage",
           {{"prompt_tokens", c.prompt_tokens},
            {"completion_tokens", c.completion_tokens},
            {"total_tokens", c.prompt_tokens + c.completion_tokens}}}};
}

json completion_chunk(Endpoint endpoint, const ResponseMeta& meta, const std::string& text,
                      std::string_view finish_reason, bool first) {
  json choice = {{"index", 0}, {"finish_reason", finish_reason.empty() ? json(nullptr) : json(finish_reason)}};
  if (endpoint == Endpoint::chat) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (first || !text.empty()) delta["content"] = text;
    choice["delta"] = delta;
  } else {
    choice["text"] = text;
    choice["logprobs"] = nullptr;
  }
  return {{"id", meta.id},
          {"object", endpoint == Endpoint::chat ? "chat.completion.chunk" : "text_completion"},
          {"created", meta.created},
          {"model", meta.model},
          {"choices", json::array({choice})}};
}

json models_response(const std::string& model, std::int64_t created) {
  return {{"object", "list"},
          {"data", json::array({{{"id", model}, {"object", "model"}, {"created", created}, {"owned_by", "bitrank"}}})}};
}

json error_body(const ApiError& error) {
  return {{"error", {{"message", error.what()}, {"type", error.type()}, {"code", error.code()}}}};
}

std::string dump_json(const json& value) { return value.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string sse_event(const json& value) { return "data: " + dump_json(value) + "\n\n"; }

}  // namespace bitrank::serve
