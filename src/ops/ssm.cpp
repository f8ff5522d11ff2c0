// ssm_step, ssm_step_record, ssm_replay, ssm_chunk_scan: validation and dispatch.
#include "hybrid/ops/ssm.h"

#include <cmath>
#include <vector>

#include "hybrid/core/registry.h"
#include "ops/check.h"

namespace hybrid {

namespace {

constexpr std::initializer_list<DType> kActivation = {DType::f32, DType::bf16, DType::f16};
constexpr std::initializer_list<DType> kParam = {DType::f32, DType::bf16};
constexpr std::initializer_list<DType> kState = {DType::f32, DType::bf16};
constexpr std::initializer_list<DType> kMask = {DType::u8, DType::i32, DType::u32};

struct Dims {
  int64_t T, H, P, G, N;
};

// The inputs every SSM op but ssm_replay shares: x, dt, A_log, B, C, D, dt_bias, z, dt_limit.
// `tok` names the token axis ("batch" for the decode step, "T" for the varlen ops).
template <class Args>
Dims check_inputs(ops::Check& c, const Args& a, const char* tok) {
  c.rank(a.x, "x", {tok, "H", "P"}, kActivation);
  const int64_t T = a.x.size(0), H = a.x.size(1), P = a.x.size(2);
  c.require(H > 0 && P > 0, "x: H and P must be positive, got ", a.x.describe());
  c.tensor(a.dt, "dt", {{tok, T}, {"H", H}}, kActivation);
  c.tensor(a.A_log, "A_log", {{"H", H}}, kParam);
  c.tensor(a.B, "B", {{tok, T}, {"G", -1}, {"N", -1}}, kActivation);
  const int64_t G = a.B.size(1), N = a.B.size(2);
  c.require(G > 0 && N > 0, "B: G and N must be positive, got ", a.B.describe());
  c.require(H % G == 0, "H=", H, " must be a multiple of the number of groups G=", G,
            " (x: ", a.x.describe(), ", B: ", a.B.describe(), ")");
  c.tensor(a.C, "C", {{tok, T}, {"G", G}, {"N", N}}, kActivation);
  c.optional(a.D, "D", {{"H", H}}, kParam);
  c.optional(a.dt_bias, "dt_bias", {{"H", H}}, kParam);
  c.optional(a.z, "z", {{tok, T}, {"H", H}, {"P", P}}, kActivation);
  c.require(!std::isnan(a.dt_min) && !std::isnan(a.dt_max) && a.dt_min <= a.dt_max,
            "dt_limit: expected dt_min <= dt_max, got (", a.dt_min, ", ", a.dt_max, ")");
  for (auto [t, name] : {std::pair{a.x, "x"},
                         {a.dt, "dt"},
                         {a.A_log, "A_log"},
                         {a.B, "B"},
                         {a.C, "C"},
                         {a.D, "D"},
                         {a.dt_bias, "dt_bias"},
                         {a.z, "z"}})
    c.inner_contiguous(t, name);
  return {T, H, P, G, N};
}

// The state pool [slots, H, P, N]; returns the number of slots.
int64_t check_pool(ops::Check& c, const Tensor& state, const char* name, const Dims& d) {
  c.tensor(state, name, {{"slots", -1}, {"H", d.H}, {"P", d.P}, {"N", d.N}}, kState);
  c.inner_contiguous(state, name);
  return state.size(0);
}

// An output [rows, H, P, N] of states (chunk_states, state_out).
void check_states_out(ops::Check& c, const Tensor& t, const char* name, const char* rows_name,
                      int64_t rows, const Dims& d) {
  if (!t.defined()) return;
  c.tensor(t, name, {{rows_name, rows}, {"H", d.H}, {"P", d.P}, {"N", d.N}}, kState);
  c.inner_contiguous(t, name);
}

// state_slots [seqs] i32: on the CPU, every value < slots, non-negative values distinct.
void check_slots(ops::Check& c, const Tensor& slots, int64_t seqs, int64_t num_slots) {
  c.tensor(slots, "state_slots", {{"seqs", seqs}}, {DType::i32});
  c.contiguous(slots, "state_slots");
  ops::check_state_slots_values(c, slots, num_slots, "state");
}

// cu_seqlens [seqs + 1] i32: on the CPU, cu[0] = 0, non-decreasing, cu[seqs] = T. Returns seqs.
int64_t check_cu_seqlens(ops::Check& c, const Tensor& cu, int64_t T) {
  c.rank(cu, "cu_seqlens", {"seqs + 1"}, {DType::i32});
  c.require(cu.size(0) >= 1, "cu_seqlens: expected [seqs + 1] with at least one element, got ",
            cu.describe());
  c.contiguous(cu, "cu_seqlens");
  const int64_t seqs = cu.size(0) - 1;
  ops::check_cu_seqlens_values(c, cu, T);
  return seqs;
}

void check_mask(ops::Check& c, const Tensor& mask, int64_t T) {
  c.optional(mask, "mask", {{"T", T}}, kMask);
  c.contiguous(mask, "mask");
}

}  // namespace

void ssm_step(const SsmStep& a, Context& ctx) {
  ops::Check c(SsmStep::op_name);
  const Dims d = check_inputs(c, a, "batch");
  const int64_t slots = check_pool(c, a.state, "state", d);
  check_slots(c, a.state_slots, d.T, slots);
  c.tensor(a.y, "y", {{"batch", d.T}, {"H", d.H}, {"P", d.P}}, kActivation);
  c.inner_contiguous(a.y, "y");
  ctx.registry().dispatch(a, c.device(), ctx);
}

void ssm_step_record(const SsmStepRecord& a, Context& ctx) {
  ops::Check c(SsmStepRecord::op_name);
  const Dims d = check_inputs(c, a, "T");
  check_mask(c, a.mask, d.T);
  const int64_t seqs = check_cu_seqlens(c, a.cu_seqlens, d.T);
  const int64_t slots = check_pool(c, a.state, "state", d);
  check_slots(c, a.state_slots, seqs, slots);
  c.tensor(a.y, "y", {{"T", d.T}, {"H", d.H}, {"P", d.P}}, kActivation);
  c.tensor(a.dA_log, "dA_log", {{"T", d.T}, {"H", d.H}}, kState);
  c.tensor(a.dBx_log, "dBx_log", {{"T", d.T}, {"H", d.H}, {"P", d.P}, {"N", d.N}}, kState);
  check_states_out(c, a.state_out, "state_out", "seqs", seqs, d);
  for (auto [t, name] : {std::pair{a.y, "y"}, {a.dA_log, "dA_log"}, {a.dBx_log, "dBx_log"}})
    c.inner_contiguous(t, name);
  ctx.registry().dispatch(a, c.device(), ctx);
}

void ssm_replay(const SsmReplay& a, Context& ctx) {
  ops::Check c(SsmReplay::op_name);
  c.rank(a.dA_log, "dA_log", {"T", "H"}, kState);
  const int64_t T = a.dA_log.size(0), H = a.dA_log.size(1);
  c.require(H > 0, "dA_log: H must be positive, got ", a.dA_log.describe());
  c.tensor(a.dBx_log, "dBx_log", {{"T", T}, {"H", H}, {"P", -1}, {"N", -1}}, kState);
  const Dims d{T, H, a.dBx_log.size(2), 1, a.dBx_log.size(3)};
  c.require(d.P > 0 && d.N > 0, "dBx_log: P and N must be positive, got ", a.dBx_log.describe());
  c.inner_contiguous(a.dA_log, "dA_log");
  c.inner_contiguous(a.dBx_log, "dBx_log");
  check_mask(c, a.mask, T);
  const int64_t seqs = check_cu_seqlens(c, a.cu_seqlens, T);
  const int64_t slots = check_pool(c, a.state, "state", d);
  check_slots(c, a.state_slots, seqs, slots);
  c.tensor(a.num_steps, "num_steps", {{"seqs", seqs}}, {DType::i32});
  c.contiguous(a.num_steps, "num_steps");
  if (a.num_steps.device().is_cpu() && a.cu_seqlens.device().is_cpu())
    for (int64_t i = 0; i < seqs; ++i) {
      const int64_t k = ops::host_index(a.num_steps, i);
      const int64_t len = ops::host_index(a.cu_seqlens, i + 1) - ops::host_index(a.cu_seqlens, i);
      c.require(k >= 0 && k <= len, "num_steps[", i, "] = ", k, " is out of range [0, ", len,
                "] (the length of sequence ", i, ")");
    }
  ctx.registry().dispatch(a, c.device(), ctx);
}

void ssm_chunk_scan(const SsmChunkScan& a, Context& ctx) {
  ops::Check c(SsmChunkScan::op_name);
  const Dims d = check_inputs(c, a, "T");
  c.require(a.chunk_size == 64 || a.chunk_size == 128 || a.chunk_size == 256,
            "chunk_size must be one of 64, 128, 256, got ", a.chunk_size);
  const int64_t seqs = check_cu_seqlens(c, a.cu_seqlens, d.T);
  const int64_t slots = check_pool(c, a.state, "state", d);
  check_slots(c, a.state_slots, seqs, slots);
  c.optional(a.has_initial_state, "has_initial_state", {{"seqs", seqs}}, {DType::u8, DType::i32});
  c.contiguous(a.has_initial_state, "has_initial_state");
  c.tensor(a.y, "y", {{"T", d.T}, {"H", d.H}, {"P", d.P}}, kActivation);
  c.inner_contiguous(a.y, "y");
  if (a.chunk_states.defined()) {
    int64_t chunks = -1;  // Σ ceil(len_i / Q): known here only when cu_seqlens is on the CPU
    if (a.cu_seqlens.device().is_cpu()) {
      chunks = 0;
      for (int64_t i = 0; i < seqs; ++i)
        chunks += (ops::host_index(a.cu_seqlens, i + 1) - ops::host_index(a.cu_seqlens, i) +
                   a.chunk_size - 1) /
                  a.chunk_size;
    }
    check_states_out(c, a.chunk_states, "chunk_states", "num_chunks", chunks, d);
  }
  ctx.registry().dispatch(a, c.device(), ctx);
}

}  // namespace hybrid
