// safetensors reader: single files and sharded checkpoints, memory-mapped.
//
// File layout (all integers little-endian):
//
//   offset 0      u64  N            length of the JSON header in bytes
//   offset 8      N bytes           JSON header (UTF-8; may end in spaces)
//   offset 8 + N  data buffer       the tensors' bytes, row-major, packed
//
// The header is one JSON object:
//
//   { "<tensor name>": { "dtype": "F32" | "F16" | "BF16" | ...,
//                        "shape": [d0, d1, ...],              (dims >= 0)
//                        "data_offsets": [begin, end] },       (into the data buffer)
//     ...,
//     "__metadata__": { "<key>": "<value>", ... } }            (optional, strings only)
//
// A tensor's bytes are data[begin, end) with end - begin == numel · dtype size.
//
// Sharded checkpoints add `model.safetensors.index.json` next to the shards:
//
//   { "metadata": {...}, "weight_map": { "<tensor name>": "<shard file>", ... } }
//
// Every count, offset and size is checked before use; a truncated, corrupted
// or lying file is a bitrank::Error naming the file (and the tensor or key),
// never an out-of-bounds read. Checks: header length within the file and at
// most 100 MB; well-formed JSON; every dtype known; shape dims non-negative
// with an overflow-checked product; begin <= end <= data size; end - begin
// equal to the tensor's byte size; the tensors tiling the data buffer with
// no overlap, no gap and nothing after the last (as the format requires); for an
// index, every shard exists, holds exactly the tensors the index assigns to
// it, and no tensor name appears twice across shards.
//
// Values are read as f32: F32 as is, F16 and BF16 converted exactly
// (bitrank/dtype.hpp); U32 tensors (the bitrank format's sign bitmaps) as
// u32. Other dtypes are listed and their raw bytes are available.
// The writer is bitrank/io/safetensors_writer.hpp.
#pragma once

#include "bitrank/io/mapped_file.hpp"

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace bitrank::io {

// The dtypes the safetensors format defines for byte-sized elements.
enum class StDType : std::uint8_t { BOOL, U8, I8, F8_E5M2, F8_E4M3, F8_E8M0, I16, U16, F16, BF16, I32, U32, F32, I64, U64, F64, C64 };

std::string_view st_dtype_name(StDType t);
std::size_t st_dtype_size(StDType t);

struct TensorInfo {
  std::string name;
  StDType dtype = StDType::F32;
  std::vector<std::int64_t> shape;
  std::uint64_t numel = 0;
  std::uint64_t data_begin = 0;  // byte range in the data buffer of its file
  std::uint64_t data_end = 0;
  std::string file;  // the file holding it (as named in errors)
};

// One safetensors checkpoint: a single file, or the shards of an index.
class Safetensors {
 public:
  // `path` is a .safetensors file, a `*.index.json` file, or a directory
  // holding `model.safetensors.index.json` or `model.safetensors`.
  static Safetensors open(const std::filesystem::path& path);

  // Parses a file image held by the caller (which must outlive the result);
  // `name` stands for the file in error messages.
  static Safetensors from_memory(std::span<const std::byte> bytes, std::string name);

  Safetensors(Safetensors&&) noexcept;
  Safetensors& operator=(Safetensors&&) noexcept;
  ~Safetensors();

  // All tensors, sorted by name.
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  bool contains(std::string_view name) const;
  // Throws if absent.
  const TensorInfo& info(std::string_view name) const;
  // The tensor's bytes as stored (little-endian), inside the mapping.
  std::span<const std::byte> bytes(std::string_view name) const;
  // The values converted to f32 (F32, F16, BF16 only).
  std::vector<float> read_f32(std::string_view name) const;
  // The values of a U32 tensor.
  std::vector<std::uint32_t> read_u32(std::string_view name) const;
  // The file's "__metadata__"; for shards, the first shard's (in file-name
  // order). The index's own "metadata" is not kept.
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  struct Shard;  // one file: its mapping and parsed header (defined in the .cpp)

 private:
  Safetensors();
  const TensorInfo* find(std::string_view name) const;

  std::vector<std::unique_ptr<Shard>> shards_;
  std::vector<TensorInfo> tensors_;
  std::vector<std::size_t> shard_of_;  // per tensors_ entry
  std::map<std::string, std::string> metadata_;
};

}  // namespace bitrank::io
