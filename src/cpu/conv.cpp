// CPU reference: conv1d_causal, conv1d_update. f32 math; one task per (sequence, block of
// channels), each channel keeping its sliding window of the last W-1 inputs.
#include <algorithm>
#include <vector>

#include "cpu/common.h"
#include "cpu/kernels.h"
#include "hybrid/ops/conv.h"

namespace hybrid::cpu {

namespace {

constexpr int64_t kChannelBlock = 256;  // channels per task

bool flag_set(const Tensor& t, int64_t i) {
  return t.dtype() == DType::u8 ? t.data_as<const uint8_t>()[i] != 0
                                : t.data_as<const int32_t>()[i] != 0;
}

// Offset of conv_state[slot, c, 0]; the W-1 entries of a channel are contiguous.
int64_t state_offset(const Tensor& state, int64_t slot, int64_t c) {
  return slot * state.stride(0) + c * state.stride(1);
}

// Per sequence i (tokens [cu[i], cu[i+1])) and channel c:
//   win = conv_state[slot_i, c, :] (or zeros)                        [W-1], oldest first
//   for each token t:  y[t, c] = act(bias[c] + Σ_{j<W-1} w[c, j]·win[j] + w[c, W-1]·x[t, c])
//                      win = [win[1:], x[t, c]]
//   conv_state[slot_i, c, :] = win
// Padding sequences (slot < 0) write zero rows and leave the pool alone.
void conv1d_causal_cpu(const Conv1dCausal& a, Context& ctx) {
  const int64_t T = a.x.size(0), C = a.x.size(1), W = a.weight.size(1), K = W - 1;
  const bool stateful = a.conv_state.defined();
  const int64_t N = a.cu_seqlens.defined() ? a.cu_seqlens.size(0) - 1 : 1;
  const int64_t blocks = (C + kChannelBlock - 1) / kChannelBlock;
  parallel_for(N * blocks, ctx, [&](int64_t task) {
    const int64_t i = task / blocks, c0 = (task % blocks) * kChannelBlock;
    const int64_t c1 = std::min(C, c0 + kChannelBlock), nc = c1 - c0;
    const int64_t begin = a.cu_seqlens.defined() ? load_index(a.cu_seqlens, i) : 0;
    const int64_t end = a.cu_seqlens.defined() ? load_index(a.cu_seqlens, i + 1) : T;
    const int64_t slot = stateful ? load_index(a.state_slots, i) : -1;
    if (stateful && slot < 0) {  // padding sequence
      for (int64_t t = begin; t < end; ++t)
        for (int64_t c = c0; c < c1; ++c) store_f32(a.out, t * a.out.stride(0) + c, 0.0f);
      return;
    }
    const bool from_state =
        stateful && (!a.has_initial_state.defined() || flag_set(a.has_initial_state, i));
    std::vector<float> w(nc * W), bias(nc, 0.0f), win(nc * K, 0.0f);  // [nc, W], [nc], [nc, K]
    for (int64_t c = 0; c < nc; ++c) {
      for (int64_t j = 0; j < W; ++j)
        w[c * W + j] = load_f32(a.weight, (c0 + c) * a.weight.stride(0) + j);
      if (a.bias.defined()) bias[c] = load_f32(a.bias, c0 + c);
      if (from_state)
        for (int64_t j = 0; j < K; ++j)
          win[c * K + j] = load_f32(a.conv_state, state_offset(a.conv_state, slot, c0 + c) + j);
    }
    for (int64_t t = begin; t < end; ++t) {
      for (int64_t c = 0; c < nc; ++c) {
        float* wc = &win[c * K];
        const float xv = load_f32(a.x, t * a.x.stride(0) + c0 + c);
        float y = bias[c] + w[c * W + K] * xv;
        for (int64_t j = 0; j < K; ++j) y += w[c * W + j] * wc[j];
        std::copy(wc + 1, wc + K, wc);
        wc[K - 1] = xv;
        store_f32(a.out, t * a.out.stride(0) + c0 + c, a.silu ? silu(y) : y);
      }
    }
    if (stateful)
      for (int64_t c = 0; c < nc; ++c)
        for (int64_t j = 0; j < K; ++j)
          store_f32(a.conv_state, state_offset(a.conv_state, slot, c0 + c) + j, win[c * K + j]);
  });
}

// For each sequence i with slot s >= 0, per channel c:
//   y[i, c] = act(bias[c] + Σ_{j<W-1} w[c, j]·state[s, c, j] + w[c, W-1]·x[i, c])
//   state[s, c, :] = [state[s, c, 1:], x[i, c]]
// x[i, c] is read before out[i, c] is written, so out may be x.
void conv1d_update_cpu(const Conv1dUpdate& a, Context& ctx) {
  const int64_t N = a.x.size(0), C = a.x.size(1), W = a.weight.size(1), K = W - 1;
  const int64_t blocks = (C + kChannelBlock - 1) / kChannelBlock;
  parallel_for(N * blocks, ctx, [&](int64_t task) {
    const int64_t i = task / blocks, c0 = (task % blocks) * kChannelBlock;
    const int64_t c1 = std::min(C, c0 + kChannelBlock);
    const int64_t slot = load_index(a.state_slots, i);
    std::vector<float> win(K);  // [W-1] window of one channel
    for (int64_t c = c0; c < c1; ++c) {
      if (slot < 0) {  // padding sequence
        store_f32(a.out, i * a.out.stride(0) + c, 0.0f);
        continue;
      }
      const int64_t so = state_offset(a.conv_state, slot, c);
      for (int64_t j = 0; j < K; ++j) win[j] = load_f32(a.conv_state, so + j);
      const float xv = load_f32(a.x, i * a.x.stride(0) + c);
      float y = (a.bias.defined() ? load_f32(a.bias, c) : 0.0f) +
                load_f32(a.weight, c * a.weight.stride(0) + K) * xv;
      for (int64_t j = 0; j < K; ++j) y += load_f32(a.weight, c * a.weight.stride(0) + j) * win[j];
      for (int64_t j = 0; j + 1 < K; ++j) store_f32(a.conv_state, so + j, win[j + 1]);
      store_f32(a.conv_state, so + K - 1, xv);
      store_f32(a.out, i * a.out.stride(0) + c, a.silu ? silu(y) : y);
    }
  });
}

}  // namespace

void register_conv(Registry& r) {
  r.add<Conv1dCausal>("conv1d_causal.cpu", DeviceType::cpu, 0, nullptr, conv1d_causal_cpu);
  r.add<Conv1dUpdate>("conv1d_update.cpu", DeviceType::cpu, 0, nullptr, conv1d_update_cpu);
}

}  // namespace hybrid::cpu
