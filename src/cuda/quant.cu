// CUDA: quantize, dequantize, linear_q (MLX affine 4 / 8-bit groups).
//
// quantize.cuda: one thread per (row, group); the CPU kernel's f32 operations in its order with
//   __fsub_rn / __fdiv_rn / rintf (no contraction), so codes, scales and biases match bit for bit.
// dequantize.cuda: one thread per packed word; w = __fadd_rn(__fmul_rn(s, q), b) as the CPU.
// linear_q.gemv (T <= 8): one kernel; x staged per CTA in shared memory as f32; one warp per 8
//   output rows (4 at 2-4 tokens, 2 at 8) streams their packed words once for all tokens: each lane
//   loads one 16-byte chunk (4 u32 words = 32 4-bit / 16 8-bit codes, always inside one group) per
//   row, decodes codes in registers (exponent-trick int -> float), and accumulates y[t, o] += s·Σ
//   x·q + b·Σ x per chunk. Bytes: out·in·bits/8 + scales / biases; 2·T·in·out FLOP. 4-byte loads
//   when the rows are not 16-byte aligned. Details above the kernel.
// linear_q.tiled (T > 8): W is dequantized a block of rows at a time into the workspace (bf16 /
//   f16 when x and y are both that dtype, else f32) and multiplied by cuBLASLt (f32
//   accumulation) into y's columns; 2·T·in·out FLOP on tensor cores for 16-bit activations.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <type_traits>
#include <utility>

#include "cuda/common.cuh"
#include "cuda/dtype.cuh"
#include "cuda/kernels.h"
#include "cuda/linear_impl.cuh"
#include "cuda/mma.cuh"
#include "cuda/warp.cuh"
#include "hybrid/ops/quant.h"

namespace hybrid::cuda {

namespace {

constexpr int kThreads = 256;

unsigned blocks_for(int64_t n, int threads = kThreads) {
  return static_cast<unsigned>(std::max<int64_t>(1, (n + threads - 1) / threads));
}

// ---- quantize ------------------------------------------------------------------------------

// Per group (row r, group g), n = 2^bits - 1, exactly the CPU's f32 sequence:
//   lo, hi = min, max;  s = max((hi - lo) / n, 1e-7), negated unless |lo| > |hi|
//   edge = |lo| > |hi| ? lo : hi;  q0 = rint(edge / s);  q0 != 0: s = edge / q0, b = edge; else 0
//   q = clamp(rint((w - b) / s), 0, n)
// w [rows, in] (Tw) -> words [rows, in·bits/32] u32, scales / biases [rows, in/gs] (Ts).
template <class Tw, class Ts>
__global__ void quantize_kernel(const Tw* __restrict__ w, int64_t w_stride, uint32_t* words,
                                int64_t words_stride, Ts* scales, int64_t scales_stride, Ts* biases,
                                int64_t biases_stride, int64_t rows, int64_t groups, int gs,
                                int bits) {
  const int64_t id = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (id >= rows * groups) return;
  const int64_t r = id / groups, g = id % groups;
  const Tw* v = w + r * w_stride + g * gs;
  const float n_bins = static_cast<float>((1 << bits) - 1);
  float lo = INFINITY, hi = -INFINITY;
  for (int k = 0; k < gs; ++k) {
    const float x = to_f32(v[k]);
    lo = x < lo ? x : lo;  // std::min(lo, x): keeps lo unless x < lo
    hi = hi < x ? x : hi;  // std::max(hi, x): keeps hi unless hi < x
  }
  const bool lo_edge = fabsf(lo) > fabsf(hi);
  float s = __fdiv_rn(__fsub_rn(hi, lo), n_bins);
  s = s < 1e-7f ? 1e-7f : s;  // std::max(s, 1e-7f)
  if (!lo_edge) s = -s;
  const float edge = lo_edge ? lo : hi;
  const float q0 = rintf(__fdiv_rn(edge, s));
  float b = 0.0f;
  if (q0 != 0.0f) {
    s = __fdiv_rn(edge, q0);
    b = edge;
  }
  uint32_t* out = words + r * words_stride + g * gs * bits / 32;
  const int per_word = 32 / bits;
  for (int wi = 0; wi < gs / per_word; ++wi) {
    uint32_t word = 0;
    for (int k = 0; k < per_word; ++k) {
      float c = rintf(__fdiv_rn(__fsub_rn(to_f32(v[wi * per_word + k]), b), s));
      c = c < 0.0f ? 0.0f : c;      // std::max(c, 0)
      c = n_bins < c ? n_bins : c;  // std::min(c, n)
      word |= static_cast<uint32_t>(c) << (k * bits);
    }
    out[wi] = word;
  }
  scales[r * scales_stride + g] = from_f32<Ts>(s);
  biases[r * biases_stride + g] = from_f32<Ts>(b);
}

void quantize_run(const Quantize& a, Context& ctx) {
  const QuantizedWeight& q = a.q;
  const int64_t rows = a.w.size(0), in = a.w.size(1), groups = in / q.group_size;
  if (rows == 0 || groups == 0) return;
  dispatch_float(a.w.dtype(), Quantize::op_name, [&](auto tw) {
    using Tw = decltype(tw);
    dispatch_float(q.scales.dtype(), Quantize::op_name, [&](auto ts) {
      using Ts = decltype(ts);
      quantize_kernel<Tw, Ts><<<blocks_for(rows * groups, 128), 128, 0, as_stream(ctx.stream())>>>(
          a.w.data_as<const Tw>(), a.w.stride(0), q.weight.data_as<uint32_t>(), q.weight.stride(0),
          q.scales.data_as<Ts>(), q.scales.stride(0), q.biases.data_as<Ts>(), q.biases.stride(0),
          rows, groups, q.group_size, q.bits);
      HYBRID_CUDA_CHECK_LAUNCH();
    });
  });
}

// ---- dequantize ----------------------------------------------------------------------------

// w[r, j] = s[r, g]·q[r, j] + b[r, g] (f32, no fma: as the CPU), one thread per packed word.
template <class Tout>
__global__ void dequantize_kernel(const uint32_t* __restrict__ words, int64_t words_stride,
                                  const void* scales, const void* biases, DType st,
                                  int64_t scales_stride, int64_t biases_stride, Tout* w,
                                  int64_t w_stride, int64_t rows, int64_t words_per_row, int gs,
                                  int bits) {
  const int64_t id = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (id >= rows * words_per_row) return;
  const int64_t r = id / words_per_row, wi = id % words_per_row;
  const int per_word = 32 / bits;
  const int64_t j0 = wi * per_word, g = j0 / gs;
  const float s = load_any(scales, st, r * scales_stride + g);
  const float b = load_any(biases, st, r * biases_stride + g);
  const uint32_t word = words[r * words_stride + wi];
  const uint32_t mask = (1u << bits) - 1u;
  Tout* dst = w + r * w_stride + j0;
  for (int k = 0; k < per_word; ++k)
    dst[k] =
        from_f32<Tout>(__fadd_rn(__fmul_rn(s, static_cast<float>((word >> (k * bits)) & mask)), b));
}

template <class Tout>
void dequantize_into(Context& ctx, const QuantizedWeight& q, int64_t row0, int64_t rows, int64_t in,
                     Tout* w, int64_t w_stride) {
  const int64_t wpr = in * q.bits / 32;
  if (rows == 0 || wpr == 0) return;
  dequantize_kernel<Tout><<<blocks_for(rows * wpr), kThreads, 0, as_stream(ctx.stream())>>>(
      q.weight.data_as<const uint32_t>() + row0 * q.weight.stride(0), q.weight.stride(0),
      static_cast<const char*>(q.scales.data()) +
          row0 * q.scales.stride(0) * dtype_size(q.scales.dtype()),
      static_cast<const char*>(q.biases.data()) +
          row0 * q.biases.stride(0) * dtype_size(q.biases.dtype()),
      q.scales.dtype(), q.scales.stride(0), q.biases.stride(0), w, w_stride, rows, wpr,
      q.group_size, q.bits);
  HYBRID_CUDA_CHECK_LAUNCH();
}

void dequantize_run(const Dequantize& a, Context& ctx) {
  dispatch_float(a.w.dtype(), Dequantize::op_name, [&](auto tw) {
    using Tw = decltype(tw);
    dequantize_into<Tw>(ctx, a.q, 0, a.w.size(0), a.w.size(1), a.w.data_as<Tw>(), a.w.stride(0));
  });
}

// ---- linear_q ------------------------------------------------------------------------------

// xf[t, i] = x[t, i] as f32 for t < T, 0 for T <= t < rows; rows packed: [rows, in].
template <class Tx>
__global__ void to_f32_kernel(const Tx* __restrict__ x, int64_t ldx, float* xf, int64_t T,
                              int64_t rows, int64_t in) {
  const int64_t n = rows * in;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / in;
    xf[i] = t < T ? to_f32(x[t * ldx + i % in]) : 0.0f;
  }
}

// x [T, in] -> xf [rows >= T, in] f32 (zero rows past T).
void to_f32_rows(Context& ctx, const Tensor& x, float* xf, int64_t rows) {
  const int64_t T = x.size(0), in = x.size(1);
  if (rows * in == 0) return;
  dispatch_float(x.dtype(), "linear_q", [&](auto tx) {
    using Tx = decltype(tx);
    const auto blocks = static_cast<unsigned>(std::min<int64_t>((rows * in + 255) / 256, 8192));
    to_f32_kernel<Tx><<<blocks, 256, 0, as_stream(ctx.stream())>>>(x.data_as<const Tx>(),
                                                                   x.stride(0), xf, T, rows, in);
    HYBRID_CUDA_CHECK_LAUNCH();
  });
}

// The codes of one u32 word as exact floats, f[k] = code k: each code byte is placed under the
// exponent byte 0x4B by one byte permute (2^23 + q), then 2^23 is subtracted (exact).
template <int kBits>
__device__ __forceinline__ void decode_word(uint32_t word, float (&f)[32 / kBits]) {
  constexpr uint32_t kMagic = 0x4B000000u;
  if constexpr (kBits == 4) {
    const uint32_t lo = word & 0x0F0F0F0Fu, hi = (word >> 4) & 0x0F0F0F0Fu;  // even / odd codes
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      f[2 * i] = __uint_as_float(__byte_perm(lo, kMagic, 0x7440u | i)) - 8388608.0f;
      f[2 * i + 1] = __uint_as_float(__byte_perm(hi, kMagic, 0x7440u | i)) - 8388608.0f;
    }
  } else {
#pragma unroll
    for (int i = 0; i < 4; ++i)
      f[i] = __uint_as_float(__byte_perm(word, kMagic, 0x7440u | i)) - 8388608.0f;
  }
}

// v3, 4-bit: the 8 codes of a word as f[k] = 0.5 + code_k / 256 (exact), ONE byte permute per
// code and no subtract: each code (0..15, from the even / odd nibble masks) becomes byte 2 under
// the exponent byte 0x3F (0x3F0q0000 = 2^-1·(1 + q/128)). The chunk's sum is then corrected once:
// Σ x·q = 256·Σ x·f − 128·Σ x (f32; the offset costs ~4 bits of the 24, relative error ~1e-6).
__device__ __forceinline__ void decode_word_offset4(uint32_t word, float (&f)[8]) {
  constexpr uint32_t kHalf = 0x3F000000u;
  const uint32_t lo = word & 0x0F0F0F0Fu, hi = (word >> 4) & 0x0F0F0F0Fu;  // even / odd codes
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(__byte_perm(lo, kHalf, 0x7044u | (i << 8)));
    f[2 * i + 1] = __uint_as_float(__byte_perm(hi, kHalf, 0x7044u | (i << 8)));
  }
}

// GEMV (T <= 8 tokens per launch, kNT = 1, 2, 4 or 8 of them in registers).
//
// A "chunk" is what one lane loads of one row at a time: kV u32 words (kV = 4: 16 bytes = 32
// 4-bit or 16 8-bit codes; kV = 1 when the rows are not 16-byte aligned), always inside one
// group (group sizes are >= 32 codes). x is staged once per CTA in shared memory as f32,
// chunk-interleaved so that the 32 lanes, which own 32 consecutive chunks, read 32 consecutive
// float4s (no bank conflicts):
//   float4 piece m4 (0 <= m4 < kCodes/4) of chunk c of token t sits at float4 index
//   t·x_row/4 + ((c / 32)·(kCodes/4) + m4)·32 + c % 32,
// x_row = ceil(chunks / 32)·32·kCodes floats per token (padding never read).
// A warp owns a group of kRows rows (8, 4 or 2: gemv_rows), so each x load feeds kRows rows;
// `split` warps (1, 2 or 4) share a row group, splitting its chunks (part q, lane l: chunks
// q·32 + l, + split·32, ...); their sums are added in part order through shared memory, so the
// result does not depend on timing. Each lane keeps the next chunk's kRows 16-byte loads (and
// scales / biases) in flight while it does the current chunk's math. CTAs are persistent: they
// stage x once and loop over tiles of (kGemvWarps / split)·kRows rows.
//   y[t, o] = Σ_chunks s·Σ_k x[t, j_k]·q[o, j_k] + b·Σ_k x[t, j_k] (+ bias[o])
// Bytes: out·in·bits/8 + scales / biases (+ x once per CTA from L2); 2·T·in·out FLOP.
constexpr int kGemvWarps = 4;
constexpr int kGemvMaxTokens = 8;
constexpr size_t kGemvMaxSmem = 96 * 1024;  // staged x, bytes (opt-in above 48 KB)

// Rows per warp: 8 at one token (each x load and Σx feeds 8 rows; 8 16-byte loads in flight per
// lane), 4 at 2 and 4 tokens, 2 at 8 (the accumulators grow with the tokens).
constexpr int gemv_rows(int tokens) {
  return tokens >= 8 ? 2 : tokens >= 2 ? 4 : 8;
}
// CTAs per SM the registers must allow (the kernel's __launch_bounds__).
constexpr int gemv_min_blocks(int tokens) {
  return tokens >= 8 ? 2 : tokens >= 4 ? 3 : tokens >= 2 ? 4 : 3;
}

struct GemvParams {
  const void* x;  // [T, in] rows (stride ldx elements), dtype xt
  DType xt;
  int64_t ldx;
  bool x_vec;         // x 16-byte aligned with 16-byte row pitch: staged with 16-byte loads
  const uint32_t* w;  // [out, in·bits/32] packed codes
  int64_t w_stride;   // words
  const void* scales;
  const void* biases;  // [out, in/gs], dtype st
  int64_t s_stride, b_stride;
  DType st;
  const void* bias;  // [out] or null
  DType bt;
  void* y;  // [T, out]
  DType yt;
  int64_t y_stride;
  int T, in, out, gs;
  int split;  // warps per row group: 1, 2 or 4
  int x_row;  // floats per token of the staged x
};

// Floats per token of the staged x for `codes` codes per chunk.
int64_t gemv_x_row(int64_t in, int codes) {
  const int64_t chunks = in / codes;
  return (chunks + 31) / 32 * 32 * codes;
}

// A bf16 (bf) or f16 value from its 16 bits, as f32 (exact): a select, not a branch.
__device__ __forceinline__ float bits16_to_f32(unsigned short u, bool bf) {
  const float from_bf16 = __uint_as_float(static_cast<uint32_t>(u) << 16);
  const float from_f16 = __half2float(__ushort_as_half(u));
  return bf ? from_bf16 : from_f16;
}

