// The CPU backend: one register function per op family (src/cpu/<family>.cpp).
#pragma once

#include "hybrid/core/registry.h"

namespace hybrid::cpu {

void register_norm(Registry& r);
void register_elementwise(Registry& r);
void register_rope(Registry& r);
void register_linear(Registry& r);
void register_quant(Registry& r);
void register_embed(Registry& r);
void register_sampling(Registry& r);
void register_attention(Registry& r);
void register_conv(Registry& r);
void register_moe(Registry& r);
void register_gdn(Registry& r);
void register_gdn_chunk(Registry& r);
void register_ssm(Registry& r);

}  // namespace hybrid::cpu
