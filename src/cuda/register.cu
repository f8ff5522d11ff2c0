// The CUDA backend's kernel table. Each op family's src/cuda/<family>.cu adds its variants here as
// it lands; an op with no CUDA variant yet dispatches to an Unsupported error naming it.
#include "hybrid/core/registry.h"

namespace hybrid {

void register_cuda_kernels(Registry& r) { (void)r; }

}  // namespace hybrid
