#include "cpu/kernels.h"

namespace hybrid::cpu {

void register_embed(Registry& r) { (void)r; }

}  // namespace hybrid::cpu
