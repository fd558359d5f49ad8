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
// and reports 0 for both; the cpu backend's memory (make_counted_host_memory)
// is host memory that counts, so a cpu run reports its use as cuda does.
//
// Cap: a memory that counts its bytes may be capped (set_cap): an
// allocation that would take its use past the cap fails with an Error
// naming the cap, the bytes held and the request — the device-memory cap
// of `bitrank compress|eval --device-memory-cap`, which shows that a
// streamed run (train/streaming.hpp) stays within a budget.
//
// Streaming (model/streamed_weights.hpp): staging_memory() is the host
// memory a backend's streamed data lives in (page-locked on cuda, plain
// host memory otherwise), and CopyQueue the asynchronous copies between it
// and the backend's memory, overlapped with the backend's compute.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "bitrank/tensor.hpp"

namespace bitrank {

// Asynchronous copies between a memory's staging memory (host) and the
// memory itself, on their own queue so that they overlap the backend's
// compute (cuda: a second stream; host backends: plain copies, done at once).
// Copies run in the order queued. Two fences order them against compute:
// after_compute() makes later copies wait for the compute queued so far (a
// slot's last reader is done before it is overwritten, the update is done
// before a block is copied back), before_compute() makes later compute
// wait for the copies queued so far (a block is in its slot before it
// runs). The host waits with synchronize(); host memory written by
// download must not be read before.
class CopyQueue {
 public:
  virtual ~CopyQueue() = default;
  virtual void upload(void* dst, const void* host_src, std::size_t bytes) = 0;
  virtual void download(void* host_dst, const void* src, std::size_t bytes) = 0;
  virtual void after_compute() = 0;
  virtual void before_compute() = 0;
  virtual void synchronize() = 0;
};

class Memory {
 public:
  virtual ~Memory();
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
  virtual bool counts_bytes() const { return false; }

  // The most bytes this memory may hold at once (0: no cap). Error when the
  // memory does not count its bytes (counts_bytes) or already holds more.
  void set_cap(std::size_t bytes);
  std::size_t cap() const { return cap_.load(std::memory_order_relaxed); }

  // Host memory for data streamed to and from this memory: page-locked
  // where that makes copies fast and asynchronous (cuda), else plain host memory.
  virtual Memory& staging_memory();
  // The queue of copies between staging_memory() and this memory: cuda's
  // copy stream; by default plain (synchronous) upload and download.
  virtual CopyQueue& copy_queue();

 protected:
  // Error when a cap is set and held + request exceed it (allocate calls it
  // with the bytes it would really take, before taking them).
  void check_cap(std::size_t held, std::size_t request) const;

 private:
  std::atomic<std::size_t> cap_{0};
  std::unique_ptr<CopyQueue> plain_queue_;  // the default copy_queue, made on first use
};

// Plain host memory, 64-byte aligned (`ref`'s memory and the staging
// memory of host backends).
Memory& host_memory();
// Plain host memory that counts its bytes (current, peak, cap): one per
// cpu backend, which owns it.
std::unique_ptr<Memory> make_counted_host_memory();

// "1.5 MiB", "3.0 GiB", "512 B": bytes for messages.
std::string format_bytes(std::size_t bytes);
// This process's resident memory (VmRSS of /proc/self/status), 0 where the
// system does not say.
std::size_t process_resident_bytes();
// Parses a byte count: "1073741824", "4GiB", "512MiB", "64KiB" (also "GB",
// "MB", "KB" as powers of 1024, a fractional number before a unit); Error
// naming `what` otherwise.
std::size_t parse_bytes(std::string_view text, std::string_view what);

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

// Carves consecutive tensors out of one allocation (DESIGN §3: one
// allocation per layer makes streaming it one copy). Two passes over the
// same carving code: without a base it only measures, then over the
// allocation. Every tensor starts on a kAlign boundary (vector loads on any
// backend).
class Carver {
 public:
  static constexpr std::size_t kAlign = 256;

  explicit Carver(std::byte* base = nullptr) : base_(base) {}

  // The next `count` elements of U (null while measuring).
  template <class U>
  U* take(index_t count) {
    offset_ = (offset_ + kAlign - 1) / kAlign * kAlign;
    U* p = base_ ? reinterpret_cast<U*>(base_ + offset_) : nullptr;
    offset_ += static_cast<std::size_t>(count) * sizeof(U);
    return p;
  }
  // Bytes used so far, rounded up to kAlign.
  std::size_t size() const { return (offset_ + kAlign - 1) / kAlign * kAlign; }
  bool measuring() const { return base_ == nullptr; }

 private:
  std::byte* base_;
  std::size_t offset_ = 0;
};

// p, a pointer into the `bytes` bytes at `from`, moved to the same offset at `to`.
template <class U>
U* rebase(U* p, const std::byte* from, std::byte* to) {
  if (!p) return p;
  const auto* q = reinterpret_cast<const std::byte*>(p);
  return reinterpret_cast<U*>(to + (q - from));
}

}  // namespace bitrank
