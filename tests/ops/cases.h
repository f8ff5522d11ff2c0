// One add_<family>_cases per op family (tests/ops/<family>_cases.cpp).
#pragma once

#include "ops/harness.h"

namespace hybrid::test {

void add_norm_cases(CaseList& cases);
void add_elementwise_cases(CaseList& cases);
void add_rope_cases(CaseList& cases);
void add_linear_cases(CaseList& cases);
void add_quant_cases(CaseList& cases);
void add_embed_cases(CaseList& cases);
void add_sampling_cases(CaseList& cases);
void add_attention_cases(CaseList& cases);
void add_conv_cases(CaseList& cases);
void add_moe_cases(CaseList& cases);
void add_gdn_cases(CaseList& cases);
void add_gdn_chunk_cases(CaseList& cases);
void add_ssm_cases(CaseList& cases);

}  // namespace hybrid::test
