// Sampler and StopChecker (include/hybrid/engine/sampling.h). The expected distributions and kept
// sets are computed here from the math (f64 softmax, a full sort, the filters' definitions), not
// with the sampler's own code.
#include "hybrid/engine/sampling.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "hybrid/model/tokenizer.h"
#include "test_files.h"
#include "unit/expect_error.h"

namespace {

namespace fs = std::filesystem;
using hybrid::Sampler;
using hybrid::SamplingParams;
using hybrid::StopChecker;
using hybrid::StopParams;
using hybrid::StopReason;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Logits whose softmax at T = 1 is exactly `probs` (up to rounding).
std::vector<float> log_probs(const std::vector<double>& probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(static_cast<float>(std::log(p)));
  return l;
}

// Softmax of logits / T in f64 over the ids of `keep`, renormalised: the oracle distribution.
std::map<int32_t, double> softmax_over(const std::vector<float>& logits, double temperature,
                                       const std::set<int32_t>& keep) {
  double m = -std::numeric_limits<double>::infinity();
  for (int32_t id : keep) m = std::max(m, static_cast<double>(logits[id]));
  std::map<int32_t, double> p;
  double total = 0;
  for (int32_t id : keep) total += p[id] = std::exp((logits[id] - m) / temperature);
  for (auto& [id, v] : p) v /= total;
  return p;
}

// Draws n ids and checks their frequencies against `expected` (ids absent from it must never be
// drawn): Pearson's chi-square over the expected ids must stay under `bound`. The seed is fixed,
// so the statistic is deterministic; the bound is the 99.99% quantile of chi-square with up to 5
// degrees of freedom (25.7), so a correct sampler passes with any seed with near certainty while a
// probability off by 10% of itself makes the statistic far larger at n = 20000.
void expect_frequencies(const SamplingParams& params, const std::vector<float>& logits,
                        const std::map<int32_t, double>& expected,
                        std::span<const int32_t> history = {}, int n = 20000) {
  Sampler sampler(params);
  std::map<int32_t, int> counts;
  for (int i = 0; i < n; ++i) ++counts[sampler.sample(logits.data(), logits.size(), history)];
  for (const auto& [id, c] : counts)
    EXPECT_TRUE(expected.count(id)) << "id " << id << " drawn " << c << " times, expected never";
  double chi2 = 0;
  for (const auto& [id, p] : expected) {
    const double e = p * n;
    const double o = counts.count(id) ? counts.at(id) : 0;
    chi2 += (o - e) * (o - e) / e;
  }
  ASSERT_LE(expected.size(), 6u);
  EXPECT_LT(chi2, 25.7) << "chi-square of " << n << " draws over " << expected.size() << " ids";
}

// The sampler's candidates must be exactly `expected`: the same ids, and probabilities within
// 1e-7 (the expected values are often exact decimals while the logits are their f32 logs, whose
// rounding moves a probability by up to ~3e-8).
void expect_candidates(const SamplingParams& params, const std::vector<float>& logits,
                       const std::map<int32_t, double>& expected,
                       std::span<const int32_t> history = {}) {
  const auto got = Sampler(params).candidates(logits.data(), logits.size(), history);
  ASSERT_EQ(got.size(), expected.size());
  size_t i = 0;
  for (const auto& [id, p] : expected) {
    EXPECT_EQ(got[i].id, id) << "candidate " << i;
    EXPECT_NEAR(got[i].prob, p, 1e-7) << "id " << id;
    ++i;
  }
}

// A small deterministic generator for test inputs (independent of the sampler's).
struct Lcg {
  uint64_t s;
  double uniform() {
    s = s * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<double>(s >> 11) * 0x1.0p-53;
  }
};

// Logits for a vocab of n ids, with some exact ties and masked ids.
std::vector<float> random_logits(int n, uint64_t seed, double scale) {
  Lcg g{seed};
  std::vector<float> l(n);
  for (float& x : l) x = static_cast<float>((g.uniform() * 2 - 1) * scale);
  for (int i = 0; i + 7 < n; i += 13) l[i + 7] = l[i];  // ties
  for (int i = 5; i < n; i += 29) l[i] = kNegInf;       // masked
  return l;
}

// ---- generator --------------------------------------------------------------------------------

TEST(SamplingRng, Splitmix64MatchesTheReference) {
  // Vigna's splitmix64.c from state 0.
  uint64_t state = 0;
  EXPECT_EQ(hybrid::splitmix64(state), 0xe220a8397b1dcdafULL);
  EXPECT_EQ(hybrid::splitmix64(state), 0x6e789e6aa1b965f4ULL);
  EXPECT_EQ(hybrid::splitmix64(state), 0x06c45d188009454fULL);
}

TEST(SamplingRng, Xoshiro256StarStarIsPinned) {
  // From an independent Python transcription of xoshiro256** 1.0 seeded by splitmix64: the
  // stream every machine must reproduce.
  hybrid::Xoshiro256 a(0);
  EXPECT_EQ(a.next(), 0x99ec5f36cb75f2b4ULL);
  EXPECT_EQ(a.next(), 0xbf6e1f784956452aULL);
  EXPECT_EQ(a.next(), 0x1a5f849d4933e6e0ULL);
  hybrid::Xoshiro256 b(42);
  EXPECT_EQ(b.next(), 0x15780b2e0c2ec716ULL);
  EXPECT_EQ(b.next(), 0x6104d9866d113a7eULL);
  EXPECT_EQ(b.next(), 0xae17533239e499a1ULL);
  hybrid::Xoshiro256 c(7);
  for (int i = 0; i < 10000; ++i) {
    const double u = c.uniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
  }
}

// ---- greedy -----------------------------------------------------------------------------------

TEST(SamplingGreedy, ArgmaxLowestIdOnTies) {
  Sampler s({});
  const std::vector<float> a = {1, 5, 5, 2};
  EXPECT_EQ(s.sample(a.data(), a.size()), 1);
  const std::vector<float> b = {3, 3, 3};
  EXPECT_EQ(s.sample(b.data(), b.size()), 0);
  const std::vector<float> c = {kNegInf, -7, kNegInf, -7};
  EXPECT_EQ(s.sample(c.data(), c.size()), 1);
  const std::vector<float> d = {-1, -2, 0.5f, 0.25f, 0.5f};
  EXPECT_EQ(s.sample(d.data(), d.size()), 2);
  const auto cand = s.candidates(d.data(), d.size());
  ASSERT_EQ(cand.size(), 1u);
  EXPECT_EQ(cand[0].id, 2);
  EXPECT_EQ(cand[0].prob, 1.0);
}

TEST(SamplingGreedy, TopK1EqualsGreedy) {
  for (uint64_t seed = 1; seed <= 50; ++seed) {
    const std::vector<float> l = random_logits(1000, seed, 4.0);
    const std::vector<int32_t> history = {3, 7, 7, 100, static_cast<int32_t>(seed * 17 % 1000)};
    Sampler greedy({.repetition_penalty = 1.3f});
    Sampler top1({.temperature = 0.9f, .top_k = 1, .repetition_penalty = 1.3f, .seed = seed});
    EXPECT_EQ(top1.sample(l.data(), l.size(), history), greedy.sample(l.data(), l.size(), history))
        << "seed " << seed;
  }
  // Ties: the lower id, as greedy.
  const std::vector<float> t = {0, 9, 2, 9, 9};
  Sampler top1({.temperature = 2.0f, .top_k = 1, .seed = 3});
  for (int i = 0; i < 100; ++i) EXPECT_EQ(top1.sample(t.data(), t.size()), 1);
}

// ---- distributions after each filter
// -------------------------------------------------------------

const std::vector<double> kProbs = {0.4, 0.3, 0.15, 0.1, 0.05};

TEST(SamplingDistribution, Temperature1MatchesSoftmax) {
  const auto l = log_probs(kProbs);
  const auto expected = softmax_over(l, 1.0, {0, 1, 2, 3, 4});
  EXPECT_NEAR(expected.at(0), 0.4, 1e-6);
  expect_candidates({.temperature = 1}, l, expected);
  expect_frequencies({.temperature = 1, .seed = 11}, l, expected);
}

TEST(SamplingDistribution, TemperatureSharpensAndFlattens) {
  const auto l = log_probs(kProbs);
  // T = 0.5: p ∝ p0², T = 2: p ∝ √p0.
  std::map<int32_t, double> sharp, flat;
  double ts = 0, tf = 0;
  for (int i = 0; i < 5; ++i) ts += kProbs[i] * kProbs[i], tf += std::sqrt(kProbs[i]);
  for (int i = 0; i < 5; ++i)
    sharp[i] = kProbs[i] * kProbs[i] / ts, flat[i] = std::sqrt(kProbs[i]) / tf;
  expect_candidates({.temperature = 0.5f}, l, sharp);
  expect_frequencies({.temperature = 0.5f, .seed = 12}, l, sharp);
  expect_candidates({.temperature = 2}, l, flat);
  expect_frequencies({.temperature = 2, .seed = 13}, l, flat);
}

TEST(SamplingDistribution, TopK) {
  const auto l = log_probs(kProbs);
  const std::map<int32_t, double> top3 = {{0, 0.4 / 0.85}, {1, 0.3 / 0.85}, {2, 0.15 / 0.85}};
  expect_candidates({.temperature = 1, .top_k = 3}, l, top3);
  expect_frequencies({.temperature = 1, .top_k = 3, .seed = 14}, l, top3);
  // k >= vocab keeps everything.
  expect_candidates({.temperature = 1, .top_k = 50}, l, softmax_over(l, 1, {0, 1, 2, 3, 4}));
  // Exactly k even with ties at the boundary: the lower ids.
  const std::vector<float> tied = {1, 2, 2, 2, 0};
  expect_candidates({.temperature = 1, .top_k = 2}, tied, {{1, 0.5}, {2, 0.5}});
}

TEST(SamplingDistribution, TopP) {
  const auto l = log_probs(kProbs);
  // Mass before each id (descending): 0, 0.4, 0.7, 0.85, 0.95. p = 0.75 keeps {0, 1, 2}.
  const std::map<int32_t, double> nucleus = {{0, 0.4 / 0.85}, {1, 0.3 / 0.85}, {2, 0.15 / 0.85}};
  expect_candidates({.temperature = 1, .top_p = 0.75f}, l, nucleus);
  expect_frequencies({.temperature = 1, .top_p = 0.75f, .seed = 15}, l, nucleus);
  // A tiny p keeps the most probable id alone; p just above 0.4 adds the second.
  expect_candidates({.temperature = 1, .top_p = 0.01f}, l, {{0, 1.0}});
  expect_candidates({.temperature = 1, .top_p = 0.45f}, l, {{0, 0.4 / 0.7}, {1, 0.3 / 0.7}});
  // p = 0.96 keeps all five (mass before the last is 0.95).
  expect_candidates({.temperature = 1, .top_p = 0.96f}, l, softmax_over(l, 1, {0, 1, 2, 3, 4}));
  // Ids are ordered id-first among equal probabilities: {3, 3, 3} at p = 0.5 keeps ids 0, 1.
  const std::vector<float> tied = {0, 0, 0};
  expect_candidates({.temperature = 1, .top_p = 0.5f}, tied, {{0, 0.5}, {1, 0.5}});
}

TEST(SamplingDistribution, MinP) {
  const auto l = log_probs(kProbs);
  // min_p = 0.3: threshold 0.3 · 0.4 = 0.12 keeps 0.4, 0.3, 0.15.
  const std::map<int32_t, double> kept = {{0, 0.4 / 0.85}, {1, 0.3 / 0.85}, {2, 0.15 / 0.85}};
  expect_candidates({.temperature = 1, .min_p = 0.3f}, l, kept);
  expect_frequencies({.temperature = 1, .min_p = 0.3f, .seed = 16}, l, kept);
  // min_p = 0.2: threshold 0.08 keeps 0.1 too; 0.05 goes.
  expect_candidates({.temperature = 1, .min_p = 0.2f}, l,
                    {{0, 0.4 / 0.95}, {1, 0.3 / 0.95}, {2, 0.15 / 0.95}, {3, 0.1 / 0.95}});
  // min_p applies to the tempered distribution: at T = 0.5 (p ∝ p0²) 0.3 · 0.16 = 0.048 keeps
  // 0.16, 0.09 only.
  expect_candidates({.temperature = 0.5f, .min_p = 0.3f}, l, {{0, 0.16 / 0.25}, {1, 0.09 / 0.25}});
}

TEST(SamplingDistribution, FilterOrder) {
  const auto l = log_probs(kProbs);
  // Top-p sees the top-k distribution renormalised: top-3 is {0.4, 0.3, 0.15} / 0.85, mass before
  // id 2 is 0.7 / 0.85 = 0.82 >= 0.8, so {0, 1}. (Top-p over the full distribution would keep 2.)
  const std::map<int32_t, double> k3p8 = {{0, 0.4 / 0.7}, {1, 0.3 / 0.7}};
  expect_candidates({.temperature = 1, .top_k = 3, .top_p = 0.8f}, l, k3p8);
  expect_frequencies({.temperature = 1, .top_k = 3, .top_p = 0.8f, .seed = 17}, l, k3p8);
  // Temperature comes before top-p (HF, vLLM): at T = 0.5 the mass before id 2 is
  // (0.16 + 0.09) / 0.285 = 0.877 >= 0.8, so {0, 1}. (llama.cpp, tempering last, keeps {0, 1, 2}.)
  expect_candidates({.temperature = 0.5f, .top_p = 0.8f}, l, {{0, 0.16 / 0.25}, {1, 0.09 / 0.25}});
  // All four together: top-k 4 -> {0..3}; top-p 0.9 over /0.95: mass before id 3 = 0.85/0.95 =
  // 0.895 < 0.9 keeps it; min-p 0.3 then drops 0.1 < 0.12.
  const std::map<int32_t, double> all = {{0, 0.4 / 0.85}, {1, 0.3 / 0.85}, {2, 0.15 / 0.85}};
  expect_candidates({.temperature = 1, .top_k = 4, .top_p = 0.9f, .min_p = 0.3f}, l, all);
  expect_frequencies({.temperature = 1, .top_k = 4, .top_p = 0.9f, .min_p = 0.3f, .seed = 18}, l,
                     all);
}

// The kept set at vocab sizes where the nucleus spans many of the lazily sorted blocks, against a
// full sort in f64.
TEST(SamplingDistribution, KeptSetsMatchAFullSort) {
  struct Setting {
    float temperature;
    int top_k;
    float top_p;
    float min_p;
  };
  const Setting settings[] = {{1, 0, 0.9f, 0},   {1, 0, 0.5f, 0},         {0.3f, 0, 0.99f, 0},
                              {2, 0, 0.999f, 0}, {1, 700, 0.95f, 0},      {0.7f, 100, 1, 0},
                              {1, 0, 1, 0.05f},  {1.5f, 0, 0.97f, 0.01f}, {0.8f, 2000, 0.6f, 0.2f}};
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    const std::vector<float> l = random_logits(3001, seed, 3.0 + seed);
    for (const Setting& st : settings) {
      // Oracle: every finite id, sorted by (logit desc, id asc); then each filter by definition.
      std::vector<int32_t> order;
      for (int32_t i = 0; i < static_cast<int32_t>(l.size()); ++i)
        if (std::isfinite(l[i])) order.push_back(i);
      std::sort(order.begin(), order.end(),
                [&](int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); });
      if (st.top_k > 0 && static_cast<size_t>(st.top_k) < order.size()) order.resize(st.top_k);
      const auto p = softmax_over(l, st.temperature, {order.begin(), order.end()});
      if (st.top_p < 1) {
        double before = 0;
        size_t keep = 0;
        while (keep < order.size() && before < st.top_p) before += p.at(order[keep++]);
        order.resize(keep);
      }
      const double pmax = p.at(order[0]);
      std::erase_if(order, [&](int32_t id) { return p.at(id) < st.min_p * pmax; });
      const std::set<int32_t> expected(order.begin(), order.end());

      const auto got = Sampler({.temperature = st.temperature,
                                .top_k = st.top_k,
                                .top_p = st.top_p,
                                .min_p = st.min_p})
                           .candidates(l.data(), l.size());
      std::set<int32_t> got_ids;
      double total = 0;
      for (const auto& c : got) got_ids.insert(c.id), total += c.prob;
      EXPECT_EQ(got_ids, expected)
          << "seed " << seed << " T=" << st.temperature << " top_k=" << st.top_k
          << " top_p=" << st.top_p << " min_p=" << st.min_p;
      EXPECT_NEAR(total, 1.0, 1e-12);
      EXPECT_TRUE(std::is_sorted(got.begin(), got.end(),
                                 [](const auto& a, const auto& b) { return a.id < b.id; }));
      if (st.top_p < 1 && st.top_k == 0 && st.min_p == 0) {
        EXPECT_GT(expected.size(), 64u);  // the nucleus spans several sorted blocks
      }
    }
  }
}

