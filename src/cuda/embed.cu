// CUDA: embed_gather, embed_gather_q (seed 004's 4-bit gather; 8 bits too).
//
// embed_gather:   out[t, :] = table[ids[t], :]                         (converted to out's dtype)
// embed_gather_q: out[t, j] = scales[id, j/g]·q[id, j] + biases[id, j/g],  id = ids[t]
//                 (the product and the sum each rounded in f32, as the CPU reference)
// ids live in device memory and are read by the kernels: an id outside [0, vocab) (the API checks
// them only when they are on the CPU) writes a row of zeros instead of reading out of bounds.
// Bytes: T·D·(table element + out element) for the float table, T·(D·bits/8 + 2·D/g·scale
// element + D·out element) for the quantized one; memory-bound gathers of whole rows.
//
// embed_gather.cuda_vec (priority 1): chunks of 8 elements of one row (16 B of bf16 / f16), a
//   grid-stride loop with kUnroll chunks in flight per thread. Needs D % 8 == 0 and 16-byte
//   aligned rows of table and out.
// embed_gather_q.cuda_vec (priority 1): chunks of 32 elements (one group or part of one: groups
//   are 32, 64 or 128): one 16-byte load of packed words at 4 bits (two at 8 bits), one scale and
//   one bias, 32 outputs stored as 16-byte pieces. Needs 16-byte aligned rows of weight and out.
// <op>.cuda (priority 0): one element per thread and pass, any alignment.
#include "cuda/common.cuh"
#include "cuda/dtype.cuh"
#include "cuda/elementwise_vec.cuh"
#include "cuda/kernels.h"
#include "hybrid/ops/embed.h"

namespace hybrid::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kVec = 8;      // elements per chunk (float table)
constexpr int kQChunk = 32;  // elements per chunk (quantized table)
constexpr int kUnroll = 4;   // chunks per thread per pass

struct Ids {
  const void* p;  // [T] i32 | i64
  int64_t stride;
  bool i64;
  __device__ __forceinline__ int64_t operator[](int64_t t) const {
    return i64 ? static_cast<const int64_t*>(p)[t * stride]
               : int64_t{static_cast<const int32_t*>(p)[t * stride]};
  }
};

Ids ids_of(const Tensor& t) {
  return {t.data(), t.stride(0), t.dtype() == DType::i64};
}

// ---- embed_gather -------------------------------------------------------------------------------

