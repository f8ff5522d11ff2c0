// Unicode data tables of the tokenizer (generated into unicode_tables.cpp by
// scripts/gen_unicode_tables.py from Python's unicodedata) and the lookups built on them.
#pragma once

#include <cstddef>
#include <cstdint>

namespace hybrid::unicode {

struct CategoryRun {
  uint32_t first, last;
  uint8_t category;  // index into the category list below
};
struct Range {
  uint32_t first, last;
};
struct CccRun {
  uint32_t first, last;
  uint8_t ccc;  // canonical combining class (non-zero)
};
struct Decomposition {
  uint32_t cp, first, second;  // second == 0: singleton decomposition
};
struct Composition {
  uint32_t first, second, composite;
};

// General categories, in the order of the generated table.
enum Category : uint8_t {
  Cn,
  Lu,
  Ll,
  Lt,
  Lm,
  Lo,
  Mn,
  Mc,
  Me,
  Nd,
  Nl,
  No,
  Pc,
  Pd,
  Ps,
  Pe,
  Pi,
  Pf,
  Po,
  Sm,
  Sc,
  Sk,
  So,
  Zs,
  Zl,
  Zp,
  Cc,
  Cf,
  Cs,
  Co,
};

extern const char* const kUnicodeVersion;  // of the Python unicodedata the tables came from
extern const CategoryRun kCategoryRuns[];
extern const size_t kCategoryRunCount;
extern const Range kWhiteSpace[];
extern const size_t kWhiteSpaceCount;
extern const CccRun kCccRuns[];
extern const size_t kCccRunCount;
extern const Decomposition kDecompositions[];
extern const size_t kDecompositionCount;
extern const Composition kCompositions[];
extern const size_t kCompositionCount;

}  // namespace hybrid::unicode
