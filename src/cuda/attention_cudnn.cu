// CUDA: attn_prefill.cudnn — causal varlen prefill over the paged cache by cuDNN's fused flash
// attention (SDPA forward), built through the cuDNN frontend graph API. Compiled only with
// -DHYBRID_CUDNN=ON (docs/ops/attention.md, "Decision: cuDNN fused attention or the own prefill
// kernel").
//
// The same math as every attn_prefill variant: query row i of sequence n (q row cu[n] + i) sits at
// p = seq_lens[n] − L_n + i and attends to keys j in [lo, p] (lo = 0 or p − W + 1):
//   out = softmax(scale · q Kᵀ) V   over those keys (f32 softmax and accumulation inside cuDNN).
//
// How our tensors map onto cuDNN's SDPA node (B = N sequences):
//   Q   [T, Hq, D] (row stride q_t, head stride q_h)  -> [B, Hq, S_q, D] strides
//       (S_q·q_t, q_h, q_t, 1) with a ragged offset per sequence, ragged_q[n] = cu[n] · q_t
//       (THD layout; the batch stride is unused when the offsets are set).
//   O   [T, Hq, D] the same way, ragged_o[n] = cu[n] · o_t.
//   K/V [num_pages, page_size, Hkv, D] -> the paged container [num_pages, Hkv, page_size, D] with
//       strides (s_page, s_head, s_row, 1): our memory with the head and row strides swapped.
//   page_table [N, max_pages] -> [B, 1, max_pages, 1] i32 (one table for K and V), a copy in which
//       every entry outside the pages the op touches (the contract: [lo_first / page_size,
//       (seq_lens[n] − 1) / page_size], lo_first = the first key of row 0) is replaced by the
//       first touched page, and any id outside [0, num_pages) by 0. cuDNN may load the page of
//       positions it then masks (outside the window, past seq_len_kv in a tile); those entries may
//       hold -1 or stale ids of freed pages, so they now name a page of this sequence whose rows
//       were written (finite keys and values: a masked score's P = 0 times a finite V is 0).
//       The rows past seq_lens[n] in the sequence's last page are read too and cannot be
//       redirected (they share the page with live rows): they must be finite, which the op's
//       contract does not promise, so this variant is opt-in (cudnn_prefill_enabled).
//   seq_len_q [B,1,1,1] = cu[n+1] − cu[n]; seq_len_kv [B,1,1,1] = seq_lens[n]; padding mask on.
//   causal: diagonal aligned bottom right, right bound 0 (key col <= row + seq_len_kv − seq_len_q
//   = p); window W > 0: left bound W (keys col > p − W).
// Static sizes of a plan: S_q = T rounded up to a power of two (>= 64), max_seq_len_kv =
// max_pages · page_size (no device lengths are read on the host). A small kernel fills the
// int32 tables above in the workspace; cuDNN's own workspace follows them.
//
// Plans are built in supports() (host only, before any capture; a shape cuDNN rejects is refused
// with cuDNN's message and attn_prefill.cuda_fa2c serves it) and kept per (device, shape class);
// they are executed with the Context's cuDNN handle bound to the Context's stream.
#include <cudnn.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>

// The frontend is header-only C++ over cuDNN's backend API (third_party/cudnn-frontend, fetched by
// scripts/fetch-cudnn-frontend.sh).
#include <cudnn_frontend.h>

#include "cuda/common.cuh"
#include "cuda/kernels.h"
#include "hybrid/ops/attention.h"

#if CUDNN_VERSION < 90700
#error "attn_prefill.cudnn needs cuDNN >= 9.7 headers (paged K/V with ragged Q/O)"
#endif

