// CUDA: gdn_chunk_prefill, tensor-core variant (K = V = 128), priority 10. All three stages use
// mma.sync m16n8k16 (bf16 operands, f32 accumulate) on f32 workspace (W, U, V_new, h): stage 1
// wu_tc_kernel, stage 2 spine_tc_kernel, stage 3 output_tc_kernel (the index kernel and the
// workspace plan are shared with the general variant in gdn_chunk.cu).
//
// Spine: block (sequence n, hv, 32-row V slice), 4 warps, the state slice S [32 v, 128 k] in f32
// registers (accumulator fragments: warp w owns k columns [32w, 32w + 32)). Per chunk of L <= 64
// tokens (rows past L are zero):
//   h[c] = S (f32, workspace);  Sb = bf16(S) in shared memory
//   V_new [64, 32] = U − W [64, 128] · Sbᵀ            (warp w: tokens 16w..16w+15, 4 n-tiles)
//   S ← e^{γ_L} S + (V_new ⊙ e^{γ_L−γ})ᵀ [32, 64] · K̂ [64, 128]   (warp w: 2 m-tiles x 4 n-tiles)
// Shared memory (bf16, rows padded by 8 so fragment reads are bank-conflict-free):
//   Ws [64][136], Sb [32][136], KT [128][72] (K̂ transposed), VT [32][72] (V_new ⊙ e^{γ_L−γ})ᵀ,
//   eg [64] f32: 49 408 bytes. MMA FLOPs per chunk and slice: 2·64·32·128·2 = 1 MFLOP; bytes per
//   chunk and slice: W 32 KiB + k 16 KiB (L2), h 16 KiB written, U / V_new 8 KiB each.
// Grid N x Hv x 4 (128 CTAs at N = 1, Hv = 32); the chain of chunks is the critical path.
#include <cuda_bf16.h>

#include <cstdint>

#include "cuda/dtype.cuh"
#include "cuda/gdn_chunk.cuh"
#include "cuda/kernels.h"

namespace hybrid::cuda {

namespace gdn_chunk {
namespace {

constexpr int kD = 128;      // K = V
constexpr int kSlice = 32;   // V rows per block
constexpr int kWP = kD + 8;  // padded row (bf16) of Ws, Sb
constexpr int kTP = kC + 8;  // padded row (bf16) of KT, VT
constexpr int kTcSmem = (kC * kWP + kSlice * kWP + kD * kTP + kSlice * kTP) * 2 + kC * 4;

__device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4],
                                         const uint32_t (&b)[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
      "{%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

// Two consecutive bf16 of a shared row as one 32-bit fragment register.
__device__ __forceinline__ uint32_t ld2(const __nv_bfloat16* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}

// A fragment (16x16, row-major [m][k] rows of `ld` elements) at (m0, k0); g = lane/4, q = lane%4.
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const __nv_bfloat16* s, int ld, int m0,
                                       int k0, int g, int q) {
  a[0] = ld2(s + (m0 + g) * ld + k0 + 2 * q);
  a[1] = ld2(s + (m0 + g + 8) * ld + k0 + 2 * q);
  a[2] = ld2(s + (m0 + g) * ld + k0 + 2 * q + 8);
  a[3] = ld2(s + (m0 + g + 8) * ld + k0 + 2 * q + 8);
}

// B fragment (16x8, stored [n][k]) at (n0, k0).
__device__ __forceinline__ void load_b(uint32_t (&b)[2], const __nv_bfloat16* s, int ld, int n0,
                                       int k0, int g, int q) {
  b[0] = ld2(s + (n0 + g) * ld + k0 + 2 * q);
  b[1] = ld2(s + (n0 + g) * ld + k0 + 2 * q + 8);
}

template <class In, class St>
__global__ void __launch_bounds__(128) spine_tc_kernel(const Params p) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __nv_bfloat16* Ws = reinterpret_cast<__nv_bfloat16*>(smem_raw);  // [64][136]  W rows
  __nv_bfloat16* Sb = Ws + kC * kWP;                               // [32][136]  bf16(S)
  __nv_bfloat16* KT = Sb + kSlice * kWP;                           // [128][72]  K̂ᵀ
  __nv_bfloat16* VT = KT + kD * kTP;                               // [32][72]   (V_new·e)ᵀ
  float* eg = reinterpret_cast<float*>(VT + kSlice * kTP);         // [64]  e^{γ_L−γ_i}

