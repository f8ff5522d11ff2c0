// CPU reference: embed_gather, embed_gather_q. One token per task.
#include <vector>

#include "cpu/common.h"
#include "cpu/kernels.h"
#include "cpu/linear_impl.h"
#include "hybrid/ops/embed.h"

namespace hybrid::cpu {

namespace {

// Every id in [0, vocab), checked before any write (the kernel path's own guard).
void require_ids_in_range(const char* op, const Tensor& ids, int64_t vocab) {
  for (int64_t t = 0; t < ids.size(0); ++t) {
    const int64_t id = load_index(ids, t * ids.stride(0));
    if (id < 0 || id >= vocab)
      fail("[", op, "] ids[", t, "] = ", id, " is out of range for vocab ", vocab);
  }
}

// out[t, :] = table[ids[t], :];  table [vocab, D], ids [T], out [T, D].
void embed_gather_cpu(const EmbedGather& a, Context& ctx) {
  const int64_t D = a.table.size(1);
  require_ids_in_range(EmbedGather::op_name, a.ids, a.table.size(0));
  parallel_for(a.ids.size(0), ctx, [&](int64_t t) {
    const int64_t row = load_index(a.ids, t * a.ids.stride(0)) * a.table.stride(0);
    for (int64_t d = 0; d < D; ++d)
      store_f32(a.out, t * a.out.stride(0) + d, load_f32(a.table, row + d));
  });
}

// out[t, j] = scales[id, j/g] · q[id, j] + biases[id, j/g],  id = ids[t];  out [T, D].
void embed_gather_q_cpu(const EmbedGatherQ& a, Context& ctx) {
  const int64_t D = a.out.size(1);
  require_ids_in_range(EmbedGatherQ::op_name, a.ids, a.table.weight.size(0));
  parallel_for(a.ids.size(0), ctx, [&](int64_t t) {
    std::vector<float> row(static_cast<size_t>(D));
    dequantize_row(a.table, load_index(a.ids, t * a.ids.stride(0)), D, row.data());
    for (int64_t d = 0; d < D; ++d) store_f32(a.out, t * a.out.stride(0) + d, row[d]);
  });
}

}  // namespace

void register_embed(Registry& r) {
  r.add<EmbedGather>("embed_gather.cpu", DeviceType::cpu, 0, nullptr, embed_gather_cpu);
  r.add<EmbedGatherQ>("embed_gather_q.cpu", DeviceType::cpu, 0, nullptr, embed_gather_q_cpu);
}

}  // namespace hybrid::cpu
