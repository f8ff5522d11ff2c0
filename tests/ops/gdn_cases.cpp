// Cases: gdn_recurrent, gdn_prep_chunk, gdn_prep_step, gdn_record, gdn_replay. Oracle in f64,
// written from the math (K-first state S[K][V], the FLA form), independently of the CPU kernels.
#include <cmath>
#include <functional>
#include <optional>

#include "hybrid/ops/gdn.h"
#include "ops/cases.h"
#include "ops/harness.h"

namespace hybrid::test {

namespace {

// ---- problem description shared by the cases ---------------------------------------------------

struct Heads {
  int64_t Hk, Hv, K, V;
};

// N sequences: lengths, pool rows (< 0 padding), optional has_initial_state flags.
struct Batch {
  std::vector<int> lens, slots, init;  // init empty = not given (every sequence reads its row)
  int64_t num_slots;
  int64_t T() const {
    int64_t t = 0;
    for (int l : lens) t += l;
    return t;
  }
  int64_t N() const { return static_cast<int64_t>(lens.size()); }
  std::vector<double> cu() const {
    std::vector<double> c{0};
    for (int l : lens) c.push_back(c.back() + l);
    return c;
  }
};

std::string join(const std::vector<int>& v, const char* sep) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? sep : "") + std::to_string(v[i]);
  return s;
}

std::string batch_text(const Batch& b) {
  std::string s =
      str("lens=", join(b.lens, "+"), ",slots=", join(b.slots, "/"), ",pool=", b.num_slots);
  if (!b.init.empty()) s += ",init=" + join(b.init, "/");
  return s;
}

std::string heads_text(const Heads& h) {
  return str("Hk=", h.Hk, ",Hv=", h.Hv, ",K=", h.K, ",V=", h.V);
}

std::vector<double> to_doubles(const std::vector<int>& v) {
  return {v.begin(), v.end()};
}

// Varlen slots of a batch: cu_seqlens, state_slots, has_initial_state (when given).
void add_varlen(Slots& s, const Batch& b) {
  fill_values(s.input("cu_seqlens", DType::i32, {b.N() + 1}), b.cu());
  fill_values(s.input("state_slots", DType::i32, {b.N()}), to_doubles(b.slots));
  if (!b.init.empty())
    fill_values(s.input("has_initial_state", DType::i32, {b.N()}), to_doubles(b.init));
}

// ---- the f64 oracle -----------------------------------------------------------------------------

// One token's inputs for one value head: q̂ (normalised and scaled), k̂, v, α = exp(g), β.
struct TokenInputs {
  std::vector<double> q, k, v;
  double alpha = 1, beta = 0;
};
using TokenFn = std::function<void(int64_t t, int64_t hv, TokenInputs&)>;

struct OracleResult {
  std::vector<double> out;                         // [T, Hv, V]
  std::vector<double> pool;                        // [slots, Hv, V, K] after the batch
  std::vector<double> states;                      // [T, Hv, V, K] after each token (keep_states)
  std::vector<double> tape_k, tape_u, tape_alpha;  // [T, Hk, K], [T, Hv, V], [T, Hv]
};

// Per sequence and value head, S ∈ R^{K×V} in f64:
//   S ← α S;  u = β (v − Sᵀ k̂);  S ← S + k̂ uᵀ;  o = Sᵀ q̂
OracleResult oracle_gdn(const Heads& h, const Batch& b, const std::vector<double>& pool_in,
                        const TokenFn& token, bool keep_states) {
  const int64_t T = b.T(), K = h.K, V = h.V, Hv = h.Hv, ratio = h.Hv / h.Hk;
  OracleResult r;
  r.out.assign(T * Hv * V, 0.0);
  r.pool = pool_in;
  if (keep_states) r.states.assign(T * Hv * V * K, 0.0);
  r.tape_k.assign(T * h.Hk * K, 0.0);
  r.tape_u.assign(T * Hv * V, 0.0);
  r.tape_alpha.assign(T * Hv, 0.0);
  TokenInputs x;
  int64_t t0 = 0;
  for (int64_t n = 0; n < b.N(); ++n) {
    const int64_t t1 = t0 + b.lens[n], slot = b.slots[n];
    for (int64_t hv = 0; hv < Hv && slot >= 0; ++hv) {
      std::vector<double> S(K * V, 0.0);  // S[j * V + i], K-first
      const bool initial = b.init.empty() || b.init[n] != 0;
      if (initial)
        for (int64_t i = 0; i < V; ++i)
          for (int64_t j = 0; j < K; ++j)
            S[j * V + i] = pool_in[((slot * Hv + hv) * V + i) * K + j];
      for (int64_t t = t0; t < t1; ++t) {
        token(t, hv, x);
        for (double& e : S) e *= x.alpha;
        std::vector<double> u(V);
        for (int64_t i = 0; i < V; ++i) {
          double kv = 0;
          for (int64_t j = 0; j < K; ++j) kv += S[j * V + i] * x.k[j];
          u[i] = x.beta * (x.v[i] - kv);
        }
        for (int64_t j = 0; j < K; ++j)
          for (int64_t i = 0; i < V; ++i) S[j * V + i] += x.k[j] * u[i];
        for (int64_t i = 0; i < V; ++i) {
          double o = 0;
          for (int64_t j = 0; j < K; ++j) o += S[j * V + i] * x.q[j];
          r.out[(t * Hv + hv) * V + i] = o;
          r.tape_u[(t * Hv + hv) * V + i] = u[i];
        }
        for (int64_t j = 0; j < K; ++j) r.tape_k[(t * h.Hk + hv / ratio) * K + j] = x.k[j];
        r.tape_alpha[t * Hv + hv] = x.alpha;
        if (keep_states)
          for (int64_t i = 0; i < V; ++i)
            for (int64_t j = 0; j < K; ++j)
              r.states[((t * Hv + hv) * V + i) * K + j] = S[j * V + i];
      }
      for (int64_t i = 0; i < V; ++i)
        for (int64_t j = 0; j < K; ++j) r.pool[((slot * Hv + hv) * V + i) * K + j] = S[j * V + i];
    }
    t0 = t1;
  }
  return r;
}

// x / sqrt(Σx² + eps)
void l2_normalize(std::vector<double>& x, double eps) {
  double ss = 0;
  for (double e : x) ss += e * e;
  for (double& e : x) e /= std::sqrt(ss + eps);
}

// Unfused inputs (gdn_recurrent, gdn_record): q, k, v read either from their own slots or, when
// `packed`, out of one conv slot [T, 2·Hk·K + Hv·V] (rows strided), the way the model passes them.
TokenFn unfused_inputs(const Slots& s, const Heads& h, bool packed, bool l2, double scale) {
  return [&s, h, packed, l2, scale](int64_t t, int64_t hv, TokenInputs& x) {
    const int64_t hk = hv / (h.Hv / h.Hk), C = 2 * h.Hk * h.K + h.Hv * h.V;
    x.q.resize(h.K), x.k.resize(h.K), x.v.resize(h.V);
    for (int64_t j = 0; j < h.K; ++j) {
      x.q[j] = packed ? s["conv"].get(t * C + hk * h.K + j) : s["q"].get((t * h.Hk + hk) * h.K + j);
      x.k[j] = packed ? s["conv"].get(t * C + (h.Hk + hk) * h.K + j)
                      : s["k"].get((t * h.Hk + hk) * h.K + j);
    }
    for (int64_t i = 0; i < h.V; ++i)
      x.v[i] = packed ? s["conv"].get(t * C + 2 * h.Hk * h.K + hv * h.V + i)
                      : s["v"].get((t * h.Hv + hv) * h.V + i);
    if (l2) {
      l2_normalize(x.q, 1e-6);
      l2_normalize(x.k, 1e-6);
    }
    for (double& e : x.q) e *= scale;
    x.alpha = std::exp(s["g"].get(t * h.Hv + hv));
    x.beta = s["beta"].get(t * h.Hv + hv);
  };
}