namespace hybrid::cuda {

namespace attn_cudnn {

namespace {

namespace fe = cudnn_frontend;

// cuDNN (runtime) versions the graph needs (cudnn_frontend/node/sdpa_support_surface.h):
// paged caches with ragged offsets from 9.7.0, paged caches at D > 128 from 9.10.0.
constexpr int64_t kMinCudnn = 90700, kMinCudnnLargeD = 91000, kFastCudnn = 91900;

// Tensor uids of the graph's non-virtual tensors (the keys of the variant pack at execution).
enum Uid : int64_t {
  kUidQ = 1,
  kUidK,
  kUidV,
  kUidO,
  kUidPageTableK,
  kUidPageTableV,
  kUidSeqLenQ,
  kUidSeqLenKv,
  kUidRaggedQ,
  kUidRaggedO,
};

// The workspace prefix the prep kernel fills (int32 each), then cuDNN's workspace at a 256-byte
// boundary:
//   table [N, max_pages] | seq_len_q [N] | seq_len_kv [N] | ragged_q [N + 1] | ragged_o [N + 1]
// Every array starts on a 64-byte boundary: the frontend declares each tensor 16-byte aligned
// (cudnn_interface.h, setAlignment(16)), and the workspace base is 256-byte aligned.
struct PrepLayout {
  int64_t table = 0, seq_q = 0, seq_kv = 0, ragged_q = 0, ragged_o = 0;  // int32 offsets
  size_t bytes = 0;                                                      // rounded up to 256
};

PrepLayout prep_layout(int64_t N, int64_t max_pages) {
  auto next = [](int64_t start, int64_t count) { return (start + count + 15) / 16 * 16; };
  PrepLayout l;
  l.table = 0;
  l.seq_q = next(l.table, N * max_pages);
  l.seq_kv = next(l.seq_q, N);
  l.ragged_q = next(l.seq_kv, N);
  l.ragged_o = next(l.ragged_q, N + 1);
  const size_t end = static_cast<size_t>(next(l.ragged_o, N + 1)) * sizeof(int32_t);
  l.bytes = (end + 255) / 256 * 256;
  return l;
}

struct PrepParams {
  const int* page_table = nullptr;  // [N, max_pages] (strides pt_s0, pt_s1)
  int64_t pt_s0 = 0, pt_s1 = 0;
  const int* cu = nullptr;        // [N + 1]
  const int* seq_lens = nullptr;  // [N]
  int32_t* ws = nullptr;          // PrepLayout
  PrepLayout l;
  int N = 0, max_pages = 0, num_pages = 0, page_size = 1;
  int64_t window = 0;        // 0 = full causal
  int64_t q_t = 0, o_t = 0;  // row strides of q and out (elements)
};

// One pass over the N·max_pages table entries and the N + 1 sequence boundaries:
//   table[n, j]   = page_table[n, j] for the touched pages j in [first, last] of sequence n
//                   (first = lo / page_size, lo = the first key row 0 attends to, p0 = len − L:
//                   0 or max(0, p0 − W + 1); last = (len − 1) / page_size), page_table[n, first]
//                   elsewhere; 0 for a sequence with no rows or an id outside [0, num_pages)
//   seq_len_q[n]  = cu[n + 1] − cu[n],  seq_len_kv[n] = seq_lens[n]
//   ragged_q[n]   = cu[n] · q_t,        ragged_o[n]   = cu[n] · o_t   (n = 0..N, < 2^31)
__global__ void cudnn_prefill_prep_kernel(PrepParams p) {
  const int64_t entries = static_cast<int64_t>(p.N) * p.max_pages;
  const int64_t total = entries + p.N + 1;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    if (i < entries) {
      const int64_t n = i / p.max_pages, j = i % p.max_pages;
      const int64_t L = p.cu[n + 1] - p.cu[n], len = p.seq_lens[n];
      int page = 0;
      if (L > 0 && len > 0) {
        const int64_t p0 = len - L;  // position of row 0
        const int64_t lo = p.window > 0 ? max(int64_t{0}, p0 - p.window + 1) : 0;
        const int64_t first = lo / p.page_size, last = (len - 1) / p.page_size;
        const int64_t jj = j >= first && j <= last ? j : first;
        // jj < max_pages for valid seq_lens (<= max_pages · page_size); guarded all the same.
        if (jj < p.max_pages) page = p.page_table[n * p.pt_s0 + jj * p.pt_s1];
      }
      p.ws[p.l.table + i] = page >= 0 && page < p.num_pages ? page : 0;
    } else {
      const int64_t n = i - entries;  // 0..N
      const int c = p.cu[n];
      p.ws[p.l.ragged_q + n] = static_cast<int32_t>(c * p.q_t);
      p.ws[p.l.ragged_o + n] = static_cast<int32_t>(c * p.o_t);
      if (n < p.N) {
        p.ws[p.l.seq_q + n] = p.cu[n + 1] - c;
        p.ws[p.l.seq_kv + n] = p.seq_lens[n];
      }
    }
  }
}

// Everything a plan depends on: device, sizes, dtype, scale bits, strides (elements).
using PlanKey = std::array<int64_t, 22>;

struct Shape {
  int64_t N, T, S_q, Hq, Hkv, D, page_size, num_pages, max_pages, window;
  DType dtype;
  float scale;
  int64_t q_t, q_h, o_t, o_h, k_page, k_row, k_head, v_page, v_row, v_head;
};

// S_q (the plan's query rows per sequence): T rounded up to a power of two, at least 64, so that
// prefills of similar length share a plan; any L_n <= T fits.
int64_t s_q_bound(int64_t T) {
  return static_cast<int64_t>(std::bit_ceil(static_cast<uint64_t>(std::max<int64_t>(T, 64))));
}

Shape shape_of(const AttnPrefill& a) {
  Shape s;
  s.N = a.cu_seqlens.size(0) - 1;
  s.T = a.q.size(0);
  s.S_q = s_q_bound(s.T);
  s.Hq = a.q.size(1);
  s.D = a.q.size(2);
  s.num_pages = a.k_cache.size(0);
  s.page_size = a.k_cache.size(1);
  s.Hkv = a.k_cache.size(2);
  s.max_pages = a.page_table.size(1);
  s.window = a.window;
  s.dtype = a.q.dtype();
  s.scale = a.scale ? *a.scale : 1.0f / std::sqrt(static_cast<float>(s.D));
  s.q_t = a.q.stride(0), s.q_h = a.q.stride(1);
  s.o_t = a.out.stride(0), s.o_h = a.out.stride(1);
  s.k_page = a.k_cache.stride(0), s.k_row = a.k_cache.stride(1), s.k_head = a.k_cache.stride(2);
  s.v_page = a.v_cache.stride(0), s.v_row = a.v_cache.stride(1), s.v_head = a.v_cache.stride(2);
  return s;
}

PlanKey key_of(int device, const Shape& s) {
  uint32_t scale_bits = 0;
  std::memcpy(&scale_bits, &s.scale, sizeof(scale_bits));
  return {device,
          s.N,
          s.S_q,
          s.Hq,
          s.Hkv,
          s.D,
          s.page_size,
          s.num_pages,
          s.max_pages,
          s.window,
          static_cast<int64_t>(s.dtype),
          scale_bits,
          s.q_t,
          s.q_h,
          s.o_t,
          s.o_h,
          s.k_page,
          s.k_row,
          s.k_head,
          s.v_page,
          s.v_row,
          s.v_head};
}

// A built graph (one execution plan chosen by cuDNN's heuristics), or why there is none.
struct Plan {
  std::shared_ptr<fe::graph::Graph> graph;  // null: refused, `error` says why
  int64_t workspace = 0;                    // cuDNN's workspace bytes
  std::string error;
};

fe::DataType_t fe_dtype(DType t) {
  return t == DType::bf16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF;
}

// Builds the SDPA graph of `s` (see the header comment for the layout mapping) and its plan.
// Host only: the handle is used for the operation graph (device properties); nothing runs.
Plan build_plan(cudnnHandle_t handle, const Shape& s) {
  Plan plan;
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(fe_dtype(s.dtype))
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  using TA = fe::graph::Tensor_attributes;
  auto int_tensor = [&](const char* name, int64_t uid, std::vector<int64_t> dim,
                        std::vector<int64_t> stride) {
    return g->tensor(TA().set_name(name)
                         .set_uid(uid)
                         .set_dim(std::move(dim))
                         .set_stride(std::move(stride))
                         .set_data_type(fe::DataType_t::INT32));
  };
  const int64_t B = s.N;
  // Ragged (THD) offsets of Q and O: [B + 1, 1, 1, 1] element offsets of each sequence's row 0.
  auto ragged_q = int_tensor("ragged_q", kUidRaggedQ, {B + 1, 1, 1, 1}, {1, 1, 1, 1});
  auto ragged_o = int_tensor("ragged_o", kUidRaggedO, {B + 1, 1, 1, 1}, {1, 1, 1, 1});
  // Q [B, Hq, S_q, D]: head stride q_h, row stride q_t (the batch stride is replaced by ragged_q).
  auto q = g->tensor(TA().set_name("q")
                         .set_uid(kUidQ)
                         .set_dim({B, s.Hq, s.S_q, s.D})
                         .set_stride({s.S_q * s.q_t, s.q_h, s.q_t, 1})
                         .set_data_type(fe_dtype(s.dtype)));
  q->set_ragged_offset(ragged_q);
  // Paged containers [num_pages, Hkv, page_size, D] over our [num_pages, page_size, Hkv, D].
  auto k = g->tensor(TA().set_name("k_cache")
                         .set_uid(kUidK)
                         .set_dim({s.num_pages, s.Hkv, s.page_size, s.D})
                         .set_stride({s.k_page, s.k_head, s.k_row, 1})
                         .set_data_type(fe_dtype(s.dtype)));
  auto v = g->tensor(TA().set_name("v_cache")
                         .set_uid(kUidV)
                         .set_dim({s.num_pages, s.Hkv, s.page_size, s.D})
                         .set_stride({s.v_page, s.v_head, s.v_row, 1})
                         .set_data_type(fe_dtype(s.dtype)));
  // Page tables [B, 1, max_pages, 1] (the same clamped copy for K and V), lengths [B, 1, 1, 1].
  auto table_k = int_tensor("page_table_k", kUidPageTableK, {B, 1, s.max_pages, 1},
                            {s.max_pages, s.max_pages, 1, 1});
  auto table_v = int_tensor("page_table_v", kUidPageTableV, {B, 1, s.max_pages, 1},
                            {s.max_pages, s.max_pages, 1, 1});
  auto seq_q = int_tensor("seq_len_q", kUidSeqLenQ, {B, 1, 1, 1}, {1, 1, 1, 1});
  auto seq_kv = int_tensor("seq_len_kv", kUidSeqLenKv, {B, 1, 1, 1}, {1, 1, 1, 1});

  auto options =
      fe::graph::SDPA_attributes()
          .set_name("attn_prefill")
          .set_generate_stats(false)  // inference: no softmax statistics output
          .set_attn_scale(s.scale)
          .set_padding_mask(true)
          .set_seq_len_q(seq_q)
          .set_seq_len_kv(seq_kv)
          // causal, bottom right: key col <= row + seq_len_kv − seq_len_q (= p)
          .set_diagonal_alignment(fe::DiagonalAlignment_t::BOTTOM_RIGHT)
          .set_diagonal_band_right_bound(0)
          .set_paged_attention_k_table(table_k)
          .set_paged_attention_v_table(table_v)
          .set_paged_attention_max_seq_len_kv(static_cast<int>(s.max_pages * s.page_size));
  // Window W: keys col > p − W (cuDNN's left bound: col + W − (seq_len_kv − seq_len_q) > row).
  if (s.window > 0) options.set_diagonal_band_left_bound(static_cast<int>(s.window));

  auto [o, stats] = g->sdpa(q, k, v, options);
  (void)stats;  // null: generate_stats is off
  o->set_output(true)
      .set_uid(kUidO)
      .set_dim({B, s.Hq, s.S_q, s.D})
      .set_stride({s.S_q * s.o_t, s.o_h, s.o_t, 1})
      .set_data_type(fe_dtype(s.dtype))
      .set_ragged_offset(ragged_o);

  auto step = [&](const char* what, fe::error_t e) {
    if (e.is_good()) return true;
    plan.error = str("cuDNN ", what, ": ", e.get_message());
    return false;
  };
  try {
    if (!step("validate", g->validate()) ||
        !step("build_operation_graph", g->build_operation_graph(handle)) ||
        !step("create_execution_plans",
              g->create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK})) ||
        !step("check_support", g->check_support(handle)) ||
        !step("build_plans", g->build_plans(handle, fe::BuildPlanPolicy_t::HEURISTICS_CHOICE)) ||
        !step("get_workspace_size", g->get_workspace_size(plan.workspace)))
      return plan;
  } catch (const std::exception& e) {  // the frontend throws from some backend descriptor builds
    plan.error = str("cuDNN plan build threw: ", e.what());
    return plan;
  }
  plan.graph = std::move(g);
  return plan;
}

