// `bitrank bench`: the backend of --device, then the harness of
// src/bench/ (bench/bench.hpp: the cases, the table) on it.
#pragma once

#include "bench/bench.hpp"

namespace bitrank::cli {

using bench::BenchOptions;

int run_bench(const BenchOptions& options);

}  // namespace bitrank::cli
