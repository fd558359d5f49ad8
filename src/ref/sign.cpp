// Placeholder: the f64 reference of the SignOps family is not written yet.
#include "ref/ops.hpp"

namespace bitrank::ref {

std::unique_ptr<SignOps<double>> make_sign_ops() { return nullptr; }

}  // namespace bitrank::ref
