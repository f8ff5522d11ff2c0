// rms_norm, rms_norm_gated: validation and dispatch.
#include "hybrid/ops/norm.h"

#include "hybrid/core/registry.h"
#include "ops/check.h"

namespace hybrid {

namespace {
constexpr std::initializer_list<DType> kActivation = {DType::f32, DType::bf16, DType::f16};
constexpr std::initializer_list<DType> kWeight = {DType::f32, DType::bf16};
}  // namespace

void rms_norm(const RmsNorm& a, Context& ctx) {
  ops::Check c(RmsNorm::op_name);
  c.rank(a.x, "x", {"T", "D"}, kActivation);
  const int64_t T = a.x.size(0), D = a.x.size(1);
  c.tensor(a.weight, "weight", {{"D", D}}, kWeight);
  c.tensor(a.out, "out", {{"T", T}, {"D", D}}, kActivation);
  c.optional(a.residual, "residual", {{"T", T}, {"D", D}}, {a.x.dtype()});
  if (a.residual.defined())
    c.tensor(a.residual_out, "residual_out", {{"T", T}, {"D", D}}, kActivation);
  else
    c.require(!a.residual_out.defined(), "residual_out is given but residual is not");
  c.require(a.eps > 0.0f, "eps must be positive, got ", a.eps);
  for (auto [t, name] : {std::pair{a.x, "x"},
                         {a.weight, "weight"},
                         {a.out, "out"},
                         {a.residual, "residual"},
                         {a.residual_out, "residual_out"}})
    c.inner_contiguous(t, name);
  ctx.registry().dispatch(a, c.device(), ctx);
}

void rms_norm_gated(const RmsNormGated& a, Context& ctx) {
  ops::Check c(RmsNormGated::op_name);
  c.rank(a.x, "x", {"T", "C"}, kActivation);
  const int64_t T = a.x.size(0), C = a.x.size(1);
  c.tensor(a.z, "z", {{"T", T}, {"C", C}}, kActivation);
  c.tensor(a.out, "out", {{"T", T}, {"C", C}}, kActivation);
  c.require(a.group_size > 0 && C % a.group_size == 0, "group_size ", a.group_size,
            " must be positive and divide C=", C);
  c.rank(a.weight, "weight", {"C or group_size"}, kWeight);
  c.require(a.weight.size(0) == C || a.weight.size(0) == a.group_size, "weight: expected [C=", C,
            "] or [group_size=", a.group_size, "], got ", a.weight.describe());
  c.require(a.eps > 0.0f, "eps must be positive, got ", a.eps);
  for (auto [t, name] : {std::pair{a.x, "x"}, {a.z, "z"}, {a.weight, "weight"}, {a.out, "out"}})
    c.inner_contiguous(t, name);
  ctx.registry().dispatch(a, c.device(), ctx);
}

}  // namespace hybrid
