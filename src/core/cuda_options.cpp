// The check of the CUDA backend's kernel choices (backend.hpp), in every
// build: the command line checks its options before it makes a backend.
#include <fmt/format.h>

#include "bitrank/backend.hpp"
#include "bitrank/error.hpp"

namespace bitrank {

void check_cuda_options(const CudaOptions& o) {
  if (o.gdn_design < 1 || o.gdn_design > 3)
    fail("cuda: the Gated DeltaNet design must be 1, 2 or 3 (3 chunkwise, the default), got {}", o.gdn_design);
  if (o.attention != "auto" && o.attention != "generic" && o.attention != "recompute")
    fail("cuda: the attention kernels must be one of auto, generic, recompute, got '{}'", o.attention);
}

}  // namespace bitrank
