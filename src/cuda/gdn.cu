// CUDA: the GDN token-by-token recurrence: gdn_recurrent (decode and speculative verification,
// T = 1..16 tokens per sequence, or any T as a prefill fallback), the fused prep forms of seed 000
// (gdn_prep_step, gdn_prep_chunk), the unfused layer's gates (gdn_gates), and the rollback pair
// gdn_record / gdn_replay.
//
// Per sequence n and value head hv, state S [V, K] (V-first, K contiguous), f32 in registers:
//   S ← α S;  u = β (v − S k̂);  S ← S + u k̂ᵀ;  o = S q̂
// computed as one pass over the old S per token: with sk = S·k̂ and sq = S·q̂ (both rows of the
// old S, reduced together),
//   u = β (v − α sk),   o = α sq + u (k̂·q̂),   S ← α S + u k̂ᵀ.
//
// Memory-bound on the state: every element of S is read once and written once per call, whatever
// T is (the state stays in registers across the tokens of a sequence). Bytes per sequence:
//   2 · Hv·V·K · sizeof(state)   (Qwen3-Next Hv 32, K = V = 128: 4.19 MB f32, 2.10 MB bf16)
// plus the token tensors (q, k: Hk·K, v, out: Hv·V elements per token; < 1% of that) and, when
// asked, 4·Hv·V·K B per token of states_per_token.
//
// Work split (decode v2). Block = (slice of kRows value rows, hv, n), 4 warps. A row of S is spread
// over LPR lanes (a "row group": 8 lanes, 16 for K = 256), each lane owning KC = K / LPR columns
// as KC / W vector chunks of W elements (one 16-byte access: 4 f32 or 8 bf16; 8 bytes for bf16 at
// K = 32). Chunk j of lane `sub` holds columns [(j·LPR + sub)·W, +W): the LPR lanes of a group
// read 128 contiguous bytes of a row per load instruction and a warp 32/LPR rows at once. Each
// thread holds R rows, so a block covers kRows = 4 · (32/LPR) · R rows. R = 2 for small grids
// (32 rows a block at K ≤ 128: 4 blocks per head at V = 128; B = 1 with Hv 32 → 128 blocks for
// 132 SMs); R = 4 once the R = 2 grid reaches kBigGridBlocks (decode batches from B ≈ 8 at Hv 32)
// so that more state bytes are in flight per SM: the registers (not the bytes) bound the blocks
// per SM, and the overhead registers (q̂, k̂, addresses) are paid once per thread.
// All of a thread's state loads are issued before any arithmetic (R × KC·size bytes per thread:
// f32 K = 128: 128 B at R = 2, 256 B at R = 4). The dot products S·k̂ and S·q̂ reduce over the row
// group in log2(LPR) = 3 xor-shuffle steps, the 2R + 1 chains (each row's sk and sq, and k̂·q̂)
// interleaved; q̂, k̂ and their norms are per-lane columns (the group's lanes need exactly the
// columns they own; the norms reduce over the group too), so no shared memory and no block
// barrier. The write-back is the same vector chunks. Rows past V (V = 96) are computed on zeros
// and neither loaded nor stored; every lane takes part in every shuffle.
// Compiled for sm_90a at K = 128: R = 2: 110 (f32 q/k/v) / 128 (bf16) registers, 4 blocks per SM,
// 64 KiB (f32 pool) / 32 KiB (bf16) of state loads in flight per SM; R = 4: ≤ 168 registers, 3
// blocks per SM, 96 / 48 KiB. No spills (the build passes --warn-on-spills).
//
// Decode v3 (gdn_recurrent / gdn_prep_step .cuda_stream, gdn_stream_kernel below): the same lane
// layout and arithmetic, the pool tiles streamed through shared memory by TMA bulk copies in a
// persistent grid, so the bytes in flight no longer depend on the registers (bf16 pools too).
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <type_traits>

#include "cuda/bulk_pipe.cuh"
#include "cuda/common.cuh"
#include "cuda/dtype.cuh"
#include "cuda/kernels.h"
#include "cuda/mma.cuh"
#include "cuda/state_tile.cuh"
#include "cuda/warp.cuh"
#include "hybrid/ops/gdn.h"

namespace hybrid::cuda {

namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kRowsPerThread = 2;     // small grids (B = 1: 128 blocks at Hv 32, V 128)
constexpr int kRowsPerThreadBig = 4;  // large grids: more state bytes per thread
constexpr int kBigGridBlocks = 1024;  // R = 2 blocks from which R = 4 is used (~8 per SM)
// Blocks per SM the register budget must allow: 4 (<= 128 registers) at 2 rows a thread, 3
// (<= 168) at 4 rows a thread (64 f32 state registers).
template <int R>
constexpr int kMinBlocks = R <= 2 ? 4 : 3;

// The lane ↔ column map of one row group (see the header). S = state element type.
template <int LPR, int KC, class S, int R = kRowsPerThread>
struct Layout {
  static constexpr int kVecElems = 16 / static_cast<int>(sizeof(S));
  static constexpr int W = KC < kVecElems ? KC : kVecElems;  // elements per vector access
  static constexpr int kGroupRows = 32 / LPR;                // rows a warp covers at once
  static constexpr int kRows = kWarps * kGroupRows * R;      // rows per block
  static_assert(KC % W == 0 && 32 % LPR == 0, "bad row-group layout");
  // Column of the lane's element c (c < KC).
  __device__ static __forceinline__ int col(int sub, int c) {
    return ((c / W) * LPR + sub) * W + c % W;
  }
};

// Sum over the LPR lanes of a row group (aligned groups of LPR lanes), all lanes get it.
template <int LPR>
__device__ __forceinline__ float group_sum(float v) {
#pragma unroll
  for (int o = LPR / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// The lane's KC elements of a row (its chunks), in and out.
template <int LPR, int KC, class S, class T>
__device__ __forceinline__ void load_row(const T* row, int sub, float (&r)[KC]) {
  using L = Layout<LPR, KC, S>;
#pragma unroll
  for (int j = 0; j < KC / L::W; ++j) vload<L::W>(row + L::col(sub, j * L::W), r + j * L::W);
}

template <int LPR, int KC, class S, class T>
__device__ __forceinline__ void store_row(T* row, int sub, const float (&r)[KC]) {
  using L = Layout<LPR, KC, S>;
#pragma unroll
  for (int j = 0; j < KC / L::W; ++j) vstore<L::W>(row + L::col(sub, j * L::W), r + j * L::W);
}

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

// The raw bits of element (i, j) of a Scalars, put in flight beside other loads and converted
// later by scalar_of_raw (raw_any / float_of_raw in dtype.cuh).
__device__ __forceinline__ uint32_t raw_at(const Scalars& s, int64_t i, int64_t j = 0) {
  return raw_any(s.p, s.dtype, i * s.s0 + j * s.s1);
}
__device__ __forceinline__ float scalar_of_raw(const Scalars& s, uint32_t r) {
  return float_of_raw(s.dtype, r);
}

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
  const int* cu_seqlens = nullptr;   // [N+1]; null = one token per sequence (prep_step)
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
  // v5 (gdn_warp_kernel<.., true>): an item's v values (kItemRows contiguous elements of the v
  // row) can be copied into its stage: V a multiple of the item rows, v rows 16-byte aligned.
  bool v_async = false;
  bool cs_store = true;  // v5: state write-back by st.global.cs (HYBRID_DECODE_V5_CS=0: plain)
};

// The lane's KC columns of row `i` of a [rows, K] per-column parameter (RMSNorm weights, f32 or
// bf16, unit column stride and 16-byte aligned rows: stream_supports): the lane's chunks as
// vector loads under one dtype switch, so they go out back to back (v2 reads a scalar through a
// dtype branch per column).
template <int LPR, int KC, class S>
__device__ __forceinline__ void load_cols(const Scalars& w, int64_t i, int sub, float (&r)[KC]) {
  using L = Layout<LPR, KC, S>;
  auto chunks = [&](const auto* row) {
#pragma unroll
    for (int j = 0; j < KC / L::W; ++j) vload<L::W>(row + L::col(sub, j * L::W), r + j * L::W);
  };
  if (w.dtype == DType::bf16)
    chunks(static_cast<const __nv_bfloat16*>(w.p) + i * w.s0);
  else
    chunks(static_cast<const float*>(w.p) + i * w.s0);
}

// The thread's place in an item (a slice of L::kRows rows of one (hv, n)): row group, lane in
// the group, and the first of its R rows within the slice (rows first + r·kGroupRows).
template <int LPR>
struct Lane {
  int sub, first;
  bool lead;  // writes the row's scalars (o, u)
  template <class L>
  __device__ __forceinline__ static Lane make() {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    return {lane % LPR, warp * (L::kRows / kWarps) + lane / LPR, lane % LPR == 0};
  }
};

// A padding sequence (slot < 0): zero outputs (and tape entries), pool untouched. row0: the
// thread's first row; tape_item: this item writes the per-(token, head) tape entries.
template <Mode mode, int LPR, int KC, int R, class In, class S>
__device__ __forceinline__ void gdn_padding(const GdnParams& p, int hv, int bos, int eos, int row0,
                                            bool tape_item) {
  using L = Layout<LPR, KC, S, R>;
  const Lane<LPR> ln = Lane<LPR>::template make<L>();
  const int hk = hv / (p.Hv / p.Hk);
  const bool tape_k_group =
      mode == Mode::record && tape_item && hv % (p.Hv / p.Hk) == 0 && threadIdx.x < LPR;
  In* out = static_cast<In*>(p.out);
  float zero[KC];
#pragma unroll
  for (int c = 0; c < KC; ++c) zero[c] = 0.0f;
  for (int t = bos; t < eos; ++t) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const int row = row0 + r * L::kGroupRows;
      if (row >= p.V) continue;
      if (ln.lead) {
        out[t * p.o_t + hv * p.o_h + row] = from_f32<In>(0.0f);
        if (mode == Mode::record) p.tape_u[(int64_t(t) * p.Hv + hv) * p.V + row] = 0.0f;
      }
      if (p.states_per_token)
        store_row<LPR, KC, S>(p.states_per_token + ((int64_t(t) * p.Hv + hv) * p.V + row) * p.K,
                              ln.sub, zero);
    }
    if (mode == Mode::record && tape_item && threadIdx.x == 0)
      p.tape_alpha[int64_t(t) * p.Hv + hv] = 0.0f;
    if (tape_k_group)
      store_row<LPR, KC, S>(p.tape_k + (int64_t(t) * p.Hk + hk) * p.K, ln.sub, zero);
  }
}

