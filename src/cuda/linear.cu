// CUDA: linear. Two variants:
//   linear.cublaslt (priority 10): one cuBLASLt GEMM, y^T[out, T] = W[out, in] · x^T in cuBLAS's
//     column-major view (A = W with op T, ld = W's row stride; B = x, ld = x's row stride;
//     D = y, ld = y's row stride), f32 accumulation (CUBLAS_COMPUTE_32F, no TF32); bias: y is
//     prefilled with bias rows and the GEMM runs with beta = 1. Workspace: 32 MiB of ctx.workspace.
//     2·T·in·out FLOP; bytes T·in + out·in + T·out elements (memory-bound below T ~ 300).
//   linear.cublaslt_split (priority 5; `HYBRID_LINEAR_SPLIT=0` refuses it): f32 x with bf16 W
//     (the engine's activations and weights), which cuBLASLt has no GEMM for. x is split into
//     two bf16 rows, hi = bf16(x) and lo = bf16(x − hi), stacked as [2T, in]; one cuBLASLt GEMM
//     gives [2T, out] f32, and y = y_hi + y_lo (+ bias). hi + lo carries 16 of x's 24 bits, so y
//     keeps f32 accuracy (error ~2^-17 of |x|·|W| against 2^-24), on tensor cores; W is read
//     once. Bytes: W + 2T·in·2 + 2·2T·out·4 + y. Not for f16 W: an f32 x past 65504 has no f16
//     hi.
//   linear.gemv (priority 6; T = 1; `HYBRID_LINEAR_GEMV=0` refuses it): bf16 / f16 W with x of
//     another dtype (the engine's decode: f32 x, bf16 W), which cuBLASLt has no GEMV for. x is
//     staged in shared memory as f32; lanes read W's rows in 16-byte chunks, 2 rows a warp with 4
//     chunks a row in flight. Bytes: out·in·2 + x.
//   linear.cuda (priority 0): CUDA-core fallback for the remaining dtype mixes (bf16 x with f32
//     W, ...): one warp per output row, 4 tokens per pass over the row, f32 accumulation.
#include <cublasLt.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cstdlib>
#include <map>
#include <mutex>
#include <type_traits>

#include "cuda/common.cuh"
#include "cuda/dtype.cuh"
#include "cuda/kernels.h"
#include "cuda/linear_impl.cuh"
#include "cuda/warp.cuh"
#include "hybrid/ops/linear.h"

namespace hybrid::cuda {

namespace {

#define HYBRID_LT_CHECK(stmt)                                                                 \
  do {                                                                                        \
    cublasStatus_t s_ = (stmt);                                                               \
    if (s_ != CUBLAS_STATUS_SUCCESS)                                                          \
      fail("[cublasLt] ", #stmt, " failed: ", cublasGetStatusString(s_), " (", __FILE__, ":", \
           __LINE__, ")");                                                                    \
  } while (0)

cudaDataType_t lt_type(DType t) {
  switch (t) {
    case DType::bf16:
      return CUDA_R_16BF;
    case DType::f16:
      return CUDA_R_16F;
    default:
      return CUDA_R_32F;
  }
}

// Largest power of two (<= 256) dividing the address and the row pitch in bytes.
uint32_t alignment(const void* p, int64_t ld, DType t) {
  uint64_t v = reinterpret_cast<uintptr_t>(p) | (static_cast<uint64_t>(ld) * dtype_size(t)) | 256;
  return static_cast<uint32_t>(v & (~v + 1));
}

// The cuBLASLt descriptors and chosen algorithm of one GEMM shape, built once per (device,
// dtypes, sizes, leading dimensions, alignments) and kept for the process (host objects only; a
// decode step's GEMMs then cost no descriptor or heuristic work, and graph capture sees none).
struct LtPlan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool ok = false;  // false: cuBLASLt offered no algorithm
};
using LtKey = std::array<int64_t, 13>;

LtPlan lt_plan(cublasLtHandle_t handle, const LtKey& key, DType ab, DType yt, int64_t T, int64_t in,
               int64_t out, int64_t ldx, int64_t ldw, int64_t ldy, uint32_t al_a, uint32_t al_b,
               uint32_t al_d, uint64_t ws_bytes) {
  static std::mutex mutex;
  static auto* plans = new std::map<LtKey, LtPlan>();  // never freed
  std::lock_guard<std::mutex> lock(mutex);
  auto it = plans->find(key);
  if (it != plans->end()) return it->second;  // a copy: descriptors are never destroyed
  LtPlan c;
  HYBRID_LT_CHECK(cublasLtMatmulDescCreate(&c.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  HYBRID_LT_CHECK(
      cublasLtMatmulDescSetAttribute(c.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  HYBRID_LT_CHECK(
      cublasLtMatmulDescSetAttribute(c.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  // Column-major views: A = W as [in, out] (op T), B = x as [in, T], D = y as [out, T].
  HYBRID_LT_CHECK(cublasLtMatrixLayoutCreate(&c.a, lt_type(ab), in, out, ldw));
  HYBRID_LT_CHECK(cublasLtMatrixLayoutCreate(&c.b, lt_type(ab), in, T, ldx));
  HYBRID_LT_CHECK(cublasLtMatrixLayoutCreate(&c.d, lt_type(yt), out, T, ldy));
  cublasLtMatmulPreference_t pref = nullptr;
  HYBRID_LT_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  HYBRID_LT_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof(ws_bytes)));
  HYBRID_LT_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof(al_a)));
  HYBRID_LT_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof(al_b)));
  HYBRID_LT_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_d, sizeof(al_d)));
  HYBRID_LT_CHECK(cublasLtMatmulPreferenceSetAttribute(
      pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d, sizeof(al_d)));
  cublasLtMatmulHeuristicResult_t res{};
  int found = 0;
  const cublasStatus_t hs =
      cublasLtMatmulAlgoGetHeuristic(handle, c.op, c.a, c.b, c.d, c.d, pref, 1, &res, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  c.ok = hs == CUBLAS_STATUS_SUCCESS && found > 0;
  if (c.ok) c.algo = res.algo;
  // Bound the cache: past 4096 shapes start over (the old descriptors are leaked, never freed,
  // so copies still held by callers stay valid).
  if (plans->size() >= 4096) plans->clear();
  plans->emplace(key, c);
  return c;
}

