// Placeholder: the f64 reference of the ReduceOps family is not written yet.
#include "ref/ops.hpp"

namespace bitrank::ref {

std::unique_ptr<ReduceOps<double>> make_reduce_ops() { return nullptr; }

}  // namespace bitrank::ref
