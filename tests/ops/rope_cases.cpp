// Cases: rope. Oracle in f64 (the angle formed in f32, as the op defines it).
#include <cmath>

#include "hybrid/ops/rope.h"
#include "ops/cases.h"
#include "ops/harness.h"

namespace hybrid::test {

namespace {

// out[i] = x[i]cos a − x[i+half]sin a, out[i+half] = x[i+half]cos a + x[i]sin a, out[d>=rd] = x[d],
// a = fl32(fl32(pos) · fl32(1 / fl32(theta^fl32(2i/rd)))).
struct RopeCase : Case {
  int64_t T, H, D, rotary_dim;
  float theta;
  DType act, out_dtype;
  int64_t max_pos;
  bool in_place, strided;

  RopeCase(int64_t T, int64_t H, int64_t D, int64_t rd, float theta, DType act, DType out_dtype,
           int64_t max_pos, bool in_place, bool strided)
      : T(T),
        H(H),
        D(D),
        rotary_dim(rd),
        theta(theta),
        act(act),
        out_dtype(out_dtype),
        max_pos(max_pos),
        in_place(in_place),
        strided(strided) {}

  std::string op() const override { return "rope"; }
  std::string params() const override {
    return str("T=", T, ",H=", H, ",D=", D, ",rotary=", rotary_dim, ",theta=", theta,
               ",x=", dtype_name(act), in_place ? ",in_place" : str(",out=", dtype_name(out_dtype)),
               ",pos<=", max_pos, strided ? ",strided" : "");
  }
  void init(Rng& rng, Slots& s) override {
    const Role xr = in_place ? Role::inout : Role::in;
    if (strided)  // q inside Qwen3-Next's packed [T, H, 2·D] (q_h | gate_h) projection
      fill_normal(s.strided("x", xr, act, {T, H, D}, {H * 2 * D, 2 * D, 1}, 0, T * H * 2 * D), rng);
    else if (in_place)
      fill_normal(s.inout("x", act, {T, H, D}), rng);
    else
      fill_normal(s.input("x", act, {T, H, D}), rng);
    // Positions anywhere in [0, max_pos], the last one max_pos itself (the largest angle).
    fill_int(s.input("positions", DType::i32, {T}), rng, 0, max_pos);
    s["positions"].set(T - 1, static_cast<double>(max_pos));
    if (!in_place) s.output("out", out_dtype, {T, H, D});
  }
  void run(const Views& v, Context& ctx) override {
    Rope a;
    a.x = v.at("x");
    a.out = in_place ? v.at("x") : v.at("out");
    a.positions = v.at("positions");
    a.rotary_dim = rotary_dim;
    a.theta = theta;
    rope(a, ctx);
  }
  void oracle(const Slots& s, Expected& e) override {
    std::vector<double>& out = e[in_place ? "x" : "out"];
    const int64_t half = rotary_dim / 2;
    for (int64_t t = 0; t < T; ++t) {
      const float p = static_cast<float>(s["positions"].get(t));
      for (int64_t h = 0; h < H; ++h) {
        const int64_t base = (t * H + h) * D;
        for (int64_t d = 0; d < D; ++d) {
          const double x = s["x"].get(base + d);
          if (d >= rotary_dim) {
            out.push_back(x);
            continue;
          }
          const int64_t i = d % half;
          const float inv = 1.0f / static_cast<float>(std::pow(
                                       double(theta), double(float(2 * i) / float(rotary_dim))));
          const double angle = static_cast<float>(p * inv);
          const double partner = s["x"].get(base + (d < half ? d + half : d - half));
          out.push_back(d < half ? x * std::cos(angle) - partner * std::sin(angle)
                                 : x * std::cos(angle) + partner * std::sin(angle));
        }
      }
    }
  }
};

// Benchmark shapes (perf only): Qwen3-Next q, [T, 16, 256] bf16, rotary 64, theta 1e7, in place,
// at T = 8192 and at T = 65536 (268 MB: long enough that the launch and the ramp after the L2
// flush, which a same-size copy pays too, no longer hide the kernel's streaming rate). The bytes
// are what the op must move: the rotated 64 dims of every head read and written (the other 192
// are not touched) plus the positions.
struct RopePerfCase : Case {
  explicit RopePerfCase(int64_t tokens) : T(tokens) {}
  int64_t T, H = 16, D = 256, rotary_dim = 64;
  std::string op() const override { return "rope"; }
  std::string params() const override {
    return str("T=", T, ",H=", H, ",D=", D, ",rotary=", rotary_dim,
               ",theta=1e+07,x=bf16,in_place,perf");
  }
  bool perf_only() const override { return true; }
  void init(Rng& rng, Slots& s) override {
    fill_uniform(s.inout("x", DType::bf16, {T, H, D}), rng, -1, 1);
    fill_int(s.input("positions", DType::i32, {T}), rng, 0, 262143);
  }
  void run(const Views& v, Context& ctx) override {
    Rope a;
    a.x = v.at("x"), a.out = v.at("x"), a.positions = v.at("positions");
    a.rotary_dim = rotary_dim;
    a.theta = 1e7f;
    rope(a, ctx);
  }
  void oracle(const Slots&, Expected&) override { fail("[rope perf case] has no oracle"); }
  double bytes(const Slots&) const override {
    return static_cast<double>(T * H * rotary_dim * 2 * 2 + T * 4);
  }
};

}  // namespace

void add_rope_cases(CaseList& cases) {
  for (int64_t T : {8192, 65536}) cases.push_back(std::make_unique<RopePerfCase>(T));
  const DType f32 = DType::f32, bf16 = DType::bf16, f16 = DType::f16;
  auto add = [&](int64_t T, int64_t H, int64_t D, int64_t rd, float theta, DType act, DType od,
                 int64_t max_pos, bool in_place, bool strided) {
    cases.push_back(
        std::make_unique<RopeCase>(T, H, D, rd, theta, act, od, max_pos, in_place, strided));
  };
  // Qwen3-Next / Qwen3.5 gated attention: head_dim 256, partial rotary 64, theta 1e7; q (16 heads,
  // read out of the packed q|gate projection, in place and not) and k (2 heads); positions up to
  // 262143 (max_position_embeddings), where the f32 angle matters.
  for (DType dt : {bf16, f32}) {
    add(7, 16, 256, 64, 1e7f, dt, dt, 262143, true, true);
    add(7, 16, 256, 64, 1e7f, dt, dt, 262143, false, true);
    add(65, 2, 256, 64, 1e7f, dt, dt, 4096, false, false);
  }
  // Full rotary at D = 128 (Llama-style theta 5e5 / 1e4) and D = 64; partial rotary 32 of 64;
  // odd token counts; f16; an f32 input written to bf16.
  add(3, 32, 128, 128, 5e5f, bf16, bf16, 131071, true, false);
  add(257, 8, 128, 128, 1e4f, f32, f32, 8191, false, false);
  add(1, 4, 64, 64, 1e4f, f32, f32, 0, false, false);
  add(63, 4, 64, 32, 1e4f, f16, f16, 2047, true, false);
  add(65, 3, 64, 2, 1e4f, f32, f32, 100000, false, false);
  add(9, 16, 256, 256, 1e7f, f32, bf16, 30000, false, true);
  add(7, 5, 96, 48, 1e6f, f32, f32, 70000, false, false);  // 2i/rd not exact in binary
  // CUDA: rotary_dim above 1024 (4 tokens per block, 2 blocks and a tail of 1 token).
  add(9, 2, 2048, 2048, 1e6f, bf16, bf16, 5000, false, false);
}

}  // namespace hybrid::test
