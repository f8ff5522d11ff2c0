// CUDA: conv1d_causal (varlen prefill with the conv state pool) and conv1d_update (decode).
//
// Per sequence and channel c, K = W - 1, win = the last K inputs (oldest first; at the start of a
// sequence: its saved state, or zeros):
//   y[t, c] = act(bias[c] + w[c, K]·x[t, c] + Σ_{j<K} w[c, j]·win[j]),   win = [win[1:], x[t, c]]
// summed in this order with every product and sum rounded in f32 (as the CPU reference) by the
// general kernels; the vectorised ones (cuda_vec) use fused multiply-adds and a fast SiLU
// (silu_fast: they are instruction-bound otherwise). act = SiLU or identity. The final state of a
// sequence is the last K entries of [state, x_seq].
//
// conv1d_causal runs two kernels on the stream:
//   1. outputs: grid (channel tiles of 128 threads × V channels, token chunks of kChunk tokens of
//      the packed axis). A thread finds the sequence of its first token (binary search in
//      cu_seqlens), fills its window from the K inputs before the chunk (x rows of the same
//      sequence, else the saved state or zeros), then slides over the chunk's tokens, crossing
//      into the next sequences where they start. Padding sequences (slot < 0) get zero rows.
//      Bytes: T·C·(x + out) + a K/kChunk re-read of x; memory-bound.
//   2. final states: one thread per (sequence, channel) with slot >= 0 reads the new state
//      (x rows, and the old state when the sequence is shorter than K) into registers, then writes
//      it. Being a separate launch, it cannot race with kernel 1's reads of the old states.
//   conv1d_causal.cuda_vec (priority 1): V = 8 channels per thread (16-byte loads / stores of
//     bf16 x and out), W <= 4; needs C % 8 == 0 and 16-byte aligned rows of x and out.
//   conv1d_causal.cuda (priority 0): V = 1, W <= 8.
// conv1d_update.cuda_vec (priority 1): W = 4, 8 channels per thread, 16-byte loads of x, out and
//   the 8 channels' state entries, weights in registers over 4 sequences (conv_update_vec_kernel).
// conv1d_update.cuda: one thread per (sequence, channel), grid-stride: reads the K state entries
//   and x, writes the shifted state and out (x is read before out is written: out may be x).
//   Bytes: N·C·(x + out + 2·K·state); W <= 8.
// Weights, bias and states are read with their dtype chosen at run time (they are small or read
// once per token chunk).
#include <algorithm>
#include <type_traits>

#include "cuda/common.cuh"
#include "cuda/dtype.cuh"
#include "cuda/elementwise_vec.cuh"
#include "cuda/kernels.h"
#include "hybrid/ops/conv.h"

