#include "ops/cases.h"

namespace hybrid::test {

void add_gdn_chunk_cases(CaseList& cases) { (void)cases; }

}  // namespace hybrid::test
