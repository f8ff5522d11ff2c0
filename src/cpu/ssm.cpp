#include "cpu/kernels.h"

namespace hybrid::cpu {

void register_ssm(Registry& r) { (void)r; }

}  // namespace hybrid::cpu
