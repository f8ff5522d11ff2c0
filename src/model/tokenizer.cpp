#include "hybrid/model/tokenizer.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <queue>
#include <sstream>
#include <unordered_map>

#include "hybrid/core/error.h"
#include "model/unicode_tables.h"

namespace hybrid {

namespace {

using json = nlohmann::json;
namespace uc = unicode;

constexpr uint32_t kReplacement = 0xFFFD;
constexpr size_t npos = static_cast<size_t>(-1);

// ---- UTF-8 ------------------------------------------------------------------------------------

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// One step of UTF-8 decoding at s[i]. Returns the bytes consumed and sets cp (U+FFFD for an
// invalid maximal subpart, as Rust's from_utf8_lossy and the Unicode "best practice"). When the
// text ends inside a sequence that is valid so far, returns 0 if !final (wait for more bytes).
size_t utf8_step(std::string_view s, size_t i, bool final, uint32_t& cp) {
  const auto b0 = static_cast<uint8_t>(s[i]);
  if (b0 < 0x80) {
    cp = b0;
    return 1;
  }
  size_t len;
  uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    cp = kReplacement;
    return 1;
  }
  uint32_t v = b0 & (0x7F >> len);
  for (size_t k = 1; k < len; ++k) {
    if (i + k >= s.size()) {
      if (!final) return 0;
      cp = kReplacement;
      return k;
    }
    const auto b = static_cast<uint8_t>(s[i + k]);
    const uint8_t l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (b < l || b > h) {
      cp = kReplacement;
      return k;
    }
    v = (v << 6) | (b & 0x3F);
  }
  cp = v;
  return len;
}

std::u32string to_code_points(std::string_view s, std::vector<size_t>* offsets = nullptr) {
  std::u32string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    uint32_t cp;
    const size_t n = utf8_step(s, i, true, cp);
    if (offsets) offsets->push_back(i);
    out.push_back(cp);
    i += n;
  }
  if (offsets) offsets->push_back(s.size());
  return out;
}

// Lossy UTF-8 of `bytes`: complete characters and U+FFFD for invalid parts. With !final, an
// incomplete trailing character is left in `rest` instead.
std::string utf8_repair(std::string_view bytes, bool final, std::string* rest) {
  std::string out;
  out.reserve(bytes.size());
  size_t i = 0;
  while (i < bytes.size()) {
    uint32_t cp;
    const size_t n = utf8_step(bytes, i, final, cp);
    if (n == 0) break;
    if (cp == kReplacement)  // an invalid part, or a real U+FFFD (the same bytes)
      append_utf8(out, kReplacement);
    else
      out.append(bytes.substr(i, n));
    i += n;
  }
  if (rest) *rest = std::string(bytes.substr(i));
  return out;
}

// ---- Unicode properties -----------------------------------------------------------------------

uint8_t category(uint32_t cp) {
  size_t lo = 0, hi = uc::kCategoryRunCount;
  while (lo < hi) {
    const size_t mid = (lo + hi) / 2;
    if (uc::kCategoryRuns[mid].last < cp)
      lo = mid + 1;
    else
      hi = mid;
  }
  if (lo < uc::kCategoryRunCount && uc::kCategoryRuns[lo].first <= cp)
    return uc::kCategoryRuns[lo].category;
  return uc::Cn;
}

bool white_space(uint32_t cp) {
  for (size_t i = 0; i < uc::kWhiteSpaceCount; ++i)
    if (cp >= uc::kWhiteSpace[i].first && cp <= uc::kWhiteSpace[i].last) return true;
  return false;
}

uint8_t combining_class(uint32_t cp) {
  if (cp < 0x300) return 0;
  size_t lo = 0, hi = uc::kCccRunCount;
  while (lo < hi) {
    const size_t mid = (lo + hi) / 2;
    if (uc::kCccRuns[mid].last < cp)
      lo = mid + 1;
    else
      hi = mid;
  }
  if (lo < uc::kCccRunCount && uc::kCccRuns[lo].first <= cp) return uc::kCccRuns[lo].ccc;
  return 0;
}

// Character classes the pre-tokenizer regexes use, one bit each.
enum : uint8_t {
  kL = 1,       // \p{L}
  kN = 2,       // \p{N}
  kS = 4,       // \s (White_Space)
  kUpper = 8,   // [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]
  kLower = 16,  // [\p{Ll}\p{Lm}\p{Lo}\p{M}]
};

uint8_t char_class(uint32_t cp) {
  uint8_t c = white_space(cp) ? kS : 0;
  switch (category(cp)) {
    case uc::Lu:
    case uc::Lt:
      return c | kL | kUpper;
    case uc::Ll:
      return c | kL | kLower;
    case uc::Lm:
    case uc::Lo:
      return c | kL | kUpper | kLower;
    case uc::Mn:
    case uc::Mc:
    case uc::Me:
      return c | kUpper | kLower;
    case uc::Nd:
    case uc::Nl:
    case uc::No:
      return c | kN;
    default:
      return c;
  }
}

