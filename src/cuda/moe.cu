// CUDA kernels of the moe family (none yet: its ops dispatch to an Unsupported error on CUDA).
#include "cuda/kernels.h"

namespace hybrid::cuda {

void register_moe(Registry& r) { (void)r; }

}  // namespace hybrid::cuda
