// Placeholder: the SignOps family is not written yet.
#pragma once

#include "bitrank/ops/check.hpp"

namespace bitrank {

template <class T>
class SignOps {
 public:
  virtual ~SignOps() = default;
};

}  // namespace bitrank
