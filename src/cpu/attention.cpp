// CPU reference: kv_append, attn_decode, attn_prefill, rope_kv_append_attn_decode.
// f32 math; attention uses an online (running-max) softmax; one (query token, head) per task.
#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu/common.h"
#include "cpu/kernels.h"
#include "cpu/rope_math.h"
#include "hybrid/ops/attention.h"

namespace hybrid::cpu {

namespace {

int64_t idx(const Tensor& t, int64_t i) {
  return load_index(t, i * t.stride(0));
}
int64_t idx(const Tensor& t, int64_t i, int64_t j) {
  return load_index(t, i * t.stride(0) + j * t.stride(1));
}

// Element offset of row `pos` of KV head `h` of sequence `n` in a cache
// [num_pages, page_size, Hkv, D] addressed through page_table [N, max_pages].
int64_t cache_row(const Tensor& cache, const Tensor& page_table, int64_t n, int64_t pos,
                  int64_t h) {
  const int64_t page_size = cache.size(1);
  const int64_t page = idx(page_table, n, pos / page_size);
  return page * cache.stride(0) + (pos % page_size) * cache.stride(1) + h * cache.stride(2);
}

// Copies one token's [Hkv, D] K and V rows (src row offsets ko/vo) to cache position pos of
// sequence n: the rows are rounded to the cache dtype.
void write_kv(const Tensor& k, int64_t t, const Tensor& v, const Tensor& k_cache,
              const Tensor& v_cache, const Tensor& page_table, int64_t n, int64_t pos) {
  const int64_t Hkv = k.size(1), D = k.size(2);
  for (int64_t h = 0; h < Hkv; ++h) {
    const int64_t kc = cache_row(k_cache, page_table, n, pos, h);
    const int64_t vc = cache_row(v_cache, page_table, n, pos, h);
    const int64_t ko = t * k.stride(0) + h * k.stride(1), vo = t * v.stride(0) + h * v.stride(1);
    for (int64_t d = 0; d < D; ++d) {
      store_f32(k_cache, kc + d, load_f32(k, ko + d));
      store_f32(v_cache, vc + d, load_f32(v, vo + d));
    }
  }
}

// One query row q [D] (f32) at position pos of sequence n, KV head h, against cached keys
// j in [lo, pos], lo = max(0, pos − window + 1) (window > 0) or 0:
//   s_j = scale · q·K[j];  m_j = max(m_{j−1}, s_j);  l_j = l_{j−1}·e^{m_{j−1}−m_j} + e^{s_j−m_j}
//   acc_j = acc_{j−1}·e^{m_{j−1}−m_j} + e^{s_j−m_j}·V[j];  out = acc / l
void attend(const float* q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& page_table,
            int64_t n, int64_t pos, int64_t h, int64_t window, float scale, float* out) {
  const int64_t D = k_cache.size(3);
  const int64_t lo = window > 0 ? std::max<int64_t>(0, pos - window + 1) : 0;
  float m = -INFINITY, l = 0.0f;
  std::vector<float> acc(D, 0.0f);  // [D]
  for (int64_t j = lo; j <= pos; ++j) {
    const int64_t kr = cache_row(k_cache, page_table, n, j, h);
    const int64_t vr = cache_row(v_cache, page_table, n, j, h);
    float dot = 0.0f;
    for (int64_t d = 0; d < D; ++d) dot += q[d] * load_f32(k_cache, kr + d);
    const float s = dot * scale;
    const float m_new = std::max(m, s);
    const float corr = std::exp(m - m_new);  // 0 on the first key (m = −inf)
    const float e = std::exp(s - m_new);
    l = l * corr + e;
    for (int64_t d = 0; d < D; ++d) acc[d] = acc[d] * corr + e * load_f32(v_cache, vr + d);
    m = m_new;
  }
  for (int64_t d = 0; d < D; ++d) out[d] = acc[d] / l;
}

float resolve_scale(std::optional<float> scale, int64_t D) {
  return scale ? *scale : 1.0f / std::sqrt(static_cast<float>(D));
}

// Decode attention of q [N, Hq, D] (already rotated when `rotated` is given: [N, Hq, D] f32
// contiguous) into out [N, Hq, D]; query of sequence n at position seq_lens[n] − 1.
void decode_attention(const Tensor& q, const std::vector<float>* rotated, const Tensor& k_cache,
                      const Tensor& v_cache, const Tensor& page_table, const Tensor& seq_lens,
                      const Tensor& out, int64_t window, std::optional<float> scale, Context& ctx) {
  const int64_t N = q.size(0), Hq = q.size(1), D = q.size(2);
  const int64_t group = Hq / k_cache.size(2);
  const float sc = resolve_scale(scale, D);
  parallel_for(N * Hq, ctx, [&](int64_t nh) {
    const int64_t n = nh / Hq, h = nh % Hq;
    const int64_t len = idx(seq_lens, n);
    const int64_t oo = n * out.stride(0) + h * out.stride(1);
    std::vector<float> qr(D), o(D, 0.0f);  // [D]
    if (len > 0) {
      for (int64_t d = 0; d < D; ++d)
        qr[d] =
            rotated ? (*rotated)[nh * D + d] : load_f32(q, n * q.stride(0) + h * q.stride(1) + d);
      attend(qr.data(), k_cache, v_cache, page_table, n, len - 1, h / group, window, sc, o.data());
    }
    for (int64_t d = 0; d < D; ++d) store_f32(out, oo + d, o[d]);  // padding sequence: 0
  });
}

// k [T, Hkv, D], v -> caches: token t of sequence n (from cu_seqlens, or n = t) to position
// positions[t] (negative: padding, skipped).
void kv_append_cpu(const KvAppend& a, Context& ctx) {
  const int64_t T = a.k.size(0);
  const bool varlen = a.cu_seqlens.defined();
  const int64_t N = varlen ? a.cu_seqlens.size(0) - 1 : T;
  parallel_for(N, ctx, [&](int64_t n) {
    const int64_t t0 = varlen ? idx(a.cu_seqlens, n) : n;
    const int64_t t1 = varlen ? idx(a.cu_seqlens, n + 1) : n + 1;
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t pos = idx(a.positions, t);
      if (pos >= 0) write_kv(a.k, t, a.v, a.k_cache, a.v_cache, a.page_table, n, pos);
    }
  });
}

void attn_decode_cpu(const AttnDecode& a, Context& ctx) {
  decode_attention(a.q, nullptr, a.k_cache, a.v_cache, a.page_table, a.seq_lens, a.out, a.window,
                   a.scale, ctx);
}

// q [T, Hq, D] -> out [T, Hq, D]: row cu[n] + i at position seq_lens[n] − L_n + i.
void attn_prefill_cpu(const AttnPrefill& a, Context& ctx) {
  const int64_t T = a.q.size(0), Hq = a.q.size(1), D = a.q.size(2);
  const int64_t N = a.cu_seqlens.size(0) - 1;
  const int64_t group = Hq / a.k_cache.size(2);
  const float sc = resolve_scale(a.scale, D);
  std::vector<int64_t> seq_of(T), pos_of(T);  // [T]
  for (int64_t n = 0; n < N; ++n) {
    const int64_t t0 = idx(a.cu_seqlens, n), t1 = idx(a.cu_seqlens, n + 1);
    const int64_t prefix = idx(a.seq_lens, n) - (t1 - t0);
    for (int64_t t = t0; t < t1; ++t) {
      seq_of[t] = n;
      pos_of[t] = prefix + (t - t0);
    }
  }
  parallel_for(T * Hq, ctx, [&](int64_t th) {
    const int64_t t = th / Hq, h = th % Hq;
    std::vector<float> qr(D), o(D);  // [D]
    for (int64_t d = 0; d < D; ++d)
      qr[d] = load_f32(a.q, t * a.q.stride(0) + h * a.q.stride(1) + d);
    attend(qr.data(), a.k_cache, a.v_cache, a.page_table, seq_of[t], pos_of[t], h / group, a.window,
           sc, o.data());
    const int64_t oo = t * a.out.stride(0) + h * a.out.stride(1);
    for (int64_t d = 0; d < D; ++d) store_f32(a.out, oo + d, o[d]);
  });
}

// RoPE of one [D] row at position pos, exactly as the rope op computes it (cpu/rope_math.h):
//   y[i] = x[i]cos a − x[i+half]sin a, y[i+half] = x[i+half]cos a + x[i]sin a, y[d>=rd] = x[d];
// then rounded to `dtype_of` (the dtype the three-op sequence would store the rotated row in).
void rope_row(const Tensor& x, int64_t off, int64_t pos, int64_t rotary_dim, float theta,
              const Tensor& dtype_of, float* y) {
  const int64_t D = x.size(-1), half = rotary_dim / 2;
  for (int64_t i = 0; i < half; ++i) {
    float c, s;
    rope_cos_sin(pos, rope_inv_freq(i, rotary_dim, theta), c, s);
    const float x0 = load_f32(x, off + i), x1 = load_f32(x, off + i + half);
    y[i] = x0 * c - x1 * s;
    y[i + half] = x1 * c + x0 * s;
  }
  for (int64_t d = rotary_dim; d < D; ++d) y[d] = load_f32(x, off + d);
  // Round to the stored dtype: a one-element view of a local buffer of that dtype.
  for (int64_t d = 0; d < D; ++d) {
    uint32_t buf = 0;
    const Tensor one(&buf, dtype_of.dtype(), Device::cpu(), {1});
    store_f32(one, 0, y[d]);
    y[d] = load_f32(one, 0);
  }
}

// Seed 003's fused step: rope q and k at p = seq_lens[n] − 1, append k_r and v, decode attention.
void rope_kv_append_attn_decode_cpu(const RopeKvAppendAttnDecode& a, Context& ctx) {
  const int64_t N = a.q.size(0), Hq = a.q.size(1), Hkv = a.k.size(1), D = a.q.size(2);
  // 1. Rotated k rows [N, Hkv, D] appended to the cache (padding sequences write nothing).
  parallel_for(N, ctx, [&](int64_t n) {
    const int64_t len = idx(a.seq_lens, n);
    if (len == 0) return;
    std::vector<float> kr(Hkv * D);  // [Hkv, D]
    for (int64_t h = 0; h < Hkv; ++h)
      rope_row(a.k, n * a.k.stride(0) + h * a.k.stride(1), len - 1, a.rotary_dim, a.theta, a.k,
               &kr[h * D]);
    const Tensor k_rot(kr.data(), DType::f32, Device::cpu(), {1, Hkv, D});
    const Tensor v_row = a.v.slice(0, n, 1);
    write_kv(k_rot, 0, v_row, a.k_cache, a.v_cache, a.page_table, n, len - 1);
  });
  // 2. Rotated q [N, Hq, D] (f32 values already rounded to q's dtype), then decode attention.
  std::vector<float> q_rot(N * Hq * D);
  parallel_for(N, ctx, [&](int64_t n) {
    const int64_t len = idx(a.seq_lens, n);
    if (len == 0) return;
    for (int64_t h = 0; h < Hq; ++h)
      rope_row(a.q, n * a.q.stride(0) + h * a.q.stride(1), len - 1, a.rotary_dim, a.theta, a.q,
               &q_rot[(n * Hq + h) * D]);
  });
  decode_attention(a.q, &q_rot, a.k_cache, a.v_cache, a.page_table, a.seq_lens, a.out, a.window,
                   a.scale, ctx);
}

}  // namespace

void register_attention(Registry& r) {
  r.add<KvAppend>("kv_append.cpu", DeviceType::cpu, 0, nullptr, kv_append_cpu);
  r.add<AttnDecode>("attn_decode.cpu", DeviceType::cpu, 0, nullptr, attn_decode_cpu);
  r.add<AttnPrefill>("attn_prefill.cpu", DeviceType::cpu, 0, nullptr, attn_prefill_cpu);
  r.add<RopeKvAppendAttnDecode>("rope_kv_append_attn_decode.cpu", DeviceType::cpu, 0, nullptr,
                                rope_kv_append_attn_decode_cpu);
}

}  // namespace hybrid::cpu