// ---- NFC --------------------------------------------------------------------------------------

constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount,
                   kSCount = kLCount * kNCount;

void decompose(uint32_t cp, std::u32string& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {  // Hangul syllable: L V (T)
    const uint32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount) out.push_back(kTBase + s % kTCount);
    return;
  }
  if (cp >= 0xC0) {
    const uc::Decomposition* b = uc::kDecompositions;
    const uc::Decomposition* e = b + uc::kDecompositionCount;
    const auto* it =
        std::lower_bound(b, e, cp, [](const uc::Decomposition& d, uint32_t c) { return d.cp < c; });
    if (it != e && it->cp == cp) {
      decompose(it->first, out);
      if (it->second) decompose(it->second, out);
      return;
    }
  }
  out.push_back(cp);
}

uint32_t compose_pair(uint32_t a, uint32_t b) {
  if (a >= kLBase && a < kLBase + kLCount && b >= kVBase && b < kVBase + kVCount)
    return kSBase + ((a - kLBase) * kVCount + (b - kVBase)) * kTCount;
  if (a >= kSBase && a < kSBase + kSCount && (a - kSBase) % kTCount == 0 && b > kTBase &&
      b < kTBase + kTCount)
    return a + (b - kTBase);
  const uc::Composition* first = uc::kCompositions;
  const uc::Composition* last = first + uc::kCompositionCount;
  const auto* it = std::lower_bound(
      first, last, std::pair(a, b), [](const uc::Composition& c, std::pair<uint32_t, uint32_t> k) {
        return c.first != k.first ? c.first < k.first : c.second < k.second;
      });
  if (it != last && it->first == a && it->second == b) return it->composite;
  return 0;
}

std::u32string nfc_code_points(const std::u32string& in) {
  // Canonical decomposition.
  std::u32string d;
  d.reserve(in.size() + 8);
  for (uint32_t cp : in) decompose(cp, d);
  // Canonical ordering: stable sort of each run of non-starters by combining class.
  std::vector<uint8_t> ccc(d.size());
  for (size_t i = 0; i < d.size(); ++i) ccc[i] = combining_class(d[i]);
  for (size_t i = 0; i < d.size();) {
    if (ccc[i] == 0) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < d.size() && ccc[j] != 0) ++j;
    for (size_t a = i + 1; a < j; ++a)  // insertion sort (stable)
      for (size_t b = a; b > i && ccc[b - 1] > ccc[b]; --b) {
        std::swap(d[b - 1], d[b]);
        std::swap(ccc[b - 1], ccc[b]);
      }
    i = j;
  }
  // Canonical composition (UAX #15): a character composes with the last starter unless blocked.
  std::u32string out;
  out.reserve(d.size());
  size_t starter = npos;
  int last_class = -1;
  for (size_t i = 0; i < d.size(); ++i) {
    const uint32_t ch = d[i];
    const int cls = ccc[i];
    if (starter != npos && (last_class < cls || last_class == 0)) {
      if (const uint32_t c = compose_pair(out[starter], ch)) {
        out[starter] = c;
        continue;
      }
    }
    if (cls == 0) {
      starter = out.size();
      last_class = 0;
    } else {
      last_class = cls;
    }
    out.push_back(ch);
  }
  return out;
}

std::string to_utf8(std::u32string_view cps) {
  std::string out;
  out.reserve(cps.size());
  for (uint32_t cp : cps) append_utf8(out, cp);
  return out;
}

// ---- pre-tokenizer regexes, matched by hand -----------------------------------------------------

enum class Pattern {
  qwen2,   // (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|
           // \s*[\r\n]+|\s+(?!\S)|\s+
  llama3,  // the same with \p{N}{1,3}
  gpt2,    // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  tekken,  // [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|
           // [^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}|
           // ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+  (Mistral NeMo, Nemotron-H)
};

constexpr const char* kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr const char* kTekkenRegex =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// The text of one piece as code points with their classes.
struct CharSeq {
  std::u32string cp;
  std::vector<uint8_t> cls;
  size_t size() const { return cp.size(); }
  bool is(size_t i, uint8_t mask) const { return i < cp.size() && (cls[i] & mask); }
  bool eq(size_t i, uint32_t c) const { return i < cp.size() && cp[i] == c; }
  bool newline(size_t i) const { return eq(i, '\r') || eq(i, '\n'); }
  // [^\s\p{L}\p{N}]
  bool other(size_t i) const { return i < cp.size() && !(cls[i] & (kS | kL | kN)); }
  // [^\r\n\p{L}\p{N}]
  bool prefix(size_t i) const { return i < cp.size() && !newline(i) && !(cls[i] & (kL | kN)); }
  size_t run(size_t i, uint8_t mask) const {
    while (is(i, mask)) ++i;
    return i;
  }
  size_t run_other(size_t i) const {
    while (other(i)) ++i;
    return i;
  }
  size_t run_newline(size_t i) const {
    while (newline(i)) ++i;
    return i;
  }
};

