// The engine's batch of prompts, its per-forward workspace, its CUDA-graph decode step and the
// "weights larger than the device's memory" error, on the golden tiny models of tests/data/models
// (transformers' checkpoints of every architecture: Qwen3-Next, Qwen3.5 dense and MoE, Mamba2,
// Nemotron-H with every block kind):
//   Batch         generate_batch's greedy tokens == each prompt run alone with generate(); a
//                 batched decode step's logits == each slot's own step
//   Workspace     sized before a forward from the model's dims, never grown during decode
//   MemoryBudget  HYBRID_DEVICE_MEMORY_BUDGET below the weights' bytes: an error before upload
//                 giving the bytes needed and available
//   CudaGraph     graph-replayed decode == eager decode (needs a GPU; skipped without one)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "engine/runner.h"
#include "expect_error.h"
#include "hybrid/core/device.h"
#include "hybrid/core/error.h"
#include "hybrid/engine/model.h"
#include "hybrid/engine/sampling.h"
#include "nucleus_draw.h"
#include "test_files.h"

using namespace hybrid;
namespace fs = std::filesystem;

namespace {

fs::path models_dir() {
  if (const char* env = std::getenv("HYBRID_TEST_DATA")) return fs::path(env) / "models";
  return hybrid::test_files::data_dir() / "models";
}

std::vector<int32_t> golden_prompt(const std::string& name) {
  std::ifstream f(models_dir() / name / "golden.json");
  std::stringstream s;
  s << f.rdbuf();
  return nlohmann::json::parse(s.str()).at("prompt_ids").get<std::vector<int32_t>>();
}

std::vector<int32_t> golden_greedy(const std::string& name) {
  std::ifstream f(models_dir() / name / "golden.json");
  std::stringstream s;
  s << f.rdbuf();
  return nlohmann::json::parse(s.str()).at("greedy_ids").get<std::vector<int32_t>>();
}

std::vector<int32_t> slice(const std::vector<int32_t>& v, size_t from, size_t to) {
  return std::vector<int32_t>(v.begin() + static_cast<std::ptrdiff_t>(from),
                              v.begin() + static_cast<std::ptrdiff_t>(to));
}

double nmse(const float* x, const float* ref, int64_t n) {
  double e = 0, r = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(x[i]) - ref[i];
    e += d * d;
    r += static_cast<double>(ref[i]) * ref[i];
  }
  return r > 0 ? e / r : e;
}

class Batch : public ::testing::TestWithParam<std::string> {};

// Prompts of different lengths (the golden prompt of 80 tokens, so that its 16 greedy tokens are
// known too; 37 and 65 tokens; a 1-token prompt; one more than a prefill piece of 64), greedy:
// each sequence's tokens in the batch equal the prompt run alone. Sequence 2 is stopped by
// on_token after 3 tokens and sequence 3 asks for nothing more than its capacity allows, so that
// the batch shrinks while it decodes.
TEST_P(Batch, GreedyBatchEqualsEachPromptAlone) {
  const std::string name = GetParam();
  auto model = Model::load((models_dir() / name).string(), Device::cpu());
  const std::vector<int32_t> p = golden_prompt(name);
  ASSERT_EQ(p.size(), 80u);
  const std::vector<std::vector<int32_t>> prompts = {p, slice(p, 0, 37), slice(p, 10, 75),
                                                     slice(p, 50, 51)};
  GenerateOptions o;
  o.max_new_tokens = 16;
  o.prefill_chunk = 64;
  std::vector<std::vector<int32_t>> alone;
  for (const std::vector<int32_t>& prompt : prompts)
    alone.push_back(model->generate(prompt, o).ids);
  EXPECT_EQ(alone[0], golden_greedy(name)) << "the golden prompt alone";

  std::vector<std::vector<int32_t>> seen(prompts.size());
  const std::vector<GenerateResult> batch =
      model->generate_batch(prompts, o, [&](size_t index, int32_t id) {
        seen[index].push_back(id);
        return !(index == 2 && seen[index].size() == 3);
      });
  ASSERT_EQ(batch.size(), prompts.size());
  for (size_t b = 0; b < prompts.size(); ++b) {
    SCOPED_TRACE("prompt " + std::to_string(b));
    EXPECT_EQ(batch[b].prompt_tokens, static_cast<int64_t>(prompts[b].size()));
    EXPECT_EQ(batch[b].ids, seen[b]) << "on_token saw every id in order";
    if (b == 2) {
      EXPECT_EQ(batch[b].ids, slice(alone[b], 0, 3));
      EXPECT_EQ(batch[b].decode_steps, 2);
    } else {
      EXPECT_EQ(batch[b].ids, alone[b]);
      EXPECT_EQ(batch[b].decode_steps, 15);
    }
  }

  // A capacity that cuts every sequence short: each stops where it would alone.
  GenerateOptions tight = o;
  tight.capacity = 84;
  const std::vector<GenerateResult> cut = model->generate_batch({p, slice(p, 0, 70)}, tight);
  EXPECT_EQ(cut[0].ids, slice(alone[0], 0, 5));
  EXPECT_TRUE(cut[0].context_full);
  EXPECT_EQ(cut[1].ids, model->generate(slice(p, 0, 70), tight).ids);
  EXPECT_EQ(cut[1].ids.size(), 15u);
  EXPECT_TRUE(cut[1].context_full);
}

