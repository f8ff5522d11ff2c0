// CPU reference: moe_route (one token per task), moe_experts (tokens grouped by expert; each
// expert's weights are read once per call, its rows spread over the threads). f32 math.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "cpu/common.h"
#include "cpu/kernels.h"
#include "cpu/linear_impl.h"
#include "hybrid/core/error.h"
#include "hybrid/ops/moe.h"

namespace hybrid::cpu {

namespace {

// Per token t, l = logits[t] (f32):
//   s = softmax(l) | sigmoid(l);  c = s (+ bias)
//   groups (n_group > 1): score_g = sum of the 2 largest c in g; keep the topk_group best groups
//   ids = top_k eligible experts by c (by l when there is no bias: s is monotone in l, so the
//         comparison is exact); order by descending s, i.e. descending l; ties: lower id first
//   w = s[ids] (/ (Σ s[ids] + 1e-20) when renormalize) · scaling
//   shared_expert: column K is id E with weight sigmoid(shared_gate[t]) (1 without a gate)
void moe_route_cpu(const MoeRoute& a, Context& ctx) {
  const int64_t T = a.logits.size(0), E = a.logits.size(1), K = a.top_k;
  const int64_t per_group = E / a.n_group;
  const bool biased = a.bias.defined();
  parallel_for(T, ctx, [&](int64_t t) {
    std::vector<float> l(E), s(E), c(E);  // [E] logits, scores, selection scores
    for (int64_t e = 0; e < E; ++e) l[e] = load_f32(a.logits, t * a.logits.stride(0) + e);
    if (a.score == MoeScore::softmax) {
      const float m = *std::max_element(l.begin(), l.end());
      double sum = 0.0;
      for (int64_t e = 0; e < E; ++e) sum += s[e] = std::exp(l[e] - m);
      const float inv = static_cast<float>(1.0 / sum);
      for (int64_t e = 0; e < E; ++e) s[e] *= inv;
    } else {
      for (int64_t e = 0; e < E; ++e) s[e] = sigmoid(l[e]);
    }
    for (int64_t e = 0; e < E; ++e) c[e] = biased ? s[e] + load_f32(a.bias, e) : s[e];
    const std::vector<float>& key = biased ? c : l;
    auto before = [&](const std::vector<float>& v) {  // rank by v descending, then id ascending
      return [&v](int64_t i, int64_t j) { return v[i] > v[j] || (v[i] == v[j] && i < j); };
    };

    // Eligible experts: all, or those of the topk_group best groups.
    std::vector<int64_t> cand;  // candidate expert ids
    if (a.n_group > 1) {
      std::vector<float> group_score(a.n_group);
      for (int64_t g = 0; g < a.n_group; ++g) {
        float top1 = -INFINITY, top2 = -INFINITY;
        for (int64_t e = g * per_group; e < (g + 1) * per_group; ++e) {
          if (c[e] > top1) {
            top2 = top1;
            top1 = c[e];
          } else if (c[e] > top2) {
            top2 = c[e];
          }
        }
        group_score[g] = top1 + top2;
      }
      std::vector<int64_t> groups(a.n_group);
      std::iota(groups.begin(), groups.end(), 0);
      std::partial_sort(groups.begin(), groups.begin() + a.topk_group, groups.end(),
                        before(group_score));
      for (int64_t i = 0; i < a.topk_group; ++i)
        for (int64_t e = groups[i] * per_group; e < (groups[i] + 1) * per_group; ++e)
          cand.push_back(e);
    } else {
      cand.resize(E);
      std::iota(cand.begin(), cand.end(), 0);
    }

    std::partial_sort(cand.begin(), cand.begin() + K, cand.end(), before(key));
    cand.resize(K);
    std::sort(cand.begin(), cand.end(), before(l));  // output order: descending weight

    float denom = 1.0f;
    if (a.renormalize) {
      float sum = 0.0f;
      for (int64_t j = 0; j < K; ++j) sum += s[cand[j]];
      denom = sum + 1e-20f;
    }
    for (int64_t j = 0; j < K; ++j) {
      a.ids.data_as<int32_t>()[t * a.ids.stride(0) + j * a.ids.stride(1)] =
          static_cast<int32_t>(cand[j]);
      store_f32(a.weights, t * a.weights.stride(0) + j * a.weights.stride(1),
                s[cand[j]] / denom * a.scaling);
    }
    if (a.shared_expert) {  // column K: the shared expert, id E
      a.ids.data_as<int32_t>()[t * a.ids.stride(0) + K * a.ids.stride(1)] = static_cast<int32_t>(E);
      const float g = a.shared_gate.defined()
                          ? sigmoid(load_f32(a.shared_gate, t * a.shared_gate.stride(0)))
                          : 1.0f;
      store_f32(a.weights, t * a.weights.stride(0) + K * a.weights.stride(1), g);
    }
  });
}

constexpr int64_t kRowBlock = 16;  // weight rows per parallel task

// out[t] (+)= Σ_j w[t,j] · down[e] · h_e(x[t]),  e = ids[t,j]
//   swiglu: h = silu(G_e x) ⊙ (U_e x), G_e = gate_up[e, :I], U_e = gate_up[e, I:]
//   relu2:  h = relu(U_e x)²,           U_e = gate_up[e, :I]
// The (t, j) pairs are bucketed by expert (counting sort); experts run in ascending id, so each
// token's sum has a fixed order whatever the thread count. Per expert with n pairs:
//   H [n, I] = h(X_e)            parallel over blocks of I rows of gate_up
//   acc[t] += w · down[e] · H    parallel over blocks of Dm rows of down
// gate_up_row(e, r, dst) and down_row(e, d, dst) give a weight row in f32 (Dm and I values): the
// float tensors' elements (moe_experts) or the dequantized codes (moe_experts_q).
template <class GateUpRow, class DownRow>
void moe_experts_rows(const char* op, const Tensor& x, const Tensor& ids, const Tensor& weights,
                      const Tensor& out, int64_t E, int64_t I, bool swiglu, bool accumulate,
                      const GateUpRow& gate_up_row, const DownRow& down_row, Context& ctx) {
  const int64_t T = x.size(0), Dm = x.size(1), K = ids.size(1);

  // Bucket pairs p = t·K + j by expert; ids are checked before any weight is read.
  std::vector<int64_t> start(E + 1, 0);  // pairs of expert e: sorted[start[e], start[e+1])
  std::vector<int64_t> expert(T * K);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < K; ++j) {
      const int64_t id = load_index(ids, t * ids.stride(0) + j * ids.stride(1));
      if (id < 0 || id >= E)
        fail("[", op, "] ids[", t, ", ", j, "] = ", id, " is out of range [0, E=", E, ")");
      expert[t * K + j] = id;
      ++start[id + 1];
    }
  for (int64_t e = 0; e < E; ++e) start[e + 1] += start[e];
  std::vector<int64_t> sorted(T * K), fill(start.begin(), start.end() - 1);
  for (int64_t p = 0; p < T * K; ++p) sorted[fill[expert[p]]++] = p;