// Case-insensitive ASCII letter match as Oniguruma's (?i) does it: Unicode simple case folding, so
// U+017F LATIN SMALL LETTER LONG S matches 's' (the only non-ASCII fold onto s t r e v m l d).
bool fold_eq(const CharSeq& s, size_t i, char lower, bool insensitive) {
  if (i >= s.size()) return false;
  const uint32_t c = s.cp[i];
  if (c == static_cast<uint32_t>(lower)) return true;
  if (!insensitive) return false;
  if (c == static_cast<uint32_t>(lower - 'a' + 'A')) return true;
  return lower == 's' && c == 0x17F;
}

// 's|'t|'re|'ve|'m|'ll|'d at i (first alternative that matches).
size_t match_contraction(const CharSeq& s, size_t i, bool insensitive) {
  if (!s.eq(i, '\'')) return npos;
  static constexpr const char* kSuffixes[] = {"s", "t", "re", "ve", "m", "ll", "d"};
  for (const char* suf : kSuffixes) {
    size_t k = 0;
    while (suf[k] && fold_eq(s, i + 1 + k, suf[k], insensitive)) ++k;
    if (!suf[k]) return i + 1 + k;
  }
  return npos;
}

// \s*[\r\n]+ : up to and including the last newline of the white-space run at i.
size_t match_space_newlines(const CharSeq& s, size_t i) {
  const size_t e = s.run(i, kS);
  for (size_t k = e; k > i; --k)
    if (s.newline(k - 1)) return k;
  return npos;
}

// \s+(?!\S) then \s+ : a white-space run, minus its last character when a non-space follows.
size_t match_spaces(const CharSeq& s, size_t i) {
  const size_t e = s.run(i, kS);
  if (e == i) return npos;
  if (e == s.size() || e - i >= 2) return e == s.size() ? e : e - 1;
  return e;  // \s+ alone
}

// [Upper]*[Lower]+ at k (with backtracking of the greedy star).
size_t match_upper_star_lower_plus(const CharSeq& s, size_t k) {
  const size_t b = s.run(k, kUpper);
  for (size_t j = b + 1; j > k; --j)
    if (s.is(j - 1, kLower)) {
      // Lower+ from j-1 (the greedy run; only at j-1 == b can it extend past one character).
      return s.run(j - 1, kLower);
    }
  return npos;
}

// [Upper]+[Lower]* at k.
size_t match_upper_plus_lower_star(const CharSeq& s, size_t k) {
  if (!s.is(k, kUpper)) return npos;
  return s.run(s.run(k, kUpper), kLower);
}

size_t match_at(Pattern p, const CharSeq& s, size_t i) {
  size_t m;
  switch (p) {
    case Pattern::qwen2:
    case Pattern::llama3: {
      if ((m = match_contraction(s, i, true)) != npos) return m;
      if (s.is(i, kL)) return s.run(i, kL);                         // \p{L}+
      if (s.prefix(i) && s.is(i + 1, kL)) return s.run(i + 1, kL);  // [^..]\p{L}+
      if (s.is(i, kN)) {                                            // \p{N}{1 or 1,3}
        if (p == Pattern::qwen2) return i + 1;
        size_t e = i + 1;
        while (e < i + 3 && s.is(e, kN)) ++e;
        return e;
      }
      if (s.eq(i, ' ') && s.other(i + 1)) return s.run_newline(s.run_other(i + 1));
      if (s.other(i)) return s.run_newline(s.run_other(i));
      if ((m = match_space_newlines(s, i)) != npos) return m;
      return match_spaces(s, i);
    }
    case Pattern::gpt2: {
      if ((m = match_contraction(s, i, false)) != npos) return m;
      const size_t j = s.eq(i, ' ') ? i + 1 : i;  // ' ?' is greedy; each class excludes ' '
      if (s.is(j, kL)) return s.run(j, kL);
      if (s.is(i, kL)) return s.run(i, kL);
      if (s.is(j, kN)) return s.run(j, kN);
      if (s.is(i, kN)) return s.run(i, kN);
      if (s.other(j)) return s.run_other(j);
      if (s.other(i)) return s.run_other(i);
      return match_spaces(s, i);
    }
    case Pattern::tekken: {
      const bool pre = s.prefix(i);
      if (pre && (m = match_upper_star_lower_plus(s, i + 1)) != npos) return m;
      if ((m = match_upper_star_lower_plus(s, i)) != npos) return m;
      if (pre && (m = match_upper_plus_lower_star(s, i + 1)) != npos) return m;
      if ((m = match_upper_plus_lower_star(s, i)) != npos) return m;
      if (s.is(i, kN)) return i + 1;
      auto tail = [&](size_t k) {
        while (s.newline(k) || s.eq(k, '/')) ++k;
        return k;
      };
      if (s.eq(i, ' ') && s.other(i + 1)) return tail(s.run_other(i + 1));
      if (s.other(i)) return tail(s.run_other(i));
      if ((m = match_space_newlines(s, i)) != npos) return m;
      return match_spaces(s, i);
    }
  }
  return npos;
}

