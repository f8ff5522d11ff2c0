#include "cpu/kernels.h"

namespace hybrid::cpu {

void register_moe(Registry& r) { (void)r; }

}  // namespace hybrid::cpu
