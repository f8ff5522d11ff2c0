// Cases: residual_add, silu_mul, sigmoid_mul, relu2. Oracle in f64.
#include <algorithm>
#include <cmath>

#include "hybrid/ops/elementwise.h"
#include "ops/cases.h"
#include "ops/harness.h"

namespace hybrid::test {

namespace {

double silu64(double x) {
  return x / (1.0 + std::exp(-x));
}
double sigmoid64(double x) {
  return 1.0 / (1.0 + std::exp(-x));
}

// A [T, D] slot; strided = rows of a wider packed buffer (row stride D + 7, offset 3).
Slot& make2d(Slots& s, const std::string& name, Role role, DType dt, int64_t T, int64_t D,
             bool strided) {
  if (strided) return s.strided(name, role, dt, {T, D}, {D + 7, 1}, 3, T * (D + 7) + 3);
  if (role == Role::in) return s.input(name, dt, {T, D});
  if (role == Role::out) return s.output(name, dt, {T, D});
  return s.inout(name, dt, {T, D});
}

std::string flags(bool strided, bool in_place) {
  return str(strided ? ",strided" : "", in_place ? ",in_place" : "");
}

// out = a + b; in place: out is a.
struct ResidualAddCase : Case {
  int64_t T, D;
  DType da, db, dout;
  bool strided, in_place;
  ResidualAddCase(int64_t T, int64_t D, DType da, DType db, DType dout, bool strided, bool in_place)
      : T(T),
        D(D),
        da(da),
        db(db),
        dout(in_place ? da : dout),
        strided(strided),
        in_place(in_place) {}
  std::string op() const override { return "residual_add"; }
  std::string params() const override {
    return str("T=", T, ",D=", D, ",a=", dtype_name(da), ",b=", dtype_name(db),
               ",out=", dtype_name(dout), flags(strided, in_place));
  }
  void init(Rng& rng, Slots& s) override {
    fill_normal(make2d(s, "a", in_place ? Role::inout : Role::in, da, T, D, strided), rng, 0.0,
                3.0);
    fill_normal(make2d(s, "b", Role::in, db, T, D, false), rng);
    if (!in_place) make2d(s, "out", Role::out, dout, T, D, strided);
  }
  void run(const Views& v, Context& ctx) override {
    ResidualAdd a;
    a.a = v.at("a");
    a.b = v.at("b");
    a.out = in_place ? v.at("a") : v.at("out");
    residual_add(a, ctx);
  }
  void oracle(const Slots& s, Expected& e) override {
    std::vector<double>& out = e[in_place ? "a" : "out"];
    for (int64_t i = 0; i < T * D; ++i) out.push_back(s["a"].get(i) + s["b"].get(i));
  }
};

// out = silu(gate) · up; packed gate_up [T, 2I] = [gate | up]; in place: out is up.
struct SiluMulCase : Case {
  int64_t T, I;
  DType dt;
  bool packed, strided, in_place;
  SiluMulCase(int64_t T, int64_t I, DType dt, bool packed, bool strided, bool in_place)
      : T(T), I(I), dt(dt), packed(packed), strided(strided), in_place(in_place) {}
  std::string op() const override { return "silu_mul"; }
  std::string params() const override {
    return str("T=", T, ",I=", I, ",dtype=", dtype_name(dt), packed ? ",gate_up" : ",gate+up",
               flags(strided, in_place));
  }
  void init(Rng& rng, Slots& s) override {
    if (packed) {
      fill_normal(make2d(s, "gate_up", Role::in, dt, T, 2 * I, strided), rng, 0.0, 2.0);
    } else {
      fill_normal(make2d(s, "gate", Role::in, dt, T, I, strided), rng, 0.0, 2.0);
      fill_normal(make2d(s, "up", in_place ? Role::inout : Role::in, dt, T, I, false), rng);
    }
    if (!in_place) make2d(s, "out", Role::out, dt, T, I, false);
  }
  void run(const Views& v, Context& ctx) override {
    SiluMul a;
    if (packed) {
      a.gate_up = v.at("gate_up");
    } else {
      a.gate = v.at("gate");
      a.up = v.at("up");
    }
    a.out = in_place ? v.at("up") : v.at("out");
    silu_mul(a, ctx);
  }
  void oracle(const Slots& s, Expected& e) override {
    std::vector<double>& out = e[in_place ? "up" : "out"];
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < I; ++i) {
        const double g = packed ? s["gate_up"].get(t * 2 * I + i) : s["gate"].get(t * I + i);
        const double u = packed ? s["gate_up"].get(t * 2 * I + I + i) : s["up"].get(t * I + i);
        out.push_back(silu64(g) * u);
      }
  }
};

// out = x · sigmoid(gate). H > 0: rank 3 [T, H, D] with the gate read out of the packed q
// projection [T, H, 2·D] (per head [q_h | gate_h], Qwen3-Next gated attention); H = 0: [T, D]
// with the gate a row-strided view. In place: out is x.
struct SigmoidMulCase : Case {
  int64_t T, H, D;
  DType dx, dg;
  bool in_place;
  SigmoidMulCase(int64_t T, int64_t H, int64_t D, DType dx, DType dg, bool in_place)
      : T(T), H(H), D(D), dx(dx), dg(dg), in_place(in_place) {}
  std::string op() const override { return "sigmoid_mul"; }
  std::string params() const override {
    return str("T=", T, H ? str(",H=", H, ",D=", D, ",gate=packed_q") : str(",C=", D),
               ",x=", dtype_name(dx), ",gate=", dtype_name(dg), in_place ? ",in_place" : "");
  }
  std::vector<int64_t> shape() const {
    return H ? std::vector<int64_t>{T, H, D} : std::vector<int64_t>{T, D};
  }
  void init(Rng& rng, Slots& s) override {
    if (in_place)
      fill_normal(s.inout("x", dx, shape()), rng);
    else
      fill_normal(s.input("x", dx, shape()), rng);
    if (H)
      fill_normal(
          s.strided("gate", Role::in, dg, {T, H, D}, {H * 2 * D, 2 * D, 1}, D, T * H * 2 * D), rng,
          0.0, 3.0);
    else
      fill_normal(make2d(s, "gate", Role::in, dg, T, D, true), rng, 0.0, 3.0);
    if (!in_place) s.output("out", dx, shape());
  }
  void run(const Views& v, Context& ctx) override {
    SigmoidMul a;
    a.x = v.at("x");
    a.gate = v.at("gate");
    a.out = in_place ? v.at("x") : v.at("out");
    sigmoid_mul(a, ctx);
  }
  void oracle(const Slots& s, Expected& e) override {
    std::vector<double>& out = e[in_place ? "x" : "out"];
    const int64_t n = T * (H ? H : 1) * D;
    for (int64_t i = 0; i < n; ++i) out.push_back(s["x"].get(i) * sigmoid64(s["gate"].get(i)));
  }
};

// out = max(x, 0)²; in place: out is x.
struct Relu2Case : Case {
  int64_t T, D;
  DType dx, dout;
  bool strided, in_place;
  Relu2Case(int64_t T, int64_t D, DType dx, DType dout, bool strided, bool in_place)
      : T(T), D(D), dx(dx), dout(in_place ? dx : dout), strided(strided), in_place(in_place) {}
  std::string op() const override { return "relu2"; }
  std::string params() const override {
    return str("T=", T, ",D=", D, ",x=", dtype_name(dx), ",out=", dtype_name(dout),
               flags(strided, in_place));
  }
  void init(Rng& rng, Slots& s) override {
    fill_normal(make2d(s, "x", in_place ? Role::inout : Role::in, dx, T, D, strided), rng);
    if (!in_place) make2d(s, "out", Role::out, dout, T, D, false);
  }
  void run(const Views& v, Context& ctx) override {
    Relu2 a;
    a.x = v.at("x");
    a.out = in_place ? v.at("x") : v.at("out");
    relu2(a, ctx);
  }
  void oracle(const Slots& s, Expected& e) override {
    std::vector<double>& out = e[in_place ? "x" : "out"];
    for (int64_t i = 0; i < T * D; ++i) {
      const double r = std::max(s["x"].get(i), 0.0);
      out.push_back(r * r);
    }
  }
};

// ---- benchmark shapes (perf only: timed by `hybrid-ops perf`, never run by `test`) -------------

struct PerfCase : LambdaCase {
  bool perf_only() const override { return true; }
};

// Seed 004 prefill at T = 8192: residual add at hidden 2048 and SwiGLU of the Qwen3-Next experts
// (I = 512, packed gate_up), bf16; SwiGLU also at T = 65536 (201 MB), where the launch and the
// ramp after the L2 flush no longer hide its streaming rate. The bytes are the slots' (inputs
// read once, out written once).
void add_perf_cases(CaseList& cases) {
  const DType bf16 = DType::bf16;
  const int64_t D = 2048, I = 512;
  auto no_oracle = [](const Slots&, Expected&) { fail("[elementwise perf case] has no oracle"); };
  {
    const int64_t T = 8192;
    auto c = std::make_unique<PerfCase>();
    c->op_name = "residual_add";
    c->param_text = str("T=", T, ",D=", D, ",a=bf16,b=bf16,out=bf16,perf");
    c->init_fn = [=](Rng& rng, Slots& s) {
      fill_uniform(s.input("a", bf16, {T, D}), rng, -1, 1);
      fill_uniform(s.input("b", bf16, {T, D}), rng, -1, 1);
      s.output("out", bf16, {T, D});
    };
    c->run_fn = [](const Views& v, Context& ctx) {
      ResidualAdd a;
      a.a = v.at("a"), a.b = v.at("b"), a.out = v.at("out");
      residual_add(a, ctx);
    };
    c->oracle_fn = no_oracle;
    cases.push_back(std::move(c));
  }
  for (int64_t T : {8192, 65536}) {
    auto c = std::make_unique<PerfCase>();
    c->op_name = "silu_mul";
    c->param_text = str("T=", T, ",I=", I, ",dtype=bf16,gate_up,perf");
    c->init_fn = [=](Rng& rng, Slots& s) {
      fill_uniform(s.input("gate_up", bf16, {T, 2 * I}), rng, -4, 4);
      s.output("out", bf16, {T, I});
    };
    c->run_fn = [](const Views& v, Context& ctx) {
      SiluMul a;
      a.gate_up = v.at("gate_up"), a.out = v.at("out");
      silu_mul(a, ctx);
    };
    c->oracle_fn = no_oracle;
    cases.push_back(std::move(c));
  }
}

template <class C, class... Args>
void add(CaseList& cases, Args... args) {
  cases.push_back(std::make_unique<C>(args...));
}

}  // namespace

