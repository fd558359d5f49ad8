// GGUF (v3, also v2) reader: metadata, tensor infos, raw tensor bytes and
// f32 dequantization. The byte layout and every check are written at the top
// of src/io/gguf.cpp.
//
// A file is memory-mapped read-only (GgufFile::open) or read from bytes the
// caller keeps alive (GgufFile::from_memory). Everything in the header is
// checked while opening — counts, lengths, types, dims, offsets, sizes, all
// with overflow-checked arithmetic — so that a GgufFile, once made, never
// reads outside its bytes. Any bad input throws bitrank::Error whose message
// starts with "gguf '<file name>'" and names the key or tensor.
//
// Options: verify_data (default true) additionally dequantizes every tensor
// of a dequantizable type once and rejects non-finite values; false checks
// the header alone and never touches the tensor data (for big models).
//
// Tensor dims are ggml's order: dims[0] is the contiguous one (numpy's last
// axis), so a [rows, cols] matrix is stored with dims {cols, rows}.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "bitrank/io/dequant.hpp"

namespace bitrank::io {

// GGUF metadata value types, as stored.
enum class GgufType : std::uint32_t {
  u8 = 0,
  i8 = 1,
  u16 = 2,
  i16 = 3,
  u32 = 4,
  i32 = 5,
  f32 = 6,
  boolean = 7,
  string = 8,
  array = 9,
  u64 = 10,
  i64 = 11,
  f64 = 12,
};

std::string_view gguf_type_name(GgufType type);

// One metadata value: a scalar, a string, or an array of scalars or of
// strings (arrays of arrays are rejected when reading).
class GgufValue {
 public:
  using Storage =
      std::variant<std::uint8_t, std::int8_t, std::uint16_t, std::int16_t, std::uint32_t, std::int32_t, float, bool,
                   std::string, std::uint64_t, std::int64_t, double, std::vector<std::uint8_t>,
                   std::vector<std::int8_t>, std::vector<std::uint16_t>, std::vector<std::int16_t>,
                   std::vector<std::uint32_t>, std::vector<std::int32_t>, std::vector<float>, std::vector<bool>,
                   std::vector<std::string>, std::vector<std::uint64_t>, std::vector<std::int64_t>,
                   std::vector<double>>;

  explicit GgufValue(Storage v) : value_(std::move(v)) {}

  GgufType type() const;       // GgufType::array for arrays
  GgufType elem_type() const;  // arrays: the element type; scalars: type()
  bool is_array() const { return value_.index() >= 12; }
  std::size_t array_size() const;  // 0 for scalars
  std::string type_name() const;   // "u32", "string", "array[i32]", …

  // The value if it is held as exactly T (e.g. std::uint32_t,
  // std::vector<std::string>), else nullptr.
  template <class T>
  const T* get_if() const {
    return std::get_if<T>(&value_);
  }
  const Storage& storage() const { return value_; }

 private:
  Storage value_;
};

struct GgufKeyValue {
  std::string key;
  GgufValue value;
};

struct GgufTensorInfo {
  std::string name;
  std::uint32_t n_dims = 0;                    // 1..4
  std::array<std::uint64_t, 4> dims{1, 1, 1, 1};  // dims[0] contiguous; unused dims are 1
  GgmlType type = GgmlType::f32;
  std::uint64_t offset = 0;      // from the start of the data section, aligned
  std::uint64_t n_elements = 0;  // product of dims
  std::uint64_t n_bytes = 0;     // bytes of data

  std::span<const std::uint64_t> shape() const { return {dims.data(), n_dims}; }
  std::string_view type_name() const { return ggml_type_info(type).name; }
};

// A tensor's raw stored bytes (valid while its GgufFile lives).
struct GgufTensorView {
  const GgufTensorInfo* info = nullptr;
  std::span<const std::byte> bytes;
};

struct GgufOptions {
  bool verify_data = true;  // dequantize each tensor once and reject non-finite values
};

class GgufFile {
 public:
  // Maps the file read-only. Throws Error naming the path on any failure.
  static GgufFile open(const std::filesystem::path& path, GgufOptions options = {});
  // Parses bytes the caller keeps alive for the GgufFile's life; `name`
  // stands for the file in messages.
  static GgufFile from_memory(std::span<const std::byte> bytes, std::string name, GgufOptions options = {});

