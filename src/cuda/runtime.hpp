// Device plumbing of the CUDA backend: RAII stream, event, cuBLASLt handle,
// the device memory (a caching pool), pinned host buffers, and the copy
// stream of streaming.
//
// DeviceMemory keeps freed blocks in size classes and hands them out again,
// so steady-state training allocates nothing from the driver; upload and
// download are ordered on the backend's stream (download waits for it).
// Its use (Memory::current_bytes / peak_bytes) counts the blocks handed out,
// by size class, the context's cuBLASLt workspace included; a cap
// (Memory::set_cap) applies to that count: cached free blocks are not held.
// Streaming: its staging memory is page-locked host memory (PinnedMemory)
// and its copy queue (CopyStream) a second stream whose fences are events
// recorded on one stream and waited for by the other.
// All handles are move-only; destructors never throw (errors are logged).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "bitrank/backend.hpp"
#include "bitrank/memory.hpp"
#include "cuda/check.hpp"

namespace bitrank::cuda {

class Stream {
 public:
  // Relative scheduling priority: the backend's stream is `high`, so that
  // work on a `low` stream only takes the SMs its kernels leave free.
  enum class Priority { high, low };
  explicit Stream(Priority priority = Priority::low);
  ~Stream();
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return s_; }
  void synchronize() const;

 private:
  cudaStream_t s_ = nullptr;
};

class Event {
 public:
  Event();
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  void record(cudaStream_t s);
  // Milliseconds from `start` to this event (both recorded and complete).
  float elapsed_ms_since(const Event& start) const;
  cudaEvent_t get() const { return e_; }

 private:
  cudaEvent_t e_ = nullptr;
};

class BlasLtHandle {
 public:
  BlasLtHandle();
  ~BlasLtHandle();
  BlasLtHandle(const BlasLtHandle&) = delete;
  BlasLtHandle& operator=(const BlasLtHandle&) = delete;
  cublasLtHandle_t get() const { return h_; }

 private:
  cublasLtHandle_t h_ = nullptr;
};

// Page-locked host memory as a Memory (cudaMallocHost; copies are memcpy).
class PinnedMemory final : public Memory {
 public:
  void* allocate(std::size_t bytes) override;
  void release(void* p) noexcept override;
  void upload(void* dst, const void* src, std::size_t bytes) override;
  void download(void* dst, const void* src, std::size_t bytes) override;
  bool host_accessible() const override { return true; }
};

// Host ↔ device copies on their own stream, ordered against the compute
// stream by events (CopyQueue's contract, memory.hpp).
class CopyStream final : public CopyQueue {
 public:
  explicit CopyStream(cudaStream_t compute) : compute_(compute) {}
  void upload(void* dst, const void* host_src, std::size_t bytes) override;
  void download(void* host_dst, const void* src, std::size_t bytes) override;
  void after_compute() override;
  void before_compute() override;
  void synchronize() override;

 private:
  cudaStream_t compute_;
  Stream copy_;
  Event compute_done_, copies_done_;
};

// Device memory with a caching allocator, ordered on one stream.
class DeviceMemory final : public Memory {
 public:
  explicit DeviceMemory(cudaStream_t stream) : stream_(stream), copies_(stream) {}
  ~DeviceMemory() override;
  void* allocate(std::size_t bytes) override;
  void release(void* p) noexcept override;
  void upload(void* dst, const void* src, std::size_t bytes) override;
  void download(void* dst, const void* src, std::size_t bytes) override;
  void zero(void* dst, std::size_t bytes) override;
  void synchronize() override;
  bool host_accessible() const override { return false; }

  std::size_t current_bytes() const override;
  std::size_t peak_bytes() const override;
  void reset_peak() override;
  bool counts_bytes() const override { return true; }
  Memory& staging_memory() override { return pinned_; }
  CopyQueue& copy_queue() override { return copies_; }

  void trim() noexcept;  // give cached blocks back to the driver

 private:
  static std::size_t size_class(std::size_t bytes);
  cudaStream_t stream_;
  mutable std::mutex mu_;
  std::multimap<std::size_t, void*> cache_;        // size class → free block
  std::unordered_map<void*, std::size_t> live_;    // block → size class
  std::size_t in_use_ = 0, peak_ = 0;
  PinnedMemory pinned_;
  CopyStream copies_;
};

// Page-locked host memory (fast, asynchronous copies).
template <class T>
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(std::size_t n) : n_(n) {
    if (n) BR_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&p_), n * sizeof(T)));
  }
  PinnedBuffer(PinnedBuffer&& o) noexcept : p_(o.p_), n_(o.n_) { o.p_ = nullptr, o.n_ = 0; }
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(n_, o.n_);
    return *this;
  }
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer() {
    if (p_) cudaFreeHost(p_);
  }
  T* data() const { return p_; }
  std::size_t size() const { return n_; }

 private:
  T* p_ = nullptr;
  std::size_t n_ = 0;
};

// Everything one CUDA backend needs: device, stream, cuBLASLt, memory.
struct Context {
  Context(int device, CudaOptions options);
  int device;
  CudaOptions options;  // the kernel choices (backend.hpp)
  Stream stream{Stream::Priority::high};
  BlasLtHandle blas;
  DeviceMemory memory;
  void* workspace = nullptr;  // cuBLASLt workspace
  std::size_t workspace_bytes = 32u << 20;
  ~Context();
};

// Launch helpers.
inline unsigned blocks_for(std::size_t n, unsigned threads) {
  return static_cast<unsigned>((n + threads - 1) / threads);
}

}  // namespace bitrank::cuda