  const int n = blockIdx.x, hv = blockIdx.y, hk = hv / p.ratio;
  const int v0 = blockIdx.z * kSlice;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, q = lane % 4;
  const int bos = p.cu[n], len = p.cu[n + 1] - bos;
  const int slot = p.slots[n * p.slots_s];
  if (slot < 0) {  // padding: zero checkpoint rows, pool untouched
    if (p.every > 0)
      for (int j = 0; j < len / p.every; ++j)
        for (int e = tid; e < kSlice * kD; e += blockDim.x)
          p.ckpt[(p.first_ckpt[n] + j) * p.ck_row + hv * p.ck_head +
                 (int64_t)(v0 + e / kD) * p.ck_v + e % kD] = 0.0f;
    return;
  }
  St* pool = static_cast<St*>(p.state) + slot * p.st_slot + hv * p.st_head;
  const bool from_pool = !p.has_init || p.has_init[n * p.has_init_s] != 0;

  // S fragment: s[mt][nt][r] is S[v][d] with v = mt·16 + g + 8·(r / 2),
  // d = 32·warp + nt·8 + 2q + r % 2 (the m16n8 accumulator layout).
  float s[2][4][4];
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int v = mt * 16 + g + 8 * (r / 2), d = 32 * warp + nt * 8 + 2 * q + r % 2;
        s[mt][nt][r] = from_pool ? to_f32(pool[(int64_t)(v0 + v) * p.st_row + d]) : 0.0f;
      }

  const float* w = static_cast<const float*>(p.w);
  const float* u = static_cast<const float*>(p.u);
  float* vnew = static_cast<float*>(p.vnew);
  float* h = static_cast<float*>(p.h);
  const In* kin = static_cast<const In*>(p.k);
  const int nch = (len + kC - 1) / kC;
  for (int cs = 0; cs < nch; ++cs) {
    const int c = p.first_chunk[n] + cs, t0 = bos + cs * kC, L = min(kC, len - cs * kC);
    const float g_last = p.gamma[(int64_t)(t0 + L - 1) * p.Hv + hv];
    // h[c] = S (f32) and Sb = bf16(S).
    float* hc = h + ((int64_t)c * p.Hv + hv) * kD * kD + (int64_t)v0 * kD;
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int nt = 0; nt < 4; ++nt)
#pragma unroll
        for (int r = 0; r < 4; r += 2) {
          const int v = mt * 16 + g + 8 * (r / 2), d = 32 * warp + nt * 8 + 2 * q;
          *reinterpret_cast<float2*>(hc + v * kD + d) = make_float2(s[mt][nt][r], s[mt][nt][r + 1]);
          *reinterpret_cast<__nv_bfloat162*>(Sb + v * kWP + d) =
              __floats2bfloat162_rn(s[mt][nt][r], s[mt][nt][r + 1]);
        }
    // Ws = W rows, KT = K̂ᵀ, eg (zeros past L).
    // 4 columns per thread and step: W rows are the workspace's (16-byte aligned float4); k
    // rows are the caller's (scalar loads, any alignment).
    for (int e = tid; e < kC * kD / 4; e += blockDim.x) {
      const int i = e / (kD / 4), d = 4 * (e % (kD / 4));
      const int64_t t = t0 + i;
      float4 wv = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      float kv[4] = {0.0f, 0.0f, 0.0f, 0.0f};
      if (i < L) {
        wv = *reinterpret_cast<const float4*>(w + (t * p.Hv + hv) * kD + d);
        const float rk = p.rk[t * p.Hk + hk];
#pragma unroll
        for (int j = 0; j < 4; ++j) kv[j] = to_f32(kin[t * p.k_t + hk * p.k_h + d + j]) * rk;
      }
      *reinterpret_cast<__nv_bfloat162*>(Ws + i * kWP + d) = __floats2bfloat162_rn(wv.x, wv.y);
      *reinterpret_cast<__nv_bfloat162*>(Ws + i * kWP + d + 2) = __floats2bfloat162_rn(wv.z, wv.w);
#pragma unroll
      for (int j = 0; j < 4; ++j) KT[(d + j) * kTP + i] = __float2bfloat16_rn(kv[j]);
    }
    if (tid < kC)
      eg[tid] = tid < L ? expf(g_last - p.gamma[(int64_t)(t0 + tid) * p.Hv + hv]) : 0.0f;
    // This thread's U entries (the V_new fragment positions below), loaded before the MMAs so
    // their latency overlaps the barrier and the W·Sᵀ product.
    float ur[4][4];
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int i = 16 * warp + g + 8 * (r / 2), v = nt * 8 + 2 * q + r % 2;
        ur[nt][r] = i < L ? u[((int64_t)(t0 + i) * p.Hv + hv) * kD + v0 + v] : 0.0f;
      }
    __syncthreads();

    // V_new rows 16·warp.. : acc[nt] over v = nt·8 + 2q (+1), tokens 16·warp + g (+8).
    float acc[4][4] = {};
