// The CUDA backend's kernel table. An op with no CUDA variant yet dispatches to an Unsupported
// error naming it (a SKIP in hybrid-ops).
#include "cuda/kernels.h"

namespace hybrid {

void register_cuda_kernels(Registry& r) {
  cuda::register_norm(r);
  cuda::register_gdn(r);
}

}  // namespace hybrid
