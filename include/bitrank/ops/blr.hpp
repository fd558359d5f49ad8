// Placeholder: the BlrOps family is not written yet.
#pragma once

#include "bitrank/ops/check.hpp"

namespace bitrank {

template <class T>
class BlrOps {
 public:
  virtual ~BlrOps() = default;
};

}  // namespace bitrank
