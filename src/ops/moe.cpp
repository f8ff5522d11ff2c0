// moe_route, moe_experts: validation and dispatch.
#include "hybrid/ops/moe.h"

#include <cmath>

#include "hybrid/core/registry.h"
#include "ops/check.h"

namespace hybrid {

namespace {
constexpr std::initializer_list<DType> kFloat = {DType::f32, DType::bf16, DType::f16};
constexpr std::initializer_list<DType> kBias = {DType::f32, DType::bf16};
constexpr std::initializer_list<DType> kIndex = {DType::i32, DType::i64};

int64_t index_at(const Tensor& t, int64_t offset) {
  return t.dtype() == DType::i64 ? t.data_as<const int64_t>()[offset]
                                 : t.data_as<const int32_t>()[offset];
}
}  // namespace

void moe_route(const MoeRoute& a, Context& ctx) {
  ops::Check c(MoeRoute::op_name);
  c.rank(a.logits, "logits", {"T", "E"}, kFloat);
  const int64_t T = a.logits.size(0), E = a.logits.size(1);
  c.require(a.top_k >= 1 && a.top_k <= E, "top_k must be in [1, E=", E, "], got ", a.top_k);
  c.tensor(a.ids, "ids", {{"T", T}, {"top_k", a.top_k}}, {DType::i32});
  c.tensor(a.weights, "weights", {{"T", T}, {"top_k", a.top_k}}, kFloat);
  c.optional(a.bias, "bias", {{"E", E}}, kBias);
  c.require(a.n_group >= 1 && E % a.n_group == 0, "n_group ", a.n_group,
            " must be positive and divide E=", E);
  c.require(a.topk_group >= 1 && a.topk_group <= a.n_group,
            "topk_group must be in [1, n_group=", a.n_group, "], got ", a.topk_group);
  if (a.n_group > 1) {
    const int64_t per_group = E / a.n_group;
    c.require(per_group >= 2,
              "groups must hold at least 2 experts (a group scores its top 2), got E=", E,
              " / n_group=", a.n_group);
    c.require(a.top_k <= a.topk_group * per_group, "top_k=", a.top_k, " exceeds the ",
              a.topk_group * per_group, " experts of topk_group=", a.topk_group, " groups");
  }
  c.require(std::isfinite(a.scaling) && a.scaling > 0.0f, "scaling must be positive, got ",
            a.scaling);
  for (auto [t, name] :
       {std::pair{a.logits, "logits"}, {a.bias, "bias"}, {a.ids, "ids"}, {a.weights, "weights"}})
    c.inner_contiguous(t, name);
  ctx.registry().dispatch(a, c.device(), ctx);
}

void moe_experts(const MoeExperts& a, Context& ctx) {
  ops::Check c(MoeExperts::op_name);
  c.rank(a.x, "x", {"T", "Dm"}, kFloat);
  const int64_t T = a.x.size(0), Dm = a.x.size(1);
  c.rank(a.down, "down", {"E", "Dm", "I"}, kFloat);
  const int64_t E = a.down.size(0), I = a.down.size(2);
  c.tensor(a.down, "down", {{"E", E}, {"Dm", Dm}, {"I", I}}, kFloat);
  if (a.activation == MoeActivation::swiglu)
    c.tensor(a.gate_up, "gate_up", {{"E", E}, {"2*I", 2 * I}, {"Dm", Dm}}, kFloat);
  else
    c.tensor(a.gate_up, "gate_up", {{"E", E}, {"I", I}, {"Dm", Dm}}, kFloat);
  c.rank(a.ids, "ids", {"T", "k"}, kIndex);
  const int64_t k = a.ids.size(1);
  c.tensor(a.ids, "ids", {{"T", T}, {"k", k}}, kIndex);
  c.require(k >= 1 && k <= E, "ids: k (experts per token) must be in [1, E=", E, "], got ", k);
  c.tensor(a.weights, "weights", {{"T", T}, {"k", k}}, kFloat);
  c.tensor(a.out, "out", {{"T", T}, {"Dm", Dm}}, kFloat);
  for (auto [t, name] : {std::pair{a.x, "x"},
                         {a.gate_up, "gate_up"},
                         {a.down, "down"},
                         {a.ids, "ids"},
                         {a.weights, "weights"},
                         {a.out, "out"}})
    c.inner_contiguous(t, name);
  // Expert ids live in device memory on a GPU; range-check them here when they are host values
  // (the CPU kernel checks again before touching any weight).
  if (a.ids.device().is_cpu())
    for (int64_t t = 0; t < T; ++t)
      for (int64_t j = 0; j < k; ++j) {
        const int64_t id = index_at(a.ids, t * a.ids.stride(0) + j * a.ids.stride(1));
        c.require(id >= 0 && id < E, "ids[", t, ", ", j, "] = ", id, " is out of range [0, E=", E,
                  ")");
      }
  ctx.registry().dispatch(a, c.device(), ctx);
}

}  // namespace hybrid
