// CUDA: quantize, dequantize, linear_q (MLX affine 4 / 8-bit groups).
//
// quantize.cuda: one thread per (row, group); the CPU kernel's f32 operations in its order with
//   __fsub_rn / __fdiv_rn / rintf (no contraction), so codes, scales and biases match bit for bit.
// dequantize.cuda: one thread per packed word; w = __fadd_rn(__fmul_rn(s, q), b) as the CPU.
// linear_q.gemv (T <= 8): x is converted to an f32 copy [T, in] in the workspace; one warp per
//   kRows = 2 output rows streams their packed words once for all tokens: each lane loads one
//   16-byte chunk (4 u32 words = 32 4-bit / 16 8-bit codes, always inside one group) per row,
//   decodes codes in registers (exponent-trick int -> float), and accumulates
//   y[t, o] += s·Σ x·q + b·Σ x per chunk. Bytes: out·in·bits/8 + scales / biases; 2·T·in·out FLOP.
//   4-byte loads when the rows are not 16-byte aligned.
// linear_q.tiled (T > 8): W is dequantized a block of rows at a time into the workspace (bf16 /
//   f16 when x and y are both that dtype, else f32) and multiplied by cuBLASLt (f32
//   accumulation) into y's columns; 2·T·in·out FLOP on tensor cores for 16-bit activations.
#include <algorithm>

#include "cuda/common.cuh"
#include "cuda/dtype.cuh"
#include "cuda/kernels.h"
#include "cuda/linear_impl.cuh"
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

