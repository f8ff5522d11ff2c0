// CUDA: gdn_chunk_prefill, general variant (CUDA cores, f32 math, any K, V <= 256).
//
// Mirrors the CPU reference's three stages one kernel each (plus a tiny index kernel), with f32
// intermediates in the workspace (γ [T, Hv], 1/‖k‖ [T, Hk], W [T, Hv, K], U and V_new [T, Hv, V],
// h [chunks, Hv, V, K]); chunk c of the whole batch is found from cu_seqlens on the device:
//   0. index:  first_chunk[n] = Σ_{m<n} ceil(len_m / 64),  first_ckpt[n] = Σ_{m<n} ⌊len_m / N⌋
//   1. wu     grid (chunk bound, Hv), 256 threads: γ, A, T = (I + A)^{-1}, W, U
//   2. spine  grid (N, Hv, V/16), 128 threads: S [16 rows, K] in registers across the chunks
//   3. output grid (chunk bound, Hv), 256 threads: O from h[c], V_new
// Chunks past first_chunk[N] (the grid is sized by the bound T/64 + N) exit at once.
// The tensor-core variant for K = V = 128 is in gdn_chunk_tc.cu.
#include <cub/block/block_scan.cuh>

#include <cmath>

#include "cuda/dtype.cuh"
#include "cuda/gdn_chunk.cuh"
#include "cuda/kernels.h"
#include "cuda/warp.cuh"

