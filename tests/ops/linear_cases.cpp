// Cases: linear. Oracle in f64.
#include <cmath>
#include <optional>

#include "hybrid/ops/linear.h"
#include "ops/cases.h"
#include "ops/harness.h"

namespace hybrid::test {

namespace {

// y[t, o] = Σ_i x[t, i] · W[o, i] (+ bias[o]).
struct LinearCase : Case {
  int64_t T, in, out;
  DType xdt, wdt, ydt;
  std::optional<DType> bias;  // dtype of the bias, none when absent
  bool strided;               // x, W and y rows strided (views into wider buffers)

  LinearCase(int64_t T, int64_t in, int64_t out, DType xdt, DType wdt, DType ydt,
             std::optional<DType> bias, bool strided)
      : T(T), in(in), out(out), xdt(xdt), wdt(wdt), ydt(ydt), bias(bias), strided(strided) {}

  std::string op() const override { return "linear"; }
  std::string params() const override {
    return str("T=", T, ",in=", in, ",out=", out, ",x=", dtype_name(xdt), ",w=", dtype_name(wdt),
               ",y=", dtype_name(ydt), bias ? str(",bias=", dtype_name(*bias)) : "",
               strided ? ",strided" : "");
  }
  // W uniform in ±sqrt(3/in): variance 1/in, so y stays O(1) (uniform: cheap to draw at 8M).
  double w_range() const { return std::sqrt(3.0 / static_cast<double>(in)); }
  void init(Rng& rng, Slots& s) override {
    if (strided) {
      fill_normal(s.strided("x", Role::in, xdt, {T, in}, {in + 5, 1}, 3, T * (in + 5) + 3), rng);
      fill_uniform(s.strided("weight", Role::in, wdt, {out, in}, {in + 8, 1}, 0, out * (in + 8)),
                   rng, -w_range(), w_range());
      s.strided("y", Role::out, ydt, {T, out}, {out + 3, 1}, 1, T * (out + 3) + 1);
    } else {
      fill_normal(s.input("x", xdt, {T, in}), rng);
      fill_uniform(s.input("weight", wdt, {out, in}), rng, -w_range(), w_range());
      s.output("y", ydt, {T, out});
    }
    if (bias) fill_normal(s.input("bias", *bias, {out}), rng, 0.0, 0.5);
  }
  void run(const Views& v, Context& ctx) override {
    Linear a;
    a.x = v.at("x");
    a.weight = v.at("weight");
    if (bias) a.bias = v.at("bias");
    a.y = v.at("y");
    linear(a, ctx);
  }
  void oracle(const Slots& s, Expected& e) override {
    const std::vector<double> x = s["x"].values(), w = s["weight"].values();
    const std::vector<double> b = bias ? s["bias"].values() : std::vector<double>(out, 0.0);
    std::vector<double>& y = e["y"];
    for (int64_t t = 0; t < T; ++t)
      for (int64_t o = 0; o < out; ++o) {
        double acc = b[o];
        for (int64_t i = 0; i < in; ++i) acc += x[t * in + i] * w[o * in + i];
        y.push_back(acc);
      }
  }
  double flops(const Slots&) const override { return 2.0 * T * in * out; }
};

// Perf only (hybrid-ops perf -b cuda): bf16 W, x and y bf16 (or f32: the engine's activations),
// no bias.
struct LinearPerfCase : LinearCase {
  LinearPerfCase(int64_t T, int64_t in, int64_t out, DType act = DType::bf16)
      : LinearCase(T, in, out, act, DType::bf16, act, std::nullopt, false) {}
  std::string params() const override { return LinearCase::params() + ",perf"; }
  bool perf_only() const override { return true; }
  void init(Rng& rng, Slots& s) override {  // uniform: cheap to draw at T = 4096
    fill_uniform(s.input("x", xdt, {T, in}), rng, -1, 1);
    fill_uniform(s.input("weight", wdt, {out, in}), rng, -w_range(), w_range());
    s.output("y", ydt, {T, out});
  }
  void oracle(const Slots&, Expected&) override { fail("[linear perf case] has no oracle"); }
};

}  // namespace

void add_linear_cases(CaseList& cases) {
  const DType f32 = DType::f32, bf16 = DType::bf16, f16 = DType::f16;
  auto add = [&](int64_t T, int64_t in, int64_t out, DType x, DType w, DType y,
                 std::optional<DType> bias, bool strided) {
    cases.push_back(std::make_unique<LinearCase>(T, in, out, x, w, y, bias, strided));
  };
  // Real shapes: hidden 2048 <-> 4096 (Qwen3-Next / Qwen3.5 projections), decode and short prefill.
  for (int64_t T : {1, 3, 17}) {
    add(T, 2048, 4096, bf16, bf16, bf16, std::nullopt, false);
    add(T, 4096, 2048, f32, bf16, f32, std::nullopt, false);
  }
  add(3, 512, 1024, f16, f16, f16, f16, false);
  add(2, 1024, 512, bf16, f32, f32, bf16, false);
  // Odd and tail sizes (in not a multiple of 8 exercises the dot product's tail).
  add(1, 96, 7, f32, f32, f32, std::nullopt, false);
  add(1, 96, 7, bf16, bf16, bf16, f32, false);
  add(7, 63, 65, f32, f32, f32, f32, false);
  add(65, 257, 3, f32, bf16, f32, std::nullopt, false);
  add(257, 64, 63, bf16, bf16, f32, bf16, false);
  add(1, 1, 1, f32, f32, f32, f32, false);
  // Strided rows of x, W and y (views into packed projections).
  add(5, 2048, 257, bf16, bf16, bf16, f32, true);
  add(33, 96, 7, f32, f16, f16, std::nullopt, true);
  // f32 x with bf16 W (the engine's linears; CUDA: the split GEMM from 2 tokens): a prefill
  // piece with an f32 bias into bf16 y, and strided rows with a bf16 bias (x rows of 200: 400-byte
  // rows of the bf16 halves).
  add(64, 2048, 512, f32, bf16, bf16, f32, false);
  add(9, 200, 72, f32, bf16, f32, bf16, true);
  // The same at decode sizes: 8 tokens with an f32 bias into bf16 y (CUDA: the split GEMM), f16 W
  // with strided rows (CUDA: the fallback; the split needs bf16 W).
  add(8, 2048, 72, f32, bf16, bf16, f32, false);
  add(5, 200, 33, f32, f16, f32, f16, true);
  // One token (CUDA: linear.gemv): 72 rows (the last CTA's 8 rows half past the end); f16 W with
  // strided rows, 25 chunks a row (lanes past them idle), 33 rows; bf16 x with f16 W.
  add(1, 2048, 72, f32, bf16, bf16, f32, false);
  add(1, 200, 33, f32, f16, f32, f16, true);
  add(1, 512, 100, bf16, f16, f32, bf16, false);
  // Perf only: decode GEMV (1 and 8 tokens) and a prefill GEMM of a 2048 -> 4096 projection; the
  // same with f32 x and y (the engine's) at T = 1, 8, 512 and 4096.
  for (int64_t T : {1, 8, 4096}) cases.push_back(std::make_unique<LinearPerfCase>(T, 2048, 4096));
  for (int64_t T : {1, 8, 512, 4096})
    cases.push_back(std::make_unique<LinearPerfCase>(T, 2048, 4096, f32));
  // The engine's bf16 lm head at decode (Qwen3-Next: 2048 -> 151936, 622 MB of W), GDN's output
  // projection (4096 -> 2048) and its fused input projection (2048 -> q|k|v|z|b|a, 12352 rows).
  cases.push_back(std::make_unique<LinearPerfCase>(1, 2048, 151936, f32));
  cases.push_back(std::make_unique<LinearPerfCase>(1, 4096, 2048, f32));
  cases.push_back(std::make_unique<LinearPerfCase>(1, 2048, 12352, f32));
}

}  // namespace hybrid::test
