// JSON parsing for the readers: nlohmann-json with a nesting limit and
// duplicate-key detection (nlohmann would silently keep the last value), and
// every failure a bitrank::Error naming the file.
#pragma once

#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "bitrank/error.hpp"

namespace bitrank::io {

// A short rendering of a JSON value for error messages.
inline std::string json_excerpt(const nlohmann::json& v) {
  std::string s = v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

// Parses `text`; containers nested `max_depth` deep or more (the top value
// is depth 0) and repeated keys in one object are errors. `what` names the
// document in messages ("header", "config").
inline nlohmann::json parse_json_checked(std::string_view text, const std::string& file, std::string_view what,
                                         int max_depth) {
  using nlohmann::json;
  std::vector<std::set<std::string>> open_objects;
  std::string problem;
  json::parser_callback_t check = [&](int depth, json::parse_event_t event, json& parsed) -> bool {
    if (!problem.empty()) return false;  // already failed: build nothing more
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        if (depth >= max_depth) {
          problem = ::bitrank::format("nested deeper than {} levels", max_depth);
          return false;
        }
        if (event == json::parse_event_t::object_start) open_objects.emplace_back();
        break;
      case json::parse_event_t::key:
        if (!open_objects.back().insert(parsed.get<std::string>()).second) {
          problem = ::bitrank::format("duplicate key {}", json_excerpt(parsed));
          return false;
        }
        break;
      case json::parse_event_t::object_end:
        open_objects.pop_back();
        break;
      default:
        break;
    }
    return true;
  };
  json j;
  try {
    j = json::parse(text.begin(), text.end(), check, /*allow_exceptions=*/true);
  } catch (const json::exception& e) {
    fail("{}: {} is not well-formed JSON: {}", file, what, e.what());
  }
  if (!problem.empty()) fail("{}: {}: {}", file, what, problem);
  if (j.is_discarded()) fail("{}: {} is empty", file, what);
  return j;
}

}  // namespace bitrank::io
