// GGUF reader.
//
// File layout (all little-endian, no padding between fields):
//
//   header
//     u32  magic         "GGUF" (bytes 47 47 55 46)
//     u32  version       3 (2 has the same layout and is accepted; 1 had
//                        32-bit counts and is rejected)
//     u64  n_tensors
//     u64  n_kv
//   n_kv metadata entries
//     str  key           str = u64 length + that many bytes (UTF-8, no NUL)
//     u32  value type    GgufType: 0 u8, 1 i8, 2 u16, 3 i16, 4 u32, 5 i32,
//                        6 f32, 7 bool (one byte, 0 or 1), 8 str, 9 array,
//                        10 u64, 11 i64, 12 f64
//     ...  value         scalars as their size; str as above; array =
//                        u32 element type + u64 count + count elements
//                        (arrays of arrays are rejected here)
//   n_tensors tensor infos
//     str  name
//     u32  n_dims        1..4
//     u64  dims[n_dims]  dims[0] is the contiguous one
//     u32  ggml type     GgmlType id (dequant.hpp)
//     u64  offset        of the tensor's bytes from the data section start;
//                        a multiple of the alignment
//   padding              zeros up to a multiple of the alignment: the u32 key
//                        "general.alignment" (a power of two), default 32
//   data section         tensor bytes; a tensor of dims d and a type of
//                        (block_elems, block_bytes) takes
//                        d[0] / block_elems * block_bytes * d[1] * d[2] * d[3]
//
// Checks, in reading order; every one throws Error naming the file (and the
// key or tensor): each read fits in the remaining bytes; magic; version;
// n_kv and n_tensors no larger than the remaining bytes allow (each entry
// takes at least 13 and 32 bytes), so no allocation is sized by an unchecked
// count; string lengths and array counts × element sizes within the
// remaining bytes; value and element types known, no nested arrays, bools 0
// or 1; keys unique; general.alignment a u32 power of two; tensor names
// unique; n_dims 1..4; every dim >= 1 with the element count and byte size
// below 2^63 (overflow-checked); the type known; dims[0] a whole number of
// blocks; the data section start (aligned end of the infos) within the file;
// each offset aligned and offset + size within the data section; tensors not
// overlapping. With verify_data, every dequantizable tensor is dequantized
// once and must be finite.
#include "bitrank/io/gguf.hpp"


#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "bitrank/error.hpp"
#include "bitrank/io/mapped_file.hpp"

namespace bitrank::io {

namespace {

constexpr std::uint32_t kMagic = 0x46554747u;  // "GGUF" read as a little-endian u32
constexpr std::uint64_t kDefaultAlignment = 32;
constexpr std::uint32_t kMaxDims = 4;
constexpr std::uint64_t kMaxCount = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
constexpr std::uint64_t kMinKvBytes = 8 + 4 + 1;               // empty key, u8 value
constexpr std::uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;  // empty name, one dim

// Size in bytes of a fixed-size value type; 0 for string and array.
std::uint64_t scalar_size(std::uint32_t t) {
  switch (static_cast<GgufType>(t)) {
    case GgufType::u8:
    case GgufType::i8:
    case GgufType::boolean: return 1;
    case GgufType::u16:
    case GgufType::i16: return 2;
    case GgufType::u32:
    case GgufType::i32:
    case GgufType::f32: return 4;
    case GgufType::u64:
    case GgufType::i64:
    case GgufType::f64: return 8;
    default: return 0;
  }
}

bool known_value_type(std::uint32_t t) { return t <= static_cast<std::uint32_t>(GgufType::f64); }

// a * b, or false if it would pass `limit`.
bool mul_within(std::uint64_t a, std::uint64_t b, std::uint64_t limit, std::uint64_t& out) {
  if (a != 0 && b > limit / a) return false;
  out = a * b;
  return true;
}

// Bounds-checked little-endian cursor over the file bytes. `what` says what
// is being read, for messages.
class Cursor {
 public:
  Cursor(std::span<const std::byte> bytes, const std::string& file) : bytes_(bytes), file_(file) {}

  std::uint64_t pos() const { return pos_; }
  std::uint64_t remaining() const { return bytes_.size() - pos_; }

