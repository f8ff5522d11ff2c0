// Softmax attention over a paged KV cache: KV append, decode (one query per sequence), varlen
// prefill, and seed 003's fused RoPE + KV append + decode.
//
// Paged KV cache (design.md). K and V caches are [num_pages, page_size, Hkv, D]; sequence n owns
// the pages page_table[n, 0..max_pages): its token at position p lives in page
// page_table[n, p / page_size], row p % page_size. One page of page_size = max_seq per sequence is
// seed 003's contiguous cache. seq_lens[n] counts the tokens of sequence n held in the cache,
// INCLUDING the tokens of the current step (the lengths after kv_append); it is at most
// max_pages · page_size. Only the page-table entries of pages an op touches are read (and checked
// to lie in [0, num_pages)); others may hold anything, e.g. -1 for pages that slid out of a window.
//
// Attention of the query at position p of sequence n (query head h, KV head h / (Hq / Hkv)):
//   keys j in [lo, p], lo = 0 (window = 0) or max(0, p − window + 1) (sliding window: HF's
//   "key in (p − window, p]"),
//   s_j = scale · q · K[j],  out = Σ_j softmax(s)_j · V[j],  scale = 1/sqrt(D) by default.
// The CPU kernels use an online (single-pass, running max) softmax in f32.
#pragma once

#include <optional>

#include "hybrid/core/context.h"
#include "hybrid/core/tensor.h"

namespace hybrid {

// Writes the new tokens' K and V into their pages:
//   K_cache[page_table[n, p / page_size], p % page_size] = k[t],  p = positions[t]  (same for V)
// for every token t of sequence n. Varlen prefill: cu_seqlens gives the tokens of each sequence
// (k[cu[n]:cu[n+1]]); decode: leave cu_seqlens out and token t belongs to sequence t (T == N).
// A token with a negative position is padding and writes nothing. seq_lens are not read or
// written here: the caller sets them to the lengths after the append before attn_decode /
// attn_prefill. Two tokens writing the same cache row is a caller error (the result is either).
struct KvAppend {
  static constexpr const char* op_name = "kv_append";
  Tensor k;           // [T, Hkv, D] f32 | bf16 | f16; token/head strides free, D contiguous
  Tensor v;           // [T, Hkv, D] f32 | bf16 | f16; token/head strides free, D contiguous
  Tensor k_cache;     // [num_pages, page_size, Hkv, D] f32 | bf16 | f16, updated in place
  Tensor v_cache;     // [num_pages, page_size, Hkv, D], k_cache's dtype, updated in place
  Tensor page_table;  // [N, max_pages] i32
  Tensor cu_seqlens;  // optional [N + 1] i32, cu[0] = 0, non-decreasing, cu[N] = T
  Tensor positions;   // [T] i32: cache position of each token, < max_pages · page_size; < 0 = skip
};
void kv_append(const KvAppend& args, Context& ctx);

// Single-query decode attention (seed 003) for N sequences of different lengths: the query of
// sequence n sits at position p = seq_lens[n] − 1 and attends to its cached keys [lo, p] (its own
// K/V must already be appended). seq_lens[n] = 0 marks a padding sequence: out[n] = 0.
struct AttnDecode {
  static constexpr const char* op_name = "attn_decode";
  Tensor q;            // [N, Hq, D] f32 | bf16 | f16; rows/heads may be strided, D contiguous
  Tensor k_cache;      // [num_pages, page_size, Hkv, D] f32 | bf16 | f16; Hq % Hkv == 0
  Tensor v_cache;      // [num_pages, page_size, Hkv, D], k_cache's dtype
  Tensor page_table;   // [N, max_pages] i32
  Tensor seq_lens;     // [N] i32: cached tokens including this step's, in [0, max_pages·page_size]
  Tensor out;          // [N, Hq, D] f32 | bf16 | f16
  int64_t window = 0;  // 0 = full causal attention; W > 0: the last W positions (p − W, p]
  std::optional<float> scale;  // default 1 / sqrt(D)
};
void attn_decode(const AttnDecode& args, Context& ctx);

// Causal varlen prefill over the paged cache: sequence n has L_n = cu[n+1] − cu[n] new tokens,
// already appended (kv_append) at positions seq_lens[n] − L_n .. seq_lens[n] − 1 after a cached
// prefix of seq_lens[n] − L_n tokens. New token i of sequence n (q row cu[n] + i) sits at position
// p = seq_lens[n] − L_n + i and attends to keys [lo, p], all read from the cache. A sequence with
// L_n = 0 has no query rows. attn_decode is the case L_n = 1 for every n.
struct AttnPrefill {
  static constexpr const char* op_name = "attn_prefill";
  Tensor q;            // [T, Hq, D] f32 | bf16 | f16; rows/heads may be strided, D contiguous
  Tensor k_cache;      // [num_pages, page_size, Hkv, D] f32 | bf16 | f16; Hq % Hkv == 0
  Tensor v_cache;      // [num_pages, page_size, Hkv, D], k_cache's dtype
  Tensor page_table;   // [N, max_pages] i32
  Tensor cu_seqlens;   // [N + 1] i32: new tokens per sequence; cu[0] = 0, non-decreasing, cu[N] = T
  Tensor seq_lens;     // [N] i32: cached tokens including the new ones; L_n <= seq_lens[n] <= cap
  Tensor out;          // [T, Hq, D] f32 | bf16 | f16
  int64_t window = 0;  // 0 = full causal attention; W > 0: the last W positions (p − W, p]
  std::optional<float> scale;  // default 1 / sqrt(D)
};
void attn_prefill(const AttnPrefill& args, Context& ctx);

// Seed 003's fused decode step: the new token of sequence n is at position p = seq_lens[n] − 1;
//   q_r = rope(q, p), k_r = rope(k, p)            (Rope semantics, rotary_dim, theta)
//   kv_append(k_r, v) at position p; out = attn_decode(q_r) over [lo, p]
// It equals exactly rope (q and k, out of place into q's and k's dtypes) + kv_append + attn_decode:
// the rotated q and k are rounded to q's and k's dtype before use, as the three-op sequence stores
// them. seq_lens[n] = 0 marks a padding sequence: nothing is written to the cache, out[n] = 0.
struct RopeKvAppendAttnDecode {
  static constexpr const char* op_name = "rope_kv_append_attn_decode";
  Tensor q;                // [N, Hq, D] f32 | bf16 | f16, before RoPE; rows/heads may be strided
  Tensor k;                // [N, Hkv, D] f32 | bf16 | f16, before RoPE; rows/heads may be strided
  Tensor v;                // [N, Hkv, D] f32 | bf16 | f16; rows/heads may be strided
  Tensor k_cache;          // [num_pages, page_size, Hkv, D] f32 | bf16 | f16, updated in place
  Tensor v_cache;          // [num_pages, page_size, Hkv, D], k_cache's dtype, updated in place
  Tensor page_table;       // [N, max_pages] i32
  Tensor seq_lens;         // [N] i32: lengths including this token, in [0, max_pages·page_size]
  Tensor out;              // [N, Hq, D] f32 | bf16 | f16
  int64_t rotary_dim = 0;  // even, in [2, D]
  float theta = 10000.0f;  // > 0
  int64_t window = 0;      // 0 = full causal attention; W > 0: the last W positions
  std::optional<float> scale;  // default 1 / sqrt(D)
};
void rope_kv_append_attn_decode(const RopeKvAppendAttnDecode& args, Context& ctx);

}  // namespace hybrid