// Split(pattern, Isolated): matches and the gaps between them, in order, as byte ranges.
void split_isolated(Pattern p, std::string_view text, std::vector<std::string_view>& out) {
  std::vector<size_t> off;
  CharSeq s;
  s.cp = to_code_points(text, &off);
  s.cls.resize(s.cp.size());
  static const auto ascii = [] {
    std::array<uint8_t, 128> a{};
    for (uint32_t c = 0; c < 128; ++c) a[c] = char_class(c);
    return a;
  }();
  for (size_t i = 0; i < s.cp.size(); ++i)
    s.cls[i] = s.cp[i] < 0x80 ? ascii[s.cp[i]] : char_class(s.cp[i]);
  size_t gap = 0, i = 0;
  while (i < s.size()) {
    const size_t e = match_at(p, s, i);
    if (e == npos || e == i) {
      ++i;
      continue;
    }
    if (gap < i) out.push_back(text.substr(off[gap], off[i] - off[gap]));
    out.push_back(text.substr(off[i], off[e] - off[i]));
    i = gap = e;
  }
  if (gap < s.size()) out.push_back(text.substr(off[gap]));
}

// ---- GPT-2 bytes_to_unicode -----------------------------------------------------------------

struct ByteMap {
  uint32_t to_cp[256];
  std::unordered_map<uint32_t, uint8_t> to_byte;
  ByteMap() {
    uint32_t n = 0;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
      to_cp[b] = printable ? b : 256 + n++;
      to_byte[to_cp[b]] = static_cast<uint8_t>(b);
    }
  }
};
const ByteMap& byte_map() {
  static const ByteMap m;
  return m;
}

// ---- loading ----------------------------------------------------------------------------------

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("[tokenizer] cannot open ", path);
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace

struct Tokenizer::Impl {
  std::string origin;
  // model
  std::unordered_map<std::string, int32_t> vocab;
  std::vector<std::string> id_to_token;
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges;  // (a, b) -> (rank, merged)
  int32_t unk_id = -1;
  bool fuse_unk = false, ignore_merges = false;
  int32_t byte_ids[256];  // vocab id of each byte's bytes_to_unicode character (-1: missing)
  // pipeline
  bool normalize_nfc = false;
  std::optional<Pattern> split;  // Split(Regex, Isolated)
  bool byte_level = false, add_prefix_space = false, byte_level_regex = false;
  bool decode_byte_level = false;
  // added tokens
  std::vector<AddedToken> added;
  std::vector<std::string> added_match;    // what is matched (NFC of content when normalized)
  std::vector<int> by_first_byte[2][256];  // [normalized][first byte] -> added token indices
  std::vector<int8_t> special;             // per id
  std::vector<std::string> id_bytes;       // decoded bytes per id

  // Splits `text` on the added tokens with normalized == `normalized` (Hugging Face
  // AddedVocabulary::find_matches): (token index or -1, piece).
  void split_added(std::string_view text, bool normalized,
                   std::vector<std::pair<int, std::string_view>>& out) const;
  // Calls `word` with the bytes of each word the pre-tokenizer cuts from normalised text.
  void pre_tokenize(std::string_view text, const std::function<void(std::string_view)>& word) const;
  void encode_piece(std::string_view normalized_text, std::vector<int32_t>& ids) const;
  void bpe(std::string_view word, std::vector<int32_t>& ids) const;
};

namespace {

const json& member(const json& j, const char* key, const std::string& origin, const char* where) {
  if (!j.is_object() || !j.contains(key))
    fail("[tokenizer] ", origin, ": ", where, " has no \"", key, "\"");
  return j.at(key);
}

std::string type_of(const json& j) {
  if (j.is_object() && j.contains("type") && j.at("type").is_string())
    return j.at("type").get<std::string>();
  return "?";
}

bool is_word_char(uint32_t cp) {
  // Rust's char::is_alphanumeric (Alphabetic || Numeric), approximated by \p{L} | \p{N}.
  return (char_class(cp) & (kL | kN)) != 0;
}

uint32_t first_cp(std::string_view s) {
  uint32_t cp;
  utf8_step(s, 0, true, cp);
  return cp;
}
uint32_t last_cp(std::string_view s) {
  size_t i = s.size() - 1;
  while (i > 0 && (static_cast<uint8_t>(s[i]) & 0xC0) == 0x80 && s.size() - i < 4) --i;
  uint32_t cp;
  utf8_step(s, i, true, cp);
  return cp;
}

}  // namespace