  std::vector<float> xf(T * Dm), acc(T * Dm, 0.0f);  // [T, Dm] x in f32, Σ over experts
  for (int64_t t = 0; t < T; ++t)
    for (int64_t d = 0; d < Dm; ++d) xf[t * Dm + d] = load_f32(x, t * x.stride(0) + d);

  for (int64_t e = 0; e < E; ++e) {
    const int64_t n = start[e + 1] - start[e];
    if (n == 0) continue;
    const int64_t* pairs = &sorted[start[e]];
    std::vector<float> h(n * I);  // [n, I]

    parallel_for((I + kRowBlock - 1) / kRowBlock, ctx, [&](int64_t blk) {
      std::vector<float> g_row(Dm), u_row(Dm);
      for (int64_t i = blk * kRowBlock; i < std::min(I, (blk + 1) * kRowBlock); ++i) {
        gate_up_row(e, swiglu ? I + i : i, u_row.data());
        if (swiglu) gate_up_row(e, i, g_row.data());
        for (int64_t p = 0; p < n; ++p) {
          const float* xt = &xf[(pairs[p] / K) * Dm];
          float u = 0.0f, g = 0.0f;
          for (int64_t d = 0; d < Dm; ++d) u += u_row[d] * xt[d];
          if (swiglu) {
            for (int64_t d = 0; d < Dm; ++d) g += g_row[d] * xt[d];
            h[p * I + i] = silu(g) * u;
          } else {
            const float r = std::max(u, 0.0f);
            h[p * I + i] = r * r;
          }
        }
      }
    });

    parallel_for((Dm + kRowBlock - 1) / kRowBlock, ctx, [&](int64_t blk) {
      std::vector<float> d_row(I);
      for (int64_t d = blk * kRowBlock; d < std::min(Dm, (blk + 1) * kRowBlock); ++d) {
        down_row(e, d, d_row.data());
        for (int64_t p = 0; p < n; ++p) {
          const int64_t t = pairs[p] / K, j = pairs[p] % K;
          float y = 0.0f;
          for (int64_t i = 0; i < I; ++i) y += d_row[i] * h[p * I + i];
          acc[t * Dm + d] += load_f32(weights, t * weights.stride(0) + j * weights.stride(1)) * y;
        }
      }
    });
  }

