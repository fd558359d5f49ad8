// Token id files (layout: include/bitrank/io/token_file.hpp). Bytes are
// assembled by shifts, so the file is little-endian whatever the host is.
#include "bitrank/io/token_file.hpp"

#include <cstdint>
#include <fstream>

#include "bitrank/error.hpp"
#include "bitrank/io/mapped_file.hpp"

namespace bitrank::io {

namespace fs = std::filesystem;

void write_token_file(const fs::path& path, std::span<const std::int32_t> ids) {
  std::vector<unsigned char> bytes(ids.size() * 4);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0) fail("token file {}: id {} at index {} is negative", path.string(), ids[i], i);
    const auto v = static_cast<std::uint32_t>(ids[i]);
    for (int b = 0; b < 4; ++b) bytes[4 * i + b] = static_cast<unsigned char>(v >> (8 * b));
  }
  const fs::path tmp = fs::path(path.string() + ".tmp");
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) fail("token file {}: cannot create {}", path.string(), tmp.string());
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    out.close();
    if (!out) {
      std::error_code ec;
      fs::remove(tmp, ec);
      fail("token file {}: writing {} bytes failed", path.string(), bytes.size());
    }
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    fail("token file {}: cannot rename {} over it", path.string(), tmp.string());
  }
}

std::vector<std::int32_t> read_token_file(const fs::path& path) {
  const MappedFile file(path, "token file " + path.string());
  const auto bytes = file.bytes();
  if (bytes.size() % 4 != 0)
    fail("token file {}: {} bytes is not a whole number of 4-byte ids", path.string(), bytes.size());
  std::vector<std::int32_t> ids(bytes.size() / 4);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    std::uint32_t v = 0;
    for (int b = 0; b < 4; ++b) v |= static_cast<std::uint32_t>(bytes[4 * i + b]) << (8 * b);
    if (v > static_cast<std::uint32_t>(INT32_MAX))
      fail("token file {}: id at index {} is negative ({})", path.string(), i, static_cast<std::int32_t>(v));
    ids[i] = static_cast<std::int32_t>(v);
  }
  return ids;
}

}  // namespace bitrank::io
