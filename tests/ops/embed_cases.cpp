#include "ops/cases.h"

namespace hybrid::test {

void add_embed_cases(CaseList& cases) { (void)cases; }

}  // namespace hybrid::test
