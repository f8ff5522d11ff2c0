// CUDA: gdn_chunk_prefill, tensor-core spine variant (K = V = 128), priority 10.
//
// Stages 1 and 3 are the general kernels of gdn_chunk.cu (f32 workspace); stage 2, the only
// sequential part, runs on tensor cores (mma.sync m16n8k16, bf16 operands, f32 accumulate):
// block (sequence n, hv, 32-row V slice), 4 warps, the state slice S [32 v, 128 k] in f32
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

constexpr int kD = 128;        // K = V
constexpr int kSlice = 32;     // V rows per block
constexpr int kWP = kD + 8;    // padded row (bf16) of Ws, Sb
constexpr int kTP = kC + 8;    // padded row (bf16) of KT, VT
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
    for (int e = tid; e < kC * kD; e += blockDim.x) {
      const int i = e / kD, d = e % kD;
      const int64_t t = t0 + i;
      float wv = 0.0f, kv = 0.0f;
      if (i < L) {
        wv = w[(t * p.Hv + hv) * kD + d];
        kv = to_f32(kin[t * p.k_t + hk * p.k_h + d]) * p.rk[t * p.Hk + hk];
      }
      Ws[i * kWP + d] = __float2bfloat16_rn(wv);
      KT[d * kTP + i] = __float2bfloat16_rn(kv);
    }
    if (tid < kC) eg[tid] = tid < L ? expf(g_last - p.gamma[(int64_t)(t0 + tid) * p.Hv + hv]) : 0.0f;
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
          vn = u[row] - acc[nt][r];
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

Reason tc_supports(const GdnChunkPrefill& a) {
  if (a.q.size(2) != kD || a.v.size(2) != kD)
    return std::string("tensor-core spine: K = V = 128 only (compile-time tile), got K=") +
           std::to_string(a.q.size(2)) + ", V=" + std::to_string(a.v.size(2));
  if (a.q.size(0) > (int64_t{1} << 30))
    return std::string("tensor-core spine: T must be < 2^30 (32-bit token indices)");
  return std::nullopt;
}

void tc_cuda(const GdnChunkPrefill& a, Context& ctx) {
  Params p = make_params(a);
  plan_workspace(p, sizeof(float), sizeof(float), ctx);
  launch_chunk_index(p, ctx);
  launch_wu(p, a.q.dtype(), ctx);
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
  launch_output(p, a.q.dtype(), a.out.dtype(), ctx);
}

}  // namespace
}  // namespace gdn_chunk

void register_gdn_chunk_tc(Registry& r) {
  r.add<GdnChunkPrefill>("gdn_chunk_prefill.cuda_tc_spine", DeviceType::cuda, 10,
                         gdn_chunk::tc_supports, gdn_chunk::tc_cuda);
}

}  // namespace hybrid::cuda