// Tokens [bos, eos) of one item whose old rows s (f32, R rows of the thread, zeros past V) are
// loaded: outputs, optional per-token states and tape, then the rows written back to `pool`
// (this (slot, hv)'s [V, K] block) unless recording.
template <Mode mode, int LPR, int KC, int R, class In, class S>
__device__ __forceinline__ void gdn_tokens(const GdnParams& p, int hv, int bos, int eos, int row0,
                                           bool tape_item, S* pool, float (&s)[R][KC]) {
  using L = Layout<LPR, KC, S, R>;
  const Lane<LPR> ln = Lane<LPR>::template make<L>();
  const int sub = ln.sub;
  const int hk = hv / (p.Hv / p.Hk);
  const bool tape_block = mode == Mode::record && tape_item;
  const bool tape_k_group = tape_block && hv % (p.Hv / p.Hk) == 0 && threadIdx.x < LPR;
  In* out = static_cast<In*>(p.out);
  bool valid[R];
#pragma unroll
  for (int r = 0; r < R; ++r) valid[r] = row0 + r * L::kGroupRows < p.V;

#pragma unroll 1
  for (int t = bos; t < eos; ++t) {
    float q[KC], k[KC], alpha, beta;
    if (mode == Mode::prep) {
      // Seed 000: per-head RMSNorm of q and k with weights; g and β from raw a, b. The scalar
      // loads first, the math after.
      const float a_raw = p.a_raw.at(t, hv), dt_bias = p.dt_bias.at(hv);
      const float A_log = p.A_log.at(hv), b_raw = p.b_raw.at(t, hv);
      const In* row = static_cast<const In*>(p.q) + t * p.q_t;  // conv_out row
      // q̂ = w ⊙ x / rms(x): the weights (L1 hits, one dtype switch for all columns, so the loads
      // go out back to back) multiply in as the columns arrive, the norm after the reduction.
      load_cols<LPR, KC, S>(p.q_norm, hk, sub, q);
      load_cols<LPR, KC, S>(p.k_norm, hk, sub, k);
      float qq = 0.0f, kk = 0.0f;
#pragma unroll
      for (int c = 0; c < KC; ++c) {
        const int kc = L::col(sub, c);
        const float xq = to_f32(row[hk * p.K + kc]), xk = to_f32(row[(p.Hk + hk) * p.K + kc]);
        qq += xq * xq;
        kk += xk * xk;
        q[c] *= xq;
        k[c] *= xk;
      }
      const float inv_k = __frcp_rn(static_cast<float>(p.K));  // exact: K is a power of 2
      const float qr = rsqrtf(group_sum<LPR>(qq) * inv_k + p.eps);
      const float kr = rsqrtf(group_sum<LPR>(kk) * inv_k + p.eps);
#pragma unroll
      for (int c = 0; c < KC; ++c) {
        q[c] *= qr;
        k[c] *= kr;
      }
      const float x = a_raw + dt_bias;
      const float softplus = x > 20.0f ? x : log1pf(__expf(x));
      alpha = __expf(-__expf(A_log) * softplus);
      beta = __frcp_rn(1.0f + __expf(-b_raw));  // = 1 / (1 + e^-b), no division slow path
    } else {
      const In* qp = static_cast<const In*>(p.q) + t * p.q_t + hk * p.q_h;
      const In* kp = static_cast<const In*>(p.k) + t * p.k_t + hk * p.k_h;
#pragma unroll
      for (int c = 0; c < KC; ++c) {
        const int kc = L::col(sub, c);
        q[c] = to_f32(qp[kc]), k[c] = to_f32(kp[kc]);
      }
      if (p.l2norm) {
        float qq = 0.0f, kk = 0.0f;
#pragma unroll
        for (int c = 0; c < KC; ++c) qq += q[c] * q[c], kk += k[c] * k[c];
        const float qr = rsqrtf(group_sum<LPR>(qq) + 1e-6f);
        const float kr = rsqrtf(group_sum<LPR>(kk) + 1e-6f);
#pragma unroll
        for (int c = 0; c < KC; ++c) q[c] *= qr, k[c] *= kr;
      }
#pragma unroll
      for (int c = 0; c < KC; ++c) q[c] *= p.scale;
      alpha = __expf(p.g.at(t, hv));
      beta = p.beta.at(t, hv);
    }
    const In* vrow = mode == Mode::prep
                         ? static_cast<const In*>(p.q) + t * p.q_t + 2 * p.Hk * p.K + hv * p.V
                         : static_cast<const In*>(p.v) + t * p.v_t + hv * p.v_h;
    float vr[R];
#pragma unroll
    for (int r = 0; r < R; ++r) vr[r] = valid[r] ? to_f32(vrow[row0 + r * L::kGroupRows]) : 0.0f;

    // Partial dot products of the lane's columns, then one interleaved group reduction of
    // k̂·q̂ and each row's S·k̂, S·q̂.
    float red[1 + 2 * R];
    red[0] = 0.0f;
#pragma unroll
    for (int c = 0; c < KC; ++c) red[0] += k[c] * q[c];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      float sk = 0.0f, sq = 0.0f;
#pragma unroll
      for (int c = 0; c < KC; ++c) sk += s[r][c] * k[c], sq += s[r][c] * q[c];
      red[1 + 2 * r] = sk, red[2 + 2 * r] = sq;
    }
#pragma unroll
    for (int o = LPR / 2; o > 0; o >>= 1)
#pragma unroll
      for (int i = 0; i < 1 + 2 * R; ++i) red[i] += __shfl_xor_sync(0xffffffffu, red[i], o);
    const float kq = red[0];

#pragma unroll
    for (int r = 0; r < R; ++r) {
      const float u = beta * (vr[r] - alpha * red[1 + 2 * r]);
      const float o = alpha * red[2 + 2 * r] + u * kq;
#pragma unroll
      for (int c = 0; c < KC; ++c) s[r][c] = alpha * s[r][c] + u * k[c];
      const int row = row0 + r * L::kGroupRows;
      if (valid[r] && ln.lead) {
        out[t * p.o_t + hv * p.o_h + row] = from_f32<In>(o);
        if (mode == Mode::record) p.tape_u[(int64_t(t) * p.Hv + hv) * p.V + row] = u;
      }
      if (p.states_per_token && valid[r])
        store_row<LPR, KC, S>(p.states_per_token + ((int64_t(t) * p.Hv + hv) * p.V + row) * p.K,
                              sub, s[r]);
    }
    if (tape_block && threadIdx.x == 0) p.tape_alpha[int64_t(t) * p.Hv + hv] = alpha;
    if (tape_k_group) store_row<LPR, KC, S>(p.tape_k + (int64_t(t) * p.Hk + hk) * p.K, sub, k);
  }

  if (mode != Mode::record)
#pragma unroll
    for (int r = 0; r < R; ++r)
      if (valid[r]) store_row<LPR, KC, S>(pool + (row0 + r * L::kGroupRows) * p.st_row, sub, s[r]);
}

// One (row slice, hv, n). In = q/k/v/conv_out/out element type, S = state element type.
template <int LPR, int KC, int R, class In, class S>
__global__ void __launch_bounds__(kThreads, kMinBlocks<R>)
    gdn_recurrent_kernel(const GdnParams p, const Mode mode) {
  using L = Layout<LPR, KC, S, R>;
  const int n = blockIdx.z, hv = blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int sub = lane % LPR;  // lane within the row group
  // Row r of this thread: row0 + r·kGroupRows.
  const int row0 = blockIdx.x * L::kRows + warp * (L::kGroupRows * R) + lane / LPR;
  const int ratio = p.Hv / p.Hk, hk = hv / ratio;
  const int bos = p.cu_seqlens ? p.cu_seqlens[n] : n;
  const int eos = p.cu_seqlens ? p.cu_seqlens[n + 1] : n + 1;
  const int slot = p.slots[n];
  const bool lead = sub == 0;  // writes the row's scalars (o, u)
  // The block that writes the shared per-token tape entries (tape_k: one per key head).
  const bool tape_block = mode == Mode::record && blockIdx.x == 0;
  const bool tape_k_group = tape_block && hv % ratio == 0 && threadIdx.x < LPR;
  In* out = static_cast<In*>(p.out);
  bool valid[R];
#pragma unroll
  for (int r = 0; r < R; ++r) valid[r] = row0 + r * L::kGroupRows < p.V;

  if (slot < 0) {  // padding sequence: zero outputs, pool untouched
    float zero[KC];
#pragma unroll
    for (int c = 0; c < KC; ++c) zero[c] = 0.0f;
    for (int t = bos; t < eos; ++t) {
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const int row = row0 + r * L::kGroupRows;
        if (!valid[r]) continue;
        if (lead) {
          out[t * p.o_t + hv * p.o_h + row] = from_f32<In>(0.0f);
          if (mode == Mode::record) p.tape_u[(int64_t(t) * p.Hv + hv) * p.V + row] = 0.0f;
        }
        if (p.states_per_token)
          store_row<LPR, KC, S>(p.states_per_token + ((int64_t(t) * p.Hv + hv) * p.V + row) * p.K,
                                sub, zero);
      }
      if (tape_block && threadIdx.x == 0) p.tape_alpha[int64_t(t) * p.Hv + hv] = 0.0f;
      if (tape_k_group) store_row<LPR, KC, S>(p.tape_k + (int64_t(t) * p.Hk + hk) * p.K, sub, zero);
    }
    return;
  }

  // The thread's R rows of S, all loads issued before any arithmetic.
  S* pool = static_cast<S*>(p.state) + slot * p.st_slot + hv * p.st_head;
  const bool from_zero = p.has_initial && p.has_initial[n] == 0;
  float s[R][KC];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    if (!from_zero && valid[r]) {
      load_row<LPR, KC, S>(pool + (row0 + r * L::kGroupRows) * p.st_row, sub, s[r]);
    } else {
#pragma unroll
      for (int c = 0; c < KC; ++c) s[r][c] = 0.0f;
    }
  }

#pragma unroll 1
  for (int t = bos; t < eos; ++t) {
    float q[KC], k[KC], alpha, beta;
    if (mode == Mode::prep) {
      // Seed 000: per-head RMSNorm of q and k with weights; g and β from raw a, b.
      const In* row = static_cast<const In*>(p.q) + t * p.q_t;  // conv_out row
      float qq = 0.0f, kk = 0.0f;
#pragma unroll
      for (int c = 0; c < KC; ++c) {
        const int kc = L::col(sub, c);
        q[c] = to_f32(row[hk * p.K + kc]);
        k[c] = to_f32(row[(p.Hk + hk) * p.K + kc]);
        qq += q[c] * q[c];
        kk += k[c] * k[c];
      }
      const float qr = rsqrtf(group_sum<LPR>(qq) / p.K + p.eps);
      const float kr = rsqrtf(group_sum<LPR>(kk) / p.K + p.eps);
#pragma unroll
      for (int c = 0; c < KC; ++c) {
        const int kc = L::col(sub, c);
        q[c] *= qr * p.q_norm.at(hk, kc);
        k[c] *= kr * p.k_norm.at(hk, kc);
      }
      const float x = p.a_raw.at(t, hv) + p.dt_bias.at(hv);
      const float softplus = x > 20.0f ? x : log1pf(__expf(x));
      alpha = __expf(-__expf(p.A_log.at(hv)) * softplus);
      beta = 1.0f / (1.0f + __expf(-p.b_raw.at(t, hv)));
    } else {
      const In* qp = static_cast<const In*>(p.q) + t * p.q_t + hk * p.q_h;
      const In* kp = static_cast<const In*>(p.k) + t * p.k_t + hk * p.k_h;
#pragma unroll
      for (int c = 0; c < KC; ++c) {
        const int kc = L::col(sub, c);
        q[c] = to_f32(qp[kc]), k[c] = to_f32(kp[kc]);
      }
      if (p.l2norm) {
        float qq = 0.0f, kk = 0.0f;
#pragma unroll
        for (int c = 0; c < KC; ++c) qq += q[c] * q[c], kk += k[c] * k[c];
        const float qr = rsqrtf(group_sum<LPR>(qq) + 1e-6f);
        const float kr = rsqrtf(group_sum<LPR>(kk) + 1e-6f);
#pragma unroll
        for (int c = 0; c < KC; ++c) q[c] *= qr, k[c] *= kr;
      }
#pragma unroll
      for (int c = 0; c < KC; ++c) q[c] *= p.scale;
      alpha = __expf(p.g.at(t, hv));
      beta = p.beta.at(t, hv);
    }
    const In* vrow = mode == Mode::prep
                         ? static_cast<const In*>(p.q) + t * p.q_t + 2 * p.Hk * p.K + hv * p.V
                         : static_cast<const In*>(p.v) + t * p.v_t + hv * p.v_h;
    float vr[R];
#pragma unroll
    for (int r = 0; r < R; ++r) vr[r] = valid[r] ? to_f32(vrow[row0 + r * L::kGroupRows]) : 0.0f;

    // Partial dot products of the lane's columns, then one interleaved group reduction of
    // k̂·q̂ and each row's S·k̂, S·q̂.
    float red[1 + 2 * R];
    red[0] = 0.0f;
#pragma unroll
    for (int c = 0; c < KC; ++c) red[0] += k[c] * q[c];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      float sk = 0.0f, sq = 0.0f;
#pragma unroll
      for (int c = 0; c < KC; ++c) sk += s[r][c] * k[c], sq += s[r][c] * q[c];
      red[1 + 2 * r] = sk, red[2 + 2 * r] = sq;
    }
#pragma unroll
    for (int o = LPR / 2; o > 0; o >>= 1)
#pragma unroll
      for (int i = 0; i < 1 + 2 * R; ++i) red[i] += __shfl_xor_sync(0xffffffffu, red[i], o);
    const float kq = red[0];

