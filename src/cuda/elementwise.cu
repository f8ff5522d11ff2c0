// CUDA: residual_add, silu_mul, sigmoid_mul, relu2.
//
// Every op is out[r, d] = f(a[r, d] (, b[r, d])) over the rows r of a [T, D] (or [T, H, D]) view,
// one pass over memory: bytes = rows·D·(Σ input element sizes + out element size), no reuse, so
// the kernels are bound by HBM bandwidth (H200 copy ~4.2 TB/s).
//
// Two variants per op:
//   <op>.cuda_vec (priority 1): every tensor of one dtype, D % 8 == 0, 16-byte aligned rows. The
//     work is split into chunks of 8 elements of one row (16 B of bf16/f16, 32 B of f32); a
//     grid-stride loop (8 blocks of 256 threads per SM) gives each thread kUnroll chunks per pass,
//     whose loads are all issued before any math, so several 16-byte loads are in flight.
//   <op>.cuda (priority 0): any mix of dtypes, any alignment; one element per thread and pass,
//     dtypes chosen at run time.
// In place (out the same view as an input) is safe: each element is read by the thread that
// writes it, before it writes it.
#include "cuda/common.cuh"
#include "cuda/dtype.cuh"
#include "cuda/elementwise_vec.cuh"
#include "cuda/kernels.h"
#include "hybrid/ops/elementwise.h"

namespace hybrid::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kVec = 8;     // elements per chunk
constexpr int kUnroll = 4;  // chunks per thread per pass

enum class Fn { add, silu_mul, sigmoid_mul, relu2 };

// a, b: the op's inputs in f32 (b unused by relu2).
template <Fn fn>
__device__ __forceinline__ float apply(float a, float b) {
  if constexpr (fn == Fn::add) return a + b;                             // a + b
  if constexpr (fn == Fn::silu_mul) return vec::silu_fast(a) * b;        // silu(gate) · up
  if constexpr (fn == Fn::sigmoid_mul) return a * vec::sigmoid_fast(b);  // x · sigmoid(gate)
  if constexpr (fn == Fn::relu2) {                                       // max(x, 0)²
    const float r = fmaxf(a, 0.0f);
    return r * r;
  }
  return 0.0f;
}

// A [T, D] or [T, H, D] view: row r (= t·H + h) starts at element (r / H)·s0 + (r % H)·s1.
struct View {
  void* p = nullptr;
  int64_t s0 = 0, s1 = 0;
  int code = 0;  // dtype code (generic kernel)
};

__device__ __forceinline__ int64_t row_start(const View& v, uint32_t r, uint32_t H) {
  return H == 1 ? int64_t{r} * v.s0 : int64_t{r / H} * v.s0 + int64_t{r % H} * v.s1;
}

