// Cases: argmax, top_k, sample_rows, softmax_mass, repetition_penalty. Oracle in f64 (the values
// are exact in f64, so the oracle's choice is the op's).
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "hybrid/ops/sampling.h"
#include "ops/cases.h"
#include "ops/harness.h"

namespace hybrid::test {

namespace {

// What a row holds besides uniform values in [-8, 8).
enum class Row {
  plain,    // only the uniform values
  tie,      // the maximum at three ids (the lowest one wins), one of them in the last chunk
  last,     // the maximum at the row's last id
  neg_inf,  // -inf at a third of the ids (masked logits)
  all_neg,  // every entry -inf: no choice (-1)
  nan,      // one NaN (-1)
  pos_inf,  // one +inf (-1)
  plateau,  // the maximum at 40 ids spread over the row (top_k: ties across its boundary)
  zeros,    // every entry below -1 but -0 / +0 at five ids (equal for the order)
};

const char* row_name(Row r) {
  switch (r) {
    case Row::plain:
      return "plain";
    case Row::tie:
      return "tie";
    case Row::last:
      return "last";
    case Row::neg_inf:
      return "neg_inf";
    case Row::all_neg:
      return "all_neg_inf";
    case Row::nan:
      return "nan";
    case Row::pos_inf:
      return "pos_inf";
    case Row::plateau:
      return "plateau";
    default:
      return "zeros";
  }
}

std::string rows_name(const std::vector<Row>& rows) {
  std::string kinds;
  for (Row r : rows) kinds += std::string(kinds.empty() ? "" : "+") + row_name(r);
  return kinds;
}

// x [N, V]: uniform values in [-8, 8), then row n made of kind rows[n % rows.size()].
Slot& fill_rows(Rng& rng, Slots& s, int64_t N, int64_t V, DType dt, const std::vector<Row>& rows,
                bool strided) {
  Slot& x = strided ? s.strided("x", Role::in, dt, {N, V}, {V + 5, 1}, 3, N * (V + 5) + 3)
                    : s.input("x", dt, {N, V});
  fill_uniform(x, rng, -8.0, 8.0);
  const double inf = std::numeric_limits<double>::infinity();
  for (int64_t n = 0; n < N; ++n) {
    const int64_t base = n * V;
    switch (rows[static_cast<size_t>(n) % rows.size()]) {
      case Row::plain:
        break;
      case Row::tie:  // 9 is above every uniform value; ids V/3, V/2 and V-1 (lowest: V/3)
        for (int64_t v : {V - 1, V / 2, V / 3}) x.set(base + v, 9.0);
        break;
      case Row::last:
        x.set(base + V - 1, 9.0);
        break;
      case Row::neg_inf:
        for (int64_t v = 0; v < V; v += 3) x.set(base + v, -inf);
        break;
      case Row::all_neg:
        for (int64_t v = 0; v < V; ++v) x.set(base + v, -inf);
        break;
      case Row::nan:
        x.set(base + rng.randint(0, V - 1), std::nan(""));
        break;
      case Row::pos_inf:
        x.set(base + rng.randint(0, V - 1), inf);
        break;
      case Row::plateau:
        for (int64_t j = 0; j < 40; ++j) x.set(base + (j * 7919 + 13) % V, 9.0);
        break;
      case Row::zeros:
        for (int64_t v = 0; v < V; ++v) x.set(base + v, -1.0 - std::fabs(x.get(base + v)));
        for (int64_t j = 0; j < 5; ++j) x.set(base + (j * 104729 + 5) % V, j % 2 ? 0.0 : -0.0);
        break;
    }
  }
  return x;
}

// The op on the slots "x" and "out" (every argmax case).
void run_argmax(const Views& v, Context& ctx) {
  Argmax a;
  a.x = v.at("x");
  a.out = v.at("out");
  argmax(a, ctx);
}

// out[n] = the lowest v of row n's maximum; -1 for a row with a NaN / +inf, or only -inf.
struct ArgmaxCase : Case {
  int64_t N, V;
  DType dt;
  std::vector<Row> rows;  // row n's kind: rows[n % rows.size()]
  bool strided;
  ArgmaxCase(int64_t N, int64_t V, DType dt, std::vector<Row> rows, bool strided)
      : N(N), V(V), dt(dt), rows(std::move(rows)), strided(strided) {}
  std::string op() const override { return "argmax"; }
  std::string params() const override {
    return str("N=", N, ",V=", V, ",x=", dtype_name(dt), ",rows=", rows_name(rows),
               strided ? ",strided" : "");
  }
  void init(Rng& rng, Slots& s) override {
    fill_rows(rng, s, N, V, dt, rows, strided);
    s.output("out", DType::i32, {N});
  }
  void run(const Views& v, Context& ctx) override { run_argmax(v, ctx); }
  void oracle(const Slots& s, Expected& e) override {
    std::vector<double>& out = e["out"];
    for (int64_t n = 0; n < N; ++n) {
      int64_t best = -1;
      double best_v = -std::numeric_limits<double>::infinity();
      bool bad = false;
      for (int64_t v = 0; v < V; ++v) {
        const double x = s["x"].get(n * V + v);
        if (std::isnan(x) || x == std::numeric_limits<double>::infinity()) bad = true;
        if (x > best_v) best_v = x, best = v;
      }
      out.push_back(static_cast<double>(bad || best < 0 ? -1 : best));
    }
  }
};

// Benchmark shape (perf only): the greedy decode step of Qwen3-Next's lm head, f32 logits
// [N, 151936], at N 1 and 64.
struct ArgmaxPerfCase : Case {
  int64_t N, V = 151936;
  explicit ArgmaxPerfCase(int64_t N) : N(N) {}
  std::string op() const override { return "argmax"; }
  std::string params() const override { return str("N=", N, ",V=", V, ",x=f32,perf"); }
  bool perf_only() const override { return true; }
  void init(Rng&, Slots& s) override {
    fill_uniform_fast(s.input("x", DType::f32, {N, V}), 5, -8.0, 8.0);
    s.output("out", DType::i32, {N});
  }
  void run(const Views& v, Context& ctx) override { run_argmax(v, ctx); }
  void oracle(const Slots&, Expected&) override { fail("[argmax perf case] has no oracle"); }
  double bytes(const Slots&) const override { return static_cast<double>(N) * (V * 4.0 + 4.0); }
};

// The op on the slots "x", "ids" and "values" (every top_k case).
void run_top_k(const Views& v, Context& ctx) {
  top_k({.x = v.at("x"), .ids = v.at("ids"), .values = v.at("values")}, ctx);
}

// ids [N, k], values [N, k]: row n's k largest by (value desc, id asc), NaN above +inf, -0 = +0.
struct TopKCase : Case {
  int64_t N, V, k;
  DType dt;
  std::vector<Row> rows;
  bool strided;
  TopKCase(int64_t N, int64_t V, int64_t k, DType dt, std::vector<Row> rows, bool strided)
      : N(N), V(V), k(k), dt(dt), rows(std::move(rows)), strided(strided) {}
  std::string op() const override { return "top_k"; }
  std::string params() const override {
    return str("N=", N, ",V=", V, ",k=", k, ",x=", dtype_name(dt), ",rows=", rows_name(rows),
               strided ? ",strided" : "");
  }
  void init(Rng& rng, Slots& s) override {
    fill_rows(rng, s, N, V, dt, rows, strided);
    s.output("ids", DType::i32, {N, k});
    s.output("values", DType::f32, {N, k});
  }
  void run(const Views& v, Context& ctx) override { run_top_k(v, ctx); }
  void oracle(const Slots& s, Expected& e) override {
    for (int64_t n = 0; n < N; ++n) {
      std::vector<double> x(static_cast<size_t>(V));
      for (int64_t v = 0; v < V; ++v) x[v] = s["x"].get(n * V + v);
      std::vector<int64_t> order(static_cast<size_t>(V));
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
        const bool na = std::isnan(x[a]), nb = std::isnan(x[b]);
        if (na != nb) return na;    // NaN first
        return !na && x[a] > x[b];  // then larger (stable: lower id among equal, -0 == +0)
      });
      for (int64_t j = 0; j < k; ++j) {
        e["ids"].push_back(static_cast<double>(order[j]));
        e["values"].push_back(x[order[j]]);
      }
    }
  }
};