  const std::byte* take(std::uint64_t n, std::string_view what) {
    if (n > remaining())
      fail("gguf '{}': {} at byte {} needs {} bytes but only {} remain (truncated or corrupt file)", file_, what, pos_,
           n, remaining());
    const std::byte* p = bytes_.data() + pos_;
    pos_ += n;
    return p;
  }

  template <class T>
  T read(std::string_view what) {
    T v;
    std::memcpy(&v, take(sizeof(T), what), sizeof(T));
    return v;
  }

  std::string string(std::string_view what) {
    const auto len = read<std::uint64_t>(what);
    if (len > remaining())
      fail("gguf '{}': {} at byte {} has length {} but only {} bytes remain (corrupt file)", file_, what, pos_ - 8, len,
           remaining());
    const std::byte* p = take(len, what);
    return std::string(reinterpret_cast<const char*>(p), len);
  }

 private:
  std::span<const std::byte> bytes_;
  const std::string& file_;
  std::uint64_t pos_ = 0;
};

template <class T>
std::vector<T> read_array(Cursor& c, std::uint64_t n, const std::string& what) {
  std::vector<T> out(n);
  if (n) std::memcpy(out.data(), c.take(n * sizeof(T), what), n * sizeof(T));
  return out;
}

bool read_bool(Cursor& c, const std::string& file, const std::string& what) {
  const auto b = c.read<std::uint8_t>(what);
  if (b > 1) fail("gguf '{}': {} is a bool stored as {}, expected 0 or 1", file, what, b);
  return b == 1;
}

GgufValue::Storage read_scalar(Cursor& c, std::uint32_t type, const std::string& file, const std::string& what) {
  switch (static_cast<GgufType>(type)) {
    case GgufType::u8: return c.read<std::uint8_t>(what);
    case GgufType::i8: return c.read<std::int8_t>(what);
    case GgufType::u16: return c.read<std::uint16_t>(what);
    case GgufType::i16: return c.read<std::int16_t>(what);
    case GgufType::u32: return c.read<std::uint32_t>(what);
    case GgufType::i32: return c.read<std::int32_t>(what);
    case GgufType::f32: return c.read<float>(what);
    case GgufType::boolean: return read_bool(c, file, what);
    case GgufType::string: return c.string(what);
    case GgufType::u64: return c.read<std::uint64_t>(what);
    case GgufType::i64: return c.read<std::int64_t>(what);
    case GgufType::f64: return c.read<double>(what);
    default: break;
  }
  fail("gguf '{}': {} has unknown value type {}", file, what, type);
}

GgufValue::Storage read_array_value(Cursor& c, const std::string& file, const std::string& what) {
  const auto elem = c.read<std::uint32_t>(what + " (array element type)");
  if (elem == static_cast<std::uint32_t>(GgufType::array))
    fail("gguf '{}': {} is an array of arrays, which is not supported", file, what);
  if (!known_value_type(elem)) fail("gguf '{}': {} is an array of unknown value type {}", file, what, elem);
  const auto n = c.read<std::uint64_t>(what + " (array length)");
  // Each element takes at least its scalar size (a string at least its u64
  // length), so the count is bounded by the bytes left before allocating.
  const std::uint64_t min_elem = elem == static_cast<std::uint32_t>(GgufType::string) ? 8 : scalar_size(elem);
  if (n > c.remaining() / min_elem)
    fail("gguf '{}': {} claims {} elements of {} bytes or more but only {} bytes remain (corrupt file)", file, what, n,
         min_elem, c.remaining());
  switch (static_cast<GgufType>(elem)) {
    case GgufType::u8: return read_array<std::uint8_t>(c, n, what);
    case GgufType::i8: return read_array<std::int8_t>(c, n, what);
    case GgufType::u16: return read_array<std::uint16_t>(c, n, what);
    case GgufType::i16: return read_array<std::int16_t>(c, n, what);
    case GgufType::u32: return read_array<std::uint32_t>(c, n, what);
    case GgufType::i32: return read_array<std::int32_t>(c, n, what);
    case GgufType::f32: return read_array<float>(c, n, what);
    case GgufType::u64: return read_array<std::uint64_t>(c, n, what);
    case GgufType::i64: return read_array<std::int64_t>(c, n, what);
    case GgufType::f64: return read_array<double>(c, n, what);
    case GgufType::boolean: {
      std::vector<bool> out(n);
      for (std::uint64_t i = 0; i < n; ++i) out[i] = read_bool(c, file, what);
      return out;
    }
    case GgufType::string: {
      std::vector<std::string> out;
      out.reserve(n);
      for (std::uint64_t i = 0; i < n; ++i) out.push_back(c.string(what));
      return out;
    }
    default: break;
  }
  fail("gguf '{}': {} has unknown element type {}", file, what, elem);
}

}  // namespace

// ---- GgufValue ----

std::string_view gguf_type_name(GgufType type) {
  switch (type) {
    case GgufType::u8: return "u8";
    case GgufType::i8: return "i8";
    case GgufType::u16: return "u16";
    case GgufType::i16: return "i16";
    case GgufType::u32: return "u32";
    case GgufType::i32: return "i32";
    case GgufType::f32: return "f32";
    case GgufType::boolean: return "bool";
    case GgufType::string: return "string";
    case GgufType::array: return "array";
    case GgufType::u64: return "u64";
    case GgufType::i64: return "i64";
    case GgufType::f64: return "f64";
  }
  return "unknown";
}

namespace {
// Storage alternatives 0..11 are the scalars in this order, 12..23 the arrays.
constexpr GgufType kStorageTypes[12] = {GgufType::u8,  GgufType::i8,      GgufType::u16,    GgufType::i16,
                                        GgufType::u32, GgufType::i32,     GgufType::f32,    GgufType::boolean,
                                        GgufType::string, GgufType::u64, GgufType::i64,    GgufType::f64};
}  // namespace

GgufType GgufValue::type() const { return is_array() ? GgufType::array : kStorageTypes[value_.index()]; }
GgufType GgufValue::elem_type() const { return kStorageTypes[value_.index() % 12]; }

std::size_t GgufValue::array_size() const {
  return std::visit(
      [](const auto& v) -> std::size_t {
        using V = std::decay_t<decltype(v)>;
        if constexpr (requires { v.size(); } && !std::is_same_v<V, std::string>) return v.size();
        else return 0;
      },
      value_);
}

std::string GgufValue::type_name() const {
  if (is_array()) return "array[" + std::string(gguf_type_name(elem_type())) + "]";
  return std::string(gguf_type_name(type()));
}

// ---- mapping ----

struct GgufFile::Mapping {
  MappedFile file;
};

GgufFile::GgufFile(GgufFile&&) noexcept = default;
GgufFile& GgufFile::operator=(GgufFile&&) noexcept = default;
GgufFile::~GgufFile() = default;

GgufFile GgufFile::open(const std::filesystem::path& path, GgufOptions options) {
  GgufFile f;
  f.name_ = path.string();
  f.mapping_ = std::make_unique<Mapping>(Mapping{MappedFile(path, fmt::format("gguf '{}'", f.name_))});
  f.bytes_ = f.mapping_->file.bytes();
  f.parse(options);
  return f;
}

GgufFile GgufFile::from_memory(std::span<const std::byte> bytes, std::string name, GgufOptions options) {
  GgufFile f;
  f.name_ = std::move(name);
  f.bytes_ = bytes;
  f.parse(options);
  return f;
}

// ---- parsing ----

void GgufFile::parse(const GgufOptions& options) {
  const std::string& file = name_;
  Cursor c(bytes_, file);

  if (bytes_.size() < 4) fail("gguf '{}': {} bytes is too short for a GGUF file", file, bytes_.size());
  const auto magic = c.read<std::uint32_t>("magic");
  if (magic != kMagic) fail("gguf '{}': bad magic {:#010x}, not a GGUF file", file, magic);
  version_ = c.read<std::uint32_t>("version");
  if (version_ == 0x03000000u || version_ == 0x02000000u)
    fail("gguf '{}': version field {:#010x} is a byte-swapped 2 or 3: big-endian GGUF files are not supported", file,
         version_);
  if (version_ == 1) fail("gguf '{}': GGUF version 1 is obsolete and not supported", file);
  if (version_ != 2 && version_ != 3) fail("gguf '{}': unsupported GGUF version {} (expected 3)", file, version_);
  const auto n_tensors = c.read<std::uint64_t>("tensor count");
  const auto n_kv = c.read<std::uint64_t>("metadata count");
  if (n_kv > c.remaining() / kMinKvBytes)
    fail("gguf '{}': metadata count {} is impossible in the {} bytes that follow the header", file, n_kv,
         c.remaining());
  if (n_tensors > c.remaining() / kMinTensorInfoBytes)
    fail("gguf '{}': tensor count {} is impossible in the {} bytes that follow the header", file, n_tensors,
         c.remaining());

  // Metadata.
  kvs_.reserve(n_kv);
  for (std::uint64_t i = 0; i < n_kv; ++i) {
    std::string key = c.string(::bitrank::format("metadata key #{}", i));
    const std::string what = ::bitrank::format("key '{}'", key);
    if (kv_index_.contains(key)) fail("gguf '{}': {} appears twice", file, what);
    const auto type = c.read<std::uint32_t>(what + " (value type)");
    if (!known_value_type(type)) fail("gguf '{}': {} has unknown value type {}", file, what, type);
    GgufValue::Storage v = type == static_cast<std::uint32_t>(GgufType::array) ? read_array_value(c, file, what)
                                                                                 : read_scalar(c, type, file, what);
    kv_index_.emplace(key, kvs_.size());
    kvs_.push_back({std::move(key), GgufValue(std::move(v))});
  }

  alignment_ = kDefaultAlignment;
  if (const GgufValue* a = find("general.alignment")) {
    const auto* u = a->get_if<std::uint32_t>();
    if (!u) fail("gguf '{}': key 'general.alignment' has type {}, expected u32", file, a->type_name());
    if (*u == 0 || (*u & (*u - 1)) != 0)
      fail("gguf '{}': key 'general.alignment' is {}, expected a power of two", file, *u);
    alignment_ = *u;
  }

  // Tensor infos.
  tensors_.reserve(n_tensors);
  for (std::uint64_t i = 0; i < n_tensors; ++i) {
    GgufTensorInfo t;
    t.name = c.string(::bitrank::format("tensor info #{} name", i));
    const std::string what = ::bitrank::format("tensor '{}'", t.name);
    if (tensor_index_.contains(t.name)) fail("gguf '{}': {} appears twice", file, what);
    t.n_dims = c.read<std::uint32_t>(what + " n_dims");
    if (t.n_dims < 1 || t.n_dims > kMaxDims)
      fail("gguf '{}': {} has {} dims, expected 1 to {}", file, what, t.n_dims, kMaxDims);
    t.n_elements = 1;
    for (std::uint32_t d = 0; d < t.n_dims; ++d) {
      t.dims[d] = c.read<std::uint64_t>(what + " dims");
      if (t.dims[d] == 0 || !mul_within(t.n_elements, t.dims[d], kMaxCount, t.n_elements))
        fail("gguf '{}': {} has dim {} = {}{}", file, what, d, t.dims[d],
             t.dims[d] == 0 ? ", expected >= 1" : ", making the element count overflow");
    }
    const auto type_id = c.read<std::uint32_t>(what + " type");
    const auto traits = ggml_type_info(type_id);
    if (!traits) fail("gguf '{}': {} has unknown ggml type {}", file, what, type_id);
    t.type = traits->type;
    if (t.dims[0] % traits->block_elems != 0)
      fail("gguf '{}': {} of type {} has dims[0] = {}, not a multiple of its block of {}", file, what, traits->name,
           t.dims[0], traits->block_elems);
    if (!mul_within(t.n_elements / traits->block_elems, traits->block_bytes, kMaxCount, t.n_bytes))
      fail("gguf '{}': {} byte size overflows ({} elements of {})", file, what, t.n_elements, traits->name);
    t.offset = c.read<std::uint64_t>(what + " offset");
    if (t.offset % alignment_ != 0)
      fail("gguf '{}': {} data offset {} is not a multiple of the alignment {}", file, what, t.offset, alignment_);
    tensor_index_.emplace(t.name, tensors_.size());
    tensors_.push_back(std::move(t));
  }

  // Data section: the end of the infos rounded up to the alignment.
  const std::uint64_t infos_end = c.pos();
  const std::uint64_t pad = (alignment_ - infos_end % alignment_) % alignment_;
  const std::uint64_t file_size = bytes_.size();
  if (pad > file_size - infos_end) {
    if (!tensors_.empty())
      fail("gguf '{}': the data section would start at byte {} + {} padding, past the end of the {}-byte file", file,
           infos_end, pad, file_size);
    data_offset_ = file_size;  // no tensors: the file may end unpadded
  } else {
    data_offset_ = infos_end + pad;
  }
  const std::uint64_t data_size = file_size - data_offset_;
  for (const auto& t : tensors_) {
    if (t.offset > data_size || t.n_bytes > data_size - t.offset)
      fail("gguf '{}': tensor '{}' data [{}, {}) lies outside the {}-byte data section at byte {} (truncated or "
           "corrupt file)",
           file, t.name, t.offset, t.offset > kMaxCount - t.n_bytes ? kMaxCount : t.offset + t.n_bytes, data_size,
           data_offset_);
  }
  std::vector<std::size_t> order(tensors_.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return tensors_[a].offset < tensors_[b].offset; });
  for (std::size_t k = 1; k < order.size(); ++k) {
    const auto& prev = tensors_[order[k - 1]];
    const auto& next = tensors_[order[k]];
    if (prev.offset + prev.n_bytes > next.offset)
      fail("gguf '{}': tensors '{}' and '{}' overlap in the data section", file, prev.name, next.name);
  }

