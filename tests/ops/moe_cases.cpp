// Cases: moe_route, moe_experts. Oracle in f64.
#include <algorithm>
#include <array>
#include <cmath>
#include <numeric>
#include <string>
#include <utility>

#include "hybrid/ops/moe.h"
#include "ops/cases.h"
#include "ops/harness.h"
#include "ops/quant_util.h"

namespace hybrid::test {

namespace {

const char* score_name(MoeScore s) {
  return s == MoeScore::softmax ? "softmax" : "sigmoid";
}

double sigmoid64(double x) {
  return 1.0 / (1.0 + std::exp(-x));
}

// ---- moe_route -------------------------------------------------------------------------------

struct RouteConfig {
  int64_t T, E, K;
  DType logits = DType::f32, weights = DType::f32;
  MoeScore score = MoeScore::softmax;
  bool renormalize = true, bias = false;
  int64_t n_group = 1, topk_group = 1;
  double scaling = 1.0;
  bool strided = false;  // logits are the first E columns of a packed [T, E + 1] projection
  // The shared expert folded in (column K: id E): 0 no, 1 with weight 1, 2 with a shared_gate
  // [T, 1], 3 with the gate in column E + 1 of a wider buffer (rows strided, the engine's form).
  int shared = 0;
};

// s = softmax|sigmoid(l); c = s (+ bias); best topk_group groups by sum of top-2 c; top_k by c
// (by l without bias); ordered by descending s; w = s[ids] (/ (Σ + 1e-20)) · scaling.
struct MoeRouteCase : Case {
  RouteConfig p;
  explicit MoeRouteCase(RouteConfig p) : p(p) {}

  std::string op() const override { return "moe_route"; }
  std::string params() const override {
    return str("T=", p.T, ",E=", p.E, ",k=", p.K, ",logits=", dtype_name(p.logits),
               ",w=", dtype_name(p.weights), ",", score_name(p.score),
               p.renormalize ? ",renorm" : ",no_renorm", p.bias ? ",bias" : "",
               p.n_group > 1 ? str(",groups=", p.n_group, ",topk_group=", p.topk_group) : "",
               p.scaling != 1.0 ? str(",scale=", p.scaling) : "", p.strided ? ",strided" : "",
               p.shared == 0   ? ""
               : p.shared == 1 ? ",shared"
               : p.shared == 2 ? ",shared_gate"
                               : ",shared_gate_strided");
  }
  int64_t columns() const { return p.K + (p.shared > 0 ? 1 : 0); }

  // Scores of one row in f64 (the oracle's), from logits l and bias b.
  void scores(const std::vector<double>& l, const std::vector<double>& b, std::vector<double>& s,
              std::vector<double>& c) const {
    s.assign(p.E, 0.0);
    if (p.score == MoeScore::softmax) {
      const double m = *std::max_element(l.begin(), l.end());
      double sum = 0;
      for (int64_t e = 0; e < p.E; ++e) sum += std::exp(l[e] - m);
      for (int64_t e = 0; e < p.E; ++e) s[e] = std::exp(l[e] - m) / sum;
    } else {
      for (int64_t e = 0; e < p.E; ++e) s[e] = sigmoid64(l[e]);
    }
    c = s;
    if (p.bias)
      for (int64_t e = 0; e < p.E; ++e) c[e] += b[e];
  }
  std::vector<double> group_scores(const std::vector<double>& c) const {
    const int64_t per = p.E / p.n_group;
    std::vector<double> g(p.n_group);
    for (int64_t i = 0; i < p.n_group; ++i) {
      std::vector<double> v(c.begin() + i * per, c.begin() + (i + 1) * per);
      std::sort(v.rbegin(), v.rend());
      g[i] = v[0] + v[1];
    }
    return g;
  }
  static double min_gap(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    double gap = INFINITY;
    for (size_t i = 1; i < v.size(); ++i) gap = std::min(gap, v[i] - v[i - 1]);
    return gap;
  }

