// The few CUDA runtime services the core needs, behind plain C++ signatures. Implemented by
// src/cuda/runtime.cu, or by src/cuda/no_cuda.cpp (which throws) when CUDA is not built.
#pragma once

#include <cstddef>

namespace hybrid::cuda_api {

bool compiled();
int device_count();  // 0 when no driver or GPU
void* malloc_device(size_t bytes, int device);
void free_device(void* ptr, int device) noexcept;
// Page-locked host memory (cudaMallocHost): device-to-host copies into it run at the link's
// speed, where a pageable destination goes through the driver's staging buffer.
void* malloc_host(size_t bytes);
void free_host(void* ptr) noexcept;
enum class CopyKind { host_to_device, device_to_host, device_to_device, host_to_host };
void copy_async(void* dst, const void* src, size_t bytes, CopyKind kind, void* stream);
void* stream_create(int device);
void stream_destroy(void* stream) noexcept;
void stream_synchronize(void* stream);
void set_device(int device);
void* blas_create(int device);  // cublasLtHandle_t
void blas_destroy(void* handle) noexcept;
void* dnn_create(int device);  // cudnnHandle_t; throws in builds without HYBRID_CUDNN
void dnn_destroy(void* handle) noexcept;
void memset_async(void* dst, int value, size_t bytes, void* stream);
void device_name(int device, char* name, size_t capacity);
size_t device_memory_bytes(int device, size_t* free_bytes);

// CUDA graphs. graph_capture_begin starts a thread-local capture of `stream`; graph_capture_end
// ends it and returns the instantiated graph (a cudaGraphExec_t); graph_launch replays it on
// `stream`; graph_destroy frees it. A capture that fails (an op that is not capturable) is
// ended and reported as an error.
void graph_capture_begin(void* stream);
void* graph_capture_end(void* stream);
void graph_capture_abort(void* stream) noexcept;  // ends a capture, discarding it (error paths)
void graph_launch(void* graph_exec, void* stream);
void graph_destroy(void* graph_exec) noexcept;

// Timing with CUDA events on a stream.
void* event_create();
void event_destroy(void* event) noexcept;
void event_record(void* event, void* stream);
float event_elapsed_ms(void* start, void* end);  // waits for `end`

// The GPU's own ceilings, measured now (benchmarks print them beside every result):
// device-to-device copy in GB/s counting read + write; bf16 GEMM (cuBLAS, f32 accumulate) in
// TFLOP/s on random data.
double measure_copy_gbps(int device, void* stream);
double measure_gemm_tflops(int device, void* stream);

// The L2 flush before each timed repetition of a benchmark: reads all of `buffer` (zeroed once,
// >= 5x the L2), so the op under test finds none of its data in L2 *and* no dirty lines to write
// back. A flush by writing (a memset, as triton's do_bench does) leaves up to the whole L2 (50 MB
// on an H200) dirty, and the op then pays for writing the flush's own bytes back to HBM as its
// reads evict them: up to ~12 µs, half the time of a 25 MB op.
void l2_flush_clean(void* buffer, size_t bytes, void* stream);

}  // namespace hybrid::cuda_api
