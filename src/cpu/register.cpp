#include "cpu/kernels.h"

namespace hybrid {

void register_cpu_kernels(Registry& r) {
  cpu::register_norm(r);
  cpu::register_elementwise(r);
  cpu::register_rope(r);
  cpu::register_linear(r);
  cpu::register_quant(r);
  cpu::register_embed(r);
  cpu::register_sampling(r);
  cpu::register_attention(r);
  cpu::register_conv(r);
  cpu::register_moe(r);
  cpu::register_gdn(r);
  cpu::register_gdn_chunk(r);
  cpu::register_ssm(r);
}

}  // namespace hybrid