// Inputs in the op's valid domain. Without the L2 norm, k is drawn with ‖k‖ ≈ 1 so that
// β‖k‖² < 2 keeps the delta rule contracting (as a normalised key does).
void fill_unfused(Slots& s, Rng& rng, const Heads& h, int64_t T, DType act, bool packed, bool l2) {
  const double k_std = l2 ? 1.0 : 1.0 / std::sqrt(static_cast<double>(h.K));
  if (packed) {
    // q | k | v of one conv row, rows padded to C + 8 (a view into a wider buffer), offset 4.
    const int64_t C = 2 * h.Hk * h.K + h.Hv * h.V;
    Slot& conv = s.strided("conv", Role::in, act, {T, C}, {C + 8, 1}, 4, T * (C + 8) + 4);
    fill_normal(conv, rng);
    for (int64_t t = 0; t < T; ++t)  // k columns at the key scale
      for (int64_t c = h.Hk * h.K; c < 2 * h.Hk * h.K; ++c)
        conv.set(t * C + c, rng.normal(0, k_std));
  } else {
    fill_normal(s.input("q", act, {T, h.Hk, h.K}), rng);
    fill_normal(s.input("k", act, {T, h.Hk, h.K}), rng, 0.0, k_std);
    fill_normal(s.input("v", act, {T, h.Hv, h.V}), rng);
  }
  fill_uniform(s.input("g", DType::f32, {T, h.Hv}), rng, -1.5, -0.02);
  fill_uniform(s.input("beta", act, {T, h.Hv}), rng, 0.05, 0.95);
}

// q, k, v views: their own slots, or strided views into the packed conv slot.
void unfused_views(const Views& v, const Heads& h, bool packed, Tensor& q, Tensor& k, Tensor& vv) {
  if (!packed) {
    q = v.at("q"), k = v.at("k"), vv = v.at("v");
    return;
  }
  const Tensor& conv = v.at("conv");
  const int64_t rs = conv.stride(0), T = conv.size(0);
  char* base = static_cast<char*>(conv.data());
  const size_t es = dtype_size(conv.dtype());
  q = Tensor(base, conv.dtype(), conv.device(), {T, h.Hk, h.K}, {rs, h.K, 1});
  k = Tensor(base + h.Hk * h.K * es, conv.dtype(), conv.device(), {T, h.Hk, h.K}, {rs, h.K, 1});
  vv =
      Tensor(base + 2 * h.Hk * h.K * es, conv.dtype(), conv.device(), {T, h.Hv, h.V}, {rs, h.V, 1});
}

// row_pad > 0: rows of K + row_pad elements (a pool whose rows are not packed: the decode-v3
// kernels refuse it and the v2 kernels run).
Slot& add_pool(Slots& s, Rng& rng, const std::string& name, Role role, DType dt, int64_t slots,
               const Heads& h, int64_t row_pad = 0) {
  const int64_t row = h.K + row_pad;
  Slot& p = row_pad > 0
                ? s.strided(name, role, dt, {slots, h.Hv, h.V, h.K},
                            {h.Hv * h.V * row, h.V * row, row, 1}, 0, slots * h.Hv * h.V * row)
            : role == Role::inout ? s.inout(name, dt, {slots, h.Hv, h.V, h.K})
                                  : s.input(name, dt, {slots, h.Hv, h.V, h.K});
  fill_normal(p, rng, 0.0, 0.3);
  return p;
}

// ---- gdn_recurrent ------------------------------------------------------------------------------

struct RecurrentCase : Case {
  Heads h;
  Batch b;
  DType act, sdt;
  bool l2, per_token, packed;
  std::optional<float> scale;
  int64_t row_pad = 0;  // > 0: pool rows of K + row_pad elements (the v2 kernels run)

  RecurrentCase(Heads h, Batch b, DType act, DType sdt, bool l2, std::optional<float> scale,
                bool per_token, bool packed)
      : h(h),
        b(std::move(b)),
        act(act),
        sdt(sdt),
        l2(l2),
        per_token(per_token),
        packed(packed),
        scale(scale) {}

  std::string op() const override { return "gdn_recurrent"; }
  std::string params() const override {
    return str(batch_text(b), ",", heads_text(h), ",x=", dtype_name(act),
               ",state=", dtype_name(sdt), l2 ? ",l2" : "",
               scale ? str(",scale=", *scale) : std::string(), per_token ? ",states_per_token" : "",
               packed ? ",packed_conv_views" : "",
               row_pad ? str(",pool_row_stride=K+", row_pad) : std::string());
  }
  void init(Rng& rng, Slots& s) override {
    const int64_t T = b.T();
    fill_unfused(s, rng, h, T, act, packed, l2);
    add_pool(s, rng, "state", Role::inout, sdt, b.num_slots, h, row_pad);
    add_varlen(s, b);
    s.output("out", act, {T, h.Hv, h.V});
    if (per_token) s.output("states_per_token", DType::f32, {T, h.Hv, h.V, h.K});
  }
  void run(const Views& v, Context& ctx) override {
    GdnRecurrent a;
    unfused_views(v, h, packed, a.q, a.k, a.v);
    a.g = v.at("g");
    a.beta = v.at("beta");
    a.state = v.at("state");
    a.cu_seqlens = v.at("cu_seqlens");
    a.state_slots = v.at("state_slots");
    if (!b.init.empty()) a.has_initial_state = v.at("has_initial_state");
    a.out = v.at("out");
    if (per_token) a.states_per_token = v.at("states_per_token");
    a.scale = scale;
    a.use_qk_l2norm = l2;
    gdn_recurrent(a, ctx);
  }
  void oracle(const Slots& s, Expected& e) override {
    const double sc = scale ? *scale : 1.0 / std::sqrt(static_cast<double>(h.K));
    OracleResult r =
        oracle_gdn(h, b, s["state"].values(), unfused_inputs(s, h, packed, l2, sc), per_token);
    e["out"] = r.out;
    e["state"] = r.pool;
    if (per_token) e["states_per_token"] = r.states;
  }
};

// One sequence cut into pieces, each a separate gdn_recurrent call resumed from the pool row the
// previous piece wrote (the first starts from zeros via has_initial_state = 0, over a pool row of
// garbage). Must equal the whole sequence; a final piece of 1 is decode after prefill.
struct PiecesCase : Case {
  Heads h;
  std::vector<int> pieces;
  DType act, sdt;
  int slot = 1;

