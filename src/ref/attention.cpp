// Placeholder: the f64 reference of the AttentionOps family is not written yet.
#include "ref/ops.hpp"

namespace bitrank::ref {

std::unique_ptr<AttentionOps<double>> make_attention_ops() { return nullptr; }

}  // namespace bitrank::ref
