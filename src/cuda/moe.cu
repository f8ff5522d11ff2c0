// CUDA: moe_route (one fused kernel) and moe_experts (sorted per-expert GEMVs).
//
// moe_route.cuda: one warp per token, its logits, scores and keys in registers (E / 32 a lane):
//   group scores (through shared memory), topk_group rounds of a warp arg-max over the groups,
//   top_k rounds of a warp arg-max over the lanes' best remaining keys (ties: lower id; only the
//   winner's lane rescans), the chosen ids placed by rank (descending logit), then the weights
//   (and the folded shared expert's column). E <= 1024. Bytes T·E·(logit size).
// moe_experts.cuda: the (t, j) pairs are grouped by expert on the GPU, then per routed expert:
//   1. moe_sort (one block): counts per expert, exclusive scan -> offsets, the ascending list of
//      routed experts, and pair <-> sorted position maps (position order inside an expert is not
//      fixed, but every pair is computed independently, so results are deterministic).
//   2. gate_up: grid (I / 4, routed experts); one warp per intermediate index i reads rows i
//      (and I + i) of the expert once per 8 of its pairs, h[pos, i] = silu(g)·u | relu(u)² (f32
//      workspace [P, I]).
//   3. down: grid (Dm / 16, routed experts); one warp per 4 output rows d of the expert:
//      y[pos, d] = down[e, d, :]·h[pos, :] (f32 workspace [P, Dm]).
//   Each lane issues its 16-byte loads (gate_up: 4 per row, 8 in flight; down: 2 per row, 8 in
//   flight) before the math, and only the pairs present are reduced.
//   4. combine: out[t, d] (+)= Σ_j w[t, j]·y[pos(t, j), d], j in order.
//   Decode (T = 1): the direct path skips 1.: CTA row j of 2. and 3. is pair j (expert ids[0, j])
//   and gate_up stages x as f32 in shared memory itself (3 launches).
//   Bytes at decode: the routed experts' weights once (3·I·Dm elements each for swiglu); FLOP
//   2·P·3·I·Dm. These GEMV kernels re-read each expert's rows once per 8 pairs (from L2); prefill
//   and decode batches of >= 128 pairs take moe_experts.cuda_tc, a grouped GEMM on tensor cores
//   (below), and so do MLX-quantized experts (moe_experts_q.cuda_tc).
#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>

#include "cuda/common.cuh"
#include "cuda/dtype.cuh"
#include "cuda/elementwise_vec.cuh"
#include "cuda/kernels.h"
#include "cuda/linear_impl.cuh"
#include "cuda/mma.cuh"
#include "cuda/warp.cuh"
#include "hybrid/ops/moe.h"

namespace hybrid::cuda {

namespace {

// ---- moe_route -----------------------------------------------------------------------------

constexpr int kRouteWarps = 4;
constexpr int64_t kRouteMaxE = 1024;

struct RouteParams {
  const void* logits;  // [T, E]
  DType lt;
  int64_t l_stride;
  const void* bias;  // [E] or null
  DType bt;
  int32_t* ids;  // [T, K]
  int64_t ids_s0, ids_s1;
  void* weights;  // [T, K]
  DType wt;
  int64_t w_s0, w_s1;
  int T, E, K, n_group, topk_group;
  bool sigmoid, renormalize;
  float scaling;
  bool shared_expert;       // column K: id E, weight sigmoid(shared_gate[t]) or 1
  const void* shared_gate;  // [T, 1] or null
  DType sgt;
  int64_t sg_stride;
};

// Whether (v, e) ranks before (bv, be): larger value first, then lower id; be < 0 = nothing yet.
__device__ __forceinline__ bool ranks_before(float v, int e, float bv, int be) {
  return be < 0 || v > bv || (v == bv && e < be);
}

// Warp arg-max of (v, e) by ranks_before; every lane gets the winner id (-1 if none).
__device__ __forceinline__ int warp_argmax(float v, int e) {
  for (int m = 16; m > 0; m >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, m);
    const int oe = __shfl_xor_sync(0xffffffffu, e, m);
    if (oe >= 0 && ranks_before(ov, oe, v, e)) v = ov, e = oe;
  }
  return e;
}

// Shared memory of one warp of moe_route_kernel, in 4-byte words: keys [E], group scores and flags
// [2 · n_group], chosen ids, logits and scores [3 · K], the scores in output order [K].
__host__ __device__ constexpr int route_smem_floats(int E, int n_group, int K) {
  return E + 2 * n_group + 4 * K;
}

// s = softmax(l) | sigmoid(l); c = s (+ bias); groups; top_k by c (by l without bias); order by
// l descending (ties lower id); w = s[id] / (Σ s + 1e-20 when renormalize) · scaling.
//
// One warp per token. Lane `lane` holds experts e = i·32 + lane, i < kPer (E <= 32·kPer), in
// registers: l, s and the key c, a bit mask of the taken (chosen or ineligible) ones, and its own
// best remaining (key, id). A top-k round is one warp arg-max over the lanes' bests; only the
// winner's lane rescans its kPer keys, so a round costs ~one shuffle tree, not a pass over E.
// Shared memory per warp (RouteSmem): the keys for the group scores, the group scores and flags,
// and the chosen (id, l, s) in choice order.
// v[i] = row[i·32 + lane] as f32 for i < kPer (`fill` past E). One dtype switch, then plain loads
// that a lane issues together: with load_any's switch per element they went out one after another,
// and session 12 run 3 measured the route at 13.3 µs a decode token, ~16 DRAM round trips.
template <int kPer, class T>
__device__ __forceinline__ void load_lane_row(const T* row, int lane, int E, float fill,
                                              float (&v)[kPer]) {
#pragma unroll
  for (int i = 0; i < kPer; ++i) v[i] = i * 32 + lane < E ? to_f32(row[i * 32 + lane]) : fill;
}
template <int kPer>
__device__ __forceinline__ void load_lane_row(const void* base, DType t, int64_t offset, int lane,
                                              int E, float fill, float (&v)[kPer]) {
  switch (t) {
    case DType::bf16:
      load_lane_row<kPer>(static_cast<const __nv_bfloat16*>(base) + offset, lane, E, fill, v);
      break;
    case DType::f16:
      load_lane_row<kPer>(static_cast<const __half*>(base) + offset, lane, E, fill, v);
      break;
    default:
      load_lane_row<kPer>(static_cast<const float*>(base) + offset, lane, E, fill, v);
      break;
  }
}

// The weights of token t from the chosen scores in output order, out_s [K] in shared memory
// (renormalised as the reference: Σ in output order + 1e-20, then / denom · scaling), and the
// folded shared expert's column K (id E, weight sigmoid(shared_gate[t]) or 1). One warp.
__device__ __forceinline__ void route_write_weights(const RouteParams& p, int t, int lane,
                                                    const float* out_s) {
  float denom = 1.0f;
  if (p.renormalize) {
    float sum = 0.0f;  // every lane sums (no broadcast)
    for (int r = 0; r < p.K; ++r) sum = __fadd_rn(sum, out_s[r]);
    denom = __fadd_rn(sum, 1e-20f);
  }
  for (int r = lane; r < p.K; r += 32)
    store_any(p.weights, p.wt, static_cast<int64_t>(t) * p.w_s0 + r * p.w_s1,
              __fmul_rn(__fdiv_rn(out_s[r], denom), p.scaling));
  if (p.shared_expert && lane == 0) {
    float g = 1.0f;
    if (p.shared_gate) {
      const float z = load_any(p.shared_gate, p.sgt, static_cast<int64_t>(t) * p.sg_stride);
      g = __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-z)));
    }
    p.ids[static_cast<int64_t>(t) * p.ids_s0 + p.K * p.ids_s1] = p.E;
    store_any(p.weights, p.wt, static_cast<int64_t>(t) * p.w_s0 + p.K * p.w_s1, g);
  }
}

template <int kPer>
__global__ void __launch_bounds__(kRouteWarps * 32) moe_route_kernel(const RouteParams p) {
  extern __shared__ float smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int t = blockIdx.x * kRouteWarps + warp;
  const int E = p.E;
  float* cs = smem + static_cast<int64_t>(warp) * route_smem_floats(E, p.n_group, p.K);
  float* gsc = cs + E;                                  // [n_group] group scores
  int* kept = reinterpret_cast<int*>(gsc + p.n_group);  // [n_group] 1 = group kept
  int* sel = kept + p.n_group;                          // [K] chosen ids, choice order
  float* sel_l = reinterpret_cast<float*>(sel + p.K);   // [K] their logits
  float* sel_s = sel_l + p.K;                           // [K] their scores
  float* out_s = sel_s + p.K;                           // [K] their scores in output order
  if (t >= p.T) return;

  float l[kPer], s[kPer], c[kPer];
  load_lane_row<kPer>(p.logits, p.lt, static_cast<int64_t>(t) * p.l_stride, lane, E, -INFINITY, l);
  if (p.bias) load_lane_row<kPer>(p.bias, p.bt, 0, lane, E, 0.0f, c);  // c = bias for now
  float m = -INFINITY;
#pragma unroll
  for (int i = 0; i < kPer; ++i) m = fmaxf(m, l[i]);
  m = warp_max(m);
  if (!p.sigmoid) {
    double sum = 0.0;
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      s[i] = i * 32 + lane < E ? expf(__fsub_rn(l[i], m)) : 0.0f;
      sum += s[i];
    }
    sum = warp_sum(sum);
    const float inv = static_cast<float>(1.0 / sum);
#pragma unroll
    for (int i = 0; i < kPer; ++i) s[i] = __fmul_rn(s[i], inv);
  } else {
#pragma unroll
    for (int i = 0; i < kPer; ++i) s[i] = __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-l[i])));
  }
  uint32_t taken = 0;  // bit i: expert i·32 + lane chosen, ineligible or past E
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    c[i] = p.bias ? __fadd_rn(s[i], c[i]) : l[i];
    if (i * 32 + lane >= E) taken |= 1u << i;
  }

  if (p.n_group > 1) {
    // Group g = experts [g·per, (g + 1)·per): its score is the sum of its two best keys. The keys
    // go through shared memory so that one lane scans a whole group.
    // Group keys are s (+ bias): without a bias the top-k key is l, but the groups rank by s.
#pragma unroll
    for (int i = 0; i < kPer; ++i)
      if (i * 32 + lane < E) cs[i * 32 + lane] = p.bias ? c[i] : s[i];
    __syncwarp();
    const int per = E / p.n_group;
    for (int g = lane; g < p.n_group; g += 32) {
      float top1 = -INFINITY, top2 = -INFINITY;
      for (int e = g * per; e < (g + 1) * per; ++e) {
        const float v = cs[e];
        if (v > top1) {
          top2 = top1;
          top1 = v;
        } else if (v > top2) {
          top2 = v;
        }
      }
      gsc[g] = __fadd_rn(top1, top2);
      kept[g] = 0;
    }
    __syncwarp();
    for (int round = 0; round < p.topk_group; ++round) {
      float bv = 0.0f;
      int be = -1;
      for (int g = lane; g < p.n_group; g += 32)
        if (!kept[g] && ranks_before(gsc[g], g, bv, be)) bv = gsc[g], be = g;
      const int win = warp_argmax(bv, be);
      if (lane == 0 && win >= 0) kept[win] = 1;
      __syncwarp();
    }
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int e = i * 32 + lane;
      if (e < E && !kept[e / per]) taken |= 1u << i;
    }
  }

  // This lane's best remaining (key, id) and the chosen one's l and s.
  float bv = 0.0f, bl = 0.0f, bs = 0.0f;
  int be = -1;
  auto rescan = [&]() {
    bv = 0.0f;
    be = -1;
#pragma unroll
    for (int i = 0; i < kPer; ++i)
      if (!((taken >> i) & 1u) && ranks_before(c[i], i * 32 + lane, bv, be))
        bv = c[i], be = i * 32 + lane, bl = l[i], bs = s[i];
  };
  rescan();
  for (int j = 0; j < p.K; ++j) {
    const int win = warp_argmax(bv, be);
    // No eligible expert left (NaN keys): expert 0, as the reference.
    const int id = win >= 0 ? win : 0;
    const int src = id % 32;
    float wl = __shfl_sync(0xffffffffu, bl, src), ws = __shfl_sync(0xffffffffu, bs, src);
    if (win < 0) {  // expert 0's l and s live in lane 0's slot 0
      wl = __shfl_sync(0xffffffffu, l[0], 0);
      ws = __shfl_sync(0xffffffffu, s[0], 0);
    }
    if (lane == src) {
      taken |= 1u << (id / 32);
      rescan();
    }
    if (lane == 0) {
      sel[j] = id;
      sel_l[j] = wl;
      sel_s[j] = ws;
    }
  }
  __syncwarp();
  // Output order: descending logit, then ascending id. Chosen j goes to its rank among the chosen.
  for (int j = lane; j < p.K; j += 32) {
    int rank = 0;
    for (int a = 0; a < p.K; ++a) rank += ranks_before(sel_l[a], sel[a], sel_l[j], sel[j]);
    p.ids[static_cast<int64_t>(t) * p.ids_s0 + rank * p.ids_s1] = sel[j];
    out_s[rank] = sel_s[j];
  }
  __syncwarp();
  route_write_weights(p, t, lane, out_s);
}

// ---- moe_route.cuda_block: one block per token, one expert per thread -------------------------
//
// The warp kernel above walks a token's top-k as k serial rounds of a 5-step shuffle arg-max plus a
// rescan of the winner lane's E / 32 keys: ~2000 dependent instructions for E 512, k 10, at ~7
// cycles each (session 13 run 1's ncu: 7.2 cycles an issued instruction, one warp), ~9 µs of a
// decode step's 12.5. Here the block holds expert e = threadIdx.x (E <= 1024, 32·ceil(E/32)
// threads) and each phase is a few redux ops:
//   1. max and Σ exp over the block (f32 max by the order-preserving key, Σ in f64 as above),
//   2. each warp's top-k list [warps][k] by k rounds of two redux ops (the max key, then the
//      lowest id holding it; the winner lane drops out),
//   3. warp 0 merges the lists: lane w holds list w's head, k rounds of the same two redux ops,
//      the winner lane reading its list's next entry,
//   4. output order (l descending, ids ascending on ties) and the weights as in the warp kernel.
// Session 14 run 1: T 1 7.62 µs (the rank form below 10.34, the warp kernel 12.38), engine tg32
// 1979 t/s against 1918 (rank) and 1827 (rounds with the rank merge).
// The rank form (HYBRID_MOE_ROUTE_RANK=1, kept to time and test beside it): 2. a lane's rank among
// its warp's 32 keys (32 shuffles), 3. each of the warps·k candidates counts the candidates ranked
// before it; rank < k is chosen.
// Keys: route_key of c (l without a bias, s + bias with one): larger first, then the lower id; -0
// = +0, NaN above +inf (as top_k); 0 is no key (a lane past E). supports(): n_group <= 1, k <= 32.
// Session 13's first merge prefetched the entry after the head in an unrolled loop; nvcc 13.0.88
// compiled that loop's remainder copy to read entry pos + 2 (cuobjdump), which lost or repeated
// ids on the E 7 / k 7 case. The merge below reads the next entry only when its lane wins, in a
// loop that is not unrolled (session 14 run 1: every case passes, racecheck and memcheck clean).

constexpr int kRouteBlockMaxK = 32;
// Tokens above which the warp kernel is faster: session 13 run 2 measured T 1 at 7.4 µs here
// against 12.1, T 4096 at 53.9 against 30.2 (a block's k rounds are serial whatever T is, where
// the warp kernel runs 4 tokens a block). Up to 256 tokens the blocks fit in one wave.
constexpr int64_t kRouteBlockMaxT = 256;

