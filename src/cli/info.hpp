// `bitrank info FILE`: what a bitrank model file holds (architecture, BLR
// matrices with their bits per weight, totals, training summary), as text
// or, with --json, as one JSON object (io/bitrank_format.hpp describes both).
#pragma once

#include <string>

namespace bitrank::cli {

struct InfoOptions {
  std::string file;
  bool json = false;
};

int run_info(const InfoOptions& options);

}  // namespace bitrank::cli
