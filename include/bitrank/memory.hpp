// Memory of a backend, and move-only buffers that own a piece of it.
//
// Each backend has one Memory: host memory for `ref` and `cpu`, device
// memory for `cuda`. Buffer<T> owns `size` elements from a Memory; copying
// between host and backend is explicit (upload / download). Destructors
// never throw.
//
// Use: a Memory may count the bytes its live allocations hold
// (current_bytes) and the most they held at once since it was made or since
// reset_peak() (peak_bytes). Device memory does: it counts the blocks its
// caching allocator hands out (size classes, so a little above the bytes
// asked for; cached free blocks are not in use). Host memory does not track
// and reports 0 for both.
#pragma once

#include <cstddef>
#include <span>
#include <utility>
#include <vector>

#include "bitrank/tensor.hpp"

namespace bitrank {

class Memory {
 public:
  virtual ~Memory() = default;
  virtual void* allocate(std::size_t bytes) = 0;
  virtual void release(void* p) noexcept = 0;
  virtual void upload(void* dst, const void* src, std::size_t bytes) = 0;    // host → this memory
  virtual void download(void* dst, const void* src, std::size_t bytes) = 0;  // this memory → host
  // Sets `bytes` bytes at dst (in this memory) to zero, ordered like the
  // ops (asynchronous on a device). The default uploads zeros; host and
  // device memory override it with memset / cudaMemsetAsync.
  virtual void zero(void* dst, std::size_t bytes);
  virtual void synchronize() {}
  virtual bool host_accessible() const = 0;

  // Bytes held now and at most since the last reset_peak(); 0: not tracked.
  virtual std::size_t current_bytes() const { return 0; }
  virtual std::size_t peak_bytes() const { return 0; }
  virtual void reset_peak() {}  // the peak restarts from current_bytes()
};

// Plain host memory, 64-byte aligned (shared by `ref` and `cpu`).
Memory& host_memory();

template <class T>
class Buffer {
 public:
  Buffer() = default;
  Buffer(Memory& mem, std::size_t n) : mem_(&mem), size_(n) {
    if (n) data_ = static_cast<T*>(mem.allocate(n * sizeof(T)));
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer(Buffer&& o) noexcept { swap(o); }
  Buffer& operator=(Buffer&& o) noexcept {
    if (this != &o) {
      reset();
      swap(o);
    }
    return *this;
  }
  ~Buffer() { reset(); }

  void reset() noexcept {
    if (data_) mem_->release(data_);
    data_ = nullptr;
    size_ = 0;
  }
  T* data() const { return data_; }
  std::size_t size() const { return size_; }
  Memory* memory() const { return mem_; }

  View<T> view(Shape s) const {
    BR_ASSERT(static_cast<std::size_t>(s.numel()) <= size_, "view {} over a buffer of {}", s.str(), size_);
    return View<T>(data_, s);
  }
  View<T> view() const { return View<T>(data_, Shape{static_cast<index_t>(size_)}); }

  void upload(std::span<const T> src) {
    BR_ASSERT(src.size() <= size_);
    mem_->upload(data_, src.data(), src.size() * sizeof(T));
  }
  void zero() {
    if (size_) mem_->zero(data_, size_ * sizeof(T));
  }
  std::vector<T> download() const {
    std::vector<T> out(size_);
    if (size_) mem_->download(out.data(), data_, size_ * sizeof(T));
    return out;
  }

 private:
  void swap(Buffer& o) noexcept {
    std::swap(mem_, o.mem_);
    std::swap(data_, o.data_);
    std::swap(size_, o.size_);
  }
  Memory* mem_ = nullptr;
  T* data_ = nullptr;
  std::size_t size_ = 0;
};

// Grows b to at least n elements of mem (the contents are lost when it
// grows); never shrinks: activations, tapes and scratch reused across calls
// allocate nothing in steady state.
template <class T>
void ensure_size(Buffer<T>& b, Memory& mem, index_t n) {
  if (static_cast<index_t>(b.size()) < n) b = Buffer<T>(mem, static_cast<std::size_t>(n));
}

}  // namespace bitrank
