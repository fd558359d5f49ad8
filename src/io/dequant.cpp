// Dequantization of ggml block types to f32.
//
// Block layouts (little-endian; f16 = IEEE half, bf16 = top half of an f32;
// "elem i" is the i-th value of the block along the contiguous dim):
//
//   F32   4 bytes    one value.
//   F16   2 bytes    one value, f16.
//   BF16  2 bytes    one value, bf16.
//
//   Q8_0  34 bytes, 32 values
//     [0..2)   d      f16 scale
//     [2..34)  qs[32] int8; elem i = qs[i] * d
//
//   Q4_0  18 bytes, 32 values
//     [0..2)   d      f16 scale
//     [2..18)  qs[16] two 4-bit codes per byte: low nibble of qs[j] is elem j,
//                     high nibble is elem j + 16; elem = (code - 8) * d
//
//   Q4_1  20 bytes, 32 values
//     [0..2)   d      f16 scale
//     [2..4)   m      f16 minimum
//     [4..20)  qs[16] nibbles as Q4_0; elem = code * d + m
//
//   Q4_K  144 bytes, 256 values (a super-block of 8 sub-blocks of 32)
//     [0..2)     d          f16 super-scale of the sub-block scales
//     [2..4)     dmin       f16 super-scale of the sub-block minima
//     [4..16)    scales[12] eight 6-bit scales sc[s] and eight 6-bit minima
//                           mn[s], packed: for s < 4
//                             sc[s] = scales[s] & 63, mn[s] = scales[s + 4] & 63;
//                           for s >= 4 the low 4 bits come from scales[s + 4]
//                           (low nibble → sc, high nibble → mn) and the top 2
//                           bits from the top 2 bits of scales[s - 4] (→ sc)
//                           and scales[s] (→ mn)
//     [16..144)  qs[128]    4 chunks of 32 bytes; chunk c holds sub-block 2c in
//                           the low nibbles and sub-block 2c + 1 in the high
//                           nibbles; elem = (d * sc[s]) * code - (dmin * mn[s])
//
//   Q6_K  210 bytes, 256 values (16 sub-blocks of 16)
//     [0..128)    ql[128]    low 4 bits of each 6-bit code
//     [128..192)  qh[64]     high 2 bits, four codes per byte
//     [192..208)  scales[16] int8 sub-block scales
//     [208..210)  d          f16 super-scale
//     Two halves of 128 values, each using ql[64], qh[32], scales[8]; within
//     a half, for l in 0..32:
//       elem l      = low nibble  of ql[l]      | bits 0-1 of qh[l] << 4
//       elem l + 32 = low nibble  of ql[l + 32] | bits 2-3 of qh[l] << 4
//       elem l + 64 = high nibble of ql[l]      | bits 4-5 of qh[l] << 4
//       elem l + 96 = high nibble of ql[l + 32] | bits 6-7 of qh[l] << 4
//     and value = (d * scales[e / 16]) * (code - 32) for elem e of the half.
//
// Numerics: each value is computed with the f32 operations of ggml's
// dequantize_row_* in the same order. An f16 scale times a scale or code of
// at most 8 bits is exact in f32, so only the final add (Q4_1, Q4_K) or the
// final product (Q6_K) rounds, as in ggml; FMA contraction is switched off
// below all the same, so that no kernel here can round differently.
#include "bitrank/io/dequant.hpp"

// No FMA contraction in this file (GCC contracts across statements with
// -march flags that have FMA, even in ISO C++ mode).
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include <array>
#include <bit>
#include <cstring>

#include "bitrank/dtype.hpp"
#include "bitrank/error.hpp"

static_assert(std::endian::native == std::endian::little, "the GGUF readers assume a little-endian host");

