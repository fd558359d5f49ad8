// Whether a run streams its blocks, and the device-memory cap it runs under
// (DESIGN §7 "Streaming"; `bitrank compress|eval --stream / --no-stream /
// --device-memory-cap`).
//
// Streaming keeps every block's weights (and, for the e2e student, its
// whole training state) in host memory and moves one block at a time to
// the device (model/streamed_weights.hpp): the teacher through
// make_model(…, stream), the e2e student through E2eTrainerOf's `stream`.
// The results equal the resident run's bit for bit on the same backend:
// the same ops on the same bytes, only their addresses differ.
//
// The mode: "on" streams, "off" does not, "auto" streams when a cap is set
// and the model's resident weights (model_device_bytes) alone exceed it —
// a model that fits by weights but not with its activations fails with the
// cap's Error, which suggests --stream. choose_streaming says which and why;
// the commands print it and their summaries record it.
//
// DeviceMemoryCap sets a cap on a backend's memory for a scope and puts the
// previous one back (Memory::set_cap: an allocation past it is an Error
// naming the cap, the bytes held and the request).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "bitrank/memory.hpp"

namespace bitrank::train {

struct StreamChoice {
  bool stream = false;
  std::string reason;  // "--stream", "auto: the model's weights (…) exceed the device-memory cap (…)", …
};

// Error naming `what` unless mode is "auto", "on" or "off".
void check_stream_mode(std::string_view mode, std::string_view what);
// cap 0: none; model_bytes: what the resident model's weights take.
StreamChoice choose_streaming(std::string_view mode, std::size_t cap, std::size_t model_bytes);

class DeviceMemoryCap {
 public:
  DeviceMemoryCap(Memory& mem, std::size_t cap);  // cap 0: leaves the memory as it is
  ~DeviceMemoryCap();
  DeviceMemoryCap(const DeviceMemoryCap&) = delete;
  DeviceMemoryCap& operator=(const DeviceMemoryCap&) = delete;

 private:
  Memory& mem_;
  std::size_t previous_;
  bool set_ = false;
};

}  // namespace bitrank::train
