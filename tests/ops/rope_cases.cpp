#include "ops/cases.h"

namespace hybrid::test {

void add_rope_cases(CaseList& cases) { (void)cases; }

}  // namespace hybrid::test
