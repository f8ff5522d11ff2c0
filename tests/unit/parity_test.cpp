// Parity with transformers (issue 5): every tests/data/models/<name>/ with a golden.json (made by
// scripts/make_goldens.py: tiny random bf16 checkpoints, transformers' f32 logits and greedy
// tokens) is loaded with hybrid::Model and compared:
//   CPU:  logits of the 80-token prompt, nmse <= 1e-5 over all positions; generate_greedy(prompt,
//         16, prefill_chunk 64) gives exactly the golden's 16 tokens.
//   CUDA: top-1 agreement with the golden logits on >= 99% of the prompt positions; identical
//         greedy tokens. The CPU runs the same check with CUDA's bf16 KV cache. Skipped without a
//         GPU. A position where the engine's pick is within kNearTie row standard deviations of the
//         golden's best logit counts as agreeing: random tiny models have near ties (golden.json's
//         prompt_margins, top1 - top2 in units of the row std, go down to ~1e-4) that bf16
//         activations cannot resolve. The greedy steps need no such rule: make_goldens.py picks
//         prompts whose greedy margins are all >= 0.05 std.
// Until the engine's Model (include/hybrid/engine/model.h) exists the tests skip.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "hybrid/core/device.h"

#if __has_include("hybrid/engine/model.h")
#include "hybrid/engine/model.h"
#include "test_files.h"
#define HYBRID_HAS_ENGINE_MODEL 1
#else
#define HYBRID_HAS_ENGINE_MODEL 0
#endif

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

fs::path models_dir() {
  if (const char* env = std::getenv("HYBRID_TEST_DATA")) return fs::path(env) / "models";
  return hybrid::test_files::data_dir() / "models";
}

// The model folders that have a golden.json, sorted by name.
std::vector<std::string> golden_models() {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(models_dir(), ec))
    if (e.is_directory() && fs::exists(e.path() / "golden.json"))
      names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// A float32 C-order 2-D .npy (format 1.0 / 2.0 / 3.0, as numpy.save writes it).
struct Npy {
  std::vector<int64_t> shape;
  std::vector<float> data;
};

Npy read_npy(const fs::path& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw std::runtime_error("cannot open " + path.string());
  char magic[8];
  f.read(magic, 8);
  if (!f || std::memcmp(magic, "\x93NUMPY", 6) != 0)
    throw std::runtime_error(path.string() + ": not a .npy file");
  const int major = static_cast<unsigned char>(magic[6]);
  uint32_t header_len = 0;
  if (major == 1) {
    unsigned char b[2];
    f.read(reinterpret_cast<char*>(b), 2);
    header_len = b[0] | (b[1] << 8);
  } else {
    unsigned char b[4];
    f.read(reinterpret_cast<char*>(b), 4);
    header_len = b[0] | (b[1] << 8) | (b[2] << 16) | (static_cast<uint32_t>(b[3]) << 24);
  }
  std::string header(header_len, '\0');
  f.read(header.data(), header_len);
  if (!f) throw std::runtime_error(path.string() + ": truncated header");
  if (header.find("'descr': '<f4'") == std::string::npos)
    throw std::runtime_error(path.string() + ": expected float32 little-endian, header " + header);
  if (header.find("'fortran_order': False") == std::string::npos)
    throw std::runtime_error(path.string() + ": expected C order, header " + header);
  const size_t open = header.find("'shape': (");
  const size_t close = header.find(')', open);
  if (open == std::string::npos || close == std::string::npos)
    throw std::runtime_error(path.string() + ": no shape in header " + header);
  Npy npy;
  std::stringstream dims(header.substr(open + 10, close - open - 10));
  std::string dim;
  int64_t count = 1;
  while (std::getline(dims, dim, ',')) {
    if (dim.find_first_not_of(' ') == std::string::npos) continue;
    npy.shape.push_back(std::stoll(dim));
    count *= npy.shape.back();
  }
  npy.data.resize(static_cast<size_t>(count));
  f.read(reinterpret_cast<char*>(npy.data.data()), count * static_cast<int64_t>(sizeof(float)));
  if (!f) throw std::runtime_error(path.string() + ": truncated data");
  return npy;
}

struct Golden {
  std::string name;
  fs::path dir;
  std::vector<int32_t> prompt;
  std::vector<int32_t> greedy;
  int64_t prefill_chunk = 64;
  Npy logits;  // [T, vocab]
};

