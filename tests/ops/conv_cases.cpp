// Cases: conv1d_causal, conv1d_update. Oracle in f64: per sequence, the whole causal conv over
// x_ext = initial state (or zeros) ++ every token the sequence got, in every call of the case.
#include <cmath>
#include <numeric>

#include "hybrid/ops/conv.h"
#include "ops/cases.h"
#include "ops/harness.h"

namespace hybrid::test {

namespace {

// One call of a case: a conv1d_causal over a varlen batch (lens[i] tokens of sequence i), or a
// conv1d_update (one token per sequence).
struct Call {
  bool update = false;
  std::vector<int64_t> lens;  // [N] tokens of each sequence in this call
};

struct ConvConfig {
  int64_t C = 0, W = 4;
  std::vector<Call> calls;
  std::vector<int32_t> slots;     // [N]; negative = padding; empty = no conv_state (stateless)
  std::vector<int32_t> has_init;  // [N] for the first call; empty = left out (all from state)
  int64_t pool = 0;               // conv_state slots
  DType act = DType::f32, wdt = DType::f32, sdt = DType::f32;
  DType flag_dt = DType::i32;  // dtype of has_initial_state
  bool bias = false, silu = false;
  bool no_cu = false;          // single causal call of one sequence without cu_seqlens
  bool strided_x = false;      // x and out are column blocks of wider packed buffers
  bool strided_state = false;  // conv_state slots padded apart (a page of a larger cache)
  bool in_place = false;       // single update call with out = x
};

std::string lens_text(const std::vector<int64_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "+" : "") + std::to_string(v[i]);
  return s;
}

// Tokens of call k are packed on one token axis after those of calls 0..k-1, sequence by
// sequence; out rows follow x rows.
struct ConvCase : Case {
  ConvConfig g;
  int64_t N, T;
  std::vector<std::vector<int64_t>> rows_of;  // [N] rows of x holding sequence i, in order

  explicit ConvCase(ConvConfig cfg) : g(std::move(cfg)) {
    N = static_cast<int64_t>(g.calls[0].lens.size());
    rows_of.resize(N);
    T = 0;
    for (const Call& k : g.calls)
      for (int64_t i = 0; i < N; ++i)
        for (int64_t r = 0; r < k.lens[i]; ++r) rows_of[i].push_back(T++);
  }
  bool stateful() const { return !g.slots.empty(); }
  bool any_update() const {
    for (const Call& k : g.calls)
      if (k.update) return true;
    return false;
  }

  // Cases with a decode step belong to conv1d_update (prefill then decode included).
  std::string op() const override { return any_update() ? "conv1d_update" : "conv1d_causal"; }
  std::string params() const override {
    std::string calls;
    for (const Call& k : g.calls)
      calls += (calls.empty() ? "" : ",") +
               (k.update ? std::string("update") : "causal[" + lens_text(k.lens) + "]");
    std::string slots, init;
    for (size_t i = 0; i < g.slots.size(); ++i)
      slots += (i ? "," : "") + std::to_string(g.slots[i]);
    for (size_t i = 0; i < g.has_init.size(); ++i) init += std::to_string(g.has_init[i]);
    return str("C=", g.C, ",W=", g.W, ",N=", N, ",calls=", calls,
               stateful() ? str(",slots=[", slots, "],pool=", g.pool, ",state=", dtype_name(g.sdt))
                          : std::string(",stateless"),
               init.empty() ? "" : str(",has_init=", init, ":", dtype_name(g.flag_dt)),
               ",x=", dtype_name(g.act), ",w=", dtype_name(g.wdt), g.bias ? ",bias" : "",
               g.silu ? ",silu" : "", g.no_cu ? ",no_cu" : "", g.strided_x ? ",strided_x" : "",
               g.strided_state ? ",strided_state" : "", g.in_place ? ",in_place" : "");
  }

