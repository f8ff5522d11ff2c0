// gdn_recurrent, gdn_prep_chunk, gdn_prep_step, gdn_gates, gdn_record, gdn_replay: validation and
// dispatch.
#include "hybrid/ops/gdn.h"

#include <cmath>
#include <vector>

#include "hybrid/core/registry.h"
#include "ops/check.h"

namespace hybrid {

namespace {

constexpr std::initializer_list<DType> kActivation = {DType::f32, DType::bf16, DType::f16};
constexpr std::initializer_list<DType> kWeight = {DType::f32, DType::bf16};
constexpr std::initializer_list<DType> kState = {DType::f32, DType::bf16};
constexpr std::initializer_list<DType> kF32 = {DType::f32};
constexpr std::initializer_list<DType> kI32 = {DType::i32};

// Head sizes shared by the recurrence's inputs.
struct Heads {
  int64_t T, Hk, K, Hv, V;
};

// q, k [T, Hk, K]; v [T, Hv, V]; g [T, Hv] f32; beta [T, Hv]; Hv a multiple of Hk.
Heads check_qkvgb(ops::Check& c, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                  const Tensor& beta) {
  c.rank(q, "q", {"T", "Hk", "K"}, kActivation);
  Heads h{};
  h.T = q.size(0), h.Hk = q.size(1), h.K = q.size(2);
  c.require(h.Hk > 0 && h.K > 0, "q: Hk and K must be positive, got ", q.describe());
  c.tensor(k, "k", {{"T", h.T}, {"Hk", h.Hk}, {"K", h.K}}, kActivation);
  c.rank(v, "v", {"T", "Hv", "V"}, kActivation);
  h.Hv = v.size(1), h.V = v.size(2);
  c.tensor(v, "v", {{"T", h.T}, {"Hv", -1}, {"V", -1}}, kActivation);
  c.require(h.Hv > 0 && h.V > 0, "v: Hv and V must be positive, got ", v.describe());
  c.require(h.Hv % h.Hk == 0, "Hv=", h.Hv, " (v) must be a multiple of Hk=", h.Hk, " (q, k)");
  c.tensor(g, "g", {{"T", h.T}, {"Hv", h.Hv}}, kF32);
  c.tensor(beta, "beta", {{"T", h.T}, {"Hv", h.Hv}}, kActivation);
  for (auto [t, name] : {std::pair{q, "q"}, {k, "k"}, {v, "v"}, {g, "g"}, {beta, "beta"}})
    c.inner_contiguous(t, name);
  return h;
}

// The pool [slots, Hv, V, K]; returns the number of slots.
int64_t check_pool(ops::Check& c, const Tensor& state, int64_t Hv, int64_t V, int64_t K) {
  c.rank(state, "state", {"slots", "Hv", "V", "K"}, kState);
  c.tensor(state, "state", {{"slots", -1}, {"Hv", Hv}, {"V", V}, {"K", K}}, kState);
  c.inner_contiguous(state, "state");
  return state.size(0);
}

// cu_seqlens [N+1] and state_slots [N] (and the optional per-sequence i32 tensors); values are
// checked when they are on the CPU. Returns N.
int64_t check_varlen(ops::Check& c, const Tensor& cu, const Tensor& slots, int64_t T,
                     int64_t num_slots) {
  c.rank(cu, "cu_seqlens", {"N+1"}, kI32);
  c.require(cu.size(0) >= 1, "cu_seqlens: expected [N+1] with N >= 0, got ", cu.describe());
  const int64_t N = cu.size(0) - 1;
  c.tensor(slots, "state_slots", {{"N", N}}, kI32);
  ops::check_cu_seqlens_values(c, cu, T);
  ops::check_state_slots_values(c, slots, num_slots, "state");
  return N;
}

void check_has_initial_state(ops::Check& c, const Tensor& t, int64_t N) {
  c.optional(t, "has_initial_state", {{"N", N}}, kI32);
}

void check_scale(ops::Check& c, const std::optional<float>& scale) {
  if (scale) c.require(std::isfinite(*scale), "scale must be finite, got ", *scale);
}

// The seed-000 prep inputs; returns the heads (T = rows of conv_out).
Heads check_prep(ops::Check& c, const Tensor& conv_out, const Tensor& a, const Tensor& b,
                 const Tensor& A_log, const Tensor& dt_bias, const Tensor& qw, const Tensor& kw,
                 const Tensor& state, const Tensor& y, float eps) {
  c.rank(state, "state", {"slots", "Hv", "V", "K"}, kState);
  c.rank(qw, "q_norm_weight", {"Hk", "K"}, kWeight);
  Heads h{};
  h.Hv = state.size(1), h.V = state.size(2), h.K = state.size(3), h.Hk = qw.size(0);
  c.require(h.Hv > 0 && h.V > 0 && h.K > 0, "state: Hv, V and K must be positive, got ",
            state.describe());
  c.tensor(qw, "q_norm_weight", {{"Hk", -1}, {"K", h.K}}, kWeight);
  c.require(h.Hk > 0 && h.Hv % h.Hk == 0, "Hv=", h.Hv, " (state) must be a multiple of Hk=", h.Hk,
            " (q_norm_weight)");
  c.tensor(kw, "k_norm_weight", {{"Hk", h.Hk}, {"K", h.K}}, kWeight);
  c.rank(conv_out, "conv_out", {"T", "2*Hk*K+Hv*V"}, kActivation);
  h.T = conv_out.size(0);
  c.tensor(conv_out, "conv_out", {{"T", h.T}, {"2*Hk*K+Hv*V", 2 * h.Hk * h.K + h.Hv * h.V}},
           kActivation);
  c.tensor(a, "a", {{"T", h.T}, {"Hv", h.Hv}}, kActivation);
  c.tensor(b, "b", {{"T", h.T}, {"Hv", h.Hv}}, kActivation);
  c.tensor(A_log, "A_log", {{"Hv", h.Hv}}, kWeight);
  c.tensor(dt_bias, "dt_bias", {{"Hv", h.Hv}}, kWeight);
  c.tensor(y, "y", {{"T", h.T}, {"Hv", h.Hv}, {"V", h.V}}, kActivation);
  c.require(eps > 0.0f && std::isfinite(eps), "eps must be positive, got ", eps);
  for (auto [t, name] : {std::pair{conv_out, "conv_out"},
                         {a, "a"},
                         {b, "b"},
                         {A_log, "A_log"},
                         {dt_bias, "dt_bias"},
                         {qw, "q_norm_weight"},
                         {kw, "k_norm_weight"},
                         {state, "state"},
                         {y, "y"}})
    c.inner_contiguous(t, name);
  return h;
}

}  // namespace

void gdn_recurrent(const GdnRecurrent& a, Context& ctx) {
  ops::Check c(GdnRecurrent::op_name);
  const Heads h = check_qkvgb(c, a.q, a.k, a.v, a.g, a.beta);
  const int64_t slots = check_pool(c, a.state, h.Hv, h.V, h.K);
  c.tensor(a.out, "out", {{"T", h.T}, {"Hv", h.Hv}, {"V", h.V}}, kActivation);
  c.inner_contiguous(a.out, "out");
  c.optional(a.states_per_token, "states_per_token",
             {{"T", h.T}, {"Hv", h.Hv}, {"V", h.V}, {"K", h.K}}, kF32);
  c.inner_contiguous(a.states_per_token, "states_per_token");
  check_scale(c, a.scale);
  const int64_t N = check_varlen(c, a.cu_seqlens, a.state_slots, h.T, slots);
  check_has_initial_state(c, a.has_initial_state, N);
  ctx.registry().dispatch(a, c.device(), ctx);
}

void gdn_prep_chunk(const GdnPrepChunk& a, Context& ctx) {
  ops::Check c(GdnPrepChunk::op_name);
  const Heads h = check_prep(c, a.conv_out, a.a, a.b, a.A_log, a.dt_bias, a.q_norm_weight,
                             a.k_norm_weight, a.state, a.y, a.eps);
  const int64_t N = check_varlen(c, a.cu_seqlens, a.state_slots, h.T, a.state.size(0));
  check_has_initial_state(c, a.has_initial_state, N);
  ctx.registry().dispatch(a, c.device(), ctx);
}

void gdn_prep_step(const GdnPrepStep& a, Context& ctx) {
  ops::Check c(GdnPrepStep::op_name);
  const Heads h = check_prep(c, a.conv_out, a.a, a.b, a.A_log, a.dt_bias, a.q_norm_weight,
                             a.k_norm_weight, a.state, a.y, a.eps);
  c.tensor(a.state_slots, "state_slots", {{"N", h.T}}, kI32);
  ops::check_state_slots_values(c, a.state_slots, a.state.size(0), "state");
  ctx.registry().dispatch(a, c.device(), ctx);
}

void gdn_gates(const GdnGates& a, Context& ctx) {
  ops::Check c(GdnGates::op_name);
  c.rank(a.a, "a", {"T", "Hv"}, kActivation);
  const int64_t T = a.a.size(0), Hv = a.a.size(1);
  c.tensor(a.b, "b", {{"T", T}, {"Hv", Hv}}, kActivation);
  c.tensor(a.A_log, "A_log", {{"Hv", Hv}}, kWeight);
  c.tensor(a.dt_bias, "dt_bias", {{"Hv", Hv}}, kWeight);
  c.tensor(a.g, "g", {{"T", T}, {"Hv", Hv}}, kF32);
  c.tensor(a.beta, "beta", {{"T", T}, {"Hv", Hv}}, kF32);
  for (auto [t, name] : {std::pair{a.a, "a"},
                         {a.b, "b"},
                         {a.A_log, "A_log"},
                         {a.dt_bias, "dt_bias"},
                         {a.g, "g"},
                         {a.beta, "beta"}})
    c.inner_contiguous(t, name);
  ctx.registry().dispatch(a, c.device(), ctx);
}

void gdn_record(const GdnRecord& a, Context& ctx) {
  ops::Check c(GdnRecord::op_name);
  const Heads h = check_qkvgb(c, a.q, a.k, a.v, a.g, a.beta);
  const int64_t slots = check_pool(c, a.state, h.Hv, h.V, h.K);
  c.tensor(a.out, "out", {{"T", h.T}, {"Hv", h.Hv}, {"V", h.V}}, kActivation);
  c.tensor(a.tape_k, "tape_k", {{"T", h.T}, {"Hk", h.Hk}, {"K", h.K}}, kF32);
  c.tensor(a.tape_u, "tape_u", {{"T", h.T}, {"Hv", h.Hv}, {"V", h.V}}, kF32);
  c.tensor(a.tape_alpha, "tape_alpha", {{"T", h.T}, {"Hv", h.Hv}}, kF32);
  for (auto [t, name] : {std::pair{a.out, "out"},
                         {a.tape_k, "tape_k"},
                         {a.tape_u, "tape_u"},
                         {a.tape_alpha, "tape_alpha"}})
    c.inner_contiguous(t, name);
  check_scale(c, a.scale);
  check_varlen(c, a.cu_seqlens, a.state_slots, h.T, slots);
  ctx.registry().dispatch(a, c.device(), ctx);
}

void gdn_replay(const GdnReplay& a, Context& ctx) {
  ops::Check c(GdnReplay::op_name);
  c.rank(a.tape_k, "tape_k", {"T", "Hk", "K"}, kF32);
  const int64_t T = a.tape_k.size(0), Hk = a.tape_k.size(1), K = a.tape_k.size(2);
  c.require(Hk > 0 && K > 0, "tape_k: Hk and K must be positive, got ", a.tape_k.describe());
  c.rank(a.tape_u, "tape_u", {"T", "Hv", "V"}, kF32);
  const int64_t Hv = a.tape_u.size(1), V = a.tape_u.size(2);
  c.tensor(a.tape_u, "tape_u", {{"T", T}, {"Hv", -1}, {"V", -1}}, kF32);
  c.require(Hv > 0 && V > 0, "tape_u: Hv and V must be positive, got ", a.tape_u.describe());
  c.require(Hv % Hk == 0, "Hv=", Hv, " (tape_u) must be a multiple of Hk=", Hk, " (tape_k)");
  c.tensor(a.tape_alpha, "tape_alpha", {{"T", T}, {"Hv", Hv}}, kF32);
  const int64_t slots = check_pool(c, a.state, Hv, V, K);
  const int64_t N = check_varlen(c, a.cu_seqlens, a.state_slots, T, slots);
  c.tensor(a.num_tokens, "num_tokens", {{"N", N}}, kI32);
  c.optional(a.state_out, "state_out", {{"N", N}, {"Hv", Hv}, {"V", V}, {"K", K}}, kState);
  for (auto [t, name] : {std::pair{a.tape_k, "tape_k"},
                         {a.tape_u, "tape_u"},
                         {a.tape_alpha, "tape_alpha"},
                         {a.state_out, "state_out"}})
    c.inner_contiguous(t, name);
  if (a.num_tokens.device().is_cpu() && a.cu_seqlens.device().is_cpu())
    for (int64_t n = 0; n < N; ++n) {
      const int32_t k = ops::host_index(a.num_tokens, n);
      const int32_t len = ops::host_index(a.cu_seqlens, n + 1) - ops::host_index(a.cu_seqlens, n);
      c.require(k >= 0 && k <= len, "num_tokens[", n, "]=", k, " must be in [0, ", len,
                "] (the recorded tokens of sequence ", n, ")");
    }
  ctx.registry().dispatch(a, c.device(), ctx);
}

}  // namespace hybrid