#pragma unroll
    for (int ks = 0; ks < kD / 16; ++ks) {
      uint32_t a[4];
      load_a(a, Ws, kWP, 16 * warp, 16 * ks, g, q);
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        uint32_t b[2];
        load_b(b, Sb, kWP, nt * 8, 16 * ks, g, q);
        mma16816(acc[nt], a, b);
      }
    }
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int i = 16 * warp + g + 8 * (r / 2), v = nt * 8 + 2 * q + r % 2;
        float vn = 0.0f;
        if (i < L) {
          const int64_t row = ((int64_t)(t0 + i) * p.Hv + hv) * kD + v0 + v;
          vn = ur[nt][r] - acc[nt][r];
          vnew[row] = vn;
        }
        VT[v * kTP + i] = __float2bfloat16_rn(vn * eg[i]);
      }
    __syncthreads();

    // S ← e^{γ_L} S + VT · K̂ (k = tokens).
    const float decay = expf(g_last);
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int nt = 0; nt < 4; ++nt)
#pragma unroll
        for (int r = 0; r < 4; ++r) s[mt][nt][r] *= decay;
#pragma unroll
    for (int ks = 0; ks < kC / 16; ++ks) {
      uint32_t a[2][4];
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) load_a(a[mt], VT, kTP, 16 * mt, 16 * ks, g, q);
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        uint32_t b[2];
        load_b(b, KT, kTP, 32 * warp + nt * 8, 16 * ks, g, q);
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) mma16816(s[mt][nt], a[mt], b);
      }
    }
    const int end = cs * kC + L;
    if (p.every > 0 && end % p.every == 0) {
      float* ck = p.ckpt + (p.first_ckpt[n] + end / p.every - 1) * p.ck_row + hv * p.ck_head;
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int nt = 0; nt < 4; ++nt)
#pragma unroll
          for (int r = 0; r < 4; ++r) {
            const int v = mt * 16 + g + 8 * (r / 2), d = 32 * warp + nt * 8 + 2 * q + r % 2;
            ck[(int64_t)(v0 + v) * p.ck_v + d] = s[mt][nt][r];
          }
    }
    __syncthreads();  // Ws, Sb, KT, VT, eg are rewritten by the next chunk
  }
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int nt = 0; nt < 4; ++nt)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int v = mt * 16 + g + 8 * (r / 2), d = 32 * warp + nt * 8 + 2 * q + r % 2;
        pool[(int64_t)(v0 + v) * p.st_row + d] = from_f32<St>(s[mt][nt][r]);
      }
}

// Stage 1 on tensor cores, one (chunk, hv), 4 warps; warp w owns rows 16w..16w+15 (rows past
// L are zero):
//   G = K̂ K̂ᵀ (mma);  A_ij = β_i G_ij e^{γ_i−γ_j} (i > j);  T = (I + A)^{-1} (f32, forward
//   substitution row by row);  W = (T·diag(β e^γ)) K̂,  U = (T·diag(β)) V (mma, bf16 T).
// Shared: Kb [64][136], KT and VT [128][72] (K̂ᵀ, Vᵀ), Tb, Tu [64][72] bf16; A, T [64][65] f32;
// β, γ, β e^γ: 106 752 bytes. MMA FLOPs per chunk: 2·64·64·128·3 = 3.1 MFLOP.
constexpr int kWuSmem =
    (kC * kWP + 2 * kD * kTP + 2 * kC * kTP) * 2 + (2 * kC * (kC + 1) + 3 * kC) * 4;