// kCompact (the linear_q.gemv_v3 variant; 8-bit: the v2 sums in the v2 order; 4-bit: the codes
// decoded with an offset, decode_word_offset4):
//   - the chunk math loops over the kV words of a chunk (`#pragma unroll 1`, the words shifted
//     down in registers) instead of unrolling all kV·kRows word decodes: the v2 kernel's code is
//     45-70 KB per instantiation (<4, 4, 1>: 56.7 KB, readelf of the cubin), its chunk loop alone
//     1591 PTX instructions at 8 rows (kV·kRows = 32 unrolled word decodes with their 256 FMAs,
//     ~20 KB of SASS), more than an SM sub-partition's instruction cache holds; v3's inner loop
//     body is one word of the 8 rows (~270 PTX instructions);
//   - 4-bit codes by decode_word_offset4 (one byte permute per code, no subtract);
//   - scales and biases (bf16 / f16 only) are read with plain 16-bit loads and a select instead
//     of load_any's 3-way dtype branches (16 of them per chunk at 8 rows, in the hot loop);
//   - the first tile's first chunk of weights is loaded before x is staged (the two latencies
//     overlap), and x is staged with up to 4 16-byte loads per thread in flight (ld.global.nc,
//     so they may pass the shared-memory stores) instead of one dependent load per iteration.
template <int kBits, int kV, int kNT, bool kCompact>
__global__ void __launch_bounds__(kGemvWarps * 32, gemv_min_blocks(kNT))
    linear_q_gemv_kernel(const GemvParams p) {
  constexpr int kPerWord = 32 / kBits, kCodes = kV * kPerWord;  // codes per chunk
  constexpr int kPieces = kCodes / 4;                           // float4s of x per chunk
  constexpr int kRows = gemv_rows(kNT);
  extern __shared__ float4 xs[];  // [kNT][x_row / 4], chunk-interleaved
  __shared__ float partial[kGemvWarps][kRows][kNT];
  const int x_row4 = p.x_row / 4;

  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int split = p.split, group = warp / split, part = warp % split;
  const int groups_per_cta = kGemvWarps / split;
  const int chunks = p.in / kCodes, first = part * 32 + lane, step = split * 32;
  const int64_t rows_per_tile = static_cast<int64_t>(groups_per_cta) * kRows;
  const int64_t tiles = (p.out + rows_per_tile - 1) / rows_per_tile;
  // Chunk c of each row o0 + r: its words and its group's scale and bias. Rows past out read
  // row 0 instead (never stored).
  auto load_chunk = [&](int64_t o0, int c, uint32_t(&wd)[kRows][kV], float(&s)[kRows],
                        float(&b)[kRows]) {
    const int g = c * kCodes / p.gs;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const int64_t o = o0 + r < p.out ? o0 + r : 0;
      const uint32_t* src = p.w + o * p.w_stride + static_cast<int64_t>(c) * kV;
      if constexpr (kV == 4) {
        const uint4 v = __ldg(reinterpret_cast<const uint4*>(src));
        wd[r][0] = v.x, wd[r][1] = v.y, wd[r][2] = v.z, wd[r][3] = v.w;
      } else {
        wd[r][0] = __ldg(src);
      }
      if constexpr (kCompact) {  // 16-bit scales (gemv_v3_supports): no dtype branches
        const bool bf = p.st == DType::bf16;
        s[r] = bits16_to_f32(
            __ldg(static_cast<const unsigned short*>(p.scales) + o * p.s_stride + g), bf);
        b[r] = bits16_to_f32(
            __ldg(static_cast<const unsigned short*>(p.biases) + o * p.b_stride + g), bf);
      } else {
        s[r] = load_any(p.scales, p.st, o * p.s_stride + g);
        b[r] = load_any(p.biases, p.st, o * p.b_stride + g);
      }
    }
  };
  auto tile_row0 = [&](int64_t tile) {
    return tile * rows_per_tile + static_cast<int64_t>(group) * kRows;
  };
  uint32_t next_wd[kRows][kV] = {};
  float next_s[kRows] = {}, next_b[kRows] = {};
  // v3: the first tile's first chunk is in flight while x is staged.
  const bool early = kCompact && blockIdx.x < tiles && first < chunks;
  if (early) load_chunk(tile_row0(blockIdx.x), first, next_wd, next_s, next_b);

  // Stage x: 4 consecutive elements of a row (4 | in) always share (chunk, piece).
  {
    auto slot = [&](int t, int j) {  // float4 index of elements j..j+3 of token t
      const int c = j / kCodes, m4 = (j % kCodes) / 4;
      return t * x_row4 + ((c / 32) * kPieces + m4) * 32 + c % 32;
    };
    const int quads = p.in / 4;  // float4s per token
    // Converts 16 raw bytes of token t at element j (4 f32 or 8 bf16 / f16) into the stage.
    auto put = [&](int t, int j, uint4 raw) {
      if (p.xt == DType::f32) {
        xs[slot(t, j)] = make_float4(__uint_as_float(raw.x), __uint_as_float(raw.y),
                                     __uint_as_float(raw.z), __uint_as_float(raw.w));
      } else {
        float f[8];
        const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          const uint16_t lo = static_cast<uint16_t>(words[k]),
                         hi = static_cast<uint16_t>(words[k] >> 16);
          if (p.xt == DType::bf16) {
            f[2 * k] = __bfloat162float(__ushort_as_bfloat16(lo));
            f[2 * k + 1] = __bfloat162float(__ushort_as_bfloat16(hi));
          } else {
            f[2 * k] = __half2float(__ushort_as_half(lo));
            f[2 * k + 1] = __half2float(__ushort_as_half(hi));
          }
        }
        xs[slot(t, j)] = make_float4(f[0], f[1], f[2], f[3]);
        xs[slot(t, j + 4)] = make_float4(f[4], f[5], f[6], f[7]);
      }
    };
    if (kCompact && p.x_vec) {
      // Up to 4 16-byte loads per thread in flight, then their conversions and stores.
      constexpr int kBatch = 4;
      const int per = p.xt == DType::f32 ? 4 : 8, loads = p.in / per, n = kNT * loads;
      const int es = per == 4 ? 4 : 2;
      for (int i0 = threadIdx.x; i0 < n; i0 += kBatch * blockDim.x) {
        uint4 raw[kBatch];
#pragma unroll
        for (int u = 0; u < kBatch; ++u) {
          const int i = i0 + u * blockDim.x, t = i / loads, j = i % loads * per;
          raw[u] = make_uint4(0, 0, 0, 0);
          if (i < n && t < p.T)
            raw[u] = __ldg(reinterpret_cast<const uint4*>(static_cast<const char*>(p.x) +
                                                          (t * p.ldx + j) * es));
        }
#pragma unroll
        for (int u = 0; u < kBatch; ++u) {
          const int i = i0 + u * blockDim.x;
          if (i < n) put(i / loads, i % loads * per, raw[u]);
        }
      }
    } else if (p.x_vec) {
      // 16-byte loads: 4 f32 or 8 bf16 / f16 elements (2 float4s) each.
      const int per = p.xt == DType::f32 ? 4 : 8, loads = p.in / per;
      for (int i = threadIdx.x; i < kNT * loads; i += blockDim.x) {
        const int t = i / loads, j = i % loads * per;
        uint4 raw = make_uint4(0, 0, 0, 0);
        if (t < p.T)
          raw = *reinterpret_cast<const uint4*>(static_cast<const char*>(p.x) +
                                                (t * p.ldx + j) * (per == 4 ? 4 : 2));
        if (p.xt == DType::f32) {
          xs[slot(t, j)] = make_float4(__uint_as_float(raw.x), __uint_as_float(raw.y),
                                       __uint_as_float(raw.z), __uint_as_float(raw.w));
        } else {
          float f[8];
          const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
          for (int k = 0; k < 4; ++k) {
            const uint16_t lo = static_cast<uint16_t>(words[k]),
                           hi = static_cast<uint16_t>(words[k] >> 16);
            if (p.xt == DType::bf16) {
              f[2 * k] = __bfloat162float(__ushort_as_bfloat16(lo));
              f[2 * k + 1] = __bfloat162float(__ushort_as_bfloat16(hi));
            } else {
              f[2 * k] = __half2float(__ushort_as_half(lo));
              f[2 * k + 1] = __half2float(__ushort_as_half(hi));
            }
          }
          xs[slot(t, j)] = make_float4(f[0], f[1], f[2], f[3]);
          xs[slot(t, j + 4)] = make_float4(f[4], f[5], f[6], f[7]);
        }
      }
    } else {
      for (int i = threadIdx.x; i < kNT * quads; i += blockDim.x) {
        const int t = i / quads, j = i % quads * 4;
        float f[4] = {};
        if (t < p.T)
#pragma unroll
          for (int k = 0; k < 4; ++k) f[k] = load_any(p.x, p.xt, t * p.ldx + j + k);
        xs[slot(t, j)] = make_float4(f[0], f[1], f[2], f[3]);
      }
    }
  }
  __syncthreads();

#pragma unroll 1
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {  // CTA-uniform
    const int64_t o0 = tile_row0(tile);
    float acc[kRows][kNT] = {};
    if (first < chunks && !(early && tile == blockIdx.x))
      load_chunk(o0, first, next_wd, next_s, next_b);
#pragma unroll 1
    for (int c = first; c < chunks; c += step) {
      uint32_t wd[kRows][kV];
      float s[kRows], b[kRows];
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        s[r] = next_s[r], b[r] = next_b[r];
#pragma unroll
        for (int k = 0; k < kV; ++k) wd[r][k] = next_wd[r][k];
      }
      if (c + step < chunks) load_chunk(o0, c + step, next_wd, next_s, next_b);
      const float4* xc = xs + ((c / 32) * kPieces) * 32 + c % 32;  // piece m4 at xc[m4·32]
      float dot[kRows][kNT] = {}, xsum[kNT] = {};
      if constexpr (kCompact) {
        // Word k of every row per iteration; the rows' words are shifted down after it.
#pragma unroll 1
        for (int k = 0; k < kV; ++k) {
#pragma unroll
          for (int r = 0; r < kRows; ++r) {
            float qf[kPerWord];  // 4-bit: 0.5 + code / 256; 8-bit: the codes
            if constexpr (kBits == 4)
              decode_word_offset4(wd[r][0], qf);
            else
              decode_word<kBits>(wd[r][0], qf);
#pragma unroll
            for (int t = 0; t < kNT; ++t) {
#pragma unroll
              for (int q4 = 0; q4 < kPerWord / 4; ++q4) {
                const float4 xv = xc[t * x_row4 + (k * (kPerWord / 4) + q4) * 32];
                if (r == 0) xsum[t] += (xv.x + xv.y) + (xv.z + xv.w);
                dot[r][t] += xv.x * qf[q4 * 4 + 0];
                dot[r][t] += xv.y * qf[q4 * 4 + 1];
                dot[r][t] += xv.z * qf[q4 * 4 + 2];
                dot[r][t] += xv.w * qf[q4 * 4 + 3];
              }
            }
#pragma unroll
            for (int w = 0; w + 1 < kV; ++w) wd[r][w] = wd[r][w + 1];
          }
        }
      } else {
#pragma unroll
        for (int k = 0; k < kV; ++k) {
#pragma unroll
          for (int r = 0; r < kRows; ++r) {
            float qf[kPerWord];  // word k's codes of row r
            decode_word<kBits>(wd[r][k], qf);
#pragma unroll
            for (int t = 0; t < kNT; ++t) {  // staged rows T.. are zero
#pragma unroll
              for (int q4 = 0; q4 < kPerWord / 4; ++q4) {
                const float4 xv = xc[t * x_row4 + (k * (kPerWord / 4) + q4) * 32];
                if (r == 0) xsum[t] += (xv.x + xv.y) + (xv.z + xv.w);
                dot[r][t] += xv.x * qf[q4 * 4 + 0];
                dot[r][t] += xv.y * qf[q4 * 4 + 1];
                dot[r][t] += xv.z * qf[q4 * 4 + 2];
                dot[r][t] += xv.w * qf[q4 * 4 + 3];
              }
            }
          }
        }
      }
      if constexpr (kCompact && kBits == 4) {  // dot = Σ x·(0.5 + q/256) -> Σ x·q
#pragma unroll
        for (int t = 0; t < kNT; ++t)
#pragma unroll
          for (int r = 0; r < kRows; ++r) dot[r][t] = 256.0f * dot[r][t] - 128.0f * xsum[t];
      }
#pragma unroll
      for (int t = 0; t < kNT; ++t)
#pragma unroll
        for (int r = 0; r < kRows; ++r) acc[r][t] += s[r] * dot[r][t] + b[r] * xsum[t];
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r)
#pragma unroll
      for (int t = 0; t < kNT; ++t) acc[r][t] = warp_sum(acc[r][t]);
    if (split > 1) {  // CTA-uniform
      if (lane == 0)
#pragma unroll
        for (int r = 0; r < kRows; ++r)
#pragma unroll
          for (int t = 0; t < kNT; ++t) partial[warp][r][t] = acc[r][t];
      __syncthreads();
      if (part == 0)
#pragma unroll
        for (int r = 0; r < kRows; ++r)
#pragma unroll
          for (int t = 0; t < kNT; ++t) {
            float v = partial[warp][r][t];
            for (int q = 1; q < split; ++q) v += partial[warp + q][r][t];
            acc[r][t] = v;
          }
      __syncthreads();  // partial is rewritten by the next tile
    }
    if (lane == 0 && part == 0)
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const int64_t o = o0 + r;
        if (o < p.out) {
          const float bo = p.bias ? load_any(p.bias, p.bt, o) : 0.0f;
#pragma unroll
          for (int t = 0; t < kNT; ++t)
            if (t < p.T) store_any(p.y, p.yt, t * p.y_stride + o, acc[r][t] + bo);
        }
      }
  }
}

bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

template <int kBits, int kV, int kNT, bool kCompact>
void launch_gemv_nt(GemvParams p, cudaStream_t stream) {
  constexpr int kCodes = kV * 32 / kBits, kRows = gemv_rows(kNT);
  const int chunks = p.in / kCodes;
  // Split K across the warps of a row group while the GPU is not full (about kGemvWarps·min
  // CTAs of warps per SM) and each lane keeps at least one chunk per row.
  const int64_t full = int64_t{sm_count()} * kGemvWarps * gemv_min_blocks(kNT);
  const int64_t row_groups = (p.out + kRows - 1) / kRows;
  p.split = 1;
  while (p.split < kGemvWarps && chunks >= 64 * p.split && row_groups * p.split < full)
    p.split *= 2;
  p.x_row = static_cast<int>(gemv_x_row(p.in, kCodes));
  const int64_t rows_per_tile = int64_t{kGemvWarps / p.split} * kRows;
  const int64_t tiles = (p.out + rows_per_tile - 1) / rows_per_tile;
  const auto blocks =
      static_cast<unsigned>(std::min<int64_t>(tiles, int64_t{sm_count()} * gemv_min_blocks(kNT)));
  const size_t smem = static_cast<size_t>(kNT) * p.x_row * 4;
  if (smem > 48 * 1024) ensure_dynamic_smem(linear_q_gemv_kernel<kBits, kV, kNT, kCompact>, smem);
  linear_q_gemv_kernel<kBits, kV, kNT, kCompact><<<blocks, kGemvWarps * 32, smem, stream>>>(p);
  HYBRID_CUDA_CHECK_LAUNCH();
}