namespace hybrid::cuda {

namespace {

constexpr int kThreads = 128;  // conv1d_causal: threads per block (channel tile)
constexpr int kChunk = 64;     // conv1d_causal: tokens per block
constexpr int kBatch = 4;      // conv1d_causal: tokens whose x loads are issued together
constexpr int kMaxK = 7;       // W <= 8 (general kernels)
constexpr int kMaxKVec = 3;    // W <= 4 (vectorised kernel)

struct ConvParams {
  const void* x;  // [T, C] (conv1d_update: [N, C])
  int64_t x_stride;
  void* out;  // [T, C]
  int64_t out_stride;
  const void* weight;  // [C, W]
  int64_t weight_stride;
  int weight_code;
  const void* bias;  // [C] or null
  int bias_code;
  void* state;  // [slots, C, K] or null
  int64_t state_s0, state_s1;
  int state_code;
  const int32_t* cu_seqlens;  // [N+1] or null (one sequence of T tokens)
  const int32_t* slots;       // [N] (with state)
  const void* has_initial;    // [N] i32 | u8 or null
  bool has_initial_u8;
  int64_t T, C;
  int N, K;
  bool silu;
};

__device__ __forceinline__ float act(float y, bool silu) {
  return silu ? vec::silu(y) : y;
}

// SiLU of the vectorised kernels, which are instruction-bound with the accurate one (expf and an
// IEEE division: about 20 instructions per element against ~14 available per element at the copy
// ceiling). bf16 out: y·(0.5 + 0.5·tanh(y / 2)) with tanh.approx (one MUFU op, ~2⁻¹¹ relative,
// below the 2⁻⁹ of the bf16 rounding that follows); f32 out: the fast exp and division (a few ulp).
template <class To>
__device__ __forceinline__ float silu_fast(float y) {
  if constexpr (std::is_same_v<To, __nv_bfloat16>) {
    float t;
    asm("tanh.approx.f32 %0, %1;" : "=f"(t) : "f"(0.5f * y));
    return y * fmaf(0.5f, t, 0.5f);
  } else {
    return __fdividef(y, 1.0f + __expf(-y));
  }
}

__device__ __forceinline__ bool starts_from_state(const ConvParams& p, int i) {
  if (!p.state) return false;
  if (!p.has_initial) return true;
  return p.has_initial_u8 ? static_cast<const uint8_t*>(p.has_initial)[i] != 0
                          : static_cast<const int32_t*>(p.has_initial)[i] != 0;
}

__device__ __forceinline__ int64_t seq_begin(const ConvParams& p, int i) {
  return p.cu_seqlens ? p.cu_seqlens[i] : 0;
}
__device__ __forceinline__ int64_t seq_end(const ConvParams& p, int i) {
  return p.cu_seqlens ? p.cu_seqlens[i + 1] : p.T;
}

// The V channels' weights w[v][j] (j <= k, zero above) and biases from channel c0, loaded as raw
// bits first so that all of them are in flight before any is converted: through vec::load_any,
// whose dtype branch converts inside, they were one round trip each (40 in a row at V 8, K 3).
// float_of_raw of 0 bits is 0 in every dtype.
template <int V, int KMAX>
__device__ __forceinline__ void load_conv_weights(const ConvParams& p, int64_t c0, int k,
                                                  float (&w)[V][KMAX + 1], float (&bias)[V]) {
  uint32_t w_bits[V][KMAX + 1], bias_bits[V];
#pragma unroll
  for (int v = 0; v < V; ++v) {
#pragma unroll
    for (int j = 0; j <= KMAX; ++j)
      w_bits[v][j] =
          j <= k ? vec::raw_any(p.weight, (c0 + v) * p.weight_stride + j, p.weight_code) : 0u;
    bias_bits[v] = p.bias ? vec::raw_any(p.bias, c0 + v, p.bias_code) : 0u;
  }
#pragma unroll
  for (int v = 0; v < V; ++v) {
#pragma unroll
    for (int j = 0; j <= KMAX; ++j) w[v][j] = vec::float_of_raw(p.weight_code, w_bits[v][j]);
    bias[v] = vec::float_of_raw(p.bias_code, bias_bits[v]);
  }
}

// Kernel 1 of conv1d_causal: out rows of tokens [chunk·kChunk, +kChunk), channels [c0, c0 + V).
template <class Tx, class To, int V, int KMAX>
__global__ void __launch_bounds__(kThreads) conv_causal_kernel(ConvParams p) {
  const int64_t c0 = (int64_t{blockIdx.x} * kThreads + threadIdx.x) * V;
  if (c0 >= p.C) return;
  const int64_t t_first = int64_t{blockIdx.y} * kChunk;
  const int64_t t_last = t_first + kChunk < p.T ? t_first + kChunk : p.T;
  const int K = p.K;

  float w[V][KMAX + 1], bias[V];  // weights of the V channels: w[v][j], j <= K
  load_conv_weights<V, KMAX>(p, c0, K, w, bias);

  // The sequence of t_first: the smallest i with cu[i+1] > t_first.
  int i = 0;
  if (p.cu_seqlens) {
    int lo = 0, hi = p.N - 1;
    while (lo < hi) {
      const int mid = (lo + hi) / 2;
      if (p.cu_seqlens[mid + 1] > t_first)
        hi = mid;
      else
        lo = mid + 1;
    }
    i = lo;
  }

  const Tx* x = static_cast<const Tx*>(p.x);
  To* out = static_cast<To*>(p.out);
  int64_t t = t_first;
  while (t < t_last) {
    while (seq_end(p, i) <= t) ++i;  // skip finished and empty sequences
    const int64_t begin = seq_begin(p, i);
    const int64_t stop = seq_end(p, i) < t_last ? seq_end(p, i) : t_last;
    const int slot = p.state ? p.slots[i] : 0;
    if (p.state && slot < 0) {  // padding sequence: zero rows
      float zero[V] = {};
      vec::Raw<To, V> rz;
      vec::from_floats(zero, rz);
      for (; t < stop; ++t) vec::store(out + t * p.out_stride + c0, rz);
      continue;
    }
    const bool from_state = starts_from_state(p, i);

    // win[j] = x_ext at token t - K + j: x when inside the sequence, else state or zero.
    float win[KMAX][V];
#pragma unroll
    for (int j = 0; j < KMAX; ++j) {
      const int64_t src = t - K + j;
      const bool in_x = j < K && src >= begin;
      const bool in_state = j < K && !in_x && from_state;
      vec::Raw<Tx, V> r;
      if (in_x) vec::load(x + (in_x ? src : 0) * p.x_stride + c0, r);
      const int64_t so = int64_t{slot} * p.state_s0 + K + (src - begin);  // state entry K+src-begin
      uint32_t s_bits[V];  // raw first: the V loads in flight together (see load_conv_weights)
#pragma unroll
      for (int v = 0; v < V; ++v)
        s_bits[v] = in_state ? vec::raw_any(p.state, so + (c0 + v) * p.state_s1, p.state_code) : 0u;
#pragma unroll
      for (int v = 0; v < V; ++v)
        win[j][v] = in_x ? to_f32(r.elem()[v]) : vec::float_of_raw(p.state_code, s_bits[v]);
    }

    // kBatch tokens at a time: their loads are all issued before the math (loads in flight).
    for (; t < stop; t += kBatch) {
      vec::Raw<Tx, V> rx[kBatch];
#pragma unroll
      for (int u = 0; u < kBatch; ++u)
        if (t + u < stop) vec::load(x + (t + u) * p.x_stride + c0, rx[u]);
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        if (t + u >= stop) continue;
        float xv[V], y[V];
        vec::to_floats(rx[u], xv);
#pragma unroll
        for (int v = 0; v < V; ++v) {
          float acc = 0.0f;
          if constexpr (V == 1) {  // the general kernel: rounded as the CPU reference
#pragma unroll
            for (int j = 0; j <= KMAX; ++j)
              if (j == K) acc = __fadd_rn(bias[v], __fmul_rn(w[v][j], xv[v]));
#pragma unroll
            for (int j = 0; j < KMAX; ++j)
              if (j < K) acc = __fadd_rn(acc, __fmul_rn(w[v][j], win[j][v]));
            y[v] = act(acc, p.silu);
          } else {  // the vectorised kernel: fused multiply-adds, the fast SiLU
#pragma unroll
            for (int j = 0; j <= KMAX; ++j)
              if (j == K) acc = fmaf(w[v][j], xv[v], bias[v]);
#pragma unroll
            for (int j = 0; j < KMAX; ++j)
              if (j < K) acc = fmaf(w[v][j], win[j][v], acc);
            y[v] = p.silu ? silu_fast<To>(acc) : acc;
          }
        }
#pragma unroll
        for (int j = 0; j + 1 < KMAX; ++j)
          if (j + 1 < K)
#pragma unroll
            for (int v = 0; v < V; ++v) win[j][v] = win[j + 1][v];
#pragma unroll
        for (int j = 0; j < KMAX; ++j)
          if (j == K - 1)
#pragma unroll
            for (int v = 0; v < V; ++v) win[j][v] = xv[v];
        vec::Raw<To, V> ro;
        vec::from_floats(y, ro);
        vec::store(out + (t + u) * p.out_stride + c0, ro);
      }
    }
    t = stop;
  }
}

// Kernel 2 of conv1d_causal: the final state of every (sequence i, channel c) with slot >= 0:
//   new[j] = x_ext[len + j], x_ext = [old state (or zeros), x rows of the sequence], len tokens.
template <class Tx>
__global__ void __launch_bounds__(256) conv_final_state_kernel(ConvParams p) {
  const int64_t total = int64_t{p.N} * p.C;
  const int64_t step = int64_t{gridDim.x} * blockDim.x;
  for (int64_t idx = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; idx < total; idx += step) {
    const int i = static_cast<int>(idx / p.C);
    const int64_t c = idx % p.C;
    const int slot = p.slots[i];
    if (slot < 0) continue;
    const int64_t begin = seq_begin(p, i), len = seq_end(p, i) - begin;
    const bool from_state = starts_from_state(p, i);
    const int64_t so = int64_t{slot} * p.state_s0 + c * p.state_s1;
    float nw[kMaxK];
#pragma unroll
    for (int j = 0; j < kMaxK; ++j) {
      nw[j] = 0.0f;
      if (j >= p.K) continue;
      const int64_t e = len + j;  // index into x_ext
      if (e >= p.K)
        nw[j] = to_f32(static_cast<const Tx*>(p.x)[(begin + e - p.K) * p.x_stride + c]);
      else if (from_state)
        nw[j] = vec::load_any(p.state, so + e, p.state_code);
    }
#pragma unroll
    for (int j = 0; j < kMaxK; ++j)
      if (j < p.K) vec::store_any(p.state, so + j, p.state_code, nw[j]);
  }
}

// conv1d_update: per (sequence i, channel c), s = slots[i] >= 0:
//   y = act(bias[c] + w[c, K]·x[i, c] + Σ_j w[c, j]·state[s, c, j]);  state[s, c] = [state[1:], x]
template <class Tx, class To>
__global__ void __launch_bounds__(256) conv_update_kernel(ConvParams p) {
  const int64_t total = int64_t{p.N} * p.C;
  const int64_t step = int64_t{gridDim.x} * blockDim.x;
  for (int64_t idx = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; idx < total; idx += step) {
    const int64_t i = idx / p.C, c = idx % p.C;
    To* orow = static_cast<To*>(p.out) + i * p.out_stride;
    const int slot = p.slots[i];
    if (slot < 0) {
      orow[c] = from_f32<To>(0.0f);
      continue;
    }
    const int64_t so = int64_t{slot} * p.state_s0 + c * p.state_s1;
    float win[kMaxK];
#pragma unroll
    for (int j = 0; j < kMaxK; ++j)
      win[j] = j < p.K ? vec::load_any(p.state, so + j, p.state_code) : 0.0f;
    const float xv = to_f32(static_cast<const Tx*>(p.x)[i * p.x_stride + c]);
    const int64_t wo = c * p.weight_stride;
    float acc = __fadd_rn(p.bias ? vec::load_any(p.bias, c, p.bias_code) : 0.0f,
                          __fmul_rn(vec::load_any(p.weight, wo + p.K, p.weight_code), xv));
#pragma unroll
    for (int j = 0; j < kMaxK; ++j)
      if (j < p.K)
        acc = __fadd_rn(acc, __fmul_rn(vec::load_any(p.weight, wo + j, p.weight_code), win[j]));
#pragma unroll
    for (int j = 0; j < kMaxK; ++j)
      if (j < p.K) vec::store_any(p.state, so + j, p.state_code, j + 1 < p.K ? win[j + 1] : xv);
    orow[c] = from_f32<To>(act(acc, p.silu));
  }
}

// conv1d_update, vectorised (W = 4, K = 3): a thread owns V = 8 channels [c0, c0 + 8) and keeps
// their weights and bias in registers while it walks kUpdSeqs sequences i = blockIdx.y·kUpdSeqs +
// k: x and out as one 16-byte vector, the 8 channels' 3 state entries as 24 contiguous elements
// (48 B bf16 / 96 B f32: 3 or 6 16-byte loads; the pool rows are [C, 3] with 3 contiguous).
// Same math as conv_update_kernel with fused multiply-adds and the fast SiLU.
constexpr int kUpdSeqs = 4;

template <class Tx, class To, class Ts>
__global__ void __launch_bounds__(kThreads) conv_update_vec_kernel(ConvParams p) {
  constexpr int V = 8, K = 3;
  const int64_t c0 = (int64_t{blockIdx.x} * kThreads + threadIdx.x) * V;
  if (c0 >= p.C) return;
  float w[V][K + 1], bias[V];  // the 32 weights and 8 biases, loaded together
  load_conv_weights<V, K>(p, c0, K, w, bias);
  for (int k = 0; k < kUpdSeqs; ++k) {
    const int64_t i = int64_t{blockIdx.y} * kUpdSeqs + k;
    if (i >= p.N) return;
    To* orow = static_cast<To*>(p.out) + i * p.out_stride + c0;
    const int slot = p.slots[i];
    if (slot < 0) {
      float zero[V] = {};
      vec::Raw<To, V> rz;
      vec::from_floats(zero, rz);
      vec::store(orow, rz);
      continue;
    }
    Ts* srow = static_cast<Ts*>(p.state) + int64_t{slot} * p.state_s0 + c0 * K;
    vec::Raw<Tx, V> rx;
    vec::Raw<Ts, V * K> rs;
    vec::load(static_cast<const Tx*>(p.x) + i * p.x_stride + c0, rx);
    vec::load(srow, rs);
    float xv[V], win[V * K], y[V];
    vec::to_floats(rx, xv);
    vec::to_floats(rs, win);
#pragma unroll
    for (int v = 0; v < V; ++v) {
      float acc = fmaf(w[v][K], xv[v], bias[v]);
#pragma unroll
      for (int j = 0; j < K; ++j) acc = fmaf(w[v][j], win[v * K + j], acc);
      y[v] = p.silu ? silu_fast<To>(acc) : acc;
#pragma unroll
      for (int j = 0; j < K; ++j) win[v * K + j] = j + 1 < K ? win[v * K + j + 1] : xv[v];
    }
    vec::from_floats(win, rs);
    vec::store(srow, rs);
    vec::Raw<To, V> ro;
    vec::from_floats(y, ro);
    vec::store(orow, ro);  // after x was read: out may be x
  }
}

template <class Body>
void dispatch_act_pair(DType x, DType out, const char* op, Body&& body) {
  auto one = [&](DType t, auto&& next) {
    if (t == DType::f32)
      next(float{});
    else if (t == DType::bf16)
      next(__nv_bfloat16{});
    else
      fail("[", op, "] dtype ", dtype_name(t), " is not f32 or bf16");
  };
  one(x, [&](auto tx) { one(out, [&](auto to) { body(tx, to); }); });
}

template <class Args>
ConvParams common_params(const Args& a) {
  ConvParams p{};
  p.x = a.x.data(), p.x_stride = a.x.stride(0);
  p.out = a.out.data(), p.out_stride = a.out.stride(0);
  p.weight = a.weight.data(), p.weight_stride = a.weight.stride(0);
  p.weight_code = vec::dtype_code(a.weight.dtype());
  p.bias = a.bias.defined() ? a.bias.data() : nullptr;
  p.bias_code = a.bias.defined() ? vec::dtype_code(a.bias.dtype()) : 0;
  if (a.conv_state.defined()) {
    p.state = a.conv_state.data();
    p.state_s0 = a.conv_state.stride(0), p.state_s1 = a.conv_state.stride(1);
    p.state_code = vec::dtype_code(a.conv_state.dtype());
    p.slots = a.state_slots.template data_as<const int32_t>();
  }
  p.C = a.x.size(1);
  p.K = static_cast<int>(a.weight.size(1) - 1);
  p.silu = a.silu;
  return p;
}

ConvParams causal_params(const Conv1dCausal& a) {
  ConvParams p = common_params(a);
  p.T = a.x.size(0);
  p.N = a.cu_seqlens.defined() ? static_cast<int>(a.cu_seqlens.size(0) - 1) : 1;
  p.cu_seqlens = a.cu_seqlens.defined() ? a.cu_seqlens.data_as<const int32_t>() : nullptr;
  if (a.has_initial_state.defined()) {
    p.has_initial = a.has_initial_state.data();
    p.has_initial_u8 = a.has_initial_state.dtype() == DType::u8;
  }
  return p;
}

Reason causal_supports_general(const Conv1dCausal& a) {
  if (a.weight.size(1) - 1 > kMaxK) return str("kernel width ", a.weight.size(1), " above 8");
  if ((a.x.size(0) + kChunk - 1) / kChunk > 65535)
    return str("T = ", a.x.size(0), " above ", 65535 * kChunk);
  if ((a.cu_seqlens.defined() ? a.cu_seqlens.size(0) : 2) > (int64_t{1} << 30))
    return std::string("more than 2^30 sequences");
  return {};
}

Reason causal_supports_vec(const Conv1dCausal& a) {
  if (Reason r = causal_supports_general(a)) return r;
  if (a.weight.size(1) - 1 > kMaxKVec) return str("kernel width ", a.weight.size(1), " above 4");
  if (a.x.size(1) % 8 != 0) return str("C = ", a.x.size(1), " is not a multiple of 8");
  if (!vec::aligned16(a.x.data()) || !vec::stride16(a.x.stride(0), dtype_size(a.x.dtype())) ||
      !vec::aligned16(a.out.data()) || !vec::stride16(a.out.stride(0), dtype_size(a.out.dtype())))
    return std::string("a row of x or out is not 16-byte aligned");
  return {};
}

template <int V, int KMAX>
void causal_cuda(const Conv1dCausal& a, Context& ctx) {
  const ConvParams p = causal_params(a);
  if (p.T == 0 && !p.state) return;
  dispatch_act_pair(a.x.dtype(), a.out.dtype(), Conv1dCausal::op_name, [&](auto tx, auto to) {
    using Tx = decltype(tx);
    using To = decltype(to);
    if (p.T > 0 && p.C > 0) {
      const dim3 grid(static_cast<unsigned>((p.C / V + kThreads - 1) / kThreads),
                      static_cast<unsigned>((p.T + kChunk - 1) / kChunk));
      conv_causal_kernel<Tx, To, V, KMAX><<<grid, kThreads, 0, as_stream(ctx.stream())>>>(p);
      HYBRID_CUDA_CHECK_LAUNCH();
    }
    if (p.state && p.C > 0) {
      conv_final_state_kernel<Tx>
          <<<vec::grid_for(int64_t{p.N} * p.C, 256), 256, 0, as_stream(ctx.stream())>>>(p);
      HYBRID_CUDA_CHECK_LAUNCH();
    }
  });
}

Reason update_supports(const Conv1dUpdate& a) {
  if (a.weight.size(1) - 1 > kMaxK) return str("kernel width ", a.weight.size(1), " above 8");
  if (a.x.size(0) > (int64_t{1} << 30)) return std::string("more than 2^30 sequences");
  return {};
}

void update_cuda(const Conv1dUpdate& a, Context& ctx) {
  ConvParams p = common_params(a);
  p.N = static_cast<int>(a.x.size(0));
  const int64_t total = int64_t{p.N} * p.C;
  if (total == 0) return;
  dispatch_act_pair(a.x.dtype(), a.out.dtype(), Conv1dUpdate::op_name, [&](auto tx, auto to) {
    using Tx = decltype(tx);
    using To = decltype(to);
    conv_update_kernel<Tx, To><<<vec::grid_for(total, 256), 256, 0, as_stream(ctx.stream())>>>(p);
    HYBRID_CUDA_CHECK_LAUNCH();
  });
}

Reason update_supports_vec(const Conv1dUpdate& a) {
  if (Reason r = update_supports(a)) return r;
  if (a.weight.size(1) != 4) return str("kernel width ", a.weight.size(1), " is not 4");
  if (a.x.size(1) % 8 != 0) return str("C = ", a.x.size(1), " is not a multiple of 8");
  const Tensor& st = a.conv_state;
  if (st.stride(2) != 1 || st.stride(1) != 3)
    return std::string("conv_state rows are not [C, 3] contiguous");
  if (!vec::aligned16(st.data()) || !vec::stride16(st.stride(0), dtype_size(st.dtype())))
    return std::string("a conv_state slot is not 16-byte aligned");
  if (!vec::aligned16(a.x.data()) || !vec::stride16(a.x.stride(0), dtype_size(a.x.dtype())) ||
      !vec::aligned16(a.out.data()) || !vec::stride16(a.out.stride(0), dtype_size(a.out.dtype())))
    return std::string("a row of x or out is not 16-byte aligned");
  if ((a.x.size(0) + kUpdSeqs - 1) / kUpdSeqs > 65535)
    return std::string("more than 262140 sequences");
  return {};
}

void update_vec_cuda(const Conv1dUpdate& a, Context& ctx) {
  ConvParams p = common_params(a);
  p.N = static_cast<int>(a.x.size(0));
  if (p.N == 0 || p.C == 0) return;
  const dim3 grid(static_cast<unsigned>((p.C / 8 + kThreads - 1) / kThreads),
                  static_cast<unsigned>((p.N + kUpdSeqs - 1) / kUpdSeqs));
  dispatch_act_pair(a.x.dtype(), a.out.dtype(), Conv1dUpdate::op_name, [&](auto tx, auto to) {
    auto launch = [&](auto ts) {
      conv_update_vec_kernel<decltype(tx), decltype(to), decltype(ts)>
          <<<grid, kThreads, 0, as_stream(ctx.stream())>>>(p);
      HYBRID_CUDA_CHECK_LAUNCH();
    };
    if (a.conv_state.dtype() == DType::bf16)
      launch(__nv_bfloat16{});
    else if (a.conv_state.dtype() == DType::f32)
      launch(float{});
    else
      fail("[conv1d_update] conv_state dtype ", dtype_name(a.conv_state.dtype()),
           " is not f32 or bf16");
  });
}

}  // namespace

void register_conv(Registry& r) {
  r.add<Conv1dCausal>("conv1d_causal.cuda_vec", DeviceType::cuda, 1, causal_supports_vec,
                      causal_cuda<8, kMaxKVec>);
  r.add<Conv1dCausal>("conv1d_causal.cuda", DeviceType::cuda, 0, causal_supports_general,
                      causal_cuda<1, kMaxK>);
  r.add<Conv1dUpdate>("conv1d_update.cuda_vec", DeviceType::cuda, 1, update_supports_vec,
                      update_vec_cuda);
  r.add<Conv1dUpdate>("conv1d_update.cuda", DeviceType::cuda, 0, update_supports, update_cuda);
}

}  // namespace hybrid::cuda
