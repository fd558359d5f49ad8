// Placeholder: the CPU backend of the NormOps family is not written yet.
#include "cpu/ops.hpp"

namespace bitrank::cpu {

std::unique_ptr<NormOps<float>> make_norm_ops(ThreadPool&) { return nullptr; }

}  // namespace bitrank::cpu