template <int kBits, int kV, bool kCompact>
void launch_gemv(const GemvParams& p, int nt, cudaStream_t stream) {
  if (nt == 1)
    launch_gemv_nt<kBits, kV, 1, kCompact>(p, stream);
  else if (nt == 2)
    launch_gemv_nt<kBits, kV, 2, kCompact>(p, stream);
  else if (nt == 4)
    launch_gemv_nt<kBits, kV, 4, kCompact>(p, stream);
  else
    launch_gemv_nt<kBits, kV, 8, kCompact>(p, stream);
}

// Whether the 16-byte chunk variant applies (rows 16-byte aligned, whole chunks per row).
bool gemv_vec(const QuantizedWeight& q, int64_t in) {
  return aligned16(q.weight.data()) && q.weight.stride(0) % 4 == 0 && (in * q.bits / 32) % 4 == 0;
}

// Tokens per launch: 1, 2, 4 or 8 (the fewest launches), halved while the staged x does not fit.
int gemv_tokens(int64_t T, int64_t x_row) {
  int nt = T <= 1 ? 1 : T <= 2 ? 2 : T <= 4 ? 4 : 8;
  while (nt > 1 && static_cast<size_t>(nt) * x_row * 4 > kGemvMaxSmem) nt /= 2;
  return nt;
}

int gemv_codes(const QuantizedWeight& q, int64_t in) {
  return (gemv_vec(q, in) ? 4 : 1) * 32 / q.bits;
}

Reason linear_q_gemv_supports(const LinearQ& a) {
  if (a.x.size(0) > kGemvMaxTokens)
    return str("T=", a.x.size(0), " above ", kGemvMaxTokens, " (the tiled variant runs it)");
  if (a.x.size(1) > (int64_t{1} << 30) || a.y.size(1) > (int64_t{1} << 30))
    return std::string("in or out above 2^30");
  const int64_t x_row = gemv_x_row(a.x.size(1), gemv_codes(a.w, a.x.size(1)));
  if (static_cast<size_t>(x_row) * 4 > kGemvMaxSmem)
    return str("in=", a.x.size(1), ": one token's f32 x (", x_row * 4, " bytes) above the ",
               kGemvMaxSmem, "-byte shared-memory stage (the tiled variant runs it)");
  return {};
}

// v2 (kCompact false) and v3 (linear_q.gemv_v3): see the kernel.
Reason linear_q_gemv_v3_supports(const LinearQ& a) {
  if (a.w.scales.dtype() != DType::bf16 && a.w.scales.dtype() != DType::f16)
    return str("scales ", dtype_name(a.w.scales.dtype()),
               ": v3 reads 16-bit scales only (linear_q.gemv runs f32 scales)");
  return linear_q_gemv_supports(a);
}

template <bool kCompact>
void linear_q_gemv_run(const LinearQ& a, Context& ctx) {
  const int64_t T = a.x.size(0), in = a.x.size(1), out = a.y.size(1);
  if (T == 0 || out == 0) return;
  const QuantizedWeight& q = a.w;
  const bool vec = gemv_vec(q, in);
  const int nt = gemv_tokens(T, gemv_x_row(in, gemv_codes(q, in)));
  const size_t xs = dtype_size(a.x.dtype()), ys = dtype_size(a.y.dtype());
  const cudaStream_t stream = as_stream(ctx.stream());
  for (int64_t t0 = 0; t0 < T; t0 += nt) {  // one launch per nt tokens
    const void* x = static_cast<const char*>(a.x.data()) + t0 * a.x.stride(0) * xs;
    GemvParams p{x,
                 a.x.dtype(),
                 a.x.stride(0),
                 aligned16(x) && (a.x.stride(0) * xs) % 16 == 0 && (in * xs) % 16 == 0,
                 q.weight.data_as<const uint32_t>(),
                 q.weight.stride(0),
                 q.scales.data(),
                 q.biases.data(),
                 q.scales.stride(0),
                 q.biases.stride(0),
                 q.scales.dtype(),
                 a.bias.defined() ? a.bias.data() : nullptr,
                 a.bias.defined() ? a.bias.dtype() : DType::f32,
                 static_cast<char*>(a.y.data()) + t0 * a.y.stride(0) * ys,
                 a.y.dtype(),
                 a.y.stride(0),
                 static_cast<int>(std::min<int64_t>(nt, T - t0)),
                 static_cast<int>(in),
                 static_cast<int>(out),
                 q.group_size,
                 1,
                 0};
    if (q.bits == 4) {
      if (vec)
        launch_gemv<4, 4, kCompact>(p, nt, stream);
      else
        launch_gemv<4, 1, kCompact>(p, nt, stream);
    } else {
      if (vec)
        launch_gemv<8, 4, kCompact>(p, nt, stream);
      else
        launch_gemv<8, 1, kCompact>(p, nt, stream);
    }
  }
}

// ---- linear_q.gemv_v4: tensor-core GEMV (4-bit, groups of 64 / 128, 16-bit x, T <= 8) --------
//
// A "span" is 64 consecutive inputs (one group: gs is 64 or 128). With C = x's 16-bit type
// (bf16 or f16) and off = 128 (bf16) or 1024 (f16):
//   D[o, t, j] = Σ_{i in span j} (off + q[o, i])·x[t, i]        m16n8k16 mma, f32 accumulate
//   X[t, j]    = Σ_{i in span j} x[t, i]                         f32, staged per CTA
//   y[t, o]    = Σ_j s[o, g(j)]·D[o, t, j] + (b[o, g(j)] − off·s[o, g(j)])·X[t, j]  (+ bias[o])
// off + q is exact in C: one LOP3 ((w >> 4m) & 0x000F000F | magic, magic = C's bits of off in
// both halves) gives codes m and m + 4 of a packed word as a C pair, so every product in the mma
// is exact and only the f32 sums round (the s·D − off·s·X cancellation costs ~4 bits (bf16) / ~7
// bits (f16) of the 24 against Σ x·q). The tokens are the mma's 8 columns, so T = 1..8 cost the
// same instructions: ~30 per 64 codes of 2 rows per lane (8 LOP3 + 6 shifts per 2 words of a row
// pair, 4 mma, 2 LDS.128 of x, the span's 8 f32 FMAs), ~1 per code against v3's ~4.
//
// Fragments (lane = 4·g + c): A rows g and g + 8 of the 16-row tile; lane c holds the mma's k
// slots {2c, 2c+1, 2c+8, 2c+9}. Per span the lane loads 8 bytes (words 8j + 2c, + 1: inputs
// 64j + 16c .. + 15) of each of its two rows; the quad's 4 lanes cover the span. mma step (word
// w, half h) maps k slot 2c -> code 2h, 2c+1 -> 2h+4, 2c+8 -> 2h+1, 2c+9 -> 2h+5 of word w, so
//   A = {pair(row g, 2h), pair(row g+8, 2h), pair(row g, 2h+1), pair(row g+8, 2h+1)},
//   B = {(x_{2h}, x_{2h+4}), (x_{2h+1}, x_{2h+5})} of the same 8 inputs, column g = token g,
// and x is staged once per CTA in that pair order: per token, per 8-input word, one uint4
// {(x0,x4), (x1,x5), (x2,x6), (x3,x7)} (one LDS.128 feeds both halves of a word), rows padded
// by 16 bytes (the 8 tokens of a quarter warp hit distinct banks).
// CTA = 8 warps = 8 parts of K over one 16-row tile (part p owns spans p, p + 8, ...); each warp
// walks its spans 4 per step with the next step's loads (8 LDG.64 of codes, 4 16-bit scale /
// bias loads: lane c loads those of step slot c for both rows, shuffled to the quad when used)
// in flight while it computes the current one, across tiles (CTAs are persistent over 16-row
// tiles). The 8 parts are added in part order through shared memory (deterministic), then one
// thread per (token, row) adds the bias and stores. Bytes: out·in/2 + scales / biases;
// 2·T·in·out FLOP.
constexpr int kV4Warps = 8;  // K parts of a tile: 8 warps per CTA
constexpr int kV4Batch = 4;  // spans per warp per pipeline step (= the quad's 4 lanes)
constexpr int kV4Span = 64;  // inputs per span
constexpr int kV4MinBlocks = 3;
constexpr size_t kV4MaxSmem = 160 * 1024;

struct GemvV4Params {
  const void* x;  // [T, in] 16-bit (C), row stride ldx elements
  int64_t ldx;
  bool x_vec;                    // rows 16-byte aligned: staged with 16-byte loads
  const uint32_t* w;             // [out, in/8] packed 4-bit codes (8-byte aligned rows)
  int64_t w_stride;              // words
  const unsigned short* scales;  // [out, in/gs] 16-bit
  const unsigned short* biases;
  int64_t s_stride, b_stride;
  bool s_bf16;       // scales / biases bf16 (else f16)
  const void* bias;  // [out] or null
  DType bt;
  void* y;  // [T, out]
  DType yt;
  int64_t y_stride;
  int T, in, out, gs;
};

// Bytes of dynamic shared memory: staged x [T][in/8 + 1] uint4, X [spans][8] f32, the parts'
// sums [8 warps][16 rows][8 tokens] f32.
size_t gemv_v4_smem(int64_t T, int64_t in) {
  return static_cast<size_t>(T * (in / 8 + 1)) * 16 + static_cast<size_t>(in / kV4Span) * 8 * 4 +
         size_t{kV4Warps} * 16 * 8 * 4;
}

template <class C>
__global__ void __launch_bounds__(kV4Warps * 32, kV4MinBlocks)
    linear_q_gemv_v4_kernel(const GemvV4Params p) {
  constexpr bool kHalf = std::is_same_v<C, __half>;
  constexpr uint32_t kMagic = kHalf ? 0x64006400u : 0x43004300u;  // off in both halves
  constexpr float kOff = kHalf ? 1024.0f : 128.0f;
  extern __shared__ uint4 v4_smem[];
  const int words8 = p.in / 8, rs = words8 + 1, spans = p.in / kV4Span;
  uint4* xs = v4_smem;                                         // [T][rs]
  float* xsum = reinterpret_cast<float*>(v4_smem + p.T * rs);  // [spans][8]
  float* partial = xsum + spans * 8;                           // [kV4Warps][16][8]

  const int lane = threadIdx.x % 32, part = threadIdx.x / 32, g = lane / 4, c = lane % 4;
  const int64_t tiles = (p.out + 15) / 16;
  const int per_part = (spans + kV4Warps - 1) / kV4Warps;
  const int nb = (per_part + kV4Batch - 1) / kV4Batch;  // steps per tile
  const int64_t my_tiles =
      blockIdx.x < tiles ? (tiles - 1 - blockIdx.x) / gridDim.x + 1 : int64_t{0};
  const int64_t items = my_tiles * nb;  // CTA-uniform

  // Step `item` (tile blockIdx.x + (item / nb)·gridDim.x, step item % nb): the lane's two words
  // of rows g and g + 8 for each of the 4 span slots, and slot c's scales / biases. Rows past
  // out read row out - 1 (never stored); spans past the row load nothing (never used).
  auto load_step = [&](int64_t item, uint2(&wa)[kV4Batch], uint2(&wb)[kV4Batch],
                       unsigned short(&sb)[4]) {
    const int64_t o0 = (blockIdx.x + (item / nb) * gridDim.x) * 16;
    const int step = static_cast<int>(item % nb);
    const int64_t ra = o0 + g < p.out ? o0 + g : p.out - 1;
    const int64_t rb = o0 + g + 8 < p.out ? o0 + g + 8 : p.out - 1;
    const uint32_t* pa = p.w + ra * p.w_stride + 2 * c;
    const uint32_t* pb = p.w + rb * p.w_stride + 2 * c;
#pragma unroll
    for (int k = 0; k < kV4Batch; ++k) {
      const int j = part + kV4Warps * (kV4Batch * step + k);
      if (j < spans) {
        wa[k] = __ldg(reinterpret_cast<const uint2*>(pa + 8 * j));
        wb[k] = __ldg(reinterpret_cast<const uint2*>(pb + 8 * j));
      }
    }
    const int jc = part + kV4Warps * (kV4Batch * step + c);
    if (jc < spans) {
      const int gi = jc * kV4Span / p.gs;
      sb[0] = __ldg(p.scales + ra * p.s_stride + gi);
      sb[1] = __ldg(p.biases + ra * p.b_stride + gi);
      sb[2] = __ldg(p.scales + rb * p.s_stride + gi);
      sb[3] = __ldg(p.biases + rb * p.b_stride + gi);
    }
  };
  uint2 next_a[kV4Batch] = {}, next_b[kV4Batch] = {};
  unsigned short next_sb[4] = {};
  if (items > 0) load_step(0, next_a, next_b, next_sb);  // in flight while x is staged

  // Stage x in pair order and X per (span, token); one thread per 8-input word, uniform trip
  // count (words are a multiple of 8 per token: the 8 lanes of a span reduce by shuffles).
  {
    const int nw = p.T * words8;
    const auto* xh = static_cast<const unsigned short*>(p.x);
    for (int base = 0; base < nw; base += blockDim.x) {
      const int idx = base + static_cast<int>(threadIdx.x);
      const bool valid = idx < nw;
      const int n = valid ? idx / words8 : 0, wi = valid ? idx % words8 : 0;
      uint32_t r[4] = {0, 0, 0, 0};  // x[n, 8wi + 2e] | x[n, 8wi + 2e + 1] << 16
      if (valid) {
        const unsigned short* src = xh + n * p.ldx + 8 * wi;
        if (p.x_vec) {
          const uint4 v = __ldg(reinterpret_cast<const uint4*>(src));
          r[0] = v.x, r[1] = v.y, r[2] = v.z, r[3] = v.w;
        } else {
#pragma unroll
          for (int e = 0; e < 4; ++e)
            r[e] = static_cast<uint32_t>(__ldg(src + 2 * e)) |
                   (static_cast<uint32_t>(__ldg(src + 2 * e + 1)) << 16);
        }
      }
      float sum = 0.0f;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        sum += bits16_to_f32(static_cast<unsigned short>(r[e]), !kHalf);
        sum += bits16_to_f32(static_cast<unsigned short>(r[e] >> 16), !kHalf);
      }
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      sum += __shfl_xor_sync(0xffffffffu, sum, 4);
      if (valid) {
        xs[n * rs + wi] =
            make_uint4(__byte_perm(r[0], r[2], 0x5410), __byte_perm(r[0], r[2], 0x7632),
                       __byte_perm(r[1], r[3], 0x5410), __byte_perm(r[1], r[3], 0x7632));
        if (wi % 8 == 0) xsum[(wi / 8) * 8 + n] = sum;
      }
    }
    for (int i = threadIdx.x; i < spans * 8; i += blockDim.x)
      if (i % 8 >= p.T) xsum[i] = 0.0f;  // tokens T..7: finite (never stored)
  }
  __syncthreads();

  const uint4* xrow = xs + (g < p.T ? g : 0) * rs;  // B column g = token g (T..7: token 0)
  auto pair = [](uint32_t w) { return (w & 0x000F000Fu) | kMagic; };
  float acc[4] = {};  // (row g, token 2c), (g, 2c+1), (g+8, 2c), (g+8, 2c+1)
