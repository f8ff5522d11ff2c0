// The engine's forward pass on tiny random checkpoints of every architecture (written here from
// describe_model's weight table): whole-prompt logits equal chunked prefill, decode after prefill
// equals prefill of the longer sequence, greedy generation follows the logits, and load / input
// errors name what was wrong.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "engine/runner.h"
#include "expect_error.h"
#include "hybrid/engine/model.h"
#include "hybrid/engine/sampling.h"
#include "hybrid/model/config.h"
#include "hybrid/model/model.h"
#include "hybrid/model/safetensors.h"
#include "hybrid/ops/quant.h"
#include "nucleus_draw.h"
#include "test_files.h"

using namespace hybrid;
namespace fs = std::filesystem;
using namespace hybrid::test_files;

namespace {

std::string config_path(const std::string& name) {
  return (hybrid::test_files::data_dir() / "configs" / name).string();
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// Values in each tensor's valid, well-conditioned domain.
std::vector<float> random_values(const TensorSpec& t, bool zero_centered, std::mt19937& rng) {
  int64_t n = 1;
  for (int64_t d : t.shape) n *= d;
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  const std::string& s = t.name;
  const bool norm = ends_with(s, "norm.weight") || ends_with(s, "layernorm.weight") ||
                    ends_with(s, "norm_f.weight");
  const bool plain_norm = ends_with(s, "linear_attn.norm.weight") || !zero_centered;
  const float fan_in = static_cast<float>(t.shape.back());
  for (float& x : v) {
    const float r = u(rng);
    if (ends_with(s, "A_log")) {
      x = 0.75f + 0.75f * r;
    } else if (ends_with(s, "dt_bias")) {
      x = -0.75f + 1.25f * r;
    } else if (ends_with(s, ".D")) {
      x = 1.0f + 0.5f * r;
    } else if (ends_with(s, "conv1d.weight")) {
      x = 0.5f * r;
    } else if (norm) {
      x = (plain_norm ? 1.0f : 0.0f) + 0.1f * r;
    } else if (ends_with(s, "bias")) {
      x = 0.1f * r;
    } else if (s.find("embed") != std::string::npos) {
      x = r;
    } else {
      x = r / std::sqrt(fan_in);
    }
  }
  return v;
}

StTensor float_tensor(const std::string& name, const std::vector<int64_t>& shape,
                      const std::vector<float>& v, bool bf16) {
  if (!bf16) return {name, DType::f32, shape, as_bytes(v)};
  std::vector<uint16_t> h(v.size());
  for (size_t i = 0; i < v.size(); ++i) h[i] = bf16_from_f32(v[i]);
  return {name, DType::bf16, shape, as_bytes(h)};
}

// A checkpoint folder for `config_name`: config.json copied, model.safetensors with every tensor
// of the weight table (f32, or bf16 when asked), minus `skip` (to test a missing tensor).
// round_to_bf16 stores f32 values that bf16 represents exactly.
void write_model(const fs::path& dir, const std::string& config_name, bool bf16 = false,
                 const std::string& skip = "", bool round_to_bf16 = false) {
  fs::copy_file(config_path(config_name), dir / "config.json",
                fs::copy_options::overwrite_existing);
  const Config cfg = load_config(dir.string());
  const ModelSpec spec = describe_model(cfg);
  std::mt19937 rng(1234);
  std::vector<StTensor> tensors;
  for (const TensorSpec& t : spec.tensors) {
    std::vector<float> v = random_values(t, cfg.zero_centered_norm, rng);
    if (round_to_bf16)
      for (float& x : v) x = f32_from_bf16(bf16_from_f32(x));
    if (t.name != skip) tensors.push_back(float_tensor(t.name, t.shape, v, bf16));
  }
  write_safetensors(dir / "model.safetensors", tensors);
}

// An MLX-quantized checkpoint of `config_name` (its "quantization" entry) in `qdir`, and its float
// twin in `fdir`: the same config without "quantization" and the dequantized weights under the
// same names.
void write_mlx_pair(const fs::path& qdir, const fs::path& fdir, const std::string& config_name) {
  fs::copy_file(config_path(config_name), qdir / "config.json");
  std::ifstream in(config_path(config_name));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t at = text.find("\"quantization\"");
  size_t depth = 0, end = text.find('{', at);
  for (; end < text.size(); ++end) {
    if (text[end] == '{') ++depth;
    if (text[end] == '}' && --depth == 0) break;
  }
  end = text.find(',', end) + 1;
  std::ofstream(fdir / "config.json") << text.substr(0, at) + text.substr(end);

  const Config cfg = load_config(qdir.string());
  const ModelSpec spec = describe_model(cfg);
  std::mt19937 rng(99);
  Context ctx;
  std::vector<StTensor> qt, ft;
  for (size_t i = 0; i < spec.tensors.size(); ++i) {
    TensorSpec t = spec.tensors[i];
    if (t.bits == 0) {
      const std::vector<float> v = random_values(t, cfg.zero_centered_norm, rng);
      qt.push_back(float_tensor(t.name, t.shape, v, false));
      ft.push_back(float_tensor(t.name, t.shape, v, false));
      continue;
    }
    const std::vector<int64_t> packed = t.shape;
    t.shape.back() = packed.back() * 32 / t.bits;  // logical [.., out, in]
    std::vector<float> v = random_values(t, cfg.zero_centered_norm, rng);
    const int64_t in_dim = t.shape.back(), rows = static_cast<int64_t>(v.size()) / in_dim;
    std::vector<uint32_t> codes(static_cast<size_t>(rows * packed.back()));
    std::vector<float> scales(static_cast<size_t>(rows * in_dim / t.group_size)),
        biases(scales.size()), deq(v.size());
    const QuantizedWeight q{
        .weight = Tensor(codes.data(), DType::u32, Device::cpu(), {rows, packed.back()}),
        .scales = Tensor(scales.data(), DType::f32, Device::cpu(), {rows, in_dim / t.group_size}),
        .biases = Tensor(biases.data(), DType::f32, Device::cpu(), {rows, in_dim / t.group_size}),
        .bits = static_cast<int>(t.bits),
        .group_size = static_cast<int>(t.group_size)};
    quantize({.w = Tensor(v.data(), DType::f32, Device::cpu(), {rows, in_dim}), .q = q}, ctx);
    dequantize({.q = q, .w = Tensor(deq.data(), DType::f32, Device::cpu(), {rows, in_dim})}, ctx);
    std::vector<int64_t> sshape = spec.tensors[i + 1].shape;
    qt.push_back({t.name, DType::u32, packed, as_bytes(codes)});
    qt.push_back({spec.tensors[i + 1].name, DType::f32, sshape, as_bytes(scales)});
    qt.push_back({spec.tensors[i + 2].name, DType::f32, sshape, as_bytes(biases)});
    ft.push_back(float_tensor(t.name, t.shape, deq, false));
    i += 2;
  }
  write_safetensors(qdir / "model.safetensors", qt);
  write_safetensors(fdir / "model.safetensors", ft);
}

std::vector<int32_t> random_ids(int64_t n, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> u(0, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int32_t& x : ids) x = u(rng);
  return ids;
}

// Σ(a − b)² / Σb² over one row of `vocab` logits.
double nmse(const float* a, const float* b, int64_t n) {
  double num = 0, den = 0;
  for (int64_t i = 0; i < n; ++i) {
    num += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    den += static_cast<double>(b[i]) * b[i];
  }
  return num / den;
}

class EngineTest : public ::testing::TestWithParam<std::string> {};

// Prefill of the whole 80-token prompt against the same prompt run in pieces (64 + 16, and
// 1 + 2 + 30 + 47: a piece shorter than the conv window, a decode-sized piece, chunk tails).
TEST_P(EngineTest, ChunkedPrefillEqualsWholePrompt) {
  TempDir dir;
  write_model(dir.path, GetParam());
  auto model = Model::load(dir.path.string(), Device::cpu());
  const int64_t V = model->vocab_size();
  const std::vector<int32_t> prompt = random_ids(80, V, 7);
  const std::vector<float> full = model->logits(prompt);
  ASSERT_EQ(static_cast<int64_t>(full.size()), 80 * V);
  for (float x : full) ASSERT_TRUE(std::isfinite(x));
  for (const std::vector<int64_t>& pieces :
       {std::vector<int64_t>{64, 16}, std::vector<int64_t>{1, 2, 30, 47}}) {
    engine::Sequence seq = model->runner().new_sequence(80);
    int64_t off = 0;
    for (int64_t len : pieces) {
      const std::vector<float> last = model->runner().forward(
          seq, std::vector<int32_t>(prompt.begin() + off, prompt.begin() + off + len), false);
      off += len;
      EXPECT_LE(nmse(last.data(), full.data() + (off - 1) * V, V), 1e-6)
          << "piece ending at token " << off;
    }
  }
}

// Decode steps after a prefill against prefill of the longer sequence (last position).
TEST_P(EngineTest, DecodeAfterPrefillEqualsLongerPrefill) {
  TempDir dir;
  write_model(dir.path, GetParam());
  auto model = Model::load(dir.path.string(), Device::cpu());
  const int64_t V = model->vocab_size();
  const std::vector<int32_t> ids = random_ids(86, V, 11);
  engine::Sequence seq = model->runner().new_sequence(86);
  model->runner().forward(seq, std::vector<int32_t>(ids.begin(), ids.begin() + 80), false);
  for (int64_t t = 80; t < 86; ++t) {
    const std::vector<float> step =
        model->runner().forward(seq, {ids[static_cast<size_t>(t)]}, false);
    const std::vector<float> ref =
        model->logits(std::vector<int32_t>(ids.begin(), ids.begin() + t + 1));
    EXPECT_LE(nmse(step.data(), ref.data() + t * V, V), 1e-6) << "decode of token " << t;
  }
}

// Greedy generation picks the argmax of the logits of the sequence so far.
TEST_P(EngineTest, GreedyFollowsTheLogits) {
  TempDir dir;
  write_model(dir.path, GetParam());
  auto model = Model::load(dir.path.string(), Device::cpu());
  const int64_t V = model->vocab_size();
  const std::vector<int32_t> prompt = random_ids(70, V, 3);
  const std::vector<int32_t> out = model->generate_greedy(prompt, 4, 64);
  ASSERT_EQ(out.size(), prompt.size() + 4);
  EXPECT_TRUE(std::equal(prompt.begin(), prompt.end(), out.begin()));
  for (size_t t = prompt.size(); t < out.size(); ++t) {
    const std::vector<float> l = model->logits(std::vector<int32_t>(out.begin(), out.begin() + t));
    const float* row = l.data() + (t - 1) * V;
    EXPECT_EQ(out[t], std::max_element(row, row + V) - row) << "token " << t;
  }
}

// The device's greedy choice (decode_argmax) is the argmax of decode()'s logits, row by row, for
// a batch of two sequences over several steps.
// Two copies (a, b) of a batch of two sequences with the same prompts run: one for decode(), one
// for the device-side choice it is compared with.
struct TwinBatches {
  engine::Sequences a, b;
  std::vector<std::vector<int32_t>> prompts;
  TwinBatches(engine::Runner& runner, int64_t V, uint32_t seed)
      : a(runner.new_sequences(2, 24)), b(runner.new_sequences(2, 24)) {
    for (int64_t slot : {0, 1}) {
      prompts.push_back(random_ids(9 + 4 * slot, V, seed + static_cast<uint32_t>(slot)));
      runner.forward(a, slot, prompts.back(), false);
      runner.forward(b, slot, prompts.back(), false);
    }
  }
};

TEST_P(EngineTest, DecodeArgmaxIsTheArgmaxOfTheLogits) {
  TempDir dir;
  write_model(dir.path, GetParam());
  auto model = Model::load(dir.path.string(), Device::cpu());
  const int64_t V = model->vocab_size();
  engine::Runner& runner = model->runner();
  TwinBatches twins(runner, V, 21);
  engine::Sequences &a = twins.a, &b = twins.b;
  std::vector<int32_t> ids = {3, 5};
  for (int step = 0; step < 4; ++step) {
    const std::vector<float> logits = runner.decode(a, {0, 1}, ids);
    const std::vector<int32_t> chosen = runner.decode_argmax(b, {0, 1}, ids);
    ASSERT_EQ(chosen.size(), 2u);
    for (size_t n = 0; n < 2; ++n) {
      const float* row = logits.data() + n * static_cast<size_t>(V);
      EXPECT_EQ(chosen[n], std::max_element(row, row + V) - row) << "step " << step << " row " << n;
    }
    ids = chosen;
  }
}

// The device's top-k candidates (decode_top_k) are the k best of decode()'s logits in Sampler's
// order, and Sampler draws the same id from them (in id order) as from the whole row with that
// top-k: the identity the engine's sampled steps rely on.
TEST_P(EngineTest, DecodeTopKDrawsWhatTheWholeRowDraws) {
  TempDir dir;
  write_model(dir.path, GetParam());
  auto model = Model::load(dir.path.string(), Device::cpu());
  const int64_t V = model->vocab_size(), k = 7;
  engine::Runner& runner = model->runner();
  TwinBatches twins(runner, V, 31);
  engine::Sequences &a = twins.a, &b = twins.b;
  const SamplingParams sp{
      .temperature = 1.5f, .top_k = static_cast<int>(k), .top_p = 0.9f, .seed = 3};
  Sampler whole(sp), part(sp);
  std::vector<int32_t> ids = {3, 5};
  for (int step = 0; step < 4; ++step) {
    const std::vector<float> logits = runner.decode(a, {0, 1}, ids);
    const engine::Runner::Candidates c = runner.decode_top_k(b, {0, 1}, ids, k);
    ASSERT_EQ(c.ids.size(), 2u * k);
    for (size_t n = 0; n < 2; ++n) {
      const float* row = logits.data() + n * static_cast<size_t>(V);
      std::vector<int32_t> order(static_cast<size_t>(V));
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(),
                       [&](int32_t x, int32_t y) { return row[x] > row[y]; });
      std::vector<std::pair<int32_t, float>> cand;
      for (int64_t j = 0; j < k; ++j) {
        EXPECT_EQ(c.ids[n * k + j], order[j]) << "step " << step << " row " << n << " rank " << j;
        EXPECT_EQ(c.values[n * k + j], row[order[j]]);
        cand.emplace_back(c.ids[n * k + j], c.values[n * k + j]);
      }
      std::sort(cand.begin(), cand.end());
      std::vector<float> z;
      for (const auto& [id, v] : cand) z.push_back(v);
      const int32_t from_whole = whole.sample(row, V);
      const int32_t from_part = cand[static_cast<size_t>(part.sample(z.data(), k))].first;
      EXPECT_EQ(from_part, from_whole) << "step " << step << " row " << n;
      ids[n] = from_whole;
    }
  }
}

// A top-p step on the device (decode_top_p: k candidates and the row's mass) draws what Sampler
// draws on decode()'s logits: through Sampler::sample_nucleus when the nucleus lies within the k,
// else through logits_row, which must equal decode()'s row. Both happen (k 1, 3 and V; the tiny
// models' rows are peaked, so T 200 flattens one setting's).
TEST_P(EngineTest, DecodeTopPDrawsWhatSamplerDraws) {
  TempDir dir;
  write_model(dir.path, GetParam());
  auto model = Model::load(dir.path.string(), Device::cpu());
  const int64_t V = model->vocab_size();
  engine::Runner& runner = model->runner();
  int decided = 0, whole_rows = 0;
  for (const SamplingParams sp :
       {SamplingParams{.temperature = 1.3f, .top_p = 0.95f, .seed = 5},
        SamplingParams{.temperature = 200.0f, .top_p = 0.9f, .seed = 7},
        SamplingParams{.temperature = 0.5f, .top_p = 0.3f, .min_p = 0.05f, .seed = 6}}) {
    for (const int64_t k : {int64_t{1}, int64_t{3}, V}) {
      TwinBatches twins(runner, V, 43);
      Sampler host(sp), device(sp);
      std::vector<int32_t> ids = {3, 5};
      for (int step = 0; step < 4; ++step) {
        const std::vector<float> logits = runner.decode(twins.a, {0, 1}, ids);
        const engine::Runner::Nucleus nu =
            runner.decode_top_p(twins.b, {0, 1}, ids, k, sp.temperature);
        for (size_t n = 0; n < 2; ++n) {
          const float* row = logits.data() + n * static_cast<size_t>(V);
          const int32_t expected = host.sample(row, V);
          int32_t got = test::draw_in_nucleus(device, nu, n, k);
          if (got >= 0) {
            ++decided;
          } else {
            ++whole_rows;
            const std::vector<float> full = runner.logits_row(static_cast<int64_t>(n));
            EXPECT_EQ(full, std::vector<float>(row, row + V));
            got = device.sample(full.data(), V);
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

// The device's whole-row draw (decode_sample) is Sampler's draw on decode()'s logits with the
// same generator, at a temperature alone and with min-p.
TEST_P(EngineTest, DecodeSampleDrawsWhatSamplerDraws) {
  TempDir dir;
  write_model(dir.path, GetParam());
  auto model = Model::load(dir.path.string(), Device::cpu());
  const int64_t V = model->vocab_size();
  engine::Runner& runner = model->runner();
  for (const SamplingParams sp : {SamplingParams{.temperature = 1.3f, .seed = 5},
                                  SamplingParams{.temperature = 0.7f, .min_p = 0.1f, .seed = 6}}) {
    TwinBatches twins(runner, V, 41);
    Sampler host(sp), device(sp);
    std::vector<int32_t> ids = {3, 5};
    for (int step = 0; step < 4; ++step) {
      const std::vector<float> logits = runner.decode(twins.a, {0, 1}, ids);
      std::vector<int64_t> draws;
      for (int n = 0; n < 2; ++n) draws.push_back(static_cast<int64_t>(device.draw53()));
      const std::vector<int32_t> chosen =
          runner.decode_sample(twins.b, {0, 1}, ids, draws, sp.temperature, sp.min_p);
      for (size_t n = 0; n < 2; ++n) {
        const int32_t expected = host.sample(logits.data() + n * static_cast<size_t>(V), V);
        EXPECT_EQ(chosen[n], expected) << "step " << step << " row " << n;
        ids[n] = expected;
      }
    }
  }
}

// With a repetition penalty, each device path (argmax, top-k candidates, whole-row draw) after
// the repetition_penalty op chooses what Sampler chooses on decode()'s logits with the history.
TEST_P(EngineTest, DevicePenaltyChoosesWhatSamplerChooses) {
  TempDir dir;
  write_model(dir.path, GetParam());
  auto model = Model::load(dir.path.string(), Device::cpu());
  const int64_t V = model->vocab_size(), k = 6;
  engine::Runner& runner = model->runner();
  for (const SamplingParams sp :
       {SamplingParams{.repetition_penalty = 1.8f},
        SamplingParams{.temperature = 1.1f,
        .top_k = static_cast<int>(k),
        .repetition_penalty = 1.4f,
        .seed = 8},
        SamplingParams{.temperature = 0.9f, .repetition_penalty = 0.7f, .seed = 9}}) {
    TwinBatches twins(runner, V, 51);
    Sampler host(sp), device(sp);
    std::vector<std::vector<int32_t>> history = twins.prompts;
    std::vector<int32_t> ids = {3, 5};
    for (int n = 0; n < 2; ++n) history[n].push_back(ids[n]);
    for (int step = 0; step < 4; ++step) {
      engine::Penalty pen{.value = sp.repetition_penalty, .ids = {}};
      for (int n = 0; n < 2; ++n) {
        std::vector<int32_t> d = history[n];
        std::sort(d.begin(), d.end());
        d.erase(std::unique(d.begin(), d.end()), d.end());
        pen.ids.push_back(d);
      }
      const std::vector<float> logits = runner.decode(twins.a, {0, 1}, ids);
      std::vector<int32_t> chosen;
      if (sp.temperature == 0.0f) {
        chosen = runner.decode_argmax(twins.b, {0, 1}, ids, pen);
      } else if (sp.top_k > 0) {
        const engine::Runner::Candidates c = runner.decode_top_k(twins.b, {0, 1}, ids, k, pen);
        for (int64_t n = 0; n < 2; ++n) {
          std::vector<std::pair<int32_t, float>> cand;
          for (int64_t j = 0; j < k; ++j) cand.emplace_back(c.ids[n * k + j], c.values[n * k + j]);
          std::sort(cand.begin(), cand.end());
          std::vector<float> z;
          for (const auto& [id, v] : cand) z.push_back(v);
          chosen.push_back(cand[static_cast<size_t>(device.sample(z.data(), k))].first);
        }
      } else {
        const std::vector<int64_t> draws = {static_cast<int64_t>(device.draw53()),
                                            static_cast<int64_t>(device.draw53())};
        chosen = runner.decode_sample(twins.b, {0, 1}, ids, draws, sp.temperature, sp.min_p, pen);
      }
      for (size_t n = 0; n < 2; ++n) {
        const int32_t expected =
            host.sample(logits.data() + n * static_cast<size_t>(V), V, history[n]);
        EXPECT_EQ(chosen[n], expected) << "step " << step << " row " << n;
        ids[n] = expected;
        history[n].push_back(expected);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(TinyModels, EngineTest,
                         ::testing::Values("qwen3_next_tiny.json", "qwen3_5_tiny.json",
                                           "qwen3_5_moe_vl_tiny.json", "mamba2_tiny.json",
                                           "nemotron_h_tiny.json"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string n = info.param.substr(0, info.param.size() - 10);
                           return n;
                         });

// bf16 weights (the published dtype) load and run: the logits equal those of the same values
// stored in f32 (the engine computes in f32 either way).
TEST_P(EngineTest, Bf16WeightsEqualTheirF32Values) {
  TempDir a, b;
  write_model(a.path, GetParam(), /*bf16=*/true);
  write_model(b.path, GetParam(), /*bf16=*/false, "", /*round_to_bf16=*/true);
  auto m16 = Model::load(a.path.string(), Device::cpu());
  auto m32 = Model::load(b.path.string(), Device::cpu());
  const std::vector<int32_t> ids = random_ids(20, m16->vocab_size(), 5);
  const std::vector<float> l16 = m16->logits(ids), l32 = m32->logits(ids);
  ASSERT_EQ(l16.size(), l32.size());
  EXPECT_LE(nmse(l16.data(), l32.data(), static_cast<int64_t>(l32.size())), 1e-10);
}

// An MLX 4/8-bit checkpoint (mixed per-module overrides) runs like its dequantized float twin.
TEST(Engine, MlxQuantizedEqualsDequantizedFloats) {
  TempDir q, f;
  write_mlx_pair(q.path, f.path, "qwen3_next_tiny_mlx4.json");
  auto mq = Model::load(q.path.string(), Device::cpu());
  auto mf = Model::load(f.path.string(), Device::cpu());
  const std::vector<int32_t> ids = random_ids(40, mq->vocab_size(), 8);
  const std::vector<float> lq = mq->logits(ids), lf = mf->logits(ids);
  ASSERT_EQ(lq.size(), lf.size());
  EXPECT_LE(nmse(lq.data(), lf.data(), static_cast<int64_t>(lf.size())), 1e-10);
}

// The same checkpoint with its routed experts kept quantized on the device
// (HYBRID_KEEP_QUANTIZED_EXPERTS=1: moe_experts_q instead of dequantized moe_experts): the same
// logits, prefill and decode; the memory check counts the experts as stored.
TEST(Engine, MlxQuantizedExpertsKeptEqualDequantizedFloats) {
  TempDir q, f;
  write_mlx_pair(q.path, f.path, "qwen3_next_tiny_mlx4.json");
  auto mf = Model::load(f.path.string(), Device::cpu());
  const ScopedEnv keep("HYBRID_KEEP_QUANTIZED_EXPERTS", "1");
  auto mq = Model::load(q.path.string(), Device::cpu());
  const std::vector<int32_t> ids = random_ids(40, mq->vocab_size(), 8);
  const std::vector<float> lq = mq->logits(ids), lf = mf->logits(ids);
  ASSERT_EQ(lq.size(), lf.size());
  EXPECT_LE(nmse(lq.data(), lf.data(), static_cast<int64_t>(lf.size())), 1e-10);
  EXPECT_EQ(mq->generate_greedy({3, 1, 4}, 6, 2), mf->generate_greedy({3, 1, 4}, 6, 2));
  // The memory check counts the kept experts as stored: everything kept is the checkpoint's
  // bytes; the experts kept lie strictly between that and all dequantized; a budget of exactly
  // that loads, one byte less does not.
  const Config cfg = load_config(q.path.string());
  const Checkpoint ckpt(q.path.string());
  const ModelSpec spec = describe_model(cfg, detect_layout(cfg, ckpt));
  auto total = [](const std::map<DType, int64_t>& bytes) {
    int64_t n = 0;
    for (const auto& [dtype, b] : bytes) n += b;
    return n;
  };
  const int64_t stored = total(checkpoint_weight_bytes(spec, ckpt));
  const int64_t dequantized = total(loaded_weight_bytes(spec, ckpt));
  const int64_t all_kept =
      total(loaded_weight_bytes(spec, ckpt, [](const std::string&) { return true; }));
  const int64_t experts_kept = total(loaded_weight_bytes(spec, ckpt, [](const std::string& n) {
    return n.find(".switch_mlp.") != std::string::npos;
  }));
  EXPECT_EQ(all_kept, stored);
  EXPECT_LT(stored, experts_kept);
  EXPECT_LT(experts_kept, dequantized);
  const WeightMemory memory = weight_memory(spec, ckpt);  // what the load and `hybrid info` use
  EXPECT_EQ(memory.stored, stored);
  EXPECT_EQ(memory.loaded, dequantized);
  EXPECT_EQ(memory.experts_kept, experts_kept);
  {
    const std::string fits = std::to_string(experts_kept);
    const ScopedEnv budget("HYBRID_DEVICE_MEMORY_BUDGET", fits.c_str());
    EXPECT_NO_THROW(Model::load(q.path.string(), Device::cpu()));
  }
  const std::string short_by_one = std::to_string(experts_kept - 1);
  const ScopedEnv budget("HYBRID_DEVICE_MEMORY_BUDGET", short_by_one.c_str());
  EXPECT_HYBRID_ERROR(Model::load(q.path.string(), Device::cpu()), "the weights need");
}

// Unset (auto), the experts stay quantized only when the dequantized weights would not fit: a
// budget of the kept bytes loads and runs like the float twin; one byte less names the kept form
// in its error; "0" dequantizes them and so refuses the same budget.
TEST(Engine, MlxQuantizedExpertsKeptWhenDequantizedWouldNotFit) {
  TempDir q, f;
  write_mlx_pair(q.path, f.path, "qwen3_next_tiny_mlx4.json");
  auto mf = Model::load(f.path.string(), Device::cpu());
  const Config cfg = load_config(q.path.string());
  const Checkpoint ckpt(q.path.string());
  // weight_memory's experts_kept is checked against its own sum in the test above.
  const int64_t experts_kept =
      weight_memory(describe_model(cfg, detect_layout(cfg, ckpt)), ckpt).experts_kept;
  const std::string fits = std::to_string(experts_kept);
  const std::string short_by_one = std::to_string(experts_kept - 1);
  {
    const ScopedEnv automatic("HYBRID_KEEP_QUANTIZED_EXPERTS", "");
    {
      const ScopedEnv budget("HYBRID_DEVICE_MEMORY_BUDGET", fits.c_str());
      auto mq = Model::load(q.path.string(), Device::cpu());
      const std::vector<int32_t> ids = random_ids(24, mq->vocab_size(), 9);
      const std::vector<float> lq = mq->logits(ids), lf = mf->logits(ids);
      ASSERT_EQ(lq.size(), lf.size());
      EXPECT_LE(nmse(lq.data(), lf.data(), static_cast<int64_t>(lf.size())), 1e-10);
    }
    const ScopedEnv budget("HYBRID_DEVICE_MEMORY_BUDGET", short_by_one.c_str());
    EXPECT_HYBRID_ERROR(Model::load(q.path.string(), Device::cpu()),
                        "dequantized at load except the routed experts");
  }
  const ScopedEnv off("HYBRID_KEEP_QUANTIZED_EXPERTS", "0");
  const ScopedEnv budget("HYBRID_DEVICE_MEMORY_BUDGET", fits.c_str());
  EXPECT_HYBRID_ERROR(Model::load(q.path.string(), Device::cpu()), "the weights need");
}

// The CUDA twin: on the GPU, the kept experts run through moe_experts_q.cuda; the logits and the
// greedy tokens equal those of the dequantized float twin on the GPU (the same routing; only the
// experts' kernel and its summation order differ).
TEST(Engine, MlxQuantizedExpertsKeptEqualDequantizedFloatsOnCuda) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  TempDir q, f;
  // Head dim 64: the CUDA attention kernels serve D 64 / 128 / 256 (the CPU twin's 32 is refused).
  write_mlx_pair(q.path, f.path, "qwen3_next_tiny_mlx4_d64.json");
  auto mf = Model::load(f.path.string(), Device::cuda(0));
  const ScopedEnv keep("HYBRID_KEEP_QUANTIZED_EXPERTS", "1");
  auto mq = Model::load(q.path.string(), Device::cuda(0));
  const std::vector<int32_t> ids = random_ids(40, mq->vocab_size(), 8);
  const std::vector<float> lq = mq->logits(ids), lf = mf->logits(ids);
  ASSERT_EQ(lq.size(), lf.size());
  EXPECT_LE(nmse(lq.data(), lf.data(), static_cast<int64_t>(lf.size())), 1e-8);
  EXPECT_EQ(mq->generate_greedy({3, 1, 4}, 6, 2), mf->generate_greedy({3, 1, 4}, 6, 2));
}

// HYBRID_KV_CACHE_DTYPE names one of f32 / bf16 / f16; anything else stops the load, naming it.
TEST(EngineErrors, KvCacheDtypeSwitchNamesABadValue) {
  TempDir dir;
  write_model(dir.path, "qwen3_next_tiny.json");
  const ScopedEnv kv("HYBRID_KV_CACHE_DTYPE", "int8");
  EXPECT_HYBRID_ERROR(Model::load(dir.path.string(), Device::cpu()),
                      "HYBRID_KV_CACHE_DTYPE='int8': expected f32, bf16 or f16");
}

TEST(EngineErrors, LoadErrorsNameTheProblem) {
  TempDir dir;
  EXPECT_HYBRID_ERROR(Model::load((dir.path / "nope").string(), Device::cpu()),
                      "no such file or directory");
  EXPECT_HYBRID_ERROR(Model::load(dir.path.string(), Device::cpu()), "no config.json");
  fs::copy_file(config_path("mamba2_tiny.json"), dir.path / "config.json");
  EXPECT_HYBRID_ERROR(Model::load(dir.path.string(), Device::cpu()), "no model.safetensors");
  fs::remove(dir.path / "config.json");
  {
    std::ofstream(dir.path / "config.json") << R"({"model_type": "llama", "hidden_size": 8,
        "num_hidden_layers": 1, "vocab_size": 8})";
  }
  EXPECT_HYBRID_ERROR(Model::load(dir.path.string(), Device::cpu()), "llama");
  TempDir missing;
  write_model(missing.path, "mamba2_tiny.json", false, "backbone.layers.1.mixer.A_log");
  EXPECT_HYBRID_ERROR(Model::load(missing.path.string(), Device::cpu()),
                      "backbone.layers.1.mixer.A_log");
}

// An MLX 4-bit checkpoint is checked against the device's memory as the load keeps it
// (dequantized), not as stored: a budget of its file's size is an error that says so, before any
// upload.
TEST(EngineErrors, MlxQuantizedWeightsCountAsDequantized) {
  TempDir q, f;
  write_mlx_pair(q.path, f.path, "qwen3_next_tiny_mlx4.json");
  const std::string file_bytes = std::to_string(fs::file_size(q.path / "model.safetensors"));
  const ScopedEnv budget("HYBRID_DEVICE_MEMORY_BUDGET", file_bytes.c_str());
  EXPECT_HYBRID_ERROR(Model::load(q.path.string(), Device::cpu()),
                      "with the MLX-quantized weights dequantized at load");
}

TEST(EngineErrors, IdsOutOfRangeNameThePosition) {
  TempDir dir;
  write_model(dir.path, "mamba2_tiny.json");
  auto model = Model::load(dir.path.string(), Device::cpu());
  EXPECT_HYBRID_ERROR(model->logits({1, 2, 100}), "token id 100 at position 2 is out of range");
  EXPECT_HYBRID_ERROR(model->logits({-1}), "token id -1 at position 0");
  EXPECT_HYBRID_ERROR(model->generate_greedy({1, 500}, 2), "token id 500 at position 1");
  EXPECT_HYBRID_ERROR(model->logits({}), "no token ids");
  EXPECT_HYBRID_ERROR(model->generate_greedy({}, 2), "prompt is empty");
}

// A device step's own arguments (draws, the penalty's id lists) are checked before the step runs:
// the error names them and the sequences do not advance.
TEST(EngineErrors, DeviceStepArgumentsAreCheckedBeforeTheStep) {
  TempDir dir;
  write_model(dir.path, "mamba2_tiny.json");
  auto model = Model::load(dir.path.string(), Device::cpu());
  engine::Runner& runner = model->runner();
  engine::Sequences seqs = runner.new_sequences(2, 8);
  for (int64_t slot : {0, 1}) runner.forward(seqs, slot, {1, 2}, false);
  EXPECT_HYBRID_ERROR(runner.decode_sample(seqs, {0, 1}, {3, 4}, {7}, 1.0f, 0.0f),
                      "[model] decode_sample: 1 draws for 2 sequences");
  const engine::Penalty one_list{.value = 1.2f, .ids = {{3}}};
  EXPECT_HYBRID_ERROR(runner.decode_argmax(seqs, {0, 1}, {3, 4}, one_list),
                      "[model] repetition penalty: 1 id lists for 2 sequences");
  EXPECT_HYBRID_ERROR(runner.decode_top_k(seqs, {0, 1}, {3, 4}, 2, one_list),
                      "[model] repetition penalty: 1 id lists for 2 sequences");
  EXPECT_EQ(seqs.length, (std::vector<int64_t>{2, 2}));
}

// prefill_chunk 0 means the device's default piece (512 on the CPU); a negative one is an error
// that names it, in generate_greedy, generate and generate_batch alike.
TEST(Engine, PrefillChunkZeroIsTheDevicesDefault) {
  TempDir dir;
  write_model(dir.path, "qwen3_next_tiny.json");
  auto model = Model::load(dir.path.string(), Device::cpu());
  EXPECT_EQ(model->default_prefill_chunk(), 512);
  const std::vector<int32_t> prompt = random_ids(40, model->vocab_size(), 9);
  EXPECT_EQ(model->generate_greedy(prompt, 3, 0), model->generate_greedy(prompt, 3, 512));
  EXPECT_EQ(model->generate_greedy(prompt, 3), model->generate_greedy(prompt, 3, 512));
  hybrid::GenerateOptions o;
  o.max_new_tokens = 2;
  o.prefill_chunk = -1;
  EXPECT_HYBRID_ERROR(model->generate_greedy(prompt, 2, -1), "prefill_chunk must be positive");
  EXPECT_HYBRID_ERROR(model->generate(prompt, o), "prefill_chunk must be positive");
  EXPECT_HYBRID_ERROR(model->generate_batch({prompt}, o), "prefill_chunk must be positive");
  if (hybrid::cuda_device_count() > 0) {
    EXPECT_EQ(Model::load(dir.path.string(), Device::cuda(0))->default_prefill_chunk(), 4096);
  }
}

}  // namespace
