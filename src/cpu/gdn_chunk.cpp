// CPU reference: gdn_chunk_prefill, the chunked (C = 64) WY form of Gated DeltaNet, f32 math.
//
// The three stages run as separate passes over f32 intermediates, the structure the CUDA kernels
// mirror (seed 002): 1. per (chunk, head) γ, W, U; 2. per (sequence, head) the state spine, which
// writes each chunk's entry state h[c] and V_new; 3. per (chunk, head) the output. The math of
// each stage is at the top of its function; the state is V-first, S[v][k].
#include <cmath>
#include <vector>

#include "cpu/common.h"
#include "cpu/kernels.h"
#include "hybrid/ops/gdn_chunk.h"

namespace hybrid::cpu {

namespace {

constexpr int64_t C = kGdnChunkSize;

// One chunk: tokens [t0, t0 + len) of sequence `seq`, ending `end` tokens into the sequence.
struct Chunk {
  int64_t seq, t0, len, end;
};

// The problem and the f32 intermediates shared by the three passes.
struct Plan {
  int64_t T, N, Hk, Hv, K, V, ratio;
  float scale;
  std::vector<int64_t> cu;           // [N + 1] token offsets
  std::vector<int64_t> slot;         // [N] pool row, < 0 = padding
  std::vector<int64_t> first_chunk;  // [N + 1] index of each sequence's first chunk
  std::vector<int64_t> first_ckpt;   // [N] first checkpoint row of each sequence
  std::vector<Chunk> chunks;         // [NC]
  std::vector<float> gamma;          // [T, Hv]        γ, the gate cumsum inside each chunk
  std::vector<float> w;              // [T, Hv, K]     W = T·diag(β e^γ)·K, rows of each chunk
  std::vector<float> u;              // [T, Hv, V]     U = T·diag(β)·V
  std::vector<float> v_new;          // [T, Hv, V]     V_new = U − W Sᵀ
  std::vector<float> h;              // [NC, Hv, V, K] entry state of each chunk

