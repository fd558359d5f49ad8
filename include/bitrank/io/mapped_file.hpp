// A read-only memory mapping of a whole file (POSIX mmap), move-only; the
// one way bitrank's readers map their files. Errors are bitrank::Error
// starting with `label` (default: the path).
#pragma once

#include <cstddef>
#include <filesystem>
#include <span>
#include <string>

namespace bitrank::io {

class MappedFile {
 public:
  explicit MappedFile(const std::filesystem::path& path, const std::string& label = {});
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  std::span<const std::byte> bytes() const { return {data_, size_}; }

 private:
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace bitrank::io
