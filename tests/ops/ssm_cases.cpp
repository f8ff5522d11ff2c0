// Cases: ssm_step, ssm_step_record, ssm_replay, ssm_chunk_scan. The oracle is one f64
// token-by-token recurrence (mamba_ssm's selective_state_update_ref written from the math), so
// every case that is not a plain step is also an equivalence: chunked scan == step token by token,
// record + replay(k) == k plain steps, pieces resumed from saved states == the whole sequence,
// boundary states == recurrent states at those positions.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "hybrid/ops/ssm.h"
#include "ops/cases.h"
#include "ops/harness.h"

namespace hybrid::test {

namespace {

using Ints = std::vector<int64_t>;

struct Shape {
  int64_t H, P, N, G;
};

// Options shared by every op (the ones ssm_replay has no use for are ignored there).
struct Opts {
  DType act = DType::f32;    // x, dt, B, C, z, y
  DType state = DType::f32;  // the pool
  DType log = DType::f32;    // tape (record / replay) and chunk_states
  bool D = true, bias = true, softplus = true, z = false, limit = false, strided = false;
  // With softplus and dt_bias: dt_bias in [0.5, 2.5] instead of [-6, -2.5], so dt' ~ 0.5-4 and a
  // token's decay dt'·A ~ -1 to -18: exp(cs) of a 64-token tile underflows (strong decay).
  bool fast_decay = false;
};

constexpr float kDtMin = 0.004f, kDtMax = 0.08f;  // dt_limit when Opts::limit (both bind)

std::string ints_text(const Ints& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}

std::string shape_text(const Shape& s, const Opts& o) {
  return str("H=", s.H, ",P=", s.P, ",N=", s.N, ",G=", s.G, ",x=", dtype_name(o.act),
             ",state=", dtype_name(o.state), o.D ? ",D" : "", o.bias ? ",dt_bias" : "",
             o.softplus ? ",softplus" : ",raw_dt", o.z ? ",z" : "", o.limit ? ",dt_limit" : "",
             o.strided ? ",strided" : "", o.fast_decay ? ",fast_decay" : "");
}

Slot& ints(Slots& s, const std::string& name, const Ints& v) {
  Slot& slot = s.input(name, DType::i32, {static_cast<int64_t>(v.size())});
  std::vector<double> d(v.begin(), v.end());
  fill_values(slot, d);
  return slot;
}

// x, dt, A_log, B, C (+ D, dt_bias, z) for T tokens, in the op's domain: A = -exp(A_log) in
// [-4.5, -1]; dt' = softplus(dt + dt_bias) mostly in [0.001, 0.2] (raw dt in [0.001, 0.1]).
void init_inputs(Rng& rng, Slots& s, int64_t T, const Shape& sh, const Opts& o) {
  const int64_t H = sh.H, P = sh.P, N = sh.N, G = sh.G;
  if (o.strided) {  // rows read out of packed projections: extra columns and an offset
    fill_normal(
        s.strided("x", Role::in, o.act, {T, H, P}, {H * P + 5, P, 1}, 2, T * (H * P + 5) + 2), rng);
    fill_normal(
        s.strided("B", Role::in, o.act, {T, G, N}, {G * N + 3, N, 1}, 1, T * (G * N + 3) + 1), rng);
    fill_normal(s.strided("C", Role::in, o.act, {T, G, N}, {2 * G * N + 3, N, 1}, G * N,
                          T * (2 * G * N + 3) + G * N),
                rng);
  } else {
    fill_normal(s.input("x", o.act, {T, H, P}), rng);
    fill_normal(s.input("B", o.act, {T, G, N}), rng);
    fill_normal(s.input("C", o.act, {T, G, N}), rng);
  }
  Slot& dt = o.strided ? s.strided("dt", Role::in, o.act, {T, H}, {H + 3, 1}, 0, T * (H + 3))
                       : s.input("dt", o.act, {T, H});
  if (o.softplus)
    fill_normal(dt, rng, 0.0, 1.0);
  else
    fill_uniform(dt, rng, 0.001, 0.1);
  fill_uniform(s.input("A_log", DType::f32, {H}), rng, 0.0, 1.5);
  if (o.D) fill_uniform(s.input("D", DType::f32, {H}), rng, 0.5, 1.5);
  if (o.bias) {
    if (o.softplus && o.fast_decay)
      fill_uniform(s.input("dt_bias", DType::f32, {H}), rng, 0.5, 2.5);
    else if (o.softplus)
      fill_uniform(s.input("dt_bias", DType::f32, {H}), rng, -6.0, -2.5);
    else
      fill_uniform(s.input("dt_bias", DType::f32, {H}), rng, 0.0, 0.02);
  }
  if (o.z) fill_normal(s.input("z", o.act, {T, H, P}), rng, 0.0, 1.5);
}

void init_pool(Rng& rng, Slots& s, int64_t slots, const Shape& sh, const Opts& o) {
  fill_normal(s.inout("state", o.state, {slots, sh.H, sh.P, sh.N}), rng, 0.0, 0.5);
}

template <class Args>
void set_inputs(Args& a, const Views& v, const Opts& o, int64_t t0 = 0, int64_t len = -1) {
  auto tok = [&](const char* name) {
    const Tensor& t = v.at(name);
    return len < 0 ? t : t.slice(0, t0, len);
  };
  a.x = tok("x");
  a.dt = tok("dt");
  a.B = tok("B");
  a.C = tok("C");
  a.A_log = v.at("A_log");
  if (o.D) a.D = v.at("D");
  if (o.bias) a.dt_bias = v.at("dt_bias");
  if (o.z) a.z = tok("z");
  a.dt_softplus = o.softplus;
  if (o.limit) {
    a.dt_min = kDtMin;
    a.dt_max = kDtMax;
  }
}

double round_to(DType dt, double v) {
  if (dt == DType::bf16) return f32_from_bf16(bf16_from_f32(static_cast<float>(v)));
  if (dt == DType::f16) return f32_from_f16(f16_from_f32(static_cast<float>(v)));
  return static_cast<float>(v);
}

// The f64 oracle: the recurrence of one token, for every head, on a state S [H, P, N].
struct Ref {
  Shape sh;
  Opts o;
  std::vector<double> x, dt, A_log, B, C, D, bias, z;