template <class In>
__global__ void __launch_bounds__(128) wu_tc_kernel(const Params p) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __nv_bfloat16* Kb = reinterpret_cast<__nv_bfloat16*>(smem_raw);  // [64][136]  K̂ [j][d]
  __nv_bfloat16* KT = Kb + kC * kWP;                               // [128][72]  K̂ᵀ [d][j]
  __nv_bfloat16* VT = KT + kD * kTP;                               // [128][72]  Vᵀ [v][j]
  __nv_bfloat16* Tb = VT + kD * kTP;                               // [64][72]   T diag(βe^γ)
  __nv_bfloat16* Tu = Tb + kC * kTP;                               // [64][72]   T diag(β)
  float* Af = reinterpret_cast<float*>(Tu + kC * kTP);             // [64][65]
  float* Tm = Af + kC * (kC + 1);                                  // [64][65]
  float* bet = Tm + kC * (kC + 1);                                 // [64]
  float* gam = bet + kC;                                           // [64]
  float* beg = gam + kC;                                           // [64]
  const int c = blockIdx.x;
  if (c >= p.first_chunk[p.N]) return;
  const int n = chunk_sequence(p.first_chunk, p.N, c);
  if (p.slots[n * p.slots_s] < 0) return;
  const int t0 = p.cu[n] + (c - p.first_chunk[n]) * kC;
  const int L = min(kC, p.cu[n + 1] - t0);
  const int hv = blockIdx.y, hk = hv / p.ratio;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, q = lane % 4;
  const In* kin = static_cast<const In*>(p.k);
  const In* vin = static_cast<const In*>(p.v);
  for (int i = warp; i < kC; i += 4) {  // lane l: columns 4l..4l+3
    const int64_t t = t0 + i;
    float xk[4], xv[4], kk = 0.0f;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int d = 4 * lane + j;
      xk[j] = i < L ? to_f32(kin[t * p.k_t + hk * p.k_h + d]) : 0.0f;
      xv[j] = i < L ? to_f32(vin[t * p.v_t + hv * p.v_h + d]) : 0.0f;
      kk += xk[j] * xk[j];
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) kk += __shfl_xor_sync(0xffffffffu, kk, o);
    const float ik = p.l2norm ? 1.0f / sqrtf(kk + 1e-6f) : 1.0f;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int d = 4 * lane + j;
      const __nv_bfloat16 kb = __float2bfloat16_rn(xk[j] * ik);
      Kb[i * kWP + d] = kb;
      KT[d * kTP + i] = kb;
      VT[d * kTP + i] = __float2bfloat16_rn(xv[j]);
    }
    if (lane == 0 && i < L && hv % p.ratio == 0) p.rk[t * p.Hk + hk] = ik;
  }
  if (tid == 0) {
    float cum = 0.0f;
    for (int i = 0; i < kC; ++i) {
      float b = 0.0f;
      if (i < L) {
        const int64_t t = t0 + i;
        cum += p.g[t * p.g_t + hv];
        b = p.beta[t * p.b_t + hv];
        p.gamma[t * p.Hv + hv] = cum;
      }
      bet[i] = b;
      gam[i] = cum;
      beg[i] = b * expf(cum);
    }
  }
  for (int e = tid; e < kC * kC; e += blockDim.x)
    Tm[(e / kC) * (kC + 1) + e % kC] = e / kC == e % kC ? 1.0f : 0.0f;
  __syncthreads();
  {  // A rows 16·warp..
    float acc[8][4] = {};
#pragma unroll
    for (int ks = 0; ks < kD / 16; ++ks) {
      uint32_t a[4];
      load_a(a, Kb, kWP, 16 * warp, 16 * ks, g, q);
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        uint32_t b[2];
        load_b(b, Kb, kWP, nt * 8, 16 * ks, g, q);
        mma16816(acc[nt], a, b);
      }
    }
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const int i = 16 * warp + g + 8 * (r / 2), j = nt * 8 + 2 * q + r % 2;
        Af[i * (kC + 1) + j] = j < i && i < L ? bet[i] * acc[nt][r] * expf(gam[i] - gam[j]) : 0.0f;
      }
  }
  __syncthreads();
  for (int i = 1; i < L; ++i) {  // T_ij = −Σ_{j≤m<i} A_im T_mj
    const int j = tid;
    if (j < i) {
      float sum = 0.0f;
      for (int m = j; m < i; ++m) sum += Af[i * (kC + 1) + m] * Tm[m * (kC + 1) + j];
      Tm[i * (kC + 1) + j] = -sum;
    }
    __syncthreads();
  }
  for (int e = tid; e < kC * kC; e += blockDim.x) {
    const int i = e / kC, j = e % kC;
    const float t = Tm[i * (kC + 1) + j];
    Tb[i * kTP + j] = __float2bfloat16_rn(t * beg[j]);
    Tu[i * kTP + j] = __float2bfloat16_rn(t * bet[j]);
  }
  __syncthreads();
  float* w = static_cast<float*>(p.w);
  float* u = static_cast<float*>(p.u);