// sample_nucleus on the row's n most probable ids and the row's mass draws what sample() draws on
// the whole row, or returns -1 without a draw when the nucleus reaches past the n ids (the caller
// then samples the row: the generators stay in step). Both outcomes must occur.
TEST(SamplingDistribution, SampleNucleusDrawsWhatSampleDraws) {
  struct Setting {
    float temperature, top_p, min_p;
  };
  const Setting settings[] = {{0.7f, 0.5f, 0}, {1, 0.9f, 0}, {1.5f, 0.99f, 0}, {1, 0.95f, 0.02f}};
  int decided = 0, short_of_it = 0;
  for (uint64_t seed = 1; seed <= 3; ++seed) {
    const std::vector<float> l = random_logits(3001, seed, 2.0 + seed);
    for (const Setting& st : settings) {
      for (const int64_t n : {int64_t{64}, int64_t{400}}) {
        // The n largest (value desc, id asc), back in id order; the mass in id order.
        std::vector<int32_t> order(l.size());
        std::iota(order.begin(), order.end(), 0);
        std::sort(order.begin(), order.end(),
                  [&](int32_t a, int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); });
        std::vector<int32_t> top(order.begin(), order.begin() + n);
        std::sort(top.begin(), top.end());
        std::vector<float> z;
        for (int32_t id : top) z.push_back(l[id]);
        const double zmax = l[order[0]];
        double mass = 0;
        for (float v : l) mass += std::exp((static_cast<double>(v) - zmax) / st.temperature);
        const SamplingParams p{
            .temperature = st.temperature, .top_p = st.top_p, .min_p = st.min_p, .seed = seed};
        Sampler whole(p), part(p);
        for (int draw = 0; draw < 50; ++draw) {
          const int32_t want = whole.sample(l.data(), static_cast<int64_t>(l.size()));
          const int64_t j = part.sample_nucleus(z.data(), n, mass);
          if (j < 0) {
            ++short_of_it;
            EXPECT_EQ(part.sample(l.data(), static_cast<int64_t>(l.size())), want);
          } else {
            ++decided;
            EXPECT_EQ(top[static_cast<size_t>(j)], want)
                << "seed " << seed << " T " << st.temperature << " p " << st.top_p << " n " << n;
          }
        }
      }
    }
  }
  EXPECT_GT(decided, 0);
  EXPECT_GT(short_of_it, 0);
  Sampler greedy({});
  const std::vector<float> z = {1, 2};
  EXPECT_HYBRID_ERROR(greedy.sample_nucleus(z.data(), 2, 2.0),
                      "[sampling] sample_nucleus: needs temperature > 0 and top_p < 1");
  Sampler nucleus({.temperature = 1, .top_p = 0.5f});
  EXPECT_HYBRID_ERROR(nucleus.sample_nucleus(z.data(), 2, 0.5),
                      "[sampling] sample_nucleus: row_mass must be finite and >= 1");
}

