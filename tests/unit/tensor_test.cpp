#include <gtest/gtest.h>

#include "expect_error.h"
#include "hybrid/core/context.h"
#include "hybrid/core/registry.h"
#include "hybrid/core/tensor.h"

using namespace hybrid;

TEST(Tensor, ContiguousViewAndSlices) {
  float data[24];
  Tensor t(data, DType::f32, Device::cpu(), {2, 3, 4});
  EXPECT_EQ(t.rank(), 3);
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.stride(0), 12);
  EXPECT_EQ(t.stride(-1), 1);
  EXPECT_TRUE(t.is_contiguous());
  Tensor s = t.slice(2, 1, 2);  // [2, 3, 2], strides [12, 4, 1]
  EXPECT_FALSE(s.is_contiguous());
  EXPECT_EQ(s.data(), static_cast<void*>(data + 1));
  EXPECT_EQ(s.span_elements(), 12 + 8 + 1 + 1);
  Tensor r = t.select(0, 1);
  EXPECT_EQ(r.rank(), 2);
  EXPECT_EQ(r.data(), static_cast<void*>(data + 12));
  EXPECT_EQ(t.reshape({6, 4}).size(0), 6);
  EXPECT_EQ(t.describe(), "[2, 3, 4] f32");
  EXPECT_FALSE(Tensor().defined());
  EXPECT_EQ(Tensor().describe(), "undefined");
}

TEST(Tensor, BadViewsAreErrors) {
  float data[24];
  Tensor t(data, DType::f32, Device::cpu(), {2, 3, 4});
  EXPECT_HYBRID_ERROR(t.slice(1, 2, 2), "out of range");
  EXPECT_HYBRID_ERROR(t.slice(2, 1, 2).reshape({12}), "non-contiguous");
  EXPECT_HYBRID_ERROR(Tensor(data, DType::f32, Device::cpu(), {1, 2, 3, 4, 5, 6, 7}), "rank 7");
  EXPECT_HYBRID_ERROR(Tensor(data, DType::f32, Device::cpu(), {-1}), "negative size");
}

TEST(Tensor, OwnedAndCopies) {
  OwnedTensor a(Device::cpu(), DType::bf16, {3, 5}), b(Device::cpu(), DType::bf16, {3, 5});
  for (int i = 0; i < 15; ++i) a.data_as<uint16_t>()[i] = static_cast<uint16_t>(i);
  Context ctx;
  copy_tensor(b, a, ctx);
  for (int i = 0; i < 15; ++i) EXPECT_EQ(b.data_as<uint16_t>()[i], i);
  OwnedTensor c(Device::cpu(), DType::f32, {15});
  EXPECT_HYBRID_ERROR(copy_tensor(c, a, ctx), "differ in layout");
}

TEST(Device, ParseAndName) {
  EXPECT_EQ(to_string(parse_device("cuda:1")), "cuda:1");
  EXPECT_EQ(parse_device("cpu"), Device::cpu());
  EXPECT_HYBRID_ERROR(parse_device("gpu"), "'gpu' is not a device");
  EXPECT_HYBRID_ERROR(parse_device("cuda:x"), "is not a device");
}

TEST(Context, CudaContextWithoutGpuIsAnError) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a GPU is present";
  EXPECT_HYBRID_ERROR(Context(Device::cuda(0)), "cuda:0");
}

TEST(Context, LogSinkAndLevel) {
  Context ctx;
  std::string seen;
  ctx.set_log_sink([&](LogLevel, std::string_view m) { seen += m; });
  ctx.log(LogLevel::debug, "hidden");
  EXPECT_EQ(seen, "");
  ctx.set_log_level(LogLevel::debug);
  ctx.log(LogLevel::debug, "shown");
  EXPECT_EQ(seen, "shown");
  EXPECT_HYBRID_ERROR(parse_log_level("loud"), "not a log level");
}

namespace {
struct ToyArgs {
  static constexpr const char* op_name = "toy";
  int head_dim = 0;
  int* ran = nullptr;
};
Reason fast_supports(const ToyArgs& a) {
  if (a.head_dim != 128) return str("head_dim ", a.head_dim, " not in {128}");
  return {};
}
void fast_run(const ToyArgs& a, Context&) {
  *a.ran = 2;
}
Reason general_supports(const ToyArgs& a) {
  if (a.head_dim > 256) return str("head_dim ", a.head_dim, " above 256");
  return {};
}
void general_run(const ToyArgs& a, Context&) {
  *a.ran = 1;
}
}  // namespace

TEST(Registry, PicksTheBestSupportingVariantAndExplainsRefusals) {
  Registry r;
  r.add<ToyArgs>("toy.general", DeviceType::cpu, 0, general_supports, general_run);
  r.add<ToyArgs>("toy.fast", DeviceType::cpu, 10, fast_supports, fast_run);
  Context ctx;
  std::string log;
  ctx.set_log_level(LogLevel::debug);
  ctx.set_log_sink([&](LogLevel, std::string_view m) { log += std::string(m) + "\n"; });
  int ran = 0;
  r.dispatch(ToyArgs{128, &ran}, Device::cpu(), ctx);
  EXPECT_EQ(ran, 2);
  r.dispatch(ToyArgs{96, &ran}, Device::cpu(), ctx);
  EXPECT_EQ(ran, 1);
  EXPECT_NE(log.find("toy.fast refused: head_dim 96 not in {128}"), std::string::npos) << log;
  try {
    r.dispatch(ToyArgs{512, &ran}, Device::cpu(), ctx);
    FAIL() << "no variant should support head_dim 512";
  } catch (const Unsupported& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("toy.fast: head_dim 512 not in {128}"), std::string::npos) << m;
    EXPECT_NE(m.find("toy.general: head_dim 512 above 256"), std::string::npos) << m;
  }
  EXPECT_HYBRID_ERROR(r.dispatch(ToyArgs{128, &ran}, Device::cuda(0), ctx),
                      "but the context is cpu");
  Context cpu;
  EXPECT_FALSE(r.has_kernel("toy", DeviceType::cuda));
  EXPECT_EQ(r.select(ToyArgs{128, &ran}, DeviceType::cpu, cpu), "toy.fast");
}

TEST(Registry, BuiltinListsEveryCpuOp) {
  for (const char* op : {"rms_norm", "rms_norm_gated"})
    EXPECT_TRUE(Registry::builtin().has_kernel(op, DeviceType::cpu)) << op;
}