namespace hybrid::cuda {

void register_gdn_chunk_tc(Registry& r);

namespace gdn_chunk {

// ---- 0. the varlen chunk index ---------------------------------------------------------------

// One block of 1024 threads, tiles of 1024 sequences with a running carry:
//   first_chunk[n] = Σ_{m<n} ceil(len_m / 64), first_chunk[N] = the number of chunks,
//   first_ckpt[n] = Σ_{m<n} ⌊len_m / every⌋.
__global__ void __launch_bounds__(1024)
    chunk_index_kernel(const int* cu, int N, int every, int* first_chunk, int* first_ckpt) {
  using Scan = cub::BlockScan<int, 1024>;
  __shared__ typename Scan::TempStorage tmp;
  int carry_c = 0, carry_k = 0;
  for (int base = 0; base < N; base += 1024) {
    const int n = base + static_cast<int>(threadIdx.x);
    const int len = n < N ? cu[n + 1] - cu[n] : 0;
    const int nch = (len + kC - 1) / kC, nck = every > 0 ? len / every : 0;
    int ex_c, ex_k, agg_c, agg_k;
    Scan(tmp).ExclusiveSum(nch, ex_c, agg_c);
    __syncthreads();
    Scan(tmp).ExclusiveSum(nck, ex_k, agg_k);
    __syncthreads();
    if (n < N) {
      first_chunk[n] = carry_c + ex_c;
      first_ckpt[n] = carry_k + ex_k;
    }
    carry_c += agg_c;
    carry_k += agg_k;
  }
  if (threadIdx.x == 0) first_chunk[N] = carry_c;
}

void launch_chunk_index(const Params& p, Context& ctx) {
  chunk_index_kernel<<<1, 1024, 0, as_stream(ctx.stream())>>>(p.cu, p.N, p.every, p.first_chunk,
                                                              p.first_ckpt);
  HYBRID_CUDA_CHECK_LAUNCH();
}

Params make_params(const GdnChunkPrefill& a) {
  Params p;
  p.q = a.q.data(), p.q_t = a.q.stride(0), p.q_h = a.q.stride(1);
  p.k = a.k.data(), p.k_t = a.k.stride(0), p.k_h = a.k.stride(1);
  p.v = a.v.data(), p.v_t = a.v.stride(0), p.v_h = a.v.stride(1);
  p.g = a.g.data_as<const float>(), p.g_t = a.g.stride(0);
  p.beta = a.beta.data_as<const float>(), p.b_t = a.beta.stride(0);
  p.cu = a.cu_seqlens.data_as<const int>();
  p.slots = a.state_slots.data_as<const int>(), p.slots_s = a.state_slots.stride(0);
  if (a.has_initial_state.defined()) {
    p.has_init = a.has_initial_state.data_as<const int>();
    p.has_init_s = a.has_initial_state.stride(0);
  }
  p.state = a.state.data(), p.st_slot = a.state.stride(0), p.st_head = a.state.stride(1);
  p.st_row = a.state.stride(2);
  p.out = a.out.data(), p.o_t = a.out.stride(0), p.o_h = a.out.stride(1);
  if (a.checkpoint_every > 0) {
    p.ckpt = a.checkpoints.data_as<float>();
    p.ck_row = a.checkpoints.stride(0), p.ck_head = a.checkpoints.stride(1);
    p.ck_v = a.checkpoints.stride(2);
    p.every = static_cast<int>(a.checkpoint_every);
  }
  p.T = static_cast<int>(a.q.size(0));
  p.N = static_cast<int>(a.cu_seqlens.size(0) - 1);
  p.Hk = static_cast<int>(a.q.size(1)), p.K = static_cast<int>(a.q.size(2));
  p.Hv = static_cast<int>(a.v.size(1)), p.V = static_cast<int>(a.v.size(2));
  p.ratio = p.Hv / p.Hk;
  p.max_chunks = p.T / kC + p.N;
  p.scale = a.scale ? *a.scale : 1.0f / std::sqrt(static_cast<float>(p.K));
  p.l2norm = a.use_qk_l2norm;
  return p;
}

void plan_workspace(Params& p, size_t wu_elem, size_t h_elem, Context& ctx, size_t kn_elem,
                    size_t extra_bytes) {
  auto up = [](size_t b) { return (b + 255) / 256 * 256; };
  const size_t T = static_cast<size_t>(p.T), Hv = static_cast<size_t>(p.Hv);
  const size_t K = static_cast<size_t>(p.K), V = static_cast<size_t>(p.V);
  const size_t sizes[] = {
      up((p.N + 1) * sizeof(int)), up(p.N * sizeof(int)),
      up(T * Hv * sizeof(float)),  up(T * p.Hk * sizeof(float)),
      up(T * Hv * K * wu_elem),    up(T * Hv * V * wu_elem),
      up(T * Hv * V * wu_elem),    up(static_cast<size_t>(p.max_chunks) * Hv * V * K * h_elem),
      up(T * p.Hk * K * kn_elem),  up(extra_bytes)};
  size_t total = 0;
  for (size_t s : sizes) total += s;
  char* base = static_cast<char*>(ctx.workspace(total));
  char* at = base;
  auto take = [&](int i) {
    char* r = at;
    at += sizes[i];
    return r;
  };
  p.first_chunk = reinterpret_cast<int*>(take(0));
  p.first_ckpt = reinterpret_cast<int*>(take(1));
  p.gamma = reinterpret_cast<float*>(take(2));
  p.rk = reinterpret_cast<float*>(take(3));
  p.w = take(4);
  p.u = take(5);
  p.vnew = take(6);
  p.h = take(7);
  p.kn = kn_elem > 0 ? take(8) : nullptr;
  p.extra = extra_bytes > 0 ? take(9) : nullptr;
}

namespace {

// The chunk of block (c = blockIdx.x): sequence, first token, length, tokens done at its end.
struct ChunkPos {
  int n, t0, len, end;
  bool valid;
};
__device__ __forceinline__ ChunkPos find_chunk(const Params& p, int c) {
  ChunkPos r{0, 0, 0, 0, false};
  if (c >= p.first_chunk[p.N]) return r;
  r.n = chunk_sequence(p.first_chunk, p.N, c);
  const int s = c - p.first_chunk[r.n];
  const int bos = p.cu[r.n], len = p.cu[r.n + 1] - bos;
  r.t0 = bos + s * kC;
  r.len = min(kC, len - s * kC);
  r.end = s * kC + r.len;
  r.valid = true;
  return r;
}

// ---- 1. W, U ---------------------------------------------------------------------------------

// One (chunk, hv), L = chunk length, i, j in [0, L) (k̂ = k/‖k‖ with l2norm):
//   γ_i = Σ_{s≤i} g_s;  A_ij = β_i (k̂_i·k̂_j) e^{γ_i−γ_j} (i > j);  T = (I + A)^{-1}
//   W = T·diag(β e^γ)·K̂ [L, K];  U = T·diag(β)·V [L, V]
// Shared: k̂ [64][K+1], A and T [64][65], β, γ, β e^γ, v [64][V+1] (165 KiB at K = V = 256). FLOPs
// per chunk ≈ 64²K (Gram) + 64³/3 (T) + 64²(K+V) (W, U); bytes: k, v rows once, W, U written once
// (f32).
template <class In>
__global__ void __launch_bounds__(256, 1) wu_kernel(const Params p) {
  extern __shared__ float smem[];
  const int K = p.K, V = p.V, KP = K + 1;
  float* ks = smem;                 // [64][K+1]
  float* A = ks + kC * KP;          // [64][65]
  float* Tm = A + kC * (kC + 1);    // [64][65]
  float* bet = Tm + kC * (kC + 1);  // [64]
  float* gam = bet + kC;            // [64]
  float* beg = gam + kC;            // [64] β e^γ
  float* vs = beg + kC;             // [64][V+1] v rows
  const ChunkPos ch = find_chunk(p, blockIdx.x);
  if (!ch.valid || p.slots[ch.n * p.slots_s] < 0) return;
  const int hv = blockIdx.y, hk = hv / p.ratio, L = ch.len;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const In* kin = static_cast<const In*>(p.k);
  const In* vin = static_cast<const In*>(p.v);

  for (int i = warp; i < kC; i += 8) {  // k̂ rows (zeros past L)
    float ss = 0.0f;
    for (int d = lane; d < K; d += 32) {
      const float x = i < L ? to_f32(kin[(int64_t)(ch.t0 + i) * p.k_t + hk * p.k_h + d]) : 0.0f;
      ks[i * KP + d] = x;
      ss += x * x;
    }
    ss = warp_sum(ss);
    const float inv = p.l2norm ? 1.0f / sqrtf(ss + 1e-6f) : 1.0f;
    for (int d = lane; d < K; d += 32) ks[i * KP + d] *= inv;
    if (lane == 0 && i < L && hv % p.ratio == 0) p.rk[(int64_t)(ch.t0 + i) * p.Hk + hk] = inv;
  }
  for (int e = threadIdx.x; e < kC * V; e += blockDim.x) {
    const int i = e / V, d = e % V;
    vs[i * (V + 1) + d] = i < L ? to_f32(vin[(int64_t)(ch.t0 + i) * p.v_t + hv * p.v_h + d]) : 0.0f;
  }
  if (threadIdx.x == 0) {
    float cum = 0.0f;
    for (int i = 0; i < kC; ++i) {
      if (i < L) {
        const int64_t t = ch.t0 + i;
        cum += p.g[t * p.g_t + hv];
        bet[i] = p.beta[t * p.b_t + hv];
        p.gamma[t * p.Hv + hv] = cum;
      } else {
        bet[i] = 0.0f;
      }
      gam[i] = cum;
      beg[i] = bet[i] * expf(cum);
    }
  }
  __syncthreads();
  for (int e = threadIdx.x; e < kC * kC; e += blockDim.x) {
    const int i = e / kC, j = e % kC;
    float a = 0.0f;
    if (j < i && i < L) {
      for (int d = 0; d < K; ++d) a += ks[i * KP + d] * ks[j * KP + d];
      a *= bet[i] * expf(gam[i] - gam[j]);
    }
    A[i * (kC + 1) + j] = a;
    Tm[i * (kC + 1) + j] = i == j ? 1.0f : 0.0f;
  }
  __syncthreads();
  // Forward substitution, row after row: T_ij = −Σ_{j≤m<i} A_im T_mj (i > j).
  for (int i = 1; i < L; ++i) {
    const int j = threadIdx.x;
    if (j < i) {
      float s = 0.0f;
      for (int m = j; m < i; ++m) s += A[i * (kC + 1) + m] * Tm[m * (kC + 1) + j];
      Tm[i * (kC + 1) + j] = -s;
    }
    __syncthreads();
  }
  float* w = static_cast<float*>(p.w);
  float* u = static_cast<float*>(p.u);
  for (int e = threadIdx.x; e < L * K; e += blockDim.x) {
    const int i = e / K, d = e % K;
    float acc = 0.0f;
    for (int j = 0; j <= i; ++j) acc += Tm[i * (kC + 1) + j] * beg[j] * ks[j * KP + d];
    w[((int64_t)(ch.t0 + i) * p.Hv + hv) * K + d] = acc;
  }
  for (int e = threadIdx.x; e < L * V; e += blockDim.x) {
    const int i = e / V, d = e % V;
    float acc = 0.0f;
    for (int j = 0; j <= i; ++j) acc += Tm[i * (kC + 1) + j] * bet[j] * vs[j * (V + 1) + d];
    u[((int64_t)(ch.t0 + i) * p.Hv + hv) * V + d] = acc;
  }
}

// ---- 2. the state spine ----------------------------------------------------------------------

constexpr int kSpineWarps = 4, kSpineRows = 4;             // rows per warp
constexpr int kSpineBlockRows = kSpineWarps * kSpineRows;  // V rows per block

// One (sequence n, hv, 16 V rows); warp w owns rows r0 + w·4 .. +3, lane l columns l + 32c:
//   S = pool row (or zeros); per chunk: h[c] = S;  V_new_i = U_i − W_i Sᵀ;
//   S ← e^{γ_L} S + Σ_i e^{γ_L−γ_i} V_new_i ⊗ k̂_i;  checkpoint at multiples of `every`.
//   pool row = S (pool dtype St).
// Per chunk and row: 2·L·K FLOPs of warp-reduced dot products and L·K FMAs; W, k rows re-read
// from L2 by each of the V/16 blocks.
template <int KC, class In, class St>
__global__ void __launch_bounds__(kSpineWarps * 32, 1) spine_kernel(const Params p) {
  __shared__ float vn_s[kSpineWarps][kC][kSpineRows];
  const int n = blockIdx.x, hv = blockIdx.y, hk = hv / p.ratio;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int r0 = blockIdx.z * kSpineBlockRows + warp * kSpineRows;
  const int K = p.K, V = p.V;
  const int bos = p.cu[n], len = p.cu[n + 1] - bos;
  const int slot = p.slots[n * p.slots_s];
  float* const ck_base =  // [row][r][K] of this block's rows
      p.ckpt ? p.ckpt + hv * p.ck_head + (int64_t)r0 * p.ck_v : nullptr;
  if (slot < 0) {  // padding: zero checkpoint rows, pool untouched
    if (p.every > 0)
      for (int j = 0; j < len / p.every; ++j)
        for (int r = 0; r < kSpineRows; ++r)
          if (r0 + r < V)
            for (int d = lane; d < K; d += 32)
              ck_base[(p.first_ckpt[n] + j) * p.ck_row + r * p.ck_v + d] = 0.0f;
    return;
  }
  St* pool = static_cast<St*>(p.state) + slot * p.st_slot + hv * p.st_head;
  const bool from_pool = !p.has_init || p.has_init[n * p.has_init_s] != 0;
  float s[kSpineRows][KC];
#pragma unroll
  for (int r = 0; r < kSpineRows; ++r)
#pragma unroll
    for (int c = 0; c < KC; ++c) {
      const int d = lane + 32 * c;
      s[r][c] = from_pool && r0 + r < V && d < K ? to_f32(pool[(r0 + r) * p.st_row + d]) : 0.0f;
    }
  const float* w = static_cast<const float*>(p.w);
  const float* u = static_cast<const float*>(p.u);
  float* vnew = static_cast<float*>(p.vnew);
  float* h = static_cast<float*>(p.h);
  const In* kin = static_cast<const In*>(p.k);
  const int nch = (len + kC - 1) / kC;
  for (int cs = 0; cs < nch; ++cs) {
    const int c = p.first_chunk[n] + cs, t0 = bos + cs * kC, L = min(kC, len - cs * kC);
    float* hc = h + ((int64_t)c * p.Hv + hv) * V * K;
#pragma unroll
    for (int r = 0; r < kSpineRows; ++r)
#pragma unroll
      for (int c2 = 0; c2 < KC; ++c2) {
        const int d = lane + 32 * c2;
        if (r0 + r < V && d < K) hc[(int64_t)(r0 + r) * K + d] = s[r][c2];
      }
    for (int i = 0; i < L; ++i) {
      const int64_t row = (int64_t)(t0 + i) * p.Hv + hv;
      float wr[KC];
#pragma unroll
      for (int c2 = 0; c2 < KC; ++c2) {
        const int d = lane + 32 * c2;
        wr[c2] = d < K ? w[row * K + d] : 0.0f;
      }
#pragma unroll
      for (int r = 0; r < kSpineRows; ++r) {
        float part = 0.0f;
#pragma unroll
        for (int c2 = 0; c2 < KC; ++c2) part += wr[c2] * s[r][c2];
        part = warp_sum(part);
        const float vn = r0 + r < V ? u[row * V + r0 + r] - part : 0.0f;
        if (lane == 0) {
          vn_s[warp][i][r] = vn;
          if (r0 + r < V) vnew[row * V + r0 + r] = vn;
        }
      }
    }
    __syncwarp();
    const float g_last = p.gamma[(int64_t)(t0 + L - 1) * p.Hv + hv];
    const float decay = expf(g_last);
#pragma unroll
    for (int r = 0; r < kSpineRows; ++r)
#pragma unroll
      for (int c2 = 0; c2 < KC; ++c2) s[r][c2] *= decay;
    for (int i = 0; i < L; ++i) {
      const int64_t t = t0 + i;
      const float e = expf(g_last - p.gamma[t * p.Hv + hv]);
      const float rk = p.rk[t * p.Hk + hk];
      float kr[KC];
#pragma unroll
      for (int c2 = 0; c2 < KC; ++c2) {
        const int d = lane + 32 * c2;
        kr[c2] = d < K ? to_f32(kin[t * p.k_t + hk * p.k_h + d]) * rk : 0.0f;
      }
#pragma unroll
      for (int r = 0; r < kSpineRows; ++r) {
        const float coef = e * vn_s[warp][i][r];
#pragma unroll
        for (int c2 = 0; c2 < KC; ++c2) s[r][c2] += coef * kr[c2];
      }
    }
    __syncwarp();
    const int end = cs * kC + L;
    if (p.every > 0 && end % p.every == 0) {
      const int crow = p.first_ckpt[n] + end / p.every - 1;
#pragma unroll
      for (int r = 0; r < kSpineRows; ++r)
#pragma unroll
        for (int c2 = 0; c2 < KC; ++c2) {
          const int d = lane + 32 * c2;
          if (r0 + r < V && d < K) ck_base[crow * p.ck_row + r * p.ck_v + d] = s[r][c2];
        }
    }
  }
#pragma unroll
  for (int r = 0; r < kSpineRows; ++r)
#pragma unroll
    for (int c2 = 0; c2 < KC; ++c2) {
      const int d = lane + 32 * c2;
      if (r0 + r < V && d < K) pool[(r0 + r) * p.st_row + d] = from_f32<St>(s[r][c2]);
    }
}

// ---- 3. output -------------------------------------------------------------------------------

// One (chunk, hv), S = h[c], i in [0, L):
//   o_i = scale·[ e^{γ_i} S q̂_i + Σ_{j≤i} (q̂_i·k̂_j) e^{γ_i−γ_j} V_new_j ]
// Shared: q̂ [64][K+1], k̂ then h tiles [64][K+1] (64 V rows at a time), P [64][65] (the masked
// decayed Q K̂ᵀ). FLOPs per chunk ≈ 64²K + 2·64·V·K + 64²V. Padding sequences: zeros.
template <class In, class Out>
__global__ void __launch_bounds__(256) output_kernel(const Params p) {
  extern __shared__ float smem[];
  const int K = p.K, V = p.V, KP = K + 1;
  float* qs = smem;                // [64][K+1]
  float* hs = qs + kC * KP;        // [64][K+1]: k̂ rows, then h tiles
  float* P = hs + kC * KP;         // [64][65]
  float* gam = P + kC * (kC + 1);  // [64]
  const ChunkPos ch = find_chunk(p, blockIdx.x);
  if (!ch.valid) return;
  const int hv = blockIdx.y, hk = hv / p.ratio, L = ch.len;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  Out* out = static_cast<Out*>(p.out);
  if (p.slots[ch.n * p.slots_s] < 0) {
    for (int e = threadIdx.x; e < L * V; e += blockDim.x)
      out[(int64_t)(ch.t0 + e / V) * p.o_t + hv * p.o_h + e % V] = from_f32<Out>(0.0f);
    return;
  }
  const In* qin = static_cast<const In*>(p.q);
  const In* kin = static_cast<const In*>(p.k);
  for (int i = warp; i < kC; i += 8) {
    const int64_t t = ch.t0 + i;
    float qq = 0.0f, kk = 0.0f;
    for (int d = lane; d < K; d += 32) {
      const float xq = i < L ? to_f32(qin[t * p.q_t + hk * p.q_h + d]) : 0.0f;
      const float xk = i < L ? to_f32(kin[t * p.k_t + hk * p.k_h + d]) : 0.0f;
      qs[i * KP + d] = xq;
      hs[i * KP + d] = xk;
      qq += xq * xq;
      kk += xk * xk;
    }
    qq = warp_sum(qq);
    kk = warp_sum(kk);
    const float iq = p.l2norm ? 1.0f / sqrtf(qq + 1e-6f) : 1.0f;
    const float ik = p.l2norm ? 1.0f / sqrtf(kk + 1e-6f) : 1.0f;
    for (int d = lane; d < K; d += 32) qs[i * KP + d] *= iq, hs[i * KP + d] *= ik;
    if (lane == 0) gam[i] = i < L ? p.gamma[t * p.Hv + hv] : 0.0f;
  }
  __syncthreads();
  for (int e = threadIdx.x; e < kC * kC; e += blockDim.x) {
    const int i = e / kC, j = e % kC;
    float a = 0.0f;
    if (j <= i && i < L) {
      for (int d = 0; d < K; ++d) a += qs[i * KP + d] * hs[j * KP + d];
      a *= expf(gam[i] - gam[j]);
    }
    P[i * (kC + 1) + j] = a;
  }
  const float* h = static_cast<const float*>(p.h) + ((int64_t)blockIdx.x * p.Hv + hv) * V * K;
  const float* vnew = static_cast<const float*>(p.vnew);
  for (int v0 = 0; v0 < V; v0 += kC) {
    const int VR = min(kC, V - v0);
    __syncthreads();  // hs (k̂ rows or the previous tile) is free
    for (int e = threadIdx.x; e < VR * K; e += blockDim.x)
      hs[(e / K) * KP + e % K] = h[(int64_t)(v0 + e / K) * K + e % K];
    __syncthreads();
    for (int e = threadIdx.x; e < L * VR; e += blockDim.x) {
      const int i = e / VR, vr = e % VR;
      float sq = 0.0f;
      for (int d = 0; d < K; ++d) sq += hs[vr * KP + d] * qs[i * KP + d];
      float o = expf(gam[i]) * sq;
      for (int j = 0; j <= i; ++j)
        o += P[i * (kC + 1) + j] * vnew[((int64_t)(ch.t0 + j) * p.Hv + hv) * V + v0 + vr];
      out[(int64_t)(ch.t0 + i) * p.o_t + hv * p.o_h + v0 + vr] = from_f32<Out>(p.scale * o);
    }
  }
}

template <class Body>
void dispatch_act(DType t, Body&& body) {
  if (t == DType::bf16)
    body(__nv_bfloat16{});
  else
    body(float{});
}

template <class Body>
void dispatch_kc(int K, Body&& body) {
  if (K <= 32)
    body(std::integral_constant<int, 1>{});
  else if (K <= 64)
    body(std::integral_constant<int, 2>{});
  else if (K <= 128)
    body(std::integral_constant<int, 4>{});
  else
    body(std::integral_constant<int, 8>{});
}

Reason general_supports(const GdnChunkPrefill& a) {
  if (a.q.size(2) > 256 || a.v.size(2) > 256)
    return std::string("general kernel: K and V must be <= 256, got K=") +
           std::to_string(a.q.size(2)) + ", V=" + std::to_string(a.v.size(2));
  if (a.q.size(0) > (int64_t{1} << 30))
    return std::string("general kernel: T must be < 2^30 (32-bit token indices)");
  return std::nullopt;
}

void general_cuda(const GdnChunkPrefill& a, Context& ctx) {
  Params p = make_params(a);
  plan_workspace(p, sizeof(float), sizeof(float), ctx);
  launch_chunk_index(p, ctx);
  launch_wu(p, a.q.dtype(), ctx);
  cudaStream_t st = as_stream(ctx.stream());
  dispatch_act(a.q.dtype(), [&](auto tin) {
    using In = decltype(tin);
    dispatch_kc(p.K, [&](auto kc) {
      auto spine = [&](auto ts) {
        const dim3 grid(static_cast<unsigned>(p.N), static_cast<unsigned>(p.Hv),
                        static_cast<unsigned>((p.V + kSpineBlockRows - 1) / kSpineBlockRows));
        spine_kernel<decltype(kc)::value, In, decltype(ts)><<<grid, kSpineWarps * 32, 0, st>>>(p);
        HYBRID_CUDA_CHECK_LAUNCH();
      };
      if (a.state.dtype() == DType::bf16)
        spine(__nv_bfloat16{});
      else
        spine(float{});
    });
  });
  launch_output(p, a.q.dtype(), a.out.dtype(), ctx);
}

}  // namespace

void launch_wu(const Params& p, DType in, Context& ctx) {
  const size_t smem =
      (size_t(kC) * (p.K + 1) + 2 * kC * (kC + 1) + 3 * kC + size_t(kC) * (p.V + 1)) *
      sizeof(float);
  const dim3 grid(static_cast<unsigned>(p.max_chunks), static_cast<unsigned>(p.Hv));
  dispatch_act(in, [&](auto tin) {
    using In = decltype(tin);
    ensure_dynamic_smem(wu_kernel<In>, smem);
    wu_kernel<In><<<grid, 256, smem, as_stream(ctx.stream())>>>(p);
    HYBRID_CUDA_CHECK_LAUNCH();
  });
}

void launch_output(const Params& p, DType in, DType out, Context& ctx) {
  const size_t smem = (size_t(2) * kC * (p.K + 1) + kC * (kC + 1) + kC) * sizeof(float);
  const dim3 grid(static_cast<unsigned>(p.max_chunks), static_cast<unsigned>(p.Hv));
  dispatch_act(in, [&](auto tin) {
    dispatch_act(out, [&](auto tout) {
      auto* kern = output_kernel<decltype(tin), decltype(tout)>;
      ensure_dynamic_smem(kern, smem);
      kern<<<grid, 256, smem, as_stream(ctx.stream())>>>(p);
      HYBRID_CUDA_CHECK_LAUNCH();
    });
  });
}

}  // namespace gdn_chunk

void register_gdn_chunk(Registry& r) {
  r.add<GdnChunkPrefill>("gdn_chunk_prefill.cuda", DeviceType::cuda, 0, gdn_chunk::general_supports,
                         gdn_chunk::general_cuda);
  register_gdn_chunk_tc(r);
}

}  // namespace hybrid::cuda