// ---- repetition penalty -----------------------------------------------------------------------

TEST(SamplingPenalty, DividesPositiveMultipliesNegativeOncePerId) {
  const std::vector<float> l = {2.0f, 1.0f, -1.0f, 0.5f, 0.0f};
  const std::vector<int32_t> history = {0, 2, 0, 0, 4, 2};
  // penalty 2: 2 -> 1 (once, not 2 / 8), -1 -> -2, 0 stays 0; ids 1, 3 untouched.
  const std::vector<float> z = {1.0f, 1.0f, -2.0f, 0.5f, 0.0f};
  expect_candidates({.temperature = 1, .repetition_penalty = 2}, l,
                    softmax_over(z, 1, {0, 1, 2, 3, 4}), history);
  // Greedy sees the penalised logits: ids 0 and 1 tie at 1, the lower id wins.
  Sampler greedy({.repetition_penalty = 2});
  EXPECT_EQ(greedy.sample(l.data(), l.size(), history), 0);
  const std::vector<int32_t> only0 = {0};
  Sampler strong({.repetition_penalty = 4});
  EXPECT_EQ(strong.sample(l.data(), l.size(), only0), 1);  // 2 / 4 = 0.5 < 1
  // A penalty < 1 favours repeats: -1 · 0.5 = -0.5 beats 0.
  const std::vector<float> neg = {-1.0f, -0.75f};
  const std::vector<int32_t> h0 = {0};
  EXPECT_EQ(Sampler({.repetition_penalty = 0.5f}).sample(neg.data(), neg.size(), h0), 0);
  // The penalty applies before temperature: T = 0.5 doubles the penalised logits.
  const std::vector<float> z2 = {2.0f, 2.0f, -4.0f, 1.0f, 0.0f};
  expect_candidates({.temperature = 0.5f, .repetition_penalty = 2}, l,
                    softmax_over(z2, 1, {0, 1, 2, 3, 4}), history);
  // Penalty 1 is off even with a history.
  expect_candidates({.temperature = 1}, l, softmax_over(l, 1, {0, 1, 2, 3, 4}), history);
  // The penalised distribution is what gets drawn.
  expect_frequencies({.temperature = 1, .repetition_penalty = 2, .seed = 19}, l,
                     softmax_over(z, 1, {0, 1, 2, 3, 4}), history);
}

