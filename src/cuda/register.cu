// The CUDA backend's kernel table. An op with no CUDA variant yet dispatches to an Unsupported
// error naming it (a SKIP in hybrid-ops).
#include "cuda/kernels.h"

namespace hybrid {

void register_cuda_kernels(Registry& r) {
  cuda::register_norm(r);
  cuda::register_gdn(r);
  cuda::register_elementwise(r);
  cuda::register_rope(r);
  cuda::register_embed(r);
  cuda::register_sampling(r);
  cuda::register_conv(r);
  cuda::register_attention(r);
#if HYBRID_HAS_CUDNN
  cuda::register_attention_prefill_cudnn(r);  // -DHYBRID_CUDNN=ON: cuDNN's fused SDPA prefill
#endif
  cuda::register_linear(r);
  cuda::register_quant(r);
  cuda::register_moe(r);
  cuda::register_ssm(r);
  cuda::register_ssm_chunk(r);
  cuda::register_gdn_chunk(r);
}

}  // namespace hybrid
