// Pre-tokenizer matchers (internal): each splits a UTF-8 string into pieces
// exactly as `tokenizers` splits it with the regex named in
// bitrank/io/tokenizer.hpp, the end of the string being the end of the
// regex's input. Pieces are byte ranges [begin, end), in order, covering the
// string. An invalid UTF-8 byte is one character of class "other".
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace bitrank::io::detail {

enum CharClass : std::uint8_t { kOther = 0, kLetter = 1, kNumber = 2, kSpace = 3 };

// \p{L}, \p{N}, \s (Oniguruma's: U+0009..U+000D, U+0085, Zs, Zl, Zp), other.
CharClass char_class(std::uint32_t cp);

// Decodes one code point at s[i] (i < s.size()); sets len to its byte count.
// Invalid or truncated sequences, overlong forms and surrogates give
// cp = 0xFFFFFFFF with len 1.
std::uint32_t decode_utf8(std::string_view s, std::size_t i, std::size_t& len);

// Appends the UTF-8 encoding of code point cp (< 0x110000) to s.
void append_utf8(std::string& s, std::uint32_t cp);

using Pieces = std::vector<std::pair<std::uint32_t, std::uint32_t>>;

// Appends the pieces of s, offset by base, to out.
void split_gpt2(std::string_view s, std::uint32_t base, Pieces& out);
void split_qwen2(std::string_view s, std::uint32_t base, int max_digits, Pieces& out);
// Digits(individual_digits=true): every \p{N} character alone, the runs
// between as pieces.
void split_digits(std::string_view s, std::uint32_t base, Pieces& out);

// Unicode normalisation form C. An invalid UTF-8 byte passes through as is
// and behaves as a starter that composes with nothing.
// nfc_unchanged: a quick check; true means NFC(s) == s.
bool nfc_unchanged(std::string_view s);
std::string nfc(std::string_view s);

}  // namespace bitrank::io::detail