namespace bitrank::io {

namespace {

constexpr std::array kTypes = {
    GgmlTypeInfo{GgmlType::f32, "F32", 1, 4, true},
    GgmlTypeInfo{GgmlType::f16, "F16", 1, 2, true},
    GgmlTypeInfo{GgmlType::q4_0, "Q4_0", 32, 18, true},
    GgmlTypeInfo{GgmlType::q4_1, "Q4_1", 32, 20, true},
    GgmlTypeInfo{GgmlType::q5_0, "Q5_0", 32, 22, false},
    GgmlTypeInfo{GgmlType::q5_1, "Q5_1", 32, 24, false},
    GgmlTypeInfo{GgmlType::q8_0, "Q8_0", 32, 34, true},
    GgmlTypeInfo{GgmlType::q8_1, "Q8_1", 32, 40, false},
    GgmlTypeInfo{GgmlType::q2_k, "Q2_K", 256, 84, false},
    GgmlTypeInfo{GgmlType::q3_k, "Q3_K", 256, 110, false},
    GgmlTypeInfo{GgmlType::q4_k, "Q4_K", 256, 144, true},
    GgmlTypeInfo{GgmlType::q5_k, "Q5_K", 256, 176, false},
    GgmlTypeInfo{GgmlType::q6_k, "Q6_K", 256, 210, true},
    GgmlTypeInfo{GgmlType::q8_k, "Q8_K", 256, 292, false},
    GgmlTypeInfo{GgmlType::iq2_xxs, "IQ2_XXS", 256, 66, false},
    GgmlTypeInfo{GgmlType::iq2_xs, "IQ2_XS", 256, 74, false},
    GgmlTypeInfo{GgmlType::iq3_xxs, "IQ3_XXS", 256, 98, false},
    GgmlTypeInfo{GgmlType::iq1_s, "IQ1_S", 256, 50, false},
    GgmlTypeInfo{GgmlType::iq4_nl, "IQ4_NL", 32, 18, false},
    GgmlTypeInfo{GgmlType::iq3_s, "IQ3_S", 256, 110, false},
    GgmlTypeInfo{GgmlType::iq2_s, "IQ2_S", 256, 82, false},
    GgmlTypeInfo{GgmlType::iq4_xs, "IQ4_XS", 256, 136, false},
    GgmlTypeInfo{GgmlType::i8, "I8", 1, 1, false},
    GgmlTypeInfo{GgmlType::i16, "I16", 1, 2, false},
    GgmlTypeInfo{GgmlType::i32, "I32", 1, 4, false},
    GgmlTypeInfo{GgmlType::i64, "I64", 1, 8, false},
    GgmlTypeInfo{GgmlType::f64, "F64", 1, 8, false},
    GgmlTypeInfo{GgmlType::iq1_m, "IQ1_M", 256, 56, false},
    GgmlTypeInfo{GgmlType::bf16, "BF16", 1, 2, true},
    GgmlTypeInfo{GgmlType::tq1_0, "TQ1_0", 256, 54, false},
    GgmlTypeInfo{GgmlType::tq2_0, "TQ2_0", 256, 66, false},
    GgmlTypeInfo{GgmlType::mxfp4, "MXFP4", 32, 17, false},
    GgmlTypeInfo{GgmlType::nvfp4, "NVFP4", 64, 36, false},
    GgmlTypeInfo{GgmlType::q1_0, "Q1_0", 128, 18, false},
};

const GgmlTypeInfo* find_type(std::uint32_t id) {
  for (const auto& t : kTypes)
    if (static_cast<std::uint32_t>(t.type) == id) return &t;
  return nullptr;
}

using Byte = std::uint8_t;

float load_f16(const Byte* p) {
  f16 h;
  h.bits = static_cast<std::uint16_t>(p[0] | (p[1] << 8));
  return to_f32(h);
}

float load_bf16(const Byte* p) {
  bf16 b;
  b.bits = static_cast<std::uint16_t>(p[0] | (p[1] << 8));
  return to_f32(b);
}

void block_q8_0(const Byte* b, float* y) {
  const float d = load_f16(b);
  for (int i = 0; i < 32; ++i) y[i] = static_cast<float>(static_cast<std::int8_t>(b[2 + i])) * d;
}

void block_q4_0(const Byte* b, float* y) {
  const float d = load_f16(b);
  const Byte* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = static_cast<float>((qs[j] & 0x0f) - 8) * d;
    y[j + 16] = static_cast<float>((qs[j] >> 4) - 8) * d;
  }
}

void block_q4_1(const Byte* b, float* y) {
  const float d = load_f16(b);
  const float m = load_f16(b + 2);
  const Byte* qs = b + 4;
  for (int j = 0; j < 16; ++j) {
    const float lo = static_cast<float>(qs[j] & 0x0f) * d;
    const float hi = static_cast<float>(qs[j] >> 4) * d;
    y[j] = lo + m;
    y[j + 16] = hi + m;
  }
}

// Sub-block s's 6-bit scale and minimum from Q4_K's 12 packed bytes.
void q4_k_scale_min(int s, const Byte* q, int& sc, int& mn) {
  if (s < 4) {
    sc = q[s] & 63;
    mn = q[s + 4] & 63;
  } else {
    sc = (q[s + 4] & 0x0f) | ((q[s - 4] >> 6) << 4);
    mn = (q[s + 4] >> 4) | ((q[s] >> 6) << 4);
  }
}

void block_q4_k(const Byte* b, float* y) {
  const float d = load_f16(b);
  const float dmin = load_f16(b + 2);
  const Byte* scales = b + 4;
  const Byte* qs = b + 16;
  for (int c = 0; c < 4; ++c) {  // 64 values: sub-blocks 2c (low nibbles) and 2c + 1 (high)
    int sc_lo, mn_lo, sc_hi, mn_hi;
    q4_k_scale_min(2 * c, scales, sc_lo, mn_lo);
    q4_k_scale_min(2 * c + 1, scales, sc_hi, mn_hi);
    const float d_lo = d * static_cast<float>(sc_lo);
    const float m_lo = dmin * static_cast<float>(mn_lo);
    const float d_hi = d * static_cast<float>(sc_hi);
    const float m_hi = dmin * static_cast<float>(mn_hi);
    const Byte* q = qs + 32 * c;
    for (int l = 0; l < 32; ++l) {
      const float lo = d_lo * static_cast<float>(q[l] & 0x0f);
      y[64 * c + l] = lo - m_lo;
    }
    for (int l = 0; l < 32; ++l) {
      const float hi = d_hi * static_cast<float>(q[l] >> 4);
      y[64 * c + 32 + l] = hi - m_hi;
    }
  }
}

void block_q6_k(const Byte* b, float* y) {
  const float d = load_f16(b + 208);
  for (int half = 0; half < 2; ++half) {
    const Byte* ql = b + 64 * half;
    const Byte* qh = b + 128 + 32 * half;
    const auto* sc = reinterpret_cast<const std::int8_t*>(b + 192 + 8 * half);
    float* out = y + 128 * half;
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((ql[l] & 0x0f) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      const float d1 = d * static_cast<float>(sc[is + 0]);
      const float d2 = d * static_cast<float>(sc[is + 2]);
      const float d3 = d * static_cast<float>(sc[is + 4]);
      const float d4 = d * static_cast<float>(sc[is + 6]);
      out[l + 0] = d1 * static_cast<float>(q1);
      out[l + 32] = d2 * static_cast<float>(q2);
      out[l + 64] = d3 * static_cast<float>(q3);
      out[l + 96] = d4 * static_cast<float>(q4);
    }
  }
}

template <class Block>
void each_block(const Byte* src, float* dst, std::size_t n_blocks, std::size_t block_bytes, std::size_t block_elems,
                Block block) {
  for (std::size_t i = 0; i < n_blocks; ++i) block(src + i * block_bytes, dst + i * block_elems);
}

}  // namespace