#pragma unroll
    for (int r = 0; r < R; ++r) {
      const float u = beta * (vr[r] - alpha * red[1 + 2 * r]);
      const float o = alpha * red[2 + 2 * r] + u * kq;
#pragma unroll
      for (int c = 0; c < KC; ++c) s[r][c] = alpha * s[r][c] + u * k[c];
      const int row = row0 + r * L::kGroupRows;
      if (valid[r] && lead) {
        out[t * p.o_t + hv * p.o_h + row] = from_f32<In>(o);
        if (mode == Mode::record) p.tape_u[(int64_t(t) * p.Hv + hv) * p.V + row] = u;
      }
      if (p.states_per_token && valid[r])
        store_row<LPR, KC, S>(p.states_per_token + ((int64_t(t) * p.Hv + hv) * p.V + row) * p.K,
                              sub, s[r]);
    }
    if (tape_block && threadIdx.x == 0) p.tape_alpha[int64_t(t) * p.Hv + hv] = alpha;
    if (tape_k_group) store_row<LPR, KC, S>(p.tape_k + (int64_t(t) * p.Hk + hk) * p.K, sub, k);
  }

  if (mode != Mode::record)
#pragma unroll
    for (int r = 0; r < R; ++r)
      if (valid[r]) store_row<LPR, KC, S>(pool + (row0 + r * L::kGroupRows) * p.st_row, sub, s[r]);
}

// ---- v3: the pool streamed through shared memory (gdn_recurrent / gdn_prep_step .cuda_stream) --
//
// Persistent grid: block b takes the items b, b + gridDim.x, ... (item = (tile, hv, n) in that
// order, tile = L::kRows consecutive rows of the (slot, hv) [V, K] block, which are contiguous in
// the pool: the row stride is K). One thread issues each tile's 1-D TMA bulk copy into one of
// kStages shared-memory stages (bulk_pipe.cuh), kStages items ahead; the block waits on the
// stage, reads its rows into registers (the 8 lanes of a row group read 128 contiguous bytes of a
// row: conflict-free), releases the stage with one barrier (its next tile is issued right after)
// and runs the v2 arithmetic (gdn_tokens), writing the rows back with 16-byte stores. R = 2 rows a
// thread for f32 pools and 4 for bf16, so a tile is 16 KiB at K = 128 for both (32 / 64 rows);
// 4 stages = 64 KiB of shared memory a block, 3 blocks per SM: up to 12 tiles, 192 KiB of state
// in flight per SM, whatever the pool's dtype (v2: 64 / 32 KiB, bounded by the registers).
constexpr int kStages = 4;
constexpr int kStreamMinBlocks = 3;

__device__ __forceinline__ void prefetch_l1(const void* p) {
  asm volatile("prefetch.global.L1 [%0];" ::"l"(p));
}

// The first token's q, k rows (prep: the conv_out segments), the v row and the gates of (t, hv)
// pulled into L1 before the stage wait, so that gdn_tokens' loads after it are L1 hits (for a
// decode step they are otherwise one L2 round trip after the state arrives). One 128-byte line
// per warp lane (the rows are at most 2 · 256 · 4 B + 256 · 4 B = 3 KiB).
template <Mode mode, class In>
__device__ __forceinline__ void prefetch_token(const GdnParams& p, int hv, int t) {
  if (threadIdx.x >= 32) return;
  const int hk = hv / (p.Hv / p.Hk);
  const int lane = threadIdx.x;
  // Lane l touches byte min(128·l, bytes − 1) of each row: every line of the row, never past it.
  const int bytes_k = p.K * static_cast<int>(sizeof(In)),
            bytes_v = p.V * static_cast<int>(sizeof(In));
  const char *q, *k, *v;
  if (mode == Mode::prep) {
    const In* row = static_cast<const In*>(p.q) + t * p.q_t;
    q = reinterpret_cast<const char*>(row + hk * p.K);
    k = reinterpret_cast<const char*>(row + (p.Hk + hk) * p.K);
    v = reinterpret_cast<const char*>(row + 2 * p.Hk * p.K + hv * p.V);
  } else {
    q = reinterpret_cast<const char*>(static_cast<const In*>(p.q) + t * p.q_t + hk * p.q_h);
    k = reinterpret_cast<const char*>(static_cast<const In*>(p.k) + t * p.k_t + hk * p.k_h);
    v = reinterpret_cast<const char*>(static_cast<const In*>(p.v) + t * p.v_t + hv * p.v_h);
  }
  if (lane * 128 < bytes_k + 127) {
    prefetch_l1(q + min(lane * 128, bytes_k - 1));
    prefetch_l1(k + min(lane * 128, bytes_k - 1));
  }
  if (lane * 128 < bytes_v + 127) prefetch_l1(v + min(lane * 128, bytes_v - 1));
}

template <class S>
constexpr int kStreamRows = sizeof(S) == 2 ? 4 : 2;  // rows a thread (large grids)

template <int LPR, int KC, class S, int R>
constexpr int kTileElems = Layout<LPR, KC, S, R>::kRows* LPR* KC;

template <Mode mode, int LPR, int KC, int R, class In, class S>
__global__ void __launch_bounds__(kThreads, kStreamMinBlocks)
    gdn_stream_kernel(const GdnParams p, const int64_t items, const int tiles) {
  using L = Layout<LPR, KC, S, R>;
  constexpr int kTile = kTileElems<LPR, KC, S, R>;
  extern __shared__ __align__(128) unsigned char smem_raw[];
  S* stage_rows = reinterpret_cast<S*>(smem_raw);  // [kStages][L::kRows][K]
  __shared__ uint64_t full[kStages];
  const Lane<LPR> ln = Lane<LPR>::template make<L>();
  const int64_t stride = gridDim.x;
  S* const pool_base = static_cast<S*>(p.state);

  // Item → (tile, hv, n); whether its rows are read (a real slot with an initial state).
  auto slot_of = [&](int64_t item) { return p.slots[item / tiles / p.Hv]; };
  auto reads = [&](int64_t item, int slot) {
    const int64_t n = item / tiles / p.Hv;
    return slot >= 0 && !(p.has_initial && p.has_initial[n] == 0);
  };
  // One thread: arm the stage and copy the item's rows (0 bytes: nothing to read).
  auto issue = [&](int64_t item, int slot, bool read, int stage) {
    const int tile = static_cast<int>(item % tiles);
    const int hv = static_cast<int>(item / tiles % p.Hv);
    const int rows = min(L::kRows, p.V - tile * L::kRows);
    const uint32_t bytes = read ? static_cast<uint32_t>(rows * p.K * sizeof(S)) : 0u;
    mbar_arrive_expect_tx(&full[stage], bytes);
    if (bytes)
      bulk_g2s(stage_rows + stage * kTile,
               pool_base + slot * p.st_slot + hv * p.st_head + int64_t(tile) * L::kRows * p.K,
               bytes, &full[stage]);
  };

  if (threadIdx.x == 0) {
#pragma unroll
    for (int s = 0; s < kStages; ++s) mbar_init(&full[s], 1);
    mbar_init_fence();
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int s = 0; s < kStages; ++s) {
      const int64_t item = blockIdx.x + s * stride;
      if (item >= items) break;
      const int slot = slot_of(item);
      issue(item, slot, reads(item, slot), s);
    }
  }

  int i = 0;
#pragma unroll 1
  for (int64_t item = blockIdx.x; item < items; item += stride, ++i) {
    const int stage = i % kStages;
    const int tile = static_cast<int>(item % tiles);
    const int hv = static_cast<int>(item / tiles % p.Hv);
    const int n = static_cast<int>(item / tiles / p.Hv);
    const int slot = p.slots[n];
    const bool read = reads(item, slot);
    const int bos = p.cu_seqlens ? p.cu_seqlens[n] : n;
    const int eos = p.cu_seqlens ? p.cu_seqlens[n + 1] : n + 1;
    // The item kStages ahead (it reuses this stage): its slot lookup overlaps the wait.
    const int64_t ahead = item + kStages * stride;
    int ahead_slot = -1;
    bool ahead_read = false;
    if (threadIdx.x == 0 && ahead < items) {
      ahead_slot = slot_of(ahead);
      ahead_read = reads(ahead, ahead_slot);
    }
    const int row0 = tile * L::kRows + ln.first;
    if (slot >= 0 && bos < eos) prefetch_token<mode, In>(p, hv, bos);

    mbar_wait(&full[stage], static_cast<uint32_t>(i / kStages) & 1u);
    float s[R][KC];
    const S* tile_rows = stage_rows + stage * kTile;
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (read && row0 + r * L::kGroupRows < p.V) {
        load_row<LPR, KC, S>(tile_rows + (ln.first + r * L::kGroupRows) * (LPR * KC), ln.sub, s[r]);
      } else {
#pragma unroll
        for (int c = 0; c < KC; ++c) s[r][c] = 0.0f;
      }
    }
    __syncthreads();  // every thread has its rows: the stage is free
    if (threadIdx.x == 0 && ahead < items) issue(ahead, ahead_slot, ahead_read, stage);

    if (slot < 0) {
      gdn_padding<mode, LPR, KC, R, In, S>(p, hv, bos, eos, row0, tile == 0);
    } else {
      S* pool = pool_base + slot * p.st_slot + hv * p.st_head;
      gdn_tokens<mode, LPR, KC, R, In, S>(p, hv, bos, eos, row0, tile == 0, pool, s);
    }
  }
}

// ---- v4: persistent warps, each streaming its own run of items (gdn_recurrent / gdn_prep_step
// .cuda_warp) ----
//
// Why (session 3, measured): v2 (83% of copy at B 256 f32) spends part of each block's life with
// no state bytes in flight (slot index → state loads is two dependent DRAM round trips per block;
// compute and stores after), and v3 (79%) has only 3 processors (blocks) per SM whose every 16 KiB
// item waits on serial round trips (slot / cu_seqlens → token prefetch; g, β after the stage wait)
// and a block barrier: at ~1 item per µs per SM needed, ~3 µs of serial latency per item binds.
//
// v4: every warp is an independent processor (no block barrier, no mbarrier). Warp w of the grid
// takes the contiguous run of items [w·items/W, (w+1)·items/W) (item = (row tile, hv, n), tile
// fastest, so a run covers whole heads' rows in pool order and the head's token prep is done
// once per run of the head). Item = R rows per thread = kGroupRows·R rows of one (slot, hv) =
// 4 KiB at K = 128 (f32: 8 rows, R = 2; bf16: 16 rows, R = 4). Each lane copies its own 16-byte
// chunks of an item (the v2 register layout) into a lane-private slot of one of kWarpStages
// shared-memory stages with cp.async (no registers held by the bytes in flight), one commit group
// per item, kWarpStages items ahead; it reads back only its own chunks, so
// cp.async.wait_group(kWarpStages − 1) is its whole synchronisation for the state. The first
// row group's lanes also copy the item's first-token q and k pieces (when the item starts a run
// of its head), read by all lanes after a __syncwarp.
// Per item, before the stage wait: the item's slot / cu_seqlens (L1 hits: read when the item was
// issued), the next-issued item's ones, the v values of the thread's rows and, for a new head,
// the gates (and RMSNorm weights); after it: the arithmetic of v2 and the write-back from
// registers. Decode tokens (one token a sequence, no per-token states) take that fast path;
// anything else (T != 1, per-token states, padding) runs v2's gdn_tokens / gdn_padding on the
// rows from the stage.
// Bytes in flight per SM: warps/SM × kWarpStages × 4 KiB (3-4 blocks of 4 warps: 144-192 KiB),
// whatever the pool's dtype; the per-item work of a warp (~0.3 µs) is far below its budget
// (12-16 warps per SM, one 4 KiB item each per ~3-4 µs at the copy rate).
constexpr int kWarpBlockWarps = 4;
constexpr int kWarpStages = 3;

template <class S>
constexpr int kWarpRows = sizeof(S) == 2 ? 4 : 2;  // R: a 4 KiB item at K = 128