  GgufFile(GgufFile&&) noexcept;
  GgufFile& operator=(GgufFile&&) noexcept;
  GgufFile(const GgufFile&) = delete;
  GgufFile& operator=(const GgufFile&) = delete;
  ~GgufFile();

  const std::string& name() const { return name_; }
  std::uint32_t version() const { return version_; }
  std::uint64_t alignment() const { return alignment_; }
  std::uint64_t data_offset() const { return data_offset_; }  // file offset of the data section
  std::uint64_t file_size() const { return bytes_.size(); }

  // ---- metadata (in file order) ----
  const std::vector<GgufKeyValue>& metadata() const { return kvs_; }
  bool has(std::string_view key) const { return find(key) != nullptr; }
  const GgufValue* find(std::string_view key) const;
  const GgufValue& value(std::string_view key) const;  // throws if missing

  // Typed getters: throw Error naming the file and key when the key is
  // missing or holds another type (no conversions).
  template <class T>
  const T& get(std::string_view key) const;

  std::uint8_t get_u8(std::string_view key) const { return get<std::uint8_t>(key); }
  std::int8_t get_i8(std::string_view key) const { return get<std::int8_t>(key); }
  std::uint16_t get_u16(std::string_view key) const { return get<std::uint16_t>(key); }
  std::int16_t get_i16(std::string_view key) const { return get<std::int16_t>(key); }
  std::uint32_t get_u32(std::string_view key) const { return get<std::uint32_t>(key); }
  std::int32_t get_i32(std::string_view key) const { return get<std::int32_t>(key); }
  std::uint64_t get_u64(std::string_view key) const { return get<std::uint64_t>(key); }
  std::int64_t get_i64(std::string_view key) const { return get<std::int64_t>(key); }
  float get_f32(std::string_view key) const { return get<float>(key); }
  double get_f64(std::string_view key) const { return get<double>(key); }
  bool get_bool(std::string_view key) const { return get<bool>(key); }
  const std::string& get_string(std::string_view key) const { return get<std::string>(key); }

  const std::vector<std::uint8_t>& get_u8_array(std::string_view key) const { return get<std::vector<std::uint8_t>>(key); }
  const std::vector<std::int8_t>& get_i8_array(std::string_view key) const { return get<std::vector<std::int8_t>>(key); }
  const std::vector<std::uint16_t>& get_u16_array(std::string_view key) const { return get<std::vector<std::uint16_t>>(key); }
  const std::vector<std::int16_t>& get_i16_array(std::string_view key) const { return get<std::vector<std::int16_t>>(key); }
  const std::vector<std::uint32_t>& get_u32_array(std::string_view key) const { return get<std::vector<std::uint32_t>>(key); }
  const std::vector<std::int32_t>& get_i32_array(std::string_view key) const { return get<std::vector<std::int32_t>>(key); }
  const std::vector<std::uint64_t>& get_u64_array(std::string_view key) const { return get<std::vector<std::uint64_t>>(key); }
  const std::vector<std::int64_t>& get_i64_array(std::string_view key) const { return get<std::vector<std::int64_t>>(key); }
  const std::vector<float>& get_f32_array(std::string_view key) const { return get<std::vector<float>>(key); }
  const std::vector<double>& get_f64_array(std::string_view key) const { return get<std::vector<double>>(key); }
  const std::vector<bool>& get_bool_array(std::string_view key) const { return get<std::vector<bool>>(key); }
  const std::vector<std::string>& get_string_array(std::string_view key) const { return get<std::vector<std::string>>(key); }

