#include "hybrid/core/registry.h"

#include <algorithm>
#include <cstring>
#include <tuple>

namespace hybrid {

void Registry::insert(Entry e) {
  auto key = [](const Entry& x) {
    return std::make_tuple(std::string_view(x.info.op), static_cast<int>(x.info.device),
                           -x.info.priority);
  };
  auto pos = std::upper_bound(entries_.begin(), entries_.end(), e,
                              [&](const Entry& a, const Entry& b) { return key(a) < key(b); });
  entries_.insert(pos, std::move(e));
}

std::vector<KernelInfo> Registry::list() const {
  std::vector<KernelInfo> out;
  for (const Entry& e : entries_) out.push_back(e.info);
  return out;
}

bool Registry::has_kernel(const std::string& op, DeviceType device) const {
  for (const Entry& e : entries_)
    if (e.info.op == op && e.info.device == device) return true;
  return false;
}

const Registry::Entry& Registry::select_erased(const char* op, const void* args, DeviceType device,
                                               const Context& ctx) const {
  std::string reasons;
  bool any = false;
  for (const Entry& e : entries_) {
    if (e.info.device != device || e.info.op != op) continue;
    any = true;
    Reason why = e.supports ? e.supports(args) : Reason{};
    if (!why) return e;
    ctx.log(LogLevel::debug, str("[", op, "] ", e.info.name, " refused: ", *why));
    reasons += str("\n  ", e.info.name, ": ", *why);
  }
  if (!any)
    throw Unsupported(str("[", op, "] has no ", to_string(device), " kernel in this build"));
  throw Unsupported(
      str("[", op, "] no ", to_string(device), " kernel supports this call:", reasons));
}

void Registry::dispatch_erased(const char* op, const void* args, Device device,
                               Context& ctx) const {
  if (ctx.device().type != device.type || (device.is_cuda() && ctx.device().index != device.index))
    fail("[", op, "] tensors are on ", to_string(device), " but the context is ",
         to_string(ctx.device()));
  select_erased(op, args, device.type, ctx).run(args, ctx);
}

const Registry& Registry::builtin() {
  static const Registry registry = [] {
    Registry r;
    register_cpu_kernels(r);
    register_cuda_kernels(r);
    return r;
  }();
  return registry;
}

}  // namespace hybrid