#pragma unroll
  for (int pass = 0; pass < 2; ++pass) {  // 0: W = Tb K̂, 1: U = Tu V
    const __nv_bfloat16* As = pass == 0 ? Tb : Tu;
    const __nv_bfloat16* Bs = pass == 0 ? KT : VT;
    float* dst = pass == 0 ? w : u;
    float acc[16][4] = {};
#pragma unroll
    for (int ks = 0; ks < kC / 16; ++ks) {
      uint32_t a[4];
      load_a(a, As, kTP, 16 * warp, 16 * ks, g, q);
#pragma unroll
      for (int nt = 0; nt < 16; ++nt) {
        uint32_t b[2];
        load_b(b, Bs, kTP, nt * 8, 16 * ks, g, q);
        mma16816(acc[nt], a, b);
      }
    }
#pragma unroll
    for (int nt = 0; nt < 16; ++nt)
#pragma unroll
      for (int r = 0; r < 4; r += 2) {
        const int i = 16 * warp + g + 8 * (r / 2), d = nt * 8 + 2 * q;
        if (i < L)
          *reinterpret_cast<float2*>(dst + ((int64_t)(t0 + i) * p.Hv + hv) * kD + d) =
              make_float2(acc[nt][r], acc[nt][r + 1]);
      }
  }
}

// Stage 3 on tensor cores, one (chunk, hv), 4 warps; warp w owns tokens 16w..16w+15:
//   P = tril(Q̂ K̂ᵀ ⊙ e^{γ_i−γ_j}) [64, 64]   (mma: A = Q̂ [i][d], B = K̂ [j][d])
//   O = scale·[ e^γ ⊙ (Q̂ h[c]ᵀ) + P V_new ]  (mma: B = h [v][d], then A = P [i][j], B = V_newᵀ)
// Shared (bf16, padded rows): Qs, Ks [64][136], Hs [128][136], Ps [64][72], VnT [128][72], γ [64]:
// 97 536 bytes. MMA FLOPs per chunk: 2·64·64·128 + 2·64·128·128 + 2·64·64·128 = 4.2 MFLOP;
// bytes: q, k rows (32 KiB bf16), h (64 KiB f32), V_new (32 KiB f32), out (16 KiB bf16).
constexpr int kOutSmem = (2 * kC * kWP + kD * kWP + kC * kTP + kD * kTP) * 2 + kC * 4;

template <class In, class Out>
__global__ void __launch_bounds__(128) output_tc_kernel(const Params p) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  __nv_bfloat16* Qs = reinterpret_cast<__nv_bfloat16*>(smem_raw);  // [64][136]  Q̂
  __nv_bfloat16* Ks = Qs + kC * kWP;                               // [64][136]  K̂
  __nv_bfloat16* Hs = Ks + kC * kWP;                               // [128][136] h[v][d]
  __nv_bfloat16* Ps = Hs + kD * kWP;                               // [64][72]   P
  __nv_bfloat16* VnT = Ps + kC * kTP;                              // [128][72]  V_newᵀ
  float* gam = reinterpret_cast<float*>(VnT + kD * kTP);           // [64]
  const int c = blockIdx.x;
  if (c >= p.first_chunk[p.N]) return;
  const int n = chunk_sequence(p.first_chunk, p.N, c);
  const int s0 = (c - p.first_chunk[n]) * kC, t0 = p.cu[n] + s0;
  const int L = min(kC, p.cu[n + 1] - t0);
  const int hv = blockIdx.y, hk = hv / p.ratio;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane / 4, q = lane % 4;
  Out* out = static_cast<Out*>(p.out);
  if (p.slots[n * p.slots_s] < 0) {
    for (int e = tid; e < L * kD; e += blockDim.x)
      out[(int64_t)(t0 + e / kD) * p.o_t + hv * p.o_h + e % kD] = from_f32<Out>(0.0f);
    return;
  }
  const In* qin = static_cast<const In*>(p.q);
  const In* kin = static_cast<const In*>(p.k);
  // Q̂, K̂ rows (zeros past L): warp per row, lane l holds columns 4l..4l+3.
  for (int i = warp; i < kC; i += 4) {
    const int64_t t = t0 + i;
    float xq[4], xk[4], qq = 0.0f, kk = 0.0f;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int d = 4 * lane + j;
      xq[j] = i < L ? to_f32(qin[t * p.q_t + hk * p.q_h + d]) : 0.0f;
      xk[j] = i < L ? to_f32(kin[t * p.k_t + hk * p.k_h + d]) : 0.0f;
      qq += xq[j] * xq[j];
      kk += xk[j] * xk[j];
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
      qq += __shfl_xor_sync(0xffffffffu, qq, o);
      kk += __shfl_xor_sync(0xffffffffu, kk, o);
    }
    const float iq = p.l2norm ? 1.0f / sqrtf(qq + 1e-6f) : 1.0f;
    const float ik = p.l2norm ? 1.0f / sqrtf(kk + 1e-6f) : 1.0f;