void add_elementwise_cases(CaseList& cases) {
  const DType f32 = DType::f32, bf16 = DType::bf16, f16 = DType::f16;
  add_perf_cases(cases);
  // residual_add: hidden 2048 (Qwen3-Next, Qwen3.5-35B) and 4096 (Qwen3.5-9B/397B, Nemotron-H-8B);
  // an f32 residual stream plus a bf16 block output (residual_in_fp32); odd and tail sizes.
  for (int64_t T : {1, 7, 65})
    for (int64_t D : {2048, 4096})
      add<ResidualAddCase>(cases, T, D, bf16, bf16, bf16, false, false);
  add<ResidualAddCase>(cases, 5, 4096, f32, bf16, f32, false, true);
  add<ResidualAddCase>(cases, 7, 2048, f32, f32, f32, true, false);
  add<ResidualAddCase>(cases, 3, 2048, bf16, bf16, bf16, true, true);
  add<ResidualAddCase>(cases, 4, 257, f16, f32, f16, true, false);
  for (int64_t D : {1, 3, 63, 257}) add<ResidualAddCase>(cases, 3, D, f32, f32, f32, false, false);
  add<ResidualAddCase>(cases, 257, 65, bf16, f32, f32, false, false);

  // silu_mul: Qwen3-Next expert / shared expert I = 512 (fused gate_up), Qwen3.5-9B I = 12288,
  // Qwen3.5-4B I = 9216 (packed, rows of a wider buffer); odd I; in place on up.
  for (DType dt : {f32, bf16}) {
    add<SiluMulCase>(cases, 7, 512, dt, true, false, false);
    add<SiluMulCase>(cases, 3, 12288, dt, false, false, false);
  }
  add<SiluMulCase>(cases, 2, 9216, bf16, true, true, false);
  add<SiluMulCase>(cases, 5, 512, bf16, false, true, true);
  for (int64_t I : {1, 3, 65}) add<SiluMulCase>(cases, 63, I, f32, I != 3, false, false);
  add<SiluMulCase>(cases, 257, 7, f16, true, true, false);
  add<SiluMulCase>(cases, 9, 63, f32, false, false, true);

  // sigmoid_mul: Qwen3-Next (16 heads of 256) and Qwen3.5-397B (32 heads of 256) with the gate
  // straight out of the packed q projection; flattened [T, C] with a row-strided gate; odd sizes.
  for (DType dt : {f32, bf16}) {
    add<SigmoidMulCase>(cases, 5, 16, 256, dt, dt, false);
    add<SigmoidMulCase>(cases, 7, 0, 4096, dt, dt, false);
  }
  add<SigmoidMulCase>(cases, 2, 32, 256, bf16, bf16, true);
  add<SigmoidMulCase>(cases, 3, 0, 4096, f32, bf16, true);
  add<SigmoidMulCase>(cases, 257, 0, 7, f32, f16, false);
  add<SigmoidMulCase>(cases, 1, 3, 63, bf16, f32, false);
  for (int64_t C : {1, 3, 65}) add<SigmoidMulCase>(cases, 63, 0, C, f32, f32, false);

  // relu2: Nemotron-H-8B MLP intermediate 21504; odd sizes; strided rows; in place.
  for (DType dt : {f32, bf16}) add<Relu2Case>(cases, 3, 21504, dt, dt, false, false);
  add<Relu2Case>(cases, 65, 4096, bf16, bf16, true, false);
  add<Relu2Case>(cases, 7, 4096, bf16, bf16, false, true);
  add<Relu2Case>(cases, 5, 257, f32, bf16, true, false);
  for (int64_t D : {1, 3, 63}) add<Relu2Case>(cases, 257, D, f32, f32, false, D == 63);
}

}  // namespace hybrid::test