// The plans of every shape class seen, per device (host objects; they stay for the process, as
// linear.cu's cuBLASLt plans do), and one planning handle per device. supports() has no Context,
// so plans cannot live in one; cuDNN execution plans do not belong to the handle that built them
// (frontend 1.15 builds plans without one: graph_interface.h, build_plans), and each call
// executes with its Context's handle.
struct PlanCache {
  std::mutex mu;
  std::map<PlanKey, std::shared_ptr<const Plan>> plans;
  std::map<int, cudnnHandle_t> planning_handles;  // never destroyed
};

PlanCache& plan_cache() {
  static auto* cache = new PlanCache();  // never freed: plans may be in use at exit
  return *cache;
}

// Switches the current device to `device` for the scope (plan building reads the current device's
// properties).
struct DeviceScope {
  int previous = 0;
  explicit DeviceScope(int device) {
    HYBRID_CUDA_CHECK(cudaGetDevice(&previous));
    if (previous != device) HYBRID_CUDA_CHECK(cudaSetDevice(device));
  }
  ~DeviceScope() { cudaSetDevice(previous); }
};

std::shared_ptr<const Plan> find_or_build_plan(int device, const Shape& s) {
  PlanCache& c = plan_cache();
  const PlanKey key = key_of(device, s);
  std::lock_guard<std::mutex> lock(c.mu);
  auto it = c.plans.find(key);
  if (it != c.plans.end()) return it->second;
  DeviceScope scope(device);
  cudnnHandle_t& handle = c.planning_handles[device];
  if (!handle) {
    const cudnnStatus_t st = cudnnCreate(&handle);
    if (st != CUDNN_STATUS_SUCCESS) {
      handle = nullptr;
      return std::make_shared<const Plan>(
          Plan{nullptr, 0, str("cudnnCreate failed: ", cudnnGetErrorString(st))});
    }
  }
  auto plan = std::make_shared<const Plan>(build_plan(handle, s));
  // Bound the cache: past 256 shape classes start over (plans in use stay alive through their
  // shared_ptr).
  if (c.plans.size() >= 256) c.plans.clear();
  c.plans.emplace(key, plan);
  return plan;
}