// chunk (t, c): out[t, 8c : 8c+8] = table[ids[t], 8c : 8c+8];  chunks = T·D/8 < 2^31.
template <class Tt, class To>
__global__ void __launch_bounds__(kThreads)
    gather_vec_kernel(const Tt* table, int64_t table_stride, int64_t vocab,  // [vocab, D]
                      Ids ids,                                               // [T]
                      To* out, int64_t out_stride,                           // [T, D]
                      uint32_t chunks_per_row, int64_t chunks) {
  const int64_t step = int64_t{gridDim.x} * kThreads;
  for (int64_t base = int64_t{blockIdx.x} * kThreads + threadIdx.x; base < chunks;
       base += step * kUnroll) {
    vec::Raw<Tt, kVec> raw[kUnroll];
    int64_t off_out[kUnroll];
    bool valid[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t idx = base + u * step;
      off_out[u] = -1;
      valid[u] = false;
      if (idx < chunks) {
        const uint32_t t = static_cast<uint32_t>(idx) / chunks_per_row;
        const int64_t col = int64_t{static_cast<uint32_t>(idx) % chunks_per_row} * kVec;
        const int64_t id = ids[t];
        valid[u] = id >= 0 && id < vocab;
        if (valid[u]) vec::load(table + id * table_stride + col, raw[u]);
        off_out[u] = int64_t{t} * out_stride + col;
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (off_out[u] < 0) continue;
      float v[kVec];
      if (valid[u])
        vec::to_floats(raw[u], v);
      else
#pragma unroll
        for (int k = 0; k < kVec; ++k) v[k] = 0.0f;
      vec::Raw<To, kVec> ro;
      vec::from_floats(v, ro);
      vec::store(out + off_out[u], ro);
    }
  }
}

// One element per thread and pass; elements = T·D; dtypes read at run time.
__global__ void __launch_bounds__(kThreads)
    gather_generic_kernel(const void* table, int64_t table_stride, int64_t vocab, int table_code,
                          Ids ids, void* out, int64_t out_stride, int out_code, int64_t D,
                          int64_t elements) {
  const int64_t step = int64_t{gridDim.x} * kThreads;
  for (int64_t idx = int64_t{blockIdx.x} * kThreads + threadIdx.x; idx < elements; idx += step) {
    const int64_t t = idx / D, d = idx % D, id = ids[t];
    const float v =
        id >= 0 && id < vocab ? vec::load_any(table, id * table_stride + d, table_code) : 0.0f;
    vec::store_any(out, t * out_stride + d, out_code, v);
  }
}

Reason gather_vec_supports(const EmbedGather& a) {
  const int64_t T = a.ids.size(0), D = a.table.size(1);
  const size_t et = dtype_size(a.table.dtype()), eo = dtype_size(a.out.dtype());
  if (D % kVec != 0) return str("D = ", D, " is not a multiple of ", kVec);
  if (T * (D / kVec) >= (int64_t{1} << 31)) return std::string("more than 2^31 chunks");
  if (!vec::aligned16(a.table.data()) || !vec::stride16(a.table.stride(0), et) ||
      !vec::aligned16(a.out.data()) || !vec::stride16(a.out.stride(0), eo))
    return std::string("a row of table or out is not 16-byte aligned");
  return {};
}

template <class Body>
void dispatch_pair(DType a, DType b, const char* op, Body&& body) {
  dispatch_float(a, op, [&](auto ta) { dispatch_float(b, op, [&](auto tb) { body(ta, tb); }); });
}

void gather_vec_cuda(const EmbedGather& a, Context& ctx) {
  const int64_t T = a.ids.size(0), D = a.table.size(1), chunks = T * (D / kVec);
  if (chunks == 0) return;
  const unsigned grid = vec::grid_for(chunks, int64_t{kThreads} * kUnroll);
  dispatch_pair(a.table.dtype(), a.out.dtype(), EmbedGather::op_name, [&](auto tt, auto to) {
    using Tt = decltype(tt);
    using To = decltype(to);
    gather_vec_kernel<Tt, To><<<grid, kThreads, 0, as_stream(ctx.stream())>>>(
        a.table.data_as<const Tt>(), a.table.stride(0), a.table.size(0), ids_of(a.ids),
        a.out.data_as<To>(), a.out.stride(0), static_cast<uint32_t>(D / kVec), chunks);
    HYBRID_CUDA_CHECK_LAUNCH();
  });
}

void gather_generic_cuda(const EmbedGather& a, Context& ctx) {
  const int64_t D = a.table.size(1), elements = a.ids.size(0) * D;
  if (elements == 0) return;
  gather_generic_kernel<<<vec::grid_for(elements, kThreads), kThreads, 0,
                          as_stream(ctx.stream())>>>(
      a.table.data(), a.table.stride(0), a.table.size(0), vec::dtype_code(a.table.dtype()),
      ids_of(a.ids), a.out.data(), a.out.stride(0), vec::dtype_code(a.out.dtype()), D, elements);
  HYBRID_CUDA_CHECK_LAUNCH();
}

// ---- embed_gather_q -----------------------------------------------------------------------------

struct QTable {
  const uint32_t* weight;  // [vocab, D·bits/32] u32
  int64_t weight_stride;
  const void* scales;  // [vocab, D/group]
  int64_t scales_stride;
  const void* biases;  // [vocab, D/group]
  int64_t biases_stride;
  int scale_code;
  int group_size;
  int64_t vocab;
};

QTable qtable_of(const QuantizedWeight& q) {
  return {q.weight.data_as<const uint32_t>(),
          q.weight.stride(0),
          q.scales.data(),
          q.scales.stride(0),
          q.biases.data(),
          q.biases.stride(0),
          vec::dtype_code(q.scales.dtype()),
          q.group_size,
          q.weight.size(0)};
}

// s·q + b with the product and the sum rounded separately (as the CPU reference).
__device__ __forceinline__ float dequant(float s, uint32_t code, float b) {
  return __fadd_rn(__fmul_rn(s, static_cast<float>(code)), b);
}

// chunk (t, c): out[t, 32c : 32c+32] from row ids[t]: 32·BITS/32 = BITS words (16 B at 4 bits);
// chunks = T·D/32 < 2^31.
template <int BITS, class To>
__global__ void __launch_bounds__(kThreads)
    gather_q_vec_kernel(QTable q, Ids ids, To* out, int64_t out_stride,  // out [T, D]
                        uint32_t chunks_per_row, int64_t chunks) {
  constexpr int kWords = kQChunk * BITS / 32;  // 4 or 8 u32 words
  constexpr uint32_t kMask = (1u << BITS) - 1u;
  constexpr int kPerWord = 32 / BITS;
  const int64_t step = int64_t{gridDim.x} * kThreads;
  for (int64_t idx = int64_t{blockIdx.x} * kThreads + threadIdx.x; idx < chunks; idx += step) {
    const uint32_t t = static_cast<uint32_t>(idx) / chunks_per_row;
    const int64_t col = int64_t{static_cast<uint32_t>(idx) % chunks_per_row} * kQChunk;
    const int64_t id = ids[t];
    float v[kQChunk];
    if (id >= 0 && id < q.vocab) {
      vec::Raw<uint32_t, kWords> words;
      vec::load(q.weight + id * q.weight_stride + col * BITS / 32, words);
      const int64_t g = col / q.group_size;
      const float s = vec::load_any(q.scales, id * q.scales_stride + g, q.scale_code);
      const float b = vec::load_any(q.biases, id * q.biases_stride + g, q.scale_code);
#pragma unroll
      for (int w = 0; w < kWords; ++w) {
        const uint32_t word = words.elem()[w];
#pragma unroll
        for (int k = 0; k < kPerWord; ++k)
          v[w * kPerWord + k] = dequant(s, (word >> (k * BITS)) & kMask, b);
      }
    } else {
#pragma unroll
      for (int k = 0; k < kQChunk; ++k) v[k] = 0.0f;
    }
    vec::Raw<To, kQChunk> ro;
    vec::from_floats(v, ro);
    vec::store(out + int64_t{t} * out_stride + col, ro);
  }
}

// One element per thread and pass; elements = T·D.
__global__ void __launch_bounds__(kThreads)
    gather_q_generic_kernel(QTable q, int bits, Ids ids, void* out, int64_t out_stride,
                            int out_code, int64_t D, int64_t elements) {
  const int64_t step = int64_t{gridDim.x} * kThreads;
  const uint32_t mask = (1u << bits) - 1u;
  for (int64_t idx = int64_t{blockIdx.x} * kThreads + threadIdx.x; idx < elements; idx += step) {
    const int64_t t = idx / D, j = idx % D, id = ids[t];
    float v = 0.0f;
    if (id >= 0 && id < q.vocab) {
      const uint32_t word = q.weight[id * q.weight_stride + j * bits / 32];
      const uint32_t code = (word >> ((j * bits) % 32)) & mask;
      const int64_t g = j / q.group_size;
      v = dequant(vec::load_any(q.scales, id * q.scales_stride + g, q.scale_code), code,
                  vec::load_any(q.biases, id * q.biases_stride + g, q.scale_code));
    }
    vec::store_any(out, t * out_stride + j, out_code, v);
  }
}

Reason gather_q_vec_supports(const EmbedGatherQ& a) {
  const int64_t T = a.ids.size(0), D = a.out.size(1);
  if (D % kQChunk != 0 || a.table.group_size % kQChunk != 0)
    return str("D = ", D, " or group_size = ", a.table.group_size, " is not a multiple of ",
               kQChunk);
  if (T * (D / kQChunk) >= (int64_t{1} << 31)) return std::string("more than 2^31 chunks");
  if (!vec::aligned16(a.table.weight.data()) || !vec::stride16(a.table.weight.stride(0), 4))
    return std::string("a row of the packed weight is not 16-byte aligned");
  if (!vec::aligned16(a.out.data()) || !vec::stride16(a.out.stride(0), dtype_size(a.out.dtype())))
    return std::string("a row of out is not 16-byte aligned");
  return {};
}

void gather_q_vec_cuda(const EmbedGatherQ& a, Context& ctx) {
  const int64_t T = a.ids.size(0), D = a.out.size(1), chunks = T * (D / kQChunk);
  if (chunks == 0) return;
  const unsigned grid = vec::grid_for(chunks, kThreads);
  const QTable q = qtable_of(a.table);
  dispatch_float(a.out.dtype(), EmbedGatherQ::op_name, [&](auto to) {
    using To = decltype(to);
    const auto cpr = static_cast<uint32_t>(D / kQChunk);
    if (a.table.bits == 4)
      gather_q_vec_kernel<4, To><<<grid, kThreads, 0, as_stream(ctx.stream())>>>(
          q, ids_of(a.ids), a.out.data_as<To>(), a.out.stride(0), cpr, chunks);
    else
      gather_q_vec_kernel<8, To><<<grid, kThreads, 0, as_stream(ctx.stream())>>>(
          q, ids_of(a.ids), a.out.data_as<To>(), a.out.stride(0), cpr, chunks);
    HYBRID_CUDA_CHECK_LAUNCH();
  });
}

void gather_q_generic_cuda(const EmbedGatherQ& a, Context& ctx) {
  const int64_t D = a.out.size(1), elements = a.ids.size(0) * D;
  if (elements == 0) return;
  gather_q_generic_kernel<<<vec::grid_for(elements, kThreads), kThreads, 0,
                            as_stream(ctx.stream())>>>(qtable_of(a.table), a.table.bits,
                                                       ids_of(a.ids), a.out.data(), a.out.stride(0),
                                                       vec::dtype_code(a.out.dtype()), D, elements);
  HYBRID_CUDA_CHECK_LAUNCH();
}

}  // namespace

void register_embed(Registry& r) {
  r.add<EmbedGather>("embed_gather.cuda_vec", DeviceType::cuda, 1, gather_vec_supports,
                     gather_vec_cuda);
  r.add<EmbedGather>("embed_gather.cuda", DeviceType::cuda, 0, nullptr, gather_generic_cuda);
  r.add<EmbedGatherQ>("embed_gather_q.cuda_vec", DeviceType::cuda, 1, gather_q_vec_supports,
                      gather_q_vec_cuda);
  r.add<EmbedGatherQ>("embed_gather_q.cuda", DeviceType::cuda, 0, nullptr, gather_q_generic_cuda);
}

}  // namespace hybrid::cuda