  PiecesCase(Heads h, std::vector<int> pieces, DType act, DType sdt)
      : h(h), pieces(std::move(pieces)), act(act), sdt(sdt) {}
  Batch whole() const {
    int T = 0;
    for (int p : pieces) T += p;
    return Batch{{T}, {slot}, {0}, 3};
  }
  std::string op() const override { return "gdn_recurrent"; }
  std::string params() const override {
    return str("pieces=", join(pieces, "+"), ",resumed_from_pool,", heads_text(h),
               ",x=", dtype_name(act), ",state=", dtype_name(sdt), ",l2");
  }
  void init(Rng& rng, Slots& s) override {
    const Batch b = whole();
    fill_unfused(s, rng, h, b.T(), act, false, true);
    add_pool(s, rng, "state", Role::inout, sdt, b.num_slots, h);
    const int P = static_cast<int>(pieces.size());
    std::vector<double> cu, init;
    for (int p = 0; p < P; ++p) {
      cu.insert(cu.end(), {0.0, static_cast<double>(pieces[p])});
      init.push_back(p == 0 ? 0 : 1);
    }
    fill_values(s.input("cu_pieces", DType::i32, {P, 2}), cu);
    fill_values(s.input("init_pieces", DType::i32, {P}), init);
    fill_values(s.input("state_slots", DType::i32, {1}), {static_cast<double>(slot)});
    s.output("out", act, {b.T(), h.Hv, h.V});
  }
  void run(const Views& v, Context& ctx) override {
    int64_t t0 = 0;
    for (size_t p = 0; p < pieces.size(); ++p) {
      GdnRecurrent a;
      a.q = v.at("q").slice(0, t0, pieces[p]);
      a.k = v.at("k").slice(0, t0, pieces[p]);
      a.v = v.at("v").slice(0, t0, pieces[p]);
      a.g = v.at("g").slice(0, t0, pieces[p]);
      a.beta = v.at("beta").slice(0, t0, pieces[p]);
      a.out = v.at("out").slice(0, t0, pieces[p]);
      a.state = v.at("state");
      a.cu_seqlens = v.at("cu_pieces").select(0, static_cast<int64_t>(p));
      a.has_initial_state = v.at("init_pieces").slice(0, static_cast<int64_t>(p), 1);
      a.state_slots = v.at("state_slots");
      a.use_qk_l2norm = true;
      gdn_recurrent(a, ctx);
      t0 += pieces[p];
    }
  }
  void oracle(const Slots& s, Expected& e) override {
    const double sc = 1.0 / std::sqrt(static_cast<double>(h.K));
    OracleResult r =
        oracle_gdn(h, whole(), s["state"].values(), unfused_inputs(s, h, false, true, sc), false);
    e["out"] = r.out;
    e["state"] = r.pool;
  }
};

// ---- gdn_prep_chunk / gdn_prep_step ---------------------------------------------------------

// The unfused prep of seed 000 in f64, read from the conv / a / b / weight slots:
//   q̂ = q / sqrt(mean(q²) + eps) · q_w,  k̂ likewise,  α = exp(−exp(A_log)·softplus(a + dt_bias)),
//   β = sigmoid(b).  With `as_l2`, the same values through the documented L2 form instead:
//   q̂ = L2_{K·eps}(q) / sqrt(K), k̂ = L2_{K·eps}(k) (the weights are then 1/K and 1/sqrt(K)).
TokenFn prep_inputs(const Slots& s, const Heads& h, double eps, bool as_l2) {
  return [&s, h, eps, as_l2](int64_t t, int64_t hv, TokenInputs& x) {
    const int64_t hk = hv / (h.Hv / h.Hk), C = 2 * h.Hk * h.K + h.Hv * h.V;
    const double K = static_cast<double>(h.K);
    x.q.resize(h.K), x.k.resize(h.K), x.v.resize(h.V);
    for (int64_t j = 0; j < h.K; ++j) {
      x.q[j] = s["conv_out"].get(t * C + hk * h.K + j);
      x.k[j] = s["conv_out"].get(t * C + (h.Hk + hk) * h.K + j);
    }
    for (int64_t i = 0; i < h.V; ++i)
      x.v[i] = s["conv_out"].get(t * C + 2 * h.Hk * h.K + hv * h.V + i);
    if (as_l2) {
      l2_normalize(x.q, K * eps);
      l2_normalize(x.k, K * eps);
      for (double& e : x.q) e /= std::sqrt(K);
    } else {
      double qss = 0, kss = 0;
      for (int64_t j = 0; j < h.K; ++j) qss += x.q[j] * x.q[j], kss += x.k[j] * x.k[j];
      for (int64_t j = 0; j < h.K; ++j) {
        x.q[j] *= s["q_norm_weight"].get(hk * h.K + j) / std::sqrt(qss / K + eps);
        x.k[j] *= s["k_norm_weight"].get(hk * h.K + j) / std::sqrt(kss / K + eps);
      }
    }
    const double pre = s["a"].get(t * h.Hv + hv) + s["dt_bias"].get(hv);
    const double softplus = pre > 30 ? pre : std::log1p(std::exp(pre));
    x.alpha = std::exp(-std::exp(s["A_log"].get(hv)) * softplus);
    x.beta = 1.0 / (1.0 + std::exp(-s["b"].get(t * h.Hv + hv)));
  };
}

// Prep inputs over T rows: conv_out (rows strided when asked), a, b, A_log, dt_bias, weights
// (l2_weights: exactly 1/K and 1/sqrt(K); else those times U(0.8, 1.2) per channel).
void fill_prep(Slots& s, Rng& rng, const Heads& h, int64_t T, DType act, bool strided,
               bool l2_weights, double conv_std) {
  const int64_t C = 2 * h.Hk * h.K + h.Hv * h.V;
  if (strided)
    fill_normal(s.strided("conv_out", Role::in, act, {T, C}, {C + 16, 1}, 8, T * (C + 16) + 8), rng,
                0.0, conv_std);
  else
    fill_normal(s.input("conv_out", act, {T, C}), rng, 0.0, conv_std);
  fill_normal(s.input("a", act, {T, h.Hv}), rng);
  fill_normal(s.input("b", act, {T, h.Hv}), rng, 0.0, 2.0);
  fill_uniform(s.input("A_log", DType::f32, {h.Hv}), rng, 0.0, std::log(16.0));  // A in (1, 16)
  fill_uniform(s.input("dt_bias", DType::f32, {h.Hv}), rng, 0.5, 1.5);
  s.input("q_norm_weight", DType::f32, {h.Hk, h.K});
  s.input("k_norm_weight", DType::f32, {h.Hk, h.K});
  Slot &qw = s["q_norm_weight"], &kw = s["k_norm_weight"];  // (adding slots moves them)
  const double K = static_cast<double>(h.K);
  for (int64_t i = 0; i < h.Hk * h.K; ++i) {
    qw.set(i, (1.0 / K) * (l2_weights ? 1.0 : rng.uniform(0.8, 1.2)));
    kw.set(i, (1.0 / std::sqrt(K)) * (l2_weights ? 1.0 : rng.uniform(0.8, 1.2)));
  }
}

template <class Args>
void set_prep_views(Args& a, const Views& v) {
  a.conv_out = v.at("conv_out");
  a.a = v.at("a");
  a.b = v.at("b");
  a.A_log = v.at("A_log");
  a.dt_bias = v.at("dt_bias");
  a.q_norm_weight = v.at("q_norm_weight");
  a.k_norm_weight = v.at("k_norm_weight");
}

struct PrepChunkCase : Case {
  Heads h;
  Batch b;
  DType act, sdt;
  bool strided, l2_weights;
  float eps;
  double conv_std;  // small activations make eps matter

