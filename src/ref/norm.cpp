// Placeholder: the f64 reference of the NormOps family is not written yet.
#include "ref/ops.hpp"

namespace bitrank::ref {

std::unique_ptr<NormOps<double>> make_norm_ops() { return nullptr; }

}  // namespace bitrank::ref
