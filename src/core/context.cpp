#include "hybrid/core/context.h"

#include <omp.h>

#include <cstdio>

#include "core/cuda_api.h"
#include "hybrid/core/error.h"
#include "hybrid/core/registry.h"

namespace hybrid {

std::string_view to_string(LogLevel level) {
  switch (level) {
    case LogLevel::error:
      return "error";
    case LogLevel::warn:
      return "warn";
    case LogLevel::info:
      return "info";
    case LogLevel::debug:
      return "debug";
  }
  return "?";
}

LogLevel parse_log_level(const std::string& name) {
  for (LogLevel l : {LogLevel::error, LogLevel::warn, LogLevel::info, LogLevel::debug})
    if (name == to_string(l)) return l;
  fail("[log] '", name, "' is not a log level: expected error, warn, info or debug");
}

Context::Context(Device device) : device_(device), registry_(&Registry::builtin()) {
  if (device.is_cuda()) {
    if (!cuda_api::compiled())
      fail("[context] ", to_string(device), " asked for, but hybrid was built without CUDA");
    const int n = cuda_api::device_count();
    if (device.index < 0 || device.index >= n)
      fail("[context] ", to_string(device), " asked for, but ", n, " CUDA device(s) are present");
    stream_ = cuda_api::stream_create(device.index);
    owns_stream_ = true;
  }
}

Context::~Context() {
  if (blas_handle_) cuda_api::blas_destroy(blas_handle_);
  if (dnn_handle_) cuda_api::dnn_destroy(dnn_handle_);
  if (owns_stream_) cuda_api::stream_destroy(stream_);
}

void* Context::blas_handle() {
  if (!device_.is_cuda()) fail("[context] blas_handle on a ", to_string(device_), " context");
  if (!blas_handle_) blas_handle_ = cuda_api::blas_create(device_.index);
  return blas_handle_;
}

void* Context::dnn_handle() {
  if (!device_.is_cuda()) fail("[context] dnn_handle on a ", to_string(device_), " context");
  if (!dnn_handle_) dnn_handle_ = cuda_api::dnn_create(device_.index);
  return dnn_handle_;
}

void Context::set_stream(void* stream) {
  if (!device_.is_cuda()) fail("[context] set_stream on a ", to_string(device_), " context");
  if (owns_stream_) cuda_api::stream_destroy(stream_);
  stream_ = stream;
  owns_stream_ = false;
}

void Context::synchronize() {
  if (device_.is_cuda()) cuda_api::stream_synchronize(stream_);
}

void* Context::workspace(size_t bytes) {
  if (bytes > workspace_.bytes()) {
    // The old workspace may still be in use by queued work: wait before freeing it.
    synchronize();
    workspace_ = Buffer(device_, bytes);
  }
  return workspace_.data();
}

int Context::cpu_threads() const {
  return options_.cpu_threads > 0 ? options_.cpu_threads : omp_get_max_threads();
}

void Context::set_log_sink(std::function<void(LogLevel, std::string_view)> sink) {
  sink_ = std::move(sink);
}

void Context::log(LogLevel level, std::string_view message) const {
  if (static_cast<int>(level) > static_cast<int>(log_level_)) return;
  if (sink_) {
    sink_(level, message);
    return;
  }
  std::fprintf(stderr, "hybrid [%s] %.*s\n", to_string(level).data(),
               static_cast<int>(message.size()), message.data());
}

}  // namespace hybrid
