#include "bitrank/memory.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

namespace bitrank {
namespace {

class HostMemory final : public Memory {
 public:
  void* allocate(std::size_t bytes) override {
    void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!p) throw std::bad_alloc();
    return p;
  }
  void release(void* p) noexcept override { std::free(p); }
  void upload(void* dst, const void* src, std::size_t bytes) override { std::memcpy(dst, src, bytes); }
  void download(void* dst, const void* src, std::size_t bytes) override { std::memcpy(dst, src, bytes); }
  void zero(void* dst, std::size_t bytes) override { std::memset(dst, 0, bytes); }
  bool host_accessible() const override { return true; }
};

}  // namespace

void Memory::zero(void* dst, std::size_t bytes) {
  static const std::vector<std::byte> zeros(std::size_t{1} << 16);
  for (std::size_t off = 0; off < bytes; off += zeros.size())
    upload(static_cast<std::byte*>(dst) + off, zeros.data(), std::min(zeros.size(), bytes - off));
}

Memory& host_memory() {
  static HostMemory m;
  return m;
}

}  // namespace bitrank