  PrepChunkCase(Heads h, Batch b, DType act, DType sdt, bool strided, bool l2_weights, float eps,
                double conv_std = 1.0)
      : h(h),
        b(std::move(b)),
        act(act),
        sdt(sdt),
        strided(strided),
        l2_weights(l2_weights),
        eps(eps),
        conv_std(conv_std) {}

  std::string op() const override { return "gdn_prep_chunk"; }
  std::string params() const override {
    return str(batch_text(b), ",", heads_text(h), ",x=", dtype_name(act),
               ",state=", dtype_name(sdt), ",eps=", eps,
               l2_weights ? ",weights=l2_equivalent" : ",weights=random",
               strided ? ",strided_rows" : "", ",conv_std=", conv_std);
  }
  void init(Rng& rng, Slots& s) override {
    fill_prep(s, rng, h, b.T(), act, strided, l2_weights, conv_std);
    add_pool(s, rng, "state", Role::inout, sdt, b.num_slots, h);
    add_varlen(s, b);
    s.output("y", act, {b.T(), h.Hv, h.V});
  }
  void run(const Views& v, Context& ctx) override {
    GdnPrepChunk a;
    set_prep_views(a, v);
    a.state = v.at("state");
    a.cu_seqlens = v.at("cu_seqlens");
    a.state_slots = v.at("state_slots");
    if (!b.init.empty()) a.has_initial_state = v.at("has_initial_state");
    a.y = v.at("y");
    a.eps = eps;
    gdn_prep_chunk(a, ctx);
  }
  void oracle(const Slots& s, Expected& e) override {
    OracleResult r =
        oracle_gdn(h, b, s["state"].values(), prep_inputs(s, h, eps, l2_weights), false);
    e["y"] = r.out;
    e["state"] = r.pool;
  }
};

// A decode batch through gdn_prep_step, and the same tokens one call per sequence on a second
// copy of the pool: both equal the per-sequence oracle.
struct PrepStepCase : Case {
  Heads h;
  std::vector<int> slots;
  int64_t num_slots;
  DType act, sdt;

  PrepStepCase(Heads h, std::vector<int> slots, int64_t num_slots, DType act, DType sdt)
      : h(h), slots(std::move(slots)), num_slots(num_slots), act(act), sdt(sdt) {}
  Batch batch() const { return Batch{std::vector<int>(slots.size(), 1), slots, {}, num_slots}; }

  std::string op() const override { return "gdn_prep_step"; }
  std::string params() const override {
    return str("N=", slots.size(), ",slots=", join(slots, "/"), ",pool=", num_slots, ",",
               heads_text(h), ",x=", dtype_name(act), ",state=", dtype_name(sdt),
               ",batch_and_per_sequence");
  }
  void init(Rng& rng, Slots& s) override {
    const int64_t N = static_cast<int64_t>(slots.size());
    fill_prep(s, rng, h, N, act, false, false, 1.0);
    const Slot& pool = add_pool(s, rng, "state", Role::inout, sdt, num_slots, h);
    const std::vector<int64_t> shape = pool.shape;
    const std::vector<double> values = pool.values();
    fill_values(s.inout("state_single", sdt, shape), values);
    fill_values(s.input("state_slots", DType::i32, {N}), to_doubles(slots));
    s.output("y", act, {N, h.Hv, h.V});
    s.output("y_single", act, {N, h.Hv, h.V});
  }
  void run(const Views& v, Context& ctx) override {
    GdnPrepStep a;
    set_prep_views(a, v);
    a.state = v.at("state");
    a.state_slots = v.at("state_slots");
    a.y = v.at("y");
    gdn_prep_step(a, ctx);
    for (int64_t n = 0; n < static_cast<int64_t>(slots.size()); ++n) {
      GdnPrepStep one;
      set_prep_views(one, v);
      one.conv_out = one.conv_out.slice(0, n, 1);
      one.a = one.a.slice(0, n, 1);
      one.b = one.b.slice(0, n, 1);
      one.state = v.at("state_single");
      one.state_slots = v.at("state_slots").slice(0, n, 1);
      one.y = v.at("y_single").slice(0, n, 1);
      gdn_prep_step(one, ctx);
    }
  }
  void oracle(const Slots& s, Expected& e) override {
    OracleResult r =
        oracle_gdn(h, batch(), s["state"].values(), prep_inputs(s, h, 1e-6, false), false);
    e["y"] = e["y_single"] = r.out;
    e["state"] = e["state_single"] = r.pool;
  }
};

// ---- gdn_record / gdn_replay ----------------------------------------------------------------

// gdn_record over a varlen batch (pool only read), then gdn_replay into state_out for EVERY k in
// [0, max T_n] (k_n = min(k, T_n)), then an in-place replay of `accepted` tokens into the pool.
// Every replayed state must equal the state after k_n plain steps of the recurrence. Both ops
// run in every case; `listed_as` is the op the case is listed under (hybrid-ops -o).
struct RecordReplayCase : Case {
  const char* listed_as;
  Heads h;
  Batch b;
  std::vector<int> accepted;
  DType act, sdt;
  bool l2;

  RecordReplayCase(const char* listed_as, Heads h, Batch b, std::vector<int> accepted, DType act,
                   DType sdt, bool l2)
      : listed_as(listed_as),
        h(h),
        b(std::move(b)),
        accepted(std::move(accepted)),
        act(act),
        sdt(sdt),
        l2(l2) {}
  int max_len() const {
    int m = 0;
    for (int l : b.lens) m = std::max(m, l);
    return m;
  }

