// Cases: quantize, dequantize, linear_q, and the quantize -> dequantize round trip. Oracle in f64.
#include <algorithm>
#include <cmath>
#include <optional>
#include <utility>

#include "hybrid/ops/quant.h"
#include "ops/cases.h"
#include "ops/harness.h"
#include "ops/quant_util.h"

namespace hybrid::test {

namespace {

// ---- the MLX affine formula in f64 (written from quant.h's formula, not from the kernel) ------

struct Affine {
  double scale, bias;
  double edge_ratio;  // edge / s before the snap: rounded to q0
};

// One group with extremes lo, hi.
Affine mlx_affine(double lo, double hi, int bits) {
  const double n = (1 << bits) - 1;
  const bool lo_edge = std::fabs(lo) > std::fabs(hi);
  double s = std::max((hi - lo) / n, 1e-7);
  if (!lo_edge) s = -s;
  const double edge = lo_edge ? lo : hi;
  const double q0 = std::nearbyint(edge / s);  // default rounding mode: half to even
  if (q0 != 0) return {edge / q0, edge, edge / s};
  return {s, 0.0, edge / s};
}

uint32_t mlx_code(double w, const Affine& p, int bits) {
  const double n = (1 << bits) - 1;
  return static_cast<uint32_t>(std::clamp(std::nearbyint((w - p.bias) / p.scale), 0.0, n));
}

// How far v is from a rounding tie (x.5): codes within 1e-3 of one could round differently in
// the f32 kernel and this f64 oracle.
double tie_distance(double v) {
  return std::fabs(v - std::floor(v) - 0.5);
}

// Fills W [rows, in] (slot w, in its dtype) for quantization. Each row has its own centre and
// spread so either end of a group can be its larger-magnitude edge. The first groups of rows 0-3
// are the degenerate ones: all zero, constant 0.375, all negative, constant -1.25. No value lies
// within 1e-3 of a rounding tie of its code (redrawn until none does).
void fill_quantizable(Slot& w, Rng& rng, int bits, int gs) {
  const int64_t rows = w.shape[0], in = w.shape[1];
  for (int64_t r = 0; r < rows; ++r) {
    const double sigma = rng.uniform(0.01, 0.2), mu = rng.uniform(-1.0, 1.0) * sigma;
    for (int64_t g0 = 0; g0 < in; g0 += gs) {
      const int64_t base = r * in + g0;
      const bool first = g0 == 0;
      if (first && (r == 0 || r == 1 || r == 3)) {
        const double c = r == 0 ? 0.0 : r == 1 ? 0.375 : -1.25;
        for (int64_t k = 0; k < gs; ++k) w.set(base + k, c);
        continue;
      }
      auto draw = [&](int64_t k) {
        const double v = mu + sigma * rng.normal();
        w.set(base + k, first && r == 2 ? -std::fabs(v) - 0.01 : v);
      };
      for (int64_t k = 0; k < gs; ++k) draw(k);
      for (int round = 0;; ++round) {
        if (round == 1000) fail("[quant cases] could not draw a group free of rounding ties");
        double lo = INFINITY, hi = -INFINITY;
        for (int64_t k = 0; k < gs; ++k) {
          lo = std::min(lo, w.get(base + k));
          hi = std::max(hi, w.get(base + k));
        }
        const Affine p = mlx_affine(lo, hi, bits);
        if (tie_distance(p.edge_ratio) < 1e-3) {  // q0 itself on a tie: redraw the group
          for (int64_t k = 0; k < gs; ++k) draw(k);
          continue;
        }
        bool clean = true;
        for (int64_t k = 0; k < gs; ++k)
          if (tie_distance((w.get(base + k) - p.bias) / p.scale) < 1e-3) {
            w.set(base + k, rng.uniform(lo, hi));  // keeps lo and hi the extremes
            clean = false;
          }
        if (clean) break;
      }
    }
  }
}

// The quantization of W (slot w) by the formula: packed words, scales and biases in row-major
// order (scales and biases unrounded).
void oracle_quantize(const Slot& w, int bits, int gs, std::vector<double>& words,
                     std::vector<double>& scales, std::vector<double>& biases) {
  const int64_t rows = w.shape[0], in = w.shape[1];
  const std::vector<double> v = w.values();
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<uint64_t> row(static_cast<size_t>(packed_words(in, bits)), 0);
    for (int64_t g0 = 0; g0 < in; g0 += gs) {
      const auto first = v.begin() + r * in + g0;
      const Affine p = mlx_affine(*std::min_element(first, first + gs),
                                  *std::max_element(first, first + gs), bits);
      scales.push_back(p.scale);
      biases.push_back(p.bias);
      for (int64_t j = g0; j < g0 + gs; ++j)
        row[j * bits / 32] |= static_cast<uint64_t>(mlx_code(v[r * in + j], p, bits))
                              << (j * bits % 32);
    }
    for (uint64_t word : row) words.push_back(static_cast<double>(word));
  }
}

// Slots weight / scales / biases of a quantized W [rows, in]; `strided` gives every row a gap.
void add_quantized_slots(Slots& s, Role role, int64_t rows, int64_t in, int bits, int gs, DType sdt,
                         bool strided) {
  const int64_t nw = packed_words(in, bits), ng = in / gs;
  if (strided) {
    s.strided("weight", role, DType::u32, {rows, nw}, {nw + 3, 1}, 1, rows * (nw + 3) + 1);
    s.strided("scales", role, sdt, {rows, ng}, {ng + 2, 1}, 0, rows * (ng + 2));
    s.strided("biases", role, sdt, {rows, ng}, {ng + 1, 1}, 2, rows * (ng + 1) + 2);
  } else if (role == Role::in) {
    s.input("weight", DType::u32, {rows, nw});
    s.input("scales", sdt, {rows, ng});
    s.input("biases", sdt, {rows, ng});
  } else {
    s.output("weight", DType::u32, {rows, nw});
    s.output("scales", sdt, {rows, ng});
    s.output("biases", sdt, {rows, ng});
  }
}

QuantizedWeight quantized_view(const Views& v, int bits, int gs) {
  QuantizedWeight q;
  q.weight = v.at("weight");
  q.scales = v.at("scales");
  q.biases = v.at("biases");
  q.bits = bits;
  q.group_size = gs;
  return q;
}

std::string qparams(int bits, int gs, DType sdt) {
  return str("bits=", bits, ",group=", gs, ",scales=", dtype_name(sdt));
}

// ---- quantize ---------------------------------------------------------------------------------

// weight / scales / biases = MLX affine quantization of w; the packed words must match exactly.
struct QuantizeCase : Case {
  int64_t out, in;
  int bits, gs;
  DType wdt, sdt;
  bool strided;
  QuantizeCase(int64_t out, int64_t in, int bits, int gs, DType wdt, DType sdt, bool strided)
      : out(out), in(in), bits(bits), gs(gs), wdt(wdt), sdt(sdt), strided(strided) {}
  std::string op() const override { return "quantize"; }
  std::string params() const override {
    return str("out=", out, ",in=", in, ",w=", dtype_name(wdt), ",", qparams(bits, gs, sdt),
               strided ? ",strided" : "");
  }
  void init(Rng& rng, Slots& s) override {
    Slot& w = strided ? s.strided("w", Role::in, wdt, {out, in}, {in + 7, 1}, 5, out * (in + 7) + 5)
                      : s.input("w", wdt, {out, in});
    fill_quantizable(w, rng, bits, gs);
    add_quantized_slots(s, Role::out, out, in, bits, gs, sdt, strided);
  }
  void run(const Views& v, Context& ctx) override {
    Quantize a;
    a.w = v.at("w");
    a.q = quantized_view(v, bits, gs);
    quantize(a, ctx);
  }
  void oracle(const Slots& s, Expected& e) override {
    oracle_quantize(s["w"], bits, gs, e["weight"], e["scales"], e["biases"]);
  }
};

// ---- dequantize -------------------------------------------------------------------------------

struct DequantizeCase : Case {
  int64_t out, in;
  int bits, gs;
  DType sdt, wdt;
  bool strided;
  DequantizeCase(int64_t out, int64_t in, int bits, int gs, DType sdt, DType wdt, bool strided)
      : out(out), in(in), bits(bits), gs(gs), sdt(sdt), wdt(wdt), strided(strided) {}
  std::string op() const override { return "dequantize"; }
  std::string params() const override {
    return str("out=", out, ",in=", in, ",", qparams(bits, gs, sdt), ",w=", dtype_name(wdt),
               strided ? ",strided" : "");
  }
  void init(Rng& rng, Slots& s) override {
    add_quantized_slots(s, Role::in, out, in, bits, gs, sdt, strided);
    fill_quantized(s["weight"], s["scales"], s["biases"], rng, bits, 1.0);
    if (strided)
      s.strided("w", Role::out, wdt, {out, in}, {in + 9, 1}, 4, out * (in + 9) + 4);
    else
      s.output("w", wdt, {out, in});
  }
  void run(const Views& v, Context& ctx) override {
    Dequantize a;
    a.q = quantized_view(v, bits, gs);
    a.w = v.at("w");
    dequantize(a, ctx);
  }
  void oracle(const Slots& s, Expected& e) override {
    e["w"] = oracle_dequantize(s["weight"].values(), s["scales"].values(), s["biases"].values(),
                               out, in, bits, gs);
  }
};

// ---- linear_q ---------------------------------------------------------------------------------

// y = x · dequant(W)ᵀ (+ bias).
struct LinearQCase : Case {
  int64_t T, in, out;
  int bits, gs;
  DType xdt, sdt, ydt;
  std::optional<DType> bias;
  bool strided;
  LinearQCase(int64_t T, int64_t in, int64_t out, int bits, int gs, DType xdt, DType sdt, DType ydt,
              std::optional<DType> bias, bool strided)
      : T(T),
        in(in),
        out(out),
        bits(bits),
        gs(gs),
        xdt(xdt),
        sdt(sdt),
        ydt(ydt),
        bias(bias),
        strided(strided) {}
  std::string op() const override { return "linear_q"; }
  std::string params() const override {
    return str("T=", T, ",in=", in, ",out=", out, ",", qparams(bits, gs, sdt),
               ",x=", dtype_name(xdt), ",y=", dtype_name(ydt),
               bias ? str(",bias=", dtype_name(*bias)) : "", strided ? ",strided" : "");
  }
  void init(Rng& rng, Slots& s) override {
    if (strided) {
      fill_normal(s.strided("x", Role::in, xdt, {T, in}, {in + 5, 1}, 3, T * (in + 5) + 3), rng);
      s.strided("y", Role::out, ydt, {T, out}, {out + 3, 1}, 1, T * (out + 3) + 1);
    } else {
      fill_normal(s.input("x", xdt, {T, in}), rng);
      s.output("y", ydt, {T, out});
    }
    add_quantized_slots(s, Role::in, out, in, bits, gs, sdt, strided);
    fill_quantized(s["weight"], s["scales"], s["biases"], rng, bits,
                   std::sqrt(3.0 / static_cast<double>(in)));  // var(W) ≈ 1/in
    if (bias) fill_normal(s.input("bias", *bias, {out}), rng, 0.0, 0.5);
  }
  void run(const Views& v, Context& ctx) override {
    LinearQ a;
    a.x = v.at("x");
    a.w = quantized_view(v, bits, gs);
    if (bias) a.bias = v.at("bias");
    a.y = v.at("y");
    linear_q(a, ctx);
  }
  void oracle(const Slots& s, Expected& e) override {
    const std::vector<double> x = s["x"].values();
    const std::vector<double> w = oracle_dequantize(s["weight"].values(), s["scales"].values(),
                                                    s["biases"].values(), out, in, bits, gs);
    std::vector<double>& y = e["y"];
    for (int64_t t = 0; t < T; ++t)
      for (int64_t o = 0; o < out; ++o) {
        double acc = bias ? s["bias"].get(o) : 0.0;
        for (int64_t i = 0; i < in; ++i) acc += x[t * in + i] * w[o * in + i];
        y.push_back(acc);
      }
  }
  double flops(const Slots&) const override { return 2.0 * T * in * out; }
};

// ---- round trip ---------------------------------------------------------------------------------

// quantize then dequantize (scales in W's dtype, as MLX stores them): every output against the
// formula; w_hat = stored scale · q + stored bias. (The bound |w - w_hat| <= |scale| against W
// itself is checked in tests/unit/quant_mlx_test.cpp.)
struct QuantRoundTripCase : Case {
  int64_t out, in;
  int bits, gs;
  DType wdt;
  QuantRoundTripCase(int64_t out, int64_t in, int bits, int gs, DType wdt)
      : out(out), in(in), bits(bits), gs(gs), wdt(wdt) {}
  // Listed under quantize (it runs quantize, then dequantize on its outputs).
  std::string op() const override { return "quantize"; }
  std::string params() const override {
    return str("roundtrip,out=", out, ",in=", in, ",w=", dtype_name(wdt), ",",
               qparams(bits, gs, wdt));
  }
  void init(Rng& rng, Slots& s) override {
    fill_quantizable(s.input("w", wdt, {out, in}), rng, bits, gs);
    add_quantized_slots(s, Role::out, out, in, bits, gs, wdt, false);
    s.output("w_hat", wdt, {out, in});
  }
  void run(const Views& v, Context& ctx) override {
    Quantize q;
    q.w = v.at("w");
    q.q = quantized_view(v, bits, gs);
    quantize(q, ctx);
    Dequantize d;
    d.q = q.q;
    d.w = v.at("w_hat");
    dequantize(d, ctx);
  }
  void oracle(const Slots& s, Expected& e) override {
    oracle_quantize(s["w"], bits, gs, e["weight"], e["scales"], e["biases"]);
    Slot stored = s["scales"];  // scales and biases as their dtype stores them
    std::vector<double> sc(e["scales"].size()), bi(sc.size());
    for (size_t i = 0; i < sc.size(); ++i) {
      stored.set(static_cast<int64_t>(i), e["scales"][i]);
      sc[i] = stored.get(static_cast<int64_t>(i));
      stored.set(static_cast<int64_t>(i), e["biases"][i]);
      bi[i] = stored.get(static_cast<int64_t>(i));
    }
    e["w_hat"] = oracle_dequantize(e["weight"], sc, bi, out, in, bits, gs);
  }
};

// x rows strided (in + 5: not 16-byte aligned) with packed, aligned weights: the CUDA GEMV v4
// stages such x with 16-bit loads (the "strided" cases also misalign the weights, which v4
// refuses).
struct LinearQStridedXCase : LinearQCase {
  LinearQStridedXCase(int64_t T, int64_t in, int64_t out, int gs, DType xdt)
      : LinearQCase(T, in, out, 4, gs, xdt, xdt, xdt, std::nullopt, false) {}
  std::string params() const override { return LinearQCase::params() + ",x_strided"; }
  void init(Rng& rng, Slots& s) override {
    fill_normal(s.strided("x", Role::in, xdt, {T, in}, {in + 5, 1}, 3, T * (in + 5) + 3), rng);
    s.output("y", ydt, {T, out});
    add_quantized_slots(s, Role::in, out, in, bits, gs, sdt, false);
    fill_quantized(s["weight"], s["scales"], s["biases"], rng, bits,
                   std::sqrt(3.0 / static_cast<double>(in)));
  }
};

// x of a chosen magnitude (stddev x_std): the CUDA GEMV v5 multiplies x in f16 after scaling
// each token by a power of two (its max into [2^14, 2^15)); bf16 x far above f16's range (65504)
// or far below its normal range (6e-5) must come out as accurate as x ~ N(0, 1).
struct LinearQScaledXCase : LinearQCase {
  double x_std;
  LinearQScaledXCase(int64_t T, int64_t in, int64_t out, int gs, double x_std)
      : LinearQCase(T, in, out, 4, gs, DType::bf16, DType::bf16, DType::f32, std::nullopt, false),
        x_std(x_std) {}
  std::string params() const override { return LinearQCase::params() + str(",x_std=", x_std); }
  void init(Rng& rng, Slots& s) override {
    fill_normal(s.input("x", xdt, {T, in}), rng, 0.0, x_std);
    s.output("y", ydt, {T, out});
    add_quantized_slots(s, Role::in, out, in, bits, gs, sdt, false);
    fill_quantized(s["weight"], s["scales"], s["biases"], rng, bits,
                   std::sqrt(3.0 / static_cast<double>(in)));
  }
};

// Perf only (hybrid-ops perf -b cuda): a 4-bit g64 bf16 GEMV at batch 1; bytes = the quantized
// weight's bytes (packed codes, scales, biases), the traffic that bounds it.
struct LinearQPerfCase : LinearQCase {
  LinearQPerfCase(int64_t T, int64_t in, int64_t out)
      : LinearQCase(T, in, out, 4, 64, DType::bf16, DType::bf16, DType::bf16, std::nullopt, false) {
  }
  std::string params() const override { return LinearQCase::params() + ",perf"; }
  bool perf_only() const override { return true; }
  void oracle(const Slots&, Expected&) override { fail("[linear_q perf case] has no oracle"); }
  double bytes(const Slots& s) const override {
    double b = 0;
    for (const char* n : {"weight", "scales", "biases"})
      b += static_cast<double>(s[n].numel()) * dtype_size(s[n].dtype);
    return b;
  }
};

}  // namespace

