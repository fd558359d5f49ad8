// Placeholder: the f64 reference of the DenseOps family is not written yet.
#include "ref/ops.hpp"

namespace bitrank::ref {

std::unique_ptr<DenseOps<double>> make_dense_ops() { return nullptr; }

}  // namespace bitrank::ref
