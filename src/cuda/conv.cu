// CUDA kernels of the conv family (none yet: its ops dispatch to an Unsupported error on CUDA).
#include "cuda/kernels.h"

namespace hybrid::cuda {

void register_conv(Registry& r) { (void)r; }

}  // namespace hybrid::cuda
