// Shared by the Mamba-2 CUDA files (ssm.cu, ssm_chunk.cu): run-time-dtype tensor arguments and the
// per-token SSM math of include/hybrid/ops/ssm.h (dt', A, D, gate).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "cuda/common.cuh"
#include "cuda/dtype.cuh"
#include "hybrid/core/tensor.h"

namespace hybrid::cuda {

namespace {

// ---- element access with a run-time dtype (token tensors, parameters, tape, outputs) ----------

// A tensor argument: data, dtype and up to four strides (elements).
struct Arg {
  const void* p = nullptr;
  DType dt = DType::f32;
  int64_t s0 = 0, s1 = 0, s2 = 0;
};

Arg arg(const Tensor& t) {
  Arg a;
  if (!t.defined()) return a;
  a.p = t.data();
  a.dt = t.dtype();
  a.s0 = t.rank() > 0 ? t.stride(0) : 0;
  a.s1 = t.rank() > 1 ? t.stride(1) : 0;
  a.s2 = t.rank() > 2 ? t.stride(2) : 0;
  return a;
}

// Inputs shared by ssm_step, ssm_step_record and ssm_chunk_scan.
struct SsmIn {
  Arg x, dt, A_log, B, C, D, dt_bias, z, y;  // x, z, y [T, H, P]; dt [T, H]; B, C [T, G, N]
  int H = 0, P = 0, N = 0, G = 0;
  bool softplus = false;
  float dt_min = 0.0f, dt_max = 0.0f;

  __device__ __forceinline__ int group(int h) const { return h / (H / G); }
  __device__ __forceinline__ float A(int h) const {
    return -expf(load_any(A_log.p, A_log.dt, h * A_log.s0));
  }
  __device__ __forceinline__ float D_skip(int h) const {
    return D.p ? load_any(D.p, D.dt, h * D.s0) : 0.0f;
  }
  // dt' = clamp(softplus?(dt[t,h] + dt_bias[h]), dt_min, dt_max)   (as the CPU reference)
  __device__ __forceinline__ float dt_eff(int64_t t, int h) const {
    float v = load_any(dt.p, dt.dt, t * dt.s0 + h);
    if (dt_bias.p) v += load_any(dt_bias.p, dt_bias.dt, h * dt_bias.s0);
    return dt_finish(v);
  }
  // dt_eff after the bias: softplus and the clamp.
  __device__ __forceinline__ float dt_finish(float v) const {
    if (softplus) v = v > 20.0f ? v : log1pf(expf(v));
    return fminf(fmaxf(v, dt_min), dt_max);
  }
  __device__ __forceinline__ float x_at(int64_t t, int h, int p) const {
    return load_any(x.p, x.dt, t * x.s0 + h * x.s1 + p);
  }
  // (acc + D·x) · silu(z)
  __device__ __forceinline__ float finish(float acc, float D_h, float xv, int64_t t, int h,
                                          int p) const {
    return gate(acc + D_h * xv, z.p ? load_any(z.p, z.dt, t * z.s0 + h * z.s1 + p) : 0.0f);
  }
  // v · silu(zv) when there is a z, else v.
  __device__ __forceinline__ float gate(float v, float zv) const {
    return z.p ? v * (zv / (1.0f + expf(-zv))) : v;
  }
  __device__ __forceinline__ void store_y(int64_t t, int h, int p, float v) const {
    store_any(const_cast<void*>(y.p), y.dt, t * y.s0 + h * y.s1 + p, v);
  }
};

SsmIn ssm_in(const Tensor& x, const Tensor& dt, const Tensor& A_log, const Tensor& B,
             const Tensor& C, const Tensor& D, const Tensor& dt_bias, const Tensor& z,
             const Tensor& y, bool softplus, float dt_min, float dt_max) {
  SsmIn in;
  in.x = arg(x), in.dt = arg(dt), in.A_log = arg(A_log), in.B = arg(B), in.C = arg(C);
  in.D = arg(D), in.dt_bias = arg(dt_bias), in.z = arg(z), in.y = arg(y);
  in.H = static_cast<int>(x.size(1)), in.P = static_cast<int>(x.size(2));
  in.G = static_cast<int>(B.size(1)), in.N = static_cast<int>(B.size(2));
  in.softplus = softplus, in.dt_min = dt_min, in.dt_max = dt_max;
  return in;
}

__device__ __forceinline__ bool flag_at(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::u8:
      return static_cast<const uint8_t*>(p)[i] != 0;
    case DType::u32:
      return static_cast<const uint32_t*>(p)[i] != 0u;
    default:
      return static_cast<const int32_t*>(p)[i] != 0;
  }
}
template <class Body>
void dispatch_state(DType t, Body&& body) {
  if (t == DType::bf16)
    body(__nv_bfloat16{});
  else
    body(float{});
}

}  // namespace

}  // namespace hybrid::cuda
