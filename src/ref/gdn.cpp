// Placeholder: the f64 reference of the GdnOps family is not written yet.
#include "ref/ops.hpp"

namespace bitrank::ref {

std::unique_ptr<GdnOps<double>> make_gdn_ops() { return nullptr; }

}  // namespace bitrank::ref
