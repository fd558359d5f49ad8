// Placeholder: the CPU backend of the AdamOps family is not written yet.
#include "cpu/ops.hpp"

namespace bitrank::cpu {

std::unique_ptr<AdamOps<float>> make_adam_ops(ThreadPool&) { return nullptr; }

}  // namespace bitrank::cpu
