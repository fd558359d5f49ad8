// The backends the tests run on: the f64 reference, and each f32 backend
// available on this machine (cpu always; cuda when built and a GPU is visible).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "bitrank/backend.hpp"

namespace bitrank::test {

Backend<double>& ref_backend();
Backend<float>& cpu_backend();
// Names of the f32 backends available here ("cpu", and "cuda" where present).
std::vector<std::string> available_backends();
// Whether "cuda" is among them (built with CUDA and a GPU visible).
bool cuda_available();
Backend<float>& backend(const std::string& name);

}  // namespace bitrank::test