// The order-preserving key: larger ranks first; -0 as +0; NaN above everything; never 0.
__device__ __forceinline__ uint32_t route_key(float x) {
  if (isnan(x)) return UINT32_MAX;
  const uint32_t b = __float_as_uint(x == 0.0f ? 0.0f : x);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
__device__ __forceinline__ float route_key_value(uint32_t k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

template <bool kRank>
__global__ void __launch_bounds__(1024) moe_route_block_kernel(const RouteParams p) {
  __shared__ float l_of[kRouteMaxE], s_of[kRouteMaxE];  // [E] each expert's logit and score
  __shared__ uint32_t list_key[32][kRouteBlockMaxK];    // [warps, K] each warp's top-k, rank order
  __shared__ int list_id[32][kRouteBlockMaxK];
  __shared__ int sel[kRouteBlockMaxK];      // [K] chosen ids, choice order
  __shared__ float out_s[kRouteBlockMaxK];  // [K] their scores in output order
  __shared__ uint32_t red_max[32];
  __shared__ double red_sum[32];
  const int t = blockIdx.x, e = threadIdx.x, lane = e % 32, warp = e / 32;
  const int warps = blockDim.x / 32, E = p.E, K = p.K;
  const bool live = e < E;

  const float l = live ? load_any(p.logits, p.lt, static_cast<int64_t>(t) * p.l_stride + e) : 0.0f;
  const float bias = live && p.bias ? load_any(p.bias, p.bt, e) : 0.0f;
  float s;
  if (!p.sigmoid) {
    // m = max l over the block (by key: one redux a warp); s = exp(l − m) / Σ exp (f64 sum).
    // NaN logits are left out of the max (as fmaxf in the warp kernel).
    uint32_t mk = __reduce_max_sync(0xffffffffu, live && !isnan(l) ? route_key(l) : 0u);
    if (lane == 0) red_max[warp] = mk;
    __syncthreads();
    mk = 0;
    for (int w = 0; w < warps; ++w) mk = max(mk, red_max[w]);
    const float m = route_key_value(mk);
    const float x = live ? expf(__fsub_rn(l, m)) : 0.0f;
    const double part = warp_sum(static_cast<double>(x));
    if (lane == 0) red_sum[warp] = part;
    __syncthreads();
    double sum = 0.0;
    for (int w = 0; w < warps; ++w) sum += red_sum[w];
    s = __fmul_rn(x, static_cast<float>(1.0 / sum));
  } else {
    s = __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-l)));
  }
  if (live) l_of[e] = l, s_of[e] = s;

  // 2. This warp's top-k list: K rounds of the max key and the lowest id holding it (a lane past
  // the warp's live lanes has key 0, none; a round with no key left writes key 0). kRank: a lane's
  // rank among the warp's 32 keys (larger key first, then the lower id) by 32 shuffles; the lanes
  // of rank < K write list[warp][rank], the other entries stay key 0.
  uint32_t key = live ? route_key(p.bias ? __fadd_rn(s, bias) : l) : 0u;
  if constexpr (!kRank) {
    for (int j = 0; j < K; ++j) {
      const uint32_t best = __reduce_max_sync(0xffffffffu, key);
      const uint32_t win = __reduce_min_sync(
          0xffffffffu, key == best && best != 0u ? static_cast<uint32_t>(e) : UINT32_MAX);
      if (lane == 0) list_key[warp][j] = best, list_id[warp][j] = static_cast<int>(win);
      if (static_cast<uint32_t>(e) == win) key = 0u;
    }
  } else {
    if (lane < K) list_key[warp][lane] = 0u;
    __syncwarp();
    int rank_w = 0;
#pragma unroll 8
    for (int i = 0; i < 32; ++i) {
      const uint32_t other = __shfl_sync(0xffffffffu, key, i);
      rank_w += other > key || (other == key && i < lane);
    }
    if (key != 0u && rank_w < K) list_key[warp][rank_w] = key, list_id[warp][rank_w] = e;
  }
  __syncthreads();

  // 3. The block's top-k: warp 0 merges the lists, lane w holding list w's head, K rounds of two
  // redux ops, the winner lane reading its next entry (no prefetch, the loop not unrolled: see
  // above).
  if constexpr (!kRank) {
    if (warp == 0) {
      int pos = 0;
      uint32_t head = lane < warps ? list_key[lane][0] : 0u;
      int head_id = lane < warps ? list_id[lane][0] : -1;
#pragma unroll 1
      for (int j = 0; j < K; ++j) {
        const uint32_t best = __reduce_max_sync(0xffffffffu, head);
        const uint32_t win = __reduce_min_sync(
            0xffffffffu, head == best && best != 0u ? static_cast<uint32_t>(head_id) : UINT32_MAX);
        if (lane == 0) sel[j] = best != 0u ? static_cast<int>(win) : 0;
        if (best != 0u && head == best && static_cast<uint32_t>(head_id) == win) {
          ++pos;
          head = pos < K ? list_key[lane][pos] : 0u;
          head_id = pos < K ? list_id[lane][pos] : -1;
        }
      }
    }
  } else {
    // 3. The block's top-k: candidate c = (warp c / K, entry c % K) counts the candidates that rank
    // before it, list by list: a list is in rank order, so its count ends at its first entry that
    // does not rank before c (about K + warps reads, no division in the loop: session 13 run 4's
    // scan of every candidate with c / K, c % K per read took T 1 to 22.9 µs). Those of rank < K
    // are the chosen, sel[rank] (choice order = key order).
    const int cands = warps * K;
    for (int c = threadIdx.x; c < cands; c += blockDim.x) {
      const int cw = c / K, cj = c - cw * K;
      const uint32_t ck = list_key[cw][cj];
      if (ck == 0u) continue;
      const int cid = list_id[cw][cj];
      int rank = 0;
      for (int w = 0; w < warps && rank < K; ++w) {
        for (int j = 0; j < K; ++j) {
          const uint32_t ok = list_key[w][j];
          if (!(ok > ck || (ok == ck && ok != 0u && list_id[w][j] < cid))) break;
          ++rank;
        }
      }
      if (rank < K) sel[rank] = cid;
    }
  }
  __syncthreads();

  if (warp == 0) {
    // 4. Output order: descending logit, then ascending id; chosen j goes to its rank.
    if (lane < K) {
      const int id = sel[lane];
      const float lj = l_of[id];
      int rank = 0;
      for (int a = 0; a < K; ++a) rank += ranks_before(l_of[sel[a]], sel[a], lj, id);
      p.ids[static_cast<int64_t>(t) * p.ids_s0 + rank * p.ids_s1] = id;
      out_s[rank] = s_of[id];
    }
    __syncwarp();
    route_write_weights(p, t, lane, out_s);
  }
}

Reason moe_route_supports(const MoeRoute& a) {
  if (a.logits.size(1) > kRouteMaxE)
    return str("E=", a.logits.size(1), " above ", kRouteMaxE, " (registers: 32 a lane)");
  if (a.ids.dtype() != DType::i32) return std::string("ids must be i32");
  if (a.logits.size(0) > (int64_t{1} << 30)) return std::string("T above 2^30");
  return {};
}

RouteParams route_params(const MoeRoute& a) {
  const int64_t T = a.logits.size(0), E = a.logits.size(1);
  return {a.logits.data(),
          a.logits.dtype(),
          a.logits.stride(0),
          a.bias.defined() ? a.bias.data() : nullptr,
          a.bias.defined() ? a.bias.dtype() : DType::f32,
          a.ids.data_as<int32_t>(),
          a.ids.stride(0),
          a.ids.stride(1),
          a.weights.data(),
          a.weights.dtype(),
          a.weights.stride(0),
          a.weights.stride(1),
          static_cast<int>(T),
          static_cast<int>(E),
          static_cast<int>(a.top_k),
          static_cast<int>(a.n_group),
          static_cast<int>(a.topk_group),
          a.score == MoeScore::sigmoid,
          a.renormalize,
          a.scaling,
          a.shared_expert,
          a.shared_gate.defined() ? a.shared_gate.data() : nullptr,
          a.shared_gate.defined() ? a.shared_gate.dtype() : DType::f32,
          a.shared_gate.defined() ? a.shared_gate.stride(0) : 0};
}

void moe_route_run(const MoeRoute& a, Context& ctx) {
  const int64_t T = a.logits.size(0), E = a.logits.size(1);
  if (T == 0) return;
  const RouteParams p = route_params(a);
  const size_t smem = static_cast<size_t>(kRouteWarps) * 4 * route_smem_floats(p.E, p.n_group, p.K);
  const auto blocks = static_cast<unsigned>((T + kRouteWarps - 1) / kRouteWarps);
  auto launch = [&](auto kernel) {
    if (smem > 48 * 1024) ensure_dynamic_smem(kernel, smem);
    kernel<<<blocks, kRouteWarps * 32, smem, as_stream(ctx.stream())>>>(p);
  };
  // Experts per lane: the fewest registers that hold E.
  if (E <= 128)
    launch(moe_route_kernel<4>);
  else if (E <= 256)
    launch(moe_route_kernel<8>);
  else if (E <= 512)
    launch(moe_route_kernel<16>);
  else
    launch(moe_route_kernel<32>);
  HYBRID_CUDA_CHECK_LAUNCH();
}

Reason moe_route_block_supports(const MoeRoute& a) {
  if (env_is_zero("HYBRID_MOE_ROUTE_BLOCK")) return std::string("HYBRID_MOE_ROUTE_BLOCK=0");
  if (a.n_group > 1) return std::string("n_group > 1 (groups: the warp kernel)");
  if (a.top_k > kRouteBlockMaxK) return str("k=", a.top_k, " above ", kRouteBlockMaxK);
  if (a.logits.size(0) > kRouteBlockMaxT)
    return str("T=", a.logits.size(0), " above ", kRouteBlockMaxT, " (the warp kernel is faster)");
  return moe_route_supports(a);
}

void moe_route_block_run(const MoeRoute& a, Context& ctx) {
  const int64_t T = a.logits.size(0), E = a.logits.size(1);
  if (T == 0) return;
  const auto threads = static_cast<unsigned>((E + 31) / 32 * 32);
  // HYBRID_MOE_ROUTE_RANK=1: the rank form (to test and time it beside the merge).
  static const bool rank = [] {
    const char* v = std::getenv("HYBRID_MOE_ROUTE_RANK");
    return v && std::string(v) == "1";
  }();
  const auto kernel = rank ? moe_route_block_kernel<true> : moe_route_block_kernel<false>;
  kernel<<<static_cast<unsigned>(T), threads, 0, as_stream(ctx.stream())>>>(route_params(a));
  HYBRID_CUDA_CHECK_LAUNCH();
}

// ---- moe_experts ---------------------------------------------------------------------------

constexpr int kSortThreads = 1024;
constexpr int64_t kMaxExperts = 8192;

// Sort state in the workspace (int32): offsets [E + 1], active [E], n_active [1],
// pos_of_pair [P] (-1 for an out-of-range id), pair_of_pos [P].
struct SortLayout {
  int* offsets;
  int* active;
  int* n_active;
  int* pos_of_pair;
  int* pair_of_pos;
};

// Exclusive block scan of v (kSortThreads threads); returns the prefix and the total in *total.
__device__ int block_exclusive_scan(int v, int* warp_sums /* [32] */, int* total) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  int inc = v;
  for (int o = 1; o < 32; o <<= 1) {
    const int n = __shfl_up_sync(0xffffffffu, inc, o);
    if (lane >= o) inc += n;
  }
  if (lane == 31) warp_sums[warp] = inc;
  __syncthreads();
  if (warp == 0) {
    int w = lane < kSortThreads / 32 ? warp_sums[lane] : 0;
    for (int o = 1; o < 32; o <<= 1) {
      const int n = __shfl_up_sync(0xffffffffu, w, o);
      if (lane >= o) w += n;
    }
    warp_sums[lane] = w;  // inclusive over warps
  }
  __syncthreads();
  const int before = (warp > 0 ? warp_sums[warp - 1] : 0) + inc - v;
  *total = warp_sums[kSortThreads / 32 - 1];
  __syncthreads();
  return before;
}

// Counting sort of the P = T·K pairs by expert (one block). ids [T, K] i32 | i64.
__global__ void __launch_bounds__(kSortThreads)
    moe_sort_kernel(const void* ids, bool ids64, int64_t ids_s0, int64_t ids_s1, int T, int K,
                    int E, SortLayout L, const void* x, DType xt, int64_t ldx, float* xf,
                    int Dm) {   // x or null
  extern __shared__ int cnt[];  // [E] counts, then fill cursors
  __shared__ int warp_sums[32];
  __shared__ int total;
  const int P = T * K;
  if (x)  // decode-sized x: its f32 copy [T, Dm] here saves a launch
    for (int i = threadIdx.x; i < T * Dm; i += kSortThreads)
      xf[i] = load_any(x, xt, static_cast<int64_t>(i / Dm) * ldx + i % Dm);
  for (int e = threadIdx.x; e < E; e += kSortThreads) cnt[e] = 0;
  __syncthreads();
  for (int p = threadIdx.x; p < P; p += kSortThreads) {
    const int64_t off = static_cast<int64_t>(p / K) * ids_s0 + static_cast<int64_t>(p % K) * ids_s1;
    const int64_t id =
        ids64 ? static_cast<const int64_t*>(ids)[off] : static_cast<const int32_t*>(ids)[off];
    if (id >= 0 && id < E) atomicAdd(&cnt[id], 1);
  }
  __syncthreads();
  // Each thread owns a run of experts [e0, e1): local sums, one block scan, then the run.
  const int per = (E + kSortThreads - 1) / kSortThreads;
  const int e0 = min(E, static_cast<int>(threadIdx.x) * per), e1 = min(E, e0 + per);
  int c_sum = 0, a_sum = 0;
  for (int e = e0; e < e1; ++e) c_sum += cnt[e], a_sum += cnt[e] > 0;
  int c_before = block_exclusive_scan(c_sum, warp_sums, &total);
  const int c_total = total;
  int a_before = block_exclusive_scan(a_sum, warp_sums, &total);
  const int a_total = total;
  for (int e = e0; e < e1; ++e) {
    L.offsets[e] = c_before;
    if (cnt[e] > 0) L.active[a_before++] = e;
    const int c = cnt[e];
    cnt[e] = c_before;  // fill cursor
    c_before += c;
  }
  if (threadIdx.x == 0) {
    L.offsets[E] = c_total;
    *L.n_active = a_total;
  }
  __syncthreads();
  for (int p = threadIdx.x; p < P; p += kSortThreads) {
    const int64_t off = static_cast<int64_t>(p / K) * ids_s0 + static_cast<int64_t>(p % K) * ids_s1;
    const int64_t id =
        ids64 ? static_cast<const int64_t*>(ids)[off] : static_cast<const int32_t*>(ids)[off];
    int pos = -1;
    if (id >= 0 && id < E) {
      pos = atomicAdd(&cnt[id], 1);
      L.pair_of_pos[pos] = p;
    }
    L.pos_of_pair[p] = pos;
  }
}

constexpr int kExpWarps = 4, kExpTokens = 8;
constexpr size_t kDirectMaxSmem = 48 * 1024;  // x of the direct (decode) path, f32 bytes

// Elements per 16-byte load of T.
template <class T>
constexpr int vec_of() {
  return 16 / static_cast<int>(sizeof(T));
}

// Which pairs a CTA row (blockIdx.y = a) of the expert kernels computes.
//   Sorted (ids == null): routed expert a of the sort, its pairs at sorted positions [p0, p1).
//   Direct (decode, T = 1): pair a itself (position a, expert ids[0, a]; an expert chosen twice is
//   computed twice); no sort kernel, and the gate_up CTAs stage x in shared memory themselves.
struct Pairs {
  SortLayout L;
  const void* ids;  // direct: the [1, K] ids row; null: sorted
  bool ids64;
  int64_t ids_s1;
  int E;
};

// Expert e and positions [p0, p1) of CTA row a; false when it has none.
__device__ __forceinline__ bool pairs_of(const Pairs& P, int a, int& e, int& p0, int& p1) {
  if (P.ids) {
    const int64_t id = P.ids64 ? static_cast<const int64_t*>(P.ids)[a * P.ids_s1]
                               : static_cast<const int32_t*>(P.ids)[a * P.ids_s1];
    if (id < 0 || id >= P.E) return false;
    e = static_cast<int>(id), p0 = a, p1 = a + 1;
    return true;
  }
  if (a >= *P.L.n_active) return false;
  e = P.L.active[a], p0 = P.L.offsets[e], p1 = P.L.offsets[e + 1];
  return true;
}

// The f32 x rows of the first n_tok (<= kExpTokens) pairs of a batch at sorted position q0: the
// staged row x_direct for direct pairs, else row token(pair) of xf [T, Dm]; null past n_tok.
__device__ __forceinline__ void pair_x_rows(const Pairs& P, int q0, int n_tok,
                                            const float* x_direct, const float* xf, int K, int Dm,
                                            const float* (&xrow)[kExpTokens]) {
#pragma unroll
  for (int k = 0; k < kExpTokens; ++k)
    xrow[k] = k >= n_tok ? nullptr
              : P.ids    ? x_direct
                         : xf + static_cast<int64_t>(P.L.pair_of_pos[q0 + k] / K) * Dm;
}

// dot[n][k] += Σ_{d in lane's vectors} rows[n][d]·xrow[k][d] for the kN rows and the first n_tok
// (<= kExpTokens) token rows xrow (f32, 16-byte aligned rows when kVec). Lane l owns vectors
// l, l + 32, ... of V elements; kU of them per row are loaded (kN·kU independent loads in flight)
// before any math.
template <class Tw, bool kVec, int kN, int kU>
__device__ __forceinline__ void row_dot(const float* const* xrow, int n_tok, int D,
                                        float (&dot)[kN][kExpTokens], const Tw* const* rows,
                                        int lane) {
  constexpr int V = kVec ? vec_of<Tw>() : 1;
  for (int d0 = lane * V; d0 < D; d0 += 32 * V * kU) {
    uint4 w[kU][kN];  // kVec: 16 bytes = V elements; else element 0 in .x's bits
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int d = d0 + u * 32 * V;
      if (d < D)
#pragma unroll
        for (int n = 0; n < kN; ++n) {
          if constexpr (kVec) {
            w[u][n] = __ldg(reinterpret_cast<const uint4*>(rows[n] + d));
          } else {
            w[u][n].x = static_cast<uint32_t>(__float_as_uint(to_f32(rows[n][d])));
          }
        }
    }
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int d = d0 + u * 32 * V;
      if (d >= D) break;
#pragma unroll
      for (int k = 0; k < kExpTokens; ++k) {
        if (k >= n_tok) break;
        if constexpr (kVec) {  // V is 4 or 8 and the f32 rows are 16-byte aligned (D·es % 16 == 0)
#pragma unroll
          for (int q = 0; q < V; q += 4) {
            // A plain load: xrow is global (f32 workspace) or shared (the decode path's x).
            const float4 xv = *reinterpret_cast<const float4*>(xrow[k] + d + q);
#pragma unroll
            for (int n = 0; n < kN; ++n) {
              const Tw* e = reinterpret_cast<const Tw*>(&w[u][n]);
              dot[n][k] += to_f32(e[q]) * xv.x + to_f32(e[q + 1]) * xv.y + to_f32(e[q + 2]) * xv.z +
                           to_f32(e[q + 3]) * xv.w;
            }
          }
        } else {
          const float xv = xrow[k][d];
#pragma unroll
          for (int n = 0; n < kN; ++n) dot[n][k] += __uint_as_float(w[u][n].x) * xv;
        }
      }
    }
  }
}

// x [Dm] (dtype Tx) -> xs [Dm] f32 in shared memory, each thread's 8 loads issued before its
// stores (one L2 round trip per 8·blockDim elements instead of one per blockDim).
template <class Tx, int kBatch = 8>
__device__ __forceinline__ void stage_x_batched(const Tx* __restrict__ x, int Dm, float* xs) {
  for (int d0 = threadIdx.x; d0 < Dm; d0 += kBatch * blockDim.x) {
    float v[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int d = d0 + u * blockDim.x;
      v[u] = d < Dm ? to_f32(x[d]) : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int d = d0 + u * blockDim.x;
      if (d < Dm) xs[d] = v[u];
    }
  }
}

// The expert's activation from its gate and up dots: swiglu silu(g)·u, relu2 relu(u)² (g unused).
__device__ __forceinline__ float expert_activation(float g, float u, bool swiglu) {
  if (swiglu) return g / (1.0f + expf(-g)) * u;
  const float r = fmaxf(u, 0.0f);
  return r * r;
}

// h[q0 + k, i] for the first n_tok (<= kExpTokens) pairs of a batch from a warp's partial dots
// (dot[0]: up, dot[1]: gate under swiglu): one warp sum each, lane 0 stores.
__device__ __forceinline__ void store_expert_h(const float (&dot)[2][kExpTokens], int n_tok, int q0,
                                               int I, int i, bool swiglu, int lane, float* h) {
#pragma unroll
  for (int k = 0; k < kExpTokens; ++k) {
    if (k >= n_tok) break;
    const float u = warp_sum(dot[0][k]);
    const float g = swiglu ? warp_sum(dot[1][k]) : 0.0f;
    if (lane == 0) h[static_cast<int64_t>(q0 + k) * I + i] = expert_activation(g, u, swiglu);
  }
}