void Tokenizer::Impl::split_added(std::string_view text, bool normalized,
                                  std::vector<std::pair<int, std::string_view>>& out) const {
  size_t start_offset = 0, pos = 0;
  const size_t n = text.size();
  while (pos < n) {
    // Leftmost-longest match at or after pos.
    int best = -1;
    size_t at = pos;
    for (; at < n && best < 0; ++at)
      for (int t : by_first_byte[normalized][static_cast<uint8_t>(text[at])]) {
        const std::string& m = added_match[t];
        if (text.compare(at, m.size(), m) != 0) continue;
        if (best < 0 || m.size() > added_match[best].size()) best = t;
      }
    if (best < 0) break;
    size_t start = at - 1, stop = start + added_match[best].size();
    pos = stop;
    const AddedToken& tok = added[best];
    if (tok.single_word) {
      const bool start_space = start == 0 || !is_word_char(last_cp(text.substr(0, start)));
      const bool stop_space = stop == n || !is_word_char(first_cp(text.substr(stop)));
      if (!start_space || !stop_space) continue;
    }
    if (tok.lstrip) {  // back over the white space before the token (not into the last match)
      size_t k = start;
      while (k > start_offset) {
        size_t c = k - 1;
        while (c > start_offset && (static_cast<uint8_t>(text[c]) & 0xC0) == 0x80 && k - c < 4) --c;
        uint32_t cp;
        utf8_step(text, c, true, cp);
        if (!white_space(cp)) break;
        k = c;
      }
      start = k;
    }
    if (tok.rstrip) {  // over the white space after it
      while (stop < n) {
        uint32_t cp;
        const size_t len = utf8_step(text, stop, true, cp);
        if (!white_space(cp)) break;
        stop += len;
      }
      pos = stop;
    }
    if (start_offset < start) out.emplace_back(-1, text.substr(start_offset, start - start_offset));
    out.emplace_back(best, text.substr(start, stop - start));
    start_offset = stop;
  }
  if (start_offset < n) out.emplace_back(-1, text.substr(start_offset));
}

