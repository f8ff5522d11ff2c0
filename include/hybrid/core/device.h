// Where a tensor lives and where an op runs.
#pragma once

#include <cstdint>
#include <string>

namespace hybrid {

enum class DeviceType : uint8_t { cpu, cuda };

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;

  static constexpr Device cpu() { return {DeviceType::cpu, 0}; }
  static constexpr Device cuda(int index = 0) { return {DeviceType::cuda, index}; }
  bool is_cpu() const { return type == DeviceType::cpu; }
  bool is_cuda() const { return type == DeviceType::cuda; }
  bool operator==(const Device&) const = default;
};

std::string to_string(Device d);          // "cpu", "cuda:0"
std::string to_string(DeviceType t);      // "cpu", "cuda"
Device parse_device(const std::string&);  // "cpu", "cuda", "cuda:1"; throws hybrid::Error

// True when this build has the CUDA backend compiled in.
bool cuda_compiled();
// Number of CUDA devices usable now: 0 without the CUDA backend, a driver or a GPU.
int cuda_device_count();

}  // namespace hybrid
