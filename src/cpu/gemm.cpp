// Placeholder: the CPU backend of the GemmOps family is not written yet.
#include "cpu/ops.hpp"

namespace bitrank::cpu {

std::unique_ptr<GemmOps<float>> make_gemm_ops(ThreadPool&) { return nullptr; }

}  // namespace bitrank::cpu
