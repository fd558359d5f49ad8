// ggml tensor types: their ids, block geometry, and f32 dequantization of the
// types bitrank reads (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q6_K).
//
// A ggml tensor is stored as consecutive blocks along its contiguous dim;
// each block holds `block_elems` values in `block_bytes` bytes. Plain types
// have one-element blocks. The byte layout of every dequantized block type is
// written at the top of src/io/dequant.cpp. Results equal ggml's reference
// dequantization (dequantize_row_* in ggml-quants.c) bit for bit: the same
// f32 products and differences in the same order, never fused.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace bitrank::io {

// ggml_type ids as stored in GGUF tensor infos. Ids ggml has retired
// (4, 5, 31–33, 36–38) are unknown here.
enum class GgmlType : std::uint32_t {
  f32 = 0,
  f16 = 1,
  q4_0 = 2,
  q4_1 = 3,
  q5_0 = 6,
  q5_1 = 7,
  q8_0 = 8,
  q8_1 = 9,
  q2_k = 10,
  q3_k = 11,
  q4_k = 12,
  q5_k = 13,
  q6_k = 14,
  q8_k = 15,
  iq2_xxs = 16,
  iq2_xs = 17,
  iq3_xxs = 18,
  iq1_s = 19,
  iq4_nl = 20,
  iq3_s = 21,
  iq2_s = 22,
  iq4_xs = 23,
  i8 = 24,
  i16 = 25,
  i32 = 26,
  i64 = 27,
  f64 = 28,
  iq1_m = 29,
  bf16 = 30,
  tq1_0 = 34,
  tq2_0 = 35,
  mxfp4 = 39,
  nvfp4 = 40,
  q1_0 = 41,
};

struct GgmlTypeInfo {
  GgmlType type;
  std::string_view name;     // ggml's name: "F32", "Q4_K", …
  std::uint32_t block_elems;  // values per block
  std::uint32_t block_bytes;  // bytes per block
  bool dequantizable;         // dequantize() supports it
};

// The traits of a stored type id; nullopt for an id ggml does not define.
std::optional<GgmlTypeInfo> ggml_type_info(std::uint32_t id);
const GgmlTypeInfo& ggml_type_info(GgmlType type);

// "Q4_K" for a known id, "type 99 (unknown)" otherwise.
std::string ggml_type_name(std::uint32_t id);

// Dequantizes dst.size() values of `type` from src. dst.size() must be a
// whole number of blocks and src.size() exactly their bytes; src may have
// any alignment. Throws bitrank::Error (message starts with "dequantize")
// for a type it does not support or mismatched sizes.
void dequantize(GgmlType type, std::span<const std::byte> src, std::span<float> dst);

}  // namespace bitrank::io
