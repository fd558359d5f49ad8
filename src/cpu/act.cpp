// Placeholder: the CPU backend of the ActOps family is not written yet.
#include "cpu/ops.hpp"

namespace bitrank::cpu {

std::unique_ptr<ActOps<float>> make_act_ops(ThreadPool&) { return nullptr; }

}  // namespace bitrank::cpu