  void init(Rng& rng, Slots& s) override {
    const int64_t C = g.C, K = g.W - 1;
    if (g.strided_x) {  // x: columns [11, 11+C) of a [T, C+37] projection; out: row stride C+5
      fill_normal(s.strided("x", Role::in, g.act, {T, C}, {C + 37, 1}, 11, T * (C + 37) + 11), rng);
      s.strided("out", Role::out, g.act, {T, C}, {C + 5, 1}, 2, T * (C + 5) + 2);
    } else if (g.in_place) {
      fill_normal(s.inout("x", g.act, {T, C}), rng);
    } else {
      fill_normal(s.input("x", g.act, {T, C}), rng);
      s.output("out", g.act, {T, C});
    }
    fill_normal(s.input("weight", g.wdt, {C, g.W}), rng, 0.0, 0.5);
    if (g.bias) fill_normal(s.input("bias", g.wdt, {C}), rng, 0.0, 0.5);
    if (stateful()) {
      if (g.strided_state)
        fill_normal(s.strided("conv_state", Role::inout, g.sdt, {g.pool, C, K}, {C * K + 16, K, 1},
                              5, g.pool * (C * K + 16) + 5),
                    rng);
      else
        fill_normal(s.inout("conv_state", g.sdt, {g.pool, C, K}), rng);
      fill_values(s.input("state_slots", DType::i32, {N}),
                  std::vector<double>(g.slots.begin(), g.slots.end()));
      if (!g.has_init.empty())
        fill_values(s.input("has_init", g.flag_dt, {N}),
                    std::vector<double>(g.has_init.begin(), g.has_init.end()));
    }
    std::vector<double> cu;  // [calls, N+1]
    for (const Call& k : g.calls) {
      cu.push_back(0);
      for (int64_t i = 0; i < N; ++i) cu.push_back(cu.back() + k.lens[i]);
    }
    fill_values(s.input("cu_seqlens", DType::i32, {static_cast<int64_t>(g.calls.size()), N + 1}),
                cu);
  }

  void run(const Views& v, Context& ctx) override {
    const Tensor& out_all = g.in_place ? v.at("x") : v.at("out");
    int64_t row = 0;
    for (size_t k = 0; k < g.calls.size(); ++k) {
      const Call& call = g.calls[k];
      const int64_t rows = std::accumulate(call.lens.begin(), call.lens.end(), int64_t{0});
      const Tensor x = v.at("x").slice(0, row, rows), out = out_all.slice(0, row, rows);
      const Tensor bias = g.bias ? v.at("bias") : Tensor();
      if (call.update) {
        Conv1dUpdate a;
        a.x = x;
        a.weight = v.at("weight");
        a.bias = bias;
        a.out = out;
        a.conv_state = v.at("conv_state");
        a.state_slots = v.at("state_slots");
        a.silu = g.silu;
        conv1d_update(a, ctx);
      } else {
        Conv1dCausal a;
        a.x = x;
        a.weight = v.at("weight");
        a.bias = bias;
        a.out = out;
        if (!g.no_cu) a.cu_seqlens = v.at("cu_seqlens").select(0, static_cast<int64_t>(k));
        if (stateful()) {
          a.conv_state = v.at("conv_state");
          a.state_slots = v.at("state_slots");
          if (k == 0 && !g.has_init.empty()) a.has_initial_state = v.at("has_init");
        }
        a.silu = g.silu;
        conv1d_causal(a, ctx);
      }
      row += rows;
    }
  }

