#include "ops/cases.h"

namespace hybrid::test {

CaseList all_cases() {
  CaseList cases;
  add_norm_cases(cases);
  add_elementwise_cases(cases);
  add_rope_cases(cases);
  add_linear_cases(cases);
  add_quant_cases(cases);
  add_embed_cases(cases);
  add_sampling_cases(cases);
  add_attention_cases(cases);
  add_conv_cases(cases);
  add_moe_cases(cases);
  add_gdn_cases(cases);
  add_gdn_chunk_cases(cases);
  add_ssm_cases(cases);
  return cases;
}

}  // namespace hybrid::test
