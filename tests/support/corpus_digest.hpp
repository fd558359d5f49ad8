// The corpus digest tables of the tokenizer tests: one row per corpus file,
// `path bytes count_a hash_a count_b hash_b` (two tokenizers' token counts
// and FNV-1a-64 hashes of their ids, made by a reference tokenizer in
// tools/fixtures/), so the whole corpus is checked without committing its ids.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace bitrank::test {

// The whole file as bytes (throws std::runtime_error when unreadable).
std::string read_file(const std::string& path);

// FNV-1a-64 over the ids' little-endian bytes, as 16 hex digits.
std::string fnv1a64_hex(const std::vector<std::int32_t>& ids);

struct DigestRow {
  std::string path, text;  // the corpus file and its bytes
  std::size_t count[2] = {0, 0};
  std::string hash[2];
};

// Why the corpus a digest table names cannot be checked on this machine:
// "" when every file it names exists, else how many are missing, the first
// one and what installs them. The corpus tests GTEST_SKIP with it (a machine
// without python3.11-doc and fortunes), as the other data-dependent tests
// skip; a file present with another size still fails (for_each_digest_row).
std::string missing_corpus_files(const std::string& table_path);

// Calls fn for every row whose corpus file exists with the recorded size
// (a missing or changed file is a test failure naming it); returns the
// number of rows passed to fn.
std::size_t for_each_digest_row(const std::string& table_path, const std::function<void(const DigestRow&)>& fn);

}  // namespace bitrank::test
