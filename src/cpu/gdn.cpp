// Placeholder: the CPU backend of the GdnOps family is not written yet.
#include "cpu/ops.hpp"

namespace bitrank::cpu {

std::unique_ptr<GdnOps<float>> make_gdn_ops(ThreadPool&) { return nullptr; }

}  // namespace bitrank::cpu
