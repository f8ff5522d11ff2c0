// moe_route, moe_experts: validation and dispatch.
#include "hybrid/ops/moe.h"

#include <cmath>
#include <string>

#include "hybrid/core/registry.h"
#include "ops/check.h"
#include "ops/quant_check.h"

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
  // With the shared expert folded in, ids and weights hold one more column.
  const int64_t columns = a.top_k + (a.shared_expert ? 1 : 0);
  const char* column_name = a.shared_expert ? "top_k + 1 (shared expert)" : "top_k";
  c.tensor(a.ids, "ids", {{"T", T}, {column_name, columns}}, {DType::i32});
  c.tensor(a.weights, "weights", {{"T", T}, {column_name, columns}}, kFloat);
  c.optional(a.bias, "bias", {{"E", E}}, kBias);
  c.optional(a.shared_gate, "shared_gate", {{"T", T}, {"1", 1}}, kFloat);
  c.require(a.shared_expert || !a.shared_gate.defined(),
            "shared_gate is given but shared_expert is false");
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
  for (auto [t, name] : {std::pair{a.logits, "logits"},
                         {a.bias, "bias"},
                         {a.ids, "ids"},
                         {a.weights, "weights"},
                         {a.shared_gate, "shared_gate"}})
    c.inner_contiguous(t, name);
  ctx.registry().dispatch(a, c.device(), ctx);
}

namespace {

// The checks moe_experts and moe_experts_q share: x [T, Dm], ids [T, k] with 1 <= k <= E,
// weights [T, k], out [T, Dm], inner dimensions contiguous, and ids in [0, E) when they are host
// values (on a GPU they live in device memory; the CPU kernel checks again before touching any
// weight).
void check_routing(ops::Check& c, const Tensor& x, const Tensor& ids, const Tensor& weights,
                   const Tensor& out, int64_t E) {
  const int64_t T = x.size(0), Dm = x.size(1);
  c.rank(ids, "ids", {"T", "k"}, kIndex);
  const int64_t k = ids.size(1);
  c.tensor(ids, "ids", {{"T", T}, {"k", k}}, kIndex);
  c.require(k >= 1 && k <= E, "ids: k (experts per token) must be in [1, E=", E, "], got ", k);
  c.tensor(weights, "weights", {{"T", T}, {"k", k}}, kFloat);
  c.tensor(out, "out", {{"T", T}, {"Dm", Dm}}, kFloat);
  for (auto [t, name] : {std::pair{x, "x"}, {ids, "ids"}, {weights, "weights"}, {out, "out"}})
    c.inner_contiguous(t, name);
  if (ids.device().is_cpu())
    for (int64_t t = 0; t < T; ++t)
      for (int64_t j = 0; j < k; ++j) {
        const int64_t id = index_at(ids, t * ids.stride(0) + j * ids.stride(1));
        c.require(id >= 0 && id < E, "ids[", t, ", ", j, "] = ", id, " is out of range [0, E=", E,
                  ")");
      }
}

// `q` (argument `name`) as stacked quantized experts W [E, rows, in]: bits in {4, 8},
// group_size in {32, 64, 128} dividing in, weight [E, rows, in·bits/32] u32, scales and biases
// [E, rows, in/group_size] of one float dtype, inner dimensions contiguous.
void check_quantized_experts(ops::Check& c, const QuantizedExperts& q, const char* name, int64_t E,
                             const char* rows_name, int64_t rows, const char* in_name, int64_t in) {
  const std::string n = name;
  ops::check_quant_format(c, q.bits, q.group_size, n, in, in_name);
  const std::string w = n + ".weight", s = n + ".scales", b = n + ".biases";
  const std::string words_dim = std::string(in_name) + "*bits/32",
                    groups_dim = std::string(in_name) + "/group_size";
  c.tensor(q.weight, w.c_str(),
           {{"E", E}, {rows_name, rows}, {words_dim.c_str(), in * q.bits / 32}}, {DType::u32});
  c.tensor(q.scales, s.c_str(),
           {{"E", E}, {rows_name, rows}, {groups_dim.c_str(), in / q.group_size}}, kFloat);
  c.tensor(q.biases, b.c_str(),
           {{"E", E}, {rows_name, rows}, {groups_dim.c_str(), in / q.group_size}},
           {q.scales.dtype()});
  c.inner_contiguous(q.weight, w.c_str());
  c.inner_contiguous(q.scales, s.c_str());
  c.inner_contiguous(q.biases, b.c_str());
}

}  // namespace

void moe_experts(const MoeExperts& a, Context& ctx) {
  ops::Check c(MoeExperts::op_name);
  c.rank(a.x, "x", {"T", "Dm"}, kFloat);
  const int64_t Dm = a.x.size(1);
  c.rank(a.down, "down", {"E", "Dm", "I"}, kFloat);
  const int64_t E = a.down.size(0), I = a.down.size(2);
  c.tensor(a.down, "down", {{"E", E}, {"Dm", Dm}, {"I", I}}, kFloat);
  if (a.activation == MoeActivation::swiglu)
    c.tensor(a.gate_up, "gate_up", {{"E", E}, {"2*I", 2 * I}, {"Dm", Dm}}, kFloat);
  else
    c.tensor(a.gate_up, "gate_up", {{"E", E}, {"I", I}, {"Dm", Dm}}, kFloat);
  c.inner_contiguous(a.gate_up, "gate_up");
  c.inner_contiguous(a.down, "down");
  check_routing(c, a.x, a.ids, a.weights, a.out, E);
  ctx.registry().dispatch(a, c.device(), ctx);
}

void moe_experts_q(const MoeExpertsQ& a, Context& ctx) {
  ops::Check c(MoeExpertsQ::op_name);
  c.rank(a.x, "x", {"T", "Dm"}, kFloat);
  const int64_t Dm = a.x.size(1);
  // E and I from down.scales [E, Dm, I/group_size] (I/group_size, so I = that · group_size).
  c.rank(a.down.scales, "down.scales", {"E", "Dm", "I/group_size"}, kFloat);
  const int64_t E = a.down.scales.size(0), I = a.down.scales.size(2) * a.down.group_size;
  check_quantized_experts(c, a.down, "down", E, "Dm", Dm, "I", I);
  if (a.activation == MoeActivation::swiglu)
    check_quantized_experts(c, a.gate_up, "gate_up", E, "2*I", 2 * I, "Dm", Dm);
  else
    check_quantized_experts(c, a.gate_up, "gate_up", E, "I", I, "Dm", Dm);
  check_routing(c, a.x, a.ids, a.weights, a.out, E);
  ctx.registry().dispatch(a, c.device(), ctx);
}

}  // namespace hybrid