  if (options.verify_data) {
    std::vector<float> values;
    for (const auto& t : tensors_) {
      if (!ggml_type_info(t.type).dequantizable) continue;
      values.resize(t.n_elements);
      dequantize(t.name, values);
      for (std::size_t i = 0; i < values.size(); ++i)
        if (!std::isfinite(values[i]))
          fail("gguf '{}': tensor '{}' ({}) has a non-finite value {} at element {}", file, t.name, t.type_name(),
               values[i], i);
    }
  }
}

// ---- metadata access ----

const GgufValue* GgufFile::find(std::string_view key) const {
  const auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kvs_[it->second].value;
}

const GgufValue& GgufFile::value(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) fail("gguf '{}': key '{}' not found", name_, key);
  return *v;
}

void GgufFile::wrong_type(std::string_view key, const GgufValue& v, std::string_view expected) const {
  fail("gguf '{}': key '{}' has type {}, expected {}", name_, key, v.type_name(), expected);
}

std::int64_t GgufFile::get_int(std::string_view key) const {
  const GgufValue& v = value(key);
  return std::visit(
      [&](const auto& x) -> std::int64_t {
        using X = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<X, std::uint64_t>) {
          if (x > kMaxCount) fail("gguf '{}': key '{}' = {} does not fit in i64", name_, key, x);
          return static_cast<std::int64_t>(x);
        } else if constexpr (std::is_integral_v<X> && !std::is_same_v<X, bool>) {
          return static_cast<std::int64_t>(x);
        } else {
          wrong_type(key, v, "an integer");
        }
      },
      v.storage());
}

