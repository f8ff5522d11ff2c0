// residual_add, silu_mul, sigmoid_mul, relu2: validation and dispatch.
#include "hybrid/ops/elementwise.h"

#include "hybrid/core/registry.h"
#include "ops/check.h"

namespace hybrid {

namespace {
constexpr std::initializer_list<DType> kFloat = {DType::f32, DType::bf16, DType::f16};

bool same_view(const Tensor& a, const Tensor& b) {
  return a.data() == b.data() && a.dtype() == b.dtype() && a.shape() == b.shape() &&
         a.strides() == b.strides();
}

// `out` is either the very view `in` (in place: each element is read before it is written) or
// shares no byte range with it. Interleaved views of one buffer are conservatively rejected.
void check_alias(ops::Check& c, const Tensor& out, const char* out_name, const Tensor& in,
                 const char* in_name) {
  if (!out.defined() || !in.defined() || out.numel() == 0 || in.numel() == 0) return;
  const char* o0 = static_cast<const char*>(out.data());
  const char* i0 = static_cast<const char*>(in.data());
  if (o0 + out.span_bytes() <= i0 || i0 + in.span_bytes() <= o0) return;
  c.require(same_view(out, in), out_name, " overlaps ", in_name,
            " without being the same view (in place needs the same data, dtype, shape and "
            "strides): ",
            out_name, " ", out.describe(), ", ", in_name, " ", in.describe());
}
}  // namespace

void residual_add(const ResidualAdd& a, Context& ctx) {
  ops::Check c(ResidualAdd::op_name);
  c.rank(a.a, "a", {"T", "D"}, kFloat);
  const int64_t T = a.a.size(0), D = a.a.size(1);
  c.tensor(a.b, "b", {{"T", T}, {"D", D}}, kFloat);
  c.tensor(a.out, "out", {{"T", T}, {"D", D}}, kFloat);
  for (auto [t, name] : {std::pair{a.a, "a"}, {a.b, "b"}, {a.out, "out"}})
    c.inner_contiguous(t, name);
  check_alias(c, a.out, "out", a.a, "a");
  check_alias(c, a.out, "out", a.b, "b");
  ctx.registry().dispatch(a, c.device(), ctx);
}

void silu_mul(const SiluMul& a, Context& ctx) {
  ops::Check c(SiluMul::op_name);
  c.rank(a.out, "out", {"T", "I"}, kFloat);
  const int64_t T = a.out.size(0), I = a.out.size(1);
  if (a.gate_up.defined()) {
    c.require(!a.gate.defined() && !a.up.defined(),
              "give either gate_up or gate and up, not both forms");
    c.tensor(a.gate_up, "gate_up", {{"T", T}, {"2*I", 2 * I}}, kFloat);
  } else {
    c.require(a.gate.defined() && a.up.defined(),
              "expected gate_up [T, 2*I], or both gate and up [T, I]; got ",
              a.gate.defined() ? "gate only"
              : a.up.defined() ? "up only"
                               : "neither");
    c.tensor(a.gate, "gate", {{"T", T}, {"I", I}}, kFloat);
    c.tensor(a.up, "up", {{"T", T}, {"I", I}}, kFloat);
  }
  for (auto [t, name] :
       {std::pair{a.gate_up, "gate_up"}, {a.gate, "gate"}, {a.up, "up"}, {a.out, "out"}})
    c.inner_contiguous(t, name);
  check_alias(c, a.out, "out", a.gate_up, "gate_up");
  check_alias(c, a.out, "out", a.gate, "gate");
  check_alias(c, a.out, "out", a.up, "up");
  ctx.registry().dispatch(a, c.device(), ctx);
}

void sigmoid_mul(const SigmoidMul& a, Context& ctx) {
  ops::Check c(SigmoidMul::op_name);
  c.require(a.x.defined(), "x: expected [T, C] or [T, H, D] f32|bf16|f16, got undefined");
  if (a.x.rank() == 3) {
    c.rank(a.x, "x", {"T", "H", "D"}, kFloat);
    const int64_t T = a.x.size(0), H = a.x.size(1), D = a.x.size(2);
    c.tensor(a.gate, "gate", {{"T", T}, {"H", H}, {"D", D}}, kFloat);
    c.tensor(a.out, "out", {{"T", T}, {"H", H}, {"D", D}}, kFloat);
  } else {
    c.rank(a.x, "x", {"T", "C"}, kFloat);
    const int64_t T = a.x.size(0), C = a.x.size(1);
    c.tensor(a.gate, "gate", {{"T", T}, {"C", C}}, kFloat);
    c.tensor(a.out, "out", {{"T", T}, {"C", C}}, kFloat);
  }
  for (auto [t, name] : {std::pair{a.x, "x"}, {a.gate, "gate"}, {a.out, "out"}})
    c.inner_contiguous(t, name);
  check_alias(c, a.out, "out", a.x, "x");
  check_alias(c, a.out, "out", a.gate, "gate");
  ctx.registry().dispatch(a, c.device(), ctx);
}

void relu2(const Relu2& a, Context& ctx) {
  ops::Check c(Relu2::op_name);
  c.rank(a.x, "x", {"T", "D"}, kFloat);
  const int64_t T = a.x.size(0), D = a.x.size(1);
  c.tensor(a.out, "out", {{"T", T}, {"D", D}}, kFloat);
  c.inner_contiguous(a.x, "x");
  c.inner_contiguous(a.out, "out");
  check_alias(c, a.out, "out", a.x, "x");
  ctx.registry().dispatch(a, c.device(), ctx);
}

}  // namespace hybrid