// h[pos, i] = silu(G_e[i]·x)·(U_e[i]·x) | relu(U_e[i]·x)², one warp per i, pairs 8 at a time.
// Direct pairs: x (row 0, dtype xt) is staged as f32 in dynamic shared memory [Dm] first
// (kBatchedStage: 8 loads per thread in flight, the v3 variant; else one load at a time).
template <class Tw, bool kVec, bool kBatchedStage>
__global__ void __launch_bounds__(kExpWarps * 32, 4)
    moe_gate_up_kernel(const float* __restrict__ xf,  // [T, Dm] f32 (sorted pairs)
                       const void* x, DType xt,       // [1, Dm] (direct pairs)
                       const Tw* __restrict__ gu, int64_t gu_s0, int64_t gu_s1,  // [E, R, Dm]
                       Pairs P, int K, int Dm, int I, bool swiglu,
                       float* __restrict__ h) {  // [P, I]
  extern __shared__ float x_shared[];            // [Dm] (direct pairs)
  if (P.ids) {
    if constexpr (kBatchedStage) {
      if (xt == DType::bf16)
        stage_x_batched(static_cast<const __nv_bfloat16*>(x), Dm, x_shared);
      else if (xt == DType::f16)
        stage_x_batched(static_cast<const __half*>(x), Dm, x_shared);
      else
        stage_x_batched(static_cast<const float*>(x), Dm, x_shared);
    } else {
      for (int d = threadIdx.x; d < Dm; d += blockDim.x) x_shared[d] = load_any(x, xt, d);
    }
    __syncthreads();
  }
  int e, p0, p1;
  if (!pairs_of(P, blockIdx.y, e, p0, p1)) return;
  const int lane = threadIdx.x % 32;
  const int i = blockIdx.x * kExpWarps + threadIdx.x / 32;
  if (i >= I) return;
  const Tw* base = gu + static_cast<int64_t>(e) * gu_s0;
  const Tw* rows[2] = {base + static_cast<int64_t>(swiglu ? I + i : i) * gu_s1,
                       base + static_cast<int64_t>(i) * gu_s1};  // up, gate
  for (int q0 = p0; q0 < p1; q0 += kExpTokens) {
    const int n_tok = min(kExpTokens, p1 - q0);  // warp-uniform
    const float* xrow[kExpTokens];
    pair_x_rows(P, q0, n_tok, x_shared, xf, K, Dm, xrow);
    float dot[2][kExpTokens] = {};
    if (swiglu) {
      row_dot<Tw, kVec, 2, 4>(xrow, n_tok, Dm, dot, rows, lane);
    } else {
      float d1[1][kExpTokens] = {};
      row_dot<Tw, kVec, 1, 4>(xrow, n_tok, Dm, d1, rows, lane);
#pragma unroll
      for (int k = 0; k < kExpTokens; ++k) dot[0][k] = d1[0][k];
    }
    store_expert_h(dot, n_tok, q0, I, i, swiglu, lane, h);
  }
}

// y[pos, d] = down[e, d, :]·h[pos, :], one warp per kDownRows rows d (each h load feeds them
// all), pairs 8 at a time.
constexpr int kDownRows = 4;
template <class Tw, bool kVec>
__global__ void __launch_bounds__(kExpWarps * 32, 3)
    moe_down_kernel(const float* __restrict__ h,                              // [P, I]
                    const Tw* __restrict__ dn, int64_t dn_s0, int64_t dn_s1,  // [E, Dm, I]
                    Pairs P, int Dm, int I, float* __restrict__ y) {          // [P, Dm]
  int e, p0, p1;
  if (!pairs_of(P, blockIdx.y, e, p0, p1)) return;
  const int lane = threadIdx.x % 32;
  const int d0 = (blockIdx.x * kExpWarps + threadIdx.x / 32) * kDownRows;
  if (d0 >= Dm) return;
  const Tw* rows[kDownRows];
#pragma unroll
  for (int n = 0; n < kDownRows; ++n)  // rows past Dm read row d0 instead (never stored)
    rows[n] = dn + static_cast<int64_t>(e) * dn_s0 +
              static_cast<int64_t>(d0 + n < Dm ? d0 + n : d0) * dn_s1;
  for (int q0 = p0; q0 < p1; q0 += kExpTokens) {
    const int n_tok = min(kExpTokens, p1 - q0);  // warp-uniform
    const float* hrow[kExpTokens];
#pragma unroll
    for (int k = 0; k < kExpTokens; ++k)
      hrow[k] = k < n_tok ? h + static_cast<int64_t>(q0 + k) * I : nullptr;
    float dot[kDownRows][kExpTokens] = {};
    row_dot<Tw, kVec, kDownRows, 2>(hrow, n_tok, I, dot, rows, lane);
#pragma unroll
    for (int k = 0; k < kExpTokens; ++k) {
      if (k >= n_tok) break;
#pragma unroll
      for (int n = 0; n < kDownRows; ++n) {
        const float v = warp_sum(dot[n][k]);
        if (lane == 0 && d0 + n < Dm) y[static_cast<int64_t>(q0 + k) * Dm + d0 + n] = v;
      }
    }
  }
}

// out[t, d] = (out[t, d] if accumulate) + Σ_j w[t, j]·y[pos(t, j), d]; direct pairs (T = 1):
// pos(0, j) = j when ids[0, j] is in range.
__global__ void moe_combine_kernel(const float* __restrict__ y, const int* __restrict__ pos_of_pair,
                                   Pairs P, const void* weights, DType wt, int64_t w_s0,
                                   int64_t w_s1, void* out, DType ot, int64_t out_s0, int K, int Dm,
                                   bool accumulate) {
  const int t = blockIdx.x;
  for (int d = threadIdx.x; d < Dm; d += blockDim.x) {
    float acc = 0.0f;
    for (int j = 0; j < K; ++j) {
      int pos;
      if (P.ids) {
        int e, p0, p1;
        pos = pairs_of(P, j, e, p0, p1) ? j : -1;
      } else {
        pos = pos_of_pair[t * K + j];
      }
      if (pos < 0) continue;
      acc += load_any(weights, wt, t * w_s0 + j * w_s1) * y[static_cast<int64_t>(pos) * Dm + d];
    }
    const int64_t o = t * out_s0 + d;
    store_any(out, ot, o, accumulate ? load_any(out, ot, o) + acc : acc);
  }
}

// v3 combine, same sum in the same order: grid (T, ceil(Dm / kCombineThreads)), one output
// element per thread. The K (pos, weight) pairs of token t are read once per CTA into shared
// memory, so a thread's y loads do not wait on index loads and `#pragma unroll` issues 4 of them
// at a time (the v2 kernel above runs one CTA per token and one dependent L2 round trip per
// (d, j): ~80 serial round trips per thread at Dm 2048, K 10, ~25 µs at decode).
constexpr int kCombineThreads = 256, kCombineMaxK = 256;
template <class Ty>
__global__ void __launch_bounds__(kCombineThreads)
    moe_combine_v3_kernel(const Ty* __restrict__ y, const int* __restrict__ pos_of_pair, Pairs P,
                          const void* weights, DType wt, int64_t w_s0, int64_t w_s1, void* out,
                          DType ot, int64_t out_s0, int K, int Dm, bool accumulate) {
  __shared__ int pos_s[kCombineMaxK];
  __shared__ float w_s[kCombineMaxK];
  const int64_t t = blockIdx.x;
  for (int j = threadIdx.x; j < K; j += blockDim.x) {
    int pos;
    if (P.ids) {
      int e, p0, p1;
      pos = pairs_of(P, j, e, p0, p1) ? j : -1;
    } else {
      pos = pos_of_pair[t * K + j];
    }
    pos_s[j] = pos;
    w_s[j] = pos >= 0 ? load_any(weights, wt, t * w_s0 + j * w_s1) : 0.0f;
  }
  __syncthreads();
  const int d = blockIdx.y * kCombineThreads + threadIdx.x;
  if (d >= Dm) return;
  float acc = 0.0f;
#pragma unroll 4
  for (int j = 0; j < K; ++j) {
    const int pos = pos_s[j];
    const float yv = to_f32(y[static_cast<int64_t>(pos >= 0 ? pos : 0) * Dm + d]);  // row 0: unused
    if (pos >= 0) acc += w_s[j] * yv;
  }
  const int64_t o = t * out_s0 + d;
  store_any(out, ot, o, accumulate ? load_any(out, ot, o) + acc : acc);
}

// v4 decode (direct pairs, T = 1): down and combine in one kernel, no y round trip through
// global memory and one launch less. CTA = kFuseWarps warps over kFuseRows rows d (kFuseRows /
// kDownRows row blocks); task u = (row block u % 4, pair u / 4) for u = warp, warp + 8, ...
// (K·4 tasks: 5 per warp at k = 10). A task computes y[j, d..d+3] by row_dot exactly as
// moe_down_kernel (the same sums, bit for bit) into shared memory; then thread n < kFuseRows
// forms out[d0 + n] (+)= Σ_j w[j]·y[j, d0 + n] over the valid pairs in j order (the v3
// combine's order). Bytes: the routed experts' down rows (K·Dm·I elements) + h from L2.
constexpr int kFuseWarps = 8, kFuseRows = 16;
template <class Tw, bool kVec>
__global__ void __launch_bounds__(kFuseWarps * 32)
    moe_down_combine_kernel(const float* __restrict__ h,                              // [K, I]
                            const Tw* __restrict__ dn, int64_t dn_s0, int64_t dn_s1,  // [E, Dm, I]
                            Pairs P, int K, int Dm, int I, const void* weights, DType wt,
                            int64_t w_s1, void* out, DType ot, bool accumulate) {
  constexpr int kBlocks = kFuseRows / kDownRows;
  __shared__ float ys[kCombineMaxK][kFuseRows];
  __shared__ float w_s[kCombineMaxK];
  __shared__ bool ok_s[kCombineMaxK];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int d_cta = blockIdx.x * kFuseRows;
  for (int j = threadIdx.x; j < K; j += blockDim.x) {
    int e, p0, p1;
    const bool ok = pairs_of(P, j, e, p0, p1);
    ok_s[j] = ok;
    w_s[j] = ok ? load_any(weights, wt, j * w_s1) : 0.0f;
  }
  for (int u = warp; u < K * kBlocks; u += kFuseWarps) {  // warp-uniform
    const int j = u / kBlocks, d0 = d_cta + (u % kBlocks) * kDownRows;
    int e, p0, p1;
    float v[kDownRows] = {};
    if (d0 < Dm && pairs_of(P, j, e, p0, p1)) {
      const Tw* rows[kDownRows];
#pragma unroll
      for (int n = 0; n < kDownRows; ++n)  // rows past Dm read row d0 instead (never stored)
        rows[n] = dn + static_cast<int64_t>(e) * dn_s0 +
                  static_cast<int64_t>(d0 + n < Dm ? d0 + n : d0) * dn_s1;
      const float* hrow[kExpTokens] = {};
      hrow[0] = h + static_cast<int64_t>(j) * I;
      float dot[kDownRows][kExpTokens] = {};
      row_dot<Tw, kVec, kDownRows, 2>(hrow, 1, I, dot, rows, lane);
#pragma unroll
      for (int n = 0; n < kDownRows; ++n) v[n] = warp_sum(dot[n][0]);
    }
    if (lane == 0)
#pragma unroll
      for (int n = 0; n < kDownRows; ++n) ys[j][(u % kBlocks) * kDownRows + n] = v[n];
  }
  __syncthreads();
  const int n = threadIdx.x, d = d_cta + n;
  if (n >= kFuseRows || d >= Dm) return;
  float acc = 0.0f;
  for (int j = 0; j < K; ++j)
    if (ok_s[j]) acc += w_s[j] * ys[j][n];
  store_any(out, ot, d, accumulate ? load_any(out, ot, d) + acc : acc);
}

// x [T, D] (rows strided) -> xc [T, D] in To, contiguous: the GEMV paths' f32 copy (out may
// alias x), the tensor-core path's 16-bit one.
template <class Tx, class To>
__global__ void moe_x_copy_kernel(const Tx* __restrict__ x, int64_t ldx, To* __restrict__ xc,
                                  int64_t T, int64_t D) {
  const int64_t n = T * D;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    xc[i] = from_f32<To>(to_f32(x[(i / D) * ldx + i % D]));
}

// Blocks of 256 threads for a grid-stride pass over n elements.
unsigned copy_blocks(int64_t n) {
  return static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 8192));
}

Reason moe_experts_supports(const MoeExperts& a) {
  const int64_t T = a.x.size(0), K = a.ids.size(1), E = a.down.size(0);
  if (E > kMaxExperts) return str("E=", E, " above ", kMaxExperts, " (shared-memory counts)");
  if (T * K > (int64_t{1} << 30)) return std::string("T·k above 2^30");
  if (a.x.size(1) > (int64_t{1} << 30) || a.down.size(2) > (int64_t{1} << 30))
    return std::string("Dm or I above 2^30");
  return {};
}

bool vec_ok(const Tensor& w) {
  const size_t es = dtype_size(w.dtype());
  return reinterpret_cast<uintptr_t>(w.data()) % 16 == 0 && (w.stride(0) * es) % 16 == 0 &&
         (w.stride(1) * es) % 16 == 0 && (w.size(2) * es) % 16 == 0;
}

Reason moe_experts_v3_supports(const MoeExperts& a) {
  if (Reason r = moe_experts_supports(a)) return r;
  if (a.ids.size(1) > kCombineMaxK)
    return str("k=", a.ids.size(1), " above ", kCombineMaxK, " (the v3 combine's shared memory)");
  if (a.x.size(1) > int64_t{65535} * kCombineThreads)
    return str("Dm=", a.x.size(1), " above the v3 combine's grid.y x ", kCombineThreads);
  return {};
}

// v4 = v3 with the decode path's down and combine fused (moe_down_combine_kernel);
// HYBRID_MOE_EXPERTS_V4=0 refuses it (v3 then runs), to test and time both from one build.
Reason moe_experts_v4_supports(const MoeExperts& a) {
  static const bool off = env_is_zero("HYBRID_MOE_EXPERTS_V4");
  if (off) return std::string("HYBRID_MOE_EXPERTS_V4=0");
  return moe_experts_v3_supports(a);
}

// The routed pairs of one call and its workspace (moe_experts v2-v4 and moe_experts_q):
// xf [T, Dm] f32 | h [P, I] f32 | y [P, Dm] f32 | sort state (int32). Decode (T = 1, x fits in
// shared memory) uses direct pairs: no sort, x staged by the gate_up kernel. Otherwise x goes to
// f32 (inside the sort kernel when small, else by its own kernel) and moe_sort groups the pairs
// by expert. `routed`: the CTA rows of the expert kernels (pairs, or an upper bound of the routed
// experts).
struct PairPlan {
  float *xf, *h, *y;
  SortLayout L;
  Pairs pairs;
  bool direct;
  unsigned routed;
};

PairPlan plan_pairs(const Tensor& x, const Tensor& ids, int64_t E, int64_t I, const char* op,
                    Context& ctx, cudaStream_t stream) {
  const int64_t T = x.size(0), Dm = x.size(1), K = ids.size(1), P = T * K;
  const size_t xf_b = align_up(static_cast<size_t>(T * Dm) * 4, 256);
  const size_t h_b = align_up(static_cast<size_t>(P * std::max<int64_t>(I, 1)) * 4, 256);
  const size_t y_b = align_up(static_cast<size_t>(P * Dm) * 4, 256);
  const size_t s_b = align_up(static_cast<size_t>(2 * E + 2 + 2 * P) * 4, 256);
  char* ws = static_cast<char*>(ctx.workspace(xf_b + h_b + y_b + s_b));
  PairPlan plan;
  plan.xf = reinterpret_cast<float*>(ws);
  plan.h = reinterpret_cast<float*>(ws + xf_b);
  plan.y = reinterpret_cast<float*>(ws + xf_b + h_b);
  int* si = reinterpret_cast<int*>(ws + xf_b + h_b + y_b);
  plan.L = SortLayout{si, si + E + 1, si + 2 * E + 1, si + 2 * E + 2, si + 2 * E + 2 + P};
  plan.direct = T == 1 && static_cast<size_t>(Dm) * 4 <= kDirectMaxSmem;
  plan.pairs = Pairs{plan.L, plan.direct ? ids.data() : nullptr, ids.dtype() == DType::i64,
                     ids.stride(1), static_cast<int>(E)};
  plan.routed = static_cast<unsigned>(plan.direct ? K : std::min(E, P));
  if (plan.direct) return plan;
  const bool x_in_sort = T * Dm <= 65536;
  if (!x_in_sort) {
    dispatch_float(x.dtype(), op, [&](auto tx) {
      using Tx = decltype(tx);
      moe_x_copy_kernel<Tx, float><<<copy_blocks(T * Dm), 256, 0, stream>>>(
          x.data_as<const Tx>(), x.stride(0), plan.xf, T, Dm);
      HYBRID_CUDA_CHECK_LAUNCH();
    });
  }
  const size_t sort_smem = static_cast<size_t>(E) * 4;
  if (sort_smem > 48 * 1024) ensure_dynamic_smem(moe_sort_kernel, sort_smem);
  moe_sort_kernel<<<1, kSortThreads, sort_smem, stream>>>(
      ids.data(), ids.dtype() == DType::i64, ids.stride(0), ids.stride(1), static_cast<int>(T),
      static_cast<int>(K), static_cast<int>(E), plan.L, x_in_sort ? x.data() : nullptr, x.dtype(),
      x.stride(0), plan.xf, static_cast<int>(Dm));
  HYBRID_CUDA_CHECK_LAUNCH();
  return plan;
}

