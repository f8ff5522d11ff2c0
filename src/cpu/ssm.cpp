// CPU reference: ssm_step, ssm_step_record, ssm_replay, ssm_chunk_scan (Mamba-2 / SSD).
// f32 math; one task per (sequence, head), the independent unit of every SSM recurrence.
#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu/common.h"
#include "cpu/kernels.h"
#include "hybrid/ops/ssm.h"

namespace hybrid::cpu {

namespace {

// The inputs shared by ssm_step, ssm_step_record and ssm_chunk_scan, read as f32.
// Shapes: x, z [T, H, P]; dt [T, H]; A_log, D, dt_bias [H]; B, C [T, G, N].
struct SsmInputs {
  const Tensor &x, &dt, &A_log, &B, &C, &D, &dt_bias, &z;
  bool dt_softplus;
  float dt_min, dt_max;
  int64_t H, P, G, N;

  template <class Args>
  explicit SsmInputs(const Args& a)
      : x(a.x),
        dt(a.dt),
        A_log(a.A_log),
        B(a.B),
        C(a.C),
        D(a.D),
        dt_bias(a.dt_bias),
        z(a.z),
        dt_softplus(a.dt_softplus),
        dt_min(a.dt_min),
        dt_max(a.dt_max),
        H(a.x.size(1)),
        P(a.x.size(2)),
        G(a.B.size(1)),
        N(a.B.size(2)) {}