// Benchmark shape (perf only): a sampled decode step's candidates at Qwen3-Next's vocab, f32
// logits [N, 151936], k 40 (llama.cpp's default top-k), N 1 and 64.
struct TopKPerfCase : Case {
  int64_t N, V = 151936, k = 40;
  explicit TopKPerfCase(int64_t N) : N(N) {}
  std::string op() const override { return "top_k"; }
  std::string params() const override { return str("N=", N, ",V=", V, ",k=", k, ",x=f32,perf"); }
  bool perf_only() const override { return true; }
  void init(Rng&, Slots& s) override {
    fill_uniform_fast(s.input("x", DType::f32, {N, V}), 5, -8.0, 8.0);
    s.output("ids", DType::i32, {N, k});
    s.output("values", DType::f32, {N, k});
  }
  void run(const Views& v, Context& ctx) override { run_top_k(v, ctx); }
  void oracle(const Slots&, Expected&) override { fail("[top_k perf case] has no oracle"); }
  double bytes(const Slots&) const override { return static_cast<double>(N) * (V * 4.0 + k * 8.0); }
};

// out[n] = Sampler's draw on row n (temperature, min-p) with u = draws[n] · 2^-53; -1 for a refused
// row. Draws: row 0 gets 0 (the first kept id), row 1 gets 2^53 − 1 (the last kept id, or the
// rounding fallback), the others random.
struct SampleRowsCase : Case {
  int64_t N, V;
  DType dt;
  std::vector<Row> rows;
  float temperature, min_p;
  bool strided;
  SampleRowsCase(int64_t N, int64_t V, DType dt, std::vector<Row> rows, float temperature,
                 float min_p, bool strided)
      : N(N),
        V(V),
        dt(dt),
        rows(std::move(rows)),
        temperature(temperature),
        min_p(min_p),
        strided(strided) {}
  std::string op() const override { return "sample_rows"; }
  std::string params() const override {
    return str("N=", N, ",V=", V, ",x=", dtype_name(dt), ",T=", temperature,
               min_p > 0 ? str(",min_p=", min_p) : "", ",rows=", rows_name(rows),
               strided ? ",strided" : "");
  }
  void init(Rng& rng, Slots& s) override {
    fill_rows(rng, s, N, V, dt, rows, strided);
    Slot& d = s.input("draws", DType::i64, {N});
    for (int64_t n = 0; n < N; ++n)
      d.set(n, n == 0   ? 0.0
               : n == 1 ? static_cast<double>((int64_t{1} << 53) - 1)
                        : static_cast<double>(rng.next_u64() >> 11));
    s.output("out", DType::i32, {N});
  }
  void run(const Views& v, Context& ctx) override {
    sample_rows({.x = v.at("x"),
                 .draws = v.at("draws"),
                 .out = v.at("out"),
                 .temperature = temperature,
                 .min_p = min_p},
                ctx);
  }
  void oracle(const Slots& s, Expected& e) override {
    const double T = temperature, mp = min_p;  // as the op sees them (f32)
    for (int64_t n = 0; n < N; ++n) {
      std::vector<double> x(static_cast<size_t>(V));
      double zmax = -std::numeric_limits<double>::infinity();
      bool refused = false;
      for (int64_t v = 0; v < V; ++v) {
        x[v] = s["x"].get(n * V + v);
        refused |= std::isnan(x[v]) || x[v] == std::numeric_limits<double>::infinity();
        if (!std::isnan(x[v])) zmax = std::max(zmax, x[v]);
      }
      if (refused || zmax == -std::numeric_limits<double>::infinity()) {
        e["out"].push_back(-1);
        continue;
      }
      std::vector<double> w(static_cast<size_t>(V));
      double total = 0;
      for (int64_t v = 0; v < V; ++v) {
        const double ev = std::exp((x[v] - zmax) / T);
        w[v] = ev > 0 && ev >= mp ? ev : 0.0;
        total += w[v];
      }
      const double u = s["draws"].get(n) * 0x1.0p-53;
      double cumulative = 0;
      int64_t pick = -1;
      for (int64_t v = 0; v < V && pick < 0; ++v) {
        if (!(w[v] > 0)) continue;
        cumulative += w[v] / total;
        if (u < cumulative) pick = v;
      }
      if (pick < 0)
        for (int64_t v = V - 1; v >= 0 && pick < 0; --v)
          if (w[v] > 0) pick = v;
      e["out"].push_back(static_cast<double>(pick));
    }
  }
};

