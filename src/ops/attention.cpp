// kv_append, attn_decode, attn_prefill, rope_kv_append_attn_decode: validation and dispatch.
//
// Shapes, dtypes and strides are checked for every call. Values held in index tensors (page
// tables, seq_lens, cu_seqlens, positions) are checked when they live on the CPU: every page-table
// entry an op will touch lies in [0, num_pages), seq_lens fit their page-table row, cu_seqlens are
// monotone and end at T, positions fit the row.
#include "hybrid/ops/attention.h"

#include <algorithm>
#include <cmath>

#include "hybrid/core/registry.h"
#include "ops/check.h"

namespace hybrid {

namespace {

constexpr std::initializer_list<DType> kActivation = {DType::f32, DType::bf16, DType::f16};

struct Paged {
  int64_t num_pages, page_size, Hkv, max_pages;
  int64_t capacity() const { return max_pages * page_size; }
};

int32_t at(const Tensor& t, int64_t i) {
  return t.data_as<const int32_t>()[i * t.stride(0)];
}
int32_t at(const Tensor& t, int64_t i, int64_t j) {
  return t.data_as<const int32_t>()[i * t.stride(0) + j * t.stride(1)];
}

// k_cache, v_cache [num_pages, page_size, Hkv, D] and page_table [N, max_pages].
// Hkv < 0: learnt from k_cache.
Paged check_paged(ops::Check& c, const Tensor& kc, const Tensor& vc, const Tensor& pt, int64_t N,
                  int64_t Hkv, int64_t D) {
  c.rank(kc, "k_cache", {"num_pages", "page_size", "Hkv", "D"}, kActivation);
  Paged p{kc.size(0), kc.size(1), Hkv < 0 ? kc.size(2) : Hkv, 0};
  c.tensor(kc, "k_cache",
           {{"num_pages", p.num_pages}, {"page_size", p.page_size}, {"Hkv", p.Hkv}, {"D", D}},
           kActivation);
  c.tensor(vc, "v_cache",
           {{"num_pages", p.num_pages}, {"page_size", p.page_size}, {"Hkv", p.Hkv}, {"D", D}},
           {kc.dtype()});
  c.require(p.page_size > 0, "k_cache: page_size must be positive, got ", kc.describe());
  c.tensor(pt, "page_table", {{"N", N}, {"max_pages", -1}}, {DType::i32});
  p.max_pages = pt.size(1);
  c.inner_contiguous(kc, "k_cache");
  c.inner_contiguous(vc, "v_cache");
  c.inner_contiguous(pt, "page_table");
  return p;
}

void check_seq_len(ops::Check& c, const Paged& p, int32_t len, int64_t n) {
  c.require(len >= 0 && len <= p.capacity(), "seq_lens[", n, "]=", len,
            " is out of range: the page table row holds max_pages·page_size = ", p.max_pages, "·",
            p.page_size, " = ", p.capacity(), " positions");
}

// Page-table entries of row n for positions [first, last] lie in [0, num_pages).
void check_pages(ops::Check& c, const Tensor& pt, const Paged& p, int64_t n, int64_t first,
                 int64_t last) {
  for (int64_t j = first / p.page_size; j <= last / p.page_size; ++j) {
    const int32_t page = at(pt, n, j);
    c.require(page >= 0 && page < p.num_pages, "page_table[", n, ", ", j, "]=", page,
              " is out of range [0, num_pages=", p.num_pages, ")");
  }
}

// First key position a query at position pos attends to.
int64_t window_start(int64_t pos, int64_t window) {
  return window > 0 ? std::max<int64_t>(0, pos - window + 1) : 0;
}

void check_window_scale(ops::Check& c, int64_t window, std::optional<float> scale) {
  c.require(window >= 0, "window must be >= 0 (0 = no window), got ", window);
  if (scale) c.require(std::isfinite(*scale), "scale must be finite, got ", *scale);
}

void check_rope_params(ops::Check& c, int64_t rotary_dim, float theta, int64_t D) {
  c.require(rotary_dim >= 2 && rotary_dim <= D && rotary_dim % 2 == 0, "rotary_dim ", rotary_dim,
            " must be even and in [2, D=", D, "]");
  c.require(std::isfinite(theta) && theta > 0.0f, "theta must be positive and finite, got ", theta);
}

// Decode-style sequences: query at seq_lens[n] − 1, pages of its window.
void check_decode_values(ops::Check& c, const Tensor& seq_lens, const Tensor& pt, const Paged& p,
                         int64_t N, int64_t window) {
  for (int64_t n = 0; n < N; ++n) {
    const int32_t len = at(seq_lens, n);
    check_seq_len(c, p, len, n);
    if (len > 0) check_pages(c, pt, p, n, window_start(len - 1, window), len - 1);
  }
}

}  // namespace

void kv_append(const KvAppend& a, Context& ctx) {
  ops::Check c(KvAppend::op_name);
  c.rank(a.k, "k", {"T", "Hkv", "D"}, kActivation);
  const int64_t T = a.k.size(0), Hkv = a.k.size(1), D = a.k.size(2);
  c.tensor(a.v, "v", {{"T", T}, {"Hkv", Hkv}, {"D", D}}, kActivation);
  int64_t N = T;
  if (a.cu_seqlens.defined()) {
    c.rank(a.cu_seqlens, "cu_seqlens", {"N + 1"}, {DType::i32});
    c.require(a.cu_seqlens.size(0) >= 1, "cu_seqlens: expected [N + 1] with N >= 0, got ",
              a.cu_seqlens.describe());
    N = a.cu_seqlens.size(0) - 1;
  }
  const Paged p = check_paged(c, a.k_cache, a.v_cache, a.page_table, N, Hkv, D);
  c.tensor(a.positions, "positions", {{"T", T}}, {DType::i32});
  c.inner_contiguous(a.k, "k");
  c.inner_contiguous(a.v, "v");
  c.inner_contiguous(a.cu_seqlens, "cu_seqlens");
  c.inner_contiguous(a.positions, "positions");
  if (c.device().is_cpu()) {
    if (a.cu_seqlens.defined()) ops::check_cu_seqlens_values(c, a.cu_seqlens, T);
    for (int64_t n = 0; n < N; ++n) {
      const int64_t t0 = a.cu_seqlens.defined() ? at(a.cu_seqlens, n) : n;
      const int64_t t1 = a.cu_seqlens.defined() ? at(a.cu_seqlens, n + 1) : n + 1;
      for (int64_t t = t0; t < t1; ++t) {
        const int32_t pos = at(a.positions, t);
        if (pos < 0) continue;  // padding token
        c.require(pos < p.capacity(), "positions[", t, "]=", pos, " (sequence ", n,
                  ") is out of range: the page table row holds max_pages·page_size = ", p.max_pages,
                  "·", p.page_size, " = ", p.capacity(), " positions");
        check_pages(c, a.page_table, p, n, pos, pos);
      }
    }
  }
  ctx.registry().dispatch(a, c.device(), ctx);
}

void attn_decode(const AttnDecode& a, Context& ctx) {
  ops::Check c(AttnDecode::op_name);
  c.rank(a.q, "q", {"N", "Hq", "D"}, kActivation);
  const int64_t N = a.q.size(0), Hq = a.q.size(1), D = a.q.size(2);
  const Paged p = check_paged(c, a.k_cache, a.v_cache, a.page_table, N, -1, D);
  c.require(p.Hkv > 0 && Hq % p.Hkv == 0, "Hq=", Hq, " must be a multiple of Hkv=", p.Hkv);
  c.tensor(a.seq_lens, "seq_lens", {{"N", N}}, {DType::i32});
  c.tensor(a.out, "out", {{"N", N}, {"Hq", Hq}, {"D", D}}, kActivation);
  c.inner_contiguous(a.q, "q");
  c.inner_contiguous(a.seq_lens, "seq_lens");
  c.inner_contiguous(a.out, "out");
  check_window_scale(c, a.window, a.scale);
  if (c.device().is_cpu()) check_decode_values(c, a.seq_lens, a.page_table, p, N, a.window);
  ctx.registry().dispatch(a, c.device(), ctx);
}

void attn_prefill(const AttnPrefill& a, Context& ctx) {
  ops::Check c(AttnPrefill::op_name);
  c.rank(a.q, "q", {"T", "Hq", "D"}, kActivation);
  const int64_t T = a.q.size(0), Hq = a.q.size(1), D = a.q.size(2);
  c.rank(a.cu_seqlens, "cu_seqlens", {"N + 1"}, {DType::i32});
  c.require(a.cu_seqlens.size(0) >= 1, "cu_seqlens: expected [N + 1] with N >= 0, got ",
            a.cu_seqlens.describe());
  const int64_t N = a.cu_seqlens.size(0) - 1;
  const Paged p = check_paged(c, a.k_cache, a.v_cache, a.page_table, N, -1, D);
  c.require(p.Hkv > 0 && Hq % p.Hkv == 0, "Hq=", Hq, " must be a multiple of Hkv=", p.Hkv);
  c.tensor(a.seq_lens, "seq_lens", {{"N", N}}, {DType::i32});
  c.tensor(a.out, "out", {{"T", T}, {"Hq", Hq}, {"D", D}}, kActivation);
  c.inner_contiguous(a.q, "q");
  c.inner_contiguous(a.cu_seqlens, "cu_seqlens");
  c.inner_contiguous(a.seq_lens, "seq_lens");
  c.inner_contiguous(a.out, "out");
  check_window_scale(c, a.window, a.scale);
  if (c.device().is_cpu()) {
    ops::check_cu_seqlens_values(c, a.cu_seqlens, T);
    for (int64_t n = 0; n < N; ++n) {
      const int32_t len = at(a.seq_lens, n);
      const int64_t L = at(a.cu_seqlens, n + 1) - at(a.cu_seqlens, n);
      check_seq_len(c, p, len, n);
      c.require(len >= L, "seq_lens[", n, "]=", len, " is less than the ", L,
                " new tokens of the sequence (seq_lens count the appended new tokens)");
      if (L > 0) check_pages(c, a.page_table, p, n, window_start(len - L, a.window), len - 1);
    }
  }
  ctx.registry().dispatch(a, c.device(), ctx);
}

void rope_kv_append_attn_decode(const RopeKvAppendAttnDecode& a, Context& ctx) {
  ops::Check c(RopeKvAppendAttnDecode::op_name);
  c.rank(a.q, "q", {"N", "Hq", "D"}, kActivation);
  const int64_t N = a.q.size(0), Hq = a.q.size(1), D = a.q.size(2);
  c.rank(a.k, "k", {"N", "Hkv", "D"}, kActivation);
  const int64_t Hkv = a.k.size(1);
  c.tensor(a.k, "k", {{"N", N}, {"Hkv", Hkv}, {"D", D}}, kActivation);
  c.tensor(a.v, "v", {{"N", N}, {"Hkv", Hkv}, {"D", D}}, kActivation);
  c.require(Hkv > 0 && Hq % Hkv == 0, "Hq=", Hq, " must be a multiple of Hkv=", Hkv);
  const Paged p = check_paged(c, a.k_cache, a.v_cache, a.page_table, N, Hkv, D);
  c.tensor(a.seq_lens, "seq_lens", {{"N", N}}, {DType::i32});
  c.tensor(a.out, "out", {{"N", N}, {"Hq", Hq}, {"D", D}}, kActivation);
  for (auto [t, name] :
       {std::pair{a.q, "q"}, {a.k, "k"}, {a.v, "v"}, {a.seq_lens, "seq_lens"}, {a.out, "out"}})
    c.inner_contiguous(t, name);
  check_rope_params(c, a.rotary_dim, a.theta, D);
  check_window_scale(c, a.window, a.scale);
  if (c.device().is_cpu()) check_decode_values(c, a.seq_lens, a.page_table, p, N, a.window);
  ctx.registry().dispatch(a, c.device(), ctx);
}

}  // namespace hybrid
