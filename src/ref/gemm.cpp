// Placeholder: the f64 reference of the GemmOps family is not written yet.
#include "ref/ops.hpp"

namespace bitrank::ref {

std::unique_ptr<GemmOps<double>> make_gemm_ops() { return nullptr; }

}  // namespace bitrank::ref
