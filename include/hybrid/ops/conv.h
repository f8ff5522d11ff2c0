// Depthwise causal conv1d of the recurrent mixers (GDN's q|k|v conv in Qwen3-Next / Qwen3.5,
// Mamba-2's xBC conv in Mamba2 / Nemotron-H), over packed varlen sequences, with the conv state
// pool that lets a sequence resume where it stopped.
//
// Per channel c, kernel width W, weights w [C, W]:
//   x_ext = [s_0, …, s_{W-2}, x_0, x_1, …]        the saved state (oldest first) then the input
//   y[t, c] = act(bias[c] + Σ_{j=0}^{W-1} w[c, j] · x_ext[t + j, c])
//           = act(bias[c] + Σ_j w[c, j] · x[t - (W-1) + j, c])   with x[-k] = s_{W-1-k}
//   act = SiLU when `silu`, else identity
// and the state written back is the last W-1 entries of x_ext (so it keeps state columns when the
// sequence has fewer than W-1 tokens). This is HF's nn.Conv1d(groups=C, padding=W-1) truncated to
// causal, and causal_conv1d_fn / causal_conv1d_update of the causal-conv1d package and vLLM.
#pragma once

#include "hybrid/core/context.h"
#include "hybrid/core/tensor.h"

namespace hybrid {

// Prefill / chunked prefill: N sequences packed on the token axis.
//   - Without conv_state: every sequence starts from zeros and no state is kept (state_slots and
//     has_initial_state must then be left out).
//   - With conv_state: sequence i starts from conv_state[state_slots[i]] (or from zeros when
//     has_initial_state[i] == 0) and writes its final state there. A negative slot marks a
//     padding sequence: its output rows are written as zeros and no state is read or written.
//     A slot used by two sequences of one call is an error.
// `out` must not overlap x.
struct Conv1dCausal {
  static constexpr const char* op_name = "conv1d_causal";
  Tensor x;            // [T, C] f32 | bf16; rows may be strided (a view into a packed projection)
  Tensor weight;       // [C, W] f32 | bf16, W >= 2 (HF's [C, 1, W] conv weight without the 1)
  Tensor bias;         // optional [C] f32 | bf16
  Tensor out;          // [T, C] f32 | bf16; rows may be strided
  Tensor conv_state;   // optional [slots, C, W-1] f32 | bf16, W-1 contiguous; read and written
  Tensor cu_seqlens;   // optional i32 [N+1]: 0 = cu[0] <= cu[1] <= … <= cu[N] = T; left out: N=1
  Tensor state_slots;  // i32 [N], required with conv_state; negative = padding sequence
  Tensor
      has_initial_state;  // optional i32 | u8 [N]: 0 = start from zeros; left out: all from state
  bool silu = false;
};
void conv1d_causal(const Conv1dCausal& args, Context& ctx);

// Decode: one token per sequence. For each i with slot s = state_slots[i] >= 0:
//   y[i, c] = act(bias[c] + Σ_{j<W-1} w[c, j] · state[s, c, j] + w[c, W-1] · x[i, c])
//   state[s, c, :] = [state[s, c, 1:], x[i, c]]      (shift left, append)
// A negative slot writes zeros to out[i] and leaves the pool alone; a slot used twice is an error.
// Equal to conv1d_causal with one token per sequence and every has_initial_state = 1.
// `out` may be x itself (in place); any other overlap is an error.
struct Conv1dUpdate {
  static constexpr const char* op_name = "conv1d_update";
  Tensor x;            // [N, C] f32 | bf16; rows may be strided
  Tensor weight;       // [C, W] f32 | bf16, W >= 2
  Tensor bias;         // optional [C] f32 | bf16
  Tensor out;          // [N, C] f32 | bf16; rows may be strided
  Tensor conv_state;   // [slots, C, W-1] f32 | bf16, W-1 contiguous; read and written
  Tensor state_slots;  // i32 [N]; negative = padding sequence
  bool silu = false;
};
void conv1d_update(const Conv1dUpdate& args, Context& ctx);

}  // namespace hybrid
