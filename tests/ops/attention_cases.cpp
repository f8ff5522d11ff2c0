// Cases: kv_append, attn_decode, attn_prefill, rope_kv_append_attn_decode. Oracle in f64.
//
// Every case builds a paged KV cache whose pages are handed out in a shuffled order (so pages of a
// sequence are not adjacent), whose unused page-table entries are -1 (and, with a window, so are
// the entries of pages that slid entirely out of it: they must never be read), and whose rows
// outside the sequences hold random stale values (reading past a length shows up).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <tuple>

#include "hybrid/ops/attention.h"
#include "hybrid/ops/rope.h"
#include "ops/cases.h"
#include "ops/harness.h"

namespace hybrid::test {

namespace {

enum class Mode {
  append,             // kv_append
  decode,             // attn_decode
  prefill,            // attn_prefill
  fused,              // rope_kv_append_attn_decode
  fused_vs_sequence,  // the fused op next to rope + kv_append + attn_decode: bit-equal on the CPU
  prefill_vs_decode   // attn_prefill with one new token per sequence next to attn_decode
};

const char* mode_op(Mode m) {
  switch (m) {
    case Mode::append:
      return "kv_append";
    case Mode::decode:
      return "attn_decode";
    case Mode::prefill:
      return "attn_prefill";
    case Mode::fused:
      return "rope_kv_append_attn_decode";
    case Mode::fused_vs_sequence:
      return "rope_kv_append_attn_decode";
    case Mode::prefill_vs_decode:
      return "attn_prefill";
  }
  return "";
}

// v rounded to dtype, as a tensor of that dtype stores it.
double round_to(DType dtype, double v) {
  Slot s;
  s.dtype = dtype;
  s.shape = {1};
  s.strides = {1};
  s.storage.assign(dtype_size(dtype), 0);
  s.set(0, v);
  return s.get(0);
}

// RoPE of x [D] at position pos, from the definition: the angle formed in f32 (inv_freq =
// fl32(1 / fl32(theta^fl32(2i/rd))), angle = fl32(fl32(pos)·inv_freq)), the rest in f64.
std::vector<double> rope_ref(const std::vector<double>& x, int64_t pos, int64_t rd, float theta) {
  std::vector<double> y = x;
  const int64_t half = rd / 2;
  for (int64_t i = 0; i < half; ++i) {
    const float e = static_cast<float>(2 * i) / static_cast<float>(rd);
    const float inv = 1.0f / static_cast<float>(std::pow(double(theta), double(e)));
    const double angle = static_cast<float>(static_cast<float>(pos) * inv);
    y[i] = x[i] * std::cos(angle) - x[i + half] * std::sin(angle);
    y[i + half] = x[i + half] * std::cos(angle) + x[i] * std::sin(angle);
  }
  return y;
}

std::string join(const std::vector<int64_t>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "|" : "") + std::to_string(v[i]);
  return s;
}

// One case of the attention family. Decode-style modes have one row per sequence (T = N) at
// position lens[n] − 1 (lens[n] = 0: a padding sequence, position −1). Varlen modes (prefill,
// append with cu_seqlens) have news[n] rows per sequence at positions lens[n] − news[n] + i.
struct AttnCase : Case {
  Mode mode;
  std::vector<int64_t> lens, news;  // seq_lens after the step; new tokens (varlen modes)
  int64_t Hq, Hkv, D;
  int64_t page_size;  // 0: one page of max_seq per sequence (seed 003's contiguous cache)
  int64_t window = 0;
  float scale = 0.0f;
  int64_t rotary_dim = 0;
  float theta = 1e4f;
  DType act = DType::f32, cache = DType::f32;
  bool strided = false;      // q, k, v are views into a packed [T, (Hq + 2·Hkv)·D + 8] projection
  bool q_unaligned = false;  // with strided: q starts one element in (not 16-byte aligned)
  bool varlen = false;       // append: with cu_seqlens (else one token per sequence)
  // Page-table columns past the longest sequence's pages; with stale_tail, every entry past a
  // sequence's own pages holds a valid (stale) page id instead of -1 (the contract lets them hold
  // anything): a kernel that reads keys past the length must mask them.
  int64_t spare_cols = 0;
  bool stale_tail = false;
  // Every cache row that holds no sequence's key (rows past a length in its last page, spare
  // pages) is NaN: a kernel that copies such rows must zero or skip them (0 · NaN = NaN).
  bool nan_tail = false;

  // Derived in init.
  int64_t N = 0, T = 0, S = 0, max_pages = 0, num_pages = 0;
  std::vector<int64_t> row_seq, row_pos;  // [T]
  std::vector<int32_t> table;             // [N, max_pages]

