// Token embedding lookup from a float table or an MLX-quantized one (seed 004's
// embed_gather_4bit).
#pragma once

#include "hybrid/core/context.h"
#include "hybrid/core/tensor.h"
#include "hybrid/ops/quant.h"

namespace hybrid {

// out[t, :] = table[ids[t], :]  (converted to out's dtype).
// Every id must lie in [0, vocab): checked before anything is written when ids is on the CPU;
// the error names the first bad id and its position.
struct EmbedGather {
  static constexpr const char* op_name = "embed_gather";
  Tensor table;  // [vocab, D] f32 | bf16 | f16; rows may be strided
  Tensor ids;    // [T] i32 | i64
  Tensor out;    // [T, D] f32 | bf16 | f16; rows may be strided
};
void embed_gather(const EmbedGather& args, Context& ctx);

// out[t, j] = scales[id, g] · q[id, j] + biases[id, g] (g = j / group_size, f32 math), id = ids[t]:
// only the rows asked for are dequantized. Same id checks as embed_gather.
struct EmbedGatherQ {
  static constexpr const char* op_name = "embed_gather_q";
  QuantizedWeight
      table;   // [vocab, D]: weight [vocab, D·bits/32] u32, scales / biases [vocab, D/group]
  Tensor ids;  // [T] i32 | i64
  Tensor out;  // [T, D] f32 | bf16 | f16; rows may be strided
};
void embed_gather_q(const EmbedGatherQ& args, Context& ctx);

}  // namespace hybrid