// ---- tensors ----

const GgufTensorInfo* GgufFile::find_tensor(std::string_view name) const {
  const auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const GgufTensorInfo& GgufFile::tensor_info(std::string_view name) const {
  const GgufTensorInfo* t = find_tensor(name);
  if (!t) fail("gguf '{}': tensor '{}' not found", name_, name);
  return *t;
}

GgufTensorView GgufFile::tensor(std::string_view name) const {
  const GgufTensorInfo& t = tensor_info(name);
  return {&t, bytes_.subspan(data_offset_ + t.offset, t.n_bytes)};
}

std::vector<float> GgufFile::dequantize(std::string_view name) const {
  const GgufTensorInfo& t = tensor_info(name);
  if (!ggml_type_info(t.type).dequantizable)  // before allocating
    fail("gguf '{}': tensor '{}' has type {}, which dequantize does not support (supported: F32, F16, BF16, Q8_0, "
         "Q4_0, Q4_1, Q4_K, Q6_K)",
         name_, t.name, t.type_name());
  std::vector<float> out(t.n_elements);
  dequantize(name, out);
  return out;
}

void GgufFile::dequantize(std::string_view name, std::span<float> out) const {
  const GgufTensorView v = tensor(name);
  const GgufTensorInfo& t = *v.info;
  if (!ggml_type_info(t.type).dequantizable)
    fail("gguf '{}': tensor '{}' has type {}, which dequantize does not support (supported: F32, F16, BF16, Q8_0, "
         "Q4_0, Q4_1, Q4_K, Q6_K)",
         name_, t.name, t.type_name());
  if (out.size() != t.n_elements)
    fail("gguf '{}': dequantize tensor '{}': output holds {} values, the tensor has {}", name_, t.name, out.size(),
         t.n_elements);
  io::dequantize(t.type, v.bytes, out);
}

}  // namespace bitrank::io