#pragma unroll 1
  for (int64_t it = 0; it < items; ++it) {
    uint2 wa[kV4Batch], wb[kV4Batch];
#pragma unroll
    for (int k = 0; k < kV4Batch; ++k) wa[k] = next_a[k], wb[k] = next_b[k];
    const unsigned short sb[4] = {next_sb[0], next_sb[1], next_sb[2], next_sb[3]};
    if (it + 1 < items) load_step(it + 1, next_a, next_b, next_sb);
    const int step = static_cast<int>(it % nb);
    // Slot c's scale s and b' = b − off·s of both rows, f32 (read by the quad per slot).
    const float s_a = bits16_to_f32(sb[0], p.s_bf16), s_b = bits16_to_f32(sb[2], p.s_bf16);
    const float bo_a = bits16_to_f32(sb[1], p.s_bf16) - kOff * s_a;
    const float bo_b = bits16_to_f32(sb[3], p.s_bf16) - kOff * s_b;
#pragma unroll
    for (int k = 0; k < kV4Batch; ++k) {
      const int j = part + kV4Warps * (kV4Batch * step + k);
      if (j >= spans) break;  // warp-uniform
      float d[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
      for (int w = 0; w < 2; ++w) {
        const uint32_t ua = w ? wa[k].y : wa[k].x, ub = w ? wb[k].y : wb[k].x;
        const uint4 xv = xrow[8 * j + 2 * c + w];
        const uint32_t a0[4] = {pair(ua), pair(ub), pair(ua >> 4), pair(ub >> 4)};
        mma16<C>(d, a0, xv.x, xv.y);
        const uint32_t a1[4] = {pair(ua >> 8), pair(ub >> 8), pair(ua >> 12), pair(ub >> 12)};
        mma16<C>(d, a1, xv.z, xv.w);
      }
      const int src = 4 * g + k;  // the quad lane that loaded slot k's scales
      const float ska = __shfl_sync(0xffffffffu, s_a, src);
      const float bka = __shfl_sync(0xffffffffu, bo_a, src);
      const float skb = __shfl_sync(0xffffffffu, s_b, src);
      const float bkb = __shfl_sync(0xffffffffu, bo_b, src);
      const float2 xj = *reinterpret_cast<const float2*>(xsum + j * 8 + 2 * c);
      acc[0] += ska * d[0] + bka * xj.x;
      acc[1] += ska * d[1] + bka * xj.y;
      acc[2] += skb * d[2] + bkb * xj.x;
      acc[3] += skb * d[3] + bkb * xj.y;
    }
    if (step == nb - 1) {  // the tile is done: add the parts, store (CTA-uniform)
      const int64_t o0 = (blockIdx.x + (it / nb) * gridDim.x) * 16;
      partial[(part * 16 + g) * 8 + 2 * c] = acc[0];
      partial[(part * 16 + g) * 8 + 2 * c + 1] = acc[1];
      partial[(part * 16 + g + 8) * 8 + 2 * c] = acc[2];
      partial[(part * 16 + g + 8) * 8 + 2 * c + 1] = acc[3];
      acc[0] = acc[1] = acc[2] = acc[3] = 0.0f;
      __syncthreads();
      if (threadIdx.x < 128) {
        const int row = threadIdx.x % 16, t = threadIdx.x / 16;
        const int64_t o = o0 + row;
        if (t < p.T && o < p.out) {
          float v = 0.0f;
#pragma unroll
          for (int q = 0; q < kV4Warps; ++q) v += partial[(q * 16 + row) * 8 + t];
          if (p.bias) v += load_any(p.bias, p.bt, o);
          store_any(p.y, p.yt, t * p.y_stride + o, v);
        }
      }
      __syncthreads();  // partial is rewritten by the next tile
    }
  }
}

// HYBRID_LINEAR_Q_V4=0 refuses v4 (v3 and v2 then run), to test and time them from one build.
Reason linear_q_gemv_v4_supports(const LinearQ& a) {
  static const bool off = env_is_zero("HYBRID_LINEAR_Q_V4");
  if (off) return std::string("HYBRID_LINEAR_Q_V4=0");
  const DType xt = a.x.dtype(), st = a.w.scales.dtype();
  if (a.w.bits != 4) return str("bits=", a.w.bits, ": v4 decodes 4-bit codes only");
  if (a.w.group_size % kV4Span != 0)
    return str("group_size=", a.w.group_size, ": v4 needs groups of 64 or 128");
  if (xt != DType::bf16 && xt != DType::f16)
    return str("x ", dtype_name(xt), ": v4 multiplies 16-bit x on tensor cores (bf16 / f16)");
  if (st != DType::bf16 && st != DType::f16)
    return str("scales ", dtype_name(st), ": v4 reads 16-bit scales only");
  if (a.x.size(0) > kGemvMaxTokens)
    return str("T=", a.x.size(0), " above ", kGemvMaxTokens,
               " (the tokens are the mma's 8 columns)");
  if (a.x.size(1) > (int64_t{1} << 30) || a.y.size(1) > (int64_t{1} << 30))
    return std::string("in or out above 2^30");
  if (reinterpret_cast<uintptr_t>(a.w.weight.data()) % 8 != 0 || a.w.weight.stride(0) % 2 != 0)
    return std::string("packed rows not 8-byte aligned (v4 loads 2 words at a time)");
  if (gemv_v4_smem(a.x.size(0), a.x.size(1)) > kV4MaxSmem)
    return str("in=", a.x.size(1), ", T=", a.x.size(0), ": staged x above ", kV4MaxSmem,
               " bytes of shared memory");
  return {};
}

template <class C>
void launch_gemv_v4(const GemvV4Params& p, cudaStream_t stream) {
  const size_t smem = gemv_v4_smem(p.T, p.in);
  const auto kernel = linear_q_gemv_v4_kernel<C>;
  const int64_t tiles = (int64_t{p.out} + 15) / 16;
  const auto blocks = static_cast<unsigned>(
      persistent_blocks(reinterpret_cast<const void*>(kernel), kV4Warps * 32, smem, tiles));
  kernel<<<blocks, kV4Warps * 32, smem, stream>>>(p);
  HYBRID_CUDA_CHECK_LAUNCH();
}

void linear_q_gemv_v4_run(const LinearQ& a, Context& ctx) {
  const int64_t T = a.x.size(0), in = a.x.size(1), out = a.y.size(1);
  if (T == 0 || out == 0) return;
  const QuantizedWeight& q = a.w;
  const GemvV4Params p{a.x.data(),
                       a.x.stride(0),
                       aligned16(a.x.data()) && (a.x.stride(0) * 2) % 16 == 0,
                       q.weight.data_as<const uint32_t>(),
                       q.weight.stride(0),
                       static_cast<const unsigned short*>(q.scales.data()),
                       static_cast<const unsigned short*>(q.biases.data()),
                       q.scales.stride(0),
                       q.biases.stride(0),
                       q.scales.dtype() == DType::bf16,
                       a.bias.defined() ? a.bias.data() : nullptr,
                       a.bias.defined() ? a.bias.dtype() : DType::f32,
                       a.y.data(),
                       a.y.dtype(),
                       a.y.stride(0),
                       static_cast<int>(T),
                       static_cast<int>(in),
                       static_cast<int>(out),
                       q.group_size};
  const cudaStream_t stream = as_stream(ctx.stream());
  if (a.x.dtype() == DType::f16)
    launch_gemv_v4<__half>(p, stream);
  else
    launch_gemv_v4<__nv_bfloat16>(p, stream);
}

// ---- linear_q.gemv_v5: tensor-core GEMV, f16 mma, counted inner loop -------------------------
//
// v4's math with the instructions per weight and lane cut from ~4.5 (v4's SASS per 4-span step:
// ~238 of load bookkeeping (64-bit item / nb divisions, per-load 64-bit address math), 84 per
// span of math: 34 LOP3 + 12 SHF for 32 codes, 4 SHFL + 12 f32 ops of scale math; ncu: 4.8) to
// 1.82 (g64) / 1.59 (g128) (SASS of one step along its common path: 233 / 203 instructions for
// 128 weights per lane; docs/PERFORMANCE.md, session 3, next/linear-q has the table):
//   - every x (bf16 or f16) is multiplied in f16 (10 mantissa bits, so 1024 + q and 1024 + 16·q
//     are exact): x' = x·2^-e_t per token t (e_t puts max|x_t| in [2^14, 2^15): bf16's 8-bit
//     significands (f16 x: 11 bits) are exact in f16 over 24 binades below the max; beyond that an
//     element's error is below 2^-35 of the max), y = 2^e_t·(...) at the store;
//   - a word's 8 codes become 4 f16 pairs with ONE shift and 4 LOP3s ((w & m) | magic, mask and
//     magic in one LOP3 through inline PTX: ptxas splits the C version into two):
//       P0 = (w & 0x000F000F) | 0x6400 = (1024 + q0, 1024 + q4)
//       P1 = (w & 0x00F000F0) | 0x6400 = (1024 + 16·q1, 1024 + 16·q5)
//       P2, P3 = the same of w >> 8: codes 2, 6 and 16·(3, 7)
//     and x is staged divided by 16 in the slots of P1 / P3, so every product is
//     1024·x'_h + q·x'_eff (x'_h the staged f16 value, x'_eff = x'_h or 16·x'_h; exact);
//   - the offset is removed inside the mma: its accumulator starts at −Xo, Xo = 1024·Σ x'_h over
//     the group (staged per CTA), so D = Σ q·x'_eff directly; per group and lane then 4 FFMA of
//     s·D and 4 of b·X (X = Σ x'_eff over the group, staged);
//   - contiguous span ranges per warp: the step's 8 LDG.64 of codes use one pointer per row with
//     immediate offsets; lane c of a quad loads one of the step's 4 scale / bias words (8 bytes:
//     4 groups at g64, 4 bytes: 2 groups at g128), shared by 4 shuffles per 2 groups;
//   - two register buffers in turn (no copies), loads one step ahead, an L2 prefetch
//     p.prefetch steps further (default 2);
//   - no divisions in the loop: (tile group, step) counters; with one warp per tile (parts = 1:
//     the lm head) the epilogue stores straight from the accumulators, no barrier.
// Fragments as v4 (lane 4·g + c: A rows g and g + 8, k slots 2c, 2c+1, 2c+8, 2c+9; B column g =
// token g), per span j (64 inputs) the lane loads words 8j + 2c, + 1 of both rows; mma step
// (word w, half h): A = {P(2h)(row g), P(2h)(row g+8), P(2h+1)(row g), P(2h+1)(row g+8)},
// B = {(x_{2h}, x_{2h+4}), (x_{2h+1}, x_{2h+5}) / 16} of the word's 8 inputs, staged per token
// and word as one uint4 {(x0,x4), (x1,x5)/16, (x2,x6), (x3,x7)/16} (rows padded by 16 bytes).
// CTA = 8 warps; `parts` (1, 2, 4, 8) warps share a 16-row tile, splitting its spans into
// contiguous ranges of nb steps of 4 spans, summed in part order through shared memory.
//   y[t, o] = 2^e_t·Σ_groups (s·D[o, t, grp] + b·X[t, grp]) (+ bias[o])
// Bytes: out·in/2 + scales / biases; 2·T·in·out FLOP.
constexpr int kV5Warps = 8;
constexpr int kV5Batch = 4;          // spans per pipeline step
constexpr int kV5MinBlocks = 3;      // 24 warps per SM (80 registers, no spills)
constexpr int kV5PrefetchSteps = 2;  // L2 prefetch distance, steps ahead of the loads (default)
constexpr size_t kV5MaxSmem = 160 * 1024;
// v5 serves weights of at least this many codes (out·in); smaller ones go to v4. Session 4 on the
// H200 (same run, graph-timed, T = 1, g64): v5 62.3 vs v4 84.5 µs at 2048 -> 151936 (311 M codes),
// but 8.06 vs 7.68 µs at 2048 -> 4096 and 9.63 vs 8.32 µs at 4096 -> 2048 (8 M codes). The
// crossover between 8 M and 311 M was not measured; 32 M is a guess on v4's side of it.
// HYBRID_LINEAR_Q_V5_MIN_CODES overrides it (0: every shape v5 supports, for its GPU tests).
constexpr int64_t kV5MinCodes = int64_t{32} << 20;

struct GemvV5Params {
  const void* x;  // [T, in] bf16 or f16, row stride ldx elements
  int64_t ldx;
  bool x_vec;                    // rows 16-byte aligned: staged with 16-byte loads
  bool x_bf16;                   // else f16
  const uint32_t* w;             // [out, in/8] packed 4-bit codes (8-byte aligned rows)
  int64_t w_stride;              // words
  const unsigned short* scales;  // [out, in/gs] 16-bit (bf16 or f16 by the kernel's template)
  const unsigned short* biases;
  int64_t s_stride, b_stride;
  const void* bias;  // [out] or null
  DType bt;
  void* y;  // [T, out]
  DType yt;
  int64_t y_stride;
  int T, in, out;
  int parts;     // warps per 16-row tile: 1, 2, 4 or 8
  int prefetch;  // L2 prefetch distance in steps (0: none)
};

// Bytes of dynamic shared memory: staged x [T][in/8 + 1] uint4, per group 24 f32 (the mma's
// initial C per token pair and X per token), the parts' sums [8 warps][16 rows][8 tokens] f32,
// max|x| bits and the output factors [8] each.
size_t gemv_v5_smem(int64_t T, int64_t in, int gs) {
  return static_cast<size_t>(T * (in / 8 + 1)) * 16 + static_cast<size_t>(in / gs) * 24 * 4 +
         size_t{kV5Warps} * 16 * 8 * 4 + 2 * 8 * 4;
}

// Asks the L2 for the line holding p (a hint: no register, no wait).
__device__ __forceinline__ void prefetch_l2(const void* p) {
  asm volatile("prefetch.L2 [%0];" ::"l"(p));
}

// (a & kMask) | b in one LOP3 (b in a register; the C expression compiles to two LOP3s).
template <uint32_t kMask>
__device__ __forceinline__ uint32_t and_or(uint32_t a, uint32_t b) {
  uint32_t d;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(d) : "r"(a), "n"(kMask), "r"(b));
  return d;
}

// Value k of a group of 16-bit scales packed in u32 words (k even: low half), as f32.
template <bool kBf16>
__device__ __forceinline__ float half16_to_f32(uint32_t word, int hi) {
  if constexpr (kBf16)
    return __uint_as_float(hi ? word & 0xFFFF0000u : word << 16);
  else
    return __half2float(__ushort_as_half(static_cast<unsigned short>(hi ? word >> 16 : word)));
}