// ---- reproducibility --------------------------------------------------------------------------

TEST(SamplingSeed, SameSeedSameDrawsOtherSeedOtherDraws) {
  const std::vector<float> l = random_logits(500, 9, 2.0);
  auto run = [&](uint64_t seed) {
    Sampler s({.temperature = 1.2f, .top_p = 0.95f, .seed = seed});
    std::vector<int32_t> out;
    for (int i = 0; i < 300; ++i) out.push_back(s.sample(l.data(), l.size(), out));
    return out;
  };
  EXPECT_EQ(run(123), run(123));
  EXPECT_NE(run(123), run(124));
}

TEST(SamplingSeed, DrawsArePinned) {
  // Seed 42 over kProbs at T = 1: u_i = (xoshiro256**(42)_i >> 11) / 2^53 is 0.0839, 0.3790,
  // 0.6800, 0.9247, 0.9918, ... (the closest to a boundary: 0.850008 vs 0.85) and the inverse CDF
  // over ids (0.4, 0.7, 0.85, 0.95, 1) gives these ids (from an independent Python transcription).
  const auto l = log_probs(kProbs);
  Sampler s({.temperature = 1, .seed = 42});
  std::vector<int32_t> got;
  for (int i = 0; i < 16; ++i) got.push_back(s.sample(l.data(), l.size()));
  EXPECT_EQ(got, (std::vector<int32_t>{0, 0, 1, 3, 4, 2, 2, 3, 2, 1, 1, 0, 2, 0, 2, 3}));
}

