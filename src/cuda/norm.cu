// CUDA: rms_norm (with the fused residual of seed 004, n tokens in one launch) and rms_norm_gated.
//
// Fast paths (rows 16-byte aligned, row length a whole number of 16-byte vectors, at most
// 4 vectors per thread): a "team" of 4..256 threads per row (a power of two) holds the row in
// registers as 16-byte vectors (vector k·team + i in thread i, k < kN): one read of every input
// byte, one write of every output byte; short rows pack 256 / team rows into one 256-thread CTA.
// The team's Σh² is a shuffle reduction (plus one shared-memory step for teams above a warp).
//   rms_norm: row = token. rms_norm_gated: row = (token, group).
// General paths (anything else): one block per row, scalar loads, pass 2 re-reads the row.
// Bytes: T·D·(read x + write out) (+ read residual + write h) (+ read z); memory-bound.
#include <algorithm>
#include <type_traits>

#include "cuda/common.cuh"
#include "cuda/dtype.cuh"
#include "cuda/elementwise_vec.cuh"
#include "cuda/kernels.h"
#include "cuda/warp.cuh"
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

// ---- fast paths: rows in registers ----------------------------------------------------------

constexpr int kMaxPer = 4;  // 16-byte vectors per thread

// Σ of v over the team of `team` threads (a power of two, 4..256, aligned in the CTA); every
// thread of the team gets it. Called by every thread of the CTA (it has a barrier).
__device__ __forceinline__ float team_sum(float v, int team, float* shared /* [8] */) {
  for (int o = (team < 32 ? team : 32) / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (team <= 32) return v;
  const int warp = threadIdx.x / 32, per = team / 32, first = warp / per * per;
  if (threadIdx.x % 32 == 0) shared[warp] = v;
  __syncthreads();
  float s = 0.0f;
  for (int w = 0; w < per; ++w) s += shared[first + w];
  return s;
}

// Team and vectors per thread for rows of `vecs` 16-byte vectors: the smallest team that needs
// at most 4 vectors per thread; team 0 when no fast path fits. At D 2048 bf16: a team of 64 with 4
// vectors (80 registers: 3 CTAs of 4 rows per SM, 48 KB of x in flight per SM), where teams with at
// most 2 (128 threads, 54 registers: 4 CTAs of 2 rows, 32 KB) streamed rms_norm without the
// residual at 76.6% of the copy ceiling at T 32768. Session 22 run 2, same run, alternated:
// rms_norm T 32768 82.6 -> 69.9 µs (90.5% of copy), T 8192 22.1 -> 19.7; the GDN output norm
// (rms_norm_gated, D 128 rows in teams of 4) T 32768 228.1 -> 188.3, T 8192 60.3 -> 50.9; at most 3
// changed nothing (the same teams at D 2048). HYBRID_NORM_MAX_PER=2 (the default before) or =3
// lowers the limit.
struct TeamShape {
  int team = 0, per = 0;
};
TeamShape team_shape(int64_t vecs) {
  static const int max_per = std::clamp(env_int("HYBRID_NORM_MAX_PER", kMaxPer), 2, kMaxPer);
  TeamShape s;
  for (int team = 4; team <= kThreads; team *= 2)
    if (vecs <= int64_t{max_per} * team || (team == kThreads && vecs <= int64_t{kMaxPer} * team)) {
      s.team = team;
      const int64_t per = (vecs + team - 1) / team;
      s.per = per <= 1 ? 1 : per <= 2 ? 2 : per <= 3 ? 3 : 4;
      return s;
    }
  return s;
}

// h = x (+ residual) rounded to T; out = h·rsqrt(mean(h²) + eps)·(w or 1 + w).
// Every thread reads all its vectors before it writes any (out / residual_out may alias x /
// residual: no __restrict__ on them). kE elements per 16-byte vector, kN vectors per thread; `team`
// threads per row. kEarlyW (the v3 variants): the thread's weight vectors are loaded with x, before
// the team reduction, instead of after it (one L2 round trip less on the critical path).
template <class T, class W, int kN, bool kEarlyW>
__global__ void __launch_bounds__(kThreads)
    rms_norm_regs_kernel(const T* x, int64_t x_stride,                  // [T, D]
                         const T* residual, int64_t residual_stride,    // [T, D] or null
                         T* residual_out, int64_t residual_out_stride,  // [T, D] or null
                         const W* __restrict__ weight,                  // [D]
                         T* out, int64_t out_stride,                    // [T, D]
                         int64_t rows, int D, int team, float eps, bool zero_centered) {
  constexpr int kE = 16 / sizeof(T);
  __shared__ float shared[kThreads / 32];
  const int tt = threadIdx.x % team;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (kThreads / team) + threadIdx.x / team;
  const bool live = row < rows;
  const int vecs = D / kE;
  vec::Raw<T, kE> h[kN];
  vec::Raw<W, kE> w_early[kEarlyW ? kN : 1];
  float sum_sq = 0.0f;
#pragma unroll
  for (int k = 0; k < kN; ++k) {
    const int v = k * team + tt;
    if (!live || v >= vecs) continue;
    vec::load(x + row * x_stride + v * kE, h[k]);
    if constexpr (kEarlyW) vec::load(weight + v * kE, w_early[k]);
  }
  if (residual) {
    vec::Raw<T, kE> r[kN];
#pragma unroll
    for (int k = 0; k < kN; ++k) {
      const int v = k * team + tt;
      if (live && v < vecs) vec::load(residual + row * residual_stride + v * kE, r[k]);
    }
#pragma unroll
    for (int k = 0; k < kN; ++k) {
      const int v = k * team + tt;
      if (!live || v >= vecs) continue;
#pragma unroll
      for (int e = 0; e < kE; ++e)
        h[k].elem()[e] = from_f32<T>(to_f32(h[k].elem()[e]) + to_f32(r[k].elem()[e]));
      vec::store(residual_out + row * residual_out_stride + v * kE, h[k]);
    }
  }
#pragma unroll
  for (int k = 0; k < kN; ++k) {
    const int v = k * team + tt;
    if (!live || v >= vecs) continue;
#pragma unroll
    for (int e = 0; e < kE; ++e) {
      const float f = to_f32(h[k].elem()[e]);
      sum_sq += f * f;
    }
  }
  const float inv_rms = rsqrtf(team_sum(sum_sq, team, shared) / D + eps);
#pragma unroll
  for (int k = 0; k < kN; ++k) {
    const int v = k * team + tt;
    if (!live || v >= vecs) continue;
    vec::Raw<W, kE> w;
    if constexpr (kEarlyW)
      w = w_early[k];
    else
      vec::load(weight + v * kE, w);
    vec::Raw<T, kE> o;
#pragma unroll
    for (int e = 0; e < kE; ++e) {
      const float wf = to_f32(w.elem()[e]);
      o.elem()[e] =
          from_f32<T>(to_f32(h[k].elem()[e]) * inv_rms * (zero_centered ? 1.0f + wf : wf));
    }
    vec::store(out + row * out_stride + v * kE, o);
  }
}

// rms_norm_gated_regs_kernel for rows of 3-4 vectors a thread (long groups: Mamba2's one
// 5120-wide group, Nemotron-H's 1024 at f32), keeping between the passes only what pass 2 needs:
// the raw x and z vectors (kNormFirst; silu(z) computed in pass 2) or x·silu(z) in f32, and no
// early weights. rms_norm_gated_regs_kernel keeps x, z and the gate as f32 with early weights:
// 120-127 registers at 4 bf16 vectors a thread, 2 CTAs per SM, 48% of copy at Mamba2's shape
// against this kernel's 86% (session 5, runs K and M). At 1-2 vectors a thread it stays the
// faster one (60.3 vs 67.7 µs at the GDN output norm's group of 128, run N). The expressions and
// their order are rms_norm_gated_regs_kernel's, so the results are bit-identical to it.
template <class T, class W, int kN, bool kNormFirst>
__global__ void __launch_bounds__(kThreads)
    rms_norm_gated_long_kernel(const T* x, int64_t x_stride,  // [T, C]
                               const T* z, int64_t z_stride,  // [T, C]
                               const W* __restrict__ weight,  // [C] or [group]
                               T* out, int64_t out_stride,    // [T, C]
                               int64_t tokens, int groups, int group_size, int team,
                               bool shared_weight, float eps) {
  static_assert(kN >= 3, "rows of 1-2 vectors a thread: rms_norm_gated_regs_kernel");
  constexpr int kE = 16 / sizeof(T);
  __shared__ float shared[kThreads / 32];
  const int tt = threadIdx.x % team;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (kThreads / team) + threadIdx.x / team;
  const bool live = row < tokens * groups;
  const int64_t t = live ? row / groups : 0;
  const int g0 = live ? static_cast<int>(row % groups) * group_size : 0;
  const int vecs = group_size / kE;
  vec::Raw<T, kE> xr[kNormFirst ? kN : 1], zr[kNormFirst ? kN : 1];  // norm first: raw x, z
  float xg[kNormFirst ? 1 : kN][kE];                                 // gate first: x·silu(z)
  float sum_sq = 0.0f;
#pragma unroll
  for (int k = 0; k < kN; ++k) {
    const int v = k * team + tt;
    vec::Raw<T, kE> xk, zk;
    if (live && v < vecs) {
      vec::load(x + t * x_stride + g0 + v * kE, xk);
      vec::load(z + t * z_stride + g0 + v * kE, zk);
    } else {
#pragma unroll
      for (int e = 0; e < kE; ++e) xk.elem()[e] = zk.elem()[e] = from_f32<T>(0.0f);
    }
#pragma unroll
    for (int e = 0; e < kE; ++e) {
      float xv = to_f32(xk.elem()[e]);
      if constexpr (!kNormFirst) {
        xv *= vec::silu_fast(to_f32(zk.elem()[e]));
        xg[k][e] = xv;
      }
      sum_sq += xv * xv;  // zero for absent vectors
    }
    if constexpr (kNormFirst) xr[k] = xk, zr[k] = zk;
  }
  const float inv_rms = rsqrtf(team_sum(sum_sq, team, shared) / group_size + eps);
#pragma unroll
  for (int k = 0; k < kN; ++k) {
    const int v = k * team + tt;
    if (!live || v >= vecs) continue;
    vec::Raw<W, kE> w;
    vec::load(weight + (shared_weight ? 0 : g0) + v * kE, w);
    vec::Raw<T, kE> o;
#pragma unroll
    for (int e = 0; e < kE; ++e) {
      float y;
      if constexpr (kNormFirst) {
        y = to_f32(xr[k].elem()[e]) * inv_rms * to_f32(w.elem()[e]);
        y *= vec::silu_fast(to_f32(zr[k].elem()[e]));
      } else {
        y = xg[k][e] * inv_rms * to_f32(w.elem()[e]);
      }
      o.elem()[e] = from_f32<T>(y);
    }
    vec::store(out + t * out_stride + g0 + v * kE, o);
  }
}

// Per (token, group) row: y = rmsnorm_g(x)·w·silu(z)  or  rmsnorm_g(x·silu(z))·w. kEarlyW: as
// rms_norm_regs_kernel.
template <class T, class W, int kN, bool kEarlyW>
__global__ void __launch_bounds__(kThreads)
    rms_norm_gated_regs_kernel(const T* x, int64_t x_stride,  // [T, C]
                               const T* z, int64_t z_stride,  // [T, C]
                               const W* __restrict__ weight,  // [C] or [group]
                               T* out, int64_t out_stride,    // [T, C]
                               int64_t tokens, int groups, int group_size, int team,
                               bool shared_weight, float eps, bool norm_before_gate) {
  constexpr int kE = 16 / sizeof(T);
  __shared__ float shared[kThreads / 32];
  const int tt = threadIdx.x % team;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (kThreads / team) + threadIdx.x / team;
  const bool live = row < tokens * groups;
  const int64_t t = live ? row / groups : 0;
  const int g0 = live ? static_cast<int>(row % groups) * group_size : 0;
  const int vecs = group_size / kE;
  float xv[kN][kE], gate[kN][kE];
  vec::Raw<W, kE> w_early[kEarlyW ? kN : 1];
  float sum_sq = 0.0f;
#pragma unroll
  for (int k = 0; k < kN; ++k) {
    const int v = k * team + tt;
    vec::Raw<T, kE> xr, zr;
    if (live && v < vecs) {
      vec::load(x + t * x_stride + g0 + v * kE, xr);
      vec::load(z + t * z_stride + g0 + v * kE, zr);
      if constexpr (kEarlyW) vec::load(weight + (shared_weight ? 0 : g0) + v * kE, w_early[k]);
    } else {
#pragma unroll
      for (int e = 0; e < kE; ++e) xr.elem()[e] = zr.elem()[e] = from_f32<T>(0.0f);
    }
#pragma unroll
    for (int e = 0; e < kE; ++e) {
      gate[k][e] = vec::silu_fast(to_f32(zr.elem()[e]));
      xv[k][e] = to_f32(xr.elem()[e]);
      if (!norm_before_gate) xv[k][e] *= gate[k][e];
      sum_sq += xv[k][e] * xv[k][e];  // zero for absent vectors
    }
  }
  const float inv_rms = rsqrtf(team_sum(sum_sq, team, shared) / group_size + eps);
#pragma unroll
  for (int k = 0; k < kN; ++k) {
    const int v = k * team + tt;
    if (!live || v >= vecs) continue;
    vec::Raw<W, kE> w;
    if constexpr (kEarlyW)
      w = w_early[k];
    else
      vec::load(weight + (shared_weight ? 0 : g0) + v * kE, w);
    vec::Raw<T, kE> o;
#pragma unroll
    for (int e = 0; e < kE; ++e) {
      float y = xv[k][e] * inv_rms * to_f32(w.elem()[e]);
      if (norm_before_gate) y *= gate[k][e];
      o.elem()[e] = from_f32<T>(y);
    }
    vec::store(out + t * out_stride + g0 + v * kE, o);
  }
}

// Whether a row view (pointer + row stride, elements of `es` bytes) keeps 16-byte vectors.
bool rows16(const Tensor& t) {
  return t.defined() && vec::aligned16(t.data()) &&
         vec::stride16(t.stride(0), dtype_size(t.dtype()));
}
bool rows16_or_absent(const Tensor& t) {
  return !t.defined() || rows16(t);
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

// Calls body(std::integral_constant<int, kN>) for kN = per (1, 2, 3 or 4).
template <class Body>
void dispatch_per(int per, Body&& body) {
  if (per == 1)
    body(std::integral_constant<int, 1>{});
  else if (per == 2)
    body(std::integral_constant<int, 2>{});
  else if (per == 3)
    body(std::integral_constant<int, 3>{});
  else
    body(std::integral_constant<int, kMaxPer>{});
}

unsigned team_blocks(int64_t rows, int team) {
  const int64_t per_block = kThreads / team;
  return static_cast<unsigned>((rows + per_block - 1) / per_block);
}

// Whether the rows-in-registers kernel applies (16-byte rows, a team shape).
bool rms_norm_fast(const RmsNorm& a) {
  const int64_t D = a.x.size(1);
  const size_t es = dtype_size(a.x.dtype());
  return team_shape(D * static_cast<int64_t>(es) / 16).team > 0 &&
         (D * static_cast<int64_t>(es)) % 16 == 0 && rows16(a.x) && rows16(a.out) &&
         rows16_or_absent(a.residual) && rows16_or_absent(a.residual_out) &&
         vec::aligned16(a.weight.data());
}

// v3: the fast path only (weights loaded early); the rest runs rms_norm.cuda.
Reason rms_norm_v3_supports(const RmsNorm& a) {
  if (Reason r = rms_norm_supports(a)) return r;
  if (!rms_norm_fast(a)) return std::string("rows not 16-byte vectors (rms_norm.cuda runs them)");
  return {};
}

template <bool kV3>
void rms_norm_cuda(const RmsNorm& a, Context& ctx) {
  const int64_t T = a.x.size(0), D = a.x.size(1);
  if (T == 0) return;
  const cudaStream_t stream = as_stream(ctx.stream());
  const bool fused = a.residual.defined();
  const size_t es = dtype_size(a.x.dtype());
  const TeamShape shape = team_shape(D * static_cast<int64_t>(es) / 16);
  const bool fast = rms_norm_fast(a);
  dispatch_float(a.x.dtype(), RmsNorm::op_name, [&](auto tx) {
    using Tx = decltype(tx);
    dispatch_weight(a.weight.dtype(), [&](auto tw) {
      using Tw = decltype(tw);
      const Tx* res = fused ? a.residual.data_as<const Tx>() : nullptr;
      Tx* res_out = fused ? a.residual_out.data_as<Tx>() : nullptr;
      const int64_t res_s = fused ? a.residual.stride(0) : 0;
      const int64_t res_out_s = fused ? a.residual_out.stride(0) : 0;
      if (fast) {
        dispatch_per(shape.per, [&](auto n) {
          rms_norm_regs_kernel<Tx, Tw, decltype(n)::value, kV3>
              <<<team_blocks(T, shape.team), kThreads, 0, stream>>>(
                  a.x.data_as<const Tx>(), a.x.stride(0), res, res_s, res_out, res_out_s,
                  a.weight.data_as<const Tw>(), a.out.data_as<Tx>(), a.out.stride(0), T,
                  static_cast<int>(D), shape.team, a.eps, a.zero_centered);
        });
      } else {
        rms_norm_kernel<Tx, Tw><<<T, kThreads, 0, stream>>>(
            a.x.data_as<const Tx>(), a.x.stride(0), res, res_s, res_out, res_out_s,
            a.weight.data_as<const Tw>(), a.out.data_as<Tx>(), a.out.stride(0), static_cast<int>(D),
            a.eps, a.zero_centered);
      }
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

bool rms_norm_gated_fast(const RmsNormGated& a) {
  const int64_t gs = a.group_size;
  const size_t es = dtype_size(a.x.dtype());
  return team_shape(gs * static_cast<int64_t>(es) / 16).team > 0 &&
         (gs * static_cast<int64_t>(es)) % 16 == 0 && rows16(a.x) && rows16(a.z) && rows16(a.out) &&
         vec::aligned16(a.weight.data());
}

// v3: the fast path only (weights loaded early); the rest runs rms_norm_gated.cuda.
Reason rms_norm_gated_v3_supports(const RmsNormGated& a) {
  if (Reason r = rms_norm_gated_supports(a)) return r;
  if (!rms_norm_gated_fast(a))
    return std::string("groups not 16-byte vectors (rms_norm_gated.cuda runs them)");
  return {};
}

template <bool kV3>
void rms_norm_gated_cuda(const RmsNormGated& a, Context& ctx) {
  const int64_t T = a.x.size(0), C = a.x.size(1), gs = a.group_size, G = C / gs;
  if (T == 0) return;
  const cudaStream_t stream = as_stream(ctx.stream());
  const size_t es = dtype_size(a.x.dtype());
  const TeamShape shape = team_shape(gs * static_cast<int64_t>(es) / 16);
  const bool fast = rms_norm_gated_fast(a);
  dispatch_float(a.x.dtype(), RmsNormGated::op_name, [&](auto tx) {
    using Tx = decltype(tx);
    dispatch_weight(a.weight.dtype(), [&](auto tw) {
      using Tw = decltype(tw);
      const bool shared_weight = a.weight.size(0) != C;
      if (fast) {
        dispatch_per(shape.per, [&](auto n) {
          constexpr int kN = decltype(n)::value;
          const unsigned blocks = team_blocks(T * G, shape.team);
          if constexpr (kN <= 2) {
            rms_norm_gated_regs_kernel<Tx, Tw, kN, kV3><<<blocks, kThreads, 0, stream>>>(
                a.x.data_as<const Tx>(), a.x.stride(0), a.z.data_as<const Tx>(), a.z.stride(0),
                a.weight.data_as<const Tw>(), a.out.data_as<Tx>(), a.out.stride(0), T,
                static_cast<int>(G), static_cast<int>(gs), shape.team, shared_weight, a.eps,
                a.norm_before_gate);
          } else {
            auto launch = [&](auto kernel) {
              kernel<<<blocks, kThreads, 0, stream>>>(
                  a.x.data_as<const Tx>(), a.x.stride(0), a.z.data_as<const Tx>(), a.z.stride(0),
                  a.weight.data_as<const Tw>(), a.out.data_as<Tx>(), a.out.stride(0), T,
                  static_cast<int>(G), static_cast<int>(gs), shape.team, shared_weight, a.eps);
            };
            if (a.norm_before_gate)
              launch(rms_norm_gated_long_kernel<Tx, Tw, kN, true>);
            else
              launch(rms_norm_gated_long_kernel<Tx, Tw, kN, false>);
          }
        });
      } else {
        const dim3 grid(static_cast<unsigned>(T), static_cast<unsigned>(G));
        rms_norm_gated_kernel<Tx, Tw><<<grid, kThreads, 0, stream>>>(
            a.x.data_as<const Tx>(), a.x.stride(0), a.z.data_as<const Tx>(), a.z.stride(0),
            a.weight.data_as<const Tw>(), a.out.data_as<Tx>(), a.out.stride(0),
            static_cast<int>(gs), shared_weight, a.eps, a.norm_before_gate);
      }
      HYBRID_CUDA_CHECK_LAUNCH();
    });
  });
}

}  // namespace

void register_norm(Registry& r) {
  r.add<RmsNorm>("rms_norm.cuda_v3", DeviceType::cuda, 10, rms_norm_v3_supports,
                 rms_norm_cuda<true>);
  r.add<RmsNorm>("rms_norm.cuda", DeviceType::cuda, 0, rms_norm_supports, rms_norm_cuda<false>);
  r.add<RmsNormGated>("rms_norm_gated.cuda_v3", DeviceType::cuda, 10, rms_norm_gated_v3_supports,
                      rms_norm_gated_cuda<true>);
  r.add<RmsNormGated>("rms_norm_gated.cuda", DeviceType::cuda, 0, rms_norm_gated_supports,
                      rms_norm_gated_cuda<false>);
}

}  // namespace hybrid::cuda
