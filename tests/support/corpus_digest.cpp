#include "support/corpus_digest.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

namespace bitrank::test {

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string fnv1a64_hex(const std::vector<std::int32_t>& ids) {
  std::uint64_t h = 0xCBF29CE484222325ULL;
  for (std::int32_t id : ids) {
    const auto u = static_cast<std::uint32_t>(id);
    for (int k = 0; k < 4; ++k) h = (h ^ ((u >> (8 * k)) & 0xFF)) * 0x100000001B3ULL;
  }
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return hex;
}

std::string missing_corpus_files(const std::string& table_path) {
  std::istringstream table(read_file(table_path));
  std::string line, first;
  std::size_t rows = 0, missing = 0;
  while (std::getline(table, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream in(line);
    std::string path;
    if (!(in >> path)) continue;
    ++rows;
    std::error_code ec;
    if (!std::filesystem::is_regular_file(path, ec)) {
      if (missing++ == 0) first = path;
    }
  }
  if (missing == 0) return "";
  return std::to_string(missing) + " of the " + std::to_string(rows) + " corpus files of " + table_path +
         " are missing (first: " + first + "): tools/setup.sh installs python3.11-doc and fortunes";
}

std::size_t for_each_digest_row(const std::string& table_path, const std::function<void(const DigestRow&)>& fn) {
  std::istringstream table(read_file(table_path));
  std::string line;
  std::size_t rows = 0;
  while (std::getline(table, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream in(line);
    DigestRow row;
    std::size_t want_bytes = 0;
    in >> row.path >> want_bytes >> row.count[0] >> row.hash[0] >> row.count[1] >> row.hash[1];
    if (in.fail()) {
      ADD_FAILURE() << table_path << ": bad digest row: " << line;
      continue;
    }
    if (!std::ifstream(row.path, std::ios::binary)) {
      ADD_FAILURE() << "corpus file " << row.path << " is missing: tools/setup.sh installs python3.11-doc and fortunes";
      continue;
    }
    row.text = read_file(row.path);
    if (row.text.size() != want_bytes) {
      ADD_FAILURE() << row.path << ": " << row.text.size() << " bytes, the digest was made from " << want_bytes;
      continue;
    }
    fn(row);
    ++rows;
  }
  return rows;
}

}  // namespace bitrank::test