// draw53() is the draw sample() makes: a twin sampler that takes draw53() and walks the
// candidates' inverse CDF in id order picks what sample() picks, draw after draw (the engine's
// device paths rely on it: sample_rows gets the sampler's draw53()).
TEST(SamplingSeed, Draw53IsTheDrawSampleUses) {
  const std::vector<float> l = random_logits(500, 7, 3.0);
  const SamplingParams p{.temperature = 0.9f, .top_k = 50, .min_p = 0.01f, .seed = 77};
  Sampler a(p), b(p);
  const auto kept = a.candidates(l.data(), l.size());
  for (int i = 0; i < 200; ++i) {
    const double u = static_cast<double>(b.draw53()) * 0x1.0p-53;
    int32_t expected = kept.back().id;
    double cumulative = 0;
    for (const auto& c : kept) {
      cumulative += c.prob;
      if (u < cumulative) {
        expected = c.id;
        break;
      }
    }
    EXPECT_EQ(a.sample(l.data(), l.size()), expected) << "draw " << i;
  }
}

// ---- parameter and input errors -----------------------------------------------------------------

TEST(SamplingErrors, Params) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_HYBRID_ERROR(Sampler({.temperature = -0.1f}), "[sampling] temperature: expected >= 0");
  EXPECT_HYBRID_ERROR(Sampler({.temperature = nan}), "temperature");
  EXPECT_HYBRID_ERROR(Sampler({.temperature = std::numeric_limits<float>::infinity()}),
                      "temperature");
  EXPECT_HYBRID_ERROR(Sampler({.top_k = -1}), "[sampling] top_k: expected >= 0 (0 = off), got -1");
  EXPECT_HYBRID_ERROR(Sampler({.top_p = 0}), "[sampling] top_p: expected in (0, 1]");
  EXPECT_HYBRID_ERROR(Sampler({.top_p = 1.5f}), "top_p: expected in (0, 1] (1 = off), got 1.5");
  EXPECT_HYBRID_ERROR(Sampler({.top_p = nan}), "top_p");
  EXPECT_HYBRID_ERROR(Sampler({.min_p = 1}), "[sampling] min_p: expected in [0, 1)");
  EXPECT_HYBRID_ERROR(Sampler({.min_p = -0.5f}), "min_p: expected in [0, 1) (0 = off), got -0.5");
  EXPECT_HYBRID_ERROR(Sampler({.repetition_penalty = 0}),
                      "[sampling] repetition_penalty: expected > 0 (1 = off), got 0");
  EXPECT_HYBRID_ERROR(Sampler({.repetition_penalty = -1}), "repetition_penalty");
  EXPECT_HYBRID_ERROR(Sampler({.repetition_penalty = nan}), "repetition_penalty");
  // Boundaries that are valid.
  EXPECT_NO_THROW(Sampler({.temperature = 0, .top_k = 0, .top_p = 1, .min_p = 0}));
  EXPECT_NO_THROW(Sampler({.top_p = 1e-6f, .min_p = 0.999f, .repetition_penalty = 1e-3f}));
}