// One group's mma chain: d (initialised to −Xo) += Σ q·x'_eff over its kGroupSpans spans, for
// rows g, g + 8 (wa[h], wb[h]: the lane's words 2c, 2c + 1 of span h) and tokens 2c, 2c + 1
// (xw[8h + w]: the staged x of word 2c + w of span h).
template <int kGroupSpans>
__device__ __forceinline__ void v5_group_mma(float (&d)[4], const uint2* wa, const uint2* wb,
                                             const uint4* xw) {
  const uint32_t magic = 0x64006400u;  // 1024 in both f16 halves
#pragma unroll
  for (int h = 0; h < kGroupSpans; ++h) {
#pragma unroll
    for (int w = 0; w < 2; ++w) {
      const uint32_t ua = w ? wa[h].y : wa[h].x, ub = w ? wb[h].y : wb[h].x;
      const uint4 xv = xw[8 * h + w];
      const uint32_t a0[4] = {and_or<0x000F000Fu>(ua, magic), and_or<0x000F000Fu>(ub, magic),
                              and_or<0x00F000F0u>(ua, magic), and_or<0x00F000F0u>(ub, magic)};
      mma_f16(d, a0, xv.x, xv.y);
      const uint32_t ua8 = ua >> 8, ub8 = ub >> 8;
      const uint32_t a1[4] = {and_or<0x000F000Fu>(ua8, magic), and_or<0x000F000Fu>(ub8, magic),
                              and_or<0x00F000F0u>(ua8, magic), and_or<0x00F000F0u>(ub8, magic)};
      mma_f16(d, a1, xv.z, xv.w);
    }
  }
}

// A warp's finished 16-row tile from its accumulators (v5 at parts = 1, v7): lane (g, c) holds
// rows o0 + g, o0 + g + 8 of tokens 2c, 2c + 1; y = 2^e_t·acc (+ bias).
__device__ __forceinline__ void v5_store_tile(const GemvV5Params& p, const float (&acc)[4],
                                              int64_t o0, const float* yscale) {
  const int lane = threadIdx.x % 32, g = lane / 4, c = lane % 4;
#pragma unroll
  for (int r = 0; r < 2; ++r)
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      const int t = 2 * c + u;
      const int64_t o = o0 + g + 8 * r;
      if (t < p.T && o < p.out) {
        float v = yscale[t] * acc[2 * r + u];
        if (p.bias) v += load_any(p.bias, p.bt, o);
        store_any(p.y, p.yt, t * p.y_stride + o, v);
      }
    }
}

// Stages x for the tensor-core GEMVs (v5, v6) in shared memory, then a block barrier:
//   xs [T][in/8 + 1] uint4: per token and word the f16 pairs {(x0,x4), (x1,x5)/16, (x2,x6),
//     (x3,x7)/16} of x' = x·2^-e_t (rows padded by 16 bytes);
//   xx [groups][24] f32: per group the mma's initial C {−Xo(2p), −Xo(2p+1)} twice at 4p for
//     token pair p, and X(t) at 16 + t (tokens T..7 stay 0);
//   xmax [8]: bits of max|x_t|; yscale [8]: 2^e_t.
template <int kGroupSpans>
__device__ void v5_stage_x(const GemvV5Params& p, uint4* xs, float* xx, int* xmax, float* yscale) {
  const int words8 = p.in / 8, rs = words8 + 1, groups = p.in / (64 * kGroupSpans);
  const int lane = threadIdx.x % 32;
  // Stage x. Pass 1: max|x_t| per token (a warp's 32 consecutive words lie in one token:
  // words8 is a multiple of 32), xx zeroed (tokens T..7 stay 0: finite, never stored).
  const auto* xh = static_cast<const unsigned short*>(p.x);
  const int nw = p.T * words8;
  auto load8 = [&](int idx, float(&v)[8]) {  // the 8 inputs of word idx % words8 of token n
    const int n = idx / words8, wi = idx % words8;
    const unsigned short* src = xh + n * p.ldx + 8 * wi;
    uint32_t r[4];
    if (p.x_vec) {
      const uint4 u = __ldg(reinterpret_cast<const uint4*>(src));
      r[0] = u.x, r[1] = u.y, r[2] = u.z, r[3] = u.w;
    } else {
#pragma unroll
      for (int e = 0; e < 4; ++e)
        r[e] = static_cast<uint32_t>(__ldg(src + 2 * e)) |
               (static_cast<uint32_t>(__ldg(src + 2 * e + 1)) << 16);
    }
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const auto u = static_cast<unsigned short>(r[e / 2] >> (16 * (e % 2)));
      v[e] = p.x_bf16 ? __uint_as_float(static_cast<uint32_t>(u) << 16)
                      : __half2float(__ushort_as_half(u));
    }
  };
  if (threadIdx.x < 8) xmax[threadIdx.x] = 0;
  for (int i = threadIdx.x; i < groups * 24; i += blockDim.x) xx[i] = 0.0f;
  __syncthreads();
  for (int base = 0; base < nw; base += blockDim.x) {  // uniform trip count
    const int idx = base + static_cast<int>(threadIdx.x);
    float m = 0.0f;
    if (idx < nw) {
      float v[8];
      load8(idx, v);
#pragma unroll
      for (int e = 0; e < 8; ++e) m = fmaxf(m, fabsf(v[e]));
    }
#pragma unroll
    for (int off = 16; off > 0; off /= 2) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
    if (lane == 0 && idx < nw) atomicMax(xmax + idx / words8, __float_as_int(m));
  }
  __syncthreads();
  // e_t = floor(log2 max|x_t|) − 14 (0 for an all-zero token): x' = x·2^-e_t. Clamped to
  // [−126, 113], the widest range where 2^e_t and 2^-e_t are normal f32 (e_t = 113: max|x| up
  // to 2^128, x' still below 2^15; e_t = −126: a subnormal max lands in [2^-7, 1)).
  auto token_exp = [&](int t) {
    const int bits = xmax[t];
    const int e = bits == 0 ? 0 : ((bits >> 23) & 0xFF) - 127 - 14;
    return e < -126 ? -126 : e > 113 ? 113 : e;
  };
  if (threadIdx.x < 8) yscale[threadIdx.x] = __int_as_float((127 + token_exp(threadIdx.x)) << 23);
  // Pass 2: one thread per word: the f16 pairs, and per group X = Σ x' (the staged values, the
  // odd-slot ones times 16) and Xo = 1024·Σ x'_h, reduced over the group's 8·kGroupSpans lanes.
  for (int base = 0; base < nw; base += blockDim.x) {
    const int idx = base + static_cast<int>(threadIdx.x);
    const bool valid = idx < nw;
    float xsum = 0.0f, hsum = 0.0f;
    uint32_t pr[4] = {0, 0, 0, 0};
    if (valid) {
      float v[8];
      load8(idx, v);
      const float down = __int_as_float((127 - token_exp(idx / words8)) << 23);
#pragma unroll
      for (int m = 0; m < 4; ++m) {  // pair m: inputs m, m + 4; odd m divided by 16
        const float f = (m % 2) ? down * 0.0625f : down;
        const __half lo = __float2half_rn(v[m] * f), hi = __float2half_rn(v[m + 4] * f);
        const float lo_f = __half2float(lo), hi_f = __half2float(hi);
        hsum += lo_f + hi_f;
        xsum += (m % 2) ? 16.0f * (lo_f + hi_f) : lo_f + hi_f;
        pr[m] = static_cast<uint32_t>(__half_as_ushort(lo)) |
                (static_cast<uint32_t>(__half_as_ushort(hi)) << 16);
      }
    }
#pragma unroll
    for (int off = 1; off < 8 * kGroupSpans; off *= 2) {
      xsum += __shfl_xor_sync(0xffffffffu, xsum, off);
      hsum += __shfl_xor_sync(0xffffffffu, hsum, off);
    }
    if (valid) {
      const int n = idx / words8, wi = idx % words8;
      xs[n * rs + wi] = make_uint4(pr[0], pr[1], pr[2], pr[3]);
      if (wi % (8 * kGroupSpans) == 0) {
        float* q = xx + (wi / (8 * kGroupSpans)) * 24;
        q[(n / 2) * 4 + n % 2] = -1024.0f * hsum;
        q[(n / 2) * 4 + n % 2 + 2] = -1024.0f * hsum;
        q[16 + n] = xsum;
      }
    }
  }
  __syncthreads();
}

// kGroupSpans: spans (64 inputs) per group: 1 (g64) or 2 (g128). kScaleBf16: scales / biases
// bf16 (else f16).
template <int kGroupSpans, bool kScaleBf16>
__global__ void __launch_bounds__(kV5Warps * 32, kV5MinBlocks)
    linear_q_gemv_v5_kernel(const GemvV5Params p) {
  constexpr int kStepGroups = kV5Batch / kGroupSpans;  // groups per step: 4 or 2
  // One load of a row's scales (or biases) for the step's groups: 4 or 2 16-bit values.
  using ScaleWord = std::conditional_t<kStepGroups == 4, uint2, uint32_t>;
  extern __shared__ uint4 v5_smem[];
  const int words8 = p.in / 8, rs = words8 + 1, groups = p.in / (64 * kGroupSpans);
  uint4* xs = v5_smem;  // [T][rs]
  // Per group 24 floats: the mma's initial C per token pair p, {−Xo(2p), −Xo(2p+1)} twice
  // (rows g and g + 8), at 4p; X(t) at 16 + t (tokens T..7: 0, finite, never stored).
  float* xx = reinterpret_cast<float*>(v5_smem + p.T * rs);         // [groups][24]
  float* partial = xx + groups * 24;                                // [kV5Warps][16][8]
  int* xmax = reinterpret_cast<int*>(partial + kV5Warps * 16 * 8);  // [8] bits of max|x_t|
  float* yscale = reinterpret_cast<float*>(xmax + 8);               // [8] 2^e_t

  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, c = lane % 4;
  const int parts = p.parts, tpg = kV5Warps / parts;  // tiles per CTA round ("tile group")
  const int part = warp % parts, slot = warp / parts;
  const int nb = p.in / 64 / (kV5Batch * parts);  // steps per tile and part (supports: >= 1)
  const int j_first = part * nb * kV5Batch;       // the part's first span
  const int tiles = (p.out + 15) / 16;
  const int tgroups = (tiles + tpg - 1) / tpg;

  // Loads run one step ahead of the math: pointers of rows g, g + 8 of tile tg·tpg + slot at the
  // part's step. Rows past out read row out - 1 (never stored). Lane c of a quad loads one of
  // the 4 scale words of the step (c = 0: scales of row g, 1: biases of row g, 2 / 3: the same
  // of row g + 8), shared with the quad by shuffles.
  const uint2 *pa = nullptr, *pb = nullptr;
  const ScaleWord* ps = nullptr;
  // The prefetched byte relative to pa (c even) or pb (c odd) after they are advanced past the
  // loaded step: the row's step p.prefetch on, its first (c < 2) or last (c >= 2) byte.
  const bool pf_odd = c & 1;
  const int pf_delta = (4 * kV5Batch * (p.prefetch - 1) - c) * 8 + (c & 2 ? 32 * kV5Batch - 1 : 0);
  auto l_set = [&](int tg) {  // step 0 of tile group tg
    const int64_t o0 = (int64_t{tg} * tpg + slot) * 16;
    const int64_t ra = o0 + g < p.out ? o0 + g : p.out - 1;
    const int64_t rb = o0 + g + 8 < p.out ? o0 + g + 8 : p.out - 1;
    pa = reinterpret_cast<const uint2*>(p.w + ra * p.w_stride) + 4 * j_first + c;
    pb = reinterpret_cast<const uint2*>(p.w + rb * p.w_stride) + 4 * j_first + c;
    const int64_t rc = c & 2 ? rb : ra;
    const unsigned short* base = c & 1 ? p.biases + rc * p.b_stride : p.scales + rc * p.s_stride;
    ps = reinterpret_cast<const ScaleWord*>(base + j_first / kGroupSpans);
  };
  // Loads the pointers' step (span k at uint2 4·k: words 8k + 2c, + 1) and advances them.
  // With `prefetch`, the rows' 128 bytes of the step p.prefetch further on are asked into
  // L2 (lane c: row g (c even) or g + 8 (c odd), its first (c < 2) or last byte: a step
  // straddles at most 2 lines), so that more than the one step of registers is in flight.
  auto l_load = [&](uint2(&na)[kV5Batch], uint2(&nbw)[kV5Batch], ScaleWord& ns, bool prefetch) {
    pa += 4 * kV5Batch, pb += 4 * kV5Batch;  // advanced first: the loads use negative offsets
    ++ps;
#pragma unroll
    for (int k = 0; k < kV5Batch; ++k) {
      na[k] = __ldg(pa + 4 * (k - kV5Batch));
      nbw[k] = __ldg(pb + 4 * (k - kV5Batch));
    }
    ns = __ldg(ps - 1);
    if (prefetch) prefetch_l2(reinterpret_cast<const char*>(pf_odd ? pb : pa) + pf_delta);
  };
  uint2 buf_a0[kV5Batch], buf_b0[kV5Batch], buf_a1[kV5Batch], buf_b1[kV5Batch];
  ScaleWord buf_s0, buf_s1;
  if (static_cast<int>(blockIdx.x) < tgroups) {  // the first step in flight while x is staged
    l_set(blockIdx.x);
    l_load(buf_a0, buf_b0, buf_s0, p.prefetch > 0 && p.prefetch < nb);
  }

  v5_stage_x<kGroupSpans>(p, xs, xx, xmax, yscale);

  const uint4* xrow = xs + (g < p.T ? g : 0) * rs + 2 * c;      // word 8j + 2c + w at xrow[8j + w]
  const float4* xc4 = reinterpret_cast<const float4*>(xx) + c;  // group q: xc4[6q]
  const float2* xx2 = reinterpret_cast<const float2*>(xx) + 8 + c;  // group q: xx2[12q]
  float acc[4] = {};  // (row g, token 2c), (g, 2c+1), (g+8, 2c), (g+8, 2c+1)
  int step = 0;
  int group_c = blockIdx.x;  // CTA-uniform: tile group, step
  const int quad0 = 4 * g;   // the quad's first lane

  // One step of 4 spans: the mma chains, then per group acc += s·D + b·X.
  auto step_math = [&](const uint2(&wa)[kV5Batch], const uint2(&wb)[kV5Batch],
                       const ScaleWord mine_s) {
    const int j0 = j_first + step * kV5Batch;
    // Scales (s) and biases (b) of rows g (a) and g + 8 (b): u32 words of 2 groups' 16-bit
    // values, from the quad's lanes, fetched when group q = 0 (and 2) needs them.
    uint32_t wsa = 0, wba = 0, wsb = 0, wbb = 0;
#pragma unroll
    for (int q = 0; q < kStepGroups; ++q) {
      const int gq = j0 / kGroupSpans + q;
      const float4 cq = xc4[6 * gq];  // the mma's initial C: −Xo of tokens 2c, 2c+1 (both rows)
      float d[4] = {cq.x, cq.y, cq.z, cq.w};
      v5_group_mma<kGroupSpans>(d, wa + q * kGroupSpans, wb + q * kGroupSpans,
                                xrow + 8 * (j0 + q * kGroupSpans));
      if (q % 2 == 0) {
        uint32_t mw;
        if constexpr (kStepGroups == 4)
          mw = q < 2 ? mine_s.x : mine_s.y;
        else
          mw = mine_s;
        wsa = __shfl_sync(0xffffffffu, mw, quad0);
        wba = __shfl_sync(0xffffffffu, mw, quad0 + 1);
        wsb = __shfl_sync(0xffffffffu, mw, quad0 + 2);
        wbb = __shfl_sync(0xffffffffu, mw, quad0 + 3);
      }
      const float s_a = half16_to_f32<kScaleBf16>(wsa, q % 2);
      const float b_a = half16_to_f32<kScaleBf16>(wba, q % 2);
      const float s_b = half16_to_f32<kScaleBf16>(wsb, q % 2);
      const float b_b = half16_to_f32<kScaleBf16>(wbb, q % 2);
      const float2 xq = xx2[12 * gq];  // X of tokens 2c, 2c+1
      acc[0] = fmaf(b_a, xq.x, fmaf(s_a, d[0], acc[0]));
      acc[1] = fmaf(b_a, xq.y, fmaf(s_a, d[1], acc[1]));
      acc[2] = fmaf(b_b, xq.x, fmaf(s_b, d[2], acc[2]));
      acc[3] = fmaf(b_b, xq.y, fmaf(s_b, d[3], acc[3]));
    }
  };

  // After a step: the next one; a finished tile is summed and stored (CTA-uniform).
  auto step_done = [&]() {
    if (++step < nb) return;
    step = 0;
    const int64_t og = int64_t{group_c} * tpg * 16;  // the CTA's tile group's first row
    const int64_t o0 = og + slot * 16;               // the warp's tile
    group_c += gridDim.x;
    if (parts == 1) {  // the warp owns the tile: store from the accumulators
      v5_store_tile(p, acc, o0, yscale);
    } else {
      float* mine = partial + warp * 16 * 8;
      mine[g * 8 + 2 * c] = acc[0];
      mine[g * 8 + 2 * c + 1] = acc[1];
      mine[(g + 8) * 8 + 2 * c] = acc[2];
      mine[(g + 8) * 8 + 2 * c + 1] = acc[3];
      __syncthreads();
      // (tile slot, token, row) per thread; the parts added in part order.
      for (int v = threadIdx.x; v < tpg * 128; v += blockDim.x) {
        const int sl = v / 128, t = (v / 16) % 8, row = v % 16;
        const int64_t o = og + sl * 16 + row;
        if (t < p.T && o < p.out) {
          float sum = 0.0f;
          for (int q = 0; q < parts; ++q) sum += partial[((sl * parts + q) * 16 + row) * 8 + t];
          sum *= yscale[t];
          if (p.bias) sum += load_any(p.bias, p.bt, o);
          store_any(p.y, p.yt, t * p.y_stride + o, sum);
        }
      }
      __syncthreads();  // partial is rewritten by the next tile
    }
    acc[0] = acc[1] = acc[2] = acc[3] = 0.0f;
  };
  // Issues the loads of the step after the current one, if any.
  auto load_ahead = [&](uint2(&na)[kV5Batch], uint2(&nbw)[kV5Batch], ScaleWord& ns) {
    if (step + 1 < nb) {
      l_load(na, nbw, ns, p.prefetch > 0 && step + 1 + p.prefetch < nb);
    } else if (group_c + static_cast<int>(gridDim.x) < tgroups) {
      l_set(group_c + gridDim.x);
      l_load(na, nbw, ns, p.prefetch > 0 && p.prefetch < nb);
    }
  };

  // Two register buffers in turn (no copies): buffer 0 holds the current step on entry.
#pragma unroll 1
  while (group_c < tgroups) {
    load_ahead(buf_a1, buf_b1, buf_s1);
    step_math(buf_a0, buf_b0, buf_s0);
    step_done();
    if (group_c >= tgroups) break;
    load_ahead(buf_a0, buf_b0, buf_s0);
    step_math(buf_a1, buf_b1, buf_s1);
    step_done();
  }
}

