// CUDA: the GDN token-by-token recurrence: gdn_recurrent (decode and speculative verification,
// T = 1..16 tokens per sequence), the fused prep forms of seed 000 (gdn_prep_step,
// gdn_prep_chunk), the unfused layer's gates (gdn_gates), and the rollback pair gdn_record /
// gdn_replay.
//
// Per sequence n and value head hv, state S [V, K] (V-first, K contiguous), f32 in registers:
//   S ← α S;  u = β (v − S k̂);  S ← S + u k̂ᵀ;  o = S q̂
// computed as one pass over the old S per token: with sk = S·k̂ and sq = S·q̂ (both rows of the
// old S, one fused warp reduction),
//   u = β (v − α sk),   o = α sq + u (k̂·q̂),   S ← α S + u k̂ᵀ.
//
// Work split: block (V-slice of kRows rows, hv, n); each warp owns kRowsPerWarp rows; lane l owns
// columns [l·KC, l·KC + KC) of each (KC = K/32), so a warp-wide row load is one coalesced K-row.
// The state is read once and written once per call whatever T is (memory-bound on it):
//   bytes ≈ N·Hv·V·K·(2 · state element size) + the token tensors.
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "cuda/common.cuh"
#include "cuda/dtype.cuh"
#include "cuda/kernels.h"
#include "cuda/warp.cuh"
#include "hybrid/ops/gdn.h"