std::optional<GgmlTypeInfo> ggml_type_info(std::uint32_t id) {
  const GgmlTypeInfo* t = find_type(id);
  if (!t) return std::nullopt;
  return *t;
}

const GgmlTypeInfo& ggml_type_info(GgmlType type) {
  const GgmlTypeInfo* t = find_type(static_cast<std::uint32_t>(type));
  BR_ASSERT(t != nullptr, "GgmlType {} has no traits", static_cast<std::uint32_t>(type));
  return *t;
}

std::string ggml_type_name(std::uint32_t id) {
  const GgmlTypeInfo* t = find_type(id);
  return t ? std::string(t->name) : ::bitrank::format("type {} (unknown)", id);
}

void dequantize(GgmlType type, std::span<const std::byte> src, std::span<float> dst) {
  const GgmlTypeInfo* t = find_type(static_cast<std::uint32_t>(type));
  if (!t) fail("dequantize: unknown ggml type {}", static_cast<std::uint32_t>(type));
  if (!t->dequantizable)
    fail("dequantize: type {} is not supported (supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q4_K, Q6_K)", t->name);
  if (dst.size() % t->block_elems != 0)
    fail("dequantize: {} values of {} are not a whole number of {}-value blocks", dst.size(), t->name, t->block_elems);
  const std::size_t n_blocks = dst.size() / t->block_elems;
  if (src.size() / t->block_bytes != n_blocks || src.size() % t->block_bytes != 0)
    fail("dequantize: {} values of {} take {} blocks of {} bytes, got {} bytes", dst.size(), t->name, n_blocks,
         t->block_bytes, src.size());
  const auto* s = reinterpret_cast<const Byte*>(src.data());
  float* y = dst.data();
  switch (type) {
    case GgmlType::f32:
      if (!dst.empty()) std::memcpy(y, s, src.size());
      return;
    case GgmlType::f16:
      for (std::size_t i = 0; i < n_blocks; ++i) y[i] = load_f16(s + 2 * i);
      return;
    case GgmlType::bf16:
      for (std::size_t i = 0; i < n_blocks; ++i) y[i] = load_bf16(s + 2 * i);
      return;
    case GgmlType::q8_0: return each_block(s, y, n_blocks, t->block_bytes, t->block_elems, block_q8_0);
    case GgmlType::q4_0: return each_block(s, y, n_blocks, t->block_bytes, t->block_elems, block_q4_0);
    case GgmlType::q4_1: return each_block(s, y, n_blocks, t->block_bytes, t->block_elems, block_q4_1);
    case GgmlType::q4_k: return each_block(s, y, n_blocks, t->block_bytes, t->block_elems, block_q4_k);
    case GgmlType::q6_k: return each_block(s, y, n_blocks, t->block_bytes, t->block_elems, block_q6_k);
    default: break;
  }
  BR_ASSERT(false, "type {} is marked dequantizable but has no kernel", t->name);
}

}  // namespace bitrank::io
