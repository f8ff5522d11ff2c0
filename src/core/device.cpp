#include "hybrid/core/device.h"

#include "core/cuda_api.h"
#include "hybrid/core/error.h"

namespace hybrid {

std::string to_string(DeviceType t) {
  return t == DeviceType::cpu ? "cpu" : "cuda";
}

std::string to_string(Device d) {
  return d.is_cpu() ? "cpu" : "cuda:" + std::to_string(d.index);
}

Device parse_device(const std::string& s) {
  if (s == "cpu") return Device::cpu();
  if (s == "cuda") return Device::cuda(0);
  if (s.rfind("cuda:", 0) == 0) {
    const std::string idx = s.substr(5);
    if (!idx.empty() && idx.find_first_not_of("0123456789") == std::string::npos)
      return Device::cuda(std::stoi(idx));
  }
  fail("[device] '", s, "' is not a device: expected cpu, cuda or cuda:N");
}

bool cuda_compiled() {
  return cuda_api::compiled();
}
int cuda_device_count() {
  return cuda_api::device_count();
}

}  // namespace hybrid
