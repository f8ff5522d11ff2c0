// The CUDA runtime services of src/core/cuda_api.h.
#include <cublasLt.h>
#include <cublas_v2.h>

#if HYBRID_HAS_CUDNN
#include <cudnn.h>
#endif

#include <cstdio>

#include "core/cuda_api.h"
#include "cuda/common.cuh"

namespace hybrid::cuda_api {

bool compiled() {
  return true;
}

int device_count() {
  int n = 0;
  // No driver or no GPU is not an error here: it is zero devices.
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error
    return 0;
  }
  return n;
}

void set_device(int device) {
  HYBRID_CUDA_CHECK(cudaSetDevice(device));
}

void* malloc_device(size_t bytes, int device) {
  set_device(device);
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, bytes);
  if (e != cudaSuccess) {
    cudaGetLastError();
    size_t free_bytes = 0, total_bytes = 0;
    cudaMemGetInfo(&free_bytes, &total_bytes);
    fail("[cuda] out of device memory on cuda:", device, ": ", bytes, " bytes needed, ", free_bytes,
         " of ", total_bytes, " free (", cudaGetErrorString(e), ")");
  }
  return p;
}

void free_device(void* ptr, int device) noexcept {
  cudaSetDevice(device);
  cudaFree(ptr);
}

void* malloc_host(size_t bytes) {
  void* p = nullptr;
  const cudaError_t e = cudaMallocHost(&p, bytes);
  if (e != cudaSuccess) {
    cudaGetLastError();
    fail("[cuda] page-locked host allocation of ", bytes, " bytes failed: ", cudaGetErrorString(e));
  }
  return p;
}

void free_host(void* ptr) noexcept {
  cudaFreeHost(ptr);
}

void copy_async(void* dst, const void* src, size_t bytes, CopyKind kind, void* stream) {
  cudaMemcpyKind k = cudaMemcpyDefault;
  switch (kind) {
    case CopyKind::host_to_device:
      k = cudaMemcpyHostToDevice;
      break;
    case CopyKind::device_to_host:
      k = cudaMemcpyDeviceToHost;
      break;
    case CopyKind::device_to_device:
      k = cudaMemcpyDeviceToDevice;
      break;
    case CopyKind::host_to_host:
      k = cudaMemcpyHostToHost;
      break;
  }
  HYBRID_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, k, cuda::as_stream(stream)));
}

void* stream_create(int device) {
  set_device(device);
  cudaStream_t s;
  HYBRID_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return s;
}

void stream_destroy(void* stream) noexcept {
  cudaStreamDestroy(cuda::as_stream(stream));
}

void stream_synchronize(void* stream) {
  HYBRID_CUDA_CHECK(cudaStreamSynchronize(cuda::as_stream(stream)));
}

void* blas_create(int device) {
  set_device(device);
  cublasLtHandle_t h = nullptr;
  const cublasStatus_t s = cublasLtCreate(&h);
  if (s != CUBLAS_STATUS_SUCCESS) fail("[cuda] cublasLtCreate failed: ", cublasGetStatusString(s));
  return h;
}

void blas_destroy(void* handle) noexcept {
  cublasLtDestroy(static_cast<cublasLtHandle_t>(handle));
}

#if HYBRID_HAS_CUDNN
void* dnn_create(int device) {
  set_device(device);
  cudnnHandle_t h = nullptr;
  const cudnnStatus_t s = cudnnCreate(&h);
  if (s != CUDNN_STATUS_SUCCESS) fail("[cuda] cudnnCreate failed: ", cudnnGetErrorString(s));
  return h;
}

void dnn_destroy(void* handle) noexcept {
  cudnnDestroy(static_cast<cudnnHandle_t>(handle));
}
#else
void* dnn_create(int) {
  fail("[cuda] a cuDNN handle asked for, but hybrid was built without cuDNN (-DHYBRID_CUDNN=ON)");
}

void dnn_destroy(void*) noexcept {}
#endif

void memset_async(void* dst, int value, size_t bytes, void* stream) {
  HYBRID_CUDA_CHECK(cudaMemsetAsync(dst, value, bytes, cuda::as_stream(stream)));
}

void graph_capture_begin(void* stream) {
  HYBRID_CUDA_CHECK(
      cudaStreamBeginCapture(static_cast<cudaStream_t>(stream), cudaStreamCaptureModeThreadLocal));
}

void* graph_capture_end(void* stream) {
  cudaGraph_t graph = nullptr;
  HYBRID_CUDA_CHECK(cudaStreamEndCapture(static_cast<cudaStream_t>(stream), &graph));
  cudaGraphExec_t exec = nullptr;
  // Node priorities as launched (cudaLaunchAttributePriority): without this flag a graph runs
  // every kernel at its launch stream's priority, and the pipelined GDN prefill's spine pieces
  // lose the SMs to the stage-1 / stage-3 blocks beside them (session 14 run 2: 1 x 8192 0.606 ms
  // in hybrid-ops' graph against 0.496 in torch's, which instantiates with this flag).
  const cudaError_t e = cudaGraphInstantiate(&exec, graph, cudaGraphInstantiateFlagUseNodePriority);
  cudaGraphDestroy(graph);
  HYBRID_CUDA_CHECK(e);
  return exec;
}

void graph_capture_abort(void* stream) noexcept {
  cudaGraph_t graph = nullptr;
  cudaStreamEndCapture(static_cast<cudaStream_t>(stream), &graph);
  if (graph) cudaGraphDestroy(graph);
  cudaGetLastError();  // clear the capture's error
}

void graph_launch(void* graph_exec, void* stream) {
  HYBRID_CUDA_CHECK(
      cudaGraphLaunch(static_cast<cudaGraphExec_t>(graph_exec), static_cast<cudaStream_t>(stream)));
}

void graph_destroy(void* graph_exec) noexcept {
  if (graph_exec) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(graph_exec));
}

void device_name(int device, char* name, size_t capacity) {
  cudaDeviceProp prop;
  HYBRID_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  std::snprintf(name, capacity, "%s", prop.name);
}

size_t device_memory_bytes(int device, size_t* free_bytes) {
  set_device(device);
  size_t f = 0, total = 0;
  HYBRID_CUDA_CHECK(cudaMemGetInfo(&f, &total));
  if (free_bytes) *free_bytes = f;
  return total;
}

void* event_create() {
  cudaEvent_t e;
  HYBRID_CUDA_CHECK(cudaEventCreate(&e));
  return e;
}

void event_destroy(void* event) noexcept {
  cudaEventDestroy(static_cast<cudaEvent_t>(event));
}

void event_record(void* event, void* stream) {
  HYBRID_CUDA_CHECK(cudaEventRecord(static_cast<cudaEvent_t>(event), cuda::as_stream(stream)));
}

float event_elapsed_ms(void* start, void* end) {
  HYBRID_CUDA_CHECK(cudaEventSynchronize(static_cast<cudaEvent_t>(end)));
  float ms = 0;
  HYBRID_CUDA_CHECK(
      cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start), static_cast<cudaEvent_t>(end)));
  return ms;
}

}  // namespace hybrid::cuda_api
