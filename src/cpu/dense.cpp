// Placeholder: the CPU backend of the DenseOps family is not written yet.
#include "cpu/ops.hpp"

namespace bitrank::cpu {

std::unique_ptr<DenseOps<float>> make_dense_ops(ThreadPool&) { return nullptr; }

}  // namespace bitrank::cpu