namespace hybrid::cuda {

namespace {

constexpr int kWarps = 4;
constexpr int kRowsPerWarp = 8;
constexpr int kRows = kWarps * kRowsPerWarp;  // V rows per block

enum class Mode : int { recurrent, prep, record };

// A float scalar of any float dtype (per-token gates, weights): dtype is uniform per launch.
struct Scalars {
  const void* p = nullptr;
  DType dtype = DType::f32;
  int64_t s0 = 0, s1 = 0;  // strides (elements) of dims 0 and 1
  __device__ __forceinline__ float at(int64_t i, int64_t j = 0) const {
    return load_any(p, dtype, i * s0 + j * s1);
  }
};

struct GdnParams {
  // Token inputs (recurrent / record): q, k [T, Hk, K], v [T, Hv, V]; strides in elements.
  const void* q = nullptr;
  int64_t q_t = 0, q_h = 0;
  const void* k = nullptr;
  int64_t k_t = 0, k_h = 0;
  const void* v = nullptr;
  int64_t v_t = 0, v_h = 0;
  Scalars g, beta;  // [T, Hv]
  // Prep inputs: conv_out [T, 2·Hk·K + Hv·V] (row stride conv_t), raw a, b [T, Hv], per-head
  // A_log, dt_bias [Hv], norm weights [Hk, K].
  Scalars a_raw, b_raw, A_log, dt_bias, q_norm, k_norm;
  float eps = 1e-6f;
  // The pool [slots, Hv, V, K] (K contiguous) and the sequence layout.
  void* state = nullptr;
  int64_t st_slot = 0, st_head = 0, st_row = 0;
  const int* cu_seqlens = nullptr;   // [N+1]
  const int* slots = nullptr;        // [N]
  const int* has_initial = nullptr;  // [N] or null
  // Outputs.
  void* out = nullptr;  // [T, Hv, V]
  int64_t o_t = 0, o_h = 0;
  float* states_per_token = nullptr;  // [T, Hv, V, K] contiguous, or null
  float* tape_k = nullptr;            // [T, Hk, K] contiguous
  float* tape_u = nullptr;            // [T, Hv, V]
  float* tape_alpha = nullptr;        // [T, Hv]
  int Hk = 0, Hv = 0, V = 0, K = 0;
  float scale = 1.0f;
  bool l2norm = false;
};

template <int KC, class S>
__device__ __forceinline__ void load_row(const S* p, float (&r)[KC]) {
  if constexpr (std::is_same_v<S, float> && KC % 4 == 0) {
#pragma unroll
    for (int c = 0; c < KC; c += 4) {
      const float4 x = *reinterpret_cast<const float4*>(p + c);
      r[c] = x.x, r[c + 1] = x.y, r[c + 2] = x.z, r[c + 3] = x.w;
    }
  } else {
#pragma unroll
    for (int c = 0; c < KC; ++c) r[c] = to_f32(p[c]);
  }
}

template <int KC, class S>
__device__ __forceinline__ void store_row(S* p, const float (&r)[KC]) {
  if constexpr (std::is_same_v<S, float> && KC % 4 == 0) {
#pragma unroll
    for (int c = 0; c < KC; c += 4)
      *reinterpret_cast<float4*>(p + c) = make_float4(r[c], r[c + 1], r[c + 2], r[c + 3]);
  } else {
#pragma unroll
    for (int c = 0; c < KC; ++c) p[c] = from_f32<S>(r[c]);
  }
}

// One (V-slice, hv, n). In = q/k/v/conv_out/out element type, S = state element type.
template <int KC, class In, class S>
__global__ void __launch_bounds__(kWarps * 32)
    gdn_recurrent_kernel(const GdnParams p, const Mode mode) {
  const int n = blockIdx.z, hv = blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row0 = blockIdx.x * kRows + warp * kRowsPerWarp;  // this warp's first V row
  const int hk = hv / (p.Hv / p.Hk);
  const int c0 = lane * KC;
  const int bos = p.cu_seqlens[n], eos = p.cu_seqlens[n + 1];
  const int slot = p.slots[n];
  In* out = static_cast<In*>(p.out);

  if (slot < 0) {  // padding sequence: zero outputs, pool untouched
    for (int t = bos; t < eos; ++t) {
      if (lane < kRowsPerWarp && row0 + lane < p.V) {
        out[t * p.o_t + hv * p.o_h + row0 + lane] = from_f32<In>(0.0f);
        if (mode == Mode::record) p.tape_u[(int64_t(t) * p.Hv + hv) * p.V + row0 + lane] = 0.0f;
      }
      if (mode == Mode::record && blockIdx.x == 0 && threadIdx.x == 0)
        p.tape_alpha[int64_t(t) * p.Hv + hv] = 0.0f;
      if (mode == Mode::record && blockIdx.x == 0 && warp == 0 && hv % (p.Hv / p.Hk) == 0)
        for (int c = 0; c < KC; ++c) p.tape_k[(int64_t(t) * p.Hk + hk) * p.K + c0 + c] = 0.0f;
      if (p.states_per_token)
        for (int r = 0; r < kRowsPerWarp; ++r)
          if (row0 + r < p.V) {
            float zero[KC] = {};
            store_row<KC>(
                p.states_per_token + ((int64_t(t) * p.Hv + hv) * p.V + row0 + r) * p.K + c0, zero);
          }
    }
    return;
  }

  // S rows of this warp: kRowsPerWarp × KC floats per lane.
  S* pool = static_cast<S*>(p.state) + slot * p.st_slot + hv * p.st_head;
  float s[kRowsPerWarp][KC];
  const bool from_zero = p.has_initial && p.has_initial[n] == 0;
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    if (!from_zero && row0 + r < p.V) {
      load_row<KC>(pool + (row0 + r) * p.st_row + c0, s[r]);
    } else {
#pragma unroll
      for (int c = 0; c < KC; ++c) s[r][c] = 0.0f;
    }
  }