// x [T, in] (Tx), W [out, in] (Tw) -> y [T, out] (dtype yt at run time). One warp per output row
// o; the row is streamed once per 4 tokens; lanes stride over in; warp-shuffle reduction.
constexpr int kFbWarps = 4, kFbTokens = 4;
template <class Tx, class Tw>
__global__ void __launch_bounds__(kFbWarps * 32)
    linear_fallback_kernel(const Tx* __restrict__ x, int64_t ldx,  // [T, in]
                           const Tw* __restrict__ w, int64_t ldw,  // [out, in]
                           const void* bias, DType bt,             // [out] or null
                           void* y, DType yt, int64_t ldy,         // [T, out]
                           int64_t T, int64_t in, int64_t out) {
  const int lane = threadIdx.x % 32;
  const int64_t o = static_cast<int64_t>(blockIdx.x) * kFbWarps + threadIdx.x / 32;
  if (o >= out) return;
  const Tw* wr = w + o * ldw;
  const float b = bias ? load_any(bias, bt, o) : 0.0f;
  for (int64_t t0 = 0; t0 < T; t0 += kFbTokens) {
    float acc[kFbTokens] = {};
    for (int64_t i = lane; i < in; i += 32) {
      const float wv = to_f32(wr[i]);
#pragma unroll
      for (int k = 0; k < kFbTokens; ++k)
        if (t0 + k < T) acc[k] += wv * to_f32(x[(t0 + k) * ldx + i]);
    }
#pragma unroll
    for (int k = 0; k < kFbTokens; ++k) {
      float v = acc[k];
      for (int s = 16; s > 0; s >>= 1) v += __shfl_xor_sync(0xffffffffu, v, s);
      if (lane == 0 && t0 + k < T) store_any(y, yt, (t0 + k) * ldy + o, v + b);
    }
  }
}

// y[t, o] = bias[o].
__global__ void fill_bias_kernel(const void* bias, DType bt, void* y, DType yt, int64_t ldy,
                                 int64_t T, int64_t out) {
  const int64_t n = T * out;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / out, o = i % out;
    store_any(y, yt, t * ldy + o, load_any(bias, bt, o));
  }
}

Reason linear_lt_supports(const Linear& a) {
  if (!lt_linear_dtypes(a.x.dtype(), a.weight.dtype(), a.y.dtype()))
    return str("cuBLASLt has no x=", dtype_name(a.x.dtype()), ", W=", dtype_name(a.weight.dtype()),
               ", y=", dtype_name(a.y.dtype()),
               " GEMM (x and W must share a dtype; y that "
               "dtype or f32)");
  return {};
}

