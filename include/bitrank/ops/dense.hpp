// Placeholder: the DenseOps family is not written yet.
#pragma once

#include "bitrank/ops/check.hpp"

namespace bitrank {

template <class T>
class DenseOps {
 public:
  virtual ~DenseOps() = default;
};

}  // namespace bitrank