  Ref(const Slots& s, const Shape& sh, const Opts& o) : sh(sh), o(o) {
    x = s["x"].values();
    dt = s["dt"].values();
    A_log = s["A_log"].values();
    B = s["B"].values();
    C = s["C"].values();
    if (o.D) D = s["D"].values();
    if (o.bias) bias = s["dt_bias"].values();
    if (o.z) z = s["z"].values();
  }
  static double softplus(double v) { return v > 20.0 ? v : std::log1p(std::exp(v)); }
  double dt_eff(int64_t t, int64_t h) const {
    double v = dt[t * sh.H + h] + (o.bias ? bias[h] : 0.0);
    if (o.softplus) v = softplus(v);
    if (o.limit)
      v = std::min(std::max(v, static_cast<double>(kDtMin)), static_cast<double>(kDtMax));
    return v;
  }
  // Token t: S ← dA·S + dt'·x ⊗ B;  y = (S·C + D·x)·silu(z). A masked token is the identity
  // (dt' = 0, dA = 1). Writes y [H, P], and the tape dA [H], dBx [H, P, N] when asked.
  void step(double* S, int64_t t, double* y, bool active = true, double* dA_out = nullptr,
            double* dBx_out = nullptr) const {
    const int64_t H = sh.H, P = sh.P, N = sh.N, per_group = sh.H / sh.G;
    for (int64_t h = 0; h < H; ++h) {
      const int64_t g = h / per_group;
      const double dtp = active ? dt_eff(t, h) : 0.0;
      const double dA = active ? std::exp(-std::exp(A_log[h]) * dtp) : 1.0;
      if (dA_out) dA_out[h] = dA;
      for (int64_t p = 0; p < P; ++p) {
        const double xv = x[(t * H + h) * P + p];
        double acc = 0.0;
        for (int64_t n = 0; n < N; ++n) {
          const double dBx = dtp * xv * B[(t * sh.G + g) * N + n];
          if (dBx_out) dBx_out[(h * P + p) * N + n] = dBx;
          double& s = S[(h * P + p) * N + n];
          s = dA * s + dBx;
          acc += s * C[(t * sh.G + g) * N + n];
        }
        double yv = acc + (o.D ? D[h] * xv : 0.0);
        if (o.z) {
          const double zv = z[(t * H + h) * P + p];
          yv *= zv / (1.0 + std::exp(-zv));
        }
        y[h * P + p] = yv;
      }
    }
  }
  int64_t state_size() const { return sh.H * sh.P * sh.N; }
};

Ints offsets(const Ints& lens) {
  Ints cu(lens.size() + 1, 0);
  for (size_t i = 0; i < lens.size(); ++i) cu[i + 1] = cu[i] + lens[i];
  return cu;
}

// ---- ssm_step --------------------------------------------------------------------------------

struct StepCase : Case {
  Shape sh;
  Opts o;
  Ints slots;  // per sequence (one token each); < 0 = padding
  int64_t pool;
  int64_t row_pad = 0;  // > 0: pool rows of N + row_pad elements (not packed: v6 refuses, v5 runs)

  StepCase(Shape sh, Opts o, Ints slots, int64_t pool)
      : sh(sh), o(o), slots(std::move(slots)), pool(pool) {}
  std::string op() const override { return "ssm_step"; }
  std::string params() const override {
    return str("batch=", slots.size(), ",slots=", ints_text(slots), ",pool=", pool, ",",
               shape_text(sh, o), row_pad ? str(",pool_row_stride=N+", row_pad) : std::string());
  }
  void init(Rng& rng, Slots& s) override {
    const int64_t batch = static_cast<int64_t>(slots.size());
    init_inputs(rng, s, batch, sh, o);
    if (row_pad > 0) {
      const int64_t row = sh.N + row_pad;
      fill_normal(s.strided("state", Role::inout, o.state, {pool, sh.H, sh.P, sh.N},
                            {sh.H * sh.P * row, sh.P * row, row, 1}, 0, pool * sh.H * sh.P * row),
                  rng, 0.0, 0.5);
    } else {
      init_pool(rng, s, pool, sh, o);
    }
    ints(s, "state_slots", slots);
    s.output("y", o.act, {batch, sh.H, sh.P});
  }
  void run(const Views& v, Context& ctx) override {
    SsmStep a;
    set_inputs(a, v, o);
    a.state = v.at("state");
    a.state_slots = v.at("state_slots");
    a.y = v.at("y");
    ssm_step(a, ctx);
  }
  void oracle(const Slots& s, Expected& e) override {
    const Ref ref(s, sh, o);
    const int64_t SZ = ref.state_size(), HP = sh.H * sh.P;
    std::vector<double> pool_v = s["state"].values(), y(slots.size() * HP, 0.0);
    for (size_t b = 0; b < slots.size(); ++b)
      if (slots[b] >= 0) ref.step(&pool_v[slots[b] * SZ], static_cast<int64_t>(b), &y[b * HP]);
    e["y"] = y;
    e["state"] = pool_v;
  }
};

// ---- ssm_step_record (and record followed by ssm_replay) -------------------------------------

// Records every sequence from its snapshot. With replay_k, the case then replays k_i steps onto
// the snapshot in the pool; the oracle's pool is k_i plain steps: "record + replay(k) == k steps".
struct RecordCase : Case {
  Shape sh;
  Opts o;
  Ints lens, slots;
  int64_t pool;
  bool mask, state_out;
  Ints replay_k;  // empty: record only

