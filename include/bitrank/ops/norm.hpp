// Placeholder: the NormOps family is not written yet.
#pragma once

#include "bitrank/ops/check.hpp"

namespace bitrank {

template <class T>
class NormOps {
 public:
  virtual ~NormOps() = default;
};

}  // namespace bitrank
