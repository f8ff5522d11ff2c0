// gdn_replay on the CPU repeats the recurrence's own f32 operations: the state after replaying k
// recorded tokens is bit-identical to gdn_recurrent run over those k tokens (a rollback that
// matches a fresh prefill exactly, so temperature-0 speculative decoding stays neutral).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "hybrid/ops/gdn.h"

using namespace hybrid;

TEST(GdnReplay, BitIdenticalToPlainSteps) {
  constexpr int64_t T = 6, Hk = 2, Hv = 4, K = 16, V = 8;
  std::vector<float> q(T * Hk * K), k(T * Hk * K), v(T * Hv * V), g(T * Hv), beta(T * Hv);
  std::vector<float> pool(Hv * V * K), out(T * Hv * V);
  uint32_t x = 12345;
  auto next = [&x] {  // deterministic values in [-1, 1)
    x = x * 1664525u + 1013904223u;
    return static_cast<float>(x >> 8) / static_cast<float>(1u << 23) - 1.0f;
  };
  for (float& e : q) e = next();
  for (float& e : k) e = next();
  for (float& e : v) e = next();
  for (float& e : g) e = -0.5f + 0.4f * next();
  for (float& e : beta) e = 0.5f + 0.4f * next();
  for (float& e : pool) e = 0.3f * next();
  std::vector<float> tape_k(T * Hk * K), tape_u(T * Hv * V), tape_alpha(T * Hv);
  std::vector<int32_t> cu{0, T}, slot{0};
  Context ctx;
  auto t = [](std::vector<float>& d, std::vector<int64_t> shape) {
    return Tensor(d.data(), DType::f32, Device::cpu(), shape);
  };

  GdnRecord r;
  r.q = t(q, {T, Hk, K}), r.k = t(k, {T, Hk, K}), r.v = t(v, {T, Hv, V});
  r.g = t(g, {T, Hv}), r.beta = t(beta, {T, Hv}), r.state = t(pool, {1, Hv, V, K});
  r.cu_seqlens = Tensor(cu.data(), DType::i32, Device::cpu(), {2});
  r.state_slots = Tensor(slot.data(), DType::i32, Device::cpu(), {1});
  r.out = t(out, {T, Hv, V});
  r.tape_k = t(tape_k, {T, Hk, K}), r.tape_u = t(tape_u, {T, Hv, V}),
  r.tape_alpha = t(tape_alpha, {T, Hv});
  r.use_qk_l2norm = true;
  gdn_record(r, ctx);

  for (int32_t steps = 0; steps <= T; ++steps) {
    std::vector<float> replayed(Hv * V * K), plain = pool;
    std::vector<int32_t> num{steps}, cu_k{0, steps};
    GdnReplay p;
    p.tape_k = r.tape_k, p.tape_u = r.tape_u, p.tape_alpha = r.tape_alpha, p.state = r.state;
    p.cu_seqlens = r.cu_seqlens, p.state_slots = r.state_slots;
    p.num_tokens = Tensor(num.data(), DType::i32, Device::cpu(), {1});
    p.state_out = t(replayed, {1, Hv, V, K});
    gdn_replay(p, ctx);

    GdnRecurrent a;
    a.q = r.q.slice(0, 0, steps), a.k = r.k.slice(0, 0, steps), a.v = r.v.slice(0, 0, steps);
    a.g = r.g.slice(0, 0, steps), a.beta = r.beta.slice(0, 0, steps);
    a.state = t(plain, {1, Hv, V, K});
    a.cu_seqlens = Tensor(cu_k.data(), DType::i32, Device::cpu(), {2});
    a.state_slots = r.state_slots;
    std::vector<float> o(T * Hv * V);
    a.out = Tensor(o.data(), DType::f32, Device::cpu(), {steps, Hv, V});
    a.use_qk_l2norm = true;
    gdn_recurrent(a, ctx);
    EXPECT_EQ(std::memcmp(replayed.data(), plain.data(), plain.size() * sizeof(float)), 0)
        << "replay of " << steps << " tokens differs from " << steps << " plain steps";
  }
}
