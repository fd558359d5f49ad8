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

// --- NFC ---------------------------------------------------------------------
// Canonical decomposition (recursive; Hangul syllables algorithmically), the
// canonical ordering of combining marks by class, then canonical composition
// of each starter with the following unblocked characters (Unicode UAX #15).

namespace {

struct CccEntry {
  std::uint32_t cp;
  std::uint8_t ccc;
};
struct Decomposition {
  std::uint32_t cp, first, second;
};
struct Composition {
  std::uint32_t first, second, composite;
};

constexpr CccEntry kCcc[] = {
#define NFC_CCC
#include "io/unicode_nfc.inc"
#undef NFC_CCC
};
constexpr Decomposition kDecompositions[] = {
#define NFC_DECOMPOSITION
#include "io/unicode_nfc.inc"
#undef NFC_DECOMPOSITION
};
constexpr Composition kCompositions[] = {
#define NFC_COMPOSITION
#include "io/unicode_nfc.inc"
#undef NFC_COMPOSITION
};

constexpr std::uint32_t kHangulS = 0xAC00, kHangulL = 0x1100, kHangulV = 0x1161, kHangulT = 0x11A7;
constexpr std::uint32_t kCountL = 19, kCountV = 21, kCountT = 28, kCountS = kCountL * kCountV * kCountT;
constexpr std::uint32_t kRawByte = 0x80000000u;  // marks an invalid UTF-8 byte

int combining_class(std::uint32_t cp) {
  if (cp < 0x300 || cp >= kRawByte) return 0;
  const auto* it = std::lower_bound(std::begin(kCcc), std::end(kCcc), cp,
                                    [](const CccEntry& e, std::uint32_t v) { return e.cp < v; });
  return it != std::end(kCcc) && it->cp == cp ? it->ccc : 0;
}

const Decomposition* find_decomposition(std::uint32_t cp) {
  const auto* it = std::lower_bound(std::begin(kDecompositions), std::end(kDecompositions), cp,
                                    [](const Decomposition& e, std::uint32_t v) { return e.cp < v; });
  return it != std::end(kDecompositions) && it->cp == cp ? it : nullptr;
}

// Code points that may be a composition's second character.
const std::vector<std::uint32_t>& composition_seconds() {
  static const std::vector<std::uint32_t> seconds = [] {
    std::vector<std::uint32_t> v;
    for (const auto& c : kCompositions) v.push_back(c.second);
    std::sort(v.begin(), v.end());
    v.erase(std::unique(v.begin(), v.end()), v.end());
    return v;
  }();
  return seconds;
}

void decompose(std::uint32_t cp, std::vector<std::uint32_t>& out) {
  if (cp >= kHangulS && cp < kHangulS + kCountS) {
    const std::uint32_t s = cp - kHangulS;
    out.push_back(kHangulL + s / (kCountV * kCountT));
    out.push_back(kHangulV + (s % (kCountV * kCountT)) / kCountT);
    if (s % kCountT) out.push_back(kHangulT + s % kCountT);
    return;
  }
  if (const Decomposition* d = cp >= 0xC0 && cp < kRawByte ? find_decomposition(cp) : nullptr) {
    decompose(d->first, out);
    if (d->second) decompose(d->second, out);
    return;
  }
  out.push_back(cp);
}

// The primary composite of a + b, or 0.
std::uint32_t compose(std::uint32_t a, std::uint32_t b) {
  if (a >= kHangulL && a < kHangulL + kCountL && b >= kHangulV && b < kHangulV + kCountV)
    return kHangulS + ((a - kHangulL) * kCountV + (b - kHangulV)) * kCountT;
  if (a >= kHangulS && a < kHangulS + kCountS && (a - kHangulS) % kCountT == 0 && b > kHangulT &&
      b < kHangulT + kCountT)
    return a + (b - kHangulT);
  const auto* it = std::lower_bound(std::begin(kCompositions), std::end(kCompositions), std::make_pair(a, b),
                                    [](const Composition& e, const std::pair<std::uint32_t, std::uint32_t>& v) {
                                      return std::make_pair(e.first, e.second) < v;
                                    });
  return it != std::end(kCompositions) && it->first == a && it->second == b ? it->composite : 0;
}

// A code point or an invalid byte kept as kRawByte | byte.
void append_code(std::string& s, std::uint32_t cp) {
  if (cp >= kRawByte) {
    s += static_cast<char>(cp & 0xFF);
  } else {
    append_utf8(s, cp);
  }
}

}  // namespace

bool nfc_unchanged(std::string_view s) {
  const auto& seconds = composition_seconds();
  std::size_t i = 0;
  while (i < s.size()) {
    // Below U+0300 nothing decomposes, combines or composes with what precedes it.
    if (static_cast<unsigned char>(s[i]) < 0xCC) {
      ++i;
      continue;
    }
    std::size_t len = 1;
    const std::uint32_t cp = decode_utf8(s, i, len);
    i += len;
    if (cp == kInvalid) continue;
    if (combining_class(cp) != 0 || find_decomposition(cp) ||
        std::binary_search(seconds.begin(), seconds.end(), cp) || (cp >= kHangulV && cp < kHangulV + kCountV) ||
        (cp > kHangulT && cp < kHangulT + kCountT))
      return false;
  }
  return true;
}

std::string nfc(std::string_view s) {
  std::vector<std::uint32_t> d;
  d.reserve(s.size() + 8);
  for (std::size_t i = 0; i < s.size();) {
    std::size_t len = 1;
    const std::uint32_t cp = decode_utf8(s, i, len);
    decompose(cp == kInvalid ? kRawByte | static_cast<unsigned char>(s[i]) : cp, d);
    i += len;
  }
  // Canonical ordering: stable sort of each run of non-starters by class.
  for (std::size_t i = 1; i < d.size(); ++i) {
    const int c = combining_class(d[i]);
    if (c == 0) continue;
    for (std::size_t j = i; j > 0; --j) {
      const int p = combining_class(d[j - 1]);
      if (p <= c) break;
      std::swap(d[j - 1], d[j]);
    }
  }
  // Canonical composition.
  std::string out;
  out.reserve(s.size());
  if (!d.empty()) {
    std::size_t starter_pos = 0, write = 1;
    int last_class = combining_class(d[0]) ? 256 : 0;
    for (std::size_t i = 1; i < d.size(); ++i) {
      const std::uint32_t ch = d[i];
      const int cls = combining_class(ch);
      const std::uint32_t composite =
          (last_class < cls || last_class == 0) && last_class != 256 ? compose(d[starter_pos], ch) : 0;
      if (composite) {
        d[starter_pos] = composite;
        continue;
      }
      if (cls == 0) starter_pos = write;
      last_class = cls;
      d[write++] = ch;
    }
    d.resize(write);
  }
  for (std::uint32_t cp : d) append_code(out, cp);
  return out;
}

void append_utf8(std::string& s, std::uint32_t cp) {
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

}  // namespace bitrank::io::detail