  std::string op() const override { return listed_as; }
  std::string params() const override {
    return str(batch_text(b), ",", heads_text(h), ",x=", dtype_name(act),
               ",state=", dtype_name(sdt), l2 ? ",l2" : "",
               ",record_then_replay_every_k,accept=", join(accepted, "/"));
  }
  void init(Rng& rng, Slots& s) override {
    const int64_t T = b.T(), N = b.N(), M = max_len();
    fill_unfused(s, rng, h, T, act, false, l2);
    add_pool(s, rng, "state", Role::inout, sdt, b.num_slots, h);
    add_varlen(s, b);
    std::vector<double> ks;
    for (int k = 0; k <= M; ++k)
      for (int64_t n = 0; n < N; ++n) ks.push_back(std::min(k, b.lens[n]));
    fill_values(s.input("num_tokens_k", DType::i32, {M + 1, N}), ks);
    fill_values(s.input("accepted", DType::i32, {N}), to_doubles(accepted));
    s.output("out", act, {T, h.Hv, h.V});
    s.output("tape_k", DType::f32, {T, h.Hk, h.K});
    s.output("tape_u", DType::f32, {T, h.Hv, h.V});
    s.output("tape_alpha", DType::f32, {T, h.Hv});
    s.output("replayed", sdt, {M + 1, N, h.Hv, h.V, h.K});
  }
  void run(const Views& v, Context& ctx) override {
    GdnRecord r;
    r.q = v.at("q"), r.k = v.at("k"), r.v = v.at("v"), r.g = v.at("g"), r.beta = v.at("beta");
    r.state = v.at("state");
    r.cu_seqlens = v.at("cu_seqlens");
    r.state_slots = v.at("state_slots");
    r.out = v.at("out");
    r.tape_k = v.at("tape_k"), r.tape_u = v.at("tape_u"), r.tape_alpha = v.at("tape_alpha");
    r.use_qk_l2norm = l2;
    gdn_record(r, ctx);
    GdnReplay p;
    p.tape_k = r.tape_k, p.tape_u = r.tape_u, p.tape_alpha = r.tape_alpha;
    p.state = r.state;
    p.cu_seqlens = r.cu_seqlens;
    p.state_slots = r.state_slots;
    for (int64_t k = 0; k <= max_len(); ++k) {
      p.num_tokens = v.at("num_tokens_k").select(0, k);
      p.state_out = v.at("replayed").select(0, k);
      gdn_replay(p, ctx);
    }
    p.num_tokens = v.at("accepted");
    p.state_out = Tensor();
    gdn_replay(p, ctx);  // in place: the pool row becomes the state after the accepted tokens
  }
  void oracle(const Slots& s, Expected& e) override {
    const double sc = 1.0 / std::sqrt(static_cast<double>(h.K));
    const std::vector<double> pool = s["state"].values();
    OracleResult r = oracle_gdn(h, b, pool, unfused_inputs(s, h, false, l2, sc), true);
    e["out"] = r.out;
    e["tape_k"] = r.tape_k;
    e["tape_u"] = r.tape_u;
    e["tape_alpha"] = r.tape_alpha;
    const int64_t N = b.N(), HVK = h.Hv * h.V * h.K;
    const std::vector<double> cu = b.cu();
    // The state of sequence n after k of its tokens (zeros for padding).
    auto state_after = [&](int64_t n, int k, int64_t e0) {
      if (b.slots[n] < 0) return 0.0;
      if (k == 0) return pool[b.slots[n] * HVK + e0];
      return r.states[(static_cast<int64_t>(cu[n]) + k - 1) * HVK + e0];
    };
    std::vector<double>& rep = e["replayed"];
    for (int k = 0; k <= max_len(); ++k)
      for (int64_t n = 0; n < N; ++n)
        for (int64_t e0 = 0; e0 < HVK; ++e0)
          rep.push_back(state_after(n, std::min(k, b.lens[n]), e0));
    std::vector<double> final_pool = pool;
    for (int64_t n = 0; n < N; ++n)
      if (b.slots[n] >= 0)
        for (int64_t e0 = 0; e0 < HVK; ++e0)
          final_pool[b.slots[n] * HVK + e0] = state_after(n, accepted[n], e0);
    e["state"] = final_pool;
  }
};

}  // namespace

// ---- benchmark shapes (perf only) ---------------------------------------------------------------

// Decode: one token for each of B sequences, Qwen3-Next heads, slots 0..B-1 of a pool of B rows,
// so the bytes are the state read and written once plus the token tensors (Case::bytes).
// prep = gdn_prep_step (seed 000: packed conv output, raw a/b, per-head norms) instead of
// gdn_recurrent with L2 norm inside.
struct DecodePerfCase : Case {
  Heads h;
  int64_t B;
  DType state_dtype;
  bool prep;
  DecodePerfCase(Heads h, int64_t B, DType state_dtype, bool prep)
      : h(h), B(B), state_dtype(state_dtype), prep(prep) {}
  std::string op() const override { return prep ? "gdn_prep_step" : "gdn_recurrent"; }
  std::string params() const override {
    return str("decode,B=", B, ",", heads_text(h), ",state=", dtype_name(state_dtype), ",perf");
  }
  bool perf_only() const override { return true; }
  void init(Rng& rng, Slots& s) override {
    const DType bf16 = DType::bf16;
    if (prep) {
      fill_uniform(s.input("conv_out", bf16, {B, 2 * h.Hk * h.K + h.Hv * h.V}), rng, -1, 1);
      fill_uniform(s.input("a", bf16, {B, h.Hv}), rng, -1, 1);
      fill_uniform(s.input("b", bf16, {B, h.Hv}), rng, -1, 1);
      fill_uniform(s.input("A_log", DType::f32, {h.Hv}), rng, -1, 1);
      fill_uniform(s.input("dt_bias", DType::f32, {h.Hv}), rng, 0, 1);
      fill_uniform(s.input("q_norm_weight", bf16, {h.Hk, h.K}), rng, 0.5, 1);
      fill_uniform(s.input("k_norm_weight", bf16, {h.Hk, h.K}), rng, 0.5, 1);
      s.output("y", bf16, {B, h.Hv, h.V});
    } else {
      fill_uniform(s.input("q", bf16, {B, h.Hk, h.K}), rng, -1, 1);
      fill_uniform(s.input("k", bf16, {B, h.Hk, h.K}), rng, -1, 1);
      fill_uniform(s.input("v", bf16, {B, h.Hv, h.V}), rng, -1, 1);
      fill_uniform(s.input("g", DType::f32, {B, h.Hv}), rng, -1, -0.01);
      fill_uniform(s.input("beta", bf16, {B, h.Hv}), rng, 0.1, 0.9);
      std::vector<double> cu(B + 1);
      for (int64_t n = 0; n <= B; ++n) cu[n] = static_cast<double>(n);
      fill_values(s.input("cu_seqlens", DType::i32, {B + 1}), cu);
      s.output("out", bf16, {B, h.Hv, h.V});
    }
    std::vector<double> slots(B);
    for (int64_t n = 0; n < B; ++n) slots[n] = static_cast<double>(n);
    fill_values(s.input("state_slots", DType::i32, {B}), slots);
    fill_uniform(s.inout("state", state_dtype, {B, h.Hv, h.V, h.K}), rng, -0.1, 0.1);
  }
  void run(const Views& v, Context& ctx) override {
    if (prep) {
      GdnPrepStep a;
      a.conv_out = v.at("conv_out"), a.a = v.at("a"), a.b = v.at("b");
      a.A_log = v.at("A_log"), a.dt_bias = v.at("dt_bias");
      a.q_norm_weight = v.at("q_norm_weight"), a.k_norm_weight = v.at("k_norm_weight");
      a.state = v.at("state"), a.state_slots = v.at("state_slots"), a.y = v.at("y");
      gdn_prep_step(a, ctx);
    } else {
      GdnRecurrent a;
      a.q = v.at("q"), a.k = v.at("k"), a.v = v.at("v"), a.g = v.at("g"), a.beta = v.at("beta");
      a.state = v.at("state"), a.cu_seqlens = v.at("cu_seqlens"),
      a.state_slots = v.at("state_slots");
      a.out = v.at("out");
      a.use_qk_l2norm = true;
      gdn_recurrent(a, ctx);
    }
  }
  void oracle(const Slots&, Expected&) override { fail("[gdn perf case] has no oracle"); }
};

