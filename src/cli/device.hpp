// The backend a command runs on, from its --device value: "cpu" (the f32
// CPU backend) or "cuda" (CUDA device 0). One place for the checks every
// command needs: an unknown name, a build without the CUDA backend, no GPU
// visible — each an Error naming the command.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "bitrank/backend.hpp"

namespace bitrank::cli {

std::unique_ptr<Backend<float>> make_device_backend(std::string_view command, const std::string& device);

}  // namespace bitrank::cli