// HYBRID_LINEAR_Q_V5=0 refuses v5 (v4 and the older variants then run).
Reason linear_q_gemv_v5_supports(const LinearQ& a) {
  static const bool off = env_is_zero("HYBRID_LINEAR_Q_V5");
  if (off) return std::string("HYBRID_LINEAR_Q_V5=0");
  const DType xt = a.x.dtype(), st = a.w.scales.dtype();
  const int64_t T = a.x.size(0), in = a.x.size(1);
  const int gs = a.w.group_size;
  if (a.w.bits != 4) return str("bits=", a.w.bits, ": v5 decodes 4-bit codes only");
  static const int64_t min_codes = [] {
    const char* env = std::getenv("HYBRID_LINEAR_Q_V5_MIN_CODES");
    return env ? std::atoll(env) : kV5MinCodes;
  }();
  if (a.y.size(1) * in < min_codes)
    return str("out·in = ", a.y.size(1) * in, " codes below ", min_codes,
               " (v4 measured faster on small weights)");
  if (gs != 64 && gs != 128) return str("group_size=", gs, ": v5 needs groups of 64 or 128");
  if (xt != DType::bf16 && xt != DType::f16)
    return str("x ", dtype_name(xt), ": v5 multiplies 16-bit x on tensor cores (bf16 / f16)");
  if (st != DType::bf16 && st != DType::f16)
    return str("scales ", dtype_name(st), ": v5 reads 16-bit scales only");
  if (T > kGemvMaxTokens)
    return str("T=", T, " above ", kGemvMaxTokens, " (the tokens are the mma's 8 columns)");
  if (in % (64 * kV5Batch) != 0)
    return str("in=", in, " not a multiple of ", 64 * kV5Batch,
               " (v5's steps are 4 whole spans of 64 inputs)");
  if (in > (int64_t{1} << 30) || a.y.size(1) > (int64_t{1} << 30) ||
      (a.y.size(1) / 16 + 1) * (in / 256) >= (int64_t{1} << 31))
    return std::string("in or out above 2^30, or (out/16)·(in/256) steps above 2^31");
  if (reinterpret_cast<uintptr_t>(a.w.weight.data()) % 8 != 0 || a.w.weight.stride(0) % 2 != 0)
    return std::string("packed rows not 8-byte aligned (v5 loads 2 words at a time)");
  // One load of a row's step of scales / biases: 4 (g64) or 2 (g128) 16-bit values.
  const int64_t step_bytes = gs == 64 ? 8 : 4, step_values = step_bytes / 2;
  for (const Tensor* t : {&a.w.scales, &a.w.biases})
    if (reinterpret_cast<uintptr_t>(t->data()) % step_bytes != 0 || t->stride(0) % step_values != 0)
      return str("scales / biases rows not ", step_bytes,
                 "-byte aligned (v5 loads a step's groups at once)");
  if (gemv_v5_smem(T, in, gs) > kV5MaxSmem)
    return str("in=", in, ", T=", T, ": staged x above ", kV5MaxSmem, " bytes of shared memory");
  return {};
}

template <int kGroupSpans, bool kScaleBf16>
void launch_gemv_v5(GemvV5Params p, int gs, cudaStream_t stream) {
  const size_t smem = gemv_v5_smem(p.T, p.in, gs);
  const auto kernel = linear_q_gemv_v5_kernel<kGroupSpans, kScaleBf16>;
  const int per_sm = resident_blocks(kernel, kV5Warps * 32, smem);
  // Parts per tile: 1 (one warp per 16-row tile: no cross-warp sum) while the tiles alone fill
  // the resident warps, else doubled up to 8 while each part keeps whole 4-span steps.
  const int64_t tiles = (int64_t{p.out} + 15) / 16, spans = p.in / 64;
  const int64_t resident = int64_t{sm_count()} * per_sm * kV5Warps;
  p.parts = 1;
  while (p.parts < kV5Warps && tiles * p.parts < resident && spans % (kV5Batch * 2 * p.parts) == 0)
    p.parts *= 2;
  // Tuning switches for a timing run (not needed for correctness): HYBRID_LINEAR_Q_V5_PARTS = 1,
  // 2, 4 or 8 (taken when the part keeps whole steps), HYBRID_LINEAR_Q_V5_PREFETCH = 0..8 steps.
  // Read once per process (this runs on every launch); -1 = not set.
  static const int want_parts = [] {
    const char* env = std::getenv("HYBRID_LINEAR_Q_V5_PARTS");
    return env ? std::atoi(env) : -1;
  }();
  static const int want_prefetch = [] {
    const char* env = std::getenv("HYBRID_LINEAR_Q_V5_PREFETCH");
    return env ? std::atoi(env) : -1;
  }();
  if ((want_parts == 1 || want_parts == 2 || want_parts == 4 || want_parts == 8) &&
      spans % (kV5Batch * want_parts) == 0)
    p.parts = want_parts;
  p.prefetch = (want_prefetch >= 0 && want_prefetch <= 8) ? want_prefetch : kV5PrefetchSteps;
  const int64_t tgroups = (tiles + kV5Warps / p.parts - 1) / (kV5Warps / p.parts);
  const auto blocks =
      static_cast<unsigned>(std::min<int64_t>(tgroups, int64_t{sm_count()} * per_sm));
  kernel<<<blocks, kV5Warps * 32, smem, stream>>>(p);
  HYBRID_CUDA_CHECK_LAUNCH();
}

// The kernel arguments of v5 and v6 (parts and prefetch: v5's defaults; its launch tunes them).
GemvV5Params gemv_v5_params(const LinearQ& a) {
  const QuantizedWeight& q = a.w;
  return GemvV5Params{a.x.data(),
                      a.x.stride(0),
                      aligned16(a.x.data()) && (a.x.stride(0) * 2) % 16 == 0,
                      a.x.dtype() == DType::bf16,
                      q.weight.data_as<const uint32_t>(),
                      q.weight.stride(0),
                      static_cast<const unsigned short*>(q.scales.data()),
                      static_cast<const unsigned short*>(q.biases.data()),
                      q.scales.stride(0),
                      q.biases.stride(0),
                      a.bias.defined() ? a.bias.data() : nullptr,
                      a.bias.defined() ? a.bias.dtype() : DType::f32,
                      a.y.data(),
                      a.y.dtype(),
                      a.y.stride(0),
                      static_cast<int>(a.x.size(0)),
                      static_cast<int>(a.x.size(1)),
                      static_cast<int>(a.y.size(1)),
                      1,
                      kV5PrefetchSteps};
}

// Calls launch<kGroupSpans, kScaleBf16>(p, gs, stream) for the weight's group size and scale type.
template <template <int, bool> class Launch>
void dispatch_gemv_tc(const LinearQ& a, Context& ctx) {
  if (a.x.size(0) == 0 || a.y.size(1) == 0) return;
  const GemvV5Params p = gemv_v5_params(a);
  const cudaStream_t stream = as_stream(ctx.stream());
  const bool sbf = a.w.scales.dtype() == DType::bf16;
  if (a.w.group_size == 64) {
    if (sbf)
      Launch<1, true>::run(p, stream);
    else
      Launch<1, false>::run(p, stream);
  } else {
    if (sbf)
      Launch<2, true>::run(p, stream);
    else
      Launch<2, false>::run(p, stream);
  }
}

template <int kGroupSpans, bool kScaleBf16>
struct LaunchV5 {
  static void run(const GemvV5Params& p, cudaStream_t stream) {
    launch_gemv_v5<kGroupSpans, kScaleBf16>(p, 64 * kGroupSpans, stream);
  }
};

void linear_q_gemv_v5_run(const LinearQ& a, Context& ctx) {
  dispatch_gemv_tc<LaunchV5>(a, ctx);
}

// One v5 step (4 spans of rows g, g + 8, tokens 2c, 2c + 1) from staged words, for v6 and v7:
// per group the mma chain, then acc += s·D + b·X. wa[k], wb[k]: the lane's words 2c, 2c + 1 of
// span k in rows g and g + 8; ws_* / wb_*: the step's scales / biases of rows g (a) and g + 8
// (b), value q in half q % 2 of u32 word q / 2; j0: the step's first span of the whole row.
template <int kGroupSpans, bool kScaleBf16, class ScaleWord>
__device__ __forceinline__ void v5_step_acc(float (&acc)[4], const uint2 (&wa)[kV5Batch],
                                            const uint2 (&wb)[kV5Batch], ScaleWord ws_a,
                                            ScaleWord ws_b, ScaleWord wb_a, ScaleWord wb_b, int j0,
                                            const uint4* xrow, const float4* xc4,
                                            const float2* xx2) {
  constexpr int kStepGroups = kV5Batch / kGroupSpans;
  auto value = [](const ScaleWord& w, int q) {
    uint32_t u;
    if constexpr (kStepGroups == 4)
      u = q < 2 ? w.x : w.y;
    else
      u = w;
    return half16_to_f32<kScaleBf16>(u, q % 2);
  };
#pragma unroll
  for (int q = 0; q < kStepGroups; ++q) {
    const int gq = j0 / kGroupSpans + q;  // the row's group
    const float4 cq = xc4[6 * gq];        // the mma's initial C: −Xo of tokens 2c, 2c+1
    float d[4] = {cq.x, cq.y, cq.z, cq.w};
    v5_group_mma<kGroupSpans>(d, wa + q * kGroupSpans, wb + q * kGroupSpans,
                              xrow + 8 * (j0 + q * kGroupSpans));
    const float s_a = value(ws_a, q), s_b = value(ws_b, q);
    const float b_a = value(wb_a, q), b_b = value(wb_b, q);
    const float2 xq = xx2[12 * gq];  // X of tokens 2c, 2c+1
    acc[0] = fmaf(b_a, xq.x, fmaf(s_a, d[0], acc[0]));
    acc[1] = fmaf(b_a, xq.y, fmaf(s_a, d[1], acc[1]));
    acc[2] = fmaf(b_b, xq.x, fmaf(s_b, d[2], acc[2]));
    acc[3] = fmaf(b_b, xq.y, fmaf(s_b, d[3], acc[3]));
  }
}

// ---- linear_q.gemv_v6: v5's math over weights streamed through a shared-memory pipeline ----
//
// v5 keeps at most two steps of codes per warp in flight from registers, plus an L2 prefetch:
// ~48 KB of requests per SM, and it reached 67% of copy at the lm head (session 4). v6 streams
// the weights through shared memory: a persistent CTA walks its items (a 16-row tile and a chunk
// of kV6Chunk inputs) with kV6Stages - 1 of them in flight ahead of the math, by cp.async (16
// bytes a thread, no registers; 5 a thread per item), ~39 KB of requests a CTA whatever the math
// does. (The first version used 1-D TMA bulk copies, one per row: 48 copies of 1 KB and 64 B an
// item, issued lane by lane from one warp. It ran at 42% of copy, its warps waiting on the
// stages: session 7 run 2.)
//   stage: codes [16 rows][1024 + 32 B] (the 32-byte pad puts row g + 1 eight banks further: the
//     LDS.64 of 4 rows x 4 quad lanes per half warp fill the 32 banks without conflict), then
//     scales [16 rows] and biases [16 rows] of [chunk / gs · 2 + 16 B] (the pad: 8 rows on
//     distinct banks);
//   math: warp w takes the chunk's inputs 256w .. 256w + 255 (v5's 4-span step; warps past a
//     short last chunk idle): per group v5's mma chain (v5_group_mma), s and b from the stage,
//     acc += s·D + b·X;
//   per item: wait for the item's copies, one block barrier (they are visible, and every warp is
//     done with the previous item's stage), the copies of item i + kV6Stages - 1 into that stage,
//     the math. At a tile's last chunk the warps' sums go through shared memory (two buffers by
//     tile parity) and warps 4-7 add them in warp order and store y after the next barrier.
//   y[t, o] = 2^e_t·Σ_groups (s·D[o, t, grp] + b·X[t, grp]) (+ bias[o]), as v5.
// Bytes: out·in/2 + scales / biases; 2·T·in·out FLOP.
constexpr int kV6Warps = 8;
constexpr int kV6Chunk = kV6Warps * 64 * kV5Batch;  // inputs per item: 2048
// Items in the ring. Session 7 run 4 (lm head, T 1): 3 items (74 KB of shared memory, 3 CTAs a
// SM) 54.1 µs, 4 items (93 KB, 2 CTAs) 57.3 µs; HYBRID_LINEAR_Q_V6_STAGES=4 takes 4.
constexpr int kV6Stages = 3;
constexpr int kV6CodeRow = kV6Chunk / 2 + 32;  // bytes per staged row of codes
constexpr size_t kV6MaxSmem = 227 * 1024;