// One batched decode step (three slots, given out of order) against each slot's own step on a
// one-slot cache: the same logits.
TEST_P(Batch, BatchedDecodeStepEqualsEachSlotAlone) {
  const std::string name = GetParam();
  auto model = Model::load((models_dir() / name).string(), Device::cpu());
  engine::Runner& r = model->runner();
  const int64_t V = model->vocab_size();
  const std::vector<int32_t> p = golden_prompt(name);
  const std::vector<std::vector<int32_t>> prompts = {slice(p, 0, 70), slice(p, 3, 20),
                                                     slice(p, 40, 41)};
  const std::vector<int32_t> next = {p[70], p[20], p[41]};
  engine::Sequences batch = r.new_sequences(3, 80);
  for (size_t b = 0; b < prompts.size(); ++b)
    r.forward(batch, static_cast<int64_t>(b), prompts[b], false);
  const std::vector<int64_t> order = {2, 0, 1};
  std::vector<int32_t> ids;
  for (int64_t b : order) ids.push_back(next[static_cast<size_t>(b)]);
  for (int step = 0; step < 3; ++step) {
    const std::vector<float> got = r.decode(batch, order, ids);
    ASSERT_EQ(static_cast<int64_t>(got.size()), 3 * V);
    for (size_t n = 0; n < order.size(); ++n) {
      const size_t b = static_cast<size_t>(order[n]);
      std::vector<int32_t> all = prompts[b];
      all.push_back(next[b]);
      for (int s = 0; s < step; ++s) all.push_back(ids[n]);
      const std::vector<float> ref = model->logits(all);
      EXPECT_LE(nmse(got.data() + n * V, ref.data() + (all.size() - 1) * V, V), 1e-6)
          << "slot " << b << " step " << step;
    }
    EXPECT_EQ(batch.length[0], 71 + step);
  }
  EXPECT_HYBRID_ERROR(r.decode(batch, {0, 0}, {1, 2}), "slot 0 appears twice");
  engine::Sequences fresh = r.new_sequences(2, 8);
  EXPECT_HYBRID_ERROR(r.decode(fresh, {1}, {1}), "slot 1 has no tokens yet");
  EXPECT_HYBRID_ERROR(model->generate_batch({p, {}}, GenerateOptions{}), "prompt 1 is empty");
  EXPECT_HYBRID_ERROR(model->generate_batch({p, {1, 100000}}, GenerateOptions{}),
                      "prompt 1: token id 100000 at position 1");
}

INSTANTIATE_TEST_SUITE_P(Goldens, Batch,
                         ::testing::Values("mamba2_g2", "nemotron_h_all", "qwen3_5_dense",
                                           "qwen3_5_moe", "qwen3_next_gva2_k64",
                                           "qwen3_next_gva3_k128_v64"));

