// `bitrank bench`: the backend of --device (with the CUDA kernel choices of
// --gdn-design, --attention) handed to the bench harness (src/bench/).
#include "cli/bench.hpp"

#include <memory>

#include "cli/device.hpp"

namespace bitrank::cli {

int run_bench(const BenchOptions& options) {
  const std::unique_ptr<Backend<float>> be = make_device_backend("bench", options.device, options.cuda);
  return bench::run_bench(*be, options);
}

}  // namespace bitrank::cli
