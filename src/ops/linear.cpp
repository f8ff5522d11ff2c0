// linear: validation and dispatch.
#include "hybrid/ops/linear.h"

#include "hybrid/core/registry.h"
#include "ops/check.h"

namespace hybrid {

namespace {
constexpr std::initializer_list<DType> kFloat = {DType::f32, DType::bf16, DType::f16};
}  // namespace

void linear(const Linear& a, Context& ctx) {
  ops::Check c(Linear::op_name);
  c.rank(a.x, "x", {"T", "in"}, kFloat);
  c.rank(a.weight, "weight", {"out", "in"}, kFloat);
  const int64_t T = a.x.size(0), in = a.x.size(1), out = a.weight.size(0);
  c.tensor(a.weight, "weight", {{"out", out}, {"in", in}}, kFloat);
  c.tensor(a.y, "y", {{"T", T}, {"out", out}}, kFloat);
  c.optional(a.bias, "bias", {{"out", out}}, kFloat);
  for (auto [t, name] : {std::pair{a.x, "x"}, {a.weight, "weight"}, {a.bias, "bias"}, {a.y, "y"}})
    c.inner_contiguous(t, name);
  ctx.registry().dispatch(a, c.device(), ctx);
}

}  // namespace hybrid