// Bytes per staged row of scales (or biases) and per stage, for group size gs.
__host__ __device__ constexpr int v6_scale_row(int gs) {
  return kV6Chunk / gs * 2 + 16;
}
__host__ __device__ constexpr int v6_stage_bytes(int gs) {
  return 16 * kV6CodeRow + 32 * v6_scale_row(gs);
}

// Dynamic shared memory: the stages, staged x and its group sums as v5's, the warps' sums
// [2][kV6Warps][16 rows][8 tokens] f32, max|x| bits and the output factors [8] each.
size_t gemv_v6_smem(int64_t T, int64_t in, int gs, int stages = kV6Stages) {
  return size_t(stages) * v6_stage_bytes(gs) + static_cast<size_t>(T * (in / 8 + 1)) * 16 +
         static_cast<size_t>(in / gs) * 24 * 4 + size_t{2} * kV6Warps * 16 * 8 * 4 + 2 * 8 * 4;
}

template <int kGroupSpans, bool kScaleBf16, int kStages>
__global__ void __launch_bounds__(kV6Warps * 32) linear_q_gemv_v6_kernel(const GemvV5Params p) {
  constexpr int kGs = 64 * kGroupSpans, kScaleRow = v6_scale_row(kGs);
  constexpr int kStage = v6_stage_bytes(kGs), kStepGroups = kV5Batch / kGroupSpans;
  constexpr int kThreads = kV6Warps * 32;
  extern __shared__ uint4 v6_smem[];
  char* stages = reinterpret_cast<char*>(v6_smem);  // [kStages][kStage]
  const int rs = p.in / 8 + 1, groups = p.in / kGs;
  uint4* xs = reinterpret_cast<uint4*>(stages + kStages * kStage);   // [T][rs]
  float* xx = reinterpret_cast<float*>(xs + p.T * rs);               // [groups][24]
  float* partial = xx + groups * 24;                                 // [2][kV6Warps][16][8]
  int* xmax = reinterpret_cast<int*>(partial + 2 * kV6Warps * 128);  // [8]
  float* yscale = reinterpret_cast<float*>(xmax + 8);                // [8]

  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, c = lane % 4;
  const int tiles = (p.out + 15) / 16, chunks = (p.in + kV6Chunk - 1) / kV6Chunk;
  const int my_tiles = (tiles - static_cast<int>(blockIdx.x) + static_cast<int>(gridDim.x) - 1) /
                       static_cast<int>(gridDim.x);  // the grid has at most `tiles` CTAs
  const int items = my_tiles * chunks;  // item i: local tile i / chunks, chunk i % chunks

  // Every thread: its 16-byte pieces of the next item (when one is left), then one commit group
  // (empty past the last item, so that the wait below counts groups uniformly). Piece u of the
  // codes: row u / (W/32), piece u % (W/32) of the row's W/2 bytes (consecutive threads,
  // consecutive bytes; a whole chunk: rows t/64 + 4m, piece t % 64 of thread t); then the
  // 16·2·W/(8·gs) pieces of the scale and bias rows. Rows past out read row out - 1 (never
  // stored). The item's (stage, chunk, first row) advance by counters: no divisions.
  int next_item = 0, next_stage = 0, next_chunk = 0;
  int64_t next_row0 = int64_t{blockIdx.x} * 16;
  auto issue = [&]() {
    if (next_item < items) {
      char* st = stages + next_stage * kStage;
      const int k0 = next_chunk * kV6Chunk;
      const char* w0 = reinterpret_cast<const char*>(p.w) + k0 / 2;
      auto row_of = [&](int r) { return next_row0 + r < p.out ? next_row0 + r : p.out - 1; };
      int scale_pieces = kV6Chunk / kGs / 8;
      if (p.in - k0 >= kV6Chunk) {
        const int r0 = threadIdx.x / 64, k = threadIdx.x % 64;
#pragma unroll
        for (int m = 0; m < 4; ++m) {
          const int r = r0 + 4 * m;
          cp_async16(st + r * kV6CodeRow + 16 * k, w0 + row_of(r) * p.w_stride * 4 + 16 * k);
        }
      } else {  // the short last chunk of a row
        const int width = p.in - k0, code_pieces = width / 32;
        scale_pieces = width / kGs / 8;
        for (int u = threadIdx.x; u < 16 * code_pieces; u += kThreads) {
          const int r = u / code_pieces, k = u % code_pieces;
          cp_async16(st + r * kV6CodeRow + 16 * k, w0 + row_of(r) * p.w_stride * 4 + 16 * k);
        }
      }
      if (static_cast<int>(threadIdx.x) < 32 * scale_pieces) {  // rows 0-15 scales, 16-31 biases
        const int r = threadIdx.x / scale_pieces, k = threadIdx.x % scale_pieces;
        const int64_t row = row_of(r % 16);
        const unsigned short* src =
            r < 16 ? p.scales + row * p.s_stride : p.biases + row * p.b_stride;
        cp_async16(st + 16 * kV6CodeRow + r * kScaleRow + 16 * k,
                   reinterpret_cast<const char*>(src + k0 / kGs) + 16 * k);
      }
    }
    cp_commit();
    ++next_item;
    next_stage = next_stage + 1 == kStages ? 0 : next_stage + 1;
    if (++next_chunk == chunks) next_chunk = 0, next_row0 += int64_t{gridDim.x} * 16;
  };

  for (int i = 0; i < kStages - 1; ++i) issue();     // in flight while x is staged
  v5_stage_x<kGroupSpans>(p, xs, xx, xmax, yscale);  // ends with a block barrier

  const uint4* xrow = xs + (g < p.T ? g : 0) * rs + 2 * c;      // word 8j + 2c + w at xrow[8j + w]
  const float4* xc4 = reinterpret_cast<const float4*>(xx) + c;  // group q: xc4[6q]
  const float2* xx2 = reinterpret_cast<const float2*>(xx) + 8 + c;  // group q: xx2[12q]
  float acc[4] = {};  // (row g, token 2c), (g, 2c+1), (g+8, 2c), (g+8, 2c+1)
  // Warps 4-7 store the tile whose sums the previous item wrote (-1: none).
  auto store_tile = [&](int local_tile) {
    if (local_tile < 0 || threadIdx.x < 128) return;
    const int v = threadIdx.x - 128, t = v / 16, row = v % 16;
    const int64_t o = (blockIdx.x + int64_t{local_tile} * gridDim.x) * 16 + row;
    if (t < p.T && o < p.out) {
      const float* sums = partial + (local_tile & 1) * kV6Warps * 128;
      float sum = 0.0f;
#pragma unroll
      for (int w = 0; w < kV6Warps; ++w) sum += sums[w * 128 + row * 8 + t];
      sum *= yscale[t];
      if (p.bias) sum += load_any(p.bias, p.bt, o);
      store_any(p.y, p.yt, t * p.y_stride + o, sum);
    }
  };
  int pending_tile = -1, chunk = 0, local_tile = 0;
#pragma unroll 1
  for (int i = 0; i < items; ++i) {
    const int k0 = chunk * kV6Chunk;
    const char* st = stages + (i % kStages) * kStage;
    cp_wait<kStages - 2>();    // this thread's pieces of item i have landed
    __syncthreads();           // everyone's have; everyone is done with item i - 1's stage
    issue();                   // item i + kStages - 1, into item i - 1's stage
    store_tile(pending_tile);  // its sums were written before the barrier
    pending_tile = -1;
    if (warp * 64 * kV5Batch < p.in - k0) {
      // The lane's words 2c, 2c + 1 of spans 4·warp + k in rows g and g + 8.
      const char* cw = st + g * kV6CodeRow + warp * 32 * kV5Batch + c * 8;
      uint2 wa[kV5Batch], wb[kV5Batch];
#pragma unroll
      for (int k = 0; k < kV5Batch; ++k) {
        wa[k] = *reinterpret_cast<const uint2*>(cw + 32 * k);
        wb[k] = *reinterpret_cast<const uint2*>(cw + 8 * kV6CodeRow + 32 * k);
      }
      // Staged rows: scales of tile rows 0-15, then their biases. The warp's kStepGroups values
      // of a row are adjacent: one 8-byte (g64: 4 groups) or 4-byte (g128: 2) load per row.
      using ScaleWord = std::conditional_t<kStepGroups == 4, uint2, uint32_t>;
      const char* sc = st + 16 * kV6CodeRow + warp * kStepGroups * 2;
      const ScaleWord ws_a = *reinterpret_cast<const ScaleWord*>(sc + g * kScaleRow);
      const ScaleWord ws_b = *reinterpret_cast<const ScaleWord*>(sc + (g + 8) * kScaleRow);
      const ScaleWord wb_a = *reinterpret_cast<const ScaleWord*>(sc + (g + 16) * kScaleRow);
      const ScaleWord wb_b = *reinterpret_cast<const ScaleWord*>(sc + (g + 24) * kScaleRow);
      const int j0 = k0 / 64 + warp * kV5Batch;  // the warp's first span (of the whole row)
      v5_step_acc<kGroupSpans, kScaleBf16>(acc, wa, wb, ws_a, ws_b, wb_a, wb_b, j0, xrow, xc4, xx2);
    }
    if (chunk == chunks - 1) {  // the tile's sums, stored after the next barrier
      float* mine = partial + ((local_tile & 1) * kV6Warps + warp) * 128;
      mine[g * 8 + 2 * c] = acc[0];
      mine[g * 8 + 2 * c + 1] = acc[1];
      mine[(g + 8) * 8 + 2 * c] = acc[2];
      mine[(g + 8) * 8 + 2 * c + 1] = acc[3];
      acc[0] = acc[1] = acc[2] = acc[3] = 0.0f;
      pending_tile = local_tile;
    }
    if (++chunk == chunks) chunk = 0, ++local_tile;
  }
  cp_wait<0>();
  __syncthreads();
  store_tile(pending_tile);
}

// HYBRID_LINEAR_Q_V6=0 refuses v6 (v5 then runs). v6 takes v5's shapes (and its size threshold,
// HYBRID_LINEAR_Q_V5_MIN_CODES) whose chunks copy as whole 16-byte pieces.
Reason linear_q_gemv_v6_supports(const LinearQ& a) {
  static const bool off = env_is_zero("HYBRID_LINEAR_Q_V6");
  if (off) return std::string("HYBRID_LINEAR_Q_V6=0");
  if (Reason r = linear_q_gemv_v5_supports(a)) return str("as v5: ", *r);
  const int64_t T = a.x.size(0), in = a.x.size(1);
  const int gs = a.w.group_size;
  if (in % (8 * gs) != 0)
    return str("in=", in, " not a multiple of 8·group_size = ", 8 * gs,
               " (a chunk's scales are copied in 16-byte pieces)");
  if (!aligned16(a.w.weight.data()) || a.w.weight.stride(0) % 4 != 0)
    return std::string("packed rows not 16-byte aligned (v6 copies 16-byte pieces)");
  for (const Tensor* t : {&a.w.scales, &a.w.biases})
    if (!aligned16(t->data()) || t->stride(0) % 8 != 0)
      return std::string("scales / biases rows not 16-byte aligned (v6 copies 16-byte pieces)");
  if (gemv_v6_smem(T, in, gs, 4) > kV6MaxSmem)  // either ring (HYBRID_LINEAR_Q_V6_STAGES)
    return str("in=", in, ", T=", T, ": stages and staged x above ", kV6MaxSmem,
               " bytes of shared memory");
  return {};
}

template <int kGroupSpans, bool kScaleBf16, int kStages>
void launch_gemv_v6(const GemvV5Params& p, cudaStream_t stream) {
  const size_t smem = gemv_v6_smem(p.T, p.in, 64 * kGroupSpans, kStages);
  const auto kernel = linear_q_gemv_v6_kernel<kGroupSpans, kScaleBf16, kStages>;
  const int64_t tiles = (int64_t{p.out} + 15) / 16;
  const auto blocks = static_cast<unsigned>(
      persistent_blocks(reinterpret_cast<const void*>(kernel), kV6Warps * 32, smem, tiles));
  kernel<<<blocks, kV6Warps * 32, smem, stream>>>(p);
  HYBRID_CUDA_CHECK_LAUNCH();
}

template <int kGroupSpans, bool kScaleBf16>
struct LaunchV6 {
  static void run(const GemvV5Params& p, cudaStream_t stream) {
    // Tuning switch for a timing run: HYBRID_LINEAR_Q_V6_STAGES=4 (a 4-item ring: 2 CTAs a SM
    // at T 1 instead of 3). Read once per process.
    static const bool four = [] {
      const char* env = std::getenv("HYBRID_LINEAR_Q_V6_STAGES");
      return env && std::atoi(env) == 4;
    }();
    if (four)
      launch_gemv_v6<kGroupSpans, kScaleBf16, 4>(p, stream);
    else
      launch_gemv_v6<kGroupSpans, kScaleBf16, kV6Stages>(p, stream);
  }
};

void linear_q_gemv_v6_run(const LinearQ& a, Context& ctx) {
  dispatch_gemv_tc<LaunchV6>(a, ctx);
}

// ---- linear_q.gemv_v7: v5's warp-per-tile GEMV over a per-warp shared-memory ring ----------
//
// v6 (a block-wide ring, one barrier an item, 8 warps splitting each item's inputs) reached
// 76% of copy at the lm head, and 12 fewer loads an item did not move it (session 7 runs 4-6),
// which leaves the barrier that keeps the 8 warps in step. v7 has no barrier after
// the x staging: as v5 at parts = 1, a warp owns whole 16-row tiles (rows g, g + 8 per lane, all
// inputs, no cross-warp sum, stores from its accumulators), but its codes, scales and biases
// come through a ring of kV7Stages slices of its own in shared memory, filled by its own
// cp.async (codes: 4 x 16 bytes a lane a slice; scales and biases: one 8- (g64) or 4-byte (g128)
// piece a lane). A slice is one v5 step: 16 rows x 256 inputs.
//   slice: codes [16 rows][128 + 32 B] (row g + 1 eight banks on, as v6), then scales [16 rows]
//     and biases [16 rows] of 8 bytes (the step's 4 (g64) or 2 (g128) values).
//   per slice: cp.async.wait_group (this lane's pieces of slice i are in), __syncwarp (every
//     lane's are, and every lane is done with slice i - 1), the copies of slice
//     i + kV7Stages - 1 into slice i - 1's place, v5's math on slice i.
//   Tiles: warp n of the grid takes tiles n, n + W, ... (W warps in the grid).
// With 3 slices a warp (2 ahead: ~5 KB in flight a warp, none of it in registers) and 3 CTAs of 8
// warps a SM, ~120 KB a SM are requested at any time (v5: at most ~48 KB, from registers).
// v7 serves when the tiles alone fill the resident warps (v5's parts = 1: the lm heads); with
// fewer tiles v6 splits the inputs of a tile across warps instead.
// Session 7 run 7 (H200, the lm head at T 1): 52.7 µs against v6's 54.3 µs (the prediction was
// 46-50 µs: taking out v6's per-item barrier gained 3%).
//   y[t, o] = 2^e_t·Σ_groups (s·D[o, t, grp] + b·X[t, grp]) (+ bias[o]), as v5.
constexpr int kV7Warps = 8;
constexpr int kV7Stages = 3;
constexpr int kV7CodeRow = 32 * kV5Batch + 32;      // bytes per staged row of a slice's codes
constexpr int kV7Slice = 16 * kV7CodeRow + 32 * 8;  // codes, then 32 scale / bias rows of 8 B
constexpr size_t kV7MaxSmem = 227 * 1024;