void linear_fb_run(const Linear& a, Context& ctx) {
  const int64_t T = a.x.size(0), in = a.x.size(1), out = a.weight.size(0);
  if (T == 0 || out == 0) return;
  linear_fallback(ctx, a.x.dtype(), a.x.data(), a.x.stride(0), a.weight.dtype(), a.weight.data(),
                  a.weight.stride(0), a.bias.defined() ? a.bias.dtype() : DType::f32,
                  a.bias.defined() ? a.bias.data() : nullptr, a.y.dtype(), a.y.data(),
                  a.y.stride(0), T, in, out);
}

// The calls every variant hands on: nothing to write (T or out 0), or nothing to multiply (in 0:
// y = bias or 0, which the fallback writes). Returns whether the call is done.
bool linear_trivial(const Linear& a, Context& ctx) {
  if (a.x.size(0) == 0 || a.weight.size(0) == 0) return true;
  if (a.x.size(1) != 0) return false;
  linear_fb_run(a, ctx);
  return true;
}

void linear_lt_run(const Linear& a, Context& ctx) {
  if (linear_trivial(a, ctx)) return;
  const int64_t T = a.x.size(0), in = a.x.size(1), out = a.weight.size(0);
  float beta = 0.0f;
  if (a.bias.defined()) {
    fill_bias_rows(ctx, a.bias.dtype(), a.bias.data(), a.y.dtype(), a.y.data(), a.y.stride(0), T,
                   out);
    beta = 1.0f;
  }
  void* ws = ctx.workspace(kLtWorkspaceBytes);
  if (!lt_linear(ctx, a.x.dtype(), a.y.dtype(), a.x.data(), a.x.stride(0), a.weight.data(),
                 a.weight.stride(0), a.y.data(), a.y.stride(0), T, in, out, beta, ws,
                 kLtWorkspaceBytes))
    linear_fb_run(a, ctx);  // no cuBLASLt algorithm (odd alignment): the CUDA-core kernel
}

// ---- linear.gemv -------------------------------------------------------------------------------
// y[t, o] = Σ_i x[t, i]·W[o, i] (+ bias[o]), kT tokens (kGvMaxTokens), W rows of 16-bit Tw in
// 16-byte chunks. CTA: kGvWarps warps of kRows rows each (rows past `out` re-read the last one,
// never stored). Lane l takes chunks c = l, l + 32, ... of its rows, kUnroll chunks a row in
// flight: the first kRows·kUnroll loads are issued before x [kT, in] is staged as f32 in dynamic
// shared memory, so the staging hides under their latency. A chunk's 8 x values per token are two
// float4 (shared by the warp's kRows rows). One warp sum per (row, token).
// Session 11 (H200, 2048 -> 4096, f32 x): 2 rows a warp with 4 chunks a row in flight took 9.3 µs
// at T 1 (1 row with 8 chunks: 10.7; 4 rows: 13.5-15 before the x staging fix), against the
// split GEMM's 12.3 and cuBLASLt's 9.0 for bf16 x. At T 8 the GEMV took 33.5 µs (its products
// on CUDA cores) against the split's 12.9, so it takes one token only: the engine's decode of one
// sequence.
constexpr int kGvWarps = 4, kGvRows = 2, kGvUnroll = 4, kGvMaxTokens = 1;
constexpr size_t kGvMaxSmem = 160 * 1024;

template <class Tw, class Tx, int kT, int kRows, int kUnroll>
__global__ void __launch_bounds__(kGvWarps * 32)
    linear_gemv_kernel(const Tx* __restrict__ x, int64_t ldx, const Tw* __restrict__ w, int64_t ldw,
                       const void* bias, DType bt, void* y, DType yt, int64_t ldy, int in,
                       int out) {
  extern __shared__ float4 gv_x[];  // [kT, in] f32
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int o0 = (blockIdx.x * kGvWarps + warp) * kRows;
  const uint4* rows[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r)
    rows[r] = reinterpret_cast<const uint4*>(w + static_cast<int64_t>(min(o0 + r, out - 1)) * ldw);
  const int nch = in / 8;
  uint4 wv[kUnroll][kRows];
  auto load_group = [&](int c0) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (c0 + 32 * u < nch)
#pragma unroll
        for (int r = 0; r < kRows; ++r) wv[u][r] = __ldg(rows[r] + c0 + 32 * u);
  };
  load_group(lane);

  float* xs = reinterpret_cast<float*>(gv_x);
  // x's dtype is a template parameter so that the loads of a row are issued together (a dtype
  // switch per element serialised them: ~16 L2 round trips a CTA, 13.8 µs at T 1 in run 3).
  for (int t = 0; t < kT; ++t) {
    const Tx* xr = x + static_cast<int64_t>(t) * ldx;
#pragma unroll 8
    for (int i = threadIdx.x; i < in; i += kGvWarps * 32) xs[t * in + i] = to_f32(xr[i]);
  }
  __syncthreads();

  float acc[kRows][kT] = {};
  for (int c0 = lane; c0 < nch; c0 += 32 * kUnroll) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int c = c0 + 32 * u;
      if (c >= nch) break;
