// Placeholder: the CPU backend of the ReduceOps family is not written yet.
#include "cpu/ops.hpp"

namespace bitrank::cpu {

std::unique_ptr<ReduceOps<float>> make_reduce_ops(ThreadPool&) { return nullptr; }

}  // namespace bitrank::cpu
