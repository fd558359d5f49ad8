#include "bitrank/memory.hpp"

#include <cstdlib>
#include <cstring>
#include <new>

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
  bool host_accessible() const override { return true; }
};

}  // namespace

Memory& host_memory() {
  static HostMemory m;
  return m;
}

}  // namespace bitrank