// The workspace is sized before each forward from the model's dimensions and the step's token
// count; decode steps after a longer prefill reuse it without reallocating, and nothing a forward
// takes exceeds the estimate.
TEST(Workspace, SizedBeforeTheForwardAndNeverGrownDuringDecode) {
  for (const char* name : {"qwen3_next_gva3_k128_v64", "nemotron_h_all", "qwen3_5_moe"}) {
    SCOPED_TRACE(name);
    auto model = Model::load((models_dir() / name).string(), Device::cpu());
    engine::Runner& r = model->runner();
    const std::vector<int32_t> p = golden_prompt(name);
    engine::Sequence seq = r.new_sequence(96);
    r.forward(seq, p, true);  // all 80 rows of logits: the largest forward here
    const engine::Workspace& ws = r.workspace();
    const uint64_t generation = ws.generation();
    EXPECT_EQ(ws.capacity(), r.workspace_bytes(80, 1, seq.pages, 80));
    EXPECT_LE(ws.high_water(), ws.capacity());
    for (int i = 0; i < 8; ++i) r.decode(seq, {0}, {p[static_cast<size_t>(i)]});
    EXPECT_EQ(ws.generation(), generation) << "a decode step reallocated the workspace";
    EXPECT_LE(ws.high_water(), ws.capacity());
  }
}

// Weights larger than the device's memory: hybrid::Error before any upload, with the bytes needed
// and the bytes available (the budget HYBRID_DEVICE_MEMORY_BUDGET sets in place of the device's).
TEST(MemoryBudget, WeightsLargerThanTheDeviceMemoryAreAnError) {
  const std::string dir = (models_dir() / "qwen3_5_moe").string();
  {
    const hybrid::test_files::ScopedEnv budget("HYBRID_DEVICE_MEMORY_BUDGET", "1000");
    try {
      Model::load(dir, Device::cpu());
      ADD_FAILURE() << "the load did not fail";
    } catch (const Error& e) {
      const std::string msg = e.what();
      std::smatch m;
      ASSERT_TRUE(std::regex_search(
          msg, m,
          std::regex("the weights need ([0-9]+) bytes \\(.*\\) but cpu has 1000 bytes \\(.*\\) "
                     "available \\(HYBRID_DEVICE_MEMORY_BUDGET\\)")))
          << msg;
      EXPECT_GT(std::stoll(m[1].str()), 1000);
    }
  }
  {
    const hybrid::test_files::ScopedEnv budget("HYBRID_DEVICE_MEMORY_BUDGET", "12abc");
    EXPECT_HYBRID_ERROR(Model::load(dir, Device::cpu()),
                        "HYBRID_DEVICE_MEMORY_BUDGET='12abc': expected a number of bytes");
  }
  {
    const hybrid::test_files::ScopedEnv budget("HYBRID_DEVICE_MEMORY_BUDGET", "100000000000");
    EXPECT_NO_THROW(Model::load(dir, Device::cpu()));
  }
}

// On CUDA: the same batched decode steps with graphs off (eager) and on (first step of each
// batch size eager, then captured and replayed; the batch shrinks from 3 to 2 sequences midway,
// so a second graph is captured) give the same logits and the same greedy tokens. Models with
// every mixer: GDN + gated attention + MoE, Mamba-2, Nemotron-H's attention / Mamba / MoE.
TEST(CudaGraph, ReplayedDecodeEqualsEagerDecode) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  for (const char* name : {"qwen3_5_moe", "qwen3_next_gva2_k64", "mamba2_g2", "nemotron_h_all"}) {
    SCOPED_TRACE(name);
    auto model = Model::load((models_dir() / name).string(), Device::cuda(0));
    engine::Runner& r = model->runner();
    const int64_t V = model->vocab_size();
    const std::vector<int32_t> p = golden_prompt(name);
    const std::vector<std::vector<int32_t>> prompts = {p, slice(p, 0, 37), slice(p, 50, 51)};
    auto run = [&](bool graphs) {
      r.set_cuda_graphs(graphs);
      engine::Sequences seqs = r.new_sequences(3, 100);
      std::vector<int32_t> last(3);
      for (size_t b = 0; b < 3; ++b) {
        const std::vector<float> l = r.forward(seqs, static_cast<int64_t>(b), prompts[b], false);
        last[b] = static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
      }
      std::vector<float> logits;
      std::vector<int64_t> slots = {0, 1, 2};
      for (int step = 0; step < 8; ++step) {
        if (step == 4) slots = {0, 2};  // sequence 1 finishes
        std::vector<int32_t> ids;
        for (int64_t s : slots) ids.push_back(last[static_cast<size_t>(s)]);
        const std::vector<float> l = r.decode(seqs, slots, ids);
        logits.insert(logits.end(), l.begin(), l.end());
        for (size_t n = 0; n < slots.size(); ++n) {
          const float* row = l.data() + n * static_cast<size_t>(V);
          last[static_cast<size_t>(slots[n])] =
              static_cast<int32_t>(std::max_element(row, row + V) - row);
        }
      }
      return std::make_pair(logits, last);
    };
    const auto eager = run(false);
    const int64_t replays0 = r.graph_replays(), captures0 = r.graph_captures();
    const auto graphed = run(true);
    EXPECT_EQ(r.graph_captures() - captures0, 2) << "one graph per batch size (3, then 2)";
    EXPECT_EQ(r.graph_replays() - replays0, 6) << "steps 2-4 and 6-8 replayed";
    ASSERT_EQ(graphed.first.size(), eager.first.size());
    EXPECT_LE(
        nmse(graphed.first.data(), eager.first.data(), static_cast<int64_t>(eager.first.size())),
        1e-10);
    EXPECT_EQ(graphed.second, eager.second) << "greedy tokens";
    // generate() on one sequence goes through the graph path too and matches graphs off.
    GenerateOptions o;
    o.max_new_tokens = 12;
    const std::vector<int32_t> on = model->generate(p, o).ids;
    model->set_cuda_graphs(false);
    EXPECT_EQ(model->generate(p, o).ids, on);
  }
}