  for (int t = bos; t < eos; ++t) {
    float q[KC], k[KC], alpha, beta;
    if (mode == Mode::prep) {
      // Seed 000: per-head RMSNorm of q and k with weights; g and β from raw a, b.
      const In* row = static_cast<const In*>(p.q) + t * p.q_t;  // conv_out row
      float qq = 0.0f, kk = 0.0f;
#pragma unroll
      for (int c = 0; c < KC; ++c) {
        q[c] = to_f32(row[hk * p.K + c0 + c]);
        k[c] = to_f32(row[(p.Hk + hk) * p.K + c0 + c]);
        qq += q[c] * q[c];
        kk += k[c] * k[c];
      }
      const float qr = rsqrtf(warp_sum(qq) / p.K + p.eps), kr = rsqrtf(warp_sum(kk) / p.K + p.eps);
#pragma unroll
      for (int c = 0; c < KC; ++c) {
        q[c] *= qr * p.q_norm.at(hk, c0 + c);
        k[c] *= kr * p.k_norm.at(hk, c0 + c);
      }
      const float x = p.a_raw.at(t, hv) + p.dt_bias.at(hv);
      const float softplus = x > 20.0f ? x : log1pf(__expf(x));
      alpha = __expf(-__expf(p.A_log.at(hv)) * softplus);
      beta = 1.0f / (1.0f + __expf(-p.b_raw.at(t, hv)));
    } else {
      const In* qp = static_cast<const In*>(p.q) + t * p.q_t + hk * p.q_h + c0;
      const In* kp = static_cast<const In*>(p.k) + t * p.k_t + hk * p.k_h + c0;
#pragma unroll
      for (int c = 0; c < KC; ++c) q[c] = to_f32(qp[c]), k[c] = to_f32(kp[c]);
      if (p.l2norm) {
        float qq = 0.0f, kk = 0.0f;
#pragma unroll
        for (int c = 0; c < KC; ++c) qq += q[c] * q[c], kk += k[c] * k[c];
        const float qr = rsqrtf(warp_sum(qq) + 1e-6f), kr = rsqrtf(warp_sum(kk) + 1e-6f);
#pragma unroll
        for (int c = 0; c < KC; ++c) q[c] *= qr, k[c] *= kr;
      }
#pragma unroll
      for (int c = 0; c < KC; ++c) q[c] *= p.scale;
      alpha = __expf(p.g.at(t, hv));
      beta = p.beta.at(t, hv);
    }
    float kq = 0.0f;
#pragma unroll
    for (int c = 0; c < KC; ++c) kq += k[c] * q[c];
    kq = warp_sum(kq);

    const In* vrow = mode == Mode::prep
                         ? static_cast<const In*>(p.q) + t * p.q_t + 2 * p.Hk * p.K + hv * p.V
                         : static_cast<const In*>(p.v) + t * p.v_t + hv * p.v_h;
    float my_o = 0.0f, my_u = 0.0f;  // lane r keeps row r's o and u
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      float sk = 0.0f, sq = 0.0f;
#pragma unroll
      for (int c = 0; c < KC; ++c) sk += s[r][c] * k[c], sq += s[r][c] * q[c];
      sk = warp_sum(sk);
      sq = warp_sum(sq);
      const float vr = row0 + r < p.V ? to_f32(vrow[row0 + r]) : 0.0f;
      const float u = beta * (vr - alpha * sk);
      const float o = alpha * sq + u * kq;
#pragma unroll
      for (int c = 0; c < KC; ++c) s[r][c] = alpha * s[r][c] + u * k[c];
      if (lane == r) my_o = o, my_u = u;
    }
    if (lane < kRowsPerWarp && row0 + lane < p.V) {
      out[t * p.o_t + hv * p.o_h + row0 + lane] = from_f32<In>(my_o);
      if (mode == Mode::record) p.tape_u[(int64_t(t) * p.Hv + hv) * p.V + row0 + lane] = my_u;
    }
    if (mode == Mode::record && blockIdx.x == 0 && threadIdx.x == 0)
      p.tape_alpha[int64_t(t) * p.Hv + hv] = alpha;
    if (mode == Mode::record && blockIdx.x == 0 && warp == 0 && hv % (p.Hv / p.Hk) == 0)
#pragma unroll
      for (int c = 0; c < KC; ++c) p.tape_k[(int64_t(t) * p.Hk + hk) * p.K + c0 + c] = k[c];
    if (p.states_per_token)
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r)
        if (row0 + r < p.V)
          store_row<KC>(p.states_per_token + ((int64_t(t) * p.Hv + hv) * p.V + row0 + r) * p.K + c0,
                        s[r]);
  }

  if (mode != Mode::record)
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r)
      if (row0 + r < p.V) store_row<KC>(pool + (row0 + r) * p.st_row + c0, s[r]);
}

