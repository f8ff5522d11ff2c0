// conv1d_causal, conv1d_update: validation and dispatch.
#include "hybrid/ops/conv.h"

#include <vector>

#include "hybrid/core/registry.h"
#include "ops/check.h"

namespace hybrid {

namespace {
constexpr std::initializer_list<DType> kAct = {DType::f32, DType::bf16};
constexpr std::initializer_list<DType> kWeight = {DType::f32, DType::bf16};
constexpr std::initializer_list<DType> kState = {DType::f32, DType::bf16};

bool overlaps(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined() || a.numel() == 0 || b.numel() == 0) return false;
  const char* a0 = static_cast<const char*>(a.data());
  const char* b0 = static_cast<const char*>(b.data());
  return !(a0 + a.span_bytes() <= b0 || b0 + b.span_bytes() <= a0);
}
bool same_view(const Tensor& a, const Tensor& b) {
  return a.data() == b.data() && a.dtype() == b.dtype() && a.shape() == b.shape() &&
         a.strides() == b.strides();
}

// weight [C, W], bias [C], W >= 2; returns W.
int64_t check_weights(ops::Check& c, const Tensor& weight, const Tensor& bias, int64_t C) {
  c.tensor(weight, "weight", {{"C", C}, {"W", -1}}, kWeight);
  const int64_t W = weight.size(1);
  c.require(W >= 2, "weight: kernel width W must be at least 2, got ", weight.describe());
  c.optional(bias, "bias", {{"C", C}}, kWeight);
  c.inner_contiguous(weight, "weight");
  c.inner_contiguous(bias, "bias");
  return W;
}

// conv_state [slots, C, W-1], state_slots i32 [N]; on the CPU, every slot < slots and no slot
// used twice (negative = padding).
void check_state(ops::Check& c, const Tensor& state, const Tensor& slots, int64_t C, int64_t W,
                 int64_t N) {
  c.tensor(state, "conv_state", {{"slots", -1}, {"C", C}, {"W-1", W - 1}}, kState);
  c.inner_contiguous(state, "conv_state");
  c.tensor(slots, "state_slots", {{"N", N}}, {DType::i32});
  c.contiguous(slots, "state_slots");
  ops::check_state_slots_values(c, slots, state.size(0), "conv_state");
}
}  // namespace

void conv1d_causal(const Conv1dCausal& a, Context& ctx) {
  ops::Check c(Conv1dCausal::op_name);
  c.rank(a.x, "x", {"T", "C"}, kAct);
  const int64_t T = a.x.size(0), C = a.x.size(1);
  const int64_t W = check_weights(c, a.weight, a.bias, C);
  c.tensor(a.out, "out", {{"T", T}, {"C", C}}, kAct);
  c.inner_contiguous(a.x, "x");
  c.inner_contiguous(a.out, "out");
  c.require(!overlaps(a.out, a.x), "out must not overlap x: out ", a.out.describe(), ", x ",
            a.x.describe());

  int64_t N = 1;
  if (a.cu_seqlens.defined()) {
    c.rank(a.cu_seqlens, "cu_seqlens", {"N+1"}, {DType::i32});
    c.contiguous(a.cu_seqlens, "cu_seqlens");
    N = a.cu_seqlens.size(0) - 1;
    c.require(N >= 1, "cu_seqlens: expected [N+1] with N >= 1, got ", a.cu_seqlens.describe());
    ops::check_cu_seqlens_values(c, a.cu_seqlens, T);
  }
  if (a.conv_state.defined()) {
    check_state(c, a.conv_state, a.state_slots, C, W, N);
    c.optional(a.has_initial_state, "has_initial_state", {{"N", N}}, {DType::i32, DType::u8});
    c.contiguous(a.has_initial_state, "has_initial_state");
    c.require(!overlaps(a.out, a.conv_state), "out must not overlap conv_state");
  } else {
    c.require(!a.state_slots.defined(), "state_slots is given but conv_state is not");
    c.require(!a.has_initial_state.defined(), "has_initial_state is given but conv_state is not");
  }
  ctx.registry().dispatch(a, c.device(), ctx);
}

void conv1d_update(const Conv1dUpdate& a, Context& ctx) {
  ops::Check c(Conv1dUpdate::op_name);
  c.rank(a.x, "x", {"N", "C"}, kAct);
  const int64_t N = a.x.size(0), C = a.x.size(1);
  const int64_t W = check_weights(c, a.weight, a.bias, C);
  c.tensor(a.out, "out", {{"N", N}, {"C", C}}, kAct);
  c.inner_contiguous(a.x, "x");
  c.inner_contiguous(a.out, "out");
  c.require(same_view(a.out, a.x) || !overlaps(a.out, a.x),
            "out overlaps x without being the same view (in place needs the same data, dtype, "
            "shape and strides): out ",
            a.out.describe(), ", x ", a.x.describe());
  check_state(c, a.conv_state, a.state_slots, C, W, N);
  c.require(!overlaps(a.out, a.conv_state), "out must not overlap conv_state");
  ctx.registry().dispatch(a, c.device(), ctx);
}

}  // namespace hybrid
