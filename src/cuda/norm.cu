// CUDA: rms_norm (with the fused residual of seed 004, n tokens in one launch) and rms_norm_gated.
//
// rms_norm: one block per token. Pass 1 reads x (+ residual, writing h = x + residual rounded to
// its dtype) and reduces Σh²; pass 2 re-reads h (an L1/L2 hit) and writes x̂·w or x̂·(1 + w).
// Bytes: T·D·(read x + write out) (+ read residual + write h); memory-bound.
// rms_norm_gated: one block per (token, group), the same two passes over x and z.
#include "cuda/common.cuh"
#include "cuda/dtype.cuh"
#include "cuda/kernels.h"
#include "hybrid/ops/norm.h"

namespace hybrid::cuda {

namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float block_sum(float v, float* shared /* [32] */) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < blockDim.x / 32 ? shared[lane] : 0.0f;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;  // every thread holds the sum
}

// h = x (+ residual); out = h·rsqrt(mean(h²) + eps)·(w or 1 + w)
template <class T, class W>
__global__ void __launch_bounds__(kThreads)
    rms_norm_kernel(const T* __restrict__ x, int64_t x_stride,     // [T, D]
                    const T* residual, int64_t residual_stride,    // [T, D] or null
                    T* residual_out, int64_t residual_out_stride,  // [T, D] or null
                    const W* __restrict__ weight,                  // [D]
                    T* out, int64_t out_stride,                    // [T, D]
                    int D, float eps, bool zero_centered) {
  __shared__ float shared[32];
  const int64_t t = blockIdx.x;
  const T* xr = x + t * x_stride;
  const T* hr = xr;  // where pass 2 reads h from
  float sum_sq = 0.0f;
  if (residual) {
    const T* rr = residual + t * residual_stride;
    T* ro = residual_out + t * residual_out_stride;
    for (int d = threadIdx.x; d < D; d += kThreads) {
      const T h = from_f32<T>(to_f32(xr[d]) + to_f32(rr[d]));
      ro[d] = h;
      const float hf = to_f32(h);
      sum_sq += hf * hf;
    }
    hr = ro;
  } else {
    for (int d = threadIdx.x; d < D; d += kThreads) {
      const float v = to_f32(xr[d]);
      sum_sq += v * v;
    }
  }
  const float inv_rms = rsqrtf(block_sum(sum_sq, shared) / D + eps);
  T* orow = out + t * out_stride;
  for (int d = threadIdx.x; d < D; d += kThreads) {
    const float w = to_f32(weight[d]);
    orow[d] = from_f32<T>(to_f32(hr[d]) * inv_rms * (zero_centered ? 1.0f + w : w));
  }
}

// y = rmsnorm_g(x)·w·silu(z)  or  rmsnorm_g(x·silu(z))·w, one block per (token, group).
template <class T, class W>
__global__ void __launch_bounds__(kThreads)
    rms_norm_gated_kernel(const T* __restrict__ x, int64_t x_stride,  // [T, C]
                          const T* __restrict__ z, int64_t z_stride,  // [T, C]
                          const W* __restrict__ weight,               // [C] or [G]
                          T* out, int64_t out_stride,                 // [T, C]
                          int group_size, bool shared_weight, float eps, bool norm_before_gate) {
  __shared__ float shared[32];
  const int64_t t = blockIdx.x;
  const int g0 = blockIdx.y * group_size;
  const T* xr = x + t * x_stride + g0;
  const T* zr = z + t * z_stride + g0;
  auto silu = [](float v) { return v / (1.0f + __expf(-v)); };
  float sum_sq = 0.0f;
  for (int i = threadIdx.x; i < group_size; i += kThreads) {
    float v = to_f32(xr[i]);
    if (!norm_before_gate) v *= silu(to_f32(zr[i]));
    sum_sq += v * v;
  }
  const float inv_rms = rsqrtf(block_sum(sum_sq, shared) / group_size + eps);
  T* orow = out + t * out_stride + g0;
  for (int i = threadIdx.x; i < group_size; i += kThreads) {
    const float gate = silu(to_f32(zr[i]));
    float v = to_f32(xr[i]);
    if (!norm_before_gate) v *= gate;
    float y = v * inv_rms * to_f32(weight[shared_weight ? i : g0 + i]);
    if (norm_before_gate) y *= gate;
    orow[i] = from_f32<T>(y);
  }
}

