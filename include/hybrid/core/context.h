// Context: everything an op needs besides its arguments. The device it runs on, the stream, the
// workspace, options and the log. Nothing global and mutable hides elsewhere.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "hybrid/core/device.h"
#include "hybrid/core/tensor.h"

namespace hybrid {

class Registry;

enum class LogLevel : int { error = 0, warn = 1, info = 2, debug = 3 };
std::string_view to_string(LogLevel level);
LogLevel parse_log_level(const std::string& name);  // "error" | "warn" | "info" | "debug"

struct Options {
  int cpu_threads = 0;  // CPU backend threads; 0 = all hardware threads
};

class Context {
 public:
  // A CUDA context creates and owns a non-blocking stream on that device.
  explicit Context(Device device = Device::cpu());
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  Device device() const { return device_; }
  // The cudaStream_t (as void*, so that this header needs no CUDA headers); null on the CPU.
  void* stream() const { return stream_; }
  // Use a stream the caller owns (the context will not destroy it).
  void set_stream(void* stream);
  // Waits for everything queued on the stream (no-op on the CPU).
  void synchronize();

  // Scratch memory on the context's device, valid until the next call that asks for more.
  // Growth allocates, so call reserve_workspace() before a CUDA graph capture.
  void* workspace(size_t bytes);
  void reserve_workspace(size_t bytes) { workspace(bytes); }
  size_t workspace_bytes() const { return workspace_.bytes(); }

  Options& options() { return options_; }
  const Options& options() const { return options_; }
  int cpu_threads() const;

  LogLevel log_level() const { return log_level_; }
  void set_log_level(LogLevel level) { log_level_ = level; }
  // Where log lines go (default: standard error, as "hybrid [debug] ...").
  void set_log_sink(std::function<void(LogLevel, std::string_view)> sink);
  void log(LogLevel level, std::string_view message) const;

  // The cuBLASLt handle of a CUDA context (cublasLtHandle_t as void*), created on first use and
  // destroyed with the context. Create it before a CUDA-graph capture (call this once).
  void* blas_handle();
  // The cuDNN handle of a CUDA context (cudnnHandle_t as void*), created on first use and
  // destroyed with the context; only in builds with HYBRID_CUDNN (attn_prefill.cudnn), others
  // throw. Create it before a CUDA-graph capture (the first attn_prefill call does).
  void* dnn_handle();

  // The kernels ops dispatch to (default: Registry::builtin()).
  const Registry& registry() const { return *registry_; }
  void set_registry(const Registry* registry) { registry_ = registry; }

 private:
  Device device_;
  void* stream_ = nullptr;
  bool owns_stream_ = false;
  void* blas_handle_ = nullptr;
  void* dnn_handle_ = nullptr;
  Buffer workspace_;
  Options options_;
  LogLevel log_level_ = LogLevel::warn;
  std::function<void(LogLevel, std::string_view)> sink_;
  const Registry* registry_ = nullptr;
};

}  // namespace hybrid
