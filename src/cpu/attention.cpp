// Placeholder: the CPU backend of the AttentionOps family is not written yet.
#include "cpu/ops.hpp"

namespace bitrank::cpu {

std::unique_ptr<AttentionOps<float>> make_attention_ops(ThreadPool&) { return nullptr; }

}  // namespace bitrank::cpu