void add_quant_cases(CaseList& cases) {
  const DType f32 = DType::f32, bf16 = DType::bf16, f16 = DType::f16;
  // quantize: every bits x group size, scales in bf16 (bf16 W) and f32 (f32 W), as MLX stores them.
  for (int bits : {4, 8})
    for (int gs : {32, 64, 128}) {
      cases.push_back(std::make_unique<QuantizeCase>(16, 384, bits, gs, bf16, bf16, false));
      cases.push_back(std::make_unique<QuantizeCase>(16, 384, bits, gs, f32, f32, false));
    }
  cases.push_back(std::make_unique<QuantizeCase>(512, 2048, 4, 64, bf16, bf16, false));
  cases.push_back(std::make_unique<QuantizeCase>(7, 96, 4, 32, f32, f32, false));
  cases.push_back(std::make_unique<QuantizeCase>(7, 96, 8, 32, f16, f16, false));
  cases.push_back(std::make_unique<QuantizeCase>(9, 256, 8, 64, bf16, f32, true));
  cases.push_back(std::make_unique<QuantizeCase>(5, 128, 4, 128, f32, bf16, true));

  // dequantize
  for (int bits : {4, 8})
    for (int gs : {32, 64, 128}) {
      cases.push_back(std::make_unique<DequantizeCase>(16, 384, bits, gs, bf16, bf16, false));
      cases.push_back(std::make_unique<DequantizeCase>(16, 384, bits, gs, f32, f32, false));
    }
  cases.push_back(std::make_unique<DequantizeCase>(512, 2048, 4, 64, bf16, f32, false));
  cases.push_back(std::make_unique<DequantizeCase>(7, 96, 8, 32, f16, f16, false));
  cases.push_back(std::make_unique<DequantizeCase>(9, 256, 4, 64, bf16, bf16, true));

  // linear_q: real shapes (2048 <-> 4096) at T = 1, 3, 17 (4-bit g64 bf16: the common MLX
  // checkpoint), every bits x group size at smaller shapes, odd sizes, strided views.
  auto lq = [&](int64_t T, int64_t in, int64_t out, int bits, int gs, DType x, DType sdt, DType y,
                std::optional<DType> bias, bool strided) {
    cases.push_back(std::make_unique<LinearQCase>(T, in, out, bits, gs, x, sdt, y, bias, strided));
  };
  for (int64_t T : {1, 3, 17}) {
    lq(T, 2048, 4096, 4, 64, bf16, bf16, bf16, std::nullopt, false);
    lq(T, 4096, 2048, T == 3 ? 8 : 4, T == 3 ? 128 : 64, f32, bf16, f32, std::nullopt, false);
  }
  for (int bits : {4, 8})
    for (int gs : {32, 64, 128}) lq(3, 384, 65, bits, gs, f32, f32, f32, f32, false);
  lq(1, 96, 7, 4, 32, f32, f32, f32, std::nullopt, false);
  lq(1, 96, 7, 8, 32, bf16, bf16, bf16, bf16, false);
  lq(65, 256, 7, 8, 128, f16, f16, f16, std::nullopt, false);
  lq(5, 2048, 257, 4, 64, bf16, bf16, bf16, f32, true);
  // CUDA GEMV token templates 2 and 8 with 16-byte chunks.
  lq(2, 512, 33, 8, 32, f16, f16, f32, f16, false);
  lq(8, 256, 65, 4, 64, bf16, bf16, bf16, std::nullopt, false);
  // CUDA GEMV: every batch 1..8 (token padding inside the 1/2/4/8 templates), both bit widths,
  // every group size, x f32 / bf16 / f16, odd out (row tiles with a tail), in = 640 (20 or 40
  // chunks: a partial block of 32 chunks in the staged x), 16-byte and strided (4-byte) weights.
  for (int64_t T = 1; T <= 8; ++T) {
    const int bits = T % 2 ? 4 : 8, gs = T % 3 == 0 ? 32 : T % 3 == 1 ? 64 : 128;
    const DType x = T % 3 == 0 ? f32 : T % 3 == 1 ? bf16 : f16;
    lq(T, 640, 37 + 2 * T, bits, gs, x, x == f32 ? bf16 : x, T % 2 ? x : f32,
       T % 4 == 0 ? std::optional<DType>(f32) : std::nullopt, T == 5 || T == 8);
  }
  // Long rows: K split over 2-4 warps of a row group (few rows: the GPU is not full).
  lq(1, 8192, 19, 4, 128, bf16, bf16, bf16, bf16, false);
  lq(2, 8192, 5, 8, 64, f32, f32, f32, std::nullopt, false);
  // Staged x above the shared-memory stage at 8 tokens: two launches of 4 tokens (the second
  // with 2), 8-bit g128; and at 4 tokens with strided weights.
  lq(6, 4096, 45, 8, 128, bf16, bf16, f32, bf16, false);
  lq(4, 8192, 23, 4, 32, f16, f16, f16, std::nullopt, true);

  // CUDA GEMV v4 (4-bit, groups 64 / 128, 16-bit x; tokens = the mma's columns): every T 1..8,
  // bf16 and f16 x and scales, spans not a multiple of the 8 K parts (in = 576: 9 spans, 640:
  // 10), a tail tile (out not a multiple of 16), 2 pipeline steps per tile (in = 4096), fewer
  // spans than parts (in = 128), x rows not 16-byte aligned (scalar staging), bias, f32 y, and
  // more 16-row tiles than resident CTAs (the persistent loop's cross-tile prefetch).
  for (int64_t T = 1; T <= 8; ++T) {
    const int gs = T % 2 ? 64 : 128;
    const DType x = T % 3 == 1 ? f16 : bf16;
    lq(T, gs == 64 ? 576 : 640, 21 + 3 * T, 4, gs, x, x, T % 4 == 0 ? f32 : x,
       T % 3 == 2 ? std::optional<DType>(bf16) : std::nullopt, false);
  }
  lq(2, 4096, 50, 4, 64, bf16, bf16, bf16, f32, false);
  lq(1, 128, 33, 4, 128, f16, f16, f32, std::nullopt, false);
  lq(3, 512, 40, 4, 64, bf16, bf16, bf16, std::nullopt, true);
  lq(1, 128, 12677, 4, 64, bf16, bf16, bf16, std::nullopt, false);
  lq(8, 256, 6400, 4, 128, f16, f16, f16, f16, false);
  cases.push_back(std::make_unique<LinearQStridedXCase>(3, 512, 40, 64, bf16));
  cases.push_back(std::make_unique<LinearQStridedXCase>(1, 640, 17, 128, f16));

  // CUDA GEMV v5 (4-bit, groups 64 / 128, 16-bit x, T <= 8, in a multiple of 256; on an H200,
  // 132 SMs x 3 CTAs x 8 warps): one warp per 16-row tile over 2 rounds of CTAs with the L2
  // prefetch and a tail tile (60007 rows, in = 2048: 8 steps per tile, the lm head's path), 2
  // warps per tile over 2 rounds (40003 rows, f32 y: the tight tolerance), 2 and 4 warps per tile
  // (in = 1536: 24 spans, 3 steps per part; in = 1024 at 300 rows), 3 steps per tile at 7 tokens
  // with f16 scales and a bias, and x far outside f16's range (the per-token scaling).
  lq(1, 2048, 60007, 4, 64, bf16, bf16, bf16, bf16, false);
  lq(2, 2048, 40003, 4, 128, f16, f16, f32, std::nullopt, false);
  lq(4, 1536, 70, 4, 64, bf16, bf16, bf16, f32, false);
  lq(3, 1024, 300, 4, 128, bf16, bf16, f32, std::nullopt, false);
  lq(7, 768, 100, 4, 64, f16, f16, f32, bf16, false);
  lq(8, 512, 33, 4, 128, bf16, f16, f16, std::nullopt, false);
  cases.push_back(std::make_unique<LinearQScaledXCase>(2, 1024, 48, 64, 3.0e5));
  cases.push_back(std::make_unique<LinearQScaledXCase>(1, 1024, 48, 128, 1.0e-7));
  // max|x| beyond 2^116 and below 2^-86: the per-token exponent's clamp (2^e normal in f32). The
  // 1e36 case has 512 x 65600 = 33.6 M codes, past v5's size threshold (kV5MinCodes, 32 M), so that
  // the default route takes v5 there: v3 / v4 add (128 + q)·x per 64-group in f32 and overflow
  // for bf16 |x| above ~3.7e34 (docs/ops/quant.md), which this case would show.
  cases.push_back(std::make_unique<LinearQScaledXCase>(2, 512, 65600, 64, 1.0e36));
  cases.push_back(std::make_unique<LinearQScaledXCase>(2, 512, 40, 128, 1.0e-32));
  // CUDA GEMV v6 (v5's shapes with in a multiple of 8·group_size, 16-byte rows; served past the
  // same 32 M codes): the 60007-, 40003- and 65600-row cases above (one chunk of 2048, 2048 and
  // 512 inputs: 2 of the 8 warps busy), and inputs over several chunks with a short last one:
  // 3072 = 2048 + 1024 (g64, 5 tokens) and 5120 = 2 x 2048 + 1024 (g128, 8 tokens, f16 scales,
  // f32 y, a bias; 170 KB of shared memory with the staged x).
  lq(5, 3072, 11000, 4, 64, bf16, bf16, bf16, std::nullopt, false);
  lq(8, 5120, 6600, 4, 128, f16, f16, f32, bf16, false);
  // CUDA GEMV v7 (v5's shapes with 16-byte code rows, served when the 16-row tiles fill the
  // resident warps: 132 SMs x 3 CTAs x 8 warps = 3168 on an H200): the 60007-row case above
  // (3751 tiles, one slice of 256 inputs after another over 8 slices), the 65600-row one (4100
  // tiles of 2 slices), and 8 tokens at g128 with f16 scales, f32 y and a bias (3250 tiles).
  lq(8, 1024, 52000, 4, 128, f16, f16, f32, bf16, false);

  // Perf only: decode GEMVs of Qwen3-Next-sized projections and the lm head (vocab 151936).
  for (auto [in, out] : {std::pair<int64_t, int64_t>{2048, 4096}, {4096, 2048}, {2048, 151936}})
    cases.push_back(std::make_unique<LinearQPerfCase>(1, in, out));

  // quantize -> dequantize round trip.
  for (int bits : {4, 8})
    for (int gs : {32, 64, 128})
      cases.push_back(std::make_unique<QuantRoundTripCase>(8, 256, bits, gs, bf16));
  cases.push_back(std::make_unique<QuantRoundTripCase>(7, 96, 4, 32, f32));
  cases.push_back(std::make_unique<QuantRoundTripCase>(7, 96, 8, 32, f16));
}

}  // namespace hybrid::test
