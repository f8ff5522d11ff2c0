// CPU reference: rope (NeoX rotate-half over the first rotary_dim dims). f32 math, one token per
// task.
#include <cmath>
#include <vector>

#include "cpu/common.h"
#include "cpu/kernels.h"
#include "cpu/rope_math.h"
#include "hybrid/ops/rope.h"

namespace hybrid::cpu {

namespace {

std::vector<float> inv_freq_table(int64_t rotary_dim, float theta) {  // [rotary_dim / 2]
  std::vector<float> inv(rotary_dim / 2);
  for (int64_t i = 0; i < rotary_dim / 2; ++i) inv[i] = rope_inv_freq(i, rotary_dim, theta);
  return inv;
}

// x [T, H, D] -> out [T, H, D]; per token t with p = positions[t], per head, i < half:
//   a = fl32(fl32(p) · inv_freq[i])  (cpu/rope_math.h)
//   out[i] = x[i]·cos a − x[i+half]·sin a,  out[i+half] = x[i+half]·cos a + x[i]·sin a
//   out[d] = x[d] for d >= rotary_dim.
void rope_cpu(const Rope& a, Context& ctx) {
  const int64_t T = a.x.size(0), H = a.x.size(1), D = a.x.size(2);
  const int64_t half = a.rotary_dim / 2;
  const std::vector<float> inv_freq = inv_freq_table(a.rotary_dim, a.theta);
  const int32_t* positions = a.positions.data_as<const int32_t>();
  const bool in_place = a.out.data() == a.x.data();
  parallel_for(T, ctx, [&](int64_t t) {
    std::vector<float> cos_a(half), sin_a(half);  // [half]
    for (int64_t i = 0; i < half; ++i) rope_cos_sin(positions[t], inv_freq[i], cos_a[i], sin_a[i]);
    for (int64_t h = 0; h < H; ++h) {
      const int64_t xo = t * a.x.stride(0) + h * a.x.stride(1);
      const int64_t oo = t * a.out.stride(0) + h * a.out.stride(1);
      for (int64_t i = 0; i < half; ++i) {
        const float x0 = load_f32(a.x, xo + i), x1 = load_f32(a.x, xo + i + half);
        store_f32(a.out, oo + i, x0 * cos_a[i] - x1 * sin_a[i]);
        store_f32(a.out, oo + i + half, x1 * cos_a[i] + x0 * sin_a[i]);
      }
      if (!in_place)
        for (int64_t d = a.rotary_dim; d < D; ++d) store_f32(a.out, oo + d, load_f32(a.x, xo + d));
    }
  });
}

}  // namespace

void register_rope(Registry& r) {
  r.add<Rope>("rope.cpu", DeviceType::cpu, 0, nullptr, rope_cpu);
}

}  // namespace hybrid::cpu
