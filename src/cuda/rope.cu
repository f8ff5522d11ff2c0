// CUDA: rope (NeoX rotate-half over the first rotary_dim dims of each head).
//
// Per token t (p = positions[t]) and i < half = rotary_dim / 2, exactly as cpu/rope_math.h:
//   inv_freq[i] = fl32(1 / fl32(theta ^ fl32(2i / rotary_dim)))   (the power in f64)
//   a = fl32(fl32(p) · inv_freq[i]);  cos a, sin a in f64, rounded to f32
//   out[i] = x[i]·cos a − x[i+half]·sin a,  out[i+half] = x[i+half]·cos a + x[i]·sin a
//   out[d] = x[d] for d >= rotary_dim (not touched when out is x)
// The angle can reach 2^18 rad (positions up to 262143): cos/sin are the accurate f64 functions
// (full range reduction), never the fast f32 intrinsics. The products and sums of the rotation are
// rounded one by one (__fmul_rn / __fadd_rn) so that they round as the CPU reference does.
//
// rope.cuda: one block of 256 threads per 8 tokens (4 when rotary_dim > 1024). Phase 1 computes the
// tokens·half (cos, sin) pairs into shared memory (f64 pow + sincos, shared by all H heads); phase
// 2 rotates (token, head, vector) items, two per thread and pass with their loads issued first, a
// vector being V = 16 B / sizeof(T) elements of the first half and the V matching ones of the
// second half (two 16-byte loads and stores), or V = 1 when a row is not 16-byte aligned or half %
// V != 0. Out of place, phase 3 copies the pass-through dims. (inv_freq is computed once per block
// into shared memory too.) Bytes: T·H·rotary_dim·(read + write) (+ T·H·(D − rotary_dim)·(read +
// write) out of place); memory-bound. x and out may differ in dtype (V counts x elements).
// supports(): rotary_dim <= 2048 (shared memory (2·tokens + 1)·half·4 B <= 36 KiB).
#include <type_traits>

#include "cpu/rope_math.h"
#include "cuda/common.cuh"
#include "cuda/dtype.cuh"
#include "cuda/elementwise_vec.cuh"
#include "cuda/kernels.h"
#include "hybrid/ops/rope.h"

namespace hybrid::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kTok = 4;            // tokens per block when rotary_dim > kTok8Rotary
constexpr int kTokWide = 8;        // tokens per block for rotary_dim <= kTok8Rotary
constexpr int kTok8Rotary = 1024;  // (2·8 + 1)·512·4 B = 34 KiB of shared memory
constexpr int64_t kMaxRotary = 2048;
constexpr int kHostFreqMax = 128;  // inv_freq values HostFreq carries (rotary_dim <= 256)

struct RopeParams {
  const void* x;  // [T, H, D]
  int64_t xs0, xs1;
  void* out;  // [T, H, D]
  int64_t os0, os1;
  const int32_t* positions;  // [T]
  int64_t pos_stride;
  int64_t T;
  int H, D, rotary_dim;
  float theta;
  bool copy_tail;  // out is not x: copy dims [rotary_dim, D)
  int tok;         // tokens per block: kTok or kTokWide
};
struct HostFreq {  // kHostFreq: inv_freq[i], i < half, from the host
  float inv_freq[kHostFreqMax];
};
struct NoHostFreq {};