// gdn_replay: S ← α_t S + u_t k̂_tᵀ for the first num_tokens[n] tokens, from the pool snapshot.
template <int KC, class S>
__global__ void __launch_bounds__(kWarps * 32)
    gdn_replay_kernel(const float* tape_k, const float* tape_u, const float* tape_alpha,
                      void* state, int64_t st_slot, int64_t st_head, int64_t st_row,
                      const int* cu_seqlens, const int* slots, const int* num_tokens,
                      void* state_out, int64_t so_n, int64_t so_head, int64_t so_row, int Hk,
                      int Hv, int V, int K) {
  const int n = blockIdx.z, hv = blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row0 = blockIdx.x * kRows + warp * kRowsPerWarp;
  const int hk = hv / (Hv / Hk), c0 = lane * KC;
  const int slot = slots[n];
  S* pool = static_cast<S*>(state) + (slot < 0 ? 0 : slot) * st_slot + hv * st_head;
  S* dst = state_out ? static_cast<S*>(state_out) + n * so_n + hv * so_head : pool;
  const int64_t dst_row = state_out ? so_row : st_row;
  float s[kRowsPerWarp][KC];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    if (slot >= 0 && row0 + r < V) {
      load_row<KC>(pool + (row0 + r) * st_row + c0, s[r]);
    } else {
#pragma unroll
      for (int c = 0; c < KC; ++c) s[r][c] = 0.0f;
    }
  }
  if (slot < 0 && !state_out) return;  // padding: pool untouched
  if (slot >= 0) {
    const int bos = cu_seqlens[n], end = bos + num_tokens[n];
    for (int t = bos; t < end; ++t) {
      const float alpha = tape_alpha[int64_t(t) * Hv + hv];
      float k[KC];
#pragma unroll
      for (int c = 0; c < KC; ++c) k[c] = tape_k[(int64_t(t) * Hk + hk) * K + c0 + c];
      const float* u = tape_u + (int64_t(t) * Hv + hv) * V;
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
        const float ur = row0 + r < V ? u[row0 + r] : 0.0f;
#pragma unroll
        for (int c = 0; c < KC; ++c) s[r][c] = alpha * s[r][c] + ur * k[c];
      }
    }
  }
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r)
    if (row0 + r < V) store_row<KC>(dst + (row0 + r) * dst_row + c0, s[r]);
}

// ---- host side -----------------------------------------------------------------------------

Reason check_layout(int64_t K, const Tensor& state, const Tensor& in, const char* in_name) {
  if (K != 32 && K != 64 && K != 128 && K != 256) return str("K=", K, " not in {32, 64, 128, 256}");
  if (in.dtype() == DType::f16) return str(in_name, " f16 is not built (f32, bf16)");
  if (state.stride(-1) != 1) return std::string("state: K must be contiguous");
  const size_t esz = dtype_size(state.dtype());
  if (reinterpret_cast<uintptr_t>(state.data()) % 16 || (state.stride(-2) * esz) % 16 ||
      (state.stride(-3) * esz) % 16 || (state.stride(0) * esz) % 16)
    return std::string("state: rows must be 16-byte aligned");
  return {};
}

Scalars scalars(const Tensor& t) {
  Scalars s;
  if (!t.defined()) return s;
  s.p = t.data();
  s.dtype = t.dtype();
  s.s0 = t.rank() > 1 ? t.stride(0) : 1;
  s.s1 = t.rank() > 1 ? t.stride(1) : 0;
  if (t.rank() == 1) s.s0 = t.stride(0);
  return s;
}

template <class Body>
void dispatch_kc(int64_t K, Body&& body) {
  switch (K) {
    case 32:
      body(std::integral_constant<int, 1>{});
      break;
    case 64:
      body(std::integral_constant<int, 2>{});
      break;
    case 128:
      body(std::integral_constant<int, 4>{});
      break;
    default:
      body(std::integral_constant<int, 8>{});
      break;
  }
}