  std::string op() const override { return mode_op(mode); }
  std::string params() const override {
    std::string p;
    if (mode == Mode::fused_vs_sequence) p += "vs=rope+kv_append+attn_decode,";
    if (mode == Mode::prefill_vs_decode) p += "vs=attn_decode,";
    p += str("N=", lens.size(), ",lens=", join(lens));
    if (mode == Mode::prefill || (mode == Mode::append && varlen)) p += ",new=" + join(news);
    p += str(",Hq=", Hq, ",Hkv=", Hkv, ",D=", D);
    p += page_size ? str(",page=", page_size) : std::string(",page=max_seq");
    if (mode != Mode::append) {
      p += str(",window=", window);
      p += scale != 0.0f ? str(",scale=", scale) : std::string(",scale=1/sqrt(D)");
    }
    if (mode == Mode::fused || mode == Mode::fused_vs_sequence)
      p += str(",rotary=", rotary_dim, ",theta=", theta);
    p += str(",act=", dtype_name(act), ",cache=", dtype_name(cache));
    if (strided) p += ",strided";
    if (q_unaligned) p += ",q_unaligned";
    if (spare_cols) p += str(",spare_cols=", spare_cols);
    if (stale_tail) p += ",stale_tail";
    if (nan_tail) p += ",nan_tail";
    return p;
  }

  bool decode_rows() const { return !(mode == Mode::prefill || (mode == Mode::append && varlen)); }
  bool writes_cache() const {
    return mode == Mode::append || mode == Mode::fused || mode == Mode::fused_vs_sequence;
  }

  void layout(Rng& rng) {
    N = static_cast<int64_t>(lens.size());
    row_seq.clear();
    row_pos.clear();
    for (int64_t n = 0; n < N; ++n) {
      const int64_t L = decode_rows() ? 1 : news[n];
      for (int64_t i = 0; i < L; ++i) {
        row_seq.push_back(n);
        row_pos.push_back(lens[n] - L + i);  // decode rows of padding sequences: −1
      }
    }
    T = static_cast<int64_t>(row_seq.size());
    const int64_t max_len = *std::max_element(lens.begin(), lens.end());
    S = page_size ? page_size : max_len + 5;
    max_pages = page_size ? (max_len + S - 1) / S + 1 + spare_cols : 1;
    int64_t used = 0;
    for (int64_t len : lens) used += (len + S - 1) / S;
    num_pages = used + 3;  // spare pages hold stale values nobody may read
    std::vector<int32_t> ids(num_pages);
    std::iota(ids.begin(), ids.end(), 0);
    for (int64_t i = num_pages - 1; i > 0; --i) std::swap(ids[i], ids[rng.randint(0, i)]);
    table.assign(N * max_pages, -1);
    int64_t next = 0;
    for (int64_t n = 0; n < N; ++n) {
      // Earliest key any row of n reads; pages wholly before it are released (-1).
      int64_t first_key = lens[n];
      for (int64_t t = 0; t < T; ++t)
        if (row_seq[t] == n && row_pos[t] >= 0)
          first_key = std::min(
              first_key, window > 0 ? std::max<int64_t>(0, row_pos[t] - window + 1) : int64_t{0});
      for (int64_t j = 0; j < (lens[n] + S - 1) / S; ++j) {
        const int32_t page = ids[next++];
        if ((j + 1) * S > first_key) table[n * max_pages + j] = page;
      }
      if (stale_tail)
        for (int64_t j = (lens[n] + S - 1) / S; j < max_pages; ++j)
          table[n * max_pages + j] = ids[(n * 7 + j) % num_pages];
    }
  }

  void packed(Slots& s, Rng& rng, const std::string& name, int64_t H, int64_t offset) {
    if (strided) {
      const int64_t row = (Hq + 2 * Hkv) * D + 8;
      fill_normal(s.strided(name, Role::in, act, {T, H, D}, {row, D, 1}, offset, T * row), rng);
    } else {
      fill_normal(s.input(name, act, {T, H, D}), rng);
    }
  }

  void init(Rng& rng, Slots& s) override {
    layout(rng);
    const Role cache_role = writes_cache() ? Role::inout : Role::in;
    if (mode != Mode::append) packed(s, rng, "q", Hq, q_unaligned ? 1 : 0);
    if (writes_cache()) {
      packed(s, rng, "k", Hkv, Hq * D);
      packed(s, rng, "v", Hkv, (Hq + Hkv) * D);
    }
    for (const char* name : {"k_cache", "v_cache"}) {
      Slot& c = cache_role == Role::in ? s.input(name, cache, {num_pages, S, Hkv, D})
                                       : s.inout(name, cache, {num_pages, S, Hkv, D});
      fill_normal(c, rng);
      if (nan_tail) {
        std::vector<bool> live(num_pages * S, false);
        for (int64_t n = 0; n < N; ++n)
          for (int64_t j = 0; j < (lens[n] + S - 1) / S; ++j) {
            const int32_t page = table[n * max_pages + j];
            for (int64_t r = 0; page >= 0 && r < S && j * S + r < lens[n]; ++r)
              live[page * S + r] = true;
          }
        for (int64_t pr = 0; pr < num_pages * S; ++pr)
          if (!live[pr])
            for (int64_t e = 0; e < Hkv * D; ++e) c.set(pr * Hkv * D + e, std::nan(""));
      }
    }
    fill_values(s.input("page_table", DType::i32, {N, max_pages}),
                std::vector<double>(table.begin(), table.end()));
    if (mode != Mode::append)
      fill_values(s.input("seq_lens", DType::i32, {N}), {lens.begin(), lens.end()});
    if (!decode_rows() || mode == Mode::prefill_vs_decode) {
      std::vector<double> cu{0};
      for (int64_t n = 0; n < N; ++n)
        cu.push_back(cu.back() + (decode_rows() ? 1 : static_cast<double>(news[n])));
      fill_values(s.input("cu_seqlens", DType::i32, {N + 1}), cu);
    }
    if (mode == Mode::append || mode == Mode::fused_vs_sequence)
      fill_values(s.input("positions", DType::i32, {T}), {row_pos.begin(), row_pos.end()});
    if (mode != Mode::append) s.output("out", act, {T, Hq, D});
    if (mode == Mode::fused_vs_sequence) {
      for (const char* name : {"k_cache", "v_cache"}) {
        s.inout(std::string(name) + "_seq", cache, {num_pages, S, Hkv, D});
        s[std::string(name) + "_seq"].storage = s[name].storage;
      }
      s.output("q_rot", act, {T, Hq, D});
      s.output("k_rot", act, {T, Hkv, D});
      s.output("out_seq", act, {T, Hq, D});
    }
    if (mode == Mode::prefill_vs_decode) s.output("out_decode", act, {T, Hq, D});
  }