  void init(Rng& rng, Slots& s) override {
    Slot& logits = p.strided ? s.strided("logits", Role::in, p.logits, {p.T, p.E}, {p.E + 1, 1}, 0,
                                         p.T * (p.E + 1))
                             : s.input("logits", p.logits, {p.T, p.E});
    std::vector<double> b(p.E, 0.0);
    if (p.bias) {  // e_score_correction_bias: small, same order as the spread of the scores
      Slot& bias = s.input("bias", DType::f32, {p.E});
      fill_normal(bias, rng, 0.0, 0.05);
      b = bias.values();
    }
    // Tie-free logits: each row's logits (as stored) are distinct; its biased selection scores and
    // group scores are pairwise at least 1e-5 apart, so f32 and f64 choose the same experts (rows
    // are redrawn until they are).
    for (int64_t t = 0; t < p.T; ++t) {
      for (int tries = 0;; ++tries) {
        if (tries == 1000) fail("[moe_route case] could not draw tie-free logits");
        std::vector<double> l(p.E), sc, c;
        for (int64_t e = 0; e < p.E; ++e)
          do {  // a logit equal (as stored) to an earlier one of the row is drawn again
            logits.set(t * p.E + e, rng.normal(0.0, 2.0));
            l[e] = logits.get(t * p.E + e);
          } while (std::find(l.begin(), l.begin() + e, l[e]) != l.begin() + e);
        scores(l, b, sc, c);
        if (p.bias && min_gap(c) < 1e-5) continue;
        if (p.n_group > 1 && min_gap(group_scores(c)) < 1e-5) continue;
        break;
      }
    }
    if (p.shared == 2) fill_normal(s.input("shared_gate", p.logits, {p.T, 1}), rng, 0.0, 2.0);
    if (p.shared == 3)
      fill_normal(s.strided("shared_gate", Role::in, p.logits, {p.T, 1}, {p.E + 2, 1}, p.E + 1,
                            p.T * (p.E + 2)),
                  rng, 0.0, 2.0);
    s.output("ids", DType::i32, {p.T, columns()});
    s.output("weights", p.weights, {p.T, columns()});
  }
  void run(const Views& v, Context& ctx) override {
    MoeRoute a;
    a.logits = v.at("logits");
    if (p.bias) a.bias = v.at("bias");
    a.ids = v.at("ids");
    a.weights = v.at("weights");
    a.top_k = p.K;
    a.score = p.score;
    a.renormalize = p.renormalize;
    a.n_group = p.n_group;
    a.topk_group = p.topk_group;
    a.scaling = static_cast<float>(p.scaling);
    a.shared_expert = p.shared > 0;
    if (p.shared >= 2) a.shared_gate = v.at("shared_gate");
    moe_route(a, ctx);
  }
  void oracle(const Slots& s, Expected& e) override {
    std::vector<double> b = p.bias ? s["bias"].values() : std::vector<double>(p.E, 0.0);
    const int64_t per = p.E / p.n_group;
    for (int64_t t = 0; t < p.T; ++t) {
      std::vector<double> l(p.E), sc, c;
      for (int64_t i = 0; i < p.E; ++i) l[i] = s["logits"].get(t * p.E + i);
      scores(l, b, sc, c);
      // Eligible experts: those of the topk_group groups with the largest scores.
      std::vector<bool> eligible(p.E, true);
      if (p.n_group > 1) {
        std::vector<double> g = group_scores(c);
        std::vector<bool> keep(p.n_group, false);
        for (int64_t r = 0; r < p.topk_group; ++r) {
          int64_t best = -1;
          for (int64_t i = 0; i < p.n_group; ++i)
            if (!keep[i] && (best < 0 || g[i] > g[best])) best = i;
          keep[best] = true;
        }
        for (int64_t i = 0; i < p.E; ++i) eligible[i] = keep[i / per];
      }
      // Top k by c (ties to the lower id), picked one at a time.
      std::vector<int64_t> chosen;
      std::vector<bool> taken(p.E, false);
      for (int64_t r = 0; r < p.K; ++r) {
        int64_t best = -1;
        for (int64_t i = 0; i < p.E; ++i)
          if (eligible[i] && !taken[i] && (best < 0 || c[i] > c[best])) best = i;
        taken[best] = true;
        chosen.push_back(best);
      }
      std::stable_sort(chosen.begin(), chosen.end(), [&](int64_t x, int64_t y) {
        return sc[x] > sc[y] || (sc[x] == sc[y] && x < y);
      });
      double sum = 0;
      for (int64_t i : chosen) sum += sc[i];
      for (int64_t i : chosen) {
        e["ids"].push_back(static_cast<double>(i));
        e["weights"].push_back(sc[i] / (p.renormalize ? sum + 1e-20 : 1.0) * p.scaling);
      }
      if (p.shared > 0) {
        e["ids"].push_back(static_cast<double>(p.E));
        e["weights"].push_back(p.shared >= 2 ? sigmoid64(s["shared_gate"].get(t)) : 1.0);
      }
    }
  }
};

// ---- moe_experts -----------------------------------------------------------------------------

struct ExpertsConfig {
  int64_t T, E, K, Dm, I;
  DType act = DType::f32, wdt = DType::bf16;
  MoeActivation activation = MoeActivation::swiglu;
  DType ids = DType::i32;
  bool dup_in_token = false;  // ids[t, 1] = ids[t, 0]: one expert twice for one token
  bool strided = false;       // x and out rows strided (views into wider buffers)
  bool accumulate = false;
  bool skewed = false;  // expert 0 is in every token (uneven load: one expert, many pairs)
};

// out[t] (+)= Σ_j w[t,j] · down[e] · h,  e = ids[t,j];
//   swiglu h = silu(gate_up[e, :I] x) ⊙ (gate_up[e, I:] x),  relu2 h = relu(gate_up[e] x)².
struct MoeExpertsCase : Case {
  ExpertsConfig p;
  explicit MoeExpertsCase(ExpertsConfig p) : p(p) {}
  bool swiglu() const { return p.activation == MoeActivation::swiglu; }
  int64_t rows() const { return swiglu() ? 2 * p.I : p.I; }

