// safetensors writer; the layout, ordering and atomicity are described in
// bitrank/io/safetensors_writer.hpp.
#include "bitrank/io/safetensors_writer.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>

#include "bitrank/dtype.hpp"
#include "bitrank/error.hpp"

namespace bitrank::io {

static_assert(std::endian::native == std::endian::little, "the safetensors writer assumes a little-endian host");

StTensorOut StTensorOut::raw(std::string name, StDType dtype, std::vector<std::int64_t> shape,
                             std::span<const std::byte> bytes) {
  StTensorOut t;
  t.name = std::move(name);
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.bytes = bytes;
  return t;
}

StTensorOut StTensorOut::u32(std::string name, std::vector<std::int64_t> shape, std::span<const std::uint32_t> words) {
  return raw(std::move(name), StDType::U32, std::move(shape), std::as_bytes(words));
}

StTensorOut StTensorOut::f32(std::string name, StDType dtype, std::vector<std::int64_t> shape,
                             std::span<const float> values) {
  StTensorOut t;
  t.name = std::move(name);
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.values = values;
  t.from_values = true;
  return t;
}

namespace {

using nlohmann::ordered_json;

// Where the bytes go: a file descriptor or a vector.
using Sink = std::function<void(std::span<const std::byte>)>;

// What is about to be written: the header text (padded) and the tensors in data order.
struct Plan {
  std::string header;
  std::vector<const StTensorOut*> order;
  std::vector<std::uint64_t> nbytes;  // per order entry
};

void check_utf8(const std::string& s, const std::string& where, std::string_view what) {
  try {
    (void)nlohmann::json(s).dump();
  } catch (const nlohmann::json::exception&) {
    fail("{}: {} is not valid UTF-8, which the JSON header requires", where, what);
  }
}

Plan plan(const std::string& where, std::span<const StTensorOut> tensors,
          const std::map<std::string, std::string>& metadata) {
  Plan p;
  std::set<std::string_view> names;
  for (const StTensorOut& t : tensors) {
    if (t.name.empty()) fail("{}: a tensor has an empty name", where);
    if (t.name == "__metadata__") fail("{}: a tensor may not be named __metadata__", where);
    check_utf8(t.name, where, fmt::format("tensor name '{}'", t.name));
    if (!names.insert(t.name).second) fail("{}: tensor '{}' is given twice", where, t.name);
    std::uint64_t numel = 1;
    for (const std::int64_t d : t.shape) {
      if (d < 0) fail("{}: tensor '{}': negative dim {}", where, t.name, d);
      if (__builtin_mul_overflow(numel, static_cast<std::uint64_t>(d), &numel))
        fail("{}: tensor '{}': the element count overflows", where, t.name);
    }
    const std::uint64_t size = st_dtype_size(t.dtype);
    std::uint64_t nbytes = 0;
    if (__builtin_mul_overflow(numel, size, &nbytes)) fail("{}: tensor '{}': the byte size overflows", where, t.name);
    if (t.from_values) {
      if (t.dtype != StDType::F32 && t.dtype != StDType::F16 && t.dtype != StDType::BF16)
        fail("{}: tensor '{}': f32 values can be stored as F32, F16 or BF16, not {}", where, t.name,
             st_dtype_name(t.dtype));
      if (t.values.size() != numel)
        fail("{}: tensor '{}': {} values for {} elements", where, t.name, t.values.size(), numel);
    } else if (t.bytes.size() != nbytes) {
      fail("{}: tensor '{}': {} bytes for {} elements of {} ({} bytes)", where, t.name, t.bytes.size(), numel,
           st_dtype_name(t.dtype), nbytes);
    }
  }
  for (const auto& [key, value] : metadata) {
    check_utf8(key, where, fmt::format("metadata key '{}'", key));
    check_utf8(value, where, fmt::format("metadata '{}'", key));
  }

  for (const StTensorOut& t : tensors) p.order.push_back(&t);
  std::sort(p.order.begin(), p.order.end(), [](const StTensorOut* a, const StTensorOut* b) {
    const auto sa = st_dtype_size(a->dtype), sb = st_dtype_size(b->dtype);
    return sa != sb ? sa > sb : a->name < b->name;
  });

  ordered_json header = ordered_json::object();
  if (!metadata.empty()) {
    ordered_json meta = ordered_json::object();
    for (const auto& [key, value] : metadata) meta[key] = value;
    header["__metadata__"] = std::move(meta);
  }
  std::uint64_t offset = 0;
  for (const StTensorOut* t : p.order) {
    std::uint64_t numel = 1;
    for (const std::int64_t d : t->shape) numel *= static_cast<std::uint64_t>(d);
    const std::uint64_t nbytes = numel * st_dtype_size(t->dtype);
    header[t->name] = {{"dtype", std::string(st_dtype_name(t->dtype))},
                       {"shape", t->shape},
                       {"data_offsets", {offset, offset + nbytes}}};
    p.nbytes.push_back(nbytes);
    offset += nbytes;
  }
  p.header = header.dump();
  // Python's safetensors refuses headers over 100 MB (MAX_HEADER_SIZE), our reader a little more.
  constexpr std::size_t kMaxHeader = 100'000'000;
  if (p.header.size() > kMaxHeader)
    fail("{}: the header (tensor list and metadata) is {} bytes, more than the {} that safetensors readers accept",
         where, p.header.size(), kMaxHeader);
  p.header.append((8 - p.header.size() % 8) % 8, ' ');  // data starts at a multiple of 8
  return p;
}

void emit(const Plan& p, const Sink& sink) {
  std::byte len[8];
  const std::uint64_t n = p.header.size();
  for (int i = 0; i < 8; ++i) len[i] = static_cast<std::byte>((n >> (8 * i)) & 0xff);
  sink(len);
  sink(std::as_bytes(std::span(p.header)));
  constexpr std::size_t kChunk = 1 << 16;  // values converted per step
  std::vector<std::uint16_t> half(kChunk);
  for (const StTensorOut* t : p.order) {
    if (!t->from_values || t->dtype == StDType::F32) {
      sink(t->from_values ? std::as_bytes(t->values) : t->bytes);
      continue;
    }
    for (std::size_t i = 0; i < t->values.size(); i += kChunk) {
      const std::size_t k = std::min(kChunk, t->values.size() - i);
      if (t->dtype == StDType::F16)
        for (std::size_t j = 0; j < k; ++j) half[j] = to_f16(t->values[i + j]).bits;
      else
        for (std::size_t j = 0; j < k; ++j) half[j] = to_bf16(t->values[i + j]).bits;
      sink(std::as_bytes(std::span(half.data(), k)));
    }
  }
}

std::string sys_error() { return std::strerror(errno); }

// A temporary file next to the target: removed unless commit() renamed it.
class AtomicFile {
 public:
  explicit AtomicFile(const std::filesystem::path& target) : target_(target) {
    static std::atomic<unsigned> counter{0};
    const std::filesystem::path dir = target.parent_path().empty() ? "." : target.parent_path();
    for (int attempt = 0; fd_ < 0; ++attempt) {
      tmp_ = dir / fmt::format(".{}.tmp.{}.{}", target.filename().string(), ::getpid(), counter++);
      fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
      if (fd_ < 0 && (errno != EEXIST || attempt > 100))
        fail("{}: cannot create a temporary file in {}: {}", target_.string(), dir.string(), sys_error());
    }
    buffer_.reserve(kBuffer);
  }
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  ~AtomicFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(tmp_.c_str());
  }