#pragma unroll
      for (int t = 0; t < kT; ++t) {
        const float4 a = gv_x[(t * in) / 4 + 2 * c], b = gv_x[(t * in) / 4 + 2 * c + 1];
#pragma unroll
        for (int r = 0; r < kRows; ++r) {
          const Tw* e = reinterpret_cast<const Tw*>(&wv[u][r]);
          acc[r][t] += to_f32(e[0]) * a.x + to_f32(e[1]) * a.y + to_f32(e[2]) * a.z +
                       to_f32(e[3]) * a.w + to_f32(e[4]) * b.x + to_f32(e[5]) * b.y +
                       to_f32(e[6]) * b.z + to_f32(e[7]) * b.w;
        }
      }
    }
    load_group(c0 + 32 * kUnroll);
  }
  if (o0 >= out) return;
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const float bv = bias && o0 + r < out ? load_any(bias, bt, o0 + r) : 0.0f;
#pragma unroll
    for (int t = 0; t < kT; ++t) {
      const float v = warp_sum(acc[r][t]);
      if (lane == 0 && o0 + r < out) store_any(y, yt, t * ldy + o0 + r, v + bv);
    }
  }
}

Reason linear_gemv_supports(const Linear& a) {
  static const bool off = env_is_zero("HYBRID_LINEAR_GEMV");
  if (off) return std::string("HYBRID_LINEAR_GEMV=0");
  const int64_t T = a.x.size(0), in = a.x.size(1), out = a.weight.size(0);
  const DType wt = a.weight.dtype();
  if (wt != DType::bf16 && wt != DType::f16)
    return str("W=", dtype_name(wt), ": the GEMV reads bf16 / f16 rows");
  const DType xt = a.x.dtype();
  if (xt != DType::f32 && xt != DType::bf16 && xt != DType::f16)
    return str("x=", dtype_name(xt), ": the GEMV reads f32 / bf16 / f16 x");
  if (T != kGvMaxTokens) return str("T=", T, ": the GEMV takes one token (the split GEMM more)");
  if (in % 8 != 0 || reinterpret_cast<uintptr_t>(a.weight.data()) % 16 != 0 ||
      a.weight.stride(0) % 8 != 0)
    return std::string("W's rows are not 16-byte chunks");
  if (static_cast<size_t>(T * in) * 4 > kGvMaxSmem)
    return str("T·in=", T * in, ": x above ", kGvMaxSmem, " bytes of shared memory as f32");
  if (in > INT_MAX || out > INT_MAX) return std::string("in or out above 2^31");
  return {};
}

void linear_gemv_run(const Linear& a, Context& ctx) {
  if (linear_trivial(a, ctx)) return;
  const int64_t T = a.x.size(0), in = a.x.size(1), out = a.weight.size(0);
  const size_t smem = static_cast<size_t>(T * in) * 4;
  auto launch = [&](auto tw, auto tx, auto kt) {
    using Tw = decltype(tw);
    using Tx = decltype(tx);
    constexpr int kT = decltype(kt)::value;
    const auto kernel = linear_gemv_kernel<Tw, Tx, kT, kGvRows, kGvUnroll>;
    const auto blocks =
        static_cast<unsigned>((out + kGvWarps * kGvRows - 1) / (kGvWarps * kGvRows));
    ensure_dynamic_smem(kernel, smem);
    kernel<<<blocks, kGvWarps * 32, smem, as_stream(ctx.stream())>>>(
        a.x.data_as<const Tx>(), a.x.stride(0), a.weight.data_as<const Tw>(), a.weight.stride(0),
        a.bias.defined() ? a.bias.data() : nullptr, a.bias.defined() ? a.bias.dtype() : DType::f32,
        a.y.data(), a.y.dtype(), a.y.stride(0), static_cast<int>(in), static_cast<int>(out));
    HYBRID_CUDA_CHECK_LAUNCH();
  };
  auto by_x = [&](auto tw) {
    switch (a.x.dtype()) {
      case DType::f32:
        return launch(tw, float{}, std::integral_constant<int, kGvMaxTokens>{});
      case DType::f16:
        return launch(tw, __half{}, std::integral_constant<int, kGvMaxTokens>{});
      default:
        return launch(tw, __nv_bfloat16{}, std::integral_constant<int, kGvMaxTokens>{});
    }
  };
  if (a.weight.dtype() == DType::f16)
    by_x(__half{});
  else
    by_x(__nv_bfloat16{});
}