// v2 (kV3 false) and v3 / v4 (kFuse: the decode path's down + combine in one kernel): v3 stages the
// decode path's x with batched loads and combines with the parallel kernel; the expert kernels are
// the same.
template <bool kV3, bool kFuse = false>
void moe_experts_run(const MoeExperts& a, Context& ctx) {
  const int64_t T = a.x.size(0), Dm = a.x.size(1), E = a.down.size(0), I = a.down.size(2);
  const int64_t K = a.ids.size(1);
  if (T == 0 || Dm == 0) return;
  const bool swiglu = a.activation == MoeActivation::swiglu;
  const cudaStream_t stream = as_stream(ctx.stream());
  const PairPlan plan = plan_pairs(a.x, a.ids, E, I, MoeExperts::op_name, ctx, stream);
  float *xf = plan.xf, *h = plan.h, *y = plan.y;
  const SortLayout& L = plan.L;
  const Pairs& pairs = plan.pairs;
  const bool direct = plan.direct;
  const unsigned routed = plan.routed;
  if (I > 0) {
    dispatch_float(a.gate_up.dtype(), MoeExperts::op_name, [&](auto tw) {
      using Tw = decltype(tw);
      const dim3 grid(static_cast<unsigned>((I + kExpWarps - 1) / kExpWarps), routed);
      auto launch = [&](auto kernel) {
        const size_t smem = direct ? static_cast<size_t>(Dm) * 4 : 0;
        kernel<<<grid, kExpWarps * 32, smem, stream>>>(
            xf, a.x.data(), a.x.dtype(), a.gate_up.data_as<const Tw>(), a.gate_up.stride(0),
            a.gate_up.stride(1), pairs, static_cast<int>(K), static_cast<int>(Dm),
            static_cast<int>(I), swiglu, h);
        HYBRID_CUDA_CHECK_LAUNCH();
      };
      if (vec_ok(a.gate_up))
        launch(moe_gate_up_kernel<Tw, true, kV3>);
      else
        launch(moe_gate_up_kernel<Tw, false, kV3>);
    });
  }
  if (kFuse && direct) {  // down + combine in one kernel (y never written)
    dispatch_float(a.down.dtype(), MoeExperts::op_name, [&](auto tw) {
      using Tw = decltype(tw);
      const auto blocks = static_cast<unsigned>((Dm + kFuseRows - 1) / kFuseRows);
      auto launch = [&](auto kernel) {
        kernel<<<blocks, kFuseWarps * 32, 0, stream>>>(
            h, a.down.data_as<const Tw>(), a.down.stride(0), a.down.stride(1), pairs,
            static_cast<int>(K), static_cast<int>(Dm), static_cast<int>(I), a.weights.data(),
            a.weights.dtype(), a.weights.stride(1), a.out.data(), a.out.dtype(), a.accumulate);
        HYBRID_CUDA_CHECK_LAUNCH();
      };
      if (vec_ok(a.down))
        launch(moe_down_combine_kernel<Tw, true>);
      else
        launch(moe_down_combine_kernel<Tw, false>);
    });
    return;
  }
  dispatch_float(a.down.dtype(), MoeExperts::op_name, [&](auto tw) {
    using Tw = decltype(tw);
    const int64_t rows_per_block = int64_t{kExpWarps} * kDownRows;
    const dim3 grid(static_cast<unsigned>((Dm + rows_per_block - 1) / rows_per_block), routed);
    auto launch = [&](auto kernel) {
      kernel<<<grid, kExpWarps * 32, 0, stream>>>(h, a.down.data_as<const Tw>(), a.down.stride(0),
                                                  a.down.stride(1), pairs, static_cast<int>(Dm),
                                                  static_cast<int>(I), y);
      HYBRID_CUDA_CHECK_LAUNCH();
    };
    if (vec_ok(a.down))
      launch(moe_down_kernel<Tw, true>);
    else
      launch(moe_down_kernel<Tw, false>);
  });
  if constexpr (kV3) {
    const dim3 grid(static_cast<unsigned>(T),
                    static_cast<unsigned>((Dm + kCombineThreads - 1) / kCombineThreads));
    moe_combine_v3_kernel<<<grid, kCombineThreads, 0, stream>>>(
        y, L.pos_of_pair, pairs, a.weights.data(), a.weights.dtype(), a.weights.stride(0),
        a.weights.stride(1), a.out.data(), a.out.dtype(), a.out.stride(0), static_cast<int>(K),
        static_cast<int>(Dm), a.accumulate);
  } else {
    moe_combine_kernel<<<static_cast<unsigned>(T), 256, 0, stream>>>(
        y, L.pos_of_pair, pairs, a.weights.data(), a.weights.dtype(), a.weights.stride(0),
        a.weights.stride(1), a.out.data(), a.out.dtype(), a.out.stride(0), static_cast<int>(K),
        static_cast<int>(Dm), a.accumulate);
  }
  HYBRID_CUDA_CHECK_LAUNCH();
}

// ---- moe_experts.cuda_v6: the decode path (T = 1) in two kernels of few dependent round trips
//
// v4 at Qwen3-Next's decode shape (512 experts, top-10, I 512, Dm 2048, bf16) takes 28.7 µs for
// 62.9 MB (15 µs at the copy ceiling). ncu (session 7, runs 2-3): gate_up 17.4 µs, down +
// combine 13.0 µs. Both are chains of dependent round trips, not bandwidth:
//   gate_up: x staged in 2 batches of loads (2 round trips), then the pair's id (1), then the
//     rows in 2 chunks of 8 loads a lane (2): ~5 a CTA, over 2.4 waves of CTAs;
//   down: per task (pair j, 4 rows) the id (1), then the rows (1), then h (1, issued after the
//     rows in the math loop), 5 tasks a warp one after another.
// v6 (`moe_experts.cuda_v6`; `HYBRID_MOE_EXPERTS_V6=0` → v4; T = 1 with 16-byte rows only):
//   gate_up: the id first, then the warp's whole first chunk of both rows (8 16-byte loads a
//     row and lane: 2048 bf16 inputs) issued before x is staged (16 loads a thread in one
//     batch): ~2 round trips a CTA.
//   down + combine: a CTA of 8 warps owns `rows` output rows (8, or 4 or 2 when shared memory
//     is short). The K ids and weights (one round trip, with h [K, I] f32 copied by cp.async beside
//     it), then every routed expert's `rows` rows copied by cp.async at once (K·rows·I·2 bytes:
//     80 KB at the decode shape, 2 CTAs a SM: one wave of 256 CTAs), then the weighted dots
//     from shared memory (a warp per output row over the pairs, one warp sum). The kernel is
//     launched programmatically after gate_up (griddepcontrol): the ids and the row copies need
//     only the op's inputs and run under gate_up's last CTAs; h is copied after the wait.
// Bytes: the routed experts' weights (3·I·Dm elements each for swiglu) + x, h from L2.
constexpr int kGu6Warps = 4, kGu6Loads = 8;  // gate_up: warps a CTA, 16-byte loads a row and lane
constexpr int kDn6Warps = 8;
constexpr size_t kDn6MaxSmem = 200 * 1024;

// h[j, i] = silu(G_e[i]·x)·(U_e[i]·x) | relu(U_e[i]·x)² for pair j = blockIdx.y (direct pairs;
// expert ids[0, j]), one warp per i. x [Dm] (Tx) staged as f32 in dynamic shared memory.
template <class Tw, class Tx>
__global__ void __launch_bounds__(kGu6Warps * 32, 4)
    moe_gate_up_v6_kernel(const Tx* __restrict__ x, const Tw* __restrict__ gu, int64_t gu_s0,
                          int64_t gu_s1, Pairs P, int Dm, int I, bool swiglu,
                          float* __restrict__ h) {  // [K, I]
  extern __shared__ float x_shared[];               // [Dm]
  constexpr int V = vec_of<Tw>(), kChunk = 32 * V * kGu6Loads;
  const int lane = threadIdx.x % 32, j = blockIdx.y;
  const int i = blockIdx.x * kGu6Warps + threadIdx.x / 32;
  grid_dependents_launch();  // the down kernel may start its weight copies (PDL)
  int e, p0, p1;
  if (!pairs_of(P, j, e, p0, p1)) return;  // CTA-uniform (the id of pair j)
  const bool active = i < I;               // warp-uniform; every warp stages x
  const Tw* base = gu + static_cast<int64_t>(e) * gu_s0;
  const Tw* up = base + static_cast<int64_t>(swiglu ? I + i : i) * gu_s1;
  const Tw* gate = base + static_cast<int64_t>(i) * gu_s1;
  uint4 wu[kGu6Loads], wg[kGu6Loads];
  auto load_chunk = [&](int d0) {  // the lane's vectors lane + 32u of the chunk at d0
#pragma unroll
    for (int u = 0; u < kGu6Loads; ++u) {
      const int d = d0 + (u * 32 + lane) * V;
      if (active && d < Dm) {
        wu[u] = __ldg(reinterpret_cast<const uint4*>(up + d));
        if (swiglu) wg[u] = __ldg(reinterpret_cast<const uint4*>(gate + d));
      }
    }
  };
  load_chunk(0);  // in flight while x is staged
  stage_x_batched<Tx, 16>(x, Dm, x_shared);
  __syncthreads();
  float du = 0.0f, dg = 0.0f;
  for (int d0 = 0; d0 < Dm; d0 += kChunk) {
    if (d0 > 0) load_chunk(d0);
#pragma unroll
    for (int u = 0; u < kGu6Loads; ++u) {
      const int d = d0 + (u * 32 + lane) * V;
      if (!active || d >= Dm) break;
      const Tw* eu = reinterpret_cast<const Tw*>(&wu[u]);
      const Tw* eg = reinterpret_cast<const Tw*>(&wg[u]);
#pragma unroll
      for (int q = 0; q < V; q += 4) {
        const float4 xv = *reinterpret_cast<const float4*>(x_shared + d + q);
        du += to_f32(eu[q]) * xv.x + to_f32(eu[q + 1]) * xv.y + to_f32(eu[q + 2]) * xv.z +
              to_f32(eu[q + 3]) * xv.w;
        if (swiglu)
          dg += to_f32(eg[q]) * xv.x + to_f32(eg[q + 1]) * xv.y + to_f32(eg[q + 2]) * xv.z +
                to_f32(eg[q + 3]) * xv.w;
      }
    }
  }
  if (!active) return;
  du = warp_sum(du);
  dg = swiglu ? warp_sum(dg) : 0.0f;
  if (lane == 0) h[static_cast<int64_t>(j) * I + i] = expert_activation(dg, du, swiglu);
}

// Dynamic shared memory of the v6 down kernel for `rows` output rows a CTA: the staged rows
// [K][rows][I] (Tw), h [K][I] f32, the weights [K] f32 and ids [K].
size_t moe_down_v6_smem(int64_t K, int64_t I, int64_t rows, size_t wsize) {
  return align_up(static_cast<size_t>(K * rows * I) * wsize, 16) + static_cast<size_t>(K * I) * 4 +
         static_cast<size_t>(K) * 8;
}

// out[d] (+)= Σ_j w[j]·(down[e_j, d, :]·h[j, :]) for the CTA's `rows` rows d0 = blockIdx.x·rows
// .., j in order over the valid pairs (v4's sum order per (j, d) differs: tolerance, not bits).
template <class Tw>
__global__ void __launch_bounds__(kDn6Warps * 32)
    moe_down_combine_v6_kernel(const float* __restrict__ h,  // [K, I]
                               const Tw* __restrict__ dn, int64_t dn_s0,
                               int64_t dn_s1,  // [E, Dm, I]
                               Pairs P, int K, int Dm, int I, int rows, const void* weights,
                               DType wt, int64_t w_s1, void* out, DType ot, bool accumulate) {
  extern __shared__ uint4 dn6_smem[];
  constexpr int V = vec_of<Tw>();
  const int d0 = blockIdx.x * rows;
  auto* ws = reinterpret_cast<Tw*>(dn6_smem);  // [K][rows][I]
  const size_t ws_bytes = (static_cast<size_t>(K) * rows * I * sizeof(Tw) + 15) / 16 * 16;
  auto* hs = reinterpret_cast<float*>(reinterpret_cast<char*>(dn6_smem) + ws_bytes);
  float* w_s = hs + K * I;                     // [K]
  int* e_s = reinterpret_cast<int*>(w_s + K);  // [K], -1: pair skipped
  // Launched with programmatic stream serialisation after the gate_up kernel (pdl): steps 1-2
  // read only the op's inputs (ids, weights, the down rows), so they run while gate_up's last
  // CTAs do; h (gate_up's output) is copied after griddepcontrol.wait.
  // 1. The ids and weights.
  for (int j = threadIdx.x; j < K; j += blockDim.x) {
    int e, p0, p1;
    const bool ok = pairs_of(P, j, e, p0, p1);
    e_s[j] = ok ? e : -1;
    w_s[j] = ok ? load_any(weights, wt, j * w_s1) : 0.0f;
  }
  __syncthreads();  // e_s
  // 2. Every valid pair's rows d0 .. d0 + rows - 1 (rows past Dm copy row d0: never stored), all
  // pieces at once: rows·(I / V) a pair, piece u = (row r, vector k) of thread u mod blockDim,
  // (r, k) advanced by counters (no divisions per piece).
  const int row_pieces = I / V, pair_pieces = rows * row_pieces;
  const int step_r = blockDim.x / row_pieces, step_k = blockDim.x % row_pieces;
  const int r_first = threadIdx.x / row_pieces, k_first = threadIdx.x % row_pieces;
  for (int j = 0; j < K; ++j) {
    const int e = e_s[j];
    if (e < 0) continue;
    const Tw* src = dn + static_cast<int64_t>(e) * dn_s0;
    Tw* dst = ws + static_cast<int64_t>(j) * rows * I;
    int r = r_first, k = k_first;
    for (int u = threadIdx.x; u < pair_pieces; u += blockDim.x) {
      const int d = d0 + r < Dm ? d0 + r : d0;
      cp_async16(dst + r * I + k * V, src + static_cast<int64_t>(d) * dn_s1 + k * V);
      r += step_r, k += step_k;
      if (k >= row_pieces) k -= row_pieces, ++r;
    }
  }
  // h [K, I] f32 once gate_up has completed (16-byte pieces: I·4 % 16 == 0).
  grid_dependency_wait();
  const int h_pieces = K * I / 4;
  for (int u = threadIdx.x; u < h_pieces; u += blockDim.x) cp_async16(hs + 4 * u, h + 4 * u);
  cp_commit();
  cp_wait<0>();
  __syncthreads();
  // 3. Warp w owns row r = w mod rows of the CTA and the pairs j = w / rows, + 8 / rows, ...
  // (rows divides the 8 warps): the lane's part of Σ_j w_j·(down[e_j, d0 + r, :]·h[j, :]) over
  // its vectors lane, lane + 32, ... of each row, every load independent of the sums, then one
  // warp sum (v6's first form, a warp per (pair, row) with a warp sum each, spent half the
  // kernel's samples here: session 8 run 1).
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int r = warp % rows, j_step = kDn6Warps / rows;
  float acc = 0.0f;
  for (int j = warp / rows; j < K; j += j_step) {
    if (e_s[j] < 0) continue;  // warp-uniform
    const Tw* wrow = ws + (static_cast<int64_t>(j) * rows + r) * I;
    const float* hrow = hs + j * I;
    float dot = 0.0f;
    for (int d = lane * V; d < I; d += 32 * V) {
      const uint4 wv = *reinterpret_cast<const uint4*>(wrow + d);
      const Tw* we = reinterpret_cast<const Tw*>(&wv);
#pragma unroll
      for (int q = 0; q < V; q += 4) {
        const float4 hv = *reinterpret_cast<const float4*>(hrow + d + q);
        dot += to_f32(we[q]) * hv.x + to_f32(we[q + 1]) * hv.y + to_f32(we[q + 2]) * hv.z +
               to_f32(we[q + 3]) * hv.w;
      }
    }
    acc += w_s[j] * dot;
  }
  __shared__ float warp_part[kDn6Warps];
  acc = warp_sum(acc);
  if (lane == 0) warp_part[warp] = acc;
  __syncthreads();
  // 4. Thread n < rows: out[d0 + n] = the sum of its row's warp parts, in warp order.
  const int n = threadIdx.x, d = d0 + n;
  if (n >= rows || d >= Dm) return;
  float sum = 0.0f;
  for (int w = n; w < kDn6Warps; w += rows) sum += warp_part[w];
  store_any(out, ot, d, accumulate ? load_any(out, ot, d) + sum : sum);
}

// Rows a CTA of the v6 down kernel: 8 (80 KB at the decode shape: 2 CTAs a SM), else 4 or 2
// while the staged rows and h exceed kDn6MaxSmem (0: none fits).
int64_t moe_down_v6_rows(int64_t K, int64_t I, size_t wsize) {
  for (int64_t rows : {8, 4, 2})
    if (moe_down_v6_smem(K, I, rows, wsize) <= kDn6MaxSmem) return rows;
  return 0;
}

// v6 (T = 1): the two kernels above. HYBRID_MOE_EXPERTS_V6=0 refuses it (v4 then runs).
Reason moe_experts_v6_supports(const MoeExperts& a) {
  static const bool off = env_is_zero("HYBRID_MOE_EXPERTS_V6");
  if (off) return std::string("HYBRID_MOE_EXPERTS_V6=0");
  if (Reason r = moe_experts_v3_supports(a)) return r;
  const int64_t T = a.x.size(0), Dm = a.x.size(1), K = a.ids.size(1), I = a.down.size(2);
  if (T != 1) return str("T=", T, ": v6 is the decode path (T = 1)");
  if (I == 0) return std::string("I=0: no expert rows (v4 writes the empty sums)");
  if (static_cast<size_t>(Dm) * 4 > kDirectMaxSmem)
    return str("Dm=", Dm, ": x above ", kDirectMaxSmem, " bytes of shared memory as f32");
  if (!vec_ok(a.gate_up) || !vec_ok(a.down))
    return std::string("expert rows not 16-byte aligned (v6 loads and copies 16-byte pieces)");
  if (moe_down_v6_rows(K, I, dtype_size(a.down.dtype())) == 0)
    return str("k=", K, ", I=", I, ": 2 rows of every routed expert and h above ", kDn6MaxSmem,
               " bytes of shared memory");
  return {};
}

// Launches a down kernel programmatically after the gate_up kernel just launched (griddepcontrol:
// its prologue overlaps gate_up's tail; it reads h only after griddepcontrol.wait).
// HYBRID_MOE_PDL=0, or after_gate_up false (no gate_up launched, e.g. I = 0: the previous kernel
// is another op's, whose early trigger could let the id reads run ahead of its writes): a plain
// launch.
template <class... Params, class... Args>
void launch_after_gate_up(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                          cudaStream_t stream, bool after_gate_up, Args... args) {
  static const bool pdl_on = !env_is_zero("HYBRID_MOE_PDL");
  launch_programmatic(kernel, grid, block, smem, stream, pdl_on && after_gate_up, args...);
}

// The decode paths' (v6, q-v2; T = 1) pairs: h [k, I] f32 in the workspace and the direct pairs
// (CTA row j = pair j, expert ids[0, j]; no sort).
struct DecodePairs {
  float* h;
  Pairs pairs;
};
DecodePairs decode_pairs(const Tensor& ids, int64_t E, int64_t I, Context& ctx) {
  const int64_t K = ids.size(1);
  auto* h = static_cast<float*>(
      ctx.workspace(align_up(static_cast<size_t>(K * std::max<int64_t>(I, 1)) * 4, 256)));
  return {h, Pairs{SortLayout{}, ids.data(), ids.dtype() == DType::i64, ids.stride(1),
                   static_cast<int>(E)}};
}