  RecordCase(Shape sh, Opts o, Ints lens, Ints slots, int64_t pool, bool mask, bool state_out,
             Ints replay_k = {})
      : sh(sh),
        o(o),
        lens(std::move(lens)),
        slots(std::move(slots)),
        pool(pool),
        mask(mask),
        state_out(state_out),
        replay_k(std::move(replay_k)) {}
  std::string op() const override { return replay_k.empty() ? "ssm_step_record" : "ssm_replay"; }
  std::string params() const override {
    return str(replay_k.empty() ? "" : "record_then_replay,k=",
               replay_k.empty() ? "" : ints_text(replay_k) + ",", "seqs=", ints_text(lens),
               ",slots=", ints_text(slots), ",pool=", pool, ",", shape_text(sh, o),
               ",log=", dtype_name(o.log), mask ? ",mask" : "", state_out ? ",state_out" : "");
  }
  int64_t T() const { return std::accumulate(lens.begin(), lens.end(), int64_t{0}); }
  // Replay from a bf16 tape: the replayed state carries the tape's bf16 rounding of dA and dBx,
  // so it is held to the bf16 tolerance whatever the pool dtype.
  Tolerance tolerance(const Slot& out, DeviceType backend) const override {
    if (!replay_k.empty() && out.name == "state" && o.log == DType::bf16)
      return default_tolerance(DType::bf16, backend);
    return Case::tolerance(out, backend);
  }
  void init(Rng& rng, Slots& s) override {
    const int64_t T = this->T(), seqs = static_cast<int64_t>(lens.size());
    init_inputs(rng, s, T, sh, o);
    init_pool(rng, s, pool, sh, o);
    ints(s, "cu_seqlens", offsets(lens));
    ints(s, "state_slots", slots);
    if (mask) {  // about one step in three is masked (the identity)
      Slot& m = s.input("mask", DType::u8, {T});
      for (int64_t t = 0; t < T; ++t) m.set(t, rng.uniform() < 0.35 ? 0.0 : 1.0);
    }
    if (!replay_k.empty()) ints(s, "num_steps", replay_k);
    s.output("y", o.act, {T, sh.H, sh.P});
    s.output("dA_log", o.log, {T, sh.H});
    s.output("dBx_log", o.log, {T, sh.H, sh.P, sh.N});
    if (state_out) s.output("state_out", o.state, {seqs, sh.H, sh.P, sh.N});
  }
  void run(const Views& v, Context& ctx) override {
    SsmStepRecord a;
    set_inputs(a, v, o);
    if (mask) a.mask = v.at("mask");
    a.cu_seqlens = v.at("cu_seqlens");
    a.state_slots = v.at("state_slots");
    a.state = v.at("state");
    a.y = v.at("y");
    a.dA_log = v.at("dA_log");
    a.dBx_log = v.at("dBx_log");
    if (state_out) a.state_out = v.at("state_out");
    ssm_step_record(a, ctx);
    if (replay_k.empty()) return;
    SsmReplay r;
    r.dA_log = a.dA_log;
    r.dBx_log = a.dBx_log;
    r.mask = a.mask;
    r.cu_seqlens = a.cu_seqlens;
    r.state_slots = a.state_slots;
    r.num_steps = v.at("num_steps");
    r.state = a.state;
    ssm_replay(r, ctx);
  }
  void oracle(const Slots& s, Expected& e) override {
    const Ref ref(s, sh, o);
    const int64_t T = this->T(), H = sh.H, SZ = ref.state_size(), HP = H * sh.P;
    std::vector<double> pool_v = s["state"].values();
    std::vector<double> y(T * HP, 0.0), dA(T * H, 1.0), dBx(T * SZ, 0.0), out;
    std::vector<double> mask_v = mask ? s["mask"].values() : std::vector<double>(T, 1.0);
    const Ints cu = offsets(lens);
    for (size_t i = 0; i < lens.size(); ++i) {
      std::vector<double> S(SZ, 0.0);
      if (slots[i] >= 0) {
        S.assign(pool_v.begin() + slots[i] * SZ, pool_v.begin() + (slots[i] + 1) * SZ);
        std::vector<double> snapshot = S;
        for (int64_t t = cu[i]; t < cu[i + 1]; ++t) {
          ref.step(S.data(), t, &y[t * HP], mask_v[t] != 0.0, &dA[t * H], &dBx[t * SZ]);
          // k plain steps (masked steps are identities) from the snapshot, for the replay
          if (!replay_k.empty() && t - cu[i] < replay_k[i]) {
            std::vector<double> scratch(HP);
            ref.step(snapshot.data(), t, scratch.data(), mask_v[t] != 0.0);
          }
        }
        if (!replay_k.empty())
          std::copy(snapshot.begin(), snapshot.end(), pool_v.begin() + slots[i] * SZ);
      }
      out.insert(out.end(), S.begin(), S.end());  // zeros for a padding sequence
    }
    e["y"] = y;
    e["dA_log"] = dA;
    e["dBx_log"] = dBx;
    e["state"] = pool_v;
    if (state_out) e["state_out"] = out;
  }
};

// ---- ssm_replay on a given tape --------------------------------------------------------------

struct ReplayCase : Case {
  int64_t H, P, N;
  Opts o;
  Ints lens, slots, ks;
  int64_t pool;
  bool mask;

  ReplayCase(int64_t H, int64_t P, int64_t N, Opts o, Ints lens, Ints slots, Ints ks, int64_t pool,
             bool mask)
      : H(H),
        P(P),
        N(N),
        o(o),
        lens(std::move(lens)),
        slots(std::move(slots)),
        ks(std::move(ks)),
        pool(pool),
        mask(mask) {}
  std::string op() const override { return "ssm_replay"; }
  std::string params() const override {
    return str("seqs=", ints_text(lens), ",slots=", ints_text(slots), ",k=", ints_text(ks),
               ",pool=", pool, ",H=", H, ",P=", P, ",N=", N, ",state=", dtype_name(o.state),
               ",log=", dtype_name(o.log), mask ? ",mask" : "");
  }
  void init(Rng& rng, Slots& s) override {
    const int64_t T = std::accumulate(lens.begin(), lens.end(), int64_t{0});
    fill_uniform(s.input("dA_log", o.log, {T, H}), rng, 0.3, 1.0);
    fill_normal(s.input("dBx_log", o.log, {T, H, P, N}), rng, 0.0, 0.1);
    if (mask) {
      Slot& m = s.input("mask", DType::i32, {T});
      for (int64_t t = 0; t < T; ++t) m.set(t, rng.uniform() < 0.3 ? 0.0 : 1.0);
    }
    ints(s, "cu_seqlens", offsets(lens));
    ints(s, "state_slots", slots);
    ints(s, "num_steps", ks);
    fill_normal(s.inout("state", o.state, {pool, H, P, N}), rng, 0.0, 0.5);
  }
  void run(const Views& v, Context& ctx) override {
    SsmReplay r;
    r.dA_log = v.at("dA_log");
    r.dBx_log = v.at("dBx_log");
    if (mask) r.mask = v.at("mask");
    r.cu_seqlens = v.at("cu_seqlens");
    r.state_slots = v.at("state_slots");
    r.num_steps = v.at("num_steps");
    r.state = v.at("state");
    ssm_replay(r, ctx);
  }
  void oracle(const Slots& s, Expected& e) override {
    const int64_t SZ = H * P * N;
    std::vector<double> pool_v = s["state"].values(), dA = s["dA_log"].values(),
                        dBx = s["dBx_log"].values();
    const Ints cu = offsets(lens);
    for (size_t i = 0; i < lens.size(); ++i) {
      if (slots[i] < 0) continue;
      double* S = &pool_v[slots[i] * SZ];
      for (int64_t t = cu[i]; t < cu[i] + ks[i]; ++t) {
        if (mask && s["mask"].get(t) == 0.0) continue;
        for (int64_t h = 0; h < H; ++h)
          for (int64_t j = 0; j < P * N; ++j)
            S[h * P * N + j] = dA[t * H + h] * S[h * P * N + j] + dBx[t * SZ + h * P * N + j];
      }
    }
    e["state"] = pool_v;
  }
};

// ---- ssm_chunk_scan ---------------------------------------------------------------------------

// One batch through ssm_chunk_scan; the oracle is the token-by-token recurrence, its state
// sampled after every Q tokens of each sequence for chunk_states.
struct ScanCase : Case {
  Shape sh;
  Opts o;
  Ints lens, slots, init_flags;  // init_flags empty: has_initial_state not given
  int64_t pool, Q;
  bool chunk_states;

