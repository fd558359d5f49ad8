// Placeholder: the AdamOps family is not written yet.
#pragma once

#include "bitrank/ops/check.hpp"

namespace bitrank {

template <class T>
class AdamOps {
 public:
  virtual ~AdamOps() = default;
};

}  // namespace bitrank
