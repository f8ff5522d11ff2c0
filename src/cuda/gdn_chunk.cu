// CUDA kernels of the gdn_chunk family (none yet: its ops dispatch to an Unsupported error on CUDA).
#include "cuda/kernels.h"

namespace hybrid::cuda {

void register_gdn_chunk(Registry& r) { (void)r; }

}  // namespace hybrid::cuda