  ScanCase(Shape sh, Opts o, Ints lens, Ints slots, Ints init_flags, int64_t pool, int64_t Q,
           bool cs)
      : sh(sh),
        o(o),
        lens(std::move(lens)),
        slots(std::move(slots)),
        init_flags(std::move(init_flags)),
        pool(pool),
        Q(Q),
        chunk_states(cs) {}
  std::string op() const override { return "ssm_chunk_scan"; }
  std::string params() const override {
    return str("T=", T(), ",seqs=", ints_text(lens), ",slots=", ints_text(slots),
               ",init=", init_flags.empty() ? "none" : ints_text(init_flags), ",pool=", pool,
               ",Q=", Q, ",", shape_text(sh, o),
               chunk_states ? str(",chunk_states=", dtype_name(o.log)) : "");
  }
  int64_t T() const { return std::accumulate(lens.begin(), lens.end(), int64_t{0}); }
  int64_t chunks() const {
    int64_t c = 0;
    for (int64_t l : lens) c += (l + Q - 1) / Q;
    return c;
  }
  void init(Rng& rng, Slots& s) override {
    const int64_t T = this->T();
    init_inputs(rng, s, T, sh, o);
    init_pool(rng, s, pool, sh, o);
    ints(s, "cu_seqlens", offsets(lens));
    ints(s, "state_slots", slots);
    if (!init_flags.empty()) ints(s, "has_initial_state", init_flags);
    if (o.strided)  // y written into a wider buffer too
      s.strided("y", Role::out, o.act, {T, sh.H, sh.P}, {sh.H * sh.P + 7, sh.P, 1}, 1,
                T * (sh.H * sh.P + 7) + 1);
    else
      s.output("y", o.act, {T, sh.H, sh.P});
    if (chunk_states) s.output("chunk_states", o.log, {chunks(), sh.H, sh.P, sh.N});
  }
  void run(const Views& v, Context& ctx) override {
    SsmChunkScan a;
    set_inputs(a, v, o);
    a.cu_seqlens = v.at("cu_seqlens");
    a.state_slots = v.at("state_slots");
    if (!init_flags.empty()) a.has_initial_state = v.at("has_initial_state");
    a.state = v.at("state");
    a.y = v.at("y");
    if (chunk_states) a.chunk_states = v.at("chunk_states");
    a.chunk_size = Q;
    ssm_chunk_scan(a, ctx);
  }
  void oracle(const Slots& s, Expected& e) override {
    const Ref ref(s, sh, o);
    const int64_t SZ = ref.state_size(), HP = sh.H * sh.P;
    std::vector<double> pool_v = s["state"].values(), y(T() * HP, 0.0), cs;
    const Ints cu = offsets(lens);
    for (size_t i = 0; i < lens.size(); ++i) {
      const int64_t nc = (lens[i] + Q - 1) / Q;
      if (slots[i] < 0) {
        cs.insert(cs.end(), nc * SZ, 0.0);
        continue;
      }
      std::vector<double> S(SZ, 0.0);
      if (!init_flags.empty() && init_flags[i] != 0)
        S.assign(pool_v.begin() + slots[i] * SZ, pool_v.begin() + (slots[i] + 1) * SZ);
      for (int64_t t = cu[i]; t < cu[i + 1]; ++t) {
        ref.step(S.data(), t, &y[t * HP]);
        const int64_t done = t + 1 - cu[i];
        if (done % Q == 0 || t + 1 == cu[i + 1]) cs.insert(cs.end(), S.begin(), S.end());
      }
      std::copy(S.begin(), S.end(), pool_v.begin() + slots[i] * SZ);
    }
    e["y"] = y;
    e["state"] = pool_v;
    if (chunk_states) e["chunk_states"] = cs;
  }
};

// One sequence cut into pieces, each run from the state the previous piece left in the pool:
// a piece of length 1 goes through ssm_step (decode after prefill), longer ones through
// ssm_chunk_scan with has_initial_state = 1 (the first piece starts from the pool too). The
// oracle is the whole sequence token by token, with the state rounded to the pool dtype where a
// piece ends (that is what the pool holds between calls).
struct PiecesCase : Case {
  Shape sh;
  Opts o;
  Ints pieces;
  int64_t Q, slot = 1, pool = 3;

