// Placeholder: the ReduceOps family is not written yet.
#pragma once

#include "bitrank/ops/check.hpp"

namespace bitrank {

template <class T>
class ReduceOps {
 public:
  virtual ~ReduceOps() = default;
};

}  // namespace bitrank
