// rope: validation and dispatch.
#include "hybrid/ops/rope.h"

#include <cmath>

#include "hybrid/core/registry.h"
#include "ops/check.h"

namespace hybrid {

namespace {
constexpr std::initializer_list<DType> kActivation = {DType::f32, DType::bf16, DType::f16};
}  // namespace

void rope(const Rope& a, Context& ctx) {
  ops::Check c(Rope::op_name);
  c.rank(a.x, "x", {"T", "H", "D"}, kActivation);
  const int64_t T = a.x.size(0), H = a.x.size(1), D = a.x.size(2);
  c.tensor(a.out, "out", {{"T", T}, {"H", H}, {"D", D}}, kActivation);
  c.tensor(a.positions, "positions", {{"T", T}}, {DType::i32});
  c.inner_contiguous(a.x, "x");
  c.inner_contiguous(a.out, "out");
  c.inner_contiguous(a.positions, "positions");
  c.require(a.rotary_dim >= 2 && a.rotary_dim <= D && a.rotary_dim % 2 == 0, "rotary_dim ",
            a.rotary_dim, " must be even and in [2, D=", D, "]");
  c.require(std::isfinite(a.theta) && a.theta > 0.0f, "theta must be positive and finite, got ",
            a.theta);
  if (a.out.data() == a.x.data())
    c.require(a.out.strides() == a.x.strides() && a.out.dtype() == a.x.dtype(),
              "in place, out must have the dtype and strides of x: x ", a.x.describe(), " strides ",
              a.x.stride(0), ",", a.x.stride(1), "; out ", a.out.describe(), " strides ",
              a.out.stride(0), ",", a.out.stride(1));
  ctx.registry().dispatch(a, c.device(), ctx);
}

}  // namespace hybrid