// Opt-in (HYBRID_ATTN_PREFILL_CUDNN=1): with cuDNN 9.19 on the H200 (session 6 runs 8-9) the one
// case whose cache rows past a sequence's length hold NaN (the partial last page's unwritten rows)
// came back NaN in every output row: cuDNN's engine multiplies those rows' V by P = 0, which the
// attn_prefill contract excludes (the own kernels never read them). An engine that keeps its
// pages' unwritten rows finite (zeroed at allocation) may opt in for 1.9-2.1x fa2c's speed.
bool cudnn_prefill_enabled() {
  static const bool on = env_on("HYBRID_ATTN_PREFILL_CUDNN");
  return on;
}

// 16-byte aligned base, every stride but the last a multiple of 8 elements (16 bytes at bf16).
bool aligned16(const Tensor& t) {
  if (reinterpret_cast<uintptr_t>(t.data()) % 16 != 0) return false;
  for (int i = 0; i + 1 < t.rank(); ++i)
    if (t.stride(i) % 8 != 0) return false;
  return true;
}

// The last element offset + 1 of a view (its extent in elements).
int64_t extent(const Tensor& t) {
  int64_t last = 0;
  for (int i = 0; i < t.rank(); ++i) {
    if (t.size(i) == 0) return 0;
    last += (t.size(i) - 1) * t.stride(i);
  }
  return last + 1;
}

