// quantize, dequantize, linear_q: validation and dispatch.
#include "hybrid/ops/quant.h"

#include <string>

#include "hybrid/core/registry.h"
#include "ops/check.h"
#include "ops/quant_check.h"

namespace hybrid {

namespace {
constexpr std::initializer_list<DType> kFloat = {DType::f32, DType::bf16, DType::f16};
}  // namespace

void ops::check_quant_format(Check& c, int bits, int group_size, const std::string& name,
                             int64_t in, const char* in_name) {
  c.require(bits == 4 || bits == 8, name, ".bits = ", bits, " is not supported (supported: 4, 8)");
  c.require(group_size == 32 || group_size == 64 || group_size == 128, name,
            ".group_size = ", group_size, " is not supported (supported: 32, 64, 128)");
  c.require(in > 0 && in % group_size == 0, in_name, "=", in, " is not divisible by ", name,
            ".group_size=", group_size);
}

void ops::check_quantized(Check& c, const QuantizedWeight& q, const char* name, int64_t rows,
                          int64_t in, const char* in_name) {
  const std::string n = name;
  check_quant_format(c, q.bits, q.group_size, n, in, in_name);
  const int64_t words = in * q.bits / 32, groups = in / q.group_size;
  const std::string w = n + ".weight", s = n + ".scales", b = n + ".biases";
  const std::string words_dim = std::string(in_name) + "*bits/32",
                    groups_dim = std::string(in_name) + "/group_size";
  c.tensor(q.weight, w.c_str(), {{"rows", rows}, {words_dim.c_str(), words}}, {DType::u32});
  const int64_t R = q.weight.size(0);
  c.tensor(q.scales, s.c_str(), {{"rows", R}, {groups_dim.c_str(), groups}}, kFloat);
  c.tensor(q.biases, b.c_str(), {{"rows", R}, {groups_dim.c_str(), groups}}, {q.scales.dtype()});
  c.inner_contiguous(q.weight, w.c_str());
  c.inner_contiguous(q.scales, s.c_str());
  c.inner_contiguous(q.biases, b.c_str());
}

void quantize(const Quantize& a, Context& ctx) {
  ops::Check c(Quantize::op_name);
  c.rank(a.w, "w", {"out", "in"}, kFloat);
  ops::check_quantized(c, a.q, "q", a.w.size(0), a.w.size(1));
  c.inner_contiguous(a.w, "w");
  ctx.registry().dispatch(a, c.device(), ctx);
}

void dequantize(const Dequantize& a, Context& ctx) {
  ops::Check c(Dequantize::op_name);
  c.rank(a.w, "w", {"out", "in"}, kFloat);
  ops::check_quantized(c, a.q, "q", a.w.size(0), a.w.size(1));
  c.inner_contiguous(a.w, "w");
  ctx.registry().dispatch(a, c.device(), ctx);
}

void linear_q(const LinearQ& a, Context& ctx) {
  ops::Check c(LinearQ::op_name);
  c.rank(a.x, "x", {"T", "in"}, kFloat);
  c.rank(a.y, "y", {"T", "out"}, kFloat);
  const int64_t T = a.x.size(0), in = a.x.size(1), out = a.y.size(1);
  c.tensor(a.y, "y", {{"T", T}, {"out", out}}, kFloat);
  ops::check_quantized(c, a.w, "w", out, in);
  c.optional(a.bias, "bias", {{"out", out}}, kFloat);
  c.inner_contiguous(a.x, "x");
  c.inner_contiguous(a.y, "y");
  c.inner_contiguous(a.bias, "bias");
  ctx.registry().dispatch(a, c.device(), ctx);
}

}  // namespace hybrid