// kEarly (rope.cuda_v3): the first pass's 4 loads per thread of phase 2 are issued before phase 1,
// so the f64 pow + sincos of phase 1 (a few µs of dependent latency per block; at 8 tokens x 16
// heads x rotary 64 the whole grid is one wave, so v2 moves no data during it) overlap the DRAM
// round trip. Same arithmetic, same results.
// kHostFreq (with kEarly, half <= kHostFreqMax; the default since session 22,
// HYBRID_ROPE_HOST_FREQ=0 turns it off): inv_freq comes from the host (cpu/rope_math.h's
// rope_inv_freq, the CPU reference's own function, so the values are the same bits) in the
// parameters, copied to shared memory: the f64 pow leaves each block's dependent chain (phase 1 is
// then a copy, the barrier and the sincos). Why: without it the kernel streamed at 76.5% of the
// copy ceiling at T 65536 (session 21 run 6); 256 threads at ~56 registers leave 4 CTAs per SM,
// and a block's loads land long before its phase 1 ends, so the SM's bytes in flight fell while
// its blocks computed. Session 22 run 2, same run, alternated: T 65536 83.0 -> 77.3 µs (82.2% of
// the copy ceiling), T 8192 13.4 -> 12.1.
template <class Tx, class To, int V, bool kEarly, bool kHostFreq = false>
__global__ void __launch_bounds__(kThreads)
    rope_kernel(RopeParams p, std::conditional_t<kHostFreq, HostFreq, NoHostFreq> host) {
  extern __shared__ float shared[];
  const int half = p.rotary_dim / 2;
  float* inv_freq = shared;   // [half]
  float* cs = shared + half;  // [tokens, half, 2]: cos, sin
  const int64_t t0 = int64_t{blockIdx.x} * p.tok;
  const int ntok = static_cast<int>(p.T - t0 < p.tok ? p.T - t0 : p.tok);

  // Phase 2's items: (token, head, vector of V elements of the first half). Each thread takes 2
  // items per pass (items it and it + kThreads) and issues their 4 loads before any math.
  const int nvec = half / V;
  const int items = ntok * p.H * nvec;
  vec::Raw<Tx, V> r0[2], r1[2];
  int64_t xoff[2], ooff[2];
  int cs_at[2];
  auto issue = [&](int it0) {
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      const int it = it0 + u * kThreads;
      xoff[u] = -1;
      if (it >= items) continue;
      const int tok = it / (p.H * nvec), rem = it % (p.H * nvec);
      const int h = rem / nvec, i0 = (rem % nvec) * V;
      const int64_t t = t0 + tok;
      xoff[u] = t * p.xs0 + h * p.xs1 + i0;
      ooff[u] = t * p.os0 + h * p.os1 + i0;
      cs_at[u] = 2 * (tok * half + i0);
      const Tx* xr = static_cast<const Tx*>(p.x) + xoff[u];
      vec::load(xr, r0[u]);
      vec::load(xr + half, r1[u]);
    }
  };
  if constexpr (kEarly) issue(threadIdx.x);

  // Phase 1: inv_freq[i], then cos / sin of every (token, i) of the block.
  for (int i = threadIdx.x; i < half; i += kThreads) {
    if constexpr (kHostFreq) {
      inv_freq[i] = host.inv_freq[i];
    } else {
      const float expo = static_cast<float>(2 * i) / static_cast<float>(p.rotary_dim);
      inv_freq[i] =
          1.0f / static_cast<float>(pow(static_cast<double>(p.theta), static_cast<double>(expo)));
    }
  }
  __syncthreads();
  for (int e = threadIdx.x; e < ntok * half; e += kThreads) {
    const int tok = e / half, i = e % half;
    const int32_t pos = p.positions[(t0 + tok) * p.pos_stride];
    const float angle = __fmul_rn(static_cast<float>(pos), inv_freq[i]);
    double s, c;
    sincos(static_cast<double>(angle), &s, &c);
    cs[2 * e] = static_cast<float>(c);
    cs[2 * e + 1] = static_cast<float>(s);
  }
  __syncthreads();

  // Phase 2: rotate (kEarly: the first pass's loads are already in flight).
  for (int it0 = threadIdx.x; it0 < items; it0 += 2 * kThreads) {
    if (!kEarly || it0 != static_cast<int>(threadIdx.x)) issue(it0);
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      if (xoff[u] < 0) continue;
      float x0[V], x1[V], y0[V], y1[V];
      vec::to_floats(r0[u], x0);
      vec::to_floats(r1[u], x1);
      const float* csr = cs + cs_at[u];
#pragma unroll
      for (int k = 0; k < V; ++k) {
        const float c = csr[2 * k], s = csr[2 * k + 1];
        y0[k] = __fadd_rn(__fmul_rn(x0[k], c), -__fmul_rn(x1[k], s));
        y1[k] = __fadd_rn(__fmul_rn(x1[k], c), __fmul_rn(x0[k], s));
      }
      vec::Raw<To, V> o0, o1;
      vec::from_floats(y0, o0);
      vec::from_floats(y1, o1);
      To* orow = static_cast<To*>(p.out) + ooff[u];
      vec::store(orow, o0);
      vec::store(orow + half, o1);
    }
  }

  // Phase 3 (out of place): out[d] = x[d] for d in [rotary_dim, D).
  if (p.copy_tail) {
    const int tail = p.D - p.rotary_dim;
    for (int it = threadIdx.x; it < ntok * p.H * tail; it += kThreads) {
      const int tok = it / (p.H * tail), rem = it % (p.H * tail);
      const int h = rem / tail, d = p.rotary_dim + rem % tail;
      const int64_t t = t0 + tok;
      static_cast<To*>(p.out)[t * p.os0 + h * p.os1 + d] =
          from_f32<To>(to_f32(static_cast<const Tx*>(p.x)[t * p.xs0 + h * p.xs1 + d]));
    }
  }
}

