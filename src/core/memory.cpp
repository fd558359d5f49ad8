// Host memory (plain and counted), the Memory defaults, the cap and byte
// counts (contract: include/bitrank/memory.hpp).
#include "bitrank/memory.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <new>
#include <string>
#include <vector>

#include "bitrank/error.hpp"

namespace bitrank {
namespace {

void* aligned_host_alloc(std::size_t bytes) {
  void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  if (!p) throw std::bad_alloc();
  return p;
}

class HostMemory final : public Memory {
 public:
  void* allocate(std::size_t bytes) override { return aligned_host_alloc(bytes); }
  void release(void* p) noexcept override { std::free(p); }
  void upload(void* dst, const void* src, std::size_t bytes) override { std::memcpy(dst, src, bytes); }
  void download(void* dst, const void* src, std::size_t bytes) override { std::memcpy(dst, src, bytes); }
  void zero(void* dst, std::size_t bytes) override { std::memset(dst, 0, bytes); }
  bool host_accessible() const override { return true; }
};

// Host memory that counts: each block carries its size in a 64-byte header
// (the data stays 64-byte aligned), so release needs no lookup.
class CountedHostMemory final : public Memory {
 public:
  static constexpr std::size_t kHeader = 64;
  void* allocate(std::size_t bytes) override {
    const std::size_t taken = (bytes + 63) / 64 * 64 + kHeader;
    std::size_t held = held_.load();
    do check_cap(held, taken);
    while (!held_.compare_exchange_weak(held, held + taken));
    std::size_t peak = peak_.load();
    while (held + taken > peak && !peak_.compare_exchange_weak(peak, held + taken)) {
    }
    void* p = nullptr;
    try {
      p = aligned_host_alloc(taken);
    } catch (...) {
      held_ -= taken;
      throw;
    }
    std::memcpy(p, &taken, sizeof(taken));
    return static_cast<std::byte*>(p) + kHeader;
  }
  void release(void* p) noexcept override {
    if (!p) return;
    void* block = static_cast<std::byte*>(p) - kHeader;
    std::size_t taken = 0;
    std::memcpy(&taken, block, sizeof(taken));
    held_ -= taken;
    std::free(block);
  }
  void upload(void* dst, const void* src, std::size_t bytes) override { std::memcpy(dst, src, bytes); }
  void download(void* dst, const void* src, std::size_t bytes) override { std::memcpy(dst, src, bytes); }
  void zero(void* dst, std::size_t bytes) override { std::memset(dst, 0, bytes); }
  bool host_accessible() const override { return true; }
  std::size_t current_bytes() const override { return held_.load(); }
  std::size_t peak_bytes() const override { return peak_.load(); }
  void reset_peak() override { peak_ = held_.load(); }
  bool counts_bytes() const override { return true; }

 private:
  std::atomic<std::size_t> held_{0}, peak_{0};
};

// Copies that are plain upload / download of the memory, done when called.
class PlainCopyQueue final : public CopyQueue {
 public:
  explicit PlainCopyQueue(Memory& mem) : mem_(mem) {}
  void upload(void* dst, const void* src, std::size_t bytes) override { mem_.upload(dst, src, bytes); }
  void download(void* dst, const void* src, std::size_t bytes) override { mem_.download(dst, src, bytes); }
  void after_compute() override { mem_.synchronize(); }
  void before_compute() override {}
  void synchronize() override { mem_.synchronize(); }

 private:
  Memory& mem_;
};

}  // namespace

Memory::~Memory() = default;

void Memory::zero(void* dst, std::size_t bytes) {
  static const std::vector<std::byte> zeros(std::size_t{1} << 16);
  for (std::size_t off = 0; off < bytes; off += zeros.size())
    upload(static_cast<std::byte*>(dst) + off, zeros.data(), std::min(zeros.size(), bytes - off));
}

void Memory::set_cap(std::size_t bytes) {
  if (bytes > 0 && !counts_bytes()) fail("memory cap: this memory does not count its bytes and cannot be capped");
  if (bytes > 0 && current_bytes() > bytes)
    fail("memory cap: the memory already holds {} ({} bytes), more than the cap of {} ({} bytes)",
         format_bytes(current_bytes()), current_bytes(), format_bytes(bytes), bytes);
  cap_ = bytes;
}

void Memory::check_cap(std::size_t held, std::size_t request) const {
  const std::size_t c = cap();
  if (c == 0 || held + request <= c) return;
  fail("device memory cap of {} ({} bytes) reached: {} ({} bytes) held, {} ({} bytes) more requested; stream the "
       "model's blocks from host memory (--stream) or raise the cap (--device-memory-cap)",
       format_bytes(c), c, format_bytes(held), held, format_bytes(request), request);
}

Memory& Memory::staging_memory() { return host_memory(); }

CopyQueue& Memory::copy_queue() {
  if (!plain_queue_) plain_queue_ = std::make_unique<PlainCopyQueue>(*this);
  return *plain_queue_;
}

Memory& host_memory() {
  // Never destroyed: buffers of static objects (a static backend's ops'
  // scratch) may be released after every static is gone.
  static HostMemory* m = new HostMemory;
  return *m;
}

std::unique_ptr<Memory> make_counted_host_memory() { return std::make_unique<CountedHostMemory>(); }

std::size_t process_resident_bytes() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.starts_with("VmRSS:")) return static_cast<std::size_t>(std::strtoull(line.c_str() + 6, nullptr, 10)) * 1024;
  return 0;
}

std::string format_bytes(std::size_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  return u == 0 ? format("{} B", bytes) : format("{:.1f} {}", v, units[u]);
}

std::size_t parse_bytes(std::string_view text, std::string_view what) {
  std::string s;
  for (char c : text)
    if (!std::isspace(static_cast<unsigned char>(c))) s += c;
  std::size_t i = 0;
  while (i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.')) ++i;
  const std::string number = s.substr(0, i), unit = s.substr(i);
  double mult = 0;
  std::string u;
  for (char c : unit) u += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (u.empty() || u == "b") mult = 1;
  else if (u == "k" || u == "kb" || u == "kib") mult = 1024.0;
  else if (u == "m" || u == "mb" || u == "mib") mult = 1024.0 * 1024;
  else if (u == "g" || u == "gb" || u == "gib") mult = 1024.0 * 1024 * 1024;
  else if (u == "t" || u == "tb" || u == "tib") mult = 1024.0 * 1024 * 1024 * 1024;
  char* end = nullptr;
  const double v = number.empty() ? NAN : std::strtod(number.c_str(), &end);
  if (mult == 0 || number.empty() || end != number.c_str() + number.size() || !std::isfinite(v) || v <= 0 ||
      v * mult >= 1.8e19 || (mult == 1 && number.find('.') != std::string::npos))
    fail("{}: '{}' is not a positive byte count (e.g. 1073741824, 512MiB, 4GiB)", what, std::string(text));
  return static_cast<std::size_t>(std::llround(v * mult));
}

}  // namespace bitrank