  parallel_for(T, ctx, [&](int64_t t) {
    for (int64_t d = 0; d < Dm; ++d) {
      const int64_t o = t * out.stride(0) + d;
      store_f32(out, o, accumulate ? load_f32(out, o) + acc[t * Dm + d] : acc[t * Dm + d]);
    }
  });
}

void moe_experts_cpu(const MoeExperts& a, Context& ctx) {
  const int64_t Dm = a.x.size(1), E = a.down.size(0), I = a.down.size(2);
  const Tensor &gu = a.gate_up, &dn = a.down;
  moe_experts_rows(
      MoeExperts::op_name, a.x, a.ids, a.weights, a.out, E, I,
      a.activation == MoeActivation::swiglu, a.accumulate,
      [&](int64_t e, int64_t r, float* dst) {
        for (int64_t d = 0; d < Dm; ++d)
          dst[d] = load_f32(gu, e * gu.stride(0) + r * gu.stride(1) + d);
      },
      [&](int64_t e, int64_t d, float* dst) {
        for (int64_t i = 0; i < I; ++i)
          dst[i] = load_f32(dn, e * dn.stride(0) + d * dn.stride(1) + i);
      },
      ctx);
}

// The same with each row dequantized as dequantize_cpu does (f32 s·q + b); the experts'
// QuantizedWeight views are made once, not per row.
void moe_experts_q_cpu(const MoeExpertsQ& a, Context& ctx) {
  const int64_t Dm = a.x.size(1), E = a.down.scales.size(0);
  const int64_t I = a.down.scales.size(2) * a.down.group_size;
  std::vector<QuantizedWeight> gu, dn;
  for (int64_t e = 0; e < E; ++e) {
    gu.push_back(a.gate_up.expert(e));
    dn.push_back(a.down.expert(e));
  }
  moe_experts_rows(
      MoeExpertsQ::op_name, a.x, a.ids, a.weights, a.out, E, I,
      a.activation == MoeActivation::swiglu, a.accumulate,
      [&](int64_t e, int64_t r, float* dst) { dequantize_row(gu[e], r, Dm, dst); },
      [&](int64_t e, int64_t d, float* dst) { dequantize_row(dn[e], d, I, dst); }, ctx);
}

}  // namespace

void register_moe(Registry& r) {
  r.add<MoeRoute>("moe_route.cpu", DeviceType::cpu, 0, nullptr, moe_route_cpu);
  r.add<MoeExperts>("moe_experts.cpu", DeviceType::cpu, 0, nullptr, moe_experts_cpu);
  r.add<MoeExpertsQ>("moe_experts_q.cpu", DeviceType::cpu, 0, nullptr, moe_experts_q_cpu);
}

}  // namespace hybrid::cpu
