// Shared by every CUDA file: checked CUDA calls and launches.
#pragma once

#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>
#include <utility>

#include "hybrid/core/error.h"

namespace hybrid::cuda {

[[noreturn]] inline void cuda_error(const char* stmt, const char* file, int line, cudaError_t e) {
  fail("[cuda] ", stmt, " failed at ", file, ":", line, ": ", cudaGetErrorName(e), ": ",
       cudaGetErrorString(e));
}

inline cudaStream_t as_stream(void* s) {
  return static_cast<cudaStream_t>(s);
}

}  // namespace hybrid::cuda

// Every CUDA runtime call goes through this; a failure throws hybrid::Error with the statement,
// file and line.
#define HYBRID_CUDA_CHECK(stmt)                                           \
  do {                                                                    \
    cudaError_t hybrid_err_ = (stmt);                                     \
    if (hybrid_err_ != cudaSuccess)                                       \
      ::hybrid::cuda::cuda_error(#stmt, __FILE__, __LINE__, hybrid_err_); \
  } while (0)

// After every kernel launch.
#define HYBRID_CUDA_CHECK_LAUNCH() HYBRID_CUDA_CHECK(cudaGetLastError())

namespace hybrid::cuda {

// kernel<<<grid, block, smem, stream>>>(args...), with programmatic stream serialisation when
// `programmatic` (the kernel may start while the stream's previous kernel runs; it waits for that
// one's writes in griddepcontrol.wait), else a plain launch.
template <class... Params, class... Args>
void launch_programmatic(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                         cudaStream_t stream, bool programmatic, Args... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = programmatic ? 1 : 0;
  HYBRID_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, args...));
}

}  // namespace hybrid::cuda

namespace hybrid::cuda {

// Raises `kernel`'s dynamic shared-memory opt-in (cudaFuncAttributeMaxDynamicSharedMemorySize) to
// at least `bytes` on the current device, never lowering it. The attribute belongs to the kernel,
// not to a stream or context: a launch that set it to its own size could make a concurrent launch
// of the same kernel with a larger size (another host thread, another Context) fail. Only grown,
// it stays valid for every size already launched. Thread-safe; one driver call per new maximum.
inline void ensure_dynamic_smem(const void* kernel, size_t bytes) {
  static std::mutex mu;
  static std::map<std::pair<const void*, int>, size_t> granted;
  int dev = 0;
  HYBRID_CUDA_CHECK(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lock(mu);
  size_t& g = granted[{kernel, dev}];
  if (bytes <= g) return;
  HYBRID_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(bytes)));
  g = bytes;
}

template <class Kernel>
void ensure_dynamic_smem(Kernel* kernel, size_t bytes) {
  ensure_dynamic_smem(reinterpret_cast<const void*>(kernel), bytes);
}

// True when the environment variable `name` is set to "0": the switch by which a kernel variant's
// supports() refuses (HYBRID_LINEAR_Q_V4=0, ...), so that the variant below it can be tested and
// timed from the same build. supports() runs on every call of an op: callers keep the answer in a
// function-local static (read once per process).
inline bool env_is_zero(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && std::strcmp(v, "0") == 0;
}

// True when the environment variable `name` is set, non-empty and not "0": an opt-in switch
// (HYBRID_ATTN_PREFILL_CUDNN=1, HYBRID_SSM_CHUNK_STAGES=1).
inline bool env_on(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' && std::strcmp(v, "0") != 0;
}

// An integer environment variable, or `fallback` when unset or not a number
// (HYBRID_GDN_CHUNK_PIPE_CHUNKS=64, HYBRID_ATTN_SPLITS=33).
inline int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  return *end == '\0' ? static_cast<int>(x) : fallback;
}

// The current device's SM count and compute capability (major), cached per device so that a
// decode step pays no driver query after the first.
struct DeviceInfo {
  int sms = 0, major = 0;
};

inline DeviceInfo device_info() {
  static std::mutex mu;
  static std::map<int, DeviceInfo> cache;
  int dev = 0;
  HYBRID_CUDA_CHECK(cudaGetDevice(&dev));
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(dev);
  if (it != cache.end()) return it->second;
  DeviceInfo d;
  HYBRID_CUDA_CHECK(cudaDeviceGetAttribute(&d.sms, cudaDevAttrMultiProcessorCount, dev));
  HYBRID_CUDA_CHECK(cudaDeviceGetAttribute(&d.major, cudaDevAttrComputeCapabilityMajor, dev));
  cache.emplace(dev, d);
  return d;
}

inline int sm_count() {
  return device_info().sms;
}

// Blocks of `kernel` resident per SM with `threads` threads and `smem` dynamic shared-memory
// bytes (the kernel's dynamic limit raised to `smem` first), cached per (kernel, device, threads,
// smem) so that a launch pays no driver query after the first of its shape.
inline int resident_blocks(const void* kernel, int threads, size_t smem) {
  static std::mutex mu;
  static std::map<std::tuple<const void*, int, int, size_t>, int> cache;
  int dev = 0;
  HYBRID_CUDA_CHECK(cudaGetDevice(&dev));
  const auto key = std::make_tuple(kernel, dev, threads, smem);
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
  }
  ensure_dynamic_smem(kernel, smem);
  int per_sm = 0;
  HYBRID_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, threads, smem));
  per_sm = per_sm > 0 ? per_sm : 1;
  std::lock_guard<std::mutex> lock(mu);
  cache.emplace(key, per_sm);
  return per_sm;
}

template <class Kernel>
int resident_blocks(Kernel* kernel, int threads, size_t smem) {
  return resident_blocks(reinterpret_cast<const void*>(kernel), threads, smem);
}

// Blocks of a persistent grid over `items` items: SMs × resident blocks, capped by the items.
inline int64_t persistent_blocks(const void* kernel, int threads, size_t smem, int64_t items) {
  const int64_t blocks = int64_t{device_info().sms} * resident_blocks(kernel, threads, smem);
  return blocks < items ? blocks : items;
}

}  // namespace hybrid::cuda