#pragma unroll
    for (int j = 0; j < 4; j += 2) {
      const int d = 4 * lane + j;
      *reinterpret_cast<__nv_bfloat162*>(Qs + i * kWP + d) =
          __floats2bfloat162_rn(xq[j] * iq, xq[j + 1] * iq);
      *reinterpret_cast<__nv_bfloat162*>(Ks + i * kWP + d) =
          __floats2bfloat162_rn(xk[j] * ik, xk[j + 1] * ik);
    }
    if (lane == 0) gam[i] = i < L ? p.gamma[t * p.Hv + hv] : 0.0f;
  }
  // h[c] rows [v][d] and V_newᵀ (zeros past L).
  const float* h = static_cast<const float*>(p.h) + ((int64_t)c * p.Hv + hv) * kD * kD;
  for (int e = tid; e < kD * kD / 2; e += blockDim.x) {
    const int v = (2 * e) / kD, d = (2 * e) % kD;
    const float2 x = *reinterpret_cast<const float2*>(h + v * kD + d);
    *reinterpret_cast<__nv_bfloat162*>(Hs + v * kWP + d) = __floats2bfloat162_rn(x.x, x.y);
  }
  const float* vnew = static_cast<const float*>(p.vnew);
  for (int e = tid; e < kC * kD; e += blockDim.x) {
    const int j = e / kD, v = e % kD;
    const float x = j < L ? vnew[((int64_t)(t0 + j) * p.Hv + hv) * kD + v] : 0.0f;
    VnT[v * kTP + j] = __float2bfloat16_rn(x);
  }
  __syncthreads();

  // P rows 16·warp..: 8 n-tiles of j.
  {
    float acc[8][4] = {};
#pragma unroll
    for (int ks = 0; ks < kD / 16; ++ks) {
      uint32_t a[4];
      load_a(a, Qs, kWP, 16 * warp, 16 * ks, g, q);
#pragma unroll
      for (int nt = 0; nt < 8; ++nt) {
        uint32_t b[2];
        load_b(b, Ks, kWP, nt * 8, 16 * ks, g, q);
        mma16816(acc[nt], a, b);
      }
    }
#pragma unroll
    for (int nt = 0; nt < 8; ++nt)
#pragma unroll
      for (int r = 0; r < 4; r += 2) {
        const int i = 16 * warp + g + 8 * (r / 2), j = nt * 8 + 2 * q;
        const float p0 = j <= i && i < L ? acc[nt][r] * expf(gam[i] - gam[j]) : 0.0f;
        const float p1 = j + 1 <= i && i < L ? acc[nt][r + 1] * expf(gam[i] - gam[j + 1]) : 0.0f;
        *reinterpret_cast<__nv_bfloat162*>(Ps + i * kTP + j) = __floats2bfloat162_rn(p0, p1);
      }
  }
  __syncwarp();  // each warp reads only its own P rows

  // O rows 16·warp..: 16 n-tiles of v.
  float acc[16][4] = {};
#pragma unroll
  for (int ks = 0; ks < kD / 16; ++ks) {
    uint32_t a[4];
    load_a(a, Qs, kWP, 16 * warp, 16 * ks, g, q);
#pragma unroll
    for (int nt = 0; nt < 16; ++nt) {
      uint32_t b[2];
      load_b(b, Hs, kWP, nt * 8, 16 * ks, g, q);
      mma16816(acc[nt], a, b);
    }
  }
  const int i_lo = 16 * warp + g, i_hi = i_lo + 8;
  const float e_lo = expf(gam[i_lo]), e_hi = expf(gam[i_hi]);
