// Device discovery (usable from host-only code: no CUDA headers here).
#pragma once

#include <string>

namespace bitrank::cuda {

int visible_device_count();
std::string device_description(int device);

}  // namespace bitrank::cuda
