// CPU reference: argmax, top_k. One row per task.
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

}  // namespace

void register_sampling(Registry& r) {
  r.add<Argmax>("argmax.cpu", DeviceType::cpu, 0, nullptr, argmax_cpu);
  r.add<TopK>("top_k.cpu", DeviceType::cpu, 0, nullptr, top_k_cpu);
}

}  // namespace hybrid::cpu