void moe_experts_v6_run(const MoeExperts& a, Context& ctx) {
  const int64_t Dm = a.x.size(1), E = a.down.size(0), I = a.down.size(2), K = a.ids.size(1);
  if (Dm == 0) return;
  const bool swiglu = a.activation == MoeActivation::swiglu;
  const cudaStream_t stream = as_stream(ctx.stream());
  const DecodePairs dp = decode_pairs(a.ids, E, I, ctx);
  float* const h = dp.h;
  const Pairs& pairs = dp.pairs;
  if (I > 0) {
    dispatch_float(a.gate_up.dtype(), MoeExperts::op_name, [&](auto tw) {
      using Tw = decltype(tw);
      dispatch_float(a.x.dtype(), MoeExperts::op_name, [&](auto tx) {
        using Tx = decltype(tx);
        const dim3 grid(static_cast<unsigned>((I + kGu6Warps - 1) / kGu6Warps),
                        static_cast<unsigned>(K));
        moe_gate_up_v6_kernel<Tw, Tx>
            <<<grid, kGu6Warps * 32, static_cast<size_t>(Dm) * 4, stream>>>(
                a.x.data_as<const Tx>(), a.gate_up.data_as<const Tw>(), a.gate_up.stride(0),
                a.gate_up.stride(1), pairs, static_cast<int>(Dm), static_cast<int>(I), swiglu, h);
        HYBRID_CUDA_CHECK_LAUNCH();
      });
    });
  }
  dispatch_float(a.down.dtype(), MoeExperts::op_name, [&](auto tw) {
    using Tw = decltype(tw);
    const int64_t rows = moe_down_v6_rows(K, I, sizeof(Tw));
    const size_t smem = moe_down_v6_smem(K, I, rows, sizeof(Tw));
    const auto kernel = moe_down_combine_v6_kernel<Tw>;
    ensure_dynamic_smem(kernel, smem);
    launch_after_gate_up(kernel, dim3(static_cast<unsigned>((Dm + rows - 1) / rows)),
                         dim3(kDn6Warps * 32), smem, stream, I > 0, static_cast<const float*>(h),
                         a.down.data_as<const Tw>(), a.down.stride(0), a.down.stride(1), pairs,
                         static_cast<int>(K), static_cast<int>(Dm), static_cast<int>(I),
                         static_cast<int>(rows), a.weights.data(), a.weights.dtype(),
                         a.weights.stride(1), a.out.data(), a.out.dtype(), a.accumulate);
  });
}
// ---- moe_experts_q.cuda: MLX-quantized experts on moe_experts v3's paths ----------------------
//
// v3's structure over packed codes: plan_pairs (decode: direct pairs, x staged by gate_up;
// otherwise the pairs sorted by expert), then a gate_up and a down kernel that take an expert's
// pairs 8 tokens at a time, so a routed expert's codes are read once per 8 of its pairs (a
// prefill chunk reads each routed expert ⌈pairs / 8⌉ times, not once per pair), then
// moe_combine_v3_kernel (Σ_j in j order). Lane l takes the packed words l, l + 32, ... of a row
// (a word holds 32 / bits codes of one group: group_size >= 32), dequantizes each word once,
// w = s·q + b in f32 as dequantize does, and dots it with up to 8 token rows. Ids outside
// [0, E) add nothing, as in the other CUDA variants.
struct QExperts {
  const uint32_t* w;  // [E, rows, words]
  int64_t w_s0, w_s1;
  const void* s;  // scales [E, rows, groups]
  const void* b;  // biases, same layout and dtype
  int64_t s_s0, s_s1, b_s0, b_s1;
  DType sdt;
  int group;
  int group_shift;  // log2(group): group sizes are 32, 64 or 128
};

QExperts q_experts(const QuantizedExperts& q) {
  return {q.weight.data_as<const uint32_t>(),
          q.weight.stride(0),
          q.weight.stride(1),
          q.scales.data(),
          q.biases.data(),
          q.scales.stride(0),
          q.scales.stride(1),
          q.biases.stride(0),
          q.biases.stride(1),
          q.scales.dtype(),
          q.group_size,
          q.group_size == 32   ? 5
          : q.group_size == 64 ? 6
                               : 7};
}

// dot[n][k] += Σ_{j in the lane's words} W[e, rows[n], j]·xrow[k][j] for the kN rows (of `in`
// inputs) and the first n_tok (<= kExpTokens) token rows (f32).
template <int kBits, int kN>
__device__ __forceinline__ void q_rows_dot(const QExperts& Q, int e, const int64_t (&rows)[kN],
                                           int in, const float* const* xrow, int n_tok,
                                           float (&dot)[kN][kExpTokens], int lane) {
  constexpr int kPer = 32 / kBits;
  constexpr uint32_t kMask = (1u << kBits) - 1u;
  const int words = in / kPer;
  const uint32_t* wr[kN];
  int64_t so[kN], bo[kN];
#pragma unroll
  for (int n = 0; n < kN; ++n) {
    wr[n] = Q.w + static_cast<int64_t>(e) * Q.w_s0 + rows[n] * Q.w_s1;
    so[n] = static_cast<int64_t>(e) * Q.s_s0 + rows[n] * Q.s_s1;
    bo[n] = static_cast<int64_t>(e) * Q.b_s0 + rows[n] * Q.b_s1;
  }
  for (int u = lane; u < words; u += 32) {
    const int j0 = u * kPer, g = j0 / Q.group;
    float w[kN][kPer];
#pragma unroll
    for (int n = 0; n < kN; ++n) {
      const uint32_t word = __ldg(wr[n] + u);
      const float s = load_any(Q.s, Q.sdt, so[n] + g), b = load_any(Q.b, Q.sdt, bo[n] + g);
#pragma unroll
      for (int c = 0; c < kPer; ++c)
        w[n][c] = s * static_cast<float>((word >> (c * kBits)) & kMask) + b;
    }
#pragma unroll
    for (int k = 0; k < kExpTokens; ++k) {
      if (k >= n_tok) break;
#pragma unroll
      for (int c = 0; c < kPer; ++c) {
        const float xv = xrow[k][j0 + c];
#pragma unroll
        for (int n = 0; n < kN; ++n) dot[n][k] += w[n][c] * xv;
      }
    }
  }
}

// h[pos, i] = silu(G_e[i]·x)·(U_e[i]·x) | relu(U_e[i]·x)², one warp per i, pairs 8 at a time
// (moe_gate_up_kernel's form; direct pairs: x (row 0, dtype xt) staged as f32 first).
template <int kBits>
__global__ void __launch_bounds__(kExpWarps * 32)
    moe_q_gate_up_kernel(const float* __restrict__ xf,  // [T, Dm] f32 (sorted pairs)
                         const void* x, DType xt,       // [1, Dm] (direct pairs)
                         QExperts G, Pairs P, int K, int Dm, int I, bool swiglu,
                         float* __restrict__ h) {  // [P, I]
  extern __shared__ float xq_shared[];             // [Dm] (direct pairs)
  if (P.ids) {
    for (int d = threadIdx.x; d < Dm; d += blockDim.x) xq_shared[d] = load_any(x, xt, d);
    __syncthreads();
  }
  int e, p0, p1;
  if (!pairs_of(P, blockIdx.y, e, p0, p1)) return;
  const int lane = threadIdx.x % 32;
  const int i = blockIdx.x * kExpWarps + threadIdx.x / 32;
  if (i >= I) return;
  for (int q0 = p0; q0 < p1; q0 += kExpTokens) {
    const int n_tok = min(kExpTokens, p1 - q0);  // warp-uniform
    const float* xrow[kExpTokens];
    pair_x_rows(P, q0, n_tok, xq_shared, xf, K, Dm, xrow);
    float dot[2][kExpTokens] = {};  // up, gate
    if (swiglu) {
      const int64_t rows[2] = {I + i, i};
      q_rows_dot<kBits, 2>(G, e, rows, Dm, xrow, n_tok, dot, lane);
    } else {
      const int64_t rows[1] = {i};
      float d1[1][kExpTokens] = {};
      q_rows_dot<kBits, 1>(G, e, rows, Dm, xrow, n_tok, d1, lane);
#pragma unroll
      for (int k = 0; k < kExpTokens; ++k) dot[0][k] = d1[0][k];
    }
    store_expert_h(dot, n_tok, q0, I, i, swiglu, lane, h);
  }
}

// y[pos, d] = down[e, d, :]·h[pos, :], one warp per kDownRows rows d, pairs 8 at a time
// (moe_down_kernel's form).
template <int kBits>
__global__ void __launch_bounds__(kExpWarps * 32)
    moe_q_down_kernel(const float* __restrict__ h, QExperts D, Pairs P, int Dm, int I,
                      float* __restrict__ y) {  // [P, Dm]
  int e, p0, p1;
  if (!pairs_of(P, blockIdx.y, e, p0, p1)) return;
  const int lane = threadIdx.x % 32;
  const int d0 = (blockIdx.x * kExpWarps + threadIdx.x / 32) * kDownRows;
  if (d0 >= Dm) return;
  int64_t rows[kDownRows];
#pragma unroll
  for (int n = 0; n < kDownRows; ++n) rows[n] = d0 + n < Dm ? d0 + n : d0;  // never stored
  for (int q0 = p0; q0 < p1; q0 += kExpTokens) {
    const int n_tok = min(kExpTokens, p1 - q0);  // warp-uniform
    const float* hrow[kExpTokens];
#pragma unroll
    for (int k = 0; k < kExpTokens; ++k)
      hrow[k] = k < n_tok ? h + static_cast<int64_t>(q0 + k) * I : nullptr;
    float dot[kDownRows][kExpTokens] = {};
    q_rows_dot<kBits, kDownRows>(D, e, rows, I, hrow, n_tok, dot, lane);
#pragma unroll
    for (int k = 0; k < kExpTokens; ++k) {
      if (k >= n_tok) break;
#pragma unroll
      for (int n = 0; n < kDownRows; ++n) {
        const float v = warp_sum(dot[n][k]);
        if (lane == 0 && d0 + n < Dm) y[static_cast<int64_t>(q0 + k) * Dm + d0 + n] = v;
      }
    }
  }
}

// v3's limits: k within the combine's shared memory, Dm within its grid, the routed experts
// within grid.y.
Reason moe_experts_q_supports(const MoeExpertsQ& a) {
  const int64_t T = a.x.size(0), Dm = a.x.size(1), K = a.ids.size(1);
  const int64_t E = a.down.scales.size(0);
  if (K > kCombineMaxK)
    return str("k=", K, " above ", kCombineMaxK, " (the v3 combine's shared memory)");
  if (Dm > int64_t{65535} * kCombineThreads)
    return str("Dm=", Dm, " above the v3 combine's grid.y x ", kCombineThreads);
  if (std::min(E, T * K) > 65535) return str("min(E, T·k)=", std::min(E, T * K), " above 65535");
  if (T > 65535) return str("T=", T, " above the combine's 65535 blocks");
  return {};
}

void moe_experts_q_run(const MoeExpertsQ& a, Context& ctx) {
  const int64_t T = a.x.size(0), Dm = a.x.size(1), K = a.ids.size(1);
  const int64_t E = a.down.scales.size(0), I = a.down.scales.size(2) * a.down.group_size;
  if (T == 0 || Dm == 0) return;
  const bool swiglu = a.activation == MoeActivation::swiglu;
  const cudaStream_t stream = as_stream(ctx.stream());
  const PairPlan plan = plan_pairs(a.x, a.ids, E, I, MoeExpertsQ::op_name, ctx, stream);
  {
    const dim3 grid(static_cast<unsigned>((I + kExpWarps - 1) / kExpWarps), plan.routed);
    const size_t smem = plan.direct ? static_cast<size_t>(Dm) * 4 : 0;
    auto kernel = a.gate_up.bits == 4 ? moe_q_gate_up_kernel<4> : moe_q_gate_up_kernel<8>;
    kernel<<<grid, kExpWarps * 32, smem, stream>>>(
        plan.xf, a.x.data(), a.x.dtype(), q_experts(a.gate_up), plan.pairs, static_cast<int>(K),
        static_cast<int>(Dm), static_cast<int>(I), swiglu, plan.h);
    HYBRID_CUDA_CHECK_LAUNCH();
  }
  {
    const int64_t rows_per_block = int64_t{kExpWarps} * kDownRows;
    const dim3 grid(static_cast<unsigned>((Dm + rows_per_block - 1) / rows_per_block), plan.routed);
    auto kernel = a.down.bits == 4 ? moe_q_down_kernel<4> : moe_q_down_kernel<8>;
    kernel<<<grid, kExpWarps * 32, 0, stream>>>(plan.h, q_experts(a.down), plan.pairs,
                                                static_cast<int>(Dm), static_cast<int>(I), plan.y);
    HYBRID_CUDA_CHECK_LAUNCH();
  }
  const dim3 grid(static_cast<unsigned>(T),
                  static_cast<unsigned>((Dm + kCombineThreads - 1) / kCombineThreads));
  moe_combine_v3_kernel<<<grid, kCombineThreads, 0, stream>>>(
      plan.y, plan.L.pos_of_pair, plan.pairs, a.weights.data(), a.weights.dtype(),
      a.weights.stride(0), a.weights.stride(1), a.out.data(), a.out.dtype(), a.out.stride(0),
      static_cast<int>(K), static_cast<int>(Dm), a.accumulate);
  HYBRID_CUDA_CHECK_LAUNCH();
}

// ---- moe_experts_q.cuda_v2: the decode path (T = 1) over 16-byte code chunks ----------------
//
// v1 (above) at Qwen3-Next's 4-bit decode shape (512 experts, top-10, Dm 2048, I 512, group 64)
// took 53.3 µs for 17.7 MB of routed codes, scales and biases (7.4 µs at the copy ceiling; session
// 9 run 2): a lane reads 4-byte words, one scale and bias load per word, and 4 launches (pairs,
// gate_up, down, combine). v2 (`moe_experts_q.cuda_v2`; HYBRID_MOE_Q_V2=0 → v1) takes 19.6 µs
// (session 10 run 1; PERFORMANCE.md "session 9" has each earlier step's measurement):
//   - A lane reads whole 16-byte chunks (32 4-bit or 16 8-bit codes, inside one group), one scale
//     and bias each (typed: no dtype branch a load); LR lanes a row (the largest power of 2 <=
//     min(chunks a row, 32)), so 32 / LR rows a warp-pass.
//   - The code q becomes f = 1 + q / 2^bits by placing its bits in the top of an f32 mantissa
//     (a shift and one LOP3). gate_up: Σ_c (s·q_c + b)·x_c = 2^bits·s·(Σ_c f_c·x_c - Σ_c x_c) +
//     b·Σ_c x_c with Σ_c x_c of each chunk computed once when x is staged (3 instructions a
//     code); down: w_c = 2^bits·s·f_c + (b - 2^bits·s) then w_c·h_c (4 a code, no sums).
//   - x in shared memory and h in global memory interleaved by chunk: element i = c·kC + 4p + q
//     at [(p·nch + c)·4 + q], so the LR lanes of a row read consecutive 16-byte pieces (h read
//     row-major took 16 L1 wavefronts a load: down 24 µs against 15.8).
//   - gate_up: CTA row j = pair j (expert ids[0, j]); a lane takes kQ2GateUnits units i at once
//     (the gate and up rows of each under swiglu), so x's shared pieces serve 2 rows. 1 unit
//     (96 registers) took 19.6 µs for the op, 2 units (128 registers, 44 bytes of spills) 20.0
//     and 4 units 23.9 (session 10 run 1).
//   - down + combine: a CTA of 8 warps takes (32 / LR)·kQ2DownRows output rows, its warp v the
//     pairs j = v, v + 8, ... (2048 warps at the decode shape; a warp for all pairs gave 1024
//     and took 10.9 µs against 8.8), each lane 4 rows with the chunk's h pieces read once, then
//     the warps' parts added in warp order. Launched programmatically after gate_up (the ids,
//     weights and first row loads before griddepcontrol.wait, h read after it). 2 launches, no
//     pair plan.
// What bounds it (ncu, session 9 runs 9-10): both kernels issue ~0.4 instructions a cycle per
// scheduler at 20-24% occupancy (gate_up 13.6 µs at 128 registers with 44 bytes of spills, 1.2
// waves; down 8.8 µs), i.e. instruction latency with few warps, not DRAM (14-18%).
constexpr int kQ2Warps = 4;      // gate_up: warps a CTA
constexpr int kQ2GateBatch = 1;  // gate_up: chunk slots a row in one step (two steps in flight)
constexpr int kQ2GateUnits = 1;  // gate_up: units a lane at once
constexpr int kQ2DownWarps = 8;  // down: warps a CTA, each a share of the pairs
constexpr int kQ2DownRows = 4;   // down: output rows a lane
constexpr size_t kQ2MaxSmem = 200 * 1024;  // gate_up: x and its chunk sums

// 1 + q / 2^kBits for code n of word w (the code's bits placed at the top of the mantissa).
template <int kBits, int n>
__device__ __forceinline__ float code_plus_one(uint32_t w, uint32_t one) {
  constexpr int kPos = 23 - kBits, kShift = kPos - n * kBits;
  constexpr uint32_t kMask = ((1u << kBits) - 1u) << kPos;
  uint32_t m;
  if constexpr (kShift >= 0)
    m = w << kShift;
  else
    m = w >> -kShift;
  // (m & kMask) | one in one LOP3 (0xEA): with both constants as immediates the compiler
  // splits it into two.
  uint32_t r;
  asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(r) : "r"(m), "n"(kMask), "r"(one));
  return __uint_as_float(r);
}

// 0x3F800000 (1.0f) in a register the compiler cannot fold into an immediate.
__device__ __forceinline__ uint32_t one_bits() {
  uint32_t r;
  asm volatile("mov.b32 %0, 0x3F800000;" : "=r"(r));
  return r;
}

// Σ_c f_c·x_c over the chunk's 128 / kBits codes; xs = the chunk's first 4-piece in the
// interleaved layout, pieces nch·4 floats apart. Four partial sums (one per piece component):
// dependent chains of 128 / kBits / 4 FMAs, not one of 128 / kBits.
template <int kBits>
__device__ __forceinline__ float chunk_fdot(const uint4& w, const float* xs, int nch) {
  constexpr int kPerWord = 32 / kBits;
  const uint32_t one = one_bits();
  const uint32_t words[4] = {w.x, w.y, w.z, w.w};
  float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const uint32_t wk = words[k];
    const float4 x0 = *reinterpret_cast<const float4*>(xs + (k * kPerWord / 4) * nch * 4);
    a0 = fmaf(code_plus_one<kBits, 0>(wk, one), x0.x, a0);
    a1 = fmaf(code_plus_one<kBits, 1>(wk, one), x0.y, a1);
    a2 = fmaf(code_plus_one<kBits, 2>(wk, one), x0.z, a2);
    a3 = fmaf(code_plus_one<kBits, 3>(wk, one), x0.w, a3);
    if constexpr (kBits == 4) {  // the word's codes 4..7: the next piece
      const float4 x1 = *reinterpret_cast<const float4*>(xs + (k * 2 + 1) * nch * 4);
      a0 = fmaf(code_plus_one<kBits, 4>(wk, one), x1.x, a0);
      a1 = fmaf(code_plus_one<kBits, 5>(wk, one), x1.y, a1);
      a2 = fmaf(code_plus_one<kBits, 6>(wk, one), x1.z, a2);
      a3 = fmaf(code_plus_one<kBits, 7>(wk, one), x1.w, a3);
    }
  }
  return (a0 + a1) + (a2 + a3);
}

// Stages chunk c of vector v (element i at v_at(i)) into the interleaved layout xs [nch·kC]
// and its sum into xsum[c].
template <int kBits, class At>
__device__ __forceinline__ void stage_chunk(At v_at, int c, int nch, float* xs, float* xsum) {
  constexpr int kC = 128 / kBits;
  float sum = 0.0f;
#pragma unroll
  for (int p = 0; p < kC / 4; ++p) {
    const float4 piece = v_at(c * kC + 4 * p);  // elements c·kC + 4p .. + 3
    sum += (piece.x + piece.y) + (piece.z + piece.w);
    *reinterpret_cast<float4*>(xs + (p * nch + c) * 4) = piece;
  }
  xsum[c] = sum;
}