  // Throws unless the two views hold the same bytes (CPU only: views are host memory there).
  static void expect_bit_equal(const Tensor& a, const Tensor& b, const char* what, Context& ctx) {
    if (!ctx.device().is_cpu()) return;  // other backends: each output is checked against the CPU
    if (std::memcmp(a.data(), b.data(), a.span_bytes()) != 0)
      fail("[attention case] ", what, ": the fused op and the op sequence differ");
  }

  void run(const Views& v, Context& ctx) override {
    switch (mode) {
      case Mode::append: {
        KvAppend a;
        a.k = v.at("k");
        a.v = v.at("v");
        a.k_cache = v.at("k_cache");
        a.v_cache = v.at("v_cache");
        a.page_table = v.at("page_table");
        if (varlen) a.cu_seqlens = v.at("cu_seqlens");
        a.positions = v.at("positions");
        kv_append(a, ctx);
        return;
      }
      case Mode::decode:
      case Mode::prefill_vs_decode: {
        AttnDecode a;
        a.q = v.at("q");
        a.k_cache = v.at("k_cache");
        a.v_cache = v.at("v_cache");
        a.page_table = v.at("page_table");
        a.seq_lens = v.at("seq_lens");
        a.out = v.at(mode == Mode::decode ? "out" : "out_decode");
        a.window = window;
        if (scale != 0.0f) a.scale = scale;
        attn_decode(a, ctx);
        if (mode == Mode::decode) return;
        [[fallthrough]];
      }
      case Mode::prefill: {
        AttnPrefill a;
        a.q = v.at("q");
        a.k_cache = v.at("k_cache");
        a.v_cache = v.at("v_cache");
        a.page_table = v.at("page_table");
        a.cu_seqlens = v.at("cu_seqlens");
        a.seq_lens = v.at("seq_lens");
        a.out = v.at("out");
        a.window = window;
        if (scale != 0.0f) a.scale = scale;
        attn_prefill(a, ctx);
        if (mode == Mode::prefill_vs_decode) {
          ctx.synchronize();
          expect_bit_equal(v.at("out"), v.at("out_decode"), "out", ctx);
        }
        return;
      }
      case Mode::fused:
      case Mode::fused_vs_sequence: {
        RopeKvAppendAttnDecode a;
        a.q = v.at("q");
        a.k = v.at("k");
        a.v = v.at("v");
        a.k_cache = v.at("k_cache");
        a.v_cache = v.at("v_cache");
        a.page_table = v.at("page_table");
        a.seq_lens = v.at("seq_lens");
        a.out = v.at("out");
        a.rotary_dim = rotary_dim;
        a.theta = theta;
        a.window = window;
        if (scale != 0.0f) a.scale = scale;
        rope_kv_append_attn_decode(a, ctx);
        if (mode == Mode::fused) return;
        // The same step as three ops: rope q and k (out of place), kv_append, attn_decode.
        Rope rq;
        rq.x = v.at("q");
        rq.out = v.at("q_rot");
        rq.positions = v.at("positions");
        rq.rotary_dim = rotary_dim;
        rq.theta = theta;
        rope(rq, ctx);
        Rope rk = rq;
        rk.x = v.at("k");
        rk.out = v.at("k_rot");
        rope(rk, ctx);
        KvAppend ap;
        ap.k = v.at("k_rot");
        ap.v = v.at("v");
        ap.k_cache = v.at("k_cache_seq");
        ap.v_cache = v.at("v_cache_seq");
        ap.page_table = v.at("page_table");
        ap.positions = v.at("positions");  // padding sequences: −1, not written
        kv_append(ap, ctx);
        AttnDecode d;
        d.q = v.at("q_rot");
        d.k_cache = v.at("k_cache_seq");
        d.v_cache = v.at("v_cache_seq");
        d.page_table = v.at("page_table");
        d.seq_lens = v.at("seq_lens");
        d.out = v.at("out_seq");
        d.window = window;
        if (scale != 0.0f) d.scale = scale;
        attn_decode(d, ctx);
        ctx.synchronize();
        expect_bit_equal(v.at("out"), v.at("out_seq"), "out", ctx);
        expect_bit_equal(v.at("k_cache"), v.at("k_cache_seq"), "k_cache", ctx);
        expect_bit_equal(v.at("v_cache"), v.at("v_cache_seq"), "v_cache", ctx);
        return;
      }
    }
  }

