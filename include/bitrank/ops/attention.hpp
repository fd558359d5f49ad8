// Placeholder: the AttentionOps family is not written yet.
#pragma once

#include "bitrank/ops/check.hpp"

namespace bitrank {

template <class T>
class AttentionOps {
 public:
  virtual ~AttentionOps() = default;
};

}  // namespace bitrank
