#include "cpu/kernels.h"

namespace hybrid::cpu {

void register_attention(Registry& r) { (void)r; }

}  // namespace hybrid::cpu