// The sum of v over the LR lanes of a row (lanes l with the same l / LR), in every one of them.
__device__ __forceinline__ float row_lanes_sum(float v, int LR) {
  for (int o = LR / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Lanes a row: the largest power of 2 <= min(nch, 32).
inline int q2_lanes_per_row(int64_t nch) {
  int lr = 1;
  while (lr * 2 <= std::min<int64_t>(nch, 32)) lr *= 2;
  return lr;
}

// h[j, i] = silu(G_e[i]·x)·(U_e[i]·x) | relu(U_e[i]·x)² for pair j = blockIdx.y (e = ids[0, j]).
// A lane takes kQ2GateUnits units i at once (units i_first + u·sub: the gate and up rows of each
// under swiglu), so x's pieces and chunk sums read from shared memory serve kRows rows; row
// addresses are computed once; steps of kB chunk slots, double-buffered (Dm 2048 at 4 bits: one
// step, 8 chunk loads a lane in flight).
template <int kBits, bool kSwiglu, class Ts>
__global__ void __launch_bounds__(kQ2Warps * 32, 4)
    moe_q_gate_up_v2_kernel(const void* x, DType xt, bool x_vec, QExperts G, Pairs P, int Dm, int I,
                            int LR, int down_kc,
                            float* __restrict__ h) {  // [K, I], interleaved by down's chunks
  constexpr int kC = 128 / kBits, kPer = kSwiglu ? 2 : 1, kRows = kQ2GateUnits * kPer;
  constexpr int kB = kQ2GateBatch;
  extern __shared__ float q2_x[];  // interleaved x [Dm], then the chunk sums [Dm / kC]
  const int nch = Dm / kC;
  float* xsum = q2_x + Dm;
  // h's layout for the down kernel: element i of chunk c = i / down_kc (down_kc = 128 / down's
  // bits) at (p·(I / down_kc) + c)·4 + i % 4, p = (i % down_kc) / 4.
  const int kc_shift = down_kc == 32 ? 5 : 4, down_nch = I >> kc_shift;
  auto h_pos = [&](int i) {
    return (((i & (down_kc - 1)) >> 2) * down_nch + (i >> kc_shift)) * 4 + (i & 3);
  };
  grid_dependents_launch();  // the down kernel may start its id reads and row loads (PDL)
  const int j = blockIdx.y, lane = threadIdx.x % 32;
  int e, p0, p1;
  if (!pairs_of(P, j, e, p0, p1)) return;  // CTA-uniform
  const int sub = 32 / LR, c0 = lane % LR, slots = (nch + LR - 1) / LR;
  const int i_first = (blockIdx.x * kQ2Warps + threadIdx.x / 32) * sub * kQ2GateUnits + lane / LR;
  // Row r = u·kPer + (gate, up | up) of unit i_first + u·sub: its codes, scales and biases.
  const uint32_t* wrow[kRows];
  const Ts *srow[kRows], *brow[kRows];
  bool unit_ok[kQ2GateUnits];
#pragma unroll
  for (int u = 0; u < kQ2GateUnits; ++u) {
    const int i = i_first + u * sub;
    unit_ok[u] = i < I;
#pragma unroll
    for (int q = 0; q < kPer; ++q) {
      const int64_t row = kSwiglu && q == 1 ? I + i : i;  // gate, up | up
      const int r = u * kPer + q;
      wrow[r] = G.w + static_cast<int64_t>(e) * G.w_s0 + row * G.w_s1;
      srow[r] = static_cast<const Ts*>(G.s) + static_cast<int64_t>(e) * G.s_s0 + row * G.s_s1;
      brow[r] = static_cast<const Ts*>(G.b) + static_cast<int64_t>(e) * G.b_s0 + row * G.b_s1;
    }
  }
  struct Buf {  // one step's loads: kB chunk slots of the kRows rows
    uint4 w[kB][kRows];
    float sc[kB][kRows], bi[kB][kRows];
  } buf_a, buf_b;
  // Step st: chunk slots st·kB ...; units past I and chunks past the row load zero codes with
  // zero scale and bias.
  const int steps = (slots + kB - 1) / kB;
  auto issue = [&](int st, Buf& buf) {
    if (st >= steps) return;
#pragma unroll
    for (int b = 0; b < kB; ++b) {
      const int c = c0 + (st * kB + b) * LR, g = (c * kC) >> G.group_shift;
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const bool ok = unit_ok[r / kPer] && c < nch;
        buf.w[b][r] =
            ok ? __ldg(reinterpret_cast<const uint4*>(wrow[r] + c * 4)) : make_uint4(0, 0, 0, 0);
        buf.sc[b][r] = ok ? to_f32(srow[r][g]) * static_cast<float>(1 << kBits) : 0.0f;
        buf.bi[b][r] = ok ? to_f32(brow[r][g]) : 0.0f;
      }
    }
  };
  float dot[kRows] = {};
  auto compute = [&](int st, const Buf& buf) {
#pragma unroll
    for (int b = 0; b < kB; ++b) {
      const int c = min(c0 + (st * kB + b) * LR, nch - 1);  // past the row: zero scale and bias
      const float xs_c = xsum[c];
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const float f = chunk_fdot<kBits>(buf.w[b][r], q2_x + c * 4, nch);
        dot[r] += buf.sc[b][r] * (f - xs_c) + buf.bi[b][r] * xs_c;
      }
    }
  };
  issue(0, buf_a);  // in flight while x is staged
  // x's elements d .. d + 3 (x_vec: x 16-byte aligned, one 16- or 8-byte load).
  auto x4 = [&](int d) -> float4 {
    float4 r;
    float* rf = reinterpret_cast<float*>(&r);
    if (!x_vec)
      for (int u = 0; u < 4; ++u) rf[u] = load_any(x, xt, d + u);
    else if (xt == DType::f32)
      vload<4>(static_cast<const float*>(x) + d, rf);
    else if (xt == DType::bf16)
      vload<4>(static_cast<const __nv_bfloat16*>(x) + d, rf);
    else
      vload<4>(static_cast<const __half*>(x) + d, rf);
    return r;
  };
  for (int c = threadIdx.x; c < nch; c += blockDim.x) stage_chunk<kBits>(x4, c, nch, q2_x, xsum);
  __syncthreads();
  // Two buffers: the next step's loads go out before this step's math.
  for (int st = 0; st < steps; st += 2) {
    issue(st + 1, buf_b);
    compute(st, buf_a);
    if (st + 1 >= steps) break;
    issue(st + 2, buf_a);
    compute(st + 1, buf_b);
  }
  // Every lane takes part in the sums (LR divides 32).
#pragma unroll
  for (int u = 0; u < kQ2GateUnits; ++u) {
    const float up = row_lanes_sum(dot[u * kPer + kPer - 1], LR);
    const float gate = kSwiglu ? row_lanes_sum(dot[u * kPer], LR) : 0.0f;
    const int i = i_first + u * sub;
    if (unit_ok[u] && c0 == 0)
      h[static_cast<int64_t>(j) * I + h_pos(i)] = expert_activation(gate, up, kSwiglu);
  }
}

// Σ_c w_c·h_c over a chunk of codes dequantized one by one, w_c = s'·f_c + b' (s' = 2^bits·s, b' =
// b - s', f_c = 1 + q_c / 2^bits), with the chunk's h pieces in registers (read once for the
// kQ2DownRows rows): 4 instructions a code, no chunk sums.
template <int kBits>
__device__ __forceinline__ float chunk_wdot(const uint4& w, float s1, float b1,
                                            const float4 (&hv)[32 / kBits]) {
  constexpr int kPerWord = 32 / kBits;
  const uint32_t one = one_bits();
  const uint32_t words[4] = {w.x, w.y, w.z, w.w};
  float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const uint32_t wk = words[k];
    const float4 x0 = hv[k * kPerWord / 4];
    a0 = fmaf(fmaf(s1, code_plus_one<kBits, 0>(wk, one), b1), x0.x, a0);
    a1 = fmaf(fmaf(s1, code_plus_one<kBits, 1>(wk, one), b1), x0.y, a1);
    a2 = fmaf(fmaf(s1, code_plus_one<kBits, 2>(wk, one), b1), x0.z, a2);
    a3 = fmaf(fmaf(s1, code_plus_one<kBits, 3>(wk, one), b1), x0.w, a3);
    if constexpr (kBits == 4) {  // the word's codes 4..7
      const float4 x1 = hv[k * 2 + 1];
      a0 = fmaf(fmaf(s1, code_plus_one<kBits, 4>(wk, one), b1), x1.x, a0);
      a1 = fmaf(fmaf(s1, code_plus_one<kBits, 5>(wk, one), b1), x1.y, a1);
      a2 = fmaf(fmaf(s1, code_plus_one<kBits, 6>(wk, one), b1), x1.z, a2);
      a3 = fmaf(fmaf(s1, code_plus_one<kBits, 7>(wk, one), b1), x1.w, a3);
    }
  }
  return (a0 + a1) + (a2 + a3);
}

// out[d] (+)= Σ_j w[j]·(down[e_j, d, :]·h[j, :]). A CTA takes rows_cta = (32 / LR)·kQ2DownRows
// rows: lane l the rows d_first + k·(32 / LR), d_first = blockIdx.x·rows_cta + l / LR, k <
// kQ2DownRows, chunks c0 = l % LR, + LR, ...; its warp v the pairs j = v, v + kQ2DownWarps, ...
// (steps of one pair and one chunk slot for the lane's rows, double-buffered), each lane's parts
// in j order, the LR lanes' sum, then thread r < rows_cta adds the warps' parts of row r in warp
// order. h (gate_up's output) is interleaved by chunks: a chunk's pieces are nch float4s apart,
// so the LR lanes of a row read consecutive 16-byte pieces.
template <int kBits, class Ts>
__global__ void __launch_bounds__(kQ2DownWarps * 32)
    moe_q_down_v2_kernel(const float* __restrict__ h, QExperts D, Pairs P, int K, int Dm, int I,
                         int LR, const void* weights, DType wt, int64_t w_s1, void* out, DType ot,
                         bool accumulate) {
  constexpr int kC = 128 / kBits, kR = kQ2DownRows;
  __shared__ float part[kQ2DownWarps][32 * kR];  // [warp][row of the CTA]
  const int nch = I / kC, lane = threadIdx.x % 32, warp = threadIdx.x / 32, sub = 32 / LR;
  const int rows_cta = sub * kR, d_first = blockIdx.x * rows_cta + lane / LR, c0 = lane % LR;
  const int slots = max(1, (nch + LR - 1) / LR);
  const int my_pairs = max(0, (K - warp + kQ2DownWarps - 1) / kQ2DownWarps);
  const int steps = nch > 0 ? my_pairs * slots : 0;  // I = 0: the sums are 0
  int64_t w_off[kR], s_off[kR], b_off[kR];
  bool row_ok[kR];
#pragma unroll
  for (int k = 0; k < kR; ++k) {
    const int64_t d = d_first + k * sub;
    row_ok[k] = d < Dm;
    w_off[k] = d * D.w_s1, s_off[k] = d * D.s_s1, b_off[k] = d * D.b_s1;
  }
  struct Buf {  // one step: pair j (-1: skipped, warp-uniform), chunk c, the kR rows' loads
    uint4 w[kR];
    float s1[kR], b1[kR];
    float wj;
    int j, c;
  } buf_a, buf_b;
  auto issue = [&](int st, Buf& buf) {
    if (st >= steps) return;
    const int j = warp + (st / slots) * kQ2DownWarps, c = c0 + (st % slots) * LR;
    int e = -1, p0, p1;
    const bool pair_ok = pairs_of(P, j, e, p0, p1);  // warp-uniform
    const int64_t ee = pair_ok ? e : 0, g = (c * kC) >> D.group_shift;
    const uint32_t* wb = D.w + ee * D.w_s0 + c * 4;
    const Ts* sb = static_cast<const Ts*>(D.s) + ee * D.s_s0 + g;
    const Ts* bb = static_cast<const Ts*>(D.b) + ee * D.b_s0 + g;
#pragma unroll
    for (int k = 0; k < kR; ++k) {
      const bool ok = pair_ok && row_ok[k] && c < nch;
      buf.w[k] = ok ? __ldg(reinterpret_cast<const uint4*>(wb + w_off[k])) : make_uint4(0, 0, 0, 0);
      const float s = ok ? to_f32(sb[s_off[k]]) * static_cast<float>(1 << kBits) : 0.0f;
      buf.s1[k] = s;
      buf.b1[k] = ok ? to_f32(bb[b_off[k]]) - s : 0.0f;
    }
    buf.wj = pair_ok ? load_any(weights, wt, j * w_s1) : 0.0f;
    buf.j = pair_ok ? j : -1;  // h's row j is written for every valid pair
    buf.c = c < nch ? c : 0;   // past the row: zero codes, scale and bias over chunk 0
  };
  float acc[kR] = {};
  auto compute = [&](const Buf& buf) {
    if (buf.j < 0) return;  // a skipped pair (warp-uniform): its h row is not written
    const float4* hc = reinterpret_cast<const float4*>(h + static_cast<int64_t>(buf.j) * I) + buf.c;
    float4 hv[kC / 4];
#pragma unroll
    for (int p = 0; p < kC / 4; ++p) hv[p] = hc[p * nch];
#pragma unroll
    for (int k = 0; k < kR; ++k)
      acc[k] += buf.wj * chunk_wdot<kBits>(buf.w[k], buf.s1[k], buf.b1[k], hv);
  };
  issue(0, buf_a);         // the op's inputs: in flight under gate_up's last CTAs
  grid_dependency_wait();  // h is gate_up's output
  for (int st = 0; st < steps; st += 2) {
    issue(st + 1, buf_b);
    compute(buf_a);
    if (st + 1 >= steps) break;
    issue(st + 2, buf_a);
    compute(buf_b);
  }
#pragma unroll
  for (int k = 0; k < kR; ++k) {
    const float v = row_lanes_sum(acc[k], LR);
    if (c0 == 0) part[warp][k * sub + lane / LR] = v;
  }
  __syncthreads();
  const int r = threadIdx.x, dr = blockIdx.x * rows_cta + r;
  if (r >= rows_cta || dr >= Dm) return;
  float sum = 0.0f;
  for (int v = 0; v < kQ2DownWarps; ++v) sum += part[v][r];
  store_any(out, ot, dr, accumulate ? load_any(out, ot, dr) + sum : sum);
}

// v2's conditions: one token, 16-byte aligned code rows, x's row contiguous, x and its chunk sums
// within shared memory.
Reason moe_experts_q_v2_supports(const MoeExpertsQ& a) {
  static const bool off = env_is_zero("HYBRID_MOE_Q_V2");
  if (off) return std::string("HYBRID_MOE_Q_V2=0");
  const int64_t T = a.x.size(0), Dm = a.x.size(1), K = a.ids.size(1);
  const int64_t I = a.down.scales.size(2) * a.down.group_size;
  if (T != 1) return str("T=", T, ": v2 is the decode path (T = 1)");
  if (K > 65535) return str("k=", K, " above 65535 (grid.y)");
  if (a.x.stride(1) != 1) return std::string("x's row not contiguous");
  for (const QuantizedExperts* q : {&a.gate_up, &a.down}) {
    const auto addr = reinterpret_cast<uintptr_t>(q->weight.data());
    if (addr % 16 != 0 || q->weight.stride(1) % 4 != 0 || q->weight.stride(0) % 4 != 0)
      return std::string("code rows not 16-byte aligned (v2 reads 16-byte chunks)");
  }
  if (static_cast<size_t>(Dm) * 8 > kQ2MaxSmem)
    return str("Dm=", Dm, ": x and its chunk sums above ", kQ2MaxSmem, " bytes");
  return {};
}

void moe_experts_q_v2_run(const MoeExpertsQ& a, Context& ctx) {
  const int64_t Dm = a.x.size(1), K = a.ids.size(1);
  const int64_t E = a.down.scales.size(0), I = a.down.scales.size(2) * a.down.group_size;
  if (Dm == 0) return;
  const bool swiglu = a.activation == MoeActivation::swiglu;
  const cudaStream_t stream = as_stream(ctx.stream());
  const DecodePairs dp = decode_pairs(a.ids, E, I, ctx);
  float* const h = dp.h;
  const Pairs& pairs = dp.pairs;
  if (I > 0) {
    const int bits = a.gate_up.bits, nch = static_cast<int>(Dm * bits / 128);
    const int LR = q2_lanes_per_row(nch), units = kQ2Warps * (32 / LR) * kQ2GateUnits;
    const dim3 grid(static_cast<unsigned>((I + units - 1) / units), static_cast<unsigned>(K));
    const size_t smem = static_cast<size_t>(Dm + nch) * 4;
    const bool x_vec = reinterpret_cast<uintptr_t>(a.x.data()) % 16 == 0;
    dispatch_float(a.gate_up.scales.dtype(), MoeExpertsQ::op_name, [&](auto ts) {
      using Ts = decltype(ts);
      auto kernel = bits == 4 ? (swiglu ? moe_q_gate_up_v2_kernel<4, true, Ts>
                                        : moe_q_gate_up_v2_kernel<4, false, Ts>)
                              : (swiglu ? moe_q_gate_up_v2_kernel<8, true, Ts>
                                        : moe_q_gate_up_v2_kernel<8, false, Ts>);
      ensure_dynamic_smem(kernel, smem);
      kernel<<<grid, kQ2Warps * 32, smem, stream>>>(
          a.x.data(), a.x.dtype(), x_vec, q_experts(a.gate_up), pairs, static_cast<int>(Dm),
          static_cast<int>(I), LR, 128 / a.down.bits, h);
      HYBRID_CUDA_CHECK_LAUNCH();
    });
  }
  const int bits = a.down.bits, nch = static_cast<int>(I * bits / 128);
  const int LR = q2_lanes_per_row(std::max(nch, 1)), rows = 32 / LR * kQ2DownRows;
  dispatch_float(a.down.scales.dtype(), MoeExpertsQ::op_name, [&](auto ts) {
    using Ts = decltype(ts);
    const auto kernel = bits == 4 ? moe_q_down_v2_kernel<4, Ts> : moe_q_down_v2_kernel<8, Ts>;
    launch_after_gate_up(kernel, dim3(static_cast<unsigned>((Dm + rows - 1) / rows)),
                         dim3(kQ2DownWarps * 32), 0, stream, I > 0, static_cast<const float*>(h),
                         q_experts(a.down), pairs, static_cast<int>(K), static_cast<int>(Dm),
                         static_cast<int>(I), LR, a.weights.data(), a.weights.dtype(),
                         a.weights.stride(1), a.out.data(), a.out.dtype(), a.accumulate);
  });
}
// ---- moe_experts.cuda_tc / moe_experts_q.cuda_tc: prefill as a sorted grouped GEMM -----------
//
// The GEMV paths above read a routed expert's rows once per 8 of its pairs and do the math on
// CUDA cores: a 4096-token prefill chunk of Qwen3-Next (512 experts, top-10, Dm 2048, I 512;
// ~80 pairs an expert) took 40.0 ms in bf16 and 61.6 ms in 4 bits (session 10 run 1), i.e.
// 6.4 TFLOP/s. Here the pairs sorted by expert (a grid sort, below) are cut into tiles of kTcM
// positions of one expert, and each CTA computes a [kTcM, N] block of one expert's GEMM on
// tensor cores (mma.sync m16n8k16, f32 accumulate):
//   gate_up: h[pos, i] = act(x[token(pos)]·G_e[i], x·U_e[i]), A = x's rows gathered through
//     pair_of_pos, B = kTcGateN units' gate and up rows (128 rows; relu2: 64 up rows); h is
//     stored in the input dtype C (bf16 | f16), as the model's own MLP rounds it.
//   down: y[pos, d] = h[pos, :]·D_e[d, :] for kTcDownN rows d, A = h's contiguous rows; y in C
//     too (HF's experts round their outputs; the combine sums in f32).
//   combine: moe_combine_v3_kernel (Σ_j w·y in j order, as every path).
// A CTA: 8 warps as 4 (32 positions each) × 2 (half of the B rows), kTcK = 64 of the reduction a
// stage, kTcStages stages in flight by cp.async into XOR-swizzled shared memory, ldmatrix
// fragments; warps whose 32 positions are all past the tile's pairs skip the math. Quantized
// experts (kBits 4 | 8): the stage holds the code chunks (16 bytes: 32 or 16 codes of one
// group); each thread dequantizes its chunks w = s·q + b (f32, then C) into one B tile of the
// stage, its scale and bias loaded one stage ahead, then a barrier, then the same math.
// The grid's x runs over N, fastest, so the CTAs of one tile share its A rows in L2; every
// expert's weights are read once per tile of its pairs. Positions within an expert are in no
// fixed order, but every row of a GEMM is computed alone, so results do not depend on it.
// Bytes at T 4096 (bf16): all 512 experts' weights (3.2 GB: 0.8 ms at the copy ceiling) + y
// [P, Dm] written and read once; FLOP 2·P·3·I·Dm = 258 G. Measured (session 10 run 5, with y f32
// and the one-block moe_sort): 1.49 ms bf16 (gate_up 0.86 ms at 57% of DRAM, down 0.44 ms at 67%,
// sort 61 µs, combine 130 µs), 1.80 ms 4-bit; each thread's copies by int offsets fixed over the
// reduction took 17% off the first form (1.80 ms), whose ~30 instructions a copy sat between
// barrier and math. y in C and the grid sort (session 11): predicted 1.49 → 1.35-1.40 ms, measured
// 1.42 ms (sort 61 → 16 µs, combine 130 → 108 µs; 4-bit 1.80 → 1.72 ms).
constexpr int kTcM = 128, kTcK = 64, kTcStages = 3, kTcWarps = 8;
constexpr int kTcGateN = 64;   // gate_up: units i a CTA
constexpr int kTcDownN = 128;  // down: output rows d a CTA

