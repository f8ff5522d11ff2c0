// What the tile decode kernels (gdn_tile_kernel, ssm_tile_kernel: one warp per 8-row state tile,
// lane l holding columns 4l..4l+3 of its rows) share: their launch shape, which pools they serve,
// and the streamed loads and stores of four consecutive row elements.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "common.cuh"
#include "hybrid/core/registry.h"

namespace hybrid::cuda {

// Resident warps per SM: __launch_bounds__(128, 7) budgets 72 registers, room for 28 warps.
constexpr int kStateTileWarpsPerSm = 7 * 4;

// The grid of a tile-kernel launch: one 1-warp block per (8-row tile, sequence), so blockIdx.x is
// the tile of the sequence blockIdx.y. flash-linear-attention's fused_recurrent runs 1-warp
// programs too; against 4-warp blocks they measured 1-3% faster on f32 pools (H200, session 6
// run 4: GDN B 256 284 against 289 µs, gdn_prep_step 269 against 276, ssm_step B 64 87.7 against
// 89.8, B 256 334 against 345), the finer blocks shortening the last of B 64's nine waves. The
// kernels' __launch_bounds__ stay (128, 7): that register budget (72) is the one measured.
inline dim3 state_tile_grid(int64_t tiles_per_seq, int64_t seqs) {
  return dim3(static_cast<unsigned>(tiles_per_seq), static_cast<unsigned>(seqs));
}

// What the grid and the pool's dtype leave to the tile kernels (both ops' supports()): at most
// 65535 sequences (grid y), and every f32 pool but a bf16 one only when all its tiles are
// resident at once. Where the tile kernels are faster than the streaming warp2 kernels (H200,
// session 6 run 2): every f32 pool (GDN f32 B 256: 287 against 299 µs, SSM 344 against 366 µs),
// but a bf16 pool only in one wave (SSM B 1, 7.4 against 9.0 µs, GDN B 1, 6.5 against 6.8 µs).
// Past one wave a bf16 tile puts only 8 bytes a lane in flight per row, half of f32's, and the
// warp2 kernels' staged streaming is faster (GDN bf16 B 256: 205 against 158 µs, SSM 243
// against 190 µs).
inline Reason state_tile_refusal(DType pool, int64_t tiles_per_seq, int64_t seqs) {
  if (seqs > 65535) return str(seqs, " sequences: more than 65535 (grid y)");
  const int64_t tiles = tiles_per_seq * seqs;
  if (pool == DType::bf16 && tiles > int64_t{kStateTileWarpsPerSm} * sm_count())
    return str("bf16 pool over more than one wave of tiles (", tiles,
               "): the warp2 kernels stream it faster");
  return std::nullopt;
}

// Four consecutive elements of a state row (16 bytes of f32, 8 bytes of bf16), loaded and stored
// with the streaming cache hint (.cs): a decode step reads each pool element once and writes it
// once, so its lines should be the first victims in L1 / L2. The pointer must be aligned to the
// access (16 / 8 bytes).
__device__ __forceinline__ void tile_load4(const float* p, float (&r)[4]) {
  const float4 x = __ldcs(reinterpret_cast<const float4*>(p));
  r[0] = x.x, r[1] = x.y, r[2] = x.z, r[3] = x.w;
}
__device__ __forceinline__ void tile_load4(const __nv_bfloat16* p, float (&r)[4]) {
  const uint2 x = __ldcs(reinterpret_cast<const uint2*>(p));
  const __nv_bfloat16* e = reinterpret_cast<const __nv_bfloat16*>(&x);
#pragma unroll
  for (int i = 0; i < 4; ++i) r[i] = __bfloat162float(e[i]);
}
__device__ __forceinline__ void tile_store4(float* p, const float (&r)[4]) {
  __stcs(reinterpret_cast<float4*>(p), make_float4(r[0], r[1], r[2], r[3]));
}
__device__ __forceinline__ void tile_store4(__nv_bfloat16* p, const float (&r)[4]) {
  uint2 x;
  __nv_bfloat16* e = reinterpret_cast<__nv_bfloat16*>(&x);
#pragma unroll
  for (int i = 0; i < 4; ++i) e[i] = __float2bfloat16_rn(r[i]);
  __stcs(reinterpret_cast<uint2*>(p), x);
}

// The warp totals of 8 per-lane row sums v8[0..7], by halving: at lane bits kTop, kTop / 2 and
// kTop / 4 each lane keeps half of its rows and adds its partner's half (xor), then the lower
// bits finish the sum by a butterfly. Returns the total of row 4·[bit kTop] + 2·[bit kTop / 2] +
// [bit kTop / 4] of this lane: 3 + log2(kTop / 4) shuffles instead of 8 · 5. ssm_tile_kernel
// splits on bits 16 / 8 / 4; gdn_tile_kernel on 8 / 4 / 2 (its bit 16 has split S·k from S·q).
template <int kTop>
__device__ __forceinline__ float tile_halving_sum(const float (&v8)[8], int lane) {
  const bool b3 = lane & kTop, b2 = lane & (kTop / 2), b1 = lane & (kTop / 4);
  float a4[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float send = b3 ? v8[i] : v8[4 + i], keep = b3 ? v8[4 + i] : v8[i];
    a4[i] = keep + __shfl_xor_sync(0xffffffffu, send, kTop);
  }
  float a2[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const float send = b2 ? a4[i] : a4[2 + i], keep = b2 ? a4[2 + i] : a4[i];
    a2[i] = keep + __shfl_xor_sync(0xffffffffu, send, kTop / 2);
  }
  const float send = b1 ? a2[0] : a2[1], keep = b1 ? a2[1] : a2[0];
  float a1 = keep + __shfl_xor_sync(0xffffffffu, send, kTop / 4);
#pragma unroll
  for (int o = kTop / 8; o >= 1; o /= 2) a1 += __shfl_xor_sync(0xffffffffu, a1, o);
  return a1;
}

}  // namespace hybrid::cuda