  PiecesCase(Shape sh, Opts o, Ints pieces, int64_t Q)
      : sh(sh), o(o), pieces(std::move(pieces)), Q(Q) {}
  std::string op() const override { return "ssm_chunk_scan"; }
  std::string params() const override {
    return str("resumed_pieces=", ints_text(pieces), ",T=", T(), ",Q=", Q, ",", shape_text(sh, o));
  }
  int64_t T() const { return std::accumulate(pieces.begin(), pieces.end(), int64_t{0}); }
  void init(Rng& rng, Slots& s) override {
    init_inputs(rng, s, T(), sh, o);
    init_pool(rng, s, pool, sh, o);
    for (size_t k = 0; k < pieces.size(); ++k) ints(s, str("cu", k), {0, pieces[k]});
    ints(s, "state_slots", {slot});
    ints(s, "has_initial_state", {1});
    s.output("y", o.act, {T(), sh.H, sh.P});
  }
  void run(const Views& v, Context& ctx) override {
    int64_t t0 = 0;
    for (size_t k = 0; k < pieces.size(); ++k) {
      const int64_t len = pieces[k];
      if (len == 1) {
        SsmStep a;
        set_inputs(a, v, o, t0, 1);
        a.state = v.at("state");
        a.state_slots = v.at("state_slots");
        a.y = v.at("y").slice(0, t0, 1);
        ssm_step(a, ctx);
      } else {
        SsmChunkScan a;
        set_inputs(a, v, o, t0, len);
        a.cu_seqlens = v.at(str("cu", k));
        a.state_slots = v.at("state_slots");
        a.has_initial_state = v.at("has_initial_state");
        a.state = v.at("state");
        a.y = v.at("y").slice(0, t0, len);
        a.chunk_size = Q;
        ssm_chunk_scan(a, ctx);
      }
      t0 += len;
    }
  }
  void oracle(const Slots& s, Expected& e) override {
    const Ref ref(s, sh, o);
    const int64_t SZ = ref.state_size(), HP = sh.H * sh.P;
    std::vector<double> pool_v = s["state"].values(), y(T() * HP);
    double* S = &pool_v[slot * SZ];
    int64_t t = 0;
    for (int64_t len : pieces) {
      for (int64_t end = t + len; t < end; ++t) ref.step(S, t, &y[t * HP]);
      for (int64_t j = 0; j < SZ; ++j) S[j] = round_to(o.state, S[j]);
    }
    e["y"] = y;
    e["state"] = pool_v;
  }
};

// ---- benchmark shapes (perf only) -------------------------------------------------------------

// The /work/shared/anchors.md shapes: bf16 activations (x, dt, B, C, y), f32 params and pool, D,
// dt_bias, softplus, no z (the Mamba2 / Nemotron-H call). Pool of exactly `seqs` slots 0..seqs-1,
// so the bytes (Case::bytes: inout counted twice) are the state read + written once plus the token
// tensors. decode: ssm_step with one token for each of `seqs` sequences; otherwise ssm_chunk_scan
// over `seqs` sequences of `len` tokens each, from zero initial states (has_initial_state absent).
struct SsmPerfCase : Case {
  Shape sh;
  int64_t seqs, len, Q;
  bool decode;
  SsmPerfCase(Shape sh, int64_t seqs, int64_t len, int64_t Q, bool decode)
      : sh(sh), seqs(seqs), len(len), Q(Q), decode(decode) {}
  std::string op() const override { return decode ? "ssm_step" : "ssm_chunk_scan"; }
  std::string params() const override {
    return decode ? str("decode,B=", seqs, ",H=", sh.H, ",P=", sh.P, ",N=", sh.N, ",G=", sh.G,
                        ",x=bf16,state=f32,perf")
                  : str("prefill,", seqs, "x", len, ",Q=", Q, ",H=", sh.H, ",P=", sh.P, ",N=", sh.N,
                        ",G=", sh.G, ",x=bf16,state=f32,perf");
  }
  bool perf_only() const override { return true; }
  int64_t T() const { return decode ? seqs : seqs * len; }
  void init(Rng& rng, Slots& s) override {
    const int64_t T = this->T(), H = sh.H, P = sh.P, N = sh.N, G = sh.G;
    const DType bf16 = DType::bf16;
    fill_uniform(s.input("x", bf16, {T, H, P}), rng, -1, 1);
    fill_uniform(s.input("dt", bf16, {T, H}), rng, -1, 1);
    fill_uniform(s.input("B", bf16, {T, G, N}), rng, -1, 1);
    fill_uniform(s.input("C", bf16, {T, G, N}), rng, -1, 1);
    fill_uniform(s.input("A_log", DType::f32, {H}), rng, 0.0, 1.5);
    fill_uniform(s.input("D", DType::f32, {H}), rng, 0.5, 1.5);
    fill_uniform(s.input("dt_bias", DType::f32, {H}), rng, -6.0, -2.5);
    std::vector<double> slots(seqs), cu(seqs + 1);
    for (int64_t n = 0; n < seqs; ++n) slots[n] = static_cast<double>(n);
    for (int64_t n = 0; n <= seqs; ++n) cu[n] = static_cast<double>(n * len);
    fill_values(s.input("state_slots", DType::i32, {seqs}), slots);
    if (!decode) fill_values(s.input("cu_seqlens", DType::i32, {seqs + 1}), cu);
    fill_uniform(s.inout("state", DType::f32, {seqs, H, P, N}), rng, -0.1, 0.1);
    s.output("y", bf16, {T, H, P});
  }
  void run(const Views& v, Context& ctx) override {
    Opts o;
    if (decode) {
      SsmStep a;
      set_inputs(a, v, o);
      a.state = v.at("state"), a.state_slots = v.at("state_slots"), a.y = v.at("y");
      ssm_step(a, ctx);
    } else {
      SsmChunkScan a;
      set_inputs(a, v, o);
      a.cu_seqlens = v.at("cu_seqlens"), a.state_slots = v.at("state_slots");
      a.state = v.at("state"), a.y = v.at("y");
      a.chunk_size = Q;
      ssm_chunk_scan(a, ctx);
    }
  }
  // Chunked scan: 2·P·N (chunk state) + 2·P·N (inter) + (Q + 1)·(N + P) (intra, causal half)
  // per token and head, the SSD work of mamba_chunk_scan_combined (CB per group counted per head).
  double flops(const Slots&) const override {
    if (decode) return 0.0;
    const double PN = static_cast<double>(sh.P * sh.N);
    return static_cast<double>(T() * sh.H) *
           (4.0 * PN + static_cast<double>((Q + 1) * (sh.N + sh.P)));
  }
  void oracle(const Slots&, Expected&) override { fail("[ssm perf case] has no oracle"); }
};

// Decode with a bf16 pool (ssm_step, one token per sequence, the SsmPerfCase decode shapes):
// half the state bytes of the f32 decode case.
struct SsmStepBf16PerfCase : Case {
  Shape sh;
  int64_t B;
  SsmStepBf16PerfCase(Shape sh, int64_t B) : sh(sh), B(B) {}
  std::string op() const override { return "ssm_step"; }
  std::string params() const override {
    return str("decode,B=", B, ",H=", sh.H, ",P=", sh.P, ",N=", sh.N, ",G=", sh.G,
               ",x=bf16,state=bf16,perf");
  }
  bool perf_only() const override { return true; }
  void init(Rng& rng, Slots& s) override {
    const int64_t H = sh.H, P = sh.P, N = sh.N, G = sh.G;
    const DType bf16 = DType::bf16;
    fill_uniform(s.input("x", bf16, {B, H, P}), rng, -1, 1);
    fill_uniform(s.input("dt", bf16, {B, H}), rng, -1, 1);
    fill_uniform(s.input("B", bf16, {B, G, N}), rng, -1, 1);
    fill_uniform(s.input("C", bf16, {B, G, N}), rng, -1, 1);
    fill_uniform(s.input("A_log", DType::f32, {H}), rng, 0.0, 1.5);
    fill_uniform(s.input("D", DType::f32, {H}), rng, 0.5, 1.5);
    fill_uniform(s.input("dt_bias", DType::f32, {H}), rng, -6.0, -2.5);
    std::vector<double> slots(B);
    for (int64_t n = 0; n < B; ++n) slots[n] = static_cast<double>(n);
    fill_values(s.input("state_slots", DType::i32, {B}), slots);
    fill_uniform(s.inout("state", bf16, {B, H, P, N}), rng, -0.1, 0.1);
    s.output("y", bf16, {B, H, P});
  }
  void run(const Views& v, Context& ctx) override {
    SsmStep a;
    set_inputs(a, v, Opts{});
    a.state = v.at("state"), a.state_slots = v.at("state_slots"), a.y = v.at("y");
    ssm_step(a, ctx);
  }
  void oracle(const Slots&, Expected&) override { fail("[ssm perf case] has no oracle"); }
};

}  // namespace

void add_ssm_cases(CaseList& cases) {
  const Shape mamba2{80, 64, 128, 1};     // Mamba2-2.7B: H 80, P 64, N 128, G 1
  const Shape nemotron{128, 64, 128, 8};  // Nemotron-H-8B: H 128, P 64, N 128, G 8
  const Shape small{4, 16, 32, 2}, odd{6, 7, 24, 3}, tiny{2, 3, 5, 1};
  Opts plain;  // Mamba2 / Nemotron-H: D, dt_bias, softplus, no z
  Opts all = plain;
  all.z = all.limit = true;
  Opts bf16 = plain;
  bf16.act = bf16.state = DType::bf16;
  Opts bare;  // no D, no bias, raw dt, z gate
  bare.D = bare.bias = bare.softplus = false;
  bare.z = true;
  Opts strided = all;
  strided.strided = true;
  Opts bf16_state = all;
  bf16_state.state = DType::bf16;
  Opts f16 = plain;
  f16.act = DType::f16;
  f16.limit = true;
  auto add = [&](auto* c) { cases.emplace_back(c); };

  // Perf only (anchors.md): decode at B 1 / 64 / 256, chunked prefill at 1 x 16384 and 8 x 4096
  // with chunk 256 (the anchors' mamba_ssm setting) for Mamba2-2.7B and Nemotron-H-8B heads.
  for (int64_t B : {1, 64, 256}) add(new SsmPerfCase(mamba2, B, 1, 0, true));
  for (int64_t B : {1, 64, 256}) add(new SsmStepBf16PerfCase(mamba2, B));
  for (const Shape& sh : {mamba2, nemotron}) {
    add(new SsmPerfCase(sh, 1, 16384, 256, false));
    add(new SsmPerfCase(sh, 8, 4096, 256, false));
  }

  // ssm_step: real shapes (batches with padding slots and a shuffled pool), options, odd sizes.
  add(new StepCase(mamba2, plain, {3, -1, 0, 5}, 6));
  add(new StepCase(mamba2, bf16, {1, 0}, 2));
  add(new StepCase(nemotron, all, {2, 0, -1}, 4));
  add(new StepCase(nemotron, bf16_state, {0, 3}, 4));
  for (const Opts& o : {plain, all, bare, strided, bf16_state, f16})
    add(new StepCase(odd, o, {4, -1, 1, 6, 0, -3, 2}, 7));
  add(new StepCase(tiny, bare, {0}, 1));
  // Decode v2 paths (the recurrent kernels of src/cuda/ssm.cu): B = 1 at real shapes (f32 and
  // bf16 pool); a 256-sequence batch (real P 64 / N 128, 4 heads to keep the f64 oracle small)
  // with padding slots and a shuffled pool, f32 and bf16 pools; N = 32 (4 lanes a row), N = 256
  // (16 lanes a row) and N = 64 on the vector path, with both pools.
  add(new StepCase(mamba2, plain, {0}, 1));
  add(new StepCase(mamba2, bf16_state, {0}, 1));
  {
    Ints slots(256);
    for (int64_t n = 0; n < 256; ++n) slots[n] = n % 29 == 4 ? -1 : (n * 77) % 256;
    const Shape heads4{4, 64, 128, 2};
    add(new StepCase(heads4, plain, slots, 256));
    add(new StepCase(heads4, bf16_state, slots, 256));
  }
  for (const Shape& sh : {Shape{4, 8, 32, 2}, Shape{2, 6, 256, 1}, Shape{3, 40, 64, 3}})
    for (const Opts& o : {all, bf16_state}) add(new StepCase(sh, o, {1, -1, 0}, 2));
  // Decode v5 (ssm_step.cuda_warp2: the item's x, z copied into its stage): N = 256 with P = 8, so
  // an f32 pool's item is 4 rows and x / z of 2-byte dtypes are one 8-byte piece each (bf16 with
  // z, f16 without; f32 with z: 16 bytes; a bf16 pool: 8 rows); P = 64 / 40 above take 16- to
  // 64-byte runs, P = 6 and P = 40 with a bf16 pool take v4's loads inside v5.
  {
    Opts bf16_act_z = all;
    bf16_act_z.act = DType::bf16;
    for (const Opts& o : {all, bf16, f16, bf16_act_z})
      add(new StepCase(Shape{2, 8, 256, 1}, o, {1, -1, 0}, 2));
  }
  // Decode v3 (ssm_step.cuda_stream: persistent blocks over (tile, head, sequence) items, the
  // pool streamed through shared memory): real shapes at B = 64 with padding slots and a shuffled
  // pool (f32: 2 tiles a head, bf16: 1; several items a block, each stage through several
  // phases): f32, bf16 activations and pool, and every option (z, limits) over a bf16 pool.
  {
    Ints slots(64);
    for (int64_t n = 0; n < 64; ++n) slots[n] = n % 21 == 8 ? -1 : (n * 41) % 67;
    for (const Opts& o : {plain, bf16, bf16_state}) add(new StepCase(mamba2, o, slots, 67));
    // The v2 fallback (ssm_step.cuda) at the same shape: B / C rows read out of wider buffers
    // at odd offsets (not 16-byte aligned), which the v3 kernel refuses.
    add(new StepCase(mamba2, strided, slots, 67));
  }

  // Written for decode v6 (ssm_step.cuda_bulk, measured slower in session 5, kept on branch
  // next/decode-bulk), kept as coverage of large batches: P 64 / N 128 with
  // 4 heads over 250 sequences (f32 pool: 8000 items, ~5 a warp, the stages' parities flip;
  // bf16 pool: 4000), f32 activations with z (x, z: 32-byte bulk copies) and bf16 activations
  // with z (16 / 32 bytes), padding slots (0 bytes armed), a shuffled pool with unused rows;
  // 250 sequences are no multiple of the warps (a partial last sweep).
  {
    Ints slots(250);
    for (int64_t n = 0; n < 250; ++n) slots[n] = n % 23 == 9 ? -1 : (n * 53) % 256;
    const Shape heads4{4, 64, 128, 2};
    Opts f32_z = all, bf16_z_state = all;
    bf16_z_state.act = bf16_z_state.state = DType::bf16;
    for (const Opts& o : {f32_z, bf16_z_state, bf16_state})
      add(new StepCase(heads4, o, slots, 256));
  }
  // The v5 fallback under v6 (pool rows of N + 8 elements: not one contiguous bulk copy), real
  // shapes at B = 16 with a padding slot, both pools.
  for (const Opts& o : {plain, bf16_state}) {
    Ints slots(16);
    for (int64_t n = 0; n < 16; ++n) slots[n] = n == 5 ? -1 : (n * 7) % 17;
    auto* c = new StepCase(mamba2, o, slots, 17);
    c->row_pad = 8;
    add(c);
  }

  // ssm_step_record: varlen, padding, mask, bf16 tape, state_out; real shapes with few tokens.
  Opts bf16_log = all;
  bf16_log.log = DType::bf16;
  add(new RecordCase(mamba2, plain, {3}, {1}, 2, false, true));
  add(new RecordCase(nemotron, all, {2, 1}, {0, 2}, 3, true, true));
  add(new RecordCase(small, all, {5, 0, 7, 3}, {2, 0, -1, 4}, 5, true, true));
  add(new RecordCase(small, bf16_log, {4, 6}, {1, 0}, 2, true, false));
  add(new RecordCase(odd, bare, {1, 9}, {-1, 0}, 1, false, true));
  add(new RecordCase(odd, bf16_state, {8}, {0}, 1, true, true));
  add(new RecordCase(mamba2, bf16_state, {2, 1}, {0, -1}, 1, true, true));
  add(new RecordCase(Shape{2, 6, 256, 1}, all, {3, 2}, {1, 0}, 2, false, true, {2, 1}));

  // ssm_replay on random tapes (every k, masks, bf16), then record + replay(k) == k steps for
  // every k in [0, T] (one sequence per k), with and without masked steps.
  add(new ReplayCase(128, 64, 128, plain, {2, 3}, {1, 0}, {1, 3}, 2, false));
  Opts log_bf16 = plain;
  log_bf16.log = log_bf16.state = DType::bf16;
  add(new ReplayCase(80, 64, 128, log_bf16, {3, 1}, {0, -1}, {2, 1}, 1, true));
  add(new ReplayCase(3, 5, 16, plain, {6, 0, 6, 6, 6}, {3, 4, -1, 0, 1}, {0, 0, 2, 5, 6}, 5, true));
  {
    const int64_t T = 6;
    Ints lens(T + 1, T), slots(T + 1), ks(T + 1);
    for (int64_t k = 0; k <= T; ++k) {
      ks[k] = k;
      slots[k] = T - k;  // a shuffled pool
    }
    for (bool mask : {false, true}) {
      add(new RecordCase(small, all, lens, slots, T + 1, mask, false, ks));
      add(new RecordCase(odd, bf16_log, lens, slots, T + 2, mask, true, ks));
    }
    add(new RecordCase(nemotron, plain, {2, 2}, {1, 0}, 2, true, false, {1, 2}));
  }

  // ssm_chunk_scan: real shapes with small T; odd lengths around chunk sizes at small shapes;
  // varlen batches with padding and mixed initial states; every option; boundary states.
  add(new ScanCase(mamba2, plain, {20}, {0}, {1}, 1, 256, true));
  add(new ScanCase(nemotron, plain, {5, 9}, {1, 0}, {0, 1}, 2, 128, true));
  add(new ScanCase(nemotron, bf16, {7}, {0}, {}, 1, 128, false));
  for (int64_t T : {1, 63, 65, 257}) add(new ScanCase(small, all, {T}, {0}, {1}, 1, 64, true));
  add(new ScanCase(small, plain, {1000}, {0}, {1}, 1, 256, true));
  add(new ScanCase(small, plain, {1000}, {1}, {}, 2, 128, true));
  add(new ScanCase(small, all, {65, 0, 130, 7, 64}, {2, 4, -1, 0, 3}, {1, 1, 0, 0, 1}, 5, 64,
                   true));
  add(new ScanCase(odd, bare, {200, 57}, {-1, 0}, {1, 1}, 1, 128, true));
  add(new ScanCase(odd, strided, {129, 3, 256}, {1, 0, 2}, {1, 0, 1}, 3, 128, true));
  add(new ScanCase(odd, bf16_state, {300}, {0}, {1}, 1, 256, true));
  add(new ScanCase(odd, f16, {66, 70}, {0, 1}, {0, 1}, 2, 64, false));
  Opts bf16_chunks = all;
  bf16_chunks.log = DType::bf16;
  add(new ScanCase(tiny, bf16_chunks, {511, 1}, {0, 1}, {1, 0}, 2, 64, true));

  // The tensor-core path of CUDA (ssm_chunk_scan.cuda_v2: P = 64, N 64 / 128 / 256, bf16 x, B,
  // C, y): several chunks and j tiles per chunk, partial last chunks, varlen with padding and
  // mixed initial states, every option, f32 / bf16 pools and chunk_states, Q 64 / 128 / 256.
  Opts v2 = all;  // z gate, dt_limit, D, dt_bias
  v2.act = DType::bf16;
  Opts v2_bare = bare;
  v2_bare.act = DType::bf16;
  Opts v2_bf16 = v2;
  v2_bf16.state = v2_bf16.log = DType::bf16;
  const Shape v2_g2{4, 64, 128, 2}, v2_n64{2, 64, 64, 1}, v2_n256{2, 64, 256, 1};
  add(new ScanCase(mamba2, bf16, {300}, {0}, {1}, 1, 256, true));
  add(new ScanCase(nemotron, bf16, {130, 126}, {1, 0}, {0, 1}, 2, 128, true));
  add(new ScanCase(v2_g2, v2, {300, 0, 129, 64, 1}, {1, 3, -1, 0, 4}, {1, 1, 0, 0, 1}, 5, 128,
                   true));
  add(new ScanCase(v2_g2, v2, {520}, {0}, {}, 1, 256, true));
  add(new ScanCase(v2_n64, v2_bare, {1, 63, 65, 200}, {0, 1, 2, 3}, {1, 0, 1, 0}, 4, 64, true));
  add(new ScanCase(v2_n256, v2_bf16, {70, 450}, {1, 0}, {1, 1}, 2, 256, true));
  add(new ScanCase(v2_n256, v2, {257}, {0}, {0}, 1, 64, false));
  // cuda_v3 (the same supports as v2, C·Bᵀ per (chunk, group) in a workspace read by every head
  // of the group): several groups of several heads, so a wrong group or chunk offset into CB
  // shows; varlen with a padding slot between real ones, an empty sequence, initial states from
  // shuffled slots, partial last chunks (every j tile of Q 256 and the 1-token chunk), chunk
  // states; N 64 at Q 128 with G 2. HYBRID_SSM_CHUNK_V3=0 runs these on v2.
  const Shape v3_g4{8, 64, 128, 4}, v3_n64{4, 64, 64, 2};
  add(new ScanCase(v3_g4, v2, {600, 5, 0, 257, 130}, {2, -1, 4, 0, 3}, {1, 0, 1, 1, 0}, 5, 256,
                   true));
  add(new ScanCase(v3_g4, v2_bf16, {193, 64}, {1, 0}, {1, 1}, 2, 64, true));
  add(new ScanCase(v3_n64, v2_bare, {129, 128, 1, 300}, {3, 0, 1, -1}, {1, 0, 1, 1}, 4, 128, true));
  // More v3 / v2 shapes: groups of 10 and 12 heads (besides the real shapes' 80 and 16), one head
  // a group (G = H, N 256 at Q 256: a CB offset per head); varlen with initial states from
  // shuffled slots, padding slots, an empty sequence, chunk_states (f32 and bf16), Q 64 / 128 /
  // 256, lengths ending inside a 4-token cs piece and inside every j tile. (Written for the
  // removed cuda_v4's head slices; kept as v3 coverage.)
  const Shape h10{20, 64, 128, 2}, h12{12, 64, 64, 1}, g3{3, 64, 256, 3};
  add(new ScanCase(h10, v2, {517, 0, 3, 200}, {3, -1, 0, 2}, {1, 0, 1, 0}, 4, 256, true));
  add(new ScanCase(h10, v2_bf16, {130, 66}, {1, 0}, {1, 1}, 2, 64, true));
  add(new ScanCase(h12, v2_bare, {255, 1, 129}, {2, 0, -1}, {1, 1, 1}, 3, 128, true));
  add(new ScanCase(g3, v2, {301, 2}, {1, 0}, {0, 1}, 2, 256, true));
  // Strong decay (cuda_v6 factors the off-diagonal decays through the row tile's first cs:
  // exp(cs_i - cs_j) = exp(cs_i - cs_i0)·exp(cs_i0 - cs_j), both underflowing here): bf16 pool
  // and chunk_states, z, Q 256 (off-diagonal j tiles), an initial state.
  Opts v2_fast = v2_bf16;
  v2_fast.limit = false;
  v2_fast.fast_decay = true;
  add(new ScanCase(v2_g2, v2_fast, {300, 129}, {1, 0}, {1, 0}, 2, 256, true));
  // Written for cuda_v7 (measured slower in session 5, kept on branch next/ssm-v7), kept as
  // coverage of long walks: many chunks per sequence with a partial last
  // chunk (Q 64: 18 chunks, the last of 12 tokens; Q 256: a last chunk of 100 tokens = two
  // stages, the second partial, whose chunk_states row is written after it); an empty sequence
  // with an initial state (pool = that state), a padding slot with two chunks, a 1-token
  // sequence; N 256 (8 B copies a thread) and N 64 with one head a group (G = H); strong decay
  // over 14 chunks; bf16 pool and chunk_states.
  const Shape v7_g3{6, 64, 128, 3}, v7_n64{4, 64, 64, 4};
  add(new ScanCase(v2_g2, v2, {1100, 356}, {1, 0}, {1, 0}, 2, 64, true));
  add(new ScanCase(v7_g3, v2_bf16, {356, 0, 512, 1}, {0, 2, -1, 1}, {1, 1, 0, 0}, 3, 256, true));
  add(new ScanCase(v2_n256, v2, {700}, {0}, {1}, 1, 128, true));
  add(new ScanCase(v7_n64, v2_bare, {520, 64}, {1, 0}, {0, 1}, 2, 256, true));
  add(new ScanCase(v2_g2, v2_fast, {900}, {0}, {1}, 1, 64, true));
  // v7's walk runs 512-thread blocks when H · seqs <= the SM count and 256-thread blocks
  // otherwise: on an H200 (132 SMs) every case above takes 512 but the Nemotron-H one with two
  // sequences (256 blocks, N 128, bf16 pool); these two take 256 with 144 and 160 blocks, at N 64
  // and N 256 with f32 pools.
  const Shape v7_wide64{48, 64, 64, 4}, v7_wide256{40, 64, 256, 2};
  add(new ScanCase(v7_wide64, v2_bare, {70, 200, 1}, {2, 0, 1}, {1, 0, 1}, 3, 64, true));
  add(new ScanCase(v7_wide256, v2, {130, 0, 257, 64}, {3, 1, -1, 0}, {1, 1, 0, 0}, 4, 128, true));

  // Pieces resumed from saved states == the whole sequence; 1-token pieces are decode steps.
  add(new PiecesCase(small, all, {100, 1, 64, 1, 1, 135}, 64));
  add(new PiecesCase(odd, bf16_state, {70, 1, 200}, 128));
  add(new PiecesCase(nemotron, plain, {6, 1, 3}, 128));
  add(new PiecesCase(v2_g2, v2, {150, 1, 129, 64}, 128));
}

}  // namespace hybrid::test
