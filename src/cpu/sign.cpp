// Placeholder: the CPU backend of the SignOps family is not written yet.
#include "cpu/ops.hpp"

namespace bitrank::cpu {

std::unique_ptr<SignOps<float>> make_sign_ops(ThreadPool&) { return nullptr; }

}  // namespace bitrank::cpu