template <class Body>
void dispatch_in_state(DType in, DType state, Body&& body) {
  auto with_state = [&](auto tin) {
    if (state == DType::bf16)
      body(tin, __nv_bfloat16{});
    else
      body(tin, float{});
  };
  if (in == DType::bf16)
    with_state(__nv_bfloat16{});
  else
    with_state(float{});
}

void launch(const GdnParams& p, Mode mode, DType in, DType state, int64_t N, Context& ctx) {
  if (N == 0) return;
  const dim3 grid(static_cast<unsigned>((p.V + kRows - 1) / kRows), static_cast<unsigned>(p.Hv),
                  static_cast<unsigned>(N));
  dispatch_kc(p.K, [&](auto kc) {
    dispatch_in_state(in, state, [&](auto tin, auto ts) {
      gdn_recurrent_kernel<decltype(kc)::value, decltype(tin), decltype(ts)>
          <<<grid, kWarps * 32, 0, as_stream(ctx.stream())>>>(p, mode);
      HYBRID_CUDA_CHECK_LAUNCH();
    });
  });
}

void set_state(GdnParams& p, const Tensor& state) {
  p.state = state.data();
  p.st_slot = state.stride(0);
  p.st_head = state.stride(1);
  p.st_row = state.stride(2);
}

// ---- gdn_recurrent -------------------------------------------------------------------------

Reason recurrent_supports(const GdnRecurrent& a) {
  if (a.q.dtype() != a.k.dtype() || a.v.dtype() != a.q.dtype() || a.out.dtype() != a.q.dtype())
    return std::string("q, k, v and out must share one dtype");
  if (a.states_per_token.defined() && !a.states_per_token.is_contiguous())
    return std::string("states_per_token must be contiguous");
  return check_layout(a.q.size(2), a.state, a.q, "q");
}

// The fields gdn_recurrent and gdn_record share (q, k, v, g, β, pool, varlen, out, scale).
template <class Args>
GdnParams token_params(const Args& a) {
  GdnParams p;
  p.q = a.q.data(), p.q_t = a.q.stride(0), p.q_h = a.q.stride(1);
  p.k = a.k.data(), p.k_t = a.k.stride(0), p.k_h = a.k.stride(1);
  p.v = a.v.data(), p.v_t = a.v.stride(0), p.v_h = a.v.stride(1);
  p.g = scalars(a.g);
  p.beta = scalars(a.beta);
  set_state(p, a.state);
  p.cu_seqlens = a.cu_seqlens.template data_as<const int>();
  p.slots = a.state_slots.template data_as<const int>();
  p.out = a.out.data(), p.o_t = a.out.stride(0), p.o_h = a.out.stride(1);
  p.Hk = static_cast<int>(a.q.size(1)), p.Hv = static_cast<int>(a.v.size(1));
  p.V = static_cast<int>(a.v.size(2)), p.K = static_cast<int>(a.q.size(2));
  p.scale = a.scale ? *a.scale : 1.0f / std::sqrt(static_cast<float>(p.K));
  p.l2norm = a.use_qk_l2norm;
  return p;
}

void recurrent_cuda(const GdnRecurrent& a, Context& ctx) {
  GdnParams p = token_params(a);
  p.has_initial =
      a.has_initial_state.defined() ? a.has_initial_state.data_as<const int>() : nullptr;
  p.states_per_token = a.states_per_token.defined() ? a.states_per_token.data_as<float>() : nullptr;
  launch(p, Mode::recurrent, a.q.dtype(), a.state.dtype(), a.state_slots.size(0), ctx);
}

// ---- gdn_prep_chunk / gdn_prep_step ---------------------------------------------------------

template <class Args>
Reason prep_supports(const Args& a) {
  if (a.y.dtype() != a.conv_out.dtype()) return std::string("y and conv_out must share one dtype");
  return check_layout(a.q_norm_weight.size(1), a.state, a.conv_out, "conv_out");
}

