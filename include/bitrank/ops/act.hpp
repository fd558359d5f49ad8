// Placeholder: the ActOps family is not written yet.
#pragma once

#include "bitrank/ops/check.hpp"

namespace bitrank {

template <class T>
class ActOps {
 public:
  virtual ~ActOps() = default;
};

}  // namespace bitrank