Golden read_golden(const std::string& name) {
  Golden g;
  g.name = name;
  g.dir = models_dir() / name;
  std::ifstream f(g.dir / "golden.json");
  std::stringstream ss;
  ss << f.rdbuf();
  const json j = json::parse(ss.str());
  g.prompt = j.at("prompt_ids").get<std::vector<int32_t>>();
  g.greedy = j.at("greedy_ids").get<std::vector<int32_t>>();
  g.prefill_chunk = j.value("prefill_chunk", int64_t{64});
  g.logits = read_npy(g.dir / j.at("logits_file").get<std::string>());
  return g;
}

// --- tests that need no engine: the goldens themselves are well formed ---------------------------

TEST(ParityGoldens, EveryGoldenIsWellFormed) {
  const std::vector<std::string> names = golden_models();
  ASSERT_FALSE(names.empty()) << "no golden.json under " << models_dir();
  for (const std::string& name : names) {
    SCOPED_TRACE(name);
    const Golden g = read_golden(name);
    EXPECT_TRUE(fs::exists(g.dir / "config.json"));
    EXPECT_TRUE(fs::exists(g.dir / "model.safetensors"));
    ASSERT_EQ(g.logits.shape.size(), 2u);
    EXPECT_EQ(g.logits.shape[0], static_cast<int64_t>(g.prompt.size()));
    EXPECT_GT(static_cast<int64_t>(g.prompt.size()), g.prefill_chunk)
        << "the prompt must span more than one prefill piece";
    EXPECT_EQ(g.greedy.size(), 16u);
    const int64_t vocab = g.logits.shape[1];
    for (int32_t id : g.prompt) EXPECT_TRUE(id >= 0 && id < vocab) << id;
    for (int32_t id : g.greedy) EXPECT_TRUE(id >= 0 && id < vocab) << id;
    for (float v : g.logits.data) ASSERT_TRUE(std::isfinite(v));
  }
}

TEST(ParityGoldens, NpyReaderRejectsBadFiles) {
  const fs::path tmp = fs::temp_directory_path() / "hybrid_parity_bad.npy";
  {
    std::ofstream f(tmp, std::ios::binary);
    f << "not numpy at all";
  }
  EXPECT_THROW(read_npy(tmp), std::runtime_error);
  {
    std::ofstream f(tmp, std::ios::binary);
    const std::string header = "{'descr': '<f8', 'fortran_order': False, 'shape': (2, 2), }";
    f.write("\x93NUMPY\x01\x00", 8);
    const char len[2] = {static_cast<char>(header.size()), 0};
    f.write(len, 2);
    f << header;
  }
  EXPECT_THROW(read_npy(tmp), std::runtime_error);
  fs::remove(tmp);
}

// --- engine parity
// --------------------------------------------------------------------------------

#if HYBRID_HAS_ENGINE_MODEL

// Index of the largest value of row `t` (ties: the lowest index).
int64_t argmax_row(const float* row, int64_t n) {
  return std::max_element(row, row + n) - row;
}

// Standard deviation of one row, f64.
double row_std(const float* row, int64_t n) {
  double s = 0, s2 = 0;
  for (int64_t i = 0; i < n; ++i) s += row[i], s2 += static_cast<double>(row[i]) * row[i];
  const double mean = s / static_cast<double>(n);
  return std::sqrt(std::max(0.0, s2 / static_cast<double>(n) - mean * mean));
}

// A pick within this many row standard deviations of the golden's best logit is a near tie. CUDA
// rounds K, V and q to bf16 (the KV cache) and the MoE's x and h to 16 bits, which moves these
// random models' logits by a few hundredths of a row std: on the H200 qwen3_5_moe's position 39
// (golden gap 0.033 std) flipped in one run of three (session 11).
constexpr double kNearTie = 0.05;

// Greedy tokens of generate_greedy after the prompt (the API returns prompt + new tokens).
std::vector<int32_t> new_tokens(const std::vector<int32_t>& all, size_t prompt_len) {
  EXPECT_EQ(all.size(), prompt_len + 16) << "generate_greedy returns the prompt then 16 tokens";
  if (all.size() < prompt_len) return {};
  return std::vector<int32_t>(all.begin() + static_cast<std::ptrdiff_t>(prompt_len), all.end());
}

