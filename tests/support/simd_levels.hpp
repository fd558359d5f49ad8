// The SIMD levels of the CPU kernels (cpu/blr_infer.hpp's SimdLevel) that
// this CPU runs, printed once under a tag, for the tests that run every
// level against the others and against the f64 reference.
#pragma once

#include <cstdio>
#include <vector>

#include "cpu/blr_infer.hpp"

namespace bitrank::test {

inline std::vector<cpu::SimdLevel> simd_levels_here(const char* tag) {
  std::vector<cpu::SimdLevel> levels;
  for (cpu::SimdLevel l : {cpu::SimdLevel::scalar, cpu::SimdLevel::avx2, cpu::SimdLevel::avx512})
    if (cpu::simd_level_supported(l)) levels.push_back(l);
  std::printf("  [%s] levels on this CPU:", tag);
  for (cpu::SimdLevel l : levels) std::printf(" %s", cpu::simd_level_name(l));
  std::printf("\n");
  return levels;
}

}  // namespace bitrank::test