void Tokenizer::Impl::bpe(std::string_view word, std::vector<int32_t>& ids) const {
  if (word.empty()) return;
  if (ignore_merges) {
    std::string mapped;
    for (char c : word) append_utf8(mapped, byte_map().to_cp[static_cast<uint8_t>(c)]);
    if (auto it = vocab.find(mapped); it != vocab.end()) {
      ids.push_back(it->second);
      return;
    }
  }
  struct Symbol {
    int32_t id;
    int prev, next;
    bool alive;
  };
  std::vector<Symbol> sym;
  sym.reserve(word.size());
  auto push = [&](int32_t id) {
    const int k = static_cast<int>(sym.size());
    sym.push_back({id, k - 1, k + 1, true});
  };
  bool last_unk = false;
  for (char c : word) {
    const auto b = static_cast<uint8_t>(c);
    if (byte_ids[b] >= 0) {
      push(byte_ids[b]);
      last_unk = false;
    } else if (unk_id >= 0) {  // a byte with no token: unk (fused) or, without unk, dropped
      if (!(fuse_unk && last_unk)) push(unk_id);
      last_unk = true;
    }
  }
  if (sym.empty()) return;
  sym.back().next = -1;
  struct Cand {
    int32_t rank;
    int pos;
    int32_t merged;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> queue;
  auto key = [](int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  };
  auto consider = [&](int left) {
    if (left < 0 || sym[left].next < 0) return;
    auto it = merges.find(key(sym[left].id, sym[sym[left].next].id));
    if (it != merges.end()) queue.push({it->second.first, left, it->second.second});
  };
  for (int i = 0; i + 1 < static_cast<int>(sym.size()); ++i) consider(i);
  while (!queue.empty()) {
    const Cand top = queue.top();
    queue.pop();
    Symbol& left = sym[top.pos];
    if (!left.alive || left.next < 0) continue;
    const int right = left.next;
    auto it = merges.find(key(left.id, sym[right].id));
    if (it == merges.end() || it->second.second != top.merged) continue;
    left.id = top.merged;
    left.next = sym[right].next;
    sym[right].alive = false;
    if (left.next >= 0) sym[left.next].prev = top.pos;
    consider(left.prev);
    consider(top.pos);
  }
  for (int i = 0; i >= 0; i = sym[i].next) ids.push_back(sym[i].id);
}

void Tokenizer::Impl::pre_tokenize(std::string_view text,
                                   const std::function<void(std::string_view)>& word) const {
  std::vector<std::string_view> words;
  if (split)
    split_isolated(*split, text, words);
  else
    words.push_back(text);
  std::string prefixed;
  for (std::string_view w : words) {
    if (byte_level && add_prefix_space && !w.empty() && w.front() != ' ') {
      prefixed = " ";
      prefixed += w;
      w = prefixed;
    }
    if (byte_level && byte_level_regex) {
      std::vector<std::string_view> sub;
      split_isolated(Pattern::gpt2, w, sub);
      for (std::string_view x : sub) word(x);
    } else {
      word(w);
    }
  }
}

void Tokenizer::Impl::encode_piece(std::string_view text, std::vector<int32_t>& ids) const {
  pre_tokenize(text, [&](std::string_view w) { bpe(w, ids); });
}

Tokenizer Tokenizer::from_file(const std::string& path) {
  std::string file = path;
  if (std::filesystem::is_directory(path)) file = (std::filesystem::path(path) / "tokenizer.json");
  return from_json(read_file(file), file);
}

Tokenizer Tokenizer::from_json(const std::string& text, const std::string& origin) {
  auto impl = std::make_shared<Impl>();
  Impl& t = *impl;
  t.origin = origin;
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    fail("[tokenizer] ", origin, ": not valid JSON: ", e.what());
  }
  if (!j.is_object()) fail("[tokenizer] ", origin, ": the top level is not a JSON object");
  try {
    // ---- model
    const json& model = member(j, "model", origin, "the file");
    const std::string mtype = model.contains("type") ? type_of(model) : "BPE";
    if (mtype != "BPE")
      fail("[tokenizer] ", origin, ": model type ", mtype,
           " is not supported (only byte-level BPE: Qwen2/Qwen3, GPT-NeoX, Nemotron-H, GPT-2)");
    for (const char* k : {"continuing_subword_prefix", "end_of_word_suffix"})
      if (model.contains(k) && !model.at(k).is_null() && model.at(k) != "")
        fail("[tokenizer] ", origin, ": BPE option ", k, " is not supported");
    if (model.contains("dropout") && !model.at("dropout").is_null() && model.at("dropout") != 0.0)
      fail("[tokenizer] ", origin, ": BPE dropout is not supported");
    const json& vocab = member(model, "vocab", origin, "model");
    if (!vocab.is_object()) fail("[tokenizer] ", origin, ": model.vocab is not an object");
    int32_t max_id = -1;
    for (auto it = vocab.begin(); it != vocab.end(); ++it) {
      if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0 ||
          it.value().get<int64_t>() > INT32_MAX)
        fail("[tokenizer] ", origin, ": vocab entry \"", it.key(), "\" has no valid id");
      const auto id = it.value().get<int32_t>();
      t.vocab[it.key()] = id;
      max_id = std::max(max_id, id);
    }
    if (j.contains("added_tokens") && !j.at("added_tokens").is_null()) {
      if (!j.at("added_tokens").is_array())
        fail("[tokenizer] ", origin, ": added_tokens is not an array");
      for (const json& a : j.at("added_tokens")) {
        AddedToken tok;
        const json& id = member(a, "id", origin, "an added token");
        if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > INT32_MAX)
          fail("[tokenizer] ", origin, ": added token has no valid id");
        tok.id = id.get<int32_t>();
        tok.content = member(a, "content", origin, "an added token").get<std::string>();
        tok.special = a.value("special", false);
        tok.lstrip = a.value("lstrip", false);
        tok.rstrip = a.value("rstrip", false);
        tok.normalized = a.value("normalized", !tok.special);
        tok.single_word = a.value("single_word", false);
        max_id = std::max(max_id, tok.id);
        t.added.push_back(tok);
      }
    }
    t.id_to_token.assign(static_cast<size_t>(max_id + 1), std::string());
    for (const auto& [tok, id] : t.vocab) t.id_to_token[id] = tok;
    t.special.assign(t.id_to_token.size(), 0);
    for (const AddedToken& a : t.added) {
      t.id_to_token[a.id] = a.content;
      t.special[a.id] = a.special;
    }
    if (model.contains("unk_token") && model.at("unk_token").is_string()) {
      const auto unk = model.at("unk_token").get<std::string>();
      auto it = t.vocab.find(unk);
      if (it == t.vocab.end())
        fail("[tokenizer] ", origin, ": unk_token \"", unk, "\" is not in the vocab");
      t.unk_id = it->second;
    }
    t.fuse_unk = model.value("fuse_unk", false);
    // With ByteLevel, `tokenizers` would fall back on the UTF-8 bytes of the byte-level character
    // (not of the text) and needs a ByteFallback + ByteLevel decoder chain; no byte-level file
    // uses it.
    if (model.value("byte_fallback", false))
      fail("[tokenizer] ", origin,
           ": BPE byte_fallback is not supported (byte-level BPE files never set it)");
    t.ignore_merges = model.value("ignore_merges", false);
    const json& merges = member(model, "merges", origin, "model");
    if (!merges.is_array()) fail("[tokenizer] ", origin, ": model.merges is not an array");
    int32_t rank = 0;
    for (const json& m : merges) {
      std::string a, b;
      if (m.is_string()) {  // "a b" (older files)
        const auto s = m.get<std::string>();
        const size_t sp = s.find(' ');
        if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
          fail("[tokenizer] ", origin, ": merge ", rank, " \"", s, "\" is not \"a b\"");
        a = s.substr(0, sp);
        b = s.substr(sp + 1);
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
        a = m[0].get<std::string>();
        b = m[1].get<std::string>();
      } else {
        fail("[tokenizer] ", origin, ": merge ", rank, " is neither \"a b\" nor [a, b]");
      }
      auto ia = t.vocab.find(a), ib = t.vocab.find(b), iab = t.vocab.find(a + b);
      if (ia == t.vocab.end() || ib == t.vocab.end() || iab == t.vocab.end())
        fail("[tokenizer] ", origin, ": merge ", rank, " (", a, " ", b,
             ") uses a token that is not in the vocab");
      const uint64_t k = (static_cast<uint64_t>(static_cast<uint32_t>(ia->second)) << 32) |
                         static_cast<uint32_t>(ib->second);
      t.merges.emplace(k, std::pair(rank, iab->second));  // the first (lowest) rank wins
      ++rank;
    }
    for (int b = 0; b < 256; ++b) {
      std::string ch;
      append_utf8(ch, byte_map().to_cp[b]);
      auto it = t.vocab.find(ch);
      t.byte_ids[b] = it == t.vocab.end() ? -1 : it->second;
    }

    // ---- normalizer
    if (j.contains("normalizer") && !j.at("normalizer").is_null()) {
      const json& nz = j.at("normalizer");
      std::vector<json> list;
      if (type_of(nz) == "Sequence")
        for (const json& x : member(nz, "normalizers", origin, "normalizer")) list.push_back(x);
      else
        list.push_back(nz);
      for (const json& x : list) {
        if (type_of(x) != "NFC")
          fail("[tokenizer] ", origin, ": normalizer ", type_of(x), " is not supported (only NFC)");
        t.normalize_nfc = true;
      }
    }

    // ---- pre-tokenizer
    if (j.contains("pre_tokenizer") && !j.at("pre_tokenizer").is_null()) {
      const json& pt = j.at("pre_tokenizer");
      std::vector<json> list;
      if (type_of(pt) == "Sequence")
        for (const json& x : member(pt, "pretokenizers", origin, "pre_tokenizer"))
          list.push_back(x);
      else
        list.push_back(pt);
      for (size_t i = 0; i < list.size(); ++i) {
        const json& x = list[i];
        const std::string ty = type_of(x);
        if (ty == "Split" && i == 0 && !t.split) {
          const json& pat = member(x, "pattern", origin, "Split");
          if (!pat.contains("Regex"))
            fail("[tokenizer] ", origin, ": Split with a String pattern is not supported");
          const auto re = pat.at("Regex").get<std::string>();
          if (re == kQwen2Regex)
            t.split = Pattern::qwen2;
          else if (re == kLlama3Regex)
            t.split = Pattern::llama3;
          else if (re == kGpt2Regex)
            t.split = Pattern::gpt2;
          else if (re == kTekkenRegex)
            t.split = Pattern::tekken;
          else
            fail("[tokenizer] ", origin, ": Split regex ", re,
                 " is not supported (known: the Qwen2, Llama-3, GPT-2 and Mistral-tekken "
                 "patterns)");
          const std::string behavior = x.value("behavior", std::string("Isolated"));
          if (behavior != "Isolated")
            fail("[tokenizer] ", origin, ": Split behavior ", behavior,
                 " is not supported (only Isolated)");
          if (x.value("invert", false))
            fail("[tokenizer] ", origin, ": Split with invert=true is not supported");
        } else if (ty == "ByteLevel" && i + 1 == list.size()) {
          t.byte_level = true;
          t.add_prefix_space = x.value("add_prefix_space", true);
          t.byte_level_regex = x.value("use_regex", true);
        } else {
          fail("[tokenizer] ", origin, ": pre_tokenizer ", ty,
               " is not supported here (supported: [Split(Regex, Isolated)] then ByteLevel)");
        }
      }
    }
    if (!t.byte_level)
      fail("[tokenizer] ", origin,
           ": only byte-level BPE is supported, and the pre_tokenizer has no ByteLevel step");

    // ---- decoder
    if (j.contains("decoder") && !j.at("decoder").is_null()) {
      const json& dec = j.at("decoder");
      std::vector<json> list;
      if (type_of(dec) == "Sequence")
        for (const json& x : member(dec, "decoders", origin, "decoder")) list.push_back(x);
      else
        list.push_back(dec);
      for (const json& x : list) {
        const std::string ty = type_of(x);
        if (ty == "ByteLevel")
          t.decode_byte_level = true;
        else if (ty != "Fuse")
          fail("[tokenizer] ", origin, ": decoder ", ty,
               " is not supported (supported: ByteLevel, Fuse)");
      }
    }
  } catch (const json::exception& e) {
    fail("[tokenizer] ", origin, ": unexpected JSON structure: ", e.what());
  }

  for (size_t i = 0; i < t.added.size(); ++i) {
    const AddedToken& a = t.added[i];
    t.added_match.push_back(a.normalized && t.normalize_nfc ? nfc(a.content) : a.content);
    if (!t.added_match.back().empty())
      t.by_first_byte[a.normalized][static_cast<uint8_t>(t.added_match.back()[0])].push_back(
          static_cast<int>(i));
  }

  // Bytes of each token: the ByteLevel decoder maps every character back to its byte; a token with
  // a character outside the map keeps its own UTF-8 (as `tokenizers` does).
  const ByteMap& bm = byte_map();
  t.id_bytes.resize(t.id_to_token.size());
  for (size_t id = 0; id < t.id_to_token.size(); ++id) {
    const std::string& tok = t.id_to_token[id];
    std::string bytes = tok;
    if (t.decode_byte_level) {
      std::string mapped;
      bool ok = true;
      for (uint32_t cp : to_code_points(tok)) {
        auto it = bm.to_byte.find(cp);
        if (it == bm.to_byte.end()) {
          ok = false;
          break;
        }
        mapped += static_cast<char>(it->second);
      }
      if (ok) bytes = mapped;
    }
    t.id_bytes[id] = bytes;
  }
  return Tokenizer(std::move(impl));
}