template <class Args>
void prep_params(const Args& a, GdnParams& p) {
  p.q = a.conv_out.data(), p.q_t = a.conv_out.stride(0);
  p.a_raw = scalars(a.a), p.b_raw = scalars(a.b);
  p.A_log = scalars(a.A_log), p.dt_bias = scalars(a.dt_bias);
  p.q_norm = scalars(a.q_norm_weight), p.k_norm = scalars(a.k_norm_weight);
  p.eps = a.eps;
  set_state(p, a.state);
  p.out = a.y.data(), p.o_t = a.y.stride(0), p.o_h = a.y.stride(1);
  p.Hk = static_cast<int>(a.q_norm_weight.size(0)), p.K = static_cast<int>(a.q_norm_weight.size(1));
  p.Hv = static_cast<int>(a.y.size(1)), p.V = static_cast<int>(a.y.size(2));
}

void prep_chunk_cuda(const GdnPrepChunk& a, Context& ctx) {
  GdnParams p;
  prep_params(a, p);
  p.cu_seqlens = a.cu_seqlens.data_as<const int>();
  p.slots = a.state_slots.data_as<const int>();
  p.has_initial =
      a.has_initial_state.defined() ? a.has_initial_state.data_as<const int>() : nullptr;
  launch(p, Mode::prep, a.conv_out.dtype(), a.state.dtype(), a.state_slots.size(0), ctx);
}

// cu_seqlens [0, 1, ..., N] for the one-token-per-sequence form, kept in the context's workspace.
const int* identity_seqlens(int64_t N, Context& ctx);

void prep_step_cuda(const GdnPrepStep& a, Context& ctx) {
  GdnParams p;
  prep_params(a, p);
  p.cu_seqlens = identity_seqlens(a.state_slots.size(0), ctx);
  p.slots = a.state_slots.data_as<const int>();
  launch(p, Mode::prep, a.conv_out.dtype(), a.state.dtype(), a.state_slots.size(0), ctx);
}

// ---- gdn_record / gdn_replay ----------------------------------------------------------------

Reason record_supports(const GdnRecord& a) {
  if (a.q.dtype() != a.k.dtype() || a.v.dtype() != a.q.dtype() || a.out.dtype() != a.q.dtype())
    return std::string("q, k, v and out must share one dtype");
  if (!a.tape_k.is_contiguous() || !a.tape_u.is_contiguous() || !a.tape_alpha.is_contiguous())
    return std::string("the tape tensors must be contiguous");
  return check_layout(a.q.size(2), a.state, a.q, "q");
}

void record_cuda(const GdnRecord& a, Context& ctx) {
  GdnParams p = token_params(a);
  p.tape_k = a.tape_k.data_as<float>(), p.tape_u = a.tape_u.data_as<float>();
  p.tape_alpha = a.tape_alpha.data_as<float>();
  launch(p, Mode::record, a.q.dtype(), a.state.dtype(), a.state_slots.size(0), ctx);
}

Reason replay_supports(const GdnReplay& a) {
  if (!a.tape_k.is_contiguous() || !a.tape_u.is_contiguous() || !a.tape_alpha.is_contiguous())
    return std::string("the tape tensors must be contiguous");
  if (a.state_out.defined()) {
    if (a.state_out.dtype() != a.state.dtype())
      return std::string("state_out dtype must equal the pool's");
    if (Reason r = check_layout(a.tape_k.size(2), a.state_out, a.tape_k, "tape_k")) return r;
  }
  return check_layout(a.tape_k.size(2), a.state, a.tape_k, "tape_k");
}

void replay_cuda(const GdnReplay& a, Context& ctx) {
  const int64_t N = a.state_slots.size(0);
  if (N == 0) return;
  const int Hk = static_cast<int>(a.tape_k.size(1)), K = static_cast<int>(a.tape_k.size(2));
  const int Hv = static_cast<int>(a.tape_u.size(1)), V = static_cast<int>(a.tape_u.size(2));
  const dim3 grid(static_cast<unsigned>((V + kRows - 1) / kRows), static_cast<unsigned>(Hv),
                  static_cast<unsigned>(N));
  const bool has_out = a.state_out.defined();
  dispatch_kc(K, [&](auto kc) {
    auto run = [&](auto ts) {
      gdn_replay_kernel<decltype(kc)::value, decltype(ts)>
          <<<grid, kWarps * 32, 0, as_stream(ctx.stream())>>>(
              a.tape_k.data_as<const float>(), a.tape_u.data_as<const float>(),
              a.tape_alpha.data_as<const float>(), a.state.data(), a.state.stride(0),
              a.state.stride(1), a.state.stride(2), a.cu_seqlens.data_as<const int>(),
              a.state_slots.data_as<const int>(), a.num_tokens.data_as<const int>(),
              has_out ? a.state_out.data() : nullptr, has_out ? a.state_out.stride(0) : 0,
              has_out ? a.state_out.stride(1) : 0, has_out ? a.state_out.stride(2) : 0, Hk, Hv, V,
              K);
      HYBRID_CUDA_CHECK_LAUNCH();
    };
    if (a.state.dtype() == DType::bf16)
      run(__nv_bfloat16{});
    else
      run(float{});
  });
}

