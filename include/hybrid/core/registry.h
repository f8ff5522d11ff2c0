// Registry: the explicit table of kernel variants behind every op.
//
// Each backend fills it from one function (register_cpu_kernels, register_cuda_kernels); nothing
// registers itself at static-initialisation time. A variant states its limits in code:
// supports(args) returns the reason it cannot run the call, or nullopt. dispatch() runs the
// highest-priority variant on the call's device that supports it; a refusing faster variant has
// its reason logged at debug level, and when none supports the call the error lists every reason.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "hybrid/core/context.h"
#include "hybrid/core/device.h"
#include "hybrid/core/error.h"

namespace hybrid {

using Reason = std::optional<std::string>;  // nullopt = supported

struct KernelInfo {
  std::string op;    // "rms_norm"
  std::string name;  // "rms_norm.cpu"
  DeviceType device;
  int priority;
};

class Registry {
 public:
  // Args must have `static constexpr const char* op_name`.
  template <class Args>
  void add(std::string name, DeviceType device, int priority, Reason (*supports)(const Args&),
           void (*run)(const Args&, Context&)) {
    Entry e;
    e.info = {Args::op_name, std::move(name), device, priority};
    if (supports)
      e.supports = [supports](const void* a) { return supports(*static_cast<const Args*>(a)); };
    e.run = [run](const void* a, Context& ctx) { run(*static_cast<const Args*>(a), ctx); };
    insert(std::move(e));
  }

  // Runs the best variant of Args::op_name for `device` that supports `args`.
  template <class Args>
  void dispatch(const Args& args, Device device, Context& ctx) const {
    dispatch_erased(Args::op_name, &args, device, ctx);
  }

  // The name of the variant dispatch() would pick, or the error it would throw.
  template <class Args>
  std::string select(const Args& args, DeviceType device, const Context& ctx) const {
    return select_erased(Args::op_name, &args, device, ctx).info.name;
  }

  std::vector<KernelInfo> list() const;
  bool has_kernel(const std::string& op, DeviceType device) const;

  // Every kernel compiled into this build (the CPU backend, and CUDA when it is built). Built once
  // on first use and never changed after: the only process-wide object in the library.
  static const Registry& builtin();

 private:
  struct Entry {
    KernelInfo info;
    std::function<Reason(const void*)> supports;  // empty = supports every valid call
    std::function<void(const void*, Context&)> run;
  };
  void insert(Entry e);
  const Entry& select_erased(const char* op, const void* args, DeviceType device,
                             const Context& ctx) const;
  void dispatch_erased(const char* op, const void* args, Device device, Context& ctx) const;

  std::vector<Entry> entries_;  // sorted by op, then device, then priority (highest first)
};

// Filled by each backend (src/cpu/register.cpp, src/cuda/register.cu or src/cuda/no_cuda.cpp).
void register_cpu_kernels(Registry& registry);
void register_cuda_kernels(Registry& registry);

}  // namespace hybrid