// Benchmark shape (perf only): a temperature-only sampled step at Qwen3-Next's vocab, N 1 and 64.
struct SampleRowsPerfCase : Case {
  int64_t N, V = 151936;
  explicit SampleRowsPerfCase(int64_t N) : N(N) {}
  std::string op() const override { return "sample_rows"; }
  std::string params() const override { return str("N=", N, ",V=", V, ",x=f32,T=0.8,perf"); }
  bool perf_only() const override { return true; }
  void init(Rng&, Slots& s) override {
    fill_uniform_fast(s.input("x", DType::f32, {N, V}), 5, -8.0, 8.0);
    Slot& d = s.input("draws", DType::i64, {N});
    for (int64_t n = 0; n < N; ++n) d.set(n, static_cast<double>(n * 997 + 12345));
    s.output("out", DType::i32, {N});
  }
  void run(const Views& v, Context& ctx) override {
    sample_rows({.x = v.at("x"), .draws = v.at("draws"), .out = v.at("out"), .temperature = 0.8f},
                ctx);
  }
  void oracle(const Slots&, Expected&) override { fail("[sample_rows perf case] has no oracle"); }
  double bytes(const Slots&) const override { return static_cast<double>(N) * (V * 8.0 + 12.0); }
};

// out[n] = Σ_v exp((x_v − max x) / T) in f64; NaN for a row with a NaN / +inf, or only -inf.
struct SoftmaxMassCase : Case {
  int64_t N, V;
  DType dt;
  std::vector<Row> rows;
  float temperature;
  bool strided;
  SoftmaxMassCase(int64_t N, int64_t V, DType dt, std::vector<Row> rows, float temperature,
                  bool strided)
      : N(N), V(V), dt(dt), rows(std::move(rows)), temperature(temperature), strided(strided) {}
  std::string op() const override { return "softmax_mass"; }
  std::string params() const override {
    return str("N=", N, ",V=", V, ",x=", dtype_name(dt), ",T=", temperature,
               ",rows=", rows_name(rows), strided ? ",strided" : "");
  }
  void init(Rng& rng, Slots& s) override {
    fill_rows(rng, s, N, V, dt, rows, strided);
    s.output("out", DType::f64, {N});
  }
  void run(const Views& v, Context& ctx) override {
    softmax_mass({.x = v.at("x"), .out = v.at("out"), .temperature = temperature}, ctx);
  }
  void oracle(const Slots& s, Expected& e) override {
    const double T = temperature, inf = std::numeric_limits<double>::infinity();
    for (int64_t n = 0; n < N; ++n) {
      double zmax = -inf;
      bool refused = false;
      for (int64_t v = 0; v < V; ++v) {
        const double x = s["x"].get(n * V + v);
        refused |= std::isnan(x) || x == inf;
        if (!std::isnan(x)) zmax = std::max(zmax, x);
      }
      if (refused || zmax == -inf) {
        e["out"].push_back(std::nan(""));
        continue;
      }
      double total = 0;
      for (int64_t v = 0; v < V; ++v) total += std::exp((s["x"].get(n * V + v) - zmax) / T);
      e["out"].push_back(total);
    }
  }
};

