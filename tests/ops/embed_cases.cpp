// Cases: embed_gather, embed_gather_q. Oracle in f64.
#include <cmath>

#include "hybrid/ops/embed.h"
#include "ops/cases.h"
#include "ops/harness.h"

namespace hybrid::test {

namespace {

// T ids in [0, vocab): the first and last rows, a repeat, and random ones.
std::vector<double> pick_ids(Rng& rng, int64_t T, int64_t vocab) {
  std::vector<double> ids;
  for (int64_t t = 0; t < T; ++t) {
    const int64_t id = t == 0   ? vocab - 1
                       : t == 1 ? 0
                       : t == 3 ? static_cast<int64_t>(ids[2])
                                : rng.randint(0, vocab - 1);
    ids.push_back(static_cast<double>(id));
  }
  return ids;
}

// out[t, :] = table[ids[t], :].
struct EmbedGatherCase : Case {
  int64_t T, vocab, D;
  DType tdt, idt, odt;
  bool strided;
  EmbedGatherCase(int64_t T, int64_t vocab, int64_t D, DType tdt, DType idt, DType odt,
                  bool strided)
      : T(T), vocab(vocab), D(D), tdt(tdt), idt(idt), odt(odt), strided(strided) {}
  std::string op() const override { return "embed_gather"; }
  std::string params() const override {
    return str("T=", T, ",vocab=", vocab, ",D=", D, ",table=", dtype_name(tdt),
               ",ids=", dtype_name(idt), ",out=", dtype_name(odt), strided ? ",strided" : "");
  }
  void init(Rng& rng, Slots& s) override {
    if (strided) {
      fill_uniform(
          s.strided("table", Role::in, tdt, {vocab, D}, {D + 3, 1}, 2, vocab * (D + 3) + 2), rng,
          -1.0, 1.0);
      s.strided("out", Role::out, odt, {T, D}, {D + 6, 1}, 1, T * (D + 6) + 1);
    } else {
      fill_uniform(s.input("table", tdt, {vocab, D}), rng, -1.0, 1.0);
      s.output("out", odt, {T, D});
    }
    fill_values(s.input("ids", idt, {T}), pick_ids(rng, T, vocab));
  }
  void run(const Views& v, Context& ctx) override {
    EmbedGather a;
    a.table = v.at("table");
    a.ids = v.at("ids");
    a.out = v.at("out");
    embed_gather(a, ctx);
  }
  void oracle(const Slots& s, Expected& e) override {
    std::vector<double>& out = e["out"];
    for (int64_t t = 0; t < T; ++t) {
      const int64_t id = static_cast<int64_t>(s["ids"].get(t));
      for (int64_t d = 0; d < D; ++d) out.push_back(s["table"].get(id * D + d));
    }
  }
};

// out[t, j] = scales[id, j/g] · q[id, j] + biases[id, j/g], id = ids[t].
struct EmbedGatherQCase : Case {
  int64_t T, vocab, D;
  int bits, gs;
  DType sdt, idt, odt;
  bool strided;
  EmbedGatherQCase(int64_t T, int64_t vocab, int64_t D, int bits, int gs, DType sdt, DType idt,
                   DType odt, bool strided)
      : T(T),
        vocab(vocab),
        D(D),
        bits(bits),
        gs(gs),
        sdt(sdt),
        idt(idt),
        odt(odt),
        strided(strided) {}
  std::string op() const override { return "embed_gather_q"; }
  std::string params() const override {
    return str("T=", T, ",vocab=", vocab, ",D=", D, ",bits=", bits, ",group=", gs,
               ",scales=", dtype_name(sdt), ",ids=", dtype_name(idt), ",out=", dtype_name(odt),
               strided ? ",strided" : "");
  }
  void init(Rng& rng, Slots& s) override {
    const int64_t nw = D * bits / 32, ng = D / gs;
    if (strided) {
      s.strided("weight", Role::in, DType::u32, {vocab, nw}, {nw + 1, 1}, 3, vocab * (nw + 1) + 3);
      s.strided("out", Role::out, odt, {T, D}, {D + 6, 1}, 1, T * (D + 6) + 1);
    } else {
      s.input("weight", DType::u32, {vocab, nw});
      s.output("out", odt, {T, D});
    }
    fill_int(s["weight"], rng, 0, 0xffffffffll);
    // Scales of either sign and biases centring the row around 0 (as MLX's quantize makes them).
    Slot& sc = s.input("scales", sdt, {vocab, ng});
    Slot& bi = s.input("biases", sdt, {vocab, ng});
    const double n = (1 << bits) - 1;
    for (int64_t i = 0; i < vocab * ng; ++i) {
      const double scale = rng.uniform(0.005, 0.02) * (rng.uniform() < 0.5 ? -1 : 1);
      sc.set(i, scale);
      bi.set(i, -scale * n / 2 + rng.uniform(-0.01, 0.01));
    }
    fill_values(s.input("ids", idt, {T}), pick_ids(rng, T, vocab));
  }
  void run(const Views& v, Context& ctx) override {
    EmbedGatherQ a;
    a.table.weight = v.at("weight");
    a.table.scales = v.at("scales");
    a.table.biases = v.at("biases");
    a.table.bits = bits;
    a.table.group_size = gs;
    a.ids = v.at("ids");
    a.out = v.at("out");
    embed_gather_q(a, ctx);
  }
  void oracle(const Slots& s, Expected& e) override {
    const int64_t nw = D * bits / 32, ng = D / gs;
    std::vector<double>& out = e["out"];
    for (int64_t t = 0; t < T; ++t) {
      const int64_t id = static_cast<int64_t>(s["ids"].get(t));
      for (int64_t j = 0; j < D; ++j) {
        const auto word = static_cast<uint64_t>(s["weight"].get(id * nw + j * bits / 32));
        const double q = static_cast<double>((word >> (j * bits % 32)) & ((1u << bits) - 1));
        out.push_back(s["scales"].get(id * ng + j / gs) * q + s["biases"].get(id * ng + j / gs));
      }
    }
  }
};

// Benchmark shapes (perf only): 4096 ids into the Qwen3-Next table [151936, 2048], bf16 or MLX
// 4-bit (group 64, bf16 scales), bf16 out. The table is left at zeros (filling 311 M elements
// would take seconds and the values do not change the time). The bytes are what the op must move:
// the T rows gathered (codes, scales and biases for 4-bit) and written, and the ids.
struct EmbedPerfCase : Case {
  int64_t T = 4096, vocab = 151936, D = 2048;
  bool quantized;
  explicit EmbedPerfCase(bool quantized) : quantized(quantized) {}
  std::string op() const override { return quantized ? "embed_gather_q" : "embed_gather"; }
  std::string params() const override {
    return str("T=", T, ",vocab=", vocab, ",D=", D,
               quantized ? ",bits=4,group=64,scales=bf16" : ",table=bf16",
               ",ids=i32,out=bf16,perf");
  }
  bool perf_only() const override { return true; }
  void init(Rng& rng, Slots& s) override {
    if (quantized) {
      s.input("weight", DType::u32, {vocab, D / 8});
      s.input("scales", DType::bf16, {vocab, D / 64});
      s.input("biases", DType::bf16, {vocab, D / 64});
    } else {
      s.input("table", DType::bf16, {vocab, D});
    }
    fill_values(s.input("ids", DType::i32, {T}), pick_ids(rng, T, vocab));
    s.output("out", DType::bf16, {T, D});
  }
  void run(const Views& v, Context& ctx) override {
    if (quantized) {
      EmbedGatherQ a;
      a.table.weight = v.at("weight"), a.table.scales = v.at("scales");
      a.table.biases = v.at("biases"), a.table.bits = 4, a.table.group_size = 64;
      a.ids = v.at("ids"), a.out = v.at("out");
      embed_gather_q(a, ctx);
    } else {
      EmbedGather a;
      a.table = v.at("table"), a.ids = v.at("ids"), a.out = v.at("out");
      embed_gather(a, ctx);
    }
  }
  void oracle(const Slots&, Expected&) override { fail("[embed perf case] has no oracle"); }
  double bytes(const Slots&) const override {
    const double row = quantized ? D / 2 + 2.0 * (D / 64) * 2 : D * 2.0;
    return static_cast<double>(T) * (row + D * 2.0 + 4.0);
  }
};

}  // namespace

void add_embed_cases(CaseList& cases) {
  cases.push_back(std::make_unique<EmbedPerfCase>(false));
  cases.push_back(std::make_unique<EmbedPerfCase>(true));
  const DType f32 = DType::f32, bf16 = DType::bf16, f16 = DType::f16, i32 = DType::i32,
              i64 = DType::i64;
  // Float tables: hidden 2048 at a small vocab, every dtype pairing, both id types, odd sizes.
  cases.push_back(std::make_unique<EmbedGatherCase>(7, 1000, 2048, bf16, i32, bf16, false));
  cases.push_back(std::make_unique<EmbedGatherCase>(7, 1000, 2048, bf16, i64, f32, false));
  cases.push_back(std::make_unique<EmbedGatherCase>(65, 257, 96, f32, i32, f32, false));
  cases.push_back(std::make_unique<EmbedGatherCase>(3, 63, 7, f16, i64, f16, false));
  cases.push_back(std::make_unique<EmbedGatherCase>(1, 1, 1, f32, i32, bf16, false));
  cases.push_back(std::make_unique<EmbedGatherCase>(9, 500, 65, bf16, i32, f32, true));
  // The real Qwen3-Next vocab (151936) with a narrow table (D = 64: ids near the top of it).
  cases.push_back(std::make_unique<EmbedGatherCase>(5, 151936, 64, bf16, i64, bf16, false));
  // Quantized tables (seed 004's embed_gather_4bit): the real Qwen3-Next 4-bit table
  // [151936, 2048], group 64, bf16 scales; then bits x group sizes at a small vocab.
  cases.push_back(
      std::make_unique<EmbedGatherQCase>(3, 151936, 2048, 4, 64, bf16, i32, bf16, false));
  for (int bits : {4, 8})
    for (int gs : {32, 64, 128})
      cases.push_back(
          std::make_unique<EmbedGatherQCase>(7, 300, 384, bits, gs, bf16, i32, f32, false));
  cases.push_back(std::make_unique<EmbedGatherQCase>(17, 1000, 2048, 8, 64, f32, i64, bf16, false));
  cases.push_back(std::make_unique<EmbedGatherQCase>(1, 7, 96, 4, 32, f16, i64, f16, false));
  cases.push_back(std::make_unique<EmbedGatherQCase>(5, 100, 256, 4, 128, bf16, i32, bf16, true));
}

}  // namespace hybrid::test