// v3: rotary_dim <= kTok8Rotary (8 tokens per block); larger ones run rope.cuda (v2).
Reason rope_v3_supports(const Rope& a);

Reason rope_supports(const Rope& a) {
  if (a.rotary_dim > kMaxRotary) return str("rotary_dim ", a.rotary_dim, " above ", kMaxRotary);
  if (a.x.size(1) * a.x.size(2) * kTokWide >= (int64_t{1} << 31))
    return std::string("H·D above 2^31 / 8");
  if ((a.x.size(0) + kTok - 1) / kTok >= (int64_t{1} << 31)) return std::string("T too large");
  return {};
}

Reason rope_v3_supports(const Rope& a) {
  if (a.rotary_dim > kTok8Rotary)
    return str("rotary_dim ", a.rotary_dim, " above ", kTok8Rotary, " (rope.cuda runs it)");
  return rope_supports(a);
}

template <bool kEarly>
void rope_cuda(const Rope& a, Context& ctx) {
  const int64_t T = a.x.size(0);
  if (T == 0 || a.x.size(1) == 0) return;
  RopeParams p;
  p.x = a.x.data(), p.xs0 = a.x.stride(0), p.xs1 = a.x.stride(1);
  p.out = a.out.data(), p.os0 = a.out.stride(0), p.os1 = a.out.stride(1);
  p.positions = a.positions.data_as<const int32_t>(), p.pos_stride = a.positions.stride(0);
  p.T = T;
  p.H = static_cast<int>(a.x.size(1)), p.D = static_cast<int>(a.x.size(2));
  p.rotary_dim = static_cast<int>(a.rotary_dim);
  p.theta = a.theta;
  p.copy_tail = a.out.data() != a.x.data();
  const int half = p.rotary_dim / 2;
  const size_t ex = dtype_size(a.x.dtype()), eo = dtype_size(a.out.dtype());
  const int wide = static_cast<int>(16 / ex);  // elements of x per 16-byte vector
  const bool vectorised = half % wide == 0 && vec::aligned16(p.x) && vec::aligned16(p.out) &&
                          vec::stride16(p.xs0, ex) && vec::stride16(p.xs1, ex) &&
                          vec::stride16(p.os0, eo) && vec::stride16(p.os1, eo);
  p.tok = p.rotary_dim <= kTok8Rotary ? kTokWide : kTok;
  const auto grid = static_cast<unsigned>((T + p.tok - 1) / p.tok);
  static const bool host_freq_env = env_int("HYBRID_ROPE_HOST_FREQ", 1) != 0;
  const bool host_freq = kEarly && host_freq_env && half <= kHostFreqMax;
  HostFreq freq{};
  if (host_freq)
    for (int i = 0; i < half; ++i) freq.inv_freq[i] = cpu::rope_inv_freq(i, p.rotary_dim, p.theta);
  const size_t smem = sizeof(float) * (2 * p.tok + 1) * static_cast<size_t>(half);
  dispatch_float(a.x.dtype(), Rope::op_name, [&](auto tx) {
    using Tx = decltype(tx);
    dispatch_float(a.out.dtype(), Rope::op_name, [&](auto to) {
      using To = decltype(to);
      constexpr int kWide = static_cast<int>(16 / sizeof(Tx));
      const cudaStream_t stream = as_stream(ctx.stream());
      if constexpr (kEarly) {  // (kHostFreq only with kEarly: host_freq is false for rope.cuda)
        if (vectorised && host_freq) {
          rope_kernel<Tx, To, kWide, true, true><<<grid, kThreads, smem, stream>>>(p, freq);
          HYBRID_CUDA_CHECK_LAUNCH();
          return;
        }
      }
      if (vectorised)
        rope_kernel<Tx, To, kWide, kEarly><<<grid, kThreads, smem, stream>>>(p, NoHostFreq{});
      else
        rope_kernel<Tx, To, 1, kEarly><<<grid, kThreads, smem, stream>>>(p, NoHostFreq{});
      HYBRID_CUDA_CHECK_LAUNCH();
    });
  });
}

}  // namespace

void register_rope(Registry& r) {
  r.add<Rope>("rope.cuda_v3", DeviceType::cuda, 10, rope_v3_supports, rope_cuda<true>);
  r.add<Rope>("rope.cuda", DeviceType::cuda, 0, rope_supports, rope_cuda<false>);
}

}  // namespace hybrid::cuda