Reason cudnn_supports(const AttnPrefill& a) {
  if (!cudnn_prefill_enabled())
    return std::string(
        "opt-in: HYBRID_ATTN_PREFILL_CUDNN=1 (NaN in unwritten cache rows reach "
        "the output)");
  const DType dt = a.q.dtype();
  if (dt != DType::bf16 && dt != DType::f16)
    return str("cuDNN SDPA takes bf16 or f16, got q ", dtype_name(dt));
  if (a.k_cache.dtype() != dt || a.out.dtype() != dt)
    return str("cuDNN SDPA needs q, caches and out in one dtype, got q ", dtype_name(dt),
               ", caches ", dtype_name(a.k_cache.dtype()), ", out ", dtype_name(a.out.dtype()));
  const int64_t D = a.q.size(2);
  if (D % 8 != 0 || D > 256) return str("cuDNN SDPA needs D % 8 == 0 and D <= 256, got D=", D);
  if (!aligned16(a.q) || !aligned16(a.out) || !aligned16(a.k_cache) || !aligned16(a.v_cache))
    return std::string("cuDNN SDPA needs q, out and caches 16-byte aligned (base and strides)");
  for (const Tensor* t : {&a.q, &a.out, &a.k_cache, &a.v_cache})
    for (int i = 0; i < t->rank(); ++i)
      if (t->stride(i) < 0) return std::string("cuDNN SDPA takes no negative strides");
  // Ragged offsets are int32 element offsets (cu[n] · row stride <= T · row stride).
  const int64_t T = a.q.size(0);
  if (extent(a.q) >= (int64_t{1} << 31) || extent(a.out) >= (int64_t{1} << 31) ||
      T * std::max(a.q.stride(0), a.out.stride(0)) >= (int64_t{1} << 31))
    return std::string("q / out element offsets must stay below 2^31 (int32 ragged offsets)");
  if (a.window > INT32_MAX || a.page_table.size(1) * a.k_cache.size(1) > INT32_MAX)
    return std::string("window and max_pages · page_size must fit in int32");
  const int64_t N = a.cu_seqlens.size(0) - 1;
  if (T == 0 || N == 0 || a.q.size(1) == 0)
    return std::nullopt;  // nothing to compute: run() returns
  const int64_t version = static_cast<int64_t>(cudnnGetVersion());
  if (version < kMinCudnn)
    return str("cuDNN ", version, " is older than 9.7.0 (paged K/V with ragged Q/O)");
  if (D > 128 && version < kMinCudnnLargeD)
    return str("cuDNN ", version, " is older than 9.10.0 (paged K/V at D > 128)");
  // Slower than our own kernel before 9.19 (H200, session 6 run 7: 9.14's heuristics choose an
  // engine at 995 µs / 13.7 ms for the D 256 causal 4K / 16K benchmarks, against fa2c's 533 µs /
  // 7.5 ms and 9.19's 285 µs / 3.6 ms), so an older library leaves the bf16 / f16 cases to fa2c.
  if (version < kFastCudnn)
    return str("cuDNN ", version, " is older than 9.19.0, the first measured faster than fa2c");
  if (device_info().major < 9)
    return std::string("cuDNN's ragged (THD) SDPA needs Hopper (sm_90) or newer");
  const auto plan = find_or_build_plan(a.q.device().index, shape_of(a));
  if (!plan->graph) return plan->error;
  return std::nullopt;
}