enum class TcMode { gate_up_swiglu, gate_up_relu2, down };

// B rows a CTA stage: swiglu 64 gate + 64 up rows, relu2 64 up rows, down 128 rows d.
template <TcMode kMode>
constexpr int tc_b_rows() {
  return kMode == TcMode::gate_up_relu2 ? kTcGateN : 128;
}

// The first B row of n8 tile j of warp column wn (tiles 2j' and 2j' + 1 are 16 adjacent rows,
// one ldmatrix_x4). swiglu: tiles 0-3 gate units wn·32 + 8j, tiles 4-7 the same units' up rows.
template <TcMode kMode>
__device__ __forceinline__ int tc_tile_row(int wn, int j) {
  if constexpr (kMode == TcMode::gate_up_swiglu)
    return (j / 4) * kTcGateN + wn * 32 + (j % 4) * 8;
  else if constexpr (kMode == TcMode::gate_up_relu2)
    return wn * 32 + j * 8;
  else
    return wn * 64 + j * 8;
}

// Element offset of (row, 16-byte chunk ch) in a [rows, kTcK] 16-bit tile, chunks XOR-swizzled by
// row so that ldmatrix's 8 row addresses hit 8 different bank groups.
__device__ __forceinline__ int tc_swz(int row, int ch) {
  return row * kTcK + ((ch ^ (row & 7)) << 3);
}

struct TcArgs {
  const void* a;  // gate_up: x [T, Dm] (pair p's row: token p / K); down: h [P, I] (C)
  int64_t lda;
  const void* w;  // dense weights [E, rows, kdim] (C), rows 16-byte aligned
  int64_t w_s0, w_s1;
  QExperts q;          // quantized weights (kBits 4 | 8)
  const int* tiles;    // [n_tiles][2]: expert, first sorted position
  const int* n_tiles;  // [1]
  const int* offsets;  // [E + 1] sorted positions of each expert
  const int* pair_of_pos;
  int K;      // pairs a token
  int kdim;   // the reduction: Dm (gate_up) | I (down)
  int n_out;  // down: Dm
  int I;      // gate_up: units (and the first up row under swiglu)
  void* out;  // gate_up: h [P, I] (C); down: y [P, Dm] f32
};

template <class C, TcMode kMode, int kBits>
constexpr size_t tc_smem_bytes() {
  constexpr int kB = tc_b_rows<kMode>();
  constexpr size_t a = size_t{kTcStages} * kTcM * kTcK * 2;
  if constexpr (kBits == 16) {
    return a + size_t{kTcStages} * kB * kTcK * 2;
  } else {
    return a + size_t{kB} * kTcK * 2 + size_t{kTcStages} * kB * (kTcK * kBits / 128) * 16;
  }
}

template <class C, TcMode kMode, int kBits>
__global__ void __launch_bounds__(kTcWarps * 32, 2) moe_tc_gemm_kernel(const TcArgs p) {
  constexpr int kB = tc_b_rows<kMode>(), kNT = kB / 16;  // B rows; n8 tiles a warp
  constexpr bool kGate = kMode != TcMode::down, kQuant = kBits != 16;
  constexpr int kCpr = kTcK * kBits / 128;  // quantized: 16-byte code chunks a row and stage
  constexpr int kEpc = 128 / kBits;         // quantized: codes a chunk
  constexpr int kQc = (kB * kCpr + kTcWarps * 32 - 1) / (kTcWarps * 32);  // chunks a thread
  const int tile = blockIdx.y;
  if (tile >= *p.n_tiles) return;
  const int e = p.tiles[2 * tile], p0 = p.tiles[2 * tile + 1];
  const int rows = min(kTcM, p.offsets[e + 1] - p0);
  const int n0 = blockIdx.x * (kGate ? kTcGateN : kTcDownN);
  extern __shared__ __align__(128) unsigned char tc_smem[];
  C* a_s = reinterpret_cast<C*>(tc_smem);  // [S][kTcM][kTcK]
  C* b_s = a_s + kTcStages * kTcM * kTcK;  // dense: [S][kB][kTcK]; quantized: [kB][kTcK]
  uint4* c_s = reinterpret_cast<uint4*>(b_s + kB * kTcK);  // quantized: [S][kB·kCpr] chunks
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, wm = warp % 4, wn = warp / 4;
  const int ch = tid % 8;

  // The weight row of B row r (-1 past the matrix).
  auto w_row = [&](int r) -> int {
    if constexpr (kMode == TcMode::gate_up_swiglu) {
      const int unit = n0 + r % kTcGateN;
      return unit < p.I ? (r >= kTcGateN ? p.I : 0) + unit : -1;
    } else if constexpr (kMode == TcMode::gate_up_relu2) {
      return n0 + r < p.I ? n0 + r : -1;
    } else {
      return n0 + r < p.n_out ? n0 + r : -1;
    }
  };
  // This thread's copies, fixed over the reduction: rows r = tid / 8 + 32·u, chunk ch of each
  // stage, into shared offset dst0 + u·32·kTcK (r & 7 is the same for every u); sources as int
  // element offsets from a_base / w_base (-1: past the tile's pairs or the matrix, never copied;
  // supports() keeps them below 2^31).
  const int dst0 = (tid / 8) * kTcK + ((ch ^ ((tid / 8) & 7)) << 3);
  const C* a_base = static_cast<const C*>(p.a);
  int a_off[kTcM / 32];
#pragma unroll
  for (int u = 0; u < kTcM / 32; ++u) {
    const int r = tid / 8 + 32 * u;
    a_off[u] = -1;
    if (r < rows)
      a_off[u] = (kGate ? p.pair_of_pos[p0 + r] / p.K : p0 + r) * static_cast<int>(p.lda);
  }
  // Dense B: row r of the stage is weight row w_row(r) of expert e. Quantized: this thread's
  // code chunks c = tid + 256·u (row c / kCpr, piece c % kCpr of the stage's kTcK columns).
  const C* w_base = kQuant ? nullptr : static_cast<const C*>(p.w) + e * p.w_s0;
  constexpr int kBr = kQuant ? 1 : kB / 32;
  int b_off[kBr];
#pragma unroll
  for (int u = 0; u < kBr; ++u) {
    const int wr = kQuant ? -1 : w_row(tid / 8 + 32 * u);
    b_off[u] = wr >= 0 ? wr * static_cast<int>(p.w_s1) : -1;
  }
  const uint32_t* q_row[kQc];
  int q_s_off[kQc], q_b_off[kQc];  // the row's first scale / bias (int: within one expert)
  if constexpr (kQuant) {
#pragma unroll
    for (int u = 0; u < kQc; ++u) {
      const int c = tid + kTcWarps * 32 * u;
      const int wr = c < kB * kCpr ? w_row(c / kCpr) : -1;
      q_row[u] = wr >= 0 ? p.q.w + e * p.q.w_s0 + wr * p.q.w_s1 : nullptr;
      q_s_off[u] = static_cast<int>(wr * p.q.s_s1);
      q_b_off[u] = static_cast<int>(wr * p.q.b_s1);
    }
  }
  const int nk = (p.kdim + kTcK - 1) / kTcK;

  // Stage kt's copies: A (and dense B) 16-byte chunks, zero past kdim; rows past the tile or the
  // matrix are not copied (their outputs are never stored, and rows do not mix in an mma).
  auto load_stage = [&](int stage, int kt) {
    const int k = kt * kTcK + ch * 8;
    const bool kin = k < p.kdim;
    C* as = a_s + stage * kTcM * kTcK + dst0;
#pragma unroll
    for (int u = 0; u < kTcM / 32; ++u)
      if (a_off[u] >= 0)
        cp_async16(as + u * 32 * kTcK, a_base + (kin ? a_off[u] + k : 0), kin ? 16 : 0);
    if constexpr (!kQuant) {
      C* bs = b_s + stage * kB * kTcK + dst0;
#pragma unroll
      for (int u = 0; u < kBr; ++u)
        if (b_off[u] >= 0)
          cp_async16(bs + u * 32 * kTcK, w_base + (kin ? b_off[u] + k : 0), kin ? 16 : 0);
    } else {
#pragma unroll
      for (int u = 0; u < kQc; ++u) {
        const int c = tid + kTcWarps * 32 * u;
        const int kq = kt * kTcK + (c % kCpr) * kEpc;
        if (q_row[u] && kq < p.kdim)
          cp_async16(c_s + stage * kB * kCpr + c, q_row[u] + kq * kBits / 32);
      }
    }
  };
  // Quantized: the scale and bias of this thread's chunks in stage kt (0 past kdim).
  float q_s[kQc], q_b[kQc];
  auto load_scales = [&](int kt) {
#pragma unroll
    for (int u = 0; u < kQc; ++u) {
      const int c = tid + kTcWarps * 32 * u;
      const int kq = kt * kTcK + (c % kCpr) * kEpc;
      q_s[u] = q_b[u] = 0.0f;
      if (q_row[u] && kq < p.kdim) {
        const int g = kq >> p.q.group_shift;
        q_s[u] = load_any(p.q.s, p.q.sdt, e * p.q.s_s0 + q_s_off[u] + g);
        q_b[u] = load_any(p.q.b, p.q.sdt, e * p.q.b_s0 + q_b_off[u] + g);
      }
    }
  };
  if constexpr (kQuant) load_scales(0);

#pragma unroll
  for (int s = 0; s < kTcStages - 1; ++s) {
    if (s < nk) load_stage(s, s);
    cp_commit();
  }
  float acc[2][kNT][4] = {};
  const bool active = wm * 32 < rows;  // warp-uniform
  for (int kt = 0; kt < nk; ++kt) {
    cp_wait<kTcStages - 2>();
    __syncthreads();  // stage kt landed; every warp is past kt - 1's math (its buffers are free)
    if (kt + kTcStages - 1 < nk) load_stage((kt + kTcStages - 1) % kTcStages, kt + kTcStages - 1);
    cp_commit();
    const C* as = a_s + (kt % kTcStages) * kTcM * kTcK;
    const C* bs = b_s;
    if constexpr (kQuant) {
      // Each thread's chunks -> the B tile: w = s·q + b, then C; zero past kdim or the matrix.
      const uint4* cs = c_s + (kt % kTcStages) * kB * kCpr;
#pragma unroll
      for (int u = 0; u < kQc; ++u) {
        const int c = tid + kTcWarps * 32 * u;
        if (c >= kB * kCpr) break;
        const int r = c / kCpr, pc = c % kCpr;
        const bool ok = q_row[u] && kt * kTcK + pc * kEpc < p.kdim;
        const uint4 raw = ok ? cs[c] : make_uint4(0u, 0u, 0u, 0u);
        const uint32_t wv[4] = {raw.x, raw.y, raw.z, raw.w};
        const float s = q_s[u], b = q_b[u];
        constexpr uint32_t kMask = (1u << kBits) - 1;
#pragma unroll
        for (int o = 0; o < kEpc / 8; ++o) {  // 8 codes -> one 16-byte piece of the tile
          uint32_t packed[4];
#pragma unroll
          for (int m = 0; m < 4; ++m) {
            float f[2];
#pragma unroll
            for (int n = 0; n < 2; ++n) {
              const int code = o * 8 + m * 2 + n;  // within the chunk
              const uint32_t word = wv[code * kBits / 32];
              const float qv = static_cast<float>((word >> ((code * kBits) % 32)) & kMask);
              f[n] = ok ? fmaf(s, qv, b) : 0.0f;
            }
            packed[m] = pack2<C>(f[0], f[1]);
          }
          *reinterpret_cast<uint4*>(b_s + tc_swz(r, pc * (kEpc / 8) + o)) =
              make_uint4(packed[0], packed[1], packed[2], packed[3]);
        }
      }
      if (kt + 1 < nk) load_scales(kt + 1);
      __syncthreads();  // the B tile is whole
    } else {
      bs = b_s + (kt % kTcStages) * kB * kTcK;
    }
    if (active) {
#pragma unroll
      for (int kk = 0; kk < kTcK / 16; ++kk) {
        uint32_t a[2][4];
#pragma unroll
        for (int mi = 0; mi < 2; ++mi)
          ldmatrix_x4(a[mi], as + tc_swz(wm * 32 + mi * 16 + lane % 16, kk * 2 + lane / 16));
#pragma unroll
        for (int jj = 0; jj < kNT / 2; ++jj) {
          uint32_t b[4];
          const int row = tc_tile_row<kMode>(wn, 2 * jj) + lane % 8 + (lane / 16) * 8;
          ldmatrix_x4(b, bs + tc_swz(row, kk * 2 + (lane / 8) % 2));
#pragma unroll
          for (int mi = 0; mi < 2; ++mi) {
            mma16<C>(acc[mi][2 * jj], a[mi], b[0], b[1]);
            mma16<C>(acc[mi][2 * jj + 1], a[mi], b[2], b[3]);
          }
        }
      }
    }
  }
  cp_wait<0>();
  if (!active) return;
    // Accumulator (mi, j)[2·hf + v]: position wm·32 + mi·16 + lane / 4 + 8·hf, column
    // tile_row(j) + (lane % 4)·2 + v.
#pragma unroll
  for (int mi = 0; mi < 2; ++mi)
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      const int r = wm * 32 + mi * 16 + lane / 4 + 8 * hf;
      if (r >= rows) continue;
      const int64_t pos = p0 + r;
      if constexpr (kGate) {
        constexpr bool kSwiglu = kMode == TcMode::gate_up_swiglu;
        C* hrow = static_cast<C*>(p.out) + pos * p.I;
#pragma unroll
        for (int j = 0; j < (kSwiglu ? kNT / 2 : kNT); ++j) {
          const int unit = n0 + wn * 32 + j * 8 + (lane % 4) * 2;  // I % 8 == 0: unit + 1 < I too
          if (unit >= p.I) continue;
          float v[2];
#pragma unroll
          for (int c = 0; c < 2; ++c)
            v[c] = kSwiglu
                       ? expert_activation(acc[mi][j][2 * hf + c], acc[mi][j + 4][2 * hf + c], true)
                       : expert_activation(0.0f, acc[mi][j][2 * hf + c], false);
          *reinterpret_cast<uint32_t*>(hrow + unit) = pack2<C>(v[0], v[1]);
        }
      } else {
        C* yrow = static_cast<C*>(p.out) + pos * p.n_out;
#pragma unroll
        for (int j = 0; j < kNT; ++j) {
          const int d = n0 + wn * 64 + j * 8 + (lane % 4) * 2;  // Dm % 8 == 0: d + 1 < Dm too
          if (d < p.n_out)
            *reinterpret_cast<uint32_t*>(yrow + d) =
                pack2<C>(acc[mi][j][2 * hf], acc[mi][j][2 * hf + 1]);
        }
      }
    }
}

// The tensor-core path's sort of the P pairs by expert, on a grid (moe_sort is one block: 61 µs
// of the 1.49 ms at T 4096, session 10 run 4):
//   moe_count_kernel (grid): per-block counts in shared memory, added to counts [E] (zeroed).
//   moe_scan_kernel (one block): offsets, the routed experts in id order, cursors = offsets, and
//     the tiles of kTcM positions of one expert: tiles[2·i] = expert, tiles[2·i + 1] = its first
//     position.
//   moe_scatter_kernel (grid): each pair takes the next position of its expert (a global
//     atomic). Positions within an expert are in no fixed order, as moe_sort's.
// ids outside [0, E) get no position (pos_of_pair -1) and add nothing.
constexpr int kCountThreads = 256, kCountPairsPerBlock = 1024;

__device__ __forceinline__ int64_t pair_id(const void* ids, bool ids64, int64_t s0, int64_t s1,
                                           int K, int p) {
  const int64_t off = static_cast<int64_t>(p / K) * s0 + static_cast<int64_t>(p % K) * s1;
  return ids64 ? static_cast<const int64_t*>(ids)[off] : static_cast<const int32_t*>(ids)[off];
}