  void oracle(const Slots& s, Expected& e) override {
    const int64_t C = g.C, W = g.W, K = W - 1;
    const Slot& x = s["x"];
    std::vector<double> out(static_cast<size_t>(T * C), 0.0);  // padding rows stay 0
    std::vector<double> state;
    if (stateful()) state = s["conv_state"].values();  // [pool, C, K]
    for (int64_t i = 0; i < N; ++i) {
      const int64_t slot = stateful() ? g.slots[i] : -1;
      if (stateful() && slot < 0) continue;
      const bool from_state = stateful() && (g.has_init.empty() || g.has_init[i] != 0);
      const int64_t L = static_cast<int64_t>(rows_of[i].size());
      for (int64_t c = 0; c < C; ++c) {
        std::vector<double> ext(K, 0.0);  // x_ext = state ++ tokens
        if (from_state)
          for (int64_t j = 0; j < K; ++j) ext[j] = s["conv_state"].get((slot * C + c) * K + j);
        for (int64_t r : rows_of[i]) ext.push_back(x.get(r * C + c));
        for (int64_t n = 0; n < L; ++n) {
          double y = g.bias ? s["bias"].get(c) : 0.0;
          for (int64_t j = 0; j < W; ++j) y += s["weight"].get(c * W + j) * ext[n + j];
          if (g.silu) y = y / (1.0 + std::exp(-y));
          out[rows_of[i][n] * C + c] = y;
        }
        if (stateful())
          for (int64_t j = 0; j < K; ++j) state[(slot * C + c) * K + j] = ext[L + j];
      }
    }
    e[g.in_place ? "x" : "out"] = out;
    if (stateful()) e["conv_state"] = state;
  }
};

void add(CaseList& cases, ConvConfig g) {
  cases.push_back(std::make_unique<ConvCase>(std::move(g)));
}

Call causal(std::vector<int64_t> lens) {
  return {false, std::move(lens)};
}
Call update(int64_t n) {
  return {true, std::vector<int64_t>(n, 1)};
}

// Benchmark shapes (perf only), Qwen3-Next GDN conv (C 8192, W 4, bf16, SiLU, no bias):
// prefill of one sequence of T tokens from a saved state (conv1d_causal), or decode of N sequences
// (conv1d_update, slots 0..N-1 of a pool of N). The bytes are the slots' (x read, out written,
// weights and slots read, the state read and written).
struct ConvPerfCase : Case {
  int64_t C = 8192, W = 4, T;
  bool decode;
  ConvPerfCase(int64_t T, bool decode) : T(T), decode(decode) {}
  std::string op() const override { return decode ? "conv1d_update" : "conv1d_causal"; }
  std::string params() const override {
    return str("C=", C, ",W=", W, decode ? ",N=" : ",T=", T, ",x=bf16,w=bf16,state=bf16,silu,perf");
  }
  bool perf_only() const override { return true; }
  void init(Rng& rng, Slots& s) override {
    const DType bf16 = DType::bf16;
    const int64_t slots = decode ? T : 1;
    fill_uniform(s.input("x", bf16, {T, C}), rng, -1, 1);
    s.output("out", bf16, {T, C});
    fill_uniform(s.input("weight", bf16, {C, W}), rng, -0.5, 0.5);
    fill_uniform(s.inout("conv_state", bf16, {slots, C, W - 1}), rng, -1, 1);
    std::vector<double> slot_ids(slots);
    std::iota(slot_ids.begin(), slot_ids.end(), 0.0);
    fill_values(s.input("state_slots", DType::i32, {slots}), slot_ids);
    if (!decode) fill_values(s.input("cu_seqlens", DType::i32, {2}), {0.0, static_cast<double>(T)});
  }
  void run(const Views& v, Context& ctx) override {
    if (decode) {
      Conv1dUpdate a;
      a.x = v.at("x"), a.weight = v.at("weight"), a.out = v.at("out");
      a.conv_state = v.at("conv_state"), a.state_slots = v.at("state_slots"), a.silu = true;
      conv1d_update(a, ctx);
    } else {
      Conv1dCausal a;
      a.x = v.at("x"), a.weight = v.at("weight"), a.out = v.at("out");
      a.conv_state = v.at("conv_state"), a.state_slots = v.at("state_slots");
      a.cu_seqlens = v.at("cu_seqlens"), a.silu = true;
      conv1d_causal(a, ctx);
    }
  }
  void oracle(const Slots&, Expected&) override { fail("[conv perf case] has no oracle"); }
};

}  // namespace