struct SoftmaxMassPerfCase : Case {
  int64_t N, V = 151936;
  explicit SoftmaxMassPerfCase(int64_t N) : N(N) {}
  std::string op() const override { return "softmax_mass"; }
  std::string params() const override { return str("N=", N, ",V=", V, ",x=f32,T=0.8,perf"); }
  bool perf_only() const override { return true; }
  void init(Rng&, Slots& s) override {
    fill_uniform_fast(s.input("x", DType::f32, {N, V}), 5, -8.0, 8.0);
    s.output("out", DType::f64, {N});
  }
  void run(const Views& v, Context& ctx) override {
    softmax_mass({.x = v.at("x"), .out = v.at("out"), .temperature = 0.8f}, ctx);
  }
  void oracle(const Slots&, Expected&) override { fail("[softmax_mass perf case] has no oracle"); }
  // The row read twice (chunk maxima, then the sums; the second from L2).
  double bytes(const Slots&) const override { return static_cast<double>(N) * (V * 8.0 + 8.0); }
};

// x[n, id] = x > 0 ? x / penalty : x · penalty for the first counts[n] (distinct) ids of row n, in
// place. Counts: row 0 none, row 1 all H, the others random; ids drawn without repeats.
struct RepetitionPenaltyCase : Case {
  int64_t N, V, H;
  float penalty;
  bool strided;
  RepetitionPenaltyCase(int64_t N, int64_t V, int64_t H, float penalty, bool strided)
      : N(N), V(V), H(H), penalty(penalty), strided(strided) {}
  std::string op() const override { return "repetition_penalty"; }
  std::string params() const override {
    return str("N=", N, ",V=", V, ",H=", H, ",penalty=", penalty, strided ? ",strided" : "");
  }
  void init(Rng& rng, Slots& s) override {
    Slot& x = strided
                  ? s.strided("x", Role::inout, DType::f32, {N, V}, {V + 3, 1}, 1, N * (V + 3) + 1)
                  : s.inout("x", DType::f32, {N, V});
    fill_uniform(x, rng, -8.0, 8.0);
    Slot& ids = s.input("ids", DType::i32, {N, H});
    Slot& counts = s.input("counts", DType::i32, {N});
    for (int64_t n = 0; n < N; ++n) {
      std::vector<int64_t> pool(static_cast<size_t>(V));
      std::iota(pool.begin(), pool.end(), 0);
      for (int64_t j = 0; j < H; ++j) {  // a partial Fisher-Yates: H distinct ids
        std::swap(pool[j], pool[j + rng.randint(0, V - 1 - j)]);
        ids.set(n * H + j, static_cast<double>(pool[j]));
      }
      counts.set(n, static_cast<double>(n == 0 ? 0 : n == 1 ? H : rng.randint(0, H)));
    }
  }
  void run(const Views& v, Context& ctx) override {
    repetition_penalty(
        {.x = v.at("x"), .ids = v.at("ids"), .counts = v.at("counts"), .penalty = penalty}, ctx);
  }
  void oracle(const Slots& s, Expected& e) override {
    std::vector<double> x = s["x"].values();
    for (int64_t n = 0; n < N; ++n)
      for (int64_t j = 0; j < static_cast<int64_t>(s["counts"].get(n)); ++j) {
        double& v = x[n * V + static_cast<int64_t>(s["ids"].get(n * H + j))];
        v = v > 0 ? static_cast<float>(v) / penalty : static_cast<float>(v) * penalty;
      }
    e["x"] = x;
  }
};

}  // namespace