  int64_t group(int64_t h) const { return h / (H / G); }
  // A = -exp(A_log[h])
  float A(int64_t h) const { return -std::exp(load_f32(A_log, h * A_log.stride(0))); }
  float D_skip(int64_t h) const { return D.defined() ? load_f32(D, h * D.stride(0)) : 0.0f; }
  // dt' = clamp(softplus?(dt[t,h] + dt_bias[h]), dt_min, dt_max)
  float dt_eff(int64_t t, int64_t h) const {
    float v = load_f32(dt, t * dt.stride(0) + h);
    if (dt_bias.defined()) v += load_f32(dt_bias, h * dt_bias.stride(0));
    if (dt_softplus) v = softplus(v);
    return std::min(std::max(v, dt_min), dt_max);
  }
  float x_at(int64_t t, int64_t h, int64_t p) const {
    return load_f32(x, t * x.stride(0) + h * x.stride(1) + p);
  }
  // B[t, g, :] or C[t, g, :] into dst[N].
  void group_row(const Tensor& bc, int64_t t, int64_t g, float* dst) const {
    const int64_t base = t * bc.stride(0) + g * bc.stride(1);
    for (int64_t n = 0; n < N; ++n) dst[n] = load_f32(bc, base + n);
  }
  // y = (acc + D·x) · silu(z): the skip connection and the optional gate.
  float finish_y(float acc, float D_h, float x_v, int64_t t, int64_t h, int64_t p) const {
    float y = acc + D_h * x_v;
    if (z.defined()) y *= silu(load_f32(z, t * z.stride(0) + h * z.stride(1) + p));
    return y;
  }
};

int64_t off3(const Tensor& t, int64_t i, int64_t j) {
  return i * t.stride(0) + j * t.stride(1);
}
// Element (i, j, p, 0) of a [rows, H, P, N] state tensor.
int64_t state_row(const Tensor& s, int64_t i, int64_t h, int64_t p) {
  return i * s.stride(0) + h * s.stride(1) + p * s.stride(2);
}

void load_state(const Tensor& s, int64_t slot, int64_t h, int64_t P, int64_t N, float* S) {
  for (int64_t p = 0; p < P; ++p)
    for (int64_t n = 0; n < N; ++n) S[p * N + n] = load_f32(s, state_row(s, slot, h, p) + n);
}
void store_state(const Tensor& s, int64_t row, int64_t h, int64_t P, int64_t N, const float* S) {
  for (int64_t p = 0; p < P; ++p)
    for (int64_t n = 0; n < N; ++n)
      store_f32(s, state_row(s, row, h, p) + n, S ? S[p * N + n] : 0.0f);
}

bool mask_active(const Tensor& mask, int64_t t) {
  if (!mask.defined()) return true;
  switch (mask.dtype()) {
    case DType::u8:
      return mask.data_as<const uint8_t>()[t] != 0;
    case DType::u32:
      return mask.data_as<const uint32_t>()[t] != 0;
    default:
      return mask.data_as<const int32_t>()[t] != 0;
  }
}

// ssm_step, per (sequence b, head h), g = h / (H/G):
//   dt' = clamp(softplus?(dt + dt_bias)),  dA = exp(dt'·A),  A = -exp(A_log)
//   S[p,n] ← dA·S[p,n] + (dt'·x[p])·B[n];  y[p] = (Σ_n S[p,n]·C[n] + D·x[p]) · silu(z[p])
// y is computed from the f32 state before it is rounded to the pool dtype (as mamba_ssm does).
void ssm_step_cpu(const SsmStep& a, Context& ctx) {
  const SsmInputs in(a);
  const int64_t batch = a.x.size(0), H = in.H, P = in.P, N = in.N;
  parallel_for(batch * H, ctx, [&](int64_t i) {
    const int64_t b = i / H, h = i % H, g = in.group(h);
    const int64_t slot = load_index(a.state_slots, b);
    if (slot < 0) {  // padding: y = 0, pool untouched
      for (int64_t p = 0; p < P; ++p) store_f32(a.y, off3(a.y, b, h) + p, 0.0f);
      return;
    }
    std::vector<float> Bv(N), Cv(N);  // [N]
    in.group_row(a.B, b, g, Bv.data());
    in.group_row(a.C, b, g, Cv.data());
    const float dtp = in.dt_eff(b, h), dA = std::exp(dtp * in.A(h)), D_h = in.D_skip(h);
    for (int64_t p = 0; p < P; ++p) {
      const float xv = in.x_at(b, h, p), dtx = dtp * xv;
      const int64_t row = state_row(a.state, slot, h, p);
      float acc = 0.0f;
      for (int64_t n = 0; n < N; ++n) {
        const float s = load_f32(a.state, row + n) * dA + dtx * Bv[n];
        store_f32(a.state, row + n, s);
        acc += s * Cv[n];
      }
      store_f32(a.y, off3(a.y, b, h) + p, in.finish_y(acc, D_h, xv, b, h, p));
    }
  });
}

// ssm_step_record (seed 001), per (sequence, head), from the pool snapshot S (not written back):
//   active = mask[t] != 0;  dt' = active ? dt_eff : 0;  dA = active ? exp(dt'·A) : 1
//   dA_log[t,h] = dA;  dBx_log[t,h,p,n] = dt'·x[t,h,p]·B[t,g,n];  S ← dA·S + dBx
//   y[t,h,p] = (Σ_n S[p,n]·C[t,g,n] + D·x) · silu(z)
// state_out[seq] = S after the last step.
void ssm_step_record_cpu(const SsmStepRecord& a, Context& ctx) {
  const SsmInputs in(a);
  const int64_t seqs = a.cu_seqlens.size(0) - 1, H = in.H, P = in.P, N = in.N;
  parallel_for(seqs * H, ctx, [&](int64_t i) {
    const int64_t seq = i / H, h = i % H, g = in.group(h);
    const int64_t t0 = load_index(a.cu_seqlens, seq), t1 = load_index(a.cu_seqlens, seq + 1);
    const int64_t slot = load_index(a.state_slots, seq);
    if (slot < 0) {  // padding: y = 0 and identity tape entries
      for (int64_t t = t0; t < t1; ++t) {
        store_f32(a.dA_log, off3(a.dA_log, t, h), 1.0f);
        for (int64_t p = 0; p < P; ++p) {
          store_f32(a.y, off3(a.y, t, h) + p, 0.0f);
          for (int64_t n = 0; n < N; ++n)
            store_f32(a.dBx_log, state_row(a.dBx_log, t, h, p) + n, 0.0f);
        }
      }
      if (a.state_out.defined()) store_state(a.state_out, seq, h, P, N, nullptr);
      return;
    }
    std::vector<float> S(P * N), Bv(N), Cv(N);  // S [P, N]
    load_state(a.state, slot, h, P, N, S.data());
    const float A = in.A(h), D_h = in.D_skip(h);
    for (int64_t t = t0; t < t1; ++t) {
      const bool active = mask_active(a.mask, t);
      const float dtp = active ? in.dt_eff(t, h) : 0.0f;
      const float dA = active ? std::exp(dtp * A) : 1.0f;
      store_f32(a.dA_log, off3(a.dA_log, t, h), dA);
      in.group_row(a.B, t, g, Bv.data());
      in.group_row(a.C, t, g, Cv.data());
      for (int64_t p = 0; p < P; ++p) {
        const float xv = in.x_at(t, h, p), dtx = dtp * xv;
        const int64_t log_row = state_row(a.dBx_log, t, h, p);
        float acc = 0.0f;
        for (int64_t n = 0; n < N; ++n) {
          const float dBx = dtx * Bv[n];
          store_f32(a.dBx_log, log_row + n, dBx);
          float& s = S[p * N + n];
          s = dA * s + dBx;
          acc += s * Cv[n];
        }
        store_f32(a.y, off3(a.y, t, h) + p, in.finish_y(acc, D_h, xv, t, h, p));
      }
    }
    if (a.state_out.defined()) store_state(a.state_out, seq, h, P, N, S.data());
  });
}

// ssm_replay (seed 001), per (sequence, head): fold the first k = num_steps[seq] tape entries
// onto the pool state, in place:  S ← dA_log[t,h]·S + dBx_log[t,h]  for unmasked t.
void ssm_replay_cpu(const SsmReplay& a, Context& ctx) {
  const int64_t seqs = a.cu_seqlens.size(0) - 1, H = a.dA_log.size(1);
  const int64_t P = a.dBx_log.size(2), N = a.dBx_log.size(3);
  parallel_for(seqs * H, ctx, [&](int64_t i) {
    const int64_t seq = i / H, h = i % H;
    const int64_t slot = load_index(a.state_slots, seq);
    const int64_t k = load_index(a.num_steps, seq);
    if (slot < 0 || k == 0) return;
    const int64_t t0 = load_index(a.cu_seqlens, seq);
    std::vector<float> S(P * N);  // [P, N]
    load_state(a.state, slot, h, P, N, S.data());
    for (int64_t t = t0; t < t0 + k; ++t) {
      if (!mask_active(a.mask, t)) continue;
      const float dA = load_f32(a.dA_log, off3(a.dA_log, t, h));
      for (int64_t p = 0; p < P; ++p) {
        const int64_t log_row = state_row(a.dBx_log, t, h, p);
        for (int64_t n = 0; n < N; ++n)
          S[p * N + n] = dA * S[p * N + n] + load_f32(a.dBx_log, log_row + n);
      }
    }
    store_state(a.state, slot, h, P, N, S.data());
  });
}

// ssm_chunk_scan: chunked SSD, per (sequence, head), chunks of Q tokens from the sequence start.
// Within a chunk of L ≤ Q tokens (i, j in [0, L)), with dt'_j, a_j = dt'_j·A, cs_i = Σ_{j≤i} a_j:
//   CB[i,j]  = C_i · B_j                                  (j ≤ i; mamba's _bmm_chunk_fwd)
//   y_i[p]   = exp(cs_i) · Σ_n C_i[n]·S[p,n]                           inter-chunk, from S_enter
//            + Σ_{j≤i} CB[i,j]·exp(cs_i - cs_j)·dt'_j · x_j[p]         intra-chunk (segsum mask)
//            + D·x_i[p],  then · silu(z_i[p])                          (_chunk_scan_fwd)
//   S[p,n]  ← exp(cs_{L-1})·S[p,n] + Σ_j exp(cs_{L-1} - cs_j)·dt'_j·x_j[p]·B_j[n]
//                                                   (_chunk_state_fwd + _state_passing_fwd)
// S starts from the pool (has_initial_state) or zeros; after each chunk it is written to
// chunk_states (row chunk_offset[seq] + c) and at the end to the pool.
void ssm_chunk_scan_cpu(const SsmChunkScan& a, Context& ctx) {
  const SsmInputs in(a);
  const int64_t seqs = a.cu_seqlens.size(0) - 1, H = in.H, P = in.P, N = in.N;
  const int64_t Q = a.chunk_size;
  std::vector<int64_t> chunk_offset(seqs + 1, 0);  // first chunk_states row of each sequence
  for (int64_t s = 0; s < seqs; ++s) {
    const int64_t len = load_index(a.cu_seqlens, s + 1) - load_index(a.cu_seqlens, s);
    chunk_offset[s + 1] = chunk_offset[s] + (len + Q - 1) / Q;
  }
  parallel_for(seqs * H, ctx, [&](int64_t i) {
    const int64_t seq = i / H, h = i % H, g = in.group(h);
    const int64_t t0 = load_index(a.cu_seqlens, seq), t1 = load_index(a.cu_seqlens, seq + 1);
    const int64_t slot = load_index(a.state_slots, seq);
    if (slot < 0) {  // padding: y = 0, chunk_states rows = 0, pool untouched
      for (int64_t t = t0; t < t1; ++t)
        for (int64_t p = 0; p < P; ++p) store_f32(a.y, off3(a.y, t, h) + p, 0.0f);
      if (a.chunk_states.defined())
        for (int64_t r = chunk_offset[seq]; r < chunk_offset[seq + 1]; ++r)
          store_state(a.chunk_states, r, h, P, N, nullptr);
      return;
    }
    const bool initial = a.has_initial_state.defined() &&
                         (a.has_initial_state.dtype() == DType::u8
                              ? a.has_initial_state.data_as<const uint8_t>()[seq] != 0
                              : a.has_initial_state.data_as<const int32_t>()[seq] != 0);
    std::vector<float> S(P * N, 0.0f);  // [P, N], the state entering the current chunk
    if (initial) load_state(a.state, slot, h, P, N, S.data());
    const float A = in.A(h), D_h = in.D_skip(h);
    // Per-chunk buffers: dt'[Q], cs[Q], B/C [Q, N], x [Q, P], CB [Q, Q], weights w[Q].
    std::vector<float> dtv(Q), cs(Q), Bc(Q * N), Cc(Q * N), Xc(Q * P), CB(Q * Q), w(Q);
    for (int64_t c0 = t0, c = 0; c0 < t1; c0 += Q, ++c) {
      const int64_t L = std::min(Q, t1 - c0);
      for (int64_t j = 0; j < L; ++j) {
        dtv[j] = in.dt_eff(c0 + j, h);
        cs[j] = (j ? cs[j - 1] : 0.0f) + dtv[j] * A;
        in.group_row(a.B, c0 + j, g, &Bc[j * N]);
        in.group_row(a.C, c0 + j, g, &Cc[j * N]);
        for (int64_t p = 0; p < P; ++p) Xc[j * P + p] = in.x_at(c0 + j, h, p);
      }
      // CB[i,j] = C_i · B_j, causal half.
      for (int64_t ii = 0; ii < L; ++ii)
        for (int64_t j = 0; j <= ii; ++j) {
          float dot = 0.0f;
          for (int64_t n = 0; n < N; ++n) dot += Cc[ii * N + n] * Bc[j * N + n];
          CB[ii * Q + j] = dot;
        }
      // Outputs: inter-chunk term from S_enter plus the decay-masked intra-chunk term.
      for (int64_t ii = 0; ii < L; ++ii) {
        const float decay_in = std::exp(cs[ii]);
        for (int64_t j = 0; j <= ii; ++j) w[j] = CB[ii * Q + j] * std::exp(cs[ii] - cs[j]) * dtv[j];
        for (int64_t p = 0; p < P; ++p) {
          float inter = 0.0f;
          for (int64_t n = 0; n < N; ++n) inter += Cc[ii * N + n] * S[p * N + n];
          float intra = 0.0f;
          for (int64_t j = 0; j <= ii; ++j) intra += w[j] * Xc[j * P + p];
          store_f32(a.y, off3(a.y, c0 + ii, h) + p,
                    in.finish_y(decay_in * inter + intra, D_h, Xc[ii * P + p], c0 + ii, h, p));
        }
      }
      // State passing: S ← exp(cs_last)·S + Σ_j exp(cs_last - cs_j)·dt'_j · x_j ⊗ B_j.
      const float decay_chunk = std::exp(cs[L - 1]);
      for (int64_t j = 0; j < L; ++j) w[j] = std::exp(cs[L - 1] - cs[j]) * dtv[j];
      for (int64_t p = 0; p < P; ++p)
        for (int64_t n = 0; n < N; ++n) {
          float acc = 0.0f;
          for (int64_t j = 0; j < L; ++j) acc += w[j] * Xc[j * P + p] * Bc[j * N + n];
          S[p * N + n] = decay_chunk * S[p * N + n] + acc;
        }
      if (a.chunk_states.defined())
        store_state(a.chunk_states, chunk_offset[seq] + c, h, P, N, S.data());
    }
    store_state(a.state, slot, h, P, N, S.data());
  });
}

}  // namespace

void register_ssm(Registry& r) {
  r.add<SsmStep>("ssm_step.cpu", DeviceType::cpu, 0, nullptr, ssm_step_cpu);
  r.add<SsmStepRecord>("ssm_step_record.cpu", DeviceType::cpu, 0, nullptr, ssm_step_record_cpu);
  r.add<SsmReplay>("ssm_replay.cpu", DeviceType::cpu, 0, nullptr, ssm_replay_cpu);
  r.add<SsmChunkScan>("ssm_chunk_scan.cpu", DeviceType::cpu, 0, nullptr, ssm_chunk_scan_cpu);
}

}  // namespace hybrid::cpu