// x [T, in] f32 (rows strided) -> xs [2T, in] bf16: row t = bf16(x[t]), row T + t =
// bf16(x[t] - hi).
__global__ void split_x_kernel(const float* __restrict__ x, int64_t ldx,
                               __nv_bfloat16* __restrict__ xs, int64_t T, int64_t in) {
  const int64_t n = T * in;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / in, c = i % in;
    const float v = x[t * ldx + c];
    const __nv_bfloat16 hi = from_f32<__nv_bfloat16>(v);
    xs[i] = hi;
    xs[n + i] = from_f32<__nv_bfloat16>(v - to_f32(hi));
  }
}

// y[t, o] = y2[t, o] + y2[T + t, o] (+ bias[o]), rounded to y's dtype.
__global__ void join_halves_kernel(const float* __restrict__ y2, const void* bias, DType bt,
                                   void* y, DType yt, int64_t ldy, int64_t T, int64_t out) {
  const int64_t n = T * out;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / out, o = i % out;
    const float b = bias ? load_any(bias, bt, o) : 0.0f;
    store_any(y, yt, t * ldy + o, y2[i] + y2[n + i] + b);
  }
}

// The fewest tokens for the split GEMM: one token is linear.gemv's (priority 6; 9.3 against 12.3
// µs at 2048 -> 4096 on the H200). HYBRID_LINEAR_SPLIT_MIN_T replaces it (with
// HYBRID_LINEAR_GEMV=0, to time the split at decode sizes).
constexpr int64_t kSplitMinTokens = 2;

Reason linear_split_supports(const Linear& a) {
  static const bool off = env_is_zero("HYBRID_LINEAR_SPLIT");
  if (off) return std::string("HYBRID_LINEAR_SPLIT=0");
  static const int64_t min_t = [] {
    const char* e = std::getenv("HYBRID_LINEAR_SPLIT_MIN_T");
    return e ? std::atoll(e) : kSplitMinTokens;
  }();
  if (a.x.size(0) < min_t)
    return str("T=", a.x.size(0), " below ", min_t, " (one token is linear.gemv's)");
  if (a.x.dtype() != DType::f32 || a.weight.dtype() != DType::bf16)
    return str("x=", dtype_name(a.x.dtype()), ", W=", dtype_name(a.weight.dtype()),
               ": the split GEMM is for f32 x with bf16 W");
  return {};
}

void linear_split_run(const Linear& a, Context& ctx) {
  if (linear_trivial(a, ctx)) return;
  const int64_t T = a.x.size(0), in = a.x.size(1), out = a.weight.size(0);
  const DType wt = DType::bf16;
  const size_t xs_b = align_up(static_cast<size_t>(2 * T * in) * 2, 256);
  const size_t y2_b = align_up(static_cast<size_t>(2 * T * out) * 4, 256);
  char* ws = static_cast<char*>(ctx.workspace(kLtWorkspaceBytes + xs_b + y2_b));
  void* xs = ws + kLtWorkspaceBytes;
  auto* y2 = reinterpret_cast<float*>(ws + kLtWorkspaceBytes + xs_b);
  const cudaStream_t stream = as_stream(ctx.stream());
  const auto blocks = [](int64_t n) {
    return static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 8192));
  };
  split_x_kernel<<<blocks(T * in), 256, 0, stream>>>(a.x.data_as<const float>(), a.x.stride(0),
                                                     static_cast<__nv_bfloat16*>(xs), T, in);
  HYBRID_CUDA_CHECK_LAUNCH();
  if (!lt_linear(ctx, wt, DType::f32, xs, in, a.weight.data(), a.weight.stride(0), y2, out, 2 * T,
                 in, out, 0.0f, ws, kLtWorkspaceBytes)) {
    linear_fb_run(a, ctx);  // no cuBLASLt algorithm (odd alignment): the CUDA-core kernel
    return;
  }
  join_halves_kernel<<<blocks(T * out), 256, 0, stream>>>(
      y2, a.bias.defined() ? a.bias.data() : nullptr,
      a.bias.defined() ? a.bias.dtype() : DType::f32, a.y.data(), a.y.dtype(), a.y.stride(0), T,
      out);
  HYBRID_CUDA_CHECK_LAUNCH();
}

}  // namespace

