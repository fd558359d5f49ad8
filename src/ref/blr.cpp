// Placeholder: the f64 reference of the BlrOps family is not written yet.
#include "ref/ops.hpp"

namespace bitrank::ref {

std::unique_ptr<BlrOps<double>> make_blr_ops() { return nullptr; }

}  // namespace bitrank::ref
