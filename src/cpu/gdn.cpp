// CPU reference: gdn_recurrent, gdn_prep_chunk, gdn_prep_step, gdn_gates, gdn_record, gdn_replay.
// f32 math; one task per (sequence, value head), the state S [V, K] held in f32 across the
// sequence's tokens (one load from the pool, one store back).
#include <cmath>
#include <vector>

#include "cpu/common.h"
#include "cpu/kernels.h"
#include "hybrid/ops/gdn.h"

namespace hybrid::cpu {

namespace {

// ---- shared pieces ---------------------------------------------------------------------------

// One token's inputs to the recurrence for one value head, in f32.
struct TokenIn {
  std::vector<float> q, k, v;  // [K] q̂ (normalised, scaled), [K] k̂ (normalised), [V] v
  float alpha = 1.0f, beta = 0.0f;
  TokenIn(int64_t K, int64_t V) : q(K), k(K), v(V) {}
};

// S [V, K] (row i = value channel i). One token of the gated delta rule, read after write:
//   S ← α S;  u_i = β (v_i − S_i·k̂);  S_i ← S_i + u_i k̂;  o_i = S_i·q̂
// o [V] and u [V] receive the output and the rank-1 write.
void delta_step(float* S, int64_t V, int64_t K, const TokenIn& x, float* o, float* u) {
  for (int64_t i = 0; i < V; ++i) {
    float* row = S + i * K;
    float kv = 0.0f;
    for (int64_t j = 0; j < K; ++j) {
      row[j] *= x.alpha;
      kv += row[j] * x.k[j];
    }
    const float ui = x.beta * (x.v[i] - kv);
    float oi = 0.0f;
    for (int64_t j = 0; j < K; ++j) {
      row[j] += ui * x.k[j];
      oi += row[j] * x.q[j];
    }
    o[i] = oi;
    u[i] = ui;
  }
}

// The same update from a tape entry: S ← α S;  S ← S + u k̂ᵀ (the same f32 operations as
// delta_step, so a replay repeats the recurrence's numbers).
void replay_step(float* S, int64_t V, int64_t K, const float* k, float alpha, const float* u) {
  for (int64_t i = 0; i < V; ++i) {
    float* row = S + i * K;
    for (int64_t j = 0; j < K; ++j) row[j] *= alpha;
    for (int64_t j = 0; j < K; ++j) row[j] += u[i] * k[j];
  }
}

// Element offset of (i0, i1) in a tensor whose last dimension is contiguous.
inline int64_t at2(const Tensor& t, int64_t i0, int64_t i1) {
  return i0 * t.stride(0) + i1 * t.stride(1);
}
inline int64_t at3(const Tensor& t, int64_t i0, int64_t i1, int64_t i2) {
  return i0 * t.stride(0) + i1 * t.stride(1) + i2 * t.stride(2);
}

// Pool row (slot, hv) [V, K] <-> S.
void load_state(const Tensor& pool, int64_t slot, int64_t hv, float* S) {
  const int64_t V = pool.size(2), K = pool.size(3);
  for (int64_t i = 0; i < V; ++i) {
    const int64_t base = slot * pool.stride(0) + hv * pool.stride(1) + i * pool.stride(2);
    for (int64_t j = 0; j < K; ++j) S[i * K + j] = load_f32(pool, base + j);
  }
}
void store_state(const Tensor& pool, int64_t slot, int64_t hv, const float* S) {
  const int64_t V = pool.size(2), K = pool.size(3);
  for (int64_t i = 0; i < V; ++i) {
    const int64_t base = slot * pool.stride(0) + hv * pool.stride(1) + i * pool.stride(2);
    for (int64_t j = 0; j < K; ++j) store_f32(pool, base + j, S[i * K + j]);
  }
}

// x ← x / sqrt(Σx² + 1e-6)
void l2_normalize(std::vector<float>& x) {
  float ss = 0.0f;
  for (float e : x) ss += e * e;
  const float inv = 1.0f / std::sqrt(ss + 1e-6f);
  for (float& e : x) e *= inv;
}

// Row r of a [rows, n] (or row (r, h) of a [rows, H, n]) tensor into a float vector.
void load_row(const Tensor& t, int64_t base, std::vector<float>& dst) {
  for (size_t j = 0; j < dst.size(); ++j) dst[j] = load_f32(t, base + static_cast<int64_t>(j));
}

int64_t index_at(const Tensor& t, int64_t i) {
  return load_index(t, i * t.stride(0));
}

// Sequence n: tokens [t0, t1), pool row slot (< 0: padding).
struct Seq {
  int64_t t0, t1, slot;
};
Seq sequence(const Tensor& cu, const Tensor& slots, int64_t n) {
  return {index_at(cu, n), index_at(cu, n + 1), index_at(slots, n)};
}

// q̂, k̂, v, α, β of token t for value head hv from the unfused inputs (gdn_recurrent, gdn_record).
//   q̂ = scale · L2(q),  k̂ = L2(k)  (L2 only with use_qk_l2norm),  α = exp(g)
void load_token(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& g,
                const Tensor& beta, float scale, bool l2, int64_t t, int64_t hv, int64_t hk,
                TokenIn& x) {
  load_row(q, at2(q, t, hk), x.q);
  load_row(k, at2(k, t, hk), x.k);
  load_row(v, at2(v, t, hv), x.v);
  if (l2) {
    l2_normalize(x.q);
    l2_normalize(x.k);
  }
  for (float& e : x.q) e *= scale;
  x.alpha = std::exp(load_f32(g, at2(g, t, hv)));
  x.beta = load_f32(beta, at2(beta, t, hv));
}

// Writes zeros into rows [t0, t1) of head hv of a [T, Hv, n] tensor (padding sequences).
void zero_rows(const Tensor& t, int64_t t0, int64_t t1, int64_t hv) {
  if (!t.defined()) return;
  const int64_t n = t.size(2);
  for (int64_t r = t0; r < t1; ++r)
    for (int64_t j = 0; j < n; ++j) store_f32(t, at3(t, r, hv, 0) + j, 0.0f);
}

// states_per_token [T, Hv, V, K]: row (t, hv) ← S (zero when S is null).
void store_token_state(const Tensor& st, int64_t t, int64_t hv, const float* S) {
  const int64_t V = st.size(2), K = st.size(3);
  for (int64_t i = 0; i < V; ++i) {
    const int64_t base = t * st.stride(0) + hv * st.stride(1) + i * st.stride(2);
    for (int64_t j = 0; j < K; ++j) store_f32(st, base + j, S ? S[i * K + j] : 0.0f);
  }
}

float default_scale(const std::optional<float>& scale, int64_t K) {
  return scale ? *scale : 1.0f / std::sqrt(static_cast<float>(K));
}

// ---- gdn_recurrent ---------------------------------------------------------------------------

// Per (sequence n, value head hv), hk = hv / (Hv / Hk), S [V, K] from pool[slot, hv] (or zeros):
//   for t in [cu[n], cu[n+1]):  S ← exp(g_t) S;  u = β_t (v_t − S k̂_t);  S ← S + u k̂_tᵀ;
//                               out_t = S q̂_t;  states_per_token[t] = S
//   pool[slot, hv] ← S
void gdn_recurrent_cpu(const GdnRecurrent& a, Context& ctx) {
  const int64_t Hk = a.q.size(1), K = a.q.size(2), Hv = a.v.size(1), V = a.v.size(2);
  const int64_t N = a.state_slots.size(0), ratio = Hv / Hk;
  const float scale = default_scale(a.scale, K);
  parallel_for(N * Hv, ctx, [&](int64_t task) {
    const int64_t n = task / Hv, hv = task % Hv, hk = hv / ratio;
    const Seq s = sequence(a.cu_seqlens, a.state_slots, n);
    if (s.slot < 0) {
      zero_rows(a.out, s.t0, s.t1, hv);
      if (a.states_per_token.defined())
        for (int64_t t = s.t0; t < s.t1; ++t) store_token_state(a.states_per_token, t, hv, nullptr);
      return;
    }
    std::vector<float> S(V * K, 0.0f), o(V), u(V);  // S [V, K]
    const bool initial = !a.has_initial_state.defined() || index_at(a.has_initial_state, n) != 0;
    if (initial) load_state(a.state, s.slot, hv, S.data());
    TokenIn x(K, V);
    for (int64_t t = s.t0; t < s.t1; ++t) {
      load_token(a.q, a.k, a.v, a.g, a.beta, scale, a.use_qk_l2norm, t, hv, hk, x);
      delta_step(S.data(), V, K, x, o.data(), u.data());
      for (int64_t i = 0; i < V; ++i) store_f32(a.out, at3(a.out, t, hv, 0) + i, o[i]);
      if (a.states_per_token.defined()) store_token_state(a.states_per_token, t, hv, S.data());
    }
    store_state(a.state, s.slot, hv, S.data());
  });
}

// ---- gdn_prep_chunk / gdn_prep_step (seed 000) -----------------------------------------------

// The prep of token t for value head hv from the packed conv output [T, 2·Hk·K + Hv·V]:
//   q̂ = q·rsqrt(mean(q²) + eps)·q_w[hk],  k̂ = k·rsqrt(mean(k²) + eps)·k_w[hk]
//   α = exp(−exp(A_log[hv])·softplus(a_t + dt_bias[hv])),  β = sigmoid(b_t)
template <class Args>
void prep_token(const Args& a, int64_t t, int64_t hv, int64_t hk, TokenIn& x) {
  const int64_t Hk = a.q_norm_weight.size(0), K = a.q_norm_weight.size(1);
  const int64_t V = a.state.size(2);
  const int64_t row = t * a.conv_out.stride(0);
  load_row(a.conv_out, row + hk * K, x.q);
  load_row(a.conv_out, row + Hk * K + hk * K, x.k);
  load_row(a.conv_out, row + 2 * Hk * K + hv * V, x.v);
  float qss = 0.0f, kss = 0.0f;
  for (int64_t j = 0; j < K; ++j) {
    qss += x.q[j] * x.q[j];
    kss += x.k[j] * x.k[j];
  }
  const float q_inv = 1.0f / std::sqrt(qss / static_cast<float>(K) + a.eps);
  const float k_inv = 1.0f / std::sqrt(kss / static_cast<float>(K) + a.eps);
  for (int64_t j = 0; j < K; ++j) {
    x.q[j] *= q_inv * load_f32(a.q_norm_weight, at2(a.q_norm_weight, hk, j));
    x.k[j] *= k_inv * load_f32(a.k_norm_weight, at2(a.k_norm_weight, hk, j));
  }
  const float A = std::exp(load_f32(a.A_log, hv * a.A_log.stride(0)));
  const float dt =
      softplus(load_f32(a.a, at2(a.a, t, hv)) + load_f32(a.dt_bias, hv * a.dt_bias.stride(0)));
  x.alpha = std::exp(-A * dt);
  x.beta = sigmoid(load_f32(a.b, at2(a.b, t, hv)));
}

// One (sequence, value head) of the fused prep + recurrence over tokens [s.t0, s.t1).
template <class Args>
void prep_sequence_head(const Args& a, const Seq& s, bool initial, int64_t hv) {
  const int64_t Hk = a.q_norm_weight.size(0), K = a.q_norm_weight.size(1);
  const int64_t Hv = a.state.size(1), V = a.state.size(2), hk = hv / (Hv / Hk);
  if (s.slot < 0) {
    zero_rows(a.y, s.t0, s.t1, hv);
    return;
  }
  std::vector<float> S(V * K, 0.0f), o(V), u(V);  // S [V, K]
  if (initial) load_state(a.state, s.slot, hv, S.data());
  TokenIn x(K, V);
  for (int64_t t = s.t0; t < s.t1; ++t) {
    prep_token(a, t, hv, hk, x);
    delta_step(S.data(), V, K, x, o.data(), u.data());
    for (int64_t i = 0; i < V; ++i) store_f32(a.y, at3(a.y, t, hv, 0) + i, o[i]);
  }
  store_state(a.state, s.slot, hv, S.data());
}

// Per (sequence n, value head hv): prep_token, then the recurrence of gdn_recurrent (scale 1, no
// L2 norm), S held across the sequence's tokens, y_t = S q̂_t.
void gdn_prep_chunk_cpu(const GdnPrepChunk& a, Context& ctx) {
  const int64_t N = a.state_slots.size(0), Hv = a.state.size(1);
  parallel_for(N * Hv, ctx, [&](int64_t task) {
    const int64_t n = task / Hv, hv = task % Hv;
    const bool initial = !a.has_initial_state.defined() || index_at(a.has_initial_state, n) != 0;
    prep_sequence_head(a, sequence(a.cu_seqlens, a.state_slots, n), initial, hv);
  });
}

// gdn_prep_chunk with one token per sequence: token n is sequence n.
void gdn_prep_step_cpu(const GdnPrepStep& a, Context& ctx) {
  const int64_t N = a.state_slots.size(0), Hv = a.state.size(1);
  parallel_for(N * Hv, ctx, [&](int64_t task) {
    const int64_t n = task / Hv, hv = task % Hv;
    prep_sequence_head(a, Seq{n, n + 1, index_at(a.state_slots, n)}, true, hv);
  });
}

// ---- gdn_record / gdn_replay -----------------------------------------------------------------

// gdn_recurrent's loop from S = pool[slot, hv] (the pool is only read), writing the tape:
//   tape_k[t, hk] = k̂_t,  tape_u[t, hv] = u_t = β_t (v_t − α_t S k̂_t),  tape_alpha[t, hv] = α_t
// (tape_k is written by the first value head of each key head's group).
// g[t, h] = −exp(A_log[h]) · softplus(a[t, h] + dt_bias[h]),  beta[t, h] = sigmoid(b[t, h]).
void gdn_gates_cpu(const GdnGates& a, Context& ctx) {
  const int64_t T = a.a.size(0), Hv = a.a.size(1);
  parallel_for(T, ctx, [&](int64_t t) {
    for (int64_t h = 0; h < Hv; ++h) {
      const float dt = load_f32(a.a, t * a.a.stride(0) + h) + load_f32(a.dt_bias, h);
      store_f32(a.g, t * a.g.stride(0) + h, -std::exp(load_f32(a.A_log, h)) * softplus(dt));
      store_f32(a.beta, t * a.beta.stride(0) + h, sigmoid(load_f32(a.b, t * a.b.stride(0) + h)));
    }
  });
}

void gdn_record_cpu(const GdnRecord& a, Context& ctx) {
  const int64_t Hk = a.q.size(1), K = a.q.size(2), Hv = a.v.size(1), V = a.v.size(2);
  const int64_t N = a.state_slots.size(0), ratio = Hv / Hk;
  const float scale = default_scale(a.scale, K);
  parallel_for(N * Hv, ctx, [&](int64_t task) {
    const int64_t n = task / Hv, hv = task % Hv, hk = hv / ratio;
    const bool writes_k = hv % ratio == 0;
    const Seq s = sequence(a.cu_seqlens, a.state_slots, n);
    if (s.slot < 0) {
      zero_rows(a.out, s.t0, s.t1, hv);
      zero_rows(a.tape_u, s.t0, s.t1, hv);
      if (writes_k) zero_rows(a.tape_k, s.t0, s.t1, hk);
      for (int64_t t = s.t0; t < s.t1; ++t) store_f32(a.tape_alpha, at2(a.tape_alpha, t, hv), 0.0f);
      return;
    }
    std::vector<float> S(V * K), o(V), u(V);  // S [V, K]
    load_state(a.state, s.slot, hv, S.data());
    TokenIn x(K, V);
    for (int64_t t = s.t0; t < s.t1; ++t) {
      load_token(a.q, a.k, a.v, a.g, a.beta, scale, a.use_qk_l2norm, t, hv, hk, x);
      delta_step(S.data(), V, K, x, o.data(), u.data());
      for (int64_t i = 0; i < V; ++i) {
        store_f32(a.out, at3(a.out, t, hv, 0) + i, o[i]);
        store_f32(a.tape_u, at3(a.tape_u, t, hv, 0) + i, u[i]);
      }
      if (writes_k)
        for (int64_t j = 0; j < K; ++j) store_f32(a.tape_k, at3(a.tape_k, t, hk, 0) + j, x.k[j]);
      store_f32(a.tape_alpha, at2(a.tape_alpha, t, hv), x.alpha);
    }
  });
}

// Per (sequence n, value head hv): S = pool[slot, hv];
//   for t in [cu[n], cu[n] + k_n):  S ← tape_alpha[t, hv]·S + tape_u[t, hv] tape_k[t, hk]ᵀ
//   state_out[n, hv] (or pool[slot, hv]) ← S
void gdn_replay_cpu(const GdnReplay& a, Context& ctx) {
  const int64_t Hk = a.tape_k.size(1), K = a.tape_k.size(2);
  const int64_t Hv = a.tape_u.size(1), V = a.tape_u.size(2);
  const int64_t N = a.state_slots.size(0), ratio = Hv / Hk;
  parallel_for(N * Hv, ctx, [&](int64_t task) {
    const int64_t n = task / Hv, hv = task % Hv, hk = hv / ratio;
    const Seq s = sequence(a.cu_seqlens, a.state_slots, n);
    std::vector<float> S(V * K, 0.0f), k(K), u(V);  // S [V, K]
    if (s.slot < 0) {
      if (a.state_out.defined()) store_state(a.state_out, n, hv, S.data());
      return;
    }
    load_state(a.state, s.slot, hv, S.data());
    const int64_t steps = index_at(a.num_tokens, n);
    for (int64_t t = s.t0; t < s.t0 + steps; ++t) {
      load_row(a.tape_k, at3(a.tape_k, t, hk, 0), k);
      load_row(a.tape_u, at3(a.tape_u, t, hv, 0), u);
      replay_step(S.data(), V, K, k.data(), load_f32(a.tape_alpha, at2(a.tape_alpha, t, hv)),
                  u.data());
    }
    if (a.state_out.defined())
      store_state(a.state_out, n, hv, S.data());
    else
      store_state(a.state, s.slot, hv, S.data());
  });
}

}  // namespace

void register_gdn(Registry& r) {
  r.add<GdnRecurrent>("gdn_recurrent.cpu", DeviceType::cpu, 0, nullptr, gdn_recurrent_cpu);
  r.add<GdnPrepChunk>("gdn_prep_chunk.cpu", DeviceType::cpu, 0, nullptr, gdn_prep_chunk_cpu);
  r.add<GdnPrepStep>("gdn_prep_step.cpu", DeviceType::cpu, 0, nullptr, gdn_prep_step_cpu);
  r.add<GdnGates>("gdn_gates.cpu", DeviceType::cpu, 0, nullptr, gdn_gates_cpu);
  r.add<GdnRecord>("gdn_record.cpu", DeviceType::cpu, 0, nullptr, gdn_record_cpu);
  r.add<GdnReplay>("gdn_replay.cpu", DeviceType::cpu, 0, nullptr, gdn_replay_cpu);
}

}  // namespace hybrid::cpu