  std::string op() const override { return "moe_experts"; }
  std::string params() const override {
    return str("T=", p.T, ",E=", p.E, ",k=", p.K, ",Dm=", p.Dm, ",I=", p.I,
               ",x=", dtype_name(p.act), weight_desc(), swiglu() ? ",swiglu" : ",relu2",
               ",ids=", dtype_name(p.ids), p.dup_in_token ? ",dup_in_token" : "",
               p.strided ? ",strided" : "", p.accumulate ? ",accumulate" : "",
               p.skewed ? ",skewed" : "");
  }
  void init(Rng& rng, Slots& s) override {
    if (p.strided)  // x rows inside a packed [T, Dm + 7] buffer at offset 2
      fill_normal(
          s.strided("x", Role::in, p.act, {p.T, p.Dm}, {p.Dm + 7, 1}, 2, p.T * (p.Dm + 7) + 2),
          rng);
    else
      fill_normal(s.input("x", p.act, {p.T, p.Dm}), rng);
    init_experts(rng, s);
    // Ids as a router gives them (k distinct experts per token, Fisher-Yates), or with one
    // expert twice in a token.
    Slot& ids = s.input("ids", p.ids, {p.T, p.K});
    for (int64_t t = 0; t < p.T; ++t) {
      std::vector<int64_t> perm(p.E);
      std::iota(perm.begin(), perm.end(), 0);
      for (int64_t j = 0; j < p.K; ++j) {
        if (!(p.skewed && j == 0)) std::swap(perm[j], perm[rng.randint(j, p.E - 1)]);
        ids.set(t * p.K + j, static_cast<double>(perm[j]));
      }
      if (p.dup_in_token) ids.set(t * p.K + 1, static_cast<double>(perm[0]));
    }
    fill_uniform(s.input("weights", p.act, {p.T, p.K}), rng, 0.05, 1.0);  // as HF: x's dtype
    if (p.accumulate) {
      fill_normal(s.inout("out", p.act, {p.T, p.Dm}), rng);
    } else if (p.strided) {
      s.strided("out", Role::out, p.act, {p.T, p.Dm}, {p.Dm + 3, 1}, 1, p.T * (p.Dm + 3) + 1);
    } else {
      s.output("out", p.act, {p.T, p.Dm});
    }
  }
  // How many distinct experts the ids route to (perf cases count each one's weights once).
  int64_t distinct_experts(const Slots& s) const {
    std::vector<bool> used(p.E, false);
    int64_t n = 0;
    for (int64_t i = 0; i < p.T * p.K; ++i) {
      const auto e = static_cast<int64_t>(s["ids"].get(i));
      if (!used[e]) used[e] = true, ++n;
    }
    return n;
  }
  // How the case names its expert weights.
  virtual std::string weight_desc() const { return str(",w=", dtype_name(p.wdt)); }
  // The 16-bit dtype in which CUDA's tensor-core path (moe_experts.cuda_tc / moe_experts_q.cuda_tc:
  // T·k >= 128) takes x and h: the weights' (f32 weights never take that path).
  virtual DType tc_dtype() const { return p.wdt; }
  // That path rounds x and h to tc_dtype() as llama.cpp's and vLLM's MoE GEMMs do
  // (docs/ops/moe.md), so an output finer than it (f32, or f16 against bf16) is held to
  // tc_dtype()'s tolerance on a device backend; the CPU reference is held to the output's own
  // against the oracle.
  Tolerance tolerance(const Slot& out, DeviceType backend) const override {
    const DType r = tc_dtype();
    if (backend != DeviceType::cpu && r != DType::f32 &&
        (out.dtype == DType::f32 || (out.dtype == DType::f16 && r == DType::bf16)))
      return default_tolerance(r, backend);
    return Case::tolerance(out, backend);
  }
  // The expert weights: gate_up [E, rows(), Dm] and down [E, Dm, I], scaled so that gate_up · x
  // and down · h are O(1).
  virtual void init_experts(Rng& rng, Slots& s) {
    const double a_in = std::sqrt(3.0 / p.Dm), a_out = std::sqrt(3.0 / p.I);
    fill_uniform(s.input("gate_up", p.wdt, {p.E, rows(), p.Dm}), rng, -a_in, a_in);
    fill_uniform(s.input("down", p.wdt, {p.E, p.Dm, p.I}), rng, -a_out, a_out);
  }
  // Expert ex's weights in f64: wi [rows(), Dm] (gate_up), wo [Dm, I] (down).
  virtual void expert_weights(const Slots& s, int64_t ex, std::vector<double>& wi,
                              std::vector<double>& wo) const {
    const int64_t R = rows() * p.Dm, D = p.Dm * p.I;
    wi.resize(R);
    wo.resize(D);
    for (int64_t i = 0; i < R; ++i) wi[i] = s["gate_up"].get(ex * R + i);
    for (int64_t i = 0; i < D; ++i) wo[i] = s["down"].get(ex * D + i);
  }
  // The arguments moe_experts and moe_experts_q share.
  template <class Args>
  void routing_args(Args& a, const Views& v) const {
    a.x = v.at("x");
    a.ids = v.at("ids");
    a.weights = v.at("weights");
    a.out = v.at("out");
    a.activation = p.activation;
    a.accumulate = p.accumulate;
  }
  void run(const Views& v, Context& ctx) override {
    MoeExperts a;
    routing_args(a, v);
    a.gate_up = v.at("gate_up");
    a.down = v.at("down");
    moe_experts(a, ctx);
  }
  void oracle(const Slots& s, Expected& e) override {
    const int64_t Dm = p.Dm, I = p.I;
    std::vector<double> out(p.T * Dm, 0.0);
    if (p.accumulate) out = s["out"].values();
    const std::vector<double> x = s["x"].values();
    // Each expert's weights in f64, converted when first used.
    std::vector<std::vector<double>> wi(p.E), wo(p.E);
    for (int64_t t = 0; t < p.T; ++t)
      for (int64_t j = 0; j < p.K; ++j) {
        const int64_t ex = static_cast<int64_t>(s["ids"].get(t * p.K + j));
        const double w = s["weights"].get(t * p.K + j);
        if (wi[ex].empty()) expert_weights(s, ex, wi[ex], wo[ex]);
        std::vector<double> h(I);
        for (int64_t i = 0; i < I; ++i) {
          double a = 0, b = 0;  // swiglu: a = gate row i, b = up row i; relu2: a = up row i
          for (int64_t d = 0; d < Dm; ++d) {
            a += wi[ex][i * Dm + d] * x[t * Dm + d];
            if (swiglu()) b += wi[ex][(I + i) * Dm + d] * x[t * Dm + d];
          }
          h[i] = swiglu() ? a * sigmoid64(a) * b : std::max(a, 0.0) * std::max(a, 0.0);
        }
        for (int64_t d = 0; d < Dm; ++d) {
          double y = 0;
          for (int64_t i = 0; i < I; ++i) y += wo[ex][d * I + i] * h[i];
          out[t * Dm + d] += w * y;
        }
      }
    e["out"] = out;
  }
};

// Perf only (hybrid-ops perf -b cuda).
struct MoeRoutePerfCase : MoeRouteCase {
  using MoeRouteCase::MoeRouteCase;
  std::string params() const override { return MoeRouteCase::params() + ",perf"; }
  bool perf_only() const override { return true; }
  void oracle(const Slots&, Expected&) override { fail("[moe_route perf case] has no oracle"); }
};

// Perf only: bytes() counts only the routed experts' weights (each distinct id once), the
// traffic a decode step cannot avoid.
struct MoeExpertsPerfCase : MoeExpertsCase {
  using MoeExpertsCase::MoeExpertsCase;
  // All 512 experts are 3 GiB: filled in parallel (perf only: no oracle reads them).
  void init_experts(Rng& rng, Slots& s) override {
    const double a_in = std::sqrt(3.0 / p.Dm), a_out = std::sqrt(3.0 / p.I);
    fill_uniform_fast(s.input("gate_up", p.wdt, {p.E, rows(), p.Dm}), rng.next_u64(), -a_in, a_in);
    fill_uniform_fast(s.input("down", p.wdt, {p.E, p.Dm, p.I}), rng.next_u64(), -a_out, a_out);
  }
  std::string params() const override { return MoeExpertsCase::params() + ",perf"; }
  bool perf_only() const override { return true; }
  void oracle(const Slots&, Expected&) override { fail("[moe_experts perf case] has no oracle"); }
  double bytes(const Slots& s) const override {
    const int64_t n = distinct_experts(s);
    return static_cast<double>(n) * static_cast<double>((rows() + p.I) * p.Dm) *
           static_cast<double>(dtype_size(p.wdt));
  }
};

// ---- moe_experts_q ---------------------------------------------------------------------------

// moe_experts with MLX-quantized experts: random packed codes with scales and biases (W about
// uniform in ±sqrt(3 / in), as the float cases), the oracle on the f64 dequantization.
struct MoeExpertsQCase : MoeExpertsCase {
  int bits, gs;
  DType sdt;  // scales and biases
  MoeExpertsQCase(ExpertsConfig p, int bits, int gs, DType sdt)
      : MoeExpertsCase(p), bits(bits), gs(gs), sdt(sdt) {}
  std::string op() const override { return "moe_experts_q"; }
  std::string weight_desc() const override {
    return str(",bits=", bits, ",group=", gs, ",scales=", dtype_name(sdt));
  }
  DType tc_dtype() const override { return p.act == DType::f16 ? DType::f16 : DType::bf16; }
  // The two quantized matrices: W [E, rows, in] of gate_up and of down.
  struct QuantMat {
    const char* name;
    int64_t rows, in;
  };
  std::array<QuantMat, 2> quant_mats() const {
    return {QuantMat{"gate_up", rows(), p.Dm}, QuantMat{"down", p.Dm, p.I}};
  }
  void init_experts(Rng& rng, Slots& s) override {
    for (const QuantMat& m : quant_mats()) {
      const std::string n = m.name;
      Slot& w = s.input(n + ".weight", DType::u32, {p.E, m.rows, packed_words(m.in, bits)});
      Slot& sc = s.input(n + ".scales", sdt, {p.E, m.rows, m.in / gs});
      Slot& bi = s.input(n + ".biases", sdt, {p.E, m.rows, m.in / gs});
      fill_quantized(w, sc, bi, rng, bits, std::sqrt(3.0 / static_cast<double>(m.in)));
    }
  }
  void expert_weights(const Slots& s, int64_t ex, std::vector<double>& wi,
                      std::vector<double>& wo) const override {
    auto dequant = [&](const std::string& n, int64_t rows, int64_t in) {
      const int64_t nw = packed_words(in, bits), ng = in / gs;
      std::vector<double> words(rows * nw), sc(rows * ng), bi(rows * ng);
      for (int64_t i = 0; i < rows * nw; ++i) words[i] = s[n + ".weight"].get(ex * rows * nw + i);
      for (int64_t i = 0; i < rows * ng; ++i) {
        sc[i] = s[n + ".scales"].get(ex * rows * ng + i);
        bi[i] = s[n + ".biases"].get(ex * rows * ng + i);
      }
      return oracle_dequantize(words, sc, bi, rows, in, bits, gs);
    };
    wi = dequant("gate_up", rows(), p.Dm);
    wo = dequant("down", p.Dm, p.I);
  }
  void run(const Views& v, Context& ctx) override {
    MoeExpertsQ a;
    routing_args(a, v);
    for (auto [q, n] : {std::pair{&a.gate_up, "gate_up"}, {&a.down, "down"}}) {
      const std::string name = n;
      q->weight = v.at(name + ".weight");
      q->scales = v.at(name + ".scales");
      q->biases = v.at(name + ".biases");
      q->bits = bits;
      q->group_size = gs;
    }
    moe_experts_q(a, ctx);
  }
};

// Perf only: the decode shape with all 512 experts in MLX 4-bit (~0.9 GiB of codes, scales and
// biases, filled in parallel); bytes() counts the routed experts' codes, scales and biases.
struct MoeExpertsQPerfCase : MoeExpertsQCase {
  using MoeExpertsQCase::MoeExpertsQCase;
  void init_experts(Rng& rng, Slots& s) override {
    for (const QuantMat& m : quant_mats()) {
      const std::string n = m.name;
      const double range = std::sqrt(3.0 / static_cast<double>(m.in)), levels = (1 << bits) - 1;
      fill_uniform_fast(s.input(n + ".weight", DType::u32, {p.E, m.rows, packed_words(m.in, bits)}),
                        rng.next_u64(), 0.0, 4294967295.0);
      fill_uniform_fast(s.input(n + ".scales", sdt, {p.E, m.rows, m.in / gs}), rng.next_u64(),
                        1.2 * range / levels, 2.0 * range / levels);
      fill_uniform_fast(s.input(n + ".biases", sdt, {p.E, m.rows, m.in / gs}), rng.next_u64(),
                        -range, -0.6 * range);
    }
  }
  std::string params() const override { return MoeExpertsQCase::params() + ",perf"; }
  bool perf_only() const override { return true; }
  void oracle(const Slots&, Expected&) override { fail("[moe_experts_q perf case] has no oracle"); }
  double bytes(const Slots& s) const override {
    const int64_t n = distinct_experts(s);
    // Per expert and matrix: rows x (in * bits / 8 bytes of codes + 2 x in / gs scales / biases).
    const auto per_row = [&](int64_t in) {
      return static_cast<double>(in) * bits / 8.0 +
             2.0 * static_cast<double>(in / gs) * static_cast<double>(dtype_size(sdt));
    };
    return static_cast<double>(n) *
           (static_cast<double>(rows()) * per_row(p.Dm) + static_cast<double>(p.Dm) * per_row(p.I));
  }
};

void route(CaseList& cases, RouteConfig p) {
  cases.push_back(std::make_unique<MoeRouteCase>(p));
}
void experts(CaseList& cases, ExpertsConfig p) {
  cases.push_back(std::make_unique<MoeExpertsCase>(p));
}
void experts_q(CaseList& cases, ExpertsConfig p, int bits, int gs, DType sdt) {
  cases.push_back(std::make_unique<MoeExpertsQCase>(p, bits, gs, sdt));
}

}  // namespace

void add_moe_cases(CaseList& cases) {
  const DType f32 = DType::f32, bf16 = DType::bf16, f16 = DType::f16;
  // moe_route. Qwen3-Next-80B-A3B / Qwen3.5-397B: 512 experts, top-10, softmax, renormalised;
  // Qwen3.5-35B: 256 experts top-8. Decode (T=1), a few tokens, a prefill chunk.
  for (int64_t T : {1, 3, 65}) route(cases, {T, 512, 10, bf16});
  route(cases, {3, 512, 10, f32});
  route(cases, {7, 256, 8, bf16, bf16});
  // Router logits read out of a fused [T, E + 1] projection (router | shared-expert gate).
  route(cases, {7, 512, 10, bf16, f32, MoeScore::softmax, true, false, 1, 1, 1.0, true});
  // E=8 top-2 (Mixtral-sized) with and without renormalisation; tails and k = E, k = 1.
  for (bool renorm : {true, false}) route(cases, {7, 8, 2, f32, f32, MoeScore::softmax, renorm});
  route(cases, {257, 8, 2, f16, f16, MoeScore::softmax, false});
  route(cases, {63, 7, 7, f32, f32, MoeScore::softmax, true});
  route(cases, {5, 33, 1, f32, f32, MoeScore::softmax, false});
  // Sigmoid scores (Nemotron-H, DeepSeek-V3 style): plain; with correction bias and scaling;
  // with bias and grouped selection (256 experts in 8 groups, 4 kept, top-8, scale 2.5).
  route(cases, {7, 64, 6, bf16, f32, MoeScore::sigmoid, true});
  route(cases, {7, 128, 6, bf16, f32, MoeScore::sigmoid, true, true, 1, 1, 2.5});
  route(cases, {5, 128, 6, f32, f32, MoeScore::sigmoid, false, true, 1, 1, 1.0});
  route(cases, {7, 256, 8, f32, f32, MoeScore::sigmoid, true, true, 8, 4, 2.5});
  route(cases, {3, 64, 4, f32, bf16, MoeScore::softmax, false, false, 4, 2, 1.0});
  route(cases, {3, 12, 5, f32, f32, MoeScore::sigmoid, true, false, 6, 3, 1.0});

  // moe_experts. Qwen3-Next shapes (Dm=2048, I=512, top-10) with 16 experts (the weights of all
  // 512 are 3 GiB), at T=1 and 3.
  experts(cases, {1, 16, 10, 2048, 512, bf16, bf16});
  experts(cases, {3, 16, 10, 2048, 512, f32, bf16});
  // All 512 experts, top-10, on small matrices.
  experts(cases, {3, 512, 10, 64, 32, bf16, bf16});
  // E=8 top-2, odd sizes, every weight dtype; many tokens on small shapes.
  for (DType w : {f32, bf16, f16}) experts(cases, {7, 8, 2, 96, 33, f32, w});
  experts(cases, {65, 8, 2, 96, 33, bf16, bf16});
  experts(cases, {257, 8, 2, 63, 17, f32, f32});
  experts(cases, {1, 1, 1, 7, 1, f32, f32});
  // Ids given directly: int64, one expert twice in a token; strided x / out; accumulate.
  experts(cases, {7, 8, 2, 96, 33, f32, f32, MoeActivation::swiglu, DType::i64, true});
  experts(cases, {7, 8, 3, 96, 33, f16, bf16, MoeActivation::swiglu, DType::i32, false, true});
  experts(cases,
          {5, 8, 2, 96, 33, bf16, bf16, MoeActivation::swiglu, DType::i32, false, false, true});
  // Non-gated relu² experts (Nemotron-H).
  experts(cases, {7, 8, 2, 96, 33, f32, f32, MoeActivation::relu2});
  experts(cases, {3, 64, 6, 256, 80, bf16, bf16, MoeActivation::relu2, DType::i32, false, true});

  // CUDA paths: x converted by its own kernel (T·Dm > 65536); E = 1024 (route's shared memory
  // above 48 KiB).
  experts(cases, {40, 8, 2, 2048, 32, bf16, bf16});
  // Decode (T = 1: the CUDA direct path, no sort): an expert chosen twice with i64 ids and
  // accumulate; relu2 with f16 weights; f32 weights whose rows are not 16-byte vectors.
  experts(cases,
          {1, 8, 3, 96, 33, bf16, bf16, MoeActivation::swiglu, DType::i64, true, false, true});
  experts(cases, {1, 64, 6, 256, 80, f16, f16, MoeActivation::relu2});
  experts(cases, {1, 32, 4, 90, 37, f32, f32, MoeActivation::swiglu, DType::i32, false, true});
  // Decode, v4's fused down + combine: Dm = 200 (the last CTA of 16 rows has 8), k = 17 (68
  // tasks over 8 warps).
  experts(cases, {1, 64, 4, 200, 520, bf16, bf16});
  experts(cases, {1, 32, 17, 96, 40, f16, bf16});
  // Decode, v5 (down + combine launched with programmatic dependent launch, its rows prefetched
  // into L2 before griddepcontrol.wait): bf16 rows of 90 bytes (not 16-byte vectors: one
  // prefetch per 128-byte line, rows straddling lines) with Dm = 72 (the last CTA has 8 rows);
  // a 65552-byte down row (I = 32776: two bulk prefetches of <= 64 KiB); Dm = 12296 (x above the
  // direct path's 48 KiB of shared memory: v5 refuses, the sorted path runs).
  experts(cases, {1, 16, 5, 72, 45, bf16, bf16});
  experts(cases, {1, 4, 2, 16, 32776, bf16, bf16});
  experts(cases, {1, 4, 2, 12296, 8, bf16, bf16});
  // f32 rows (160 bytes), i64 ids, one expert twice, strided x and accumulate at T = 1 (written
  // for cuda_v5's staged path, measured no faster in session 5 and kept on next/moe-fused).
  experts(cases, {1, 8, 3, 96, 40, f32, f32, MoeActivation::swiglu, DType::i64, true, true, true});
  // Decode, v6 (T = 1, 16-byte rows; the cases above with such rows take it too): Dm = 4096 (the
  // gate_up warp's rows in two chunks of 2048), I = 64; 160 KB of staged rows at k 10, I 1024
  // (4 rows a CTA instead of 8).
  experts(cases, {1, 16, 4, 4096, 64, bf16, bf16});
  experts(cases, {1, 12, 10, 64, 1024, bf16, bf16});
  // Uneven routing: expert 0 in all 21 tokens (3 batches of 8 pairs, the last of 5), the others
  // with 1..3 pairs; Dm = 200 (13 down-row groups of 4 with a tail) and I = 520 (the unrolled
  // loads past the row end); relu2 with f16 weights and scalar (unaligned) rows.
  experts(cases, {21, 64, 4, 200, 520, bf16, bf16, MoeActivation::swiglu, DType::i32, false, false,
                  false, true});
  experts(cases, {21, 16, 3, 90, 37, f32, f16, MoeActivation::relu2, DType::i64, false, true, false,
                  true});
  // moe_experts_q: MLX 4-bit Qwen3-Next experts (group 64, bf16 scales) at decode and for a few
  // tokens; 8 bits, group 32, f32 scales; relu2 with group 128, f16 scales, i64 ids, one expert
  // twice, strided x / out and accumulate; many tokens on small shapes.
  experts_q(cases, {1, 16, 10, 2048, 512, bf16, bf16}, 4, 64, bf16);
  experts_q(cases, {3, 16, 10, 2048, 512, bf16, bf16}, 4, 64, bf16);
  experts_q(cases, {3, 16, 6, 256, 128, f32, bf16}, 8, 32, f32);
  experts_q(cases,
            {7, 8, 2, 128, 256, f16, bf16, MoeActivation::relu2, DType::i64, true, true, true}, 4,
            128, f16);
  experts_q(cases, {65, 8, 2, 64, 32, bf16, bf16}, 4, 32, bf16);
  // The CUDA decode path (v2, T = 1) on 16-byte chunks: 8 bits with f32 x and scales (rows of
  // 16 and 12 chunks: 16 and 8 lanes a row, the last with a tail); relu2, group 128, f16
  // scales, i64 ids, one expert twice, strided x / out and accumulate (12 and 4 chunks a row);
  // 8-bit swiglu at Dm 1024; Qwen3.5-397B's 4-bit experts (Dm 4096, I 1024: two batches of
  // chunk loads a row).
  experts_q(cases, {1, 16, 6, 256, 96, f32, bf16}, 8, 32, f32);
  experts_q(cases,
            {1, 8, 3, 384, 128, f16, bf16, MoeActivation::relu2, DType::i64, true, true, true}, 4,
            128, f16);
  experts_q(cases, {1, 16, 4, 1024, 256, bf16, bf16}, 8, 64, bf16);
  experts_q(cases, {1, 24, 10, 4096, 1024, bf16, bf16}, 4, 64, bf16);
  // The CUDA prefill path on tensor cores (cuda_tc: T >= 2 and T·k >= 128 pairs, 16-bit or
  // quantized weights, Dm and I multiples of 8): expert 0 in all 300 tokens (3 tiles of 128, 128
  // and 44 positions); f16 relu2 with i64 ids, one expert twice, accumulate, Dm 200 (a reduction
  // tail of 8 in gate_up, 72 rows in down's last block) and I 96 (32 units in gate_up's last
  // block, a tail of 32 in down); Qwen3-Next's expert shape on 32 experts.
  experts(cases, {300, 16, 4, 256, 128, bf16, bf16, MoeActivation::swiglu, DType::i32, false, false,
                  false, true});
  experts(cases,
          {90, 32, 6, 200, 96, f16, f16, MoeActivation::relu2, DType::i64, true, false, true});
  experts(cases, {64, 32, 8, 1024, 512, bf16, bf16});
  // f32 x and out (the engine's activations) with bf16 weights, x rows strided (x converted to
  // a bf16 copy first): 512 pairs.
  experts(cases, {64, 16, 8, 256, 64, f32, bf16, MoeActivation::swiglu, DType::i32, false, true});
  // The same for 4 / 8-bit experts (codes dequantized into the tile): skewed 4-bit group 64;
  // 8-bit group 32 relu2 with f32 scales, Dm 224 (the last reduction stage half codes, half
  // zeros); 4-bit group 128 with f16 scales; f32 x and out.
  experts_q(cases,
            {300, 16, 4, 256, 128, bf16, bf16, MoeActivation::swiglu, DType::i32, false, false,
             false, true},
            4, 64, bf16);
  experts_q(cases,
            {70, 32, 6, 224, 96, f16, f16, MoeActivation::relu2, DType::i64, true, false, true}, 8,
            32, f32);
  experts_q(cases, {64, 32, 8, 1024, 512, bf16, bf16}, 4, 128, f16);
  experts_q(cases, {40, 16, 8, 256, 128, f32, bf16}, 4, 64, bf16);
  route(cases, {3, 1024, 8, f32});
  // k above one warp's 32 lanes (the CUDA kernel places the chosen ids 32 a pass), E = 1000 not
  // a multiple of 32 (the last lanes hold 31 experts), with groups.
  route(cases, {4, 1000, 40, f32, f32, MoeScore::sigmoid, true, false, 8, 4, 1.0});
  route(cases, {5, 90, 45, f32, f32, MoeScore::softmax, true});
  // The shared expert folded in: weight 1 (Nemotron-H's shared experts), a sigmoid gate (Qwen),
  // the gate strided as in the engine's fused router [T, E + 1].
  route(cases, {6, 64, 4, f32, f32, MoeScore::sigmoid, true, true, 8, 2, 2.5, false, 1});
  route(cases, {9, 512, 10, bf16, f32, MoeScore::softmax, true, false, 1, 1, 1.0, false, 2});
  route(cases, {7, 512, 10, f32, bf16, MoeScore::softmax, true, false, 1, 1, 1.0, true, 3});
  // k = 257 above the v3 combine's 256 pairs per token: the CUDA v2 variant runs these (sorted
  // and direct paths), so the fallback stays covered.
  experts(cases, {2, 260, 257, 16, 8, f32, f32});
  experts(cases, {1, 260, 257, 16, 8, bf16, bf16});

  // Perf only: Qwen3-Next routing of a 4096-token prefill chunk; all 512 experts (3 GiB of bf16
  // weights, uniform fill) at T = 1 to 64 (decode batches; 16 and 32 around the tensor-core
  // path's threshold) and 4096 (a prefill chunk), and 4-bit at T = 1, 8, 64 and 4096.
  // One token with f32 logits (the engine's decode step) and a 4096-token prefill chunk.
  cases.push_back(std::make_unique<MoeRoutePerfCase>(RouteConfig{1, 512, 10}));
  cases.push_back(std::make_unique<MoeRoutePerfCase>(RouteConfig{4096, 512, 10, bf16}));
  for (int64_t T : {1, 8, 16, 32, 64, 4096})
    cases.push_back(
        std::make_unique<MoeExpertsPerfCase>(ExpertsConfig{T, 512, 10, 2048, 512, bf16, bf16}));
  // The same with MLX 4-bit group-64 experts (Qwen3-Next's published 4-bit checkpoints; against
  // the bf16 lines above: whether the engine may keep the experts quantized by default).
  for (int64_t T : {1, 8, 64, 4096})
    cases.push_back(std::make_unique<MoeExpertsQPerfCase>(
        ExpertsConfig{T, 512, 10, 2048, 512, bf16, bf16}, 4, 64, bf16));
}

}  // namespace hybrid::test
