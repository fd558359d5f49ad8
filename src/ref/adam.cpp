// Placeholder: the f64 reference of the AdamOps family is not written yet.
#include "ref/ops.hpp"

namespace bitrank::ref {

std::unique_ptr<AdamOps<double>> make_adam_ops() { return nullptr; }

}  // namespace bitrank::ref
