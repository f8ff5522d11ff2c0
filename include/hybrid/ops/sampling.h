// Token choice on the device: the greedy decode step's argmax, so that a step downloads N ids
// instead of N rows of logits (151936 f32 a row for Qwen3-Next: 608 KB through a pageable copy,
// then a host scan).
#pragma once

#include "hybrid/core/context.h"
#include "hybrid/core/tensor.h"

namespace hybrid {

// out[n] = the lowest v with x[n, v] = max_v x[n, v], the greedy choice of Sampler (temperature
// 0, lowest id on ties). A row that Sampler refuses, one with a NaN or +inf or only -inf
// entries, gives out[n] = -1, so that the caller can name the row instead of picking a token.
struct Argmax {
  static constexpr const char* op_name = "argmax";
  Tensor x;    // [N, V] f32 | bf16 | f16 (logits); rows may be strided; 1 <= V < 2^31
  Tensor out;  // [N] i32
};
void argmax(const Argmax& args, Context& ctx);

}  // namespace hybrid
