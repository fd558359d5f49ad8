#include "cli/device.hpp"

#include "bitrank/error.hpp"

namespace bitrank::cli {

std::unique_ptr<Backend<float>> make_device_backend(std::string_view command, const std::string& device,
                                                    const CudaOptions& cuda) {
  check_cuda_options(cuda);
  const CudaOptions defaults;
  if (device == "cpu" && (cuda.gdn_design != defaults.gdn_design || cuda.attention != defaults.attention))
    fail("{}: --gdn-design and --attention choose CUDA kernels: they apply with --device cuda only", command);
  if (device == "cpu") return make_cpu_backend();
  if (device == "cuda") {
#ifdef BITRANK_HAS_CUDA
    if (cuda_device_count() == 0)
      fail("{}: --device cuda, but no CUDA device is visible (no driver, or CUDA_VISIBLE_DEVICES hides them)",
           command);
    return make_cuda_backend(0, cuda);
#else
    fail("{}: --device cuda, but this build has no CUDA backend (nvcc was not found when it was configured; "
         "build with -DBITRANK_CUDA=ON)",
         command);
#endif
  }
  fail("{}: unknown --device '{}' (cpu or cuda)", command, device);
}

std::string stream_mode(std::string_view command, bool stream, bool no_stream) {
  if (stream && no_stream) fail("{}: give --stream or --no-stream, not both", command);
  return stream ? "on" : no_stream ? "off" : "auto";
}

std::size_t device_memory_cap(std::string_view command, const std::string& cap) {
  if (cap.empty()) return 0;
  return parse_bytes(cap, std::string(command) + ": --device-memory-cap");
}

}  // namespace bitrank::cli
