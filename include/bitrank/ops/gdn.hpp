// Placeholder: the GdnOps family is not written yet.
#pragma once

#include "bitrank/ops/check.hpp"

namespace bitrank {

template <class T>
class GdnOps {
 public:
  virtual ~GdnOps() = default;
};

}  // namespace bitrank
