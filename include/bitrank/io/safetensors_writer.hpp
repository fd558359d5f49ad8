// safetensors writer: the byte layout at the top of bitrank/io/safetensors.hpp,
// written so that python's `safetensors` and our reader both accept it.
//
//   offset 0      u64  N            header length; 8 + N is a multiple of 8
//                                   (the header is padded with spaces, as the
//                                   format allows)
//   offset 8      N bytes           {"__metadata__": {...}, "<name>": {"dtype",
//                                   "shape", "data_offsets"}, ...} in data order
//   offset 8 + N  data buffer       tensors packed with no gap, ordered by
//                                   element size (largest first), then by name
//
// Ordering by element size puts every tensor at an offset that is a multiple
// of its element size (each earlier tensor's byte size is a multiple of that
// size), so a reader of a mapped file may load u32 and f32 words aligned; it
// is also the order python's safetensors writes.
//
// Values: a tensor is given either as its stored bytes (little-endian, any
// dtype) or as f32 values that the writer converts to F32, F16 or BF16
// (round to nearest even, bitrank/dtype.hpp) while it streams them out, so a
// large f16 tensor is never held twice.
//
// Atomic: the file is written to a temporary file in the target's directory
// (".<name>.tmp.<pid>.<n>"), fsync'd, renamed over the target, and the
// directory is fsync'd; on any failure the temporary file is removed and an
// existing target is left as it was. Every failure is a bitrank::Error naming
// the target (and the tensor or key), with the system's reason.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "bitrank/io/safetensors.hpp"

namespace bitrank::io {

// One tensor to write; the spans must outlive the write call.
struct StTensorOut {
  std::string name;
  StDType dtype = StDType::F32;
  std::vector<std::int64_t> shape;
  std::span<const std::byte> bytes;  // the stored bytes, when from_values is false
  std::span<const float> values;     // converted to dtype (F32, F16, BF16), when from_values is true
  bool from_values = false;

  // Stored as given: numel · element size bytes, little-endian.
  static StTensorOut raw(std::string name, StDType dtype, std::vector<std::int64_t> shape,
                         std::span<const std::byte> bytes);
  static StTensorOut u32(std::string name, std::vector<std::int64_t> shape, std::span<const std::uint32_t> words);
  // f32 values stored as dtype (F32, F16 or BF16).
  static StTensorOut f32(std::string name, StDType dtype, std::vector<std::int64_t> shape,
                         std::span<const float> values);
};

// Writes `tensors` and `metadata` (the "__metadata__" string map) to `path`
// atomically. Checked first, before anything is created: names non-empty,
// unique and not "__metadata__"; shape dims non-negative; the given byte or
// value count equal to the shape's; conversions only to F32, F16, BF16;
// metadata keys and values, and names, valid UTF-8 (JSON requires it); the
// header at most 100 MB (python's safetensors limit).
void write_safetensors(const std::filesystem::path& path, std::span<const StTensorOut> tensors,
                       const std::map<std::string, std::string>& metadata = {});

// The same file image in memory (for tests and for files that are small).
std::vector<std::byte> safetensors_image(std::span<const StTensorOut> tensors,
                                         const std::map<std::string, std::string>& metadata = {});

}  // namespace bitrank::io
