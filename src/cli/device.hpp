// The backend a command runs on, from its --device value: "cpu" (the f32
// CPU backend) or "cuda" (CUDA device 0). One place for the checks every
// command needs: an unknown name, a build without the CUDA backend, no GPU
// visible — each an Error naming the command. Also the streaming options
// both commands share.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "bitrank/backend.hpp"

namespace bitrank::cli {

// `cuda` holds the CUDA backend's kernel choices; other than the defaults
// with --device cpu, an Error (they do not apply).
std::unique_ptr<Backend<float>> make_device_backend(std::string_view command, const std::string& device,
                                                    const CudaOptions& cuda = {});

// The streaming mode of --stream / --no-stream ("on", "off", or "auto" for
// neither; both: an Error naming the command) and the bytes of
// --device-memory-cap (empty: 0, no cap).
std::string stream_mode(std::string_view command, bool stream, bool no_stream);
std::size_t device_memory_cap(std::string_view command, const std::string& cap);

}  // namespace bitrank::cli