// On CUDA: a top-p step through the device (Runner::decode_top_p: the top_k op's candidates and
// the softmax_mass op's row mass) draws what Sampler draws on that step's logits row
// (Runner::logits_row): through Sampler::sample_nucleus when the nucleus lies within the
// candidates, else on the row; the candidates are the row's k best and the mass its softmax mass.
// Both outcomes happen (k 1, 4 and 1024; T 200 flattens the tiny model's peaked rows).
TEST(CudaSampling, DecodeTopPDrawsWhatSamplerDraws) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  auto model = Model::load((models_dir() / "qwen3_5_moe").string(), Device::cuda(0));
  engine::Runner& r = model->runner();
  const int64_t V = model->vocab_size();
  const std::vector<int32_t> p = golden_prompt("qwen3_5_moe");
  int decided = 0, whole_rows = 0;
  for (const SamplingParams sp :
       {SamplingParams{.temperature = 1.3f, .top_p = 0.95f, .seed = 5},
        SamplingParams{.temperature = 200.0f, .top_p = 0.9f, .seed = 7}}) {
    for (const int64_t k : {int64_t{1}, int64_t{4}, std::min<int64_t>(1024, V)}) {
      engine::Sequences seqs = r.new_sequences(2, 64);
      std::vector<int32_t> ids;
      for (int64_t b = 0; b < 2; ++b) {
        const std::vector<float> l = r.forward(seqs, b, slice(p, 0, 20 + 5 * b), false);
        ids.push_back(static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin()));
      }
      Sampler host(sp), device(sp);
      for (int step = 0; step < 4; ++step) {
        const engine::Runner::Nucleus nu = r.decode_top_p(seqs, {0, 1}, ids, k, sp.temperature);
        for (size_t n = 0; n < 2; ++n) {
          const std::vector<float> row = r.logits_row(static_cast<int64_t>(n));
          const int32_t expected = host.sample(row.data(), V);
          // The candidates are the row's k best (value desc, id asc); the mass is its Σw.
          std::vector<int32_t> order(static_cast<size_t>(V));
          std::iota(order.begin(), order.end(), 0);
          std::stable_sort(order.begin(), order.end(),
                           [&](int32_t x, int32_t y) { return row[x] > row[y]; });
          double mass = 0;
          for (float v : row) mass += std::exp((double{v} - row[order[0]]) / sp.temperature);
          EXPECT_NEAR(nu.mass[n], mass, 1e-12 * mass);
          for (int64_t j = 0; j < k; ++j)
            EXPECT_EQ(nu.top.ids[n * k + j], order[j]) << "step " << step << " rank " << j;
          int32_t got = test::draw_in_nucleus(device, nu, n, k);
          if (got >= 0) {
            ++decided;
          } else {
            ++whole_rows;
            got = device.sample(row.data(), V);
          }
          EXPECT_EQ(got, expected) << "step " << step << " row " << n << " k " << k;
          ids[n] = expected;
        }
      }
    }
  }
  EXPECT_GT(decided, 0);
  EXPECT_GT(whole_rows, 0);
}

}  // namespace