std::vector<int32_t> Tokenizer::encode(std::string_view utf8) const {
  const Impl& t = *impl_;
  // Input that is not valid UTF-8 is repaired (U+FFFD) first, as every later step needs code
  // points.
  const std::string repaired = utf8_repair(utf8, true, nullptr);
  if (repaired != utf8) utf8 = repaired;
  std::vector<int32_t> ids;
  std::vector<std::pair<int, std::string_view>> raw, norm;
  t.split_added(utf8, false, raw);
  for (const auto& [tok, piece] : raw) {
    if (tok >= 0) {
      ids.push_back(t.added[tok].id);
      continue;
    }
    const std::string normalized = t.normalize_nfc ? nfc(piece) : std::string(piece);
    norm.clear();
    t.split_added(normalized, true, norm);
    for (const auto& [tok2, piece2] : norm) {
      if (tok2 >= 0)
        ids.push_back(t.added[tok2].id);
      else
        t.encode_piece(piece2, ids);
    }
  }
  return ids;
}

std::string Tokenizer::decode_bytes(std::span<const int32_t> ids, bool skip_special) const {
  const Impl& t = *impl_;
  std::string out;
  for (int32_t id : ids) {
    if (id < 0 || static_cast<size_t>(id) >= t.id_bytes.size()) continue;
    if (skip_special && t.special[id]) continue;
    out += t.id_bytes[id];
  }
  return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  return utf8_repair(decode_bytes(ids, skip_special), true, nullptr);
}

