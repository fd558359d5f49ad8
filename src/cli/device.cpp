#include "cli/device.hpp"

#include "bitrank/error.hpp"

namespace bitrank::cli {

std::unique_ptr<Backend<float>> make_device_backend(std::string_view command, const std::string& device) {
  if (device == "cpu") return make_cpu_backend();
  if (device == "cuda") {
#ifdef BITRANK_HAS_CUDA
    if (cuda_device_count() == 0)
      fail("{}: --device cuda, but no CUDA device is visible (no driver, or CUDA_VISIBLE_DEVICES hides them)",
           command);
    return make_cuda_backend(0);
#else
    fail("{}: --device cuda, but this build has no CUDA backend (nvcc was not found when it was configured; "
         "build with -DBITRANK_CUDA=ON)",
         command);
#endif
  }
  fail("{}: unknown --device '{}' (cpu or cuda)", command, device);
}

}  // namespace bitrank::cli