#pragma unroll
  for (int nt = 0; nt < 16; ++nt) {
    acc[nt][0] *= e_lo, acc[nt][1] *= e_lo;
    acc[nt][2] *= e_hi, acc[nt][3] *= e_hi;
  }
#pragma unroll
  for (int ks = 0; ks < kC / 16; ++ks) {
    uint32_t a[4];
    load_a(a, Ps, kTP, 16 * warp, 16 * ks, g, q);
#pragma unroll
    for (int nt = 0; nt < 16; ++nt) {
      uint32_t b[2];
      load_b(b, VnT, kTP, nt * 8, 16 * ks, g, q);
      mma16816(acc[nt], a, b);
    }
  }
#pragma unroll
  for (int nt = 0; nt < 16; ++nt)
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int i = r < 2 ? i_lo : i_hi, v = nt * 8 + 2 * q + r % 2;
      if (i < L)
        out[(int64_t)(t0 + i) * p.o_t + hv * p.o_h + v] = from_f32<Out>(p.scale * acc[nt][r]);
    }
}

Reason tc_supports(const GdnChunkPrefill& a) {
  if (a.q.size(2) != kD || a.v.size(2) != kD)
    return std::string("tensor-core variant: K = V = 128 only (compile-time tile), got K=") +
           std::to_string(a.q.size(2)) + ", V=" + std::to_string(a.v.size(2));
  if (a.q.size(0) > (int64_t{1} << 30))
    return std::string("tensor-core variant: T must be < 2^30 (32-bit token indices)");
  return std::nullopt;
}

void tc_cuda(const GdnChunkPrefill& a, Context& ctx) {
  Params p = make_params(a);
  plan_workspace(p, sizeof(float), sizeof(float), ctx);
  launch_chunk_index(p, ctx);
  const dim3 grid_chunks(static_cast<unsigned>(p.max_chunks), static_cast<unsigned>(p.Hv));
  auto wu = [&](auto tin) {
    auto* kern = wu_tc_kernel<decltype(tin)>;
    HYBRID_CUDA_CHECK(
        cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, kWuSmem));
    kern<<<grid_chunks, 128, kWuSmem, as_stream(ctx.stream())>>>(p);
    HYBRID_CUDA_CHECK_LAUNCH();
  };
  if (a.q.dtype() == DType::bf16)
    wu(__nv_bfloat16{});
  else
    wu(float{});
  const dim3 grid(static_cast<unsigned>(p.N), static_cast<unsigned>(p.Hv), kD / kSlice);
  auto spine = [&](auto tin, auto ts) {
    auto* kern = spine_tc_kernel<decltype(tin), decltype(ts)>;
    HYBRID_CUDA_CHECK(
        cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, kTcSmem));
    kern<<<grid, 128, kTcSmem, as_stream(ctx.stream())>>>(p);
    HYBRID_CUDA_CHECK_LAUNCH();
  };
  auto with_state = [&](auto tin) {
    if (a.state.dtype() == DType::bf16)
      spine(tin, __nv_bfloat16{});
    else
      spine(tin, float{});
  };
  if (a.q.dtype() == DType::bf16)
    with_state(__nv_bfloat16{});
  else
    with_state(float{});
  auto output = [&](auto tin, auto tout) {
    auto* kern = output_tc_kernel<decltype(tin), decltype(tout)>;
    HYBRID_CUDA_CHECK(
        cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, kOutSmem));
    kern<<<grid_chunks, 128, kOutSmem, as_stream(ctx.stream())>>>(p);
    HYBRID_CUDA_CHECK_LAUNCH();
  };
  auto with_out = [&](auto tin) {
    if (a.out.dtype() == DType::bf16)
      output(tin, __nv_bfloat16{});
    else
      output(tin, float{});
  };
  if (a.q.dtype() == DType::bf16)
    with_out(__nv_bfloat16{});
  else
    with_out(float{});
}

}  // namespace
}  // namespace gdn_chunk

void register_gdn_chunk_tc(Registry& r) {
  r.add<GdnChunkPrefill>("gdn_chunk_prefill.cuda_tc", DeviceType::cuda, 10, gdn_chunk::tc_supports,
                         gdn_chunk::tc_cuda);
}

}  // namespace hybrid::cuda