  bool padding(int64_t n) const { return slot[n] < 0; }
  float* gamma_at(int64_t t, int64_t hv) { return &gamma[t * Hv + hv]; }
  float* w_row(int64_t t, int64_t hv) { return &w[(t * Hv + hv) * K]; }
  float* u_row(int64_t t, int64_t hv) { return &u[(t * Hv + hv) * V]; }
  float* v_new_row(int64_t t, int64_t hv) { return &v_new[(t * Hv + hv) * V]; }
  float* h_at(int64_t c, int64_t hv) { return &h[(c * Hv + hv) * V * K]; }
};

// Row (t, head) of q or k ([T, H, D], D contiguous) into dst[D] as f32; with l2norm
// x ← x / sqrt(Σ x² + 1e-6).
void load_row(const Tensor& x, int64_t t, int64_t head, bool l2norm, float* dst) {
  const int64_t D = x.size(2), off = t * x.stride(0) + head * x.stride(1);
  float sum_sq = 0.0f;
  for (int64_t d = 0; d < D; ++d) {
    dst[d] = load_f32(x, off + d);
    sum_sq += dst[d] * dst[d];
  }
  if (!l2norm) return;
  const float inv = 1.0f / std::sqrt(sum_sq + 1e-6f);
  for (int64_t d = 0; d < D; ++d) dst[d] *= inv;
}

float dot(const float* a, const float* b, int64_t n) {
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

Plan make_plan(const GdnChunkPrefill& a) {
  Plan p;
  p.T = a.q.size(0);
  p.Hk = a.q.size(1);
  p.K = a.q.size(2);
  p.Hv = a.v.size(1);
  p.V = a.v.size(2);
  p.ratio = p.Hv / p.Hk;
  p.N = a.cu_seqlens.size(0) - 1;
  p.scale = a.scale ? *a.scale : 1.0f / std::sqrt(static_cast<float>(p.K));
  p.first_chunk.push_back(0);
  int64_t ckpt = 0;
  for (int64_t n = 0; n <= p.N; ++n) p.cu.push_back(load_index(a.cu_seqlens, n));
  for (int64_t n = 0; n < p.N; ++n) {
    p.slot.push_back(load_index(a.state_slots, n * a.state_slots.stride(0)));
    const int64_t len = p.cu[n + 1] - p.cu[n];
    for (int64_t s = 0; s < len; s += C)
      p.chunks.push_back({n, p.cu[n] + s, std::min(C, len - s), std::min(s + C, len)});
    p.first_chunk.push_back(static_cast<int64_t>(p.chunks.size()));
    p.first_ckpt.push_back(ckpt);
    if (a.checkpoint_every > 0) ckpt += len / a.checkpoint_every;
  }
  const int64_t NC = static_cast<int64_t>(p.chunks.size());
  p.gamma.assign(p.T * p.Hv, 0.0f);
  p.w.assign(p.T * p.Hv * p.K, 0.0f);
  p.u.assign(p.T * p.Hv * p.V, 0.0f);
  p.v_new.assign(p.T * p.Hv * p.V, 0.0f);
  p.h.assign(NC * p.Hv * p.V * p.K, 0.0f);
  return p;
}

// Stage 1, one (chunk, value head), L = chunk length, i, j in [0, L):
//   γ_i = Σ_{s≤i} g_s
//   A_ij = β_i (k_i·k_j) e^{γ_i−γ_j} for i > j, else 0;   T = (I + A)^{-1} (unit lower triangular)
//   W = T·diag(β e^γ)·K  [L, K];   U = T·diag(β)·V  [L, V]
void stage_wu(const GdnChunkPrefill& a, Plan& p, const Chunk& ch, int64_t hv) {
  if (p.padding(ch.seq)) return;
  const int64_t L = ch.len, K = p.K, V = p.V, hk = hv / p.ratio;
  std::vector<float> k(L * K), v(L * V), beta(L), gam(L), A(L * L, 0.0f), Tm(L * L, 0.0f);
  float cum = 0.0f;
  for (int64_t i = 0; i < L; ++i) {
    const int64_t t = ch.t0 + i;
    load_row(a.k, t, hk, a.use_qk_l2norm, &k[i * K]);
    for (int64_t d = 0; d < V; ++d)
      v[i * V + d] = load_f32(a.v, t * a.v.stride(0) + hv * a.v.stride(1) + d);
    beta[i] = a.beta.data_as<const float>()[t * a.beta.stride(0) + hv];
    cum += a.g.data_as<const float>()[t * a.g.stride(0) + hv];
    gam[i] = cum;
    *p.gamma_at(t, hv) = cum;
  }
  for (int64_t i = 0; i < L; ++i)
    for (int64_t j = 0; j < i; ++j)
      A[i * L + j] = beta[i] * dot(&k[i * K], &k[j * K], K) * std::exp(gam[i] - gam[j]);
  // Forward substitution, column by column of (I + A) T = I: T_ii = 1,
  // T_ij = −Σ_{j≤m<i} A_im T_mj for i > j.
  for (int64_t i = 0; i < L; ++i) {
    Tm[i * L + i] = 1.0f;
    for (int64_t j = 0; j < i; ++j) {
      float s = 0.0f;
      for (int64_t m = j; m < i; ++m) s += A[i * L + m] * Tm[m * L + j];
      Tm[i * L + j] = -s;
    }
  }
  for (int64_t i = 0; i < L; ++i) {
    float* w = p.w_row(ch.t0 + i, hv);
    float* u = p.u_row(ch.t0 + i, hv);
    for (int64_t j = 0; j <= i; ++j) {
      const float tw = Tm[i * L + j] * beta[j] * std::exp(gam[j]);
      const float tu = Tm[i * L + j] * beta[j];
      for (int64_t d = 0; d < K; ++d) w[d] += tw * k[j * K + d];
      for (int64_t d = 0; d < V; ++d) u[d] += tu * v[j * V + d];
    }
  }
}

// Stage 2, one (sequence, value head): the state spine S [V, K] across the sequence's chunks.
//   S = pool row (or zeros);  for each chunk c:
//     h[c] = S
//     V_new = U − W Sᵀ                              V_new[i][v] = U[i][v] − Σ_k W[i][k] S[v][k]
//     S ← e^{γ_L} S + Σ_i e^{γ_L−γ_i} V_new[i] ⊗ k_i   S[v][k] += e^{γ_L−γ_i} V_new[i][v] k_i[k]
//     checkpoint S when the tokens done so far are a multiple of checkpoint_every
//   pool row = S
void stage_spine(const GdnChunkPrefill& a, Plan& p, int64_t n, int64_t hv) {
  const int64_t K = p.K, V = p.V, hk = hv / p.ratio, every = a.checkpoint_every;
  auto ckpt_at = [&](int64_t row) {
    return (row * a.checkpoints.stride(0) + hv * a.checkpoints.stride(1));
  };
  if (p.padding(n)) {  // checkpoint rows of a padding sequence are zeros; the pool is untouched
    if (every > 0)
      for (int64_t r = 0; r < (p.cu[n + 1] - p.cu[n]) / every; ++r)
        for (int64_t vi = 0; vi < V; ++vi)
          for (int64_t d = 0; d < K; ++d)
            store_f32(a.checkpoints,
                      ckpt_at(p.first_ckpt[n] + r) + vi * a.checkpoints.stride(2) + d, 0.0f);
    return;
  }
  const Tensor& pool = a.state;
  const int64_t row = p.slot[n] * pool.stride(0) + hv * pool.stride(1);
  const bool from_pool = !a.has_initial_state.defined() ||
                         load_index(a.has_initial_state, n * a.has_initial_state.stride(0)) != 0;
  std::vector<float> S(V * K, 0.0f), k(C * K);
  if (from_pool)
    for (int64_t vi = 0; vi < V; ++vi)
      for (int64_t d = 0; d < K; ++d) S[vi * K + d] = load_f32(pool, row + vi * pool.stride(2) + d);

  for (int64_t c = p.first_chunk[n]; c < p.first_chunk[n + 1]; ++c) {
    const Chunk& ch = p.chunks[c];
    const int64_t L = ch.len;
    std::copy(S.begin(), S.end(), p.h_at(c, hv));
    for (int64_t i = 0; i < L; ++i) {
      const float* w = p.w_row(ch.t0 + i, hv);
      const float* u = p.u_row(ch.t0 + i, hv);
      float* vn = p.v_new_row(ch.t0 + i, hv);
      for (int64_t vi = 0; vi < V; ++vi) vn[vi] = u[vi] - dot(w, &S[vi * K], K);
      load_row(a.k, ch.t0 + i, hk, a.use_qk_l2norm, &k[i * K]);
    }
    const float g_last = *p.gamma_at(ch.t0 + L - 1, hv);
    const float decay = std::exp(g_last);
    for (float& s : S) s *= decay;
    for (int64_t i = 0; i < L; ++i) {
      const float e = std::exp(g_last - *p.gamma_at(ch.t0 + i, hv));
      const float* vn = p.v_new_row(ch.t0 + i, hv);
      for (int64_t vi = 0; vi < V; ++vi) {
        const float coef = e * vn[vi];
        float* s = &S[vi * K];
        for (int64_t d = 0; d < K; ++d) s[d] += coef * k[i * K + d];
      }
    }
    if (every > 0 && ch.end % every == 0) {
      const int64_t r = p.first_ckpt[n] + ch.end / every - 1;
      for (int64_t vi = 0; vi < V; ++vi)
        for (int64_t d = 0; d < K; ++d)
          store_f32(a.checkpoints, ckpt_at(r) + vi * a.checkpoints.stride(2) + d, S[vi * K + d]);
    }
  }
  for (int64_t vi = 0; vi < V; ++vi)
    for (int64_t d = 0; d < K; ++d) store_f32(pool, row + vi * pool.stride(2) + d, S[vi * K + d]);
}

// Stage 3, one (chunk, value head), entry state S = h[c], i in [0, L):
//   o_i = scale·[ e^{γ_i} S q_i + Σ_{j≤i} (q_i·k_j) e^{γ_i−γ_j} V_new[j] ]
// Padding sequences get zeros.
void stage_output(const GdnChunkPrefill& a, Plan& p, int64_t c, int64_t hv) {
  const Chunk& ch = p.chunks[c];
  const int64_t L = ch.len, K = p.K, V = p.V, hk = hv / p.ratio;
  const Tensor& out = a.out;
  auto out_at = [&](int64_t t) { return t * out.stride(0) + hv * out.stride(1); };
  if (p.padding(ch.seq)) {
    for (int64_t i = 0; i < L; ++i)
      for (int64_t vi = 0; vi < V; ++vi) store_f32(out, out_at(ch.t0 + i) + vi, 0.0f);
    return;
  }
  std::vector<float> q(L * K), k(L * K), o(V);
  for (int64_t i = 0; i < L; ++i) {
    load_row(a.q, ch.t0 + i, hk, a.use_qk_l2norm, &q[i * K]);
    load_row(a.k, ch.t0 + i, hk, a.use_qk_l2norm, &k[i * K]);
  }
  const float* S = p.h_at(c, hv);
  for (int64_t i = 0; i < L; ++i) {
    const float gi = *p.gamma_at(ch.t0 + i, hv);
    const float e_i = std::exp(gi);
    for (int64_t vi = 0; vi < V; ++vi) o[vi] = e_i * dot(&S[vi * K], &q[i * K], K);
    for (int64_t j = 0; j <= i; ++j) {
      const float a_ij = dot(&q[i * K], &k[j * K], K) * std::exp(gi - *p.gamma_at(ch.t0 + j, hv));
      const float* vn = p.v_new_row(ch.t0 + j, hv);
      for (int64_t vi = 0; vi < V; ++vi) o[vi] += a_ij * vn[vi];
    }
    for (int64_t vi = 0; vi < V; ++vi) store_f32(out, out_at(ch.t0 + i) + vi, p.scale * o[vi]);
  }
}

void gdn_chunk_prefill_cpu(const GdnChunkPrefill& a, Context& ctx) {
  Plan p = make_plan(a);
  const int64_t NC = static_cast<int64_t>(p.chunks.size()), Hv = p.Hv;
  // Stages 1 and 3 run over every (chunk, head), stage 2 over every (sequence, head).
  parallel_for(NC * Hv, ctx, [&](int64_t i) { stage_wu(a, p, p.chunks[i / Hv], i % Hv); });
  parallel_for(p.N * Hv, ctx, [&](int64_t i) { stage_spine(a, p, i / Hv, i % Hv); });
  parallel_for(NC * Hv, ctx, [&](int64_t i) { stage_output(a, p, i / Hv, i % Hv); });
}

}  // namespace

void register_gdn_chunk(Registry& r) {
  r.add<GdnChunkPrefill>("gdn_chunk_prefill.cpu", DeviceType::cpu, 0, nullptr,
                         gdn_chunk_prefill_cpu);
}

}  // namespace hybrid::cpu