void add_sampling_cases(CaseList& cases) {
  const DType f32 = DType::f32, bf16 = DType::bf16, f16 = DType::f16;
  using R = Row;
  // Qwen3-Next's vocab (151936: 64 chunks on CUDA) at decode batches 1 and 3, every row kind.
  cases.push_back(std::make_unique<ArgmaxCase>(1, 151936, f32, std::vector<R>{R::tie}, false));
  cases.push_back(std::make_unique<ArgmaxCase>(
      7, 151936, f32,
      std::vector<R>{R::plain, R::tie, R::last, R::neg_inf, R::all_neg, R::nan, R::pos_inf},
      false));
  cases.push_back(std::make_unique<ArgmaxCase>(3, 151936, bf16,
                                               std::vector<R>{R::tie, R::neg_inf, R::plain}, true));
  // Small and odd vocabularies: one chunk, a chunk tail, one entry; f16; many rows.
  cases.push_back(std::make_unique<ArgmaxCase>(5, 1, f32, std::vector<R>{R::plain}, false));
  cases.push_back(std::make_unique<ArgmaxCase>(
      4, 2049, f16, std::vector<R>{R::tie, R::last, R::nan, R::all_neg}, false));
  cases.push_back(std::make_unique<ArgmaxCase>(64, 512, bf16,
                                               std::vector<R>{R::plain, R::tie, R::neg_inf}, true));
  cases.push_back(
      std::make_unique<ArgmaxCase>(2, 131073, f32, std::vector<R>{R::last, R::pos_inf}, false));
  for (int64_t N : {1, 64}) cases.push_back(std::make_unique<ArgmaxPerfCase>(N));

  // top_k: Qwen3-Next's vocab at k 40 (llama.cpp's default) over every row kind; the boundary
  // among equal values (plateau: 40 equal at k 10 and 64; tie: 3 equal at k 2); signed zeros; k
  // above the finite entries (neg_inf rows at k 1024, all -inf rows); k 1 and k = V; strided bf16
  // and f16 rows.
  auto topk = [&](int64_t N, int64_t V, int64_t k, DType dt, std::vector<R> rows, bool strided) {
    cases.push_back(std::make_unique<TopKCase>(N, V, k, dt, std::move(rows), strided));
  };
  topk(
      9, 151936, 40, f32,
      {R::plain, R::tie, R::last, R::neg_inf, R::all_neg, R::nan, R::pos_inf, R::plateau, R::zeros},
      false);
  topk(3, 151936, 10, bf16, {R::plateau, R::zeros, R::tie}, true);
  topk(2, 151936, 2, f32, {R::tie, R::plateau}, false);
  topk(2, 3000, 1024, f16, {R::neg_inf, R::plain}, false);
  topk(3, 1500, 1024, f32, {R::neg_inf, R::all_neg, R::plateau}, true);
  topk(4, 777, 1, f32, {R::plain, R::tie, R::nan, R::zeros}, false);
  topk(2, 64, 64, bf16, {R::plateau, R::plain}, false);
  topk(64, 512, 64, f32, {R::plain, R::plateau, R::neg_inf}, false);
  for (int64_t N : {1, 64}) cases.push_back(std::make_unique<TopKPerfCase>(N));

  // sample_rows: Qwen3-Next's vocab over every row kind (the refused ones give -1), temperatures
  // 0.3 / 0.8 / 1.5, min-p 0.05; bf16 strided and f16 rows; small vocabularies; 64 rows.
  auto sample = [&](int64_t N, int64_t V, DType dt, std::vector<R> rows, float T, float min_p,
                    bool strided) {
    cases.push_back(std::make_unique<SampleRowsCase>(N, V, dt, std::move(rows), T, min_p, strided));
  };
  sample(9, 151936, f32,
         {R::plain, R::tie, R::plain, R::neg_inf, R::all_neg, R::nan, R::pos_inf, R::plateau,
          R::zeros},
         0.8f, 0.0f, false);
  sample(5, 151936, f32, {R::plain, R::plain, R::neg_inf, R::tie, R::plain}, 0.3f, 0.05f, false);
  sample(4, 151936, bf16, {R::plain, R::plain, R::zeros, R::plateau}, 1.5f, 0.0f, true);
  sample(6, 2049, f16, {R::plain, R::plain, R::neg_inf, R::last}, 1.0f, 0.0f, false);
  sample(3, 1, f32, {R::plain}, 0.7f, 0.0f, false);
  sample(64, 512, f32, {R::plain, R::plateau, R::neg_inf}, 0.9f, 0.02f, true);
  for (int64_t N : {1, 64}) cases.push_back(std::make_unique<SampleRowsPerfCase>(N));

  // softmax_mass: Qwen3-Next's vocab over every row kind (the refused ones give NaN), temperatures
  // 0.3 / 0.8 / 1.5; bf16 strided and f16 rows; a one-entry vocab; 64 rows.
  auto mass = [&](int64_t N, int64_t V, DType dt, std::vector<R> rows, float T, bool strided) {
    cases.push_back(std::make_unique<SoftmaxMassCase>(N, V, dt, std::move(rows), T, strided));
  };
  mass(9, 151936, f32,
       {R::plain, R::tie, R::plain, R::neg_inf, R::all_neg, R::nan, R::pos_inf, R::plateau,
        R::zeros},
       0.8f, false);
  mass(3, 151936, f32, {R::plain, R::neg_inf, R::tie}, 0.3f, false);
  mass(4, 151936, bf16, {R::plain, R::zeros, R::plateau, R::last}, 1.5f, true);
  mass(6, 2049, f16, {R::plain, R::neg_inf}, 1.0f, false);
  mass(3, 1, f32, {R::plain}, 0.7f, false);
  mass(64, 512, f32, {R::plain, R::plateau, R::neg_inf}, 0.9f, true);
  for (int64_t N : {1, 64}) cases.push_back(std::make_unique<SoftmaxMassPerfCase>(N));

  // repetition_penalty: Qwen3-Next's vocab with 300 history ids (penalty 1.3 and 0.8, the second
  // strided), every id of a small vocab, 64 rows.
  cases.push_back(std::make_unique<RepetitionPenaltyCase>(4, 151936, 300, 1.3f, false));
  cases.push_back(std::make_unique<RepetitionPenaltyCase>(3, 151936, 300, 0.8f, true));
  cases.push_back(std::make_unique<RepetitionPenaltyCase>(3, 40, 40, 1.1f, false));
  cases.push_back(std::make_unique<RepetitionPenaltyCase>(64, 512, 64, 1.5f, true));
}

}  // namespace hybrid::test