template <int LPR, int KC, int R, class In, class S, bool kV5 = false>
struct WarpTile {
  using L = Layout<LPR, KC, S, R>;
  static_assert(L::W * sizeof(S) == 16, "v4 needs 16-byte state chunks (K >= 64)");
  static constexpr int kChunksPerRow = KC / L::W;      // a lane's 16-byte chunks of a row
  static constexpr int kChunks = R * kChunksPerRow;    // ... of an item
  static constexpr int kItemRows = L::kGroupRows * R;  // rows of an item
  static constexpr int kPiece = L::W * static_cast<int>(sizeof(In));  // a lane's W q columns
  static constexpr int kTokOffset = kChunks * 32 * 16;  // state chunks [kChunks][32 lanes]
  static constexpr int kRowBytes = kChunksPerRow * LPR * kPiece;  // q (or k): K·sizeof(In)
  // v5: the item's v values after the q / k pieces, in kVPieces copies of kVPiece bytes.
  static constexpr int kVOffset = kTokOffset + 2 * kRowBytes;
  static constexpr int kVBytes = kItemRows * static_cast<int>(sizeof(In));
  static constexpr int kVPiece = kVBytes < 16 ? kVBytes : 16;
  static constexpr int kVPieces = kVBytes / kVPiece;
  static_assert(kVPiece == 8 || kVPiece == 16, "v piece of 8 or 16 bytes");
  static_assert(kVPieces <= 32 && kVPieces * kVPiece == kVBytes, "one v piece per lane");
  static constexpr int kStageBytes = kVOffset + (kV5 ? (kVBytes + 15) / 16 * 16 : 0);
  // After the stages: the head run's q̂ and k̂ (f32), [2][KC / 4][LPR] float4, written by the
  // first row group and read by every lane of the same `sub` (registers would keep 2·KC values
  // live across the general path, which then spills at R = 4).
  static constexpr int kCacheOffset = kWarpStages * kStageBytes;
  static constexpr int kWarpBytes = kCacheOffset + 2 * KC * LPR * 4;
};

// kBytes (8, 16 or 32) global → shared without registers; both addresses aligned to
// min(kBytes, 16).
template <int kBytes>
__device__ __forceinline__ void cp_async_piece(void* dst, const void* src) {
  static_assert(kBytes == 8 || kBytes % 16 == 0, "8 or 16·n bytes");
  if constexpr (kBytes == 8) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(smem_u32(dst)), "l"(src)
                 : "memory");
  } else {
#pragma unroll
    for (int i = 0; i < kBytes / 16; ++i)
      cp_async16(static_cast<char*>(dst) + 16 * i, static_cast<const char*>(src) + 16 * i);
  }
}

// v5 write-back: the lane's KC elements of a row by 16-byte st.global.cs (streaming: the pool row
// is not read again by this kernel, so its lines are the first L2 victims, not the stream's).
template <int LPR, int KC, class S>
__device__ __forceinline__ void store_row_cs(S* row, int sub, const float (&r)[KC]) {
  using L = Layout<LPR, KC, S>;
  static_assert(L::W * sizeof(S) == 16, "16-byte chunks");
#pragma unroll
  for (int j = 0; j < KC / L::W; ++j) {
    uint4 u;
    S* e = reinterpret_cast<S*>(&u);
#pragma unroll
    for (int i = 0; i < L::W; ++i) e[i] = from_f32<S>(r[j * L::W + i]);
    asm volatile("st.global.cs.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"l"(row + L::col(sub, j * L::W)),
                 "r"(u.x), "r"(u.y), "r"(u.z), "r"(u.w)
                 : "memory");
  }
}

// The sequence fields of an item that the pipeline needs (read twice: when the item's copies are
// issued and when it is consumed; the second read is an L1 / L2 hit).
struct SeqMeta {
  int slot = -1, bos = 0, eos = 0;
  bool read = false;  // the pool rows are read (a real slot with an initial state)
};

// Mode::prep is gdn_prep_step here: sequence n is token n, every sequence resumes from its row.
template <Mode mode>
__device__ __forceinline__ SeqMeta seq_meta(const GdnParams& p, int n) {
  SeqMeta m;
  m.slot = p.slots[n];
  if (mode == Mode::prep) {
    m.bos = n, m.eos = n + 1;
    m.read = m.slot >= 0;
  } else {
    m.bos = p.cu_seqlens ? p.cu_seqlens[n] : n;
    m.eos = p.cu_seqlens ? p.cu_seqlens[n + 1] : n + 1;
    m.read = m.slot >= 0 && !(p.has_initial && p.has_initial[n] == 0);
  }
  return m;
}

// The fast path: one token, a real slot, no per-token states.
template <Mode mode>
__device__ __forceinline__ bool seq_fast(const GdnParams& p, const SeqMeta& m) {
  if (mode == Mode::prep) return m.slot >= 0;
  return m.slot >= 0 && m.eos - m.bos == 1 && !p.states_per_token;
}

// kV5 (gdn_recurrent.cuda_warp2 / gdn_prep_step.cuda_warp2): the only global loads v4 waits on in
// the item loop on the fast path are the v values of the thread's rows (issued at the top of the
// item, consumed by the update: a full L2 / DRAM round trip per item, ~1-2 µs under load, while
// the item's state landed one to two items earlier) and, once per head run, the gates. v5 copies
// the item's v values (kItemRows contiguous elements, 16-32 B) into its stage with the state and
// the q / k pieces, kWarpStages items ahead (p.v_async; else v4's loads), so the fast path waits
// only on cp.async groups; the state rows are written back with st.global.cs.
template <Mode mode, int LPR, int KC, int R, class In, class S, bool kV5 = false>
__global__ void __launch_bounds__(kWarpBlockWarps * 32, 3)
    gdn_warp_kernel(const GdnParams p, const int items, const int tiles) {
  using L = Layout<LPR, KC, S, R>;
  using WT = WarpTile<LPR, KC, R, In, S, kV5>;
  constexpr int W = L::W, CPR = WT::kChunksPerRow;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int sub = lane % LPR, group_row = lane / LPR;
  const bool lead = sub == 0;                                         // writes the row's o
  unsigned char* const warp_smem = smem_raw + warp * WT::kWarpBytes;  // [stages][kStageBytes]
  const int64_t gw = int64_t{blockIdx.x} * kWarpBlockWarps + warp;
  const int64_t nw = int64_t{gridDim.x} * kWarpBlockWarps;
  const int begin = static_cast<int>(gw * items / nw),
            end = static_cast<int>((gw + 1) * items / nw);
  S* const pool_base = static_cast<S*>(p.state);
  const int ratio = p.Hv / p.Hk;
  In* const out = static_cast<In*>(p.out);

  // Token rows (prep: the conv_out segments q | k | v of token t).
  auto q_row = [&](int t, int hk) {
    return mode == Mode::prep ? static_cast<const In*>(p.q) + t * p.q_t + hk * p.K
                              : static_cast<const In*>(p.q) + t * p.q_t + hk * p.q_h;
  };
  auto k_row = [&](int t, int hk) {
    return mode == Mode::prep ? static_cast<const In*>(p.q) + t * p.q_t + (p.Hk + hk) * p.K
                              : static_cast<const In*>(p.k) + t * p.k_t + hk * p.k_h;
  };
  auto v_row = [&](int t, int hv) {
    return mode == Mode::prep ? static_cast<const In*>(p.q) + t * p.q_t + 2 * p.Hk * p.K + hv * p.V
                              : static_cast<const In*>(p.v) + t * p.v_t + hv * p.v_h;
  };

  // Copies of `item` into `stage`: its state chunks (lane-private slots), and, when the item
  // starts its head's run on the fast path, the first row group's q / k pieces. No commit.
  auto issue = [&](int item, const SeqMeta& m, int stage) {
    const int key = item / tiles, tile = item - key * tiles;
    const int hv = key % p.Hv;
    unsigned char* const st = warp_smem + stage * WT::kStageBytes;
    if (m.read) {
      const S* head = pool_base + m.slot * p.st_slot + hv * p.st_head;
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const int row = tile * WT::kItemRows + r * L::kGroupRows + group_row;
        if (row < p.V) {
#pragma unroll
          for (int cc = 0; cc < CPR; ++cc)
            cp_async16(st + ((r * CPR + cc) * 32 + lane) * 16,
                       head + row * p.st_row + L::col(sub, cc * W));
        }
      }
    }
    if constexpr (kV5) {
      if (p.v_async && lane < WT::kVPieces && seq_fast<mode>(p, m)) {
        const In* vsrc = v_row(m.bos, hv) + tile * WT::kItemRows;  // V % kItemRows == 0
        cp_async_piece<WT::kVPiece>(
            st + WT::kVOffset + lane * WT::kVPiece,
            reinterpret_cast<const unsigned char*>(vsrc) + lane * WT::kVPiece);
      }
    }
    if (lane < LPR && seq_fast<mode>(p, m) && (item == begin || key != (item - 1) / tiles)) {
      const int hk = hv / ratio;
      const In* qr = q_row(m.bos, hk);
      const In* kr = k_row(m.bos, hk);
#pragma unroll
      for (int cc = 0; cc < CPR; ++cc) {
        const int piece = (cc * LPR + sub) * WT::kPiece;
        cp_async_piece<WT::kPiece>(st + WT::kTokOffset + piece, qr + L::col(sub, cc * W));
        cp_async_piece<WT::kPiece>(st + WT::kTokOffset + WT::kRowBytes + piece,
                                   kr + L::col(sub, cc * W));
      }
    }
  };

#pragma unroll
  for (int s = 0; s < kWarpStages; ++s) {
    const int item = begin + s;
    if (item < end) issue(item, seq_meta<mode>(p, item / tiles / p.Hv), s);
    cp_commit();  // one group per stage, empty ones too: the wait count stays uniform
  }

  // The current head run's gates and k̂·q̂ (its q̂, k̂ in the warp's cache area).
  float alpha = 0.0f, beta = 0.0f, kq = 0.0f;
  int prep_key = -1;  // the (n, hv) whose q̂, k̂, α, β are kept
  float4* const cache_q = reinterpret_cast<float4*>(warp_smem + WT::kCacheOffset);  // [KC/4][LPR]
  float4* const cache_k = cache_q + KC / 4 * LPR;

  int i = 0;
