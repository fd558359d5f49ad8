// Placeholder: the f64 reference of the RopeOps family is not written yet.
#include "ref/ops.hpp"

namespace bitrank::ref {

std::unique_ptr<RopeOps<double>> make_rope_ops() { return nullptr; }

}  // namespace bitrank::ref
