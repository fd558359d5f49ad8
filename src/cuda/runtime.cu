#include <cstdio>
#include <cstring>

#include "bitrank/log.hpp"
#include "cuda/runtime.hpp"

namespace bitrank::cuda {

Stream::Stream(Priority priority) {
  int least = 0, greatest = 0;
  BR_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  BR_CUDA_CHECK(
      cudaStreamCreateWithPriority(&s_, cudaStreamNonBlocking, priority == Priority::high ? greatest : least));
}
Stream::~Stream() {
  if (s_ && cudaStreamDestroy(s_) != cudaSuccess) BR_LOG_WARN("cudaStreamDestroy failed");
}
void Stream::synchronize() const { BR_CUDA_CHECK(cudaStreamSynchronize(s_)); }

Event::Event() { BR_CUDA_CHECK(cudaEventCreate(&e_)); }
Event::~Event() {
  if (e_) cudaEventDestroy(e_);
}
void Event::record(cudaStream_t s) { BR_CUDA_CHECK(cudaEventRecord(e_, s)); }
float Event::elapsed_ms_since(const Event& start) const {
  float ms = 0;
  BR_CUDA_CHECK(cudaEventSynchronize(e_));
  BR_CUDA_CHECK(cudaEventElapsedTime(&ms, start.e_, e_));
  return ms;
}

BlasLtHandle::BlasLtHandle() { BR_CUBLAS_CHECK(cublasLtCreate(&h_)); }
BlasLtHandle::~BlasLtHandle() {
  if (h_) cublasLtDestroy(h_);
}

std::size_t DeviceMemory::size_class(std::size_t bytes) {
  if (bytes <= 512) return 512;
  if (bytes <= (1u << 20)) {  // next power of two below 1 MiB
    std::size_t c = 512;
    while (c < bytes) c <<= 1;
    return c;
  }
  const std::size_t mb2 = 2u << 20;  // above: whole 2 MiB pages
  return (bytes + mb2 - 1) / mb2 * mb2;
}

void* PinnedMemory::allocate(std::size_t bytes) {
  void* p = nullptr;
  if (cudaMallocHost(&p, bytes ? bytes : 1) != cudaSuccess) {
    cudaGetLastError();
    fail("out of page-locked host memory: cannot allocate {} bytes", bytes);
  }
  return p;
}
void PinnedMemory::release(void* p) noexcept {
  if (p && cudaFreeHost(p) != cudaSuccess) BR_LOG_WARN("cudaFreeHost failed");
}
void PinnedMemory::upload(void* dst, const void* src, std::size_t bytes) { std::memcpy(dst, src, bytes); }
void PinnedMemory::download(void* dst, const void* src, std::size_t bytes) { std::memcpy(dst, src, bytes); }

void CopyStream::upload(void* dst, const void* host_src, std::size_t bytes) {
  BR_CUDA_CHECK(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, copy_.get()));
}
void CopyStream::download(void* host_dst, const void* src, std::size_t bytes) {
  BR_CUDA_CHECK(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, copy_.get()));
}
void CopyStream::after_compute() {
  compute_done_.record(compute_);
  BR_CUDA_CHECK(cudaStreamWaitEvent(copy_.get(), compute_done_.get(), 0));
}
void CopyStream::before_compute() {
  copies_done_.record(copy_.get());
  BR_CUDA_CHECK(cudaStreamWaitEvent(compute_, copies_done_.get(), 0));
}
void CopyStream::synchronize() { copy_.synchronize(); }

void* DeviceMemory::allocate(std::size_t bytes) {
  const std::size_t c = size_class(bytes);
  std::lock_guard<std::mutex> lk(mu_);
  check_cap(in_use_, c);
  void* p = nullptr;
  auto it = cache_.find(c);
  if (it != cache_.end()) {
    p = it->second;
    cache_.erase(it);
  } else {
    cudaError_t e = cudaMalloc(&p, c);
    if (e == cudaErrorMemoryAllocation) {  // give the cache back and try once more
      cudaGetLastError();
      for (auto& [sz, q] : cache_) cudaFree(q);
      cache_.clear();
      e = cudaMalloc(&p, c);
    }
    if (e != cudaSuccess) {
      cudaGetLastError();
      fail("out of device memory: cannot allocate {} bytes ({} in use)", c, in_use_);
    }
  }
  live_[p] = c;
  in_use_ += c;
  if (in_use_ > peak_) peak_ = in_use_;
  return p;
}

void DeviceMemory::release(void* p) noexcept {
  if (!p) return;
  std::lock_guard<std::mutex> lk(mu_);
  auto it = live_.find(p);
  if (it == live_.end()) {
    std::fprintf(stderr, "bitrank: releasing an unknown device pointer\n");
    return;
  }
  in_use_ -= it->second;
  cache_.emplace(it->second, p);  // reused in stream order: safe for work on this stream
  live_.erase(it);
}

std::size_t DeviceMemory::current_bytes() const {
  std::lock_guard<std::mutex> lk(mu_);
  return in_use_;
}

std::size_t DeviceMemory::peak_bytes() const {
  std::lock_guard<std::mutex> lk(mu_);
  return peak_;
}

void DeviceMemory::reset_peak() {
  std::lock_guard<std::mutex> lk(mu_);
  peak_ = in_use_;
}

void DeviceMemory::trim() noexcept {
  std::lock_guard<std::mutex> lk(mu_);
  cudaStreamSynchronize(stream_);
  for (auto& [c, p] : cache_) cudaFree(p);
  cache_.clear();
}

DeviceMemory::~DeviceMemory() {
  trim();
  if (!live_.empty()) BR_LOG_WARN("{} device blocks still live at shutdown", live_.size());
}

void DeviceMemory::upload(void* dst, const void* src, std::size_t bytes) {
  BR_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_));
  BR_CUDA_CHECK(cudaStreamSynchronize(stream_));  // the host source may go away
}

void DeviceMemory::download(void* dst, const void* src, std::size_t bytes) {
  BR_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
  BR_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void DeviceMemory::zero(void* dst, std::size_t bytes) {
  BR_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, stream_));  // ordered on the stream, no wait
}

void DeviceMemory::synchronize() { BR_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

namespace {
int select_device(int dev) {
  BR_CUDA_CHECK(cudaSetDevice(dev));
  return dev;
}
}  // namespace

Context::Context(int dev, CudaOptions opts)
    : device(select_device(dev)), options(std::move(opts)), memory(stream.get()) {
  workspace = memory.allocate(workspace_bytes);
}
Context::~Context() { memory.release(workspace); }

}  // namespace bitrank::cuda