TEST(SamplingErrors, Inputs) {
  Sampler s({.temperature = 1});
  const std::vector<float> l = {0, 1, 2};
  EXPECT_HYBRID_ERROR(s.sample(nullptr, 3), "[sampling] logits: null pointer");
  EXPECT_HYBRID_ERROR(s.sample(l.data(), 0), "[sampling] vocab: expected in [1, 2^31), got 0");
  const std::vector<int32_t> bad = {1, 3};
  EXPECT_HYBRID_ERROR(s.sample(l.data(), 3, bad),
                      "[sampling] history: id 3 at position 1 outside [0, vocab=3)");
  const std::vector<int32_t> neg = {-1};
  EXPECT_HYBRID_ERROR(s.sample(l.data(), 3, neg), "history: id -1 at position 0");
  const std::vector<float> with_nan = {0, std::numeric_limits<float>::quiet_NaN(), 1};
  EXPECT_HYBRID_ERROR(s.sample(with_nan.data(), 3), "[sampling] logits: NaN at id 1");
  const std::vector<float> with_inf = {0, 1, std::numeric_limits<float>::infinity()};
  EXPECT_HYBRID_ERROR(s.sample(with_inf.data(), 3), "[sampling] logits: +inf at id 2");
  const std::vector<float> masked = {kNegInf, kNegInf};
  EXPECT_HYBRID_ERROR(s.sample(masked.data(), 2), "every one of the 2 logits is -inf");
  EXPECT_HYBRID_ERROR(Sampler({}).sample(masked.data(), 2), "is -inf");
}

// ---- stop conditions --------------------------------------------------------------------------