  // Logical index of cache element (page, row, h, d).
  int64_t cache_index(int64_t n, int64_t pos, int64_t h, int64_t d) const {
    const int64_t page = table[n * max_pages + pos / S];
    return ((page * S + pos % S) * Hkv + h) * D + d;
  }

  std::vector<double> row(const Slot& x, int64_t t, int64_t h, int64_t H) const {
    std::vector<double> r(D);
    for (int64_t d = 0; d < D; ++d) r[d] = x.get((t * H + h) * D + d);
    return r;
  }

  // Softmax attention of q [D] at position pos of sequence n over keys [lo, pos], two-pass.
  std::vector<double> attend_ref(const std::vector<double>& q, int64_t n, int64_t pos, int64_t hk,
                                 const std::vector<double>& kc,
                                 const std::vector<double>& vc) const {
    std::vector<double> out(D, 0.0);
    if (pos < 0) return out;  // padding sequence
    const double sc = scale != 0.0f ? double(scale) : 1.0 / std::sqrt(double(D));
    const int64_t lo = window > 0 ? std::max<int64_t>(0, pos - window + 1) : 0;
    std::vector<double> s(pos - lo + 1);
    double m = -INFINITY;
    for (int64_t j = lo; j <= pos; ++j) {
      double dot = 0;
      const int64_t base = cache_index(n, j, hk, 0);
      for (int64_t d = 0; d < D; ++d) dot += q[d] * kc[base + d];
      s[j - lo] = dot * sc;
      m = std::max(m, s[j - lo]);
    }
    double sum = 0;
    for (double& x : s) sum += (x = std::exp(x - m));
    for (int64_t j = lo; j <= pos; ++j) {
      const int64_t base = cache_index(n, j, hk, 0);
      for (int64_t d = 0; d < D; ++d) out[d] += s[j - lo] / sum * vc[base + d];
    }
    return out;
  }

  void oracle(const Slots& s, Expected& e) override {
    std::vector<double> kc = s["k_cache"].values(), vc = s["v_cache"].values();
    std::vector<std::vector<double>> q_rot(T * Hq), k_rot(T * Hkv);
    // Cache writes: appended k (rotated in the fused modes, rounded to k's dtype first) and v.
    if (writes_cache()) {
      const bool rotate = mode != Mode::append;
      for (int64_t t = 0; t < T; ++t)
        for (int64_t h = 0; h < Hkv; ++h) {
          std::vector<double> k = row(s["k"], t, h, Hkv), vv = row(s["v"], t, h, Hkv);
          if (rotate) {
            k = rope_ref(k, row_pos[t], rotary_dim, theta);
            for (double& x : k) x = round_to(act, x);
            k_rot[t * Hkv + h] = k;
          }
          if (row_pos[t] < 0) continue;  // padding
          for (int64_t d = 0; d < D; ++d) {
            kc[cache_index(row_seq[t], row_pos[t], h, d)] = round_to(cache, k[d]);
            vc[cache_index(row_seq[t], row_pos[t], h, d)] = round_to(cache, vv[d]);
          }
        }
      e["k_cache"] = kc;
      e["v_cache"] = vc;
      if (mode == Mode::fused_vs_sequence) {
        e["k_cache_seq"] = kc;
        e["v_cache_seq"] = vc;
      }
    }
    if (mode == Mode::append) return;
    std::vector<double>& out = e["out"];
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < Hq; ++h) {
        std::vector<double> q = row(s["q"], t, h, Hq);
        if (mode == Mode::fused || mode == Mode::fused_vs_sequence) {
          q = rope_ref(q, row_pos[t], rotary_dim, theta);
          for (double& x : q) x = round_to(act, x);
          q_rot[t * Hq + h] = q;
        }
        const std::vector<double> o = attend_ref(q, row_seq[t], row_pos[t], h / (Hq / Hkv), kc, vc);
        out.insert(out.end(), o.begin(), o.end());
      }
    if (mode == Mode::fused_vs_sequence) {
      e["out_seq"] = out;
      for (auto& r : q_rot) e["q_rot"].insert(e["q_rot"].end(), r.begin(), r.end());
      for (auto& r : k_rot) e["k_rot"].insert(e["k_rot"].end(), r.begin(), r.end());
    }
    if (mode == Mode::prefill_vs_decode) e["out_decode"] = out;
  }

  double flops(const Slots&) const override {
    double keys = 0;
    for (int64_t t = 0; t < T; ++t)
      if (row_pos[t] >= 0)
        keys += window > 0 ? std::min<int64_t>(window, row_pos[t] + 1) : row_pos[t] + 1;
    return mode == Mode::append ? 0.0 : 4.0 * keys * Hq * D;
  }
};

// Benchmark shapes (perf only, never run by `test`): bf16 cache, Qwen3-Next heads. Decode counts
// bytes as the K/V rows read (every sequence's full context, both caches); prefill's FLOPs are
// AttnCase::flops, 4 · D · Hq per causal (query, key) pair ≈ 4 · T² · D · Hq / 2.
struct AttnPerfCase : AttnCase {
  std::string params() const override { return AttnCase::params() + ",perf"; }
  bool perf_only() const override { return true; }
  double bytes(const Slots&) const override {
    double keys = 0;
    for (int64_t len : lens) keys += window > 0 ? std::min<int64_t>(window, len) : len;
    return 2.0 * keys * Hkv * D * dtype_size(cache);
  }
  void oracle(const Slots&, Expected&) override { fail("[attention perf case] has no oracle"); }
};

