// Generation with a cache: what one sequence keeps between forwards so that
// a decoder runs each new token alone instead of the whole sequence again
// (DecoderModel::hidden_cached, next_logits; model/generate.hpp).
//
// Per block, on the model's backend, row p being position p of the sequence:
//   attention  keys after RoPE (the hybrid's after its q/k norm too) and
//              values, [capacity][kv_heads][head_dim] each
//   GDN        the recurrent state S [Hv][d][d] and the short conv's state,
//              the raw qkv rows of the last K−1 tokens [K−1][C] (gdn_decode,
//              ops/gdn.hpp); both start at zero
// and the rotary table [capacity][half][2] (rope_table), whose rows p0.. are
// the angles of positions p0...
//
// hidden_cached(tokens, cache) runs its n tokens as positions length ..
// length + n − 1: every block over those n rows only — RoPE with the table's
// rows of their positions, the new keys and values written into the cache
// and attention of the new queries over rows 0 .. length + n − 1
// (attention_forward while the cache is empty, so a prefill is the full
// forward's op sequence; attention_decode after), the GDN recurrence from
// the carried states (gdn_decode) — then length += n. A prefill is one call
// with the prompt, a decoding step one call with the last drawn token.
//
// Numerics: the same ops on the same rows as a forward over the whole
// sequence, except that the GDN runs its token-by-token decode form instead
// of gdn_forward's kernels and a GEMM of one row may sum in another order
// than one of n rows: logits agree to f32 rounding (tests/kv_cache_test.cpp).
#pragma once

#include <span>
#include <vector>

#include "bitrank/backend.hpp"
#include "bitrank/error.hpp"

namespace bitrank::model {

template <class T>
struct KvCache {
  virtual ~KvCache() = default;

  index_t capacity = 0;  // positions it holds
  index_t length = 0;    // positions filled: the next token's position
  std::vector<Buffer<T>> keys, values;          // by block; empty for a GDN block
  std::vector<Buffer<T>> conv_state, gdn_state;  // by block; empty for an attention block
  Buffer<T> rope;                                // [capacity][half][2]

  // The table's rows for n positions from `first`: [n][half][2].
  CView<T> rope_rows(index_t first, index_t n, index_t half) const {
    return CView<T>(rope.data() + first * half * 2, Shape{n, half, 2});
  }
  // Rows [first, first + n) of block b's keys or values: [n][kv_width].
  static View<T> rows(const Buffer<T>& b, index_t first, index_t n, index_t width) {
    return View<T>(b.data() + first * width, Shape{n, width});
  }
};

// Error unless n ≥ 1 tokens fit the cache after its `length` positions.
inline void check_cache_room(index_t length, index_t capacity, index_t n) {
  if (n < 1) fail("hidden_cached: no tokens");
  if (length + n > capacity)
    fail("hidden_cached: {} cached positions and {} new ones exceed the cache's {} positions", length, n, capacity);
}

// att [n][heads·hd] and lse [n][heads] of n new queries qr at positions
// first .. first + n − 1 over the first first + n rows of a block's cached
// keys and values (geo.window is set here): attention_forward of one window
// when the cache held nothing before them, attention_decode otherwise.
template <class T>
void cached_attention(Backend<T>& be, AttentionGeometry geo, const Buffer<T>& keys, const Buffer<T>& values,
                      index_t first, CView<T> qr, View<T> att, View<T> lse) {
  const index_t n = qr.dim(0), seen = first + n, kw = geo.kv_heads * geo.head_dim;
  geo.window = seen;
  const CView<T> k(keys.data(), Shape{seen, kw}), v(values.data(), Shape{seen, kw});
  if (first == 0)
    be.attention().attention_forward(qr, k, v, geo, att, lse);
  else
    be.attention().attention_decode(qr, k, v, geo, att, lse);
}

}  // namespace bitrank::model
