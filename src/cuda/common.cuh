// Shared by every CUDA file: checked CUDA calls and launches.
#pragma once

#include <cuda_runtime.h>

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