// Pushes pieces (ids 1, 2, ... unless given) and returns the emits, and the finish() text last.
struct StreamRun {
  std::vector<std::string> emits;
  std::string finish;
  StopReason reason = StopReason::none;
  size_t stopped_at = 0;  // index of the push that stopped (pieces.size() if none)
  std::string text() const {
    std::string t;
    for (const auto& e : emits) t += e;
    return t + finish;
  }
};
StreamRun feed(StopChecker& sc, const std::vector<std::string>& pieces,
               std::vector<int32_t> ids = {}) {
  StreamRun r;
  r.stopped_at = pieces.size();
  for (size_t i = 0; i < pieces.size(); ++i) {
    const int32_t id = i < ids.size() ? ids[i] : static_cast<int32_t>(i + 1);
    auto res = sc.push(id, pieces[i]);
    r.emits.push_back(res.emit);
    if (res.stop) {
      r.reason = res.reason;
      r.stopped_at = i;
      break;
    }
  }
  r.finish = sc.finish();
  return r;
}

TEST(StopChecker, NoConditionsEmitsEverythingAtOnce) {
  StopChecker sc({});
  const StreamRun r = feed(sc, {"Hello", ",", " world", "!"});
  EXPECT_EQ(r.emits, (std::vector<std::string>{"Hello", ",", " world", "!"}));
  EXPECT_EQ(r.finish, "");
  EXPECT_EQ(r.reason, StopReason::none);
  EXPECT_EQ(sc.tokens(), 4);
}

TEST(StopChecker, EosStopsAndItsPieceIsDropped) {
  StopChecker sc({.eos_ids = {151643, 151645}});
  const StreamRun r = feed(sc, {"Hi", " there", "<|im_end|>", "never"}, {10, 11, 151645, 12});
  EXPECT_EQ(r.stopped_at, 2u);
  EXPECT_EQ(r.reason, StopReason::eos);
  EXPECT_EQ(r.text(), "Hi there");
  EXPECT_EQ(sc.reason(), StopReason::eos);
  EXPECT_STREQ(hybrid::finish_reason(sc.reason()), "stop");
  EXPECT_HYBRID_ERROR(sc.push(1, "x"), "[stop] push: the stream was finished");
}

TEST(StopChecker, StopStringAcrossTokens) {
  StopChecker sc({.stop_strings = {"###"}});
  const StreamRun r = feed(sc, {"a#", "#", "#b", "c"});
  EXPECT_EQ(r.emits, (std::vector<std::string>{"a", "", ""}));  // "#", "##" held back
  EXPECT_EQ(r.stopped_at, 2u);
  EXPECT_EQ(r.reason, StopReason::stop_string);
  EXPECT_EQ(r.text(), "a");
  EXPECT_EQ(sc.matched_stop_string(), "###");
  EXPECT_STREQ(hybrid::finish_reason(sc.reason()), "stop");
}

TEST(StopChecker, HeldPrefixIsReleasedWhenItDiverges) {
  StopChecker sc({.stop_strings = {"</s>"}});
  const StreamRun r = feed(sc, {"x<", "/", "t>", " y"});
  EXPECT_EQ(r.emits, (std::vector<std::string>{"x", "", "</t>", " y"}));
  EXPECT_EQ(r.reason, StopReason::none);
  EXPECT_EQ(r.text(), "x</t> y");
}

TEST(StopChecker, HeldPrefixComesOutOfFinish) {
  StopChecker sc({.stop_strings = {"\n\nUser:"}});
  const StreamRun r = feed(sc, {"Answer", ".\n", "\nUs"});
  EXPECT_EQ(r.emits, (std::vector<std::string>{"Answer", ".", ""}));
  EXPECT_EQ(r.finish, "\n\nUs");
  EXPECT_EQ(r.text(), "Answer.\n\nUs");
  EXPECT_EQ(sc.reason(), StopReason::none);
}

TEST(StopChecker, OverlappingPrefixes) {
  // "aaab": the match starts at the second a; the first is released once "aaa" shows it cannot
  // begin "aab".
  StopChecker sc({.stop_strings = {"aab"}});
  const StreamRun r = feed(sc, {"a", "a", "a", "b"});
  EXPECT_EQ(r.emits, (std::vector<std::string>{"", "", "a", ""}));
  EXPECT_EQ(r.text(), "a");
  EXPECT_EQ(r.reason, StopReason::stop_string);
}

TEST(StopChecker, EarliestMatchWinsInsideOnePiece) {
  StopChecker sc({.stop_strings = {"cd", "bc", "zz"}});
  const StreamRun r = feed(sc, {"x", "abcdef"});
  EXPECT_EQ(r.text(), "xa");
  EXPECT_EQ(sc.matched_stop_string(), "bc");
  StopChecker sc2({.stop_strings = {"STOP"}});
  EXPECT_EQ(feed(sc2, {"hello STOP world"}).text(), "hello ");
}