__global__ void __launch_bounds__(kCountThreads)
    moe_count_kernel(const void* ids, bool ids64, int64_t s0, int64_t s1, int P, int K, int E,
                     int* __restrict__ counts) {
  extern __shared__ int hist[];  // [E]
  for (int e = threadIdx.x; e < E; e += kCountThreads) hist[e] = 0;
  __syncthreads();
  const int p1 = min(P, (blockIdx.x + 1) * kCountPairsPerBlock);
  for (int p = blockIdx.x * kCountPairsPerBlock + threadIdx.x; p < p1; p += kCountThreads) {
    const int64_t id = pair_id(ids, ids64, s0, s1, K, p);
    if (id >= 0 && id < E) atomicAdd(&hist[id], 1);
  }
  __syncthreads();
  for (int e = threadIdx.x; e < E; e += kCountThreads)
    if (hist[e] > 0) atomicAdd(&counts[e], hist[e]);
}

__global__ void __launch_bounds__(kSortThreads)
    moe_scan_kernel(const int* __restrict__ counts, int E, SortLayout L, int* cursor, int* tiles,
                    int* n_tiles) {
  __shared__ int warp_sums[32];
  __shared__ int total;
  // Each thread owns a run of experts [e0, e1): local sums, block scans, then the run.
  const int per = (E + kSortThreads - 1) / kSortThreads;
  const int e0 = min(E, static_cast<int>(threadIdx.x) * per), e1 = min(E, e0 + per);
  int c_sum = 0, a_sum = 0, t_sum = 0;
  for (int e = e0; e < e1; ++e) {
    const int c = counts[e];
    c_sum += c, a_sum += c > 0, t_sum += (c + kTcM - 1) / kTcM;
  }
  int c_at = block_exclusive_scan(c_sum, warp_sums, &total);
  const int c_total = total;
  int a_at = block_exclusive_scan(a_sum, warp_sums, &total);
  const int a_total = total;
  int t_at = block_exclusive_scan(t_sum, warp_sums, &total);
  const int t_total = total;
  for (int e = e0; e < e1; ++e) {
    const int c = counts[e];
    L.offsets[e] = c_at;
    cursor[e] = c_at;
    if (c > 0) L.active[a_at++] = e;
    for (int q = 0; q < c; q += kTcM, ++t_at) {
      tiles[2 * t_at] = e;
      tiles[2 * t_at + 1] = c_at + q;
    }
    c_at += c;
  }
  if (threadIdx.x == 0) {
    L.offsets[E] = c_total;
    *L.n_active = a_total;
    *n_tiles = t_total;
  }
}

__global__ void moe_scatter_kernel(const void* ids, bool ids64, int64_t s0, int64_t s1, int P,
                                   int K, int E, int* cursor, SortLayout L) {
  for (int p = blockIdx.x * blockDim.x + threadIdx.x; p < P; p += gridDim.x * blockDim.x) {
    const int64_t id = pair_id(ids, ids64, s0, s1, K, p);
    int pos = -1;
    if (id >= 0 && id < E) {
      pos = atomicAdd(&cursor[id], 1);
      L.pair_of_pos[pos] = p;
    }
    L.pos_of_pair[p] = pos;
  }
}

// An upper bound of the tiles: Σ_e ⌈c_e / kTcM⌉ <= P / kTcM + (routed experts).
int64_t tc_max_tiles(int64_t P, int64_t E) {
  return (P + kTcM - 1) / kTcM + std::min(E, P);
}

// The fewest pairs (T·k) for which the tensor-core path runs, from Qwen3-Next's shape (512
// experts, top-10, session 10 run 6). bf16 against v4: T 8 (80 pairs) 176.8 µs against 161.4, T 16
// 289.1 against 296.6, T 32 458.2 against 547.6. 4-bit against v1: T 8 241.5 against 286.0. One
// line for both, so that a model's MLX-quantized experts and their dequantized twin take the same
// arithmetic on the same calls (f32 GEMVs below it: the engine test
// MlxQuantizedExpertsKeptEqualDequantizedFloatsOnCuda compares the two at 80 pairs, to 1e-8).
// HYBRID_MOE_TC_MIN_PAIRS replaces it (to time either side of the line).
constexpr int64_t kTcMinPairsDense = 128, kTcMinPairsQuant = 128;
int64_t tc_min_pairs(int64_t fallback) {
  static const int64_t v = [] {
    const char* e = std::getenv("HYBRID_MOE_TC_MIN_PAIRS");
    return e ? std::atoll(e) : int64_t{-1};
  }();
  return v >= 0 ? v : fallback;
}

// What both tensor-core paths need: T >= 2 and T·k >= min_pairs (below, the GEMV paths are
// faster), Dm and I positive multiples of 8, the tiles within grid.y, k within the combine's shared
// memory. x and out may be any float dtype: x is read as it is when it is C with 16-byte aligned
// rows, else first converted into a [T, Dm] C copy; h is C.
Reason moe_tc_supports(const Tensor& x, const Tensor& ids, int64_t E, int64_t I,
                       int64_t min_pairs) {
  const int64_t T = x.size(0), Dm = x.size(1), K = ids.size(1);
  if (T < 2) return str("T=", T, ": the tensor-core path is for prefill (T >= 2)");
  if (T * K < min_pairs)
    return str("T·k=", T * K, " below ", min_pairs, " (a GEMV path is faster)");
  if (Dm % 8 != 0 || I % 8 != 0 || I == 0)
    return str("Dm=", Dm, ", I=", I, ": not positive multiples of 8");
  if (K > kCombineMaxK) return str("k=", K, " above ", kCombineMaxK, " (the v3 combine)");
  if (Dm > int64_t{65535} * kCombineThreads) return str("Dm=", Dm, " above the combine's grid");
  if (E > kMaxExperts) return str("E=", E, " above ", kMaxExperts, " (the sort's shared memory)");
  if (tc_max_tiles(T * K, E) > 65535) return str("T·k=", T * K, ": tiles above grid.y");
  if (T * std::max(x.stride(0), Dm) >= INT_MAX || T * K * I >= INT_MAX)
    return std::string("x or h above 2^31 elements (int offsets)");
  return {};
}

// One call's workspace and sort (plan_tc): h, y and x's C copy, the sort state, the tiles. Then
// run_tc launches gate_up, down and the combine over it.
struct TcPlan {
  void* h;   // [P, I] C
  void* xc;  // [T, Dm] in C when x is not read as it is
  void* y;   // [P, Dm] C
  SortLayout L;
  int* tiles;
  int* n_tiles;
  unsigned max_tiles;
};

TcPlan plan_tc(const Tensor& x, const Tensor& ids, int64_t E, int64_t I, Context& ctx,
               cudaStream_t stream) {
  const int64_t T = x.size(0), Dm = x.size(1), K = ids.size(1), P = T * K;
  const int64_t max_tiles = tc_max_tiles(P, E);
  const size_t h_b = align_up(static_cast<size_t>(P * I) * 2, 256);
  const size_t y_b = align_up(static_cast<size_t>(P * Dm) * 2, 256);
  const size_t s_b = align_up(static_cast<size_t>(4 * E + 2 + 2 * P) * 4, 256);
  const size_t t_b = align_up(static_cast<size_t>(2 * max_tiles + 1) * 4, 256);
  const size_t x_b = align_up(static_cast<size_t>(T * Dm) * 2, 256);
  char* ws = static_cast<char*>(ctx.workspace(h_b + y_b + s_b + t_b + x_b));
  TcPlan plan;
  plan.h = ws;
  plan.y = ws + h_b;
  int* si = reinterpret_cast<int*>(ws + h_b + y_b);
  plan.L = SortLayout{si, si + E + 1, si + 2 * E + 1, si + 2 * E + 2, si + 2 * E + 2 + P};
  int* counts = si + 2 * E + 2 + 2 * P;
  int* cursor = counts + E;
  plan.tiles = reinterpret_cast<int*>(ws + h_b + y_b + s_b);
  plan.n_tiles = plan.tiles + 2 * max_tiles;
  plan.max_tiles = static_cast<unsigned>(max_tiles);
  plan.xc = ws + h_b + y_b + s_b + t_b;
  const bool ids64 = ids.dtype() == DType::i64;
  HYBRID_CUDA_CHECK(cudaMemsetAsync(counts, 0, static_cast<size_t>(E) * 4, stream));
  const size_t hist = static_cast<size_t>(E) * 4;
  if (hist > 48 * 1024) ensure_dynamic_smem(moe_count_kernel, hist);
  moe_count_kernel<<<static_cast<unsigned>((P + kCountPairsPerBlock - 1) / kCountPairsPerBlock),
                     kCountThreads, hist, stream>>>(ids.data(), ids64, ids.stride(0), ids.stride(1),
                                                    static_cast<int>(P), static_cast<int>(K),
                                                    static_cast<int>(E), counts);
  HYBRID_CUDA_CHECK_LAUNCH();
  moe_scan_kernel<<<1, kSortThreads, 0, stream>>>(counts, static_cast<int>(E), plan.L, cursor,
                                                  plan.tiles, plan.n_tiles);
  HYBRID_CUDA_CHECK_LAUNCH();
  moe_scatter_kernel<<<static_cast<unsigned>(std::min<int64_t>((P + 255) / 256, 1024)), 256, 0,
                       stream>>>(ids.data(), ids64, ids.stride(0), ids.stride(1),
                                 static_cast<int>(P), static_cast<int>(K), static_cast<int>(E),
                                 cursor, plan.L);
  HYBRID_CUDA_CHECK_LAUNCH();
  return plan;
}

template <class C, TcMode kMode, int kBits>
void launch_tc_gemm(const TcArgs& args, unsigned n_blocks, unsigned max_tiles,
                    cudaStream_t stream) {
  const auto kernel = moe_tc_gemm_kernel<C, kMode, kBits>;
  constexpr size_t smem = tc_smem_bytes<C, kMode, kBits>();
  ensure_dynamic_smem(kernel, smem);
  kernel<<<dim3(n_blocks, max_tiles), kTcWarps * 32, smem, stream>>>(args);
  HYBRID_CUDA_CHECK_LAUNCH();
}

// The two GEMMs and the combine over a plan; kBits 16 = dense weights (q unused).
template <class C, int kBits>
void run_tc(const TcPlan& plan, const Tensor& x, const Tensor& ids, const Tensor& weights,
            const Tensor& out, bool accumulate, bool swiglu, int64_t I, TcArgs gate_up, TcArgs down,
            cudaStream_t stream) {
  const int64_t T = x.size(0), Dm = x.size(1), K = ids.size(1);
  for (TcArgs* g : {&gate_up, &down}) {
    g->tiles = plan.tiles;
    g->n_tiles = plan.n_tiles;
    g->offsets = plan.L.offsets;
    g->pair_of_pos = plan.L.pair_of_pos;
    g->K = static_cast<int>(K);
    g->I = static_cast<int>(I);
    g->n_out = static_cast<int>(Dm);
  }
  constexpr DType kC = std::is_same_v<C, __half> ? DType::f16 : DType::bf16;
  if (x.dtype() == kC && reinterpret_cast<uintptr_t>(x.data()) % 16 == 0 && x.stride(0) % 8 == 0) {
    gate_up.a = x.data();
    gate_up.lda = x.stride(0);
  } else {
    dispatch_float(x.dtype(), "moe_experts", [&](auto tx) {
      using Tx = decltype(tx);
      moe_x_copy_kernel<Tx, C><<<copy_blocks(T * Dm), 256, 0, stream>>>(
          x.data_as<const Tx>(), x.stride(0), static_cast<C*>(plan.xc), T, Dm);
      HYBRID_CUDA_CHECK_LAUNCH();
    });
    gate_up.a = plan.xc;
    gate_up.lda = Dm;
  }
  gate_up.kdim = static_cast<int>(Dm);
  gate_up.out = plan.h;
  down.a = plan.h;
  down.lda = I;
  down.kdim = static_cast<int>(I);
  down.out = plan.y;
  const auto gate_blocks = static_cast<unsigned>((I + kTcGateN - 1) / kTcGateN);
  if (swiglu)
    launch_tc_gemm<C, TcMode::gate_up_swiglu, kBits>(gate_up, gate_blocks, plan.max_tiles, stream);
  else
    launch_tc_gemm<C, TcMode::gate_up_relu2, kBits>(gate_up, gate_blocks, plan.max_tiles, stream);
  launch_tc_gemm<C, TcMode::down, kBits>(
      down, static_cast<unsigned>((Dm + kTcDownN - 1) / kTcDownN), plan.max_tiles, stream);
  const Pairs pairs{plan.L, nullptr, false, 0, 0};
  const dim3 grid(static_cast<unsigned>(T),
                  static_cast<unsigned>((Dm + kCombineThreads - 1) / kCombineThreads));
  moe_combine_v3_kernel<<<grid, kCombineThreads, 0, stream>>>(
      static_cast<const C*>(plan.y), plan.L.pos_of_pair, pairs, weights.data(), weights.dtype(),
      weights.stride(0), weights.stride(1), out.data(), out.dtype(), out.stride(0),
      static_cast<int>(K), static_cast<int>(Dm), accumulate);
  HYBRID_CUDA_CHECK_LAUNCH();
}

Reason moe_experts_tc_supports(const MoeExperts& a) {
  static const bool off = env_is_zero("HYBRID_MOE_EXPERTS_TC");
  if (off) return std::string("HYBRID_MOE_EXPERTS_TC=0");
  const int64_t E = a.down.size(0), I = a.down.size(2);
  if (Reason r = moe_tc_supports(a.x, a.ids, E, I, tc_min_pairs(kTcMinPairsDense))) return r;
  if ((a.gate_up.dtype() != DType::bf16 && a.gate_up.dtype() != DType::f16) ||
      a.down.dtype() != a.gate_up.dtype())
    return std::string("expert weights not both bf16 or both f16 (the tensor cores' inputs)");
  if (!vec_ok(a.gate_up) || !vec_ok(a.down)) return std::string("expert rows not 16-byte aligned");
  if (a.gate_up.size(1) * a.gate_up.stride(1) >= INT_MAX ||
      a.down.size(1) * a.down.stride(1) >= INT_MAX)
    return std::string("an expert's matrix above 2^31 elements (int offsets)");
  return {};
}

void moe_experts_tc_run(const MoeExperts& a, Context& ctx) {
  const int64_t Dm = a.x.size(1), E = a.down.size(0), I = a.down.size(2);
  if (Dm == 0) return;
  const cudaStream_t stream = as_stream(ctx.stream());
  const TcPlan plan = plan_tc(a.x, a.ids, E, I, ctx, stream);
  TcArgs gate_up{}, down{};
  gate_up.w = a.gate_up.data();
  gate_up.w_s0 = a.gate_up.stride(0);
  gate_up.w_s1 = a.gate_up.stride(1);
  down.w = a.down.data();
  down.w_s0 = a.down.stride(0);
  down.w_s1 = a.down.stride(1);
  const bool swiglu = a.activation == MoeActivation::swiglu;
  if (a.gate_up.dtype() == DType::f16)
    run_tc<__half, 16>(plan, a.x, a.ids, a.weights, a.out, a.accumulate, swiglu, I, gate_up, down,
                       stream);
  else
    run_tc<__nv_bfloat16, 16>(plan, a.x, a.ids, a.weights, a.out, a.accumulate, swiglu, I, gate_up,
                              down, stream);
}

Reason moe_experts_q_tc_supports(const MoeExpertsQ& a) {
  static const bool off = env_is_zero("HYBRID_MOE_Q_TC");
  if (off) return std::string("HYBRID_MOE_Q_TC=0");
  const int64_t E = a.down.scales.size(0), I = a.down.scales.size(2) * a.down.group_size;
  if (Reason r = moe_tc_supports(a.x, a.ids, E, I, tc_min_pairs(kTcMinPairsQuant))) return r;
  if (a.gate_up.bits != a.down.bits) return std::string("gate_up and down of different bits");
  for (const QuantizedExperts* q : {&a.gate_up, &a.down}) {
    const auto addr = reinterpret_cast<uintptr_t>(q->weight.data());
    if (addr % 16 != 0 || q->weight.stride(1) % 4 != 0 || q->weight.stride(0) % 4 != 0)
      return std::string("code rows not 16-byte aligned");
    if (q->scales.stride(0) > INT_MAX || q->biases.stride(0) > INT_MAX)
      return std::string("an expert's scales above 2^31 elements");
  }
  return {};
}

void moe_experts_q_tc_run(const MoeExpertsQ& a, Context& ctx) {
  const int64_t Dm = a.x.size(1), E = a.down.scales.size(0);
  const int64_t I = a.down.scales.size(2) * a.down.group_size;
  if (Dm == 0) return;
  const cudaStream_t stream = as_stream(ctx.stream());
  const TcPlan plan = plan_tc(a.x, a.ids, E, I, ctx, stream);
  TcArgs gate_up{}, down{};
  gate_up.q = q_experts(a.gate_up);
  down.q = q_experts(a.down);
  const bool swiglu = a.activation == MoeActivation::swiglu, f16 = a.x.dtype() == DType::f16;
  auto run = [&](auto c, auto bits) {
    run_tc<decltype(c), decltype(bits)::value>(plan, a.x, a.ids, a.weights, a.out, a.accumulate,
                                               swiglu, I, gate_up, down, stream);
  };
  using B4 = std::integral_constant<int, 4>;
  using B8 = std::integral_constant<int, 8>;
  if (a.gate_up.bits == 4)
    f16 ? run(__half{}, B4{}) : run(__nv_bfloat16{}, B4{});
  else
    f16 ? run(__half{}, B8{}) : run(__nv_bfloat16{}, B8{});
}
}  // namespace

void register_moe(Registry& r) {
  r.add<MoeRoute>("moe_route.cuda_block", DeviceType::cuda, 10, moe_route_block_supports,
                  moe_route_block_run);
  r.add<MoeRoute>("moe_route.cuda", DeviceType::cuda, 0, moe_route_supports, moe_route_run);
  r.add<MoeExperts>("moe_experts.cuda_v6", DeviceType::cuda, 30, moe_experts_v6_supports,
                    moe_experts_v6_run);
  r.add<MoeExperts>("moe_experts.cuda_tc", DeviceType::cuda, 25, moe_experts_tc_supports,
                    moe_experts_tc_run);
  r.add<MoeExperts>("moe_experts.cuda_v4", DeviceType::cuda, 20, moe_experts_v4_supports,
                    moe_experts_run<true, true>);
  r.add<MoeExperts>("moe_experts.cuda_v3", DeviceType::cuda, 10, moe_experts_v3_supports,
                    moe_experts_run<true>);
  r.add<MoeExperts>("moe_experts.cuda", DeviceType::cuda, 0, moe_experts_supports,
                    moe_experts_run<false>);
  r.add<MoeExpertsQ>("moe_experts_q.cuda_v2", DeviceType::cuda, 10, moe_experts_q_v2_supports,
                     moe_experts_q_v2_run);
  r.add<MoeExpertsQ>("moe_experts_q.cuda_tc", DeviceType::cuda, 5, moe_experts_q_tc_supports,
                     moe_experts_q_tc_run);
  r.add<MoeExpertsQ>("moe_experts_q.cuda", DeviceType::cuda, 0, moe_experts_q_supports,
                     moe_experts_q_run);
}

}  // namespace hybrid::cuda