// ---- gdn_gates --------------------------------------------------------------------------------

// One thread per (t, hv):  g = −exp(A_log) · softplus(a + dt_bias),  β = sigmoid(b), in f32 with
// the accurate expf / log1pf (the CPU reference's std::exp / std::log1p to within an ulp).
__global__ void gdn_gates_kernel(Scalars a, Scalars b, Scalars A_log, Scalars dt_bias, float* g,
                                 int64_t g_t, float* beta, int64_t beta_t, int64_t T, int Hv) {
  const int64_t n = T * Hv;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t t = i / Hv;
    const int hv = static_cast<int>(i % Hv);
    const float x = a.at(t, hv) + dt_bias.at(hv);
    const float softplus = x > 20.0f ? x : log1pf(expf(x));
    g[t * g_t + hv] = -expf(A_log.at(hv)) * softplus;
    beta[t * beta_t + hv] = 1.0f / (1.0f + expf(-b.at(t, hv)));
  }
}

void gates_cuda(const GdnGates& a, Context& ctx) {
  const int64_t T = a.a.size(0), Hv = a.a.size(1);
  if (T * Hv == 0) return;
  const int64_t blocks = std::min<int64_t>((T * Hv + 255) / 256, 4096);
  gdn_gates_kernel<<<static_cast<unsigned>(blocks), 256, 0, as_stream(ctx.stream())>>>(
      scalars(a.a), scalars(a.b), scalars(a.A_log), scalars(a.dt_bias), a.g.data_as<float>(),
      a.g.stride(0), a.beta.data_as<float>(), a.beta.stride(0), T, static_cast<int>(Hv));
  HYBRID_CUDA_CHECK_LAUNCH();
}

__global__ void iota_kernel(int* p, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i <= n; i += gridDim.x * blockDim.x) p[i] = i;
}

const int* identity_seqlens(int64_t N, Context& ctx) {
  int* p = static_cast<int*>(ctx.workspace(static_cast<size_t>(N + 1) * sizeof(int)));
  iota_kernel<<<static_cast<unsigned>((N + 256) / 256), 256, 0, as_stream(ctx.stream())>>>(
      p, static_cast<int>(N));
  HYBRID_CUDA_CHECK_LAUNCH();
  return p;
}

}  // namespace

void register_gdn(Registry& r) {
  r.add<GdnRecurrent>("gdn_recurrent.cuda", DeviceType::cuda, 0, recurrent_supports,
                      recurrent_cuda);
  r.add<GdnPrepChunk>("gdn_prep_chunk.cuda", DeviceType::cuda, 0, prep_supports<GdnPrepChunk>,
                      prep_chunk_cuda);
  r.add<GdnPrepStep>("gdn_prep_step.cuda", DeviceType::cuda, 0, prep_supports<GdnPrepStep>,
                     prep_step_cuda);
  r.add<GdnGates>("gdn_gates.cuda", DeviceType::cuda, 0, nullptr, gates_cuda);
  r.add<GdnRecord>("gdn_record.cuda", DeviceType::cuda, 0, record_supports, record_cuda);
  r.add<GdnReplay>("gdn_replay.cuda", DeviceType::cuda, 0, replay_supports, replay_cuda);
}

}  // namespace hybrid::cuda
