// Placeholder: the RopeOps family is not written yet.
#pragma once

#include "bitrank/ops/check.hpp"

namespace bitrank {

template <class T>
class RopeOps {
 public:
  virtual ~RopeOps() = default;
};

}  // namespace bitrank
