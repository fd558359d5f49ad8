#include "support/backends.hpp"

#include <gtest/gtest.h>

namespace bitrank::test {

Backend<double>& ref_backend() {
  static auto b = make_ref_backend();
  return *b;
}

Backend<float>& cpu_backend() {
  static auto b = make_cpu_backend();
  return *b;
}

std::vector<std::string> available_backends() { return {"cpu"}; }

Backend<float>& backend(const std::string& name) {
  if (name == "cpu") return cpu_backend();
  throw Error("no backend named " + name);
}

}  // namespace bitrank::test