  // Any integer scalar type, as i64 (hparams are stored as u32 or i32 or
  // u64 by different converters); throws for other types or a u64 above
  // INT64_MAX.
  std::int64_t get_int(std::string_view key) const;

  // ---- tensors (in file order) ----
  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* find_tensor(std::string_view name) const;
  const GgufTensorInfo& tensor_info(std::string_view name) const;  // throws if missing
  GgufTensorView tensor(std::string_view name) const;              // throws if missing

  // The tensor's values as f32 (n_elements of them, dims[0] fastest).
  // Throws Error naming the file, tensor and type for a type not supported.
  std::vector<float> dequantize(std::string_view name) const;
  // Into out, which must hold exactly n_elements values.
  void dequantize(std::string_view name, std::span<float> out) const;

 private:
  struct Mapping;
  GgufFile() = default;
  void parse(const GgufOptions& options);
  [[noreturn]] void wrong_type(std::string_view key, const GgufValue& v, std::string_view expected) const;
  template <class T>
  static std::string_view type_label();

  std::unique_ptr<Mapping> mapping_;  // null for from_memory
  std::span<const std::byte> bytes_;
  std::string name_;
  std::uint32_t version_ = 0;
  std::uint64_t alignment_ = 32;
  std::uint64_t data_offset_ = 0;
  std::vector<GgufKeyValue> kvs_;
  std::map<std::string, std::size_t, std::less<>> kv_index_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, std::size_t, std::less<>> tensor_index_;
};

template <class T>
const T& GgufFile::get(std::string_view key) const {
  const GgufValue& v = value(key);
  if (const T* p = v.get_if<T>()) return *p;
  wrong_type(key, v, type_label<T>());
}

template <class T>
std::string_view GgufFile::type_label() {
  if constexpr (std::is_same_v<T, std::uint8_t>) return "u8";
  else if constexpr (std::is_same_v<T, std::int8_t>) return "i8";
  else if constexpr (std::is_same_v<T, std::uint16_t>) return "u16";
  else if constexpr (std::is_same_v<T, std::int16_t>) return "i16";
  else if constexpr (std::is_same_v<T, std::uint32_t>) return "u32";
  else if constexpr (std::is_same_v<T, std::int32_t>) return "i32";
  else if constexpr (std::is_same_v<T, float>) return "f32";
  else if constexpr (std::is_same_v<T, bool>) return "bool";
  else if constexpr (std::is_same_v<T, std::string>) return "string";
  else if constexpr (std::is_same_v<T, std::uint64_t>) return "u64";
  else if constexpr (std::is_same_v<T, std::int64_t>) return "i64";
  else if constexpr (std::is_same_v<T, double>) return "f64";
  else if constexpr (std::is_same_v<T, std::vector<std::uint8_t>>) return "array[u8]";
  else if constexpr (std::is_same_v<T, std::vector<std::int8_t>>) return "array[i8]";
  else if constexpr (std::is_same_v<T, std::vector<std::uint16_t>>) return "array[u16]";
  else if constexpr (std::is_same_v<T, std::vector<std::int16_t>>) return "array[i16]";
  else if constexpr (std::is_same_v<T, std::vector<std::uint32_t>>) return "array[u32]";
  else if constexpr (std::is_same_v<T, std::vector<std::int32_t>>) return "array[i32]";
  else if constexpr (std::is_same_v<T, std::vector<float>>) return "array[f32]";
  else if constexpr (std::is_same_v<T, std::vector<bool>>) return "array[bool]";
  else if constexpr (std::is_same_v<T, std::vector<std::string>>) return "array[string]";
  else if constexpr (std::is_same_v<T, std::vector<std::uint64_t>>) return "array[u64]";
  else if constexpr (std::is_same_v<T, std::vector<std::int64_t>>) return "array[i64]";
  else if constexpr (std::is_same_v<T, std::vector<double>>) return "array[f64]";
  else static_assert(sizeof(T) == 0, "not a GGUF value type");
}

}  // namespace bitrank::io