bool lt_linear_dtypes(DType x, DType w, DType y) {
  if (x != w) return false;
  if (x == DType::f32) return y == DType::f32;
  return (x == DType::bf16 || x == DType::f16) && (y == x || y == DType::f32);
}

bool lt_linear(Context& ctx, DType ab, DType yt, const void* x, int64_t ldx, const void* w,
               int64_t ldw, void* y, int64_t ldy, int64_t T, int64_t in, int64_t out, float beta,
               void* ws, size_t ws_bytes) {
  // A single token's row stride is irrelevant to the GEMM but must be >= the row length.
  if (T == 1) {
    ldx = std::max(ldx, in);
    ldy = std::max(ldy, out);
  }
  const auto handle = static_cast<cublasLtHandle_t>(ctx.blas_handle());
  const uint32_t al_a = alignment(w, ldw, ab), al_b = alignment(x, ldx, ab),
                 al_d = alignment(y, ldy, yt);
  const uint64_t ws_limit = ws_bytes;
  const LtKey key{ctx.device().index,
                  static_cast<int64_t>(ab),
                  static_cast<int64_t>(yt),
                  T,
                  in,
                  out,
                  ldx,
                  ldw,
                  ldy,
                  al_a,
                  al_b,
                  al_d,
                  static_cast<int64_t>(ws_limit)};
  const LtPlan c =
      lt_plan(handle, key, ab, yt, T, in, out, ldx, ldw, ldy, al_a, al_b, al_d, ws_limit);
  if (!c.ok) return false;
  const float alpha = 1.0f;
  HYBRID_LT_CHECK(cublasLtMatmul(handle, c.op, &alpha, w, c.a, x, c.b, &beta, y, c.d, y, c.d,
                                 &c.algo, ws, ws_bytes, as_stream(ctx.stream())));
  return true;
}

void linear_fallback(Context& ctx, DType xt, const void* x, int64_t ldx, DType wt, const void* w,
                     int64_t ldw, DType bt, const void* bias, DType yt, void* y, int64_t ldy,
                     int64_t T, int64_t in, int64_t out) {
  if (T == 0 || out == 0) return;
  dispatch_float(xt, "linear", [&](auto tx) {
    using Tx = decltype(tx);
    dispatch_float(wt, "linear", [&](auto tw) {
      using Tw = decltype(tw);
      const auto blocks = static_cast<unsigned>((out + kFbWarps - 1) / kFbWarps);
      linear_fallback_kernel<Tx, Tw><<<blocks, kFbWarps * 32, 0, as_stream(ctx.stream())>>>(
          static_cast<const Tx*>(x), ldx, static_cast<const Tw*>(w), ldw, bias, bt, y, yt, ldy, T,
          in, out);
      HYBRID_CUDA_CHECK_LAUNCH();
    });
  });
}

void fill_bias_rows(Context& ctx, DType bt, const void* bias, DType yt, void* y, int64_t ldy,
                    int64_t T, int64_t out) {
  const int64_t n = T * out;
  if (n == 0) return;
  const auto blocks = static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 4096));
  fill_bias_kernel<<<blocks, 256, 0, as_stream(ctx.stream())>>>(bias, bt, y, yt, ldy, T, out);
  HYBRID_CUDA_CHECK_LAUNCH();
}

void register_linear(Registry& r) {
  r.add<Linear>("linear.cublaslt", DeviceType::cuda, 10, linear_lt_supports, linear_lt_run);
  r.add<Linear>("linear.gemv", DeviceType::cuda, 6, linear_gemv_supports, linear_gemv_run);
  r.add<Linear>("linear.cublaslt_split", DeviceType::cuda, 5, linear_split_supports,
                linear_split_run);
  r.add<Linear>("linear.cuda", DeviceType::cuda, 0, nullptr, linear_fb_run);
}

}  // namespace hybrid::cuda
