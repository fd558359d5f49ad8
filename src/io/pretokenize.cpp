// Hand-written equivalents of the pre-tokenizer regexes (see
// bitrank/io/tokenizer.hpp). Each matcher decodes the string once into
// characters with their class, then at each position tries the regex's
// alternatives in order, as the regex engine does; every position matches
// some alternative, so the matches tile the string.
#include "io/pretokenize.hpp"

#include <algorithm>
#include <array>

namespace bitrank::io::detail {
namespace {

struct Range {
  std::uint32_t first, last;
  CharClass cls;
};

constexpr Range kRanges[] = {
#include "io/unicode_classes.inc"
};

constexpr std::array<CharClass, 128> make_ascii_classes() {
  std::array<CharClass, 128> t{};
  for (const Range& r : kRanges)
    for (std::uint32_t c = r.first; c <= r.last && c < 128; ++c) t[c] = r.cls;
  return t;
}
constexpr std::array<CharClass, 128> kAscii = make_ascii_classes();

constexpr std::uint32_t kInvalid = 0xFFFFFFFFu;

struct Char {
  std::uint32_t cp;
  std::uint32_t offset;  // byte offset in the string
  CharClass cls;
};

void decode_all(std::string_view s, std::vector<Char>& chars) {
  chars.clear();
  chars.reserve(s.size() + 1);
  std::size_t i = 0;
  while (i < s.size()) {
    const auto b = static_cast<unsigned char>(s[i]);
    if (b < 0x80) {
      chars.push_back({b, static_cast<std::uint32_t>(i), kAscii[b]});
      ++i;
      continue;
    }
    std::size_t len = 1;
    const std::uint32_t cp = decode_utf8(s, i, len);
    chars.push_back({cp, static_cast<std::uint32_t>(i), cp == kInvalid ? kOther : char_class(cp)});
    i += len;
  }
  chars.push_back({0, static_cast<std::uint32_t>(s.size()), kOther});  // sentinel: offset of the end
}

bool is_cr_lf(std::uint32_t cp) { return cp == '\r' || cp == '\n'; }

// Case-insensitive ASCII letter test (lower is the lowercase letter); the
// long s U+017F folds to 's' as in Unicode case folding.
bool fold_eq(std::uint32_t cp, char lower, bool fold) {
  if (cp == static_cast<std::uint32_t>(lower)) return true;
  if (!fold) return false;
  if (cp == static_cast<std::uint32_t>(lower - 'a' + 'A')) return true;
  return lower == 's' && cp == 0x017F;
}

// 's|'t|'re|'ve|'m|'ll|'d at c[i] (case-insensitive if fold): length or 0.
std::size_t match_contraction(const Char* c, std::size_t i, std::size_t n, bool fold) {
  if (c[i].cp != '\'' || i + 1 >= n) return 0;
  const std::uint32_t a = c[i + 1].cp;
  if (fold_eq(a, 's', fold) || fold_eq(a, 't', fold) || fold_eq(a, 'm', fold) || fold_eq(a, 'd', fold)) return 2;
  if (i + 2 >= n) return 0;
  const std::uint32_t b = c[i + 2].cp;
  if ((fold_eq(a, 'r', fold) && fold_eq(b, 'e', fold)) || (fold_eq(a, 'v', fold) && fold_eq(b, 'e', fold)) ||
      (fold_eq(a, 'l', fold) && fold_eq(b, 'l', fold)))
    return 3;
  return 0;
}

std::size_t run_of(const Char* c, std::size_t i, std::size_t n, CharClass cls) {
  std::size_t j = i;
  while (j < n && c[j].cls == cls) ++j;
  return j;
}

// \s+(?!\S)|\s+ at a whitespace character c[i]: the run, less its last
// character when a non-space follows and the run is longer than one.
std::size_t match_space_run(const Char* c, std::size_t i, std::size_t n) {
  const std::size_t j = run_of(c, i, n, kSpace);
  if (j == n || j - i == 1) return j - i;
  return j - i - 1;
}

std::size_t match_gpt2(const Char* c, std::size_t i, std::size_t n) {
  if (std::size_t len = match_contraction(c, i, n, false)) return len;
  // ' ?\p{L}+', ' ?\p{N}+', ' ?[^\s\p{L}\p{N}]+'
  const std::size_t s = (c[i].cp == ' ' && i + 1 < n) ? i + 1 : i;
  const CharClass cls = c[s].cls;
  if (cls != kSpace) return run_of(c, s, n, cls) - i;
  return match_space_run(c, i, n);
}

std::size_t match_qwen2(const Char* c, std::size_t i, std::size_t n, int max_digits) {
  if (std::size_t len = match_contraction(c, i, n, true)) return len;
  const CharClass ci = c[i].cls;
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (ci != kLetter && ci != kNumber && !is_cr_lf(c[i].cp) && i + 1 < n && c[i + 1].cls == kLetter)
    return run_of(c, i + 1, n, kLetter) - i;
  if (ci == kLetter) return run_of(c, i, n, kLetter) - i;
  // \p{N}{1,max_digits}
  if (ci == kNumber) return std::min<std::size_t>(run_of(c, i, n, kNumber) - i, static_cast<std::size_t>(max_digits));
  // ' ?[^\s\p{L}\p{N}]+[\r\n]*'
  const std::size_t s = (c[i].cp == ' ' && i + 1 < n) ? i + 1 : i;
  if (c[s].cls == kOther) {
    std::size_t j = run_of(c, s, n, kOther);
    while (j < n && is_cr_lf(c[j].cp)) ++j;
    return j - i;
  }
  // \s*[\r\n]+ : up to the last CR/LF of the whitespace run.
  const std::size_t j = run_of(c, i, n, kSpace);
  for (std::size_t p = j; p > i; --p)
    if (is_cr_lf(c[p - 1].cp)) return p - i;
  return match_space_run(c, i, n);
}

thread_local std::vector<Char> t_chars;

template <class Match>
void split_with(std::string_view s, std::uint32_t base, Pieces& out, Match match) {
  decode_all(s, t_chars);
  const Char* c = t_chars.data();
  const std::size_t n = t_chars.size() - 1;
  std::size_t i = 0;
  while (i < n) {
    const std::size_t len = match(c, i, n);
    out.emplace_back(base + c[i].offset, base + c[i + len].offset);
    i += len;
  }
}

}  // namespace

CharClass char_class(std::uint32_t cp) {
  if (cp < 128) return kAscii[cp];
  const Range* end = std::end(kRanges);
  const Range* r = std::upper_bound(std::begin(kRanges), end, cp,
                                    [](std::uint32_t v, const Range& x) { return v < x.first; });
  if (r == std::begin(kRanges)) return kOther;
  --r;
  return cp <= r->last ? r->cls : kOther;
}

std::uint32_t decode_utf8(std::string_view s, std::size_t i, std::size_t& len) {
  len = 1;
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) return b0;
  std::size_t need;
  std::uint32_t cp, min;
  if ((b0 & 0xE0) == 0xC0) {
    need = 1, cp = b0 & 0x1F, min = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    need = 2, cp = b0 & 0x0F, min = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    need = 3, cp = b0 & 0x07, min = 0x10000;
  } else {
    return kInvalid;
  }
  if (i + need >= s.size()) return kInvalid;
  for (std::size_t k = 1; k <= need; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xC0) != 0x80) return kInvalid;
    cp = (cp << 6) | (b & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp < 0xE000)) return kInvalid;
  len = need + 1;
  return cp;
}

void split_gpt2(std::string_view s, std::uint32_t base, Pieces& out) {
  split_with(s, base, out, [](const Char* c, std::size_t i, std::size_t n) { return match_gpt2(c, i, n); });
}

void split_qwen2(std::string_view s, std::uint32_t base, int max_digits, Pieces& out) {
  split_with(s, base, out,
             [max_digits](const Char* c, std::size_t i, std::size_t n) { return match_qwen2(c, i, n, max_digits); });
}

void split_digits(std::string_view s, std::uint32_t base, Pieces& out) {
  split_with(s, base, out, [](const Char* c, std::size_t i, std::size_t n) -> std::size_t {
    if (c[i].cls == kNumber) return 1;
    std::size_t j = i;
    while (j < n && c[j].cls != kNumber) ++j;
    return j - i;
  });
}

}  // namespace bitrank::io::detail
