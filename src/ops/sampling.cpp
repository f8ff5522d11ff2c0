// argmax, top_k, sample_rows, softmax_mass, repetition_penalty: validation and dispatch.
#include "hybrid/ops/sampling.h"

#include <climits>
#include <cmath>

#include "hybrid/core/registry.h"
#include "ops/check.h"

namespace hybrid {

namespace {
// The logits both ops read: x [N, V] of a float type with 1 <= V < 2^31 (ids are i32).
void check_logits(ops::Check& c, const Tensor& x) {
  c.rank(x, "x", {"N", "V"}, {DType::f32, DType::bf16, DType::f16});
  const int64_t V = x.size(1);
  c.require(V >= 1, "x has V = 0 entries a row: no id to choose");
  c.require(V <= INT_MAX, "x has V = ", V, " entries a row, above 2^31 - 1 (ids are i32)");
}
}  // namespace

void argmax(const Argmax& a, Context& ctx) {
  ops::Check c(Argmax::op_name);
  check_logits(c, a.x);
  const int64_t N = a.x.size(0);
  c.tensor(a.out, "out", {{"N", N}}, {DType::i32});
  c.inner_contiguous(a.x, "x");
  c.no_overlap(a.out, "out");
  ctx.registry().dispatch(a, c.device(), ctx);
}

void top_k(const TopK& a, Context& ctx) {
  ops::Check c(TopK::op_name);
  check_logits(c, a.x);
  const int64_t N = a.x.size(0), V = a.x.size(1);
  c.rank(a.ids, "ids", {"N", "k"}, {DType::i32});
  const int64_t k = a.ids.size(1);
  c.require(k >= 1 && k <= V, "k (ids' columns) must be in [1, V=", V, "], got ", k);
  c.tensor(a.ids, "ids", {{"N", N}, {"k", k}}, {DType::i32});
  c.tensor(a.values, "values", {{"N", N}, {"k", k}}, {DType::f32});
  for (auto [t, name] : {std::pair{a.x, "x"}, {a.ids, "ids"}, {a.values, "values"}})
    c.inner_contiguous(t, name);
  c.no_overlap(a.ids, "ids");
  c.no_overlap(a.values, "values");
  ctx.registry().dispatch(a, c.device(), ctx);
}

void sample_rows(const SampleRows& a, Context& ctx) {
  ops::Check c(SampleRows::op_name);
  check_logits(c, a.x);
  const int64_t N = a.x.size(0);
  c.tensor(a.draws, "draws", {{"N", N}}, {DType::i64});
  c.tensor(a.out, "out", {{"N", N}}, {DType::i32});
  c.require(std::isfinite(a.temperature) && a.temperature > 0.0f,
            "temperature must be positive, got ", a.temperature);
  c.require(a.min_p >= 0.0f && a.min_p < 1.0f, "min_p must be in [0, 1), got ", a.min_p);
  c.inner_contiguous(a.x, "x");
  c.no_overlap(a.out, "out");
  ctx.registry().dispatch(a, c.device(), ctx);
}

void softmax_mass(const SoftmaxMass& a, Context& ctx) {
  ops::Check c(SoftmaxMass::op_name);
  check_logits(c, a.x);
  c.tensor(a.out, "out", {{"N", a.x.size(0)}}, {DType::f64});
  c.require(std::isfinite(a.temperature) && a.temperature > 0.0f,
            "temperature must be positive, got ", a.temperature);
  c.inner_contiguous(a.x, "x");
  c.no_overlap(a.out, "out");
  ctx.registry().dispatch(a, c.device(), ctx);
}

void repetition_penalty(const RepetitionPenalty& a, Context& ctx) {
  ops::Check c(RepetitionPenalty::op_name);
  c.rank(a.x, "x", {"N", "V"}, {DType::f32});
  const int64_t N = a.x.size(0), V = a.x.size(1);
  c.rank(a.ids, "ids", {"N", "H"}, {DType::i32});
  const int64_t H = a.ids.size(1);
  c.tensor(a.ids, "ids", {{"N", N}, {"H", H}}, {DType::i32});
  c.tensor(a.counts, "counts", {{"N", N}}, {DType::i32});
  c.require(std::isfinite(a.penalty) && a.penalty > 0.0f, "penalty must be positive, got ",
            a.penalty);
  c.inner_contiguous(a.x, "x");
  c.inner_contiguous(a.ids, "ids");
  c.no_overlap(a.x, "x");
  const Device device = c.device();
  // Host values are checked here (device ones cannot be read without a copy; the CUDA kernel
  // skips ids outside [0, V) and clamps counts to [0, H]).
  if (device.type == DeviceType::cpu)
    for (int64_t n = 0; n < N; ++n) {
      const int32_t cnt = a.counts.data_as<const int32_t>()[n * a.counts.stride(0)];
      c.require(cnt >= 0 && cnt <= H, "counts[", n, "] = ", cnt, " outside [0, H=", H, "]");
      for (int32_t j = 0; j < cnt; ++j) {
        const int32_t id = a.ids.data_as<const int32_t>()[n * a.ids.stride(0) + j];
        c.require(id >= 0 && id < V, "ids[", n, ", ", j, "] = ", id, " outside [0, V=", V, ")");
      }
    }
  ctx.registry().dispatch(a, device, ctx);
}

}  // namespace hybrid