TEST(StopChecker, MultiByteStopStrings) {
  StopChecker sc({.stop_strings = {"世界"}});
  const StreamRun r = feed(sc, {"你好", "世", "人", "世", "界", "!"});
  EXPECT_EQ(r.emits, (std::vector<std::string>{"你好", "", "世人", "", ""}));
  EXPECT_EQ(r.text(), "你好世人");
  // A character sharing only a lead byte with the stop string is not held: é = C3 A9, è = C3 A8.
  StopChecker sc2({.stop_strings = {"é"}});
  EXPECT_EQ(sc2.push(1, "è").emit, "è");
}

TEST(StopChecker, MaxTokens) {
  StopChecker sc({.max_tokens = 3});
  const StreamRun r = feed(sc, {"a", "b", "c", "d"});
  EXPECT_EQ(r.stopped_at, 2u);
  EXPECT_EQ(r.reason, StopReason::max_tokens);
  EXPECT_EQ(r.text(), "abc");  // the last token's piece counts
  EXPECT_STREQ(hybrid::finish_reason(StopReason::max_tokens), "length");
  EXPECT_STREQ(hybrid::finish_reason(StopReason::none), "");
  EXPECT_STREQ(hybrid::to_string(StopReason::max_tokens), "max_tokens");
}

TEST(StopChecker, MaxTokensKeepsTheHoldBackForFinish) {
  StopChecker sc({.stop_strings = {"\n\n"}, .max_tokens = 2});
  const StreamRun r = feed(sc, {"a", "b\n"});
  EXPECT_EQ(r.emits, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(r.reason, StopReason::max_tokens);
  EXPECT_EQ(r.finish, "\n");
  // finish()'s tail can still complete the stop string: the text is cut, the reason stays.
  StopChecker sc3({.stop_strings = {"\n\n"}, .max_tokens = 2});
  sc3.push(1, "a");
  EXPECT_EQ(sc3.push(2, "b\n").emit, "b");
  EXPECT_EQ(sc3.finish("\nc"), "");
  EXPECT_EQ(sc3.reason(), StopReason::max_tokens);
  EXPECT_EQ(sc3.matched_stop_string(), "\n\n");
}

TEST(StopChecker, Precedence) {
  // EOS and a stop string on the max_tokens-th token both win over max tokens.
  StopChecker eos({.eos_ids = {0}, .max_tokens = 2});
  EXPECT_EQ(feed(eos, {"a", "<eos>"}, {5, 0}).reason, StopReason::eos);
  StopChecker str({.stop_strings = {"b"}, .max_tokens = 2});
  const StreamRun r = feed(str, {"a", "xby"});
  EXPECT_EQ(r.reason, StopReason::stop_string);
  EXPECT_EQ(r.text(), "ax");
  // A stop string completes on a token: push after it is an error.
  EXPECT_HYBRID_ERROR(str.push(1, "z"), "[stop] push: the stream was finished");
  StopChecker live({.stop_strings = {"b"}});
  EXPECT_TRUE(live.push(1, "b").stop);
  EXPECT_HYBRID_ERROR(live.push(2, "c"), "[stop] push: the stream already stopped (stop_string)");
  EXPECT_EQ(live.finish("more"), "");
}

TEST(StopChecker, Errors) {
  EXPECT_HYBRID_ERROR(StopChecker({.stop_strings = {"ok", ""}}), "[stop] stop_strings[1]: empty");
  EXPECT_HYBRID_ERROR(StopChecker({.max_tokens = -1}),
                      "[stop] max_tokens: expected >= 0 (0 = no limit), got -1");
}

// With a real byte-level tokenizer: multi-byte characters arrive byte token by byte token through
// IncrementalDecoder; the emitted text is always a prefix of the text before the stop string.
TEST(StopChecker, WithIncrementalDecoder) {
  const fs::path dir = std::getenv("HYBRID_TEST_DATA")
                           ? fs::path(std::getenv("HYBRID_TEST_DATA")) / "tokenizer"
                           : hybrid::test_files::data_dir() / "tokenizer";
  const hybrid::Tokenizer tok = hybrid::Tokenizer::from_file((dir / "qwen2.json").string());
  const std::string text = "Hi 世界! ends here.\n\nUser: more<|im_end|>tail";
  const std::vector<int32_t> ids = tok.encode(text);
  const int32_t im_end = tok.token_to_id("<|im_end|>").value();
  for (const auto& [stops, expected] :
       std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"\n\nUser:"}, "Hi 世界! ends here."},
           {{"界!"}, "Hi 世"},
           {{"nope"}, "Hi 世界! ends here.\n\nUser: more"}}) {
    StopChecker sc({.eos_ids = {im_end}, .stop_strings = stops});
    hybrid::IncrementalDecoder dec(tok);
    std::string shown;
    for (int32_t id : ids) {
      const auto r = sc.push(id, dec.push(id));
      shown += r.emit;
      EXPECT_EQ(expected.compare(0, shown.size(), shown), 0) << "shown " << shown;
      if (r.stop) break;
    }
    shown += sc.finish(dec.flush());
    EXPECT_EQ(shown, expected);
  }
}

}  // namespace
