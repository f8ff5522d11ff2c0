// CUDA kernels of the rope family (none yet: its ops dispatch to an Unsupported error on CUDA).
#include "cuda/kernels.h"

namespace hybrid::cuda {

void register_rope(Registry& r) { (void)r; }

}  // namespace hybrid::cuda