Reason rms_norm_supports(const RmsNorm& a) {
  if (a.out.dtype() != a.x.dtype())
    return str("out dtype ", dtype_name(a.out.dtype()), " differs from x dtype");
  if (a.residual_out.defined() && a.residual_out.dtype() != a.x.dtype())
    return str("residual_out dtype ", dtype_name(a.residual_out.dtype()), " differs from x dtype");
  if (a.x.size(1) > (int64_t{1} << 30)) return std::string("D above 2^30");
  return {};
}

template <class Body>
void dispatch_weight(DType t, Body&& body) {
  if (t == DType::bf16)
    body(__nv_bfloat16{});
  else
    body(float{});
}

void rms_norm_cuda(const RmsNorm& a, Context& ctx) {
  const int64_t T = a.x.size(0);
  if (T == 0) return;
  dispatch_float(a.x.dtype(), RmsNorm::op_name, [&](auto tx) {
    using Tx = decltype(tx);
    dispatch_weight(a.weight.dtype(), [&](auto tw) {
      using Tw = decltype(tw);
      const bool fused = a.residual.defined();
      rms_norm_kernel<Tx, Tw><<<T, kThreads, 0, as_stream(ctx.stream())>>>(
          a.x.data_as<const Tx>(), a.x.stride(0), fused ? a.residual.data_as<const Tx>() : nullptr,
          fused ? a.residual.stride(0) : 0, fused ? a.residual_out.data_as<Tx>() : nullptr,
          fused ? a.residual_out.stride(0) : 0, a.weight.data_as<const Tw>(), a.out.data_as<Tx>(),
          a.out.stride(0), static_cast<int>(a.x.size(1)), a.eps, a.zero_centered);
      HYBRID_CUDA_CHECK_LAUNCH();
    });
  });
}

Reason rms_norm_gated_supports(const RmsNormGated& a) {
  if (a.out.dtype() != a.x.dtype() || a.z.dtype() != a.x.dtype())
    return std::string("x, z and out must share one dtype");
  if (a.x.size(1) / a.group_size > 65535) return std::string("more than 65535 groups");
  return {};
}

void rms_norm_gated_cuda(const RmsNormGated& a, Context& ctx) {
  const int64_t T = a.x.size(0), C = a.x.size(1);
  if (T == 0) return;
  dispatch_float(a.x.dtype(), RmsNormGated::op_name, [&](auto tx) {
    using Tx = decltype(tx);
    dispatch_weight(a.weight.dtype(), [&](auto tw) {
      using Tw = decltype(tw);
      const dim3 grid(static_cast<unsigned>(T), static_cast<unsigned>(C / a.group_size));
      rms_norm_gated_kernel<Tx, Tw><<<grid, kThreads, 0, as_stream(ctx.stream())>>>(
          a.x.data_as<const Tx>(), a.x.stride(0), a.z.data_as<const Tx>(), a.z.stride(0),
          a.weight.data_as<const Tw>(), a.out.data_as<Tx>(), a.out.stride(0),
          static_cast<int>(a.group_size), a.weight.size(0) != C, a.eps, a.norm_before_gate);
      HYBRID_CUDA_CHECK_LAUNCH();
    });
  });
}

}  // namespace

void register_norm(Registry& r) {
  r.add<RmsNorm>("rms_norm.cuda", DeviceType::cuda, 0, rms_norm_supports, rms_norm_cuda);
  r.add<RmsNormGated>("rms_norm_gated.cuda", DeviceType::cuda, 0, rms_norm_gated_supports,
                      rms_norm_gated_cuda);
}

}  // namespace hybrid::cuda