#define HYBRID_FE_CHECK(stmt)                                                                  \
  do {                                                                                         \
    fe::error_t e_ = (stmt);                                                                   \
    if (e_.is_bad())                                                                           \
      fail("[attn_prefill.cudnn] ", #stmt, " failed: ", e_.get_message(), " (", __FILE__, ":", \
           __LINE__, ")");                                                                     \
  } while (0)

void cudnn_run(const AttnPrefill& a, Context& ctx) {
  const Shape s = shape_of(a);
  if (s.T == 0 || s.N == 0 || s.Hq == 0) return;
  // supports() built (or refused) this shape's plan, so this is a cache hit; a run() reached
  // without supports() would build it here (outside any capture only).
  const auto plan = find_or_build_plan(ctx.device().index, s);
  if (!plan->graph) fail("[attn_prefill.cudnn] ", plan->error);
  const PrepLayout l = prep_layout(s.N, s.max_pages);
  auto* ws = static_cast<char*>(ctx.workspace(l.bytes + static_cast<size_t>(plan->workspace)));
  const cudaStream_t st = as_stream(ctx.stream());

  PrepParams p;
  p.page_table = a.page_table.data_as<const int>();
  p.pt_s0 = a.page_table.stride(0), p.pt_s1 = a.page_table.stride(1);
  p.cu = a.cu_seqlens.data_as<const int>();
  p.seq_lens = a.seq_lens.data_as<const int>();
  p.ws = reinterpret_cast<int32_t*>(ws);
  p.l = l;
  p.N = static_cast<int>(s.N), p.max_pages = static_cast<int>(s.max_pages);
  p.num_pages = static_cast<int>(s.num_pages);
  p.page_size = static_cast<int>(s.page_size);
  p.window = s.window;
  p.q_t = s.q_t, p.o_t = s.o_t;
  const int64_t items = s.N * s.max_pages + s.N + 1;
  const auto blocks = static_cast<unsigned>(std::min<int64_t>((items + 255) / 256, 1024));
  cudnn_prefill_prep_kernel<<<blocks, 256, 0, st>>>(p);
  HYBRID_CUDA_CHECK_LAUNCH();

  auto handle = static_cast<cudnnHandle_t>(ctx.dnn_handle());
  const cudnnStatus_t ss = cudnnSetStream(handle, st);
  if (ss != CUDNN_STATUS_SUCCESS)
    fail("[attn_prefill.cudnn] cudnnSetStream failed: ", cudnnGetErrorString(ss));
  int32_t* prep = p.ws;
  std::unordered_map<int64_t, void*> pack = {
      {kUidQ, a.q.data()},
      {kUidK, a.k_cache.data()},
      {kUidV, a.v_cache.data()},
      {kUidO, a.out.data()},
      {kUidPageTableK, prep + l.table},
      {kUidPageTableV, prep + l.table},
      {kUidSeqLenQ, prep + l.seq_q},
      {kUidSeqLenKv, prep + l.seq_kv},
      {kUidRaggedQ, prep + l.ragged_q},
      {kUidRaggedO, prep + l.ragged_o},
  };
  try {
    HYBRID_FE_CHECK(plan->graph->execute(handle, pack, ws + l.bytes));
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {  // a frontend exception (cudnnException) as hybrid::Error
    fail("[attn_prefill.cudnn] cuDNN execute threw: ", e.what());
  }
}

}  // namespace

}  // namespace attn_cudnn

void register_attention_prefill_cudnn(Registry& r) {
  // Above attn_prefill.cuda_fa2c (40): taken wherever cuDNN builds a plan for the call.
  r.add<AttnPrefill>("attn_prefill.cudnn", DeviceType::cuda, 50, attn_cudnn::cudnn_supports,
                     attn_cudnn::cudnn_run);
}

}  // namespace hybrid::cuda