#pragma unroll 1
  for (int item = begin; item < end; ++item, ++i) {
    const int stage = i % kWarpStages;
    const int key = item / tiles, tile = item - key * tiles;
    const int n = key / p.Hv, hv = key - n * p.Hv, hk = hv / ratio;
    const int ahead = item + kWarpStages;  // issued into this stage once it is read
    const SeqMeta m = seq_meta<mode>(p, n);
    SeqMeta m_ahead;
    if (ahead < end) m_ahead = seq_meta<mode>(p, ahead / tiles / p.Hv);
    const bool fast = seq_fast<mode>(p, m);
    const bool new_head = fast && key != prep_key;
    const int row0 = tile * WT::kItemRows + group_row;  // thread rows row0 + r·kGroupRows
    bool valid[R];
#pragma unroll
    for (int r = 0; r < R; ++r) valid[r] = row0 + r * L::kGroupRows < p.V;

    // Token inputs independent of the state, in flight during the stage wait.
    const int t = m.bos;
    float vr[R];
#pragma unroll
    for (int r = 0; r < R; ++r) vr[r] = 0.0f;
    float g_or_a = 0.0f, b_in = 0.0f, A_log = 0.0f, dt_bias = 0.0f;
    float q[KC], k[KC];  // q̂ (scale folded in) and k̂, the lane's columns
#pragma unroll
    for (int c = 0; c < KC; ++c) q[c] = 0.0f, k[c] = 0.0f;
    const bool v_staged = kV5 && p.v_async;  // v5: the v values come with the stage
    if (fast) {
      if (!v_staged) {
        const In* vrow = v_row(t, hv);
#pragma unroll
        for (int r = 0; r < R; ++r)
          if (valid[r]) vr[r] = to_f32(vrow[row0 + r * L::kGroupRows]);
      }
      if (new_head) {
        if (mode == Mode::prep) {
          g_or_a = p.a_raw.at(t, hv), b_in = p.b_raw.at(t, hv);
          A_log = p.A_log.at(hv), dt_bias = p.dt_bias.at(hv);
          load_cols<LPR, KC, S>(p.q_norm, hk, sub, q);  // weights; x multiplies in below
          load_cols<LPR, KC, S>(p.k_norm, hk, sub, k);
        } else {
          g_or_a = p.g.at(t, hv), b_in = p.beta.at(t, hv);
        }
      }
    }

    cp_wait<kWarpStages - 1>();  // this item's group (and the lane's own chunks) have landed
    __syncwarp();                // ... and every lane's: the q / k pieces are shared
    const unsigned char* const st = warp_smem + stage * WT::kStageBytes;
    float s[R][KC];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (m.read && valid[r]) {
#pragma unroll
        for (int cc = 0; cc < CPR; ++cc)
          vload<W>(reinterpret_cast<const S*>(st + ((r * CPR + cc) * 32 + lane) * 16),
                   s[r] + cc * W);
      } else {
#pragma unroll
        for (int c = 0; c < KC; ++c) s[r][c] = 0.0f;
      }
    }
    if (fast && v_staged) {
      const In* vs = reinterpret_cast<const In*>(st + WT::kVOffset);
#pragma unroll
      for (int r = 0; r < R; ++r) vr[r] = to_f32(vs[r * L::kGroupRows + group_row]);
    }
    float qq = 0.0f, kk = 0.0f;
    if (fast && !new_head) {
#pragma unroll
      for (int j = 0; j < KC / 4; ++j) {
        const float4 a = cache_q[j * LPR + sub], b = cache_k[j * LPR + sub];
        q[4 * j] = a.x, q[4 * j + 1] = a.y, q[4 * j + 2] = a.z, q[4 * j + 3] = a.w;
        k[4 * j] = b.x, k[4 * j + 1] = b.y, k[4 * j + 2] = b.z, k[4 * j + 3] = b.w;
      }
    }
    if (new_head) {
#pragma unroll
      for (int cc = 0; cc < CPR; ++cc) {
        const int piece = (cc * LPR + sub) * WT::kPiece;
        float xq[W], xk[W];
        vload<W>(reinterpret_cast<const In*>(st + WT::kTokOffset + piece), xq);
        vload<W>(reinterpret_cast<const In*>(st + WT::kTokOffset + WT::kRowBytes + piece), xk);
#pragma unroll
        for (int e = 0; e < W; ++e) {
          const int c = cc * W + e;
          if (mode == Mode::prep) {
            qq += xq[e] * xq[e], kk += xk[e] * xk[e];
            q[c] *= xq[e], k[c] *= xk[e];
          } else {
            q[c] = xq[e], k[c] = xk[e];
          }
        }
      }
    }
    __syncwarp();  // every lane has read the stage: it takes the item kWarpStages ahead
    if (ahead < end) issue(ahead, m_ahead, stage);
    cp_commit();

    if (fast) {
      if (new_head) {
        prep_key = key;
        if (mode == Mode::prep) {
          // Seed 000: q̂ = w ⊙ x / rms(x) (as gdn_tokens), g and β from raw a, b.
          const float inv_k = __frcp_rn(static_cast<float>(p.K));
          const float qr = rsqrtf(group_sum<LPR>(qq) * inv_k + p.eps);
          const float kr = rsqrtf(group_sum<LPR>(kk) * inv_k + p.eps);
#pragma unroll
          for (int c = 0; c < KC; ++c) q[c] *= qr, k[c] *= kr;
          const float x = g_or_a + dt_bias;
          const float softplus = x > 20.0f ? x : log1pf(__expf(x));
          alpha = __expf(-__expf(A_log) * softplus);
          beta = __frcp_rn(1.0f + __expf(-b_in));
        } else {
          if (p.l2norm) {
#pragma unroll
            for (int c = 0; c < KC; ++c) qq += q[c] * q[c], kk += k[c] * k[c];
            const float qr = rsqrtf(group_sum<LPR>(qq) + 1e-6f);
            const float kr = rsqrtf(group_sum<LPR>(kk) + 1e-6f);
#pragma unroll
            for (int c = 0; c < KC; ++c) q[c] *= qr, k[c] *= kr;
          }
#pragma unroll
          for (int c = 0; c < KC; ++c) q[c] *= p.scale;
          alpha = __expf(g_or_a);
          beta = b_in;
        }
        float kq_part = 0.0f;
#pragma unroll
        for (int c = 0; c < KC; ++c) kq_part += k[c] * q[c];
        kq = group_sum<LPR>(kq_part);
        if (lane < LPR) {  // read by the later items of the run (after their __syncwarp)
#pragma unroll
          for (int j = 0; j < KC / 4; ++j) {
            cache_q[j * LPR + sub] =
                make_float4(q[4 * j], q[4 * j + 1], q[4 * j + 2], q[4 * j + 3]);
            cache_k[j * LPR + sub] =
                make_float4(k[4 * j], k[4 * j + 1], k[4 * j + 2], k[4 * j + 3]);
          }
        }
      }
      // S·k̂ and S·q̂ of the thread's rows, reduced over the row group together.
      float red[2 * R];
#pragma unroll
      for (int r = 0; r < R; ++r) {
        float sk = 0.0f, sq = 0.0f;
#pragma unroll
        for (int c = 0; c < KC; ++c) sk += s[r][c] * k[c], sq += s[r][c] * q[c];
        red[2 * r] = sk, red[2 * r + 1] = sq;
      }
#pragma unroll
      for (int o = LPR / 2; o > 0; o >>= 1)
#pragma unroll
        for (int j = 0; j < 2 * R; ++j) red[j] += __shfl_xor_sync(0xffffffffu, red[j], o);
      S* const pool = pool_base + m.slot * p.st_slot + hv * p.st_head;
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const float u = beta * (vr[r] - alpha * red[2 * r]);
        const float o = alpha * red[2 * r + 1] + u * kq;
#pragma unroll
        for (int c = 0; c < KC; ++c) s[r][c] = alpha * s[r][c] + u * k[c];
        const int row = row0 + r * L::kGroupRows;
        if (valid[r]) {
          if (lead) out[t * p.o_t + hv * p.o_h + row] = from_f32<In>(o);
          if (kV5 && p.cs_store)
            store_row_cs<LPR, KC, S>(pool + row * p.st_row, sub, s[r]);
          else
            store_row<LPR, KC, S>(pool + row * p.st_row, sub, s[r]);
        }
      }
    } else if (m.slot < 0) {
      gdn_padding<mode, LPR, KC, R, In, S>(p, hv, m.bos, m.eos, row0, false);
    } else if constexpr (mode != Mode::prep) {  // T != 1 or per-token states
      S* const pool = pool_base + m.slot * p.st_slot + hv * p.st_head;
      gdn_tokens<mode, LPR, KC, R, In, S>(p, hv, m.bos, m.eos, row0, false, pool, s);
    }
  }
}

// gdn_replay: S ← α_t S + u_t k̂_tᵀ for the first num_tokens[n] tokens, from the pool snapshot.
// Same layout as gdn_recurrent_kernel; no reductions. Bytes: the pool rows read and written once
// (or written to state_out), the tape read once per token (4·(K + V + 1) B per token and head).
template <int LPR, int KC, class S>
__global__ void __launch_bounds__(kThreads)
    gdn_replay_kernel(const float* tape_k, const float* tape_u, const float* tape_alpha,
                      void* state, int64_t st_slot, int64_t st_head, int64_t st_row,
                      const int* cu_seqlens, const int* slots, const int* num_tokens,
                      void* state_out, int64_t so_n, int64_t so_head, int64_t so_row, int Hk,
                      int Hv, int V, int K) {
  using L = Layout<LPR, KC, S>;
  constexpr int R = kRowsPerThread;
  const int n = blockIdx.z, hv = blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, sub = lane % LPR;
  const int row0 = blockIdx.x * L::kRows + warp * (L::kGroupRows * R) + lane / LPR;
  const int hk = hv / (Hv / Hk);
  const int slot = slots[n];
  if (slot < 0 && !state_out) return;  // padding: pool untouched
  S* pool = static_cast<S*>(state) + (slot < 0 ? 0 : slot) * st_slot + hv * st_head;
  S* dst = state_out ? static_cast<S*>(state_out) + n * so_n + hv * so_head : pool;
  const int64_t dst_row = state_out ? so_row : st_row;
  bool valid[R];
  float s[R][KC];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    valid[r] = row0 + r * L::kGroupRows < V;
    if (slot >= 0 && valid[r]) {
      load_row<LPR, KC, S>(pool + (row0 + r * L::kGroupRows) * st_row, sub, s[r]);
    } else {
#pragma unroll
      for (int c = 0; c < KC; ++c) s[r][c] = 0.0f;
    }
  }
  if (slot >= 0) {
    const int bos = cu_seqlens[n], end = bos + num_tokens[n];
    for (int t = bos; t < end; ++t) {
      const float alpha = tape_alpha[int64_t(t) * Hv + hv];
      float k[KC];
      load_row<LPR, KC, S>(tape_k + (int64_t(t) * Hk + hk) * K, sub, k);
      const float* u = tape_u + (int64_t(t) * Hv + hv) * V;
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const float ur = valid[r] ? u[row0 + r * L::kGroupRows] : 0.0f;
#pragma unroll
        for (int c = 0; c < KC; ++c) s[r][c] = alpha * s[r][c] + ur * k[c];
      }
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r)
    if (valid[r]) store_row<LPR, KC, S>(dst + (row0 + r * L::kGroupRows) * dst_row, sub, s[r]);
}

// ---- host side -----------------------------------------------------------------------------
// What the CUDA kernels refuse (supports() says which, and why):
//   K not in {32, 64, 128, 256} (V is free: rows past V are guarded), f16 token tensors (q, k, v,
//   conv_out; f32 and bf16 are built), a pool that is not f32 or bf16, a pool whose K is not
//   contiguous or whose rows are not 16-byte aligned (16-byte vector accesses), states_per_token
//   or the tape tensors not contiguous or not 16-byte aligned, q/k/v/out of different dtypes.

bool aligned16(const Tensor& t) {
  return reinterpret_cast<uintptr_t>(t.data()) % 16 == 0;
}