// gdn_gates: g = −exp(A_log) · softplus(a + dt_bias), β = sigmoid(b). packed: a and b are the
// column ranges [Hv, 2·Hv) and [0, Hv) of one [T, 2·Hv] projection (the engine's in_proj_ba
// output), and g, β are written with strided rows; else every tensor is contiguous. a is drawn
// wide (std 8) so that softplus meets both of its branches (x > 20 and below).
struct GatesCase : Case {
  int64_t T, Hv;
  DType act, wdt;
  bool packed;
  GatesCase(int64_t T, int64_t Hv, DType act, DType wdt, bool packed)
      : T(T), Hv(Hv), act(act), wdt(wdt), packed(packed) {}
  std::string op() const override { return "gdn_gates"; }
  std::string params() const override {
    return str("T=", T, ",Hv=", Hv, ",x=", dtype_name(act), ",w=", dtype_name(wdt),
               packed ? ",packed_ba,strided_out" : "");
  }
  void init(Rng& rng, Slots& s) override {
    if (packed) {
      // One [T, 2·Hv] buffer per input name: b reads columns [0, Hv), a columns [Hv, 2·Hv).
      fill_normal(s.strided("b", Role::in, act, {T, Hv}, {2 * Hv, 1}, 0, T * 2 * Hv), rng, 0.0,
                  3.0);
      fill_normal(s.strided("a", Role::in, act, {T, Hv}, {2 * Hv, 1}, Hv, T * 2 * Hv), rng, 0.0,
                  8.0);
      s.strided("g", Role::out, DType::f32, {T, Hv}, {Hv + 3, 1}, 1, T * (Hv + 3) + 1);
      s.strided("beta", Role::out, DType::f32, {T, Hv}, {Hv + 5, 1}, 2, T * (Hv + 5) + 2);
    } else {
      fill_normal(s.input("b", act, {T, Hv}), rng, 0.0, 3.0);
      fill_normal(s.input("a", act, {T, Hv}), rng, 0.0, 8.0);
      s.output("g", DType::f32, {T, Hv});
      s.output("beta", DType::f32, {T, Hv});
    }
    fill_uniform(s.input("A_log", wdt, {Hv}), rng, -2.0, std::log(16.0));
    fill_normal(s.input("dt_bias", wdt, {Hv}), rng, 0.0, 2.0);
  }
  void run(const Views& v, Context& ctx) override {
    GdnGates a;
    a.a = v.at("a");
    a.b = v.at("b");
    a.A_log = v.at("A_log");
    a.dt_bias = v.at("dt_bias");
    a.g = v.at("g");
    a.beta = v.at("beta");
    gdn_gates(a, ctx);
  }
  void oracle(const Slots& s, Expected& e) override {
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < Hv; ++h) {
        const double x = s["a"].get(t * Hv + h) + s["dt_bias"].get(h);
        const double softplus = x > 20.0 ? x : std::log1p(std::exp(x));
        e["g"].push_back(-std::exp(s["A_log"].get(h)) * softplus);
        e["beta"].push_back(1.0 / (1.0 + std::exp(-s["b"].get(t * Hv + h))));
      }
  }
};

