// The GPU's measured ceilings: what every benchmark result is a fraction of.
//   copy: cudaMemcpyAsync device-to-device of 1 GiB; GB/s = 2 · bytes / time (read + write).
//   GEMM: cublasGemmEx bf16 × bf16 -> bf16, f32 accumulate, M = N = K = 8192 on random data;
//         TFLOP/s = 2·M·N·K / time.
// Each: warm-up, then the median of 10 timed repetitions.
// And the L2 flush every benchmark runs before each timed repetition (l2_flush_clean).
#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <vector>

#include "core/cuda_api.h"
#include "cuda/common.cuh"

namespace hybrid::cuda_api {

namespace {

#define HYBRID_CUBLAS_CHECK(stmt)                                                    \
  do {                                                                               \
    cublasStatus_t s_ = (stmt);                                                      \
    if (s_ != CUBLAS_STATUS_SUCCESS)                                                 \
      ::hybrid::fail("[cuda] ", #stmt, " failed at ", __FILE__, ":", __LINE__, ": ", \
                     cublasGetStatusString(s_));                                     \
  } while (0)

__global__ void fill_random_bf16(__nv_bfloat16* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n;
       i += size_t(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u ^ seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    p[i] = __float2bfloat16((h & 0xffff) / 65536.0f - 0.5f);
  }
}

// Reads `words` 16-byte words and folds them into one word, written only when the fold hits a
// value the flush buffer cannot produce (so the loads are not dead code and nothing is stored).
__global__ void read_all(const uint4* __restrict__ p, size_t words, uint32_t* __restrict__ sink) {
  uint32_t fold = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < words;
       i += size_t(gridDim.x) * blockDim.x) {
    const uint4 w = p[i];
    fold ^= w.x ^ w.y ^ w.z ^ w.w;
  }
  if (fold == 0x9e3779b9u) *sink = fold;
}

template <class Body>
double median_ms(cudaStream_t stream, int reps, Body body) {
  cudaEvent_t a, b;
  HYBRID_CUDA_CHECK(cudaEventCreate(&a));
  HYBRID_CUDA_CHECK(cudaEventCreate(&b));
  body();  // warm-up
  std::vector<float> ms(reps);
  for (int r = 0; r < reps; ++r) {
    HYBRID_CUDA_CHECK(cudaEventRecord(a, stream));
    body();
    HYBRID_CUDA_CHECK(cudaEventRecord(b, stream));
    HYBRID_CUDA_CHECK(cudaEventSynchronize(b));
    HYBRID_CUDA_CHECK(cudaEventElapsedTime(&ms[r], a, b));
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(ms.begin(), ms.end());
  return ms[reps / 2];
}

}  // namespace

void l2_flush_clean(void* buffer, size_t bytes, void* stream_ptr) {
  cudaStream_t stream = cuda::as_stream(stream_ptr);
  const size_t words = bytes / 16;
  read_all<<<4 * cuda::sm_count(), 512, 0, stream>>>(static_cast<const uint4*>(buffer), words,
                                                     static_cast<uint32_t*>(buffer));
  HYBRID_CUDA_CHECK_LAUNCH();
}

double measure_copy_gbps(int device, void* stream_ptr) {
  set_device(device);
  cudaStream_t stream = cuda::as_stream(stream_ptr);
  const size_t bytes = size_t(1) << 30;
  void *src = malloc_device(bytes, device), *dst = malloc_device(bytes, device);
  HYBRID_CUDA_CHECK(cudaMemsetAsync(src, 1, bytes, stream));
  const double ms = median_ms(stream, 10, [&] {
    HYBRID_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream));
  });
  free_device(src, device);
  free_device(dst, device);
  return 2.0 * bytes / (ms * 1e-3) / 1e9;
}

double measure_gemm_tflops(int device, void* stream_ptr) {
  set_device(device);
  cudaStream_t stream = cuda::as_stream(stream_ptr);
  const int n = 8192;
  const size_t elems = size_t(n) * n;
  auto* A = static_cast<__nv_bfloat16*>(malloc_device(elems * 2, device));
  auto* B = static_cast<__nv_bfloat16*>(malloc_device(elems * 2, device));
  auto* C = static_cast<__nv_bfloat16*>(malloc_device(elems * 2, device));
  fill_random_bf16<<<1024, 256, 0, stream>>>(A, elems, 1u);
  HYBRID_CUDA_CHECK_LAUNCH();
  fill_random_bf16<<<1024, 256, 0, stream>>>(B, elems, 2u);
  HYBRID_CUDA_CHECK_LAUNCH();
  cublasHandle_t handle;
  HYBRID_CUBLAS_CHECK(cublasCreate(&handle));
  HYBRID_CUBLAS_CHECK(cublasSetStream(handle, stream));
  const float alpha = 1.0f, beta = 0.0f;
  const double ms = median_ms(stream, 10, [&] {
    HYBRID_CUBLAS_CHECK(cublasGemmEx(handle, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, A,
                                     CUDA_R_16BF, n, B, CUDA_R_16BF, n, &beta, C, CUDA_R_16BF, n,
                                     CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  });
  cublasDestroy(handle);
  free_device(A, device);
  free_device(B, device);
  free_device(C, device);
  return 2.0 * n * double(n) * n / (ms * 1e-3) / 1e12;
}

}  // namespace hybrid::cuda_api