Reason check_layout(int64_t K, const Tensor& state, const Tensor& in, const char* in_name) {
  if (K != 32 && K != 64 && K != 128 && K != 256) return str("K=", K, " not in {32, 64, 128, 256}");
  if (in.dtype() == DType::f16) return str(in_name, " f16 is not built (f32, bf16)");
  if (state.dtype() != DType::f32 && state.dtype() != DType::bf16)
    return str("state ", dtype_name(state.dtype()), " is not built (f32, bf16)");
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

// K → (LPR lanes per row, KC columns per lane): 16 columns a lane from K = 128 up, 8 lanes a row
// up to K = 128.
template <class Body>
void dispatch_k(int64_t K, Body&& body) {
  switch (K) {
    case 32:
      body(std::integral_constant<int, 8>{}, std::integral_constant<int, 4>{});
      break;
    case 64:
      body(std::integral_constant<int, 8>{}, std::integral_constant<int, 8>{});
      break;
    case 128:
      body(std::integral_constant<int, 8>{}, std::integral_constant<int, 16>{});
      break;
    default:
      body(std::integral_constant<int, 16>{}, std::integral_constant<int, 16>{});
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
  dispatch_k(p.K, [&](auto lpr, auto kc) {
    dispatch_in_state(in, state, [&](auto tin, auto ts) {
      constexpr int LPR = decltype(lpr)::value, KC = decltype(kc)::value;
      using TS = decltype(ts);
      auto run = [&](auto rows_per_thread) {
        constexpr int R = decltype(rows_per_thread)::value;
        constexpr int rows = Layout<LPR, KC, TS, R>::kRows;
        const dim3 grid(static_cast<unsigned>((p.V + rows - 1) / rows), static_cast<unsigned>(p.Hv),
                        static_cast<unsigned>(N));
        gdn_recurrent_kernel<LPR, KC, R, decltype(tin), TS>
            <<<grid, kThreads, 0, as_stream(ctx.stream())>>>(p, mode);
        HYBRID_CUDA_CHECK_LAUNCH();
      };
      // 4 rows a thread when the grid at 2 rows would be large (decode batches of B >= ~32 at
      // Hv 32): more state bytes in flight per SM; small grids keep 2 rows for more blocks.
      // gdn_record keeps 2 rows (its tape stores add registers; not a decode hot path).
      constexpr int rows2 = Layout<LPR, KC, TS>::kRows;
      const int64_t blocks2 = N * p.Hv * ((p.V + rows2 - 1) / rows2);
      if (mode != Mode::record && blocks2 >= kBigGridBlocks)
        run(std::integral_constant<int, kRowsPerThreadBig>{});
      else
        run(std::integral_constant<int, kRowsPerThread>{});
    });
  });
}

// v3 (gdn_stream_kernel). R = kStreamRows (16 KiB tiles at K = 128) once that grid has at least
// 2 items per SM; smaller grids (B = 1, 2 at Hv 32) take 2 rows a thread (bf16: 8 KiB tiles,
// twice the items) so that more SMs share the few bytes.
template <Mode mode>
void launch_stream(const GdnParams& p, DType in, DType state, int64_t N, Context& ctx) {
  if (N == 0) return;
  const int64_t min_items = 2 * int64_t{device_info().sms};
  dispatch_k(p.K, [&](auto lpr, auto kc) {
    dispatch_in_state(in, state, [&](auto tin, auto ts) {
      constexpr int LPR = decltype(lpr)::value, KC = decltype(kc)::value;
      using TS = decltype(ts);
      auto run = [&](auto rows_per_thread) {
        constexpr int R = decltype(rows_per_thread)::value;
        constexpr int rows = Layout<LPR, KC, TS, R>::kRows;
        const int tiles = (p.V + rows - 1) / rows;
        const int64_t items = N * p.Hv * tiles;
        auto* kernel = gdn_stream_kernel<mode, LPR, KC, R, decltype(tin), TS>;
        constexpr size_t smem = size_t{kStages} * kTileElems<LPR, KC, TS, R> * sizeof(TS);
        const int64_t blocks =
            persistent_blocks(reinterpret_cast<const void*>(kernel), kThreads, smem, items);
        kernel<<<static_cast<unsigned>(blocks), kThreads, smem, as_stream(ctx.stream())>>>(p, items,
                                                                                           tiles);
        HYBRID_CUDA_CHECK_LAUNCH();
      };
      constexpr int kBig = kStreamRows<TS>;
      constexpr int big_rows = Layout<LPR, KC, TS, kBig>::kRows;
      if constexpr (kBig != 2) {
        if (N * p.Hv * ((p.V + big_rows - 1) / big_rows) < min_items) {
          run(std::integral_constant<int, 2>{});
          return;
        }
      }
      run(std::integral_constant<int, kBig>{});
    });
  });
}

// v4 (gdn_warp_kernel): K → (LPR, KC) for the sizes with 16-byte state chunks of both pool dtypes.
template <class Body>
void dispatch_k_warp(int64_t K, Body&& body) {
  switch (K) {
    case 64:
      body(std::integral_constant<int, 8>{}, std::integral_constant<int, 8>{});
      break;
    case 128:
      body(std::integral_constant<int, 8>{}, std::integral_constant<int, 16>{});
      break;
    default:  // 256
      body(std::integral_constant<int, 16>{}, std::integral_constant<int, 16>{});
      break;
  }
}

// A persistent grid of 4-warp blocks (as many as fit: 3-4 per SM), capped at one item a warp.
// v5's streaming write-back is on unless HYBRID_DECODE_V5_CS=0 (to time it apart from the staged
// v values in one run; shared with ssm_step.cuda_warp2).
bool decode_v5_cs_stores() {
  static const bool on = !env_is_zero("HYBRID_DECODE_V5_CS");
  return on;
}

// kV5: gdn_warp_kernel<.., true>; v_rows_aligned: every v row (v, or conv_out's v segments) starts
// 16-byte aligned (p.v_async then also needs V % kItemRows == 0).
template <Mode mode, bool kV5 = false>
void launch_warp(GdnParams p, DType in, DType state, int64_t N, Context& ctx,
                 bool v_rows_aligned = false) {
  if (N == 0) return;
  dispatch_k_warp(p.K, [&](auto lpr, auto kc) {
    dispatch_in_state(in, state, [&](auto tin, auto ts) {
      constexpr int LPR = decltype(lpr)::value, KC = decltype(kc)::value;
      using TS = decltype(ts);
      using TIn = decltype(tin);
      constexpr int R = kWarpRows<TS>;
      using WT = WarpTile<LPR, KC, R, TIn, TS, kV5>;
      const int tiles = (p.V + WT::kItemRows - 1) / WT::kItemRows;
      const int64_t items = N * p.Hv * tiles;
      p.v_async = kV5 && v_rows_aligned && p.V % WT::kItemRows == 0;
      p.cs_store = decode_v5_cs_stores();
      auto* kernel = gdn_warp_kernel<mode, LPR, KC, R, TIn, TS, kV5>;
      constexpr size_t smem = size_t{kWarpBlockWarps} * WT::kWarpBytes;
      const int64_t blocks =
          persistent_blocks(reinterpret_cast<const void*>(kernel), kWarpBlockWarps * 32, smem,
                            (items + kWarpBlockWarps - 1) / kWarpBlockWarps);
      kernel<<<static_cast<unsigned>(blocks), kWarpBlockWarps * 32, smem,
               as_stream(ctx.stream())>>>(p, static_cast<int>(items), tiles);
      HYBRID_CUDA_CHECK_LAUNCH();
    });
  });
}

// What v4 refuses beyond v2: HYBRID_GDN_DECODE_V4=0 (the switch that lets v3 / v2 run and be
// timed beside it), K = 32 (8-byte bf16 state chunks; not a model size), token rows (q, k or
// conv_out) that are not 16-byte aligned (their pieces are cp.async copies), more than 2^31 − 1
// items, devices before sm_80 (cp.async).
Reason warp_supports(int64_t K, int64_t N, int64_t Hv, int64_t V, DType state,
                     std::initializer_list<const Tensor*> token_rows, bool v5 = false) {
  // v5 (cuda_warp2) answers to its own switch only, so v4 can be timed beside it and vice versa.
  static const bool v4_off = env_is_zero("HYBRID_GDN_DECODE_V4");
  static const bool v5_off = env_is_zero("HYBRID_GDN_DECODE_V5");
  if (v5 ? v5_off : v4_off)
    return std::string(v5 ? "HYBRID_GDN_DECODE_V5=0" : "HYBRID_GDN_DECODE_V4=0");
  if (K != 64 && K != 128 && K != 256) return str("K=", K, " not in {64, 128, 256}");
  for (const Tensor* t : token_rows) {
    const size_t esz = dtype_size(t->dtype());
    if (!aligned16(*t) || (t->stride(0) * esz) % 16 || (t->rank() > 2 && (t->stride(1) * esz) % 16))
      return std::string("token rows (q, k / conv_out) must be 16-byte aligned");
  }
  const int64_t rows = state == DType::bf16 ? 16 : 8;  // item rows at K = 128 (K = 256: half)
  if (N * Hv * ((V + rows - 1) / rows) * 2 > std::numeric_limits<int>::max())
    return std::string("more than 2^31 - 1 items");
  const int major = device_info().major;
  if (major < 8) return str("cp.async needs sm_80 (device is sm_", major, "x)");
  return {};
}

// What the v3 variants refuse beyond v2: f32 pools (measured on the H200, session 2: v3 took
// 0.321 ms at B = 256 and 0.087 ms at B = 64 under CUDA graphs where v2 took 0.290 / 0.079, so
// v2 keeps them; v3 is for bf16 pools, where v2's registers bound the bytes in flight), pool rows
// that are not packed (row stride != K: a tile of rows must be one contiguous bulk copy) and
// devices before sm_90 (TMA bulk copies).
Reason stream_supports(int64_t K, const Tensor& state) {
  if (state.dtype() != DType::bf16)
    return std::string("f32 pool: the v2 kernel is faster (docs/PERFORMANCE.md, run B)");
  if (state.stride(2) != K) return str("state row stride ", state.stride(2), " != K=", K);
  if (state.size(2) > std::numeric_limits<int>::max() / K)
    return std::string("state: V·K must fit an int");
  const int major = device_info().major;
  if (major < 9) return str("bulk copies need sm_90 (device is sm_", major, "x)");
  return {};
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
  if (a.states_per_token.defined() &&
      (!a.states_per_token.is_contiguous() || !aligned16(a.states_per_token)))
    return std::string("states_per_token must be contiguous and 16-byte aligned");
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

// gdn_recurrent's parameters: the token tensors, plus the optional initial-state flags and the
// per-token states (speculative verification).
GdnParams recurrent_params(const GdnRecurrent& a) {
  GdnParams p = token_params(a);
  p.has_initial =
      a.has_initial_state.defined() ? a.has_initial_state.data_as<const int>() : nullptr;
  p.states_per_token = a.states_per_token.defined() ? a.states_per_token.data_as<float>() : nullptr;
  return p;
}

void recurrent_cuda(const GdnRecurrent& a, Context& ctx) {
  GdnParams p = recurrent_params(a);
  launch(p, Mode::recurrent, a.q.dtype(), a.state.dtype(), a.state_slots.size(0), ctx);
}

Reason recurrent_stream_supports(const GdnRecurrent& a) {
  if (Reason r = recurrent_supports(a)) return r;
  return stream_supports(a.q.size(2), a.state);
}

void recurrent_stream_cuda(const GdnRecurrent& a, Context& ctx) {
  GdnParams p = recurrent_params(a);
  launch_stream<Mode::recurrent>(p, a.q.dtype(), a.state.dtype(), a.state_slots.size(0), ctx);
}

Reason recurrent_warp_supports(const GdnRecurrent& a) {
  if (Reason r = recurrent_supports(a)) return r;
  return warp_supports(a.q.size(2), a.state_slots.size(0), a.v.size(1), a.v.size(2),
                       a.state.dtype(), {&a.q, &a.k});
}

void recurrent_warp_cuda(const GdnRecurrent& a, Context& ctx) {
  GdnParams p = recurrent_params(a);
  launch_warp<Mode::recurrent>(p, a.q.dtype(), a.state.dtype(), a.state_slots.size(0), ctx);
}

// v5 (gdn_recurrent.cuda_warp2): what v4 serves, under HYBRID_GDN_DECODE_V5 instead of _V4. The v
// values ride in the stages when the v rows are 16-byte aligned (else v4's loads, same kernel).
Reason recurrent_warp2_supports(const GdnRecurrent& a) {
  if (Reason r = recurrent_supports(a)) return r;
  return warp_supports(a.q.size(2), a.state_slots.size(0), a.v.size(1), a.v.size(2),
                       a.state.dtype(), {&a.q, &a.k}, true);
}

void recurrent_warp2_cuda(const GdnRecurrent& a, Context& ctx) {
  GdnParams p = recurrent_params(a);
  const size_t esz = dtype_size(a.v.dtype());
  const bool v_aligned =
      aligned16(a.v) && (a.v.stride(0) * esz) % 16 == 0 && (a.v.stride(1) * esz) % 16 == 0;
  launch_warp<Mode::recurrent, true>(p, a.q.dtype(), a.state.dtype(), a.state_slots.size(0), ctx,
                                     v_aligned);
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

void prep_step_cuda(const GdnPrepStep& a, Context& ctx) {
  GdnParams p;
  prep_params(a, p);
  p.cu_seqlens = nullptr;  // one token per sequence: no cu_seqlens, one launch
  p.slots = a.state_slots.data_as<const int>();
  launch(p, Mode::prep, a.conv_out.dtype(), a.state.dtype(), a.state_slots.size(0), ctx);
}

// v3, v4 and v5 load the RMSNorm weights by 16-byte vectors: f32 / bf16, unit-stride rows,
// 16-byte aligned.
Reason norm_weights_vectorizable(const GdnPrepStep& a) {
  for (const Tensor* w : {&a.q_norm_weight, &a.k_norm_weight})
    if (w->stride(1) != 1 || !aligned16(*w) || (w->stride(0) * dtype_size(w->dtype())) % 16 ||
        (w->dtype() != DType::f32 && w->dtype() != DType::bf16))
      return std::string("norm weights: f32 / bf16 with 16-byte aligned unit-stride rows needed");
  return {};
}

Reason prep_step_stream_supports(const GdnPrepStep& a) {
  if (Reason r = prep_supports(a)) return r;
  if (Reason r = norm_weights_vectorizable(a)) return r;
  return stream_supports(a.q_norm_weight.size(1), a.state);
}

void prep_step_stream_cuda(const GdnPrepStep& a, Context& ctx) {
  GdnParams p;
  prep_params(a, p);
  p.cu_seqlens = nullptr;
  p.slots = a.state_slots.data_as<const int>();
  launch_stream<Mode::prep>(p, a.conv_out.dtype(), a.state.dtype(), a.state_slots.size(0), ctx);
}

// v4 also needs v3's RMSNorm weight layout (16-byte vector loads).
Reason prep_step_warp_supports(const GdnPrepStep& a) {
  if (Reason r = prep_supports(a)) return r;
  if (Reason r = norm_weights_vectorizable(a)) return r;
  return warp_supports(a.q_norm_weight.size(1), a.state_slots.size(0), a.y.size(1), a.y.size(2),
                       a.state.dtype(), {&a.conv_out});
}

void prep_step_warp_cuda(const GdnPrepStep& a, Context& ctx) {
  GdnParams p;
  prep_params(a, p);
  p.cu_seqlens = nullptr;
  p.slots = a.state_slots.data_as<const int>();
  launch_warp<Mode::prep>(p, a.conv_out.dtype(), a.state.dtype(), a.state_slots.size(0), ctx);
}

// v5 (gdn_prep_step.cuda_warp2): what v4 serves, under HYBRID_GDN_DECODE_V5.
Reason prep_step_warp2_supports(const GdnPrepStep& a) {
  if (Reason r = prep_supports(a)) return r;
  if (Reason r = norm_weights_vectorizable(a)) return r;
  return warp_supports(a.q_norm_weight.size(1), a.state_slots.size(0), a.y.size(1), a.y.size(2),
                       a.state.dtype(), {&a.conv_out}, true);
}

void prep_step_warp2_cuda(const GdnPrepStep& a, Context& ctx) {
  GdnParams p;
  prep_params(a, p);
  p.cu_seqlens = nullptr;
  p.slots = a.state_slots.data_as<const int>();
  // v rows of token t: conv_out + t·conv_t + 2·Hk·K + hv·V (conv_out rows 16-byte aligned:
  // warp_supports).
  const size_t esz = dtype_size(a.conv_out.dtype());
  const bool v_aligned = (2 * static_cast<size_t>(p.Hk) * p.K * esz) % 16 == 0 &&
                         (static_cast<size_t>(p.V) * esz) % 16 == 0;
  launch_warp<Mode::prep, true>(p, a.conv_out.dtype(), a.state.dtype(), a.state_slots.size(0), ctx,
                                v_aligned);
}

// ---- gdn_record / gdn_replay ----------------------------------------------------------------

Reason record_supports(const GdnRecord& a) {
  if (a.q.dtype() != a.k.dtype() || a.v.dtype() != a.q.dtype() || a.out.dtype() != a.q.dtype())
    return std::string("q, k, v and out must share one dtype");
  if (!a.tape_k.is_contiguous() || !a.tape_u.is_contiguous() || !a.tape_alpha.is_contiguous())
    return std::string("the tape tensors must be contiguous");
  if (!aligned16(a.tape_k)) return std::string("tape_k must be 16-byte aligned");
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
  if (!aligned16(a.tape_k)) return std::string("tape_k must be 16-byte aligned");
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
  const bool has_out = a.state_out.defined();
  dispatch_k(K, [&](auto lpr, auto kc) {
    auto run = [&](auto ts) {
      constexpr int LPR = decltype(lpr)::value, KC = decltype(kc)::value;
      using TS = decltype(ts);
      constexpr int rows = Layout<LPR, KC, TS>::kRows;
      const dim3 grid(static_cast<unsigned>((V + rows - 1) / rows), static_cast<unsigned>(Hv),
                      static_cast<unsigned>(N));
      gdn_replay_kernel<LPR, KC, TS><<<grid, kThreads, 0, as_stream(ctx.stream())>>>(
          a.tape_k.data_as<const float>(), a.tape_u.data_as<const float>(),
          a.tape_alpha.data_as<const float>(), a.state.data(), a.state.stride(0), a.state.stride(1),
          a.state.stride(2), a.cu_seqlens.data_as<const int>(), a.state_slots.data_as<const int>(),
          a.num_tokens.data_as<const int>(), has_out ? a.state_out.data() : nullptr,
          has_out ? a.state_out.stride(0) : 0, has_out ? a.state_out.stride(1) : 0,
          has_out ? a.state_out.stride(2) : 0, Hk, Hv, V, K);
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
    // The four loads in flight together (raw_at), converted after.
    const uint32_t a_bits = raw_at(a, t, hv), dt_bias_bits = raw_at(dt_bias, hv);
    const uint32_t A_log_bits = raw_at(A_log, hv), b_bits = raw_at(b, t, hv);
    const float x = scalar_of_raw(a, a_bits) + scalar_of_raw(dt_bias, dt_bias_bits);
    const float softplus = x > 20.0f ? x : log1pf(expf(x));
    g[t * g_t + hv] = -expf(scalar_of_raw(A_log, A_log_bits)) * softplus;
    beta[t * beta_t + hv] = 1.0f / (1.0f + expf(-scalar_of_raw(b, b_bits)));
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

// ---- gdn_recurrent.cuda_tile (decode v7) ------------------------------------------------------
//
// One warp per (sequence n, value head hv, tile of kTileRows = 8 value rows), the tile's state
// S [8, 128] f32 in registers for the whole sequence: lane l owns columns 4l..4l+3 of the 8 rows
// (32 floats; each row is one coalesced 512-byte warp access), q̂ and k̂ columns 4l..4l+3. Blocks
// of 1 warp (state_tile.cuh; 4-warp blocks measured 1-3% slower), grid (Hv·V / 8, N): at B 256, Hv
// 32 that is 131072 warps, each putting 4 KiB (f32 pool) of loads in flight before any arithmetic.
// gdn_prep_step: 72 registers (7 blocks of 4 warps' worth, 28 warps a SM; an 8-byte spill).
// gdn_recurrent: 96 registers (5, 20 warps a SM), no spill. Session 9's token loads issued with
// the state's raised its pressure: at 72 registers it spilled 48 bytes (f32) inside the token loop.
// Session 11 on the H200, f32 state, 72 / 80 / 96 registers: B 64 88.0-88.4% / 92.2-92.7% /
// 94.1-94.4% of the copy ceiling, B 256 92% / 96% / 97.4-97.7%, B 1 5.95-6.02 / 5.82-5.89 /
// 5.63-5.66 µs (bf16 state unchanged); gdn_prep_step lost ~1% at 96 (B 64 90.1-90.5% → 89.4-89.6%),
// so it keeps 72. This is the shape of flash-linear-attention's fused_recurrent (a small [K, BV]
// state tile per program, held in registers, many programs), which reached 98% of the copy ceiling
// at B 256 in session 4, where the item-streaming warp kernels stay at 84-86%. Per token, as
// gdn_warp_kernel: sk = S·k̂ and sq = S·q̂ of the old S, then
//   u = β (v − α sk),   o = α sq + u (k̂·q̂),   S ← α S + u k̂ᵀ.
// The 16 sums (sk, sq of 8 rows) reduce over the warp in 16 shuffles by halving (xor 16 splits sk
// from sq as each row's sums are formed, xor 8 / 4 / 2 split the rows, xor 1 completes): lane l
// then holds the sum of kind bit 4 (0: sk, 1: sq) for row 4·bit3 + 2·bit2 + bit1. u goes from the
// sk lane to its sq partner (xor 16) for the output and to every lane (8 shuffles) for the rank-1
// update; k̂·q̂ and the L2 norms are plain butterflies. 35 shuffles per token (45 with the L2 norms)
// instead of 85.
constexpr int kTileRows = 8;
constexpr int kTileWarps = 4;

// The lane holding row r's sk after tile_halving_sum<8> (bit 4 = 0, bit 0 = 0).
__device__ __forceinline__ int tile_sk_lane(int r) {
  return ((r >> 2) & 1) << 3 | ((r >> 1) & 1) << 2 | (r & 1) << 1;
}

// The first halving step for one row: this lane's partial sums sk, sq of the row; lanes with
// bit 4 = 0 keep sk and add their partner's (xor 16), lanes with bit 4 = 1 keep sq. Done per row
// as the partial sums are formed, so that only 8 of the 16 values are ever live.
__device__ __forceinline__ float tile_split(float sk, float sq, int lane) {
  const bool b4 = lane & 16;
  return (b4 ? sq : sk) + __shfl_xor_sync(0xffffffffu, b4 ? sk : sq, 16);
}

// kPrep (gdn_prep_step.cuda_tile): one token per sequence (t = n) read from the packed conv
// output row [q (Hk·K) | k (Hk·K) | v (Hv·V)], q̂ = w_q ⊙ q · rsqrt(mean(q²) + eps) (k̂ likewise),
// α = exp(−exp(A_log)·softplus(a + dt_bias)), β = sigmoid(b), scale 1: gdn_warp_kernel's prep
// expressions in its order.
template <class X, class S, bool kPrep = false>
__global__ void __launch_bounds__(kTileWarps * 32, kPrep ? 7 : 5)
    gdn_tile_kernel(const GdnParams p) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int tiles_per_head = p.V / kTileRows;
  const int tile = blockIdx.x * (blockDim.x / 32) + warp;
  const int hv = tile / tiles_per_head, v0 = (tile % tiles_per_head) * kTileRows;
  const int n = blockIdx.y, hk = hv / (p.Hv / p.Hk);
  const int t0 = kPrep ? n : p.cu_seqlens[n], t1 = kPrep ? n + 1 : p.cu_seqlens[n + 1];
  const int slot = p.slots[n];
  // Loaded beside the slot (one round trip for both): read after the padding check, it cost a
  // round trip of its own before the state's loads.
  const bool from_pool = !p.has_initial || p.has_initial[n] != 0;
  X* const out = static_cast<X*>(p.out);
  const int64_t sp_head = (int64_t)p.V * 128;  // states_per_token [T, Hv, V, 128] row strides
  if (slot < 0) {  // padding: zero outputs (and per-token states); the pool is not touched
    for (int t = t0; t < t1; ++t) {
      if (lane < kTileRows) out[t * p.o_t + hv * p.o_h + v0 + lane] = from_f32<X>(0.0f);
      if (p.states_per_token) {
        float* st = p.states_per_token + ((int64_t)t * p.Hv + hv) * sp_head + (int64_t)v0 * 128;
#pragma unroll
        for (int r = 0; r < kTileRows; ++r)
          *reinterpret_cast<float4*>(st + r * 128 + 4 * lane) = make_float4(0.f, 0.f, 0.f, 0.f);
      }
    }
    return;
  }
  // Token rows of gdn_recurrent (unused by kPrep, whose rows come from conv_out).
  const X* const qb = kPrep ? nullptr : static_cast<const X*>(p.q) + hk * p.q_h + 4 * lane;
  const X* const kb = kPrep ? nullptr : static_cast<const X*>(p.k) + hk * p.k_h + 4 * lane;
  const X* const vb = kPrep ? nullptr : static_cast<const X*>(p.v) + hv * p.v_h + v0;
  const int my_row = (lane >> 3 & 1) * 4 + (lane >> 2 & 1) * 2 + (lane >> 1 & 1);
  // gdn_recurrent: token t's q, k, v and gates as raw bits, converted after the loads are all in
  // flight; token t0's are loaded before the state, so that they share the state's round trip
  // instead of following it (session 8 run 1's stall samples put ~30% of the warp's time on three
  // dependent round trips for q / k / v, g and beta after the state had arrived).
  using Raw4 = std::conditional_t<sizeof(X) == 4, uint4, uint2>;  // 4 elements of q or k
  Raw4 nq{}, nk{};
  X nv{};
  uint32_t ng = 0, nb = 0;
  auto fetch = [&](int t) {
    nq = *reinterpret_cast<const Raw4*>(qb + t * p.q_t);
    nk = *reinterpret_cast<const Raw4*>(kb + t * p.k_t);
    nv = vb[t * p.v_t + my_row];
    ng = raw_at(p.g, t, hv), nb = raw_at(p.beta, t, hv);
  };
  if constexpr (!kPrep)
    if (t0 < t1) fetch(t0);
  S* const pool = static_cast<S*>(p.state) + slot * p.st_slot + hv * p.st_head +
                  (int64_t)v0 * p.st_row + 4 * lane;
  const int rs = static_cast<int>(p.st_row);  // row stride in elements (check_layout: < 2^31)
  float s[kTileRows][4];
  if (from_pool) {
#pragma unroll
    for (int r = 0; r < kTileRows; ++r) tile_load4(pool + r * rs, s[r]);
  } else {
#pragma unroll
    for (int r = 0; r < kTileRows; ++r) s[r][0] = s[r][1] = s[r][2] = s[r][3] = 0.0f;
  }
  for (int t = t0; t < t1; ++t) {
    float q[4], k[4], v_mine, alpha, beta;
    if constexpr (kPrep) {
      // Every load of the token's row, norm weights, gates and head parameters is issued before
      // any is converted (raw_at): through Scalars::at, whose dtype branch converts inside, the
      // 12 parameter loads were 12 round trips one after the other.
      const X* const row = static_cast<const X*>(p.q) + t * p.q_t;  // conv_out row t
      float xq[4], xk[4];
      vload<4>(row + hk * 128 + 4 * lane, xq);
      vload<4>(row + (p.Hk + hk) * 128 + 4 * lane, xk);
      const X xv = row[2 * p.Hk * 128 + hv * p.V + v0 + my_row];
      uint32_t wq[4], wk[4];
#pragma unroll
      for (int c = 0; c < 4; ++c)
        wq[c] = raw_at(p.q_norm, hk, 4 * lane + c), wk[c] = raw_at(p.k_norm, hk, 4 * lane + c);
      const uint32_t a_bits = raw_at(p.a_raw, t, hv), b_bits = raw_at(p.b_raw, t, hv);
      const uint32_t dt_bias_bits = raw_at(p.dt_bias, hv), A_log_bits = raw_at(p.A_log, hv);
      v_mine = to_f32(xv);
      float qq = 0.0f, kk = 0.0f;
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        q[c] = scalar_of_raw(p.q_norm, wq[c]), k[c] = scalar_of_raw(p.k_norm, wk[c]);
        qq += xq[c] * xq[c], kk += xk[c] * xk[c];
        q[c] *= xq[c], k[c] *= xk[c];
      }
      const float inv_k = __frcp_rn(128.0f);
      const float qr = rsqrtf(warp_sum(qq) * inv_k + p.eps);
      const float kr = rsqrtf(warp_sum(kk) * inv_k + p.eps);
#pragma unroll
      for (int c = 0; c < 4; ++c) q[c] *= qr, k[c] *= kr;
      const float x = scalar_of_raw(p.a_raw, a_bits) + scalar_of_raw(p.dt_bias, dt_bias_bits);
      const float softplus = x > 20.0f ? x : log1pf(__expf(x));
      alpha = __expf(-__expf(scalar_of_raw(p.A_log, A_log_bits)) * softplus);
      beta = __frcp_rn(1.0f + __expf(-scalar_of_raw(p.b_raw, b_bits)));
    } else {
      if (t > t0) fetch(t);  // token t0's came before the state
      const X* const eq = reinterpret_cast<const X*>(&nq);
      const X* const ek = reinterpret_cast<const X*>(&nk);
#pragma unroll
      for (int c = 0; c < 4; ++c) q[c] = to_f32(eq[c]), k[c] = to_f32(ek[c]);
      v_mine = to_f32(nv);
      alpha = __expf(scalar_of_raw(p.g, ng)), beta = scalar_of_raw(p.beta, nb);
    }
    if (!kPrep && p.l2norm) {
      const float qr =
          rsqrtf(warp_sum(q[0] * q[0] + q[1] * q[1] + q[2] * q[2] + q[3] * q[3]) + 1e-6f);
      const float kr =
          rsqrtf(warp_sum(k[0] * k[0] + k[1] * k[1] + k[2] * k[2] + k[3] * k[3]) + 1e-6f);
#pragma unroll
      for (int c = 0; c < 4; ++c) q[c] *= qr, k[c] *= kr;
    }
    if constexpr (!kPrep) {
#pragma unroll
      for (int c = 0; c < 4; ++c) q[c] *= p.scale;
    }
    const float kq = warp_sum(k[0] * q[0] + k[1] * q[1] + k[2] * q[2] + k[3] * q[3]);
    float a8[kTileRows];
#pragma unroll
    for (int r = 0; r < kTileRows; ++r)
      a8[r] = tile_split(s[r][0] * k[0] + s[r][1] * k[1] + s[r][2] * k[2] + s[r][3] * k[3],
                         s[r][0] * q[0] + s[r][1] * q[1] + s[r][2] * q[2] + s[r][3] * q[3], lane);
    const float sum = tile_halving_sum<8>(a8, lane);               // sk (bit 4 = 0) or sq of my_row
    const float u_mine = beta * (v_mine - alpha * sum);            // meaningful on the sk lanes
    const float u_row = __shfl_xor_sync(0xffffffffu, u_mine, 16);  // the sq lanes' row's u
    if ((lane & 16) && !(lane & 1))
      out[t * p.o_t + hv * p.o_h + v0 + my_row] = from_f32<X>(alpha * sum + u_row * kq);
#pragma unroll
    for (int r = 0; r < kTileRows; ++r) {
      const float u = __shfl_sync(0xffffffffu, u_mine, tile_sk_lane(r));
#pragma unroll
      for (int c = 0; c < 4; ++c) s[r][c] = alpha * s[r][c] + u * k[c];
    }
    if (!kPrep && p.states_per_token) {
      float* st = p.states_per_token + ((int64_t)t * p.Hv + hv) * sp_head + (int64_t)v0 * 128;
#pragma unroll
      for (int r = 0; r < kTileRows; ++r)
        *reinterpret_cast<float4*>(st + r * 128 + 4 * lane) =
            make_float4(s[r][0], s[r][1], s[r][2], s[r][3]);
    }
  }
#pragma unroll
  for (int r = 0; r < kTileRows; ++r) tile_store4(pool + r * rs, s[r]);
}

// What the tile kernel takes: K = 128, V a multiple of 32 (from the 4-warp blocks of 8-row tiles
// it was measured with; the 1-warp blocks need only 8, untested on a GPU), q and k
// rows in 4-element pieces (base 16-byte aligned, strides multiples of 4 elements), a pool whose
// rows are 4-element pieces too (K contiguous, base 16-byte aligned, strides multiples of 4), at
// most 65535 sequences (grid y). HYBRID_GDN_DECODE_TILE=0 refuses it (cuda_warp2 runs).
// Rows of t in 4-element pieces: base 16-byte aligned, the strides of its first `dims`
// dimensions multiples of 4 elements.
bool rows_in_pieces4(const Tensor& t, int dims) {
  if (reinterpret_cast<uintptr_t>(t.data()) % 16 != 0) return false;
  for (int i = 0; i < dims; ++i)
    if (t.stride(i) % 4 != 0) return false;
  return true;
}

Reason recurrent_tile_supports(const GdnRecurrent& a) {
  static const bool off = env_is_zero("HYBRID_GDN_DECODE_TILE");
  if (off) return std::string("HYBRID_GDN_DECODE_TILE=0");
  if (Reason r = recurrent_supports(a)) return r;
  const int64_t K = a.q.size(2), V = a.v.size(2);
  if (K != 128) return str("K=", K, ": the tile kernel is for K = 128");
  if (V % 32 != 0) return str("V=", V, " is not a multiple of 32");
  if (!rows_in_pieces4(a.q, 2) || !rows_in_pieces4(a.k, 2))
    return std::string("q / k rows must be 16-byte aligned with strides in multiples of 4");
  if (!rows_in_pieces4(a.state, 3) || a.state.stride(3) != 1)
    return std::string("pool rows must be 16-byte aligned with strides in multiples of 4");
  return state_tile_refusal(a.state.dtype(), a.v.size(1) * V / kTileRows, a.state_slots.size(0));
}

// Launches gdn_tile_kernel<X, S, kPrep> over N sequences (X: q / k / v, or conv_out; f32 or
// bf16: check_layout refuses f16).
template <bool kPrep>
void launch_tile(const GdnParams& p, int64_t N, DType x_dtype, DType state_dtype, Context& ctx) {
  if (N == 0) return;
  // 1-warp blocks (state_tile_grid): B 1's 128 tiles at Hv 32, V 128 go to 128 SMs.
  const dim3 grid = state_tile_grid(int64_t{p.Hv} * p.V / kTileRows, N);
  auto run = [&](auto x) {
    using X = decltype(x);
    auto go = [&](auto s) {
      gdn_tile_kernel<X, decltype(s), kPrep><<<grid, 32, 0, as_stream(ctx.stream())>>>(p);
    };
    if (state_dtype == DType::bf16)
      go(__nv_bfloat16{});
    else
      go(float{});
    HYBRID_CUDA_CHECK_LAUNCH();
  };
  if (x_dtype == DType::bf16)
    run(__nv_bfloat16{});
  else
    run(float{});
}

void recurrent_tile_cuda(const GdnRecurrent& a, Context& ctx) {
  launch_tile<false>(recurrent_params(a), a.state_slots.size(0), a.q.dtype(), a.state.dtype(), ctx);
}

// gdn_prep_step.cuda_tile: what gdn_prep_step's warp kernels take (prep_supports, vectorizable norm
// weights) at K = 128 and V a multiple of 32, conv_out rows 16-byte aligned (its q / k pieces are
// 4-element vectors), at most 65535 sequences; HYBRID_GDN_DECODE_TILE=0 refuses it.
Reason prep_step_tile_supports(const GdnPrepStep& a) {
  static const bool off = env_is_zero("HYBRID_GDN_DECODE_TILE");
  if (off) return std::string("HYBRID_GDN_DECODE_TILE=0");
  if (Reason r = prep_supports(a)) return r;
  if (Reason r = norm_weights_vectorizable(a)) return r;
  const int64_t K = a.q_norm_weight.size(1), V = a.y.size(2);
  if (K != 128) return str("K=", K, ": the tile kernel is for K = 128");
  if (V % 32 != 0) return str("V=", V, " is not a multiple of 32");
  if (!rows_in_pieces4(a.conv_out, 1))
    return std::string("conv_out rows must be 16-byte aligned with a row stride in multiples of 4");
  if (!rows_in_pieces4(a.state, 3))
    return std::string("pool rows must be 16-byte aligned with strides in multiples of 4");
  return state_tile_refusal(a.state.dtype(), a.y.size(1) * V / kTileRows, a.state_slots.size(0));
}

void prep_step_tile_cuda(const GdnPrepStep& a, Context& ctx) {
  GdnParams p;
  prep_params(a, p);
  p.cu_seqlens = nullptr;
  p.slots = a.state_slots.data_as<const int>();
  launch_tile<true>(p, a.state_slots.size(0), a.conv_out.dtype(), a.state.dtype(), ctx);
}

}  // namespace

void register_gdn(Registry& r) {
  // v4 (persistent warps streaming through per-warp cp.async stages; HYBRID_GDN_DECODE_V4=0
  // turns it off), v3 (shared-memory streaming by blocks, bf16 pools); the v2 kernels below stay
  // as fallbacks.
  // v5 (v4 with the v values in the stages and streaming write-back; HYBRID_GDN_DECODE_V5=0).
  // v7 (one warp per 8-row tile, state in registers; HYBRID_GDN_DECODE_TILE=0).
  r.add<GdnRecurrent>("gdn_recurrent.cuda_tile", DeviceType::cuda, 4, recurrent_tile_supports,
                      recurrent_tile_cuda);
  r.add<GdnPrepStep>("gdn_prep_step.cuda_tile", DeviceType::cuda, 4, prep_step_tile_supports,
                     prep_step_tile_cuda);
  r.add<GdnRecurrent>("gdn_recurrent.cuda_warp2", DeviceType::cuda, 3, recurrent_warp2_supports,
                      recurrent_warp2_cuda);
  r.add<GdnPrepStep>("gdn_prep_step.cuda_warp2", DeviceType::cuda, 3, prep_step_warp2_supports,
                     prep_step_warp2_cuda);
  r.add<GdnRecurrent>("gdn_recurrent.cuda_warp", DeviceType::cuda, 2, recurrent_warp_supports,
                      recurrent_warp_cuda);
  r.add<GdnPrepStep>("gdn_prep_step.cuda_warp", DeviceType::cuda, 2, prep_step_warp_supports,
                     prep_step_warp_cuda);
  r.add<GdnRecurrent>("gdn_recurrent.cuda_stream", DeviceType::cuda, 1, recurrent_stream_supports,
                      recurrent_stream_cuda);
  r.add<GdnPrepStep>("gdn_prep_step.cuda_stream", DeviceType::cuda, 1, prep_step_stream_supports,
                     prep_step_stream_cuda);
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
