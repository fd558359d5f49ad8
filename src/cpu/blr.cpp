// Placeholder: the CPU backend of the BlrOps family is not written yet.
#include "cpu/ops.hpp"

namespace bitrank::cpu {

std::unique_ptr<BlrOps<float>> make_blr_ops(ThreadPool&) { return nullptr; }

}  // namespace bitrank::cpu
