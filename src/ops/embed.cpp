// embed_gather, embed_gather_q: validation (ids range-checked when on the CPU) and dispatch.
#include "hybrid/ops/embed.h"

#include "hybrid/core/registry.h"
#include "ops/check.h"
#include "ops/quant_check.h"

namespace hybrid {

namespace {

constexpr std::initializer_list<DType> kFloat = {DType::f32, DType::bf16, DType::f16};

// Every ids[t] in [0, vocab); only where the values can be read cheaply (host memory).
void check_ids(ops::Check& c, const Tensor& ids, int64_t vocab) {
  if (!ids.device().is_cpu()) return;
  for (int64_t t = 0; t < ids.size(0); ++t) {
    const int64_t off = t * ids.stride(0);
    const int64_t id = ids.dtype() == DType::i64 ? ids.data_as<const int64_t>()[off]
                                                 : ids.data_as<const int32_t>()[off];
    c.require(id >= 0 && id < vocab, "ids[", t, "] = ", id, " is out of range for vocab ", vocab);
  }
}

}  // namespace

void embed_gather(const EmbedGather& a, Context& ctx) {
  ops::Check c(EmbedGather::op_name);
  c.rank(a.table, "table", {"vocab", "D"}, kFloat);
  c.rank(a.ids, "ids", {"T"}, {DType::i32, DType::i64});
  const int64_t vocab = a.table.size(0), D = a.table.size(1), T = a.ids.size(0);
  c.tensor(a.out, "out", {{"T", T}, {"D", D}}, kFloat);
  c.inner_contiguous(a.table, "table");
  c.inner_contiguous(a.out, "out");
  c.no_overlap(a.ids, "ids");
  check_ids(c, a.ids, vocab);
  ctx.registry().dispatch(a, c.device(), ctx);
}

void embed_gather_q(const EmbedGatherQ& a, Context& ctx) {
  ops::Check c(EmbedGatherQ::op_name);
  c.rank(a.out, "out", {"T", "D"}, kFloat);
  const int64_t T = a.out.size(0), D = a.out.size(1);
  c.tensor(a.ids, "ids", {{"T", T}}, {DType::i32, DType::i64});
  ops::check_quantized(c, a.table, "table", -1, D, "D");
  c.inner_contiguous(a.out, "out");
  c.no_overlap(a.ids, "ids");
  check_ids(c, a.ids, a.table.weight.size(0));
  ctx.registry().dispatch(a, c.device(), ctx);
}

}  // namespace hybrid
