// Compiled in place of src/cuda/*.cu when the CUDA backend is not built: no CUDA kernels, and
// every CUDA runtime service says so.
#include "core/cuda_api.h"
#include "hybrid/core/error.h"
#include "hybrid/core/registry.h"

namespace hybrid {

void register_cuda_kernels(Registry&) {}

namespace cuda_api {

namespace {
[[noreturn]] void no_cuda(const char* what) {
  fail("[cuda] ", what, ": hybrid was built without CUDA (configure with -DHYBRID_CUDA=ON)");
}
}  // namespace

bool compiled() {
  return false;
}
int device_count() {
  return 0;
}
void set_device(int) {
  no_cuda("set_device");
}
void* malloc_device(size_t, int) {
  no_cuda("device allocation");
}
void free_device(void*, int) noexcept {}
void* malloc_host(size_t) {
  no_cuda("page-locked host allocation");
}
void free_host(void*) noexcept {}
void copy_async(void*, const void*, size_t, CopyKind, void*) {
  no_cuda("device copy");
}
void* stream_create(int) {
  no_cuda("stream creation");
}
void stream_destroy(void*) noexcept {}
void stream_synchronize(void*) {
  no_cuda("stream synchronize");
}
void* blas_create(int) {
  no_cuda("cuBLASLt handle");
}
void blas_destroy(void*) noexcept {}
void* dnn_create(int) {
  no_cuda("cuDNN handle");
}
void dnn_destroy(void*) noexcept {}
void memset_async(void*, int, size_t, void*) {
  no_cuda("device memset");
}
void l2_flush_clean(void*, size_t, void*) {
  no_cuda("L2 flush");
}
void graph_capture_begin(void*) {
  no_cuda("graph capture");
}
void* graph_capture_end(void*) {
  no_cuda("graph capture");
}
void graph_capture_abort(void*) noexcept {}
void graph_launch(void*, void*) {
  no_cuda("graph launch");
}
void graph_destroy(void*) noexcept {}
void device_name(int, char*, size_t) {
  no_cuda("device name");
}
size_t device_memory_bytes(int, size_t*) {
  no_cuda("device memory");
}
void* event_create() {
  no_cuda("event creation");
}
void event_destroy(void*) noexcept {}
void event_record(void*, void*) {
  no_cuda("event record");
}
float event_elapsed_ms(void*, void*) {
  no_cuda("event timing");
}
double measure_copy_gbps(int, void*) {
  no_cuda("copy ceiling");
}
double measure_gemm_tflops(int, void*) {
  no_cuda("GEMM ceiling");
}

}  // namespace cuda_api
}  // namespace hybrid
