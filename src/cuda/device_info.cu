// Device discovery for the CUDA backend: how many GPUs are visible, and a
// line describing the first. A machine without a GPU (or driver) answers 0,
// which is how CUDA tests know to skip.
#include <cuda_runtime.h>

#include <string>

#include "cuda/device_info.hpp"

namespace bitrank::cuda {

int visible_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return 0;
  }
  return n;
}

std::string device_description(int device) {
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, device) != cudaSuccess) return "unknown device";
  return std::string(p.name) + " (sm_" + std::to_string(p.major) + std::to_string(p.minor) + ", " +
         std::to_string(p.totalGlobalMem >> 30) + " GiB)";
}

}  // namespace bitrank::cuda