// Dynamic shared memory: the warps' rings, then staged x and its group sums as v5's, max|x| bits
// and the output factors [8] each.
size_t gemv_v7_smem(int64_t T, int64_t in, int gs) {
  return size_t{kV7Warps} * kV7Stages * kV7Slice + static_cast<size_t>(T * (in / 8 + 1)) * 16 +
         static_cast<size_t>(in / gs) * 24 * 4 + 2 * 8 * 4;
}

// `bytes` (4, 8 or 16) global -> shared without registers, through L1 (cp.async.ca: the only
// form for 4 and 8 bytes).
template <int kBytes>
__device__ __forceinline__ void cp_async_ca(void* dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], %2;\n" ::"r"(smem_u32(dst)), "l"(src),
               "n"(kBytes)
               : "memory");
}

template <int kGroupSpans, bool kScaleBf16>
__global__ void __launch_bounds__(kV7Warps * 32) linear_q_gemv_v7_kernel(const GemvV5Params p) {
  constexpr int kGs = 64 * kGroupSpans, kStepGroups = kV5Batch / kGroupSpans;
  constexpr int kScaleBytes = kStepGroups * 2;  // a row's values of one slice: 8 or 4
  using ScaleWord = std::conditional_t<kStepGroups == 4, uint2, uint32_t>;
  extern __shared__ uint4 v7_smem[];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, c = lane % 4;
  char* ring = reinterpret_cast<char*>(v7_smem) + warp * kV7Stages * kV7Slice;
  const int rs = p.in / 8 + 1, groups = p.in / kGs;
  uint4* xs = reinterpret_cast<uint4*>(reinterpret_cast<char*>(v7_smem) +
                                       kV7Warps * kV7Stages * kV7Slice);  // [T][rs]
  float* xx = reinterpret_cast<float*>(xs + p.T * rs);                    // [groups][24]
  int* xmax = reinterpret_cast<int*>(xx + groups * 24);                   // [8]
  float* yscale = reinterpret_cast<float*>(xmax + 8);                     // [8]

  const int tiles = (p.out + 15) / 16, slices = p.in / (64 * kV5Batch);
  const int warps = gridDim.x * kV7Warps, first_tile = blockIdx.x * kV7Warps + warp;
  const int my_tiles = first_tile < tiles ? (tiles - first_tile + warps - 1) / warps : 0;
  const int items = my_tiles * slices;  // the warp's slices, tile by tile

  // The lane's pieces of the next slice (when one is left), then one commit group (empty past
  // the last, so that the wait counts groups uniformly). Codes: rows lane / 8 + 4m, piece
  // lane % 8 of the row's 128 bytes; scales (lanes 0-15) and biases (16-31) of row lane % 16.
  // Rows past out read row out - 1 (never stored). By counters: no divisions.
  int next_item = 0, next_stage = 0, next_slice = 0;
  int64_t next_row0 = int64_t{first_tile} * 16;
  auto issue = [&]() {
    if (next_item < items) {
      char* st = ring + next_stage * kV7Slice;
      auto row_of = [&](int r) { return next_row0 + r < p.out ? next_row0 + r : p.out - 1; };
      const int k0 = next_slice * 64 * kV5Batch;  // the slice's first input
      const char* w0 = reinterpret_cast<const char*>(p.w) + k0 / 2 + 16 * (lane % 8);
#pragma unroll
      for (int m = 0; m < 4; ++m) {
        const int r = lane / 8 + 4 * m;
        cp_async16(st + r * kV7CodeRow + 16 * (lane % 8), w0 + row_of(r) * p.w_stride * 4);
      }
      const int64_t row = row_of(lane % 16);
      const unsigned short* src =
          lane < 16 ? p.scales + row * p.s_stride : p.biases + row * p.b_stride;
      cp_async_ca<kScaleBytes>(st + 16 * kV7CodeRow + lane * 8, src + k0 / kGs);
    }
    cp_commit();
    ++next_item;
    next_stage = next_stage + 1 == kV7Stages ? 0 : next_stage + 1;
    if (++next_slice == slices) next_slice = 0, next_row0 += int64_t{warps} * 16;
  };

  for (int i = 0; i < kV7Stages - 1; ++i) issue();   // in flight while x is staged
  v5_stage_x<kGroupSpans>(p, xs, xx, xmax, yscale);  // ends with a block barrier

  const uint4* xrow = xs + (g < p.T ? g : 0) * rs + 2 * c;      // word 8j + 2c + w at xrow[8j + w]
  const float4* xc4 = reinterpret_cast<const float4*>(xx) + c;  // group q: xc4[6q]
  const float2* xx2 = reinterpret_cast<const float2*>(xx) + 8 + c;  // group q: xx2[12q]
  float acc[4] = {};  // (row g, token 2c), (g, 2c+1), (g+8, 2c), (g+8, 2c+1)
  int slice = 0, stage = 0;
  int64_t o0 = int64_t{first_tile} * 16;  // the current tile's first row
#pragma unroll 1
  for (int i = 0; i < items; ++i) {
    const char* st = ring + stage * kV7Slice;
    cp_wait<kV7Stages - 2>();  // this lane's pieces of slice i have landed
    __syncwarp();              // every lane's have; every lane is done with slice i - 1
    issue();                   // slice i + kV7Stages - 1, into slice i - 1's place
    const char* cw = st + g * kV7CodeRow + c * 8;  // words 2c, 2c + 1 of span k at + 32k
    uint2 wa[kV5Batch], wb[kV5Batch];
#pragma unroll
    for (int k = 0; k < kV5Batch; ++k) {
      wa[k] = *reinterpret_cast<const uint2*>(cw + 32 * k);
      wb[k] = *reinterpret_cast<const uint2*>(cw + 8 * kV7CodeRow + 32 * k);
    }
    const char* sc = st + 16 * kV7CodeRow;  // rows 0-15 scales, 16-31 biases, 8 bytes apart
    const ScaleWord ws_a = *reinterpret_cast<const ScaleWord*>(sc + g * 8);
    const ScaleWord ws_b = *reinterpret_cast<const ScaleWord*>(sc + (g + 8) * 8);
    const ScaleWord wb_a = *reinterpret_cast<const ScaleWord*>(sc + (g + 16) * 8);
    const ScaleWord wb_b = *reinterpret_cast<const ScaleWord*>(sc + (g + 24) * 8);
    v5_step_acc<kGroupSpans, kScaleBf16>(acc, wa, wb, ws_a, ws_b, wb_a, wb_b, slice * kV5Batch,
                                         xrow, xc4, xx2);
    stage = stage + 1 == kV7Stages ? 0 : stage + 1;
    if (++slice == slices) {  // the tile is done: store from the accumulators
      v5_store_tile(p, acc, o0, yscale);
      acc[0] = acc[1] = acc[2] = acc[3] = 0.0f;
      slice = 0;
      o0 += int64_t{warps} * 16;
    }
  }
  cp_wait<0>();  // no copy outlives the block (the empty groups included)
}

// v7's resident CTAs a SM for T tokens and in inputs (cached; its shared-memory limit raised).
template <int kGroupSpans, bool kScaleBf16>
int gemv_v7_per_sm(int64_t T, int64_t in) {
  return resident_blocks(linear_q_gemv_v7_kernel<kGroupSpans, kScaleBf16>, kV7Warps * 32,
                         gemv_v7_smem(T, in, 64 * kGroupSpans));
}

int gemv_v7_per_sm(const LinearQ& a) {
  const int64_t T = a.x.size(0), in = a.x.size(1);
  const bool sbf = a.w.scales.dtype() == DType::bf16;
  if (a.w.group_size == 64)
    return sbf ? gemv_v7_per_sm<1, true>(T, in) : gemv_v7_per_sm<1, false>(T, in);
  return sbf ? gemv_v7_per_sm<2, true>(T, in) : gemv_v7_per_sm<2, false>(T, in);
}

// HYBRID_LINEAR_Q_V7=0 refuses v7 (v6 then runs); HYBRID_LINEAR_Q_V7_ANY=1 lifts the rule that
// the tiles fill the resident warps (for its GPU tests on small shapes).
Reason linear_q_gemv_v7_supports(const LinearQ& a) {
  static const bool off = env_is_zero("HYBRID_LINEAR_Q_V7");
  if (off) return std::string("HYBRID_LINEAR_Q_V7=0");
  if (Reason r = linear_q_gemv_v5_supports(a)) return str("as v5: ", *r);
  const int64_t T = a.x.size(0), in = a.x.size(1), out = a.y.size(1);
  if (!aligned16(a.w.weight.data()) || a.w.weight.stride(0) % 4 != 0)
    return std::string("packed rows not 16-byte aligned (v7 copies 16-byte pieces)");
  if (gemv_v7_smem(T, in, a.w.group_size) > kV7MaxSmem)
    return str("in=", in, ", T=", T, ": rings and staged x above ", kV7MaxSmem,
               " bytes of shared memory");
  static const bool any = [] {
    const char* env = std::getenv("HYBRID_LINEAR_Q_V7_ANY");
    return env && std::atoi(env) == 1;
  }();
  const int64_t tiles = (out + 15) / 16;
  const int64_t resident = int64_t{sm_count()} * gemv_v7_per_sm(a) * kV7Warps;
  if (!any && tiles < resident)
    return str("out=", out, ": ", tiles, " tiles below the ", resident,
               " resident warps (v6 splits a tile's inputs across warps)");
  return {};
}

template <int kGroupSpans, bool kScaleBf16>
struct LaunchV7 {
  static void run(const GemvV5Params& p, cudaStream_t stream) {
    const auto kernel = linear_q_gemv_v7_kernel<kGroupSpans, kScaleBf16>;
    const size_t smem = gemv_v7_smem(p.T, p.in, 64 * kGroupSpans);
    const int64_t ctas_of_tiles = ((int64_t{p.out} + 15) / 16 + kV7Warps - 1) / kV7Warps;
    const auto blocks = static_cast<unsigned>(persistent_blocks(
        reinterpret_cast<const void*>(kernel), kV7Warps * 32, smem, ctas_of_tiles));
    kernel<<<blocks, kV7Warps * 32, smem, stream>>>(p);
    HYBRID_CUDA_CHECK_LAUNCH();
  }
};

void linear_q_gemv_v7_run(const LinearQ& a, Context& ctx) {
  dispatch_gemv_tc<LaunchV7>(a, ctx);
}

// Tiled: rows of W dequantized kChunk-wise into the workspace (compute dtype c), then
// y[:, o0:o0+n] = x_c · W_cᵀ by cuBLASLt (beta = 1 over the prefilled bias when present).
void linear_q_tiled_run(const LinearQ& a, Context& ctx) {
  const int64_t T = a.x.size(0), in = a.x.size(1), out = a.y.size(1);
  if (T == 0 || out == 0) return;
  const DType xt = a.x.dtype(), yt = a.y.dtype();
  const DType c = (xt == yt && xt != DType::f32) ? xt : DType::f32;
  const size_t cs = dtype_size(c);
  // Rows per chunk: about 64 MiB of dequantized W, a multiple of 128 rows.
  const int64_t chunk = std::min<int64_t>(
      out, std::max<int64_t>(128, (int64_t{64} << 20) / std::max<int64_t>(1, in * cs) / 128 * 128));
  const bool convert_x = c != xt;
  const size_t x_bytes = convert_x ? align_up(static_cast<size_t>(T * in) * 4, 256) : 0;
  const size_t w_bytes = align_up(static_cast<size_t>(chunk * in) * cs, 256);
  char* ws = static_cast<char*>(ctx.workspace(x_bytes + w_bytes + kLtWorkspaceBytes));
  float* xf = convert_x ? reinterpret_cast<float*>(ws) : nullptr;
  void* wc = ws + x_bytes;
  void* lt_ws = ws + x_bytes + w_bytes;
  if (convert_x) to_f32_rows(ctx, a.x, xf, T);
  const void* xc = convert_x ? static_cast<const void*>(xf) : a.x.data();
  const int64_t ldx = convert_x ? in : a.x.stride(0);
  float beta = 0.0f;
  if (a.bias.defined()) {
    fill_bias_rows(ctx, a.bias.dtype(), a.bias.data(), yt, a.y.data(), a.y.stride(0), T, out);
    beta = 1.0f;
  }
  for (int64_t o0 = 0; o0 < out; o0 += chunk) {
    const int64_t n = std::min(chunk, out - o0);
    dispatch_float(c, LinearQ::op_name, [&](auto tc) {
      using Tc = decltype(tc);
      dequantize_into<Tc>(ctx, a.w, o0, n, in, static_cast<Tc*>(wc), in);
    });
    void* yo = static_cast<char*>(a.y.data()) + o0 * dtype_size(yt);
    if (!lt_linear(ctx, c, yt, xc, ldx, wc, in, yo, a.y.stride(0), T, in, n, beta, lt_ws,
                   kLtWorkspaceBytes)) {
      // No cuBLASLt algorithm: the CUDA-core GEMM (it adds the bias itself, so no beta).
      linear_fallback(ctx, convert_x ? DType::f32 : xt, xc, ldx, c, wc, in,
                      a.bias.defined() ? a.bias.dtype() : DType::f32,
                      a.bias.defined() ? static_cast<const char*>(a.bias.data()) +
                                             o0 * dtype_size(a.bias.dtype())
                                       : nullptr,
                      yt, yo, a.y.stride(0), T, in, n);
    }
  }
}

}  // namespace

void register_quant(Registry& r) {
  r.add<Quantize>("quantize.cuda", DeviceType::cuda, 0, nullptr, quantize_run);
  r.add<Dequantize>("dequantize.cuda", DeviceType::cuda, 0, nullptr, dequantize_run);
  r.add<LinearQ>("linear_q.gemv_v7", DeviceType::cuda, 60, linear_q_gemv_v7_supports,
                 linear_q_gemv_v7_run);
  r.add<LinearQ>("linear_q.gemv_v6", DeviceType::cuda, 50, linear_q_gemv_v6_supports,
                 linear_q_gemv_v6_run);
  r.add<LinearQ>("linear_q.gemv_v5", DeviceType::cuda, 40, linear_q_gemv_v5_supports,
                 linear_q_gemv_v5_run);
  r.add<LinearQ>("linear_q.gemv_v4", DeviceType::cuda, 30, linear_q_gemv_v4_supports,
                 linear_q_gemv_v4_run);
  r.add<LinearQ>("linear_q.gemv_v3", DeviceType::cuda, 20, linear_q_gemv_v3_supports,
                 linear_q_gemv_run<true>);
  r.add<LinearQ>("linear_q.gemv", DeviceType::cuda, 10, linear_q_gemv_supports,
                 linear_q_gemv_run<false>);
  r.add<LinearQ>("linear_q.tiled", DeviceType::cuda, 0, nullptr, linear_q_tiled_run);
}

}  // namespace hybrid::cuda