// The GEMV's token template: 1, 2, 4 or 8 (xf holds that many rows).
int64_t gemv_tokens(int64_t T) {
  return T <= 1 ? 1 : T <= 2 ? 2 : T <= 4 ? 4 : 8;
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

struct GemvParams {
  const float* xf;    // [T, in] f32, rows packed, 16-byte aligned
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
};

constexpr int kGemvWarps = 4;
// Rows per warp group: 2 (x loads shared by two rows), 1 at 8 tokens (registers).
constexpr int gemv_rows(int tokens) {
  return tokens >= 8 ? 1 : 2;
}

// y[t, o] = Σ_chunks s·Σ_k x[t, j_k]·q[o, j_k] + b·Σ_k x[t, j_k] (+ bias[o]).
// `split` (1, 2 or 4) warps share a group of kGemvRows rows, splitting its chunks (long rows: more
// loads in flight); a block holds kGemvWarps / split row groups. Lane l of part q owns chunks
// q·32 + l, + split·32, ... (kV words each); the parts' sums are added in part order (shared
// memory), so the result does not depend on timing.
template <int kBits, int kV, int kNT>
__global__ void __launch_bounds__(kGemvWarps * 32, kNT >= 8   ? 2
                                                   : kNT >= 4 ? 3
                                                   : kNT >= 2 ? 6
                                                              : 8)
    linear_q_gemv_kernel(const GemvParams p, int split) {
  constexpr int kPerWord = 32 / kBits, kCodes = kV * kPerWord;  // codes per chunk
  constexpr int kGemvRows = gemv_rows(kNT);
  __shared__ float partial[kGemvWarps][kGemvRows][kNT];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int group = warp / split, part = warp % split;
  const int64_t o0 = (static_cast<int64_t>(blockIdx.x) * (kGemvWarps / split) + group) * kGemvRows;
  const bool active = o0 < p.out;  // warp-uniform
  const int chunks = p.in / kCodes, first = part * 32 + lane, step = split * 32;
  float acc[kGemvRows][kNT] = {};
  // Chunk c of each row: its words and its group's scale and bias.
  auto load_chunk = [&](int c, uint32_t(&wd)[kGemvRows][kV], float(&s)[kGemvRows],
                        float(&b)[kGemvRows]) {
    const int g = c * kCodes / p.gs;
#pragma unroll
    for (int r = 0; r < kGemvRows; ++r) {
      // Rows past out (tail, or a whole inactive group) read row 0 instead; never stored.
      const int64_t o = o0 + r < p.out ? o0 + r : 0;
      const uint32_t* src = p.w + o * p.w_stride + static_cast<int64_t>(c) * kV;
      if constexpr (kV == 4) {
        const uint4 v = __ldg(reinterpret_cast<const uint4*>(src));
        wd[r][0] = v.x, wd[r][1] = v.y, wd[r][2] = v.z, wd[r][3] = v.w;
      } else {
#pragma unroll
        for (int k = 0; k < kV; ++k) wd[r][k] = __ldg(src + k);
      }
      s[r] = load_any(p.scales, p.st, o * p.s_stride + g);
      b[r] = load_any(p.biases, p.st, o * p.b_stride + g);
    }
  };
  uint32_t next_wd[kGemvRows][kV] = {};
  float next_s[kGemvRows] = {}, next_b[kGemvRows] = {};
  if (first < chunks) load_chunk(first, next_wd, next_s, next_b);
    // Software pipelined: chunk c + step's loads are in flight while chunk c is decoded.
#pragma unroll 1
  for (int c = first; c < chunks; c += step) {
    uint32_t wd[kGemvRows][kV];
    float s[kGemvRows], b[kGemvRows];
#pragma unroll
    for (int r = 0; r < kGemvRows; ++r) {
      s[r] = next_s[r], b[r] = next_b[r];
#pragma unroll
      for (int k = 0; k < kV; ++k) wd[r][k] = next_wd[r][k];
    }
    if (c + step < chunks) load_chunk(c + step, next_wd, next_s, next_b);
    float dot[kGemvRows][kNT] = {}, xsum[kNT] = {};
#pragma unroll
    for (int k = 0; k < kV; ++k) {
      float qf[kGemvRows][kPerWord];  // this word's codes of each row
#pragma unroll
      for (int r = 0; r < kGemvRows; ++r) decode_word<kBits>(wd[r][k], qf[r]);
#pragma unroll
      for (int t = 0; t < kNT; ++t) {  // rows T.. of xf are zero (padded to kNT rows)
        const float* xr =
            p.xf + static_cast<int64_t>(t) * p.in + static_cast<int64_t>(c) * kCodes + k * kPerWord;
#pragma unroll
        for (int q4 = 0; q4 < kPerWord / 4; ++q4) {
          const float4 xv = __ldg(reinterpret_cast<const float4*>(xr + q4 * 4));
          xsum[t] += (xv.x + xv.y) + (xv.z + xv.w);
#pragma unroll
          for (int r = 0; r < kGemvRows; ++r) {
            dot[r][t] += xv.x * qf[r][q4 * 4 + 0];
            dot[r][t] += xv.y * qf[r][q4 * 4 + 1];
            dot[r][t] += xv.z * qf[r][q4 * 4 + 2];
            dot[r][t] += xv.w * qf[r][q4 * 4 + 3];
          }
        }
      }
    }
#pragma unroll
    for (int t = 0; t < kNT; ++t)
#pragma unroll
      for (int r = 0; r < kGemvRows; ++r) acc[r][t] += s[r] * dot[r][t] + b[r] * xsum[t];
  }
#pragma unroll
  for (int r = 0; r < kGemvRows; ++r)
#pragma unroll
    for (int t = 0; t < kNT; ++t)
#pragma unroll
      for (int m = 16; m > 0; m >>= 1) acc[r][t] += __shfl_xor_sync(0xffffffffu, acc[r][t], m);
  if (split > 1) {  // block-uniform
    if (lane == 0)
#pragma unroll
      for (int r = 0; r < kGemvRows; ++r)
#pragma unroll
        for (int t = 0; t < kNT; ++t) partial[warp][r][t] = acc[r][t];
    __syncthreads();
    if (part != 0) return;
#pragma unroll
    for (int r = 0; r < kGemvRows; ++r)
#pragma unroll
      for (int t = 0; t < kNT; ++t) {
        float v = partial[warp][r][t];
#pragma unroll
        for (int q = 1; q < kGemvWarps; ++q)
          if (q < split) v += partial[warp + q][r][t];
        acc[r][t] = v;
      }
  }
  if (lane != 0 || !active) return;
#pragma unroll
  for (int r = 0; r < kGemvRows; ++r) {
    const int64_t o = o0 + r;
    if (o >= p.out) break;
    const float bo = p.bias ? load_any(p.bias, p.bt, o) : 0.0f;
#pragma unroll
    for (int t = 0; t < kNT; ++t)
      if (t < p.T) store_any(p.y, p.yt, t * p.y_stride + o, acc[r][t] + bo);
  }
}

bool aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

template <int kBits, int kV>
void launch_gemv(const GemvParams& p, cudaStream_t stream) {
  // Parts per row group: each lane gets about 2 chunks of a long row, at most 4 warps per group.
  const int chunks = p.in / (kV * 32 / kBits);
  const int split = chunks >= 256 ? 4 : chunks >= 128 ? 2 : 1;
  const int64_t nt = gemv_tokens(p.T);  // must match the rows of xf
  const int64_t rows_per_block = kGemvWarps / split * gemv_rows(static_cast<int>(nt));
  const auto blocks = static_cast<unsigned>((p.out + rows_per_block - 1) / rows_per_block);
  if (nt == 1)
    linear_q_gemv_kernel<kBits, kV, 1><<<blocks, kGemvWarps * 32, 0, stream>>>(p, split);
  else if (nt == 2)
    linear_q_gemv_kernel<kBits, kV, 2><<<blocks, kGemvWarps * 32, 0, stream>>>(p, split);
  else if (nt == 4)
    linear_q_gemv_kernel<kBits, kV, 4><<<blocks, kGemvWarps * 32, 0, stream>>>(p, split);
  else
    linear_q_gemv_kernel<kBits, kV, 8><<<blocks, kGemvWarps * 32, 0, stream>>>(p, split);
  HYBRID_CUDA_CHECK_LAUNCH();
}

constexpr int64_t kGemvMaxTokens = 8;

Reason linear_q_gemv_supports(const LinearQ& a) {
  if (a.x.size(0) > kGemvMaxTokens)
    return str("T=", a.x.size(0), " above ", kGemvMaxTokens, " (the tiled variant runs it)");
  if (a.x.size(1) > (int64_t{1} << 30) || a.y.size(1) > (int64_t{1} << 30))
    return std::string("in or out above 2^30");
  return {};
}

void linear_q_gemv_run(const LinearQ& a, Context& ctx) {
  const int64_t T = a.x.size(0), in = a.x.size(1), out = a.y.size(1);
  if (T == 0 || out == 0) return;
  const int64_t rows = gemv_tokens(T);
  auto* xf = static_cast<float*>(ctx.workspace(static_cast<size_t>(rows * in) * 4 + 16));
  to_f32_rows(ctx, a.x, xf, rows);
  const QuantizedWeight& q = a.w;
  GemvParams p{xf,
               q.weight.data_as<const uint32_t>(),
               q.weight.stride(0),
               q.scales.data(),
               q.biases.data(),
               q.scales.stride(0),
               q.biases.stride(0),
               q.scales.dtype(),
               a.bias.defined() ? a.bias.data() : nullptr,
               a.bias.defined() ? a.bias.dtype() : DType::f32,
               a.y.data(),
               a.y.dtype(),
               a.y.stride(0),
               static_cast<int>(T),
               static_cast<int>(in),
               static_cast<int>(out),
               q.group_size};
  const bool vec = aligned16(p.w) && p.w_stride % 4 == 0 && (in * q.bits / 32) % 4 == 0;
  const cudaStream_t stream = as_stream(ctx.stream());
  if (q.bits == 4) {
    if (vec)
      launch_gemv<4, 4>(p, stream);
    else
      launch_gemv<4, 1>(p, stream);
  } else {
    if (vec)
      launch_gemv<8, 4>(p, stream);
    else
      launch_gemv<8, 1>(p, stream);
  }
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
  r.add<LinearQ>("linear_q.gemv", DeviceType::cuda, 10, linear_q_gemv_supports, linear_q_gemv_run);
  r.add<LinearQ>("linear_q.tiled", DeviceType::cuda, 0, nullptr, linear_q_tiled_run);
}

}  // namespace hybrid::cuda