  void write(std::span<const std::byte> b) {
    if (buffer_.size() + b.size() > kBuffer) flush();
    if (b.size() >= kBuffer) {
      write_all(b);
      return;
    }
    buffer_.insert(buffer_.end(), b.begin(), b.end());
  }

  void commit() {
    flush();
    if (::fsync(fd_) != 0) fail("{}: fsync of {} failed: {}", target_.string(), tmp_.string(), sys_error());
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) fail("{}: closing {} failed: {}", target_.string(), tmp_.string(), sys_error());
    if (::rename(tmp_.c_str(), target_.c_str()) != 0)
      fail("{}: cannot rename {} to it: {}", target_.string(), tmp_.string(), sys_error());
    committed_ = true;
    // The rename is durable once the directory is: fsync it (some file
    // systems cannot; EINVAL says so, and there is nothing more to do).
    const std::filesystem::path dir = target_.parent_path().empty() ? "." : target_.parent_path();
    const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) fail("{}: written, but its directory cannot be opened to sync it: {}", target_.string(), sys_error());
    const int rc = ::fsync(dfd);
    const int err = errno;
    ::close(dfd);
    if (rc != 0 && err != EINVAL)
      fail("{}: written, but the fsync of its directory failed: {}", target_.string(), std::strerror(err));
  }

 private:
  static constexpr std::size_t kBuffer = 4 << 20;

  void flush() {
    write_all(buffer_);
    buffer_.clear();
  }
  void write_all(std::span<const std::byte> b) {
    while (!b.empty()) {
      const ssize_t w = ::write(fd_, b.data(), b.size());
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) fail("{}: writing {} failed: {}", target_.string(), tmp_.string(), sys_error());
      if (w == 0) fail("{}: writing {} made no progress", target_.string(), tmp_.string());
      b = b.subspan(static_cast<std::size_t>(w));
    }
  }

  std::filesystem::path target_, tmp_;
  int fd_ = -1;
  bool committed_ = false;
  std::vector<std::byte> buffer_;
};

}  // namespace

void write_safetensors(const std::filesystem::path& path, std::span<const StTensorOut> tensors,
                       const std::map<std::string, std::string>& metadata) {
  const Plan p = plan(path.string(), tensors, metadata);
  AtomicFile file(path);
  emit(p, [&](std::span<const std::byte> b) { file.write(b); });
  file.commit();
}

std::vector<std::byte> safetensors_image(std::span<const StTensorOut> tensors,
                                         const std::map<std::string, std::string>& metadata) {
  const Plan p = plan("safetensors image", tensors, metadata);
  std::vector<std::byte> out;
  emit(p, [&](std::span<const std::byte> b) { out.insert(out.end(), b.begin(), b.end()); });
  return out;
}

}  // namespace bitrank::io
