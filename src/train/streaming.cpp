// Streaming mode and device-memory cap (contract: include/bitrank/train/streaming.hpp).
#include "bitrank/train/streaming.hpp"

#include <fmt/format.h>

#include "bitrank/error.hpp"
#include "bitrank/log.hpp"

namespace bitrank::train {

void check_stream_mode(std::string_view mode, std::string_view what) {
  if (mode != "auto" && mode != "on" && mode != "off")
    fail("{}: streaming mode '{}' is not one of auto, on, off", what, std::string(mode));
}

StreamChoice choose_streaming(std::string_view mode, std::size_t cap, std::size_t model_bytes) {
  check_stream_mode(mode, "streaming");
  if (mode == "on") return {true, "--stream"};
  if (mode == "off") return {false, "--no-stream"};
  if (cap > 0 && model_bytes > cap)
    return {true, fmt::format("auto: the model's weights ({}) exceed the device-memory cap ({})",
                              format_bytes(model_bytes), format_bytes(cap))};
  if (cap > 0)
    return {false, fmt::format("auto: the model's weights ({}) fit under the device-memory cap ({})",
                               format_bytes(model_bytes), format_bytes(cap))};
  return {false, "auto: no device-memory cap"};
}

DeviceMemoryCap::DeviceMemoryCap(Memory& mem, std::size_t cap) : mem_(mem), previous_(mem.cap()) {
  if (cap == 0) return;
  mem_.set_cap(cap);
  set_ = true;
}

DeviceMemoryCap::~DeviceMemoryCap() {
  if (!set_) return;
  try {
    mem_.set_cap(previous_ > 0 && previous_ >= mem_.current_bytes() ? previous_ : 0);
  } catch (const std::exception& e) {
    BR_LOG_WARN("device memory cap: restoring the previous cap failed: {}", e.what());
  }
}

}  // namespace bitrank::train