// out[r, 8c : 8c+8] = f(a[r, ...], b[r, ...]) for chunk (r, c); chunks = rows·D/8 < 2^31.
template <Fn fn, class T, bool kTwo>
__global__ void __launch_bounds__(kThreads)
    vec_kernel(View a, View b, View out, uint32_t H, uint32_t chunks_per_row, int64_t chunks) {
  const int64_t step = int64_t{gridDim.x} * kThreads;
  for (int64_t base = int64_t{blockIdx.x} * kThreads + threadIdx.x; base < chunks;
       base += step * kUnroll) {
    vec::Raw<T, kVec> ra[kUnroll], rb[kUnroll];
    int64_t off_out[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t idx = base + u * step;
      off_out[u] = -1;
      if (idx < chunks) {
        const uint32_t r = static_cast<uint32_t>(idx) / chunks_per_row;
        const int64_t col = int64_t{static_cast<uint32_t>(idx) % chunks_per_row} * kVec;
        vec::load(static_cast<const T*>(a.p) + row_start(a, r, H) + col, ra[u]);
        if constexpr (kTwo) vec::load(static_cast<const T*>(b.p) + row_start(b, r, H) + col, rb[u]);
        off_out[u] = row_start(out, r, H) + col;
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (off_out[u] < 0) continue;
      float va[kVec], vb[kVec] = {}, vo[kVec];
      vec::to_floats(ra[u], va);
      if constexpr (kTwo) vec::to_floats(rb[u], vb);
#pragma unroll
      for (int k = 0; k < kVec; ++k) vo[k] = apply<fn>(va[k], vb[k]);
      vec::Raw<T, kVec> ro;
      vec::from_floats(vo, ro);
      vec::store(static_cast<T*>(out.p) + off_out[u], ro);
    }
  }
}

// The same, one element per thread and pass, dtypes read at run time; elements = rows·D.
template <Fn fn>
__global__ void __launch_bounds__(kThreads)
    generic_kernel(View a, View b, View out, int64_t H, int64_t D, int64_t elements) {
  const int64_t step = int64_t{gridDim.x} * kThreads;
  for (int64_t idx = int64_t{blockIdx.x} * kThreads + threadIdx.x; idx < elements; idx += step) {
    const int64_t r = idx / D, d = idx % D, t = r / H, h = r % H;
    const float va = vec::load_any(a.p, t * a.s0 + h * a.s1 + d, a.code);
    const float vb = b.p ? vec::load_any(b.p, t * b.s0 + h * b.s1 + d, b.code) : 0.0f;
    vec::store_any(out.p, t * out.s0 + h * out.s1 + d, out.code, apply<fn>(va, vb));
  }
}

// The operands of one call: views, rows = T·H, D; b.p == nullptr for one input.
struct Operands {
  View a, b, out;
  int64_t H = 1, rows = 0, D = 0;
  DType da{}, db{}, dout{};
  size_t ea = 0, eb = 0, eo = 0;  // element sizes
};

View view_of(const Tensor& t, int64_t col_offset = 0) {
  View v;
  v.p = static_cast<char*>(t.data()) + col_offset * static_cast<int64_t>(dtype_size(t.dtype()));
  v.s0 = t.stride(0);
  v.s1 = t.rank() == 3 ? t.stride(1) : 0;
  v.code = vec::dtype_code(t.dtype());
  return v;
}

Operands operands(const Tensor& a, int64_t a_col, const Tensor* b, int64_t b_col,
                  const Tensor& out) {
  Operands o;
  o.a = view_of(a, a_col);
  o.da = a.dtype(), o.ea = dtype_size(a.dtype());
  if (b) {
    o.b = view_of(*b, b_col);
    o.db = b->dtype(), o.eb = dtype_size(b->dtype());
  }
  o.out = view_of(out);
  o.dout = out.dtype(), o.eo = dtype_size(out.dtype());
  o.H = out.rank() == 3 ? out.size(1) : 1;
  o.rows = out.size(0) * o.H;
  o.D = out.size(-1);
  return o;
}

Reason vec_supports(const Operands& o) {
  const bool two = o.b.p != nullptr;
  if (o.da != o.dout || (two && o.db != o.dout))
    return std::string("inputs and out differ in dtype (the generic kernel takes mixed dtypes)");
  if (o.D % kVec != 0) return str("D = ", o.D, " is not a multiple of ", kVec);
  if (o.rows * (o.D / kVec) >= (int64_t{1} << 31)) return std::string("more than 2^31 chunks");
  if (o.H >= (int64_t{1} << 31)) return std::string("H above 2^31");
  for (const View* v : {&o.a, &o.b, &o.out}) {
    if (v == &o.b && !two) continue;
    if (!vec::aligned16(v->p) || !vec::stride16(v->s0, o.eo) || !vec::stride16(v->s1, o.eo))
      return std::string("a row is not 16-byte aligned");
  }
  return {};
}

template <Fn fn>
void run_vec(const Operands& o, Context& ctx, const char* op) {
  const int64_t chunks = o.rows * (o.D / kVec);
  if (chunks == 0) return;
  const unsigned grid = vec::grid_for(chunks, int64_t{kThreads} * kUnroll);
  const bool two = o.b.p != nullptr;
  dispatch_float(o.dout, op, [&](auto tag) {
    using T = decltype(tag);
    const auto H = static_cast<uint32_t>(o.H);
    const auto cpr = static_cast<uint32_t>(o.D / kVec);
    if (two)
      vec_kernel<fn, T, true>
          <<<grid, kThreads, 0, as_stream(ctx.stream())>>>(o.a, o.b, o.out, H, cpr, chunks);
    else
      vec_kernel<fn, T, false>
          <<<grid, kThreads, 0, as_stream(ctx.stream())>>>(o.a, o.b, o.out, H, cpr, chunks);
    HYBRID_CUDA_CHECK_LAUNCH();
  });
}

template <Fn fn>
void run_generic(const Operands& o, Context& ctx) {
  const int64_t elements = o.rows * o.D;
  if (elements == 0) return;
  generic_kernel<fn><<<vec::grid_for(elements, kThreads), kThreads, 0, as_stream(ctx.stream())>>>(
      o.a, o.b, o.out, o.H, o.D, elements);
  HYBRID_CUDA_CHECK_LAUNCH();
}

// ---- per op: operands (a, b) in the order apply<fn> takes them ----------------------------------

Operands residual_operands(const ResidualAdd& a) {
  return operands(a.a, 0, &a.b, 0, a.out);
}
Operands silu_mul_operands(const SiluMul& a) {
  if (a.gate_up.defined())  // gate = columns [0, I), up = columns [I, 2I) of each row
    return operands(a.gate_up, 0, &a.gate_up, a.out.size(1), a.out);
  return operands(a.gate, 0, &a.up, 0, a.out);
}
Operands sigmoid_mul_operands(const SigmoidMul& a) {
  return operands(a.x, 0, &a.gate, 0, a.out);
}
Operands relu2_operands(const Relu2& a) {
  return operands(a.x, 0, nullptr, 0, a.out);
}

template <class Args, Fn fn, Operands (*get)(const Args&)>
void register_op(Registry& r, const std::string& name) {
  r.add<Args>(
      name + ".cuda_vec", DeviceType::cuda, 1,
      [](const Args& a) -> Reason { return vec_supports(get(a)); },
      [](const Args& a, Context& ctx) { run_vec<fn>(get(a), ctx, Args::op_name); });
  r.add<Args>(name + ".cuda", DeviceType::cuda, 0, nullptr,
              [](const Args& a, Context& ctx) { run_generic<fn>(get(a), ctx); });
}

}  // namespace

void register_elementwise(Registry& r) {
  register_op<ResidualAdd, Fn::add, residual_operands>(r, "residual_add");
  register_op<SiluMul, Fn::silu_mul, silu_mul_operands>(r, "silu_mul");
  register_op<SigmoidMul, Fn::sigmoid_mul, sigmoid_mul_operands>(r, "sigmoid_mul");
  register_op<Relu2, Fn::relu2, relu2_operands>(r, "relu2");
}

}  // namespace hybrid::cuda
