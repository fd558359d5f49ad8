// Placeholder: the CPU backend of the RopeOps family is not written yet.
#include "cpu/ops.hpp"

namespace bitrank::cpu {

std::unique_ptr<RopeOps<float>> make_rope_ops(ThreadPool&) { return nullptr; }

}  // namespace bitrank::cpu