void add_gdn_cases(CaseList& cases) {
  using std::make_unique;
  const DType f32 = DType::f32, bf16 = DType::bf16, f16 = DType::f16;
  const Heads next{16, 32, 128, 128};  // Qwen3-Next-80B / Qwen3.5-35B (TP1)
  const Heads q397{16, 64, 128, 128};  // Qwen3.5-397B (TP1)
  const Heads small{2, 4, 32, 32};
  const Heads gva3{2, 6, 32, 32};  // Hv / Hk = 3
  const Heads k64v96{2, 4, 64, 96};

  for (int64_t B : {1, 64, 256})
    for (DType st : {f32, bf16})
      for (bool prep : {false, true})
        cases.push_back(make_unique<DecodePerfCase>(next, B, st, prep));

  // gdn_recurrent: real shapes (prefill of 3 + decode of 1; a decode batch with a padding slot).
  cases.push_back(make_unique<RecurrentCase>(next, Batch{{1, 3}, {2, 0}, {}, 3}, bf16, f32, true,
                                             std::nullopt, false, true));
  cases.push_back(make_unique<RecurrentCase>(q397, Batch{{1, 1, 1}, {1, -1, 0}, {}, 2}, bf16, bf16,
                                             true, std::nullopt, false, false));
  cases.push_back(make_unique<RecurrentCase>(next, Batch{{2}, {0}, {}, 1}, f32, f32, true,
                                             std::nullopt, true, false));
  // Odd token counts at smaller heads.
  for (int T : {1, 63, 65, 257})
    cases.push_back(make_unique<RecurrentCase>(small, Batch{{T}, {1}, {}, 2}, f32, f32, true,
                                               std::nullopt, false, false));
  cases.push_back(make_unique<RecurrentCase>(Heads{1, 2, 64, 64}, Batch{{257}, {0}, {}, 1}, bf16,
                                             bf16, true, std::nullopt, false, true));
  // GVA 3, K != V, no L2 norm with an explicit scale, f16 activations.
  cases.push_back(make_unique<RecurrentCase>(gva3, Batch{{7, 5}, {0, 1}, {}, 2}, f32, f32, true,
                                             std::nullopt, true, false));
  cases.push_back(make_unique<RecurrentCase>(k64v96, Batch{{9}, {0}, {}, 1}, bf16, f32, true,
                                             std::nullopt, false, true));
  cases.push_back(make_unique<RecurrentCase>(small, Batch{{7, 3}, {1, 0}, {}, 2}, f32, f32, false,
                                             0.3f, false, false));
  cases.push_back(make_unique<RecurrentCase>(small, Batch{{5}, {0}, {}, 1}, f16, f32, true,
                                             std::nullopt, false, false));
  // Varlen with padding slots, zero-length sequences, has_initial_state, per-token states.
  cases.push_back(make_unique<RecurrentCase>(
      small, Batch{{5, 0, 7, 3, 2}, {2, -1, 0, -1, 4}, {1, 0, 0, 1, 1}, 5}, f32, f32, true,
      std::nullopt, true, false));
  cases.push_back(make_unique<RecurrentCase>(gva3, Batch{{4, 6, 1}, {3, -1, 1}, {0, 1, 1}, 4}, bf16,
                                             bf16, true, std::nullopt, true, true));
  // Decode v2 paths (src/cuda/gdn.cu): B = 1 at real shapes (f32 and bf16 pool; 2 rows a thread);
  // a B = 256 decode batch (4 rows a thread) (real K = V = 128, 4 value heads to keep the f64
  // oracle small) with padding slots and a shuffled pool; T = 1..16 tokens per sequence with
  // per-token states at K = 128 (GVA 2 with an f32 pool, GVA 4 with a bf16 pool, a padding sequence
  // among them); K = 256 (16 lanes a row); K = 64 / V = 96 with a bf16 pool, per-token states and
  // padding.
  const Heads k128g2{2, 4, 128, 128}, k128g4{1, 4, 128, 128};
  for (DType st : {f32, bf16})
    cases.push_back(make_unique<RecurrentCase>(next, Batch{{1}, {0}, {}, 1}, bf16, st, true,
                                               std::nullopt, false, false));
  {
    Batch b{std::vector<int>(256, 1), std::vector<int>(256), {}, 256};
    for (int n = 0; n < 256; ++n) b.slots[n] = n % 37 == 5 ? -1 : (n * 97) % 256;
    cases.push_back(
        make_unique<RecurrentCase>(k128g2, b, bf16, bf16, true, std::nullopt, false, false));
    cases.push_back(
        make_unique<RecurrentCase>(k128g2, b, bf16, f32, true, std::nullopt, false, true));
  }
  {
    Batch b{{}, {}, {}, 17};
    for (int T = 1; T <= 16; ++T) b.lens.push_back(T), b.slots.push_back(T == 7 ? -1 : 16 - T);
    cases.push_back(
        make_unique<RecurrentCase>(k128g2, b, bf16, f32, true, std::nullopt, true, false));
    cases.push_back(
        make_unique<RecurrentCase>(k128g4, b, f32, bf16, true, std::nullopt, true, false));
  }
  cases.push_back(make_unique<RecurrentCase>(Heads{1, 2, 256, 64}, Batch{{3, 1}, {1, 0}, {}, 2},
                                             bf16, f32, true, std::nullopt, true, false));
  cases.push_back(make_unique<RecurrentCase>(Heads{1, 2, 256, 64}, Batch{{2}, {0}, {}, 1}, f32,
                                             bf16, true, std::nullopt, false, false));
  cases.push_back(make_unique<RecurrentCase>(k64v96, Batch{{3, 0, 16, 2}, {0, -1, 2, -1}, {}, 3},
                                             bf16, bf16, true, std::nullopt, true, false));
  // The 4-rows-a-thread variant (chosen from 1024 blocks of the 2-row grid) with rows past V:
  // K = 64 / V = 96 over 96 sequences, padding slots, per-token states, both pools.
  {
    Batch b{std::vector<int>(96, 1), std::vector<int>(96), {}, 96};
    for (int n = 0; n < 96; ++n) b.slots[n] = n % 13 == 6 ? -1 : (n * 35) % 96;
    cases.push_back(
        make_unique<RecurrentCase>(k64v96, b, bf16, bf16, true, std::nullopt, true, false));
    cases.push_back(
        make_unique<RecurrentCase>(k64v96, b, f32, f32, true, std::nullopt, false, true));
  }

  // Decode v3 (gdn_recurrent.cuda_stream: persistent blocks over (tile, head, sequence) items,
  // the pool streamed through shared memory): real shapes at B = 64 (f32 pool: 2 rows a thread,
  // 8192 items; bf16 pool: 4 rows a thread, 64-row tiles) with padding slots and a shuffled pool,
  // so every block takes several items and each stage's barrier goes through several phases; a
  // varlen batch of 1..4 tokens over 128 sequences with per-token states, padding slots and
  // sequences without an initial state (the stage armed with 0 bytes) in the same blocks.
  {
    Batch b{std::vector<int>(64, 1), std::vector<int>(64), {}, 70};
    for (int n = 0; n < 64; ++n) b.slots[n] = n % 23 == 4 ? -1 : (n * 29) % 70;
    for (DType st : {f32, bf16})
      cases.push_back(
          make_unique<RecurrentCase>(next, b, bf16, st, true, std::nullopt, false, false));
  }
  {
    Batch b{{}, {}, {}, 130};
    for (int n = 0; n < 128; ++n) {
      b.lens.push_back(1 + n % 4);
      b.slots.push_back(n % 19 == 7 ? -1 : (n * 53) % 130);
      b.init.push_back(n % 11 == 2 ? 0 : 1);
    }
    for (DType st : {f32, bf16})
      cases.push_back(
          make_unique<RecurrentCase>(k128g2, b, f32, st, true, std::nullopt, true, false));
  }

  // Decode v4 (gdn_recurrent.cuda_warp: persistent warps, each over a contiguous run of (row
  // tile, head, sequence) items): V = 100 is not a multiple of the item rows (8 for an f32 pool,
  // 16 for bf16), so each head's last item is partial; 48 one-token sequences with padding slots
  // and sequences without an initial state, so a warp's run crosses heads (its q̂ / k̂ cache is
  // refilled) and mixes fast items with padding ones.
  for (DType st : {f32, bf16}) {
    Batch b{std::vector<int>(48, 1), std::vector<int>(48), {}, 50};
    for (int n = 0; n < 48; ++n) {
      b.slots[n] = n % 17 == 3 ? -1 : (n * 31) % 50;
      b.init.push_back(n % 7 == 5 ? 0 : 1);
    }
    cases.push_back(make_unique<RecurrentCase>(Heads{2, 4, 64, 100}, b, bf16, st, true,
                                               std::nullopt, false, false));
  }

  // Decode v5 (gdn_recurrent.cuda_warp2 / gdn_prep_step.cuda_warp2: the item's v values copied
  // into its stage): K = 256 (16 lanes a row, 2 rows a warp step), where an f32 pool's item is 4
  // rows, so its v values are one 8-byte cp.async piece (bf16) or one 16-byte piece (f32), over
  // one-token sequences with a padding slot. (K = 128 cases above take the 16- and 32-byte
  // pieces; V = 100 and the packed conv views take v4's register loads inside v5.)
  for (DType act : {bf16, f32})
    cases.push_back(make_unique<RecurrentCase>(Heads{1, 2, 256, 64},
                                               Batch{{1, 1, 1}, {2, -1, 0}, {}, 3}, act, f32, true,
                                               std::nullopt, false, false));
  cases.push_back(
      make_unique<PrepStepCase>(Heads{1, 2, 256, 64}, std::vector<int>{1, -1, 0}, 2, bf16, f32));

  // Written for decode v6 (.cuda_bulk: 1-D bulk copies, a grid sweep; measured no faster in
  // session 5 and kept on branch next/decode-bulk), kept as coverage of large batches: f32
  // activations at K = V = 128 (v values: one 32-byte bulk copy; q, k: 512-byte rows) over 250
  // one-token sequences (f32 pool: 16000 items, ~10 a warp at 1584 warps, so every stage's barrier
  // passes several phases and its parity flips; bf16 pool: 8000 items; 250 is no multiple of the
  // warps: the last sweep is partial) with padding slots (0 bytes armed) and sequences without an
  // initial state (0 state bytes, q / k / v bytes armed), and a shuffled pool with unused rows.
  for (DType st : {f32, bf16}) {
    Batch b{std::vector<int>(250, 1), std::vector<int>(250), {}, 260};
    for (int n = 0; n < 250; ++n) {
      b.slots[n] = n % 31 == 7 ? -1 : (n * 67) % 260;
      b.init.push_back(n % 9 == 4 ? 0 : 1);
    }
    cases.push_back(
        make_unique<RecurrentCase>(k128g2, b, f32, st, true, std::nullopt, false, false));
  }
  // v6 at GVA 4, K = 64 / V = 128 (2 KiB items: 8 rows f32, 16 rows bf16), bf16 activations (v:
  // 16 / 32 bytes), one-token sequences, a 3-token one, a padding slot and one without an initial
  // state, with per-token states: the general path (gdn_tokens / gdn_padding) on rows from a
  // bulk-filled stage, no q / k / v bytes armed for those items.
  for (DType st : {f32, bf16}) {
    Batch b{{1, 1, 3, 1, 1, 1, 1}, {4, -1, 0, 6, 1, 3, 5}, {1, 1, 1, 0, 1, 1, 1}, 7};
    cases.push_back(make_unique<RecurrentCase>(Heads{1, 4, 64, 128}, b, bf16, st, true,
                                               std::nullopt, true, false));
  }

  // The v2 fallback (gdn_recurrent.cuda) at real shapes: a pool whose rows are not packed (row
  // stride K + 8: still 16-byte aligned for both dtypes), B = 64 with padding slots.
  for (DType st : {f32, bf16}) {
    Batch b{std::vector<int>(64, 1), std::vector<int>(64), {}, 66};
    for (int n = 0; n < 64; ++n) b.slots[n] = n % 23 == 4 ? -1 : (n * 31) % 66;
    auto c = make_unique<RecurrentCase>(next, b, bf16, st, true, std::nullopt, false, false);
    c->row_pad = 8;
    cases.push_back(std::move(c));
  }

  // Split anywhere and resumed from the saved state == whole sequence.
  cases.push_back(
      make_unique<PiecesCase>(small, std::vector<int>{5, 1, 0, 17, 40, 2, 1}, f32, f32));
  cases.push_back(make_unique<PiecesCase>(gva3, std::vector<int>{30, 1, 33, 1}, bf16, bf16));
  cases.push_back(make_unique<PiecesCase>(next, std::vector<int>{2, 1}, bf16, f32));

  // gdn_prep_chunk: real shapes, varlen with padding, strided conv rows, bf16 state, and the
  // L2-equivalent weights with eps = 1e-6 / K (== HF's L2 norm and 1/sqrt(K) scale).
  cases.push_back(
      make_unique<PrepChunkCase>(next, Batch{{3}, {0}, {}, 1}, bf16, f32, true, false, 1e-6f));
  cases.push_back(make_unique<PrepChunkCase>(q397, Batch{{1, 1}, {0, 1}, {}, 2}, bf16, bf16, false,
                                             false, 1e-6f));
  cases.push_back(make_unique<PrepChunkCase>(
      small, Batch{{63, 0, 65, 4}, {1, 3, -1, 0}, {1, 0, 1, 0}, 4}, f32, f32, true, false, 1e-6f));
  cases.push_back(make_unique<PrepChunkCase>(gva3, Batch{{9, 1}, {1, 0}, {}, 2}, bf16, bf16, false,
                                             false, 1e-6f));
  cases.push_back(make_unique<PrepChunkCase>(k64v96, Batch{{8}, {0}, {}, 1}, f32, f32, false, true,
                                             1e-6f / 64, 0.02));
  cases.push_back(make_unique<PrepChunkCase>(small, Batch{{6, 5}, {1, 0}, {0, 1}, 2}, f32, f32,
                                             false, false, 1e-3f, 0.05));
  cases.push_back(
      make_unique<PrepChunkCase>(small, Batch{{257}, {0}, {}, 1}, f32, f32, false, true, 1e-6f));

  // gdn_prep_step: decode batches over the pool (with a padding slot) == one call per sequence.
  cases.push_back(make_unique<PrepStepCase>(next, std::vector<int>{3, -1, 0}, 4, bf16, f32));
  cases.push_back(make_unique<PrepStepCase>(q397, std::vector<int>{1, 0}, 2, bf16, bf16));
  cases.push_back(make_unique<PrepStepCase>(gva3, std::vector<int>{5, 2, -1, 0, 7}, 8, f32, f32));

  // gdn_gates: Qwen3-Next's Hv = 32 (prefill and decode rows), Qwen3.5-397B's 64, odd sizes,
  // the packed in_proj_ba layout the engine uses, bf16 / f16 inputs.
  cases.push_back(make_unique<GatesCase>(4096, 32, f32, f32, true));
  cases.push_back(make_unique<GatesCase>(1, 32, f32, f32, true));
  cases.push_back(make_unique<GatesCase>(64, 64, bf16, bf16, false));
  cases.push_back(make_unique<GatesCase>(257, 6, f16, f32, true));
  cases.push_back(make_unique<GatesCase>(3, 1, f32, bf16, false));

  // Decode v2: prep_step at B = 1 (real shapes, both pools) and a 256-sequence batch (4 value
  // heads, K = V = 128, padding slots, shuffled pool), K = 64 / V = 96 with a bf16 pool.
  for (DType st : {f32, bf16})
    cases.push_back(make_unique<PrepStepCase>(next, std::vector<int>{0}, 1, bf16, st));
  {
    std::vector<int> slots(256);
    for (int n = 0; n < 256; ++n) slots[n] = n % 41 == 3 ? -1 : (n * 131) % 256;
    cases.push_back(make_unique<PrepStepCase>(k128g2, slots, 256, bf16, bf16));
    cases.push_back(make_unique<PrepStepCase>(k128g4, slots, 256, bf16, f32));
  }
  cases.push_back(make_unique<PrepStepCase>(k64v96, std::vector<int>{1, -1, 0}, 2, bf16, bf16));
  // Decode v3 (gdn_prep_step.cuda_stream): real shapes at B = 64, both pools, padding slots.
  {
    std::vector<int> slots(64);
    for (int n = 0; n < 64; ++n) slots[n] = n % 17 == 9 ? -1 : (n * 37) % 66;
    for (DType st : {f32, bf16})
      cases.push_back(make_unique<PrepStepCase>(next, slots, 66, bf16, st));
  }

  // Written for decode v6 (gdn_prep_step.cuda_bulk, on next/decode-bulk): 200 sequences at K = V =
  // 128 with 4 value heads, f32 conv_out (v: 32-byte bulk copies, q / k rows 512 bytes), both
  // pools, padding slots.
  {
    std::vector<int> slots(200);
    for (int n = 0; n < 200; ++n) slots[n] = n % 27 == 11 ? -1 : (n * 89) % 210;
    for (DType st : {f32, bf16})
      cases.push_back(make_unique<PrepStepCase>(k128g2, slots, 210, f32, st));
  }

  // gdn_record + gdn_replay: every k in [0, T], varlen with padding, in-place rollback.
  cases.push_back(make_unique<RecordReplayCase>("gdn_record", small,
                                                Batch{{7, 4, 3}, {2, -1, 0}, {}, 3},
                                                std::vector<int>{5, 2, 3}, f32, f32, true));
  cases.push_back(make_unique<RecordReplayCase>("gdn_record", gva3, Batch{{6, 1}, {0, 1}, {}, 2},
                                                std::vector<int>{0, 1}, bf16, bf16, true));
  cases.push_back(make_unique<RecordReplayCase>("gdn_replay", k64v96, Batch{{5}, {0}, {}, 1},
                                                std::vector<int>{4}, f32, f32, false));
  cases.push_back(make_unique<RecordReplayCase>("gdn_replay", Heads{1, 2, 16, 16},
                                                Batch{{65, 1}, {0, 1}, {}, 2},
                                                std::vector<int>{64, 0}, f32, f32, true));
  cases.push_back(make_unique<RecordReplayCase>("gdn_record", q397, Batch{{2, 1}, {0, -1}, {}, 1},
                                                std::vector<int>{1, 0}, bf16, bf16, true));
  cases.push_back(make_unique<RecordReplayCase>("gdn_replay", next, Batch{{3}, {1}, {}, 2},
                                                std::vector<int>{2}, bf16, f32, true));
  // Decode v2: record / replay at K = V = 128 with a bf16 pool (GVA 2 and 4, padding, every k),
  // K = 256, and K = 64 / V = 96 with a bf16 pool.
  cases.push_back(make_unique<RecordReplayCase>("gdn_record", k128g2,
                                                Batch{{4, 1, 16}, {1, -1, 0}, {}, 2},
                                                std::vector<int>{2, 0, 9}, bf16, bf16, true));
  cases.push_back(make_unique<RecordReplayCase>("gdn_replay", k128g4, Batch{{5, 3}, {0, 1}, {}, 2},
                                                std::vector<int>{5, 1}, f32, bf16, true));
  cases.push_back(make_unique<RecordReplayCase>("gdn_record", Heads{1, 2, 256, 64},
                                                Batch{{3}, {0}, {}, 1}, std::vector<int>{2}, bf16,
                                                f32, true));
  cases.push_back(make_unique<RecordReplayCase>("gdn_replay", k64v96, Batch{{4, 2}, {1, 0}, {}, 2},
                                                std::vector<int>{3, 2}, bf16, bf16, true));
}

}  // namespace hybrid::test
