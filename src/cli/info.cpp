// `bitrank info`: loads the file with every check of the format (a file that
// fails one is an error, not a partial listing) and prints its description.
#include "cli/info.hpp"

#include <cstdio>

#include "bitrank/io/bitrank_format.hpp"

namespace bitrank::cli {

int run_info(const InfoOptions& o) {
  const auto d = io::describe_bitrank(o.file);
  const std::string text = o.json ? d.dump(2) + "\n" : io::describe_bitrank_text(d);
  std::fwrite(text.data(), 1, text.size(), stdout);
  return 0;
}

}  // namespace bitrank::cli