std::vector<std::string> Tokenizer::pre_tokenize(std::string_view text) const {
  const std::string repaired = utf8_repair(text, true, nullptr);
  std::vector<std::string> out;
  const ByteMap& bm = byte_map();
  impl_->pre_tokenize(repaired, [&](std::string_view w) {
    std::string mapped;
    for (char c : w) append_utf8(mapped, bm.to_cp[static_cast<uint8_t>(c)]);
    out.push_back(std::move(mapped));
  });
  return out;
}

int32_t Tokenizer::vocab_size() const {
  return static_cast<int32_t>(impl_->id_to_token.size());
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  for (const AddedToken& a : impl_->added)
    if (a.content == token) return a.id;
  auto it = impl_->vocab.find(std::string(token));
  if (it == impl_->vocab.end()) return std::nullopt;
  return it->second;
}

const std::string& Tokenizer::id_to_token(int32_t id) const {
  static const std::string empty;
  if (id < 0 || id >= vocab_size()) return empty;
  return impl_->id_to_token[id];
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && id < vocab_size() && impl_->special[id];
}

const std::vector<AddedToken>& Tokenizer::added_tokens() const {
  return impl_->added;
}
const std::string& Tokenizer::origin() const {
  return impl_->origin;
}

IncrementalDecoder::IncrementalDecoder(const Tokenizer& tokenizer, bool skip_special)
    : tokenizer_(tokenizer), skip_special_(skip_special) {}

std::string IncrementalDecoder::push(int32_t id) {
  const int32_t one[1] = {id};
  const std::string bytes = pending_ + tokenizer_.decode_bytes(one, skip_special_);
  return utf8_repair(bytes, false, &pending_);
}

std::string IncrementalDecoder::flush() {
  const std::string out = utf8_repair(pending_, true, nullptr);
  pending_.clear();
  return out;
}

std::string nfc(std::string_view utf8) {
  bool ascii = true;
  for (char c : utf8) ascii &= static_cast<uint8_t>(c) < 0x80;
  if (ascii) return std::string(utf8);
  const std::u32string cps = to_code_points(utf8);
  bool quick = true;  // below U+0300 every character is already NFC and a starter
  for (uint32_t cp : cps) quick &= cp < 0x300;
  if (quick) return to_utf8(cps);
  return to_utf8(nfc_code_points(cps));
}

const char* unicode_version() {
  return uc::kUnicodeVersion;
}

std::string chatml_format(std::span<const ChatMessage> messages, bool add_generation_prompt) {
  std::string out;
  for (const ChatMessage& m : messages) {
    out += "<|im_start|>";
    out += m.role;
    out += '\n';
    out += m.content;
    out += "<|im_end|>\n";
  }
  if (add_generation_prompt) out += "<|im_start|>assistant\n";
  return out;
}

std::string chatml_prompt(std::string_view user, std::string_view system) {
  std::vector<ChatMessage> messages;
  if (!system.empty()) messages.push_back({"system", std::string(system)});
  messages.push_back({"user", std::string(user)});
  return chatml_format(messages, true);
}

}  // namespace hybrid