void add_conv_cases(CaseList& cases) {
  const DType f32 = DType::f32, bf16 = DType::bf16;
  cases.push_back(std::make_unique<ConvPerfCase>(8192, false));
  for (int64_t N : {1, 64, 256}) cases.push_back(std::make_unique<ConvPerfCase>(N, true));
  // Real shapes, varlen with a padding sequence. Qwen3-Next / Qwen3.5 GDN conv: conv_dim 8192,
  // W 4, no bias, SiLU. Mamba2-2.7B: 5120 + 2·128 = 5376 with bias. Nemotron-H-8B: 8192 + 2·8·128.
  for (DType sdt : {f32, bf16}) {
    ConvConfig g;
    g.C = 8192, g.calls = {causal({5, 1, 9, 2})}, g.slots = {2, -1, 0, 4}, g.pool = 6;
    g.has_init = {1, 0, 0, 1}, g.act = bf16, g.wdt = bf16, g.sdt = sdt, g.silu = true;
    g.strided_x = sdt == bf16;
    add(cases, g);
  }
  {
    ConvConfig g;
    g.C = 5376, g.calls = {causal({7, 2})}, g.slots = {1, 0}, g.pool = 3, g.has_init = {0, 1};
    g.act = bf16, g.wdt = f32, g.bias = true, g.silu = true, g.strided_x = true;
    add(cases, g);
  }
  {
    ConvConfig g;
    g.C = 10240, g.calls = {causal({3})}, g.slots = {0}, g.pool = 1, g.act = bf16, g.wdt = bf16;
    g.sdt = bf16, g.bias = true, g.silu = true;
    add(cases, g);
  }
  // Odd channel counts, tail lengths, kernel widths 2..5, resumed from state.
  struct Odd {
    int64_t C, T, W;
  };
  for (Odd o : {Odd{3, 257, 4}, Odd{7, 63, 3}, Odd{65, 65, 4}, Odd{65, 1, 4}, Odd{7, 3, 5},
                Odd{3, 2, 2}, Odd{300, 7, 4}}) {
    ConvConfig g;
    g.C = o.C, g.W = o.W, g.calls = {causal({o.T})}, g.slots = {1}, g.pool = 2;
    g.bias = o.C != 7, g.silu = o.T % 2 == 1;
    add(cases, g);
  }
  // Sequences shorter than W-1 resumed from state (state keeps some of its old columns), with an
  // empty sequence and a sequence started from zeros (u8 flags).
  {
    ConvConfig g;
    g.C = 65, g.calls = {causal({1, 2, 0, 1, 3})}, g.slots = {3, 0, 1, 4, 2}, g.pool = 5;
    g.has_init = {1, 1, 1, 0, 1}, g.flag_dt = DType::u8, g.bias = true;
    add(cases, g);
  }
  // Strided state pool (slots padded apart), bf16 state, f32 activations.
  {
    ConvConfig g;
    g.C = 130, g.calls = {causal({4, 65, 1})}, g.slots = {2, 0, -1}, g.pool = 4, g.sdt = bf16;
    g.strided_state = true, g.silu = true, g.wdt = bf16;
    add(cases, g);
  }
  // Stateless: one sequence without cu_seqlens; varlen with an empty sequence.
  {
    ConvConfig g;
    g.C = 65, g.calls = {causal({257})}, g.no_cu = true, g.bias = true, g.silu = true;
    add(cases, g);
    g.C = 7, g.calls = {causal({3, 0, 5})}, g.no_cu = false, g.act = bf16, g.strided_x = true;
    add(cases, g);
  }
  // Equivalence: each sequence cut into pieces of arbitrary lengths (0, 1, 2, ...), each resumed
  // from the state the previous call saved, equals the whole sequence.
  {
    ConvConfig g;
    g.C = 65, g.calls = {causal({5, 1, 0, 2}), causal({2, 3, 7, 1}), causal({1, 0, 1, 3}),
                         causal({9, 2, 3, 0})};
    g.slots = {4, 0, -1, 2}, g.pool = 5, g.has_init = {0, 1, 1, 1}, g.bias = true, g.silu = true;
    add(cases, g);
    g.calls = {causal({1, 1, 1, 1}), causal({1, 2, 1, 1}), causal({2, 1, 1, 5})};
    g.W = 2, g.C = 3, g.has_init = {}, g.act = bf16, g.sdt = bf16;
    add(cases, g);
  }
  {
    ConvConfig g;  // Qwen3-Next shape, bf16, cut into 3 calls
    g.C = 8192, g.calls = {causal({3, 1}), causal({1, 2}), causal({4, 1})}, g.slots = {1, 0};
    g.pool = 2, g.has_init = {0, 1}, g.act = bf16, g.wdt = bf16, g.silu = true;
    add(cases, g);
  }
  // Sequences longer than the 64-token chunks of the CUDA prefill kernel, starting and ending
  // inside chunks (windows filled across chunk and sequence boundaries), with an empty sequence, a
  // padding one and one started from zeros; C a multiple of 8 (the vectorised kernel), bf16 and
  // f32 activations; one sequence of 200 tokens without cu_seqlens.
  {
    ConvConfig g;
    g.C = 64, g.calls = {causal({70, 1, 100, 0, 60})}, g.slots = {2, 0, -1, 3, 1}, g.pool = 4;
    g.has_init = {1, 0, 1, 1, 1}, g.act = bf16, g.wdt = bf16, g.sdt = bf16, g.silu = true;
    add(cases, g);
    g.act = f32, g.sdt = f32, g.bias = true, g.silu = false, g.C = 24;
    add(cases, g);
  }
  {
    ConvConfig g;
    g.C = 16, g.calls = {causal({200})}, g.no_cu = true, g.act = bf16, g.silu = true;
    add(cases, g);
  }
  // Decode: conv1d_update at real shapes with a padding slot, odd shapes, in place, strided x.
  {
    ConvConfig g;
    g.C = 8192, g.calls = {update(4)}, g.slots = {3, -1, 0, 1}, g.pool = 5, g.act = bf16;
    g.wdt = bf16, g.silu = true;
    add(cases, g);
    g.sdt = bf16, g.strided_x = true, g.C = 10240, g.bias = true;
    add(cases, g);
    g.C = 5376, g.calls = {update(2)}, g.slots = {0, 1}, g.pool = 2, g.strided_x = false;
    g.in_place = true, g.sdt = f32;
    add(cases, g);
  }
  {  // the vectorised update (W 4, C % 8 == 0): more sequences than one block row takes (4),
     // padding, bf16 / f32 pools, f32 and bf16 activations, SiLU or not, bias
    ConvConfig g;
    g.C = 1024, g.calls = {update(9)}, g.slots = {8, 0, -1, 1, 2, 3, 4, 5, 6}, g.pool = 9;
    g.sdt = bf16, g.bias = true;
    add(cases, g);
    g.act = bf16, g.sdt = f32, g.silu = true;
    add(cases, g);
  }
  for (Odd o : {Odd{3, 1, 2}, Odd{7, 3, 4}, Odd{65, 2, 5}}) {
    ConvConfig g;  // T = number of sequences here
    g.C = o.C, g.W = o.W, g.calls = {update(o.T)}, g.pool = o.T + 1, g.bias = o.W != 4;
    for (int64_t i = 0; i < o.T; ++i) g.slots.push_back(static_cast<int32_t>(o.T - i));
    add(cases, g);
  }
  // Decode after prefill equals prefill of the longer sequence (and steps equal T=1 prefill).
  {
    ConvConfig g;
    g.C = 65, g.calls = {causal({5, 2, 0, 1}), update(4), update(4), update(4)};
    g.slots = {1, 3, 0, -1}, g.pool = 4, g.has_init = {0, 1, 0, 1}, g.bias = true, g.silu = true;
    add(cases, g);
    g.C = 8192, g.calls = {causal({2, 7}), update(2), update(2)}, g.slots = {0, 1}, g.pool = 2;
    g.has_init = {1, 0}, g.act = bf16, g.wdt = bf16, g.sdt = bf16, g.bias = false;
    add(cases, g);
  }
}

}  // namespace hybrid::test
