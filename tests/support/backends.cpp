#include "support/backends.hpp"

#include <cstdio>

namespace bitrank::test {

Backend<double>& ref_backend() {
  static auto b = make_ref_backend();
  return *b;
}

Backend<float>& cpu_backend() {
  static auto b = make_cpu_backend();
  return *b;
}

#ifdef BITRANK_HAS_CUDA
static bool cuda_visible() {
  static const bool visible = [] {
    const int n = cuda_device_count();
    if (n == 0) std::printf("[bitrank tests] built with CUDA, no GPU visible: cuda cases are not registered\n");
    return n > 0;
  }();
  return visible;
}
static Backend<float>& cuda_backend() {
  static auto b = make_cuda_backend(0);
  return *b;
}
#endif

std::vector<std::string> available_backends() {
  std::vector<std::string> names{"cpu"};
#ifdef BITRANK_HAS_CUDA
  if (cuda_visible()) names.push_back("cuda");
#endif
  return names;
}

bool cuda_available() {
#ifdef BITRANK_HAS_CUDA
  return cuda_visible();
#else
  return false;
#endif
}

Backend<float>& backend(const std::string& name) {
  if (name == "cpu") return cpu_backend();
#ifdef BITRANK_HAS_CUDA
  if (name == "cuda" && cuda_visible()) return cuda_backend();
#endif
  throw Error("no backend named " + name + " on this machine");
}

}  // namespace bitrank::test
