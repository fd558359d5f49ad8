// Placeholder: the f64 reference of the ActOps family is not written yet.
#include "ref/ops.hpp"

namespace bitrank::ref {

std::unique_ptr<ActOps<double>> make_act_ops() { return nullptr; }

}  // namespace bitrank::ref
