// The CUDA backend: one register function per op family (src/cuda/<family>.cu).
#pragma once

#include "hybrid/core/registry.h"

namespace hybrid::cuda {

void register_norm(Registry& r);
void register_gdn(Registry& r);

}  // namespace hybrid::cuda
