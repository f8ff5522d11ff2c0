// CPU reference: argmax, top_k, sample_rows, softmax_mass, repetition_penalty. One row per task.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

#include "cpu/common.h"
#include "cpu/kernels.h"
#include "hybrid/ops/sampling.h"

namespace hybrid::cpu {

namespace {

// out[n] = first v of the row's maximum; -1 for a row with a NaN or +inf, or only -inf.
void argmax_cpu(const Argmax& a, Context& ctx) {
  const int64_t V = a.x.size(1);
  parallel_for(a.x.size(0), ctx, [&](int64_t n) {
    const int64_t row = n * a.x.stride(0);
    int64_t best = -1;
    float best_v = -INFINITY;
    bool bad = false;
    for (int64_t v = 0; v < V; ++v) {
      const float x = load_f32(a.x, row + v);
      if (std::isnan(x) || x == INFINITY) bad = true;
      if (x > best_v) best_v = x, best = v;
    }
    const int64_t id = bad || best < 0 ? -1 : best;
    a.out.data_as<int32_t>()[n * a.out.stride(0)] = static_cast<int32_t>(id);
  });
}

// top_k's order as an integer: larger ranks first. -0 maps to +0, every NaN above +inf.
uint32_t rank_key(float x) {
  if (std::isnan(x)) return UINT32_MAX;
  const uint32_t b = std::bit_cast<uint32_t>(x == 0.0f ? 0.0f : x);
  return b & 0x80000000u ? ~b : b | 0x80000000u;
}

// The k entries of largest (key, -id), by a partial sort of the row's ids.
void top_k_cpu(const TopK& a, Context& ctx) {
  const int64_t V = a.x.size(1), k = a.ids.size(1);
  parallel_for(a.x.size(0), ctx, [&](int64_t n) {
    const int64_t row = n * a.x.stride(0);
    std::vector<uint32_t> key(static_cast<size_t>(V));
    for (int64_t v = 0; v < V; ++v) key[v] = rank_key(load_f32(a.x, row + v));
    std::vector<int32_t> order(static_cast<size_t>(V));
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t i, int32_t j) {
      return key[i] > key[j] || (key[i] == key[j] && i < j);
    });
    for (int64_t j = 0; j < k; ++j) {
      a.ids.data_as<int32_t>()[n * a.ids.stride(0) + j] = order[j];
      a.values.data_as<float>()[n * a.values.stride(0) + j] = load_f32(a.x, row + order[j]);
    }
  });
}

// The max of x[row, row + V) into zmax; false for a row Sampler refuses (a NaN or +inf, or only
// -inf).
bool row_max(const Tensor& x, int64_t row, int64_t V, float& zmax) {
  zmax = -INFINITY;
  for (int64_t v = 0; v < V; ++v) {
    const float e = load_f32(x, row + v);
    if (std::isnan(e) || e == INFINITY) return false;
    zmax = std::max(zmax, e);
  }
  return zmax != -INFINITY;
}

// Sampler's draw on the whole row (temperature, min-p), with its arithmetic: w in f64, sums in
// ascending v, the inverse CDF over w / Σw. -1 for a NaN or +inf, or only -inf.
void sample_rows_cpu(const SampleRows& a, Context& ctx) {
  const int64_t V = a.x.size(1);
  const double temperature = a.temperature, min_p = a.min_p;
  parallel_for(a.x.size(0), ctx, [&](int64_t n) {
    const int64_t row = n * a.x.stride(0);
    int32_t& out = a.out.data_as<int32_t>()[n * a.out.stride(0)];
    float zmax;
    if (!row_max(a.x, row, V, zmax)) {
      out = -1;
      return;
    }
    std::vector<double> w(static_cast<size_t>(V));
    double total = 0;
    for (int64_t v = 0; v < V; ++v) {
      const double e = std::exp((static_cast<double>(load_f32(a.x, row + v)) - zmax) / temperature);
      w[v] = e > 0 && e >= min_p ? e : 0.0;
      total += w[v];
    }
    const double u =
        static_cast<double>(a.draws.data_as<const int64_t>()[n * a.draws.stride(0)]) * 0x1.0p-53;
    double cumulative = 0;
    int64_t last = -1;
    for (int64_t v = 0; v < V; ++v) {
      if (!(w[v] > 0)) continue;
      last = v;
      cumulative += w[v] / total;
      if (u < cumulative) {
        out = static_cast<int32_t>(v);
        return;
      }
    }
    out = static_cast<int32_t>(last);
  });
}

// out[n] = Σ_v exp((x_v − max x) / T) in f64, in id order (Sampler's weights and sum); NaN for a
// row with a NaN or +inf, or only -inf.
void softmax_mass_cpu(const SoftmaxMass& a, Context& ctx) {
  const int64_t V = a.x.size(1);
  const double temperature = a.temperature;
  parallel_for(a.x.size(0), ctx, [&](int64_t n) {
    const int64_t row = n * a.x.stride(0);
    double& out = a.out.data_as<double>()[n * a.out.stride(0)];
    float zmax;
    if (!row_max(a.x, row, V, zmax)) {
      out = std::nan("");
      return;
    }
    double total = 0;
    for (int64_t v = 0; v < V; ++v)
      total += std::exp((static_cast<double>(load_f32(a.x, row + v)) - zmax) / temperature);
    out = total;
  });
}

// x[n, id] = x > 0 ? x / penalty : x · penalty for the row's ids (f32, as Sampler).
void repetition_penalty_cpu(const RepetitionPenalty& a, Context& ctx) {
  float* x = a.x.data_as<float>();
  parallel_for(a.x.size(0), ctx, [&](int64_t n) {
    const int32_t cnt = a.counts.data_as<const int32_t>()[n * a.counts.stride(0)];
    for (int32_t j = 0; j < cnt; ++j) {
      const int32_t id = a.ids.data_as<const int32_t>()[n * a.ids.stride(0) + j];
      float& v = x[n * a.x.stride(0) + id];
      v = v > 0 ? v / a.penalty : v * a.penalty;
    }
  });
}

}  // namespace

void register_sampling(Registry& r) {
  r.add<Argmax>("argmax.cpu", DeviceType::cpu, 0, nullptr, argmax_cpu);
  r.add<TopK>("top_k.cpu", DeviceType::cpu, 0, nullptr, top_k_cpu);
  r.add<SampleRows>("sample_rows.cpu", DeviceType::cpu, 0, nullptr, sample_rows_cpu);
  r.add<SoftmaxMass>("softmax_mass.cpu", DeviceType::cpu, 0, nullptr, softmax_mass_cpu);
  r.add<RepetitionPenalty>("repetition_penalty.cpu", DeviceType::cpu, 0, nullptr,
                           repetition_penalty_cpu);
}

}  // namespace hybrid::cpu