struct Shape {
  int64_t Hq, Hkv, D;
};

std::unique_ptr<AttnCase> make(Mode mode, std::vector<int64_t> lens, Shape sh, int64_t page,
                               DType act, DType cache) {
  auto c = std::make_unique<AttnCase>();
  c->mode = mode;
  c->lens = std::move(lens);
  c->Hq = sh.Hq;
  c->Hkv = sh.Hkv;
  c->D = sh.D;
  c->page_size = page;
  c->act = act;
  c->cache = cache;
  return c;
}

}  // namespace

void add_attention_cases(CaseList& cases) {
  const Shape qwen3_next{16, 2, 256};  // gated attention: 16 q / 2 kv heads, head_dim 256
  const Shape gqa4{32, 8, 128}, gqa8{8, 1, 128}, mha64{4, 4, 64}, gqa1_128{2, 2, 128};
  const DType f32 = DType::f32, bf16 = DType::bf16, f16 = DType::f16;

  // kv_append: decode (one token per sequence, a padding sequence of length 0) and varlen prefill
  // (cu_seqlens, an empty sequence), paged and single-page, strided k/v out of a packed projection.
  for (DType cache : {bf16, f32}) {
    auto c = make(Mode::append, {1, 257, 0, 40}, qwen3_next, 16, bf16, cache);
    c->strided = true;
    cases.push_back(std::move(c));
  }
  {
    auto c = make(Mode::append, {65, 3, 100, 63}, gqa4, 16, f32, f32);
    c->varlen = true;
    c->news = {65, 3, 0, 7};
    cases.push_back(std::move(c));
    c = make(Mode::append, {257, 9}, qwen3_next, 0, bf16, bf16);
    c->varlen = true;
    c->news = {257, 1};
    c->strided = true;
    cases.push_back(std::move(c));
    cases.push_back(make(Mode::append, {5, 1, 70}, mha64, 0, f16, f16));
  }

  // attn_decode: Qwen3-Next shapes with contexts up to ~1K, D = 64 / 128 with GQA 1, 4, 8, odd
  // lengths, padding sequences, windows (narrower, wider than the context, 1), explicit scale.
  for (DType dt : {bf16, f32}) {
    auto c = make(Mode::decode, {1, 257, 1029, 0}, qwen3_next, 16, dt, dt);
    c->strided = dt == bf16;
    cases.push_back(std::move(c));
  }
  for (int64_t window : {0, 32, 1000}) {
    auto c = make(Mode::decode, {63, 65, 3, 1, 300}, gqa4, 16, f32, f32);
    c->window = window;
    cases.push_back(std::move(c));
  }
  for (int64_t window : {0, 1, 17}) {
    auto c = make(Mode::decode, {257, 64, 1}, gqa8, 16, bf16, bf16);
    c->window = window;
    cases.push_back(std::move(c));
  }
  {
    auto c = make(Mode::decode, {7, 300, 0, 65}, mha64, 0, f32, f32);  // one page of max_seq
    c->scale = 0.3f;
    c->strided = true;
    cases.push_back(std::move(c));
    c = make(Mode::decode, {129, 2}, gqa1_128, 0, f16, f16);
    c->window = 64;
    cases.push_back(std::move(c));
    c = make(Mode::decode, {700, 33}, qwen3_next, 0, bf16, bf16);  // Qwen3-Next, contiguous cache
    c->window = 256;
    cases.push_back(std::move(c));
  }

  // attn_prefill: varlen batches over a cached prefix (the new tokens already appended), empty
  // sequences, windows, GQA 1 / 4 / 8, single page.
  {
    auto c = make(Mode::prefill, {3, 165}, qwen3_next, 16, bf16, bf16);
    c->news = {3, 65};
    c->strided = true;
    cases.push_back(std::move(c));
    c = make(Mode::prefill, {40, 7}, qwen3_next, 16, f32, f32);
    c->news = {33, 7};
    cases.push_back(std::move(c));
  }
  for (int64_t window : {0, 64}) {
    auto c = make(Mode::prefill, {1, 68, 263, 50}, gqa4, 16, f32, f32);
    c->news = {1, 63, 65, 0};
    c->window = window;
    cases.push_back(std::move(c));
  }
  {
    auto c = make(Mode::prefill, {257, 20}, gqa8, 16, bf16, bf16);
    c->news = {257, 3};
    c->window = 100;
    cases.push_back(std::move(c));
    c = make(Mode::prefill, {90, 65}, mha64, 0, f32, f32);
    c->news = {7, 65};
    c->scale = 0.05f;
    cases.push_back(std::move(c));
    c = make(Mode::prefill, {128, 3}, gqa1_128, 0, f16, f16);
    c->news = {128, 1};
    c->window = 5;
    cases.push_back(std::move(c));
  }
  // attn_prefill with one new token per sequence is attn_decode.
  for (int64_t window : {0, 20}) {
    auto c = make(Mode::prefill_vs_decode, {1, 63, 130}, gqa4, 16, f32, f32);
    c->window = window;
    cases.push_back(std::move(c));
  }

  // CUDA paths: a GQA group of 16 (two 8-head chunks per KV head) with a context long enough for
  // many decode splits; tensor-core prefill at D = 64 (several 64-row query tiles, window) and
  // D = 256 (32-key tiles over a cached prefix).
  {
    auto c = make(Mode::decode, {2100, 5, 0}, Shape{16, 1, 64}, 64, bf16, bf16);
    cases.push_back(std::move(c));
    c = make(Mode::prefill, {300, 70}, mha64, 16, bf16, bf16);
    c->news = {130, 70};
    c->window = 50;
    cases.push_back(std::move(c));
    c = make(Mode::prefill, {260}, Shape{4, 1, 256}, 64, bf16, bf16);
    c->news = {130};
    cases.push_back(std::move(c));
  }

  // attn_decode on the tensor-core split-KV path (bf16 / f16 q and caches): contexts that are no
  // multiple of a 64-key tile or of a split, many splits with empty ones (short and padding
  // sequences beside long ones: the split count comes from the page-table capacity), windows
  // narrower than one split and starting mid-page, GQA 1 / 4 / 8 / 32 (two 16-head chunks) at
  // every head dim, and a batch of short sequences that takes the single-split direct output.
  {
    auto c = make(Mode::decode, {4097, 3000, 1, 0, 65}, gqa8, 16, bf16, bf16);
    cases.push_back(std::move(c));
    c = make(Mode::decode, {3001, 64, 129}, qwen3_next, 64, bf16, bf16);
    c->window = 200;
    cases.push_back(std::move(c));
    c = make(Mode::decode, {2500, 7}, qwen3_next, 16, bf16, bf16);
    c->window = 40;
    cases.push_back(std::move(c));
    c = make(Mode::decode, {1500, 200, 0}, Shape{32, 1, 64}, 32, bf16, bf16);
    cases.push_back(std::move(c));
    c = make(Mode::decode, {1000, 999}, Shape{2, 2, 256}, 16, bf16, bf16);
    cases.push_back(std::move(c));
    c = make(Mode::decode, {777, 2049, 5}, gqa4, 16, f16, f16);
    c->window = 300;
    cases.push_back(std::move(c));
    c = make(Mode::decode, {129, 64, 0, 1}, mha64, 0, f16, f16);
    c->scale = 0.3f;
    cases.push_back(std::move(c));
    std::vector<int64_t> lens;
    for (int64_t n = 0; n < 40; ++n) lens.push_back(n == 7 ? 0 : 1 + (n * 37) % 90);
    c = make(Mode::decode, lens, gqa4, 16, bf16, bf16);
    c->strided = true;
    cases.push_back(std::move(c));
  }

  // attn_prefill.cuda_fa2 (128-row tiles over 8 warps, double-buffered K/V, per-warp causal
  // skip): several 128-row tiles over a cached prefix, windows cutting warps and key tiles, no
  // multiple of a tile anywhere, GQA 8 / 4 / 1 at D 256 / 128 / 64 / 256, page sizes 64, 16, 7.
  {
    auto c = make(Mode::prefill, {700}, qwen3_next, 64, bf16, bf16);
    c->news = {400};
    c->window = 77;
    cases.push_back(std::move(c));
    c = make(Mode::prefill, {1029, 5}, gqa4, 16, bf16, bf16);
    c->news = {300, 5};
    c->window = 200;
    cases.push_back(std::move(c));
    c = make(Mode::prefill, {513}, Shape{8, 2, 64}, 7, bf16, bf16);
    c->news = {513};
    cases.push_back(std::move(c));
    c = make(Mode::prefill, {300, 0, 129}, Shape{2, 2, 256}, 16, bf16, bf16);
    c->news = {300, 0, 128};
    cases.push_back(std::move(c));
  }

  // attn_prefill.cuda_fa2b (D 256, 64-key tiles, two K/V stages reused over many tiles): a causal
  // prefill of 540 new tokens over a 173-token prefix (12 key tiles, the diagonal mid-tile, page
  // 16) at GQA 8, and GQA 1 with a window of 130 (no multiple of a tile; the first tiles of a
  // block start mid-window) beside a short sequence, page 32.
  {
    auto c = make(Mode::prefill, {713}, Shape{8, 1, 256}, 16, bf16, bf16);
    c->news = {540};
    cases.push_back(std::move(c));
    c = make(Mode::prefill, {900, 65}, Shape{2, 2, 256}, 32, bf16, bf16);
    c->news = {500, 65};
    c->window = 130;
    cases.push_back(std::move(c));
  }

  // attn_prefill.cuda_fa2c (D 256, warp pairs: each half computes S for 32 keys of a tile and O for
  // 128 dims; row maxima and P exchanged through shared memory): a varlen batch whose last query
  // tiles leave pairs with 0 and < 32 rows (1000 = 7 · 128 + 104: pairs of 32, 32, 32, 8 rows; 37
  // rows: one pair of 32 and one of 5), window 33 (one half of a tile often fully masked for a row
  // while the other is not; tiles start mid-window) and an explicit scale, GQA 2, page 16; window
  // 1 (every row sees only its own key: one half's partial maxima are all −inf), GQA 16, over a
  // prefix of 61; a negative scale (fa2c refuses: cuda_fa2b serves it).
  {
    auto c = make(Mode::prefill, {1000, 37}, Shape{4, 2, 256}, 16, bf16, bf16);
    c->news = {1000, 37};
    c->window = 33;
    c->scale = 0.07f;
    cases.push_back(std::move(c));
    c = make(Mode::prefill, {261}, Shape{16, 1, 256}, 32, bf16, bf16);
    c->news = {200};
    c->window = 1;
    cases.push_back(std::move(c));
    c = make(Mode::prefill, {300}, Shape{2, 1, 256}, 64, bf16, bf16);
    c->news = {300};
    c->scale = -0.05f;
    cases.push_back(std::move(c));
  }

  // attn_prefill.cudnn (-DHYBRID_CUDNN=ON; cuDNN's ragged Q/O, paged K/V, bottom-right causal and
  // padding masks) takes the bf16 / f16 cases above; these add: GQA 8 at D 128 over cached
  // prefixes of different lengths in one batch (a sequence of one new token, another whose
  // prefix ends mid-page), no window; f16 at D 256 with a window of 128 (pages before it -1, so
  // the clamped table copy reads page 0 there) beside a sequence shorter than the window; and
  // unwritten cache rows as NaN with stale page ids past each sequence (cuDNN must not let keys
  // past seq_len_kv or outside the window reach P·V, as the own kernels do not).
  {
    auto c = make(Mode::prefill, {700, 33, 1, 260}, gqa8, 16, bf16, bf16);
    c->news = {500, 33, 1, 4};
    cases.push_back(std::move(c));
    c = make(Mode::prefill, {600, 90}, Shape{16, 2, 256}, 64, f16, f16);
    c->news = {600, 31};
    c->window = 128;
    cases.push_back(std::move(c));
    c = make(Mode::prefill, {333, 70}, Shape{16, 2, 256}, 16, bf16, bf16);
    c->news = {200, 70};
    c->window = 100;
    c->spare_cols = 3, c->stale_tail = true, c->nan_tail = true;
    cases.push_back(std::move(c));
  }

  // attn_prefill.cuda_wg's TMA copies (form 6: whole key tiles as boxes of 64 rows, or of one
  // page where a page divides 64 with at least 8 rows; the tile with keys past the block's last
  // position by zero-filling cp.async): page 128 (tiles at row 0 and 64 of a page) at D 128 over
  // a cached prefix, GQA 4; page 8 (8 boxes a column block) at D 256, GQA 8; page 32 at D 256,
  // GQA 2. Unwritten rows NaN and stale page ids past each sequence, so that a box reaching past
  // the last position, or a wrong page, shows in the output.
  {
    auto c = make(Mode::prefill, {900, 130}, Shape{8, 2, 128}, 128, bf16, bf16);
    c->news = {700, 130};
    c->spare_cols = 2, c->stale_tail = true, c->nan_tail = true;
    cases.push_back(std::move(c));
    c = make(Mode::prefill, {333, 64}, Shape{16, 2, 256}, 8, bf16, bf16);
    c->news = {300, 64};
    c->spare_cols = 3, c->stale_tail = true, c->nan_tail = true;
    cases.push_back(std::move(c));
    c = make(Mode::prefill, {520, 129}, Shape{4, 2, 256}, 32, bf16, bf16);
    c->news = {520, 100};
    c->spare_cols = 1, c->stale_tail = true, c->nan_tail = true;
    cases.push_back(std::move(c));
  }

  // attn_decode.cuda_tc2 (cp.async Q, wide merge) takes every case above; these add one long
  // sequence per batch (B 1, the many-split shape of the perf cases: contexts no multiple of a tile
  // or of a split, the last splits empty), at D 256 / 128 / 64 with GQA 8 / 1 / 4, a window, and a
  // q that is not 16-byte aligned, which v3 refuses and v2 (attn_decode.cuda_tc) then serves.
  {
    auto c = make(Mode::decode, {9001}, qwen3_next, 64, bf16, bf16);
    cases.push_back(std::move(c));
    c = make(Mode::decode, {6003}, gqa1_128, 16, f16, f16);
    c->window = 4097;
    cases.push_back(std::move(c));
    c = make(Mode::decode, {5000, 1}, Shape{16, 4, 64}, 64, bf16, bf16);
    cases.push_back(std::move(c));
    c = make(Mode::decode, {2500, 70, 0}, qwen3_next, 16, bf16, bf16);
    c->strided = true;
    c->q_unaligned = true;
    cases.push_back(std::move(c));
  }

  // attn_decode.cuda_tc4 (v5: split ranges from the table capacity, the first tiles' copies issued
  // before the length is read, keys past it masked): few (sequence, KV head) pairs with table
  // rows much longer than the sequences and stale page ids past them. B 1 at D 256 with a partial
  // last page and splits wholly past the length (their speculative tiles hold stale keys) and one
  // split ending one key into its first tile; D 128 with page 7 (the split count, 47, divides
  // neither the pages nor the tiles); a padding sequence beside a long one (f16); GQA 24 (two
  // head chunks, the second of 8 heads) at D 64.
  {
    auto c = make(Mode::decode, {20001}, qwen3_next, 16, bf16, bf16);
    c->spare_cols = 700, c->stale_tail = true;
    cases.push_back(std::move(c));
    c = make(Mode::decode, {3001}, gqa8, 7, bf16, bf16);
    c->stale_tail = true;
    cases.push_back(std::move(c));
    c = make(Mode::decode, {0, 9000}, qwen3_next, 16, f16, f16);
    c->spare_cols = 100, c->stale_tail = true;
    cases.push_back(std::move(c));
    // Unwritten cache rows as NaN: the partial last page's rows past the length reach the
    // speculative tiles' V (D 256: 20001 = 1250 pages + 1 key).
    c = make(Mode::decode, {20001}, qwen3_next, 16, bf16, bf16);
    c->spare_cols = 700, c->stale_tail = true, c->nan_tail = true;
    cases.push_back(std::move(c));
    c = make(Mode::decode, {3001}, gqa8, 7, f16, f16);
    c->stale_tail = true, c->nan_tail = true;
    cases.push_back(std::move(c));
    c = make(Mode::decode, {4000}, Shape{48, 2, 64}, 32, bf16, bf16);
    c->spare_cols = 40, c->stale_tail = true;
    cases.push_back(std::move(c));
  }

  // Perf only: decode B 1 / 32 / 128 / 1 at contexts 32768 / 8192 / 4096 / 131072 (pages of 16
  // and 64), B 1 at 32768 in pages of 64 too (the B 1 target's gap: 2.43 TB/s at 32K in pages of
  // 16, 3.79 at 131K in pages of 64; which of context and page size makes it), prefill of one
  // sequence of 4096 and 16384 tokens (causal, page 64); prefill at head_dim 128 (Nemotron-H
  // 8B's attention layers: 32 q / 8 kv heads; the wgmma kernel's other head size) at 4096; and
  // short prompts (one of 512, one of 1024, eight of 512), where cuda_wg's 128-row blocks number
  // fewer than the SMs (16 heads x 4 or 8 tiles) and fa2c's 64-row blocks twice as many.
  for (auto [B, ctx, page] : {std::tuple<int64_t, int64_t, int64_t>{1, 32768, 16},
                              {1, 32768, 64},
                              {32, 8192, 16},
                              {128, 4096, 64},
                              {1, 131072, 64}}) {
    auto c = std::make_unique<AttnPerfCase>();
    c->mode = Mode::decode;
    c->lens.assign(B, ctx);
    c->Hq = qwen3_next.Hq, c->Hkv = qwen3_next.Hkv, c->D = qwen3_next.D;
    c->page_size = page;
    c->act = c->cache = bf16;
    cases.push_back(std::move(c));
  }
  for (int64_t T : {4096, 16384}) {
    auto c = std::make_unique<AttnPerfCase>();
    c->mode = Mode::prefill;
    c->lens = {T};
    c->news = {T};
    c->Hq = qwen3_next.Hq, c->Hkv = qwen3_next.Hkv, c->D = qwen3_next.D;
    c->page_size = 64;
    c->act = c->cache = bf16;
    cases.push_back(std::move(c));
  }
  {
    auto c = std::make_unique<AttnPerfCase>();
    c->mode = Mode::prefill;
    c->lens = {4096};
    c->news = {4096};
    c->Hq = gqa4.Hq, c->Hkv = gqa4.Hkv, c->D = gqa4.D;
    c->page_size = 64;
    c->act = c->cache = bf16;
    cases.push_back(std::move(c));
  }
  for (auto lens :
       {std::vector<int64_t>{512}, std::vector<int64_t>{1024}, std::vector<int64_t>(8, 512)}) {
    auto c = std::make_unique<AttnPerfCase>();
    c->mode = Mode::prefill;
    c->lens = lens;
    c->news = lens;
    c->Hq = qwen3_next.Hq, c->Hkv = qwen3_next.Hkv, c->D = qwen3_next.D;
    c->page_size = 64;
    c->act = c->cache = bf16;
    cases.push_back(std::move(c));
  }

  // rope_kv_append_attn_decode: Qwen3-Next (rotary 64 of 256, theta 1e7), full rotary at D = 128
  // and 64, window, padding sequence; and the fused op next to rope + kv_append + attn_decode.
  for (Mode mode : {Mode::fused, Mode::fused_vs_sequence}) {
    auto c = make(mode, {1, 64, 300, 0}, qwen3_next, 16, bf16, bf16);
    c->rotary_dim = 64;
    c->theta = 1e7f;
    c->strided = true;
    cases.push_back(std::move(c));
    c = make(mode, {63, 65, 3}, gqa4, 16, f32, f32);
    c->rotary_dim = 128;
    c->theta = 1e6f;
    c->window = 32;
    cases.push_back(std::move(c));
    c = make(mode, {1500, 3, 0}, gqa8, 16, bf16, bf16);  // the tensor-core decode core, splits
    c->rotary_dim = 128;
    c->theta = 1e6f;
    c->window = 300;
    cases.push_back(std::move(c));
    c = make(mode, {100, 1}, mha64, 0, f16, f32);
    c->rotary_dim = 32;
    c->theta = 1e4f;
    c->scale = 0.2f;
    cases.push_back(std::move(c));
  }
}

}  // namespace hybrid::test
