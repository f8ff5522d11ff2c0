// gdn_chunk_prefill: validation and dispatch.
#include "hybrid/ops/gdn_chunk.h"

#include <cmath>
#include <vector>

#include "hybrid/core/registry.h"
#include "ops/check.h"

namespace hybrid {

namespace {
constexpr std::initializer_list<DType> kActivation = {DType::f32, DType::bf16};
constexpr std::initializer_list<DType> kState = {DType::f32, DType::bf16};
}  // namespace

void gdn_chunk_prefill(const GdnChunkPrefill& a, Context& ctx) {
  ops::Check c(GdnChunkPrefill::op_name);
  c.rank(a.q, "q", {"T", "Hk", "K"}, kActivation);
  const int64_t T = a.q.size(0), Hk = a.q.size(1), K = a.q.size(2);
  c.tensor(a.k, "k", {{"T", T}, {"Hk", Hk}, {"K", K}}, {a.q.dtype()});
  c.tensor(a.v, "v", {{"T", T}, {"Hv", -1}, {"V", -1}}, {a.q.dtype()});
  const int64_t Hv = a.v.size(1), V = a.v.size(2);
  c.require(Hk > 0 && K > 0 && V > 0, "q, k, v: head counts and head dims must be positive, got q ",
            a.q.describe(), ", v ", a.v.describe());
  c.require(Hv % Hk == 0, "Hv=", Hv, " must be a multiple of Hk=", Hk,
            " (value head hv reads key head hv / (Hv / Hk))");
  c.tensor(a.g, "g", {{"T", T}, {"Hv", Hv}}, {DType::f32});
  c.tensor(a.beta, "beta", {{"T", T}, {"Hv", Hv}}, {DType::f32});
  c.rank(a.cu_seqlens, "cu_seqlens", {"N + 1"}, {DType::i32});
  const int64_t N = a.cu_seqlens.size(0) - 1;
  c.require(N >= 1, "cu_seqlens: expected [N + 1] with N >= 1 sequences, got ",
            a.cu_seqlens.describe());
  c.tensor(a.state_slots, "state_slots", {{"N", N}}, {DType::i32});
  c.optional(a.has_initial_state, "has_initial_state", {{"N", N}}, {DType::i32});
  c.tensor(a.state, "state", {{"slots", -1}, {"Hv", Hv}, {"V", V}, {"K", K}}, kState);
  c.tensor(a.out, "out", {{"T", T}, {"Hv", Hv}, {"V", V}}, kActivation);
  if (a.checkpoint_every != 0) {
    c.require(a.checkpoint_every > 0 && a.checkpoint_every % kGdnChunkSize == 0,
              "checkpoint_every must be a positive multiple of the chunk size ", kGdnChunkSize,
              ", got ", a.checkpoint_every);
    c.tensor(a.checkpoints, "checkpoints",
             {{"num_checkpoints", -1}, {"Hv", Hv}, {"V", V}, {"K", K}}, {DType::f32});
  } else {
    c.require(!a.checkpoints.defined(), "checkpoints is given but checkpoint_every is 0");
  }
  if (a.scale) c.require(std::isfinite(*a.scale), "scale must be finite, got ", *a.scale);
  for (auto [t, name] : {std::pair{a.q, "q"},
                         {a.k, "k"},
                         {a.v, "v"},
                         {a.g, "g"},
                         {a.beta, "beta"},
                         {a.cu_seqlens, "cu_seqlens"},
                         {a.state_slots, "state_slots"},
                         {a.has_initial_state, "has_initial_state"},
                         {a.state, "state"},
                         {a.out, "out"},
                         {a.checkpoints, "checkpoints"}})
    c.inner_contiguous(t, name);
  const Device dev = c.device();

  // Values in cu_seqlens / state_slots can be read cheaply only when they are host memory.
  if (dev.is_cpu()) {
    ops::check_cu_seqlens_values(c, a.cu_seqlens, T);
    ops::check_state_slots_values(c, a.state_slots, a.state.size(0), "state");
    if (a.checkpoint_every > 0) {
      const Tensor& cu = a.cu_seqlens;
      int64_t rows = 0;
      for (int64_t n = 0; n < N; ++n)
        rows += (ops::host_index(cu, n + 1) - ops::host_index(cu, n)) / a.checkpoint_every;
      c.require(a.checkpoints.size(0) >= rows, "checkpoints: needs ", rows,
                " rows (the state after every ", a.checkpoint_every,
                " tokens of each sequence), got ", a.checkpoints.describe());
    }
  }
  ctx.registry().dispatch(a, dev, ctx);
}

}  // namespace hybrid