void expect_cpu_parity(const Golden& g) {
  SCOPED_TRACE(g.name);
  std::unique_ptr<hybrid::Model> model = hybrid::Model::load(g.dir.string(), hybrid::Device::cpu());
  const int64_t T = g.logits.shape[0], V = g.logits.shape[1];
  ASSERT_EQ(model->vocab_size(), V);

  const std::vector<float> logits = model->logits(g.prompt);
  ASSERT_EQ(static_cast<int64_t>(logits.size()), T * V);
  // nmse = sum (x - ref)^2 / sum ref^2 over all positions, in f64.
  double err = 0, ref = 0;
  for (int64_t i = 0; i < T * V; ++i) {
    const double d = static_cast<double>(logits[i]) - g.logits.data[i];
    err += d * d;
    ref += static_cast<double>(g.logits.data[i]) * g.logits.data[i];
  }
  const double nmse = err / ref;
  EXPECT_LE(nmse, 1e-5) << "logits nmse against transformers";
  // The worst position, to point at a chunk / piece boundary when it fails.
  if (nmse > 1e-5) {
    int64_t worst = 0;
    double worst_err = -1;
    for (int64_t t = 0; t < T; ++t) {
      double e = 0, r = 0;
      for (int64_t v = 0; v < V; ++v) {
        const double d = static_cast<double>(logits[t * V + v]) - g.logits.data[t * V + v];
        e += d * d;
        r += static_cast<double>(g.logits.data[t * V + v]) * g.logits.data[t * V + v];
      }
      if (e / r > worst_err) worst_err = e / r, worst = t;
    }
    ADD_FAILURE() << "worst position " << worst << " nmse " << worst_err;
  }

  const std::vector<int32_t> all = model->generate_greedy(g.prompt, 16, g.prefill_chunk);
  EXPECT_EQ(new_tokens(all, g.prompt.size()), g.greedy) << "greedy tokens";
}

// CUDA's check (top-1 with near ties, greedy tokens): on `device`, so that the CPU can run it
// with CUDA's bf16 KV cache too.
void expect_top1_parity(const Golden& g, hybrid::Device device) {
  SCOPED_TRACE(g.name);
  std::unique_ptr<hybrid::Model> model = hybrid::Model::load(g.dir.string(), device);
  const int64_t T = g.logits.shape[0], V = g.logits.shape[1];
  ASSERT_EQ(model->vocab_size(), V);

  const std::vector<float> logits = model->logits(g.prompt);
  ASSERT_EQ(static_cast<int64_t>(logits.size()), T * V);
  int64_t agree = 0;
  std::string misses;
  for (int64_t t = 0; t < T; ++t) {
    const int64_t got = argmax_row(logits.data() + t * V, V);
    const float* ref = g.logits.data.data() + t * V;
    const int64_t want = argmax_row(ref, V);
    if (got == want || ref[want] - ref[got] <= kNearTie * row_std(ref, V)) {
      ++agree;
    } else {
      misses += " t=" + std::to_string(t) + ":" + std::to_string(got) +
                "!=" + std::to_string(want) + " (golden gap " +
                std::to_string((ref[want] - ref[got]) / row_std(ref, V)) + " std)";
    }
  }
  EXPECT_GE(static_cast<double>(agree), 0.99 * static_cast<double>(T))
      << "top-1 agreement " << agree << "/" << T << "; misses (position: got != golden):" << misses;

  const std::vector<int32_t> all = model->generate_greedy(g.prompt, 16, g.prefill_chunk);
  EXPECT_EQ(new_tokens(all, g.prompt.size()), g.greedy) << "greedy tokens";
}

TEST(Parity, CpuMatchesTransformers) {
  const std::vector<std::string> names = golden_models();
  ASSERT_FALSE(names.empty()) << "no golden.json under " << models_dir();
  for (const std::string& name : names) expect_cpu_parity(read_golden(name));
}

TEST(Parity, CudaMatchesTransformers) {
  if (hybrid::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const std::vector<std::string> names = golden_models();
  ASSERT_FALSE(names.empty()) << "no golden.json under " << models_dir();
  for (const std::string& name : names)
    expect_top1_parity(read_golden(name), hybrid::Device::cuda(0));
}

// The CPU with CUDA's default KV cache (bf16 K / V, q rounded to bf16 by RoPE): the engine's
// logic of the 16-bit cache path, held to CUDA's agreement rule.
TEST(Parity, CpuWithBf16KvCacheMatchesTransformers) {
  const std::vector<std::string> names = golden_models();
  ASSERT_FALSE(names.empty()) << "no golden.json under " << models_dir();
  const hybrid::test_files::ScopedEnv kv("HYBRID_KV_CACHE_DTYPE", "bf16");
  for (const std::string& name : names)
    expect_top1_parity(read_golden(name), hybrid::Device::cpu());
}

#else

TEST(Parity, CpuMatchesTransformers) {
  GTEST_SKIP() << "hybrid/engine/model.h is not in this build yet";
}

TEST(Parity, CudaMatchesTransformers) {
  GTEST_SKIP() << "hybrid/engine/model.h is not in this build yet";
}

TEST(Parity, CpuWithBf16KvCacheMatchesTransformers) {
  GTEST_SKIP() << "hybrid/engine/model.h is not in this build yet";
}

#endif

}  // namespace
